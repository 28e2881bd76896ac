"""TensorRT-LLM drop-ins: the ratio-128 compressor operators of TensorRT-LLM's PyTorch flow
(cpp/tensorrt_llm/thop/compressorOp.cpp: ``trtllm::compressor_paged_kv_compress``,
``compressor_prefill_reduction``, ``compressor_postprocess_scatter``) with their argument lists, on c128's
kernels in TensorRT-LLM's state layout (DESIGN 5.9: kv and score in two planes ``[pages, tokens_per_block,
head_dim]`` fp32, each through its own block table, scores stored with ape; every new token persisted).
``import c128.torch`` registers them as ``torch.ops.c128.<name>`` with the same schemas, so that
``Compressor.forward`` calls them by name in place of ``torch.ops.trtllm.<name>``.

- :func:`compressor_paged_kv_compress` (decode, ``next_n`` new tokens per request) and
  :func:`compressor_prefill_reduction` (prefill and chunked prefill): every new token's row into the planes
  (``kv | score + ape[pos % 128]`` at ``table[b][pos // page_size]``, row ``pos % page_size``), then every
  window completed pooled into ``output[cu_kv_comp[b] + j]`` (request b's j-th new window): c128's device
  planner on ``kv_lens`` / ``cu_seq_lens`` and one prefill launch, no host synchronisation.
- :func:`compressor_postprocess_scatter`: refused. c128 writes DeepSeek-V4's cache entries only inside its
  compress launch (DESIGN 11), in FlashMLA's layout; TensorRT-LLM's own post-process (its cache, scale
  types and Hadamard rotation) stays TensorRT-LLM's kernel.

Tensors: PyTorch (CPU: the host runner; CUDA: the kernels on the current stream) or NumPy arrays;
``kv_score`` [T, 2 * head_dim] f32 or bf16; ``ape`` [128, head_dim] f32; ``output`` f32 or bf16; int32
metadata. Refused (ValueError naming the argument): ``compress_ratio`` other than 128, planes that are not
``[pages, page_size, head_dim]``.
"""

from __future__ import annotations

from typing import Any

from . import (Ring, StateLayout, WINDOW, _INT32, _compiling, _int, _ops, plan_prefill_device, plan_workspace_size,
               prefill)
from .sglang import _Xp

__all__ = ["compressor_paged_kv_compress", "compressor_prefill_reduction", "compressor_postprocess_scatter"]


def _check(paged_kv: Any, paged_score: Any, page_size: Any, head_dim: Any, compress_ratio: Any) -> None:
    if isinstance(compress_ratio, bool) or compress_ratio != WINDOW:
        raise ValueError(f"compress_ratio: c128 implements ratio 128 only, got {compress_ratio!r}")
    p, d = _int(page_size, "page_size", _INT32), _int(head_dim, "head_dim", _INT32)
    for name, t in (("paged_kv", paged_kv), ("paged_score", paged_score)):
        shape = tuple(t.shape)
        if len(shape) != 3 or shape[1] != p or shape[2] != d:
            raise ValueError(f"{name}: expected [pages, page_size = {p}, head_dim = {d}], got {shape}")


