"""SGLang drop-in: :func:`compress_forward` with the argument list and semantics of SGLang's
``compress_forward`` (python/sglang/kernels/ops/attention/dsv4/compress.py, formerly
jit_kernel/deepseek_v4) for compress ratio 128, not online; and DeepSeek-V4's compressor
post-process (RMSNorm + RoPE + FP8 + store into the FlashMLA cache, SGLang's
``compress_norm_rope_store``) fused into the same launch, :func:`compress_forward_norm_rope_store`.

An engine switches with one import::

    from c128.sglang import compress_forward, CompressorDecodePlan, CompressorPrefillPlan

:class:`CompressorDecodePlan` and :class:`CompressorPrefillPlan` are SGLang's plan classes with its
planners (``generate`` with and without ``use_req_ring``, ``generate_legacy``) on c128's side: SGLang's
plan bytes from SGLang's metadata, on the metadata's device, as array operations (PyTorch or NumPy;
no JIT module, no synchronisation with device metadata, so a captured step can plan).

The plan bytes are the same: ``plan`` is what SGLang's planners return (``CompressorDecodePlan``
``(compress_ratio, plan_d)`` or ``CompressorPrefillPlan`` ``(compress_ratio, plan_c, plan_w,
pin_buffer)``, with ``is_decode``), or the :class:`DecodePlan` / :class:`PrefillPlan` tuples
here, which have the same fields.

What it accepts:

- ``kv_score_buffer``: [pages, 128, 2 * head_dim], float32 or bfloat16 (the state; written);
- ``kv_score_input``: [N, 2 * head_dim], float32 or bfloat16 (decode: N = batch = plan_d rows;
  prefill: the ragged tokens, N <= 65536);
- ``ape``: [128, head_dim] **float32 only**. SGLang's kernel takes ape in the input dtype; c128
  always reads it in f32 (DeepSeek keeps it in f32: rounding it to bf16 only loses bits). A
  bf16 ape is refused (TypeError naming ``ape``); convert it once at load time,
  ``ape.float()``, not per call;
- ``plan``: decode ``plan_d`` uint8 [batch, 16]; prefill ``plan_c`` uint8 [C, 16] and ``plan_w``
  uint8 [W, 8] (trimmed to their counts, or padded with sentinels for CUDA graphs); int32
  views of the same bytes ([n, 4], [n, 2]) are accepted too; on the device of the tensors;
- ``out``: [rows, head_dim], float32 or bfloat16, rows >= plan[1] rows; default (None): a new
  tensor of kv_score_input's dtype and shape (plan[1] rows, head_dim), as SGLang allocates it
  (PyTorch and NumPy only; pass ``out`` to keep the hot path free of allocations);
- ``shared_state_layout``: (rank, size, pages_per_rank), SGLang's SharedStateLayout;
- dtype combinations: every compiled instance (c128.instances(): head_dim 128, 256, 512 x f32 /
  bf16 for state, input and output);
- ``stream`` (c128's addition): default PyTorch's current stream, as SGLang launches.

What it refuses (ValueError naming the argument): ``compress_ratio`` 4 (the c4 compressor stays
with SGLang's kernel), ``is_online=True`` (SGLang's online c128 variant keeps a different state
and plan layout), a plan whose ``compress_ratio`` is not 128, and anything :func:`c128.decode` /
:func:`c128.prefill` refuse. Output rows the kernel does not write (decode rows of requests that
did not complete a window, prefill rows of sentinel plans) keep their contents, as in SGLang.
"""

from __future__ import annotations

import sys
from typing import Any, NamedTuple, Optional, Tuple

from . import _INT32, Entry, _compiling, _int, _ops, decode, prefill
from ._tensor import describe, view

__all__ = ["compress_forward", "compress_forward_norm_rope_store", "compress_norm_rope_store", "DecodePlan",
           "PrefillPlan", "CompressorDecodePlan", "CompressorPrefillPlan", "MTP_PAD"]

_HEAD_DIM = 512  # DeepSeek-V4's compressed KV (SGLang's FlashMLA entry); 128 is SGLang's indexer cache


class DecodePlan(NamedTuple):
    """SGLang's CompressorDecodePlan: plan_d uint8 [batch, 16]."""

    compress_ratio: int
    plan_d: Any

    @property
    def is_decode(self) -> bool:
        return True


class PrefillPlan(NamedTuple):
    """SGLang's CompressorPrefillPlan: plan_c uint8 [C, 16], plan_w uint8 [W, 8]."""

    compress_ratio: int
    plan_c: Any
    plan_w: Any
    pin_buffer: Any = None

    @property
    def is_decode(self) -> bool:
        return False


def _rows(t: Any) -> int:
    shape = getattr(t, "shape", None)
    if not shape:
        raise TypeError(f"plan: plan[1] is {describe(t)}, not a plan tensor")
    return int(shape[0])


def _new_out(like: Any, rows: int, head_dim: int) -> Any:
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(like, torch.Tensor):
        return like.new_empty((rows, head_dim))
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(like, numpy.ndarray):
        return numpy.empty((rows, head_dim), dtype=like.dtype)
    raise TypeError(f"out: pass out= for {describe(like)} inputs (a new output is made for PyTorch and NumPy only)")


