/* One test per status: every bad argument is refused on the host with its own status, and
   nothing is launched or written. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum { D = 128, PAGES = 2, BATCH = 2 };

/* A valid decode call of h128_f32_f32_f32 over host buffers, and snapshots to prove that a
   refused call wrote nothing. */
typedef struct fixture {
  float state[PAGES * 128 * 2 * D], input[BATCH * 2 * D], ape[128 * D], out[BATCH * D];
  float state0[PAGES * 128 * 2 * D], out0[BATCH * D];
  c128_decode_plan plans[BATCH];
  c128_compress_plan cplans[BATCH];
  c128_write_plan wplans[BATCH];
  c128_decode_args d;
  c128_prefill_args p;
} fixture;

static fixture *fx_make(void) {
  fixture *f = aligned_alloc(64, sizeof(fixture));
  cr_assert_not_null(f);
  rng r = rng_fresh();
  for (size_t i = 0; i < sizeof f->state / sizeof(float); ++i) f->state[i] = rng_randn(&r);
  for (size_t i = 0; i < sizeof f->input / sizeof(float); ++i) f->input[i] = rng_randn(&r);
  for (size_t i = 0; i < sizeof f->ape / sizeof(float); ++i) f->ape[i] = rng_randn(&r);
  poison(f->out, sizeof f->out);
  memcpy(f->state0, f->state, sizeof f->state);
  memcpy(f->out0, f->out, sizeof f->out);
  f->plans[0] = (c128_decode_plan){128, 127, 0, 0};
  f->plans[1] = (c128_decode_plan){130, 128 + 1, 1, 1};
  f->cplans[0] = (c128_compress_plan){128, 1, 126, 0, 0};
  f->cplans[1] = (c128_compress_plan){C128_INVALID_ID, 0, 0, -1, -1};
  f->wplans[0] = (c128_write_plan){0, 5};
  f->wplans[1] = (c128_write_plan){1, 6};
  memset(&f->d, 0, sizeof f->d);
  f->d.head_dim = D;
  f->d.state = f->state, f->d.state_pages = PAGES, f->d.input = f->input, f->d.ape = f->ape;
  f->d.output = f->out, f->d.output_rows = BATCH, f->d.plans = f->plans, f->d.batch = BATCH;
  memset(&f->p, 0, sizeof f->p);
  f->p.head_dim = D;
  f->p.state = f->state, f->p.state_pages = PAGES, f->p.input = f->input, f->p.input_rows = BATCH;
  f->p.ape = f->ape, f->p.output = f->out, f->p.output_rows = BATCH;
  f->p.compress_plans = f->cplans, f->p.num_compress = BATCH, f->p.write_plans = f->wplans, f->p.num_write = BATCH;
  return f;
}

/* The call was refused with `want` and left state and output alone. */
static void expect_refused(fixture *f, c128_status got, c128_status want) {
  cr_assert_eq(got, want, "got %s, want %s", c128_status_string(got), c128_status_string(want));
  cr_assert(memcmp(f->state, f->state0, sizeof f->state) == 0, "a refused call wrote the state");
  cr_assert(memcmp(f->out, f->out0, sizeof f->out) == 0, "a refused call wrote the output");
  free(f);
}

Test(cpu, fixture_is_valid) { /* the baseline the error tests perturb really runs */
  fixture *f = fx_make();
  cr_assert_eq(c128_decode_host(&f->d, NULL), C128_SUCCESS);
  cr_assert_eq(c128_prefill_host(&f->p, NULL), C128_SUCCESS);
  cr_assert(memcmp(f->state, f->state0, sizeof f->state) != 0, "the valid calls must write the state");
  free(f);
}

Test(cpu, status_strings_are_distinct) {
  static const c128_status all[] = {
#define AS_VALUE(name, value, message) name,
      C128_STATUS_LIST(AS_VALUE)
#undef AS_VALUE
  };
  const size_t n = sizeof all / sizeof all[0];
  for (size_t i = 0; i < n; ++i)
    for (size_t j = i + 1; j < n; ++j) cr_assert(strcmp(c128_status_string(all[i]), c128_status_string(all[j])) != 0);
  cr_assert_str_eq(c128_status_string((c128_status)999), "unknown c128_status");
}

Test(cpu, error_null_pointer) {
  fixture *f = fx_make();
  cr_assert_eq(c128_decode_host(NULL, NULL), C128_ERROR_NULL_POINTER);
  f->d.ape = NULL;
  expect_refused(f, c128_decode_host(&f->d, NULL), C128_ERROR_NULL_POINTER);
  f = fx_make();
  f->p.write_plans = NULL;
  expect_refused(f, c128_prefill_host(&f->p, NULL), C128_ERROR_NULL_POINTER);
}

/* A call with nothing to do succeeds without looking at its tensors (ERRORS in c128.cuh), and
   the same tensors are refused as soon as there is work. Output aliasing the state: */
