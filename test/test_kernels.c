/* Kernel tests, one per instance and kernel, generated from the instance table: `cpu` runs the
   host runner with its race checker (blocks forward and reversed), `gpu` the CUDA kernels, which
   must also match the host runner bit for bit. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum { DECODE_PAGES = 6, DECODE_BATCH = 6, PREFILL_PAGES = 8, NUM_EVENTS = 5 };

typedef struct sizes {
  size_t state_row, input_row, out_row;
} sizes;

static sizes sizes_of(const c128_instance_info *f) {
  sizes s;
  s.state_row = (size_t)f->row_elems * dtype_size(f->state_dtype);
  s.input_row = (size_t)f->row_elems * dtype_size(f->input_dtype);
  s.out_row = (size_t)f->head_dim * dtype_size(f->output_dtype);
  return s;
}

/* Window rows for the oracle: rows < buffer_len from the (pre-batch) state page, the rest from
   the input, each widened from its own storage dtype. */
static void oracle(const c128_instance_info *f, const void *state, int64_t page, int buffer_len, const void *input,
                   int64_t input_row0, const float *ape, float *scratch, double *ref) {
  const float *rows[REF_WINDOW];
  const int D = f->head_dim;
  for (int j = 0; j < REF_WINDOW; ++j) {
    float *dst = scratch + (size_t)j * 2 * (size_t)D;
    if (j < buffer_len) row_widen(state, (size_t)(page * REF_WINDOW + j), D, f->state_dtype, dst);
    else row_widen(input, (size_t)(input_row0 + j), D, f->input_dtype, dst);
    rows[j] = dst;
  }
  ref_window(D, rows, ape, ref);
}

/* A decode batch of `batch` requests whose output rows are 0 .. batch - 1. */
static c128_decode_args decode_args(const c128_instance_info *f, void *state, int64_t pages, const void *input,
                                    const float *ape, void *out, const c128_decode_plan *plans, int64_t batch,
                                    int32_t group) {
  c128_decode_args a = {0};
  a.head_dim = f->head_dim;
  a.state_dtype = f->state_dtype;
  a.input_dtype = f->input_dtype;
  a.output_dtype = f->output_dtype;
  a.state = state;
  a.state_pages = pages;
  a.input = input;
  a.ape = ape;
  a.output = out;
  a.output_rows = batch;
  a.plans = plans;
  a.batch = batch;
  a.requests_per_block = group;
  return a;
}

