"""vLLM drop-ins: the two calls vLLM's DeepSeek-V4 compressor makes per step for ratio 128, with vLLM's
argument lists, on c128's kernels in vLLM's state layout (DESIGN 5.9: blocks of 8 rows through the block
table, scores stored with ape added; or PR #58074's ring, one block of C rows per request):

- :func:`save_partial_states` (vllm/models/deepseek_v4/common/ops/save_partial_states.py): every token's
  row ``[kv | score + ape[pos % 128]]`` into state row ``slot_mapping[t]`` (slots < 0 skipped);
- :func:`compress_norm_rope_store_cutedsl`'s ratio-128 pooling (the C128 kernel of
  vllm/models/deepseek_v4/nvidia/ops/sparse_attn_compress_cutedsl.py): for every token that completes a
  window (``(pos + 1) % 128 == 0``, slot >= 0) the softmax pooling of the window's 128 state rows into
  fp32 ``compressed_kv[t]``; other rows are left as they are. With ``kv_cache`` and ``k_cache_metadata``
  it would go on to vLLM's norm / RoPE / store kernel: that part stays vLLM's (see :func:`install`).

Engines are no dependency: the functions take plain tensors (PyTorch, CPU or CUDA; NumPy arrays run the host
runner), and :func:`install` is the ``vllm.general_plugins`` entry point (pyproject.toml) that routes vLLM's
compressor to them when vLLM is present.

What they refuse (ValueError naming the argument): ``compress_ratio`` other than 128, an fp32 state other than
``[blocks, block_size, 2 * state_width]``, ``block_size`` other than the state's, a ``state_width`` other than a
compiled head_dim, ``overlap`` (ratio 4's), ``use_fp4_cache``.
"""

from __future__ import annotations

import sys
from typing import Any, Optional, Tuple

from . import StateLayout, _compiling, _int, _INT32, _ops, prefill, WINDOW
from .sglang import _Xp

__all__ = ["save_partial_states", "compress_norm_rope_store_cutedsl", "compress_c128", "install"]

_ZERO_APE: dict = {}  # (framework, device, head_dim) -> a zero ape (scores in the state already hold ape)


def _zero_ape(x: _Xp, d: int) -> Any:
    key = (x.torch is not None, str(x.device), d)
    got = _ZERO_APE.get(key)
    if got is None:
        if x.torch is not None:
            got = x.torch.zeros((WINDOW, d), dtype=x.torch.float32, device=x.device)
        else:
            got = x.np.zeros((WINDOW, d), x.np.float32)
        _ZERO_APE[key] = got
    return got


def _state(state_cache: Any, block_size: Any, state_width: Any) -> Tuple[int, int, int]:
    shape = tuple(state_cache.shape)
    b = _int(block_size, "block_size", _INT32)
    d = _int(state_width, "state_width", _INT32)
    if len(shape) != 3 or shape[1] != b or shape[2] != 2 * d:
        raise ValueError(f"state_cache: expected [blocks, block_size = {b}, 2 * state_width = {2 * d}], got {shape}")
    return shape[0], b, d


def _ratio(compress_ratio: Any) -> None:
    if isinstance(compress_ratio, bool) or compress_ratio != WINDOW:
        raise ValueError(f"compress_ratio: c128 implements ratio 128 only, got {compress_ratio!r}")


def _rows(kv: Any, score: Any, x: _Xp) -> Any:
    """kv | score as one [T, 2D] row tensor: the buffer both are views of when they are its halves (vLLM
    splits its fp32 kv_score GEMM output), else a concatenation."""
    if x.torch is not None:
        t, d = kv.shape
        if (kv.dim() == 2 and score.shape == kv.shape and kv.stride() == (2 * d, 1) and score.stride() == (2 * d, 1)
                and score.data_ptr() == kv.data_ptr() + d * kv.element_size() and kv.dtype == score.dtype):
            return kv.as_strided((t, 2 * d), (2 * d, 1))
        return x.torch.cat([kv, score], 1).contiguous()
    return x.np.ascontiguousarray(x.np.concatenate([kv, score], 1))


