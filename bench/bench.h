/* bench.h - declarations shared by the c128 benchmark's translation units (C11 and CUDA).

   The benchmark links two copies of the library, one per epilogue (bench_two_warp.cu and
   bench_legacy.cu, both C128_STATIC with a two-row instance table), plus a few helper kernels
   (bench_kernels.cu). Each copy exports its entry points under its own prefix, declared here. */
#ifndef BENCH_H
#define BENCH_H

#include <stdint.h>

#include "c128.cuh"

#ifdef __cplusplus
#define BENCH_EXTERN extern "C"
#else
#define BENCH_EXTERN extern
#endif

#define BENCH_HEAD_DIM 512
#define BENCH_ROW_ELEMS (2 * BENCH_HEAD_DIM) /* kv | score */

/* One library copy: every instance entry point the benchmark uses, under `prefix`. */
#define BENCH_DECLARE_COPY(prefix)                                                                                 \
  BENCH_EXTERN c128_status prefix##_decode(const c128_decode_args *args, cudaStream_t stream);                     \
  BENCH_EXTERN c128_status prefix##_prefill(const c128_prefill_args *args, cudaStream_t stream);                   \
  BENCH_EXTERN c128_status prefix##_decode_host(const c128_decode_args *args, const c128_host_options *options);   \
  BENCH_EXTERN c128_status prefix##_prefill_host(const c128_prefill_args *args, const c128_host_options *options); \
  BENCH_EXTERN c128_status prefix##_plan_decode(const c128_ring *ring, const c128_request *reqs, int64_t batch,    \
                                                c128_decode_plan *plans);                                          \
  BENCH_EXTERN c128_status prefix##_plan_prefill(const c128_ring *ring, const c128_request *reqs,                  \
                                                 int64_t num_requests, int32_t verify, c128_prefill_plans *plans); \
  BENCH_EXTERN const char *prefix##_status_string(c128_status status);                                             \
  BENCH_EXTERN int prefix##_epilogue(void); /* the C128_EPILOGUE it was compiled with */                           \
  BENCH_EXTERN int32_t prefix##_decode_group_size(int64_t batch, int32_t head_dim, int32_t sm_count);
BENCH_DECLARE_COPY(bench_two_warp)
BENCH_DECLARE_COPY(bench_legacy)
#undef BENCH_DECLARE_COPY

/* Helper kernels (bench_kernels.cu). */
/* An empty kernel of `blocks` x 512 threads, launched like c128's kernels (cudaLaunchKernelExC,
   a by-value parameter block of the same size, PDL attribute off). */
BENCH_EXTERN cudaError_t bench_launch_empty(int64_t blocks, cudaStream_t stream);
/* The caller's next kernel (an RMSNorm of each output row): one block of 128 threads per row,
   griddepcontrol.wait before it reads, launched with PDL when pdl != 0. */
BENCH_EXTERN cudaError_t bench_launch_consumer(const float *output, float *normed, int64_t rows, int pdl,
                                               cudaStream_t stream);
/* The read-only stream of `bytes` (a multiple of 16) at src: `blocks` x 512 threads of 16-byte
   loads; sink gets one word a block. */
BENCH_EXTERN cudaError_t bench_launch_read(const void *src, int64_t bytes, unsigned *sink, int64_t blocks,
                                           cudaStream_t stream);
/* Deterministic pseudo-random rows: the first kv_elems of each row uniform in
   [-kv_scale, kv_scale), the rest in [-score_scale, score_scale); f32 or bf16 storage. */
BENCH_EXTERN cudaError_t bench_fill_device(void *base, int64_t rows, int64_t row_elems, int64_t kv_elems, int bf16,
                                           float kv_scale, float score_scale, uint64_t seed, cudaStream_t stream);
BENCH_EXTERN void bench_fill_host(void *base, int64_t rows, int64_t row_elems, int64_t kv_elems, int bf16,
                                  float kv_scale, float score_scale, uint64_t seed);
/* nvcc that compiled the kernels, "13.0.88". */
BENCH_EXTERN const char *bench_nvcc_version(void);

#endif /* BENCH_H */
