#!/usr/bin/env python3
"""Experimental variants of c128.cuh, timed against the unpatched library (c128.cuh is not changed):
   usage: patch.py SRC DST VARIANT[,VARIANT...]
   line        the next window's L2 prefetch as one prefetch.global.L2 (a line) per thread
   noprefetch  no L2 prefetch of the next window
   dist2       prefetch two windows ahead instead of one
   noevict     window and input rows loaded without the evict-first hint (plain ld.global)
(The first round's variants, exp / prefetch / uniform, are in git history: they patched code that
has since changed.)"""
import sys

src, dst, which = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
s = open(src).read()


def rep(old, new):
    global s
    assert s.count(old) == 1, old[:80]
    s = s.replace(old, new)


if "line" in which:
    rep("""  const int j = tid / 2;
  if (j >= C128_WINDOW) return;""", """  const int j = tid / 4, half = tid / 2 % 2; /* 4 threads a row: kv / score x two 128-byte lines */""")
    rep("""  if ((uintptr_t)slice % 16 != 0) return;
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(slice), "r"(C128_TILE_DIM * es) : "memory");""",
        """  if (half * 128 >= C128_TILE_DIM * es) return;
  asm volatile("prefetch.global.L2 [%0];" ::"l"(slice + half * 128) : "memory");""")
if "noprefetch" in which:
    rep("""    if (i + 1 < count) c128__prefetch_window(p, t, &sh->windows[i + 1], tid);
""", "")
if "dist2" in which:
    rep("""    if (i + 1 < count) c128__prefetch_window(p, t, &sh->windows[i + 1], tid);
""", """    if (i == 0 && count > 1) c128__prefetch_window(p, t, &sh->windows[1], tid);
    if (i + 2 < count) c128__prefetch_window(p, t, &sh->windows[i + 2], tid);
""")
if "noevict" in which:
    rep("raw[0] = stream ? __ldcs(a) : *a;", "raw[0] = *a;")
    rep("v = stream ? __ldcs(a) : *a;", "v = *a;")
open(dst, "w").write(s)
print("patched", which, "->", dst)