Test(cpu, empty_calls_ignore_their_tensors) {
  fixture *f = fx_make();
  f->d.output = f->state, f->d.ape = NULL, f->d.batch = 0;
  expect_refused(f, c128_decode_host(&f->d, NULL), C128_SUCCESS); /* and it wrote nothing */
  f = fx_make();
  f->d.output = f->state;
  expect_refused(f, c128_decode_host(&f->d, NULL), C128_ERROR_ALIASED);
  f = fx_make();
  f->p.output = f->state, f->p.compress_plans = NULL, f->p.write_plans = NULL;
  f->p.num_compress = 0, f->p.num_write = 0;
  expect_refused(f, c128_prefill_host(&f->p, NULL), C128_SUCCESS);
  f = fx_make();
  f->p.output = f->state;
  expect_refused(f, c128_prefill_host(&f->p, NULL), C128_ERROR_ALIASED);
}

Test(cpu, error_misaligned) {
  fixture *f = fx_make();
  f->d.input = (const char *)f->input + 4; /* f32 pairs need 8 bytes */
  expect_refused(f, c128_decode_host(&f->d, NULL), C128_ERROR_MISALIGNED);
  f = fx_make();
  f->p.compress_plans = (const c128_compress_plan *)((const char *)f->cplans + 8);
  expect_refused(f, c128_prefill_host(&f->p, NULL), C128_ERROR_MISALIGNED);
}

Test(cpu, error_unsupported_instance) {
  fixture *f = fx_make();
  f->d.head_dim = 96;
  expect_refused(f, c128_decode_host(&f->d, NULL), C128_ERROR_UNSUPPORTED_INSTANCE);
  f = fx_make();
  f->p.output_dtype = (c128_dtype)2; /* CUDA_R_16F: not in the table */
  expect_refused(f, c128_prefill_host(&f->p, NULL), C128_ERROR_UNSUPPORTED_INSTANCE);
}

Test(cpu, error_instance_mismatch) {
  fixture *f = fx_make();
  expect_refused(f, c128_decode_host_h256_f32_f32_f32(&f->d, NULL), C128_ERROR_INSTANCE_MISMATCH);
  f = fx_make();
  expect_refused(f, c128_prefill_host_h128_bf16_f32_f32(&f->p, NULL), C128_ERROR_INSTANCE_MISMATCH);
}

Test(cpu, error_negative_size) {
  fixture *f = fx_make();
  f->d.batch = -1;
  expect_refused(f, c128_decode_host(&f->d, NULL), C128_ERROR_NEGATIVE_SIZE);
  f = fx_make();
  f->p.num_write = -3;
  expect_refused(f, c128_prefill_host(&f->p, NULL), C128_ERROR_NEGATIVE_SIZE);
  f = fx_make();
  f->p.state_pages = -1;
  expect_refused(f, c128_prefill_host(&f->p, NULL), C128_ERROR_NEGATIVE_SIZE);
}

Test(cpu, error_too_many_rows) {
  fixture *f = fx_make();
  f->p.input_rows = C128_MAX_PREFILL_ROWS + 1;
  expect_refused(f, c128_prefill_host(&f->p, NULL), C128_ERROR_TOO_MANY_ROWS);
}

Test(cpu, error_too_many_plans) {
  fixture *f = fx_make();
  f->p.num_compress = C128_MAX_PREFILL_ROWS + 1;
  expect_refused(f, c128_prefill_host(&f->p, NULL), C128_ERROR_TOO_MANY_PLANS);
  f = fx_make();
  f->d.batch = INT64_C(1) << 40;
  expect_refused(f, c128_decode_host(&f->d, NULL), C128_ERROR_TOO_MANY_PLANS);
}

Test(cpu, error_output_too_small) {
  fixture *f = fx_make();
  f->d.output_rows = BATCH - 1;
  expect_refused(f, c128_decode_host(&f->d, NULL), C128_ERROR_OUTPUT_TOO_SMALL);
}

Test(cpu, error_state_too_large) {
  fixture *f = fx_make();
  f->d.state_pages = INT64_MAX / 2;
  expect_refused(f, c128_decode_host(&f->d, NULL), C128_ERROR_STATE_TOO_LARGE);
}

Test(cpu, error_invalid_layout) {
  fixture *f = fx_make();
  f->d.layout.size = 2, f->d.layout.rank = 2;
  expect_refused(f, c128_decode_host(&f->d, NULL), C128_ERROR_INVALID_LAYOUT);
  f = fx_make();
  f->p.layout.size = -1;
  expect_refused(f, c128_prefill_host(&f->p, NULL), C128_ERROR_INVALID_LAYOUT);
}

Test(cpu, error_launch_failed_without_a_device) {
  if (gpu_present()) cr_skip_test("a GPU is present: the launch would succeed");
  fixture *f = fx_make();
  expect_refused(f, c128_decode(&f->d, 0), C128_ERROR_LAUNCH_FAILED);
}

