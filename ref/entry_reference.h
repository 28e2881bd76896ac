/* The fp64 oracle of the cache-entry epilogue (DESIGN 11.1) for one window, and the tolerance of
   DESIGN 11.4. Plain C, no c128.cuh: it knows a pooled vector, gamma, eps and one row of the RoPE
   table, and the two byte layouts of DESIGN 11.2; nothing of plans, pages or the library.

   The chain, in double precision with the reference's roundings:
     b_c = bf16(y_c) (nearest even); r = 1 / sqrt(sum_c b_c^2 / D + eps); z_c = bf16(gamma_c * (b_c * r));
     RoPE pair i: bf16(zr cos - zi sin), bf16(zr sin + zi cos) with (cos, sin) = the table's row;
     FP8 block w: E = the least integer with max(max |z|, 1e-4) <= 448 * 2^E (exact comparison),
     q_c = the nearest e4m3 value to z_c * 2^-E (the 127 finite non-negative codes enumerated,
     ties to the even code), scale byte E + 127; a block holding a NaN or an infinite z is NaN
     (codes 0x7F, scale 0xFF; BF16 layout: NaN values).
   The e4m3 rounding, the scale exponent and the bf16 rounding are computed here by methods that
   share nothing with the library's bit manipulations. */
#ifndef C128_REF_ENTRY_REFERENCE_H
#define C128_REF_ENTRY_REFERENCE_H

#include <stddef.h>
#include <stdint.h>

#define REF_ROPE_DIMS 64
#define REF_ROPE_PAIRS (REF_ROPE_DIMS / 2)
#define REF_FP8_BLOCK 64
#define REF_ENTRY_MAX_DIM 512
#define REF_ENTRY_MAX_BLOCKS (REF_ENTRY_MAX_DIM / REF_FP8_BLOCK)
#define REF_SCALE_FLOOR 1e-4 /* a block's amax below this is taken as this */
#define REF_E4M3_MAX 448.0

/* The kinds, with c128_output_kind's values. */
enum { REF_ENTRY_FP8 = 1, REF_ENTRY_BF16 = 2 };

/* Layouts (DESIGN 11.2): bytes of one entry's values (FP8: D - 64 codes and 64 bf16 RoPE values;
   BF16: D bf16 values) and of its scale record (FP8: D / 64 - 1 scale bytes and one pad byte;
   BF16: none); and where entry `loc` and its scale record start in a cache of pages of
   `page_bytes`, P = entries_per_page entries each. */
size_t ref_entry_value_bytes(int head_dim, int kind);
size_t ref_entry_scale_bytes(int head_dim, int kind);
void ref_entry_locate(int head_dim, int kind, int64_t entries_per_page, int64_t page_bytes, int64_t loc,
                      size_t *value_at, size_t *scale_at);

/* The pieces, for the oracle's own tests. */
double ref_bf16_round(double x);      /* nearest even bf16 value; overflow to +-inf, NaN stays NaN */
uint16_t ref_bf16_bits(double x);     /* bits of ref_bf16_round(x) (0x7FC0 for NaN) */
double ref_bf16_value(uint16_t bits); /* the value of bf16 bits */
double ref_e4m3_value(unsigned code); /* the value of an e4m3 (FN) code; NaN for 0x7F / 0xFF */
unsigned ref_e4m3_code(double x);     /* nearest e4m3 code, ties to even, |x| > 448 clamped to 448, sign kept */
int ref_scale_exponent(double amax);  /* E of a block of largest |z| = amax (finite, >= 0) */

/* The oracle of one window. `y` is the pooled vector (head_dim values: the fp64 oracle's, or a
   kernel's pooled output widened); `y_err` (NULL: none) bounds per channel how far from y the
   fp32 value the kernel rounds to bf16 may be (for the fp64 oracle, DESIGN 8.2's bound
   REF_BF16_REL |y| + REF_BF16_ABS; for a kernel's own pooled output, nothing; for another
   backend's, its bound against this one). `rope` is the table's row at the window's position:
   32 (cos, sin) pairs. */
typedef struct ref_entry {
  int head_dim, kind;
  /* The chain's nominal values. */
  double b[REF_ENTRY_MAX_DIM], z[REF_ENTRY_MAX_DIM], r;
  int nan_block[REF_ENTRY_MAX_BLOCKS], exponent[REF_ENTRY_MAX_BLOCKS];
  double amax[REF_ENTRY_MAX_BLOCKS];
  /* The expected bytes: values (FP8 codes and RoPE bf16, or the BF16 layout), scale record. */
  unsigned char value[2 * REF_ENTRY_MAX_DIM], scale[REF_ENTRY_MAX_BLOCKS];
  /* What a correct kernel may have instead (DESIGN 11.4): its z_c lies in [z_lo, z_hi] (a bf16
     rounding step either way at most, where the fp32 chain or y_err can move it), its RoPE values
     in [rope_lo, rope_hi] before their rounding to bf16, its block amax in [amax_lo, amax_hi]. */
  double z_lo[REF_ENTRY_MAX_DIM], z_hi[REF_ENTRY_MAX_DIM];
  double rope_lo[REF_ROPE_DIMS], rope_hi[REF_ROPE_DIMS];
  double amax_lo[REF_ENTRY_MAX_BLOCKS], amax_hi[REF_ENTRY_MAX_BLOCKS];
  const float *rope_row; /* the (cos, sin) row it was computed with */
} ref_entry;

/* 0 on success; -1 for a head_dim that is not a multiple of 64 in [128, 512] or an unknown kind. */
int ref_entry_compute(int head_dim, int kind, const double *y, const double *y_err, const float *gamma, float eps,
                      const float *rope, ref_entry *out);

/* DESIGN 11.4 on one entry: 0 when `value` (ref_entry_value_bytes) and, for FP8, `scale`
   (ref_entry_scale_bytes) are within tolerance of the oracle, else 1 with the first reason in
   why. The rules:
   - a block the oracle makes NaN holds exactly that (FP8: every code 0x7F, scale 0xFF; BF16:
     every value NaN), and no other block holds a NaN;
   - scale bytes equal, except that where the block's amax interval reaches a power of two times
     448 (within one bf16 step) the exponent of the other side is allowed too;
   - each code (each dequantised value of the BF16 layout, as its code) is within one code of the
     oracle's code at the kernel's exponent, and is the rounding of some z in [z_lo, z_hi]: so a
     kernel that truncates, or rounds ties away, is caught even where it lands one code off;
   - each RoPE value is the bf16 rounding of some value in [rope_lo, rope_hi] (the rotation of z
     within its interval, plus the fp32 evaluation's error), NaN where the oracle's is NaN, the
     same infinity where it is infinite;
   - the pad byte is 0. */
int ref_entry_check(const ref_entry *want, const void *value, const void *scale, char *why, size_t why_size);

#endif
