/* bench_copy.cuh - one copy of the library with only the instances the benchmark needs.

   Included by bench_two_warp.cu and bench_legacy.cu after they define C128_EPILOGUE and
   BENCH_PREFIX. C128_STATIC keeps every c128 symbol private to the translation unit, so two
   copies built with different epilogues link into one binary and can be timed A B A B in one
   run; the wrappers below are the only exported names. */
#define C128_STATIC
#define C128_INSTANCES(X) C128_ROW(X, 512, f32, f32, f32) C128_ROW(X, 512, bf16, f32, f32)
#include "bench.h"
#include "c128.cuh"

#define BENCH_CAT2(a, b) a##_##b
#define BENCH_CAT(a, b) BENCH_CAT2(a, b)
#define BENCH_FN(name) BENCH_CAT(BENCH_PREFIX, name)

BENCH_EXTERN c128_status BENCH_FN(decode)(const c128_decode_args *args, cudaStream_t stream) {
  return c128_decode(args, stream);
}
BENCH_EXTERN c128_status BENCH_FN(prefill)(const c128_prefill_args *args, cudaStream_t stream) {
  return c128_prefill(args, stream);
}
BENCH_EXTERN c128_status BENCH_FN(decode_host)(const c128_decode_args *args, const c128_host_options *options) {
  return c128_decode_host(args, options);
}
BENCH_EXTERN c128_status BENCH_FN(prefill_host)(const c128_prefill_args *args, const c128_host_options *options) {
  return c128_prefill_host(args, options);
}
BENCH_EXTERN c128_status BENCH_FN(plan_decode)(const c128_ring *ring, const c128_request *reqs, int64_t batch,
                                               c128_decode_plan *plans) {
  return c128_plan_decode(ring, reqs, batch, plans);
}
BENCH_EXTERN c128_status BENCH_FN(plan_prefill)(const c128_ring *ring, const c128_request *reqs, int64_t num_requests,
                                                int32_t verify, c128_prefill_plans *plans) {
  return c128_plan_prefill(ring, reqs, num_requests, verify, plans);
}
BENCH_EXTERN const char *BENCH_FN(status_string)(c128_status status) { return c128_status_string(status); }
BENCH_EXTERN int BENCH_FN(epilogue)(void) { return C128_EPILOGUE; }
BENCH_EXTERN int32_t BENCH_FN(decode_group_size)(int64_t batch, int32_t head_dim, int32_t sm_count) {
  return c128_decode_group_size(batch, head_dim, sm_count);
}

#undef BENCH_FN
#undef BENCH_CAT
#undef BENCH_CAT2