def _check_call(kv_score_buffer: Any, plan: Any, head_dim: Any, compress_ratio: Any,
                is_online: Any) -> Tuple[int, bool]:
    """head_dim and whether the plan is a decode plan, after SGLang's argument checks."""
    head_dim = _int(head_dim, "head_dim", _INT32)
    if head_dim <= 0:
        raise ValueError(f"head_dim: expected a positive head_dim, got {head_dim}")
    if isinstance(compress_ratio, bool) or not isinstance(compress_ratio, int) or compress_ratio != 128:
        raise ValueError(f"compress_ratio: c128 implements ratio 128 only, got {compress_ratio!r} (ratio 4 stays "
                         f"with SGLang's kernel)")
    if is_online:
        raise ValueError("is_online: c128 implements SGLang's non-online c128 (state [pages, 128, 2 * head_dim]); "
                         "the online variant stays with SGLang's kernel")
    is_decode = _plan_kind(plan)
    shape = getattr(kv_score_buffer, "shape", None)
    if shape is not None and len(shape) == 3 and shape[2] != 2 * head_dim:
        raise ValueError(f"head_dim: {head_dim!r}, but kv_score_buffer rows hold {shape[2]} = 2 * {shape[2] / 2:g}")
    return head_dim, is_decode


def _plan_kind(plan: Any) -> bool:
    is_decode = getattr(plan, "is_decode", None)
    if not isinstance(is_decode, bool) or not hasattr(plan, "__getitem__"):
        raise TypeError(f"plan: expected SGLang's CompressorDecodePlan / CompressorPrefillPlan (or "
                        f"c128.sglang.DecodePlan / PrefillPlan), got {describe(plan)}")
    ratio = getattr(plan, "compress_ratio", 128)
    if not isinstance(ratio, int) or ratio != 128:
        raise ValueError(f"plan: its compress_ratio is {ratio!r}, this call's 128")
    return is_decode


def compress_forward(kv_score_buffer: Any, kv_score_input: Any, ape: Any, plan: Any, head_dim: int,
                     compress_ratio: int, out: Optional[Any] = None,
                     shared_state_layout: Tuple[int, int, int] = (0, 1, 0), *, is_online: bool = False,
                     stream: Any = None) -> Any:
    """SGLang's compress_forward for compress_ratio 128 (not online), on c128's kernels.

    Decode plans (``plan.is_decode``) run :func:`c128.decode`; prefill plans run
    :func:`c128.prefill` (compress, then write). Returns ``out``. See the module docstring for
    the tensors and dtypes it accepts and what it refuses.
    """
    head_dim, is_decode = _check_call(kv_score_buffer, plan, head_dim, compress_ratio, is_online)
    if out is None:
        out = _new_out(kv_score_input, _rows(plan[1]), head_dim)
    if _compiling():
        rank, size, pages = shared_state_layout
        _ops().sglang_compress_forward(kv_score_buffer, kv_score_input, ape, plan[1], None if is_decode else plan[2],
                                       out, is_decode=is_decode, head_dim=head_dim, compress_ratio=compress_ratio,
                                       rank=rank, size=size, pages_per_rank=pages)
        return out
    try:
        if is_decode:
            decode(kv_score_buffer, kv_score_input, ape, out, plan[1], stream=stream, layout=shared_state_layout)
        else:
            prefill(kv_score_buffer, kv_score_input, ape, out, plan[1], plan[2], stream=stream,
                    layout=shared_state_layout)
    except (TypeError, ValueError) as e:
        raise type(e)(_sglang_names(str(e))) from None
    return out


def _entry(head_dim: int, norm_weight: Any, norm_eps: Any, freq_cis: Any, kvcache: Any, page_size: Any,
           use_fp4: Any, bf16_store: Any) -> Entry:
    """The c128 Entry for SGLang's compress_norm_rope_store arguments."""
    if use_fp4:
        raise ValueError("use_fp4: SGLang's FP4 store is its indexer cache (head_dim 128), which c128 does not write")
    if bf16_store:
        raise ValueError("bf16_store: SGLang's BF16 store keeps the normalised, rotated values unquantised; c128's "
                         "BF16 entry (c128.Entry(kind='dsv4_bf16')) is DeepSeek's reference, the FP8 channels "
                         "dequantised, so it would not give SGLang's numbers. Use c128.decode / c128.prefill with "
                         "that entry if it is what you want")
    if head_dim != _HEAD_DIM:
        raise ValueError(f"head_dim: {head_dim}; c128 writes DeepSeek-V4's FlashMLA entry (head_dim 512). SGLang's "
                         f"head_dim 128 store is its indexer cache (Hadamard transform, fp32 scales), not this entry")
    if isinstance(page_size, bool) or not isinstance(_index_or_none(page_size), int):
        raise TypeError(f"page_size: expected an integer, got {describe(page_size)}")
    return Entry(kind="dsv4_fp8", norm_weight=norm_weight, rope_table=freq_cis, cache=kvcache,
                 entries_per_page=page_size, eps=norm_eps)


def _index_or_none(value: Any) -> Any:
    try:
        return value.__index__()
    except (AttributeError, TypeError):
        return None


