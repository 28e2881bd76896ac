/* Cache-entry output (DESIGN 11): the DSV4_FP8 and DSV4_BF16 entries the decode and prefill
   compress launches write in place of pooled rows.

   - The oracle's own tests (ref/entry_reference.c): e4m3 codes, UE8M0 exponents, bf16 rounding,
     the chain on constructed windows, and the tolerance check accepting and refusing.
   - One decode and one prefill test per instance and suite, generated from the table: random
     data (randn, and scores of magnitude ~60), a poisoned cache, output_index a random
     permutation of the cache's entries (or the plan's own row), 1, 2 and 64 entries per page,
     group sizes 0, 1 and a middle one, plans that must write nothing (padding, sentinels,
     off-boundary decode rows, entries outside the cache, windows past the RoPE table). Each
     entry is checked against the fp64 oracle over the window and against the oracle applied to
     a pooled launch of the same plans; every other cache byte must keep its poison. `cpu` runs
     the host runner with its race checker, blocks forward and reversed; `gpu` the kernels, PDL
     on and off, which must also match the host runner (bit for bit in a C128_MATH_EXACT build).
   - Constructed windows whose entries are known exactly: a block amax of exactly 448 * 2^k and
     one bf16 step either side, an all-zero block (the 1e-4 floor), ties between e4m3 codes, the
     largest finite bf16, an overflow to infinity, a NaN score, an infinite kv.
   - The plan checker's entry conditions, every argument refusal (launch = checker), and the
     planners' rope_positions. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ref/entry_reference.h"
#include "harness.h"

#define FP8 C128_OUTPUT_DSV4_FP8
#define BF16E C128_OUTPUT_DSV4_BF16
enum { ROPE_ROWS = 1024, MAX_D = 512 };

/* ---------------------------------------------------------------------------------------- */
/* The oracle's own tests                                                                   */
/* ---------------------------------------------------------------------------------------- */

Test(cpu, entry_oracle_e4m3_codes) {
  /* Every finite code is its own value's code, with either sign; values ascend. */
  for (unsigned q = 0; q <= 0x7Eu; ++q) {
    const double v = ref_e4m3_value(q);
    cr_assert_eq(ref_e4m3_code(v), q, "code 0x%02X (value %g)", q, v);
    cr_assert_eq(ref_e4m3_code(-v), q | 0x80u, "code 0x%02X negated", q);
    if (q) cr_assert(v > ref_e4m3_value(q - 1), "values ascend at 0x%02X", q);
  }
  cr_assert(isnan(ref_e4m3_value(0x7F)) && isnan(ref_e4m3_value(0xFF)));
  cr_assert_eq(ref_e4m3_value(0x7E), 448.0);
  cr_assert_eq(ref_e4m3_value(0x01), ldexp(1.0, -9));
  cr_assert_eq(ref_e4m3_value(0x08), ldexp(1.0, -6));
  cr_assert_eq(ref_e4m3_value(0x38), 1.0);
  /* Exactly half a step rounds to the even code; a hair either side to the nearer one. */
  for (unsigned q = 0; q < 0x7Eu; ++q) {
    const double lo = ref_e4m3_value(q), hi = ref_e4m3_value(q + 1), mid = (lo + hi) / 2, eps = (hi - lo) / 1024;
    const unsigned even = q % 2 == 0 ? q : q + 1;
    cr_assert_eq(ref_e4m3_code(mid), even, "midpoint of 0x%02X and 0x%02X", q, q + 1);
    cr_assert_eq(ref_e4m3_code(-mid), even | 0x80u);
    cr_assert_eq(ref_e4m3_code(mid - eps), q);
    cr_assert_eq(ref_e4m3_code(mid + eps), q + 1);
  }
  static const struct {
    double x;
    unsigned code;
  } known[] = {{1.0625, 0x38},    {1.1875, 0x3A},    {0x1.0p-10, 0x00},  {0x3.0p-10, 0x02},
               {0x9.0p-10, 0x04}, {0xF.0p-10, 0x08}, {0x11.0p-10, 0x08}, {400.0, 0x7C},
               {432.0, 0x7E},     {464.0, 0x7E},     {1e30, 0x7E},       {-1.0625, 0xB8},
               {-0.0, 0x80},      {0x1.fep7, 0x78},  {240.0, 0x77},      {0x1.0p-12, 0x00}};
  for (size_t i = 0; i < sizeof known / sizeof known[0]; ++i)
    cr_assert_eq(ref_e4m3_code(known[i].x), known[i].code, "%a: 0x%02X, want 0x%02X", known[i].x,
                 ref_e4m3_code(known[i].x), known[i].code);
  cr_assert_eq(ref_e4m3_code(INFINITY), 0x7Eu);
  cr_assert_eq(ref_e4m3_code(NAN), 0x7Fu);
}

Test(cpu, entry_oracle_scale_exponent) {
  for (int k = -22; k <= 119; ++k) { /* 448 * 2^119 is the last below the largest bf16 */
    const double a = ldexp(REF_E4M3_MAX, k);
    cr_assert_eq(ref_scale_exponent(a), k, "amax 448 * 2^%d", k);
    cr_assert_eq(ref_scale_exponent(nextafter(a, INFINITY)), k + 1, "just above 448 * 2^%d", k);
    cr_assert_eq(ref_scale_exponent(ref_bf16_round(a * (1 + 0x1.0p-7))), k + 1, "a bf16 step above 448 * 2^%d", k);
    if (k > -22) cr_assert_eq(ref_scale_exponent(ref_bf16_round(a * (1 - 0x1.0p-8))), k, "a step below");
  }
  /* The 1e-4 floor: E = ceil(log2(1e-4 / 448)) = -22 for every amax up to 448 * 2^-22. */
  cr_assert_eq(ref_scale_exponent(0.0), -22);
  cr_assert_eq(ref_scale_exponent(1e-4), -22);
  cr_assert_eq(ref_scale_exponent(5e-5), -22);
  cr_assert_eq(ref_scale_exponent(ldexp(REF_E4M3_MAX, -23)), -22);
  cr_assert_eq((int)ceil(log2(1e-4 / 448.0)), -22);
  cr_assert_eq(ref_scale_exponent(1.0), -8);
  cr_assert_eq(ref_scale_exponent(448.0), 0);
  cr_assert_eq(ref_scale_exponent(449.0), 1);
  cr_assert_eq(ref_scale_exponent(0x1.fep127), 120); /* the largest bf16 */
  /* Against log2 away from the powers of two (where log2 itself is exact enough). */
  rng r = rng_fresh();
  for (int i = 0; i < 10000; ++i) {
    const double a = ref_bf16_round(ldexp(1.0 + rng_uniform(&r), (int)rng_below(&r, 141) - 13));
    const double l = log2(a / REF_E4M3_MAX);
    if (!(a >= 1e-4 && a <= 0x1.fep127) || fabs(l - nearbyint(l)) < 1e-9) continue;
    cr_assert_eq(ref_scale_exponent(a), (int)ceil(l), "amax %a (seed %llu)", a, (unsigned long long)r.seed);
  }
}

Test(cpu, entry_oracle_bf16_rounding) {
  cr_assert_eq(ref_bf16_round(1.0 + 0x1.0p-8), 1.0);            /* tie: to even */
  cr_assert_eq(ref_bf16_round(1.0 + 0x3.0p-8), 1.0 + 0x1.0p-6); /* tie: to even, upward */
  cr_assert_eq(ref_bf16_round(1.0 + 0x1.0p-8 + 0x1.0p-30), 1.0 + 0x1.0p-7);
  cr_assert_eq(ref_bf16_round(0x1.fep127), 0x1.fep127); /* the largest bf16 */
  cr_assert_eq(ref_bf16_round(nextafter(0x1.ffp127, 0.0)), 0x1.fep127);
  cr_assert(isinf(ref_bf16_round(0x1.ffp127)) && ref_bf16_round(-0x1.ffp127) < 0); /* tie with 2^128: to inf */
  cr_assert_eq(ref_bf16_round(0x1.0p-134), 0.0);                                   /* subnormal tie: to even (0) */
  cr_assert_eq(ref_bf16_round(0x3.0p-134), 0x2.0p-133);
  cr_assert(isnan(ref_bf16_round(NAN)));
  cr_assert_eq(ref_bf16_bits(NAN), 0x7FC0);
  cr_assert_eq(ref_bf16_bits(-0.0), 0x8000);
  cr_assert_eq(ref_bf16_bits(INFINITY), 0x7F80);
  cr_assert_eq(ref_bf16_bits(1.0), 0x3F80);
  /* The library's own conversion, an independent implementation, agrees on random floats. */
  rng r = rng_fresh();
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = (uint32_t)rng_u64(&r);
    float f;
    memcpy(&f, &u, sizeof f);
    if (isnan(f)) continue;
    cr_assert_eq(ref_bf16_bits(f), c128_bf16_from_float(f), "%a (seed %llu)", (double)f, (unsigned long long)r.seed);
    cr_assert_eq(ref_bf16_value(ref_bf16_bits(f)), (double)c128_bf16_to_float(c128_bf16_from_float(f)));
  }
}

/* A ref_entry on the heap (it is large). */
static ref_entry *oracle_new(void) {
  ref_entry *o = malloc(sizeof *o);
  cr_assert_not_null(o);
  return o;
}

static uint16_t read16(const unsigned char *at) { return (uint16_t)(at[0] | at[1] << 8); }
static void write16(unsigned char *at, uint16_t bits) {
  at[0] = (unsigned char)(bits & 0xFF), at[1] = (unsigned char)(bits >> 8);
}

/* The chain on windows whose pooled vector is chosen: y = +-1 (b = y, sum of squares = D), eps 0
   (r = 1), so z = bf16(gamma * y) exactly and every byte is known in advance. */
Test(cpu, entry_oracle_chain) {
  enum { D = 256 };
  double y[D];
  float gamma[D], rope[2 * REF_ROPE_PAIRS];
  for (int c = 0; c < D; ++c) y[c] = c % 3 ? 1.0 : -1.0, gamma[c] = 0.5f;
  gamma[5] = 448.0f * 8, gamma[64 + 8] = 448.0f / 4; /* block 0: amax 448 * 2^3; block 1: 448 * 2^-2 */
  gamma[6] = 1.0625f * 8;                            /* a tie at E = 3: 1.0625 -> code 0x38 */
  for (int i = 0; i < REF_ROPE_PAIRS; ++i) rope[2 * i] = 1.0f, rope[2 * i + 1] = 0.0f;
  ref_entry *o = oracle_new();
  cr_assert_eq(ref_entry_compute(D, REF_ENTRY_FP8, y, NULL, gamma, 0.0f, rope, o), 0);
  cr_assert_eq(o->r, 1.0);
  cr_assert_eq(o->scale[0], 3 + 127);
  cr_assert_eq(o->scale[1], -2 + 127);
  cr_assert_eq(o->scale[2], -9 + 127); /* block 2: |z| = 0.5 */
  cr_assert_eq(o->scale[3], 0);        /* pad */
  cr_assert_eq(o->value[5], 0x7E);     /* y[5] = +1 */
  cr_assert_eq(o->value[72], 0xFE);    /* y[72] = -1 */
  cr_assert_eq(o->value[6], 0xB8);     /* y[6] = -1: -1.0625 -> 0xB8 */
  cr_assert_eq(o->value[7], ref_e4m3_code(0.5 * y[7] / 8));
  for (int j = 0; j < REF_ROPE_DIMS; ++j) /* cos 1, sin 0: the rope values are z */
    cr_assert_eq(read16(o->value + D - 64 + 2 * j), ref_bf16_bits(0.5 * y[D - 64 + j]));
  for (int i = 0; i < REF_ROPE_PAIRS; ++i) rope[2 * i] = 0.0f, rope[2 * i + 1] = 1.0f;
  cr_assert_eq(ref_entry_compute(D, REF_ENTRY_BF16, y, NULL, gamma, 0.0f, rope, o), 0);
  for (int i = 0; i < REF_ROPE_PAIRS; ++i) { /* cos 0, sin 1: (zr, zi) -> (-zi, zr) */
    cr_assert_eq(read16(o->value + 2 * (D - 64 + 2 * i)), ref_bf16_bits(-0.5 * y[D - 63 + 2 * i]));
    cr_assert_eq(read16(o->value + 2 * (D - 63 + 2 * i)), ref_bf16_bits(0.5 * y[D - 64 + 2 * i]));
  }
  cr_assert_eq(read16(o->value + 2 * 5), ref_bf16_bits(448.0 * 8));
  cr_assert_eq(read16(o->value + 2 * 6), ref_bf16_bits(-1.0 * 8));
  /* An all-zero block: the 1e-4 floor, E = -22, codes 0. Eight channels of 3 keep the sum. */
  for (int c = 0; c < 64; ++c) y[64 + c] = 0.0;
  for (int c = 0; c < 8; ++c) y[c] = 3.0;
  for (int c = 0; c < D; ++c) gamma[c] = 0.75f;
  cr_assert_eq(ref_entry_compute(D, REF_ENTRY_FP8, y, NULL, gamma, 0.0f, rope, o), 0);
  cr_assert_eq(o->r, 1.0);
  cr_assert_eq(o->scale[1], -22 + 127);
  for (int c = 64; c < 128; ++c) cr_assert_eq(o->value[c], 0x00);
  /* NaN in y: every block NaN (codes 0x7F, scale 0xFF), RoPE values NaN; the pad stays 0. */
  y[3] = NAN;
  cr_assert_eq(ref_entry_compute(D, REF_ENTRY_FP8, y, NULL, gamma, 1e-6f, rope, o), 0);
  for (int w = 0; w < 3; ++w) cr_assert_eq(o->scale[w], 0xFF);
  cr_assert_eq(o->scale[3], 0);
  for (int c = 0; c < D - 64; ++c) cr_assert_eq(o->value[c], 0x7F);
  for (int j = 0; j < REF_ROPE_DIMS; ++j) cr_assert(isnan(ref_bf16_value(read16(o->value + D - 64 + 2 * j))));
  /* An infinity in y: r = 0, so its block is NaN (inf * 0) and the others are signed zeros. */
  y[3] = INFINITY;
  cr_assert_eq(ref_entry_compute(D, REF_ENTRY_FP8, y, NULL, gamma, 1e-6f, rope, o), 0);
  cr_assert_eq(o->scale[0], 0xFF);
  cr_assert_eq(o->scale[1], -22 + 127);
  cr_assert_eq(o->scale[2], -22 + 127);
  for (int c = 128; c < 192; ++c) cr_assert_eq(o->value[c], y[c] < 0 ? 0x80 : 0x00, "channel %d", c);
  free(o);
}

