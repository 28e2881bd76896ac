#!/usr/bin/env python3
"""Prints the unpatched two-warp build (variant "two_warp") against the patched build (variant
"legacy") from the CSVs of bench/experiments/run.sh: graph medians in us and their ratio."""
import csv
import sys

for path in sys.argv[1:]:
    rows = list(csv.DictReader(open(path)))
    c = {(r["case"], r["state"], r["size"], r["variant"], r["mode"]): r for r in rows}
    print(f"== {path}: baseline two-warp (A) vs patched two-warp (B), graph medians us, B/A")
    for (case, st, size, var, mode), r in c.items():
        if var != "two_warp" or mode != "graph":
            continue
        b = c.get((case, st, size, "legacy", mode))
        if b:
            a_, b_ = float(r["median_us"]), float(b["median_us"])
            print(f"{case:16s} {st:4s} {size:>7s} A {a_:9.2f} B {b_:9.2f} B/A {b_ / a_:.3f} {b['check'][:40]}")