def _per_token_table(x: _Xp, slots: Any, positions: Any, block: int) -> Tuple[Any, Any]:
    """A block table of one row per token naming the token's block at its window column, and the logical rows
    t << 7 | pos % 128: c128's rows of vLLM's slot_mapping (physical = table[t][pos % 128 / B] * B + pos % B)."""
    n = slots.shape[0]
    shift = max(7, block.bit_length() - 1)  # a table row maps max(128, B) positions
    cols = (1 << shift) // block
    k = x.arange(n)
    table = x.full((n, cols), -1)
    p = positions % (1 << shift)
    blk = x.where(slots >= 0, slots // block, -1)
    table[k, p // block] = blk.to(x.torch.int32) if x.torch is not None else blk.astype(x.np.int32)
    return table, (k << shift) | p, shift


def save_partial_states(kv: Any, score: Any, ape: Any, positions: Any, state_cache: Any, slot_mapping: Any,
                        block_size: int, state_width: int, compress_ratio: int, pdl_kwargs: Any = None) -> None:
    """vLLM's save_partial_states for ratio 128: state_cache[slot_mapping[t]] = [kv[t] | score[t] +
    ape[positions[t] % 128]] for every t with slot_mapping[t] >= 0 (one c128 write launch; the sum is the
    kernels' fp32 add, the bits vLLM's Triton kernel stores). kv, score: [T, state_width] fp32 (views of one
    [T, 2 * state_width] buffer are used in place); ape [128, state_width] fp32; positions, slot_mapping int64
    [T]; state_cache fp32 [blocks, block_size, 2 * state_width] (block_size 8..256, a power of two: vLLM's 8, or
    the ring's C). pdl_kwargs is accepted and ignored (c128 launches without PDL here, as vLLM does)."""
    _ratio(compress_ratio)
    blocks, b, d = _state(state_cache, block_size, state_width)
    if _compiling():
        _ops().vllm_save_partial_states(kv, score, ape, positions, state_cache, slot_mapping, block_size, state_width,
                                        compress_ratio)
        return
    x = _Xp(state_cache)
    slots, pos = x.i64(slot_mapping), x.i64(positions)
    n = slots.shape[0]
    rows = _rows(kv, score, x)
    table, logical, shift = _per_token_table(x, slots, pos, b)
    k = x.arange(n)
    plans = x.stack([x.where(slots >= 0, k, -1), logical])
    plans = x.int32_rows_as_u8(plans, 8)
    empty = x.int32_rows_as_u8(x.full((0, 4), 0), 16)
    layout = StateLayout(block_rows=b, block_table=table, row_shift=shift, score_biased=True)
    prefill(state_cache, rows, ape, _out_none(x, d), empty, plans, state_layout=layout)


def _out_none(x: _Xp, d: int) -> Any:
    """A zero-row fp32 output (a write-only launch writes no output row)."""
    if x.torch is not None:
        return x.torch.empty((0, d), dtype=x.torch.float32, device=x.device)
    return x.np.empty((0, d), x.np.float32)


def compress_c128(state_cache: Any, token_to_req_indices: Any, positions: Any, slot_mapping: Any, block_table: Any,
                  compressed_kv: Any, *, block_size: int = 8, kv: Any = None, score: Any = None, ape: Any = None,
                  query_start_loc: Any = None, is_circular: bool = False) -> None:
    """The C128 pooling of vLLM's CuTe kernel: for every token t with (positions[t] + 1) % 128 == 0,
    slot_mapping[t] >= 0 and a request index, compressed_kv[t, :D] = the softmax pooling of positions
    positions[t] - 127 .. positions[t] of request token_to_req_indices[t]; no other row written, the state
    not written.

    Main branch (``is_circular`` False): the window's rows are read from the state (save_partial_states
    has written them, scores with ape), rows block_table[req][pos // 8] * 8 + pos % 8. The ring (PR #58074,
    ``is_circular`` True, block_size = C): rows block_table[req][0] * C + pos % C; give ``kv``, ``score``
    and ``ape`` (the ring variant's extra arguments) and the rows of this chunk are read from them, the
    older ones from the ring (``query_start_loc`` tells where each request's rows begin: the ring holds
    its positions before them). Without kv / score every window row comes from the state (its last row
    gathered, one row per token)."""
    b, d = int(state_cache.shape[1]), int(state_cache.shape[2]) // 2
    x = _Xp(state_cache)
    req, pos, slots = x.i64(token_to_req_indices), x.i64(positions), x.i64(slot_mapping)
    n = pos.shape[0]
    k = x.arange(n)
    table = block_table
    stride = table.shape[1]
    if is_circular:
        if b & (b - 1) or b < WINDOW:
            raise ValueError(f"block_size: the ring's capacity must be a power of two of at least 128, got {b}")
        shift = b.bit_length() - 1
        table = table[:, :1].contiguous() if x.torch is not None else x.np.ascontiguousarray(table[:, :1])
    else:
        shift = max(7, (b * stride - 1).bit_length())
    boundary = ((pos + 1) % WINDOW == 0) & (slots >= 0) & (req >= 0)
    start = pos - (WINDOW - 1)
    logical_page = ((req << shift) | (start % (1 << shift))) // WINDOW
    buffer_len = k * 0 + (WINDOW - 1)
    if kv is not None and score is not None and ape is not None:
        rows, ape_t = _rows(kv, score, x), ape
        if query_start_loc is not None:  # rows of this chunk from the input, the earlier ones from the ring
            qs = x.i64(query_start_loc)
            first = pos - (k - qs[x.clip(req, 0, qs.shape[0] - 1)])
            buffer_len = x.clip(first - start, 0, WINDOW - 1)
    else:  # the window's last row from the state: its score holds ape, so the input's ape is zero
        flat = state_cache.reshape(-1, 2 * d)
        rows = flat[x.clip(slots, 0, flat.shape[0] - 1)]
        rows = rows.contiguous() if x.torch is not None else x.np.ascontiguousarray(rows)
        ape_t = _zero_ape(x, d)
    seq = x.where(boundary, pos + 1, -1)
    page = x.where(boundary, logical_page, -1)
    cols = [seq, k + (buffer_len << 16), page, page]
    plans = x.int32_rows_as_u8(x.stack(cols), 16)
    empty = x.int32_rows_as_u8(x.full((0, 2), 0), 8)
    layout = StateLayout(block_rows=b, block_table=table, row_shift=shift, score_biased=True)
    prefill(state_cache, rows, ape_t, compressed_kv, plans, empty, state_layout=layout)


def compress_norm_rope_store_cutedsl(state_cache: Any = None, num_actual: Any = None, token_to_req_indices: Any = None,
                                     positions: Any = None, slot_mapping: Any = None, block_table: Any = None,
                                     block_size: int = 8, state_width: int = 512, cos_sin_cache: Any = None,
                                     kv_cache: Any = None, k_cache_metadata: Any = None, pdl_kwargs: Any = None,
                                     head_dim: int = 512, rope_head_dim: int = 64, compress_ratio: int = 128,
                                     overlap: bool = False, use_fp4_cache: bool = False, rms_norm_weight: Any = None,
                                     rms_norm_eps: float = 1e-6, quant_block: int = 0, token_stride: int = 0,
                                     scale_dim: int = 0, store_full_kv: bool = False, store_full_fp8: bool = False,
                                     fp8_scale: Any = None, *, compressed_kv: Any = None, kv: Any = None,
                                     score: Any = None, ape: Any = None, query_start_loc: Any = None,
                                     is_circular: bool = False, **more: Any) -> Any:
    """vLLM's compress_norm_rope_store_cutedsl keywords, its ratio-128 pooling on c128: pools into
    ``compressed_kv`` (fp32 [>= T, head_dim]; c128's keyword: vLLM's kernel allocates it, pass the scratch to
    keep the hot path free of allocations) and returns it. Its norm / RoPE / store half (kv_cache,
    k_cache_metadata, cos_sin_cache, rms_norm_weight, ...) is vLLM's: the plugin calls vLLM's own store
    kernel on the returned rows (:func:`install`). The ring variant's ``kv``, ``score``, ``ape``,
    ``is_circular`` are taken; ``query_start_loc`` is not needed."""
    _ratio(compress_ratio)
    if overlap:
        raise ValueError("overlap: the overlapping window is ratio 4's; c128 implements ratio 128")
    if use_fp4_cache:
        raise ValueError("use_fp4_cache: the FP4 cache is the indexer's (head 128), which c128 does not write")
    _state(state_cache, block_size, state_width)
    if compressed_kv is None:
        torch = sys.modules.get("torch")
        n = positions.shape[0]
        if torch is not None and isinstance(positions, torch.Tensor):
            compressed_kv = torch.empty((n, state_width), dtype=torch.float32, device=positions.device)
        else:
            import numpy

            compressed_kv = numpy.empty((n, state_width), numpy.float32)
    if _compiling():
        _ops().vllm_compress_c128(state_cache, token_to_req_indices, positions, slot_mapping, block_table,
                                  compressed_kv, kv, score, ape, query_start_loc, block_size=block_size,
                                  is_circular=is_circular)
        return compressed_kv
    compress_c128(state_cache, token_to_req_indices, positions, slot_mapping, block_table, compressed_kv,
                  block_size=block_size, kv=kv, score=score, ape=ape, query_start_loc=query_start_loc,
                  is_circular=is_circular)
    return compressed_kv


def install() -> None:
    """The ``vllm.general_plugins`` entry point: routes vLLM's DeepSeek-V4 ratio-128 state writes and
    pooling to c128. It replaces ``save_partial_states`` (for ratio 128; other ratios go to vLLM's) and wraps
    ``compress_norm_rope_store_cutedsl`` so that the ratio-128 pooling runs on c128 and vLLM's own norm /
    RoPE / store kernel writes the cache from the pooled rows; ratio 4 and the indexer stay vLLM's. Does
    nothing where vLLM or its DeepSeek-V4 modules are missing, or when C128_VLLM=0."""
    import importlib
    import os

    if os.environ.get("C128_VLLM", "1") == "0":
        return
    try:
        save_mod = importlib.import_module("vllm.models.deepseek_v4.common.ops.save_partial_states")
        comp_mod = importlib.import_module("vllm.models.deepseek_v4.compressor")
    except ImportError:
        return
    vllm_save = getattr(save_mod, "save_partial_states", None)
    if vllm_save is not None and not getattr(vllm_save, "_c128", False):
        def save(kv, score, ape, positions, state_cache, slot_mapping, block_size, state_width, compress_ratio,
                 pdl_kwargs=None, **kw):
            if compress_ratio != WINDOW or kw:
                return vllm_save(kv, score, ape, positions, state_cache, slot_mapping, block_size, state_width,
                                 compress_ratio, pdl_kwargs, **kw)
            return save_partial_states(kv, score, ape, positions, state_cache, slot_mapping, block_size,
                                       state_width, compress_ratio, pdl_kwargs)

        save._c128 = True
        for mod in (save_mod, comp_mod):
            if getattr(mod, "save_partial_states", None) is vllm_save:
                mod.save_partial_states = save
    store = getattr(comp_mod, "compress_norm_rope_store_cutedsl", None)
    if store is not None and not getattr(store, "_c128", False):
        def routed(*args, **kw):
            if kw.get("compress_ratio") != WINDOW or kw.get("head_dim", 512) != 512 or args:
                return store(*args, **kw)
            rows = compress_norm_rope_store_cutedsl(**{k: v for k, v in kw.items()
                                                       if k in _POOL_KEYWORDS})
            return _vllm_store(comp_mod, rows, kw)

        routed._c128 = True
        comp_mod.compress_norm_rope_store_cutedsl = routed


_POOL_KEYWORDS = {"state_cache", "token_to_req_indices", "positions", "slot_mapping", "block_table", "block_size",
                  "state_width", "compress_ratio", "overlap", "use_fp4_cache", "kv", "score", "ape", "is_circular",
                  "query_start_loc"}


def _vllm_store(comp_mod: Any, rows: Any, kw: dict) -> Any:
    """vLLM's norm / RoPE / store kernel on c128's pooled rows (the module's own store function, by the
    name the CuTe wrapper uses); without one, the rows are returned for the caller to store."""
    fn = getattr(comp_mod, "_c128_norm_rope_store", None) or getattr(comp_mod, "norm_rope_store", None)
    if fn is None:
        return rows
    return fn(rows, **{k: v for k, v in kw.items() if k not in _POOL_KEYWORDS})
