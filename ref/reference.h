/* The fp64 oracle of DESIGN 1 and the tolerance of DESIGN 8, shared by the tests, the fuzz
   target and the examples. It knows windows of tokens, nothing of plans, rings, pages or the
   library (plain C, no c128.cuh). */
#ifndef C128_REF_REFERENCE_H
#define C128_REF_REFERENCE_H

#include <stddef.h>

#define REF_WINDOW 128
#define REF_APE_ROWS REF_WINDOW

/* DESIGN 8 on randn data: an f32 row within this relative L2 of the oracle and this largest
   |difference|; a bf16 row within half a bf16 ulp of each channel plus REF_BF16_REL |ref| +
   REF_BF16_ABS. REF_BF16_ABS covers a correct fp32 result's own error before the rounding to
   bf16: with scores of 60 randn (|s| up to ~250, an fp32 ulp of 1.5e-5 there) it reaches
   1.2e-5 on cancelling channels (DESIGN 8.2 has the case), so 1e-5 was too tight. */
#define REF_TOL_REL_L2 1e-5
#define REF_TOL_MAX_ABS 1e-4
#define REF_BF16_REL 1e-5
#define REF_BF16_ABS 3e-5
/* With a per-channel scale (ref_check_row): REF_SCALED_REL of it, plus REF_SCALED_ABS for f32. */
#define REF_SCALED_REL 1e-5
#define REF_SCALED_ABS 1e-7

/* rows[j] is window row j as f32 (kv in [0, D), raw score in [D, 2D)), already rounded the way
   the kernel sees it; ape is [128][D]. out[c] = sum_j softmax_j(score_j[c] + ape[j][c]) kv_j[c].
   Non-finite policy (as the library's): a -inf score has weight 0; a channel whose scores are
   all -inf, or hold +inf or NaN, gives NaN. */
void ref_window(int head_dim, const float *const rows[REF_WINDOW], const float *ape, double *out);

/* Relative L2 error of an f32 vector against the oracle's, and its largest |difference| in
   *max_abs (NULL: not wanted); a NaN anywhere makes both NaN. */
double ref_rel_l2(int head_dim, const float *got, const double *want, double *max_abs);

/* The spacing of bf16 values at |x| (8 significant bits; subnormals spaced 2^-133). */
double ref_bf16_ulp(double x);

/* 0 when `row` (head_dim elements: f32, or bf16 bits when row_is_bf16) is within DESIGN 8's
   tolerance of `want`, else 1 with the first reason in why. NaN must meet NaN and an infinity
   the same infinity. With `scale` non-NULL (scale[c] = the oracle over |kv|, for data with
   non-finite values, where the few finite channels can be cancelling sums and a relative L2
   would measure the cancellation) each channel is held to REF_SCALED_REL of its scale instead
   (on top of the bf16 bound, or of REF_SCALED_ABS for f32). */
int ref_check_row(int head_dim, const void *row, int row_is_bf16, const double *want, const double *scale, char *why,
                  size_t why_size);

#endif
