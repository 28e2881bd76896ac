/* pdl_chain: c128 decode between a producer and a consumer kernel, with programmatic dependent
   launch (PDL) on every launch, checked bit for bit against the same chain with PDL off.

   One decode step of a serving engine is three kernels on one stream:

     producer  writes the new token's kv | score row of every request (the fused GEMM upstream);
     c128      c128_decode(args with pdl = 1): state write, and at a window boundary the
               compressed vector into output row b;
     consumer  reads the output rows of the requests that completed a window (the next layer's
               RMSNorm, say) and stores them in a history indexed by (window, request).

   With PDL each kernel may start while its predecessor drains, so each must wait, with
   cudaGridDependencySynchronize() (PTX griddepcontrol.wait), before it touches memory that the
   predecessor may still use, and may let its own dependent launch early with
   cudaTriggerProgrammaticLaunchCompletion() (griddepcontrol.launch_dependents). The wait returns
   only when the predecessor grid has completed and its memory is visible; a dependent's wait
   therefore also covers everything before that predecessor. Where the waits sit:

     producer  computes its row in registers, WAITS, stores, triggers. The input buffer it
               overwrites was read by the previous step's decode. Here the consumer before it
               triggers only after its own wait, so that decode has finished anyway; the wait is
               what keeps the producer correct wherever its predecessor triggers;
     c128      waits inside the library before it reads plans, input or state and before its
               first state write; triggers when its stores are issued;
     consumer  may read what nothing in the chain writes (the plans) before it, WAITS before it
               reads the output rows, stores, triggers. Delete this wait and the PDL-on runs
               below no longer match (it reads output rows the decode has not written yet).

   The run: 64 requests that start at staggered steps decode 1151 tokens each (8 windows); the
   chain runs once with PDL off (the reference), then several times with PDL on; every history,
   output and state must equal the reference bit for bit. Needs a GPU of sm_90 or newer: without
   one it prints why and exits with 77, which Meson reports as a skipped test. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "c128.cuh"

namespace {

constexpr int D = 512;                 /* instance h512_f32_f32_f32, DeepSeek-V4's */
constexpr int ROW = C128_ROW_ELEMS(D); /* kv | score */
constexpr int W = C128_WINDOW;
constexpr int BATCH = 64;
constexpr int STEPS = 9 * W - 1;                   /* request b starts at step b, so all finish 8 windows */
constexpr int WINDOWS = (STEPS - (BATCH - 1)) / W; /* per request */
constexpr int PDL_RUNS = 5;
constexpr int THREADS = 128;

/* Every example is one file a user may copy alone, so each spells out its own exit-on-error
   macros rather than sharing a header. */
