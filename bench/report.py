#!/usr/bin/env python3
"""Tables and target verdicts from the benchmark CSVs (bench.c's and torch_ref.py's).

    python3 bench/report.py --c bench_c128.csv [--torch bench_torch.csv ...] [--md report.md]
                            [--variants-only]

c128's figure for a case is the default (two-warp) epilogue's best of its "stream" and "graph"
medians; PyTorch's is the best of eager / torch.compile, each launched back to back or replayed
from CUDA graphs, over every --torch file given (torch.compile's kernels differ from run to run).
The variants' tables (bench.c's layout_* and entry_* cases) compare graph-replay medians measured
in one comparison: each layout against today's layout timed in the same A/B pair, and the
cache-entry paths against the pooled launch timed in the same A B C D E run. --variants-only
prints those tables alone (a run with --filter 'layout_|entry_'). Standard library only."""
import argparse
import csv
import math
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


LAYOUTS = ("vllm_b8", "b16", "trtllm_b128", "trtllm_b256", "ring_b128")  # bench.c's bench_layouts, in order
ENTRY_PATHS = ("fused_fp8", "split_fp8", "fused_bf16", "split_bf16")
LAYOUT_TARGET = 1.05  # a layout costs at most 5 % against today's


def size_label(case, size):
    return f"B={size}" if "decode" in case else f"N={size // 1024}K"


def layout_names(d):
    """Layouts in the CSV: bench_layouts' order, then any others."""
    found = {k[3] for k in d.c if k[0].startswith("layout_") and not k[3].startswith("today_vs_")}
    return [l for l in LAYOUTS if l in found] + sorted(found - set(LAYOUTS))


def layout_ratio(d, case, state, size, layout, mode="graph"):
    """(layout / today's of its own pair, layout row, today row), or None."""
    alt = d.get("layout_" + case, state, size, layout, mode)
    base = d.get("layout_" + case, state, size, "today_vs_" + layout, mode)
    if not (alt and base):
        return None
    return fnum(alt, "median_us") / fnum(base, "median_us"), alt, base


def failed_checks(d, prefix):
    return sorted({f"{k[0]} {k[1]} {k[2]}" for k, r in d.c.items() if k[0].startswith(prefix) and "FAILED" in r["check"]})


def layout_table(d, out, mode="graph"):
    layouts = layout_names(d)
    if not layouts:
        return
    out.append(f"Other engines' state layouts against today's ({mode} replay medians, each layout / today's layout "
               "timed in the same A/B pair; µs of the layout in brackets). Bytes: today's plus the table entries read.")
    out.append("")
    out.append("| case | state | size | today µs | " + " | ".join(f"{l} / today" for l in layouts) + " | worst |")
    out.append("|---|---|---:|---:|" + "---:|" * len(layouts) + "---:|")
    for case in DECODE + PREFILL:
        for state in ("f32", "bf16"):
            for size in d.sizes("layout_" + case, state):
                cells, worst, today = [], None, None
                for l in layouts:
                    r = layout_ratio(d, case, state, size, l, mode)
                    if not r:
                        cells.append("—")
                        continue
                    ratio, alt, base = r
                    today = today or base
                    mark = "**" if ratio > LAYOUT_TARGET else ""
                    cells.append(f"{mark}{ratio:.3f}{mark} ({us(fnum(alt, 'median_us'))})")
                    worst = ratio if worst is None else max(worst, ratio)
                if today is None:
                    continue
                out.append(f"| {case} | {state} | {size_label(case, size)} | {us(fnum(today, 'median_us'))} | "
                           + " | ".join(cells) + f" | {worst:.3f} |")


def entry_table(d, out, mode="graph"):
    keys = sorted({(k[0], k[1], k[2]) for k in d.c if k[0].startswith("entry_")})
    if not keys:
        return
    out.append(f"DeepSeek-V4 cache entries ({mode} replay medians, one A B C D E run per case): fused = written by "
               "the decode / compress launch (args.entry), split = c128's pooled launch, then c128's epilogue "
               "launch (bench_epilogue.cuh). Bytes: the pooled path's less the pooled rows plus the entries "
               "(584 B FP8, 1024 B BF16).")
    out.append("")
    out.append("| case | state | size | pooled µs | fused FP8 µs | split FP8 µs | fused FP8 / pooled | "
               "fused / split FP8 | fused FP8 % copy | fused BF16 µs | split BF16 µs | fused / split BF16 |")
    out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for case in DECODE + PREFILL:
        for state in ("f32", "bf16"):
            for size in d.sizes("entry_" + case, state):
                row = {v: d.get("entry_" + case, state, size, v, mode) for v in ("pooled",) + ENTRY_PATHS}
                if not row["pooled"]:
                    continue
                t = {v: fnum(r, "median_us") if r else None for v, r in row.items()}

                def ratio(a, b):
                    return f"{t[a] / t[b]:.3f}" if t[a] and t[b] else "—"

                def cell(v):
                    return us(t[v]) if t[v] else "—"

                pct = f"{fnum(row['fused_fp8'], 'pct_copy'):.1f}" if row["fused_fp8"] else "—"
                out.append(f"| {case} | {state} | {size_label(case, size)} | {cell('pooled')} | {cell('fused_fp8')} | "
                           f"{cell('split_fp8')} | {ratio('fused_fp8', 'pooled')} | {ratio('fused_fp8', 'split_fp8')} | "
                           f"{pct} | {cell('fused_bf16')} | {cell('split_bf16')} | {ratio('fused_bf16', 'split_bf16')} |")


