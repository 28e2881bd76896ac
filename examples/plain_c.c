/* plain_c: the library from a C11 program, through its C ABI.

   This file is C, compiled by gcc; the implementation is the one .cu file examples/c128_impl.cu,
   compiled by nvcc. Linking a C main against it needs cudart, and libstdc++ because the
   implementation is C++ (what the README's link line says):

     nvcc -O3 -gencode arch=compute_90,code=sm_90 -Xcompiler=-ffp-contract=off -I. -c examples/c128_impl.cu -o c128_impl.o
     gcc -std=c11 -Wall -Wextra -Wpedantic -Werror -I. -I/usr/local/cuda/include examples/plain_c.c \
         c128_impl.o -L/usr/local/cuda/lib64 -lcudart -lstdc++ -lm -o plain_c

   (.ci/steps/40-plain-c.sh runs these two lines as written here.)

   What it shows: the list of compiled instances, statuses and their strings, bf16 storage from C
   (there is no bf16 type in C: tensors are void * plus a dtype), the prefill planner, and one
   typed entry point, on the GPU when there is one and on the host runner otherwise (or with
   --cpu). One request of 300 bf16 tokens is compressed into two windows, checked against a
   double-precision computation, and its trailing 44 tokens must be in the state. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "c128.cuh"

enum { D = 128, ROW = 2 * D, W = C128_WINDOW, TOKENS = 300, PAGES = 2, POOL_INDEX = 1 };

/* Every example is one file a user may copy alone, so each spells out its own exit-on-error
   CHECK (c128_status) and CUDA (cudaError_t) macros rather than sharing a header. */
#define CHECK(call)                                               \
  do {                                                            \
    const c128_status s_ = (call);                                \
    if (s_ != C128_SUCCESS) {                                     \
      fprintf(stderr, "%s: %s\n", #call, c128_status_string(s_)); \
      exit(1);                                                    \
    }                                                             \
  } while (0)
#define CUDA(call)                                                \
  do {                                                            \
    const cudaError_t e_ = (call);                                \
    if (e_ != cudaSuccess) {                                      \
      fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e_)); \
      exit(1);                                                    \
    }                                                             \
  } while (0)

/* Token t, channel c: kv in [-1, 1), score in [-8, 8), as float before the bf16 rounding. */
static float token(int t, int c) {
  unsigned h = (unsigned)t * 2654435761u ^ (unsigned)c * 2246822519u;
  h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
  return (c < D ? 2.0f : 16.0f) * ((float)(h >> 8) / 16777216.0f - 0.5f);
}

/* A host buffer on the GPU (a copy) or as is (host runner). */
static void *place(int gpu, void *host, size_t bytes) {
  void *dev = host;
  if (gpu) {
    CUDA(cudaMalloc(&dev, bytes));
    CUDA(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice));
  }
  return dev;
}

