#include "entry_reference.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* fp32 operations move a value by 2^-24 of itself each; the chain from b to z has the sum of
   squares (a fixed order of D adds, DESIGN 11.3, bounded here as if it were sequential), the
   division by D, the add of eps, the square root, the reciprocal and two products. The bounds
   below hold for any order of the sum. */
#define REF_FP32_UNIT 0x1.0p-24
#define REF_TINY 0x1.0p-140 /* covers fp32 subnormal rounding, far below any bf16 step that matters */

size_t ref_entry_value_bytes(int head_dim, int kind) {
  return kind == REF_ENTRY_FP8 ? (size_t)head_dim + REF_ROPE_DIMS : 2 * (size_t)head_dim;
}

size_t ref_entry_scale_bytes(int head_dim, int kind) {
  return kind == REF_ENTRY_FP8 ? (size_t)head_dim / REF_FP8_BLOCK : 0;
}

void ref_entry_locate(int head_dim, int kind, int64_t entries_per_page, int64_t page_bytes, int64_t loc,
                      size_t *value_at, size_t *scale_at) {
  const int64_t page = loc / entries_per_page, slot = loc % entries_per_page;
  const size_t values = ref_entry_value_bytes(head_dim, kind);
  *value_at = (size_t)page * (size_t)page_bytes + (size_t)slot * values;
  *scale_at = (size_t)page * (size_t)page_bytes + values * (size_t)entries_per_page +
              ref_entry_scale_bytes(head_dim, kind) * (size_t)slot;
}

double ref_bf16_round(double x) {
  if (isnan(x)) return x;
  const double a = fabs(x);
  if (a >= 0x1.ffp127) return copysign(INFINITY, x); /* past the largest bf16 plus half its step (ties: to even) */
  const double step = a < 0x1.0p-126 ? 0x1.0p-133 : ldexp(1.0, ilogb(a) - 7);
  return nearbyint(x / step) * step; /* default rounding: nearest, ties to even; the scaling is exact */
}

uint16_t ref_bf16_bits(double x) {
  const double v = ref_bf16_round(x);
  if (isnan(v)) return 0x7FC0;
  const float f = (float)v; /* exact: v is a bf16 value */
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return (uint16_t)(u >> 16);
}