def variant_verdicts(d, mode="graph"):
    """[(target, met, detail)] of the variants' runs."""
    res = []
    layouts = layout_names(d)
    if layouts:
        over, worst, n = [], {}, 0
        for case in DECODE + PREFILL:
            for state in ("f32", "bf16"):
                for size in d.sizes("layout_" + case, state):
                    for l in layouts:
                        r = layout_ratio(d, case, state, size, l, mode)
                        if not r:
                            continue
                        n += 1
                        tag = f"{case} {state} {size_label(case, size)}"
                        if r[0] > LAYOUT_TARGET:
                            over.append(f"{l} {tag} ({r[0]:.3f})")
                        if l not in worst or r[0] > worst[l][0]:
                            worst[l] = (r[0], tag)
        res.append((f"Every layout within {100 * (LAYOUT_TARGET - 1):.0f} % of today's layout (layout / today ≤ "
                    f"{LAYOUT_TARGET}, {mode})", not over,
                    f"{n - len(over)}/{n} within; worst: " + "; ".join(f"{l} {w[0]:.3f} ({w[1]})" for l, w in worst.items())
                    + (f"; over: {', '.join(over)}" if over else "")))
        if "vllm_b8" in worst:
            b8 = [layout_ratio(d, c, s, n_, "vllm_b8", mode) for c in DECODE + PREFILL for s in ("f32", "bf16")
                  for n_ in d.sizes("layout_" + c, s)]
            b8 = [r[0] for r in b8 if r]
            res.append(("vLLM's 8-row blocks (vllm_b8) within 5 % of today's", max(b8) <= LAYOUT_TARGET,
                        f"geomean {geomean(b8):.3f}, {min(b8):.3f} … {max(b8):.3f} over {len(b8)} cases"))
    keys = sorted({(k[0], k[1], k[2]) for k in d.c if k[0].startswith("entry_")})
    if keys:
        for kind in ("fp8", "bf16"):
            faster, slower, vs_pooled = [], [], []
            for case, state, size in keys:
                f = d.get(case, state, size, f"fused_{kind}", mode)
                s_ = d.get(case, state, size, f"split_{kind}", mode)
                p = d.get(case, state, size, "pooled", mode)
                if not (f and s_ and p):
                    continue
                r = fnum(f, "median_us") / fnum(s_, "median_us")
                (faster if r < 1 else slower).append(f"{case[6:]} {state} {size_label(case, size)} ({r:.3f})")
                vs_pooled.append(fnum(f, "median_us") / fnum(p, "median_us"))
            if vs_pooled:
                res.append((f"Fused {kind.upper()} entries faster than the two-launch path in every case",
                            not slower, f"faster in {len(faster)}/{len(faster) + len(slower)}"
                            + (f"; not: {', '.join(slower)}" if slower else "")
                            + f"; fused / pooled {min(vs_pooled):.3f} … {max(vs_pooled):.3f}"))
    for prefix in ("layout_", "entry_"):
        bad = failed_checks(d, prefix)
        if any(k[0].startswith(prefix) for k in d.c):
            res.append((f"{prefix[:-1]} variants agree with today's on set 0 (check column)", not bad,
                        "all checks ok" if not bad else "FAILED: " + ", ".join(bad)))
    return res


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def variant_report(d, out):
    """The variants' tables and verdicts (nothing when the CSV has none)."""
    layout_table(d, out)
    if out and out[-1] != "":
        out.append("")
    entry_table(d, out)
    if out and out[-1] != "":
        out.append("")
    verdicts = variant_verdicts(d)
    if verdicts:
        out.append("| variant target | met | measured |")
        out.append("|---|---|---|")
        for name, met, detail in verdicts:
            out.append(f"| {name} | {'**met**' if met else '**not met**'} | {detail} |")


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
    ap.add_argument("--variants-only", action="store_true", help="only the layout and cache-entry tables")
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
    if a.variants_only:
        variant_report(d, out)
        return write(out, a.md)
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
    out.append("")
    variant_report(d, out)
    return write(out, a.md)


def write(out, md):
    text = "\n".join(out)
    if md:
        with open(md, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