/* group: requests per decode block (0 = automatic); B = 6 makes full, partial and oversize groups */
static void decode_case(const instance_entry *e, backend be, float score_scale, int reverse, int group) {
  require_backend(be);
  const c128_instance_info *f = e;
  const int D = f->head_dim;
  const sizes z = sizes_of(f);
  rng r = rng_fresh();
  const size_t state_rows = DECODE_PAGES * REF_WINDOW;
  void *state = rows_alloc(state_rows, D, f->state_dtype);
  void *input = rows_alloc(DECODE_BATCH, D, f->input_dtype);
  rows_fill(state, state_rows, D, f->state_dtype, &r, score_scale);
  rows_fill(input, DECODE_BATCH, D, f->input_dtype, &r, score_scale);
  float *ape = ape_make(D, &r);
  void *out = malloc(DECODE_BATCH * z.out_row);
  poison(out, DECODE_BATCH * z.out_row);
  /* boundary on page 3; slot 40 of page 1; boundary on page 0; padding; slot 0 of page 5;
     boundary on page 4 */
  static const c128_decode_plan plans[DECODE_BATCH] = {{256, 3 * 128 + 127, 2, 3}, {169, 1 * 128 + 40, 0, 1},
                                                       {128, 127, 0, 0},           {0, -1, -1, -1},
                                                       {129, 5 * 128, 5, 5},       {384, 4 * 128 + 127, 4, 4}};
  void *state0 = clone_bytes(state, state_rows * z.state_row), *out0 = clone_bytes(out, DECODE_BATCH * z.out_row);

  c128_decode_args a = decode_args(f, state, DECODE_PAGES, input, ape, out, plans, DECODE_BATCH, group);
  const c128_status st = run_decode(e, be, &a, reverse);
  cr_assert_eq(st, C128_SUCCESS, "%s", c128_status_string(st));

  void *want = clone_bytes(state0, state_rows * z.state_row);
  for (int b = 0; b < DECODE_BATCH; ++b)
    if (plans[b].seq_len != 0 && plans[b].write_loc >= 0)
      row_to_state(input, (size_t)b, f->input_dtype, (char *)want + (size_t)plans[b].write_loc * z.state_row,
                   f->state_dtype, D);
  check_rows_equal(state, want, state_rows, z.state_row, "decode state", r.seed);

  float *scratch = malloc(REF_WINDOW * 2 * (size_t)D * sizeof(float));
  double *ref = malloc((size_t)D * sizeof(double));
  for (int b = 0; b < DECODE_BATCH; ++b) {
    if (plans[b].seq_len != 0 && plans[b].write_loc % REF_WINDOW == REF_WINDOW - 1) {
      oracle(f, state0, plans[b].read_page_1, REF_WINDOW - 1, input, b - (REF_WINDOW - 1), ape, scratch, ref);
      check_output_row(out, (size_t)b, f->output_dtype, ref, D, "decode output", r.seed);
    } else {
      check_rows_equal((char *)out + (size_t)b * z.out_row, (char *)out0 + (size_t)b * z.out_row, 1, z.out_row,
                       "decode output (must stay untouched)", r.seed);
    }
  }
  if (be == BACKEND_GPU) { /* the host runner must give the same bits */
    a.state = clone_bytes(state0, state_rows * z.state_row);
    a.output = clone_bytes(out0, DECODE_BATCH * z.out_row);
    cr_assert_eq(run_decode(e, BACKEND_CPU, &a, 0), C128_SUCCESS);
    check_rows_equal(state, a.state, state_rows, z.state_row, "GPU vs CPU state", r.seed);
    const double kv =
        fmax(max_abs_kv(state0, state_rows, D, f->state_dtype), max_abs_kv(input, DECODE_BATCH, D, f->input_dtype));
    check_gpu_output(out, a.output, DECODE_BATCH, f->output_dtype, D, kv, "GPU vs CPU output", r.seed);
    free(a.state);
    free(a.output);
  }
  free(state), free(input), free(ape), free(out), free(state0), free(out0), free(want), free(scratch), free(ref);
}

