#!/usr/bin/env python3
"""Tables and target verdicts of BENCHMARKS.md from one run of ../shared/peer/run.

    python3 bench/peer_report.py --sglang peer.csv --meta peer_meta.txt [--trtllm trtllm_vs_c128.csv]
                                 [--c128 bench_c128.csv] [--png plot.png] [--md report.md]

peer.csv holds, per case and timing mode, SGLang 33f63408 (`sgl`), SGLang 2026-07-01 (`sgl0701`)
and c128, measured in one program (A/B alternated, graph replay and stream mode); the TensorRT-LLM
CSV holds its kernels beside c128 in a second program. The tables use graph mode. "best peer" is
the fastest of the peers in the same run; the TensorRT-LLM time is compared with the c128 time of
its own program (the two programs measure c128 separately). Both ceilings (device-to-device copy
and read-only stream) come from the SGLang program's start values (peer_meta.txt). --c128 adds the
tables of c128's own variants (c128_bench's layout_* and entry_* cases: other engines' state
layouts against today's, and the cache-entry paths against the pooled launch), from report.py."""
import argparse
import csv
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report  # noqa: E402  (bench/report.py: the variants' tables)

TARGET_CASES = {"decode_boundary", "decode_off", "decode_mix", "prefill_1req", "prefill_8req", "prefill_extend"}


def ceilings(meta_path):
    text = open(meta_path).read()
    copy = float(re.search(r"copy GB/s: start (\d+)", text).group(1))
    read = float(re.search(r"read GB/s: start (\d+)", text).group(1))
    return copy, read


def load_sglang(path):
    rows = {}
    for r in csv.DictReader(open(path)):
        if r["mode"] == "graph":
            rows[(r["kind"], r["state"], int(r["size"]))] = r
    return rows


def load_trtllm(path):
    """(case, state, size) -> {impl: median_us} for graph mode."""
    out = {}
    if not path:
        return out
    for r in csv.DictReader(open(path)):
        if r["mode"] != "graph" or r["case"] not in TARGET_CASES:
            continue
        out.setdefault((r["case"], r["state"], int(r["size"])), {})[r["impl"]] = float(r["median_us"])
    return out


def fmt_size(kind, size):
    return f"B={size}" if kind.startswith("decode") else f"N={size // 1024}K"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sglang", required=True)
    ap.add_argument("--meta", required=True)
    ap.add_argument("--trtllm")
    ap.add_argument("--c128", help="c128_bench's CSV with the layout_* and entry_* variants")
    ap.add_argument("--png")
    ap.add_argument("--md")
    a = ap.parse_args()
    copy, read = ceilings(a.meta)
    sg = load_sglang(a.sglang)
    trt = load_trtllm(a.trtllm)
    lines = [f"Ceilings of this run: copy {copy:.0f} GB/s (bytes read + written), read-only stream {read:.0f} GB/s.", ""]
    lines.append("| case | state | size | c128 µs | SGLang µs | SGLang 07-01 µs | best peer / c128 | c128 % copy | c128 % read "
                 "| TRT-LLM / c128 (its program) |")
    lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    losses, verdicts = [], []
    for (kind, state, size), r in sg.items():
        c128, s1, s0 = float(r["c128_us"]), float(r["sgl_us"]), float(r["sgl0701_us"])
        best = min(s1, s0)
        gbps = float(r["bytes_per_unit"]) / (c128 * 1e-6) / 1e9
        t = trt.get((kind, state, size), {})
        trt_ratio = f"{t['trtllm'] / t['c128']:.2f}" if "trtllm" in t and "c128" in t else "-"
        if "trtllm" in t and "c128" in t and t["trtllm"] < t["c128"]:
            losses.append(f"{kind} {state} {fmt_size(kind, size)} (TensorRT-LLM, {t['trtllm']:.2f} vs {t['c128']:.2f} µs)")
        if best < c128:
            losses.append(f"{kind} {state} {fmt_size(kind, size)} ({'SGLang' if s1 <= s0 else 'SGLang 07-01'}, "
                          f"{best:.2f} vs {c128:.2f} µs)")
        lines.append(f"| {kind} | {state} | {fmt_size(kind, size)} | {c128:.2f} | {s1:.2f} | {s0:.2f} | {best / c128:.3f} "
                     f"| {100 * gbps / copy:.1f} | {100 * gbps / read:.1f} | {trt_ratio} |")
    lines.append("")

    def pct(kind, state, size):
        r = sg[(kind, state, size)]
        return 100 * float(r["bytes_per_unit"]) / (float(r["c128_us"]) * 1e-6) / 1e9 / copy

    big = [(k, s, n) for (k, s, n) in sg if k in ("prefill_1req", "prefill_8req") and n >= 32768]
    low = min(pct(*x) for x in big)
    verdicts.append(("Large prefills (N ≥ 32K, one and 8 requests) ≥ 95 % of copy", low >= 95,
                     f"lowest {low:.1f} % ({len(big)} cases)"))
    for state, goal in (("f32", 90), ("bf16", 80)):
        got = {n: pct("decode_boundary", state, n) for (k, s, n) in sg if k == "decode_boundary" and s == state and n >= 128}
        verdicts.append((f"Boundary decode B ≥ 128, {state} state ≥ {goal} % of copy", min(got.values()) >= goal,
                         ", ".join(f"B={n}: {v:.1f} %" for n, v in sorted(got.items()))))
    small = {(s, n): float(sg[(k, s, n)]["c128_us"]) for (k, s, n) in sg if k == "decode_boundary" and n <= 8}
    verdicts.append(("Boundary decode B ≤ 8 ≤ 2.0 µs", max(small.values()) <= 2.0,
                     ", ".join(f"{s} B={n}: {v:.2f} µs" for (s, n), v in sorted(small.items()))))
    verdicts.append(("Faster than the fastest peer in every case", not losses,
                     f"{len(losses)} losses" + (": " + "; ".join(losses) if losses else "")))
    lines.append("| target | met | measured |")
    lines.append("|---|---|---|")
    for name, ok, text in verdicts:
        lines.append(f"| {name} | {'**met**' if ok else '**not met**'} | {text} |")
    if a.c128:
        d = report.Data(report.load(a.c128), [])
        m = d.meta
        lines += ["", f"c128's variants (c128_bench, {m.get('gpu', '?')}, commit {m.get('commit', '?')}; copy "
                      f"{d.copy_start:.0f} GB/s in that run):", ""]
        report.variant_report(d, lines)
    out = "\n".join(lines) + "\n"
    if a.md:
        open(a.md, "w").write(out)
    print(out)
    if a.png:
        plot(sg, copy, read, a.png)


