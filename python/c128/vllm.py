"""vLLM drop-ins: the two calls vLLM's DeepSeek-V4 compressor makes per step for ratio 128, with vLLM's
argument lists, on c128's kernels in vLLM's state layout (DESIGN 5.9: blocks of 8 rows through the block
table, scores stored with ape added; or PR #58074's ring, one block of C rows per request):

- :func:`save_partial_states` (vllm/models/deepseek_v4/common/ops/save_partial_states.py): every token's
  row ``[kv | score + ape[pos % 128]]`` into state row ``slot_mapping[t]`` (slots < 0 skipped);
- :func:`compress_norm_rope_store_cutedsl` for ratio 128 (the C128 kernels of
  vllm/models/deepseek_v4/nvidia/ops/sparse_attn_compress_cutedsl.py): for every token that completes a
  window (``(pos + 1) % 128 == 0``, slot >= 0) the softmax pooling of the window's 128 state rows; with
  ``kv_cache`` and ``k_cache_metadata`` (vLLM's call) its DeepSeek-V4 cache entry (RMSNorm, RoPE, UE8M0
  FP8, FlashMLA's sparse layout) written by c128's fused launch at ``k_cache_metadata.slot_mapping[t]``;
  without them the fp32 pooled row into ``compressed_kv[t]``, other rows left as they are.

Engines are no dependency: the functions take plain tensors (PyTorch, CPU or CUDA; NumPy arrays run the host
runner), and :func:`install` is the ``vllm.general_plugins`` entry point (pyproject.toml) that routes vLLM's
compressor to them when vLLM is present.

What they refuse (ValueError naming the argument): ``compress_ratio`` other than 128, an fp32 state other than
``[blocks, block_size, 2 * state_width]``, ``block_size`` other than the state's, a ``state_width`` other than a
compiled head_dim, ``overlap`` (ratio 4's), ``use_fp4_cache``. NotImplementedError (nothing written): a
``kv_cache`` layout other than fp8_ds_mla's (``store_full_kv`` / ``store_full_fp8``, other geometry).
"""

from __future__ import annotations

import sys
from typing import Any, Optional, Tuple

from . import Entry, MAX_PREFILL_ROWS, StateLayout, _compiling, _int, _INT32, _ops, prefill, WINDOW
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
                and score.data_ptr() == kv.data_ptr() + d * kv.element_size() and kv.dtype == score.dtype
                and kv.untyped_storage().data_ptr() == score.untyped_storage().data_ptr()
                and (kv.storage_offset() + 2 * d * t) * kv.element_size() <= kv.untyped_storage().nbytes()):
            return kv.as_strided((t, 2 * d), (2 * d, 1))  # one buffer, both halves within its storage
        return x.torch.cat([kv, score], 1).contiguous()
    return x.np.ascontiguousarray(x.np.concatenate([kv, score], 1))


def _refuse(x: _Xp, mask: Any, message: str) -> None:
    """ValueError when any of mask holds: host memory at once; CUDA tensors by a device-side assertion
    (torch._assert_async: no host synchronisation, capturable), before anything is launched."""
    if x.torch is not None and x.device.type != "cpu":
        x.torch._assert_async(~mask.any(), message)
    elif bool(mask.any()):
        raise ValueError(message)


def _chunks(n: int, size: int = MAX_PREFILL_ROWS) -> list:
    """[lo, hi) ranges of at most size tokens covering 0 .. n (one, empty, for n = 0). The per-token plans
    of different tokens never touch the same row (save_partial_states writes each token's slot,
    compress_c128 reads the state and writes its own token's output), so chunks run in any order."""
    return [(lo, min(n, lo + size)) for lo in range(0, max(n, 1), size)]


