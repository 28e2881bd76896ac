/* quickstart: the library's main job end to end, in plain C.

   Three requests arrive: A with 50 prompt tokens (ends mid-window), B with 128 (completes a
   window), C with 300 (two windows and a partial one). One prefill batch compresses their
   complete windows and persists their partial ones; then decode steps add one token to every
   request until each has completed one more window. Every compressed vector is checked against
   an fp64 reference computed from each request's token history alone.

   Runs the CUDA kernels when a GPU is present, the host runner otherwise (or with --cpu). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ref/reference.h"
#include "c128.cuh"

enum { HEAD_DIM = 512, ROW = 2 * HEAD_DIM, NUM_REQ = 3, MAX_TOKENS = 512 };

/* A token's kv | score row, a pure function of (request, position): the history for the oracle. */
static void make_token(int req, int pos, float *row) {
  uint64_t s = (uint64_t)req * 1000003u + (uint64_t)pos * 7919u + 1u;
  for (int c = 0; c < ROW; ++c) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const float u = (float)((s >> 40) + 1) / (float)(1 << 24); /* (0, 1] */
    row[c] = (c < HEAD_DIM ? 2.0f : 8.0f) * (u - 0.5f);
  }
}

typedef struct device_buffers {
  void *state, *input, *output, *plans_a, *plans_b;
  float *ape;
} device_buffers;

static int use_gpu;
static device_buffers dev;

/* The larger error; NaN counts as the worst. */
static double worse(double a, double b) { return isnan(a) || a > b ? a : b; }

/* Relative L2 error of one compressed vector against the oracle. */
static double check_window(const float *out, int req, int window, const float *ape) {
  static float rows[REF_WINDOW][ROW];
  const float *ptr[REF_WINDOW];
  double ref[HEAD_DIM];
  for (int j = 0; j < REF_WINDOW; ++j) make_token(req, window * REF_WINDOW + j, rows[j]), ptr[j] = rows[j];
  ref_window(HEAD_DIM, ptr, ape, ref);
  return ref_rel_l2(HEAD_DIM, out, ref, NULL);
}

/* Every example is one file a user may copy alone, so each spells out its own exit-on-error
   CHECK (c128_status) and CUDA (cudaError_t) macros rather than sharing a header. */
#define CHECK(call)                                                       \
  do {                                                                    \
    c128_status st_ = (call);                                             \
    if (st_ != C128_SUCCESS) {                                            \
      fprintf(stderr, "%s failed: %s\n", #call, c128_status_string(st_)); \
      exit(1);                                                            \
    }                                                                     \
  } while (0)
#define CUDA(call)                                                       \
  do {                                                                   \
    cudaError_t e_ = (call);                                             \
    if (e_ != cudaSuccess) {                                             \
      fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(e_)); \
      exit(1);                                                           \
    }                                                                    \
  } while (0)

static void *upload(void *dst, const void *src, size_t bytes) {
  if (!use_gpu) return (void *)src;
  CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  return dst;
}