def plot(sg, copy, read, png):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(14, 5.6))
    colors = {"c128": "tab:blue", "sgl": "tab:orange", "sgl0701": "tab:green"}
    names = {"c128": "c128", "sgl": "SGLang 33f63408", "sgl0701": "SGLang 2026-07-01"}
    ax = axes[0]
    for state, ls in (("f32", "-"), ("bf16", "--")):
        sizes = sorted(n for (k, s, n) in sg if k == "decode_boundary" and s == state)
        for impl in ("c128", "sgl", "sgl0701"):
            ax.plot(sizes, [float(sg[("decode_boundary", state, n)][f"{impl}_us"]) for n in sizes], ls, marker="o",
                    color=colors[impl], label=f"{names[impl]}, {state} state")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch (every request at a window boundary)")
    ax.set_ylabel("µs per decode step (graph replay, median)")
    ax.set_title("Boundary decode")
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)
    ax = axes[1]
    groups = [("decode_boundary", "f32"), ("decode_boundary", "bf16"), ("prefill_1req", "f32"), ("prefill_1req", "bf16")]
    x = 0
    ticks, labels = [], []
    for kind, state in groups:
        sizes = sorted(n for (k, s, n) in sg if k == kind and s == state and (n >= 64 or kind != "decode_boundary"))
        for n in sizes:
            r = sg[(kind, state, n)]
            for j, impl in enumerate(("c128", "sgl", "sgl0701")):
                gbps = float(r["bytes_per_unit"]) / (float(r[f"{impl}_us"]) * 1e-6) / 1e9
                ax.bar(x + 0.27 * j, 100 * gbps / copy, 0.27, color=colors[impl],
                       label=names[impl] if (kind, state, n) == (groups[0][0], groups[0][1], sizes[0]) else None)
            ticks.append(x + 0.27)
            labels.append(f"{kind.split('_')[0]} {state} {fmt_size(kind, n)}")
            x += 1
    ax.axhline(100, color="black", lw=1, label=f"copy ceiling ({copy:.0f} GB/s)")
    ax.axhline(100 * read / copy, color="gray", lw=1, ls="--", label=f"read-only ceiling ({read:.0f} GB/s)")
    ax.set_xticks(ticks)
    ax.set_xticklabels(labels, fontsize=6, rotation=90)
    ax.set_ylabel("% of the copy bandwidth (bytes model of DESIGN 10)")
    ax.set_title("Achieved bandwidth, with both ceilings of the same run")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    main()
