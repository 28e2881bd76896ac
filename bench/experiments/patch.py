#!/usr/bin/env python3
"""Experimental variants of c128.cuh for the diagnosis in BENCHMARKS.md (c128.cuh is not changed):
   usage: patch.py SRC DST exp[,prefetch][,uniform]
   exp      branch-free c128__exp (same bits: the clamped argument equals x wherever the result is used)
   prefetch decode blocks prefetch their input slice into L1 right after griddepcontrol.wait
   uniform  partials: warp-uniform load path when all 8 rows of a warp come from the input (or the state)"""
import sys
src, dst, which = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
s = open(src).read()
def rep(old, new):
    global s
    assert s.count(old) == 1, old[:80]
    s = s.replace(old, new)
if "exp" in which:
    rep("""  if (!(x > -104.0f)) return x != x ? x : 0.0f; /* below the smallest subnormal, -inf, NaN */
  if (x > 88.72f) return INFINITY;
  const float n = rintf(c128__mul(x, 1.44269504088896341f));
  float r = fmaf(n, -0.693145751953125f, x); /* Cody-Waite: ln 2 = hi + lo */""",
"""  const float xc = fminf(fmaxf(x, -104.0f), 88.72f);
  const float n = rintf(c128__mul(xc, 1.44269504088896341f));
  float r = fmaf(n, -0.693145751953125f, xc); /* Cody-Waite: ln 2 = hi + lo */""")
    rep("""  return c128__mul(c128__mul(q, c128__from_bits((uint32_t)(e1 + 127) << 23)),
                   c128__from_bits((uint32_t)(e2 + 127) << 23));
}""", """  const float v = c128__mul(c128__mul(q, c128__from_bits((uint32_t)(e1 + 127) << 23)),
                            c128__from_bits((uint32_t)(e2 + 127) << 23));
  return !(x > -104.0f) ? (x != x ? x : 0.0f) : x > 88.72f ? INFINITY : v;
}""")
if "prefetch" in which:
    rep("""  c128__decode_job job;
  c128__pdl_wait();
""", """  c128__decode_job job;
  c128__pdl_wait();
  {
    const int64_t b_ = blockIdx.x / C128_NUM_SPLIT(t.head_dim);
    if (threadIdx.x < C128_WARP_THREADS && b_ < p->input_rows) {
      const char *row_ = (const char *)p->input +
                         (b_ * C128_ROW_ELEMS(t.head_dim) + (int64_t)(blockIdx.x % C128_NUM_SPLIT(t.head_dim)) * C128_TILE_DIM +
                          C128_TILE_ELEMS * (int64_t)threadIdx.x) * c128__elem_size(t.in);
      asm volatile("prefetch.global.L1 [%0];" ::"l"(row_));
      asm volatile("prefetch.global.L1 [%0];" ::"l"(row_ + (int64_t)C128_SCORE_OFFSET(t.head_dim) * c128__elem_size(t.in)));
    }
  }
""")
if "uniform" in which:
    head = """C128__UNROLL
  for (int r = 0; r < C128_ROWS_PER_WARP; ++r) { /* every load issued before any use */"""
    tail = """  }
  float2 m = make_float2(-INFINITY, -INFINITY);"""
    i = s.index(head); j = s.index(tail, i)
    body = s[i:j + 4]
    new = """  if (t.buf != t.in && warp * C128_ROWS_PER_WARP >= w->buffer_len) { /* whole warp from the input */
C128__UNROLL
    for (int r = 0; r < C128_ROWS_PER_WARP; ++r) {
      const int64_t row = w->input_row0 + warp * C128_ROWS_PER_WARP + r;
      kv[r] = c128__load2(p, p->input, row * row_elems + ch, t.in);
      score[r] = c128__load2(p, p->input, row * row_elems + C128_SCORE_OFFSET(t.head_dim) + ch, t.in);
    }
  } else if (t.buf != t.in && warp * C128_ROWS_PER_WARP + C128_ROWS_PER_WARP <= w->buffer_len) { /* from the state */
C128__UNROLL
    for (int r = 0; r < C128_ROWS_PER_WARP; ++r) {
      const int64_t row = w->state_row0 + warp * C128_ROWS_PER_WARP + r;
      kv[r] = c128__load2(p, p->state, row * row_elems + ch, t.buf);
      score[r] = c128__load2(p, p->state, row * row_elems + C128_SCORE_OFFSET(t.head_dim) + ch, t.buf);
    }
  } else {
""" + body + """
  }
"""
    s = s[:i] + new + s[j + 4:]
open(dst, "w").write(s)
print("patched", which, "->", dst)