/* The check accepts the oracle's own bytes, refuses each kind of departure, and allows the
   neighbouring exponent only where the amax interval reaches 448 * 2^k. */
Test(cpu, entry_oracle_check) {
  enum { D = 256 };
  rng r = rng_fresh();
  double y[D];
  float gamma[D], rope[2 * REF_ROPE_PAIRS];
  for (int c = 0; c < D; ++c) y[c] = rng_randn(&r), gamma[c] = (float)ref_bf16_round(1.0 + 0.3 * rng_randn(&r));
  for (int i = 0; i < REF_ROPE_PAIRS; ++i) {
    const double angle = 1000.0 * rng_uniform(&r);
    rope[2 * i] = (float)cos(angle), rope[2 * i + 1] = (float)sin(angle);
  }
  ref_entry *o = oracle_new();
  unsigned char v[2 * D], s[8];
  char why[512];
  for (int kind = REF_ENTRY_FP8; kind <= REF_ENTRY_BF16; ++kind) {
    cr_assert_eq(ref_entry_compute(D, kind, y, NULL, gamma, 1e-6f, rope, o), 0);
    memcpy(v, o->value, sizeof v), memcpy(s, o->scale, sizeof s);
    cr_assert(!ref_entry_check(o, v, s, why, sizeof why), "%s (seed %llu)", why, (unsigned long long)r.seed);
    /* A RoPE value two bf16 steps off. */
    const int rope_at = kind == REF_ENTRY_FP8 ? D - 64 + 2 * 7 : 2 * (D - 64 + 7);
    write16(v + rope_at, (uint16_t)(read16(v + rope_at) + 2));
    cr_assert(ref_entry_check(o, v, s, why, sizeof why), "a RoPE value two steps off passed");
    write16(v + rope_at, 0x7FC0);
    cr_assert(ref_entry_check(o, v, s, why, sizeof why), "a NaN RoPE value passed");
    memcpy(v, o->value, sizeof v);
  }
  /* FP8: a code one off where z is no midpoint (within one code, but no rounding of z), two off,
     a NaN code, the scale one off, the pad. */
  cr_assert_eq(ref_entry_compute(D, REF_ENTRY_FP8, y, NULL, gamma, 1e-6f, rope, o), 0);
  int c0 = -1;
  for (int c = 0; c < D - 64 && c0 < 0; ++c) {
    const double x = ldexp(o->z[c], -o->exponent[c / 64]);
    const unsigned q = o->value[c];
    if ((q & 0x7Fu) >= 0x10 && (q & 0x7Fu) < 0x70 && fabs(fabs(x) - fabs(ref_e4m3_value(q))) < 1e-3 * fabs(x)) c0 = c;
  }
  cr_assert_geq(c0, 0, "no channel near an e4m3 value (seed %llu)", (unsigned long long)r.seed);
  unsigned char bad[2 * D];
  const struct {
    int delta;
    const char *what;
  } departures[] = {{1, "a code one off"}, {2, "a code two off"}};
  for (size_t i = 0; i < 2; ++i) {
    memcpy(bad, o->value, sizeof bad);
    bad[c0] = (unsigned char)(bad[c0] + departures[i].delta);
    cr_assert(ref_entry_check(o, bad, o->scale, why, sizeof why), "%s passed", departures[i].what);
  }
  memcpy(bad, o->value, sizeof bad);
  bad[c0] = 0x7F;
  cr_assert(ref_entry_check(o, bad, o->scale, why, sizeof why), "a NaN code in a finite block passed");
  memcpy(s, o->scale, sizeof s);
  s[1] = (unsigned char)(s[1] + 1);
  cr_assert(ref_entry_check(o, o->value, s, why, sizeof why), "a scale one off passed");
  memcpy(s, o->scale, sizeof s);
  s[D / 64 - 1] = 1;
  cr_assert(ref_entry_check(o, o->value, s, why, sizeof why), "a nonzero pad byte passed");
  /* With an uncertain y (y_err of a bf16 step), z may be the neighbouring bf16 value: the code
     of that neighbour passes where it differs. */
  double err[D];
  for (int c = 0; c < D; ++c) err[c] = ref_bf16_round(fabs(y[c])) * 0x1.0p-7;
  cr_assert_eq(ref_entry_compute(D, REF_ENTRY_FP8, y, err, gamma, 1e-6f, rope, o), 0);
  cr_assert(!ref_entry_check(o, o->value, o->scale, why, sizeof why), "%s", why);
  /* A block whose amax is exactly 448 * 2^3 (y = +-1, eps 0): E = 3 only; with y uncertain
     upward by a bf16 step, E = 4 (with every code requantised at 4) passes too. */
  for (int c = 0; c < D; ++c) y[c] = c % 2 ? 1.0 : -1.0, gamma[c] = (float)ref_bf16_round(2.0 * rng_uniform(&r));
  gamma[10] = 448.0f * 8;
  cr_assert_eq(ref_entry_compute(D, REF_ENTRY_FP8, y, NULL, gamma, 0.0f, rope, o), 0);
  cr_assert_eq(o->scale[0], 130);
  memcpy(bad, o->value, sizeof bad), memcpy(s, o->scale, sizeof s);
  s[0] = 131;
  for (int c = 0; c < 64; ++c) bad[c] = (unsigned char)ref_e4m3_code(ldexp(o->z[c], -4));
  cr_assert(ref_entry_check(o, bad, s, why, sizeof why), "E = 4 passed for an exact amax of 448 * 2^3");
  for (int c = 0; c < D; ++c) err[c] = 0x1.0p-7;
  cr_assert_eq(ref_entry_compute(D, REF_ENTRY_FP8, y, err, gamma, 0.0f, rope, o), 0);
  cr_assert(!ref_entry_check(o, bad, s, why, sizeof why), "E = 4 refused within a step of 448 * 2^3: %s", why);
  cr_assert(!ref_entry_check(o, o->value, o->scale, why, sizeof why), "%s", why);
  s[0] = 132;
  cr_assert(ref_entry_check(o, bad, s, why, sizeof why), "E = 5 passed");
  /* NaN blocks: exactly 0x7F codes and a 0xFF scale; BF16: NaN values. */
  y[3] = NAN;
  cr_assert_eq(ref_entry_compute(D, REF_ENTRY_FP8, y, NULL, gamma, 0.0f, rope, o), 0);
  cr_assert(!ref_entry_check(o, o->value, o->scale, why, sizeof why), "%s", why);
  memcpy(bad, o->value, sizeof bad);
  bad[70] = 0x7E;
  cr_assert(ref_entry_check(o, bad, o->scale, why, sizeof why), "a finite code in a NaN block passed");
  memcpy(s, o->scale, sizeof s);
  s[2] = 0xFE;
  cr_assert(ref_entry_check(o, o->value, s, why, sizeof why), "a finite scale of a NaN block passed");
  cr_assert_eq(ref_entry_compute(D, REF_ENTRY_BF16, y, NULL, gamma, 0.0f, rope, o), 0);
  cr_assert(!ref_entry_check(o, o->value, NULL, why, sizeof why), "%s", why);
  memcpy(bad, o->value, sizeof bad);
  bad[2 * 70] = 0, bad[2 * 70 + 1] = 0;
  cr_assert(ref_entry_check(o, bad, NULL, why, sizeof why), "a zero in a NaN block passed");
  /* BF16 dequantised values: a value that is no code times 2^E, and a code two off. */
  y[3] = 1.0;
  cr_assert_eq(ref_entry_compute(D, REF_ENTRY_BF16, y, NULL, gamma, 0.0f, rope, o), 0);
  cr_assert(!ref_entry_check(o, o->value, NULL, why, sizeof why), "%s", why);
  memcpy(bad, o->value, sizeof bad);
  cr_assert_eq(read16(bad + 20), ref_bf16_bits(-448.0 * 8)); /* channel 10: y = -1, gamma 448 * 2^3 */
  write16(bad + 20, (uint16_t)(read16(bad + 20) - 1));
  cr_assert(ref_entry_check(o, bad, NULL, why, sizeof why), "a value off the e4m3 grid passed");
  write16(bad + 20, ref_bf16_bits(ldexp(ref_e4m3_value(0xFC), 3)));
  cr_assert(ref_entry_check(o, bad, NULL, why, sizeof why), "a value two codes off passed");
  write16(bad + 20, ref_bf16_bits(ldexp(ref_e4m3_value(0xFD), 3)));
  cr_assert(ref_entry_check(o, bad, NULL, why, sizeof why), "a value one code off (no rounding of z) passed");
  free(o);
}

/* ---------------------------------------------------------------------------------------- */
/* Shared pieces of the kernel tests                                                        */
/* ---------------------------------------------------------------------------------------- */

/* The layer's RoPE table: (cos, sin) of pair i at position p, a YaRN-like spectrum. */
static float *rope_make(void) {
  float *t = malloc((size_t)ROPE_ROWS * REF_ROPE_DIMS * sizeof(float));
  cr_assert_not_null(t);
  for (int p = 0; p < ROPE_ROWS; ++p)
    for (int i = 0; i < REF_ROPE_PAIRS; ++i) {
      const double angle = p * pow(160000.0, -2.0 * i / REF_ROPE_DIMS);
      t[((size_t)p * REF_ROPE_PAIRS + i) * 2] = (float)cos(angle);
      t[((size_t)p * REF_ROPE_PAIRS + i) * 2 + 1] = (float)sin(angle);
    }
  return t;
}

/* gamma holds bf16 values, as checkpoints do. */
static float *gamma_make(int D, rng *r) {
  float *g = malloc((size_t)D * sizeof(float));
  cr_assert_not_null(g);
  for (int c = 0; c < D; ++c) g[c] = (float)ref_bf16_round(1.0 + 0.3 * rng_randn(r));
  return g;
}

/* A paged cache poisoned with random bytes, and the poison kept to compare with. */
typedef struct cache {
  int head_dim, kind;
  int64_t per_page, pages, page_bytes;
  size_t bytes;
  unsigned char *data, *poison;
} cache;

/* FP8: FlashMLA's page, P entries and their scale records rounded up to a multiple of the entry
   (584 P rounded up to 576 at head_dim 512); BF16: the entries and 16 bytes no entry uses. */
static int64_t page_bytes_for(int D, int kind, int64_t P) {
  if (kind == FP8) {
    const int64_t entry = D + REF_ROPE_DIMS, need = (entry + D / REF_FP8_BLOCK) * P;
    return (need + entry - 1) / entry * entry;
  }
  return 2 * (int64_t)D * P + 16;
}

static cache cache_make(int D, int kind, int64_t per_page, int64_t pages, rng *r) {
  cache c = {D, kind, per_page, pages, page_bytes_for(D, kind, per_page), 0, NULL, NULL};
  c.bytes = (size_t)(pages * c.page_bytes);
  c.data = aligned_alloc(64, (c.bytes + 64) / 64 * 64);
  cr_assert_not_null(c.data);
  for (size_t i = 0; i < c.bytes; ++i) c.data[i] = (unsigned char)rng_u64(r);
  c.poison = clone_bytes(c.data, c.bytes);
  return c;
}

static void cache_free(cache *c) { free(c->data), free(c->poison); }
static int64_t cache_entries(const cache *c) { return c->pages * c->per_page; }

/* A launch's workspace for `jobs` (zero, as the first launch needs it), freed with free(). */
static void *workspace_make(int64_t jobs, int D, int64_t *bytes) {
  *bytes = c128_entry_workspace_bytes(jobs, D);
  cr_assert_gt(*bytes, 0);
  void *w = aligned_alloc(64, (size_t)(*bytes + 63) / 64 * 64);
  cr_assert_not_null(w);
  memset(w, 0, (size_t)*bytes);
  return w;
}

/* Every launch leaves its workspace as it found it: all zero (the counters and the rows). */
static void check_workspace_zero(const c128_entry_args *e, const char *what) {
  const unsigned char *w = (const unsigned char *)e->workspace;
  for (int64_t k = 0; k < e->workspace_bytes; ++k)
    cr_assert_eq(w[k], 0, "%s: workspace byte %lld of %lld is 0x%02x after the launch", what, (long long)k,
                 (long long)e->workspace_bytes, w[k]);
}

static c128_entry_args entry_of(const cache *c, const float *gamma, float eps, const float *rope, int64_t positions,
                                int64_t jobs) {
  c128_entry_args e;
  memset(&e, 0, sizeof e);
  e.workspace = workspace_make(jobs, c->head_dim, &e.workspace_bytes);
  e.kind = (c128_output_kind)c->kind;
  e.norm_weight = gamma, e.norm_eps = eps;
  e.rope_table = rope, e.rope_positions = positions;
  e.cache = c->data, e.cache_pages = c->pages;
  e.entries_per_page = (int32_t)c->per_page, e.page_bytes = c->page_bytes;
  return e;
}

/* The window's pooled vector in fp64 (ref_window): rows < buffer_len from the pre-batch state
   page, the rest from the input, each widened from its own storage dtype. */
static void window_y(const c128_instance_info *f, const void *state, int64_t page, int buffer_len, const void *input,
                     int64_t input_row0, const float *ape, double *y) {
  const int D = f->head_dim;
  float *scratch = malloc(REF_WINDOW * 2 * (size_t)D * sizeof(float));
  cr_assert_not_null(scratch);
  const float *rows[REF_WINDOW];
  for (int j = 0; j < REF_WINDOW; ++j) {
    float *dst = scratch + (size_t)j * 2 * (size_t)D;
    if (j < buffer_len) row_widen(state, (size_t)(page * REF_WINDOW + j), D, f->state_dtype, dst);
    else row_widen(input, (size_t)(input_row0 + j), D, f->input_dtype, dst);
    rows[j] = dst;
  }
  ref_window(D, rows, ape, y);
  free(scratch);
}

