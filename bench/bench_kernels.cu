// bench_kernels.cu - helper kernels of the benchmark: the empty launch that sets the floor for
// small decode batches, the dependent "next kernel" of the PDL chain, the data generator, and the
// gather that lays today's state out in another engine's layout.
#include <string.h>

#include <cuda_runtime.h>

#include "bench.h"

#define BENCH_STR2(x) #x
#define BENCH_STR(x) BENCH_STR2(x)

enum { BENCH_EMPTY_THREADS = 512, BENCH_CONSUMER_THREADS = 128, BENCH_PARAM_BYTES = 96 };

// c128's kernels take one by-value parameter block of this size; the empty kernel takes one too,
// so that the launch cost it measures is the same launch.
typedef struct bench_param_block {
  unsigned char bytes[BENCH_PARAM_BYTES];
} bench_param_block;

static __global__ void __launch_bounds__(BENCH_EMPTY_THREADS) bench_empty_kernel(const bench_param_block p) { (void)p; }

// The library's c128__launch, which bench cannot call: it is private to the implementation, takes
// one parameter block (the consumer takes two) and gives a c128_status, not the cudaError_t.
static cudaError_t bench_launch(const void *kernel, int64_t blocks, int threads, int pdl, void **args,
                                cudaStream_t stream) {
  cudaLaunchConfig_t config = {};
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = pdl != 0;
  config.gridDim = dim3((unsigned)blocks, 1, 1);
  config.blockDim = dim3((unsigned)threads, 1, 1);
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelExC(&config, kernel, args);
}

extern "C" cudaError_t bench_launch_empty(int64_t blocks, cudaStream_t stream) {
  bench_param_block p;
  memset(&p, 0, sizeof p);
  void *args[1] = {&p};
  return bench_launch((const void *)bench_empty_kernel, blocks, BENCH_EMPTY_THREADS, 0, args, stream);
}

// The read-only ceiling: every thread streams 16-byte loads over the buffer in a grid-stride
// loop, four in flight, folds them into one word, and each block writes one word (the bytes
// written are not counted). The kernels read far more than they write, so this, not the copy,
// is the bound they approach.
enum { BENCH_READ_THREADS = 512, BENCH_READ_UNROLL = 4 };
static __global__ void __launch_bounds__(BENCH_READ_THREADS)
    bench_read_kernel(const uint4 *__restrict__ src, int64_t n, unsigned *__restrict__ sink) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  unsigned acc = 0;
  for (; i + (BENCH_READ_UNROLL - 1) * stride < n; i += BENCH_READ_UNROLL * stride) {
    uint4 v[BENCH_READ_UNROLL];
#pragma unroll
    for (int u = 0; u < BENCH_READ_UNROLL; ++u) v[u] = __ldg(src + i + u * stride);
#pragma unroll
    for (int u = 0; u < BENCH_READ_UNROLL; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) {
    const uint4 v = __ldg(src + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(0xFFFFFFFFu, acc, o);
  __shared__ unsigned warp_acc[BENCH_READ_THREADS / 32];
  if (threadIdx.x % 32 == 0) warp_acc[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned r = 0;
    for (int w = 0; w < BENCH_READ_THREADS / 32; ++w) r ^= warp_acc[w];
    sink[blockIdx.x] = r;
  }
}

extern "C" cudaError_t bench_launch_read(const void *src, int64_t bytes, unsigned *sink, int64_t blocks,
                                         cudaStream_t stream) {
  bench_read_kernel<<<(unsigned)blocks, BENCH_READ_THREADS, 0, stream>>>((const uint4 *)src, bytes / 16, sink);
  return cudaGetLastError();
}

// RMSNorm of one 512-float row per block, the kind of kernel that follows c128 in a model
// (SPEC: RMSNorm, RoPE and FP8 packing belong to the caller's next kernel). It waits for its
// predecessor before reading and lets its own dependents launch when it is done.
static __global__ void __launch_bounds__(BENCH_CONSUMER_THREADS)
    bench_consumer_kernel(const float *output, float *normed) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  __shared__ float partial[BENCH_CONSUMER_THREADS / 32];
  const int64_t row = blockIdx.x;
  const float4 v = ((const float4 *)(output + row * BENCH_HEAD_DIM))[threadIdx.x];
  float sq = v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sq += __shfl_xor_sync(0xFFFFFFFFu, sq, o);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = sq;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < BENCH_CONSUMER_THREADS / 32; ++w) total += partial[w];
  const float scale = rsqrtf(total / BENCH_HEAD_DIM + 1e-6f);
  ((float4 *)(normed + row * BENCH_HEAD_DIM))[threadIdx.x] =
      make_float4(v.x * scale, v.y * scale, v.z * scale, v.w * scale);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

extern "C" cudaError_t bench_launch_consumer(const float *output, float *normed, int64_t rows, int pdl,
                                             cudaStream_t stream) {
  static_assert(BENCH_CONSUMER_THREADS * 4 == BENCH_HEAD_DIM, "one float4 per thread covers a row");
  void *args[2] = {(void *)&output, (void *)&normed};
  return bench_launch((const void *)bench_consumer_kernel, rows, BENCH_CONSUMER_THREADS, pdl, args, stream);
}

// splitmix64 of (seed, index) -> uniform in [-1, 1).
static __host__ __device__ float bench_uniform(uint64_t seed, uint64_t index) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (index + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (float)(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

static __host__ __device__ uint16_t bench_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16); // finite values only
}

static __host__ __device__ void bench_fill_one(void *base, int64_t i, int64_t row_elems, int64_t kv_elems, int bf16,
                                               float kv_scale, float score_scale, uint64_t seed) {
  const float scale = i % row_elems < kv_elems ? kv_scale : score_scale;
  const float v = scale * bench_uniform(seed, (uint64_t)i);
  if (bf16) ((uint16_t *)base)[i] = bench_to_bf16(v);
  else ((float *)base)[i] = v;
}

static __global__ void __launch_bounds__(256)
    bench_fill_kernel(void *base, int64_t n, int64_t row_elems, int64_t kv_elems, int bf16, float kv_scale,
                      float score_scale, uint64_t seed) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    bench_fill_one(base, i, row_elems, kv_elems, bf16, kv_scale, score_scale, seed);
}