def compress_forward_norm_rope_store(kv_score_buffer: Any, kv_score_input: Any, ape: Any, plan: Any, *,
                                     head_dim: int, compress_ratio: int = 128, norm_weight: Any, norm_eps: float,
                                     freq_cis: Any, out_loc: Any, kvcache: Any, page_size: int,
                                     is_online: bool = False, use_fp4: bool = False, bf16_store: bool = False,
                                     stream: Any = None) -> None:
    """SGLang's two compressor calls, ``compress_forward`` then ``compress_norm_rope_store``, as
    ONE c128 launch (decode; prefill: the compress launch, then the state-write launch): the
    pooled vector never goes to memory, and the norm-RoPE-store kernel's launch is gone.

    It replaces::

        kv = compress_forward(kv_score_buffer, kv_score_input, ape, plan, head_dim=512, compress_ratio=128)
        compress_norm_rope_store(kv, plan, norm_weight=w, norm_eps=eps, freq_cis=freqs_cis, out_loc=out_loc,
                                 kvcache=kv_cache, page_size=page_size)

    with::

        compress_forward_norm_rope_store(kv_score_buffer, kv_score_input, ape, plan, head_dim=512, norm_weight=w,
                                         norm_eps=eps, freq_cis=freqs_cis, out_loc=out_loc, kvcache=kv_cache,
                                         page_size=page_size)

    The arguments are the two calls' (see the module docstring for the first four):

    - ``norm_weight``: float32 [512] (the compressor's kv_norm weight; a bf16 one is refused:
      convert it once at load time);
    - ``norm_eps``: the norm's epsilon;
    - ``freq_cis``: the layer's RoPE table, complex64 [max_pos, 32] (freqs_cis as SGLang holds
      it) or float32 [max_pos, 64] (its view_as_real, cos and sin interleaved per pair); a window
      starting at or past max_pos is skipped;
    - ``out_loc``: int64, the cache entry of the window that ends at each input row: decode
      out_loc[b] for request b ([batch]), prefill out_loc[ragged_id] ([tokens]); a negative or
      past-the-cache entry is skipped;
    - ``kvcache``: uint8 [num_pages, page_bytes], FlashMLA's sparse FP8 layout (page_bytes at
      least 584 * page_size, a multiple of 4; SGLang's ceil(584 * page_size / 576) * 576);
    - ``page_size``: entries per page, a power of two.

    Refused (ValueError naming the argument): head_dim other than 512 (SGLang's head_dim-128 store
    is its indexer cache), ``use_fp4``, ``bf16_store`` (SGLang's BF16 store is unquantised;
    c128's BF16 entry is DeepSeek's dequantised one), and what :func:`compress_forward` refuses.
    Any GPU c128 runs on writes the entries (no clusters are needed). The launch uses the
    binding's cache-entry workspace of its stream (c128.Entry's ``workspace``, made zeroed by the
    first such launch on a stream, then reused: no allocation after that; warm up on the capture
    stream before capturing a CUDA graph).

    Numbers: the entry is DeepSeek's reference chain on c128's pooled vector y (DESIGN 11.1): y
    rounded to bf16 before the norm, the normalised z rounded to bf16 before the rotation. SGLang
    skips both roundings (its kv is float32, and it rotates the unrounded z), so an FP8 code or a
    bf16 RoPE value may differ from SGLang's by one step, and a block's scale byte by one where
    its largest value lies within a bf16 step of a power of two times 448. Returns None, as
    SGLang's compress_norm_rope_store.
    """
    head_dim, is_decode = _check_call(kv_score_buffer, plan, head_dim, compress_ratio, is_online)
    entry = _entry(head_dim, norm_weight, norm_eps, freq_cis, kvcache, page_size, use_fp4, bf16_store)
    if _compiling():
        _ops().sglang_compress_forward_norm_rope_store(
            kv_score_buffer, kv_score_input, ape, plan[1], None if is_decode else plan[2], is_decode=is_decode,
            head_dim=head_dim, compress_ratio=compress_ratio, norm_weight=norm_weight, norm_eps=norm_eps,
            freq_cis=freq_cis, out_loc=out_loc, kvcache=kvcache, page_size=page_size)
        return
    try:
        if is_decode:
            decode(kv_score_buffer, kv_score_input, ape, None, plan[1], stream=stream, output_index=out_loc,
                   entry=entry)
        else:
            prefill(kv_score_buffer, kv_score_input, ape, None, plan[1], plan[2], stream=stream,
                    output_index=out_loc, entry=entry)
    except (TypeError, ValueError) as e:
        raise type(e)(_sglang_names(str(e))) from None


def _op_compress_forward(kv_score_buffer: Any, kv_score_input: Any, ape: Any, plan_1: Any, plan_2: Any, out: Any, *,
                         is_decode: bool, head_dim: int, compress_ratio: int = 128, rank: int = 0, size: int = 1,
                         pages_per_rank: int = 0) -> None:
    """torch.ops.c128.sglang_compress_forward: compress_forward with the plan's tensors unpacked."""
    plan = DecodePlan(compress_ratio, plan_1) if is_decode else PrefillPlan(compress_ratio, plan_1, plan_2)
    compress_forward(kv_score_buffer, kv_score_input, ape, plan, head_dim, compress_ratio, out,
                     (rank, size, pages_per_rank))


def _op_compress_forward_norm_rope_store(kv_score_buffer: Any, kv_score_input: Any, ape: Any, plan_1: Any,
                                         plan_2: Any, *, is_decode: bool, head_dim: int, compress_ratio: int = 128,
                                         norm_weight: Any, norm_eps: float, freq_cis: Any, out_loc: Any,
                                         kvcache: Any, page_size: int) -> None:
    plan = DecodePlan(compress_ratio, plan_1) if is_decode else PrefillPlan(compress_ratio, plan_1, plan_2)
    compress_forward_norm_rope_store(kv_score_buffer, kv_score_input, ape, plan, head_dim=head_dim,
                                     compress_ratio=compress_ratio, norm_weight=norm_weight, norm_eps=norm_eps,
                                     freq_cis=freq_cis, out_loc=out_loc, kvcache=kvcache, page_size=page_size)


