#include "reference.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

void ref_window(int head_dim, const float *const rows[REF_WINDOW], const float *ape, double *out) {
  for (int c = 0; c < head_dim; ++c) {
    double s[REF_WINDOW], top = -INFINITY;
    int undefined = 0;
    for (int j = 0; j < REF_WINDOW; ++j) {
      s[j] = (double)rows[j][head_dim + c] + (double)ape[j * head_dim + c];
      if (isnan(s[j]) || s[j] == INFINITY) undefined = 1;
      if (s[j] > top) top = s[j];
    }
    if (undefined || top == -INFINITY) {
      out[c] = NAN;
      continue;
    }
    double den = 0.0, num = 0.0;
    for (int j = 0; j < REF_WINDOW; ++j) {
      const double w = exp(s[j] - top);
      den += w;
      num += w * (double)rows[j][c];
    }
    out[c] = num / den;
  }
}

double ref_rel_l2(int head_dim, const float *got, const double *want, double *max_abs) {
  double err2 = 0.0, want2 = 0.0, worst = 0.0;
  for (int c = 0; c < head_dim; ++c) {
    const double d = fabs((double)got[c] - want[c]);
    err2 += d * d, want2 += want[c] * want[c];
    if (!(d <= worst)) worst = d; /* NaN sticks */
  }
  if (max_abs) *max_abs = worst;
  return want2 > 0.0 ? sqrt(err2 / want2) : sqrt(err2);
}

static double element(const void *row, int is_bf16, int c) {
  if (!is_bf16) return ((const float *)row)[c];
  const uint32_t bits = (uint32_t)((const uint16_t *)row)[c] << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

double ref_bf16_ulp(double x) {
  const double a = fabs(x);
  if (a < 0x1.0p-126) return 0x1.0p-133;
  return ldexp(1.0, ilogb(a) - 7);
}

int ref_check_row(int head_dim, const void *row, int row_is_bf16, const double *want, const double *scale, char *why,
                  size_t why_size) {
  double err2 = 0.0, want2 = 0.0, max_abs = 0.0;
  for (int c = 0; c < head_dim; ++c) {
    const double got = element(row, row_is_bf16, c);
    if (isnan(want[c]) || isnan(got) || isinf(want[c]) || isinf(got)) { /* NaN = NaN, inf = the same inf */
      if ((isnan(want[c]) && isnan(got)) || got == want[c]) continue;
      snprintf(why, why_size, "channel %d: got %.9g, oracle %.9g", c, got, want[c]);
      return 1;
    }
    const double d = fabs(got - want[c]);
    double bound = -1.0; /* none per channel: f32 on randn data is held to the row's relative L2 */
    if (row_is_bf16) bound = 0.5 * ref_bf16_ulp(want[c]) + REF_BF16_REL * fabs(want[c]) + REF_BF16_ABS;
    if (scale) bound = (row_is_bf16 ? bound : REF_SCALED_ABS) + REF_SCALED_REL * scale[c];
    if (bound >= 0.0 && d > bound) {
      snprintf(why, why_size, "channel %d: got %.9g, oracle %.9g, |diff| %.3g > %.3g", c, got, want[c], d, bound);
      return 1;
    }
    err2 += d * d, want2 += want[c] * want[c];
    if (d > max_abs) max_abs = d;
  }
  if (!row_is_bf16 && !scale) {
    const double rel = want2 > 0.0 ? sqrt(err2 / want2) : sqrt(err2);
    if (!(rel <= REF_TOL_REL_L2 && max_abs <= REF_TOL_MAX_ABS)) {
      snprintf(why, why_size, "relative L2 %.3g (<= %g), max abs %.3g (<= %g), oracle L2 %.3g", rel, REF_TOL_REL_L2,
               max_abs, REF_TOL_MAX_ABS, sqrt(want2));
      return 1;
    }
  }
  return 0;
}
