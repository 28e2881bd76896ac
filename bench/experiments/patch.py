#!/usr/bin/env python3
"""Experimental variants of c128.cuh, timed against the unpatched library (c128.cuh is not changed):
   usage: patch.py SRC DST VARIANT[,VARIANT...]
   shfl        the first window of a block without the barrier that publishes the window list: every
               thread works it out from the plans itself (BENCHMARKS.md, proposal 2)
   hwexp       c128__exp on the GPU as ex2.approx of x * log2(e): 2 instructions instead of 13, and
               results no longer bit-identical to the host runner (the check column shows by how much)
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


if "shfl" in which:  # proposal 2: the first window without the barrier that publishes the list
    rep("""static __device__ __forceinline__ void c128__window_loop(const c128__params *p, c128__trait t, int count, int tid,
                                                         c128__block_shared *sh) {""",
        """static __device__ __forceinline__ void c128__window_loop(const c128__params *p, c128__trait t, int count, int tid,
                                                         c128__block_shared *sh, c128__window first) {""")
    rep("""    const c128__window win = sh->windows[i]; /* in registers: reading it from shared costs a spill */""",
        """    const c128__window win = i == 0 ? first : sh->windows[i];""")
    old = """  __syncthreads();
  c128__window_loop(p, t, __popc(mask), tid, &sh);"""
    assert s.count(old) == 2
    s = s.replace(old, """  c128__window first; /* every thread looks at the first job itself: no barrier before it */
  (void)c128__job_window(p, t, DECODE_KIND, &j, __ffs(mask) - 1, &first);
  c128__window_loop(p, t, __popc(mask), tid, &sh, first);""")
    i = s.index("DECODE_KIND"); s = s[:i] + "1" + s[i + len("DECODE_KIND"):]
    i = s.index("DECODE_KIND"); s = s[:i] + "0" + s[i + len("DECODE_KIND"):]
if "hwexp" in which:  # the hardware exp2 (MUFU) on the GPU: no longer bit-identical to the host runner
    rep("""C128__FN float c128__exp(float x) {
""", """C128__FN float c128__exp(float x) {
#ifdef __CUDA_ARCH__
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(c128__mul(x, 1.44269504088896341f)));
  return y;
#endif
""")
if "bf16cs" in which:  # bf16 rows with the evict-first hint as well (round 3's kernels)
    rep("""    raw[0] = *a;""", """    raw[0] = stream ? __ldcs(a) : *a;""")
if "halfgroup" in which:  # automatic groups halved: more blocks, fewer windows each
    rep("""  const int64_t wave = (int64_t)C128_BLOCKS_PER_SM * (sm_count > 0 ? sm_count : 1);""",
        """  const int64_t wave = (int64_t)C128_BLOCKS_PER_SM * 2 * (sm_count > 0 ? sm_count : 1);""")
open(dst, "w").write(s)
print("patched", which, "->", dst)
