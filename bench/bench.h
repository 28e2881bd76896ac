/* bench.h - declarations shared by the c128 benchmark's translation units (C11 and CUDA).

   The benchmark links two copies of the library, one per epilogue (bench_two_warp.cu and
   bench_legacy.cu, both C128_STATIC with a two-row instance table), plus a few helper kernels
   (bench_kernels.cu) and the separate cache-entry epilogue (bench_epilogue.cuh, compiled into the
   two-warp copy). Each copy exports its entry points under its own prefix, declared here. */
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
/* A state in another layout from today's (bench.c's layout variants): row r of dst gets elements
   [offset, offset + elems) of today's row src[r] (src[r] < 0: zeros), the score elements (those
   at head_dim and past it) with ape's row src[r] mod 128 added when biased, rounded once to the
   state's dtype as a biased write rounds. today holds rows of kv | score. */
BENCH_EXTERN cudaError_t bench_gather_device(void *dst, int64_t rows, int64_t elems, int64_t offset, const int64_t *src,
                                             const void *today, const float *ape, int biased, int bf16,
                                             cudaStream_t stream);
BENCH_EXTERN void bench_gather_host(void *dst, int64_t rows, int64_t elems, int64_t offset, const int64_t *src,
                                    const void *today, const float *ape, int biased, int bf16);
/* nvcc that compiled the kernels, "13.0.88". */
BENCH_EXTERN const char *bench_nvcc_version(void);

/* The cache-entry epilogue as a launch of its own (bench_epilogue.cuh, in the two-warp copy): what
   SGLang, vLLM and TensorRT-LLM run after their pooling kernel. One block per plan: a plan that
   emits a window reads its pooled row and writes DeepSeek-V4's entry (DESIGN 11) at its
   output_index, with the library's own entry arithmetic, so its bytes are those the fused launch
   (args.entry) writes for the same pooled row. It skips what the fused launch skips: padding
   rows, decode rows off a boundary, invalid sentinels, entries outside the cache, positions
   outside the RoPE table. head_dim BENCH_HEAD_DIM. */
typedef struct bench_epilogue_args {
  int32_t decode;              /* plans are c128_decode_plan (one per request), else c128_compress_plan */
  const void *plans;           /* [num_plans] */
  int64_t num_plans;           /* blocks of the launch */
  const float *pooled;         /* f32 [num_plans, head_dim]: the pooled launch's row of plan k */
  const int64_t *output_index; /* entry of each window: by request (decode), by input row (ragged_id) */
  c128_entry_args entry;       /* kind DSV4_FP8 or DSV4_BF16 */
} bench_epilogue_args;
BENCH_EXTERN cudaError_t bench_entry_epilogue(const bench_epilogue_args *args, cudaStream_t stream);
BENCH_EXTERN void bench_entry_epilogue_host(const bench_epilogue_args *args);
/* c128_entry_workspace_bytes of the two-warp copy: the fused launch's workspace (DESIGN 11.3)
   for `jobs` requests (decode) or compress plans (prefill). */
BENCH_EXTERN int64_t bench_entry_workspace_bytes(int64_t jobs, int32_t head_dim);

#endif /* BENCH_H */
