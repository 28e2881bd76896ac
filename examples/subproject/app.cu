/* app: a program that takes c128 from outside its own tree (a copied header, a Meson subproject
   or an installed header found through pkg-config).

   One request decodes 128 tokens, one per step; the 128th completes a window, and the
   compressed vector is checked against a double-precision softmax pooling computed here from
   the token history. Runs the CUDA kernels when a GPU is present, the host runner otherwise.

   Two ways to build it, both with bare nvcc:
     nvcc -DC128_STATIC app.cu -o app     one translation unit: the implementation is static here
     nvcc app.cu impl.cu -o app           impl.cu holds the implementation, this file declarations */
#define C128_INSTANCES(X) C128_ROW(X, 512, f32, f32, f32)
#include "c128.cuh"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { D = 512, ROW = 2 * D, W = C128_WINDOW };

/* Channel c of token pos: kv in [-1, 1), score in [-8, 8) (a hash, so the history is known). */
static float token(int pos, int c) {
  uint32_t h = (uint32_t)pos * 2654435761u ^ (uint32_t)c * 2246822519u;
  h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
  return (c < D ? 2.0f : 16.0f) * ((float)(h >> 8) / 16777216.0f - 0.5f);
}

static void check_cuda(cudaError_t e, const char *what) {
  if (e != cudaSuccess) {
    fprintf(stderr, "app: %s: %s\n", what, cudaGetErrorString(e));
    exit(1);
  }
}

static void check(c128_status s, const char *what) {
  if (s != C128_SUCCESS) {
    fprintf(stderr, "app: %s: %s\n", what, c128_status_string(s));
    exit(1);
  }
}

int main(void) {
  static float state[W * ROW], input[ROW], ape[W * D], out[D];
  for (int i = 0; i < W * D; ++i) ape[i] = 0.25f * sinf(0.37f * (float)i);
  int gpus = 0;
  const int gpu = cudaGetDeviceCount(&gpus) == cudaSuccess && gpus > 0;

  c128_decode_args a = {}; /* zero-initialised: every field not set below is 0 */
  a.head_dim = D, a.state_dtype = C128_F32, a.input_dtype = C128_F32, a.output_dtype = C128_F32;
  a.state_pages = 1, a.output_rows = 1, a.batch = 1;
  c128_decode_plan plan, *plan_dev = NULL;
  float *input_dev = NULL;
  if (gpu) {
    check_cuda(cudaMalloc(&a.state, sizeof state), "cudaMalloc");
    check_cuda(cudaMalloc(&input_dev, sizeof input), "cudaMalloc");
    check_cuda(cudaMalloc((void **)&a.ape, sizeof ape), "cudaMalloc");
    check_cuda(cudaMalloc(&a.output, sizeof out), "cudaMalloc");
    check_cuda(cudaMalloc(&plan_dev, sizeof plan), "cudaMalloc");
    check_cuda(cudaMemcpy((void *)a.ape, ape, sizeof ape, cudaMemcpyHostToDevice), "cudaMemcpy");
    a.input = input_dev, a.plans = plan_dev;
  } else {
    a.state = state, a.input = input, a.ape = ape, a.output = out, a.plans = &plan;
  }

  c128_ring ring = {}; /* legacy layout: one page per request, page = pool index */
  ring.state_pages = 1;
  c128_request req = {0, 0, 1};
  for (int pos = 0; pos < W; ++pos) {
    req.seq_len = pos + 1;
    check(c128_plan_decode(&ring, &req, 1, &plan), "c128_plan_decode");
    for (int c = 0; c < ROW; ++c) input[c] = token(pos, c);
    if (gpu) {
      check_cuda(cudaMemcpy(input_dev, input, sizeof input, cudaMemcpyHostToDevice), "cudaMemcpy");
      check_cuda(cudaMemcpy(plan_dev, &plan, sizeof plan, cudaMemcpyHostToDevice), "cudaMemcpy");
      check(c128_decode(&a, 0), "c128_decode");
    } else {
      check(c128_decode_host(&a, NULL), "c128_decode_host");
    }
  }
  if (gpu) check_cuda(cudaMemcpy(out, a.output, sizeof out, cudaMemcpyDeviceToHost), "cudaMemcpy");

  /* out[c] = sum_j softmax_j(score_j[c] + ape[j][c]) * kv_j[c], in double. */
  double err = 0.0, norm = 0.0;
  for (int c = 0; c < D; ++c) {
    double m = -INFINITY, sum = 0.0, acc = 0.0;
    for (int j = 0; j < W; ++j) m = fmax(m, (double)token(j, D + c) + ape[j * D + c]);
    for (int j = 0; j < W; ++j) {
      const double e = exp((double)token(j, D + c) + ape[j * D + c] - m);
      sum += e, acc += e * token(j, c);
    }
    err += (out[c] - acc / sum) * (out[c] - acc / sum), norm += acc / sum * (acc / sum);
  }
  const double rel = sqrt(err / norm);
#ifdef C128_STATIC
  const char *mode = "C128_STATIC";
#else
  const char *mode = "C128_IMPLEMENTATION in another translation unit";
#endif
  printf("app (%s, %s): one window of 128 decoded tokens, rel L2 error %.1e vs fp64: %s\n", mode,
         gpu ? "GPU" : "host runner", rel, rel <= 1e-5 ? "ok" : "MISMATCH");
  if (gpu) cudaFree(a.state), cudaFree(input_dev), cudaFree((void *)a.ape), cudaFree(a.output), cudaFree(plan_dev);
  return rel <= 1e-5 ? 0 : 1;
}
