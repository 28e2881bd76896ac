#!/usr/bin/env python3
"""Experimental variants of c128.cuh, timed against the unpatched library (c128.cuh is not changed):
   usage: patch.py SRC DST VARIANT[,VARIANT...]
   exp7        c128__exp with the degree-7 Taylor polynomial instead of the fitted degree 6
   occ1        __launch_bounds__(512, 1): 128 registers a thread, one block per SM (and groups
               sized for one block per SM)
   noevict     window and input rows loaded without the evict-first hint (plain ld.global)
(Earlier rounds' variants, exp / prefetch / uniform and line / noprefetch / dist2 of the L2
prefetch, are in git history: they patched code that has since changed.)"""
import sys

src, dst, which = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
s = open(src).read()


def rep(old, new):
    global s
    assert s.count(old) == 1, old[:80]
    s = s.replace(old, new)


if "exp7" in which:  # the degree-7 Taylor polynomial of the first rounds
    rep("""  float q = 0x1.6ae63cp-10f; /* degree 6, fitted for relative error 1.8e-8 on |r| <= ln2 / 2 */
  q = fmaf(q, r, 0x1.126888p-7f);
  q = fmaf(q, r, 0x1.555826p-5f);
  q = fmaf(q, r, 0x1.555418p-3f);
  q = fmaf(q, r, 0x1.fffffcp-2f);""", """  float q = 1.0f / 5040.0f;
  q = fmaf(q, r, 1.0f / 720.0f);
  q = fmaf(q, r, 1.0f / 120.0f);
  q = fmaf(q, r, 1.0f / 24.0f);
  q = fmaf(q, r, 1.0f / 6.0f);
  q = fmaf(q, r, 0.5f);""")
if "occ1" in which:  # one 512-thread block per SM: 128 registers a thread instead of 64
    rep("#define C128_BLOCKS_PER_SM 2 ", "#define C128_BLOCKS_PER_SM 1 ")
if "noevict" in which:
    rep("raw[0] = stream ? __ldcs(a) : *a;", "raw[0] = *a;")
    rep("v = stream ? __ldcs(a) : *a;", "v = *a;")
open(dst, "w").write(s)
print("patched", which, "->", dst)
