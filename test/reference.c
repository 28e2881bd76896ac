#include "reference.h"

#include <math.h>

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