# What compress_norm_rope_store's one-hot windows read, by (framework, device, dtype, head_dim): a state
# page whose rows are kv 0 and score -1e30, a zero ape, an empty write-plan array. Never written.
_ONE_HOT: dict = {}
_FILL_SCORE = -1e30


def compress_norm_rope_store(kv: Any, plan: Any, *, norm_weight: Any, norm_eps: float, freq_cis: Any, out_loc: Any,
                             kvcache: Any, page_size: int, use_fp4: bool = False, bf16_store: bool = False,
                             stream: Any = None) -> None:
    """SGLang's compress_norm_rope_store (the compressor's post-process of pooled rows: RMSNorm,
    RoPE, FP8 and the store into the FlashMLA cache) on ALREADY POOLED rows ``kv`` [N, 512],
    with SGLang's arguments (see :func:`compress_forward_norm_rope_store` for them).

    For porting and for tests, not for the hot path: c128 has no standalone epilogue kernel (its
    entries are written by the compress launch), so this runs c128's fused launch on one window
    per row of kv whose pooled vector is exactly that row: 127 rows of score -1e30 (weight
    exactly 0) read from a constant state page, and the row (kv, score 0) as the window's last
    input row, so the softmax gives it weight exactly 1. Each call stages the [N, 1024] input
    rows, N compress plans and N entry indices (allocations, PyTorch or NumPy tensors only). The
    fused drop-in, :func:`compress_forward_norm_rope_store`, replaces compress_forward and this
    call with one launch and no staging.

    Windows, as SGLang's kernel takes them: decode plan b (``plan.is_decode``) writes entry
    out_loc[b] if its seq_len is a positive multiple of 128 and its write_loc and read_page_0
    are not negative, at position seq_len - 128; prefill plan k writes entry
    out_loc[plan_c[k].ragged_id] unless it is a sentinel. The numbers differ from SGLang's as
    :func:`compress_forward_norm_rope_store`'s do (a float32 kv is rounded to bf16 first; a bf16
    kv is used as it is).
    """
    head_dim, is_decode = _pooled_rows(kv, plan)
    entry = _entry(head_dim, norm_weight, norm_eps, freq_cis, kvcache, page_size, use_fp4, bf16_store)
    n = kv.shape[0]
    torch = sys.modules.get("torch")
    use_torch = torch is not None and isinstance(kv, torch.Tensor)
    loc = view(out_loc, "out_loc")
    if loc.dtype != "i64" or len(loc.shape) != 1:
        raise TypeError(f"out_loc: expected a 1-D int64 tensor, got {loc.dtype} of shape {tuple(loc.shape)}")
    rows = plan[1]
    if (use_torch and not isinstance(rows, torch.Tensor)) or (not use_torch and type(rows).__module__ != "numpy"):
        raise TypeError(f"plan: plan[1] is {describe(rows)}, kv a {describe(kv)}: pass one framework's tensors")
    if _rows(rows) != n:
        raise ValueError(f"plan: {_rows(rows)} plans, kv {n} rows: one plan per pooled row")
    if n == 0:
        return
    if use_torch:
        staged = _stage_torch(torch, kv, rows, out_loc, is_decode)
    else:
        staged = _stage_numpy(kv, rows, out_loc, is_decode)
    state, ape, write_plans, x, plans, index = staged
    try:
        prefill(state, x, ape, None, plans, write_plans, stream=stream, output_index=index, entry=entry)
    except (TypeError, ValueError) as e:
        raise type(e)(_sglang_names(str(e))) from None


def _pooled_rows(kv: Any, plan: Any) -> Tuple[int, bool]:
    is_decode = _plan_kind(plan)
    torch = sys.modules.get("torch")
    numpy = sys.modules.get("numpy")
    if not ((torch is not None and isinstance(kv, torch.Tensor)) or
            (numpy is not None and isinstance(kv, numpy.ndarray))):
        raise TypeError(f"kv: expected a PyTorch tensor or a NumPy array (the call stages its windows with them), "
                        f"got {describe(kv)}")
    shape = tuple(kv.shape)
    if len(shape) != 2 or shape[1] <= 0:
        raise ValueError(f"kv: expected the pooled rows [N, head_dim], got shape {shape}")
    return shape[1], is_decode


def _one_hot_constants(key: tuple, make: Any) -> tuple:
    got = _ONE_HOT.get(key)
    if got is None:
        got = _ONE_HOT[key] = make()
    return got


