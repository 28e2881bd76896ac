/* c128.cuh - v0.1.0 - DeepSeek-V4 c128 KV compression in one CUDA C header.

   Turns every 128 tokens of a request into one softmax-pooled KV vector (per-channel softmax
   over the window's scores plus a learned position bias), with the compression-state buffer,
   the plans and the planner that drive it: decode, chunked prefill/extend, speculative verify,
   paged and legacy state, context-parallel sharded state.

   DO THIS
     In exactly one .cu file of your project:
         #define C128_IMPLEMENTATION
         #include "c128.cuh"
     Everywhere else (C11, C++ or CUDA) include "c128.cuh" for the declarations only, and link
     cudart (plus libstdc++ when the program's main is plain C):
         nvcc -O3 -gencode arch=compute_90,code=sm_90 -c c128_impl.cu
         gcc -std=c11 -I/usr/local/cuda/include app.c c128_impl.o \
             -L/usr/local/cuda/lib64 -lcudart -lstdc++ -lm
     A program of one translation unit may instead
         #define C128_STATIC
     which compiles everything as static functions (no exported symbols).

   CONFIGURATION (define before the include that has the implementation)
     C128_INSTANCES(X)   the instance table; predefine it to compile only the rows you need
     C128_EPILOGUE       C128_EPILOGUE_TWO_WARP (default) or C128_EPILOGUE_LEGACY
     C128_STATIC         static functions, implies the implementation in this file
     C128_IMPLEMENTATION the implementation goes in this translation unit

   QUICK START (an excerpt of examples/quickstart.c: plan one prefill batch, then run it)
         c128_ring ring = {0};
         ring.state_pages = pages;
         ...
         c128_prefill_plans plans = {0};
         plans.compress = compress, plans.write = write, plans.capacity = rows;
         CHECK(c128_plan_prefill(&ring, req, NUM_REQ, 0, &plans));

         c128_prefill_args a = {0};
         a.head_dim = HEAD_DIM;
         a.state_dtype = C128_F32, a.input_dtype = C128_F32, a.output_dtype = C128_F32;
         a.state = use_gpu ? dev.state : state;
         a.state_pages = pages;
         a.input = upload(dev.input, input, (size_t)rows * ROW * sizeof(float));
         a.input_rows = rows;
         a.ape = upload(dev.ape, ape, sizeof ape);
         a.output = use_gpu ? dev.output : output;
         a.output_rows = plans.capacity;
         a.compress_plans = upload(dev.plans_a, compress, (size_t)plans.num_compress * sizeof *compress);
         a.num_compress = plans.num_compress;
         a.write_plans = upload(dev.plans_b, write, (size_t)plans.num_write * sizeof *write);
         a.num_write = plans.num_write;
         CHECK(use_gpu ? c128_prefill(&a, 0) : c128_prefill_host(&a, NULL));

   INSTANCES
     Name h<head_dim>_<state>_<input>_<output>: the default table has every head_dim in
     {128, 256, 512} x state {f32, bf16} x input {f32, bf16} x output {f32, bf16}, 24 in all.
     c128_instance_count() / c128_instance_name(i) list what was compiled; the generic entry
     points (c128_decode, c128_prefill, ...) dispatch on (head_dim, dtypes) from their argument
     struct; the typed ones (c128_decode_h512_f32_f32_f32, ...) check that the struct agrees.

   PLANS
     c128_plan_prefill / c128_plan_decode turn (pool index, seq_len, extend_len) per request
     into plans for the legacy layout, a request ring (R = 128, 256, ...) or a page table, with
     or without speculative decoding; a verify batch with more drafts than the ring can persist
     is refused. c128_plan_*_device compute the same bytes on the GPU for CUDA graphs.
     c128_check_*_plans reports the first bad plan of a batch built elsewhere.

   KERNELS
     Decode: ceil(batch / G) x head_dim/64 blocks of 512 threads; a block takes G <= 32 requests
     of one 64-channel split (args.requests_per_block, or c128_decode_group_size() when 0),
     persists their new rows (a warp per request; a step with no boundary in the block takes no
     barrier at all) and compresses their boundary windows one after another, one barrier a
     window.
     Prefill: a compress launch (ceil(num_compress / G) x head_dim/64 blocks of 512, G <= 32
     windows a block: args.windows_per_block or c128_prefill_group_size()) then a write launch
     (a warp per written row, 4 warps a block), on one stream. Results never depend on G.

   ERRORS
     Every entry point returns a c128_status; c128_status_string() names it. All arguments are
     checked on the host before anything is launched; a failed check launches and writes nothing.
     Plan contents live on the device and are checked there: a plan that names pages, rows or
     outputs outside the buffers is skipped, so no plan bytes can make a kernel touch memory
     outside the state, input, output and plan arrays.

   PDL, STREAMS, GRAPHS, THREADS
     Launches allocate nothing, synchronise nothing and keep no global state: every launch is
     ordered on the caller's stream and can be captured in a CUDA graph. Any host thread may
     call any entry point at any time; calls on different streams are independent as long as
     they write no common state pages or output rows (reading shared ape or input is fine).
     Within a stream, a decode or prefill reads the state its predecessors wrote. With
     args.pdl != 0 the kernels are launched with programmatic stream serialisation: each one
     waits (griddepcontrol.wait) before it reads plans, input or state and before its first
     state write, so it may start while its predecessor drains. A kernel you launch after ours
     with PDL must itself execute griddepcontrol.wait (cudaGridDependencySynchronize) before it
     reads our outputs, as PDL requires of every dependent.
     Context-parallel state: pages of different live requests must be distinct; the planner
     cannot check that.

   NUMERICS
     All arithmetic after loading is fp32. The host runner executes the same per-thread code as
     the GPU, with explicit fma/round-to-nearest operations and a shared exp, so host and device
     results are bit-identical unless the device code is built with --use_fast_math / -ftz=true
     or the host code with FMA contraction (-ffp-contract=fast with an FMA-capable -march).
     Non-finite input: a score of -inf gives its row weight 0; a channel whose 128 scores are all
     -inf, or that holds +inf or NaN, produces NaN; kv values propagate by IEEE rules (an
     infinite kv gives +-inf, or NaN where its weight underflows to 0). Host and device agree
     on which outputs are NaN, not on the NaN bit patterns.

   REVISION HISTORY
     0.2.0 (2026-11-29) grouped compress (windows_per_block, c128_prefill_group_size), decode
                        groups up to 32 without a plan barrier, a branch-free exp, one warp per
                        written row; C128_MAX_DECODE_GROUP is 32 (was 16).
     0.1.0 (2026-11-29) first release: kernels, host runner with race checker, host and device
                        planners, plan checker, C API.

   LICENSE: MIT, at the end of this file.
*/
#ifndef C128_CUH_INCLUDED
#define C128_CUH_INCLUDED

/* >>config ------------------------------------------------------------------------------- */
#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

#define C128_VERSION_MAJOR 0
#define C128_VERSION_MINOR 2
#define C128_VERSION_PATCH 0

#if defined(C128_STATIC) && !defined(C128_IMPLEMENTATION)
#define C128_IMPLEMENTATION
#endif
#if defined(C128_STATIC)
#define C128_API static inline
#elif defined(__cplusplus)
#define C128_API extern "C"
#else
#define C128_API extern
#endif

/* Block-level constants, the same for every instance (upstream's C128Config). */
#define C128_WINDOW 128 /* tokens per compressed vector = rows per state page */
#define C128_WARP_THREADS 32
#define C128_TILE_ELEMS 2    /* channels per thread: one 2-element vector */
#define C128_ROWS_PER_WARP 8 /* window rows each warp folds */
#define C128_NUM_WARPS (C128_WINDOW / C128_ROWS_PER_WARP)
#define C128_BLOCK_THREADS (C128_NUM_WARPS * C128_WARP_THREADS)
#define C128_BLOCKS_PER_SM 2 /* launch bounds of the compress and decode kernels */
#define C128_WRITE_WARPS 4
#define C128_WRITE_BLOCK_THREADS (C128_WRITE_WARPS * C128_WARP_THREADS)
#define C128_WRITE_BLOCKS_PER_SM 16
#define C128_TILE_DIM (C128_TILE_ELEMS * C128_WARP_THREADS) /* channels per block */
#define C128_MAX_PREFILL_ROWS 65536                         /* ragged_id is a u16 */
#define C128_MAX_DECODE_GROUP C128_WARP_THREADS             /* requests per decode block: one ballot lane each */
#define C128_MAX_PREFILL_GROUP C128_WARP_THREADS            /* compress windows per block */
#define C128_MAX_HEAD_DIM 65536                             /* keeps every element offset of a row in int */

/* Per-head_dim constants (upstream's C128Trait), functions of D = head_dim alone. */
#define C128_NUM_SPLIT(D) ((D) / C128_TILE_DIM) /* blocks per compress event */
#define C128_SCORE_OFFSET(D) (D)                /* score half of a row starts here */
#define C128_ROW_ELEMS(D) (2 * (D))             /* kv | score */
#define C128_PAGE_ELEMS(D) (C128_WINDOW * C128_ROW_ELEMS(D))

/* The two epilogues of the compress routine (SPEC 6.1). */
#define C128_EPILOGUE_TWO_WARP 0
#define C128_EPILOGUE_LEGACY 1
#ifndef C128_EPILOGUE
#define C128_EPILOGUE C128_EPILOGUE_TWO_WARP
#endif

/* The instance table: X(name, head_dim, buf_t, in_t, out_t, buf_dtype, in_dtype, out_dtype).
   The *_t columns are the storage types of the implementation (c128__bf16 is a bit pattern). */
