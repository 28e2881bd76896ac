/* fp64 oracle of SPEC 1: knows windows of tokens, nothing of plans, rings or pages. */
#ifndef C128_TEST_REFERENCE_H
#define C128_TEST_REFERENCE_H

#define REF_WINDOW 128
#define REF_APE_ROWS REF_WINDOW

/* rows[j] is window row j as f32 (kv in [0, D), raw score in [D, 2D)), already rounded the way
   the kernel sees it; ape is [128][D]. out[c] = sum_j softmax_j(score_j[c] + ape[j][c]) kv_j[c].
   Non-finite policy (as the library's): a -inf score has weight 0; a channel whose scores are
   all -inf, or hold +inf or NaN, gives NaN. */
void ref_window(int head_dim, const float *const rows[REF_WINDOW], const float *ape, double *out);

#endif