int main(int argc, char **argv) {
  int gpus = 0;
  use_gpu = !(argc > 1 && strcmp(argv[1], "--cpu") == 0) && cudaGetDeviceCount(&gpus) == cudaSuccess && gpus > 0;
  const int prompt[NUM_REQ] = {50, 128, 300};
  const int pool_index[NUM_REQ] = {2, 0, 1}; /* rows of the pool, not batch positions */
  const int64_t pages = 3;                   /* legacy layout: page = pool index */

  float *h_state = malloc((size_t)pages * REF_WINDOW * ROW * sizeof(float));
  float *h_input = malloc(MAX_TOKENS * (size_t)ROW * sizeof(float));
  float *h_output = malloc(MAX_TOKENS * (size_t)HEAD_DIM * sizeof(float));
  float h_ape[REF_WINDOW * HEAD_DIM];
  for (int i = 0; i < REF_WINDOW * HEAD_DIM; ++i) h_ape[i] = 0.25f * sinf(0.37f * (float)i);
  for (size_t i = 0; i < (size_t)pages * REF_WINDOW * ROW; ++i) h_state[i] = NAN; /* never read unwritten */
  c128_compress_plan compress[MAX_TOKENS];
  c128_write_plan write[MAX_TOKENS];
  c128_decode_plan decode[NUM_REQ];
  if (use_gpu) {
    CUDA(cudaMalloc(&dev.state, (size_t)pages * REF_WINDOW * ROW * sizeof(float)));
    CUDA(cudaMalloc(&dev.input, MAX_TOKENS * (size_t)ROW * sizeof(float)));
    CUDA(cudaMalloc(&dev.output, MAX_TOKENS * (size_t)HEAD_DIM * sizeof(float)));
    CUDA(cudaMalloc(&dev.plans_a, sizeof compress));
    CUDA(cudaMalloc(&dev.plans_b, sizeof write));
    CUDA(cudaMalloc((void **)&dev.ape, sizeof h_ape));
    CUDA(cudaMemcpy(dev.state, h_state, (size_t)pages * REF_WINDOW * ROW * sizeof(float), cudaMemcpyHostToDevice));
  }

  /* 1. Prefill: plan the batch, gather the new tokens in batch order, compress and persist. */
  c128_ring ring = {0}; /* legacy layout: R = 128, page = pool index */
  ring.state_pages = pages;
  c128_request req[NUM_REQ];
  int rows = 0;
  for (int i = 0; i < NUM_REQ; ++i) {
    req[i].pool_index = pool_index[i], req[i].seq_len = prompt[i], req[i].extend_len = prompt[i];
    for (int p = 0; p < prompt[i]; ++p) make_token(i, p, h_input + (size_t)rows++ * ROW);
  }
  c128_prefill_plans batch_plans = {0};
  batch_plans.compress = compress, batch_plans.write = write, batch_plans.capacity = rows;
  CHECK(c128_plan_prefill(&ring, req, NUM_REQ, 0, &batch_plans));

  c128_prefill_args a = {0};
  a.head_dim = HEAD_DIM;
  a.state_dtype = C128_F32, a.input_dtype = C128_F32, a.output_dtype = C128_F32;
  a.state = use_gpu ? dev.state : h_state;
  a.state_pages = pages;
  a.input = upload(dev.input, h_input, (size_t)rows * ROW * sizeof(float));
  a.input_rows = rows;
  a.ape = upload(dev.ape, h_ape, sizeof h_ape);
  a.output = use_gpu ? dev.output : h_output;
  a.output_rows = batch_plans.capacity;
  a.compress_plans = upload(dev.plans_a, compress, (size_t)batch_plans.num_compress * sizeof *compress);
  a.num_compress = batch_plans.num_compress;
  a.write_plans = upload(dev.plans_b, write, (size_t)batch_plans.num_write * sizeof *write);
  a.num_write = batch_plans.num_write;
  CHECK(use_gpu ? c128_prefill(&a, 0) : c128_prefill_host(&a, NULL));
  if (use_gpu)
    CUDA(cudaMemcpy(h_output, dev.output, (size_t)batch_plans.num_compress * HEAD_DIM * sizeof(float),
                    cudaMemcpyDeviceToHost));

  /* Which request and window each compress plan belongs to: plans are in (request, position) order. */
  double worst = 0.0, prefill_worst;
  int64_t k = 0;
  for (int i = 0; i < NUM_REQ; ++i)
    for (int w = 0; w < prompt[i] / REF_WINDOW; ++w, ++k) {
      worst = worse(check_window(h_output + k * HEAD_DIM, i, w, h_ape), worst);
    }
  printf("path: %s\n", use_gpu ? "GPU (CUDA kernels)" : "CPU (host runner)");
  printf("prefill: %d requests, %d tokens -> %lld windows compressed, %lld rows persisted, max rel err %.2e\n", NUM_REQ,
         rows, (long long)batch_plans.num_compress, (long long)batch_plans.num_write, worst);

  /* 2. Decode: one token per request per step until every request completed one more window. */
  int seq[NUM_REQ], steps = 0, emitted = 0;
  memcpy(seq, prompt, sizeof seq);
  prefill_worst = worst;
  worst = 0.0;
  const cudaStream_t stream = 0;
  for (int done = 0; !done; ++steps) {
    for (int i = 0; i < NUM_REQ; ++i) {
      req[i].seq_len = ++seq[i], req[i].extend_len = 1;
      make_token(i, seq[i] - 1, h_input + (size_t)i * ROW);
    }
    CHECK(c128_plan_decode(&ring, req, NUM_REQ, decode));
    /* The decode step's tensors: device copies on the GPU, the host arrays on the CPU. */
    void *const state = a.state, *const output = a.output;
    const void *const input = upload(dev.input, h_input, NUM_REQ * (size_t)ROW * sizeof(float));
    const float *const ape = a.ape;
    const c128_decode_plan *const plans = upload(dev.plans_a, decode, sizeof decode);
    c128_decode_args d = {0}; /* zero: unsharded state, no PDL, automatic grouping */
    d.head_dim = HEAD_DIM;
    d.state_dtype = C128_F32, d.input_dtype = C128_F32, d.output_dtype = C128_F32;
    d.state = state, d.state_pages = pages;     /* [pages, 128, 2 * HEAD_DIM] */
    d.input = input, d.batch = NUM_REQ;         /* row b: request b's new token */
    d.ape = ape;                                /* [128, HEAD_DIM], f32 */
    d.output = output, d.output_rows = NUM_REQ; /* row b written when request b completes a window */
    d.plans = plans;                            /* from c128_plan_decode */
    CHECK(use_gpu ? c128_decode(&d, stream) : c128_decode_host(&d, NULL));
    if (use_gpu) CUDA(cudaMemcpy(h_output, dev.output, NUM_REQ * HEAD_DIM * sizeof(float), cudaMemcpyDeviceToHost));
    done = 1;
    for (int i = 0; i < NUM_REQ; ++i) {
      if (seq[i] % REF_WINDOW == 0) { /* this step completed a window of request i */
        worst = worse(check_window(h_output + (size_t)i * HEAD_DIM, i, seq[i] / REF_WINDOW - 1, h_ape), worst);
        ++emitted;
      }
      done &= seq[i] / REF_WINDOW > prompt[i] / REF_WINDOW;
    }
  }
  printf("decode: %d steps x %d requests -> %d windows compressed, max rel err %.2e\n", steps, NUM_REQ, emitted, worst);
  const int ok = worse(prefill_worst, worst) <= REF_TOL_REL_L2;
  printf("%s\n", ok ? "all windows match the fp64 reference (rel L2 <= 1e-5)" : "MISMATCH against the reference");
  if (use_gpu) {
    cudaFree(dev.state), cudaFree(dev.input), cudaFree(dev.output), cudaFree(dev.plans_a), cudaFree(dev.plans_b);
    cudaFree(dev.ape);
  }
  free(h_state), free(h_input), free(h_output);
  return ok ? 0 : 1;
}
