#!/usr/bin/env python3
"""c128's TensorRT-LLM operators beside TensorRT-LLM's own kernels, on the same torch buffers.

TensorRT-LLM's ratio-128 compressor launchers (pagedKvCompressLaunch for generation, prefillReductionLaunch for
context; upstream compressorKernels.cu) come from a shared library built outside the repository
(``.device/trtllm_py/build.sh``) that exposes them through a small C ABI taking what TensorRT-LLM's
``trtllm::compressor_*`` ops take from their tensors (data pointers, ``block_table_kv.size(1)``, element
sizes, the current stream). c128's side is ``torch.ops.c128.compressor_paged_kv_compress`` and
``torch.ops.c128.compressor_prefill_reduction`` (``import c128.torch``), called with the same arguments.

Every case builds random inputs (never zero) for head_dim 512: kv_score f32 [T, 2 * 512], ape f32 [128, 512],
two state planes [pages, page_size, 512] (f32 or bf16, page_size 128 or 256) with random contents, a block
table per plane (distinct permutations; entries of blocks no token touches point at decoy pages), kv_lens,
start_pos, cu_seq_lens and cu_kv_comp; the output is poisoned (a NaN bit pattern) with spare rows after the
last. Both implementations get identical copies. Checks, after one call of each:

- state: both planes of both copies bit-equal to the expected planes (the initial contents with every new
  token's row stored at table[b][pos // page_size], row pos % page_size: kv converted to the state dtype,
  score + ape[pos % 128] added in f32 and then converted), so pages and rows nobody addresses are untouched;
- outputs: rows that no window names keep the poison bits; every window's row is finite, within SPEC 8
  (relative L2 <= 1e-5 per window, max abs <= 1e-4) of the other implementation's (with bf16 state at a
  decode boundary: within 0.1 on randn data, reported only for scores ~60, because TensorRT-LLM reads the
  new token back from the bf16 state and c128 takes it from the f32 input), and, on a sample of windows,
  within SPEC 8 of a float64 NumPy oracle that models each implementation's reads (a row read from the
  state is its stored value; a row read from the input is kv and score + ape in float64);
- after the timing loops (which repeat the same call: idempotent), the planes are still the expected ones
  and both outputs are bit-identical to their first call's.

Then both are timed on the same buffers: eager (CUDA events around one call, the L2 flushed and the device
idle before it, so a host-bound call shows its host time; interleaved A/B, median), the host time of one
eager call (perf_counter), and a CUDA graph of ``--graph-calls`` calls replayed (device time per call, L2 warm).
Writes trtllm_side_by_side.csv and trtllm_side_by_side.md into --out and prints the table.

Cases: decode B = 1, 8, 32, 128 with next_n 1 (``--next-n``; half of the requests of B >= 8, and B = 1,
complete a 128-window; B = 8 and 128 use one output slot per request, B = 1 and 32 compact rows); prefill of 1
and 8 requests of 8K and 32K tokens in all (no prior state), a chunked extend of 8 requests at unaligned
start positions (windows that begin in the state), each at page_size 128 and 256 and state f32 and bf16;
scores ~60 on a few (checks only); and a context batch over 65536 rows (2 x 64K, f32 state, page 128), which
c128's prefill cannot take in one call (its plans address at most 65536 input rows): c128 must refuse it
and write nothing, or, if it accepts it, pass the same checks.

Exit status: 0 when every check passed, 1 when one failed, 77 (with a message) when there is no torch, no
CUDA device, no c128 library or no --lib.

    python3 bench/trtllm_side_by_side.py --lib /tmp/trtllm_py/libtrtllm_compressor.so --out /tmp/trtllm_sbs
"""

from __future__ import annotations

import argparse
import csv
import ctypes
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

D = 512  # head_dim
W = 128  # compress ratio = window
SKIP = 77
TOL_REL_L2, TOL_MAX_ABS = 1e-5, 1e-4  # SPEC 8, f32 output
BF16_DECODE_CROSS = 0.1  # SPEC 8: bf16 state against f32-input reads, randn data
POISON_BITS = 0x7FC0DEAD  # an f32 NaN no kernel writes
SPARE_ROWS = 5
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEVICE = "cuda"  # where the buffers live (a developer's dry run of the checks may set "cpu")