extern "C" cudaError_t bench_fill_device(void *base, int64_t rows, int64_t row_elems, int64_t kv_elems, int bf16,
                                         float kv_scale, float score_scale, uint64_t seed, cudaStream_t stream) {
  const int64_t n = rows * row_elems;
  if (n <= 0) return cudaSuccess;
  const int64_t blocks = n / 256 + 1 < 65536 ? n / 256 + 1 : 65536;
  bench_fill_kernel<<<(unsigned)blocks, 256, 0, stream>>>(base, n, row_elems, kv_elems, bf16, kv_scale, score_scale,
                                                          seed);
  return cudaGetLastError();
}

extern "C" void bench_fill_host(void *base, int64_t rows, int64_t row_elems, int64_t kv_elems, int bf16, float kv_scale,
                                float score_scale, uint64_t seed) {
  for (int64_t i = 0; i < rows * row_elems; ++i)
    bench_fill_one(base, i, row_elems, kv_elems, bf16, kv_scale, score_scale, seed);
}

// Element i of a gathered state (bench_gather_device): today's element offset + e of row src[r],
// biased when it is a score. The sum is one f32 addition, as a biased state write forms it.
static __host__ __device__ void bench_gather_one(void *dst, int64_t i, int64_t elems, int64_t offset,
                                                 const int64_t *src, const void *today, const float *ape, int biased,
                                                 int bf16) {
  const int64_t r = i / elems, e = offset + i % elems, s = src[r];
  float v = 0.0f;
  if (s >= 0) {
    const int64_t at = s * BENCH_ROW_ELEMS + e;
    if (bf16) {
      const uint32_t bits = (uint32_t)((const uint16_t *)today)[at] << 16;
      memcpy(&v, &bits, sizeof v);
    } else {
      v = ((const float *)today)[at];
    }
    if (biased && e >= BENCH_HEAD_DIM) v = v + ape[(s % C128_WINDOW) * BENCH_HEAD_DIM + e - BENCH_HEAD_DIM];
  }
  if (bf16) ((uint16_t *)dst)[i] = bench_to_bf16(v);
  else ((float *)dst)[i] = v;
}

static __global__ void __launch_bounds__(256)
    bench_gather_kernel(void *dst, int64_t n, int64_t elems, int64_t offset, const int64_t *src, const void *today,
                        const float *ape, int biased, int bf16) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    bench_gather_one(dst, i, elems, offset, src, today, ape, biased, bf16);
}

extern "C" cudaError_t bench_gather_device(void *dst, int64_t rows, int64_t elems, int64_t offset, const int64_t *src,
                                           const void *today, const float *ape, int biased, int bf16,
                                           cudaStream_t stream) {
  const int64_t n = rows * elems;
  if (n <= 0) return cudaSuccess;
  const int64_t blocks = n / 256 + 1 < 65536 ? n / 256 + 1 : 65536;
  bench_gather_kernel<<<(unsigned)blocks, 256, 0, stream>>>(dst, n, elems, offset, src, today, ape, biased, bf16);
  return cudaGetLastError();
}

extern "C" void bench_gather_host(void *dst, int64_t rows, int64_t elems, int64_t offset, const int64_t *src,
                                  const void *today, const float *ape, int biased, int bf16) {
  for (int64_t i = 0; i < rows * elems; ++i) bench_gather_one(dst, i, elems, offset, src, today, ape, biased, bf16);
}

extern "C" const char *bench_nvcc_version(void) {
  return BENCH_STR(__CUDACC_VER_MAJOR__) "." BENCH_STR(__CUDACC_VER_MINOR__) "." BENCH_STR(__CUDACC_VER_BUILD__);
}