Test(gpu, error_launch_failed_after_a_device_fault) {
  require_backend(BACKEND_GPU);
  fixture *f = fx_make();
  c128_decode_args d = f->d;
  void *dinput, *dape, *dout, *dplans;
  cr_assert_eq(cudaMalloc(&dinput, sizeof f->input), cudaSuccess);
  cr_assert_eq(cudaMalloc(&dape, sizeof f->ape), cudaSuccess);
  cr_assert_eq(cudaMalloc(&dout, sizeof f->out), cudaSuccess);
  cr_assert_eq(cudaMalloc(&dplans, sizeof f->plans), cudaSuccess);
  cudaMemcpy(dplans, f->plans, sizeof f->plans, cudaMemcpyHostToDevice);
  /* A state pointer that is not device memory: the kernel faults, the context is lost, and the
     next launch must report the failure (this test runs in its own process). */
  d.input = dinput, d.ape = dape, d.output = dout, d.plans = dplans;
  d.state = (void *)(uintptr_t)0x1000;
  cr_assert_eq(c128_decode(&d, 0), C128_SUCCESS, "the first launch is accepted");
  cr_assert_neq(cudaDeviceSynchronize(), cudaSuccess, "the bogus state pointer must fault");
  cr_assert_eq(c128_decode(&d, 0), C128_ERROR_LAUNCH_FAILED);
  free(f);
}

Test(cpu, error_invalid_group) {
  fixture *f = fx_make();
  f->d.requests_per_block = C128_MAX_DECODE_GROUP + 1;
  expect_refused(f, c128_decode_host(&f->d, NULL), C128_ERROR_INVALID_GROUP);
  f = fx_make();
  f->d.requests_per_block = -1;
  expect_refused(f, c128_decode_host(&f->d, NULL), C128_ERROR_INVALID_GROUP);
  f = fx_make();
  f->p.windows_per_block = C128_MAX_PREFILL_GROUP + 1;
  expect_refused(f, c128_prefill_host(&f->p, NULL), C128_ERROR_INVALID_GROUP);
  f = fx_make();
  f->p.windows_per_block = INT32_MIN;
  expect_refused(f, c128_prefill_host(&f->p, NULL), C128_ERROR_INVALID_GROUP);
}

/* The race checker's shadow is capped by checker_limit_bytes: past the cap the launch stops with
   C128_ERROR_OUT_OF_MEMORY, whatever the machine's memory. */
Test(cpu, error_out_of_memory_in_the_race_checker) {
  fixture *f = fx_make();
  c128_host_options o = {0};
  o.check_races = 1, o.checker_limit_bytes = 1000; /* less than one piece of shadow */
  cr_assert_eq(c128_decode_host(&f->d, &o), C128_ERROR_OUT_OF_MEMORY);
  o.checker_limit_bytes = 0;
  memcpy(f->state, f->state0, sizeof f->state);
  cr_assert_eq(c128_decode_host(&f->d, &o), C128_SUCCESS);
  free(f);
}

/* The shadow follows what a launch touches, not the buffer: a state of 2^36 pages (2^51 bytes
   at head_dim 128) whose valid plans touch two pages checks within a 64 MiB cap. The state is the
   last buffer of one allocation, so its claimed extent overlaps none of the others. */
Test(cpu, race_checker_shadow_follows_the_touched_rows) {
  fixture *f = fx_make();
  typedef struct tensors {
    c128_decode_plan plans[BATCH];
    float input[BATCH * 2 * D], ape[128 * D], out[BATCH * D];
    float state[PAGES * 128 * 2 * D];
  } tensors;
  tensors *t = aligned_alloc(64, sizeof(tensors));
  cr_assert_not_null(t);
  memcpy(t->plans, f->plans, sizeof t->plans), memcpy(t->input, f->input, sizeof t->input);
  memcpy(t->ape, f->ape, sizeof t->ape), memcpy(t->state, f->state, sizeof t->state);
  poison(t->out, sizeof t->out);
  c128_decode_args d = f->d;
  d.state = t->state, d.input = t->input, d.ape = t->ape, d.output = t->out, d.plans = t->plans;
  d.state_pages = INT64_C(1) << 36;
  c128_host_options o = {0};
  o.check_races = 1, o.checker_limit_bytes = 64u << 20;
  cr_assert_eq(c128_decode_host(&d, &o), C128_SUCCESS);
  cr_assert(memcmp(t->state, f->state, sizeof t->state) != 0, "the decode wrote nothing");
  free(t);
  free(f);
}

Test(cpu, error_race_detected) {
  fixture *f = fx_make();
  f->wplans[1].write_loc = f->wplans[0].write_loc; /* two writes to one slot in one launch */
  f->p.num_compress = 0;
  char msg[256] = "";
  c128_host_options o = {0};
  o.check_races = 1, o.message = msg, o.message_size = sizeof msg;
  cr_assert_eq(c128_prefill_host(&f->p, &o), C128_ERROR_RACE_DETECTED);
  cr_assert(strstr(msg, "write after write") != NULL, "message: %s", msg);
  free(f);
}