# ---- cases --------------------------------------------------------------------------------------------
@dataclass
class Case:
    name: str
    kind: str  # "decode" | "prefill"
    page_size: int
    state: str  # "f32" | "bf16"
    starts: List[int]  # tokens already in the state, per request (start_pos)
    news: List[int]  # new tokens this call, per request
    next_n: int = 0  # decode
    slots: bool = False  # decode: cu_kv_comp = arange (one output row per request) instead of compact
    scale: float = 1.0  # score ~ scale * randn
    timed: bool = True
    probe: bool = False  # over c128's prefill row limit: a refusal that writes nothing is accepted

    @property
    def requests(self) -> int:
        return len(self.news)

    @property
    def tokens(self) -> int:
        return sum(self.news)

    def windows(self) -> List[int]:
        return [(s + n) // W - s // W for s, n in zip(self.starts, self.news)]


def decode_case(rng: Any, b: int, page: int, state: str, next_n: int, scale: float = 1.0,
                timed: bool = True) -> Case:
    starts, news = [], []
    for i in range(b):
        k = int(rng.integers(2, 48))
        if b == 1 or i % 2 == 0:  # completes window k - 1 with its last new token
            kv_len = W * k
        else:  # all new tokens inside window k, which stays open
            kv_len = W * k + int(rng.integers(next_n, W))
        starts.append(kv_len - next_n)
        news.append(next_n)
    order = rng.permutation(b)
    starts, news = [starts[i] for i in order], [news[i] for i in order]
    tag = "" if scale == 1.0 else "_s60"
    return Case(f"decode_B{b}_n{next_n}{tag}", "decode", page, state, starts, news, next_n=next_n,
                slots=b in (8, 128), scale=scale, timed=timed)


def prefill_case(name: str, page: int, state: str, starts: Sequence[int], news: Sequence[int], scale: float = 1.0,
                 timed: bool = True, probe: bool = False) -> Case:
    tag = "" if scale == 1.0 else "_s60"
    return Case(name + tag, "prefill", page, state, list(starts), list(news), scale=scale, timed=timed, probe=probe)


# a chunked extend: prior tokens at unaligned and aligned positions, chunks that complete 0..n windows
EXTEND = ([1000, 0, 130, 4096, 127, 5000, 256, 77], [3000, 2048, 70, 128, 1, 3100, 4000, 4500])


def build_cases(rng: Any, next_ns: Sequence[int], quick: bool) -> List[Case]:
    cases: List[Case] = []
    batches = [1, 128] if quick else [1, 8, 32, 128]
    for state in ("f32", "bf16"):
        for page in (128, 256):
            for n in next_ns:
                for b in batches:
                    cases.append(decode_case(rng, b, page, state, n))
            pre = [("prefill_1x8K", [0], [8192]), ("prefill_8x1K", [0] * 8, [1024] * 8),
                   ("prefill_1x32K", [0], [32768]), ("prefill_8x4K", [0] * 8, [4096] * 8),
                   ("extend_8", *EXTEND)]
            if quick:
                pre = [pre[0], pre[4]]
            for name, s, nw in pre:
                cases.append(prefill_case(name, page, state, s, nw))
    for state in ("f32", "bf16"):  # scores of magnitude ~60: checks only
        cases.append(decode_case(rng, 8, 128, state, next_ns[0], scale=60.0, timed=False))
        cases.append(prefill_case("extend_8", 256, state, *EXTEND, scale=60.0, timed=False))
    if not quick:
        cases.append(prefill_case("prefill_2x64K_over_limit", 128, "f32", [0, 0], [65536, 65536], timed=False,
                                  probe=True))
    return cases


# ---- the TensorRT-LLM library -------------------------------------------------------------------------
class TrtLib:
    """libtrtllm_compressor.so: trtllm_capi_paged_kv_compress / trtllm_capi_prefill_reduction."""

    def __init__(self, path: str) -> None:
        self.lib = ctypes.CDLL(path)
        p, i64 = ctypes.c_void_p, ctypes.c_int64
        self.lib.trtllm_capi_paged_kv_compress.argtypes = [p] * 10 + [i64] * 10 + [p]
        self.lib.trtllm_capi_paged_kv_compress.restype = ctypes.c_int
        self.lib.trtllm_capi_prefill_reduction.argtypes = [p] * 11 + [i64] * 10 + [p]
        self.lib.trtllm_capi_prefill_reduction.restype = ctypes.c_int
        self.lib.trtllm_capi_last_error.restype = ctypes.c_char_p
        self.lib.trtllm_capi_source_sha256.restype = ctypes.c_char_p
        self.sha256 = self.lib.trtllm_capi_source_sha256().decode()

    def check(self, status: int, what: str) -> None:
        if status:
            raise RuntimeError(f"{what}: status {status}: {self.lib.trtllm_capi_last_error().decode()}")


# ---- buffers ------------------------------------------------------------------------------------------
@dataclass
class Buffers:
    kv_score: Any
    ape: Any
    bt_kv: Any
    bt_sc: Any
    kv_lens: Any
    start_pos: Any
    cu_seq: Any
    cu_comp: Any
    exp_kv: Any  # expected planes after the call
    exp_sc: Any
    planes: Dict[str, Tuple[Any, Any]] = field(default_factory=dict)  # "trt" / "c128" -> (paged_kv, paged_score)
    outs: Dict[str, Any] = field(default_factory=dict)
    out_rows: List[int] = field(default_factory=list)  # rows some window writes
    win_req: List[int] = field(default_factory=list)  # per written row: request, absolute window
    win_abs: List[int] = field(default_factory=list)
    max_outputs: int = 0
    max_blocks: int = 0
    init: Optional[Tuple[Any, Any]] = None  # the initial planes (kept for the over-limit probe)


def make_buffers(torch: Any, case: Case, seed: int) -> Buffers:
    dev = torch.device(DEVICE)
    g = torch.Generator(device=dev)
    g.manual_seed(seed)
    gc = torch.Generator()
    gc.manual_seed(seed)
    P, n = case.page_size, case.requests
    starts = torch.tensor(case.starts, dtype=torch.int64)
    news = torch.tensor(case.news, dtype=torch.int64)
    kv_lens = starts + news
    # logical blocks some kernel reads or writes: from the window that holds the first new token to the last
    lo = (starts // W * W) // P
    hi = (kv_lens + P - 1) // P
    stride = int(hi.max())
    used = int((hi - lo).sum())
    decoys = 4
    pages = used + decoys
    tables = []
    for _ in range(2):  # a table per plane, each its own permutation of the pages
        perm = torch.randperm(pages, generator=gc)
        bt = perm[used + torch.randint(0, decoys, (n, stride), generator=gc)]
        k = 0
        for b in range(n):
            m = int(hi[b] - lo[b])
            bt[b, int(lo[b]):int(hi[b])] = perm[k:k + m]
            k += m
        tables.append(bt.to(torch.int32))
    bt_kv, bt_sc = (t.to(dev) for t in tables)
    sdt = torch.float32 if case.state == "f32" else torch.bfloat16

    def randn(*shape: int, scale: float = 1.0) -> Any:
        x = torch.randn(*shape, generator=g, device=dev, dtype=torch.float32)
        if scale != 1.0:
            x.mul_(scale)
        x[x == 0] = 0.5  # never zero
        return x

    T = case.tokens
    kv_score = torch.cat([randn(T, D), randn(T, D, scale=case.scale)], 1).contiguous()
    ape = randn(W, D, scale=0.5)
    init_kv = randn(pages, P, D).to(sdt)
    init_sc = randn(pages, P, D, scale=case.scale).to(sdt)
    cu_seq = torch.zeros(n + 1, dtype=torch.int64)
    cu_seq[1:] = torch.cumsum(news, 0)
    wins = torch.tensor(case.windows(), dtype=torch.int64)
    if case.slots:
        cu_comp = torch.arange(n + 1, dtype=torch.int64)
    else:
        cu_comp = torch.zeros(n + 1, dtype=torch.int64)
        cu_comp[1:] = torch.cumsum(wins, 0)
    out_rows, win_req, win_abs = [], [], []
    for b in range(n):
        for j in range(int(wins[b])):
            out_rows.append(int(cu_comp[b]) + j)
            win_req.append(b)
            win_abs.append(int(starts[b]) // W + j)
    total_out = int(cu_comp[-1]) + SPARE_ROWS
    # expected planes: every new token's row
    b_of = torch.repeat_interleave(torch.arange(n), news)
    t = torch.arange(T)
    pos = starts[b_of] + (t - cu_seq[b_of])
    blk, row = pos // P, pos % P
    pk = tables[0][b_of, blk].long().to(dev)
    ps = tables[1][b_of, blk].long().to(dev)
    row_d, posw = row.to(dev), (pos % W).to(dev)
    exp_kv, exp_sc = init_kv.clone(), init_sc.clone()
    exp_kv[pk, row_d] = kv_score[:, :D].to(sdt)
    exp_sc[ps, row_d] = (kv_score[:, D:] + ape[posw]).to(sdt)
    i32 = lambda a: a.to(torch.int32).to(dev)  # noqa: E731
    bufs = Buffers(kv_score, ape, bt_kv, bt_sc, i32(kv_lens), i32(starts), i32(cu_seq), i32(cu_comp), exp_kv, exp_sc,
                   out_rows=out_rows, win_req=win_req, win_abs=win_abs, max_outputs=int(wins.max()),
                   max_blocks=stride)
    for who in ("trt", "c128"):
        bufs.planes[who] = (init_kv.clone(), init_sc.clone())
        out = torch.empty(total_out, D, dtype=torch.float32, device=dev)
        out.view(torch.int32).fill_(POISON_BITS)
        bufs.outs[who] = out
    if case.probe:
        bufs.init = (init_kv, init_sc)
    return bufs


# ---- the two calls ----------------------------------------------------------------------------------
def trt_call(torch: Any, trt: TrtLib, case: Case, bufs: Buffers) -> Callable[[], None]:
    pkv, psc = bufs.planes["trt"]
    out = bufs.outs["trt"]
    eb = pkv.element_size()
    common = [bufs.kv_score.data_ptr(), bufs.ape.data_ptr(), pkv.data_ptr(), psc.data_ptr(), bufs.bt_kv.data_ptr(),
              bufs.bt_sc.data_ptr(), out.data_ptr(), bufs.kv_lens.data_ptr()]
    tail = [bufs.bt_kv.size(1), bufs.kv_score.element_size(), eb, psc.element_size(), out.element_size()]
    if case.kind == "decode":
        fn = trt.lib.trtllm_capi_paged_kv_compress
        args = common + [bufs.cu_seq.data_ptr(), bufs.cu_comp.data_ptr(), case.requests, case.page_size, D, W,
                         case.next_n] + tail
        what = "pagedKvCompressLaunch"
    else:
        fn = trt.lib.trtllm_capi_prefill_reduction
        args = common + [bufs.start_pos.data_ptr(), bufs.cu_seq.data_ptr(), bufs.cu_comp.data_ptr(), case.requests,
                         case.page_size, D, W, bufs.max_outputs] + tail
        what = "prefillReductionLaunch"

    def call() -> None:
        trt.check(fn(*args, torch.cuda.current_stream().cuda_stream), what)
    return call


def c128_call(torch: Any, case: Case, bufs: Buffers) -> Callable[[], None]:
    pkv, psc = bufs.planes["c128"]
    out = bufs.outs["c128"]
    ops = torch.ops.c128
    b = bufs
    if case.kind == "decode":
        def call() -> None:
            ops.compressor_paged_kv_compress(b.kv_score, b.ape, pkv, psc, b.bt_kv, b.bt_sc, out, b.kv_lens, b.cu_seq,
                                             b.cu_comp, case.requests, case.page_size, D, W, case.next_n)
    else:
        def call() -> None:
            ops.compressor_prefill_reduction(b.kv_score, b.ape, pkv, psc, b.bt_kv, b.bt_sc, out, b.kv_lens,
                                             b.start_pos, b.cu_seq, b.cu_comp, case.requests, case.page_size, D, W,
                                             b.max_outputs)
    return call


# ---- checks ------------------------------------------------------------------------------------------
def bits(torch: Any, t: Any) -> Any:
    return t.view(torch.int16 if t.element_size() == 2 else torch.int32)


def planes_equal(torch: Any, bufs: Buffers, who: str) -> str:
    pkv, psc = bufs.planes[who]
    bad = []
    for name, got, want in (("paged_kv", pkv, bufs.exp_kv), ("paged_score", psc, bufs.exp_sc)):
        diff = bits(torch, got) != bits(torch, want)
        if bool(diff.any()):
            pages = torch.nonzero(diff.any(2).any(1)).flatten()[:4].tolist()
            bad.append(f"{name}: {int(diff.sum())} elements differ (pages {pages}...)")
    return "; ".join(bad)


def poison_kept(torch: Any, bufs: Buffers, who: str) -> str:
    out = bufs.outs[who]
    keep = torch.ones(out.shape[0], dtype=torch.bool, device=out.device)
    if bufs.out_rows:
        keep[torch.tensor(bufs.out_rows, device=out.device)] = False
    rows = bits(torch, out)[keep]
    if bool((rows != POISON_BITS).any()):
        return f"{int((rows != POISON_BITS).any(1).sum())} rows no window names were written"
    if bufs.out_rows:
        written = out[torch.tensor(bufs.out_rows, device=out.device)]
        if not bool(torch.isfinite(written).all()):
            return f"{int((~torch.isfinite(written)).any(1).sum())} window rows not finite (unwritten?)"
    return ""


def row_errors(torch: Any, got: Any, ref: Any) -> Tuple[Any, Any]:
    """Per-row relative L2 and max abs of got against ref (float64)."""
    err = (got.double() - ref.double())
    rel = err.pow(2).sum(1).sqrt() / ref.double().pow(2).sum(1).sqrt()
    return rel, err.abs().amax(1)


def oracle(np: Any, torch: Any, case: Case, bufs: Buffers, sample: List[int], from_state: bool) -> Any:
    """float64 reference of the sampled windows (indices into bufs.out_rows): [S, D]. from_state: every window
    row is read from the (expected) state, as TensorRT-LLM's decode does; else rows of new tokens come from the
    input (kv, score + ape in float64) and older rows from the state."""
    dev = bufs.kv_score.device
    req = torch.tensor([bufs.win_req[i] for i in sample], dtype=torch.int64, device=dev)
    start = torch.tensor([bufs.win_abs[i] * W for i in sample], dtype=torch.int64, device=dev)
    pos = start[:, None] + torch.arange(W, device=dev)[None, :]  # [S, 128]
    sp = bufs.start_pos.long()[req][:, None]
    new = pos >= sp
    t = (bufs.cu_seq.long()[req][:, None] + pos - sp).clamp(min=0)
    blk, row = pos // case.page_size, pos % case.page_size
    pk = bufs.bt_kv.long()[req[:, None], blk]
    ps = bufs.bt_sc.long()[req[:, None], blk]
    kv_state = bufs.exp_kv[pk, row].float().cpu().numpy().astype(np.float64)
    sc_state = bufs.exp_sc[ps, row].float().cpu().numpy().astype(np.float64)
    kv_in = bufs.kv_score[t, :D].cpu().numpy().astype(np.float64)
    sc_in = bufs.kv_score[t, D:].cpu().numpy().astype(np.float64) + \
        bufs.ape.cpu().numpy().astype(np.float64)[None, :, :]
    m = new.cpu().numpy()[:, :, None] & (not from_state)
    kv = np.where(m, kv_in, kv_state)
    s = np.where(m, sc_in, sc_state)
    w = np.exp(s - s.max(axis=1, keepdims=True))
    return (w * kv).sum(axis=1) / w.sum(axis=1)


@dataclass
class Result:
    case: Case
    status: str = "pass"  # pass | FAIL | refused
    state_ok: bool = True
    notes: List[str] = field(default_factory=list)
    trt_oracle: Tuple[float, float] = (math.nan, math.nan)  # worst relative L2, worst max abs
    c128_oracle: Tuple[float, float] = (math.nan, math.nan)
    cross: Tuple[float, float] = (math.nan, math.nan)
    timing: Dict[str, float] = field(default_factory=dict)

    def fail(self, what: str) -> None:
        self.status = "FAIL"
        self.notes.append(what)


def check_case(np: Any, torch: Any, case: Case, bufs: Buffers, res: Result, rng: Any, max_sample: int) -> None:
    for who in ("trt", "c128"):
        msg = planes_equal(torch, bufs, who)
        if msg:
            res.state_ok = False
            res.fail(f"{who} state: {msg}")
        msg = poison_kept(torch, bufs, who)
        if msg:
            res.fail(f"{who} output: {msg}")
    if not bufs.out_rows:
        return
    rows = torch.tensor(bufs.out_rows, device=bufs.kv_score.device)
    a, c = bufs.outs["trt"][rows], bufs.outs["c128"][rows]
    rel, mx = row_errors(torch, c, a)
    res.cross = (float(rel.max()), float(mx.max()))
    bf16_boundary = case.state == "bf16" and case.kind == "decode"
    if bf16_boundary:
        if case.scale == 1.0 and res.cross[1] > BF16_DECODE_CROSS:
            res.fail(f"trt vs c128: max abs {res.cross[1]:.3g} > {BF16_DECODE_CROSS} (bf16 state, randn)")
    elif res.cross[0] > TOL_REL_L2 or res.cross[1] > TOL_MAX_ABS:
        res.fail(f"trt vs c128: relative L2 {res.cross[0]:.3g}, max abs {res.cross[1]:.3g}")
    n = len(bufs.out_rows)
    if n <= max_sample:
        sample = list(range(n))
    else:
        sample = sorted({0, n - 1, *rng.choice(n, max_sample - 2, replace=False).tolist()})
    for who, out, from_state in (("trt", a, case.kind == "decode"), ("c128", c, False)):
        ref = oracle(np, torch, case, bufs, sample, from_state)
        got = out[torch.tensor(sample, device=out.device)].double().cpu().numpy()
        err = np.abs(got - ref)
        rel = np.sqrt((err ** 2).sum(1) / (ref ** 2).sum(1))
        worst = (float(rel.max()), float(err.max()))
        if who == "trt":
            res.trt_oracle = worst
        else:
            res.c128_oracle = worst
        if not np.all(np.isfinite(got)) or worst[0] > TOL_REL_L2 or worst[1] > TOL_MAX_ABS:
            res.fail(f"{who} vs oracle: relative L2 {worst[0]:.3g}, max abs {worst[1]:.3g} "
                     f"({len(sample)} windows sampled)")


# ---- timing ------------------------------------------------------------------------------------------
def time_eager(torch: Any, calls: Dict[str, Callable[[], None]], reps: int, warmup: int,
               flush: Optional[Any]) -> Dict[str, float]:
    """Median device-observed time of one call (us) per name, interleaved; and the host time of the call."""
    ev = {k: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
          for k in calls}
    host: Dict[str, List[float]] = {k: [] for k in calls}
    for _ in range(warmup):
        for fn in calls.values():
            fn()
    torch.cuda.synchronize()
    for r in range(reps):
        for k, fn in calls.items():
            if flush is not None:
                flush.zero_()
            torch.cuda.synchronize()
            e0, e1 = ev[k][r]
            e0.record()
            h0 = time.perf_counter()
            fn()
            h1 = time.perf_counter()
            e1.record()
            host[k].append((h1 - h0) * 1e6)
    torch.cuda.synchronize()
    out: Dict[str, float] = {}
    for k in calls:
        out[f"{k}_eager_us"] = statistics.median(e0.elapsed_time(e1) * 1e3 for e0, e1 in ev[k])
        out[f"{k}_host_us"] = statistics.median(host[k])
    return out


def time_graph(torch: Any, name: str, fn: Callable[[], None], calls: int, reps: int) -> Tuple[float, str]:
    """Device time per call (us) of a CUDA graph of `calls` calls, median over `reps` replays; or NaN and why."""
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm up on the capture stream (allocator, launch caches)
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
        for _ in range(3):
            graph.replay()
        torch.cuda.synchronize()
        times = []
        for _ in range(reps):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            graph.replay()
            e1.record()
            e1.synchronize()
            times.append(e0.elapsed_time(e1) * 1e3 / calls)
        del graph
        return statistics.median(times), ""
    except Exception as e:  # noqa: BLE001 (reported, not fatal: the eager figures stand)
        torch.cuda.synchronize()
        return math.nan, f"{name} graph capture failed: {type(e).__name__}: {str(e).splitlines()[0][:160]}"


# ---- report ------------------------------------------------------------------------------------------
COLUMNS = ["case", "kind", "page_size", "state", "requests", "next_n", "tokens", "windows", "trt_eager_us",
           "c128_eager_us", "trt_graph_us", "c128_graph_us", "graph_c128_over_trt", "trt_host_us", "c128_host_us",
           "state_bit_equal", "trt_oracle_rel_l2", "trt_oracle_max_abs", "c128_oracle_rel_l2", "c128_oracle_max_abs",
           "trt_c128_rel_l2", "trt_c128_max_abs", "status", "notes"]


def fmt(v: Any, digits: int = 1) -> str:
    if isinstance(v, float):
        if math.isnan(v):
            return ""
        return f"{v:.{digits}f}" if abs(v) >= 1e-3 or v == 0 else f"{v:.2e}"
    return str(v)


def row_of(res: Result) -> Dict[str, str]:
    c, t = res.case, res.timing
    trt_g, c_g = t.get("trt_graph_us", math.nan), t.get("c128_graph_us", math.nan)
    ratio = c_g / trt_g if trt_g and not math.isnan(trt_g) and not math.isnan(c_g) else math.nan
    return {
        "case": c.name, "kind": c.kind, "page_size": str(c.page_size), "state": c.state, "requests": str(c.requests),
        "next_n": str(c.next_n) if c.kind == "decode" else "", "tokens": str(c.tokens),
        "windows": str(sum(c.windows())),
        "trt_eager_us": fmt(t.get("trt_eager_us", math.nan)), "c128_eager_us": fmt(t.get("c128_eager_us", math.nan)),
        "trt_graph_us": fmt(trt_g), "c128_graph_us": fmt(c_g), "graph_c128_over_trt": fmt(ratio, 2),
        "trt_host_us": fmt(t.get("trt_host_us", math.nan)), "c128_host_us": fmt(t.get("c128_host_us", math.nan)),
        "state_bit_equal": "" if res.status == "refused" else ("yes" if res.state_ok else "NO"),
        "trt_oracle_rel_l2": fmt(res.trt_oracle[0], 3), "trt_oracle_max_abs": fmt(res.trt_oracle[1], 3),
        "c128_oracle_rel_l2": fmt(res.c128_oracle[0], 3), "c128_oracle_max_abs": fmt(res.c128_oracle[1], 3),
        "trt_c128_rel_l2": fmt(res.cross[0], 3), "trt_c128_max_abs": fmt(res.cross[1], 3),
        "status": res.status, "notes": " | ".join(res.notes),
    }


def environment(torch: Any, trt: TrtLib, lib_path: str) -> Dict[str, str]:
    import c128

    def sh(*cmd: str) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=20, cwd=REPO).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    commit = sh("git", "rev-parse", "HEAD") or "unknown"
    dirty = sh("git", "status", "--porcelain", "--", "c128.cuh", "python", "bench")
    driver = sh("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader").splitlines()
    return {
        "GPU": torch.cuda.get_device_name(0),
        "driver": driver[0] if driver else "unknown",
        "torch": f"{torch.__version__} (CUDA {torch.version.cuda})",
        "python": platform.python_version(),
        "c128 commit": commit + (" (+ uncommitted changes in c128.cuh/python/bench)" if dirty else ""),
        "c128 version": getattr(c128, "__version__", "?"),
        "libc128": c128.library_path() if hasattr(c128, "library_path") else "?",
        "TensorRT-LLM library": f"{lib_path} (compressorKernels.cu sha256 {trt.sha256[:16]}...)",
    }


def summary(results: List[Result]) -> str:
    failed = sum(r.status == "FAIL" for r in results)
    refused = sum(r.status == "refused" for r in results)
    return f"{len(results) - failed} passed ({refused} of them refused by c128 as expected), {failed} failed"


def write_reports(out_dir: str, results: List[Result], env: Dict[str, str], args: argparse.Namespace) -> str:
    os.makedirs(out_dir, exist_ok=True)
    rows = [row_of(r) for r in results]
    with open(os.path.join(out_dir, "trtllm_side_by_side.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    short = ["case", "page_size", "state", "requests", "tokens", "windows", "trt_eager_us", "c128_eager_us",
             "trt_graph_us", "c128_graph_us", "graph_c128_over_trt", "c128_host_us", "state_bit_equal",
             "trt_oracle_rel_l2", "c128_oracle_rel_l2", "trt_c128_max_abs", "status"]
    lines = ["# c128 torch.ops.c128 vs TensorRT-LLM compressor kernels (ratio 128, head_dim 512)", ""]
    lines += [f"- {k}: {v}" for k, v in env.items()]
    lines += [f"- input f32 [T, 1024], output f32; eager: CUDA events around one call after an L2 flush and a "
              f"device sync, median of {args.reps} (interleaved); graph: {args.graph_calls} calls a graph, device "
              f"time per call, median of {args.graph_reps} replays (L2 warm); host: perf_counter around one eager "
              f"call. Times in us.", ""]
    lines.append("| " + " | ".join(short) + " |")
    lines.append("|" + "---|" * len(short))
    for r in rows:
        lines.append("| " + " | ".join(r[k] for k in short) + " |")
    notes = [(r["case"] + f" (P{r['page_size']}, {r['state']})", r["notes"]) for r in rows if r["notes"]]
    if notes:
        lines += ["", "Notes:", ""] + [f"- {c}: {n}" for c, n in notes]
    lines += ["", summary(results)]
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out_dir, "trtllm_side_by_side.md"), "w") as f:
        f.write(text)
    return text


# ---- main --------------------------------------------------------------------------------------------
def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Exit status: 0 all checks passed, 1 a check failed, 77 cannot run here.")
    p.add_argument("--lib", required=True, help="libtrtllm_compressor.so (.device/trtllm_py/build.sh)")
    p.add_argument("--out", required=True, help="directory for trtllm_side_by_side.csv and .md")
    p.add_argument("--next-n", default="1", help="comma-separated next_n values of the decode cases (1..8)")
    p.add_argument("--reps", type=int, default=30, help="eager timing repetitions per implementation")
    p.add_argument("--warmup", type=int, default=5, help="eager warmup calls")
    p.add_argument("--graph-calls", type=int, default=10, help="calls captured in one CUDA graph")
    p.add_argument("--graph-reps", type=int, default=20, help="graph replays timed")
    p.add_argument("--no-graph", action="store_true", help="skip the CUDA graph timing")
    p.add_argument("--no-flush", action="store_true", help="do not flush the L2 before each eager call")
    p.add_argument("--sample", type=int, default=32, help="windows per case checked against the float64 oracle")
    p.add_argument("--seed", type=int, default=128)
    p.add_argument("--quick", action="store_true", help="B in {1, 128}, prefill 1x8K and the extend only")
    p.add_argument("--only", default="", help="run only cases whose name contains this")
    p.add_argument("--profile", type=int, default=0, metavar="CALLS",
                   help="also profile CALLS eager calls of each timed case (torch.profiler: the kernels and host ops "
                        "of one call, into profile.txt)")
    return p.parse_args(argv)


def profile_calls(torch: Any, name: str, calls: Dict[str, Callable[[], None]], n: int) -> str:
    """torch.profiler's table of n eager calls of each implementation: the kernels each launches and the host
    operators around them (where an adapter's time goes)."""
    from torch.profiler import ProfilerActivity, profile
    text = []
    for who, fn in calls.items():
        fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(n):
                fn()
            torch.cuda.synchronize()
        table = prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=25, max_name_column_width=60)
        text.append(f"## {name}: {who}, {n} calls\n\n{table}\n")
    return "\n".join(text)


