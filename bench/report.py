#!/usr/bin/env python3
"""Tables and target verdicts from the benchmark CSVs (bench.c's and torch_ref.py's).

    python3 bench/report.py --c bench_c128.csv [--torch bench_torch.csv ...] [--md report.md]

c128's figure for a case is the default (two-warp) epilogue's best of its "stream" and "graph"
medians; PyTorch's is the best of eager / torch.compile, each launched back to back or replayed
from CUDA graphs, over every --torch file given (torch.compile's kernels differ from run to run).
Standard library only."""
import argparse
import csv
import sys
from collections import defaultdict

DECODE = ("decode_boundary", "decode_off", "decode_mix")
PREFILL = ("prefill_1req", "prefill_8req", "prefill_extend")


def load(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def fnum(row, key):
    return float(row[key])


def pct_read(row):
    """% of the read-only ceiling: a column of CSVs written since 0.3.0."""
    return f"{float(row['pct_read']):.1f}" if row.get("pct_read") else "—"


class Data:
    def __init__(self, c_rows, t_rows):
        self.meta = c_rows[0] if c_rows else {}
        self.c = {}  # (case, state, size, variant, mode) -> row
        for r in c_rows:
            self.c[(r["case"], r["state"], int(r["size"]), r["variant"], r["mode"])] = r
        self.t = defaultdict(dict)  # (case, state, size) -> {(variant, mode): row}
        for r in t_rows:  # the best row per (variant, mode) when several runs are given
            seen = self.t[(r["case"], r["state"], int(r["size"]))]
            key = (r["variant"], r["mode"])
            if key not in seen or fnum(r, "median_us") < fnum(seen[key], "median_us"):
                seen[key] = r
        self.torch_version = t_rows[0]["torch"] if t_rows else None
        copies = [fnum(r, "gbps") for r in c_rows if r["case"] == "copy"]
        self.copy_start = copies[0] if copies else float("nan")
        self.copy_end = copies[-1] if len(copies) > 1 else float("nan")

    def get(self, case, state, size, variant, mode):
        return self.c.get((case, state, size, variant, mode))

    def best(self, case, state, size, variant="two_warp"):
        """(row, mode) with the lowest median of stream / graph."""
        rows = [(self.get(case, state, size, variant, m), m) for m in ("stream", "graph")]
        rows = [(r, m) for r, m in rows if r]
        return min(rows, key=lambda x: fnum(x[0], "median_us")) if rows else (None, None)

    def torch_best(self, case, state, size):
        rows = self.t.get((case, state, size))
        if not rows:
            return None, None
        (v, m), r = min(rows.items(), key=lambda kv: fnum(kv[1], "median_us"))
        return r, f"{v}/{m}"

    def sizes(self, case, state):
        return sorted({k[2] for k in self.c if k[0] == case and k[1] == state})

    def empty(self, size, mode):
        return self.c.get(("empty", "-", size, "-", mode))


def us(x):
    return f"{x:.2f}" if x < 100 else f"{x:.1f}" if x < 1000 else f"{x:.0f}"


def spread(r):
    return f"{us(fnum(r, 'p10_us'))}–{us(fnum(r, 'p90_us'))}"


def decode_table(d, out):
    out.append("| case | state | B | c128 graph µs (p10–p90) | stream µs | step-graph µs | GB/s | % copy | % read | "
               "empty graph µs | Δ empty µs | legacy graph µs | legacy/two-warp | PyTorch best µs | c128 speed-up |")
    out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for case in DECODE:
        for state in ("f32", "bf16"):
            for B in d.sizes(case, state):
                g = d.get(case, state, B, "two_warp", "graph")
                s = d.get(case, state, B, "two_warp", "stream")
                st = d.get(case, state, B, "two_warp", "step_graph")
                lg = d.get(case, state, B, "legacy", "graph")
                e = d.empty(B, "graph")
                if not g:
                    continue
                best, _ = d.best(case, state, B)
                tb, tv = d.torch_best(case, state, B)
                ratio = f"{fnum(tb, 'median_us') / fnum(best, 'median_us'):.1f}×" if tb else "—"
                delta = f"{fnum(g, 'median_us') - fnum(e, 'median_us'):+.2f}" if e else "—"
                lgr = f"{fnum(lg, 'median_us') / fnum(g, 'median_us'):.3f}" if lg else "—"
                tstr = f"{us(fnum(tb, 'median_us'))} ({tv})" if tb else "—"
                out.append(
                    f"| {case} | {state} | {B} | {us(fnum(g, 'median_us'))} ({spread(g)}) | {us(fnum(s, 'median_us'))} | "
                    f"{us(fnum(st, 'median_us')) if st else '—'} | {fnum(g, 'gbps'):.0f} | {fnum(g, 'pct_copy'):.1f} | {pct_read(g)} | "
                    f"{us(fnum(e, 'median_us')) if e else '—'} | {delta} | {us(fnum(lg, 'median_us')) if lg else '—'} | "
                    f"{lgr} | {tstr} | {ratio} |")


def prefill_table(d, out):
    out.append("| case | state | N | calls | c128 µs (best mode, p10–p90) | GB/s | % copy | % read | legacy µs | "
               "legacy/two-warp | PyTorch best µs | c128 speed-up |")
    out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for case in PREFILL:
        for state in ("f32", "bf16"):
            for N in d.sizes(case, state):
                best, mode = d.best(case, state, N)
                lg, _ = d.best(case, state, N, "legacy")
                if not best:
                    continue
                tb, tv = d.torch_best(case, state, N)
                calls = (N + 65535) // 65536
                ratio = f"{fnum(tb, 'median_us') / fnum(best, 'median_us'):.1f}×" if tb else "—"
                lgr = f"{fnum(lg, 'median_us') / fnum(best, 'median_us'):.3f}" if lg else "—"
                tstr = f"{us(fnum(tb, 'median_us'))} ({tv})" if tb else "—"
                out.append(
                    f"| {case} | {state} | {N // 1024}K | {calls} | {us(fnum(best, 'median_us'))} {mode} ({spread(best)}) | "
                    f"{fnum(best, 'gbps'):.0f} | {fnum(best, 'pct_copy'):.1f} | {pct_read(best)} | "
                    f"{us(fnum(lg, 'median_us')) if lg else '—'} | {lgr} | {tstr} | {ratio} |")


def chain_table(d, out):
    keys = sorted({(k[0], k[2]) for k in d.c if k[0].startswith("chain_")})
    if not keys:
        return
    out.append("| chain (decode → RMSNorm consumer), f32 | B | mode | PDL off µs (p10–p90) | PDL on µs (p10–p90) | "
               "on/off |")
    out.append("|---|---:|---|---:|---:|---:|")
    for case, B in keys:
        for mode in ("stream", "graph", "step_graph"):
            off = d.get(case, "f32", B, "pdl_off", mode)
            on = d.get(case, "f32", B, "pdl_on", mode)
            if off and on:
                out.append(f"| {case[6:]} | {B} | {mode} | {us(fnum(off, 'median_us'))} ({spread(off)}) | "
                           f"{us(fnum(on, 'median_us'))} ({spread(on)}) | "
                           f"{fnum(on, 'median_us') / fnum(off, 'median_us'):.3f} |")


def ceilings_table(d, out):
    out.append("| ceiling | value |")
    out.append("|---|---|")
    out.append(f"| device-to-device copy, 1 GiB (read + written), start / end of run | "
               f"{d.copy_start:.0f} / {d.copy_end:.0f} GB/s |")
    sizes = sorted({k[2] for k in d.c if k[0] == "empty"})
    for B in sizes:
        parts = []
        for mode in ("stream", "graph", "step_graph"):
            e = d.empty(B, mode)
            if e:
                parts.append(f"{mode} {us(fnum(e, 'median_us'))}")
        out.append(f"| empty launch of the grid c128_decode launches for B = {B} (512 threads a block) | "
                   f"{', '.join(parts)} µs |")


def targets(d):
    """[(target, met, detail)]"""
    res = []

    def worst_pct(cases, min_size, state):
        worst = None
        for case in cases:
            for size in d.sizes(case, state):
                if size < min_size:
                    continue
                best, mode = d.best(case, state, size)
                if best and (worst is None or fnum(best, "pct_copy") < worst[0]):
                    worst = (fnum(best, "pct_copy"), f"{case} {size}")
        return worst

    # 1. prefill N >= 32K: >= 90 % of copy; 2. boundary decode B >= 128: >= 85 %
    for name, cases, min_size, goal in (("prefill N ≥ 32K at ≥ 90 % of copy bandwidth", PREFILL, 32768, 90.0),
                                        ("boundary decode B ≥ 128 at ≥ 85 % of copy bandwidth",
                                         ("decode_boundary",), 128, 85.0)):
        parts, met = [], True
        for state in ("f32", "bf16"):
            w = worst_pct(cases, min_size, state)
            if w:
                met &= w[0] >= goal
                parts.append(f"{state}: lowest {w[0]:.1f} % ({w[1]})")
        if parts:
            res.append((name, met, "; ".join(parts)))
    # 3. off-boundary within 1.5 us of the empty launch of the same grid
    for mode in ("graph", "stream"):
        within, total, worst = 0, 0, None
        for state in ("f32", "bf16"):
            for B in d.sizes("decode_off", state):
                g, e = d.get("decode_off", state, B, "two_warp", mode), d.empty(B, mode)
                if g and e:
                    total += 1
                    delta = fnum(g, "median_us") - fnum(e, "median_us")
                    within += delta <= 1.5
                    if worst is None or delta > worst[0]:
                        worst = (delta, f"{state} B={B}: {us(fnum(g, 'median_us'))} vs {us(fnum(e, 'median_us'))} µs")
        if worst:
            res.append((f"off-boundary decode within 1.5 µs of the empty launch ({mode} mode)", within == total,
                        f"{within}/{total} sizes within; worst {worst[0]:+.2f} µs ({worst[1]})"))
    # 4. two-warp faster than legacy at every size (graph medians; tie = the p10-p90 ranges overlap)
    faster, ties, slower = [], [], []
    for case in ("decode_boundary", "decode_mix") + PREFILL:
        for state in ("f32", "bf16"):
            for size in d.sizes(case, state):
                a = d.get(case, state, size, "two_warp", "graph")
                b = d.get(case, state, size, "legacy", "graph")
                if not (a and b):
                    continue
                tag = f"{case} {state} {size} ({fnum(b, 'median_us') / fnum(a, 'median_us'):.2f})"
                if fnum(b, "p10_us") > fnum(a, "p90_us"):
                    faster.append(tag)
                elif fnum(a, "p10_us") > fnum(b, "p90_us"):
                    slower.append(tag)
                else:
                    ties.append(tag)
    total = len(faster) + len(ties) + len(slower)
    if total:
        res.append(("two-warp epilogue faster than legacy at every size (graph medians, legacy/two-warp)",
                    len(faster) == total,
                    f"faster in {len(faster)}/{total}, tie (p10–p90 overlap) in {len(ties)}, slower in "
                    f"{len(slower)}: {', '.join(slower)}"))
    # 5. >= 1.5x the best PyTorch variant
    fails, n, worst = [], 0, None
    for case in DECODE + PREFILL:
        for state in ("f32", "bf16"):
            for size in d.sizes(case, state):
                best, _ = d.best(case, state, size)
                tb, tv = d.torch_best(case, state, size)
                if best and tb:
                    n += 1
                    r = fnum(tb, "median_us") / fnum(best, "median_us")
                    if r < 1.5:
                        fails.append(f"{case} {state} {size} ({r:.2f}×)")
                    if worst is None or r < worst[0]:
                        worst = (r, f"{case} {state} {size}, PyTorch {tv}")
    if worst:
        res.append(("≥ 1.5× faster than the best PyTorch variant", not fails,
                    f"{n - len(fails)}/{n} cases at ≥ 1.5×; smallest {worst[0]:.2f}× ({worst[1]}); below 1.5×: "
                    + ", ".join(fails)))
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--c", required=True)
    ap.add_argument("--torch", nargs="+")
    ap.add_argument("--md")
    a = ap.parse_args()
    t_rows = []
    for path in a.torch or []:
        try:
            t_rows += load(path)
        except OSError:
            print(f"(no PyTorch results: {path} missing)")
    d = Data(load(a.c), t_rows)
    m = d.meta
    out = []
    if m:
        out.append(f"GPU {m['gpu']}, driver {m['driver']}, nvcc {m['nvcc']}, CUDA driver/runtime "
                   f"{m['cuda_driver/runtime']}, commit {m['commit']}"
                   + (f", PyTorch {d.torch_version}" if d.torch_version else ""))
        out.append("")
    ceilings_table(d, out)
    out.append("")
    decode_table(d, out)
    out.append("")
    prefill_table(d, out)
    out.append("")
    chain_table(d, out)
    out.append("")
    out.append("| target | met | measured |")
    out.append("|---|---|---|")
    for name, met, detail in targets(d):
        out.append(f"| {name} | {'**met**' if met else '**not met**'} | {detail} |")
    text = "\n".join(out)
    if a.md:
        with open(a.md, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
