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
  planner on ``kv_lens`` / ``cu_seq_lens`` and one prefill launch per 65536 rows of kv_score (a larger batch
  is split there, inside a request where it must: :data:`_ROWS`). cu_seq_lens[0] may be past 0 (TensorRT-LLM's
  generation call passes all of kv_score with ``cu_seq_lens[num_contexts:]``).
- :func:`compressor_postprocess_scatter`: refused. c128 writes DeepSeek-V4's cache entries only inside its
  compress launch (DESIGN 11), in FlashMLA's layout; TensorRT-LLM's own post-process (its cache, scale
  types and Hadamard rotation) stays TensorRT-LLM's kernel.

Errors: an eager call checks what the arguments imply (``next_n`` each request's new-token count,
``start_pos[b] == kv_lens[b] - new tokens``, ``max_outputs`` at least each request's new windows,
``cu_seq_lens`` non-decreasing within kv_score, ``cu_kv_comp`` rows within ``output``, ``kv_lens`` within
the block table's ``page_size`` x columns (past it a position would wrap onto the row's first blocks);
ValueError naming the argument) and raises :class:`c128.Error` for a batch the planner refuses (a block
outside the planes, ...), with nothing written. Host arrays are checked before anything runs; CUDA tensors
cost one synchronisation per call (the status is read after the launch, which writes nothing for such a
batch). While a CUDA graph captures nothing is checked or read back: the status tensor is the only report
(:data:`captured_statuses`, :func:`last_status`).