def save_partial_states(kv: Any, score: Any, ape: Any, positions: Any, state_cache: Any, slot_mapping: Any,
                        block_size: int, state_width: int, compress_ratio: int, pdl_kwargs: Any = None) -> None:
    """vLLM's save_partial_states for ratio 128: state_cache[slot_mapping[t]] = [kv[t] | score[t] +
    ape[positions[t] % 128]] for every t with slot_mapping[t] >= 0 (one c128 write launch that reads
    slot_mapping and positions itself: c128_prefill_args.write_slots; the sum is the kernels' fp32 add, the bits
    vLLM's Triton kernel stores). kv, score: [T, state_width] fp32 (views of one [T, 2 * state_width] buffer
    are used in place); ape [128, state_width] fp32; positions, slot_mapping int64 [T]; state_cache fp32
    [blocks, block_size, 2 * state_width] (block_size 8..256, a power of two: vLLM's 8, or the ring's C).
    pdl_kwargs is accepted and ignored (c128 launches without PDL here, as vLLM does). A slot past the state is
    refused (CUDA tensors: a device-side assertion, torch._assert_async, with no host synchronisation)."""
    _ratio(compress_ratio)
    blocks, b, d = _state(state_cache, block_size, state_width)
    if _compiling():
        _ops().vllm_save_partial_states(kv, score, ape, positions, state_cache, slot_mapping, block_size, state_width,
                                        compress_ratio)
        return
    x = _Xp(state_cache)
    slots, pos = x.i64(slot_mapping), x.i64(positions)
    if x.torch is not None:
        slots, pos = slots.contiguous(), pos.contiguous()
    else:
        slots, pos = x.np.ascontiguousarray(slots), x.np.ascontiguousarray(pos)
    _refuse(x, slots >= blocks * b, f"slot_mapping: a slot past the state's {blocks * b} rows (blocks x block_size)")
    rows = _rows(kv, score, x)
    layout = StateLayout(block_rows=b, score_biased=True)
    empty_compress = x.int32_rows_as_u8(x.full((0, 4), 0), 16)
    for lo, hi in _chunks(slots.shape[0]):  # a launch addresses 65536 input rows
        prefill(state_cache, rows[lo:hi], ape, _out_none(x, d), empty_compress, None, state_layout=layout,
                write_slots=slots[lo:hi], write_positions=pos[lo:hi])


def _out_none(x: _Xp, d: int) -> Any:
    """A zero-row fp32 output (a write-only launch writes no output row)."""
    if x.torch is not None:
        return x.torch.empty((0, d), dtype=x.torch.float32, device=x.device)
    return x.np.empty((0, d), x.np.float32)


