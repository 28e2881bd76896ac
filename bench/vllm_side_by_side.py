#!/usr/bin/env python3
"""c128's vLLM adapter beside vLLM's own Triton kernels, on the same buffers, on one GPU: checks, then timings.

For every case (decode steps of B = 1, 8, 32, 128 requests with one new token each, about half of them completing a
128-token window, and a prefill of three requests of a few thousand tokens, at head_dim 512; two cases at head_dim
128 too) it builds a random vLLM-layout compressor state (fp32 [blocks, 8, 2D] through an int32 block table, scores
stored with ape added, the window's other blocks distinct, older columns on the null block 0), the step's kv | score
rows, positions, token_to_req_indices and a slot_mapping with -1 padding tokens, and checks

  save     vLLM's save_partial_states kernel and c128.vllm.save_partial_states on two copies of the state: both bit
           for bit the NumPy model (kv | fp32(score + ape[pos % 128]) at slot_mapping, every other row unchanged);
  pooled   c128.vllm.compress_norm_rope_store_cutedsl's fp32 rows of the tokens that complete a window against a
           float64 NumPy oracle of the stored window (SPEC 8: relative L2 <= 1e-5, max abs <= 1e-4), every other row
           left as it was, the state not written;
  entry    (head_dim 512) vLLM's fused Triton kernel (compress_norm_rope_store_triton: pooling, RMSNorm, RoPE, UE8M0
           FP8, insert into FlashMLA's sparse FP8 cache) and c128's entry launch (c128.vllm.compress_c128's plans and
           state layout, launched with entry=c128.Entry("dsv4_fp8") and output_index = vLLM's compressed-cache
           slot_mapping), on two poisoned caches: c128's entries within SPEC 11 of the float64 oracle; c128 against
           vLLM within what vLLM's two skipped bf16 roundings (of the pooled vector, and of z before RoPE; DESIGN
           11.1) can move (scale bytes equal unless the block's amax lies within two bf16 ulps of a power of two
           times 448, e4m3 codes within one code where the scales agree, RoPE values within what one bf16 ulp of
           each of the pair's two inputs reaches, plus half an ulp of each side's result: where the rotation
           cancels, many of the result's ulps),
           with the share of codes and RoPE values that differ at all; no byte outside the entries written on
           either side.

and times each side (CUDA events around `--inner` back-to-back calls, median of `--reps`, after warm-up; eager and
CUDA-graph replay). c128's entry column is the adapter-style call (its plans built from vLLM's metadata with torch
operations in every call); "kernel" is the c128 launch alone with the plans built once.

vLLM's kernels are imported from `--vllm-ops DIR` (default .device/vllm): DIR/upstream holds vLLM's files as they
are, DIR/shim the few `vllm.*` modules they import (see DIR/SOURCES.md). Needs PyTorch with CUDA, Triton, NumPy and
libc128.so (the installed package, or C128_LIBRARY). Exit status: 0 all checks passed, 1 a check failed, 2 setup
error, 77 no CUDA device / PyTorch / Triton.

    python3 bench/vllm_side_by_side.py --out bench-results/vllm
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[1]
W = 128  # compress ratio = window
BLOCK = 8  # vLLM's C128 state block size
ROPE = 64
EPS = 1e-6
POISON = 0xA5
SKIP = 77
OPS = "vllm.models.deepseek_v4.common.ops"


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vllm-ops", default=str(ROOT / ".device" / "vllm"),
                   help="folder with upstream/ (vLLM's kernel files) and shim/ (default: %(default)s)")
    p.add_argument("--out", default="bench-results/vllm", help="folder for vllm_side_by_side.csv / .md")
    p.add_argument("--cases", default="", help="comma-separated case names to run (default: all)")
    p.add_argument("--reps", type=int, default=15, help="timed trials per measurement (median taken)")
    p.add_argument("--inner", type=int, default=20, help="back-to-back calls per trial")
    p.add_argument("--warmup", type=int, default=5, help="untimed calls before timing")
    p.add_argument("--no-graph", action="store_true", help="skip the CUDA-graph replay timings")
    p.add_argument("--check-only", action="store_true", help="run the checks, no timings")
    p.add_argument("--entries-per-page", type=int, default=64, help="compressed-cache entries per page (power of 2)")
    p.add_argument("--seed", type=int, default=2024)
    return p.parse_args(argv)


# ---- environment -------------------------------------------------------------------------------------------------
def gpu_stack() -> Tuple[Any, Any, Any]:
    """(torch, triton, numpy), or exit 77 naming what is missing."""
    try:
        import numpy
        import torch
    except ImportError as e:
        print(f"SKIP: {e.name or e} is not installed (needs PyTorch with CUDA, Triton, NumPy)")
        sys.exit(SKIP)
    try:
        import triton
    except ImportError:
        print("SKIP: triton is not installed")
        sys.exit(SKIP)
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device")
        sys.exit(SKIP)
    return torch, triton, numpy


def import_c128() -> Tuple[Any, Any, Any, Any]:
    """(c128, c128.vllm, tests' entries.py, tests' cases.py); the repository's python/ when c128 is not installed."""
    sys.path.append(str(ROOT / "python" / "tests"))
    try:
        import c128
    except ImportError:
        sys.path.insert(0, str(ROOT / "python"))
    try:
        import c128
        import c128.vllm
        c128.instances()
    except Exception as e:  # the package or its library is missing
        print(f"setup error: cannot use c128 ({type(e).__name__}: {e}); pip install . or set C128_LIBRARY")
        sys.exit(2)
    import cases
    import entries
    return c128, c128.vllm, entries, cases