def _run(kv_score: Any, ape: Any, paged_kv: Any, paged_score: Any, block_table_kv: Any, block_table_score: Any,
         output: Any, kv_lens: Any, cu_seq_lens: Any, cu_kv_comp: Any, batch_size: int, page_size: int) -> None:
    """The writes and the windows of one batch: c128's device planner on the engine's arrays (write_all:
    every new token), then the prefill launch with each window's output row from cu_kv_comp."""
    x = _Xp(kv_score)
    n = _int(batch_size, "batch_size", _INT32)
    rows = int(kv_score.shape[0])
    stride = int(block_table_kv.shape[1])
    shift = max(7, (page_size * max(stride, 1) - 1).bit_length())
    layout = StateLayout(block_rows=page_size, block_table=block_table_kv[:n], row_shift=shift,
                         score_plane=paged_score, score_block_table=block_table_score[:n], score_biased=True)
    ring = Ring(state_pages=int(paged_kv.shape[0]), write_all=True, state_layout=layout)
    i32 = (lambda a: a.to(x.torch.int32).contiguous()) if x.torch is not None else \
        (lambda a: x.np.ascontiguousarray(a, dtype=x.np.int32))
    seq, qs = i32(kv_lens[:n]), i32(cu_seq_lens[:n + 1])
    if x.torch is not None:
        dev = x.device
        compress = x.torch.empty((rows, 16), dtype=x.torch.uint8, device=dev)
        write = x.torch.empty((rows, 8), dtype=x.torch.uint8, device=dev)
        status = x.torch.empty(1, dtype=x.torch.int32, device=dev)
        ws = x.torch.empty(plan_workspace_size(n), dtype=x.torch.uint8, device=dev)
    else:
        compress, write = x.np.empty((rows, 16), x.np.uint8), x.np.empty((rows, 8), x.np.uint8)
        status, ws = x.np.empty(1, x.np.int32), x.np.empty(plan_workspace_size(n), x.np.uint8)
    plan_prefill_device(ring, None, compress, write, None, status, ws, seq_lens=seq, query_start=qs)
    # output row of the window that ends at input row r: cu_kv_comp[b] + its index among b's new windows
    r = x.arange(rows)
    q, s = x.i64(qs), x.i64(seq)
    b = x.clip(x.searchsorted(q[1:], r), 0, max(n - 1, 0))
    start = s[b] - (q[b + 1] - q[b])
    pos = start + (r - q[b])
    first = x.i64(cu_kv_comp)[b] + (pos + 1) // WINDOW - start // WINDOW - 1
    index = x.where(((pos + 1) % WINDOW == 0) & (r < q[n]) if n else r < 0, first, -1)
    prefill(paged_kv, kv_score, ape, output, compress, write, state_layout=layout, output_index=index)


def compressor_paged_kv_compress(kv_score: Any, ape: Any, paged_kv: Any, paged_score: Any, block_table_kv: Any,
                                 block_table_score: Any, output: Any, kv_lens: Any, cu_seq_lens: Any, cu_kv_comp: Any,
                                 batch_size: int, page_size: int, head_dim: int, compress_ratio: int,
                                 next_n: int) -> None:
    """trtllm::compressor_paged_kv_compress for ratio 128: a generation batch of next_n tokens per request
    (request b's at kv_lens[b] - next_n .. kv_lens[b] - 1, rows cu_seq_lens[b] ..)."""
    _check(paged_kv, paged_score, page_size, head_dim, compress_ratio)
    if _compiling():
        _ops().compressor_paged_kv_compress(kv_score, ape, paged_kv, paged_score, block_table_kv, block_table_score,
                                            output, kv_lens, cu_seq_lens, cu_kv_comp, batch_size, page_size, head_dim,
                                            compress_ratio, next_n)
        return
    _int(next_n, "next_n", _INT32)
    _run(kv_score, ape, paged_kv, paged_score, block_table_kv, block_table_score, output, kv_lens, cu_seq_lens,
         cu_kv_comp, batch_size, page_size)


def compressor_prefill_reduction(kv_score: Any, ape: Any, paged_kv: Any, paged_score: Any, block_table_kv: Any,
                                 block_table_score: Any, output: Any, kv_lens: Any, start_pos: Any, cu_seq_lens: Any,
                                 cu_kv_comp: Any, batch_size: int, page_size: int, head_dim: int, compress_ratio: int,
                                 max_outputs: int) -> None:
    """trtllm::compressor_prefill_reduction for ratio 128: a context batch (request b's new tokens at
    start_pos[b] .. kv_lens[b] - 1). ``start_pos`` and ``max_outputs`` are implied by kv_lens, cu_seq_lens and
    cu_kv_comp and not read."""
    _check(paged_kv, paged_score, page_size, head_dim, compress_ratio)
    if _compiling():
        _ops().compressor_prefill_reduction(kv_score, ape, paged_kv, paged_score, block_table_kv, block_table_score,
                                            output, kv_lens, start_pos, cu_seq_lens, cu_kv_comp, batch_size,
                                            page_size, head_dim, compress_ratio, max_outputs)
        return
    _run(kv_score, ape, paged_kv, paged_score, block_table_kv, block_table_score, output, kv_lens, cu_seq_lens,
         cu_kv_comp, batch_size, page_size)


def compressor_postprocess_scatter(*args: Any, **kwargs: Any) -> None:
    """trtllm::compressor_postprocess_scatter: refused (see the module docstring)."""
    raise NotImplementedError("compressor_postprocess_scatter: c128 writes DeepSeek-V4's cache entries inside its "
                              "compress launch only (FlashMLA's layout); TensorRT-LLM's post-process stays "
                              "torch.ops.trtllm.compressor_postprocess_scatter")