def compress_c128(state_cache: Any, token_to_req_indices: Any, positions: Any, slot_mapping: Any, block_table: Any,
                  compressed_kv: Any, *, block_size: int = 8, kv: Any = None, score: Any = None, ape: Any = None,
                  query_start_loc: Any = None, is_circular: bool = False, entry: Optional[Entry] = None,
                  entry_slots: Any = None) -> None:
    """The C128 pooling of vLLM's CuTe kernel: for every token t with (positions[t] + 1) % 128 == 0,
    slot_mapping[t] >= 0 and a request index, compressed_kv[t, :D] = the softmax pooling of positions
    positions[t] - 127 .. positions[t] of request token_to_req_indices[t]; no other row written, the state
    not written. With ``entry`` (a c128.Entry) and ``entry_slots`` (int64 [T]: vLLM's compressed-cache
    slot_mapping), the window's cache entry goes to entry slot entry_slots[t] instead (tokens with
    entry_slots[t] < 0 write nothing) and compressed_kv is not used (pass None).

    Main branch (``is_circular`` False): the window's rows are read from the state (save_partial_states
    has written them, scores with ape), rows block_table[req][pos // 8] * 8 + pos % 8. The ring (PR #58074,
    ``is_circular`` True, block_size = C): rows block_table[req][0] * C + pos % C; give ``kv``, ``score``
    and ``ape`` (the ring variant's extra arguments) and the rows of this chunk are read from them, the
    older ones from the ring (``query_start_loc`` tells where each request's rows begin: the ring holds
    its positions before them). Given kv / score without ``query_start_loc`` (main branch), rows 0..126
    come from the state and the window's last row from kv / score in place (ape added by the kernel: the
    bits the state holds). Without kv / score every window row comes from the state, the last one
    gathered: see the comment there."""
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
    if not is_circular:  # past the table's columns a position would wrap onto the request's first blocks
        _refuse(x, boundary & (pos >= b * stride), f"block_table: a window ends at a position past the "
                                                     f"{b * stride} tokens a row of it holds (block_size x columns)")
    index = None
    if entry is not None:
        es = x.i64(entry_slots)[:n]
        boundary = boundary & (es >= 0)
        index = x.where(boundary, es, -1)
    start = pos - (WINDOW - 1)
    logical_page = ((req << shift) | (start % (1 << shift))) // WINDOW
    buffer_len = k * 0 + (WINDOW - 1)
    if kv is not None and score is not None and ape is not None:
        rows, ape_t = _rows(kv, score, x), ape
        if query_start_loc is not None:  # rows of this chunk from the input, the earlier ones from the ring
            qs = x.i64(query_start_loc)
            first = pos - (k - qs[x.clip(req, 0, qs.shape[0] - 1)])
            buffer_len = x.clip(first - start, 0, WINDOW - 1)
    else:
        # The window's last row from the state, gathered: a c128 compress plan reads at most 127 rows from
        # the state (buffer_len is 0..127) and the last from an input row (ragged_id), and the state cannot
        # be that input in place (its blocks * B rows exceed the 65536 rows a u16 ragged_id addresses). The
        # gather is one row a token (the plans are per token, so shapes stay static for CUDA graphs); the
        # plugin avoids it by handing the pooling the kv / score that save_partial_states just wrote
        # (:func:`install`). Its score holds ape, so the input's ape is zero.
        flat = state_cache.reshape(-1, 2 * d)
        rows = flat[x.clip(slots, 0, flat.shape[0] - 1)]
        rows = rows.contiguous() if x.torch is not None else x.np.ascontiguousarray(rows)
        ape_t = _zero_ape(x, d)
    seq = x.where(boundary, pos + 1, -1)
    page = x.where(boundary, logical_page, -1)
    empty = x.int32_rows_as_u8(x.full((0, 2), 0), 8)
    layout = StateLayout(block_rows=b, block_table=table, row_shift=shift, score_biased=True)
    # Plans name their input row in a u16: a launch per 65409 tokens, whose input also holds the 127 rows
    # before them (a window of a ring's chunk reads its earlier rows from the input).
    for lo, hi in _chunks(n, MAX_PREFILL_ROWS - (WINDOW - 1)):
        base = max(0, lo - (WINDOW - 1))
        cols = [seq[lo:hi], k[lo:hi] - base + (buffer_len[lo:hi] << 16), page[lo:hi], page[lo:hi]]
        plans = x.int32_rows_as_u8(x.stack(cols), 16)
        if entry is not None:
            prefill(state_cache, rows[base:hi], ape_t, None, plans, empty, state_layout=layout,
                    output_index=index[lo:hi], entry=entry)
        else:
            prefill(state_cache, rows[base:hi], ape_t, compressed_kv[lo:hi], plans, empty, state_layout=layout)


_CONVERTED: dict = {}  # (what, id(source)) -> (source, version, converted): vLLM's tensors in c128's form


def _converted(what: str, src: Any, make: Any) -> Any:
    """make(src), remembered while src is the same tensor, unmodified (PyTorch's version counter): the
    layer's norm weight and the model's cos / sin cache are converted once, not every step."""
    version = getattr(src, "_version", None)
    key = (what, id(src))
    got = _CONVERTED.get(key)
    if got is not None and got[0] is src and version is not None and got[1] == version:
        return got[2]
    out = make(src)
    if version is not None:
        _CONVERTED[key] = (src, version, out)
    return out


