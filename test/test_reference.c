/* The oracle and the tolerance check everything else is judged by (ref/reference.h): the oracle
   on windows whose answer is known in closed form, and ref_check_row accepting what DESIGN 8
   allows and refusing just past it, so that a check of the kernels cannot pass by being blind. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "harness.h"

enum { D = 64 };

static uint16_t bf16_bits(float f) { /* round to nearest even (finite f) */
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* A window of random kv, scores and ape; rows[j] points into `storage`. */
static void random_window(rng *r, float storage[REF_WINDOW][2 * D], const float *rows[REF_WINDOW], float *ape) {
  for (int j = 0; j < REF_WINDOW; ++j) {
    for (int c = 0; c < 2 * D; ++c) storage[j][c] = rng_randn(r);
    rows[j] = storage[j];
  }
  for (int i = 0; i < REF_WINDOW * D; ++i) ape[i] = 0.5f * rng_randn(r);
}

Test(cpu, oracle_closed_forms) {
  rng r = rng_fresh();
  static float storage[REF_WINDOW][2 * D], ape[REF_WINDOW * D];
  const float *rows[REF_WINDOW];
  double out[D];
  random_window(&r, storage, rows, ape);
  /* Equal scores: the mean of kv. */
  for (int j = 0; j < REF_WINDOW; ++j)
    for (int c = 0; c < D; ++c) storage[j][D + c] = 1.5f, ape[j * D + c] = 0.25f;
  ref_window(D, rows, ape, out);
  for (int c = 0; c < D; ++c) {
    double mean = 0.0;
    for (int j = 0; j < REF_WINDOW; ++j) mean += storage[j][c];
    mean /= REF_WINDOW;
    cr_assert(fabs(out[c] - mean) <= 1e-12 * (1.0 + fabs(mean)), "channel %d: %.17g, mean %.17g", c, out[c], mean);
  }
  /* One row's score 800 above the rest: that row's kv; every score -inf but one: that one's;
     a NaN or +inf score, or all -inf: NaN. */
  const int hot = (int)(rng_u64(&r) % REF_WINDOW);
  for (int c = 0; c < D; ++c) storage[hot][D + c] = 801.5f;
  ref_window(D, rows, ape, out);
  for (int c = 0; c < D; ++c) cr_assert_eq(out[c], (double)storage[hot][c], "channel %d", c);
  for (int j = 0; j < REF_WINDOW; ++j) storage[j][D] = j == hot ? 0.0f : -INFINITY;
  storage[hot][D + 1] = NAN, storage[hot][D + 2] = INFINITY;
  for (int j = 0; j < REF_WINDOW; ++j) storage[j][D + 3] = -INFINITY;
  ref_window(D, rows, ape, out);
  cr_assert_eq(out[0], (double)storage[hot][0]);
  cr_assert(isnan(out[1]) && isnan(out[2]) && isnan(out[3]), "%g %g %g", out[1], out[2], out[3]);
}

Test(cpu, tolerance_check_accepts_within_and_refuses_past) {
  rng r = rng_fresh();
  char why[256];
  double want[D];
  float got[D];
  uint16_t got16[D];
  for (int c = 0; c < D; ++c) want[c] = rng_randn(&r);
  /* f32: the oracle rounded to f32 passes; a relative L2 error of 2e-5 does not. */
  for (int c = 0; c < D; ++c) got[c] = (float)want[c];
  cr_assert_eq(ref_check_row(D, got, 0, want, NULL, why, sizeof why), 0, "%s", why);
  for (int c = 0; c < D; ++c) got[c] = (float)(want[c] * (1.0 + 2.0 * REF_TOL_REL_L2));
  cr_assert_eq(ref_check_row(D, got, 0, want, NULL, why, sizeof why), 1, "a relative L2 of 2e-5 passed");
  cr_assert(strstr(why, "relative L2") != NULL, "%s", why);
  /* f32: one channel off by more than the max |error| fails even when the L2 is small. */
  for (int c = 0; c < D; ++c) got[c] = (float)want[c];
  const int c0 = (int)(rng_u64(&r) % D);
  want[c0] = 1e3, got[c0] = (float)(1e3 + 2.0 * REF_TOL_MAX_ABS);
  cr_assert_eq(ref_check_row(D, got, 0, want, NULL, why, sizeof why), 1, "max abs %g passed", 2.0 * REF_TOL_MAX_ABS);
  /* bf16: the oracle rounded to bf16 passes; one channel moved one ulp further from the oracle
     (at least an ulp away, twice the half ulp allowed) does not. */
  want[c0] = 1.0 + 0.3 * rng_uniform(&r);
  for (int c = 0; c < D; ++c) got16[c] = bf16_bits((float)want[c]);
  cr_assert_eq(ref_check_row(D, got16, 1, want, NULL, why, sizeof why), 0, "%s", why);
  const uint32_t rounded_bits = (uint32_t)got16[c0] << 16;
  float rounded;
  memcpy(&rounded, &rounded_bits, sizeof rounded);
  got16[c0] = (uint16_t)(rounded >= want[c0] ? got16[c0] + 1 : got16[c0] - 1);
  cr_assert_eq(ref_check_row(D, got16, 1, want, NULL, why, sizeof why), 1, "a bf16 ulp off passed");
  /* DESIGN 8.2's counter-example to a 1e-5 slack: the host runner stored 173 * 2^-14 where the
     oracle is -0.0105162262 (nearest bf16 172 * 2^-14), a correct fp32 result 1.23e-5 away. */
  for (int c = 0; c < D; ++c) got16[c] = bf16_bits((float)want[c]);
  want[c0] = -0.0105162262, got16[c0] = bf16_bits(-173.0f / 16384.0f);
  cr_assert_eq(ref_check_row(D, got16, 1, want, NULL, why, sizeof why), 0, "%s", why);
  cr_assert(fabs(-173.0 / 16384.0 - want[c0]) > 0.5 * ref_bf16_ulp(want[c0]) + REF_BF16_REL * fabs(want[c0]) + 1e-5,
            "the case no longer needs more than 1e-5");
  /* Non-finite values must match exactly: NaN with NaN, an infinity with the same one. */
  for (int c = 0; c < D; ++c) got[c] = (float)want[c];
  want[c0] = NAN, got[c0] = NAN;
  cr_assert_eq(ref_check_row(D, got, 0, want, NULL, why, sizeof why), 0, "%s", why);
  got[c0] = 0.0f;
  cr_assert_eq(ref_check_row(D, got, 0, want, NULL, why, sizeof why), 1, "a number for NaN passed");
  want[c0] = INFINITY, got[c0] = -INFINITY;
  cr_assert_eq(ref_check_row(D, got, 0, want, NULL, why, sizeof why), 1, "-inf for +inf passed");
  got[c0] = INFINITY;
  cr_assert_eq(ref_check_row(D, got, 0, want, NULL, why, sizeof why), 0, "%s", why);
  /* With a per-channel scale: REF_SCALED_REL of it, per channel. */
  double scale[D];
  for (int c = 0; c < D; ++c) want[c] = rng_randn(&r), scale[c] = 10.0 + fabs(want[c]), got[c] = (float)want[c];
  got[c0] = (float)(want[c0] + 0.5 * REF_SCALED_REL * scale[c0]);
  cr_assert_eq(ref_check_row(D, got, 0, want, scale, why, sizeof why), 0, "%s", why);
  got[c0] = (float)(want[c0] + 2.0 * REF_SCALED_REL * scale[c0]);
  cr_assert_eq(ref_check_row(D, got, 0, want, scale, why, sizeof why), 1, "twice the scaled bound passed");
}