#ifndef C128_INSTANCES
#define C128__INSTANCES_FOR_DIM(X, D)                                                       \
  X(h##D##_f32_f32_f32, D, float, float, float, C128_F32, C128_F32, C128_F32)               \
  X(h##D##_f32_f32_bf16, D, float, float, c128__bf16, C128_F32, C128_F32, C128_BF16)        \
  X(h##D##_f32_bf16_f32, D, float, c128__bf16, float, C128_F32, C128_BF16, C128_F32)        \
  X(h##D##_f32_bf16_bf16, D, float, c128__bf16, c128__bf16, C128_F32, C128_BF16, C128_BF16) \
  X(h##D##_bf16_f32_f32, D, c128__bf16, float, float, C128_BF16, C128_F32, C128_F32)        \
  X(h##D##_bf16_f32_bf16, D, c128__bf16, float, c128__bf16, C128_BF16, C128_F32, C128_BF16) \
  X(h##D##_bf16_bf16_f32, D, c128__bf16, c128__bf16, float, C128_BF16, C128_BF16, C128_F32) \
  X(h##D##_bf16_bf16_bf16, D, c128__bf16, c128__bf16, c128__bf16, C128_BF16, C128_BF16, C128_BF16)
#define C128_INSTANCES(X) \
  C128__INSTANCES_FOR_DIM(X, 128) C128__INSTANCES_FOR_DIM(X, 256) C128__INSTANCES_FOR_DIM(X, 512)
#endif

/* Instance ids in table order, and their count. */
// clang-format off
typedef enum c128_instance_id {
#define C128__INSTANCE_ENUM(name, D, bt, it, ot, bd, id, od) C128_INSTANCE_##name,
  C128_INSTANCES(C128__INSTANCE_ENUM)
#undef C128__INSTANCE_ENUM
  C128_INSTANCE_COUNT
} c128_instance_id;
// clang-format on

/* Storage dtypes; the values are cudaDataType_t's (CUDA_R_32F, CUDA_R_16BF). */
/* The _RANGE_ enumerators make every int32 a value of the type: C callers may pass anything, and
   the C++ implementation must be able to read it and refuse it. */
typedef enum c128_dtype {
  C128_F32 = 0,
  C128_BF16 = 14,
  C128__DTYPE_RANGE_MIN = -2147483647 - 1,
  C128__DTYPE_RANGE_MAX = 2147483647
} c128_dtype;

/* Status codes: explicit values, never renumbered. X(name, value, message). */
#define C128_STATUS_LIST(X)                                                                       \
  X(C128_SUCCESS, 0, "success")                                                                   \
  X(C128_ERROR_NULL_POINTER, 1, "a required pointer is NULL")                                     \
  X(C128_ERROR_MISALIGNED, 2, "a tensor or plan pointer is not aligned for its vector access")    \
  X(C128_ERROR_UNSUPPORTED_INSTANCE, 3, "no compiled instance for this (head_dim, dtypes)")       \
  X(C128_ERROR_INSTANCE_MISMATCH, 4, "typed entry point called with another instance's args")     \
  X(C128_ERROR_NEGATIVE_SIZE, 5, "a size or count is negative")                                   \
  X(C128_ERROR_TOO_MANY_ROWS, 6, "more input rows than a plan can address (65536 for prefill)")   \
  X(C128_ERROR_TOO_MANY_PLANS, 7, "more plans than a launch or the u16 ragged_id allows")         \
  X(C128_ERROR_OUTPUT_TOO_SMALL, 8, "output_rows is smaller than the number of plans")            \
  X(C128_ERROR_STATE_TOO_LARGE, 9, "state_pages overflows 64-bit byte offsets")                   \
  X(C128_ERROR_INVALID_LAYOUT, 10, "shared layout: need size >= 1, 0 <= rank < size, pages >= 0") \
  X(C128_ERROR_LAUNCH_FAILED, 11, "cudaLaunchKernelEx failed")                                    \
  X(C128_ERROR_OUT_OF_MEMORY, 12, "host allocation for the race checker failed")                  \
  X(C128_ERROR_RACE_DETECTED, 13, "host runner checker found a race between threads or blocks")   \
  X(C128_ERROR_INVALID_RING, 14, "ring_tokens must be a positive multiple of 128")                \
  X(C128_ERROR_EXTEND_EXCEEDS_SEQ, 15, "a request's extend_len exceeds its seq_len")              \
  X(C128_ERROR_EMPTY_EXTEND, 16, "a request of a prefill/extend batch has extend_len 0")          \
  X(C128_ERROR_POOL_INDEX_OUT_OF_RANGE, 17, "a pool index is negative or beyond the page table")  \
  X(C128_ERROR_PAGE_OUT_OF_RANGE, 18, "a plan would use a page outside the state")                \
  X(C128_ERROR_TOO_MANY_DRAFTS, 19, "verify batch has more drafts than the ring can persist")     \
  X(C128_ERROR_CAPACITY_TOO_SMALL, 20, "plan arrays are smaller than the batch needs")            \
  X(C128_ERROR_INVALID_PLAN, 21, "a plan is invalid (see the checker's message)")                 \
  X(C128_ERROR_INVALID_GROUP, 22, "requests_per_block or windows_per_block is negative or too large")

typedef enum c128_status {
#define C128__STATUS_ENUM(name, value, message) name = value,
  C128_STATUS_LIST(C128__STATUS_ENUM)
#undef C128__STATUS_ENUM
      C128__STATUS_RANGE_MIN = -2147483647 - 1,
  C128__STATUS_RANGE_MAX = 2147483647
} c128_status;

#ifdef __cplusplus
#define C128__ALIGNAS(n) alignas(n)
#define C128__ALIGNOF(t) alignof(t)
#define C128__STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define C128__ALIGNAS(n) _Alignas(n)
#define C128__ALIGNOF(t) _Alignof(t)
#define C128__STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

/* >>plans --------------------------------------------------------------------------------- */
/* Byte layouts are ABI, identical to SGLang's c128 plans. Little-endian, packed, align = size. */
typedef struct c128_decode_plan {
  C128__ALIGNAS(16) uint32_t seq_len; /* length including the new token; 0 = padding row */
  int32_t write_loc;                  /* global state row (128 * page + slot) of the new token; < 0 = padding */
  int32_t read_page_0;                /* page of position max(seq_len - 1 - 128, 0); for consumers only */
  int32_t read_page_1;                /* page holding the new token = the page compressed at a boundary */
} c128_decode_plan;

typedef struct c128_compress_plan {
  C128__ALIGNAS(16) uint32_t seq_len; /* last position + 1 of the window (a multiple of 128); ~0u = invalid */
  uint16_t ragged_id;                 /* input row of the window's last token */
  uint16_t buffer_len;                /* leading window rows that come from the state page (0..127) */
  int32_t read_page_0;                /* page of position max(pos - 128, 0); for consumers only */
  int32_t read_page_1;                /* state page of the window, read when buffer_len > 0 */
} c128_compress_plan;

typedef struct c128_write_plan {
  C128__ALIGNAS(8) uint32_t ragged_id; /* input row; ~0u = invalid */
  int32_t write_loc;                   /* global state row */
} c128_write_plan;

#define C128__CHECK_FIELD(type, field, offset) \
  C128__STATIC_ASSERT(offsetof(type, field) == (offset), #type "." #field " offset is ABI");
C128__CHECK_FIELD(c128_decode_plan, seq_len, 0)
C128__CHECK_FIELD(c128_decode_plan, write_loc, 4)
C128__CHECK_FIELD(c128_decode_plan, read_page_0, 8)
C128__CHECK_FIELD(c128_decode_plan, read_page_1, 12)
C128__CHECK_FIELD(c128_compress_plan, seq_len, 0)
C128__CHECK_FIELD(c128_compress_plan, ragged_id, 4)
C128__CHECK_FIELD(c128_compress_plan, buffer_len, 6)
C128__CHECK_FIELD(c128_compress_plan, read_page_0, 8)
C128__CHECK_FIELD(c128_compress_plan, read_page_1, 12)
C128__CHECK_FIELD(c128_write_plan, ragged_id, 0)
C128__CHECK_FIELD(c128_write_plan, write_loc, 4)
#undef C128__CHECK_FIELD
C128__STATIC_ASSERT(sizeof(c128_decode_plan) == 16 && C128__ALIGNOF(c128_decode_plan) == 16, "ABI");
C128__STATIC_ASSERT(sizeof(c128_compress_plan) == 16 && C128__ALIGNOF(c128_compress_plan) == 16, "ABI");
C128__STATIC_ASSERT(sizeof(c128_write_plan) == 8 && C128__ALIGNOF(c128_write_plan) == 8, "ABI");
// clang-format off
C128__STATIC_ASSERT(C128_NUM_WARPS * C128_ROWS_PER_WARP == C128_WINDOW, "warps cover the window");
// clang-format on
C128__STATIC_ASSERT(C128_WINDOW <= C128_BLOCK_THREADS, "one thread per window row at most");

#define C128_INVALID_ID 0xFFFFFFFFu
// clang-format off
#define C128_INVALID_COMPRESS_PLAN {C128_INVALID_ID, 0, 0, -1, -1}
#define C128_INVALID_WRITE_PLAN {C128_INVALID_ID, -1}
// clang-format on

/* >>api ----------------------------------------------------------------------------------- */
/* Context-parallel (owner-sharded) state: logical page p lives on rank p mod size. Zero means
   an unsharded state (size 0 is read as 1). */
typedef struct c128_shared_layout {
  int32_t rank;
  int32_t size;
  int32_t pages_per_rank;
} c128_shared_layout;

/* One decode step: one new token per request; input row b and output row b belong to plan b. */
typedef struct c128_decode_args {
  int32_t head_dim;
  c128_dtype state_dtype, input_dtype, output_dtype;
  void *state;                   /* [state_pages, 128, 2 * head_dim] */
  int64_t state_pages;           /* physical pages of this rank's view */
  const void *input;             /* [batch, 2 * head_dim]: kv | score of each new token */
  const float *ape;              /* [128, head_dim], always f32 */
  void *output;                  /* [output_rows, head_dim]; row b written only at a boundary */
  int64_t output_rows;           /* >= batch */
  const c128_decode_plan *plans; /* [batch] */
  int64_t batch;
  c128_shared_layout layout;
  int32_t pdl;                /* launch with programmatic dependent launch */
  int32_t requests_per_block; /* 1..C128_MAX_DECODE_GROUP; 0 = from the batch and the SM count */
} c128_decode_args;

/* A prefill / extend / verify batch: compress events first, then state writes. */
typedef struct c128_prefill_args {
  int32_t head_dim;
  c128_dtype state_dtype, input_dtype, output_dtype;
  void *state;
  int64_t state_pages;
  const void *input;  /* [input_rows, 2 * head_dim], ragged */
  int64_t input_rows; /* <= 65536 */
  const float *ape;
  void *output;        /* [output_rows, head_dim]: row k <- compress plan k */
  int64_t output_rows; /* >= num_compress */
  const c128_compress_plan *compress_plans;
  int64_t num_compress; /* launched count, sentinels included */
  const c128_write_plan *write_plans;
  int64_t num_write;
  c128_shared_layout layout;
  int32_t pdl;
  int32_t windows_per_block; /* compress windows per block, 1..C128_MAX_PREFILL_GROUP; 0 = automatic */
} c128_prefill_args;

/* Options of the host (CPU) runner. Zero = forward block order, no race checking. */
typedef struct c128_host_options {
  int32_t check_races;    /* record every state/output access; fail on a race (SPEC 7) */
  int32_t reverse_blocks; /* run blocks last to first */
  char *message;          /* optional: what the race checker found */
  size_t message_size;
} c128_host_options;

typedef struct c128_instance_info {
  const char *name;
  int32_t head_dim;
  c128_dtype state_dtype, input_dtype, output_dtype;
  int32_t num_split;  /* blocks per compress event */
  int64_t row_elems;  /* elements per state / input row */
  int64_t page_elems; /* elements per state page */
} c128_instance_info;

C128_API const char *c128_status_string(c128_status status);
C128_API int c128_instance_count(void);
C128_API const char *c128_instance_name(int index);
C128_API c128_status c128_instance_info_get(int index, c128_instance_info *info);
/* Index of the instance for (head_dim, dtypes), or -1. */
C128_API int c128_find_instance(int head_dim, c128_dtype state, c128_dtype input, c128_dtype output);

/* Requests per decode block chosen when args.requests_per_block is 0, for a GPU of sm_count
   multiprocessors: the largest group that costs no more block-windows per SM slot than any
   other when every request is at a boundary (few blocks when few are: the common step). */
C128_API int32_t c128_decode_group_size(int64_t batch, int32_t head_dim, int32_t sm_count);
/* The same rule for compress windows per block (args.windows_per_block = 0). */
C128_API int32_t c128_prefill_group_size(int64_t num_compress, int32_t head_dim, int32_t sm_count);

C128_API c128_status c128_decode(const c128_decode_args *args, cudaStream_t stream);
C128_API c128_status c128_prefill(const c128_prefill_args *args, cudaStream_t stream);
/* The same kernels run on the CPU over host pointers; options may be NULL. */
C128_API c128_status c128_decode_host(const c128_decode_args *args, const c128_host_options *options);
C128_API c128_status c128_prefill_host(const c128_prefill_args *args, const c128_host_options *options);

#define C128__DECLARE_TYPED(name, D, bt, it, ot, bd, id, od)                                                    \
  C128_API c128_status c128_decode_##name(const c128_decode_args *args, cudaStream_t stream);                   \
  C128_API c128_status c128_prefill_##name(const c128_prefill_args *args, cudaStream_t stream);                 \
  C128_API c128_status c128_decode_host_##name(const c128_decode_args *args, const c128_host_options *options); \
  C128_API c128_status c128_prefill_host_##name(const c128_prefill_args *args, const c128_host_options *options);
C128_INSTANCES(C128__DECLARE_TYPED)
#undef C128__DECLARE_TYPED

/* bf16 storage from C: round to nearest even, NaN stays NaN. */
C128_API uint16_t c128_bf16_from_float(float value);
C128_API float c128_bf16_to_float(uint16_t bits);

/* >>checker API ----------------------------------------------------------------------------- */
typedef enum c128_plan_kind {
  C128_PLAN_DECODE = 0,
  C128_PLAN_COMPRESS = 1,
  C128_PLAN_WRITE = 2,
  C128__PLAN_KIND_RANGE_MAX = 2147483647
} c128_plan_kind;

typedef struct c128_plan_report {
  int64_t index;       /* out: the first offending plan, -1 when every plan is fine */
  c128_plan_kind kind; /* out: which array it is in */
  char *message;       /* optional buffer for what is wrong */
  size_t message_size;
} c128_plan_report;

/* Checks plans held in HOST memory against the sizes in args (tensor pointers are not used and
   may be NULL). Returns C128_SUCCESS, or C128_ERROR_INVALID_PLAN with the first offending plan
   in *report, or the status of a bad argument. It reports every condition that makes a kernel
   skip a plan (padding rows and sentinels excepted), and also: a boundary decode whose write
   slot is not row 127 of its read page, a compress plan whose seq_len is not a multiple of 128,
   and two plans of one batch that write the same slot. Uses 16 bytes of host scratch per plan
   (C128_ERROR_OUT_OF_MEMORY if it cannot have them). */
C128_API c128_status c128_check_decode_plans(const c128_decode_args *args, c128_plan_report *report);
C128_API c128_status c128_check_prefill_plans(const c128_prefill_args *args, c128_plan_report *report);

/* >>planner API ----------------------------------------------------------------------------- */
/* Where a request's tokens live (SPEC 5). Zero-initialised = legacy layout (R = 128, page = pool
   index), which still needs state_pages. */
typedef struct c128_ring {
  int32_t ring_tokens;       /* R: slots per request, a multiple of 128; 0 = 128 */
  int32_t speculative;       /* the engine runs speculative decoding on this ring */
  const int32_t *page_table; /* optional [num_pool][page_table_stride]; NULL = request ring */
  int64_t page_table_stride; /* entries per pool row, >= R / 128 */
  int64_t num_pool;          /* rows of page_table (ignored without one) */
  int64_t state_pages;       /* logical pages of the state */
} c128_ring;

typedef struct c128_request {
  int32_t pool_index; /* the request's row in the pool, not its batch position */
  int32_t seq_len;    /* length after this batch */
  int32_t extend_len; /* new tokens in this batch (drafts, root included, for verify) */
} c128_request;

/* Output of the prefill planner. The caller owns both arrays of `capacity` entries. */
typedef struct c128_prefill_plans {
  c128_compress_plan *compress;
  c128_write_plan *write;
  int64_t capacity;        /* entries of each array; input rows always suffice */
  int32_t pad_to_capacity; /* fill the tails with invalid sentinels */
  int64_t num_compress;    /* out: plans emitted (before padding) */
  int64_t num_write;       /* out */
} c128_prefill_plans;

/* Prefill / extend / verify batch -> plans in (request, position) order. verify != 0 marks a
   speculative verify batch (extend_len = drafts, root included). */
C128_API c128_status c128_plan_prefill(const c128_ring *ring, const c128_request *requests, int64_t num_requests,
                                       int32_t verify, c128_prefill_plans *plans);
/* Decode batch: one plan per request (extend_len ignored; seq_len 0 = padding row). */
C128_API c128_status c128_plan_decode(const c128_ring *ring, const c128_request *requests, int64_t batch,
                                      c128_decode_plan *plans);

/* The same planners on the device, from device arrays, for CUDA graphs: plans are padded to
   `capacity` with sentinels, and the batch's status and counts are written to device memory, so
   a captured step needs no host round trip. Byte-identical to the host planners with
   pad_to_capacity; deterministic (closed-form counts per request, one prefix sum, no atomics).
   A request {any, 0, 0} is absent (pads a fixed-size batch). On a bad batch *status gets the
   host planner's status, counts are 0 and every plan is a sentinel / padding row. */
typedef struct c128_device_plan_args {
  c128_ring ring;               /* ring.page_table, if any, in device memory */
  const c128_request *requests; /* device [num_requests] */
  int64_t num_requests;
  int32_t verify;
  c128_compress_plan *compress; /* device [capacity] (prefill) */
  c128_write_plan *write;       /* device [capacity] (prefill) */
  int64_t capacity;
  c128_decode_plan *decode; /* device [num_requests] (decode) */
  int64_t *counts;          /* device [2]: num_compress, num_write (out) */
  int32_t *status;          /* device [1]: c128_status of the batch (out) */
  void *workspace;          /* device, c128_plan_workspace_size(num_requests) bytes */
  int32_t pdl;
} c128_device_plan_args;

C128_API size_t c128_plan_workspace_size(int64_t num_requests);
C128_API c128_status c128_plan_prefill_device(const c128_device_plan_args *args, cudaStream_t stream);
C128_API c128_status c128_plan_decode_device(const c128_device_plan_args *args, cudaStream_t stream);
/* The device planners' code run on the CPU over host arrays. */
C128_API c128_status c128_plan_prefill_device_host(const c128_device_plan_args *args);
C128_API c128_status c128_plan_decode_device_host(const c128_device_plan_args *args);

#endif /* C128_CUH_INCLUDED */

/* ========================================================================================== */
/* Implementation                                                                             */
/* ========================================================================================== */
#if defined(C128_IMPLEMENTATION) && !defined(C128__IMPLEMENTATION_DONE)
#define C128__IMPLEMENTATION_DONE
#ifndef __CUDACC__
#error "c128.cuh: the implementation (C128_IMPLEMENTATION or C128_STATIC) must be compiled by nvcc"
#endif
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>

#define C128__FN static __host__ __device__ __forceinline__
#define C128__ALL_LANES 0xFFFFFFFFu
#ifdef __CUDA_ARCH__
#define C128__UNROLL _Pragma("unroll")
#define C128__NO_UNROLL _Pragma("unroll 1")
#else
#define C128__UNROLL
#define C128__NO_UNROLL
#endif
#define C128__LAST_ROW (C128_WINDOW - 1)

/* bf16 is stored as its bit pattern; conversions below are the library's own so that host and
   device round identically. */
typedef struct c128__bf16 {
  uint16_t bits;
} c128__bf16;

/* The instance table's storage types must match the dtype columns. */
#define C128__CHECK_ROW(name, D, bt, it, ot, bd, id, od)                                         \
  static_assert((D) % C128_TILE_DIM == 0, #name ": head_dim must be a multiple of 64");          \
  static_assert((D) <= C128_MAX_HEAD_DIM, #name ": head_dim must be at most C128_MAX_HEAD_DIM"); \
  static_assert(C128_NUM_SPLIT(D) * C128_TILE_DIM == (D), #name ": splits cover head_dim");      \
  static_assert(C128_PAGE_ELEMS(D) == C128_WINDOW * 2 * (D), #name ": page = 128 rows");         \
  static_assert(sizeof(bt) == ((bd) == C128_BF16 ? 2 : 4), #name ": state type matches dtype");  \
  static_assert(sizeof(it) == ((id) == C128_BF16 ? 2 : 4), #name ": input type matches dtype");  \
  static_assert(sizeof(ot) == ((od) == C128_BF16 ? 2 : 4), #name ": output type matches dtype");
C128_INSTANCES(C128__CHECK_ROW)
#undef C128__CHECK_ROW

/* >>device: arithmetic shared by host and device ------------------------------------------ */
/* Explicit round-to-nearest operations: nvcc would otherwise contract a*b+c into an fma on the
   device only, and host and device results would differ in the last bit. */
C128__FN float c128__add(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
C128__FN float c128__sub(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
C128__FN float c128__mul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
C128__FN float c128__div(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
C128__FN uint32_t c128__bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
#endif
}
C128__FN float c128__from_bits(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
#endif
}
C128__FN float c128__bf16_widen(uint32_t bits) { return c128__from_bits(bits << 16); }
C128__FN uint32_t c128__bf16_round(float f) {
  const uint32_t u = c128__bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (u >> 16) | 0x0040u; /* NaN stays a (quiet) NaN */
  return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;                   /* round to nearest even */
}

/* exp(x) for x <= 0 (a score minus its maximum: every argument the kernels pass), within 1.05 ulp
   (checked against double over every float in [-88, 0]), from fma and exact operations only,
   so that the host runner and the GPU get the same bits. Branch-free: the softmax calls it 8192
   times per window and split. Results below 2^-126 may flush to 0; exp(-inf) = 0, exp(NaN) is a
   NaN. */
C128__FN float c128__max_nan(float x, float lo) { /* IEEE maximum: NaN wins (fmaxf drops it) */
#ifdef __CUDA_ARCH__
  float y;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(y) : "f"(x), "f"(lo));
  return y;
#else
  return x != x ? x : fmaxf(x, lo);
#endif
}

C128__FN float c128__exp(float x) {
  const float round_magic = 12582912.0f;                       /* 1.5 * 2^23: adding it rounds to an integer */
  const float xc = c128__max_nan(x, -88.0f);                   /* keeps 2^n normal or 0; NaN flows through */
  const float t = fmaf(xc, 1.44269504088896341f, round_magic); /* n = round(x / ln 2) in the low bits */
  const float n = c128__sub(t, round_magic);
  float r = fmaf(n, -0.693145751953125f, xc); /* Cody-Waite: ln 2 = hi + lo, |r| <= ln2 / 2 */
  r = fmaf(n, -1.42860682030941723e-06f, r);
  float q = 0x1.6ae63cp-10f; /* degree 6, fitted for relative error 1.8e-8 on |r| <= ln2 / 2 */
  q = fmaf(q, r, 0x1.126888p-7f);
  q = fmaf(q, r, 0x1.555826p-5f);
  q = fmaf(q, r, 0x1.555418p-3f);
  q = fmaf(q, r, 0x1.fffffcp-2f);
  q = fmaf(q, r, 1.0f);
  q = fmaf(q, r, 1.0f);
  /* 2^n as bits: (n + 127) << 23, with n = bits(t) - bits(round_magic); n = -127 gives 0. */
  const float scale = c128__from_bits((c128__bits(t) << 23) + ((127u - c128__bits(round_magic)) << 23));
  return c128__mul(q, scale);
}

/* >>device: what a kernel sees ----------------------------------------------------------- */
typedef struct c128__checker c128__checker; /* host runner only */

/* An instance's compile-time identity; constant-folded wherever a kernel is stamped. */
typedef struct c128__trait {
  int head_dim;
  int buf, in, out; /* c128_dtype */
} c128__trait;

/* Kernel arguments, passed by value. plans points at the kernel's own plan kind. */
typedef struct c128__params {
  void *state;
  const void *input;
  const float *ape;
  void *output;
  const void *plans;
  int64_t num_plans, state_pages, input_rows, output_rows;
  int32_t rank, size, pages_per_rank;
  int32_t group; /* decode: requests per block */
  c128__checker *checker;
} c128__params;

/* One window of one compress event, as a block sees it after its plan was checked. */
typedef struct c128__window {
  int64_t state_row0; /* state row of window row 0 (rows < buffer_len come from here) */
  int64_t input_row0; /* input row of window row 0 (rows >= buffer_len come from here) */
  int64_t out_row;
  int32_t buffer_len;
  int32_t split;
} c128__window;

/* What a decode block does. */
typedef struct c128__decode_job {
  c128__window win;
  int64_t input_row, write_row;
  int32_t boundary, write;
} c128__decode_job;

/* The legacy epilogue pads the lane axis to dodge 16-way bank conflicts; the two-warp one reads
   32 consecutive floats per source warp and needs no padding. */
#if C128_EPILOGUE == C128_EPILOGUE_LEGACY
#define C128__SMEM_LANES (C128_WARP_THREADS + 1)
#else
#define C128__SMEM_LANES C128_WARP_THREADS
#endif
#define C128__SMEM_FLOATS_PER_WARP (C128_TILE_ELEMS * C128__SMEM_LANES)

/* Per-warp partial softmax triples, one 2-float vector per lane (= 2 channels). */
typedef struct c128__smem {
  float2 max[C128_NUM_WARPS][C128__SMEM_LANES];
  float2 sum[C128_NUM_WARPS][C128__SMEM_LANES];
  float2 acc[C128_NUM_WARPS][C128__SMEM_LANES];
} c128__smem;

static void c128__track(c128__checker *checker, const void *addr, int count, int elem_size, int is_write,
                        const void *data);

C128__FN int c128__elem_size(int dtype) { return dtype == C128_BF16 ? 2 : 4; }

/* Two consecutive elements at base[i] (i even), widened to f32. f32 window and input rows are read
   once (`stream`: evict first), so that ape, which every window re-reads, stays in L1. bf16 rows
   go without the hint: bf16-state decode measured from even to 9 % faster without it
   (BENCHMARKS.md, rounds 3 and 4). ape through the non-coherent path (__ldg) lets the compiler
   hoist its loads, which spills. */
C128__FN float2 c128__load2(const c128__params *p, const void *base, int64_t i, int dtype, int stream) {
  float2 v;
  uint32_t raw[2];
  if (dtype == C128_BF16) {
#ifdef __CUDA_ARCH__
    const unsigned int *a = (const unsigned int *)((const uint16_t *)base + i);
    raw[0] = *a;
#else
    memcpy(raw, (const uint16_t *)base + i, 4);
#endif
    v.x = c128__bf16_widen(raw[0] & 0xFFFFu);
    v.y = c128__bf16_widen(raw[0] >> 16);
  } else {
#ifdef __CUDA_ARCH__
    const float2 *a = (const float2 *)((const float *)base + i);
    v = stream ? __ldcs(a) : *a;
#else
    memcpy(&v, (const float *)base + i, 8);
#endif
    raw[0] = c128__bits(v.x);
    raw[1] = c128__bits(v.y);
  }
#ifndef __CUDA_ARCH__
  (void)stream;
  if (p->checker)
    c128__track(p->checker, (const char *)base + i * c128__elem_size(dtype), 2, c128__elem_size(dtype), 0, raw);
#else
  (void)p;
#endif
  return v;
}

C128__FN void c128__store_bits(const c128__params *p, void *dst, const void *bits, int count, int elem_size) {
#ifdef __CUDA_ARCH__
  (void)p;
  if (count * elem_size == 8) *(uint2 *)dst = *(const uint2 *)bits;
  else if (count * elem_size == 4) *(uint32_t *)dst = *(const uint32_t *)bits;
  else *(uint16_t *)dst = *(const uint16_t *)bits;
#else
  if (p->checker) c128__track(p->checker, dst, count, elem_size, 1, bits);
  memcpy(dst, bits, (size_t)(count * elem_size));
#endif
}

/* Store one f32 value into base[i], rounding to the dtype. */
C128__FN void c128__store1(const c128__params *p, void *base, int64_t i, int dtype, float v) {
  if (dtype == C128_BF16) {
    const uint16_t h = (uint16_t)c128__bf16_round(v);
    c128__store_bits(p, (uint16_t *)base + i, &h, 1, 2);
  } else {
    c128__store_bits(p, (float *)base + i, &v, 1, 4);
  }
}

/* Two elements of an input row on their way to a state row: the raw bits when the dtypes agree
   (they travel untouched), else the values widened to f32. */
typedef struct c128__pair {
  uint32_t raw[2];
  float2 value;
} c128__pair;

C128__FN c128__pair c128__fetch2(const c128__params *p, c128__trait t, int64_t in_elem) {
  c128__pair v = {{0u, 0u}, {0.0f, 0.0f}};
  if (t.buf == t.in) {
    const int es = c128__elem_size(t.in);
#ifdef __CUDA_ARCH__
    if (es == 4) *(uint2 *)v.raw = *(const uint2 *)((const float *)p->input + in_elem);
    else v.raw[0] = *(const uint32_t *)((const uint16_t *)p->input + in_elem);
#else
    memcpy(v.raw, (const char *)p->input + in_elem * es, (size_t)(2 * es));
#endif
  } else {
    v.value = c128__load2(p, p->input, in_elem, t.in, 1);
  }
  return v;
}

/* Store a fetched pair into state element st_elem, converting to the state dtype. */
C128__FN void c128__put2(const c128__params *p, c128__trait t, const c128__pair *v, int64_t st_elem) {
  if (t.buf == t.in) {
    const int es = c128__elem_size(t.in);
    c128__store_bits(p, (char *)p->state + st_elem * es, v->raw, 2, es);
  } else if (t.buf == C128_BF16) {
    const uint32_t packed = c128__bf16_round(v->value.x) | (c128__bf16_round(v->value.y) << 16);
    c128__store_bits(p, (uint16_t *)p->state + st_elem, &packed, 2, 2);
  } else {
    c128__store_bits(p, (float *)p->state + st_elem, &v->value, 2, 4);
  }
}

/* >>device: plan checks (SPEC 6.5) -------------------------------------------------------- */
/* Physical page of a logical one, or -1 when the logical page is outside the logical range
   (checked before translation: a bad logical page could otherwise land on a good one) or its
   translation is outside this rank's pages. */
/* Pages come from int32 plan fields, so 32-bit division does (a 64-bit one is a call, whose
   saved registers the window loop cannot afford). */
C128__FN int64_t c128__physical_page(const c128__params *p, int32_t logical) {
  const int32_t size = p->size > 1 ? p->size : 1;
  const int64_t logical_pages = size == 1 ? p->state_pages : (int64_t)size * p->pages_per_rank;
  if (logical < 0 || logical >= logical_pages) return -1;
  const int64_t physical =
      size == 1 ? logical : (int64_t)((logical % size - p->rank + size) % size) * p->pages_per_rank + logical / size;
  return physical < p->state_pages ? physical : -1;
}
C128__FN int c128__owned(const c128__params *p, int32_t logical_page) {
  return p->size <= 1 || logical_page % p->size == p->rank;
}

/* Plans are read-only for a launch: the non-coherent path lets their loads move ahead of the
   kernel's stores. */
C128__FN void c128__read_plan(const void *src, void *dst, int bytes) {
#ifdef __CUDA_ARCH__
  if (bytes == 16) *(uint4 *)dst = __ldg((const uint4 *)src);
  else *(uint2 *)dst = __ldg((const uint2 *)src);
#else
  memcpy(dst, src, (size_t)bytes);
#endif
}

/* Why a plan does not run. The kernels skip a plan for any reason but RUN; the host plan
   checker reports the first plan whose reason is neither RUN nor PADDING, with this text. */
#define C128__PLAN_REASONS(X)                                                                       \
  X(C128__RUN, "runs")                                                                              \
  X(C128__PADDING, "padding row or invalid sentinel")                                               \
  X(C128__BAD_WRITE_PAGE, "write slot outside the state (negative write_loc or page out of range)") \
  X(C128__BAD_READ_PAGE, "read_page_1 outside the state")                                           \
  X(C128__BAD_INPUT_ROW, "input row outside [0, input_rows)")                                       \
  X(C128__BAD_WINDOW_START, "window's first input row lies before input row 0")                     \
  X(C128__BAD_OUTPUT_ROW, "output row at or beyond output_rows")                                    \
  X(C128__BAD_BUFFER_LEN, "buffer_len > 127")
enum c128__plan_reason {
#define C128__REASON_ENUM(name, text) name,
  C128__PLAN_REASONS(C128__REASON_ENUM)
#undef C128__REASON_ENUM
};

/* Request b's job in split `split`, or why it has nothing to do. */
C128__FN int c128__decode_prepare(const c128__params *p, int64_t b, int split, c128__decode_job *job) {
  c128_decode_plan plan;
  c128__read_plan((const c128_decode_plan *)p->plans + b, &plan, sizeof plan);
  if (plan.seq_len == 0 || plan.write_loc < 0) return C128__PADDING;
  if (b >= p->input_rows) return C128__BAD_INPUT_ROW;
  const int32_t write_page = plan.write_loc / C128_WINDOW;
  const int64_t write_phys = c128__physical_page(p, write_page);
  if (write_phys < 0) return C128__BAD_WRITE_PAGE;
  job->input_row = b;
  job->write_row = write_phys * C128_WINDOW + plan.write_loc % C128_WINDOW;
  job->write = c128__owned(p, write_page);
  job->boundary = plan.write_loc % C128_WINDOW == C128__LAST_ROW;
  job->win.split = split;
  if (!job->boundary) return C128__RUN;
  /* Rows 0..126 from the read page, row 127 straight from the input (SPEC 6.2). */
  const int64_t read_phys = c128__physical_page(p, plan.read_page_1);
  if (read_phys < 0) return C128__BAD_READ_PAGE;
  if (b >= p->output_rows) return C128__BAD_OUTPUT_ROW;
  job->win.state_row0 = read_phys * C128_WINDOW;
  job->win.input_row0 = b - C128__LAST_ROW;
  job->win.buffer_len = C128__LAST_ROW;
  job->win.out_row = b;
  return C128__RUN;
}

C128__FN int c128__compress_prepare(const c128__params *p, c128__trait t, int64_t block, c128__window *w) {
  const int num_split = C128_NUM_SPLIT(t.head_dim);
  const int64_t k = block / num_split;
  c128_compress_plan plan;
  c128__read_plan((const c128_compress_plan *)p->plans + k, &plan, sizeof plan);
  if (plan.seq_len == C128_INVALID_ID) return C128__PADDING;
  if (plan.buffer_len > C128__LAST_ROW) return C128__BAD_BUFFER_LEN;
  if (k >= p->output_rows) return C128__BAD_OUTPUT_ROW;
  if (plan.ragged_id >= p->input_rows) return C128__BAD_INPUT_ROW;
  if ((int64_t)plan.ragged_id - C128__LAST_ROW + plan.buffer_len < 0) return C128__BAD_WINDOW_START;
  int64_t read_phys = 0;
  if (plan.buffer_len > 0 && (read_phys = c128__physical_page(p, plan.read_page_1)) < 0) return C128__BAD_READ_PAGE;
  w->state_row0 = read_phys * C128_WINDOW;
  w->input_row0 = (int64_t)plan.ragged_id - C128__LAST_ROW;
  w->buffer_len = plan.buffer_len;
  w->out_row = k;
  w->split = (int32_t)(block % num_split);
  return C128__RUN;
}

/* Write plan -> (input row, physical state row), or why it does not run. A slot another rank
   owns runs as a no-op: dst_row = -1. */
C128__FN int c128__write_prepare(const c128__params *p, int64_t index, int64_t *src_row, int64_t *dst_row) {
  c128_write_plan plan;
  c128__read_plan((const c128_write_plan *)p->plans + index, &plan, sizeof plan);
  if (plan.ragged_id == C128_INVALID_ID) return C128__PADDING;
  if (plan.ragged_id >= p->input_rows) return C128__BAD_INPUT_ROW;
  const int32_t page = plan.write_loc < 0 ? -1 : plan.write_loc / C128_WINDOW;
  const int64_t phys = c128__physical_page(p, page);
  if (phys < 0) return C128__BAD_WRITE_PAGE;
  *src_row = plan.ragged_id;
  *dst_row = c128__owned(p, page) ? phys * C128_WINDOW + plan.write_loc % C128_WINDOW : -1;
  return C128__RUN;
}

/* >>device: the compress routine (SPEC 6.1) ---------------------------------------------- */
/* Phase 1, one thread: load its 8 rows x 2 channels, form the partial (max, sum, weighted sum)
   of each channel and publish them in shared memory. */
C128__FN void c128__partials(const c128__params *p, c128__trait t, const c128__window *w, int tid, c128__smem *sm) {
  const int warp = tid / C128_WARP_THREADS, lane = tid % C128_WARP_THREADS;
  const int64_t row_elems = C128_ROW_ELEMS(t.head_dim);
  const int64_t ch = (int64_t)w->split * C128_TILE_DIM + C128_TILE_ELEMS * lane;
  float2 kv[C128_ROWS_PER_WARP], score[C128_ROWS_PER_WARP];
  const int first = warp * C128_ROWS_PER_WARP; /* this warp's window rows: first .. first + 7 */
  if (t.buf == t.in || first >= w->buffer_len || first + C128_ROWS_PER_WARP <= w->buffer_len) {
    /* One source for the whole warp (or one dtype for both): addresses from one base, no
       per-row branch. Every load is issued before any use. */
    const int from_state = first < w->buffer_len;
    C128__UNROLL
    for (int r = 0; r < C128_ROWS_PER_WARP; ++r) {
      const int j = first + r, state_row = t.buf == t.in ? j < w->buffer_len : from_state;
      const void *base = state_row ? (const void *)p->state : p->input;
      const int64_t row = state_row ? w->state_row0 + j : w->input_row0 + j;
      const int dtype = state_row ? t.buf : t.in;
      kv[r] = c128__load2(p, base, row * row_elems + ch, dtype, 1);
      score[r] = c128__load2(p, base, row * row_elems + C128_SCORE_OFFSET(t.head_dim) + ch, dtype, 1);
    }
  } else { /* the one warp whose rows straddle buffer_len, with two dtypes */
    C128__UNROLL
    for (int r = 0; r < C128_ROWS_PER_WARP; ++r) {
      const int j = first + r;
      if (j < w->buffer_len) {
        kv[r] = c128__load2(p, p->state, (w->state_row0 + j) * row_elems + ch, t.buf, 1);
        score[r] =
            c128__load2(p, p->state, (w->state_row0 + j) * row_elems + C128_SCORE_OFFSET(t.head_dim) + ch, t.buf, 1);
      } else {
        kv[r] = c128__load2(p, p->input, (w->input_row0 + j) * row_elems + ch, t.in, 1);
        score[r] =
            c128__load2(p, p->input, (w->input_row0 + j) * row_elems + C128_SCORE_OFFSET(t.head_dim) + ch, t.in, 1);
      }
    }
  }
  float2 m = make_float2(-INFINITY, -INFINITY);
  C128__UNROLL
  for (int r = 0; r < C128_ROWS_PER_WARP; ++r) {
    const float2 ape = c128__load2(p, p->ape, (int64_t)(warp * C128_ROWS_PER_WARP + r) * t.head_dim + ch, C128_F32, 0);
    score[r].x = c128__add(score[r].x, ape.x);
    score[r].y = c128__add(score[r].y, ape.y);
    m.x = fmaxf(m.x, score[r].x);
    m.y = fmaxf(m.y, score[r].y);
  }
  /* A warp whose 8 scores are all -inf contributes nothing, not NaN. */
  const float2 shift = make_float2(m.x == -INFINITY ? 0.0f : m.x, m.y == -INFINITY ? 0.0f : m.y);
  float2 sum = make_float2(0.0f, 0.0f), acc = make_float2(0.0f, 0.0f);
  C128__UNROLL
  for (int r = 0; r < C128_ROWS_PER_WARP; ++r) {
    const float ex = c128__exp(c128__sub(score[r].x, shift.x));
    const float ey = c128__exp(c128__sub(score[r].y, shift.y));
    sum.x = c128__add(sum.x, ex);
    sum.y = c128__add(sum.y, ey);
    acc.x = fmaf(kv[r].x, ex, acc.x);
    acc.y = fmaf(kv[r].y, ey, acc.y);
  }
  sm->max[warp][lane] = m;
  sm->sum[warp][lane] = sum;
  sm->acc[warp][lane] = acc;
}

/* Partial of source warp w for channel c (0..63) of the split. */
// clang-format off
#define C128__PARTIAL(sm, field, w, c) ((&(sm)->field[0][0].x)[(w) * C128__SMEM_FLOATS_PER_WARP + (c)])
// clang-format on

/* Phase 2, two-warp epilogue: thread t < 64 folds the 16 partials of channel t in registers. */
C128__FN void c128__fold_two_warp(const c128__params *p, c128__trait t, const c128__window *w, int tid,
                                  const c128__smem *sm) {
  if (tid >= C128_TILE_DIM) return;
  float m[C128_NUM_WARPS];
  float big = -INFINITY;
  C128__UNROLL
  for (int i = 0; i < C128_NUM_WARPS; ++i) {
    m[i] = C128__PARTIAL(sm, max, i, tid);
    big = fmaxf(big, m[i]);
  }
  const float shift = big == -INFINITY ? 0.0f : big;
  float denom = 0.0f, numer = 0.0f;
  C128__UNROLL
  for (int i = 0; i < C128_NUM_WARPS; ++i) {
    const float r = c128__exp(c128__sub(m[i], shift));
    denom = fmaf(C128__PARTIAL(sm, sum, i, tid), r, denom);
    numer = fmaf(C128__PARTIAL(sm, acc, i, tid), r, numer);
  }
  const int64_t out = w->out_row * t.head_dim + (int64_t)w->split * C128_TILE_DIM + tid;
  c128__store1(p, p->output, out, t.out, c128__div(numer, denom));
}

/* xor-butterfly over the 16 lanes of a half-warp. The device trades registers; the host runner,
   which runs one lane at a time, replays the same tree over all 16 lanes' inputs (`lanes`), so
   both produce the same bits. */
C128__FN float c128__butterfly16(float own, const float *lanes, int is_max, int lane) {
#ifdef __CUDA_ARCH__
  (void)lanes;
  (void)lane;
  C128__UNROLL
  for (int o = 8; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(C128__ALL_LANES, own, o);
    own = is_max ? fmaxf(own, other) : c128__add(own, other);
  }
  return own;
#else
  (void)own;
  float v[16], next[16];
  memcpy(v, lanes, sizeof v);
  for (int o = 8; o > 0; o >>= 1) {
    for (int i = 0; i < 16; ++i) next[i] = is_max ? fmaxf(v[i], v[i ^ o]) : c128__add(v[i], v[i ^ o]);
    memcpy(v, next, sizeof v);
  }
  return v[lane];
#endif
}

/* Phase 2, legacy epilogue: all 512 threads in 2 passes; each half-warp owns one channel, its
   16 lanes hold the 16 partials; every lane stores the result. */
C128__FN void c128__fold_legacy(const c128__params *p, c128__trait t, const c128__window *w, int tid,
                                const c128__smem *sm) {
  const int src = tid % 16, half = tid / 16;
  const int halves = C128_BLOCK_THREADS / 16;
  float lanes_m[16], lanes_s[16], lanes_p[16]; /* host replay only */
  C128__UNROLL
  for (int pass = 0; pass < C128_TILE_DIM / halves; ++pass) {
    const int c = pass * halves + half;
    const float m = C128__PARTIAL(sm, max, src, c);
#ifndef __CUDA_ARCH__
    for (int i = 0; i < 16; ++i) lanes_m[i] = C128__PARTIAL(sm, max, i, c);
#endif
    const float big = c128__butterfly16(m, lanes_m, 1, src);
    const float shift = big == -INFINITY ? 0.0f : big;
    const float r = c128__exp(c128__sub(m, shift));
#ifndef __CUDA_ARCH__
    for (int i = 0; i < 16; ++i)
      lanes_s[i] = c128__mul(C128__PARTIAL(sm, sum, i, c), c128__exp(c128__sub(lanes_m[i], shift)));
#endif
    const float denom = c128__butterfly16(c128__mul(C128__PARTIAL(sm, sum, src, c), r), lanes_s, 0, src);
#ifndef __CUDA_ARCH__
    for (int i = 0; i < 16; ++i)
      lanes_p[i] = c128__mul(C128__PARTIAL(sm, acc, i, c), c128__div(c128__exp(c128__sub(lanes_m[i], shift)), denom));
#endif
    const float out =
        c128__butterfly16(c128__mul(C128__PARTIAL(sm, acc, src, c), c128__div(r, denom)), lanes_p, 0, src);
    c128__store1(p, p->output, w->out_row * t.head_dim + (int64_t)w->split * C128_TILE_DIM + c, t.out, out);
  }
  (void)lanes_m;
  (void)lanes_s;
  (void)lanes_p;
}

C128__FN void c128__fold(const c128__params *p, c128__trait t, const c128__window *w, int tid, const c128__smem *sm) {
#if C128_EPILOGUE == C128_EPILOGUE_LEGACY
  c128__fold_legacy(p, t, w, tid, sm);
#else
  c128__fold_two_warp(p, t, w, tid, sm);
#endif
}

/* A block takes `group` consecutive jobs of one split (decode: requests, prefill: compress
   plans) and compresses their windows one after another. Window i's partials go to buffer i % 2,
   so one barrier a window suffices: the threads that fold window i reach the next barrier only
   after that fold, and only past it does anyone overwrite buffer i % 2. The other warps go on to
   the next window's loads while warps 0-1 fold. */
typedef struct c128__block_shared {
  c128__smem fold[2];
  c128__window windows[C128_WARP_THREADS]; /* the group's runnable windows, in job order */
} c128__block_shared;
C128__STATIC_ASSERT(C128_MAX_DECODE_GROUP <= C128_WARP_THREADS && C128_MAX_PREFILL_GROUP <= C128_WARP_THREADS,
                    "one lane per job of a group");

/* The block's jobs: first .. end - 1 of its split. Plan indices fit int32 (checked at launch). */
typedef struct c128__jobs {
  int32_t first, end, split;
} c128__jobs;

C128__FN c128__jobs c128__block_jobs(const c128__params *p, c128__trait t, int64_t block) {
  const int num_split = C128_NUM_SPLIT(t.head_dim);
  c128__jobs j;
  j.split = (int32_t)(block % num_split);
  j.first = (int32_t)(block / num_split * p->group);
  j.end = (int32_t)(j.first + p->group < p->num_plans ? j.first + p->group : p->num_plans);
  return j;
}

/* Job k's window, if it compresses in this launch (decode: the request runs and sits at a
   boundary; prefill: the plan runs). */
C128__FN int c128__job_window(const c128__params *p, c128__trait t, int decode, const c128__jobs *j, int k,
                              c128__window *w) {
  if (j->first + k >= j->end) return 0;
  if (!decode)
    return c128__compress_prepare(p, t, (int64_t)(j->first + k) * C128_NUM_SPLIT(t.head_dim) + j->split, w) ==
           C128__RUN;
  c128__decode_job job;
  const int runs = c128__decode_prepare(p, j->first + k, j->split, &job) == C128__RUN && job.boundary;
  *w = job.win;
  return runs;
}

/* Bit k of the result: job k compresses. Lane k of every warp looks at job k and a ballot
   gathers the answers, so every warp knows the count without waiting for another; warp 0 also
   lists the windows in shared memory (read after a barrier). */
C128__FN uint32_t c128__list_windows(const c128__params *p, c128__trait t, int decode, const c128__jobs *j, int tid,
                                     c128__block_shared *sh) {
#ifdef __CUDA_ARCH__
  const int lane = tid % C128_WARP_THREADS;
  c128__window w;
  const int runs = lane < p->group && c128__job_window(p, t, decode, j, lane, &w);
  const uint32_t mask = __ballot_sync(C128__ALL_LANES, runs);
  if (runs && tid < C128_WARP_THREADS) sh->windows[__popc(mask & ((1u << lane) - 1u))] = w;
  return mask;
#else
  uint32_t mask = 0;
  for (int k = 0, n = 0; k < p->group; ++k) { /* one host "thread" stands for the whole warp */
    if (!c128__job_window(p, t, decode, j, k, &sh->windows[n])) continue;
    mask |= 1u << k;
    ++n;
  }
  (void)tid;
  return mask;
#endif
}

C128__FN int c128__popcount(uint32_t mask) {
  int n = 0;
  for (; mask; mask &= mask - 1u) ++n;
  return n;
}

/* Decode: warp w persists the new token of requests first + w and first + w + 16 (within the
   group). Their input rows are requested first (row b belongs to plan b), before anything waits
   on a plan, so that the input and plan loads overlap; the stores follow the plans. Valid plans'
   windows never read these rows; the barrier that publishes the window list orders the two
   within a block anyway. */
#define C128__WRITES_PER_WARP 2
C128__STATIC_ASSERT(C128_MAX_DECODE_GROUP <= C128__WRITES_PER_WARP * C128_NUM_WARPS, "rows a decode warp persists");
typedef struct c128__decode_rows {
  c128__pair kv[C128__WRITES_PER_WARP], score[C128__WRITES_PER_WARP];
} c128__decode_rows;

C128__FN int64_t c128__decode_channel(const c128__jobs *j, int tid) {
  return (int64_t)j->split * C128_TILE_DIM + C128_TILE_ELEMS * (tid % C128_WARP_THREADS);
}

C128__FN void c128__decode_fetch(const c128__params *p, c128__trait t, const c128__jobs *j, int tid,
                                 c128__decode_rows *rows) {
  const int64_t row_elems = C128_ROW_ELEMS(t.head_dim), ch = c128__decode_channel(j, tid);
  C128__UNROLL
  for (int i = 0; i < C128__WRITES_PER_WARP; ++i) {
    const int32_t b = j->first + tid / C128_WARP_THREADS + i * C128_NUM_WARPS;
    if (b >= j->end) break;
    rows->kv[i] = c128__fetch2(p, t, (int64_t)b * row_elems + ch);
    rows->score[i] = c128__fetch2(p, t, (int64_t)b * row_elems + C128_SCORE_OFFSET(t.head_dim) + ch);
  }
}

C128__FN void c128__decode_writes(const c128__params *p, c128__trait t, const c128__jobs *j, int tid,
                                  const c128__decode_rows *rows) {
  const int64_t row_elems = C128_ROW_ELEMS(t.head_dim), ch = c128__decode_channel(j, tid);
  C128__UNROLL
  for (int i = 0; i < C128__WRITES_PER_WARP; ++i) {
    const int32_t b = j->first + tid / C128_WARP_THREADS + i * C128_NUM_WARPS;
    c128__decode_job job;
    if (b >= j->end) break;
    if (c128__decode_prepare(p, b, j->split, &job) != C128__RUN || !job.write) continue;
    c128__put2(p, t, &rows->kv[i], job.write_row * row_elems + ch);
    c128__put2(p, t, &rows->score[i], job.write_row * row_elems + C128_SCORE_OFFSET(t.head_dim) + ch);
  }
}

/* Write kernel, one warp per write plan: the warp copies the whole row, a batch of pairs at a
   time with every load of a batch issued before its stores (a plan's row is 2 * head_dim
   elements; lane l takes the pairs l, l + 32, ...). */
#define C128__WRITE_BATCH 8 /* pairs in flight per lane */
C128__FN void c128__write_row(const c128__params *p, c128__trait t, int64_t index, int lane) {
  int64_t src_row, dst_row;
  if (c128__write_prepare(p, index, &src_row, &dst_row) != C128__RUN || dst_row < 0) return;
  const int64_t row_elems = C128_ROW_ELEMS(t.head_dim);
  const int pairs = C128_ROW_ELEMS(t.head_dim) / (C128_TILE_ELEMS * C128_WARP_THREADS);
  for (int k0 = 0; k0 < pairs; k0 += C128__WRITE_BATCH) {
    c128__pair v[C128__WRITE_BATCH];
    C128__UNROLL
    for (int k = 0; k < C128__WRITE_BATCH; ++k)
      if (k0 + k < pairs)
        v[k] = c128__fetch2(p, t, src_row * row_elems + C128_TILE_ELEMS * ((k0 + k) * C128_WARP_THREADS + lane));
    C128__UNROLL
    for (int k = 0; k < C128__WRITE_BATCH; ++k)
      if (k0 + k < pairs)
        c128__put2(p, t, &v[k], dst_row * row_elems + C128_TILE_ELEMS * ((k0 + k) * C128_WARP_THREADS + lane));
  }
}

/* >>kernels ------------------------------------------------------------------------------- */
/* PDL: wait for the predecessor's memory before touching plans, input or state. Dependents may
   launch once every block has issued its last load: they wait for this grid to complete before
   they read anything (griddepcontrol.wait), so an early trigger only lets their launch overlap
   this grid's last folds and stores. */
static __device__ __forceinline__ void c128__pdl_wait(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
static __device__ __forceinline__ void c128__pdl_trigger(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* The window loop of both kernels (see c128__block_shared), after the barrier that publishes
   the list. Dependents are triggered once the block's last loads are issued. */
static __device__ __forceinline__ void c128__window_loop(const c128__params *p, c128__trait t, int count, int tid,
                                                         c128__block_shared *sh) {
  C128__NO_UNROLL
  for (int i = 0; i < count; ++i) {
    const c128__window win = sh->windows[i]; /* in registers: reading it from shared costs a spill */
    c128__partials(p, t, &win, tid, &sh->fold[i % 2]);
    if (i + 1 == count) c128__pdl_trigger();
    __syncthreads();
    c128__fold(p, t, &win, tid, &sh->fold[i % 2]);
  }
}

static __device__ __forceinline__ void c128__decode_block(const c128__params *p, c128__trait t) {
  __shared__ c128__block_shared sh;
  const int tid = (int)threadIdx.x;
  c128__pdl_wait();
  const c128__jobs j = c128__block_jobs(p, t, blockIdx.x);
  c128__decode_rows rows;
  c128__decode_fetch(p, t, &j, tid, &rows);
  const uint32_t mask = c128__list_windows(p, t, 1, &j, tid, &sh);
  c128__decode_writes(p, t, &j, tid, &rows);
  if (!mask) { /* the common step: nothing to compress, no barrier */
    c128__pdl_trigger();
    return;
  }
  __syncthreads();
  c128__window_loop(p, t, __popc(mask), tid, &sh);
}

static __device__ __forceinline__ void c128__compress_block(const c128__params *p, c128__trait t) {
  __shared__ c128__block_shared sh;
  const int tid = (int)threadIdx.x;
  c128__pdl_wait();
  const c128__jobs j = c128__block_jobs(p, t, blockIdx.x);
  const uint32_t mask = c128__list_windows(p, t, 0, &j, tid, &sh);
  if (!mask) {
    c128__pdl_trigger();
    return;
  }
  __syncthreads();
  c128__window_loop(p, t, __popc(mask), tid, &sh);
}

static __device__ __forceinline__ void c128__write_block(const c128__params *p, c128__trait t) {
  const int64_t index = (int64_t)blockIdx.x * C128_WRITE_WARPS + threadIdx.x / C128_WARP_THREADS;
  if (index < p->num_plans) { /* tail warps exit before any read */
    c128__pdl_wait();
    c128__write_row(p, t, index, (int)(threadIdx.x % C128_WARP_THREADS));
  }
  c128__pdl_trigger();
}

#define C128__KERNELS(name, D, bt, it, ot, bd, id, od)                                         \
  static __global__ void __launch_bounds__(C128_BLOCK_THREADS, C128_BLOCKS_PER_SM)             \
      c128__decode_kernel_##name(const c128__params p) {                                       \
    const c128__trait t = {D, bd, id, od};                                                     \
    c128__decode_block(&p, t);                                                                 \
  }                                                                                            \
  static __global__ void __launch_bounds__(C128_BLOCK_THREADS, C128_BLOCKS_PER_SM)             \
      c128__compress_kernel_##name(const c128__params p) {                                     \
    const c128__trait t = {D, bd, id, od};                                                     \
    c128__compress_block(&p, t);                                                               \
  }                                                                                            \
  static __global__ void __launch_bounds__(C128_WRITE_BLOCK_THREADS, C128_WRITE_BLOCKS_PER_SM) \
      c128__write_kernel_##name(const c128__params p) {                                        \
    const c128__trait t = {D, bd, id, od};                                                     \
    c128__write_block(&p, t);                                                                  \
  }
C128_INSTANCES(C128__KERNELS)
#undef C128__KERNELS

/* >>host: the CPU runner and its race checker (SPEC 7) ------------------------------------ */
/* Last writer and up to two readers of one state/output element within one launch. Block ids
   are stored + 1 so that a zeroed shadow means "untouched". */
typedef struct c128__shadow {
  uint32_t bits;
  int32_t wblock, rblock[2];
  int16_t wtid, rtid[2];
  int8_t wphase, rphase[2];
} c128__shadow;

enum { C128__STATE_REGION, C128__OUTPUT_REGION, C128__REGIONS };
#define C128__SHADOW_CHUNK 4096 /* elements per piece of shadow, allocated when first touched */

struct c128__checker {
  const char *base[C128__REGIONS];
  size_t bytes[C128__REGIONS];
  c128__shadow **chunks[C128__REGIONS];
  size_t num_chunks[C128__REGIONS];
  int32_t block, tid, phase;
  int raced, out_of_memory;
  char *message;
  size_t message_size;
};

static c128__shadow *c128__shadow_of(c128__checker *c, int region, size_t elem) {
  c128__shadow **chunk = &c->chunks[region][elem / C128__SHADOW_CHUNK];
  if (!*chunk && !(*chunk = (c128__shadow *)calloc(C128__SHADOW_CHUNK, sizeof(c128__shadow)))) {
    c->out_of_memory = 1;
    return NULL;
  }
  return *chunk + elem % C128__SHADOW_CHUNK;
}

static void c128__checker_free(c128__checker *c) {
  for (int r = 0; r < C128__REGIONS; ++r) {
    for (size_t k = 0; c->chunks[r] && k < c->num_chunks[r]; ++k) free(c->chunks[r][k]);
    free(c->chunks[r]);
  }
}

static void c128__race(c128__checker *c, const char *what, int region, size_t elem, int32_t block, int tid) {
  if (c->raced++ || !c->message || !c->message_size) return;
  snprintf(c->message, c->message_size, "%s on %s element %zu: block %d thread %d phase %d vs block %d thread %d", what,
           region == C128__STATE_REGION ? "state" : "output", elem, (int)c->block, (int)c->tid, (int)c->phase,
           (int)block - 1, tid);
}

static void c128__track(c128__checker *c, const void *addr, int count, int elem_size, int is_write, const void *data) {
  const char *a = (const char *)addr;
  for (int region = 0; region < C128__REGIONS; ++region) {
    if (!c->base[region] || a < c->base[region] || a >= c->base[region] + c->bytes[region]) continue;
    const size_t first = (size_t)(a - c->base[region]) / (size_t)elem_size;
    const int32_t block = c->block + 1;
    for (int i = 0; i < count; ++i) {
      c128__shadow *s = c128__shadow_of(c, region, first + (size_t)i);
      if (!s) return;
      uint32_t bits = 0;
      memcpy(&bits, (const char *)data + i * elem_size, (size_t)elem_size);
      const int same_phase_other = s->wphase == c->phase && s->wtid != c->tid;
      if (!is_write) {
        if (s->wblock && (s->wblock != block || same_phase_other))
          c128__race(c, "read after write", region, first + (size_t)i, s->wblock, s->wtid);
        const int slot = !s->rblock[0] || (s->rblock[0] == block && s->rtid[0] == c->tid) ? 0 : 1;
        s->rblock[slot] = block;
        s->rtid[slot] = (int16_t)c->tid;
        s->rphase[slot] = (int8_t)c->phase;
        continue;
      }
      /* Lanes of one warp storing identical bits in one phase (the legacy epilogue) are fine. */
      /* Two NaNs count as the same value: the host keeps NaN payloads, so lanes that replay a
         butterfly in different operand orders may end with different NaN bits. */
      const uint32_t magnitude = elem_size == 4 ? 0x7FFFFFFFu : 0x7FFFu, inf = elem_size == 4 ? 0x7F800000u : 0x7F80u;
      const int both_nan = (s->bits & magnitude) > inf && (bits & magnitude) > inf;
      const int same_warp_same_bits =
          s->wtid / C128_WARP_THREADS == c->tid / C128_WARP_THREADS && (s->bits == bits || both_nan);
      if (s->wblock && (s->wblock != block || (same_phase_other && !same_warp_same_bits)))
        c128__race(c, "write after write", region, first + (size_t)i, s->wblock, s->wtid);
      for (int r = 0; r < 2; ++r)
        if (s->rblock[r] && (s->rblock[r] != block || (s->rphase[r] == c->phase && s->rtid[r] != c->tid)))
          c128__race(c, "write after read", region, first + (size_t)i, s->rblock[r], s->rtid[r]);
      s->wblock = block;
      s->wtid = (int16_t)c->tid;
      s->wphase = (int8_t)c->phase;
      s->bits = bits;
    }
    return;
  }
}

enum { C128__KIND_DECODE, C128__KIND_COMPRESS, C128__KIND_WRITE };

/* Runs one launch on the CPU: for each block, phase 1 for every thread, then phase 2. */
static c128_status c128__run_host(c128__params p, c128__trait t, int kind, int64_t blocks, const c128_host_options *o) {
  c128__checker checker;
  memset(&checker, 0, sizeof checker);
  if (o && o->check_races) {
    checker.base[C128__STATE_REGION] = (const char *)p.state;
    checker.bytes[C128__STATE_REGION] = (size_t)p.state_pages * C128_PAGE_ELEMS(t.head_dim) * c128__elem_size(t.buf);
    checker.base[C128__OUTPUT_REGION] = (const char *)p.output;
    checker.bytes[C128__OUTPUT_REGION] = (size_t)p.output_rows * t.head_dim * c128__elem_size(t.out);
    checker.message = o->message;
    checker.message_size = o->message_size;
    for (int r = 0; r < C128__REGIONS; ++r) {
      const size_t elems = checker.bytes[r] / (size_t)c128__elem_size(r == C128__STATE_REGION ? t.buf : t.out);
      checker.num_chunks[r] = (elems + C128__SHADOW_CHUNK - 1) / C128__SHADOW_CHUNK;
      checker.chunks[r] = (c128__shadow **)calloc(checker.num_chunks[r] + 1, sizeof(c128__shadow *));
    }
    if (!checker.chunks[0] || !checker.chunks[1]) {
      c128__checker_free(&checker);
      return C128_ERROR_OUT_OF_MEMORY;
    }
    p.checker = &checker;
  }
  const int threads = kind == C128__KIND_WRITE ? C128_WRITE_BLOCK_THREADS : C128_BLOCK_THREADS;
  c128__block_shared sh; /* the block's shared memory */
  for (int64_t i = 0; i < blocks; ++i) {
    const int64_t block = o && o->reverse_blocks ? blocks - 1 - i : i;
    checker.block = (int32_t)block;
    checker.phase = 0;
    if (kind == C128__KIND_WRITE) {
      for (checker.tid = 0; checker.tid < threads; ++checker.tid) {
        const int64_t index = block * C128_WRITE_WARPS + checker.tid / C128_WARP_THREADS;
        if (index < p.num_plans) c128__write_row(&p, t, index, checker.tid % C128_WARP_THREADS);
      }
      continue;
    }
    /* Phases between barriers: list [+ decode writes] | window 0's partials | fold 0 +
       partials 1 | ... The list is block-uniform: one pass stands for every warp's. */
    memset(&sh, 0xFF, sizeof sh); /* NaN: a fold that reads an unwritten partial shows it */
    const int decode = kind == C128__KIND_DECODE;
    const c128__jobs j = c128__block_jobs(&p, t, block);
    const int count = c128__popcount(c128__list_windows(&p, t, decode, &j, 0, &sh));
    for (checker.tid = 0; decode && checker.tid < threads; ++checker.tid) {
      c128__decode_rows rows;
      c128__decode_fetch(&p, t, &j, checker.tid, &rows);
      c128__decode_writes(&p, t, &j, checker.tid, &rows);
    }
    for (int k = 0; k < count; ++k) { /* window k's partials run in phase k + 1, its fold in k + 2 */
      checker.phase = k + 1;
      for (checker.tid = 0; checker.tid < threads; ++checker.tid)
        c128__partials(&p, t, &sh.windows[k], checker.tid, &sh.fold[k % 2]);
      checker.phase = k + 2;
      for (checker.tid = 0; checker.tid < threads; ++checker.tid)
        c128__fold(&p, t, &sh.windows[k], checker.tid, &sh.fold[k % 2]);
    }
  }
  c128__checker_free(&checker);
  if (checker.out_of_memory) return C128_ERROR_OUT_OF_MEMORY;
  return checker.raced ? C128_ERROR_RACE_DETECTED : C128_SUCCESS;
}

/* >>launch: validation and launches -------------------------------------------------------- */
static int c128__misaligned(const void *ptr, size_t align) { return (uintptr_t)ptr % align != 0; }

static c128_status c128__check_common(int32_t head_dim, c128_dtype sd, c128_dtype id, c128_dtype od, c128__trait t,
                                      int64_t state_pages, c128_shared_layout l) {
  if (head_dim != t.head_dim || (int)sd != t.buf || (int)id != t.in || (int)od != t.out)
    return C128_ERROR_INSTANCE_MISMATCH;
  if (state_pages < 0) return C128_ERROR_NEGATIVE_SIZE;
  if (state_pages > INT64_MAX / ((int64_t)C128_WINDOW * 2 * t.head_dim * 4)) return C128_ERROR_STATE_TOO_LARGE;
  const int32_t size = l.size == 0 ? 1 : l.size;
  if (size < 1 || l.rank < 0 || l.rank >= size || l.pages_per_rank < 0) return C128_ERROR_INVALID_LAYOUT;
  return C128_SUCCESS;
}

/* Vector accesses: a pair of f32 needs 8 bytes, a pair of bf16 4; outputs are stored singly. */
static c128_status c128__check_pointers(c128__trait t, const void *state, const void *input, const float *ape,
                                        const void *output, int need_output) {
  if (!state || !input || (need_output && (!ape || !output))) return C128_ERROR_NULL_POINTER;
  if (c128__misaligned(state, 2 * (size_t)c128__elem_size(t.buf)) ||
      c128__misaligned(input, 2 * (size_t)c128__elem_size(t.in)) ||
      (need_output &&
       (c128__misaligned(ape, 2 * sizeof(float)) || c128__misaligned(output, (size_t)c128__elem_size(t.out)))))
    return C128_ERROR_MISALIGNED;
  return C128_SUCCESS;
}

static c128_status c128__validate_decode(const c128_decode_args *a, c128__trait t) {
  if (!a) return C128_ERROR_NULL_POINTER;
  c128_status st =
      c128__check_common(a->head_dim, a->state_dtype, a->input_dtype, a->output_dtype, t, a->state_pages, a->layout);
  if (st != C128_SUCCESS) return st;
  if (a->batch < 0 || a->output_rows < 0) return C128_ERROR_NEGATIVE_SIZE;
  if (a->batch > INT32_MAX / C128_NUM_SPLIT(t.head_dim)) return C128_ERROR_TOO_MANY_PLANS;
  if (a->requests_per_block < 0 || a->requests_per_block > C128_MAX_DECODE_GROUP) return C128_ERROR_INVALID_GROUP;
  if (a->batch == 0) return C128_SUCCESS;
  if (a->output_rows < a->batch) return C128_ERROR_OUTPUT_TOO_SMALL;
  if (!a->plans) return C128_ERROR_NULL_POINTER;
  if (c128__misaligned(a->plans, sizeof(c128_decode_plan))) return C128_ERROR_MISALIGNED;
  return c128__check_pointers(t, a->state, a->input, a->ape, a->output, 1);
}

static c128_status c128__validate_prefill(const c128_prefill_args *a, c128__trait t) {
  if (!a) return C128_ERROR_NULL_POINTER;
  c128_status st =
      c128__check_common(a->head_dim, a->state_dtype, a->input_dtype, a->output_dtype, t, a->state_pages, a->layout);
  if (st != C128_SUCCESS) return st;
  if (a->input_rows < 0 || a->output_rows < 0 || a->num_compress < 0 || a->num_write < 0)
    return C128_ERROR_NEGATIVE_SIZE;
  if (a->input_rows > C128_MAX_PREFILL_ROWS) return C128_ERROR_TOO_MANY_ROWS;
  if (a->num_compress > C128_MAX_PREFILL_ROWS || a->num_write > C128_MAX_PREFILL_ROWS) return C128_ERROR_TOO_MANY_PLANS;
  if (a->windows_per_block < 0 || a->windows_per_block > C128_MAX_PREFILL_GROUP) return C128_ERROR_INVALID_GROUP;
  if (a->num_compress == 0 && a->num_write == 0) return C128_SUCCESS;
  if (a->output_rows < a->num_compress) return C128_ERROR_OUTPUT_TOO_SMALL;
  if ((a->num_compress && !a->compress_plans) || (a->num_write && !a->write_plans)) return C128_ERROR_NULL_POINTER;
  if (c128__misaligned(a->compress_plans, sizeof(c128_compress_plan)) ||
      c128__misaligned(a->write_plans, sizeof(c128_write_plan)))
    return C128_ERROR_MISALIGNED;
  return c128__check_pointers(t, a->state, a->input, a->ape, a->output, a->num_compress > 0);
}

static c128__params c128__base_params(void *state, int64_t state_pages, const void *input, int64_t input_rows,
                                      const float *ape, void *output, int64_t output_rows, c128_shared_layout layout) {
  c128__params p;
  memset(&p, 0, sizeof p);
  p.state = state;
  p.state_pages = state_pages;
  p.input = input;
  p.input_rows = input_rows;
  p.ape = ape;
  p.output = output;
  p.output_rows = output_rows;
  p.rank = layout.rank;
  p.size = layout.size == 0 ? 1 : layout.size;
  p.pages_per_rank = layout.pages_per_rank;
  return p;
}

static c128__params c128__decode_params(const c128_decode_args *a) {
  c128__params p =
      c128__base_params(a->state, a->state_pages, a->input, a->batch, a->ape, a->output, a->output_rows, a->layout);
  p.plans = a->plans;
  p.num_plans = a->batch;
  return p;
}

static c128__params c128__prefill_params(const c128_prefill_args *a, int compress) {
  c128__params p = c128__base_params(a->state, a->state_pages, a->input, a->input_rows, a->ape, a->output,
                                     a->output_rows, a->layout);
  p.plans = compress ? (const void *)a->compress_plans : (const void *)a->write_plans;
  p.num_plans = compress ? a->num_compress : a->num_write;
  return p;
}

static int64_t c128__write_blocks(int64_t num_write) { /* a warp per write plan */
  return (num_write + C128_WRITE_WARPS - 1) / C128_WRITE_WARPS;
}

static c128_status c128__launch(const void *kernel, int64_t blocks, int threads, int32_t pdl, cudaStream_t stream,
                                const void *params /* the kernel's by-value argument */) {
  cudaLaunchConfig_t config = {};
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = pdl != 0;
  config.gridDim = dim3((unsigned)blocks, 1, 1);
  config.blockDim = dim3((unsigned)threads, 1, 1);
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  void *args[1] = {(void *)params};
  return cudaLaunchKernelExC(&config, kernel, args) == cudaSuccess ? C128_SUCCESS : C128_ERROR_LAUNCH_FAILED;
}

/* A block compresses its windows one after another, so with every window present a group of g
   costs waves(blocks) * g window-times; the largest g of least cost wins. */
static int32_t c128__group_size(int64_t jobs, int32_t head_dim, int32_t sm_count, int32_t max_group) {
  const int64_t wave = (int64_t)C128_BLOCKS_PER_SM * (sm_count > 0 ? sm_count : 1);
  const int64_t splits = head_dim >= C128_TILE_DIM ? C128_NUM_SPLIT(head_dim) : 1;
  int32_t best = 1;
  int64_t best_cost = INT64_MAX;
  for (int32_t g = 1; g <= max_group && jobs > 0; ++g) {
    const int64_t blocks = (jobs + g - 1) / g * splits, cost = (blocks + wave - 1) / wave * g;
    if (cost <= best_cost) best = g, best_cost = cost;
  }
  return best;
}

C128_API int32_t c128_decode_group_size(int64_t batch, int32_t head_dim, int32_t sm_count) {
  return c128__group_size(batch, head_dim, sm_count, C128_MAX_DECODE_GROUP);
}
C128_API int32_t c128_prefill_group_size(int64_t num_compress, int32_t head_dim, int32_t sm_count) {
  return c128__group_size(num_compress, head_dim, sm_count, C128_MAX_PREFILL_GROUP);
}

/* Requests (decode) or compress plans (prefill) per block: the caller's, or the automatic one. */
static int32_t c128__decode_group(const c128_decode_args *a, c128__trait t, int sm_count) {
  return a->requests_per_block > 0 ? a->requests_per_block : c128_decode_group_size(a->batch, t.head_dim, sm_count);
}
static int32_t c128__prefill_group(const c128_prefill_args *a, c128__trait t, int sm_count) {
  return a->windows_per_block > 0 ? a->windows_per_block
                                  : c128_prefill_group_size(a->num_compress, t.head_dim, sm_count);
}

static int64_t c128__grouped_blocks(int64_t jobs, c128__trait t, int32_t group) {
  return (jobs + group - 1) / group * C128_NUM_SPLIT(t.head_dim);
}

/* The automatic groups need the device's SM count; the host runner takes an H200's (132):
   results do not depend on the grouping. */
#define C128__HOST_SM_COUNT 132
static c128_status c128__sm_count(int32_t explicit_group, int *sm_count) {
  int device = 0;
  *sm_count = 0;
  if (explicit_group > 0) return C128_SUCCESS;
  return cudaGetDevice(&device) == cudaSuccess &&
                 cudaDeviceGetAttribute(sm_count, cudaDevAttrMultiProcessorCount, device) == cudaSuccess
             ? C128_SUCCESS
             : C128_ERROR_LAUNCH_FAILED;
}

static c128_status c128__decode_gpu(const c128_decode_args *a, c128__trait t, const void *kernel, cudaStream_t stream) {
  c128_status st = c128__validate_decode(a, t);
  if (st != C128_SUCCESS || a->batch == 0) return st;
  int sm_count;
  if ((st = c128__sm_count(a->requests_per_block, &sm_count)) != C128_SUCCESS) return st;
  c128__params p = c128__decode_params(a);
  p.group = c128__decode_group(a, t, sm_count);
  return c128__launch(kernel, c128__grouped_blocks(a->batch, t, p.group), C128_BLOCK_THREADS, a->pdl, stream, &p);
}

static c128_status c128__decode_cpu(const c128_decode_args *a, c128__trait t, const c128_host_options *o) {
  const c128_status st = c128__validate_decode(a, t);
  if (st != C128_SUCCESS || a->batch == 0) return st;
  c128__params p = c128__decode_params(a);
  p.group = c128__decode_group(a, t, C128__HOST_SM_COUNT);
  return c128__run_host(p, t, C128__KIND_DECODE, c128__grouped_blocks(a->batch, t, p.group), o);
}

/* Compress first, write second, on one stream: a batch's writes may land on slots its own
   compress events still read (SPEC 6.3). */
static c128_status c128__prefill_gpu(const c128_prefill_args *a, c128__trait t, const void *compress_kernel,
                                     const void *write_kernel, cudaStream_t stream) {
  c128_status st = c128__validate_prefill(a, t);
  c128__params compress = c128__prefill_params(a, 1);
  const c128__params write = c128__prefill_params(a, 0);
  int sm_count;
  if (st == C128_SUCCESS && a->num_compress > 0 &&
      (st = c128__sm_count(a->windows_per_block, &sm_count)) == C128_SUCCESS) {
    compress.group = c128__prefill_group(a, t, sm_count);
    st = c128__launch(compress_kernel, c128__grouped_blocks(a->num_compress, t, compress.group), C128_BLOCK_THREADS,
                      a->pdl, stream, &compress);
  }
  if (st == C128_SUCCESS && a->num_write > 0)
    st = c128__launch(write_kernel, c128__write_blocks(a->num_write), C128_WRITE_BLOCK_THREADS, a->pdl, stream, &write);
  return st;
}

static c128_status c128__prefill_cpu(const c128_prefill_args *a, c128__trait t, const c128_host_options *o) {
  c128_status st = c128__validate_prefill(a, t);
  c128__params compress = c128__prefill_params(a, 1);
  compress.group = c128__prefill_group(a, t, C128__HOST_SM_COUNT);
  if (st == C128_SUCCESS && a->num_compress > 0)
    st = c128__run_host(compress, t, C128__KIND_COMPRESS, c128__grouped_blocks(a->num_compress, t, compress.group), o);
  if (st == C128_SUCCESS && a->num_write > 0)
    st = c128__run_host(c128__prefill_params(a, 0), t, C128__KIND_WRITE, c128__write_blocks(a->num_write), o);
  return st;
}

/* >>dispatch ------------------------------------------------------------------------------ */
#define C128__ENTRY_POINTS(name, D, bt, it, ot, bd, id, od)                                               \
  C128_API c128_status c128_decode_##name(const c128_decode_args *a, cudaStream_t stream) {               \
    const c128__trait t = {D, bd, id, od};                                                                \
    return c128__decode_gpu(a, t, (const void *)c128__decode_kernel_##name, stream);                      \
  }                                                                                                       \
  C128_API c128_status c128_prefill_##name(const c128_prefill_args *a, cudaStream_t stream) {             \
    const c128__trait t = {D, bd, id, od};                                                                \
    return c128__prefill_gpu(a, t, (const void *)c128__compress_kernel_##name,                            \
                             (const void *)c128__write_kernel_##name, stream);                            \
  }                                                                                                       \
  C128_API c128_status c128_decode_host_##name(const c128_decode_args *a, const c128_host_options *o) {   \
    const c128__trait t = {D, bd, id, od};                                                                \
    return c128__decode_cpu(a, t, o);                                                                     \
  }                                                                                                       \
  C128_API c128_status c128_prefill_host_##name(const c128_prefill_args *a, const c128_host_options *o) { \
    const c128__trait t = {D, bd, id, od};                                                                \
    return c128__prefill_cpu(a, t, o);                                                                    \
  }
C128_INSTANCES(C128__ENTRY_POINTS)
#undef C128__ENTRY_POINTS

typedef struct c128__instance {
  c128_instance_info info;
  c128_status (*decode)(const c128_decode_args *, cudaStream_t);
  c128_status (*prefill)(const c128_prefill_args *, cudaStream_t);
  c128_status (*decode_host)(const c128_decode_args *, const c128_host_options *);
  c128_status (*prefill_host)(const c128_prefill_args *, const c128_host_options *);
} c128__instance;

#define C128__INSTANCE_ROW(name, D, bt, it, ot, bd, id, od)                          \
  {{#name, D, bd, id, od, C128_NUM_SPLIT(D), C128_ROW_ELEMS(D), C128_PAGE_ELEMS(D)}, \
   c128_decode_##name,                                                               \
   c128_prefill_##name,                                                              \
   c128_decode_host_##name,                                                          \
   c128_prefill_host_##name},
static const c128__instance c128__instances[] = {C128_INSTANCES(C128__INSTANCE_ROW)};
#undef C128__INSTANCE_ROW
static_assert(sizeof c128__instances / sizeof c128__instances[0] == C128_INSTANCE_COUNT, "one row each");

C128_API const char *c128_status_string(c128_status status) {
  switch (status) {
#define C128__STATUS_CASE(name, value, message) \
  case name:                                    \
    return #name ": " message;
    C128_STATUS_LIST(C128__STATUS_CASE)
#undef C128__STATUS_CASE
  default:
    break;
  }
  return "unknown c128_status";
}

C128_API int c128_instance_count(void) { return C128_INSTANCE_COUNT; }

C128_API const char *c128_instance_name(int index) {
  return index >= 0 && index < C128_INSTANCE_COUNT ? c128__instances[index].info.name : NULL;
}

C128_API c128_status c128_instance_info_get(int index, c128_instance_info *info) {
  if (!info) return C128_ERROR_NULL_POINTER;
  if (index < 0 || index >= C128_INSTANCE_COUNT) return C128_ERROR_UNSUPPORTED_INSTANCE;
  *info = c128__instances[index].info;
  return C128_SUCCESS;
}

C128_API int c128_find_instance(int head_dim, c128_dtype state, c128_dtype input, c128_dtype output) {
  for (int i = 0; i < C128_INSTANCE_COUNT; ++i) {
    const c128_instance_info *f = &c128__instances[i].info;
    if (f->head_dim == head_dim && f->state_dtype == state && f->input_dtype == input && f->output_dtype == output)
      return i;
  }
  return -1;
}

#define C128__DISPATCH(args, entry, ...)                                                                      \
  do {                                                                                                        \
    if (!(args)) return C128_ERROR_NULL_POINTER;                                                              \
    const int i_ =                                                                                            \
        c128_find_instance((args)->head_dim, (args)->state_dtype, (args)->input_dtype, (args)->output_dtype); \
    return i_ < 0 ? C128_ERROR_UNSUPPORTED_INSTANCE : c128__instances[i_].entry(args, __VA_ARGS__);           \
  } while (0)
C128_API c128_status c128_decode(const c128_decode_args *a, cudaStream_t s) { C128__DISPATCH(a, decode, s); }
C128_API c128_status c128_prefill(const c128_prefill_args *a, cudaStream_t s) { C128__DISPATCH(a, prefill, s); }
C128_API c128_status c128_decode_host(const c128_decode_args *a, const c128_host_options *o) {
  C128__DISPATCH(a, decode_host, o);
}
C128_API c128_status c128_prefill_host(const c128_prefill_args *a, const c128_host_options *o) {
  C128__DISPATCH(a, prefill_host, o);
}
#undef C128__DISPATCH

C128_API uint16_t c128_bf16_from_float(float value) { return (uint16_t)c128__bf16_round(value); }
C128_API float c128_bf16_to_float(uint16_t bits) { return c128__bf16_widen(bits); }

/* >>checker ------------------------------------------------------------------------------- */

static const char *c128__reason_text(int reason) {
  switch (reason) {
#define C128__REASON_CASE(name, text) \
  case name:                          \
    return text;
    C128__PLAN_REASONS(C128__REASON_CASE)
#undef C128__REASON_CASE
  }
  return "unknown";
}

static c128_status c128__report(c128_plan_report *r, c128_plan_kind kind, int64_t index, const char *fmt, ...) {
  static const char *const kinds[] = {"decode", "compress", "write"};
  r->index = index;
  r->kind = kind;
  if (r->message && r->message_size) {
    const int n = snprintf(r->message, r->message_size, "%s plan %lld: ", kinds[kind], (long long)index);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < r->message_size) vsnprintf(r->message + n, r->message_size - (size_t)n, fmt, ap);
    va_end(ap);
  }
  return C128_ERROR_INVALID_PLAN;
}

typedef struct c128__slot_use {
  int64_t slot, index;
} c128__slot_use;

static int c128__slot_order(const void *a, const void *b) {
  const c128__slot_use *x = (const c128__slot_use *)a, *y = (const c128__slot_use *)b;
  if (x->slot != y->slot) return x->slot < y->slot ? -1 : 1;
  return x->index < y->index ? -1 : x->index > y->index;
}

/* Two plans writing one slot: report the later one. */
static c128_status c128__find_shared_slot(c128__slot_use *uses, int64_t n, c128_plan_kind kind, c128_plan_report *r) {
  qsort(uses, (size_t)n, sizeof *uses, c128__slot_order);
  int64_t worst = -1, first = -1, slot = 0;
  for (int64_t i = 1; i < n; ++i)
    if (uses[i].slot == uses[i - 1].slot && (worst < 0 || uses[i].index < worst))
      worst = uses[i].index, first = uses[i - 1].index, slot = uses[i].slot;
  free(uses);
  if (worst < 0) return C128_SUCCESS;
  return c128__report(r, kind, worst, "writes state row %lld, as plan %lld does", (long long)slot, (long long)first);
}

/* The checkers' common arguments. They take any head_dim a table could hold (the plans do not
   depend on an instance being compiled), so the trait comes from the arguments. */
static c128_status c128__checker_start(int32_t head_dim, c128_dtype sd, c128_dtype id, c128_dtype od,
                                       int64_t state_pages, c128_shared_layout layout, c128_plan_report *report,
                                       c128__trait *t) {
  if (!report) return C128_ERROR_NULL_POINTER;
  report->index = -1;
  if (head_dim <= 0 || head_dim > C128_MAX_HEAD_DIM || head_dim % C128_TILE_DIM != 0)
    return C128_ERROR_UNSUPPORTED_INSTANCE;
  const c128__trait trait = {head_dim, (int)sd, (int)id, (int)od};
  *t = trait;
  return c128__check_common(head_dim, sd, id, od, trait, state_pages, layout);
}

C128_API c128_status c128_check_decode_plans(const c128_decode_args *a, c128_plan_report *report) {
  if (!a) return C128_ERROR_NULL_POINTER;
  c128__trait t;
  c128_status st = c128__checker_start(a->head_dim, a->state_dtype, a->input_dtype, a->output_dtype, a->state_pages,
                                       a->layout, report, &t);
  if (st != C128_SUCCESS) return st;
  if (a->batch < 0 || a->output_rows < 0) return C128_ERROR_NEGATIVE_SIZE;
  if (a->batch > 0 && !a->plans) return C128_ERROR_NULL_POINTER;
  c128__slot_use *uses = (c128__slot_use *)malloc((size_t)(a->batch ? a->batch : 1) * sizeof *uses);
  if (!uses) return C128_ERROR_OUT_OF_MEMORY;
  const c128__params p = c128__decode_params(a);
  int64_t n = 0;
  for (int64_t b = 0; b < a->batch; ++b) {
    c128__decode_job job;
    const int reason = c128__decode_prepare(&p, b, 0, &job);
    if (reason == C128__PADDING) continue;
    const c128_decode_plan plan = a->plans[b];
    if (reason != C128__RUN) st = c128__report(report, C128_PLAN_DECODE, b, "%s", c128__reason_text(reason));
    else if (job.boundary && plan.read_page_1 != plan.write_loc / C128_WINDOW)
      st = c128__report(report, C128_PLAN_DECODE, b, "boundary write slot %d is not row 127 of read page %d",
                        (int)plan.write_loc, (int)plan.read_page_1);
    if (st != C128_SUCCESS) {
      free(uses);
      return st;
    }
    uses[n].slot = plan.write_loc, uses[n].index = b, ++n;
  }
  return c128__find_shared_slot(uses, n, C128_PLAN_DECODE, report);
}

C128_API c128_status c128_check_prefill_plans(const c128_prefill_args *a, c128_plan_report *report) {
  if (!a) return C128_ERROR_NULL_POINTER;
  c128__trait t;
  c128_status st = c128__checker_start(a->head_dim, a->state_dtype, a->input_dtype, a->output_dtype, a->state_pages,
                                       a->layout, report, &t);
  if (st != C128_SUCCESS) return st;
  if (a->input_rows < 0 || a->output_rows < 0 || a->num_compress < 0 || a->num_write < 0)
    return C128_ERROR_NEGATIVE_SIZE;
  if ((a->num_compress && !a->compress_plans) || (a->num_write && !a->write_plans)) return C128_ERROR_NULL_POINTER;
  const c128__params pc = c128__prefill_params(a, 1), pw = c128__prefill_params(a, 0);
  for (int64_t k = 0; k < a->num_compress; ++k) {
    c128__window w;
    const int reason = c128__compress_prepare(&pc, t, k * C128_NUM_SPLIT(t.head_dim), &w);
    if (reason != C128__RUN && reason != C128__PADDING)
      return c128__report(report, C128_PLAN_COMPRESS, k, "%s", c128__reason_text(reason));
    if (reason == C128__RUN && a->compress_plans[k].seq_len % C128_WINDOW != 0)
      return c128__report(report, C128_PLAN_COMPRESS, k, "seq_len %u is not a multiple of 128",
                          a->compress_plans[k].seq_len);
  }
  c128__slot_use *uses = (c128__slot_use *)malloc((size_t)(a->num_write ? a->num_write : 1) * sizeof *uses);
  if (!uses) return C128_ERROR_OUT_OF_MEMORY;
  int64_t n = 0;
  for (int64_t k = 0; k < a->num_write; ++k) {
    int64_t src, dst;
    const int reason = c128__write_prepare(&pw, k, &src, &dst);
    if (reason == C128__PADDING) continue;
    if (reason != C128__RUN) {
      free(uses);
      return c128__report(report, C128_PLAN_WRITE, k, "%s", c128__reason_text(reason));
    }
    uses[n].slot = a->write_plans[k].write_loc, uses[n].index = k, ++n;
  }
  return c128__find_shared_slot(uses, n, C128_PLAN_WRITE, report);
}

/* >>planner (SPEC 5) ---------------------------------------------------------------------- */
/* Shared by the host planner and the device planner: the per-request rules in closed form. */
C128__FN int64_t c128__ring_tokens(const c128_ring *r) { return r->ring_tokens ? r->ring_tokens : C128_WINDOW; }

static c128_status c128__check_ring(const c128_ring *r) {
  if (!r) return C128_ERROR_NULL_POINTER;
  const int64_t ring = c128__ring_tokens(r);
  if (ring <= 0 || ring % C128_WINDOW != 0) return C128_ERROR_INVALID_RING;
  if (r->state_pages < 0 || (r->page_table && r->num_pool < 0)) return C128_ERROR_NEGATIVE_SIZE;
  if (r->state_pages > INT32_MAX / C128_WINDOW) return C128_ERROR_STATE_TOO_LARGE; /* write_loc is i32 */
  if (r->page_table && r->page_table_stride < ring / C128_WINDOW) return C128_ERROR_INVALID_RING;
  return C128_SUCCESS;
}

/* page(rid, pos) of SPEC 5, checked against the pool and the state. */
C128__FN c128_status c128__ring_page(const c128_ring *r, int32_t rid, int64_t pos, int32_t *page) {
  const int64_t ring = c128__ring_tokens(r), k = (pos % ring) / C128_WINDOW;
  int64_t pg;
  if (rid < 0 || (r->page_table && rid >= r->num_pool)) return C128_ERROR_POOL_INDEX_OUT_OF_RANGE;
  if (r->page_table) {
    pg = r->page_table[rid * r->page_table_stride + k];
    if (pg < 0 || pg >= r->state_pages) return C128_ERROR_PAGE_OUT_OF_RANGE;
  } else {
    pg = (int64_t)rid * (ring / C128_WINDOW) + k;
    if (pg >= r->state_pages) return C128_ERROR_POOL_INDEX_OUT_OF_RANGE;
  }
  *page = (int32_t)pg;
  return C128_SUCCESS;
}

/* What one request of a prefill/extend/verify batch emits. */
typedef struct c128__shape {
  int64_t prefix;      /* first new position */
  int64_t first_event; /* position of the first compress event (if any) */
  int64_t first_write; /* first persisted position */
  int64_t num_compress, num_write;
} c128__shape;

C128__FN int c128__absent(c128_request q) { return q.seq_len == 0 && q.extend_len == 0; }

/* Argument rules of one request, in the host planner's order (the row limit comes next). */
C128__FN c128_status c128__request_check(const c128_ring *r, c128_request q, int32_t verify) {
  const int64_t max_drafts = r->speculative ? c128__ring_tokens(r) - C128_WINDOW + 2 : 1;
  if (q.seq_len < 0 || q.extend_len < 0) return C128_ERROR_NEGATIVE_SIZE;
  if (q.extend_len == 0) return C128_ERROR_EMPTY_EXTEND;
  if (q.extend_len > q.seq_len) return C128_ERROR_EXTEND_EXCEEDS_SEQ;
  if (verify && q.extend_len > max_drafts) return C128_ERROR_TOO_MANY_DRAFTS;
  return C128_SUCCESS;
}

C128__FN c128__shape c128__request_shape(const c128_ring *r, c128_request q) {
  /* Writes persist the trailing partial window, and with speculation the last `pad` tokens:
     first_write = min(floor(seq / 128) * 128, seq - pad), in signed arithmetic. */
  const int64_t pad = r->speculative ? c128__ring_tokens(r) - C128_WINDOW + 2 : 0;
  const int64_t seq = q.seq_len, boundary = seq / C128_WINDOW * C128_WINDOW;
  const int64_t first_write = boundary < seq - pad ? boundary : seq - pad;
  c128__shape s;
  s.prefix = seq - q.extend_len;
  s.first_event = s.prefix / C128_WINDOW * C128_WINDOW + C128__LAST_ROW;
  s.first_write = first_write > s.prefix ? first_write : s.prefix;
  s.num_compress = seq / C128_WINDOW - s.prefix / C128_WINDOW;
  s.num_write = seq - s.first_write;
  return s;
}

/* Every page the request's plans name lies in the pool and the state. A request's pages differ
   only by ring chunk, so one check per compress event and per 128 written positions suffices. */
C128__FN c128_status c128__request_pages(const c128_ring *r, c128_request q, c128__shape s) {
  int32_t page;
  c128_status st = C128_SUCCESS;
  for (int64_t m = 0; m < s.num_compress && st == C128_SUCCESS; ++m) {
    const int64_t pos = s.first_event + m * C128_WINDOW;
    st = c128__ring_page(r, q.pool_index, pos, &page);
    if (st == C128_SUCCESS) st = c128__ring_page(r, q.pool_index, pos >= C128_WINDOW ? pos - C128_WINDOW : 0, &page);
  }
  for (int64_t pos = s.first_write; pos < q.seq_len && st == C128_SUCCESS; pos = (pos / C128_WINDOW + 1) * C128_WINDOW)
    st = c128__ring_page(r, q.pool_index, pos, &page);
  return st;
}

/* The m-th compress / write plan of a request whose first input row is `rag0` (pages checked). */
C128__FN c128_compress_plan c128__compress_plan_of(const c128_ring *r, c128_request q, c128__shape s, int64_t m,
                                                   int64_t rag0) {
  const int64_t pos = s.first_event + m * C128_WINDOW, j = pos - s.prefix;
  c128_compress_plan c;
  c.seq_len = (uint32_t)(pos + 1);
  c.ragged_id = (uint16_t)(rag0 + j);
  c.buffer_len = (uint16_t)(j < C128__LAST_ROW ? C128__LAST_ROW - j : 0);
  c128__ring_page(r, q.pool_index, pos >= C128_WINDOW ? pos - C128_WINDOW : 0, &c.read_page_0);
  c128__ring_page(r, q.pool_index, pos, &c.read_page_1);
  return c;
}

C128__FN c128_write_plan c128__write_plan_of(const c128_ring *r, c128_request q, c128__shape s, int64_t m,
                                             int64_t rag0) {
  const int64_t pos = s.first_write + m;
  int32_t page = 0;
  c128__ring_page(r, q.pool_index, pos, &page);
  c128_write_plan w;
  w.ragged_id = (uint32_t)(rag0 + pos - s.prefix);
  w.write_loc = (int32_t)(page * C128_WINDOW + pos % C128_WINDOW);
  return w;
}

/* A decode request's plan, or its status. */
C128__FN c128_status c128__decode_plan_of(const c128_ring *r, c128_request q, c128_decode_plan *d) {
  const c128_decode_plan padding = {0, -1, -1, -1};
  *d = padding;
  if (q.seq_len < 0) return C128_ERROR_NEGATIVE_SIZE;
  if (q.seq_len == 0) return C128_SUCCESS;
  const int64_t pos = (int64_t)q.seq_len - 1;
  int32_t page0, page1;
  c128_status st = c128__ring_page(r, q.pool_index, pos, &page1);
  if (st == C128_SUCCESS) st = c128__ring_page(r, q.pool_index, pos >= C128_WINDOW ? pos - C128_WINDOW : 0, &page0);
  if (st != C128_SUCCESS) return st;
  d->seq_len = (uint32_t)q.seq_len;
  d->write_loc = (int32_t)(page1 * C128_WINDOW + pos % C128_WINDOW);
  d->read_page_0 = page0;
  d->read_page_1 = page1;
  return C128_SUCCESS;
}

/* Host planner: check the whole batch first, so that a bad batch leaves the arrays untouched. */
C128_API c128_status c128_plan_prefill(const c128_ring *ring, const c128_request *requests, int64_t num_requests,
                                       int32_t verify, c128_prefill_plans *plans) {
  c128_status st = c128__check_ring(ring);
  if (st != C128_SUCCESS) return st;
  if (!plans || (num_requests > 0 && !requests)) return C128_ERROR_NULL_POINTER;
  if (num_requests < 0 || plans->capacity < 0) return C128_ERROR_NEGATIVE_SIZE;
  int64_t rows = 0, nc = 0, nw = 0;
  for (int64_t i = 0; i < num_requests; ++i) {
    const c128_request q = requests[i];
    if ((st = c128__request_check(ring, q, verify)) != C128_SUCCESS) return st;
    if (rows + q.extend_len > C128_MAX_PREFILL_ROWS) return C128_ERROR_TOO_MANY_ROWS;
    const c128__shape s = c128__request_shape(ring, q);
    if ((st = c128__request_pages(ring, q, s)) != C128_SUCCESS) return st;
    rows += q.extend_len, nc += s.num_compress, nw += s.num_write;
  }
  if (nc > plans->capacity || nw > plans->capacity) return C128_ERROR_CAPACITY_TOO_SMALL;
  if (plans->capacity > 0 && (!plans->compress || !plans->write)) return C128_ERROR_NULL_POINTER;
  rows = nc = nw = 0;
  for (int64_t i = 0; i < num_requests; ++i) {
    const c128_request q = requests[i];
    const c128__shape s = c128__request_shape(ring, q);
    for (int64_t m = 0; m < s.num_compress; ++m) plans->compress[nc++] = c128__compress_plan_of(ring, q, s, m, rows);
    for (int64_t m = 0; m < s.num_write; ++m) plans->write[nw++] = c128__write_plan_of(ring, q, s, m, rows);
    rows += q.extend_len;
  }
  plans->num_compress = nc;
  plans->num_write = nw;
  if (plans->pad_to_capacity) {
    const c128_compress_plan no_compress = C128_INVALID_COMPRESS_PLAN;
    const c128_write_plan no_write = C128_INVALID_WRITE_PLAN;
    for (int64_t k = nc; k < plans->capacity; ++k) plans->compress[k] = no_compress;
    for (int64_t k = nw; k < plans->capacity; ++k) plans->write[k] = no_write;
  }
  return C128_SUCCESS;
}

C128_API c128_status c128_plan_decode(const c128_ring *ring, const c128_request *requests, int64_t batch,
                                      c128_decode_plan *plans) {
  c128_status st = c128__check_ring(ring);
  if (st != C128_SUCCESS) return st;
  if (batch < 0) return C128_ERROR_NEGATIVE_SIZE;
  if (batch > 0 && (!requests || !plans)) return C128_ERROR_NULL_POINTER;
  c128_decode_plan d;
  for (int64_t b = 0; b < batch; ++b)
    if ((st = c128__decode_plan_of(ring, requests[b], &d)) != C128_SUCCESS) return st;
  for (int64_t b = 0; b < batch; ++b) c128__decode_plan_of(ring, requests[b], &plans[b]);
  return C128_SUCCESS;
}

/* >>planner on the device --------------------------------------------------------------------- */
/* Kernel 1, one block: per-request checks and counts (phase A, a thread per request), then one
   thread turns them into exclusive prefix sums and the first error (phase B), chunk by chunk.
   Kernel 2: one thread per plan slot finds its request by binary search over the sums. */
#define C128__PLAN_THREADS 256

enum { C128__WS_STATUS, C128__WS_COMPRESS, C128__WS_WRITE, C128__WS_HEADER }; /* then 3 x (n + 1) sums */

typedef struct c128__plan_params {
  c128_device_plan_args a;
  int32_t decode; /* which planner */
} c128__plan_params;

typedef struct c128__plan_chunk {
  int32_t check[C128__PLAN_THREADS], pages[C128__PLAN_THREADS];
  int64_t num_compress[C128__PLAN_THREADS], num_write[C128__PLAN_THREADS], rows[C128__PLAN_THREADS];
  int64_t total_compress, total_write, total_rows;
  int32_t status;
} c128__plan_chunk;

C128__FN int64_t *c128__ws_sums(const c128__plan_params *p, int which) {
  return (int64_t *)p->a.workspace + C128__WS_HEADER + which * (p->a.num_requests + 1);
}

C128__FN void c128__plan_count(const c128__plan_params *p, int64_t base, int tid, c128__plan_chunk *c) {
  const int64_t i = base + tid;
  c->check[tid] = c->pages[tid] = C128_SUCCESS;
  c->num_compress[tid] = c->num_write[tid] = c->rows[tid] = 0;
  if (i >= p->a.num_requests) return;
  const c128_request q = p->a.requests[i];
  if (p->decode) {
    c128_decode_plan d;
    c->check[tid] = c128__decode_plan_of(&p->a.ring, q, &d);
    return;
  }
  if (c128__absent(q)) return;
  if ((c->check[tid] = c128__request_check(&p->a.ring, q, p->a.verify)) != C128_SUCCESS) return;
  const c128__shape s = c128__request_shape(&p->a.ring, q);
  c->pages[tid] = c128__request_pages(&p->a.ring, q, s);
  c->num_compress[tid] = s.num_compress, c->num_write[tid] = s.num_write, c->rows[tid] = q.extend_len;
}

C128__FN void c128__plan_scan(const c128__plan_params *p, int64_t base, c128__plan_chunk *c) {
  int64_t *sum_c = c128__ws_sums(p, 0), *sum_w = c128__ws_sums(p, 1), *sum_r = c128__ws_sums(p, 2);
  for (int t = 0; t < C128__PLAN_THREADS && base + t < p->a.num_requests; ++t) {
    const int64_t i = base + t;
    sum_c[i] = c->total_compress, sum_w[i] = c->total_write, sum_r[i] = c->total_rows;
    if (c->status == C128_SUCCESS) /* the host planner's order: checks, row limit, pages */
      c->status = c->check[t] != C128_SUCCESS                          ? c->check[t]
                  : c->total_rows + c->rows[t] > C128_MAX_PREFILL_ROWS ? (int32_t)C128_ERROR_TOO_MANY_ROWS
                                                                       : c->pages[t];
    c->total_compress += c->num_compress[t], c->total_write += c->num_write[t], c->total_rows += c->rows[t];
  }
}

C128__FN void c128__plan_finish(const c128__plan_params *p, c128__plan_chunk *c) {
  const int64_t n = p->a.num_requests;
  c128__ws_sums(p, 0)[n] = c->total_compress, c128__ws_sums(p, 1)[n] = c->total_write;
  c128__ws_sums(p, 2)[n] = c->total_rows;
  if (c->status == C128_SUCCESS && !p->decode && (c->total_compress > p->a.capacity || c->total_write > p->a.capacity))
    c->status = C128_ERROR_CAPACITY_TOO_SMALL;
  const int ok = c->status == C128_SUCCESS && !p->decode;
  int64_t *ws = (int64_t *)p->a.workspace;
  ws[C128__WS_STATUS] = c->status;
  ws[C128__WS_COMPRESS] = ok ? c->total_compress : 0;
  ws[C128__WS_WRITE] = ok ? c->total_write : 0;
  *p->a.status = c->status;
  if (p->a.counts) p->a.counts[0] = ws[C128__WS_COMPRESS], p->a.counts[1] = ws[C128__WS_WRITE];
}

/* Request owning plan slot k: the last i with sums[i] <= k (sums non-decreasing). */
C128__FN int64_t c128__owner(const int64_t *sums, int64_t n, int64_t k) {
  int64_t lo = 0, hi = n - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (sums[mid] <= k) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

C128__FN void c128__plan_emit(const c128__plan_params *p, int64_t k) {
  const int64_t *ws = (const int64_t *)p->a.workspace;
  const c128_device_plan_args *a = &p->a;
  if (p->decode) {
    if (k >= a->num_requests) return;
    c128_decode_plan d;
    c128__decode_plan_of(&a->ring, a->requests[k], &d);
    const c128_decode_plan padding = {0, -1, -1, -1};
    a->decode[k] = ws[C128__WS_STATUS] == C128_SUCCESS ? d : padding;
    return;
  }
  if (k >= a->capacity) return;
  const c128_compress_plan no_compress = C128_INVALID_COMPRESS_PLAN;
  const c128_write_plan no_write = C128_INVALID_WRITE_PLAN;
  c128_compress_plan c = no_compress;
  c128_write_plan w = no_write;
  if (k < ws[C128__WS_COMPRESS]) {
    const int64_t *sums = c128__ws_sums(p, 0), i = c128__owner(sums, a->num_requests, k);
    const c128_request q = a->requests[i];
    c = c128__compress_plan_of(&a->ring, q, c128__request_shape(&a->ring, q), k - sums[i], c128__ws_sums(p, 2)[i]);
  }
  if (k < ws[C128__WS_WRITE]) {
    const int64_t *sums = c128__ws_sums(p, 1), i = c128__owner(sums, a->num_requests, k);
    const c128_request q = a->requests[i];
    w = c128__write_plan_of(&a->ring, q, c128__request_shape(&a->ring, q), k - sums[i], c128__ws_sums(p, 2)[i]);
  }
  a->compress[k] = c;
  a->write[k] = w;
}

static __global__ void __launch_bounds__(C128__PLAN_THREADS) c128__plan_count_kernel(const c128__plan_params p) {
  __shared__ c128__plan_chunk c;
  c128__pdl_wait();
  if (threadIdx.x == 0) c.total_compress = c.total_write = c.total_rows = 0, c.status = C128_SUCCESS;
  for (int64_t base = 0; base < p.a.num_requests; base += C128__PLAN_THREADS) {
    __syncthreads();
    c128__plan_count(&p, base, (int)threadIdx.x, &c);
    __syncthreads();
    if (threadIdx.x == 0) c128__plan_scan(&p, base, &c);
  }
  if (threadIdx.x == 0) c128__plan_finish(&p, &c);
  c128__pdl_trigger();
}

static __global__ void __launch_bounds__(C128__PLAN_THREADS) c128__plan_emit_kernel(const c128__plan_params p) {
  c128__pdl_wait();
  c128__plan_emit(&p, (int64_t)blockIdx.x * C128__PLAN_THREADS + threadIdx.x);
  c128__pdl_trigger();
}

C128_API size_t c128_plan_workspace_size(int64_t num_requests) {
  return num_requests < 0 ? 0 : (size_t)(C128__WS_HEADER + 3 * (num_requests + 1)) * sizeof(int64_t);
}

static c128_status c128__check_device_plan_args(const c128_device_plan_args *a, int decode) {
  if (!a) return C128_ERROR_NULL_POINTER;
  c128_status st = c128__check_ring(&a->ring);
  if (st != C128_SUCCESS) return st;
  if (a->num_requests < 0 || a->capacity < 0) return C128_ERROR_NEGATIVE_SIZE;
  if (a->num_requests > INT32_MAX / 2) return C128_ERROR_TOO_MANY_PLANS;
  if (!a->status || !a->workspace || (a->num_requests > 0 && !a->requests)) return C128_ERROR_NULL_POINTER;
  if (decode ? a->num_requests > 0 && !a->decode : a->capacity > 0 && (!a->compress || !a->write))
    return C128_ERROR_NULL_POINTER;
  if (c128__misaligned(a->workspace, sizeof(int64_t)) || c128__misaligned(a->counts, sizeof(int64_t)) ||
      c128__misaligned(a->compress, sizeof(c128_compress_plan)) ||
      c128__misaligned(a->write, sizeof(c128_write_plan)) || c128__misaligned(a->decode, sizeof(c128_decode_plan)) ||
      c128__misaligned(a->requests, sizeof(int32_t)))
    return C128_ERROR_MISALIGNED;
  return C128_SUCCESS;
}

static c128_status c128__plan_device(const c128_device_plan_args *a, int decode, cudaStream_t stream) {
  const c128_status st = c128__check_device_plan_args(a, decode);
  if (st != C128_SUCCESS) return st;
  c128__plan_params p;
  memset(&p, 0, sizeof p);
  p.a = *a;
  p.decode = decode;
  const int64_t slots = decode ? a->num_requests : a->capacity;
  c128_status launched = c128__launch((const void *)c128__plan_count_kernel, 1, C128__PLAN_THREADS, a->pdl, stream, &p);
  if (launched == C128_SUCCESS && slots > 0)
    launched = c128__launch((const void *)c128__plan_emit_kernel, (slots + C128__PLAN_THREADS - 1) / C128__PLAN_THREADS,
                            C128__PLAN_THREADS, a->pdl, stream, &p);
  return launched;
}

static c128_status c128__plan_device_on_host(const c128_device_plan_args *a, int decode) {
  const c128_status st = c128__check_device_plan_args(a, decode);
  if (st != C128_SUCCESS) return st;
  c128__plan_params p;
  memset(&p, 0, sizeof p);
  p.a = *a;
  p.decode = decode;
  c128__plan_chunk c;
  c.total_compress = c.total_write = c.total_rows = 0, c.status = C128_SUCCESS;
  for (int64_t base = 0; base < a->num_requests; base += C128__PLAN_THREADS) {
    for (int tid = 0; tid < C128__PLAN_THREADS; ++tid) c128__plan_count(&p, base, tid, &c);
    c128__plan_scan(&p, base, &c);
  }
  c128__plan_finish(&p, &c);
  const int64_t slots = decode ? a->num_requests : a->capacity;
  for (int64_t k = 0; k < slots; ++k) c128__plan_emit(&p, k);
  return C128_SUCCESS;
}

C128_API c128_status c128_plan_prefill_device(const c128_device_plan_args *a, cudaStream_t s) {
  return c128__plan_device(a, 0, s);
}
C128_API c128_status c128_plan_decode_device(const c128_device_plan_args *a, cudaStream_t s) {
  return c128__plan_device(a, 1, s);
}
C128_API c128_status c128_plan_prefill_device_host(const c128_device_plan_args *a) {
  return c128__plan_device_on_host(a, 0);
}
C128_API c128_status c128_plan_decode_device_host(const c128_device_plan_args *a) {
  return c128__plan_device_on_host(a, 1);
}

#endif /* C128_IMPLEMENTATION */

/*
------------------------------------------------------------------------------
MIT License

Copyright (c) 2026 the c128 authors

Permission is hereby granted, free of charge, to any person obtaining a copy of this software
and associated documentation files (the "Software"), to deal in the Software without
restriction, including without limitation the rights to use, copy, modify, merge, publish,
distribute, sublicense, and/or sell copies of the Software, and to permit persons to whom the
Software is furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all copies or
substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING
BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND
NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM,
DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
------------------------------------------------------------------------------
*/
