/* bench_epilogue.cuh - the cache-entry epilogue as a launch of its own (bench.h: bench_entry_epilogue).

   The two-launch path that the fused launch (args.entry, DESIGN 11) is measured against: c128's
   pooled launch writes f32 rows, then this kernel, one block per plan, reads the row of each
   plan that emits a window and writes DeepSeek-V4's entry, as SGLang, vLLM and TensorRT-LLM do
   in their own kernel after the pooling. Included once, by bench_two_warp.cu after
   bench_copy.cuh, so that it can use the library's own entry arithmetic (c128__lane_squares,
   c128__warp_tree, c128__scale_exponent, c128__e4m3, ...) in the order c128__write_entry uses
   it: warp w of a block does what warp C128__ENTRY_WARP of split w's block does in the fused
   launch, so an entry is a function of the pooled row alone and the two paths write the same
   bytes for the same row (checked by c128_bench --cpu-check on the host runner, and on set 0 of
   every case in a GPU run). */
#define BENCH_EPILOGUE_SPLITS C128_NUM_SPLIT(BENCH_HEAD_DIM)
#define BENCH_EPILOGUE_THREADS (BENCH_EPILOGUE_SPLITS * C128_WARP_THREADS)
static_assert(BENCH_EPILOGUE_SPLITS <= C128_MAX_ENTRY_SPLITS, "cache entries need head_dim <= 512");
static_assert(BENCH_EPILOGUE_THREADS * C128_TILE_ELEMS == BENCH_HEAD_DIM, "one pair of channels a thread");

/* Plan k's window: its entry and position, or 0 when the fused launch writes nothing for it. */
static __host__ __device__ int bench_epilogue_window(const bench_epilogue_args *a, int64_t k, int64_t *loc,
                                                     int64_t *position) {
  uint32_t seq_len;
  if (a->decode) {
    const c128_decode_plan plan = ((const c128_decode_plan *)a->plans)[k];
    if (plan.seq_len == 0 || plan.write_loc < 0 || plan.write_loc % C128_WINDOW != C128_WINDOW - 1) return 0;
    *loc = a->output_index[k], seq_len = plan.seq_len;
  } else {
    const c128_compress_plan plan = ((const c128_compress_plan *)a->plans)[k];
    if (plan.seq_len == C128_INVALID_ID) return 0;
    *loc = a->output_index[plan.ragged_id], seq_len = plan.seq_len;
  }
  *position = (int64_t)seq_len - C128_WINDOW;
  return *loc >= 0 && *loc < a->entry.cache_pages * a->entry.entries_per_page && *position >= 0 &&
         *position < a->entry.rope_positions;
}

/* c128__entry_z and c128__lane_amax without the kernel parameters they read gamma from. */
static __host__ __device__ float bench_entry_z(const float *gamma, const float *y, float r, int c) {
  return c128__widen_bf16(c128__narrow_bf16(c128__mul(gamma[c], c128__mul(y[c], r))));
}
static __host__ __device__ float bench_lane_amax(const float *gamma, const float *y, float r, int base, int lane) {
  const int c = base + C128_TILE_ELEMS * lane;
  return c128__max_either(fabsf(bench_entry_z(gamma, y, r, c)), fabsf(bench_entry_z(gamma, y, r, c + 1)));
}

static __host__ __device__ void bench_entry_store(char *at, uint32_t bits, int bytes) {
#ifdef __CUDA_ARCH__
  if (bytes == 4) *(uint32_t *)at = bits;
  else if (bytes == 2) *(uint16_t *)at = (uint16_t)bits;
  else *(uint8_t *)at = (uint8_t)bits;
#else
  memcpy(at, &bits, (size_t)bytes); /* little-endian */
#endif
}

/* Lane `lane` of warp `split`: that split's part of entry `loc` of the window at `position` whose
   pooled vector, rounded to bf16, is y (c128__write_entry, statement for statement). */