def _stage_numpy(kv: Any, rows: Any, out_loc: Any, is_decode: bool) -> tuple:
    import numpy as np

    from . import bf16_from_float

    n, d = kv.shape
    if kv.dtype not in (np.float32, np.uint16):
        raise TypeError(f"kv: expected float32 or bfloat16 (uint16 bits) rows, got {kv.dtype}")

    def make() -> tuple:
        state = np.zeros((1, 128, 2 * d), kv.dtype)
        state[..., d:] = np.float32(_FILL_SCORE) if kv.dtype == np.float32 else bf16_from_float(np.float32(_FILL_SCORE))
        return state, np.zeros((128, d), np.float32), np.zeros((0, 8), np.uint8)

    state, ape, write_plans = _one_hot_constants(("numpy", str(kv.dtype), d), make)
    x = np.zeros((n, 2 * d), kv.dtype)
    x[:, :d] = kv
    p32 = np.ascontiguousarray(rows).view(np.int32).reshape(n, 4) if getattr(rows, "dtype", None) is not None else None
    if p32 is None or np.asarray(rows).dtype.kind not in "iu":
        raise TypeError("plan: expected integer plan tensors (uint8 [n, 16] or int32 [n, 4])")
    seq = p32[:, 0].astype(np.int64) & 0xFFFFFFFF
    loc = np.asarray(out_loc)
    if is_decode:
        valid = (p32[:, 1] >= 0) & (p32[:, 2] >= 0) & (seq % 128 == 0) & (seq >= 128)
        index = np.ascontiguousarray(loc[:n]) if len(loc) >= n else loc
    else:
        valid = seq != 0xFFFFFFFF
        ragged = p32[:, 1].astype(np.int64) & 0xFFFF
        inside = valid & (ragged < len(loc))
        index = np.where(inside, loc[np.minimum(ragged, max(len(loc) - 1, 0))] if len(loc) else -1, -1)
        index = np.ascontiguousarray(index, dtype=np.int64)
    plans = np.zeros((n, 4), np.int32)
    plans[:, 0] = np.where(valid, seq, 0xFFFFFFFF).astype(np.uint32).view(np.int32)
    plans[:, 1] = np.arange(n, dtype=np.int32) | (127 << 16)  # ragged_id k, buffer_len 127: rows 0..126 from page 0
    return state, ape, write_plans, x, plans, index


def _stage_torch(torch: Any, kv: Any, rows: Any, out_loc: Any, is_decode: bool) -> tuple:
    n, d = kv.shape
    if kv.dtype not in (torch.float32, torch.bfloat16):
        raise TypeError(f"kv: expected float32 or bfloat16 rows, got {kv.dtype}")
    for t, name in ((rows, "plan"), (out_loc, "out_loc")):
        if not isinstance(t, torch.Tensor) or t.device != kv.device:
            raise ValueError(f"{name}: on {getattr(t, 'device', None)}, kv on {kv.device}; one device per call")

    def make() -> tuple:
        state = torch.zeros((1, 128, 2 * d), dtype=kv.dtype, device=kv.device)
        state[..., d:] = _FILL_SCORE
        return (state, torch.zeros((128, d), dtype=torch.float32, device=kv.device),
                torch.zeros((0, 8), dtype=torch.uint8, device=kv.device))

    state, ape, write_plans = _one_hot_constants(("torch", str(kv.device), str(kv.dtype), d), make)
    x = kv.new_zeros((n, 2 * d))
    x[:, :d] = kv
    if rows.dtype not in (torch.uint8, torch.int32) or rows.dim() != 2 or rows.numel() * rows.element_size() != 16 * n:
        raise ValueError(f"plan: expected plan rows uint8 [n, 16] or int32 [n, 4], got {rows.dtype} "
                         f"{tuple(rows.shape)}")
    p32 = rows.contiguous().view(torch.int32).reshape(n, 4)
    seq = p32[:, 0].to(torch.int64) & 0xFFFFFFFF
    if is_decode:
        valid = (p32[:, 1] >= 0) & (p32[:, 2] >= 0) & (seq % 128 == 0) & (seq >= 128)
        index = out_loc
    else:
        valid = seq != 0xFFFFFFFF
        ragged = p32[:, 1].to(torch.int64) & 0xFFFF
        m = out_loc.shape[0]
        inside = valid & (ragged < m)
        if m:
            index = torch.where(inside, out_loc[ragged.clamp(max=m - 1)], torch.full_like(ragged, -1))
        else:
            index = torch.full_like(ragged, -1)
    plans = torch.zeros((n, 4), dtype=torch.int32, device=kv.device)
    plans[:, 0] = _u32_to_i32(torch, torch.where(valid, seq, torch.full_like(seq, 0xFFFFFFFF)))
    plans[:, 1] = torch.arange(n, dtype=torch.int32, device=kv.device) | (127 << 16)
    return state, ape, write_plans, x, plans, index


def _u32_to_i32(torch: Any, v: Any) -> Any:
    """int64 values in [0, 2^32) as the int32 of the same bits."""
    return torch.where(v >= 2**31, v - 2**32, v).to(torch.int32)


_NAMES = [("state", "kv_score_buffer"), ("input", "kv_score_input"), ("output", "out"),
          ("compress_plans", "plan.plan_c"), ("write_plans", "plan.plan_w"), ("plans", "plan.plan_d"),
          ("layout", "shared_state_layout"), ("output_index", "out_loc"), ("entry.norm_weight", "norm_weight"),
          ("entry.rope_table", "freq_cis"), ("entry.cache", "kvcache"), ("entry.page_bytes", "kvcache"),
          ("entry.entries_per_page", "page_size"), ("entry.eps", "norm_eps")]


def _sglang_names(message: str) -> str:
    """c128's argument names in a refusal -> SGLang's (the leading 'name:' and 'a, b, c:' lists)."""
    head, sep, rest = message.partition(": ")
    if not sep:
        return message
    names = []
    for part in head.split(", "):
        whole = dict(_NAMES).get(part)
        if whole is not None and "." in part:  # entry.norm_weight -> norm_weight
            names.append(whole)
            continue
        base, dot, field = part.partition(".")
        for c, s in _NAMES:
            if base == c:
                base = s
                break
        names.append(base + dot + field)
    return ", ".join(names) + ": " + rest.replace("but state is", "but kv_score_buffer is")


