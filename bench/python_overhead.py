#!/usr/bin/env python3
"""Host time per decode call through the Python binding, against the C call itself.

Each variant makes the same decode launch (h512_f32_f32_f32, one step of `--batch` requests, one
of them at a window boundary, the rest persisting their row, as in a serving step) `--calls` times
in a row, timed on the host (time.perf_counter_ns around the loop), in `--rounds` rounds with a
synchronisation between rounds (not timed) so the launch queue never fills; the median round
gives the per-call figure. Variants:

  c128.decode(...)               the functional binding, stream from PyTorch (default)
  c128.decode(..., stream=int)   the same with an integer stream handle
  c128.Decode(...)()             the bound launch (tensors checked once, prebuilt struct)
  compress_forward(..., out=)    the SGLang drop-in
  ctypes c128_decode             the C entry point through one ctypes call with a prebuilt
                                 c128_decode_args: the library's own host time plus ctypes' call
  ctypes no-op                   c128_instance_count through ctypes: the ctypes call alone, so
                                 "C call" = ctypes c128_decode - ctypes no-op
  torch.ops.c128.decode(...)     the PyTorch operator (c128.torch), eager
  torch.ops.c128.prefill(...)    the same for a prefill call (its C call: ctypes c128_prefill)
  torch.ops.c128.sglang_compress_forward(...)   the SGLang drop-in's operator
  c128.Prefill(...)()            the bound prefill launch
  dispatcher no-op               a torch.library operator of decode's schema that does nothing: the
                                 PyTorch dispatcher's own share of an operator call

Rows are reported against the C call of their kind ("vs C call"); the targets are <= 1 us above it
for the bound objects and <= 3 us for the operators.

With a GPU (PyTorch) it also times the kernels (CUDA events over the eager loop) and a CUDA graph
of the same decode (torch.cuda.graph): host time per replay and GPU time per replay. Without one
it runs the host runner on calls of zero rows (nothing to compute, so the time is the call path:
the binding's checks and the library's validation) on PyTorch CPU tensors where PyTorch
is installed (--numpy: NumPy arrays; the operators need PyTorch). Prints a table and the
environment; --csv FILE appends the rows.

    python bench/python_overhead.py [--batch 32] [--calls 200] [--rounds 25] [--cpu] [--csv FILE]
"""

from __future__ import annotations

import argparse
import csv
import importlib
import ctypes
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List

import numpy as np

import c128
from c128 import _lib
from c128.sglang import DecodePlan, compress_forward

D = 512


def per_call_us(fn: Callable[[], Any], calls: int, rounds: int, sync: Callable[[], None]) -> float:
    """Median over rounds of the host time per call (µs)."""
    for _ in range(3):
        fn()
    sync()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter_ns() - start) / calls / 1e3)
        sync()
    return statistics.median(samples)


