/* c128__exp_exact, the one transcendental of the kernels (shared bit for bit by the host runner and the
   GPU): its accuracy claim (1.05 ulp on [-88, 0]), its special values and its monotonicity. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

float test_exp(float x);

static float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* Every 61st float of [-88, 0] (18 million arguments), in increasing order, against double:
   within 1.05 ulp where the result is normal, below 2^-126 in absolute value where it is not;
   never decreasing as x grows. */
Test(cpu, exp_accuracy_on_the_softmax_range) {
  double worst = 0.0;
  float worst_x = 0.0f, previous = 0.0f;
  for (uint32_t u = 0xC2B00000u;; u -= 61) { /* -88 up to -0 */
    const float x = from_bits(u), y = test_exp(x);
    const double want = exp((double)x);
    cr_assert(y >= previous, "exp decreases at %a: %a after %a", (double)x, (double)y, (double)previous);
    if (want >= 0x1p-126) {
      const double err = fabs((double)y - want) / ldexp(1.0, ilogb(want) - 23);
      if (err > worst) worst = err, worst_x = x;
    } else {
      cr_assert(fabs((double)y - want) < 0x1p-126, "exp(%a) = %a, want %a", (double)x, (double)y, want);
    }
    previous = y;
    if (u < 0x80000000u + 61) break;
  }
  cr_assert_leq(worst, 1.05, "worst error %.3f ulp at x = %a", worst, (double)worst_x);
}

Test(cpu, exp_special_values) {
  cr_assert_eq(test_exp(0.0f), 1.0f);
  cr_assert_eq(test_exp(-0.0f), 1.0f);
  cr_assert_eq(test_exp(-INFINITY), 0.0f);
  cr_assert_eq(test_exp(-1000.0f), 0.0f);
  cr_assert(isnan(test_exp(NAN)));
  cr_assert(isnan(test_exp(-NAN)));
  cr_assert_float_eq(test_exp(-1.0f), 0.36787944f, 1e-7f);
}