#define CUDA(call)                                                           \
  do {                                                                       \
    const cudaError_t e_ = (call);                                           \
    if (e_ != cudaSuccess) {                                                 \
      fprintf(stderr, "pdl_chain: %s: %s\n", #call, cudaGetErrorString(e_)); \
      exit(1);                                                               \
    }                                                                        \
  } while (0)
#define CHECK(call)                                                          \
  do {                                                                       \
    const c128_status s_ = (call);                                           \
    if (s_ != C128_SUCCESS) {                                                \
      fprintf(stderr, "pdl_chain: %s: %s\n", #call, c128_status_string(s_)); \
      exit(1);                                                               \
    }                                                                        \
  } while (0)

/* PDL device side: no-ops below sm_90, where launches are never programmatic. */
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cudaGridDependencySynchronize();
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cudaTriggerProgrammaticLaunchCompletion();
#endif
}

/* Token `pos` of request b, channel c: kv in [-1, 1), score in [-8, 8). */
__device__ float token(int b, int pos, int c) {
  unsigned h = (unsigned)b * 0x9E3779B1u ^ (unsigned)pos * 2654435761u ^ (unsigned)c * 2246822519u;
  h ^= h >> 15, h *= 2246822519u, h ^= h >> 13, h *= 3266489917u, h ^= h >> 16;
  return (c < D ? 2.0f : 16.0f) * ((float)(h >> 8) / 16777216.0f - 0.5f);
}

/* One block per request: the new token of step `step` (request b is at position step - b). */
__global__ void __launch_bounds__(THREADS) producer(float *input, int step) {
  const int b = blockIdx.x, pos = step - b;
  float row[ROW / THREADS];
#pragma unroll
  for (int i = 0; i < ROW / THREADS; ++i) row[i] = pos >= 0 ? token(b, pos, i * THREADS + threadIdx.x) : 0.0f;
  pdl_wait(); /* the previous decode may still read input: no store before this */
#pragma unroll
  for (int i = 0; i < ROW / THREADS; ++i) input[(size_t)b * ROW + i * THREADS + threadIdx.x] = row[i];
  pdl_trigger();
}

/* One block per request: RMSNorm of the output row of a request that completed a window. */
__global__ void __launch_bounds__(THREADS)
    consumer(const float *output, const c128_decode_plan *plans, float *history) {
  const int b = blockIdx.x;
  const c128_decode_plan plan = plans[b]; /* plans are written by no kernel: readable before the wait */
  const bool emitted = plan.seq_len != 0 && plan.seq_len % W == 0;
  __shared__ float partial[THREADS];
  pdl_wait();    /* the decode's output rows are complete and visible only after this */
  if (emitted) { /* block-uniform */
    float x[D / THREADS], ss = 0.0f;
#pragma unroll
    for (int i = 0; i < D / THREADS; ++i) x[i] = output[(size_t)b * D + i * THREADS + threadIdx.x], ss += x[i] * x[i];
    partial[threadIdx.x] = ss;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
      if ((int)threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
      __syncthreads();
    }
    const float scale = rsqrtf(partial[0] / D + 1e-6f);
    float *dst = history + ((size_t)(plan.seq_len / W - 1) * BATCH + b) * D;
#pragma unroll
    for (int i = 0; i < D / THREADS; ++i) dst[i * THREADS + threadIdx.x] = x[i] * scale;
  }
  pdl_trigger();
}

template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), int blocks, int pdl, cudaStream_t stream, Args... args) {
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = pdl;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(THREADS);
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  CUDA(cudaLaunchKernelEx(&config, kernel, args...));
}

struct buffers {
  float *state, *input, *ape, *output, *history;
  c128_decode_plan *plans; /* [STEPS][BATCH] */
};

struct result {
  float *history, *output, *state;
  float ms;
};

/* The whole chain, STEPS x (producer, decode, consumer), from a NaN state and history. */
result run(const buffers &dev, int pdl, cudaStream_t stream) {
  const size_t state_bytes = (size_t)BATCH * W * ROW * sizeof(float);
  const size_t history_bytes = (size_t)WINDOWS * BATCH * D * sizeof(float);
  CUDA(cudaMemsetAsync(dev.state, 0xFF, state_bytes, stream)); /* NaN: read before written shows */
  CUDA(cudaMemsetAsync(dev.output, 0xFF, (size_t)BATCH * D * sizeof(float), stream));
  CUDA(cudaMemsetAsync(dev.history, 0xFF, history_bytes, stream));
  cudaEvent_t start, stop;
  CUDA(cudaEventCreate(&start));
  CUDA(cudaEventCreate(&stop));
  CUDA(cudaEventRecord(start, stream));
  c128_decode_args d = {};
  d.head_dim = D;
  d.state_dtype = C128_F32, d.input_dtype = C128_F32, d.output_dtype = C128_F32;
  d.state = dev.state, d.state_pages = BATCH, d.input = dev.input, d.ape = dev.ape;
  d.output = dev.output, d.output_rows = BATCH, d.batch = BATCH;
  d.pdl = pdl;
  for (int step = 0; step < STEPS; ++step) {
    d.plans = dev.plans + (size_t)step * BATCH;
    launch(producer, BATCH, pdl, stream, dev.input, step);
    CHECK(c128_decode(&d, stream));
    launch(consumer, BATCH, pdl, stream, (const float *)dev.output, d.plans, dev.history);
  }
  CUDA(cudaEventRecord(stop, stream));
  result r = {(float *)malloc(history_bytes), (float *)malloc((size_t)BATCH * D * sizeof(float)),
              (float *)malloc(state_bytes), 0.0f};
  CUDA(cudaMemcpyAsync(r.history, dev.history, history_bytes, cudaMemcpyDeviceToHost, stream));
  CUDA(cudaMemcpyAsync(r.output, dev.output, (size_t)BATCH * D * sizeof(float), cudaMemcpyDeviceToHost, stream));
  CUDA(cudaMemcpyAsync(r.state, dev.state, state_bytes, cudaMemcpyDeviceToHost, stream));
  CUDA(cudaStreamSynchronize(stream));
  CUDA(cudaEventElapsedTime(&r.ms, start, stop));
  CUDA(cudaEventDestroy(start));
  CUDA(cudaEventDestroy(stop));
  return r;
}