double ref_bf16_value(uint16_t bits) {
  const uint32_t u = (uint32_t)bits << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

double ref_e4m3_value(unsigned code) {
  const unsigned e = (code >> 3) & 15u, m = code & 7u;
  if (e == 15u && m == 7u) return NAN;
  const double v = e ? ldexp(1.0 + m / 8.0, (int)e - 7) : ldexp((double)m, -9);
  return code & 0x80u ? -v : v;
}

unsigned ref_e4m3_code(double x) {
  if (isnan(x)) return 0x7Fu;
  const unsigned sign = signbit(x) ? 0x80u : 0u;
  double a = fabs(x);
  if (a > REF_E4M3_MAX) a = REF_E4M3_MAX;
  unsigned best = 0;
  double best_d = a;
  for (unsigned code = 1; code <= 0x7Eu; ++code) { /* the finite non-negative codes, ascending */
    const double d = fabs(a - ref_e4m3_value(code));
    if (d < best_d || (d == best_d && (code & 1u) == 0u)) best = code, best_d = d;
  }
  return sign | best;
}

int ref_scale_exponent(double amax) {
  const double a = amax > REF_SCALE_FLOOR ? amax : REF_SCALE_FLOOR;
  int e = -40;
  while (e < 200 && ldexp(REF_E4M3_MAX, e) < a) ++e;
  return e;
}

/* The signed position of an e4m3 code on the number line (-0 and +0 both at 0). */
static int code_rank(unsigned code) { return code & 0x80u ? -(int)(code & 0x7Fu) : (int)code; }
static unsigned rank_code(int rank) { return rank < 0 ? 0x80u | (unsigned)-rank : (unsigned)rank; }

static double min4(const double v[4]) {
  double m = v[0];
  for (int i = 1; i < 4; ++i) m = v[i] < m ? v[i] : m;
  return m;
}
static double max4(const double v[4]) {
  double m = v[0];
  for (int i = 1; i < 4; ++i) m = v[i] > m ? v[i] : m;
  return m;
}

static void put16(unsigned char *at, uint16_t bits) {
  at[0] = (unsigned char)(bits & 0xFFu), at[1] = (unsigned char)(bits >> 8);
}
static uint16_t get16(const unsigned char *at) { return (uint16_t)(at[0] | at[1] << 8); }

int ref_entry_compute(int head_dim, int kind, const double *y, const double *y_err, const float *gamma, float eps,
                      const float *rope, ref_entry *o) {
  const int D = head_dim;
  if (D < 128 || D > REF_ENTRY_MAX_DIM || D % REF_FP8_BLOCK || (kind != REF_ENTRY_FP8 && kind != REF_ENTRY_BF16))
    return -1;
  memset(o, 0, sizeof *o);
  o->head_dim = D, o->kind = kind, o->rope_row = rope;
  const int blocks = D / REF_FP8_BLOCK - 1, nope = D - REF_ROPE_DIMS;
  double b_lo[REF_ENTRY_MAX_DIM], b_hi[REF_ENTRY_MAX_DIM], sum = 0.0, sum_lo = 0.0, sum_hi = 0.0;
  int bounded = 1; /* intervals only where everything is finite; else the nominal values alone */
  for (int c = 0; c < D; ++c) {
    o->b[c] = b_lo[c] = b_hi[c] = ref_bf16_round(y[c]);
    if (y_err && isfinite(y[c]) && isfinite(y_err[c])) {
      b_lo[c] = ref_bf16_round(y[c] - fabs(y_err[c]));
      b_hi[c] = ref_bf16_round(y[c] + fabs(y_err[c]));
    }
    sum += o->b[c] * o->b[c];
    const double l2 = b_lo[c] * b_lo[c], h2 = b_hi[c] * b_hi[c];
    sum_lo += b_lo[c] <= 0.0 && b_hi[c] >= 0.0 ? 0.0 : fmin(l2, h2);
    sum_hi += fmax(l2, h2);
  }
  o->r = 1.0 / sqrt(sum / D + (double)eps);
  const double rho = (D + 16) * REF_FP32_UNIT;
  const double r_lo = 1.0 / sqrt(sum_hi / D + (double)eps) * (1.0 - rho);
  const double r_hi = 1.0 / sqrt(sum_lo / D + (double)eps) * (1.0 + rho);
  if (!isfinite(o->r) || !isfinite(r_lo) || !isfinite(r_hi)) bounded = 0;
  for (int c = 0; c < D; ++c) {
    o->z[c] = ref_bf16_round((double)gamma[c] * (o->b[c] * o->r));
    o->z_lo[c] = o->z_hi[c] = o->z[c];
    if (!bounded || !isfinite(o->z[c])) continue;
    const double g = gamma[c];
    const double corner[4] = {g * (b_lo[c] * r_lo), g * (b_lo[c] * r_hi), g * (b_hi[c] * r_lo), g * (b_hi[c] * r_hi)};
    const double lo = min4(corner), hi = max4(corner); /* bilinear in (b, r): the extremes are corners */
    o->z_lo[c] = ref_bf16_round(lo - fabs(lo) * 4 * REF_FP32_UNIT - REF_TINY);
    o->z_hi[c] = ref_bf16_round(hi + fabs(hi) * 4 * REF_FP32_UNIT + REF_TINY);
  }
  /* FP8 blocks (or their dequantised values). */
  for (int w = 0; w < blocks; ++w) {
    double amax = 0.0, lo = 0.0, hi = 0.0;
    for (int c = REF_FP8_BLOCK * w; c < REF_FP8_BLOCK * (w + 1); ++c) {
      if (!isfinite(o->z[c])) o->nan_block[w] = 1;
      amax = fmax(amax, fabs(o->z[c]));
      lo = fmax(lo, o->z_lo[c] > 0.0 ? o->z_lo[c] : o->z_hi[c] < 0.0 ? -o->z_hi[c] : 0.0);
      hi = fmax(hi, fmax(fabs(o->z_lo[c]), fabs(o->z_hi[c])));
    }
    o->amax[w] = amax, o->amax_lo[w] = lo, o->amax_hi[w] = hi;
    o->exponent[w] = o->nan_block[w] ? 0 : ref_scale_exponent(amax);
    if (kind == REF_ENTRY_FP8) o->scale[w] = o->nan_block[w] ? 0xFFu : (unsigned char)(o->exponent[w] + 127);
    for (int c = REF_FP8_BLOCK * w; c < REF_FP8_BLOCK * (w + 1); ++c) {
      const unsigned q = o->nan_block[w] ? 0x7Fu : ref_e4m3_code(ldexp(o->z[c], -o->exponent[w]));
      if (kind == REF_ENTRY_FP8) o->value[c] = (unsigned char)q;
      else put16(o->value + 2 * c, ref_bf16_bits(o->nan_block[w] ? NAN : ldexp(ref_e4m3_value(q), o->exponent[w])));
    }
  }
  if (kind == REF_ENTRY_FP8) o->scale[blocks] = 0; /* the pad byte */
  /* RoPE pairs: nominal values and the interval over z's corners, plus fp32's evaluation error
     (two products and a sum, each within 2^-24 of itself). */
  for (int i = 0; i < REF_ROPE_PAIRS; ++i) {
    const int cr = nope + 2 * i, ci = cr + 1;
    const double cs = rope[2 * i], sn = rope[2 * i + 1];
    const double re = o->z[cr] * cs - o->z[ci] * sn, im = o->z[cr] * sn + o->z[ci] * cs;
    const double zr[2] = {o->z_lo[cr], o->z_hi[cr]}, zi[2] = {o->z_lo[ci], o->z_hi[ci]};
    double res[4], ims[4];
    for (int k = 0; k < 4; ++k) res[k] = zr[k >> 1] * cs - zi[k & 1] * sn, ims[k] = zr[k >> 1] * sn + zi[k & 1] * cs;
    const double mr = fmax(fabs(zr[0]), fabs(zr[1])), mi = fmax(fabs(zi[0]), fabs(zi[1]));
    const double slack_re = 4 * REF_FP32_UNIT * (mr * fabs(cs) + mi * fabs(sn)) + REF_TINY;
    const double slack_im = 4 * REF_FP32_UNIT * (mr * fabs(sn) + mi * fabs(cs)) + REF_TINY;
    const int finite = isfinite(re) && isfinite(im) && isfinite(mr) && isfinite(mi);
    o->rope_lo[2 * i] = finite ? min4(res) - slack_re : re, o->rope_hi[2 * i] = finite ? max4(res) + slack_re : re;
    o->rope_lo[2 * i + 1] = finite ? min4(ims) - slack_im : im;
    o->rope_hi[2 * i + 1] = finite ? max4(ims) + slack_im : im;
    unsigned char *at = o->value + (kind == REF_ENTRY_FP8 ? (size_t)nope + 4 * (size_t)i : 2 * (size_t)cr);
    put16(at, ref_bf16_bits(re)), put16(at + 2, ref_bf16_bits(im));
  }
  return 0;
}

#define FAIL(...) (snprintf(why, why_size, __VA_ARGS__), 1)

/* Channel c's code q at exponent e: within one code of the oracle's at e, and the rounding of a
   z in [z_lo, z_hi]. */
static int check_code(const ref_entry *o, int c, unsigned q, int e, char *why, size_t why_size) {
  const unsigned want = ref_e4m3_code(ldexp(o->z[c], -e));
  const int lo = code_rank(ref_e4m3_code(ldexp(o->z_lo[c], -e))), hi = code_rank(ref_e4m3_code(ldexp(o->z_hi[c], -e)));
  const int got = code_rank(q);
  if (abs(got - code_rank(want)) > 1)
    return FAIL("channel %d: code 0x%02X, oracle 0x%02X at E = %d (z %.9g): more than one code apart", c, q, want, e,
                o->z[c]);
  if (got < lo || got > hi)
    return FAIL("channel %d: code 0x%02X at E = %d is no rounding of a z in [%.9g, %.9g] (oracle z %.9g, code 0x%02X)",
                c, q, e, o->z_lo[c], o->z_hi[c], o->z[c], want);
  return 0;
}

/* Channel c's BF16 value x as a dequantised code at exponent e (any of the codes check_code accepts). */
static int check_dequantised(const ref_entry *o, int c, double x, int e, char *why, size_t why_size) {
  const int want = code_rank(ref_e4m3_code(ldexp(o->z[c], -e)));
  int lo = code_rank(ref_e4m3_code(ldexp(o->z_lo[c], -e))), hi = code_rank(ref_e4m3_code(ldexp(o->z_hi[c], -e)));
  lo = lo > want - 1 ? lo : want - 1, hi = hi < want + 1 ? hi : want + 1;
  for (int k = lo; k <= hi; ++k)
    if (ref_bf16_round(ldexp(ref_e4m3_value(rank_code(k)), e)) == x) return 0;
  return FAIL("channel %d: value %.9g is no dequantised code within one of the oracle's 0x%02X at E = %d (z %.9g in "
              "[%.9g, %.9g], oracle value %.9g)",
              c, x, rank_code(want), e, o->z[c], o->z_lo[c], o->z_hi[c],
              ref_bf16_round(ldexp(ref_e4m3_value(rank_code(want)), e)));
}

int ref_entry_check(const ref_entry *o, const void *value, const void *scale, char *why, size_t why_size) {
  const unsigned char *v = (const unsigned char *)value, *s = (const unsigned char *)scale;
  const int D = o->head_dim, blocks = D / REF_FP8_BLOCK - 1, nope = D - REF_ROPE_DIMS, fp8 = o->kind == REF_ENTRY_FP8;
  for (int w = 0; w < blocks; ++w) {
    const int base = REF_FP8_BLOCK * w;
    const int e_lo = ref_scale_exponent(o->amax_lo[w]), e_hi = ref_scale_exponent(o->amax_hi[w]);
    if (o->nan_block[w]) { /* DESIGN 11.2: stored as NaN */
      if (fp8 && s[w] != 0xFFu)
        return FAIL("block %d: scale byte 0x%02X where the oracle's block is NaN (0xFF)", w, s[w]);
      for (int c = base; c < base + REF_FP8_BLOCK; ++c) {
        if (fp8 && v[c] != 0x7Fu) return FAIL("channel %d: code 0x%02X in a NaN block (0x7F)", c, v[c]);
        if (!fp8 && !isnan(ref_bf16_value(get16(v + 2 * c))))
          return FAIL("channel %d: value %.9g in a NaN block", c, ref_bf16_value(get16(v + 2 * c)));
      }
      continue;
    }
    if (fp8) {
      const int e = (int)s[w] - 127;
      if (s[w] == 0xFFu || e < e_lo || e > e_hi)
        return FAIL("block %d: scale byte 0x%02X (E = %d), oracle 0x%02X (E = %d; amax %.9g in [%.9g, %.9g] allows "
                    "E %d .. %d)",
                    w, s[w], e, o->scale[w], o->exponent[w], o->amax[w], o->amax_lo[w], o->amax_hi[w], e_lo, e_hi);
      for (int c = base; c < base + REF_FP8_BLOCK; ++c) {
        if ((v[c] & 0x7Fu) == 0x7Fu) return FAIL("channel %d: NaN code 0x%02X in a finite block", c, v[c]);
        if (check_code(o, c, v[c], e, why, why_size)) return 1;
      }
      continue;
    }
    /* BF16: one exponent for the whole block; the oracle's is tried first (its failure is the
       one reported), then the others the amax interval allows. */
    int failed = 1;
    char first[256] = "";
    for (int e = e_lo - 1; e <= e_hi && failed; ++e) {
      const int ex = e < e_lo ? o->exponent[w] : e;
      if (e >= e_lo && ex == o->exponent[w]) continue;
      failed = 0;
      for (int c = base; c < base + REF_FP8_BLOCK && !failed; ++c)
        failed = check_dequantised(o, c, ref_bf16_value(get16(v + 2 * c)), ex, e < e_lo ? first : why,
                                   e < e_lo ? sizeof first : why_size);
    }
    if (failed) {
      snprintf(why, why_size, "block %d: %s", w, first);
      return 1;
    }
  }
  for (int j = 0; j < REF_ROPE_DIMS; ++j) {
    const uint16_t bits = fp8 ? get16(v + nope + 2 * j) : get16(v + 2 * (nope + j));
    const double x = ref_bf16_value(bits), lo = o->rope_lo[j], hi = o->rope_hi[j];
    if (isnan(lo) || isnan(hi)) {
      if (!isnan(x)) return FAIL("RoPE value %d: %.9g where the oracle's is NaN", j, x);
      continue;
    }
    const double want_lo = ref_bf16_round(lo), want_hi = ref_bf16_round(hi);
    if (!(x >= want_lo && x <= want_hi))
      return FAIL("RoPE value %d (channel %d): %.9g (bits 0x%04X) outside [%.9g, %.9g], the bf16 roundings of [%.9g, "
                  "%.9g] (oracle 0x%04X)",
                  j, nope + j, x, bits, want_lo, want_hi, lo, hi,
                  fp8 ? get16(o->value + nope + 2 * j) : get16(o->value + 2 * (nope + j)));
  }
  if (fp8 && s[blocks] != 0) return FAIL("pad byte 0x%02X, not 0", s[blocks]);
  return 0;
}