# ---- SGLang's planners: CompressorDecodePlan.generate / generate_legacy, CompressorPrefillPlan.generate / ------
# generate_legacy, with SGLang's argument lists and plan bytes, for ratio 128 (python/sglang/kernels/ops/attention/
# dsv4/compress.py and its c_plan.cuh: the semantics, re-derived here as array operations).
_W = 128
MTP_PAD = 4  #: tokens SGLang's planner always persists at a request's end (its kMaxMTPDraftTokens)
_INVALID_SEQ = -1  # 0xFFFFFFFF as int32: an invalid compress or write plan


class _Xp:
    """The few array operations the planners need, for NumPy arrays and PyTorch tensors alike."""

    def __init__(self, like: Any) -> None:
        torch = sys.modules.get("torch")
        self.torch = torch if torch is not None and isinstance(like, torch.Tensor) else None
        if self.torch is None:
            import numpy

            self.np = numpy
        self.device = like.device if self.torch is not None else None

    def i64(self, a: Any) -> Any:
        if self.torch is not None:
            if not isinstance(a, self.torch.Tensor):
                return self.torch.as_tensor(a, dtype=self.torch.int64, device=self.device)
            return a.to(device=self.device, dtype=self.torch.int64)
        return self.np.asarray(a).astype(self.np.int64)

    def arange(self, n: int) -> Any:
        return self.torch.arange(n, device=self.device) if self.torch is not None else self.np.arange(n)

    def cumsum(self, a: Any) -> Any:
        return self.torch.cumsum(a, 0) if self.torch is not None else self.np.cumsum(a)

    def searchsorted(self, sorted_: Any, values: Any) -> Any:
        if self.torch is not None:
            return self.torch.searchsorted(sorted_, values, right=True)
        return self.np.searchsorted(sorted_, values, side="right")

    def where(self, cond: Any, a: Any, b: Any) -> Any:
        if self.torch is not None:
            b = b if isinstance(b, self.torch.Tensor) else self.torch.full_like(a, b)
            return self.torch.where(cond, a, b)
        return self.np.where(cond, a, b)

    def clip(self, a: Any, lo: int, hi: int) -> Any:
        return a.clamp(lo, hi) if self.torch is not None else self.np.clip(a, lo, hi)

    def minimum(self, a: Any, b: Any) -> Any:
        return self.torch.minimum(a, b) if self.torch is not None else self.np.minimum(a, b)

    def stack(self, cols: list) -> Any:
        if self.torch is not None:
            return self.torch.stack(cols, 1)
        return self.np.stack(cols, 1)

    def full(self, shape: tuple, value: int) -> Any:
        if self.torch is not None:
            return self.torch.full(shape, value, dtype=self.torch.int32, device=self.device)
        return self.np.full(shape, value, self.np.int32)

    def int32_rows_as_u8(self, a: Any, width: int) -> Any:
        """int64 columns holding int32 values -> uint8 [n, width] rows of their little-endian bytes."""
        if self.torch is not None:
            a = a.to(self.torch.int32).contiguous()
            return a.view(self.torch.uint8).reshape(a.shape[0], width)
        a = self.np.ascontiguousarray(a.astype(self.np.int32))
        return a.view(self.np.uint8).reshape(a.shape[0], width)

    def count(self, mask: Any) -> int:
        return int(mask.sum())


def _to_i32(x: Any, v: Any) -> Any:
    """int64 values in [-2^31, 2^32) as the int64 of their int32 bit pattern."""
    return x.where(v >= 2 ** 31, v - 2 ** 32, v)