bool same(const result &a, const result &b) {
  return memcmp(a.history, b.history, (size_t)WINDOWS * BATCH * D * sizeof(float)) == 0 &&
         memcmp(a.output, b.output, (size_t)BATCH * D * sizeof(float)) == 0 &&
         memcmp(a.state, b.state, (size_t)BATCH * W * ROW * sizeof(float)) == 0;
}

void release(result *r) { free(r->history), free(r->output), free(r->state); }

} // namespace

int main() {
  int gpus = 0, major = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) {
    printf("pdl_chain: SKIP: no CUDA device (PDL needs a GPU; the host runner has no launches to chain)\n");
    return 77;
  }
  CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  if (major < 9) {
    printf("pdl_chain: SKIP: programmatic dependent launch needs sm_90 or newer (device is sm_%d)\n", major * 10);
    return 77;
  }

  /* Plans of every step from the host planner: request b (pool index b, legacy layout) is a
     padding row until step b, then decodes one token per step. */
  static c128_decode_plan plans[STEPS][BATCH];
  c128_ring ring = {};
  ring.state_pages = BATCH;
  c128_request req[BATCH];
  for (int step = 0; step < STEPS; ++step) {
    for (int b = 0; b < BATCH; ++b) req[b] = {b, step >= b ? step - b + 1 : 0, 1};
    CHECK(c128_plan_decode(&ring, req, BATCH, plans[step]));
  }
  static float ape[W * D];
  for (int i = 0; i < W * D; ++i) ape[i] = 0.25f * sinf(0.37f * (float)i);

  buffers dev;
  CUDA(cudaMalloc(&dev.state, (size_t)BATCH * W * ROW * sizeof(float)));
  CUDA(cudaMalloc(&dev.input, (size_t)BATCH * ROW * sizeof(float)));
  CUDA(cudaMalloc(&dev.ape, sizeof ape));
  CUDA(cudaMalloc(&dev.output, (size_t)BATCH * D * sizeof(float)));
  CUDA(cudaMalloc(&dev.history, (size_t)WINDOWS * BATCH * D * sizeof(float)));
  CUDA(cudaMalloc(&dev.plans, sizeof plans));
  CUDA(cudaMemcpy(dev.ape, ape, sizeof ape, cudaMemcpyHostToDevice));
  CUDA(cudaMemcpy(dev.plans, plans, sizeof plans, cudaMemcpyHostToDevice));
  cudaStream_t stream;
  CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  result ref = run(dev, 0, stream);
  size_t finite = 0; /* every history entry was written: the reference itself is complete */
  for (size_t i = 0; i < (size_t)WINDOWS * BATCH * D; ++i) finite += isfinite(ref.history[i]);
  int failed = finite != (size_t)WINDOWS * BATCH * D;
  printf("PDL off: %d steps x 3 kernels, %d windows per request consumed, %.2f us per step\n", STEPS, WINDOWS,
         1e3f * ref.ms / STEPS);
  for (int i = 0; i < PDL_RUNS; ++i) {
    result r = run(dev, 1, stream);
    const bool equal = same(r, ref);
    failed |= !equal;
    printf("PDL on, run %d: %.2f us per step, history, output and state %s\n", i + 1, 1e3f * r.ms / STEPS,
           equal ? "bit-identical to PDL off" : "DIFFER from PDL off");
    release(&r);
  }
  release(&ref);
  cudaFree(dev.state), cudaFree(dev.input), cudaFree(dev.ape), cudaFree(dev.output), cudaFree(dev.history);
  cudaFree(dev.plans);
  cudaStreamDestroy(stream);
  printf("%s\n", failed ? "pdl_chain: FAILED" : "pdl_chain: ok");
  return failed;
}