/* DESIGN 8.2's bound on how far a correct fp32 pooled value lies from the fp64 oracle's, plus
   `extra` (the fast build's GPU against the host runner). */
static void fp64_error(int D, const double *y, double extra, double *err) {
  for (int c = 0; c < D; ++c) err[c] = REF_BF16_REL * fabs(y[c]) + REF_BF16_ABS + extra;
}

/* Entry `loc` of the cache against the oracle of pooled vector y (y_err: see ref_entry_compute). */
static void check_entry(const cache *c, int64_t loc, const double *y, const double *y_err, const float *gamma,
                        float eps, const float *rope_row, const char *what, uint64_t seed) {
  ref_entry *o = oracle_new();
  cr_assert_eq(ref_entry_compute(c->head_dim, c->kind, y, y_err, gamma, eps, rope_row, o), 0);
  size_t value_at, scale_at;
  ref_entry_locate(c->head_dim, c->kind, c->per_page, c->page_bytes, loc, &value_at, &scale_at);
  char why[512];
  const int bad = ref_entry_check(o, c->data + value_at, c->data + scale_at, why, sizeof why);
  free(o);
  cr_assert(!bad, "%s: entry %lld: %s (seed %llu)", what, (long long)loc, why, (unsigned long long)seed);
}

/* Every cache byte outside the n entries at locs (values and, for FP8, the scale record with its
   pad byte) still holds its poison. */
static void check_untouched(const cache *c, const int64_t *locs, int n, const char *what, uint64_t seed) {
  unsigned char *mine = calloc(c->bytes ? c->bytes : 1, 1);
  cr_assert_not_null(mine);
  const size_t values = ref_entry_value_bytes(c->head_dim, c->kind),
               scales = ref_entry_scale_bytes(c->head_dim, c->kind);
  for (int i = 0; i < n; ++i) {
    size_t value_at, scale_at;
    ref_entry_locate(c->head_dim, c->kind, c->per_page, c->page_bytes, locs[i], &value_at, &scale_at);
    memset(mine + value_at, 1, values);
    memset(mine + scale_at, 1, scales);
  }
  size_t first = c->bytes;
  for (size_t i = 0; i < c->bytes && first == c->bytes; ++i)
    if (!mine[i] && c->data[i] != c->poison[i]) first = i;
  free(mine);
  cr_assert(first == c->bytes,
            "%s: cache byte %zu (page %zu, byte %zu of it) was written: 0x%02X, poison 0x%02X (seed %llu)", what, first,
            first / (size_t)c->page_bytes, first % (size_t)c->page_bytes, c->data[first], c->poison[first],
            (unsigned long long)seed);
}

/* The fast build's GPU against the host runner's pooled value y_host of an element: within
   C128_FAST_BOUND (1 + max |kv|), and half a bf16 step more when y_host was itself rounded to a
   bf16 output. */
static void fast_error(int D, const double *y_host, double max_kv, int bf16_output, double *err) {
  for (int c = 0; c < D; ++c)
    err[c] = C128_FAST_BOUND * (1.0 + max_kv) + (bf16_output ? 0.5 * ref_bf16_ulp(y_host[c]) : 0.0);
}

static int exact_build(void) {
  c128_build_info b;
  cr_assert_eq(c128_build_info_get(&b), C128_SUCCESS);
  return b.math == C128_MATH_EXACT;
}

/* Row `row` of a pooled output widened to fp64. */
static void pooled_row(const c128_instance_info *f, const void *out, int64_t row, double *y) {
  for (int c = 0; c < f->head_dim; ++c)
    y[c] = elem_get(out, (size_t)row * (size_t)f->head_dim + (size_t)c, f->output_dtype);
}

/* A random permutation of 0 .. n - 1: entries over the cache's pages and slots in random order. */
static int64_t *permutation(int64_t n, rng *r) {
  int64_t *p = malloc((size_t)(n ? n : 1) * sizeof *p);
  cr_assert_not_null(p);
  for (int64_t i = 0; i < n; ++i) p[i] = i;
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = rng_below(r, i + 1), t = p[i];
    p[i] = p[j], p[j] = t;
  }
  return p;
}

/* One case's configuration. */
typedef struct entry_case {
  int kind;
  int64_t per_page, pages; /* the cache */
  int indexed;             /* output_index a permutation, else NULL (the plan's own row) */
  int32_t group;           /* requests_per_block / windows_per_block */
  int32_t pdl;
  float score_scale;
  int reverse;
} entry_case;

/* ---------------------------------------------------------------------------------------- */
/* Decode                                                                                   */
/* ---------------------------------------------------------------------------------------- */

enum { DB = 10, DPAGES = 10, DECODE_ROPE = 300 };
/* boundary on page 3 (position 128); slot 40 of page 1; boundary on page 0 (position 0); padding;
   slot 0 of page 5; boundary on page 4 (position 256); boundary at position 384, past the RoPE
   table's 300 rows; boundary whose entry is negative (indexed); boundary whose entry is past the
   cache (indexed); boundary on page 8 (position 128). Without an index the entry is the plan's
   row, and the cache holds 9 entries: the last boundary's is outside. */
static const c128_decode_plan decode_plans[DB] = {
    {256, 3 * 128 + 127, 2, 3}, {169, 1 * 128 + 40, 0, 1},  {128, 127, 0, 0},           {0, -1, -1, -1},
    {129, 5 * 128, 5, 5},       {384, 4 * 128 + 127, 4, 4}, {512, 2 * 128 + 127, 1, 2}, {256, 6 * 128 + 127, 5, 6},
    {384, 7 * 128 + 127, 6, 7}, {256, 8 * 128 + 127, 7, 8}};

/* Whether decode plan b emits its entry, and whether it persists its row (a skipped plan does
   neither: DESIGN 6.5). */
static void decode_model(const int64_t *index, int64_t entries, int64_t rope_positions, int b, int *emits,
                         int *writes) {
  const c128_decode_plan p = decode_plans[b];
  *emits = *writes = 0;
  if (p.seq_len == 0 || p.write_loc < 0) return;
  if (p.write_loc % REF_WINDOW != REF_WINDOW - 1) {
    *writes = 1;
    return;
  }
  const int64_t target = index ? index[b] : b, position = (int64_t)p.seq_len - REF_WINDOW;
  *emits = *writes = target >= 0 && target < entries && position >= 0 && position < rope_positions;
}

static c128_decode_args decode_args_of(const c128_instance_info *f, void *state, const void *input, const float *ape,
                                       const int64_t *index, int32_t group, int32_t pdl) {
  c128_decode_args a = {0};
  a.head_dim = f->head_dim;
  a.state_dtype = f->state_dtype, a.input_dtype = f->input_dtype, a.output_dtype = f->output_dtype;
  a.state = state, a.state_pages = DPAGES;
  a.input = input, a.ape = ape;
  a.plans = decode_plans, a.batch = DB;
  a.requests_per_block = group, a.pdl = pdl;
  a.output_index = index;
  return a;
}

static void decode_entry_case(const instance_entry *e, backend be, entry_case k) {
  require_backend(be);
  const c128_instance_info *f = e;
  const int D = f->head_dim;
  const size_t state_row = (size_t)f->row_elems * dtype_size(f->state_dtype);
  const size_t out_row = (size_t)D * dtype_size(f->output_dtype);
  const size_t state_rows = DPAGES * REF_WINDOW;
  rng r = rng_fresh();
  void *state = rows_alloc(state_rows, D, f->state_dtype), *input = rows_alloc(DB, D, f->input_dtype);
  rows_fill(state, state_rows, D, f->state_dtype, &r, k.score_scale);
  rows_fill(input, DB, D, f->input_dtype, &r, k.score_scale);
  float *ape = ape_make(D, &r), *gamma = gamma_make(D, &r), *rope = rope_make();
  const float eps = 1e-6f;
  cache c = cache_make(D, k.kind, k.per_page, k.pages, &r);
  const int64_t entries = cache_entries(&c);
  int64_t *index = NULL;
  if (k.indexed) {
    index = permutation(entries, &r);
    cr_assert_geq(entries, DB);
    index[7] = -1 - rng_below(&r, 1000);
    index[8] = entries + rng_below(&r, 3);
  }
  void *state0 = clone_bytes(state, state_rows * state_row);

  c128_decode_args a = decode_args_of(f, state, input, ape, index, k.group, k.pdl);
  a.entry = entry_of(&c, gamma, eps, rope, DECODE_ROPE, DB);
  c128_status st = run_decode(e, be, &a, k.reverse);
  cr_assert_eq(st, C128_SUCCESS, "%s", c128_status_string(st));
  check_workspace_zero(&a.entry, "decode");
  if (k.group != 1) { /* groups of one block a split, which meet in the workspace: the same bytes */
    cache twin = c;
    twin.data = clone_bytes(c.poison, c.bytes);
    c128_decode_args ta = a;
    ta.state = clone_bytes(state0, state_rows * state_row);
    ta.entry = entry_of(&twin, gamma, eps, rope, DECODE_ROPE, DB);
    ta.requests_per_block = 1;
    cr_assert_eq(run_decode(e, be, &ta, !k.reverse), C128_SUCCESS);
    cr_assert(memcmp(c.data, twin.data, c.bytes) == 0, "decode entries of group %d and group 1 differ (seed %llu)",
              k.group, (unsigned long long)r.seed);
    check_rows_equal(state, ta.state, state_rows, state_row, "decode state, group 1", r.seed);
    free(twin.data), free(ta.state), free(ta.entry.workspace);
  }

  /* The state: exactly the rows of the plans that ran. */
  void *want = clone_bytes(state0, state_rows * state_row);
  int emits[DB], writes[DB], n = 0;
  int64_t locs[DB];
  for (int b = 0; b < DB; ++b) {
    decode_model(index, entries, DECODE_ROPE, b, &emits[b], &writes[b]);
    if (writes[b])
      row_to_state(input, (size_t)b, f->input_dtype, (char *)want + (size_t)decode_plans[b].write_loc * state_row,
                   f->state_dtype, D);
    if (emits[b]) locs[n++] = index ? index[b] : b;
  }
  cr_assert_geq(n, 4);
  check_rows_equal(state, want, state_rows, state_row, "decode state", r.seed);
  check_untouched(&c, locs, n, "decode cache", r.seed);

  /* The pooled launch of the same plans, from the same state. */
  void *pooled = malloc(DB * out_row);
  poison(pooled, DB * out_row);
  c128_decode_args pa =
      decode_args_of(f, clone_bytes(state0, state_rows * state_row), input, ape, NULL, k.group, k.pdl);
  pa.output = pooled, pa.output_rows = DB;
  cr_assert_eq(run_decode(e, be, &pa, k.reverse), C128_SUCCESS);

  const double kv = fmax(max_abs_kv(state0, state_rows, D, f->state_dtype), max_abs_kv(input, DB, D, f->input_dtype));
  const double extra = be == BACKEND_GPU && !exact_build() ? C128_FAST_BOUND * (1.0 + kv) : 0.0;
  double y[MAX_D], err[MAX_D];
  for (int b = 0; b < DB; ++b) {
    if (!emits[b]) continue;
    const int64_t loc = index ? index[b] : b;
    const float *row = rope + ((int64_t)decode_plans[b].seq_len - REF_WINDOW) * REF_ROPE_DIMS;
    char what[96];
    window_y(f, state0, decode_plans[b].read_page_1, REF_WINDOW - 1, input, b - (REF_WINDOW - 1), ape, y);
    fp64_error(D, y, extra, err);
    snprintf(what, sizeof what, "decode plan %d against the fp64 oracle", b);
    check_entry(&c, loc, y, err, gamma, eps, row, what, r.seed);
    pooled_row(f, pooled, b, y);
    snprintf(what, sizeof what, "decode plan %d against the oracle of its pooled output", b);
    check_entry(&c, loc, y, NULL, gamma, eps, row, what, r.seed);
  }

  if (be == BACKEND_GPU) { /* the host runner: the same bytes (exact build) or within its bound */
    cache host = c;
    host.data = clone_bytes(c.poison, c.bytes);
    a.state = clone_bytes(state0, state_rows * state_row);
    a.entry.cache = host.data;
    cr_assert_eq(run_decode(e, BACKEND_CPU, &a, 0), C128_SUCCESS);
    check_rows_equal(state, a.state, state_rows, state_row, "GPU vs CPU state", r.seed);
    if (exact_build()) {
      cr_assert(memcmp(c.data, host.data, c.bytes) == 0, "GPU vs CPU cache differ in the exact build (seed %llu)",
                (unsigned long long)r.seed);
    } else {
      void *host_pooled = malloc(DB * out_row);
      poison(host_pooled, DB * out_row);
      memcpy(pa.state, state0, state_rows * state_row);
      pa.output = host_pooled;
      cr_assert_eq(run_decode(e, BACKEND_CPU, &pa, 0), C128_SUCCESS);
      for (int b = 0; b < DB; ++b) {
        if (!emits[b]) continue;
        pooled_row(f, host_pooled, b, y);
        fast_error(D, y, kv, f->output_dtype == C128_BF16, err);
        char what[96];
        snprintf(what, sizeof what, "decode plan %d: GPU against the oracle of the host runner's pooled output", b);
        check_entry(&c, index ? index[b] : b, y, err, gamma, eps,
                    rope + ((int64_t)decode_plans[b].seq_len - REF_WINDOW) * REF_ROPE_DIMS, what, r.seed);
      }
      free(host_pooled);
    }
    free(host.data), free(a.state);
  }
  free(pa.state), free(pooled), free(want), free(state0), free(index);
  cache_free(&c), free(a.entry.workspace);
  free(state), free(input), free(ape), free(gamma), free(rope);
}