int main(int argc, char **argv) {
  int gpus = 0;
  const int gpu = !(argc > 1 && strcmp(argv[1], "--cpu") == 0) && cudaGetDeviceCount(&gpus) == cudaSuccess && gpus > 0;

  /* 1. What was compiled, and what an instance looks like. */
  const int h128 = c128_find_instance(D, C128_F32, C128_BF16, C128_F32);
  c128_instance_info info;
  CHECK(c128_instance_info_get(h128, &info));
  printf("%d instances compiled; using %s (%d blocks per window, rows of %lld elements)\n", c128_instance_count(),
         info.name, info.num_split, (long long)info.row_elems);

  /* 2. Every entry point returns a status, checked on the host before any launch. */
  c128_prefill_args bad = {0};
  bad.head_dim = 96;
  const c128_status refused = c128_prefill_host(&bad, NULL);
  printf("head_dim 96 -> %s\n", c128_status_string(refused));
  if (refused != C128_ERROR_UNSUPPORTED_INSTANCE || c128_decode(NULL, 0) != C128_ERROR_NULL_POINTER) return 1;

  /* 3. Tensors: bf16 input as uint16_t bit patterns, f32 state, f32 ape and output. */
  static uint16_t input[TOKENS * ROW];
  static float state[PAGES * W * ROW], ape[W * D], out[TOKENS / W * D];
  for (int i = 0; i < TOKENS * ROW; ++i) input[i] = c128_bf16_from_float(token(i / ROW, i % ROW));
  for (int i = 0; i < W * D; ++i) ape[i] = 0.25f * sinf(0.37f * (float)i);
  for (int i = 0; i < PAGES * W * ROW; ++i) state[i] = NAN;

  /* 4. Plan the batch: one request at pool index 1, 300 new tokens, legacy layout. */
  c128_ring ring = {0};
  ring.state_pages = PAGES;
  const c128_request request = {POOL_INDEX, TOKENS, TOKENS};
  static c128_compress_plan compress[TOKENS];
  static c128_write_plan write[TOKENS];
  c128_prefill_plans plans = {0};
  plans.compress = compress, plans.write = write, plans.capacity = TOKENS;
  CHECK(c128_plan_prefill(&ring, &request, 1, 0, &plans));

  /* 5. Run it through the typed entry point of the instance. */
  c128_prefill_args a = {0};
  a.head_dim = D, a.state_dtype = C128_F32, a.input_dtype = C128_BF16, a.output_dtype = C128_F32;
  a.state = place(gpu, state, sizeof state);
  a.state_pages = PAGES;
  a.input = place(gpu, input, sizeof input);
  a.input_rows = TOKENS;
  a.ape = place(gpu, ape, sizeof ape);
  a.output = place(gpu, out, sizeof out);
  a.output_rows = plans.num_compress;
  a.compress_plans = place(gpu, compress, (size_t)plans.num_compress * sizeof compress[0]);
  a.num_compress = plans.num_compress;
  a.write_plans = place(gpu, write, (size_t)plans.num_write * sizeof write[0]);
  a.num_write = plans.num_write;
  if (gpu) {
    CHECK(c128_prefill_h128_f32_bf16_f32(&a, 0));
    CUDA(cudaMemcpy(out, a.output, sizeof out, cudaMemcpyDeviceToHost));
    CUDA(cudaMemcpy(state, a.state, sizeof state, cudaMemcpyDeviceToHost));
    void *buffers[] = {a.state,  (void *)a.input,          (void *)a.ape,
                       a.output, (void *)a.compress_plans, (void *)a.write_plans};
    for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; ++i) CUDA(cudaFree(buffers[i]));
  } else {
    CHECK(c128_prefill_host_h128_f32_bf16_f32(&a, NULL));
  }

  /* 6. Check: each window against double precision over the bf16 tokens as stored. */
  double worst = 0.0;
  for (int w = 0; w < plans.num_compress; ++w) {
    double err = 0.0, norm = 0.0;
    for (int c = 0; c < D; ++c) {
      double m = -INFINITY, sum = 0.0, acc = 0.0;
      for (int j = 0; j < W; ++j) {
        const uint16_t *row = input + (size_t)(w * W + j) * ROW;
        m = fmax(m, (double)c128_bf16_to_float(row[D + c]) + ape[j * D + c]);
      }
      for (int j = 0; j < W; ++j) {
        const uint16_t *row = input + (size_t)(w * W + j) * ROW;
        const double e = exp((double)c128_bf16_to_float(row[D + c]) + ape[j * D + c] - m);
        sum += e, acc += e * c128_bf16_to_float(row[c]);
      }
      const double ref = acc / sum, diff = out[w * D + c] - ref;
      err += diff * diff, norm += ref * ref;
    }
    worst = fmax(worst, sqrt(err / norm));
  }
  /* The open window's 44 tokens, widened to f32, are slots 0..43 of page POOL_INDEX. */
  int persisted = 1;
  for (int t = TOKENS / W * W; t < TOKENS; ++t)
    for (int c = 0; c < ROW; ++c)
      persisted &= state[(POOL_INDEX * W + t % W) * ROW + c] == c128_bf16_to_float(input[t * ROW + c]);

  const int ok = plans.num_compress == TOKENS / W && plans.num_write == TOKENS % W && worst <= 1e-5 && persisted;
  printf("path: %s; %lld windows, max rel L2 error %.1e; %lld tokens persisted%s: %s\n",
         gpu ? "GPU (CUDA kernels)" : "CPU (host runner)", (long long)plans.num_compress, worst,
         (long long)plans.num_write, persisted ? "" : " WRONGLY", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