def _rope_table(cs: Any) -> Any:
    """vLLM's cos_sin_cache [max_pos, 64] (cos of the 32 pairs, then their sin) as c128's float32
    [max_pos, 32, 2] (cos, sin) per pair."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(cs, torch.Tensor):
        return torch.stack((cs[:, :32], cs[:, 32:64]), -1).to(torch.float32).contiguous()
    import numpy

    return numpy.ascontiguousarray(numpy.stack((cs[:, :32], cs[:, 32:64]), -1).astype(numpy.float32))


def _f32(w: Any) -> Any:
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(w, torch.Tensor):
        return w.to(torch.float32).contiguous()
    import numpy

    return numpy.ascontiguousarray(numpy.asarray(w, numpy.float32))


def _cache_bytes(kv_cache: Any, page_bytes: int) -> Any:
    """vLLM's [pages, P, 584] uint8 cache, whose pages are page_bytes apart (584 P rounded up to a multiple
    of 576), as the 1-D byte range c128 writes (entry.page_bytes = page_bytes)."""
    pages = int(kv_cache.shape[0])
    nbytes = pages * page_bytes
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(kv_cache, torch.Tensor):
        have = kv_cache.untyped_storage().nbytes() - kv_cache.storage_offset() * kv_cache.element_size()
        if have < nbytes:
            raise NotImplementedError(f"kv_cache: {pages} pages {page_bytes} bytes apart need {nbytes} bytes, its "
                                      f"storage holds {have} after the cache's start (c128 addresses whole pages)")
        return kv_cache.as_strided((nbytes,), (1,))
    import numpy

    return numpy.lib.stride_tricks.as_strided(kv_cache, (nbytes,), (1,))


def _entry(kv_cache: Any, k_cache_metadata: Any, cos_sin_cache: Any, rms_norm_weight: Any, rms_norm_eps: Any,
           head_dim: int, rope_head_dim: int, quant_block: int, token_stride: int, scale_dim: int,
           store_full_kv: bool, store_full_fp8: bool) -> Tuple[Entry, Any]:
    """c128's Entry for vLLM's compressed KV cache, and the entry slot of each token; NotImplementedError
    naming what differs where c128's entry layout is not vLLM's (nothing written then)."""
    if kv_cache is None or k_cache_metadata is None:
        raise ValueError("kv_cache, k_cache_metadata: the cache entries need both (or neither: pooled rows)")
    if store_full_kv or store_full_fp8:
        raise NotImplementedError("store_full_kv / store_full_fp8: vLLM's plain full-cache rows (bf16, or fp8 with a "
                                  "per-tensor scale, no UE8M0 blocks) are not a c128 entry layout; c128 writes "
                                  "FlashMLA's sparse FP8 layout (cache_dtype fp8_ds_mla)")
    dtype = str(getattr(kv_cache, "dtype", ""))
    if not dtype.endswith("uint8"):
        raise NotImplementedError(f"kv_cache: dtype {dtype}; c128 writes vLLM's fp8_ds_mla cache (uint8 "
                                  f"[pages, P, 584])")
    got = (head_dim, rope_head_dim, quant_block, token_stride, scale_dim)
    if got != (512, 64, 64, 576, 8):
        raise NotImplementedError(f"head_dim, rope_head_dim, quant_block, token_stride, scale_dim = {got}: c128's "
                                  f"FP8 entry is (512, 64, 64, 576, 8) (448 e4m3 codes, 64 bf16 RoPE values, 7 "
                                  f"UE8M0 scales and a pad byte)")
    shape = tuple(kv_cache.shape)
    if len(shape) != 3 or shape[2] != token_stride + scale_dim:
        raise NotImplementedError(f"kv_cache: shape {shape}; c128 writes [pages, P, {token_stride + scale_dim}]")
    p = int(shape[1])
    if p < 1 or p & (p - 1):
        raise NotImplementedError(f"kv_cache: {p} entries a page; c128's entries_per_page is a power of two")
    strides = tuple(kv_cache.stride()) if callable(getattr(kv_cache, "stride", None)) else \
        tuple(s // kv_cache.itemsize for s in kv_cache.strides)
    page_bytes = int(strides[0])
    if strides[1:] != (shape[2], 1) or page_bytes < p * shape[2] or page_bytes % 4:
        raise NotImplementedError(f"kv_cache: strides {strides}; c128 writes pages of P entries of 584 bytes in a "
                                  f"row, pages a multiple of 4 bytes apart")
    if cos_sin_cache is None or rms_norm_weight is None:
        raise ValueError("cos_sin_cache, rms_norm_weight: the cache entries need both")
    if len(cos_sin_cache.shape) != 2 or cos_sin_cache.shape[1] != rope_head_dim:
        raise NotImplementedError(f"cos_sin_cache: shape {tuple(cos_sin_cache.shape)}; c128 reads vLLM's "
                                  f"[max_pos, 64] (cos, then sin of the 32 pairs)")
    slots = getattr(k_cache_metadata, "slot_mapping", None)
    if slots is None:
        raise ValueError("k_cache_metadata: no slot_mapping (vLLM's compressed-cache slot of each token)")
    entry = Entry(kind="dsv4_fp8", norm_weight=_converted("norm", rms_norm_weight, _f32),
                  rope_table=_converted("rope", cos_sin_cache, _rope_table), cache=_cache_bytes(kv_cache, page_bytes),
                  entries_per_page=p, eps=float(rms_norm_eps), page_bytes=page_bytes)
    return entry, slots


def compress_norm_rope_store_cutedsl(state_cache: Any = None, num_actual: Any = None, token_to_req_indices: Any = None,
                                     positions: Any = None, slot_mapping: Any = None, block_table: Any = None,
                                     block_size: int = 8, state_width: int = 512, cos_sin_cache: Any = None,
                                     kv_cache: Any = None, k_cache_metadata: Any = None, pdl_kwargs: Any = None,
                                     head_dim: int = 512, rope_head_dim: int = 64, compress_ratio: int = 128,
                                     overlap: bool = False, use_fp4_cache: bool = False, rms_norm_weight: Any = None,
                                     rms_norm_eps: float = 1e-6, quant_block: int = 64, token_stride: int = 576,
                                     scale_dim: int = 8, store_full_kv: bool = False, store_full_fp8: bool = False,
                                     fp8_scale: Any = None, *, compressed_kv: Any = None, kv: Any = None,
                                     score: Any = None, ape: Any = None, query_start_loc: Any = None,
                                     is_circular: bool = False, **more: Any) -> Any:
    """vLLM's compress_norm_rope_store_cutedsl keywords, ratio 128, on c128.

    With ``kv_cache`` and ``k_cache_metadata`` (vLLM's call): the windows' DeepSeek-V4 cache entries,
    written by c128's compress launch itself (``c128.Entry(kind="dsv4_fp8")``): entry slot
    ``k_cache_metadata.slot_mapping[t]`` (vLLM's compressed slot mapping, -1 where no window ends) of
    the cache ``kv_cache`` (uint8 [pages, P, 584], P = kv_cache.shape[1], pages kv_cache.stride(0) bytes
    apart: FlashMLA's sparse FP8 layout, vLLM's fp8_ds_mla: 448 e4m3 codes and 64 bf16 RoPE values an
    entry, then the page's 8 scale bytes an entry), RMSNorm with ``rms_norm_weight`` / ``rms_norm_eps``,
    RoPE at the window's first position from ``cos_sin_cache`` ([max_pos, 64], cos then sin, GPT-J
    pairs). Returns None, as vLLM's does. The layout is vLLM's; the rounding chain is c128's (DESIGN 11,
    DeepSeek-V4's reference: the pooled row and the normed row rounded to bf16 before RoPE and FP8),
    where vLLM's kernel keeps them in fp32, so a code or a RoPE value may differ by one rounding step.
    NotImplementedError (nothing written) for what c128 does not write: store_full_kv /
    store_full_fp8 (vLLM's plain full-cache layouts), another cache shape or head geometry.

    Without kv_cache: pools into ``compressed_kv`` (fp32 [>= T, head_dim]; c128's keyword: vLLM's kernel
    allocates it, pass the scratch to keep the hot path free of allocations) and returns it. The ring
    variant's ``kv``, ``score``, ``ape``, ``query_start_loc``, ``is_circular`` are taken."""
    _ratio(compress_ratio)
    if overlap:
        raise ValueError("overlap: the overlapping window is ratio 4's; c128 implements ratio 128")
    if use_fp4_cache:
        raise ValueError("use_fp4_cache: the FP4 cache is the indexer's (head 128), which c128 does not write")
    _state(state_cache, block_size, state_width)
    if kv_cache is not None or k_cache_metadata is not None:
        if compressed_kv is not None:
            raise ValueError("compressed_kv: a call with kv_cache writes cache entries, not pooled rows")
        entry, entry_slots = _entry(kv_cache, k_cache_metadata, cos_sin_cache, rms_norm_weight, rms_norm_eps,
                                    head_dim, rope_head_dim, quant_block, token_stride, scale_dim, store_full_kv,
                                    store_full_fp8)
        if _compiling():
            raise NotImplementedError("kv_cache under torch.compile: c128.vllm's cache-entry path has no operator "
                                      "(vLLM does not compile the DeepSeek-V4 model)")
        compress_c128(state_cache, token_to_req_indices, positions, slot_mapping, block_table, None,
                      block_size=block_size, kv=kv, score=score, ape=ape, query_start_loc=query_start_loc,
                      is_circular=is_circular, entry=entry, entry_slots=entry_slots)
        return None
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


# Where vLLM's DeepSeek-V4 compressor finds the two functions at call time (vllm-project/vllm):
# compressor.py imports save_partial_states at module level (``from
# vllm.models.deepseek_v4.common.ops.save_partial_states import save_partial_states``), so the
# compressor module's own name is what forward calls; compress_norm_rope_store_cutedsl is imported
# inside DeepseekCompressor.forward (``from .nvidia.ops.sparse_attn_compress_cutedsl import
# compress_norm_rope_store_cutedsl``), which reads that submodule's attribute on every call. The
# package nvidia.ops re-exports it (its __init__), patched too where it holds the same function.
_SAVE_MODULE = "vllm.models.deepseek_v4.common.ops.save_partial_states"
_COMPRESSOR_MODULE = "vllm.models.deepseek_v4.compressor"
_CUTEDSL_MODULE = "vllm.models.deepseek_v4.nvidia.ops.sparse_attn_compress_cutedsl"
_CUTEDSL_PACKAGE = "vllm.models.deepseek_v4.nvidia.ops"

# The last routed save_partial_states' (state_cache, positions, slot_mapping, kv, score, ape): the
# compressor's next call, the pooling of the same layer and step, reads the window's last row from kv /
# score in place instead of gathering it from the state (compress_c128). Taken (cleared) by that call.
_SAVED: list = [None]


def _import(name: str, what: str, problems: list) -> Any:
    import importlib

    try:
        return importlib.import_module(name)
    except Exception as e:  # ImportError, or a kernel module failing at import (no cutlass / CuTe DSL)
        problems.append(f"{what}: module {name} did not import ({type(e).__name__}: {e})")
        return None


def install() -> None:
    """The ``vllm.general_plugins`` entry point: routes vLLM's DeepSeek-V4 ratio-128 state writes and
    pooling to c128. It replaces ``save_partial_states`` (for ratio 128; other ratios go to vLLM's) in
    its module and in the compressor module (which imported it by name), and
    ``compress_norm_rope_store_cutedsl`` in ``vllm.models.deepseek_v4.nvidia.ops.sparse_attn_compress_cutedsl``
    (the module the compressor's forward imports it from at call time; and in the package ``nvidia.ops``,
    which re-exports it), so that ratio 128 with vLLM's fp8_ds_mla cache runs on c128 end to end:
    pooling, norm, RoPE, FP8 and the cache write in one launch. Ratio 4, the indexer (head 128) and what
    c128 does not write (NotImplementedError: vLLM's plain full-cache layouts) stay vLLM's.

    Does nothing where vLLM is not installed, or when C128_VLLM=0. Where vLLM is installed but a module
    or function is missing (another vLLM layout, a failed kernel import), a RuntimeWarning names what is
    not routed to c128; the rest is still routed."""
    import importlib.util
    import os
    import warnings

    if os.environ.get("C128_VLLM", "1") == "0":
        return
    if "vllm" not in sys.modules:
        try:
            if importlib.util.find_spec("vllm") is None:
                return
        except (ImportError, ValueError):
            return
    problems: list = []
    save_mod = _import(_SAVE_MODULE, "save_partial_states", problems)
    comp_mod = _import(_COMPRESSOR_MODULE, "save_partial_states", problems)
    vllm_save = getattr(save_mod, "save_partial_states", None) if save_mod is not None else None
    if save_mod is not None and vllm_save is None:
        problems.append(f"save_partial_states: {_SAVE_MODULE} has no save_partial_states")
    if vllm_save is not None and getattr(vllm_save, "_c128", False):
        vllm_save = None  # installed already
    elif vllm_save is not None:
        def save(kv, score, ape, positions, state_cache, slot_mapping, block_size, state_width, compress_ratio,
                 pdl_kwargs=None, **kw):
            if compress_ratio != WINDOW or kw:
                return vllm_save(kv, score, ape, positions, state_cache, slot_mapping, block_size, state_width,
                                 compress_ratio, pdl_kwargs, **kw)
            save_partial_states(kv, score, ape, positions, state_cache, slot_mapping, block_size, state_width,
                                compress_ratio, pdl_kwargs)
            _SAVED[0] = (state_cache, positions, slot_mapping, kv, score, ape)

        save._c128 = True
        save.__wrapped__ = vllm_save
        save_mod.save_partial_states = save
        if comp_mod is not None:
            if getattr(comp_mod, "save_partial_states", None) is vllm_save:
                comp_mod.save_partial_states = save
            else:
                problems.append(f"save_partial_states: {_COMPRESSOR_MODULE} does not hold vLLM's function by that "
                                f"name (the compressor may call it from elsewhere)")

    cute_mod = _import(_CUTEDSL_MODULE, "compress_norm_rope_store_cutedsl", problems)
    store = getattr(cute_mod, "compress_norm_rope_store_cutedsl", None) if cute_mod is not None else None
    if cute_mod is not None and store is None:
        problems.append(f"compress_norm_rope_store_cutedsl: {_CUTEDSL_MODULE} has no compress_norm_rope_store_cutedsl")
    if store is not None and not getattr(store, "_c128", False):
        routed = _router(store)
        cute_mod.compress_norm_rope_store_cutedsl = routed
        package = sys.modules.get(_CUTEDSL_PACKAGE)
        if package is not None and getattr(package, "compress_norm_rope_store_cutedsl", None) is store:
            package.compress_norm_rope_store_cutedsl = routed
        if comp_mod is not None and getattr(comp_mod, "compress_norm_rope_store_cutedsl", None) is store:
            comp_mod.compress_norm_rope_store_cutedsl = routed  # a layout importing it at module level
    if problems:
        warnings.warn("c128.vllm.install: not routed to c128 (vLLM's own kernels run there): " + "; ".join(problems),
                      RuntimeWarning, stacklevel=2)


def _router(store: Any) -> Any:
    """vLLM's compress_norm_rope_store_cutedsl, ratio 128 going to c128's."""
    import warnings

    declined: set = set()

    def routed(*args, **kw):
        saved, _SAVED[0] = _SAVED[0], None
        if (args or kw.get("compress_ratio") != WINDOW or kw.get("head_dim", 512) != 512 or kw.get("overlap")
                or kw.get("use_fp4_cache")):
            return store(*args, **kw)
        ours = kw
        if (saved is not None and kw.get("kv") is None and kw.get("query_start_loc") is None
                and not kw.get("is_circular") and saved[0] is kw.get("state_cache")
                and saved[1] is kw.get("positions") and saved[2] is kw.get("slot_mapping")):
            ours = dict(kw, kv=saved[3], score=saved[4], ape=saved[5])
        try:
            return compress_norm_rope_store_cutedsl(**ours)
        except NotImplementedError as e:  # raised before anything is written
            if str(e) not in declined:
                declined.add(str(e))
                warnings.warn(f"c128.vllm: compress_norm_rope_store_cutedsl stays vLLM's here: {e}", RuntimeWarning,
                              stacklevel=2)
            return store(**kw)

    routed._c128 = True
    routed.__wrapped__ = store
    return routed