class _Loc:
    """SGLang's state row of (request, position): the paged planner's (req_to_token, then full_to_state, then
    the SWA page's ring), the request ring's (use_req_ring: rid * ring_size + pos % ring_size) or the legacy
    one (rid * 128 + pos % 128)."""

    def __init__(self, x: _Xp, mode: str, rid: Any, req_to_token: Any = None, full_to_state: Any = None,
                 swa_page_size: int = 0, ring_size: int = _W) -> None:
        self.x, self.mode, self.rid = x, mode, x.i64(rid)
        self.ring = ring_size
        if mode == "paged":
            self.r2t, self.f2s, self.sps = req_to_token, full_to_state, swa_page_size

    def __call__(self, b: Any, pos: Any) -> Any:
        x, rid = self.x, self.rid[b]
        if self.mode == "legacy":
            return rid * _W + pos % _W
        if self.mode == "ring":
            return rid * self.ring + pos % self.ring
        stride = self.r2t.shape[1]
        raw = x.i64(self.r2t[x.clip(rid, 0, self.r2t.shape[0] - 1), x.clip(pos, 0, stride - 1)])
        swa = x.i64(self.f2s[x.clip(raw, 0, self.f2s.shape[0] - 1)])
        return (swa // self.sps) * self.ring + swa % self.ring


def _ratio(compress_ratio: Any) -> None:
    if isinstance(compress_ratio, bool) or not isinstance(compress_ratio, int) or compress_ratio != _W:
        raise ValueError(f"compress_ratio: c128 plans ratio 128 only, got {compress_ratio!r} (ratio 4 stays with "
                         f"SGLang's planner)")


def _ring_args(swa_page_size: Any, ring_size: Any) -> Tuple[int, int]:
    sps, ring = _int(swa_page_size, "swa_page_size", _INT32), _int(ring_size, "ring_size", _INT32)
    if ring <= 0 or ring % _W or sps <= 0 or sps % ring:
        raise ValueError(f"ring_size, swa_page_size: expected ring_size a positive multiple of 128 dividing "
                         f"swa_page_size, got ring_size {ring}, swa_page_size {sps}")
    return sps, ring


def _decode_plan(x: _Xp, loc: _Loc, seq_lens: Any) -> Any:
    seq = x.i64(seq_lens)
    n = seq.shape[0]
    b = x.arange(n)
    pos1 = seq - 1
    pos0 = x.where(pos1 - _W > 0, pos1 - _W, 0)
    write = loc(b, pos1)
    rp0 = loc(b, pos0) // _W
    pad = seq <= 0  # c128's padding row (SGLang's planner would read req_to_token[rid][-1] here)
    cols = [x.where(pad, 0, seq), x.where(pad, -1, write), x.where(pad, -1, rp0), x.where(pad, -1, write // _W)]
    return x.int32_rows_as_u8(x.stack(cols), 16)


def _prefill_plans(x: _Xp, loc: _Loc, seq_lens: Any, extend_lens: Any, n: int, pad_to: Optional[int],
                   mtp_pad: int) -> Tuple[Any, Any]:
    """(plan_c, plan_w) as uint8 [rows, 16] / [rows, 8]: the plans of SGLang's planner in (request, position)
    order, rows = pad_to (sentinels after the plans) or the counts (pad_to None)."""
    seq, ext = x.i64(seq_lens), x.i64(extend_lens)
    batch = seq.shape[0]
    k = x.arange(n)
    ends = x.cumsum(ext)
    b = x.clip(x.searchsorted(ends, k), 0, max(batch - 1, 0))
    valid = k < ends[-1] if batch else k < 0
    j = k - (ends[b] - ext[b])
    pos = seq[b] - ext[b] + j
    compress = valid & ((pos + 1) % _W == 0)
    last = (seq // _W) * _W
    first_write = x.minimum(last, seq - mtp_pad)
    write = valid & (pos >= first_write[b])
    at = loc(b, pos)
    before = loc(b, x.where(pos - _W > 0, pos - _W, 0))
    buffer_len = _W - x.clip(j + 1, 0, _W)
    c_cols = [pos + 1, k + (buffer_len << 16), before // _W, at // _W]
    w_cols = [k, at]
    rows_c = rows_w = n if pad_to is None else pad_to
    if pad_to is None:
        rows_c, rows_w = x.count(compress), x.count(write)
    out = []
    for mask, cols, rows, sentinel in ((compress, c_cols, rows_c, [_INVALID_SEQ, 0, -1, -1]),
                                       (write, w_cols, rows_w, [_INVALID_SEQ, -1])):
        width = len(cols)
        ranks = x.cumsum(mask.long() if x.torch is not None else mask.astype(x.np.int64)) - 1
        dest = x.where(mask, ranks, max(n, rows))
        table = x.full((max(n, rows) + 1, width), 0)
        for c, v in enumerate(sentinel):
            table[:, c] = v
        values = x.stack([_to_i32(x, c) for c in cols])
        if x.torch is not None:
            table[dest] = values.to(x.torch.int32)
        else:
            table[dest] = values.astype(x.np.int32)
        out.append(x.int32_rows_as_u8(table[:rows], 4 * width))
    return out[0], out[1]


class CompressorDecodePlan(NamedTuple):
    """SGLang's CompressorDecodePlan for ratio 128, with SGLang's planners on c128's side (no JIT module):
    ``generate`` and ``generate_legacy`` take SGLang's arguments and give SGLang's plan bytes, on the
    metadata's device (PyTorch tensors, GPU or CPU, or NumPy arrays), with array operations only (no
    synchronisation: capturable in a CUDA graph). A request of seq_len 0 gets c128's padding plan."""

    compress_ratio: int
    plan_d: Any

    @property
    def is_decode(self) -> bool:
        return True

    def copy_(self, other: Any) -> None:
        if not getattr(other, "is_decode", False) or other.compress_ratio != self.compress_ratio:
            raise ValueError("other: expected a decode plan of the same compress_ratio")
        self.plan_d[...] = other.plan_d

    @staticmethod
    def generate(compress_ratio: int, req_pool_indices: Any, req_to_token: Any, full_to_state: Any, seq_lens: Any,
                 swa_page_size: int, ring_size: int, use_req_ring: bool = False) -> "CompressorDecodePlan":
        """The paged planner: a token's row is full_to_state[req_to_token[rid][pos]] in its SWA page's ring of
        ring_size rows, (swa // swa_page_size) * ring_size + swa % ring_size; with use_req_ring the request's
        own ring, rid * ring_size + pos % ring_size."""
        _ratio(compress_ratio)
        sps, ring = _ring_args(swa_page_size, ring_size)
        x = _Xp(req_pool_indices if use_req_ring else req_to_token)
        loc = _Loc(x, "ring" if use_req_ring else "paged", req_pool_indices, req_to_token, full_to_state, sps, ring)
        return CompressorDecodePlan(compress_ratio, _decode_plan(x, loc, seq_lens))

    @staticmethod
    def generate_legacy(compress_ratio: int, req_pool_indices: Any, seq_lens: Any) -> "CompressorDecodePlan":
        """The legacy layout: page = rid, row rid * 128 + pos % 128."""
        _ratio(compress_ratio)
        x = _Xp(req_pool_indices)
        return CompressorDecodePlan(compress_ratio, _decode_plan(x, _Loc(x, "legacy", req_pool_indices), seq_lens))


class CompressorPrefillPlan(NamedTuple):
    """SGLang's CompressorPrefillPlan for ratio 128 (see :class:`CompressorDecodePlan`). Plans come in
    (request, position) order (SGLang's GPU planner places them in any order); every window completed
    gets a compress plan, and a write plan goes to every token of the open window and to the last
    ``mtp_pad`` (SGLang's 4) tokens of each request. With seq_lens on the GPU (or use_cuda_graph) the
    arrays have num_q_tokens rows, sentinels after the plans, as SGLang's; with host metadata they are
    cut to the plans' counts. ``pin_buffer`` is None."""

    compress_ratio: int
    plan_c: Any
    plan_w: Any
    pin_buffer: Any = None

    @property
    def is_decode(self) -> bool:
        return False

    def copy_(self, other: Any) -> None:
        if getattr(other, "is_decode", True) or other.compress_ratio != self.compress_ratio:
            raise ValueError("other: expected a prefill plan of the same compress_ratio")
        self.plan_c[...] = other.plan_c
        self.plan_w[...] = other.plan_w

    @staticmethod
    def generate(compress_ratio: int, req_pool_indices: Any, seq_lens: Any, extend_lens: Any, req_to_token: Any,
                 full_to_state: Any, swa_page_size: int, ring_size: int, num_q_tokens: int,
                 use_cuda_graph: bool = False, use_req_ring: bool = False, *,
                 mtp_pad: int = MTP_PAD) -> "CompressorPrefillPlan":
        """SGLang's paged prefill planner (rows as in CompressorDecodePlan.generate). ``mtp_pad``
        (keyword, c128's): the tokens always persisted at a request's end, SGLang's 4; an engine that
        verifies more drafts passes its verify width."""
        _ratio(compress_ratio)
        sps, ring = _ring_args(swa_page_size, ring_size)
        x = _host_checked(seq_lens, extend_lens, num_q_tokens)
        out_x = _Xp(req_to_token)
        loc = _Loc(out_x, "ring" if use_req_ring else "paged", req_pool_indices, req_to_token, full_to_state, sps,
                   ring)
        return _prefill_generate(compress_ratio, x, out_x, loc, seq_lens, extend_lens, num_q_tokens, use_cuda_graph,
                                 mtp_pad)

    @staticmethod
    def generate_legacy(compress_ratio: int, req_pool_indices: Any, seq_lens: Any, extend_lens: Any,
                        num_q_tokens: int, device: Any, use_cuda_graph: bool = False, *,
                        mtp_pad: int = 0) -> "CompressorPrefillPlan":
        """SGLang's legacy prefill planner (page = rid; its write rule persists the open window only:
        mtp_pad 0). The plans go to ``device``."""
        _ratio(compress_ratio)
        x = _host_checked(seq_lens, extend_lens, num_q_tokens)
        torch = sys.modules.get("torch")
        rid = req_pool_indices
        if torch is not None and isinstance(rid, torch.Tensor) and device is not None:
            rid = rid.to(device)
        out_x = _Xp(rid)
        return _prefill_generate(compress_ratio, x, out_x, _Loc(out_x, "legacy", rid), seq_lens, extend_lens,
                                 num_q_tokens, use_cuda_graph, mtp_pad)


def _host_checked(seq_lens: Any, extend_lens: Any, num_q_tokens: Any) -> _Xp:
    """The planner's host checks (SGLang's: 0 < extend_len <= seq_len, the rows add up to num_q_tokens, at most
    65535 rows) where the lengths are in host memory; device lengths are not read (no synchronisation)."""
    n = _int(num_q_tokens, "num_q_tokens", _INT32)
    if not 0 <= n <= 65535:
        raise ValueError(f"num_q_tokens: {n}; a prefill call holds at most 65535 rows (ragged_id is a u16)")
    x = _Xp(seq_lens)
    if x.torch is None or x.device.type == "cpu":
        seq, ext = (x.i64(a) for a in (seq_lens, extend_lens))
        if seq.shape != ext.shape:
            raise ValueError(f"extend_lens: {tuple(ext.shape)} lengths, seq_lens {tuple(seq.shape)}")
        bad = (ext <= 0) | (ext > seq)
        if bool(bad.any()):
            raise ValueError("extend_lens: every request needs 0 < extend_len <= seq_len (SGLang's planner check)")
        if int(ext.sum()) != n:
            raise ValueError(f"num_q_tokens: {n}, but extend_lens add up to {int(ext.sum())}")
    return x


def _prefill_generate(ratio: int, x: _Xp, out_x: _Xp, loc: _Loc, seq_lens: Any, extend_lens: Any, n: int,
                      use_cuda_graph: bool, mtp_pad: int) -> CompressorPrefillPlan:
    pad = _int(mtp_pad, "mtp_pad", _INT32)
    on_device = x.torch is not None and x.device.type != "cpu"
    pad_to = n if (on_device or use_cuda_graph) else None
    if pad_to is None and out_x.torch is not None and out_x.device.type != "cpu":
        # host lengths, device tables: the counts from the host, the rows on the device (one copy of the lengths)
        seq_h, ext_h = x.i64(seq_lens), x.i64(extend_lens)
        hc, hw = _prefill_plans(x, _Loc(x, "legacy", x.arange(seq_h.shape[0])), seq_h, ext_h, n, None, pad)
        c, w = _prefill_plans(out_x, loc, seq_h, ext_h, n, n, pad)
        return CompressorPrefillPlan(ratio, c[:hc.shape[0]], w[:hw.shape[0]], None)
    c, w = _prefill_plans(out_x, loc, seq_lens, extend_lens, n, pad_to, pad)
    return CompressorPrefillPlan(ratio, c, w, None)
