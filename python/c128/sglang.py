"""SGLang drop-in: :func:`compress_forward` with the argument list and semantics of SGLang's
``compress_forward`` (python/sglang/kernels/ops/attention/dsv4/compress.py, formerly
jit_kernel/deepseek_v4) for compress ratio 128, not online; and DeepSeek-V4's compressor
post-process (RMSNorm + RoPE + FP8 + store into the FlashMLA cache, SGLang's
``compress_norm_rope_store``) fused into the same launch, :func:`compress_forward_norm_rope_store`.

An engine switches with one import::

    from c128.sglang import compress_forward

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
           "PrefillPlan"]

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
    Cache entries need thread-block clusters (sm_90 or newer): c128.Error
    C128_ERROR_UNSUPPORTED_DEVICE otherwise.

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