def import_vllm_ops(folder: str) -> Tuple[Any, Any]:
    """vLLM's save_partial_states and fused_compress_quant_cache modules from folder/upstream through folder/shim."""
    base = Path(folder).resolve()
    if "vllm" in sys.modules:
        print("setup error: a vllm package is already imported; run without vLLM loaded")
        sys.exit(2)
    for sub in ("upstream", "shim"):
        if not (base / sub / "vllm").is_dir():
            print(f"setup error: {base / sub / 'vllm'} missing (see .device/vllm/SOURCES.md)")
            sys.exit(2)
    sys.path[:0] = [str(base / "shim"), str(base / "upstream")]  # shim/vllm/__init__.py spans both folders
    import importlib

    try:
        save = importlib.import_module(f"{OPS}.save_partial_states")
        fused = importlib.import_module(f"{OPS}.fused_compress_quant_cache")
    except Exception as e:
        print(f"setup error: cannot import vLLM's kernels from {base}: {type(e).__name__}: {e}")
        sys.exit(2)
    for mod in (save, fused):
        if not Path(mod.__file__).resolve().is_relative_to(base / "upstream"):
            print(f"setup error: {mod.__name__} came from {mod.__file__}, not {base / 'upstream'}")
            sys.exit(2)
    return save, fused


def environment(torch: Any, triton: Any, c128: Any, save_mod: Any, fused_mod: Any) -> Dict[str, str]:
    def run(cmd: List[str]) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=20).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    commit = run(["git", "rev-parse", "--short", "HEAD"]) or "unknown"
    if run(["git", "status", "--porcelain", "--untracked-files=no"]):
        commit += "+dirty"
    header = hashlib.sha256((ROOT / "c128.cuh").read_bytes()).hexdigest()[:12]
    sources = ", ".join(f"{Path(m.__file__).name}:{hashlib.sha256(Path(m.__file__).read_bytes()).hexdigest()[:12]}"
                        for m in (save_mod, fused_mod))
    return {
        "gpu": torch.cuda.get_device_name(),
        "driver": run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]).split("\n")[0]
        or "unknown",
        "torch": f"{torch.__version__} (CUDA {torch.version.cuda})",
        "triton": triton.__version__,
        "c128": f"{c128.__version__}, {c128.build_info()}",
        "commit": f"{commit} c128.cuh:{header}",
        "vllm_sources": sources,
    }


# ---- cases ---------------------------------------------------------------------------------------------------
@dataclass
class Case:
    """One compressor step in vLLM's layout (NumPy, host) and what it must produce."""

    name: str
    d: int
    state0: Any  # f32 [blocks, 8, 2D]: the state before the step (random history and stale rows)
    table: Any  # int32 [requests, columns]
    rows: Any  # f32 [T, 2D]: the step's kv | raw score
    positions: Any  # int64 [T]
    req: Any  # int32 [T]
    slots: Any  # int64 [T], -1 = padding token
    ape: Any  # f32 [128, D]
    expected: Any = None  # the state after save_partial_states
    boundary: Any = None  # bool [T]: the token completes a window
    kv_slots: Any = None  # int64 [T]: compressed-cache entry of a boundary token, else -1
    windows: Dict[int, Any] = field(default_factory=dict)  # token -> float64 pooled oracle [D]