Tensors: PyTorch (CPU: the host runner; CUDA: the kernels on the current stream) or NumPy arrays;
``kv_score`` [T, 2 * head_dim] f32 or bf16; ``ape`` [128, head_dim] f32; ``output`` f32 or bf16; int32
metadata. Refused (ValueError naming the argument): ``compress_ratio`` other than 128, planes that are not
``[pages, page_size, head_dim]``.
"""

from __future__ import annotations

from typing import Any, List, Optional

from . import (MAX_PREFILL_ROWS, Error, Ring, StateLayout, WINDOW, _INT32, _compiling, _int, _ops, plan_prefill_device,
               plan_workspace_size, prefill)
from .sglang import _Xp

__all__ = ["compressor_paged_kv_compress", "compressor_prefill_reduction", "compressor_postprocess_scatter",
           "captured_statuses", "last_status"]


def _check(paged_kv: Any, paged_score: Any, page_size: Any, head_dim: Any, compress_ratio: Any) -> None:
    if isinstance(compress_ratio, bool) or compress_ratio != WINDOW:
        raise ValueError(f"compress_ratio: c128 implements ratio 128 only, got {compress_ratio!r}")
    p, d = _int(page_size, "page_size", _INT32), _int(head_dim, "head_dim", _INT32)
    for name, t in (("paged_kv", paged_kv), ("paged_score", paged_score)):
        shape = tuple(t.shape)
        if len(shape) != 3 or shape[1] != p or shape[2] != d:
            raise ValueError(f"{name}: expected [pages, page_size = {p}, head_dim = {d}], got {shape}")


_ROWS = MAX_PREFILL_ROWS
"""Input rows of one planner call and one prefill launch: 65536 (C128_MAX_PREFILL_ROWS in c128.cuh), because a
compress plan names the input row of its window's last token in a u16 (c128_compress_plan.ragged_id): the
planner refuses a batch of more rows (C128_ERROR_TOO_MANY_ROWS), plan arrays of more entries
(C128_ERROR_TOO_MANY_PLANS), and so does the launch. TensorRT-LLM takes any context batch in one call, so
:func:`_run` splits a batch into chunks of at most this many rows of kv_score, cutting requests where the
chunks end: every new token is persisted (write_all), so a request's later chunk reads the rows before it
from the planes the earlier chunk wrote (its prefix grows by the earlier chunk's rows, positions continue),
and each request's writes and windows are independent of the others'."""

captured_statuses: List[Any] = []
"""The status tensors (int32 [chunks + 1]) of the calls made while a CUDA graph captured, in call order.
A captured call cannot raise for a batch the planner refuses: its plans are sentinels (nothing is written
and ``output`` keeps what it held) and the refusal is only in this tensor, rewritten at each replay: element
c holds chunk c's c128_status (0: C128_SUCCESS; see :class:`c128.Status`), the last element is 0 (the
argument checks of an eager call do not run in a capture). An engine reads them after a replay (or checks
``torch.cat(captured_statuses).any()``) and clears the list when it drops the graph."""

_last: List[Any] = [None]


def last_status() -> Any:
    """The status tensor of the latest call (int32 [chunks + 1], the array type of the call's tensors), as
    :data:`captured_statuses` describes it; None before any call."""
    return _last[0]


def _lengths(n: int, **arrays: Any) -> None:
    """The engine's arrays hold at least the entries a batch of n requests reads (a shape check: no sync)."""
    for name, (a, need) in arrays.items():
        have = int(a.shape[0]) if len(tuple(a.shape)) else 0
        if have < need:
            raise ValueError(f"{name}: {have} entries, but batch_size {n} needs {need}")


def _rules(q: Any, s: Any, comp: Any, rows: int, out_rows: int, next_n: Optional[int], start_pos: Any,
           max_outputs: Optional[int], positions: int, new_tokens: Any = None) -> list:
    """(mask over requests, message of request b): what the engine's arrays imply and must agree on, as
    NumPy or PyTorch operations alike (q: cu_seq_lens [n + 1], s: kv_lens [n], comp: cu_kv_comp [n + 1];
    positions: the tokens a block table's row holds, page_size * its columns; new_tokens: a ragged
    generation batch's new_tokens_per_seq, next_n then being their maximum)."""
    ext = q[1:] - q[:-1]
    start = s - ext
    win = s // WINDOW - start // WINDOW
    rules = [(q[:-1] < 0, lambda b: f"cu_seq_lens: cu_seq_lens[{b}] = {int(q[b])} is negative"),
             # past the table a position would wrap onto the row's first blocks (row_shift bits of it)
             (s > positions, lambda b: f"kv_lens: kv_lens[{b}] = {int(s[b])}, but block_table_kv holds "
                                       f"{positions} tokens a request (page_size x its columns)"),
             ((win > 0) & (comp[:-1] < 0), lambda b: f"cu_kv_comp: cu_kv_comp[{b}] = {int(comp[b])} is negative"),
             (ext < 0, lambda b: f"cu_seq_lens: cu_seq_lens[{b + 1}] = {int(q[b + 1])} < cu_seq_lens[{b}] = "
                                 f"{int(q[b])}"),
             (start < 0, lambda b: f"kv_lens: kv_lens[{b}] = {int(s[b])}, fewer than request {b}'s {int(ext[b])} new "
                                   f"tokens (cu_seq_lens[{b + 1}] - cu_seq_lens[{b}])"),
             (q[1:] > rows, lambda b: f"cu_seq_lens: cu_seq_lens[{b + 1}] = {int(q[b + 1])}, but kv_score has "
                                      f"{rows} rows"),
             ((win > 0) & (comp[:-1] + win > out_rows),
              lambda b: f"cu_kv_comp: request {b} completes {int(win[b])} windows from output row "
                        f"{int(comp[b])}, but output has {out_rows} rows")]
    if next_n is not None and new_tokens is None:
        rules.append((ext != next_n, lambda b: f"next_n: {next_n}, but request {b} has {int(ext[b])} new tokens "
                                               f"(cu_seq_lens[{b + 1}] - cu_seq_lens[{b}])"))
    if new_tokens is not None:
        rules.append((ext != new_tokens, lambda b: f"new_tokens_per_seq: new_tokens_per_seq[{b}] = "
                                                   f"{int(new_tokens[b])}, but request {b} has {int(ext[b])} new "
                                                   f"tokens (cu_seq_lens[{b + 1}] - cu_seq_lens[{b}])"))
        rules.append((new_tokens > next_n, lambda b: f"new_tokens_per_seq: new_tokens_per_seq[{b}] = "
                                                     f"{int(new_tokens[b])}, more than next_n = {next_n}"))
    if start_pos is not None:
        rules.append((start_pos != start, lambda b: f"start_pos: start_pos[{b}] = {int(start_pos[b])}, but kv_lens"
                                                    f"[{b}] - new tokens = {int(s[b])} - {int(ext[b])} = "
                                                    f"{int(start[b])}"))
    if max_outputs is not None:
        rules.append((win > max_outputs, lambda b: f"max_outputs: {max_outputs}, but request {b} completes "
                                                   f"{int(win[b])} windows"))
    return rules


def _validate(q: Any, s: Any, comp: Any, rows: int, out_rows: int, next_n: Optional[int], start_pos: Any,
              max_outputs: Optional[int], positions: int, new_tokens: Any = None) -> None:
    """ValueError naming the first argument that disagrees (host arrays)."""
    import numpy as np

    arrays = [np.asarray(a, dtype=np.int64) if a is not None else None for a in (q, s, comp, start_pos, new_tokens)]
    for mask, message in _rules(*arrays[:3], rows, out_rows, next_n, arrays[3], max_outputs, positions, arrays[4]):
        hit = np.flatnonzero(mask)
        if hit.size:
            raise ValueError(message(int(hit[0])))


def _diagnosis(q: Any, s: Any, tables: Any, pages: int, page_size: int) -> Optional[str]:
    """What in the engine's arrays a refused batch's planner found, in TensorRT-LLM's names (host arrays,
    read only after a refusal): a request without new tokens, or a block table entry, among the blocks a
    request writes (every new token) or reads (its first completed window), that is negative or past the
    planes' pages. None when none of these holds."""
    import numpy as np

    q, s = np.asarray(q, np.int64), np.asarray(s, np.int64)
    ext = q[1:] - q[:-1]
    start = s - ext
    for b in range(len(s)):
        if ext[b] == 0 and s[b] > 0:
            return (f"request {b} has no new tokens (cu_seq_lens[{b + 1}] = cu_seq_lens[{b}]) but kv_lens[{b}] = "
                    f"{s[b]}: a batch names only requests with new tokens")
    for b in range(len(s)):
        if ext[b] <= 0:
            continue
        first = start[b] // WINDOW * WINDOW if s[b] // WINDOW > start[b] // WINDOW else start[b]
        for name, table in tables:
            row = np.asarray(table[b])
            for column in range(int(first // page_size), int((s[b] - 1) // page_size) + 1):  # kv_lens <= its columns
                block = int(row[column])
                if not 0 <= block < pages:
                    return (f"{name}[{b}][{column}] = {block}, but request {b} uses that block (positions "
                            f"{column * page_size}..{(column + 1) * page_size - 1}) and the planes hold {pages} pages")
    return None


def _run(kv_score: Any, ape: Any, paged_kv: Any, paged_score: Any, block_table_kv: Any, block_table_score: Any,
         output: Any, kv_lens: Any, cu_seq_lens: Any, cu_kv_comp: Any, batch_size: int, page_size: int, *,
         next_n: Optional[int] = None, start_pos: Any = None, max_outputs: Optional[int] = None,
         new_tokens: Any = None) -> Any:
    """The writes and the windows of one batch: c128's device planner on the engine's arrays (write_all:
    every new token), then the prefill launch with each window's output row from cu_kv_comp; in chunks of
    at most 65536 rows (:data:`_ROWS`). Returns the status tensor (:func:`last_status`).

    Eager calls check the arguments against each other (:func:`_rules`) and raise ValueError, and raise
    c128.Error for a batch the planner refuses: host arrays before anything is written; CUDA tensors with
    one synchronisation after the launch (the arguments' flag and the planner's status read together; a
    refused or flagged batch's plans are sentinels, so the launch writes nothing), or, for a batch of
    several chunks, after the planners and before any launch. While a CUDA graph captures, nothing is read
    back: the status tensor is the only report (:data:`captured_statuses`)."""
    x = _Xp(kv_score)
    n = _int(batch_size, "batch_size", (0, _INT32[1]))
    rows = int(kv_score.shape[0])
    arrays = dict(kv_lens=(kv_lens, n), cu_seq_lens=(cu_seq_lens, n + 1), cu_kv_comp=(cu_kv_comp, n + 1),
                  block_table_kv=(block_table_kv, n), block_table_score=(block_table_score, n))
    if start_pos is not None:
        arrays["start_pos"] = (start_pos, n)
    if new_tokens is not None:
        arrays["new_tokens_per_seq"] = (new_tokens, n)
    _lengths(n, **arrays)
    host = x.torch is None or x.device.type != "cuda"
    capturing = not host and bool(x.torch.cuda.is_current_stream_capturing())
    if n == 0:  # no request owns a row of kv_score: nothing to write or pool
        status = x.torch.zeros(2, dtype=x.torch.int32, device=x.device) if x.torch is not None else \
            x.np.zeros(2, x.np.int32)
        _last[0] = status
        if capturing:
            captured_statuses.append(status)
        return status
    stride = int(block_table_kv.shape[1])
    shift = max(7, (page_size * max(stride, 1) - 1).bit_length())
    layout = StateLayout(block_rows=page_size, block_table=block_table_kv[:n], row_shift=shift,
                         score_plane=paged_score, score_block_table=block_table_score[:n], score_biased=True)
    ring = Ring(state_pages=int(paged_kv.shape[0]), write_all=True, state_layout=layout)
    i32 = (lambda a: a.to(x.torch.int32).contiguous()) if x.torch is not None else \
        (lambda a: x.np.ascontiguousarray(a, dtype=x.np.int32))
    seq, qs, comp32 = i32(kv_lens[:n]), i32(cu_seq_lens[:n + 1]), i32(cu_kv_comp[:n])
    chunks = max(1, -(-rows // _ROWS))
    out_rows = int(output.shape[0])
    positions = page_size * stride  # a request's tokens the block table holds
    q = s = comp = sp = nt = None
    if host or not capturing or chunks > 1:  # the arguments' rules (a captured step of one chunk needs none)
        q, s, comp = x.i64(qs), x.i64(seq), x.i64(cu_kv_comp[:n + 1])
        sp = x.i64(start_pos[:n]) if start_pos is not None else None
        nt = x.i64(new_tokens[:n]) if new_tokens is not None else None
    checks = (next_n, sp, max_outputs, positions, nt)
    flag = None
    if host:
        _validate(q, s, comp, rows, out_rows, *checks)
    elif not capturing:  # on the device: a flag read with the status, and a poisoned batch meanwhile
        for mask, _ in _rules(q, s, comp, rows, out_rows, *checks):
            flag = mask.any() if flag is None else flag | mask.any()
    if x.torch is not None:
        t, dev = x.torch, x.device
        compress = t.empty((rows, 16), dtype=t.uint8, device=dev)
        write = t.empty((rows, 8), dtype=t.uint8, device=dev)
        index = t.empty(rows, dtype=t.int64, device=dev)  # the planner writes the windows' rows, the launch reads them
        status = t.zeros(chunks + 1, dtype=t.int32, device=dev)
        ws = t.empty(plan_workspace_size(n), dtype=t.uint8, device=dev)
    else:
        compress, write = x.np.empty((rows, 16), x.np.uint8), x.np.empty((rows, 8), x.np.uint8)
        index = x.np.full(rows, -1, x.np.int64)
        status, ws = x.np.zeros(chunks + 1, x.np.int32), x.np.empty(plan_workspace_size(n), x.np.uint8)
    if flag is not None:
        status[chunks:] = flag.to(x.torch.int32)
    _last[0] = status
    if capturing:
        captured_statuses.append(status)
    plans = []
    for c in range(chunks):
        lo, hi = c * _ROWS, min(rows, (c + 1) * _ROWS)
        if chunks == 1:  # the planner reads the rows from cu_seq_lens as they are (its first entry may be past 0)
            seq_c, qs_c, comp_c = seq, qs, comp32
        else:  # request b's rows in [lo, hi), counted from lo: absent (seq 0, no new rows) where none
            ext, start = q[1:] - q[:-1], s - (q[1:] - q[:-1])
            qa = x.clip(q, lo, hi)
            seq_c = i32(x.where(qa[1:] > qa[:-1], start + qa[1:] - q[:-1], x.where(ext == 0, s, 0 * s)))
            qs_c = i32(qa - lo)
            # request b's first window in the chunk: its windows completed before lo come first
            comp_c = i32(comp[:n] + (start + qa[:-1] - q[:-1]) // WINDOW - start // WINDOW)
        if flag is not None:  # a flagged batch is refused by the planner (NEGATIVE_SIZE): nothing written
            seq_c = i32(x.torch.where(flag, -1, seq_c))
        plan_prefill_device(ring, None, compress[lo:hi], write[lo:hi], None, status[c:c + 1], ws, seq_lens=seq_c,
                            query_start=qs_c, output_first=comp_c, output_index=index[lo:hi])
        # the planner packs a chunk's windows first: at most one a request more than its rows / 128
        plans.append((lo, hi, min(hi - lo, (hi - lo) // WINDOW + n)))

    def report() -> None:
        st = [int(v) for v in status.tolist()]
        if st[chunks]:  # the device flag: the host check names the argument
            _validate(*(a.cpu() if a is not None else None for a in (q, s, comp)), rows, out_rows, next_n,
                      sp.cpu() if sp is not None else None, max_outputs, positions,
                      nt.cpu() if nt is not None else None)
            raise ValueError("kv_lens, cu_seq_lens, cu_kv_comp: the arguments disagree")
        bad = [(i, v) for i, v in enumerate(st[:chunks]) if v]
        if bad:
            i, v = bad[0]
            where = f"rows {i * _ROWS}..{min(rows, (i + 1) * _ROWS) - 1} of {rows}: " if chunks > 1 else ""
            tables = [(name, t.cpu() if not host else t) for name, t in
                      (("block_table_kv", block_table_kv[:n]), ("block_table_score", block_table_score[:n]))]
            found = _diagnosis(*(a.cpu() if not host else a for a in (q, s)), tables, int(paged_kv.shape[0]),
                               page_size)
            raise Error(v, "c128_plan_prefill_device" + ("_host" if host else ""),
                        f"{where}the TensorRT-LLM batch of {n} requests is refused"
                        + (f": {found}" if found else "") + "; nothing was written")

    if host or (chunks > 1 and not capturing):
        report()
    for lo, hi, windows in plans:
        prefill(paged_kv, kv_score[lo:hi], ape, output, compress[lo:lo + windows], write[lo:hi], state_layout=layout,
                output_index=index[lo:hi])
    if not host and chunks == 1 and not capturing:
        report()
    return status


def compressor_paged_kv_compress(kv_score: Any, ape: Any, paged_kv: Any, paged_score: Any, block_table_kv: Any,
                                 block_table_score: Any, output: Any, kv_lens: Any, cu_seq_lens: Any, cu_kv_comp: Any,
                                 batch_size: int, page_size: int, head_dim: int, compress_ratio: int,
                                 next_n: int, new_tokens_per_seq: Any = None) -> None:
    """trtllm::compressor_paged_kv_compress for ratio 128: a generation batch of next_n tokens per request
    (request b's at kv_lens[b] - next_n .. kv_lens[b] - 1, rows cu_seq_lens[b] ..), or, with
    ``new_tokens_per_seq`` (int32 [batch_size], newer TensorRT-LLM's ragged batches), new_tokens_per_seq[b]
    tokens, next_n their maximum. An eager call checks that each request has that many new rows in
    cu_seq_lens, and none more than next_n (ValueError); a captured one does not."""
    _check(paged_kv, paged_score, page_size, head_dim, compress_ratio)
    if _compiling():
        _ops().compressor_paged_kv_compress(kv_score, ape, paged_kv, paged_score, block_table_kv, block_table_score,
                                            output, kv_lens, cu_seq_lens, cu_kv_comp, batch_size, page_size, head_dim,
                                            compress_ratio, next_n, new_tokens_per_seq)
        return
    _run(kv_score, ape, paged_kv, paged_score, block_table_kv, block_table_score, output, kv_lens, cu_seq_lens,
         cu_kv_comp, batch_size, page_size, next_n=_int(next_n, "next_n", (1, _INT32[1])),
         new_tokens=new_tokens_per_seq)


def compressor_prefill_reduction(kv_score: Any, ape: Any, paged_kv: Any, paged_score: Any, block_table_kv: Any,
                                 block_table_score: Any, output: Any, kv_lens: Any, start_pos: Any, cu_seq_lens: Any,
                                 cu_kv_comp: Any, batch_size: int, page_size: int, head_dim: int, compress_ratio: int,
                                 max_outputs: int) -> None:
    """trtllm::compressor_prefill_reduction for ratio 128: a context batch (request b's new tokens at
    start_pos[b] .. kv_lens[b] - 1). ``start_pos`` and ``max_outputs`` (the most windows a request completes)
    are implied by kv_lens and cu_seq_lens: an eager call checks them (ValueError), a captured one ignores them."""
    _check(paged_kv, paged_score, page_size, head_dim, compress_ratio)
    if _compiling():
        _ops().compressor_prefill_reduction(kv_score, ape, paged_kv, paged_score, block_table_kv, block_table_score,
                                            output, kv_lens, start_pos, cu_seq_lens, cu_kv_comp, batch_size,
                                            page_size, head_dim, compress_ratio, max_outputs)
        return
    _run(kv_score, ape, paged_kv, paged_score, block_table_kv, block_table_score, output, kv_lens, cu_seq_lens,
         cu_kv_comp, batch_size, page_size, start_pos=start_pos,
         max_outputs=_int(max_outputs, "max_outputs", (0, _INT32[1])))


def compressor_postprocess_scatter(*args: Any, **kwargs: Any) -> None:
    """trtllm::compressor_postprocess_scatter: refused (see the module docstring)."""
    raise NotImplementedError("compressor_postprocess_scatter: c128 writes DeepSeek-V4's cache entries inside its "
                              "compress launch only (FlashMLA's layout); TensorRT-LLM's post-process stays "
                              "torch.ops.trtllm.compressor_postprocess_scatter")