/* ---------------------------------------------------------------------------------------- */
/* Prefill                                                                                  */
/* ---------------------------------------------------------------------------------------- */

enum { NUM_EVENTS = 5, PPAGES = 8, PREFILL_ROPE = 641, TAIL = 37, TAIL_PAGE = 6, NC = 13 };
static const int event_buffer_len[NUM_EVENTS] = {0, 1, 64, 120, 127};
static const int32_t event_page[NUM_EVENTS] = {-1, 5, 0, 7, 1};

/* The batch of test_kernels.c's prefill test (five windows mixing state and input rows at
   positions 128 .. 640, a sentinel, three plans the kernels skip, write plans) and four more
   windows of input rows 3 .. 133: one whose entry is negative (indexed), one whose entry is past
   the cache (indexed), one at position 768, past the RoPE table's 641 rows, and one at position
   256. Without an index the entry is the plan's row, and the cache holds 12 entries. */
typedef struct prefill_batch {
  c128_compress_plan cp[NC];
  int structural[NC]; /* the plan runs as far as its rows and pages go */
  int64_t window_page[NC], window_input0[NC];
  int window_buffer_len[NC];
  c128_write_plan wp[TAIL + 3 + 4];
  int64_t rows, tail_row, first_row[NUM_EVENTS];
} prefill_batch;

static void prefill_batch_make(prefill_batch *p) {
  memset(p, 0, sizeof *p);
  for (int k = 0; k < NUM_EVENTS; ++k) {
    p->first_row[k] = p->rows;
    p->rows += REF_WINDOW - event_buffer_len[k];
  }
  p->tail_row = p->rows;
  p->rows += TAIL;
  for (int k = 0; k < NUM_EVENTS; ++k) {
    const c128_compress_plan c = {(uint32_t)(REF_WINDOW * (k + 2)),
                                  (uint16_t)(p->first_row[k] + REF_WINDOW - 1 - event_buffer_len[k]),
                                  (uint16_t)event_buffer_len[k], event_page[k], event_page[k]};
    p->cp[k] = c, p->structural[k] = 1;
    p->window_page[k] = event_page[k], p->window_buffer_len[k] = event_buffer_len[k];
    p->window_input0[k] = p->first_row[k] - event_buffer_len[k];
  }
  const c128_compress_plan sentinel = C128_INVALID_COMPRESS_PLAN;
  p->cp[5] = sentinel;
  p->cp[6] = p->cp[2], p->cp[6].read_page_1 = 1000;                  /* page beyond the state */
  p->cp[7] = p->cp[0], p->cp[7].ragged_id = (uint16_t)(p->rows + 5); /* beyond the input */
  p->cp[8] = p->cp[0], p->cp[8].ragged_id = 3;                       /* window starts before row 0 */
  static const uint32_t seq_len[4] = {2 * REF_WINDOW, 2 * REF_WINDOW, 7 * REF_WINDOW, 3 * REF_WINDOW};
  for (int i = 0; i < 4; ++i) {
    const int k = 9 + i;
    const c128_compress_plan c = {seq_len[i], (uint16_t)(130 + i), 0, -1, -1};
    p->cp[k] = c, p->structural[k] = 1;
    p->window_page[k] = -1, p->window_buffer_len[k] = 0, p->window_input0[k] = 130 + i - (REF_WINDOW - 1);
  }
  for (int i = 0; i < TAIL; ++i) p->wp[i] = (c128_write_plan){(uint32_t)(p->tail_row + i), TAIL_PAGE * 128 + i};
  for (int i = 0; i < 3; ++i)
    p->wp[TAIL + i] = (c128_write_plan){(uint32_t)(p->first_row[1] + i), event_page[4] * 128 + i};
  const c128_write_plan no_write = C128_INVALID_WRITE_PLAN;
  p->wp[TAIL + 3] = no_write;
  p->wp[TAIL + 4] = (c128_write_plan){(uint32_t)p->rows, 2 * 128};
  p->wp[TAIL + 5] = (c128_write_plan){0, -7};
  p->wp[TAIL + 6] = (c128_write_plan){0, 1000 * 128};
}

static int64_t prefill_target(const prefill_batch *p, const int64_t *index, int k) {
  return index ? index[p->cp[k].ragged_id] : k;
}

static int prefill_emits(const prefill_batch *p, const int64_t *index, int64_t entries, int k) {
  if (!p->structural[k]) return 0;
  const int64_t target = prefill_target(p, index, k), position = (int64_t)p->cp[k].seq_len - REF_WINDOW;
  return target >= 0 && target < entries && position >= 0 && position < PREFILL_ROPE;
}

static c128_prefill_args prefill_args_of(const c128_instance_info *f, const prefill_batch *p, void *state,
                                         const void *input, const float *ape, const int64_t *index, int32_t group,
                                         int32_t pdl) {
  c128_prefill_args a = {0};
  a.head_dim = f->head_dim;
  a.state_dtype = f->state_dtype, a.input_dtype = f->input_dtype, a.output_dtype = f->output_dtype;
  a.state = state, a.state_pages = PPAGES;
  a.input = input, a.input_rows = p->rows, a.ape = ape;
  a.compress_plans = p->cp, a.num_compress = NC;
  a.write_plans = p->wp, a.num_write = TAIL + 3 + 4;
  a.windows_per_block = group, a.pdl = pdl;
  a.output_index = index;
  return a;
}

static void prefill_entry_case(const instance_entry *e, backend be, entry_case k) {
  require_backend(be);
  const c128_instance_info *f = e;
  const int D = f->head_dim;
  const size_t state_row = (size_t)f->row_elems * dtype_size(f->state_dtype);
  const size_t out_row = (size_t)D * dtype_size(f->output_dtype);
  const size_t state_rows = PPAGES * REF_WINDOW;
  rng r = rng_fresh();
  prefill_batch *p = malloc(sizeof *p);
  cr_assert_not_null(p);
  prefill_batch_make(p);
  void *state = rows_alloc(state_rows, D, f->state_dtype), *input = rows_alloc((size_t)p->rows, D, f->input_dtype);
  rows_fill(state, state_rows, D, f->state_dtype, &r, k.score_scale);
  rows_fill(input, (size_t)p->rows, D, f->input_dtype, &r, k.score_scale);
  float *ape = ape_make(D, &r), *gamma = gamma_make(D, &r), *rope = rope_make();
  const float eps = 1e-6f;
  cache c = cache_make(D, k.kind, k.per_page, k.pages, &r);
  const int64_t entries = cache_entries(&c);
  int64_t *index = NULL;
  if (k.indexed) { /* per input row: distinct entries for the windows' last rows, junk elsewhere */
    int64_t *perm = permutation(entries, &r);
    cr_assert_geq(entries, NC);
    index = malloc((size_t)p->rows * sizeof *index);
    cr_assert_not_null(index);
    for (int64_t i = 0; i < p->rows; ++i) index[i] = (int64_t)rng_u64(&r);
    for (int j = 0; j < NC; ++j)
      if (p->cp[j].ragged_id < p->rows) index[p->cp[j].ragged_id] = perm[j];
    index[p->cp[9].ragged_id] = -5 - rng_below(&r, 1000);
    index[p->cp[10].ragged_id] = entries + rng_below(&r, 3);
    free(perm);
  }
  void *state0 = clone_bytes(state, state_rows * state_row);

  c128_prefill_args a = prefill_args_of(f, p, state, input, ape, index, k.group, k.pdl);
  a.entry = entry_of(&c, gamma, eps, rope, PREFILL_ROPE, NC);
  const c128_status st = run_prefill(e, be, &a, k.reverse);
  cr_assert_eq(st, C128_SUCCESS, "%s", c128_status_string(st));
  check_workspace_zero(&a.entry, "prefill");
  if (k.group != 1) { /* groups of one block a split, which meet in the workspace: the same bytes */
    cache twin = c;
    twin.data = clone_bytes(c.poison, c.bytes);
    c128_prefill_args ta = a;
    ta.state = clone_bytes(state0, state_rows * state_row);
    ta.entry = entry_of(&twin, gamma, eps, rope, PREFILL_ROPE, NC);
    ta.windows_per_block = 1;
    cr_assert_eq(run_prefill(e, be, &ta, !k.reverse), C128_SUCCESS);
    cr_assert(memcmp(c.data, twin.data, c.bytes) == 0, "prefill entries of group %d and group 1 differ (seed %llu)",
              k.group, (unsigned long long)r.seed);
    check_rows_equal(state, ta.state, state_rows, state_row, "prefill state, group 1", r.seed);
    free(twin.data), free(ta.state), free(ta.entry.workspace);
  }

  void *want = clone_bytes(state0, state_rows * state_row);
  for (int i = 0; i < TAIL + 3; ++i)
    row_to_state(input, p->wp[i].ragged_id, f->input_dtype, (char *)want + (size_t)p->wp[i].write_loc * state_row,
                 f->state_dtype, D);
  check_rows_equal(state, want, state_rows, state_row, "prefill state", r.seed);
  int64_t locs[NC];
  int n = 0;
  for (int j = 0; j < NC; ++j)
    if (prefill_emits(p, index, entries, j)) locs[n++] = prefill_target(p, index, j);
  cr_assert_geq(n, 6);
  check_untouched(&c, locs, n, "prefill cache", r.seed);

  void *pooled = malloc(NC * out_row);
  poison(pooled, NC * out_row);
  c128_prefill_args pa =
      prefill_args_of(f, p, clone_bytes(state0, state_rows * state_row), input, ape, NULL, k.group, k.pdl);
  pa.output = pooled, pa.output_rows = NC;
  cr_assert_eq(run_prefill(e, be, &pa, k.reverse), C128_SUCCESS);

  const double kv =
      fmax(max_abs_kv(state0, state_rows, D, f->state_dtype), max_abs_kv(input, (size_t)p->rows, D, f->input_dtype));
  const double extra = be == BACKEND_GPU && !exact_build() ? C128_FAST_BOUND * (1.0 + kv) : 0.0;
  double y[MAX_D], err[MAX_D];
  for (int j = 0; j < NC; ++j) {
    if (!prefill_emits(p, index, entries, j)) continue;
    const int64_t loc = prefill_target(p, index, j);
    const float *row = rope + ((int64_t)p->cp[j].seq_len - REF_WINDOW) * REF_ROPE_DIMS;
    char what[96];
    window_y(f, state0, p->window_page[j], p->window_buffer_len[j], input, p->window_input0[j], ape, y);
    fp64_error(D, y, extra, err);
    snprintf(what, sizeof what, "prefill plan %d (buffer_len %d) against the fp64 oracle", j, p->window_buffer_len[j]);
    check_entry(&c, loc, y, err, gamma, eps, row, what, r.seed);
    pooled_row(f, pooled, j, y);
    snprintf(what, sizeof what, "prefill plan %d against the oracle of its pooled output", j);
    check_entry(&c, loc, y, NULL, gamma, eps, row, what, r.seed);
  }

  if (be == BACKEND_GPU) {
    cache host = c;
    host.data = clone_bytes(c.poison, c.bytes);
    a.state = clone_bytes(state0, state_rows * state_row);
    a.entry.cache = host.data;
    cr_assert_eq(run_prefill(e, BACKEND_CPU, &a, 0), C128_SUCCESS);
    check_rows_equal(state, a.state, state_rows, state_row, "GPU vs CPU state", r.seed);
    if (exact_build()) {
      cr_assert(memcmp(c.data, host.data, c.bytes) == 0, "GPU vs CPU cache differ in the exact build (seed %llu)",
                (unsigned long long)r.seed);
    } else {
      void *host_pooled = malloc(NC * out_row);
      poison(host_pooled, NC * out_row);
      memcpy(pa.state, state0, state_rows * state_row);
      pa.output = host_pooled;
      cr_assert_eq(run_prefill(e, BACKEND_CPU, &pa, 0), C128_SUCCESS);
      for (int j = 0; j < NC; ++j) {
        if (!prefill_emits(p, index, entries, j)) continue;
        pooled_row(f, host_pooled, j, y);
        fast_error(D, y, kv, f->output_dtype == C128_BF16, err);
        char what[96];
        snprintf(what, sizeof what, "prefill plan %d: GPU against the oracle of the host runner's pooled output", j);
        check_entry(&c, prefill_target(p, index, j), y, err, gamma, eps,
                    rope + ((int64_t)p->cp[j].seq_len - REF_WINDOW) * REF_ROPE_DIMS, what, r.seed);
      }
      free(host_pooled);
    }
    free(host.data), free(a.state);
  }
  free(pa.state), free(pooled), free(want), free(state0), free(index), free(p);
  cache_free(&c), free(a.entry.workspace);
  free(state), free(input), free(ape), free(gamma), free(rope);
}

/* Five cases per instance and kernel: FP8 with 2 entries a page, indexed, the automatic group;
   BF16 with 64 entries a page, indexed, scores of ~60, groups of 1, the blocks reversed on the
   CPU and PDL on the GPU; FP8 with 1 entry a page, the plans' own rows, a middle group (whole
   windows where it holds a window's splits, DESIGN 11.3); whole windows in groups of one window
   (8 blocks of 64 channels) and of 24 blocks' worth (at head_dim 512 three windows a block and
   a last block of two), BF16 and FP8. Each case whose group is not 1 also runs with group 1 and
   must write the same bytes. */