def cannot_run(msg: str) -> int:
    print(f"trtllm_side_by_side: skipped: {msg}", file=sys.stderr)
    return SKIP


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    next_ns = [int(x) for x in args.next_n.split(",") if x.strip()]
    if not next_ns or any(not 1 <= n <= 8 for n in next_ns):
        print("--next-n: values in 1..8", file=sys.stderr)
        return 2
    try:
        import numpy as np
        import torch
    except ImportError as e:
        return cannot_run(f"needs torch and numpy ({e})")
    if not torch.cuda.is_available():
        return cannot_run("no CUDA device")
    if not os.path.isfile(args.lib):
        return cannot_run(f"--lib {args.lib}: no such file (build it with .device/trtllm_py/build.sh)")
    try:
        import c128  # noqa: F401
        import c128.torch  # noqa: F401  (registers torch.ops.c128.*)
    except Exception as e:  # noqa: BLE001 (OSError from a missing libc128.so, ImportError, ...)
        return cannot_run(f"c128 cannot be imported ({type(e).__name__}: {e}); set PYTHONPATH=python and "
                          f"C128_LIBRARY=<build>/python/libc128.so")
    trt = TrtLib(args.lib)
    t_start = time.time()
    rng = np.random.default_rng(args.seed)
    cases = [c for c in build_cases(rng, next_ns, args.quick) if args.only in c.name]
    flush = None if args.no_flush else torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    results: List[Result] = []
    profiles: List[str] = []
    for k, case in enumerate(cases):
        res = Result(case)
        results.append(res)
        bufs = make_buffers(torch, case, args.seed * 1000 + k)
        calls = {"trt": trt_call(torch, trt, case, bufs), "c128": c128_call(torch, case, bufs)}
        try:
            calls["trt"]()
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 (reported; the next case still runs)
            res.fail(f"TensorRT-LLM call failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
            print(f"{case.name}: {res.notes[-1]}", flush=True)
            continue
        refused = ""
        try:
            calls["c128"]()
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 (a refusal: it must have written nothing)
            refused = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        if refused:
            pkv, psc = bufs.planes["c128"]
            init = bufs.init
            untouched = init is not None and all(bool((bits(torch, a) == bits(torch, b)).all())
                                                 for a, b in ((pkv, init[0]), (psc, init[1])))
            untouched = untouched and bool((bits(torch, bufs.outs["c128"]) == POISON_BITS).all())
            if case.probe and untouched:
                res.status = "refused"
                res.notes.append(f"c128 refused ({refused}) and wrote nothing")
            elif case.probe:
                res.fail(f"c128 raised ({refused}) after writing to its planes or output")
            else:
                res.fail(f"c128 raised {refused}")
            msg = planes_equal(torch, bufs, "trt") or poison_kept(torch, bufs, "trt")
            if msg:
                res.fail(f"trt: {msg}")
        else:
            check_case(np, torch, case, bufs, res, rng, args.sample)
            if case.timed:
                first = {w: bufs.outs[w].clone() for w in calls}
                res.timing.update(time_eager(torch, calls, args.reps, args.warmup, flush))
                if not args.no_graph:
                    for who, fn in calls.items():
                        v, why = time_graph(torch, who, fn, args.graph_calls, args.graph_reps)
                        res.timing[f"{who}_graph_us"] = v
                        if why:
                            res.notes.append(why)
                if args.profile:
                    profiles.append(profile_calls(torch, f"{case.name} P{case.page_size} {case.state}", calls,
                                                  args.profile))
                torch.cuda.synchronize()
                for who in calls:
                    msg = planes_equal(torch, bufs, who)
                    if msg:
                        res.fail(f"{who} state after the timing loops: {msg}")
                    if not bool((bits(torch, bufs.outs[who]) == bits(torch, first[who])).all()):
                        res.fail(f"{who} output after the timing loops differs from its first call's")
        r = row_of(res)
        print(f"[{time.time() - t_start:6.1f}s] {case.name:28s} P{case.page_size} {case.state:4s} {res.status:7s} "
              f"trt {r['trt_eager_us']:>8s}/{r['trt_graph_us']:>8s} us  c128 {r['c128_eager_us']:>8s}/"
              f"{r['c128_graph_us']:>8s} us  {' | '.join(res.notes)}", flush=True)
        del bufs, calls
        torch.cuda.empty_cache()
    text = write_reports(args.out, results, environment(torch, trt, args.lib), args)
    if profiles:
        with open(os.path.join(args.out, "profile.txt"), "w") as f:
            f.write("\n".join(profiles))
    print()
    print(text)
    failed = [r for r in results if r.status == "FAIL"]
    print(f"trtllm_side_by_side: {summary(results)} ({time.time() - t_start:.0f} s); files in {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