def build_case(np: Any, rng: Any, name: str, d: int, requests: List[Tuple[int, int]], max_len: int = 32768,
               pads: Sequence[int] = (127, 0, 5)) -> Case:
    """requests: (prefix, new tokens) each. Request r's scores are 60 x randn when r % 3 == 1 (stressing the max
    subtraction), else randn. Table columns of the windows this step touches get distinct blocks; older ones the
    null block 0, as vLLM's sliding-window group frees them. `pads`: positions of trailing padding tokens."""
    cols = -(-max_len // BLOCK)
    table = np.zeros((len(requests), cols), np.int32)
    spans = [((p0 // W) * (W // BLOCK), (p0 + n - 1) // BLOCK + 1) for p0, n in requests]
    blocks = 1 + sum(hi - lo for lo, hi in spans) + 3
    pool = rng.permutation(np.arange(1, blocks)).astype(np.int32)
    state = rng.standard_normal((blocks, BLOCK, 2 * d), dtype=np.float32)
    used = 0
    for r, (lo, hi) in enumerate(spans):
        table[r, lo:hi] = pool[used:used + hi - lo]
        if r % 3 == 1:
            state[table[r, lo:hi], :, d:] *= 60
        used += hi - lo
    pos = np.concatenate([np.arange(p0, p0 + n) for p0, n in requests] + [np.array(pads, np.int64)]).astype(np.int64)
    req = np.concatenate([np.full(n, r) for r, (_, n) in enumerate(requests)] + [np.zeros(len(pads))]).astype(np.int32)
    t_real = len(pos) - len(pads)
    slots = np.full(len(pos), -1, np.int64)
    slots[:t_real] = table[req[:t_real], pos[:t_real] // BLOCK].astype(np.int64) * BLOCK + pos[:t_real] % BLOCK
    rows = rng.standard_normal((len(pos), 2 * d), dtype=np.float32)
    rows[:, d:] *= np.where(req % 3 == 1, 60, 1).astype(np.float32)[:, None]
    rows[rows == 0] = np.float32(0.5)
    ape = (0.5 * rng.standard_normal((W, d))).astype(np.float32)
    case = Case(name, d, state, table, rows, pos, req, slots, ape)
    # what save_partial_states must leave: kv | fp32(score + ape[pos % 128]) at every slot >= 0
    expected = state.copy()
    flat = expected.reshape(-1, 2 * d)
    ok = slots >= 0
    flat[slots[ok], :d] = rows[ok, :d]
    flat[slots[ok], d:] = rows[ok, d:] + ape[pos[ok] % W]
    case.expected = expected
    case.boundary = ok & ((pos + 1) % W == 0)
    # the float64 oracle of each completed window, over the rows as stored (scores hold ape)
    for t in np.nonzero(case.boundary)[0]:
        p = pos[t] - W + 1 + np.arange(W)
        win = flat[table[req[t], p // BLOCK].astype(np.int64) * BLOCK + p % BLOCK].astype(np.float64)
        s = win[:, d:]
        e = np.exp(s - s.max(axis=0))
        case.windows[int(t)] = (e * win[:, :d]).sum(axis=0) / e.sum(axis=0)
    return case


def decode_requests(rng: Any, batch: int) -> List[Tuple[int, int]]:
    """One new token per request; even requests complete a window (position 128 k + 127), odd ones do not."""
    out = []
    for r in range(batch):
        if r % 2 == 0:
            p = W * int(rng.integers(0, 200)) + W - 1
        else:
            p = W * int(rng.integers(0, 200)) + int(rng.choice([0, 1, 63, 126, int(rng.integers(2, 126))]))
        out.append((p, 1))
    return out


def all_cases(np: Any, rng: Any) -> List[Case]:
    cases = [build_case(np, rng, f"decode_b{b}", 512, decode_requests(rng, b)) for b in (1, 8, 32, 128)]
    prefill = [(0, 2304), (200, 1800), (1000, 1700)]  # prefixes 200 and 1000: windows mixing history and new rows
    cases.append(build_case(np, rng, "prefill_3x2k", 512, prefill))
    cases.append(build_case(np, rng, "decode_b32_d128", 128, decode_requests(rng, 32)))
    cases.append(build_case(np, rng, "prefill_3x2k_d128", 128, prefill))
    return cases


# ---- timing ------------------------------------------------------------------------------------------------------
def time_us(torch: Any, fn: Callable[[], None], args: argparse.Namespace, graph: bool) -> Optional[float]:
    """Median over args.reps trials of the mean time of args.inner back-to-back calls, in microseconds; with
    `graph`, of one replay of a CUDA graph holding args.inner calls. None when the graph cannot be captured."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(args.warmup):
            fn()
        g = None
        if graph:
            try:
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, stream=stream):
                    for _ in range(args.inner):
                        fn()
                g.replay()
            except Exception as e:  # report, do not fail the run
                print(f"    (graph capture failed: {type(e).__name__}: {str(e)[:120]})")
                torch.cuda.synchronize()
                return None
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(args.reps):
            start.record(stream)
            if g is not None:
                g.replay()
            else:
                for _ in range(args.inner):
                    fn()
            end.record(stream)
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3 / args.inner)
    torch.cuda.current_stream().wait_stream(stream)
    return statistics.median(times)


# ---- entry comparison --------------------------------------------------------------------------------------------
def entry_bytes(np: Any, cache: Any, per_page: int, page_bytes: int, locs: Any) -> Tuple[Any, Any]:
    """FlashMLA sparse FP8 entries at locs: (values [n, 576], scale bytes [n, 8])."""
    flat = cache.reshape(-1)
    page, t = locs // per_page, locs % per_page
    base = page * page_bytes
    values = flat[(base + 576 * t)[:, None] + np.arange(576)]
    scales = flat[(base + 576 * per_page + 8 * t)[:, None] + np.arange(8)]
    return values, scales


def ordinal(np: Any, code: Any, sign_bit: int) -> Any:
    """Sign-magnitude codes (e4m3 bytes, bf16 bit patterns) in value order, so neighbours differ by one."""
    c = code.astype(np.int64)
    mag = c & (sign_bit - 1)
    return np.where(c & sign_bit, -mag, mag)


def compare_entries(np: Any, E: Any, cache_v: Any, cache_c: Any, oracles: Dict[int, Any], per_page: int,
                    page_bytes: int) -> Tuple[List[str], str]:
    """(problems, summary) of c128's entries (cache_c) against vLLM's (cache_v) at the given locs (SPEC 11's peer
    tolerance), and of each cache's untouched bytes."""
    problems: List[str] = []
    locs = np.array(sorted(oracles), np.int64)
    vv, sv = entry_bytes(np, cache_v, per_page, page_bytes, locs)
    vc, sc = entry_bytes(np, cache_c, per_page, page_bytes, locs)
    n_blocks = 7
    bounds = np.array([oracles[int(loc)].exponents for loc in locs], np.int64)  # [n, 7, (least, greatest)] E
    e_v, e_c = sv[:, :n_blocks].astype(np.int64) - 127, sc[:, :n_blocks].astype(np.int64) - 127
    allowed = ((bounds[..., 0] <= np.minimum(e_v, e_c)) & (np.maximum(e_v, e_c) <= bounds[..., 1]))
    z = np.array([oracles[int(loc)].z for loc in locs], np.float64)  # nominal bf16 z before RoPE, [n, 512]

    ulp = E.bf16_ulp

    # vLLM rounds neither y nor z to bf16: its z may differ by about one bf16 ulp, so its amax may cross a
    # power of two times 448 that the reference chain's does not reach within its own (one-ulp) bounds
    amax = np.abs(z[:, :448].reshape(len(locs), n_blocks, 64)).max(axis=2)
    edge = E.E4M3_MAX * np.exp2(np.round(np.log2(np.maximum(amax, 1e-30) / E.E4M3_MAX)))
    allowed |= (np.abs(amax - edge) <= 2 * ulp(amax)) & (np.abs(e_v - e_c) == 1)
    scale_diff = e_v != e_c
    if (scale_diff & ~allowed).any():
        i, w = np.argwhere(scale_diff & ~allowed)[0]
        problems.append(f"entry {locs[i]} block {w}: scale byte vLLM {sv[i, w]} c128 {sc[i, w]}, the oracle allows "
                        f"E in {list(bounds[i, w])}")
    if (sv[:, 7] != 0).any() or (sc[:, 7] != 0).any():
        problems.append("pad byte not 0")
    same = np.repeat(~scale_diff, 64, axis=1)  # codes are comparable where the block's exponent agrees
    code_d = np.abs(ordinal(np, vv[:, :448], 0x80) - ordinal(np, vc[:, :448], 0x80))
    if (code_d[same] > 1).any():
        i, c = np.argwhere((code_d > 1) & same)[0]
        problems.append(f"entry {locs[i]} channel {c}: e4m3 code vLLM {vv[i, c]:#04x} c128 {vc[i, c]:#04x}")
    rope_v = ordinal(np, np.ascontiguousarray(vv[:, 448:]).view(np.uint16), 0x8000)
    rope_c = ordinal(np, np.ascontiguousarray(vc[:, 448:]).view(np.uint16), 0x8000)
    rope_d = np.abs(rope_v - rope_c)
    # a pair's inputs (zr, zi), each about one bf16 ulp apart between the two chains, reach both rotated values
    # (|cos|, |sin| <= 1), each side rounds its result to bf16, and fp32 arithmetic adds a little: in values,
    # since where the rotation cancels the result is near zero and its ulps (or its sign) say nothing
    zr, zi = z[:, 448::2], z[:, 449::2]
    reach = np.repeat(ulp(zr) + ulp(zi) + 4 * 2.0 ** -24 * (np.abs(zr) + np.abs(zi)), 2, axis=1)
    val_v = E.bf16_value(np.ascontiguousarray(vv[:, 448:]).view(np.uint16)).astype(np.float64)
    val_c = E.bf16_value(np.ascontiguousarray(vc[:, 448:]).view(np.uint16)).astype(np.float64)
    gap = np.abs(val_v - val_c) - 0.5 * (ulp(val_v) + ulp(val_c))
    if (gap > reach).any():
        i, c = np.argwhere(gap > reach)[0]
        problems.append(f"entry {locs[i]} RoPE value {c}: vLLM {val_v[i, c]:.6g} c128 {val_c[i, c]:.6g}, further "
                        f"apart than its inputs' roundings reach ({reach[i, c]:.3g})")
    differ = ((vv != vc).any(axis=1) | (sv != sc).any(axis=1)).sum()
    v_ref = sum(bool(E.check_entry(cache_v, "dsv4_fp8", 512, per_page, page_bytes, int(loc), o))
                for loc, o in oracles.items())
    summary = (f"{len(locs)} entries, {differ} differ at all; codes differing {(code_d[same] > 0).mean():.2%}, "
               f"RoPE values differing {(rope_d > 0).mean():.2%} (at most "
               f"{np.max(np.maximum(gap, 0) / reach, initial=0):.0%} of their inputs' reach), scale bytes differing "
               f"{scale_diff.sum()} (all at power-of-two boundaries); vLLM entries outside the reference chain's "
               f"bounds: {v_ref}")
    for side, cache in (("vLLM", cache_v), ("c128", cache_c)):
        mask = E.written_mask(cache.size, "dsv4_fp8", 512, per_page, page_bytes, locs)
        stray = np.nonzero((cache.reshape(-1) != POISON) & ~mask)[0]
        if len(stray):
            problems.append(f"{side}: {len(stray)} cache bytes written outside the entries, first at {stray[0]}")
    return problems, summary


# ---- the run -----------------------------------------------------------------------------------------------------
@dataclass
class Row:
    case: str
    d: int
    tokens: int
    windows: int
    step: str
    vllm_eager_us: Optional[float] = None
    vllm_graph_us: Optional[float] = None
    c128_eager_us: Optional[float] = None
    c128_graph_us: Optional[float] = None
    c128_kernel_eager_us: Optional[float] = None
    c128_kernel_graph_us: Optional[float] = None
    check: str = "ok"
    detail: str = ""


class Bench:
    def __init__(self, args: argparse.Namespace, torch: Any, np: Any, c128: Any, V: Any, E: Any, C: Any,
                 save_mod: Any, fused_mod: Any) -> None:
        self.args, self.torch, self.np, self.c128, self.V, self.E, self.C = args, torch, np, c128, V, E, C
        self.vllm_save, self.vllm_fused = save_mod.save_partial_states, fused_mod.compress_norm_rope_store_triton
        self.pdl: Dict[str, Any] = {"launch_pdl": False}  # what vLLM passes on CUDA; dropped if Triton lacks it
        self.rows: List[Row] = []
        self.failed = False

    def gpu(self, a: Any) -> Any:
        return self.torch.from_numpy(self.np.ascontiguousarray(a)).cuda()

    def timed(self, fn: Callable[[], None]) -> Tuple[Optional[float], Optional[float]]:
        if self.args.check_only:
            return None, None
        eager = time_us(self.torch, fn, self.args, graph=False)
        graph = None if self.args.no_graph else time_us(self.torch, fn, self.args, graph=True)
        return eager, graph

    def verdict(self, row: Row, problems: List[str], detail: str) -> None:
        row.check = "FAIL" if problems else "ok"
        row.detail = "; ".join(problems[:3]) if problems else detail
        self.failed |= bool(problems)
        self.rows.append(row)
        print(f"  {row.step:7s} {row.check:4s} {row.detail}")

    def vllm_save_call(self, *a: Any) -> None:
        try:
            self.vllm_save(*a, pdl_kwargs=self.pdl)
        except (TypeError, KeyError, ValueError) as e:
            if not self.pdl or "launch_pdl" not in str(e):
                raise
            self.pdl = {}
            self.vllm_save(*a, pdl_kwargs=self.pdl)

    def run_case(self, case: Case) -> None:
        torch, np, d = self.torch, self.np, case.d
        n_tok, n_win = len(case.positions), len(case.windows)
        print(f"{case.name}: D {d}, {n_tok} tokens, {n_win} windows")
        x = self.gpu(case.rows)
        kv, score = x[:, :d], x[:, d:]  # views of one [T, 2D] buffer, as vLLM splits its kv_score GEMM output
        ape, pos, req, slots = self.gpu(case.ape), self.gpu(case.positions), self.gpu(case.req), self.gpu(case.slots)
        table = self.gpu(case.table)
        st_v, st_c = self.gpu(case.state0), self.gpu(case.state0)
        want = case.expected.tobytes()

        # save_partial_states: both bit for bit the model, every other row unchanged
        row = Row(case.name, d, n_tok, n_win, "save")
        self.vllm_save_call(kv, score, ape, pos, st_v, slots, BLOCK, d, W)
        self.V.save_partial_states(kv, score, ape, pos, st_c, slots, BLOCK, d, W)
        torch.cuda.synchronize()
        problems = []
        for side, st in (("vLLM", st_v), ("c128", st_c)):
            got = st.cpu().numpy()
            if got.tobytes() != want:
                bad = (got.reshape(-1, 2 * d) != case.expected.reshape(-1, 2 * d)).any(axis=1).sum()
                problems.append(f"{side}: {bad} state rows differ from the model")
        changed = int((case.expected != case.state0).reshape(-1, 2 * d).any(axis=1).sum())
        row.vllm_eager_us, row.vllm_graph_us = self.timed(
            lambda: self.vllm_save(kv, score, ape, pos, st_v, slots, BLOCK, d, W, self.pdl))
        row.c128_eager_us, row.c128_graph_us = self.timed(
            lambda: self.V.save_partial_states(kv, score, ape, pos, st_c, slots, BLOCK, d, W))
        self.verdict(row, problems, f"both bit-equal to the model ({changed} rows written, the rest unchanged)")

        # pooled fp32 rows (c128's adapter) against the float64 oracle
        row = Row(case.name, d, n_tok, n_win, "pooled")
        out = torch.full((n_tok, d), float("nan"), dtype=torch.float32, device="cuda")

        def pooled() -> None:
            self.V.compress_norm_rope_store_cutedsl(state_cache=st_c, token_to_req_indices=req, positions=pos,
                                                    slot_mapping=slots, block_table=table, block_size=BLOCK,
                                                    state_width=d, compress_ratio=W, compressed_kv=out)

        pooled()
        torch.cuda.synchronize()
        got = out.cpu().numpy()
        problems = [f"token {t}: {why}" for t, ref in case.windows.items()
                    if (why := self.C.window_error(got[t], "f32", ref))]
        others = np.setdiff1d(np.arange(n_tok), list(case.windows))
        if not np.isnan(got[others]).all():
            problems.append("rows of tokens that complete no window were written")
        if st_c.cpu().numpy().tobytes() != want:
            problems.append("the pooling wrote the state")
        worst = max((np.sqrt(((got[t] - r) ** 2).sum() / (r ** 2).sum()) for t, r in case.windows.items()),
                    default=0.0)
        row.c128_eager_us, row.c128_graph_us = self.timed(pooled)
        self.verdict(row, problems, f"{n_win} windows within SPEC 8 (worst relative L2 {worst:.2e})")
        if d == 512:
            self.entries(case, x, kv, score, ape, pos, req, slots, table, st_v, st_c, want)

    def entries(self, case: Case, x: Any, kv: Any, score: Any, ape: Any, pos: Any, req: Any, slots: Any, table: Any,
                st_v: Any, st_c: Any, want: bytes) -> None:
        torch, np, c128, E = self.torch, self.np, self.c128, self.E
        rng = np.random.default_rng(self.args.seed + len(case.positions))
        per_page = self.args.entries_per_page
        page_bytes = -(-(584 * per_page) // 576) * 576  # FlashMLA's padded page
        bounds = sorted(case.windows)
        pages = -(-2 * len(bounds) // per_page) + 1
        locs = rng.permutation(pages * per_page)[:len(bounds)].astype(np.int64)
        if len(bounds) >= 3:
            locs[1] = -1  # a window with no cache slot: skipped by both
        kv_slots = np.full(len(case.positions), -1, np.int64)
        kv_slots[bounds] = locs
        max_pos = int(case.positions.max()) + W
        angles = rng.uniform(-np.pi, np.pi, (max_pos, ROPE // 2))
        cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
        rope_c128 = self.gpu(np.stack([cos, sin], axis=-1))  # [pos, 32, (cos, sin)]
        cos_sin = self.gpu(np.concatenate([cos, sin], axis=1))  # vLLM: [pos, cos 0..31 | sin 0..31]
        gamma = E.gamma(rng, 512)
        gamma_t, kv_slots_t = self.gpu(gamma), self.gpu(kv_slots)
        cache_v = torch.full((pages, page_bytes), POISON, dtype=torch.uint8, device="cuda")
        cache_c = cache_v.clone()
        kv_cache = cache_v.as_strided((pages, per_page, 584), (page_bytes, 584, 1))  # vLLM reads shape[1], stride(0)
        meta = SimpleNamespace(slot_mapping=kv_slots_t)
        entry = c128.Entry(kind="dsv4_fp8", norm_weight=gamma_t, rope_table=rope_c128, cache=cache_c,
                           entries_per_page=per_page, eps=EPS)
        route = EntryRoute(c128, entry, kv_slots_t)

        def vllm() -> None:
            self.vllm_fused(state_cache=st_v, num_actual=len(case.positions), token_to_req_indices=req, positions=pos,
                            slot_mapping=slots, block_table=table, block_size=BLOCK, state_width=512,
                            cos_sin_cache=cos_sin, kv_cache=kv_cache, k_cache_metadata=meta, pdl_kwargs=self.pdl,
                            head_dim=512, rope_head_dim=ROPE, compress_ratio=W, overlap=False, use_fp4_cache=False,
                            rms_norm_weight=gamma_t, rms_norm_eps=EPS, quant_block=64, token_stride=576, scale_dim=8)

        def c128_call() -> None:
            route.run(self.V, state_cache=st_c, token_to_req_indices=req, positions=pos, slot_mapping=slots,
                      block_table=table, kv=kv, score=score, ape=ape)

        row = Row(case.name, 512, len(case.positions), len(case.windows), "entry")
        vllm()
        c128_call()
        torch.cuda.synchronize()
        host_v, host_c = cache_v.cpu().numpy(), cache_c.cpu().numpy()
        oracles = {int(kv_slots[t]): E.oracle(y, self.C.BF16_REL * np.abs(y) + self.C.BF16_ABS, gamma, EPS,
                                              np.stack([cos[p], sin[p]], axis=-1))
                   for t, y in case.windows.items() if kv_slots[t] >= 0 and (p := case.positions[t] - W + 1) >= 0}
        problems = [f"c128 entry {loc}: {why}" for loc, o in oracles.items()
                    if (why := E.check_entry(host_c, "dsv4_fp8", 512, per_page, page_bytes, loc, o))][:2]
        peer, summary = compare_entries(np, E, host_v, host_c, oracles, per_page, page_bytes)
        problems += peer
        for side, st in (("vLLM", st_v), ("c128", st_c)):
            if st.cpu().numpy().tobytes() != want:
                problems.append(f"{side}'s entry launch wrote the state")
        row.vllm_eager_us, row.vllm_graph_us = self.timed(vllm)
        row.c128_eager_us, row.c128_graph_us = self.timed(c128_call)
        bound = route.bound()
        row.c128_kernel_eager_us, row.c128_kernel_graph_us = self.timed(bound)
        self.verdict(row, problems, "c128 within SPEC 11 of the fp64 oracle; vs vLLM: " + summary)


class EntryRoute:
    """c128.vllm has no cache-entry path (its compress_norm_rope_store_cutedsl pools into fp32 rows and leaves the
    norm / RoPE / store to vLLM): this runs c128.vllm.compress_c128, which builds c128 plans and the state layout
    from vLLM's metadata, with its c128.prefill launch given output_index= and entry= instead of a pooled output."""

    def __init__(self, c128: Any, entry: Any, index: Any) -> None:
        self.c128, self.entry, self.index = c128, entry, index
        self.last: Optional[Tuple[Any, ...]] = None

    def _prefill(self, state: Any, rows: Any, ape: Any, output: Any, compress_plans: Any, write_plans: Any,
                 state_layout: Any = None) -> None:
        self.last = (state, rows, ape, compress_plans, write_plans, state_layout)
        self.c128.prefill(state, rows, ape, None, compress_plans, write_plans, state_layout=state_layout,
                          output_index=self.index, entry=self.entry)

    def run(self, V: Any, **kw: Any) -> None:
        saved = V.prefill
        V.prefill = self._prefill
        try:
            V.compress_c128(kw.pop("state_cache"), kw.pop("token_to_req_indices"), kw.pop("positions"),
                            kw.pop("slot_mapping"), kw.pop("block_table"), None, block_size=BLOCK, **kw)
        finally:
            V.prefill = saved

    def bound(self) -> Callable[[], None]:
        """The last launch with its plans fixed: c128's kernel alone."""
        state, rows, ape, cp, wp, layout = self.last
        return self.c128.Prefill(state, rows, ape, None, cp, wp, state_layout=layout, output_index=self.index,
                                 entry=self.entry)


# ---- report ------------------------------------------------------------------------------------------------------
COLUMNS = ["case", "d", "tokens", "windows", "step", "vllm_eager_us", "vllm_graph_us", "c128_eager_us",
           "c128_graph_us", "c128_kernel_eager_us", "c128_kernel_graph_us", "check", "detail"]


def fmt(v: Any) -> str:
    return "" if v is None else f"{v:.2f}" if isinstance(v, float) else str(v)


def speedup(row: Row) -> str:
    v = row.vllm_graph_us if row.vllm_graph_us is not None else row.vllm_eager_us
    c = row.c128_graph_us if row.c128_graph_us is not None else row.c128_eager_us
    return f"{v / c:.2f}x" if v and c else ""


def report(rows: List[Row], env: Dict[str, str], out: Path, args: argparse.Namespace, seconds: float) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "vllm_side_by_side.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS + list(env))
        for r in rows:
            w.writerow([fmt(getattr(r, c)) for c in COLUMNS] + list(env.values()))
    head = ["case", "D", "T", "win", "step", "vLLM eager", "vLLM graph", "c128 eager", "c128 graph",
            "c128 kernel graph", "vLLM/c128", "check"]
    lines = [f"| {' | '.join(head)} |", f"|{'|'.join('---' for _ in head)}|"]
    for r in rows:
        cells = [r.case, r.d, r.tokens, r.windows, r.step, r.vllm_eager_us, r.vllm_graph_us, r.c128_eager_us,
                 r.c128_graph_us, r.c128_kernel_graph_us, speedup(r), r.check]
        lines.append(f"| {' | '.join(fmt(c) for c in cells)} |")
    notes = [f"- {r.case} {r.step}: {r.check}: {r.detail}" for r in rows]
    md = ["# c128's vLLM adapter beside vLLM's Triton kernels", "",
          *(f"- {k}: {v}" for k, v in env.items()),
          f"- timing: median of {args.reps} trials of {args.inner} back-to-back calls (µs per call), {args.warmup} "
          f"warm-up calls; graph = one CUDA graph replay of {args.inner} calls; same buffers each call (warm L2); "
          f"c128 entry = adapter-style call (plans from vLLM's metadata each call), kernel = launch with fixed plans; "
          f"vLLM/c128 compares graph times (eager where no graph)", f"- whole run: {seconds:.0f} s", "",
          *lines, "", "## Checks", "", *notes, ""]
    (out / "vllm_side_by_side.md").write_text("\n".join(md))
    print("\n".join(lines))
    print(f"wrote {out / 'vllm_side_by_side.csv'} and {out / 'vllm_side_by_side.md'}")


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    t0 = time.time()
    torch, triton, np = gpu_stack()
    c128, V, E, C = import_c128()
    save_mod, fused_mod = import_vllm_ops(args.vllm_ops)
    if args.entries_per_page < 1 or args.entries_per_page & (args.entries_per_page - 1):
        print("setup error: --entries-per-page must be a power of two")
        return 2
    env = environment(torch, triton, c128, save_mod, fused_mod)
    for k, v in env.items():
        print(f"{k}: {v}")
    rng = np.random.default_rng(args.seed)
    wanted = {c for c in args.cases.split(",") if c}
    cases = [c for c in all_cases(np, rng) if not wanted or c.name in wanted]
    if wanted - {c.name for c in cases}:
        print(f"setup error: unknown cases {sorted(wanted - {c.name for c in cases})}")
        return 2
    bench = Bench(args, torch, np, c128, V, E, C, save_mod, fused_mod)
    for case in cases:
        try:
            bench.run_case(case)
        except Exception as e:  # a crash on one side is a failed check, the other cases still run
            bench.failed = True
            bench.rows.append(Row(case.name, case.d, len(case.positions), len(case.windows), "error", check="FAIL",
                                  detail=f"{type(e).__name__}: {e}"))
            print(f"  FAIL {type(e).__name__}: {e}")
            torch.cuda.synchronize()
    report(bench.rows, env, Path(args.out), args, time.time() - t0)
    print(f"{'FAILED' if bench.failed else 'all checks passed'} in {time.time() - t0:.0f} s")
    return 1 if bench.failed else 0


if __name__ == "__main__":
    sys.exit(main())
