#!/usr/bin/env python3
"""Experimental variants of c128.cuh, timed against the unpatched library (c128.cuh is not changed):
   usage: patch.py SRC DST VARIANT[,VARIANT...]
   bf16cs      bf16 rows loaded with the evict-first hint too (round 3's kernels)
   halfgroup   automatic groups chosen for twice the SM count: about twice the blocks, half the
               windows each
(Earlier rounds' variants are in git history: exp / prefetch / uniform, line / noprefetch / dist2
of an L2 prefetch, exp7 / occ1 / noevict; they patched code that has since changed.)"""
import sys

src, dst, which = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
s = open(src).read()


def rep(old, new):
    global s
    assert s.count(old) == 1, old[:80]
    s = s.replace(old, new)


if "bf16cs" in which:  # bf16 rows with the evict-first hint as well (round 3's kernels)
    rep("""    raw[0] = *a;""", """    raw[0] = stream ? __ldcs(a) : *a;""")
if "halfgroup" in which:  # automatic groups halved: more blocks, fewer windows each
    rep("""  const int64_t wave = (int64_t)C128_BLOCKS_PER_SM * (sm_count > 0 ? sm_count : 1);""",
        """  const int64_t wave = (int64_t)C128_BLOCKS_PER_SM * 2 * (sm_count > 0 ? sm_count : 1);""")
open(dst, "w").write(s)
print("patched", which, "->", dst)