def commit() -> str:
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        return subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=25)
    ap.add_argument("--cpu", action="store_true", help="the host runner even where there is a GPU")
    ap.add_argument("--numpy", action="store_true", help="host runner on NumPy arrays (no PyTorch)")
    ap.add_argument("--csv", help="append the results to this CSV file")
    args = ap.parse_args()

    torch = None
    if not args.numpy:
        try:
            import torch as _t

            torch = _t
        except ImportError:
            pass
    gpu = torch is not None and not args.cpu and torch.cuda.is_available()
    b = args.batch if gpu else 0  # the host runner: zero-row calls (checks and the C call's validation only)
    pages = args.batch + 2
    rng = np.random.default_rng(0)
    seqs = 128 * rng.integers(1, 4, b) + rng.integers(1, 127, b)
    if b:
        seqs[0] = 256  # one request completes a window
    reqs = c128.requests(np.arange(b), seqs)
    plans = c128.plan_decode(c128.Ring(pages), reqs).view(np.uint8).reshape(b, 16)
    # a prefill call of the same size: b requests of one token each (chunked prefill tails); on the
    # host runner every request is absent (sentinel plans only)
    pre_reqs = c128.requests(np.arange(b), seqs, np.where(seqs > 0, 1, 0))
    pre = c128.plan_prefill(c128.Ring(pages), pre_reqs, capacity=b, pad_to_capacity=True)
    cplans, wplans = pre.compress.view(np.uint8).reshape(b, 16), pre.write.view(np.uint8).reshape(b, 8)
    state = rng.standard_normal((pages, 128, 2 * D)).astype(np.float32)
    x = rng.standard_normal((b, 2 * D)).astype(np.float32)
    ape = rng.standard_normal((128, D)).astype(np.float32)
    out = np.zeros((b, D), np.float32)
    arrays = (state, x, ape, out, plans, cplans, wplans)
    if torch is not None:
        arrays = tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in arrays)
        if gpu:
            arrays = tuple(a.cuda() for a in arrays)
    state, x, ape, out, plans, cplans, wplans = arrays
    if gpu:
        stream_handle = torch.cuda.current_stream().cuda_stream
        sync = torch.cuda.synchronize
    else:
        stream_handle = None
        sync = lambda: None  # noqa: E731

    bound = c128.Decode(state, x, ape, out, plans)
    bound_prefill = c128.Prefill(state, x, ape, out, cplans, wplans)
    ptr = (lambda t: t.data_ptr()) if torch is not None else (lambda a: a.ctypes.data)
    group = c128.decode_group_size(b, D, _sm_count(torch) if gpu else 132)
    raw = _lib.DecodeArgs()
    raw.head_dim, raw.state_dtype, raw.input_dtype, raw.output_dtype = D, c128.F32, c128.F32, c128.F32
    raw.state, raw.state_pages, raw.input, raw.ape = ptr(state), pages, ptr(x), ptr(ape)
    raw.output, raw.output_rows, raw.plans, raw.batch = ptr(out), b, ptr(plans), b
    raw.layout.size = 1
    raw_ref = ctypes.byref(raw)
    raw_group = _lib.DecodeArgs.from_buffer_copy(raw)
    raw_group.requests_per_block = group
    raw_group_ref = ctypes.byref(raw_group)
    raw_p = _lib.PrefillArgs()
    raw_p.head_dim, raw_p.state_dtype, raw_p.input_dtype, raw_p.output_dtype = D, c128.F32, c128.F32, c128.F32
    raw_p.state, raw_p.state_pages, raw_p.input, raw_p.input_rows, raw_p.ape = ptr(state), pages, ptr(x), b, ptr(ape)
    raw_p.output, raw_p.output_rows = ptr(out), b
    raw_p.compress_plans, raw_p.num_compress, raw_p.write_plans, raw_p.num_write = ptr(cplans), b, ptr(wplans), b
    raw_p.layout.size = 1
    raw_p_ref = ctypes.byref(raw_p)
    plan = DecodePlan(128, plans)
    c_fn = _lib.decode if gpu else _lib.decode_host
    c_prefill = _lib.prefill if gpu else _lib.prefill_host
    c_arg = stream_handle if gpu else None

    variants: Dict[str, Callable[[], Any]] = {
        "c128.decode(...)": lambda: c128.decode(state, x, ape, out, plans),
        "c128.Decode(...)()": bound,
        "compress_forward(..., out=)": lambda: compress_forward(state, x, ape, plan, head_dim=D, compress_ratio=128,
                                                                out=out),
        "c128.prefill(...)": lambda: c128.prefill(state, x, ape, out, cplans, wplans),
        "c128.Prefill(...)()": bound_prefill,
        "ctypes c128_decode": lambda: c_fn(raw_ref, c_arg),
        "ctypes c128_decode, explicit group": lambda: c_fn(raw_group_ref, c_arg),
        "ctypes c128_prefill": lambda: c_prefill(raw_p_ref, c_arg),
        "ctypes no-op": _lib.instance_count,
    }
    if gpu:
        variants["c128.decode(..., stream=int)"] = lambda: c128.decode(state, x, ape, out, plans, stream=stream_handle)
    if torch is not None:
        importlib.import_module("c128.torch")  # registers torch.ops.c128

        ops = torch.ops.c128
        variants["torch.ops.c128.decode(...)"] = lambda: ops.decode(state, x, ape, out, plans)
        variants["torch.ops.c128.prefill(...)"] = lambda: ops.prefill(state, x, ape, out, cplans, wplans)
        variants["torch.ops.c128.sglang_compress_forward(...)"] = lambda: ops.sglang_compress_forward(
            state, x, ape, plans, None, out, is_decode=True, head_dim=D)
        noop = _noop_operator(torch)
        variants["dispatcher no-op"] = lambda: noop(state, x, ape, out, plans)
    assert c_fn(raw_ref, c_arg) == 0 and c_prefill(raw_p_ref, c_arg) == 0
    results: List[Dict[str, Any]] = []
    for name, fn in variants.items():
        results.append({"variant": name, "host_us_per_call": per_call_us(fn, args.calls, args.rounds, sync)})
    by = {r["variant"]: r["host_us_per_call"] for r in results}
    c_call = by["ctypes c128_decode"] - by["ctypes no-op"]
    c_prefill_call = by["ctypes c128_prefill"] - by["ctypes no-op"]

    gpu_rows: List[Dict[str, Any]] = []
    if gpu:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def gpu_us(fn: Callable[[], Any]) -> float:
            samples = []
            for _ in range(args.rounds):
                start.record()
                for _ in range(args.calls):
                    fn()
                end.record()
                end.synchronize()
                samples.append(1e3 * start.elapsed_time(end) / args.calls)
            return statistics.median(samples)

        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            bound()
        graph.replay()
        sync()
        gpu_rows = [
            {"variant": "GPU time per eager decode (events)", "us": gpu_us(bound)},
            {"variant": "GPU time per graph replay (events)", "us": gpu_us(graph.replay)},
            {"variant": "host time per graph replay", "us": per_call_us(graph.replay, args.calls, args.rounds, sync)},
        ]

    env = {
        "commit": commit(), "c128": c128.__version__, "math": c128.build_info().math, "python": platform.python_version(),
        "numpy": np.__version__,
        "path": "GPU (CUDA kernels)" if gpu else "CPU (host runner, zero-row calls, "
                                                 f"{'PyTorch CPU tensors' if torch is not None else 'NumPy'})",
        "batch": b, "calls": args.calls, "rounds": args.rounds, "cpu": platform.processor() or platform.machine(),
    }
    if torch is not None:
        env["torch"] = torch.__version__
    if gpu:
        props = torch.cuda.get_device_properties(0)
        env.update(gpu=props.name, cuda=torch.version.cuda, driver=_driver_version())
    print("environment: " + ", ".join(f"{k} {v}" for k, v in env.items()))
    print(f"{'variant':<46} {'host us/call':>12} {'vs C call':>10}")
    for r in results:
        name = r["variant"]
        base = c_prefill_call if "prefill" in name.lower() else c_call
        extra = "" if name.startswith(("ctypes", "dispatcher")) else f"{r['host_us_per_call'] - base:+9.2f}"
        print(f"{name:<46} {r['host_us_per_call']:12.2f} {extra:>10}")
    print(f"{'C call (ctypes c128_decode - no-op)':<46} {c_call:12.2f}")
    print(f"{'C call (ctypes c128_prefill - no-op)':<46} {c_prefill_call:12.2f}")
    for r in gpu_rows:
        print(f"{r['variant']:<46} {r['us']:12.2f}")
    if args.csv:
        new = not os.path.exists(args.csv)
        with open(args.csv, "a", newline="") as f:
            w = csv.writer(f)
            if new:
                w.writerow(["commit", "path", "gpu", "batch", "variant", "us"])
            for r in results:
                w.writerow([env["commit"], env["path"], env.get("gpu", ""), b, r["variant"], f"{r['host_us_per_call']:.3f}"])
            w.writerow([env["commit"], env["path"], env.get("gpu", ""), b, "C call", f"{c_call:.3f}"])
            w.writerow([env["commit"], env["path"], env.get("gpu", ""), b, "C call (prefill)", f"{c_prefill_call:.3f}"])
            for r in gpu_rows:
                w.writerow([env["commit"], env["path"], env.get("gpu", ""), b, r["variant"], f"{r['us']:.3f}"])
    return 0


def _sm_count(torch: Any) -> int:
    return int(torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count)


_NOOP_LIBRARY: List[Any] = []


def _noop_operator(torch: Any) -> Any:
    """bench::noop with c128::decode's schema and an implementation that does nothing."""
    lib = torch.library.Library("c128_bench", "DEF")
    _NOOP_LIBRARY.append(lib)
    lib.define(str(torch.ops.c128.decode.default._schema).replace("c128::decode", "noop"))
    for key in ("CPU", "CUDA"):
        lib.impl("noop", lambda *a, **k: None, key)
    return torch.ops.c128_bench.noop


def _driver_version() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, check=True).stdout.strip().splitlines()[0]
    except (OSError, subprocess.CalledProcessError, IndexError):
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
