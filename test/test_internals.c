/* c128__exp_exact, the one transcendental of the kernels (shared bit for bit by the host runner and the
   GPU): its accuracy claim (1.05 ulp on [-88, 0]), its special values and its monotonicity; and
   the form of a decode launch (whole windows, the one-request kernel). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

float test_exp(float x);
void test_decode_form(int D, int32_t requested, int32_t group, int layout, int entry, int clusters, int *whole,
                      int *single, int *cluster, int32_t *block_group);

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

/* A decode's launch form (DESIGN 6.2, 11.3), at head_dim 128 (two splits) and 512 (eight): whole
   windows only in a group the caller gives, the one-request kernel for group 1 on today's layout,
   pooled, or with entries where the device runs clusters (`clusters`: the launch passes it only
   where the group is below the splits), and there entries in clusters at the other groups. */
Test(cpu, decode_form) {
  static const struct {
    int D;
    int32_t requested, group;
    int layout, entry, clusters, whole, single, cluster;
    int32_t block_group;
  } cases[] = {
      {128, 0, 3, 0, 1, 0, 0, 0, 0, 3},    /* entries, the automatic group holds the splits: the workspace */
      {128, 3, 3, 0, 1, 0, 1, 0, 0, 1},    /* the caller's group of 3: whole windows, one window a block */
      {128, 2, 2, 0, 1, 0, 1, 0, 0, 1},    /* whole windows of one window a block are not one request a block */
      {128, 8, 8, 1, 1, 0, 1, 0, 0, 4},    /* and in any layout */
      {128, 0, 1, 0, 1, 1, 0, 1, 0, 1},    /* entries at group 1 with clusters: the one-request kernel */
      {128, 0, 1, 0, 1, 0, 0, 0, 0, 1},    /* without: the workspace */
      {128, 1, 1, 0, 1, 1, 0, 1, 0, 1},    /* a caller's group below the splits */
      {128, 0, 1, 1, 1, 0, 0, 0, 0, 1},    /* any layout with entries keeps its kernel */
      {128, 0, 1, 0, 0, 0, 0, 1, 0, 1},    /* pooled, today's layout, group 1: the one-request kernel */
      {128, 1, 1, 0, 0, 0, 0, 1, 0, 1},    /* the caller's group of 1 too */
      {128, 0, 1, 1, 0, 0, 0, 0, 0, 1},    /* any layout keeps its kernel */
      {128, 0, 2, 0, 0, 0, 0, 0, 0, 2},    /* pooled at group 2: grouped */
      {128, 32, 32, 0, 0, 0, 0, 0, 0, 32}, /* pooled never takes whole windows */
      {512, 0, 3, 0, 1, 1, 0, 0, 1, 3},    /* head_dim 512, entries at group 3 with clusters: in clusters */
      {512, 7, 7, 0, 1, 1, 0, 0, 1, 7},    /* the caller's group of 7 too */
      {512, 0, 3, 0, 1, 0, 0, 0, 0, 3},    /* without clusters: the workspace */
      {512, 0, 3, 1, 1, 1, 0, 0, 0, 3},    /* any layout: the workspace */
      {512, 0, 3, 0, 0, 1, 0, 0, 0, 3},    /* pooled: grouped */
      {512, 8, 8, 0, 1, 0, 1, 0, 0, 1},    /* the caller's group of 8: whole windows */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    int whole = -1, single = -1, cluster = -1;
    int32_t block_group = -1;
    test_decode_form(cases[i].D, cases[i].requested, cases[i].group, cases[i].layout, cases[i].entry, cases[i].clusters,
                     &whole, &single, &cluster, &block_group);
    cr_assert_eq(whole, cases[i].whole, "case %zu: whole %d", i, whole);
    cr_assert_eq(single, cases[i].single, "case %zu: single %d", i, single);
    cr_assert_eq(cluster, cases[i].cluster, "case %zu: cluster %d", i, cluster);
    cr_assert_eq(block_group, cases[i].block_group, "case %zu: group %d", i, (int)block_group);
  }
}