static __host__ __device__ void bench_entry_part(const c128_entry_args *e, const float *y, int64_t loc,
                                                 int64_t position, int split, int lane) {
  const int D = BENCH_HEAD_DIM, splits = BENCH_EPILOGUE_SPLITS, fp8 = e->kind == C128_OUTPUT_DSV4_FP8;
  const c128__entry_row row = {y, NULL};
  float lanes[C128_WARP_THREADS]; /* the host's replay of the reductions */
#ifndef __CUDA_ARCH__
  for (int l = 0; l < C128_WARP_THREADS; ++l) lanes[l] = c128__lane_squares(row, D, l);
#endif
  const float squares = c128__warp_tree(c128__lane_squares(row, D, lane), lanes, 0, lane);
  const float r = c128__div(1.0f, c128__sqrt(c128__add(c128__div(squares, (float)D), e->norm_eps)));
  const int base = split * C128_TILE_DIM, c = base + C128_TILE_ELEMS * lane;
  const float z0 = bench_entry_z(e->norm_weight, y, r, c), z1 = bench_entry_z(e->norm_weight, y, r, c + 1);
  const int64_t entries = e->entries_per_page, slot = loc & (entries - 1);
  char *page = (char *)e->cache + loc / entries * e->page_bytes;
  char *entry = page + slot * (fp8 ? D + C128_ROPE_DIMS : 2 * D), *scales = page + (D + C128_ROPE_DIMS) * entries;
  if (split == splits - 1) { /* RoPE pair `lane` of the last 64 channels */
    const float *cs = e->rope_table + (position * C128_WARP_THREADS + lane) * 2;
    const uint32_t re = c128__narrow_bf16(c128__sub(c128__mul(z0, cs[0]), c128__mul(z1, cs[1])));
    const uint32_t im = c128__narrow_bf16(c128__add(c128__mul(z0, cs[1]), c128__mul(z1, cs[0])));
    bench_entry_store(entry + (fp8 ? D - C128_ROPE_DIMS + 2 * C128_TILE_ELEMS * lane : 2 * c), re | im << 16, 4);
    if (fp8 && lane == 0) bench_entry_store(scales + (int64_t)splits * slot + splits - 1, 0u, 1); /* the pad byte */
    return;
  }
#ifndef __CUDA_ARCH__
  for (int l = 0; l < C128_WARP_THREADS; ++l) lanes[l] = bench_lane_amax(e->norm_weight, y, r, base, l);
#endif
  const float amax = c128__warp_tree(bench_lane_amax(e->norm_weight, y, r, base, lane), lanes, 1, lane);
  const int finite = amax <= 3.402823466e38f, E = finite ? c128__scale_exponent(amax) : 0;
  const uint32_t q0 = finite ? c128__e4m3(c128__mul(z0, c128__pow2(-E))) : 0x7Fu;
  const uint32_t q1 = finite ? c128__e4m3(c128__mul(z1, c128__pow2(-E))) : 0x7Fu;
  if (fp8) {
    bench_entry_store(entry + c, q0 | q1 << 8, 2);
    if (lane == 0) bench_entry_store(scales + (int64_t)splits * slot + split, finite ? (uint32_t)(E + 127) : 0xFFu, 1);
    return;
  }
  const uint32_t v0 = c128__narrow_bf16(c128__mul(c128__e4m3_value(q0), c128__pow2(E))); /* exact */
  const uint32_t v1 = c128__narrow_bf16(c128__mul(c128__e4m3_value(q1), c128__pow2(E)));
  bench_entry_store(entry + 2 * c, v0 | v1 << 16, 4);
}

/* Block k: plan k's entry. Thread t rounds channels 2t, 2t + 1 of the pooled row to bf16 (the
   reference's first step, as the fused launch's push does) into shared memory; warp w writes
   split w's part. */
static __global__ void __launch_bounds__(BENCH_EPILOGUE_THREADS) bench_epilogue_kernel(const bench_epilogue_args a) {
  __shared__ float y[BENCH_HEAD_DIM];
  int64_t loc, position;
  const int64_t k = blockIdx.x;
  if (!bench_epilogue_window(&a, k, &loc, &position)) return;
  const int tid = (int)threadIdx.x;
  const float2 v = ((const float2 *)(a.pooled + k * BENCH_HEAD_DIM))[tid];
  y[C128_TILE_ELEMS * tid] = c128__widen_bf16(c128__narrow_bf16(v.x));
  y[C128_TILE_ELEMS * tid + 1] = c128__widen_bf16(c128__narrow_bf16(v.y));
  __syncthreads();
  bench_entry_part(&a.entry, y, loc, position, tid / C128_WARP_THREADS, tid % C128_WARP_THREADS);
}

extern "C" int64_t bench_entry_workspace_bytes(int64_t jobs, int32_t head_dim) {
  return c128_entry_workspace_bytes(jobs, head_dim);
}

extern "C" cudaError_t bench_entry_epilogue(const bench_epilogue_args *args, cudaStream_t stream) {
  if (args->num_plans <= 0) return cudaSuccess;
  bench_epilogue_kernel<<<(unsigned)args->num_plans, BENCH_EPILOGUE_THREADS, 0, stream>>>(*args);
  return cudaGetLastError();
}

/* The same blocks on the CPU, one warp and lane at a time. */
extern "C" void bench_entry_epilogue_host(const bench_epilogue_args *args) {
  float y[BENCH_HEAD_DIM];
  for (int64_t k = 0; k < args->num_plans; ++k) {
    int64_t loc, position;
    if (!bench_epilogue_window(args, k, &loc, &position)) continue;
    for (int c = 0; c < BENCH_HEAD_DIM; ++c)
      y[c] = c128__widen_bf16(c128__narrow_bf16(args->pooled[k * BENCH_HEAD_DIM + c]));
    for (int split = 0; split < BENCH_EPILOGUE_SPLITS; ++split)
      for (int lane = 0; lane < C128_WARP_THREADS; ++lane)
        bench_entry_part(&args->entry, y, loc, position, split, lane);
  }
}
