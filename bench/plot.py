#!/usr/bin/env python3
"""Plot the benchmark CSVs: python3 bench/plot.py --c bench_c128.csv [--torch bench_torch.csv] --png out.png

Left: decode time per step against batch size (c128 two-warp and legacy, the empty launch of the
same grid, the best PyTorch variant), CUDA-graph medians with p10-p90 bars. Right: achieved
bandwidth as % of the device-to-device copy measured in the same run, boundary decode and prefill."""
import argparse
import csv
import os
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--c", required=True)
    ap.add_argument("--torch")
    ap.add_argument("--png", required=True)
    a = ap.parse_args()
    rows = load(a.c)
    trows = load(a.torch) if a.torch and os.path.exists(a.torch) else []
    c = {(r["case"], r["state"], int(r["size"]), r["variant"], r["mode"]): r for r in rows}
    tbest = defaultdict(lambda: float("inf"))
    for r in trows:
        k = (r["case"], r["state"], int(r["size"]))
        tbest[k] = min(tbest[k], float(r["median_us"]))
    meta = rows[0]

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5.6))
    styles = {"decode_boundary": "o", "decode_mix": "s", "decode_off": "^"}
    colors = {"decode_boundary": "tab:blue", "decode_mix": "tab:green", "decode_off": "tab:orange"}
    state = "f32"
    for case, marker in styles.items():
        Bs = sorted({k[2] for k in c if k[0] == case and k[1] == state})
        for variant, ls in (("two_warp", "-"), ("legacy", ":")):
            pts = [(B, c.get((case, state, B, variant, "graph"))) for B in Bs]
            pts = [(B, r) for B, r in pts if r]
            if not pts:
                continue
            x = [B for B, _ in pts]
            y = [float(r["median_us"]) for _, r in pts]
            lo = [float(r["median_us"]) - float(r["p10_us"]) for _, r in pts]
            hi = [float(r["p90_us"]) - float(r["median_us"]) for _, r in pts]
            ax1.errorbar(x, y, yerr=[lo, hi], marker=marker, ls=ls, color=colors[case], capsize=2,
                         label=f"c128 {case[7:]} ({'two-warp' if variant == 'two_warp' else 'legacy'})")
        tb = [(B, tbest[(case, state, B)]) for B in Bs if (case, state, B) in tbest]
        if tb:
            ax1.plot([b for b, _ in tb], [t for _, t in tb], marker=marker, ls="--", color=colors[case], alpha=0.45,
                     label=f"PyTorch best, {case[7:]}")
    Bs = sorted({k[2] for k in c if k[0] == "empty"})
    ax1.plot(Bs, [float(c[("empty", "-", B, "-", "graph")]["median_us"]) for B in Bs], "k-.", marker="x",
             label="empty launch, same grid")
    ax1.set_xscale("log", base=2)
    ax1.set_yscale("log")
    ax1.set_xlabel("decode batch B (requests)")
    ax1.set_ylabel("µs per step (CUDA-graph median, p10–p90)")
    ax1.set_title(f"Decode, head_dim 512, {state} state")
    ax1.grid(True, which="both", alpha=0.3)
    ax1.legend(fontsize=7, ncol=2)

    labels, tw, lg, cols = [], [], [], []
    for st in ("f32", "bf16"):
        for B in sorted({k[2] for k in c if k[0] == "decode_boundary" and k[1] == st}):
            if B < 32:
                continue
            r1, r2 = c.get(("decode_boundary", st, B, "two_warp", "graph")), c.get(
                ("decode_boundary", st, B, "legacy", "graph"))
            if r1 and r2:
                labels.append(f"dec B{B} {st}")
                tw.append(float(r1["pct_copy"]))
                lg.append(float(r2["pct_copy"]))
                cols.append("tab:blue")
    for case in ("prefill_1req", "prefill_8req", "prefill_extend"):
        for st in ("f32", "bf16"):
            for N in sorted({k[2] for k in c if k[0] == case and k[1] == st}):
                best = min((c.get((case, st, N, "two_warp", m)) for m in ("stream", "graph")),
                           key=lambda r: float(r["median_us"]) if r else float("inf"))
                bestl = min((c.get((case, st, N, "legacy", m)) for m in ("stream", "graph")),
                            key=lambda r: float(r["median_us"]) if r else float("inf"))
                if best and bestl:
                    labels.append(f"{case[8:]} {N // 1024}K {st}")
                    tw.append(float(best["pct_copy"]))
                    lg.append(float(bestl["pct_copy"]))
                    cols.append("tab:red")
    x = list(range(len(labels)))
    ax2.bar([i - 0.2 for i in x], tw, 0.4, color=cols, label="two-warp (default)")
    ax2.bar([i + 0.2 for i in x], lg, 0.4, color="lightgray", label="legacy")
    ax2.axhline(85, color="tab:blue", ls="--", lw=1, label="decode target 85 %")
    ax2.axhline(90, color="tab:red", ls="--", lw=1, label="prefill target 90 % (N ≥ 32K)")
    ax2.set_xticks(x)
    ax2.set_xticklabels(labels, rotation=75, fontsize=7)
    ax2.set_ylabel("% of device-to-device copy bandwidth")
    ax2.set_ylim(0, 105)
    ax2.set_title("Bandwidth: boundary decode (B ≥ 32) and prefill")
    ax2.legend(fontsize=7, loc="lower right")
    ax2.grid(True, axis="y", alpha=0.3)
    fig.suptitle(f"c128 on {meta['gpu']} (driver {meta['driver']}, nvcc {meta['nvcc']}, commit {meta['commit']})",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(a.png, dpi=110)
    print(f"wrote {a.png}")


if __name__ == "__main__":
    main()
