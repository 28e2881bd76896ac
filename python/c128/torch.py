"""PyTorch operators: ``import c128.torch`` registers ``torch.ops.c128.*``.

Nothing is built against PyTorch: the operators are defined with ``torch.library`` (schemas that
mark every argument the call writes, ``Tensor(a!)``) and implemented by the ctypes binding, one
implementation for the CPU and the CUDA dispatch keys: CPU tensors run the host runner, CUDA
tensors launch the kernels on PyTorch's current stream (so they are ordered with the model and
captured by ``torch.cuda.graph``). Each operator has a fake (meta) implementation, so
``torch.compile(fullgraph=True)`` traces a step that calls them with no graph break, and
``torch.library.opcheck`` passes on each.

Operators (the keyword-only arguments are those of the Python functions, flattened):

- ``c128::decode``, ``c128::prefill``: :func:`c128.decode`, :func:`c128.prefill` in today's
  layout with pooled rows (``rank``, ``size``, ``pages_per_rank``, the group size and ``pdl`` as
  keyword arguments);
- ``c128::decode_extended``, ``c128::prefill_extended``: the same with the state layout's fields
  (``block_rows``, ``block_table``, ``row_shift``, ``score_plane``, ``score_block_table``,
  ``score_biased``), ``output_index`` and the cache entry's (``entry_kind``, ``norm_weight``,
  ``rope_table``, ``cache``, ``entries_per_page``, ``eps``, ``page_bytes``, ``workspace``) as keyword
  arguments; ``output`` is None with cache entries. ``workspace`` (written: each launch leaves it
  all zero) is optional: without it the implementation takes the binding's workspace of PyTorch's
  current stream (c128.Entry), made outside any trace, so compiled graphs and their fake
  implementations allocate nothing for it. ``prefill_extended`` also takes ``write_slots`` and
  ``write_positions`` (``write_plans`` None). (Two operators each: the dispatcher's time grows with a
  schema's arguments.)
- ``c128::plan_decode_device``, ``c128::plan_prefill_device``: the device planners, the ring's
  fields as keyword arguments (``state_pages``, ``ring_tokens``, ``speculative``,
  ``page_table``, ``write_all``, the state layout's, ``null_block``, ``rope_positions``).
- ``c128::sglang_compress_forward``, ``c128::sglang_compress_forward_norm_rope_store``,
  ``c128::sglang_plan_decode``, ``c128::sglang_plan_decode_legacy``: :mod:`c128.sglang`.
- ``c128::vllm_save_partial_states``, ``c128::vllm_compress_c128``: :mod:`c128.vllm`.
- ``c128::compressor_paged_kv_compress``, ``c128::compressor_prefill_reduction``,
  ``c128::compressor_postprocess_scatter``: TensorRT-LLM's ``trtllm::`` schemas (:mod:`c128.trtllm`).

The Python functions route to these operators by themselves while ``torch.compile`` traces
(``torch.compiler.is_compiling()``), so ``c128.decode(...)`` or ``compress_forward(...)`` inside a
compiled function needs nothing else; eager calls keep the direct path.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

import c128
from c128 import Entry, StateLayout

__all__ = ["LIBRARY", "OPS"]

LIBRARY = torch.library.Library("c128", "DEF")  # noqa: TOR901 (kept alive for the process)
OPS: list = []  # the operator names this module defines

_LAYOUT = ("int block_rows=0, Tensor? block_table=None, int row_shift=0, Tensor(c!)? score_plane=None, "
           "Tensor? score_block_table=None, bool score_biased=False")
_ENTRY = ('Tensor? output_index=None, str entry_kind="pooled", Tensor? norm_weight=None, Tensor? rope_table=None, '
          "Tensor(d!)? cache=None, int entries_per_page=0, float eps=1e-06, int page_bytes=0, Tensor(e!)? workspace=None")
_RING = ("int state_pages, int ring_tokens=0, bool speculative=False, Tensor? page_table=None, bool write_all=False, "
         "int block_rows=0, Tensor? block_table=None, int row_shift=0, Tensor? score_plane=None, "
         "Tensor? score_block_table=None, bool score_biased=False, int? null_block=None, int rope_positions=0")


def _define(name: str, schema: str, impl: Any, fake: Any = None) -> None:
    """Defines c128::name, its CPU and CUDA implementation and its fake one (default: returns None:
    an operator that only writes its arguments)."""
    LIBRARY.define(f"{name}{schema}")
    LIBRARY.impl(name, impl, "CPU")
    LIBRARY.impl(name, impl, "CUDA")
    torch.library.register_fake(f"c128::{name}", fake or _no_result, lib=LIBRARY)
    OPS.append(name)


def _no_result(*args: Any, **kwargs: Any) -> None:
    return None


def _state_layout(block_rows: int, block_table: Any, row_shift: int, score_plane: Any, score_block_table: Any,
                  score_biased: bool) -> Optional[StateLayout]:
    """The StateLayout of an operator's flattened fields; None for today's layout."""
    if not block_rows and block_table is None and score_plane is None and score_block_table is None \
            and not score_biased and not row_shift:
        return None
    return StateLayout(block_rows=block_rows, block_table=block_table, row_shift=row_shift, score_plane=score_plane,
                       score_block_table=score_block_table, score_biased=score_biased)


def _entry(kind: str, norm_weight: Any, rope_table: Any, cache: Any, entries_per_page: int, eps: float,
           page_bytes: int, workspace: Any = None) -> Optional[Entry]:
    if kind == "pooled" and norm_weight is None and rope_table is None and cache is None and workspace is None:
        return None
    return Entry(kind=kind, norm_weight=norm_weight, rope_table=rope_table, cache=cache,
                 entries_per_page=entries_per_page, eps=eps, page_bytes=page_bytes or None, workspace=workspace)


def _layout(rank: int, size: int, pages_per_rank: int) -> Any:
    return None if (rank, size, pages_per_rank) == (0, 1, 0) else (rank, size, pages_per_rank)


# ---- decode, prefill -----------------------------------------------------------------------------------
# The dispatcher passes keyword-only arguments only where they differ from their defaults, so a call with
# none of them takes c128.decode / prefill's hot path directly.
def _decode(state: Any, input: Any, ape: Any, output: Any, plans: Any, **kw: Any) -> None:
    if kw:
        _decode_options(state, input, ape, output, plans, **kw)
    else:
        _c128_decode(state, input, ape, output, plans)


def _prefill(state: Any, input: Any, ape: Any, output: Any, compress_plans: Any, write_plans: Any, **kw: Any) -> None:
    if kw:
        _prefill_options(state, input, ape, output, compress_plans, write_plans, **kw)
    else:
        _c128_prefill(state, input, ape, output, compress_plans, write_plans)


_c128_decode, _c128_prefill = c128.decode, c128.prefill


def _decode_options(state: Any, input: Any, ape: Any, output: Any, plans: Any, *, rank: int = 0, size: int = 1,
            pages_per_rank: int = 0, requests_per_block: int = 0, pdl: bool = False, block_rows: int = 0,
            block_table: Any = None, row_shift: int = 0, score_plane: Any = None, score_block_table: Any = None,
            score_biased: bool = False, output_index: Any = None, entry_kind: str = "pooled", norm_weight: Any = None,
            rope_table: Any = None, cache: Any = None, entries_per_page: int = 0, eps: float = 1e-6,
            page_bytes: int = 0, workspace: Any = None) -> None:
    c128.decode(state, input, ape, output, plans, layout=_layout(rank, size, pages_per_rank),
                requests_per_block=requests_per_block, pdl=pdl,
                state_layout=_state_layout(block_rows, block_table, row_shift, score_plane, score_block_table,
                                           score_biased),
                output_index=output_index,
                entry=_entry(entry_kind, norm_weight, rope_table, cache, entries_per_page, eps, page_bytes,
                             workspace))


def _prefill_options(state: Any, input: Any, ape: Any, output: Any, compress_plans: Any, write_plans: Any, *,
                     rank: int = 0,
             size: int = 1, pages_per_rank: int = 0, windows_per_block: int = 0, pdl: bool = False,
             block_rows: int = 0, block_table: Any = None, row_shift: int = 0, score_plane: Any = None,
             score_block_table: Any = None, score_biased: bool = False, output_index: Any = None,
             entry_kind: str = "pooled", norm_weight: Any = None, rope_table: Any = None, cache: Any = None,
             entries_per_page: int = 0, eps: float = 1e-6, page_bytes: int = 0, workspace: Any = None,
             write_slots: Any = None, write_positions: Any = None) -> None:
    c128.prefill(state, input, ape, output, compress_plans, write_plans, layout=_layout(rank, size, pages_per_rank),
                 windows_per_block=windows_per_block, pdl=pdl,
                 state_layout=_state_layout(block_rows, block_table, row_shift, score_plane, score_block_table,
                                            score_biased),
                 output_index=output_index,
                 entry=_entry(entry_kind, norm_weight, rope_table, cache, entries_per_page, eps, page_bytes,
                              workspace), write_slots=write_slots, write_positions=write_positions)


# The dispatcher's cost grows with the schema's arguments (about 3 us for decode's, 12 us with every
# layout and entry field, on a 2.x GHz server core): today's layout and pooled rows have operators of
# their own, the other arguments the *_extended ones.
_define("decode", "(Tensor(a!) state, Tensor input, Tensor ape, Tensor(b!) output, Tensor plans, *, int rank=0, "
        "int size=1, int pages_per_rank=0, int requests_per_block=0, bool pdl=False) -> ()", _decode)
_define("prefill", "(Tensor(a!) state, Tensor input, Tensor ape, Tensor(b!) output, Tensor compress_plans, "
        "Tensor write_plans, *, int rank=0, int size=1, int pages_per_rank=0, int windows_per_block=0, bool pdl=False"
        ") -> ()", _prefill)
_define("decode_extended", "(Tensor(a!) state, Tensor input, Tensor ape, Tensor(b!)? output, Tensor plans, *, "
        "int rank=0, int size=1, int pages_per_rank=0, int requests_per_block=0, bool pdl=False, " + _LAYOUT + ", " +
        _ENTRY + ") -> ()", _decode_options)
_define("prefill_extended", "(Tensor(a!) state, Tensor input, Tensor ape, Tensor(b!)? output, Tensor compress_plans, "
        "Tensor? write_plans, *, int rank=0, int size=1, int pages_per_rank=0, int windows_per_block=0, bool pdl=False, "
        + _LAYOUT + ", " + _ENTRY + ", Tensor? write_slots=None, Tensor? write_positions=None) -> ()", _prefill_options)


# ---- the device planners --------------------------------------------------------------------------------
def _ring(state_pages: int, ring_tokens: int, speculative: bool, page_table: Any, write_all: bool, block_rows: int,
          block_table: Any, row_shift: int, score_plane: Any, score_block_table: Any, score_biased: bool,
          null_block: Optional[int], rope_positions: int) -> c128.Ring:
    return c128.Ring(state_pages=state_pages, ring_tokens=ring_tokens, speculative=speculative, page_table=page_table,
                     write_all=write_all,
                     state_layout=_state_layout(block_rows, block_table, row_shift, score_plane, score_block_table,
                                                score_biased),
                     null_block=null_block, rope_positions=rope_positions)


def _plan_decode_device(requests: Any, plans: Any, status: Any, workspace: Any, *, state_pages: int,
                        ring_tokens: int = 0, speculative: bool = False, page_table: Any = None,
                        write_all: bool = False, block_rows: int = 0, block_table: Any = None, row_shift: int = 0,
                        score_plane: Any = None, score_block_table: Any = None, score_biased: bool = False,
                        null_block: Optional[int] = None, rope_positions: int = 0, seq_lens: Any = None,
                        pool_indices: Any = None, output_first: Any = None, output_index: Any = None,
                        pdl: bool = False) -> None:
    ring = _ring(state_pages, ring_tokens, speculative, page_table, write_all, block_rows, block_table, row_shift,
                 score_plane, score_block_table, score_biased, null_block, rope_positions)
    c128.plan_decode_device(ring, requests, plans, status, workspace, pdl=pdl, seq_lens=seq_lens,
                            pool_indices=pool_indices, output_first=output_first, output_index=output_index)


def _plan_prefill_device(requests: Any, compress: Any, write: Any, counts: Any, status: Any, workspace: Any, *,
                         state_pages: int, ring_tokens: int = 0, speculative: bool = False, page_table: Any = None,
                         write_all: bool = False, block_rows: int = 0, block_table: Any = None, row_shift: int = 0,
                         score_plane: Any = None, score_block_table: Any = None, score_biased: bool = False,
                         null_block: Optional[int] = None, rope_positions: int = 0, verify: bool = False,
                         capacity: int = -1, seq_lens: Any = None, query_start: Any = None, pool_indices: Any = None,
                         output_first: Any = None, output_index: Any = None, pdl: bool = False) -> None:
    ring = _ring(state_pages, ring_tokens, speculative, page_table, write_all, block_rows, block_table, row_shift,
                 score_plane, score_block_table, score_biased, null_block, rope_positions)
    c128.plan_prefill_device(ring, requests, compress, write, counts, status, workspace, verify=verify,
                             capacity=None if capacity < 0 else capacity, pdl=pdl, seq_lens=seq_lens,
                             query_start=query_start, pool_indices=pool_indices, output_first=output_first,
                             output_index=output_index)


_define("plan_decode_device", "(Tensor? requests, Tensor(a!) plans, Tensor(b!) status, Tensor(c!) workspace, *, " +
        _RING + ", Tensor? seq_lens=None, Tensor? pool_indices=None, Tensor? output_first=None, "
        "Tensor(d!)? output_index=None, bool pdl=False) -> ()", _plan_decode_device)
_define("plan_prefill_device", "(Tensor? requests, Tensor(a!) compress, Tensor(b!) write, Tensor(c!)? counts, "
        "Tensor(d!) status, Tensor(e!) workspace, *, " + _RING + ", bool verify=False, int capacity=-1, "
        "Tensor? seq_lens=None, Tensor? query_start=None, Tensor? pool_indices=None, Tensor? output_first=None, "
        "Tensor(f!)? output_index=None, bool pdl=False) -> ()",
        _plan_prefill_device)


# ---- the engine adapters ---------------------------------------------------------------------------------
from . import sglang as _sglang  # noqa: E402

_define("sglang_compress_forward", "(Tensor(a!) kv_score_buffer, Tensor kv_score_input, Tensor ape, Tensor plan_1, "
        "Tensor? plan_2, Tensor(b!) out, *, bool is_decode, int head_dim, int compress_ratio=128, int rank=0, "
        "int size=1, int pages_per_rank=0) -> ()", _sglang._op_compress_forward)
_define("sglang_compress_forward_norm_rope_store", "(Tensor(a!) kv_score_buffer, Tensor kv_score_input, Tensor ape, "
        "Tensor plan_1, Tensor? plan_2, *, bool is_decode, int head_dim, int compress_ratio=128, Tensor norm_weight, "
        "float norm_eps, Tensor freq_cis, Tensor out_loc, Tensor(b!) kvcache, int page_size) -> ()",
        _sglang._op_compress_forward_norm_rope_store)

from . import vllm as _vllm  # noqa: E402


def _vllm_save(kv: Any, score: Any, ape: Any, positions: Any, state_cache: Any, slot_mapping: Any, block_size: int,
               state_width: int, compress_ratio: int) -> None:
    _vllm.save_partial_states(kv, score, ape, positions, state_cache, slot_mapping, block_size, state_width,
                              compress_ratio)


def _vllm_compress(state_cache: Any, token_to_req_indices: Any, positions: Any, slot_mapping: Any, block_table: Any,
                   compressed_kv: Any, kv: Any = None, score: Any = None, ape: Any = None, query_start_loc: Any = None,
                   *, block_size: int = 8,
                   is_circular: bool = False) -> None:
    _vllm.compress_c128(state_cache, token_to_req_indices, positions, slot_mapping, block_table, compressed_kv,
                        block_size=block_size, kv=kv, score=score, ape=ape, query_start_loc=query_start_loc,
                        is_circular=is_circular)


_define("vllm_save_partial_states", "(Tensor kv, Tensor score, Tensor ape, Tensor positions, Tensor(a!) state_cache, "
        "Tensor slot_mapping, int block_size, int state_width, int compress_ratio) -> ()", _vllm_save)
_define("vllm_compress_c128", "(Tensor state_cache, Tensor token_to_req_indices, Tensor positions, "
        "Tensor slot_mapping, Tensor block_table, Tensor(a!) compressed_kv, Tensor? kv=None, Tensor? score=None, "
        "Tensor? ape=None, Tensor? query_start_loc=None, *, int block_size=8, bool is_circular=False) -> ()",
        _vllm_compress)

from . import trtllm as _trtllm  # noqa: E402

# TensorRT-LLM's schemas (trtllm::), under c128::
_TRT_HEAD = ("(Tensor kv_score, Tensor ape, Tensor(a!) paged_kv, Tensor(b!) paged_score, Tensor block_table_kv, "
             "Tensor block_table_score, Tensor(c!) output, Tensor kv_lens, ")
_define("compressor_paged_kv_compress", _TRT_HEAD + "Tensor cu_seq_lens, Tensor cu_kv_comp, int batch_size, "
        "int page_size, int head_dim, int compress_ratio, int next_n, Tensor? new_tokens_per_seq=None) -> ()",
        _trtllm.compressor_paged_kv_compress)
_define("compressor_prefill_reduction", _TRT_HEAD + "Tensor start_pos, Tensor cu_seq_lens, Tensor cu_kv_comp, "
        "int batch_size, int page_size, int head_dim, int compress_ratio, int max_outputs) -> ()",
        _trtllm.compressor_prefill_reduction)
_define("compressor_postprocess_scatter", "(Tensor kv_comp, Tensor(a!)? kv_out, Tensor rms_weight, float rms_eps, "
        "Tensor cos_sin_table, Tensor position_ids, int nope_dim, int rope_dim, Tensor(b!) kv_cache, "
        "Tensor num_outputs, Tensor cu_kv_comp, Tensor start_pos, Tensor block_offsets, Tensor compressed_mask, "
        "int tokens_per_block, int cache_scale_type, bool rotate_activation, Tensor(c!)? quant_output, "
        "Tensor(d!)? scale_output) -> ()", _trtllm.compressor_postprocess_scatter)