static void decode_entry_cases(const instance_entry *e, backend be) {
  const int cpu = be == BACKEND_CPU;
  decode_entry_case(e, be, (entry_case){FP8, 2, 8, 1, 0, 0, 1.0f, 0});
  decode_entry_case(e, be, (entry_case){BF16E, 64, 2, 1, 1, !cpu, 60.0f, cpu});
  decode_entry_case(e, be, (entry_case){FP8, 1, 9, 0, 4, C128_PDL_PLANS_READY, 1.0f, 0});
  decode_entry_case(e, be, (entry_case){BF16E, 4, 4, 1, 8, !cpu, 1.0f, cpu});
  decode_entry_case(e, be, (entry_case){FP8, 2, 8, 0, 24, C128_PDL_PLANS_READY, 60.0f, 0});
}
static void prefill_entry_cases(const instance_entry *e, backend be) {
  const int cpu = be == BACKEND_CPU;
  prefill_entry_case(e, be, (entry_case){FP8, 2, 8, 1, 0, 0, 1.0f, 0});
  prefill_entry_case(e, be, (entry_case){BF16E, 64, 2, 1, 1, !cpu, 60.0f, cpu});
  prefill_entry_case(e, be, (entry_case){FP8, 1, 12, 0, 3, C128_PDL_PLANS_READY, 1.0f, 0});
  prefill_entry_case(e, be, (entry_case){BF16E, 4, 4, 1, 8, !cpu, 1.0f, cpu});
  prefill_entry_case(e, be, (entry_case){FP8, 2, 8, 0, 24, C128_PDL_PLANS_READY, 60.0f, 0});
}
#define ENTRY_TESTS(name, D, state, input, output)                                                      \
  Test(cpu, name##_entry_decode) { decode_entry_cases(instance(C128_INSTANCE_##name), BACKEND_CPU); }   \
  Test(cpu, name##_entry_prefill) { prefill_entry_cases(instance(C128_INSTANCE_##name), BACKEND_CPU); } \
  Test(gpu, name##_entry_decode) { decode_entry_cases(instance(C128_INSTANCE_##name), BACKEND_GPU); }   \
  Test(gpu, name##_entry_prefill) { prefill_entry_cases(instance(C128_INSTANCE_##name), BACKEND_GPU); }
C128_INSTANCES(ENTRY_TESTS)
#undef ENTRY_TESTS

/* A batch whose automatic group (on 132 SMs) holds a window's splits: a decode takes whole
   windows only in a group the caller gives (DESIGN 11.3), so these blocks meet in the workspace;
   the entries and the state are group 1's, byte for byte, and the workspace is left zero. */
enum { WIDE_DB = 300 };
static void decode_entry_automatic_wide(const instance_entry *e, backend be) {
  require_backend(be);
  const c128_instance_info *f = e;
  const int D = f->head_dim;
  cr_assert_geq(c128_decode_group_size(WIDE_DB, D, 132), f->num_split, "the batch no longer reaches the splits");
  const size_t state_row = (size_t)f->row_elems * dtype_size(f->state_dtype), state_rows = WIDE_DB * REF_WINDOW;
  rng r = rng_fresh();
  void *state = rows_alloc(state_rows, D, f->state_dtype), *input = rows_alloc(WIDE_DB, D, f->input_dtype);
  rows_fill(state, state_rows, D, f->state_dtype, &r, 8.0f);
  rows_fill(input, WIDE_DB, D, f->input_dtype, &r, 8.0f);
  float *ape = ape_make(D, &r), *gamma = gamma_make(D, &r), *rope = rope_make();
  c128_decode_plan plans[WIDE_DB];
  for (int b = 0; b < WIDE_DB; ++b) { /* request b owns page b; a third at position 128's boundary */
    const int32_t slot = b % 3 == 0 ? REF_WINDOW - 1 : b % (REF_WINDOW - 1);
    const c128_decode_plan plan = {(uint32_t)(REF_WINDOW + slot + 1), b * REF_WINDOW + slot, b, b};
    const c128_decode_plan padding = {0, -1, -1, -1};
    plans[b] = b % 11 == 5 ? padding : plan;
  }
  void *state0 = clone_bytes(state, state_rows * state_row);
  cache c = cache_make(D, FP8, 2, WIDE_DB / 2, &r), twin = c;
  twin.data = clone_bytes(c.poison, c.bytes);
  c128_decode_args a = {0};
  a.head_dim = D;
  a.state_dtype = f->state_dtype, a.input_dtype = f->input_dtype, a.output_dtype = f->output_dtype;
  a.state = state, a.state_pages = WIDE_DB;
  a.input = input, a.ape = ape;
  a.plans = plans, a.batch = WIDE_DB;
  a.entry = entry_of(&c, gamma, 1e-6f, rope, ROPE_ROWS, WIDE_DB);
  cr_assert_eq(run_decode(e, be, &a, 0), C128_SUCCESS);
  check_workspace_zero(&a.entry, "automatic group");
  c128_decode_args one = a;
  one.state = clone_bytes(state0, state_rows * state_row);
  one.entry = entry_of(&twin, gamma, 1e-6f, rope, ROPE_ROWS, WIDE_DB);
  one.requests_per_block = 1;
  cr_assert_eq(run_decode(e, be, &one, 1), C128_SUCCESS);
  cr_assert(memcmp(c.data, twin.data, c.bytes) == 0, "entries of the automatic group and of group 1 differ (seed %llu)",
            (unsigned long long)r.seed);
  check_rows_equal(state, one.state, state_rows, state_row, "state, automatic group vs 1", r.seed);
  cr_assert(memcmp(c.data, c.poison, c.bytes) != 0, "no entry was written");
  cr_assert(memcmp(state, state0, state_rows * state_row) != 0, "no row was persisted");
  free(one.state), free(one.entry.workspace), free(a.entry.workspace), free(twin.data), free(state0);
  cache_free(&c);
  free(state), free(input), free(ape), free(gamma), free(rope);
}
Test(cpu, entry_decode_automatic_group_meets_in_the_workspace) {
  decode_entry_automatic_wide(instance(C128_INSTANCE_h128_f32_f32_f32), BACKEND_CPU);
  decode_entry_automatic_wide(instance(C128_INSTANCE_h256_bf16_f32_bf16), BACKEND_CPU);
}
Test(gpu, entry_decode_automatic_group_meets_in_the_workspace) {
  decode_entry_automatic_wide(instance(C128_INSTANCE_h128_f32_f32_f32), BACKEND_GPU);
  decode_entry_automatic_wide(instance(C128_INSTANCE_h256_bf16_f32_bf16), BACKEND_GPU);
}

/* ---------------------------------------------------------------------------------------- */
/* Constructed windows                                                                      */
/* ---------------------------------------------------------------------------------------- */

/* Every row of the window holds kv_c = v_c (a bf16 value), so the pooled value is v_c up to a
   few fp32 ulps and b_c = v_c exactly; with sum v_c^2 = D and eps = 0, r = 1 and z_c = bf16(gamma_c
   v_c) on every side, and the entry is known byte for byte. */
typedef enum design {
  EXACT_448,   /* block w's amax is exactly 448 * 2^k_w: scale k_w + 127, code 0x7E */
  ABOVE_448,   /* one bf16 step above: k_w + 1 */
  BELOW_448,   /* one bf16 step below: k_w */
  ZERO_BLOCK,  /* block 0 all zero: the 1e-4 floor, E = -22, codes 0 */
  TIES,        /* values at exactly half an e4m3 step: the even code */
  LARGEST,     /* the largest finite bf16 z: E = 120, code 0x78, and 256 * 2^120 = inf in the BF16 layout */
  OVERFLOW,    /* gamma * b overflows: z = inf, block 0 NaN */
  NAN_SCORE,   /* a NaN score: every block NaN, RoPE values NaN */
  INF_KV,      /* an infinite kv in block 0: r = 0, block 0 NaN, the others signed zeros */
  INF_KV_ROPE, /* an infinite kv in a RoPE channel: its pair NaN, every block zero */
} design;

static const char *const design_names[] = {"exact 448 * 2^k",
                                           "a step above 448 * 2^k",
                                           "a step below 448 * 2^k",
                                           "all-zero block",
                                           "e4m3 ties",
                                           "largest finite bf16",
                                           "overflow",
                                           "NaN score",
                                           "infinite kv",
                                           "infinite kv in a RoPE channel"};

static void edge_case(const instance_entry *e, backend be, int kind, design d) {
  require_backend(be);
  const c128_instance_info *f = e;
  const int D = f->head_dim, blocks = D / REF_FP8_BLOCK - 1, nope = D - REF_ROPE_DIMS;
  rng r = rng_fresh();
  float v[MAX_D], gamma[MAX_D];
  int want_scale[REF_ENTRY_MAX_BLOCKS], want_code[MAX_D];
  for (int w = 0; w < REF_ENTRY_MAX_BLOCKS; ++w) want_scale[w] = -1;
  for (int c = 0; c < D; ++c) {
    v[c] = rng_below(&r, 2) ? 1.0f : -1.0f;
    gamma[c] = (float)ref_bf16_round(0.5 + rng_uniform(&r));
    want_code[c] = -1;
  }
  const int sign_of[2] = {0x00, 0x80};
#define SIGN(c) sign_of[(v[c] < 0) != (gamma[c] < 0)]
  float eps = 0.0f;
  int exact = 1, nan_row = -1, nan_col = -1, inf_row = -1, inf_col = -1;
  static const int ks[] = {-22, -3, 0, 5, 60, 100, -10};
  switch (d) {
  case EXACT_448:
  case ABOVE_448:
  case BELOW_448:
    for (int w = 0; w < blocks; ++w) {
      const int k = ks[w], j = REF_FP8_BLOCK * w + (int)rng_below(&r, REF_FP8_BLOCK);
      for (int c = REF_FP8_BLOCK * w; c < REF_FP8_BLOCK * (w + 1); ++c)
        gamma[c] = (float)ref_bf16_round(ldexp(REF_E4M3_MAX, k) * (0.05 + 0.9 * rng_uniform(&r)));
      const double step = d == EXACT_448 ? 0.0 : d == ABOVE_448 ? 2.0 : -2.0; /* a bf16 step at 448 is 2 */
      gamma[j] = (float)ldexp(REF_E4M3_MAX + step, k);
      want_scale[w] = k + (d == ABOVE_448) + 127;
      if (d == EXACT_448) want_code[j] = 0x7E | SIGN(j);
      if (d == BELOW_448) want_code[j] = 0x7E | SIGN(j); /* 446 rounds to 448 */
    }
    break;
  case ZERO_BLOCK:
    for (int c = 0; c < REF_FP8_BLOCK; ++c) v[c] = 0.0f, want_code[c] = 0x00;
    for (int c = REF_FP8_BLOCK; c < REF_FP8_BLOCK + 8; ++c) v[c] *= 3.0f; /* 8 * 9 + (D - 72) = D */
    want_scale[0] = -22 + 127;
    break;
  case TIES: {
    static const struct {
      double x;
      int code;
    } ties[] = {{1.0625, 0x38},    {1.1875, 0x3A},     {0x1.0p-10, 0x00}, {0x3.0p-10, 0x02}, {0x9.0p-10, 0x04},
                {0xF.0p-10, 0x08}, {0x11.0p-10, 0x08}, {400.0, 0x7C},     {432.0, 0x7E},     {0x1.3p-6, 0x0A}};
    for (int c = 0; c < REF_FP8_BLOCK; ++c) gamma[c] = (float)ref_bf16_round(4.0 * 440.0 * rng_uniform(&r));
    gamma[0] = 4.0f * 448.0f, want_code[0] = 0x7E | SIGN(0); /* E = 2 */
    for (int i = 0; i < (int)(sizeof ties / sizeof ties[0]); ++i) {
      const int c = 1 + 5 * i;
      gamma[c] = (float)(4.0 * ties[i].x) * (rng_below(&r, 2) ? 1.0f : -1.0f);
      want_code[c] = ties[i].code | SIGN(c);
    }
    want_scale[0] = 2 + 127;
    break;
  }
  case LARGEST: {
    const int j = (int)rng_below(&r, REF_FP8_BLOCK);
    for (int c = 0; c < REF_FP8_BLOCK; ++c) gamma[c] = (float)ref_bf16_round(ldexp(rng_uniform(&r), 120));
    gamma[j] = (float)0x1.fep127;
    want_scale[0] = 120 + 127, want_code[j] = 0x78 | SIGN(j);
    break;
  }
  case OVERFLOW: {
    const int j = (int)rng_below(&r, REF_FP8_BLOCK);
    gamma[j] = (float)0x1.fep127, v[j] *= 3.0f; /* r = 1 / sqrt(1 + 8 / D) no longer exact */
    want_scale[0] = 0xFF;
    for (int c = 0; c < REF_FP8_BLOCK; ++c) want_code[c] = 0x7F;
    exact = 0, eps = 1e-6f;
    break;
  }
  case NAN_SCORE:
    nan_row = (int)rng_below(&r, REF_WINDOW), nan_col = (int)rng_below(&r, D);
    for (int w = 0; w < blocks; ++w) want_scale[w] = 0xFF;
    for (int c = 0; c < nope; ++c) want_code[c] = 0x7F;
    break;
  case INF_KV:
  case INF_KV_ROPE:
    inf_row = (int)rng_below(&r, REF_WINDOW);
    inf_col = d == INF_KV ? (int)rng_below(&r, REF_FP8_BLOCK) : nope + 2 * (int)rng_below(&r, REF_ROPE_PAIRS);
    for (int w = 0; w < blocks; ++w) want_scale[w] = w == 0 && d == INF_KV ? 0xFF : -22 + 127;
    for (int c = 0; c < nope; ++c) want_code[c] = c < REF_FP8_BLOCK && d == INF_KV ? 0x7F : SIGN(c); /* +-0 */
    break;
  }
#undef SIGN
  /* The window: 128 input rows of kv = v, random scores; the state is not read (buffer_len 0). */
  void *state = rows_alloc(REF_WINDOW, D, f->state_dtype), *input = rows_alloc(REF_WINDOW, D, f->input_dtype);
  rows_fill(state, REF_WINDOW, D, f->state_dtype, &r, 1.0f);
  rows_fill(input, REF_WINDOW, D, f->input_dtype, &r, 1.0f);
  for (int j = 0; j < REF_WINDOW; ++j)
    for (int c = 0; c < D; ++c) elem_set(input, (size_t)j * 2 * (size_t)D + (size_t)c, f->input_dtype, v[c]);
  if (nan_row >= 0) elem_set(input, (size_t)nan_row * 2 * (size_t)D + (size_t)(D + nan_col), f->input_dtype, NAN);
  if (inf_row >= 0) elem_set(input, (size_t)inf_row * 2 * (size_t)D + (size_t)inf_col, f->input_dtype, INFINITY);
  float *ape = ape_make(D, &r), *rope = rope_make();
  cache c = cache_make(D, kind, 1, 2, &r);
  const int64_t position = REF_WINDOW * rng_below(&r, ROPE_ROWS / REF_WINDOW);
  const c128_compress_plan plan = {(uint32_t)(position + REF_WINDOW), REF_WINDOW - 1, 0, -1, -1};
  c128_prefill_args a = {0};
  a.head_dim = D;
  a.state_dtype = f->state_dtype, a.input_dtype = f->input_dtype, a.output_dtype = f->output_dtype;
  a.state = state, a.state_pages = 1, a.input = input, a.input_rows = REF_WINDOW, a.ape = ape;
  a.compress_plans = &plan, a.num_compress = 1;
  a.entry = entry_of(&c, gamma, eps, rope, ROPE_ROWS, 1);
  const c128_status st = run_prefill(e, be, &a, d % 2 && be == BACKEND_CPU);
  cr_assert_eq(st, C128_SUCCESS, "%s", c128_status_string(st));
  check_workspace_zero(&a.entry, "edge case");

  char what[128];
  snprintf(what, sizeof what, "%s, %s, %s", f->name, kind == FP8 ? "FP8" : "BF16", design_names[d]);
  const int64_t loc = 0;
  check_untouched(&c, &loc, 1, what, r.seed);
  double y[MAX_D], err[MAX_D];
  window_y(f, state, -1, 0, input, 0, ape, y);
  fp64_error(D, y, 0.0, err);
  const float *row = rope + position * REF_ROPE_DIMS;
  check_entry(&c, 0, y, err, gamma, eps, row, what, r.seed);
  /* The known bytes, and (where z is exact) every FP8 code and scale as the oracle has them. */
  ref_entry *o = oracle_new();
  cr_assert_eq(ref_entry_compute(D, kind, y, NULL, gamma, eps, row, o), 0);
  size_t value_at, scale_at;
  ref_entry_locate(D, kind, 1, c.page_bytes, 0, &value_at, &scale_at);
  const unsigned char *got = c.data + value_at, *scales = c.data + scale_at;
  for (int w = 0; w < blocks; ++w) {
    if (kind == FP8 && want_scale[w] >= 0)
      cr_assert_eq(scales[w], want_scale[w], "%s: block %d scale byte 0x%02X, want 0x%02X (seed %llu)", what, w,
                   scales[w], want_scale[w], (unsigned long long)r.seed);
    if (kind == FP8 && exact)
      cr_assert_eq(scales[w], o->scale[w], "%s: block %d scale byte 0x%02X, oracle 0x%02X (seed %llu)", what, w,
                   scales[w], o->scale[w], (unsigned long long)r.seed);
  }
  for (int ch = 0; ch < nope; ++ch) {
    const unsigned want = o->value[kind == FP8 ? ch : 2 * ch];
    if (kind == FP8) {
      if (want_code[ch] >= 0)
        cr_assert_eq(got[ch], want_code[ch], "%s: channel %d code 0x%02X, want 0x%02X (seed %llu)", what, ch, got[ch],
                     want_code[ch], (unsigned long long)r.seed);
      if (exact)
        cr_assert_eq(got[ch], want, "%s: channel %d code 0x%02X, oracle 0x%02X (seed %llu)", what, ch, got[ch], want,
                     (unsigned long long)r.seed);
      continue;
    }
    const double x = ref_bf16_value(read16(got + 2 * ch)), ox = ref_bf16_value(read16(o->value + 2 * ch));
    if (want_code[ch] >= 0) { /* the BF16 layout holds the dequantised code */
      const double deq =
          want_code[ch] == 0x7F
              ? NAN
              : ref_bf16_round(ldexp(ref_e4m3_value((unsigned)want_code[ch]), o->exponent[ch / REF_FP8_BLOCK]));
      cr_assert((isnan(deq) && isnan(x)) || x == deq, "%s: channel %d value %g, want %g (seed %llu)", what, ch, x, deq,
                (unsigned long long)r.seed);
    }
    if (exact)
      cr_assert((isnan(ox) && isnan(x)) || read16(got + 2 * ch) == read16(o->value + 2 * ch),
                "%s: channel %d value %g, oracle %g (seed %llu)", what, ch, x, ox, (unsigned long long)r.seed);
  }
  if (d == LARGEST && kind == BF16E) /* 256 * 2^120 rounds to 2^128: no bf16 holds it */
    for (int ch = 0; ch < REF_FP8_BLOCK; ++ch)
      if (want_code[ch] >= 0) cr_assert(isinf(ref_bf16_value(read16(got + 2 * ch))), "%s: channel %d", what, ch);
  if (kind == FP8) cr_assert_eq(scales[blocks], 0, "%s: pad byte", what);
  free(o), free(state), free(input), free(ape), free(rope);
  cache_free(&c), free(a.entry.workspace);
}

/* Each design on an f32 and a bf16 instance of every head_dim, both kinds. */
static void edge_cases(backend be, design d) {
  static const int dims[] = {128, 256, 512};
  static const c128_dtype dtypes[] = {C128_F32, C128_BF16};
  int ran = 0;
  for (int i = 0; i < 3; ++i)
    for (int t = 0; t < 2; ++t) {
      const int id = c128_find_instance(dims[i], dtypes[t], dtypes[t], dtypes[t]);
      if (id < 0) continue;
      edge_case(instance((c128_instance_id)id), be, FP8, d);
      edge_case(instance((c128_instance_id)id), be, BF16E, d);
      ++ran;
    }
  if (!ran) cr_skip_test("no instance of the default table compiled");
}
#define EDGE_TESTS(name, design)                                    \
  Test(cpu, entry_edge_##name) { edge_cases(BACKEND_CPU, design); } \
  Test(gpu, entry_edge_##name) { edge_cases(BACKEND_GPU, design); }
EDGE_TESTS(exact_448, EXACT_448)
EDGE_TESTS(above_448, ABOVE_448)
EDGE_TESTS(below_448, BELOW_448)
EDGE_TESTS(zero_block, ZERO_BLOCK)
EDGE_TESTS(ties, TIES)
EDGE_TESTS(largest_finite, LARGEST)
EDGE_TESTS(overflow, OVERFLOW)
EDGE_TESTS(nan_score, NAN_SCORE)
EDGE_TESTS(inf_kv, INF_KV)
EDGE_TESTS(inf_kv_rope, INF_KV_ROPE)
#undef EDGE_TESTS

/* ---------------------------------------------------------------------------------------- */
/* A small fixture for the checker, the argument refusals and races                         */
/* ---------------------------------------------------------------------------------------- */

/* h128_f32_f32_f32: two state pages, a decode batch of two (a boundary and an off-boundary row)
   and a prefill batch of one window and two writes, FP8 entries into a cache of 2 pages of 2,
   all in one arena (so that tensors can be made to overlap), with slack after each tensor for
   misaligned pointers. */
enum { FD = 128, FPAGES = 2, FROPE = 256, FCACHE_PAGES = 2, FPER_PAGE = 2 };
typedef struct fixture {
  unsigned char *arena, *snapshot;
  size_t bytes;
  float *state, *input, *ape, *gamma, *rope, *out;
  unsigned char *cache, *workspace;
  int64_t *index;
  c128_decode_plan *plans;
  c128_compress_plan *cplans;
  c128_write_plan *wplans;
  c128_decode_args d;
  c128_prefill_args p;
} fixture;

static size_t carve(size_t *at, size_t bytes) {
  const size_t here = *at;
  *at = (here + bytes + 64 + 255) / 256 * 256;
  return here;
}

static fixture *fx_make(void) {
  fixture *f = calloc(1, sizeof *f);
  cr_assert_not_null(f);
  size_t at = 0;
  const size_t page_bytes = (size_t)page_bytes_for(FD, FP8, FPER_PAGE);
  const size_t o_state = carve(&at, FPAGES * 128 * 2 * FD * sizeof(float)), o_input = carve(&at, 2 * 2 * FD * 4);
  const size_t o_ape = carve(&at, 128 * FD * 4), o_gamma = carve(&at, FD * 4), o_rope = carve(&at, FROPE * 64 * 4);
  const size_t o_cache = carve(&at, FCACHE_PAGES * page_bytes), o_index = carve(&at, 2 * 8),
               o_out = carve(&at, 2 * FD * 4);
  const size_t o_plans = carve(&at, 2 * 16), o_cplans = carve(&at, 2 * 16), o_wplans = carve(&at, 2 * 8);
  const size_t o_ws = carve(&at, (size_t)c128_entry_workspace_bytes(2, FD));
  f->bytes = at;
  f->arena = aligned_alloc(256, at);
  f->snapshot = malloc(at);
  cr_assert(f->arena && f->snapshot);
  memset(f->arena, 0, at);
  rng r = rng_fresh();
  f->state = (float *)(f->arena + o_state), f->input = (float *)(f->arena + o_input);
  f->ape = (float *)(f->arena + o_ape), f->gamma = (float *)(f->arena + o_gamma),
  f->rope = (float *)(f->arena + o_rope);
  f->cache = f->arena + o_cache, f->index = (int64_t *)(f->arena + o_index), f->out = (float *)(f->arena + o_out);
  f->plans = (c128_decode_plan *)(f->arena + o_plans), f->cplans = (c128_compress_plan *)(f->arena + o_cplans);
  f->wplans = (c128_write_plan *)(f->arena + o_wplans), f->workspace = f->arena + o_ws;
  for (size_t i = 0; i < FPAGES * 128 * 2 * FD; ++i) f->state[i] = rng_randn(&r);
  for (size_t i = 0; i < 2 * 2 * FD; ++i) f->input[i] = rng_randn(&r);
  for (size_t i = 0; i < 128 * FD; ++i) f->ape[i] = rng_randn(&r);
  for (int c = 0; c < FD; ++c) f->gamma[c] = 1.0f;
  for (size_t i = 0; i < FROPE * 64; ++i) f->rope[i] = i % 2 ? 0.0f : 1.0f;
  memset(f->cache, 0xA5, FCACHE_PAGES * page_bytes);
  f->index[0] = 3, f->index[1] = 0;
  f->plans[0] = (c128_decode_plan){128, 127, 0, 0};
  f->plans[1] = (c128_decode_plan){130, 128 + 1, 1, 1};
  f->cplans[0] = (c128_compress_plan){256, 1, 126, 0, 1};
  f->cplans[1] = (c128_compress_plan){C128_INVALID_ID, 0, 0, -1, -1};
  f->wplans[0] = (c128_write_plan){0, 5};
  f->wplans[1] = (c128_write_plan){1, 6};
  c128_entry_args e = {0};
  e.kind = C128_OUTPUT_DSV4_FP8;
  e.norm_weight = f->gamma, e.norm_eps = 1e-6f, e.rope_table = f->rope, e.rope_positions = FROPE;
  e.cache = f->cache, e.cache_pages = FCACHE_PAGES, e.entries_per_page = FPER_PAGE, e.page_bytes = (int64_t)page_bytes;
  e.workspace = f->workspace, e.workspace_bytes = c128_entry_workspace_bytes(2, FD);
  c128_decode_args d = {0};
  d.head_dim = FD;
  d.state = f->state, d.state_pages = FPAGES, d.input = f->input, d.ape = f->ape;
  d.plans = f->plans, d.batch = 2, d.output_index = f->index, d.entry = e;
  f->d = d;
  c128_prefill_args p = {0};
  p.head_dim = FD;
  p.state = f->state, p.state_pages = FPAGES, p.input = f->input, p.input_rows = 2, p.ape = f->ape;
  p.compress_plans = f->cplans, p.num_compress = 2, p.write_plans = f->wplans, p.num_write = 2;
  p.output_index = f->index, p.entry = e;
  f->p = p;
  memcpy(f->snapshot, f->arena, at);
  return f;
}

static void fx_free(fixture *f) { free(f->arena), free(f->snapshot), free(f); }

/* The launch (host runner and GPU entry point: both check on the host first) refuses with
   `launch` and writes nothing; the checker returns `checker` (the launch's status, or SUCCESS
   for tensor pointers, which it does not look at: DESIGN 6.5). */
static void expect_decode(fixture *f, c128_status launch, c128_status checker, const char *what) {
  c128_status st = c128_decode_host(&f->d, NULL);
  cr_assert_eq(st, launch, "%s: decode host runner: %s, want %s", what, c128_status_string(st),
               c128_status_string(launch));
  cr_assert(memcmp(f->arena, f->snapshot, f->bytes) == 0, "%s: a refused decode wrote", what);
  st = c128_decode(&f->d, 0);
  cr_assert_eq(st, launch, "%s: decode launch: %s, want %s", what, c128_status_string(st), c128_status_string(launch));
  c128_plan_report rep = {0};
  st = c128_check_decode_plans(&f->d, &rep);
  cr_assert_eq(st, checker, "%s: decode checker: %s, want %s", what, c128_status_string(st),
               c128_status_string(checker));
  cr_assert(memcmp(f->arena, f->snapshot, f->bytes) == 0, "%s: a refused decode wrote", what);
}
static void expect_prefill(fixture *f, c128_status launch, c128_status checker, const char *what) {
  c128_status st = c128_prefill_host(&f->p, NULL);
  cr_assert_eq(st, launch, "%s: prefill host runner: %s, want %s", what, c128_status_string(st),
               c128_status_string(launch));
  cr_assert(memcmp(f->arena, f->snapshot, f->bytes) == 0, "%s: a refused prefill wrote", what);
  st = c128_prefill(&f->p, 0);
  cr_assert_eq(st, launch, "%s: prefill launch: %s, want %s", what, c128_status_string(st), c128_status_string(launch));
  c128_plan_report rep = {0};
  st = c128_check_prefill_plans(&f->p, &rep);
  cr_assert_eq(st, checker, "%s: prefill checker: %s, want %s", what, c128_status_string(st),
               c128_status_string(checker));
  cr_assert(memcmp(f->arena, f->snapshot, f->bytes) == 0, "%s: a refused prefill wrote", what);
}

Test(cpu, entry_fixture_is_valid) {
  fixture *f = fx_make();
  c128_plan_report rep = {0};
  cr_assert_eq(c128_check_decode_plans(&f->d, &rep), C128_SUCCESS);
  cr_assert_eq(c128_check_prefill_plans(&f->p, &rep), C128_SUCCESS);
  cr_assert_eq(c128_decode_host(&f->d, NULL), C128_SUCCESS);
  size_t value_at, scale_at;
  ref_entry_locate(FD, FP8, FPER_PAGE, f->d.entry.page_bytes, 3, &value_at, &scale_at);
  cr_assert(memcmp(f->cache, f->snapshot + (f->cache - f->arena), value_at) == 0, "decode wrote before entry 3");
  cr_assert_neq(f->cache[value_at], 0xA5, "decode wrote no entry 3");
  memcpy(f->arena, f->snapshot, f->bytes);
  cr_assert_eq(c128_prefill_host(&f->p, NULL), C128_SUCCESS);
  ref_entry_locate(FD, FP8, FPER_PAGE, f->d.entry.page_bytes, 0, &value_at, &scale_at);
  cr_assert_neq(f->cache[value_at], 0xA5, "prefill wrote no entry 0 (index[1] = 0 for ragged_id 1)");
  fx_free(f);
}

/* One refusal, applied to both launches' entry args. */
typedef void (*perturb)(fixture *f, c128_entry_args *e);
static void refused(perturb change, c128_status launch, c128_status checker, const char *what) {
  fixture *f = fx_make();
  change(f, &f->d.entry);
  memcpy(f->snapshot, f->arena, f->bytes);
  expect_decode(f, launch, checker, what);
  fx_free(f);
  f = fx_make();
  change(f, &f->p.entry);
  memcpy(f->snapshot, f->arena, f->bytes);
  expect_prefill(f, launch, checker, what);
  fx_free(f);
}

#define PERTURB(name, body)                          \
  static void name(fixture *f, c128_entry_args *e) { \
    (void)f, (void)e;                                \
    body;                                            \
  }
PERTURB(kind_unknown, e->kind = (c128_output_kind)3)
PERTURB(kind_negative, e->kind = (c128_output_kind)-1)
PERTURB(per_page_three, e->entries_per_page = 3)
PERTURB(per_page_zero, e->entries_per_page = 0)
PERTURB(per_page_negative, e->entries_per_page = -2)
PERTURB(page_bytes_short, e->page_bytes = (FD + 64 + FD / 64) * FPER_PAGE - 4)
PERTURB(page_bytes_odd, e->page_bytes += 2)
PERTURB(page_bytes_negative, e->page_bytes = -4)
PERTURB(cache_pages_negative, e->cache_pages = -1)
PERTURB(rope_negative, e->rope_positions = -1)
PERTURB(eps_nan, e->norm_eps = NAN)
PERTURB(eps_negative, e->norm_eps = -1e-6f)
PERTURB(cache_null, e->cache = NULL)
PERTURB(gamma_null, e->norm_weight = NULL)
PERTURB(rope_null, e->rope_table = NULL)
PERTURB(cache_misaligned, e->cache = (char *)e->cache + 2)
PERTURB(gamma_misaligned, e->norm_weight = (const float *)((const char *)e->norm_weight + 2))
PERTURB(rope_misaligned, e->rope_table = e->rope_table + 1)
PERTURB(cache_on_state, e->cache = (char *)f->state + 4096)
PERTURB(cache_on_input, e->cache = f->input)
PERTURB(cache_on_ape, e->cache = f->ape + 64)
PERTURB(cache_on_plans, e->cache = (char *)f->plans - 64)
PERTURB(cache_on_cplans, e->cache = f->cplans)
PERTURB(cache_on_wplans, e->cache = f->wplans)
PERTURB(cache_on_gamma, e->cache = f->gamma)
PERTURB(cache_on_rope, e->cache = f->rope + 100)
PERTURB(cache_on_index, e->cache = f->index)
PERTURB(workspace_null, e->workspace = NULL)
PERTURB(workspace_misaligned, e->workspace = f->workspace + 8)
PERTURB(workspace_short, e->workspace_bytes -= 4)
PERTURB(workspace_negative, e->workspace_bytes = -1)
PERTURB(workspace_on_state, e->workspace = (char *)f->state + 4096)
PERTURB(workspace_on_cache, e->workspace = f->cache + 64)
PERTURB(workspace_on_input, e->workspace = f->input)
PERTURB(workspace_on_gamma, e->workspace = f->gamma)
PERTURB(workspace_on_index, e->workspace = f->index)
#undef PERTURB

Test(cpu, entry_arguments_refused) {
  const c128_status I = C128_ERROR_INVALID_ENTRY, N = C128_ERROR_NEGATIVE_SIZE, S = C128_SUCCESS;
  refused(kind_unknown, I, I, "kind 3");
  refused(kind_negative, I, I, "kind -1");
  refused(per_page_three, I, I, "3 entries a page");
  refused(per_page_zero, I, I, "0 entries a page");
  refused(per_page_negative, N, N, "-2 entries a page");
  refused(page_bytes_short, I, I, "page_bytes 4 short of the entries");
  refused(page_bytes_odd, I, I, "page_bytes not a multiple of 4");
  refused(page_bytes_negative, N, N, "page_bytes -4");
  refused(cache_pages_negative, N, N, "cache_pages -1");
  refused(rope_negative, N, N, "rope_positions -1");
  refused(eps_nan, I, I, "eps NaN");
  refused(eps_negative, I, I, "eps -1e-6");
  refused(cache_null, C128_ERROR_NULL_POINTER, S, "cache NULL");
  refused(gamma_null, C128_ERROR_NULL_POINTER, S, "norm_weight NULL");
  refused(rope_null, C128_ERROR_NULL_POINTER, S, "rope_table NULL");
  refused(cache_misaligned, C128_ERROR_MISALIGNED, S, "cache 2 bytes off");
  refused(gamma_misaligned, C128_ERROR_MISALIGNED, S, "norm_weight 2 bytes off");
  refused(rope_misaligned, C128_ERROR_MISALIGNED, S, "rope_table 4 bytes off");
  refused(cache_on_state, C128_ERROR_ALIASED, S, "cache over the state");
  refused(cache_on_input, C128_ERROR_ALIASED, S, "cache over the input");
  refused(cache_on_ape, C128_ERROR_ALIASED, S, "cache over ape");
  refused(cache_on_gamma, C128_ERROR_ALIASED, S, "cache over norm_weight");
  refused(cache_on_rope, C128_ERROR_ALIASED, S, "cache over the RoPE table");
  refused(cache_on_index, C128_ERROR_ALIASED, S, "cache over output_index");
  const c128_status W = C128_ERROR_WORKSPACE_TOO_SMALL;
  refused(workspace_null, C128_ERROR_NULL_POINTER, S, "workspace NULL");
  refused(workspace_misaligned, C128_ERROR_MISALIGNED, S, "workspace 8 bytes off");
  refused(workspace_short, W, S, "workspace 4 bytes short");
  refused(workspace_negative, W, S, "workspace_bytes -1");
  refused(workspace_on_state, C128_ERROR_ALIASED, S, "workspace over the state");
  refused(workspace_on_cache, C128_ERROR_ALIASED, S, "workspace over the cache");
  refused(workspace_on_input, C128_ERROR_ALIASED, S, "workspace over the input");
  refused(workspace_on_gamma, C128_ERROR_ALIASED, S, "workspace over norm_weight");
  refused(workspace_on_index, C128_ERROR_ALIASED, S, "workspace over output_index");
  /* the plan arrays each launch reads */
  fixture *f = fx_make();
  cache_on_plans(f, &f->d.entry);
  expect_decode(f, C128_ERROR_ALIASED, S, "cache over the decode plans");
  fx_free(f);
  f = fx_make();
  cache_on_cplans(f, &f->p.entry);
  expect_prefill(f, C128_ERROR_ALIASED, S, "cache over the compress plans");
  fx_free(f);
  f = fx_make();
  cache_on_wplans(f, &f->p.entry);
  expect_prefill(f, C128_ERROR_ALIASED, S, "cache over the write plans");
  fx_free(f);
}

/* What the refusals leave alone: read-only tensors may overlap (norm_weight inside the RoPE
   table); a call that can write no entry (cache_pages 0) looks at no entry pointer; the pooled
   kind reads none of the entry fields. */
Test(cpu, entry_arguments_accepted) {
  fixture *f = fx_make();
  f->d.entry.norm_weight = f->rope + 64, f->p.entry.norm_weight = f->rope + 64;
  cr_assert_eq(c128_decode_host(&f->d, NULL), C128_SUCCESS);
  cr_assert_eq(c128_prefill_host(&f->p, NULL), C128_SUCCESS);
  fx_free(f);
  f = fx_make();
  c128_entry_args *es[2] = {&f->d.entry, &f->p.entry};
  for (int i = 0; i < 2; ++i)
    es[i]->cache_pages = 0, es[i]->cache = NULL, es[i]->norm_weight = NULL, es[i]->rope_table = NULL,
    es[i]->workspace = NULL, es[i]->workspace_bytes = 0;
  c128_status st = c128_decode_host(&f->d, NULL);
  cr_assert_eq(st, C128_SUCCESS, "no cache, decode: %s", c128_status_string(st));
  st = c128_prefill_host(&f->p, NULL);
  cr_assert_eq(st, C128_SUCCESS, "no cache, prefill: %s", c128_status_string(st));
  const size_t cache_bytes = FCACHE_PAGES * (size_t)page_bytes_for(FD, FP8, FPER_PAGE);
  cr_assert(memcmp(f->cache, f->snapshot + (f->cache - f->arena), cache_bytes) == 0, "no cache, yet written");
  fx_free(f);
  f = fx_make();
  for (int i = 0; i < 2; ++i) {
    c128_entry_args *e = i ? &f->p.entry : &f->d.entry;
    memset(e, 0xFF, sizeof *e);
    e->kind = C128_OUTPUT_POOLED;
  }
  f->d.output = f->out, f->d.output_rows = 2, f->p.output = f->out, f->p.output_rows = 2;
  st = c128_decode_host(&f->d, NULL);
  cr_assert_eq(st, C128_SUCCESS, "pooled decode with junk entry fields: %s", c128_status_string(st));
  st = c128_prefill_host(&f->p, NULL);
  cr_assert_eq(st, C128_SUCCESS, "pooled prefill with junk entry fields: %s", c128_status_string(st));
  fx_free(f);
}

/* Two boundary decode rows with one entry: the checker names the later plan, and the host
   runner's race checker (one request a block) sees the two writes of the cache's bytes. */
Test(cpu, entry_duplicate_entry_is_a_race) {
  fixture *f = fx_make();
  f->plans[1] = (c128_decode_plan){256, 128 + 127, 1, 1};
  f->index[0] = f->index[1] = 3;
  f->d.requests_per_block = 1;
  char msg[256] = "";
  c128_plan_report rep = {0, 0, msg, sizeof msg};
  cr_assert_eq(c128_check_decode_plans(&f->d, &rep), C128_ERROR_INVALID_PLAN);
  cr_assert_eq(rep.index, 1);
  cr_assert(strstr(msg, "writes cache entry 3, as plan 0 does") != NULL, "message: %s", msg);
  const c128_host_options o = cpu_options(0, msg, sizeof msg);
  cr_assert_eq(c128_decode_host(&f->d, &o), C128_ERROR_RACE_DETECTED, "%s", msg);
  fx_free(f);
}

/* ---------------------------------------------------------------------------------------- */
/* The plan checker                                                                         */
/* ---------------------------------------------------------------------------------------- */

enum { CD = 512, CPAGES = 8 };

static void expect_plan(c128_status st, const c128_plan_report *r, c128_plan_kind kind, int64_t index,
                        const char *text) {
  cr_assert_eq(st, C128_ERROR_INVALID_PLAN, "%s (want plan %lld: %s)", c128_status_string(st), (long long)index, text);
  cr_assert_eq(r->kind, kind);
  cr_assert_eq(r->index, index, "plan %lld reported, want %lld (%s)", (long long)r->index, (long long)index,
               r->message);
  cr_assert(strstr(r->message, text) != NULL, "message '%s' lacks '%s'", r->message, text);
}

static c128_entry_args checker_entry(int kind, int64_t pages, int32_t per_page, int64_t rope_positions) {
  c128_entry_args e = {0};
  e.kind = (c128_output_kind)kind;
  e.norm_eps = 1e-6f, e.rope_positions = rope_positions;
  e.cache_pages = pages, e.entries_per_page = per_page, e.page_bytes = page_bytes_for(CD, kind, per_page);
  return e; /* the checker reads no tensor */
}

Test(cpu, entry_checker_decode) {
  c128_ring ring = {0};
  ring.state_pages = CPAGES;
  /* boundaries at positions 128, 0, 256 and 384; an off-boundary row; an absent request */
  const c128_request req[6] = {{0, 256, 1}, {1, 200, 1}, {2, 128, 1}, {3, 384, 1}, {4, 0, 0}, {5, 512, 1}};
  c128_decode_plan plans[6];
  cr_assert_eq(c128_plan_decode(&ring, req, 6, plans), C128_SUCCESS);
  int64_t index[6] = {5, 1, 0, 7, 2, 4};
  c128_decode_args a = {0};
  a.head_dim = CD, a.state_pages = CPAGES, a.plans = plans, a.batch = 6, a.output_index = index;
  for (int kind = FP8; kind <= BF16E; ++kind) {
    a.entry = checker_entry(kind, 4, 2, ROPE_ROWS);
    char msg[200] = "";
    c128_plan_report r = {0, 0, msg, sizeof msg};
    cr_assert_eq(c128_check_decode_plans(&a, &r), C128_SUCCESS, "%s", msg);
    cr_assert_eq(r.index, -1);
    index[1] = -1, index[4] = 99; /* rows that emit nothing may name anything */
    cr_assert_eq(c128_check_decode_plans(&a, &r), C128_SUCCESS, "%s", msg);
    index[2] = -1;
    expect_plan(c128_check_decode_plans(&a, &r), &r, C128_PLAN_DECODE, 2, "outside the output (or the cache)");
    index[2] = 8; // cppcheck-suppress redundantAssignment ; the checker reads it through a.output_index (4 pages of 2)
    expect_plan(c128_check_decode_plans(&a, &r), &r, C128_PLAN_DECODE, 2, "outside the output (or the cache)");
    index[2] = 0; // cppcheck-suppress redundantAssignment ; the checker reads it through a.output_index
    index[3] = 5;
    expect_plan(c128_check_decode_plans(&a, &r), &r, C128_PLAN_DECODE, 3, "writes cache entry 5, as plan 0 does");
    index[3] = 7;                 // cppcheck-suppress redundantAssignment ; the checker reads it through a.output_index
    a.entry.rope_positions = 384; /* request 5's window starts at 384 */
    expect_plan(c128_check_decode_plans(&a, &r), &r, C128_PLAN_DECODE, 5, "outside the RoPE table");
    a.entry.rope_positions = 256; /* request 3's at 256 comes first */
    expect_plan(c128_check_decode_plans(&a, &r), &r, C128_PLAN_DECODE, 3, "outside the RoPE table");
    a.entry.rope_positions = 385;
    cr_assert_eq(c128_check_decode_plans(&a, &r), C128_SUCCESS, "%s", msg);
    /* Without an index the entry is the plan's row: 6 rows, 4 entries, then 6. */
    a.output_index = NULL;
    a.entry = checker_entry(kind, 2, 2, ROPE_ROWS);
    expect_plan(c128_check_decode_plans(&a, &r), &r, C128_PLAN_DECODE, 5, "outside the output (or the cache)");
    a.entry = checker_entry(kind, 3, 2, ROPE_ROWS);
    cr_assert_eq(c128_check_decode_plans(&a, &r), C128_SUCCESS, "%s", msg);
    a.output_index = index;
    index[1] = 1, index[4] = 2;
  }
}

Test(cpu, entry_checker_prefill) {
  c128_ring ring = {0};
  ring.state_pages = CPAGES;
  const c128_request req[2] = {{0, 300, 300}, {1, 256, 256}};
  static c128_compress_plan cp[556];
  static c128_write_plan wp[556];
  c128_prefill_plans plans = {0};
  plans.compress = cp, plans.write = wp, plans.capacity = 556;
  cr_assert_eq(c128_plan_prefill(&ring, req, 2, 0, &plans), C128_SUCCESS);
  cr_assert_eq(plans.num_compress, 4);
  static int64_t index[556];
  for (int i = 0; i < 556; ++i) index[i] = -1; /* rows that end no window may name anything */
  for (int k = 0; k < 4; ++k) index[cp[k].ragged_id] = 3 - k;
  c128_prefill_args a = {0};
  a.head_dim = CD, a.state_pages = CPAGES, a.input_rows = 556;
  a.compress_plans = cp, a.num_compress = plans.num_compress, a.write_plans = wp, a.num_write = plans.num_write;
  a.output_index = index;
  for (int kind = FP8; kind <= BF16E; ++kind) {
    a.entry = checker_entry(kind, 2, 2, ROPE_ROWS);
    char msg[200] = "";
    c128_plan_report r = {0, 0, msg, sizeof msg};
    cr_assert_eq(c128_check_prefill_plans(&a, &r), C128_SUCCESS, "%s", msg);
    cr_assert_eq(r.index, -1);
    index[cp[2].ragged_id] = -3;
    expect_plan(c128_check_prefill_plans(&a, &r), &r, C128_PLAN_COMPRESS, 2, "outside the output (or the cache)");
    index[cp[2].ragged_id] = 4;
    expect_plan(c128_check_prefill_plans(&a, &r), &r, C128_PLAN_COMPRESS, 2, "outside the output (or the cache)");
    index[cp[2].ragged_id] = 1;
    index[cp[3].ragged_id] = 2;
    expect_plan(c128_check_prefill_plans(&a, &r), &r, C128_PLAN_COMPRESS, 3, "writes cache entry 2, as plan 1 does");
    index[cp[3].ragged_id] = 0;
    a.entry.rope_positions = 128; /* the second window of each request starts at 128 */
    expect_plan(c128_check_prefill_plans(&a, &r), &r, C128_PLAN_COMPRESS, 1, "outside the RoPE table");
    a.entry.rope_positions = 129;
    cr_assert_eq(c128_check_prefill_plans(&a, &r), C128_SUCCESS, "%s", msg);
    a.output_index = NULL; /* plan k's own row: 4 plans, 4 entries, then 3 */
    cr_assert_eq(c128_check_prefill_plans(&a, &r), C128_SUCCESS, "%s", msg);
    a.entry = checker_entry(kind, 3, 1, ROPE_ROWS);
    expect_plan(c128_check_prefill_plans(&a, &r), &r, C128_PLAN_COMPRESS, 3, "outside the output (or the cache)");
    a.output_index = index;
  }
}

/* ---------------------------------------------------------------------------------------- */
/* The planners and rope_positions                                                          */
/* ---------------------------------------------------------------------------------------- */

enum { PLAN_CAP = 1024 };

/* Host planner, device planner code on the host, and (gpu) the device planner: the same status
   for a batch whose windows start at `first` .. `last`, with each rope_positions. */
typedef c128_status (*device_planner)(const c128_device_plan_args *a);

static c128_status run_device_planner(backend be, int decode, const c128_ring *ring, const c128_request *req, int64_t n,
                                      c128_compress_plan *cp, c128_write_plan *wp, c128_decode_plan *dp,
                                      int64_t counts[2], int32_t *status) {
  c128_device_plan_args a;
  memset(&a, 0, sizeof a);
  a.ring = *ring, a.num_requests = n, a.capacity = PLAN_CAP;
  const size_t ws = c128_plan_workspace_size(n);
  if (be == BACKEND_CPU) {
    void *workspace = malloc(ws ? ws : 8);
    a.requests = req, a.compress = cp, a.write = wp, a.decode = dp, a.counts = counts, a.status = status;
    a.workspace = workspace;
    const c128_status st = decode ? c128_plan_decode_device_host(&a) : c128_plan_prefill_device_host(&a);
    free(workspace);
    return st;
  }
  void *d_req, *d_cp, *d_wp, *d_dp, *d_counts, *d_status, *d_ws;
  CUDA_OK(cudaMalloc(&d_req, (size_t)n * sizeof *req));
  CUDA_OK(cudaMalloc(&d_cp, PLAN_CAP * sizeof *cp));
  CUDA_OK(cudaMalloc(&d_wp, PLAN_CAP * sizeof *wp));
  CUDA_OK(cudaMalloc(&d_dp, (size_t)n * sizeof *dp));
  CUDA_OK(cudaMalloc(&d_counts, 2 * sizeof(int64_t)));
  CUDA_OK(cudaMalloc(&d_status, sizeof(int32_t)));
  CUDA_OK(cudaMalloc(&d_ws, ws ? ws : 8));
  CUDA_OK(cudaMemcpy(d_req, req, (size_t)n * sizeof *req, cudaMemcpyHostToDevice));
  a.requests = d_req, a.compress = d_cp, a.write = d_wp, a.decode = d_dp, a.counts = d_counts, a.status = d_status;
  a.workspace = d_ws;
  const c128_status st = decode ? c128_plan_decode_device(&a, 0) : c128_plan_prefill_device(&a, 0);
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpy(cp, d_cp, PLAN_CAP * sizeof *cp, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(wp, d_wp, PLAN_CAP * sizeof *wp, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(dp, d_dp, (size_t)n * sizeof *dp, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(counts, d_counts, 2 * sizeof(int64_t), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(status, d_status, sizeof(int32_t), cudaMemcpyDeviceToHost));
  void *all[] = {d_req, d_cp, d_wp, d_dp, d_counts, d_status, d_ws};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) cudaFree(all[i]);
  return st;
}

/* The host planner's status and (device planners) *status; a refused host plan leaves the arrays
   as they were, a device planner's refusal leaves sentinels and counts 0. */
static void expect_planners(backend be, int decode, const c128_ring *ring, const c128_request *req, int64_t n,
                            c128_status want, const char *what) {
  static c128_compress_plan cp[PLAN_CAP], dcp[PLAN_CAP];
  static c128_write_plan wp[PLAN_CAP], dwp[PLAN_CAP];
  static c128_decode_plan dp[PLAN_CAP], ddp[PLAN_CAP];
  memset(cp, 0xAB, sizeof cp), memset(wp, 0xAB, sizeof wp), memset(dp, 0xAB, sizeof dp);
  c128_prefill_plans plans = {0};
  plans.compress = cp, plans.write = wp, plans.capacity = PLAN_CAP, plans.pad_to_capacity = 1;
  c128_status st = decode ? c128_plan_decode(ring, req, n, dp) : c128_plan_prefill(ring, req, n, 0, &plans);
  cr_assert_eq(st, want, "%s: host planner %s, want %s", what, c128_status_string(st), c128_status_string(want));
  if (want != C128_SUCCESS && !decode) /* ALLOCATION / c128_plan_prefill: a refused batch writes nothing */
    for (size_t i = 0; i < sizeof cp; ++i) cr_assert_eq(((unsigned char *)cp)[i], 0xAB, "%s: refused, yet wrote", what);
  int64_t counts[2] = {-1, -1};
  int32_t status = -1;
  st = run_device_planner(be, decode, ring, req, n, dcp, dwp, ddp, counts, &status);
  /* a refused argument is returned too; a refused batch only in *status */
  cr_assert(st == C128_SUCCESS || st == want, "%s: device planner returned %s", what, c128_status_string(st));
  cr_assert_eq((c128_status)status, want, "%s: device planner status %s, want %s", what,
               c128_status_string((c128_status)status), c128_status_string(want));
  if (want != C128_SUCCESS) {
    cr_assert(counts[0] == 0 && counts[1] == 0, "%s: counts %lld %lld", what, (long long)counts[0],
              (long long)counts[1]);
    const c128_compress_plan sentinel = C128_INVALID_COMPRESS_PLAN;
    const c128_decode_plan padding = C128_PADDING_DECODE_PLAN;
    const c128_write_plan no_write = C128_INVALID_WRITE_PLAN;
    for (int i = 0; i < (decode || st != C128_SUCCESS ? 0 : PLAN_CAP); ++i) /* a refused batch (not argument) */
      cr_assert(memcmp(&dcp[i], &sentinel, sizeof sentinel) == 0 && memcmp(&dwp[i], &no_write, sizeof no_write) == 0,
                "%s: plan %d is no sentinel", what, i);
    for (int64_t i = 0; i < (decode && st == C128_SUCCESS ? n : 0); ++i)
      cr_assert(memcmp(&ddp[i], &padding, sizeof padding) == 0, "%s: decode plan %lld", what, (long long)i);
  } else if (decode) {
    cr_assert(memcmp(dp, ddp, (size_t)n * sizeof *dp) == 0, "%s: device planner differs from the host planner", what);
  } else {
    cr_assert(counts[0] == plans.num_compress && counts[1] == plans.num_write, "%s: counts", what);
    cr_assert(memcmp(cp, dcp, sizeof cp) == 0 && memcmp(wp, dwp, sizeof wp) == 0, "%s: device vs host plans", what);
  }
}

static void planner_rope_positions(backend be) {
  require_backend(be);
  c128_ring ring = {0};
  ring.state_pages = 8;
  /* prefill: windows at 0 and 128; an extend whose one window starts at 256; no window at all */
  const c128_request whole = {0, 256, 256}, extend = {1, 400, 144}, partial = {2, 300, 44};
  const struct {
    int64_t rope;
    c128_request req;
    c128_status want;
  } prefill[] = {{128, whole, C128_ERROR_ROPE_TABLE_TOO_SHORT},
                 {129, whole, C128_SUCCESS},
                 {1, whole, C128_ERROR_ROPE_TABLE_TOO_SHORT},
                 {0, whole, C128_SUCCESS}, /* 0: no table to respect */
                 {256, extend, C128_ERROR_ROPE_TABLE_TOO_SHORT},
                 {257, extend, C128_SUCCESS},
                 {1, partial, C128_SUCCESS},
                 {-1, whole, C128_ERROR_NEGATIVE_SIZE}};
  for (size_t i = 0; i < sizeof prefill / sizeof prefill[0]; ++i) {
    ring.rope_positions = prefill[i].rope;
    char what[96];
    snprintf(what, sizeof what, "prefill %d/%d tokens, rope_positions %lld", prefill[i].req.extend_len,
             prefill[i].req.seq_len, (long long)prefill[i].rope);
    expect_planners(be, 0, &ring, &prefill[i].req, 1, prefill[i].want, what);
  }
  /* decode: a boundary at position 255 (window 128 .. 255) among rows that complete nothing */
  const c128_request batch[3] = {{0, 200, 1}, {1, 256, 1}, {2, 0, 0}};
  const struct {
    int64_t rope;
    c128_status want;
  } decode[] = {
      {128, C128_ERROR_ROPE_TABLE_TOO_SHORT}, {129, C128_SUCCESS}, {0, C128_SUCCESS}, {-5, C128_ERROR_NEGATIVE_SIZE}};
  for (size_t i = 0; i < sizeof decode / sizeof decode[0]; ++i) {
    ring.rope_positions = decode[i].rope;
    char what[96];
    snprintf(what, sizeof what, "decode, rope_positions %lld", (long long)decode[i].rope);
    expect_planners(be, 1, &ring, batch, 3, decode[i].want, what);
  }
  ring.rope_positions = 1; /* rows off a boundary start no window */
  expect_planners(be, 1, &ring, batch, 1, C128_SUCCESS, "decode off a boundary, rope_positions 1");
}

Test(cpu, entry_planner_rope_positions) { planner_rope_positions(BACKEND_CPU); }
Test(gpu, entry_planner_rope_positions) { planner_rope_positions(BACKEND_GPU); }