/* group: compress windows per block (0 = automatic); 9 plans make full, partial and skipped groups */
static void prefill_case(const instance_entry *e, backend be, float score_scale, int reverse, int group) {
  require_backend(be);
  const c128_instance_info *f = e;
  const int D = f->head_dim;
  const sizes z = sizes_of(f);
  rng r = rng_fresh();
  /* Five windows mixing state and input rows; event k reads page[k] when buffer_len > 0. */
  static const int buffer_len[NUM_EVENTS] = {0, 1, 64, 120, 127};
  static const int32_t page[NUM_EVENTS] = {-1, 5, 0, 7, 1};
  enum { TAIL = 37, TAIL_PAGE = 6 };
  int64_t first_row[NUM_EVENTS], rows = 0;
  for (int k = 0; k < NUM_EVENTS; ++k) {
    first_row[k] = rows;
    rows += REF_WINDOW - buffer_len[k];
  }
  const int64_t tail_row = rows;
  rows += TAIL;

  const size_t state_rows = PREFILL_PAGES * REF_WINDOW;
  void *state = rows_alloc(state_rows, D, f->state_dtype);
  void *input = rows_alloc((size_t)rows, D, f->input_dtype);
  rows_fill(state, state_rows, D, f->state_dtype, &r, score_scale);
  rows_fill(input, (size_t)rows, D, f->input_dtype, &r, score_scale);
  float *ape = ape_make(D, &r);

  enum { NUM_COMPRESS = NUM_EVENTS + 4 };
  c128_compress_plan cp[NUM_COMPRESS];
  for (int k = 0; k < NUM_EVENTS; ++k) {
    cp[k].seq_len = (uint32_t)(REF_WINDOW * (k + 2));
    cp[k].ragged_id = (uint16_t)(first_row[k] + REF_WINDOW - 1 - buffer_len[k]);
    cp[k].buffer_len = (uint16_t)buffer_len[k];
    cp[k].read_page_0 = page[k];
    cp[k].read_page_1 = page[k];
  }
  const c128_compress_plan sentinel = C128_INVALID_COMPRESS_PLAN;
  cp[NUM_EVENTS] = sentinel;                                                       /* padding */
  cp[NUM_EVENTS + 1] = cp[2], cp[NUM_EVENTS + 1].read_page_1 = 1000;               /* page beyond the state */
  cp[NUM_EVENTS + 2] = cp[0], cp[NUM_EVENTS + 2].ragged_id = (uint16_t)(rows + 5); /* beyond the input */
  cp[NUM_EVENTS + 3] = cp[0], cp[NUM_EVENTS + 3].ragged_id = 3;                    /* window starts before row 0 */

  /* Persist the tail, and overwrite rows 0..2 of the page event 4 still reads: the writes must
     land after the compress reads. Then four plans that must be skipped. */
  enum { NUM_WRITE = TAIL + 3 + 4 };
  c128_write_plan wp[NUM_WRITE];
  for (int i = 0; i < TAIL; ++i) wp[i] = (c128_write_plan){(uint32_t)(tail_row + i), TAIL_PAGE * 128 + i};
  for (int i = 0; i < 3; ++i) wp[TAIL + i] = (c128_write_plan){(uint32_t)(first_row[1] + i), page[4] * 128 + i};
  const c128_write_plan no_write = C128_INVALID_WRITE_PLAN;
  wp[TAIL + 3] = no_write;
  wp[TAIL + 4] = (c128_write_plan){(uint32_t)rows, 2 * 128};
  wp[TAIL + 5] = (c128_write_plan){0, -7};
  wp[TAIL + 6] = (c128_write_plan){0, 1000 * 128};

  void *out = malloc(NUM_COMPRESS * z.out_row);
  poison(out, NUM_COMPRESS * z.out_row);
  void *state0 = clone_bytes(state, state_rows * z.state_row), *out0 = clone_bytes(out, NUM_COMPRESS * z.out_row);

  c128_prefill_args a = {0};
  a.head_dim = D;
  a.state_dtype = f->state_dtype;
  a.input_dtype = f->input_dtype;
  a.output_dtype = f->output_dtype;
  a.state = state;
  a.state_pages = PREFILL_PAGES;
  a.input = input;
  a.input_rows = rows;
  a.ape = ape;
  a.output = out;
  a.output_rows = NUM_COMPRESS;
  a.compress_plans = cp;
  a.num_compress = NUM_COMPRESS;
  a.write_plans = wp;
  a.num_write = NUM_WRITE;
  a.windows_per_block = group;
  const c128_status st = run_prefill(e, be, &a, reverse);
  cr_assert_eq(st, C128_SUCCESS, "%s", c128_status_string(st));

  void *want = clone_bytes(state0, state_rows * z.state_row);
  for (int i = 0; i < TAIL + 3; ++i)
    row_to_state(input, wp[i].ragged_id, f->input_dtype, (char *)want + (size_t)wp[i].write_loc * z.state_row,
                 f->state_dtype, D);
  check_rows_equal(state, want, state_rows, z.state_row, "prefill state", r.seed);

  float *scratch = malloc(REF_WINDOW * 2 * (size_t)D * sizeof(float));
  double *ref = malloc((size_t)D * sizeof(double));
  for (int k = 0; k < NUM_EVENTS; ++k) {
    oracle(f, state0, page[k], buffer_len[k], input, first_row[k] - buffer_len[k], ape, scratch, ref);
    char what[64];
    snprintf(what, sizeof what, "prefill output, buffer_len %d", buffer_len[k]);
    check_output_row(out, (size_t)k, f->output_dtype, ref, D, what, r.seed);
  }
  check_rows_equal((char *)out + NUM_EVENTS * z.out_row, (char *)out0 + NUM_EVENTS * z.out_row,
                   NUM_COMPRESS - NUM_EVENTS, z.out_row, "output of a skipped plan", r.seed);
  if (be == BACKEND_GPU) {
    a.state = clone_bytes(state0, state_rows * z.state_row);
    a.output = clone_bytes(out0, NUM_COMPRESS * z.out_row);
    cr_assert_eq(run_prefill(e, BACKEND_CPU, &a, 0), C128_SUCCESS);
    check_rows_equal(state, a.state, state_rows, z.state_row, "GPU vs CPU state", r.seed);
    const double kv =
        fmax(max_abs_kv(state0, state_rows, D, f->state_dtype), max_abs_kv(input, (size_t)rows, D, f->input_dtype));
    check_gpu_output(out, a.output, NUM_COMPRESS, f->output_dtype, D, kv, "GPU vs CPU output", r.seed);
    free(a.state);
    free(a.output);
  }
  free(state), free(input), free(ape), free(out), free(state0), free(out0), free(want), free(scratch), free(ref);
}

/* randn scores with the automatic group, scores of magnitude ~60 (max subtraction) in groups of 4
   with the blocks reversed (a host runner option, so on the CPU only), randn in groups of 32. */
static void decode_cases(const instance_entry *e, backend be) {
  decode_case(e, be, 1.0f, 0, 0);
  decode_case(e, be, 60.0f, be == BACKEND_CPU, 4);
  decode_case(e, be, 1.0f, 0, 32);
}
static void prefill_cases(const instance_entry *e, backend be) {
  prefill_case(e, be, 1.0f, 0, 0);
  prefill_case(e, be, 60.0f, be == BACKEND_CPU, 4);
  prefill_case(e, be, 1.0f, 0, 32);
}
#define KERNEL_TESTS(name, D, state, input, output)                                         \
  Test(cpu, name##_decode) { decode_cases(instance(C128_INSTANCE_##name), BACKEND_CPU); }   \
  Test(cpu, name##_prefill) { prefill_cases(instance(C128_INSTANCE_##name), BACKEND_CPU); } \
  Test(gpu, name##_decode) { decode_cases(instance(C128_INSTANCE_##name), BACKEND_GPU); }   \
  Test(gpu, name##_prefill) { prefill_cases(instance(C128_INSTANCE_##name), BACKEND_GPU); }
C128_INSTANCES(KERNEL_TESTS)

/* A batch large enough that one warp persists several requests of a group and one block folds
   many windows: every group size gives the same bytes as one request per block. */
enum { WIDE_BATCH = 70 };
static void decode_groups_agree(const instance_entry *e, backend be) {
  require_backend(be);
  const c128_instance_info *f = e;
  const int D = f->head_dim;
  const sizes z = sizes_of(f);
  rng r = rng_fresh();
  const size_t state_rows = (size_t)WIDE_BATCH * REF_WINDOW;
  void *state = rows_alloc(state_rows, D, f->state_dtype);
  void *input = rows_alloc(WIDE_BATCH, D, f->input_dtype);
  rows_fill(state, state_rows, D, f->state_dtype, &r, 8.0f);
  rows_fill(input, WIDE_BATCH, D, f->input_dtype, &r, 8.0f);
  float *ape = ape_make(D, &r);
  c128_decode_plan plans[WIDE_BATCH];
  for (int b = 0; b < WIDE_BATCH; ++b) { /* request b owns page b; a third at a boundary, some padding */
    const int32_t slot = b % 3 == 0 ? REF_WINDOW - 1 : b % (REF_WINDOW - 1);
    const c128_decode_plan plan = {(uint32_t)(REF_WINDOW * 2 + slot + 1), b * REF_WINDOW + slot, b, b};
    const c128_decode_plan padding = {0, -1, -1, -1};
    plans[b] = b % 11 == 5 ? padding : plan;
  }
  void *out = malloc(WIDE_BATCH * z.out_row);
  poison(out, WIDE_BATCH * z.out_row);
  void *state0 = clone_bytes(state, state_rows * z.state_row), *out0 = clone_bytes(out, WIDE_BATCH * z.out_row);
  /* The reference: one request per block on the backend itself, which runs the one-request kernel
     (the others run the grouped one; the GPU's bits in the fast build differ from the host
     runner's within its bound, checked against the host runner here). */
  c128_decode_args a = decode_args(f, state, WIDE_BATCH, input, ape, out, plans, WIDE_BATCH, 1);
  cr_assert_eq(run_decode(e, be, &a, 0), C128_SUCCESS);
  if (be == BACKEND_GPU) {
    a.state = clone_bytes(state0, state_rows * z.state_row);
    a.output = clone_bytes(out0, WIDE_BATCH * z.out_row);
    cr_assert_eq(run_decode(e, BACKEND_CPU, &a, 0), C128_SUCCESS);
    check_rows_equal(a.state, state, state_rows, z.state_row, "state, GPU vs host", r.seed);
    const double kv =
        fmax(max_abs_kv(state0, state_rows, D, f->state_dtype), max_abs_kv(input, WIDE_BATCH, D, f->input_dtype));
    check_gpu_output(out, a.output, WIDE_BATCH, f->output_dtype, D, kv, "output, GPU vs host", r.seed);
    free((void *)a.state), free(a.output);
  }
  static const int32_t groups[] = {0, 2, 16, 17, 31, 32};
  for (size_t g = 0; g < sizeof groups / sizeof groups[0]; ++g) {
    a.state = clone_bytes(state0, state_rows * z.state_row);
    a.output = clone_bytes(out0, WIDE_BATCH * z.out_row);
    a.requests_per_block = groups[g];
    const c128_status st = run_decode(e, be, &a, (int)(g % 2));
    cr_assert_eq(st, C128_SUCCESS, "group %d: %s", groups[g], c128_status_string(st));
    char what[64];
    snprintf(what, sizeof what, "state, group %d vs 1", groups[g]);
    check_rows_equal(a.state, state, state_rows, z.state_row, what, r.seed);
    snprintf(what, sizeof what, "output, group %d vs 1", groups[g]);
    check_rows_equal(a.output, out, WIDE_BATCH, z.out_row, what, r.seed);
    free((void *)a.state), free(a.output);
  }
  cr_assert(memcmp(state, state0, state_rows * z.state_row) != 0, "the decode wrote nothing");
  free(state), free(input), free(ape), free(out), free(state0), free(out0);
}

#define wide_f32 (*instance(C128_INSTANCE_h128_f32_f32_f32))
#define wide_bf16 (*instance(C128_INSTANCE_h256_bf16_f32_bf16))
Test(cpu, decode_groups_agree) {
  decode_groups_agree(&wide_f32, BACKEND_CPU);
  decode_groups_agree(&wide_bf16, BACKEND_CPU);
}
Test(gpu, decode_groups_agree) {
  decode_groups_agree(&wide_f32, BACKEND_GPU);
  decode_groups_agree(&wide_bf16, BACKEND_GPU);
}

/* Block-windows per SM slot when every request of the batch is at a boundary: waves of 2 blocks
   per SM, each block folding its group's windows one after another. */
static int64_t all_boundary_cost(int64_t batch, int64_t group, int64_t sms) {
  if (group < 1 || sms < 1) return INT64_MAX;
  const int64_t blocks = (batch + group - 1) / group * 8, wave = 2 * sms;
  return (blocks + wave - 1) / wave * group;
}

/* The automatic decode group never costs more than one request per block when every request is
   at a boundary, and it is the largest group that cheap. */
Test(cpu, decode_group_size_never_costs_more) {
  for (int64_t sms = 1; sms <= 200; sms += 7)
    for (int64_t batch = 1; batch <= 5000; batch += 1 + batch / 8) {
      const int32_t g = c128_decode_group_size(batch, 512, (int32_t)sms);
      cr_assert(g >= 1 && g <= C128_MAX_DECODE_GROUP);
      cr_assert_leq(all_boundary_cost(batch, g, sms), all_boundary_cost(batch, 1, sms),
                    "batch %lld, %lld SMs: group %d", (long long)batch, (long long)sms, g);
      for (int32_t h = g + 1; h <= C128_MAX_DECODE_GROUP; ++h)
        cr_assert_gt(all_boundary_cost(batch, h, sms), all_boundary_cost(batch, g, sms),
                     "batch %lld, %lld SMs: group %d is as cheap as %d", (long long)batch, (long long)sms, h, g);
    }
  cr_assert_eq(c128_decode_group_size(1024, 512, 132), C128_MAX_DECODE_GROUP);
  cr_assert_eq(c128_decode_group_size(1, 512, 132), 1);
}

/* The prefill rule is the same rule over compress plans, with its own limit. */
Test(cpu, prefill_group_size_never_costs_more) {
  for (int64_t sms = 1; sms <= 200; sms += 13)
    for (int64_t n = 1; n <= 70000; n += 1 + n / 4) {
      const int32_t g = c128_prefill_group_size(n, 512, (int32_t)sms);
      cr_assert(g >= 1 && g <= C128_MAX_PREFILL_GROUP);
      cr_assert_leq(all_boundary_cost(n, g, sms), all_boundary_cost(n, 1, sms), "%lld plans, %lld SMs: group %d",
                    (long long)n, (long long)sms, g);
    }
  cr_assert_eq(c128_prefill_group_size(256, 512, 132), 8); /* 32K tokens: 2048 blocks, 8 windows each in one wave */
}
