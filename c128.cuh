/* c128.cuh - v0.4.0 - DeepSeek-V4 c128 KV compression in one CUDA C header.
   SPDX-License-Identifier: MIT

   Turns every 128 tokens of a request into one softmax-pooled KV vector (per-channel softmax
   over the window's scores plus a learned position bias), with the compression-state buffer,
   the plans and the planners that drive it: decode, chunked prefill/extend, speculative verify,
   paged and legacy state, context-parallel sharded state, SGLang's, vLLM's and TensorRT-LLM's
   state layouts, and DeepSeek-V4's cache entries (RMSNorm, RoPE, FP8) written in the same
   launch. docs/DESIGN.md says exactly what is computed; "DESIGN n" below cites its sections.

   DO THIS
     In exactly one .cu file of your project:
         #define C128_IMPLEMENTATION
         #include "c128.cuh"
     Everywhere else (C11, C++ or CUDA) include "c128.cuh" for the declarations only, and link
     cudart (plus libstdc++ when the program's main is plain C):
         nvcc -O3 -gencode arch=compute_90,code=sm_90 -Xcompiler=-ffp-contract=off -c c128_impl.cu
         gcc -std=c11 -I/usr/local/cuda/include app.c c128_impl.o \
             -L/usr/local/cuda/lib64 -lcudart -lstdc++ -lm
     (-ffp-contract=off keeps the host compiler from fusing a*b+c, which the host runner's
     bit-identity with the GPU needs; aarch64 hosts such as GH200 fuse by default.)
     A program of one translation unit may instead
         #define C128_STATIC
     which compiles everything as static functions (no exported symbols).

   QUICK START (an excerpt of examples/quickstart.c, one decode step; CI checks that it is one)
         c128_decode_args d = {0};
         d.head_dim = HEAD_DIM;
         d.state_dtype = C128_F32, d.input_dtype = C128_F32, d.output_dtype = C128_F32;
         d.state = state, d.state_pages = pages;
         d.input = input, d.batch = NUM_REQ;
         d.ape = ape;
         d.output = output, d.output_rows = NUM_REQ;
         d.plans = plans;
         CHECK(use_gpu ? c128_decode(&d, stream) : c128_decode_host(&d, NULL));

   CONFIGURATION
     Each macro, its default, and the translation units that must define it alike:
     C128_IMPLEMENTATION  undefined    the one .cu file that holds the implementation
     C128_STATIC          undefined    a one-TU program: everything static; implies the above
     C128_INSTANCES(X)    24 rows      every TU: the instance enum and count come from it, so all
                                       TUs of a program must see the same table (define it in a
                                       header of yours, or on the command line). Rows: C128_ROW.
     C128_MATH            FAST         the implementation's TU: C128_MATH_FAST (the GPU's exp2
                                       unit; within the bound of NUMERICS of the host runner) or
                                       C128_MATH_EXACT (the library's exp everywhere: the GPU
                                       reproduces the host runner bit for bit)
     C128_EPILOGUE        TWO_WARP     the implementation's TU: C128_EPILOGUE_TWO_WARP or
                                       C128_EPILOGUE_LEGACY (block-wide butterflies, DESIGN 6.1)
     C128_DECODE_BLOCKS   SINGLE       the implementation's TU: C128_DECODE_BLOCKS_SINGLE (a
                                       pooled decode of one request a block runs the one-request
                                       kernel, DESIGN 6.2) or C128_DECODE_BLOCKS_GROUPED (the
                                       grouped kernel at every group: to measure the other)
     C128_API             extern       every TU: the storage class of public functions (extern
                                       "C" in C++, static inline with C128_STATIC); override it
                                       to add attributes, e.g. visibility for a shared library
     An enumerated macro with any other value is an #error.

   INSTANCES
     Name h<head_dim>_<state>_<input>_<output>. The default table has every head_dim in
     {128, 256, 512} x state {f32, bf16} x input {f32, bf16} x output {f32, bf16}. To compile
     only what you need:
         #define C128_INSTANCES(X) C128_ROW(X, 512, f32, f32, f32) C128_ROW(X, 512, bf16, f32, f32)
     C128_ROW builds the name from the other columns, so a row cannot misname itself.
     c128_instance_count() / c128_instance_info_get(i) list what was compiled (name NULL and
     C128_ERROR_UNSUPPORTED_INSTANCE out of range); the generic entry points (c128_decode, ...)
     dispatch on (head_dim, dtypes); the typed ones (c128_decode_h512_f32_f32_f32, ...) check
     that the struct agrees. The storage dtypes come from one table, C128_DTYPES.

   PLANS
     c128_plan_prefill / c128_plan_decode turn (pool index, seq_len, extend_len) per request
     into plans for the legacy layout, a request ring (R = 128, 256, ...) or a page table, with
     or without speculative decoding (DESIGN 5). A verify batch may carry at most R - 126 drafts
     per request on a speculative ring (130 for R = 256) and 1 otherwise. Every page a request's
     plans name must be allocated, read_page_0 included (consumers use it); with a block table
     (c128_state_layout), every block of the rows the plans read or write, and read_page_0 is
     the logical page only: its blocks may be freed (a sliding window), as no kernel reads
     them. A request {any, 0, 0} is absent (pads a fixed-size batch). c128_plan_*_device
     compute the same bytes and the same status on the GPU for CUDA graphs. c128_check_*_plans
     reports the first bad plan of a batch built elsewhere.

   STATE LAYOUTS (DESIGN 5.9)
     args.state_layout zero is SGLang's: pages of 128 rows of kv | raw score, plans naming them.
     Otherwise blocks of 8..256 rows, kv and score in one row or two planes, scores stored with
     ape folded in, and a block table through which plans name logical rows (table row <<
     row_shift | position). vLLM: block_rows 8, its block_table, score_biased. TensorRT-LLM:
     block_rows 128 or 256, score_plane + score_block_table, score_biased. The same value goes
     into c128_ring.state_layout for the planners, which then check every block a plan uses.
     args.output_index[r] says where the window that ends at input row r goes. A prefill's
     writes may come from an engine's per-token arrays instead of plans (write_slots: vLLM's
     slot_mapping, a physical row a token; write_positions: the ape row).

   OUTPUTS (DESIGN 11)
     args.entry.kind C128_OUTPUT_POOLED (0): the pooled vector, output_dtype rows. DSV4_FP8 /
     DSV4_BF16: the decode and compress launches normalise it, rotate the last 64 channels and
     store DeepSeek-V4's cache entry (FlashMLA's sparse FP8 layout, or bf16) at entry
     output_index[r] of a paged cache; head_dim <= 512, and a workspace every launch leaves all zero
     (c128_entry_workspace_bytes: zero it once, use it on one stream at a time).

   KERNELS (DESIGN 6)
     Decode: ceil(batch / G) x head_dim/64 blocks of 512 threads; a block takes G <= 32 requests
     of one 64-channel split (args.requests_per_block, or c128_decode_group_size() when 0),
     persists their new rows and compresses their boundary windows one after another.
     Prefill: a compress launch (ceil(num_compress / G) x head_dim/64 blocks of 512, G <= 32
     windows a block: args.windows_per_block or c128_prefill_group_size()) then a write launch
     (a warp per written row, 4 warps a block), on one stream. Results never depend on G.

   ERRORS
     Every entry point returns a c128_status; c128_status_string() names it. All arguments are
     checked on the host before anything is launched; a refused call launches and writes
     nothing (the device planners also write the refusal to *status, see their declaration).
     Plan contents live on the device and are checked there: a plan that names pages, rows or
     outputs outside the buffers is skipped, so no plan bytes can make a kernel touch memory
     outside the state, input, output and plan arrays. The plan checkers accept exactly the
     arguments the launches accept. A call with nothing to do (decode batch 0, prefill with no
     plans) succeeds once its sizes, dtypes and layout pass, without looking at its tensors:
     NULL, misaligned or overlapping pointers are refused only where there is work. ape is
     work wherever it is read: a window can be written (output rows or cache pages), or a
     biased state (state_layout.score_biased) stores a row, which adds ape to its score.

   BUFFERS
     Contiguous, row-major. Alignment: state and input at two elements of their dtype (a pair is
     one vector access), ape at 8 bytes, output at one element, each plan array at its plan's
     size (16 or 8 bytes), the device planner's workspace and counts at 8 bytes.

   ALIASING
     Tensors a kernel writes (state, output) overlap nothing else of the call; read-only ones
     (input, ape, plans) may overlap each other. A planner's request array and page table
     overlap nothing it writes (plan entries; a device planner's workspace, counts and
     status), nor do those overlap each other.
     Overlaps are refused with C128_ERROR_ALIASED: the launches compare the extents their sizes
     give, the planners the entries they will write (capacity when padding, the counts else).

   ALLOCATION
     Launches and the device planners allocate nothing (the latter's workspace, at least
     512 KiB, holds their table of what the batch writes). The host planners take host scratch
     (a copy of the requests and a table of the pages or blocks the batch writes, sized from the
     batch: up to 4 KiB each on the stack, calloc beyond), the plan checkers 48 bytes per plan,
     the host runner's race checker a shadow of what it touches (capped by
     c128_host_options.checker_limit_bytes); each returns C128_ERROR_OUT_OF_MEMORY when it
     cannot have them.

   PDL, STREAMS, GRAPHS, THREADS
     Launches synchronise nothing and keep no global state: every launch is ordered on the
     caller's stream and can be captured in a CUDA graph. Any host thread may call any entry
     point at any time; calls on different streams are independent as long as they write no
     common state pages or output rows. Within a stream, a decode or prefill reads the state its
     predecessors wrote. With args.pdl = C128_PDL_ON the kernels are launched with programmatic
     stream serialisation: each one waits (griddepcontrol.wait) before it uses plans, input or
     state and before its first write, so it may start while its predecessor drains; before the
     wait it reads plans only as prefetch guesses (DESIGN 6.4). With C128_PDL_PLANS_READY the
     caller promises that the plans, block tables and output index were complete before the
     previous kernel in the stream began (the host planner's plans copied earlier, a device
     planner launched two kernels back, the fixed arrays of a CUDA graph; not the device planner
     launched just before): the decode and compress kernels then read them before the wait.
     Other values of pdl are refused (C128_ERROR_INVALID_PDL). A
     kernel you launch after ours with PDL must itself execute griddepcontrol.wait
     (cudaGridDependencySynchronize) before it reads our outputs, as PDL requires of every
     dependent. Context-parallel state: pages of different live requests must be distinct; the
     planners refuse a batch in which two requests write one page, or with a block table one
     block, or a decode window reads a block the batch writes (C128_ERROR_PAGE_SHARED).

   NUMERICS (DESIGN 8)
     All arithmetic after loading is fp32, with explicit round-to-nearest operations and a fixed
     fold order, so decode and prefill give the same bits for the same window, and every build
     is deterministic run to run (PDL, graphs, group sizes and block order change nothing).
     The host runner always uses the library's exp (within 1.05 ulp). C128_MATH_EXACT puts the
     same exp on the GPU: GPU and host runner agree bit for bit. C128_MATH_FAST (the default)
     uses the GPU's exp2 unit (ex2.approx.ftz, within 2 ulp): an output element then differs
     from the host runner's by at most C128_FAST_BOUND * (1 + max |kv| of its window and
     channel), plus one rounding step of a bf16 output. Non-finite input: a score of -inf gives
     its row weight 0; a channel whose 128 scores are all -inf, or that holds +inf or NaN,
     produces NaN; kv values propagate by IEEE rules. Builds agree on which outputs are NaN,
     not on NaN bit patterns.

   MAP (grep the anchors)
     declarations: >>config >>dtypes >>instances >>status >>plans >>api >>checker-api
                   >>planner-api
     implementation: >>numerics >>memory >>rules >>compress >>block >>decode >>write >>kernels
                   >>runner >>launch >>dispatch >>checker >>planners

   REVISION HISTORY
     0.4.0 (unreleased) other engines' state layouts (c128_state_layout, output_index, write_all,
                        planning from seq_lens / query_start), cache entries written in the
                        compress launch (c128_entry_args), the checker refuses a decode write
                        into another plan's window; output_index on a sharded state, planners
                        claim physical blocks, ape required where biased writes read it.
     0.3.0 (2026-12-01) hardware exp2 by default (C128_MATH_EXACT keeps bit-identity), the block
                        program written once as steps, prefetch before the PDL wait, one dtype
                        table and C128_ROW, hardened host side: aliasing and shared-page
                        refusals, checker = launch, planners read each request once.
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
#define C128_VERSION_MINOR 4
#define C128_VERSION_PATCH 0
#define C128_VERSION (C128_VERSION_MAJOR * 10000 + C128_VERSION_MINOR * 100 + C128_VERSION_PATCH)
#define C128__STRING(x) #x
#define C128__EXPAND_STRING(x) C128__STRING(x)
#define C128_VERSION_STRING               \
  C128__EXPAND_STRING(C128_VERSION_MAJOR) \
  "." C128__EXPAND_STRING(C128_VERSION_MINOR) "." C128__EXPAND_STRING(C128_VERSION_PATCH)

#if defined(C128_STATIC) && !defined(C128_IMPLEMENTATION)
#define C128_IMPLEMENTATION
#endif
#ifndef C128_API
#if defined(C128_STATIC)
#define C128_API static inline
#elif defined(__cplusplus)
#define C128_API extern "C"
#else
#define C128_API extern
#endif
#endif

/* Enumerated configuration: values start at 1, so a misspelt value (0 in #if) is an error. */
#define C128_MATH_FAST 1
#define C128_MATH_EXACT 2
#ifndef C128_MATH
#define C128_MATH C128_MATH_FAST
#endif
#if C128_MATH != C128_MATH_FAST && C128_MATH != C128_MATH_EXACT
#error "c128.cuh: C128_MATH must be C128_MATH_FAST or C128_MATH_EXACT"
#endif
#define C128_EPILOGUE_TWO_WARP 1
#define C128_EPILOGUE_LEGACY 2
#ifndef C128_EPILOGUE
#define C128_EPILOGUE C128_EPILOGUE_TWO_WARP
#endif
#if C128_EPILOGUE != C128_EPILOGUE_TWO_WARP && C128_EPILOGUE != C128_EPILOGUE_LEGACY
#error "c128.cuh: C128_EPILOGUE must be C128_EPILOGUE_TWO_WARP or C128_EPILOGUE_LEGACY"
#endif
#define C128_DECODE_BLOCKS_SINGLE 1
#define C128_DECODE_BLOCKS_GROUPED 2
#ifndef C128_DECODE_BLOCKS
#define C128_DECODE_BLOCKS C128_DECODE_BLOCKS_SINGLE
#endif
#if C128_DECODE_BLOCKS != C128_DECODE_BLOCKS_SINGLE && C128_DECODE_BLOCKS != C128_DECODE_BLOCKS_GROUPED
#error "c128.cuh: C128_DECODE_BLOCKS must be C128_DECODE_BLOCKS_SINGLE or C128_DECODE_BLOCKS_GROUPED"
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
/* Write-kernel blocks per SM: 16, or as many as the target's resident threads allow (ptxas
   ignores, with a warning, a minimum it cannot meet: sm_75 holds 1024 threads, sm_86/87/89/120 1536). */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 750
#define C128_WRITE_BLOCKS_PER_SM (1024 / C128_WRITE_BLOCK_THREADS)
#elif defined(__CUDA_ARCH__) && \
    (__CUDA_ARCH__ == 860 || __CUDA_ARCH__ == 870 || __CUDA_ARCH__ == 890 || __CUDA_ARCH__ >= 1200)
#define C128_WRITE_BLOCKS_PER_SM (1536 / C128_WRITE_BLOCK_THREADS)
#else
#define C128_WRITE_BLOCKS_PER_SM 16
#endif
/* The write kernel of any layout (block tables, shards) forms more addresses than 32 registers
   hold on sm_100: half as many blocks an SM give it 64. */
#define C128_WRITE_LAYOUT_BLOCKS_PER_SM (C128_WRITE_BLOCKS_PER_SM / 2)
#define C128_TILE_DIM (C128_TILE_ELEMS * C128_WARP_THREADS) /* channels per block */
#define C128_MAX_PREFILL_ROWS 65536                         /* ragged_id is a u16 */
#define C128_MAX_DECODE_GROUP C128_WARP_THREADS             /* requests per decode block: one ballot lane each */
#define C128_MAX_PREFILL_GROUP C128_WARP_THREADS            /* compress windows per block */
#define C128_MAX_HEAD_DIM 65536                             /* keeps every element offset of a row in int */
#define C128_ROPE_DIMS 64       /* cache entries: the last 64 channels are rotated, the others FP8 */
#define C128_MAX_ENTRY_SPLITS 8 /* cache entries: a warp writes a split's part, head_dim <= 512 */
/* Largest |GPU - host runner| of a C128_MATH_FAST output, per unit of (1 + max |kv|) (NUMERICS). */
#define C128_FAST_BOUND 4e-6

/* Per-head_dim constants (upstream's C128Trait), functions of D = head_dim alone. */
#define C128_NUM_SPLIT(D) ((D) / C128_TILE_DIM) /* blocks per compress event */
#define C128_SCORE_OFFSET(D) (D)                /* score half of a row starts here */
#define C128_ROW_ELEMS(D) (2 * (D))             /* kv | score */
#define C128_PAGE_ELEMS(D) (C128_WINDOW * C128_ROW_ELEMS(D))

/* >>dtypes -------------------------------------------------------------------------------- */
/* The storage dtypes: X(name, NAME, value, bytes, storage type). The value is cudaDataType_t's
   (CUDA_R_32F, CUDA_R_16BF); `name` spells the dtype in instance names. Adding one (f16, say)
   is a row here and its widen/narrow pair in >>numerics; nothing else names a dtype. */
#define C128_DTYPES(X)     \
  X(f32, F32, 0, 4, float) \
  X(bf16, BF16, 14, 2, uint16_t)

/* C128_<NAME> is the public enumerator; C128__DTYPE_<name> lets instance rows name it. The
   _RANGE_ enumerators make every int32 a value of the type: C callers may pass anything, and the
   C++ implementation must be able to read it and refuse it. */
typedef enum c128_dtype {
#define C128__DTYPE_ENUM(name, NAME, value, bytes, type) C128_##NAME = value, C128__DTYPE_##name = value,
  C128_DTYPES(C128__DTYPE_ENUM)
#undef C128__DTYPE_ENUM
      C128__DTYPE_RANGE_MIN = -2147483647 - 1,
  C128__DTYPE_RANGE_MAX = 2147483647
} c128_dtype;

/* >>instances ----------------------------------------------------------------------------- */
/* One compiled instance: X(name, head_dim, state, input, output), the dtypes by their table
   name. Write rows with C128_ROW, which derives the name from the other columns. */
#define C128_ROW(X, D, state, input, output) X(h##D##_##state##_##input##_##output, D, state, input, output)
#ifndef C128_INSTANCES
// clang-format off
#define C128__ROWS_FOR_DIM(X, D) \
  C128_ROW(X, D, f32, f32, f32)   C128_ROW(X, D, f32, f32, bf16)   \
  C128_ROW(X, D, f32, bf16, f32)  C128_ROW(X, D, f32, bf16, bf16)  \
  C128_ROW(X, D, bf16, f32, f32)  C128_ROW(X, D, bf16, f32, bf16)  \
  C128_ROW(X, D, bf16, bf16, f32) C128_ROW(X, D, bf16, bf16, bf16)
// clang-format on
#define C128_INSTANCES(X) C128__ROWS_FOR_DIM(X, 128) C128__ROWS_FOR_DIM(X, 256) C128__ROWS_FOR_DIM(X, 512)
#endif

/* Instance ids in table order, and their count. */
typedef enum c128_instance_id {
#define C128__INSTANCE_ENUM(name, D, state, input, output) C128_INSTANCE_##name,
  C128_INSTANCES(C128__INSTANCE_ENUM)
#undef C128__INSTANCE_ENUM
      C128_INSTANCE_COUNT
} c128_instance_id;

/* >>status -------------------------------------------------------------------------------- */
/* Status codes: explicit values, never renumbered. X(name, value, message). */
#define C128_STATUS_LIST(X)                                                                                        \
  X(C128_SUCCESS, 0, "success")                                                                                    \
  X(C128_ERROR_NULL_POINTER, 1, "a required pointer is NULL")                                                      \
  X(C128_ERROR_MISALIGNED, 2, "a tensor or plan pointer is not aligned for its vector access")                     \
  X(C128_ERROR_UNSUPPORTED_INSTANCE, 3, "no compiled instance for this (head_dim, dtypes)")                        \
  X(C128_ERROR_INSTANCE_MISMATCH, 4, "typed entry point called with another instance's args")                      \
  X(C128_ERROR_NEGATIVE_SIZE, 5, "a size or count is negative")                                                    \
  X(C128_ERROR_TOO_MANY_ROWS, 6, "more input rows than a plan can address (65536 for prefill)")                    \
  X(C128_ERROR_TOO_MANY_PLANS, 7, "more plans than a launch or the u16 ragged_id allows")                          \
  X(C128_ERROR_OUTPUT_TOO_SMALL, 8, "output_rows is smaller than the number of plans")                             \
  X(C128_ERROR_STATE_TOO_LARGE, 9, "state_pages overflows 64-bit byte offsets")                                    \
  X(C128_ERROR_INVALID_LAYOUT, 10, "shared layout: need size >= 1, 0 <= rank < size, pages >= 0")                  \
  X(C128_ERROR_LAUNCH_FAILED, 11, "cudaLaunchKernelEx failed")                                                     \
  X(C128_ERROR_OUT_OF_MEMORY, 12, "a host allocation (planner, checker, race checker) failed")                     \
  X(C128_ERROR_RACE_DETECTED, 13, "host runner checker found a race between threads or blocks")                    \
  X(C128_ERROR_INVALID_RING, 14, "ring_tokens must be a positive multiple of 128")                                 \
  X(C128_ERROR_EXTEND_EXCEEDS_SEQ, 15, "a request's extend_len exceeds its seq_len")                               \
  X(C128_ERROR_EMPTY_EXTEND, 16, "a request of a prefill/extend batch has extend_len 0")                           \
  X(C128_ERROR_POOL_INDEX_OUT_OF_RANGE, 17, "a pool index is negative or beyond the page table")                   \
  X(C128_ERROR_PAGE_OUT_OF_RANGE, 18, "a plan would use a page outside the state")                                 \
  X(C128_ERROR_TOO_MANY_DRAFTS, 19, "verify batch has more drafts than the ring can persist")                      \
  X(C128_ERROR_CAPACITY_TOO_SMALL, 20, "plan arrays are smaller than the batch needs")                             \
  X(C128_ERROR_INVALID_PLAN, 21, "a plan is invalid (see the checker's message)")                                  \
  X(C128_ERROR_INVALID_GROUP, 22, "requests_per_block or windows_per_block is negative or too large")              \
  X(C128_ERROR_ALIASED, 23, "two arguments overlap that must not (see ALIASING)")                                  \
  X(C128_ERROR_PAGE_SHARED, 24, "two requests (or ring chunks) of one batch would share a state page or block")    \
  X(C128_ERROR_INVALID_STATE_LAYOUT, 25, "state_layout: block_rows, row_shift or the block table is out of range") \
  X(C128_ERROR_INVALID_ENTRY, 26, "entry: unknown output kind, or a cache, page or table size out of range")       \
  X(C128_ERROR_UNSUPPORTED_DEVICE, 27, "not returned since 0.4.0 (cache entries needed sm_90 clusters before)")    \
  X(C128_ERROR_BLOCK_MISSING, 28, "a block the batch reads or writes is not allocated (or is the null block)")     \
  X(C128_ERROR_ROPE_TABLE_TOO_SHORT, 29, "a window starts at a position the RoPE table does not hold")             \
  X(C128_ERROR_INVALID_PDL, 30, "pdl must be 0, C128_PDL_ON (1) or C128_PDL_PLANS_READY (2)")                      \
  X(C128_ERROR_WORKSPACE_TOO_SMALL, 31, "entry.workspace_bytes is below c128_entry_workspace_bytes(jobs, head_dim)")

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
/* Byte layouts are ABI, identical to SGLang's c128 plans (DESIGN 4). Little-endian, packed,
   align = size. */
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
C128__STATIC_ASSERT(C128_NUM_WARPS *C128_ROWS_PER_WARP == C128_WINDOW, "warps cover the window");
C128__STATIC_ASSERT(C128_WINDOW <= C128_BLOCK_THREADS, "one thread per window row at most");

#define C128_INVALID_ID 0xFFFFFFFFu
// clang-format off
#define C128_INVALID_COMPRESS_PLAN {C128_INVALID_ID, 0, 0, -1, -1}
#define C128_INVALID_WRITE_PLAN {C128_INVALID_ID, -1}
#define C128_PADDING_DECODE_PLAN {0, -1, -1, -1}
// clang-format on

/* The three kinds of plan: X(enumerator, value, name). */
#define C128_PLAN_KINDS(X)             \
  X(C128_PLAN_DECODE, 0, "decode")     \
  X(C128_PLAN_COMPRESS, 1, "compress") \
  X(C128_PLAN_WRITE, 2, "write")
typedef enum c128_plan_kind {
#define C128__PLAN_KIND_ENUM(name, value, text) name = value,
  C128_PLAN_KINDS(C128__PLAN_KIND_ENUM)
#undef C128__PLAN_KIND_ENUM
      C128__PLAN_KIND_RANGE_MAX = 2147483647
} c128_plan_kind;

/* >>api ----------------------------------------------------------------------------------- */
/* Context-parallel (owner-sharded) state: logical page p lives on rank p mod size. Zero means
   an unsharded state (size 0 is read as 1). */
typedef struct c128_shared_layout {
  int32_t rank;
  int32_t size;
  int32_t pages_per_rank;
} c128_shared_layout;

/* How the state is stored (DESIGN 5.9). Zero = SGLang's layout: one tensor of pages of 128 rows,
   each row kv | raw score, and plans that name its rows (write_loc) and pages (read_page_1)
   directly, or through c128_shared_layout. Any other value describes vLLM's and TensorRT-LLM's
   layouts too, and cannot be combined with a sharded c128_shared_layout. */
typedef struct c128_state_layout {
  int32_t block_rows;   /* B: rows per block of the state tensor(s), a power of two in [8, 256]; 0 = 128.
                           state_pages then counts blocks */
  int32_t score_biased; /* stored scores hold score + ape[position mod 128] (vLLM, TensorRT-LLM): ape is
                           added to rows read from the input only, and writes of scores add it */
  void *score_plane;    /* NULL: `state` holds rows of kv | score [state_pages, B, 2 * head_dim]. Else two planes:
                           kv in `state` and scores here, each [state_pages, B, head_dim] (TensorRT-LLM) */
  /* A block table: plans name LOGICAL rows, row = table_row << row_shift | position (a row of
     the table, and a position within what it maps), and the kernels find the physical row
     block_table[table_row][position / B] * B + position % B. NULL: plans name physical rows. */
  const int32_t *block_table;       /* [table_rows][table_stride] physical block ids; negative = none */
  const int32_t *score_block_table; /* the score plane's own table, the same shape; NULL = block_table */
  int64_t table_rows, table_stride;
  int32_t row_shift; /* 7..30, and table_rows << row_shift <= 2^31 (logical rows are int32) */
} c128_state_layout;

/* What a compress event writes: X(enumerator, value, name). */
#define C128_OUTPUT_KINDS(X)                                                                             \
  X(C128_OUTPUT_POOLED, 0, "pooled")       /* the pooled vector y, output_dtype [rows, head_dim] */      \
  X(C128_OUTPUT_DSV4_FP8, 1, "dsv4_fp8")   /* DeepSeek-V4's cache entry, FlashMLA's sparse FP8 layout */ \
  X(C128_OUTPUT_DSV4_BF16, 2, "dsv4_bf16") /* the same entry dequantised: head_dim bf16 values */
typedef enum c128_output_kind {
#define C128__OUTPUT_KIND_ENUM(name, value, text) name = value,
  C128_OUTPUT_KINDS(C128__OUTPUT_KIND_ENUM)
#undef C128__OUTPUT_KIND_ENUM
      C128__OUTPUT_KIND_RANGE_MIN = -2147483647 - 1,
  C128__OUTPUT_KIND_RANGE_MAX = 2147483647
} c128_output_kind;

/* The cache-entry epilogue (DESIGN 11): RMSNorm, RoPE on the last 64 channels, FP8 (UE8M0 scales,
   blocks of 64) of the others, stored into a paged cache, in the compress launch itself. Entry
   `loc` is slot loc % P of page loc / P. FP8 entry t of a page: head_dim - 64 e4m3 codes and 64
   bf16 rope values at byte (head_dim + 64) * t; its scale bytes (one a block, then one 0 pad
   byte) at byte (head_dim + 64) * P + (head_dim / 64) * t. BF16 entry t: head_dim bf16 values at
   byte 2 * head_dim * t. head_dim <= 512.
   A launch whose group (requests_per_block, windows_per_block, or a prefill's automatic one; a
   decode's automatic group never does) is at least head_dim / 64 gives each block whole windows,
   which write their entries themselves. A launch on today's layout whose group is below
   head_dim / 64, on a device with thread-block clusters (sm_90 and newer), makes each group's
   head_dim / 64 blocks (one a split) a cluster, which exchange their channels in shared memory.
   Other launches spread a window over head_dim / 64 blocks, which each leave their 64 pooled
   channels in the workspace; the last of them to arrive (a counter a window) writes the whole
   entry and sets the counter and the channels back to zero. So the workspace must be zero before
   its first launch (cudaMemset once), every launch of any size leaves it so, and two launches
   that run at the same time need a workspace each. The entries are the same bytes in every form. */
typedef struct c128_entry_args {
  c128_output_kind kind;    /* C128_OUTPUT_POOLED (0): the fields below are not read */
  const float *norm_weight; /* gamma [head_dim], f32 */
  float norm_eps;           /* 1e-6 in DeepSeek-V4 */
  const float *rope_table;  /* [rope_positions][32][2] f32: (cos, sin) of pair i at position p */
  int64_t rope_positions;   /* > every window's position (its first token) */
  void *cache;              /* page p at cache + p * page_bytes */
  int64_t cache_pages;
  int32_t entries_per_page; /* P: a power of two */
  int64_t page_bytes;       /* a multiple of 4, at least what P entries take */
  void *workspace;          /* 16-byte aligned; zero before the first launch (above) */
  int64_t workspace_bytes;  /* >= c128_entry_workspace_bytes(jobs, head_dim): jobs = batch or num_compress */
} c128_entry_args;

/* args.pdl of a decode or prefill launch (PDL, STREAMS, GRAPHS). */
#define C128_PDL_ON 1 /* programmatic dependent launch: the kernels wait before they read */
/* The same, and the caller promises that the plans, block tables and output index were complete
   before the previous kernel in the stream began: the kernels read them before the wait. */
#define C128_PDL_PLANS_READY 2

/* One decode step: one new token per request; input row b and output row b belong to plan b. */
typedef struct c128_decode_args {
  int32_t head_dim;
  c128_dtype state_dtype, input_dtype, output_dtype;
  void *state;                   /* [state_pages, 128, 2 * head_dim] */
  int64_t state_pages;           /* physical pages of this rank's view */
  const void *input;             /* [batch, 2 * head_dim]: kv | score of each new token */
  const float *ape;              /* [128, head_dim], always f32; read by windows and biased state writes */
  void *output;                  /* [output_rows, head_dim]; row b written only at a boundary */
  int64_t output_rows;           /* >= batch without output_index; unused for cache entries */
  const c128_decode_plan *plans; /* [batch] */
  int64_t batch;
  c128_shared_layout layout;
  int32_t pdl;                /* 0, C128_PDL_ON or C128_PDL_PLANS_READY (PDL, STREAMS, GRAPHS) */
  int32_t requests_per_block; /* 1..C128_MAX_DECODE_GROUP; 0 = from the batch and the SM count */
  c128_state_layout state_layout;
  /* Where request b's window goes: output row (pooled) or cache entry output_index[b]; NULL = b.
     Rows or entries outside the output or cache are skipped. [batch] */
  const int64_t *output_index;
  c128_entry_args entry; /* zero: pooled rows in output */
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
  int64_t output_rows; /* >= num_compress without output_index; unused for cache entries */
  const c128_compress_plan *compress_plans;
  int64_t num_compress; /* launched count, sentinels included; <= 65536 */
  const c128_write_plan *write_plans;
  int64_t num_write; /* <= 65536 */
  c128_shared_layout layout;
  int32_t pdl;               /* as in c128_decode_args */
  int32_t windows_per_block; /* compress windows per block, 1..C128_MAX_PREFILL_GROUP; 0 = automatic */
  c128_state_layout state_layout;
  /* Where the window that ends at input row r goes (the last row of a compress plan, its
     ragged_id): output row or cache entry output_index[r], as SGLang's out_loc and vLLM's
     per-token rows are indexed; NULL = row k for compress plan k. [input_rows] */
  const int64_t *output_index;
  c128_entry_args entry;
  /* Writes named by an engine's per-token arrays instead of write plans (vLLM's slot_mapping and
     positions; write_plans NULL): input row t < num_write goes to PHYSICAL state row
     write_slots[t] (block slot / B, row slot % B; negative: not written) with ape row
     write_positions[t] mod 128 where scores are biased. [num_write] each; not on a sharded state. */
  const int64_t *write_slots, *write_positions;
} c128_prefill_args;

/* Options of the host (CPU) runner. Zero = forward block order, no race checking. */
typedef struct c128_host_options {
  int32_t check_races;    /* record every state/output access; fail on a race (DESIGN 7) */
  int32_t reverse_blocks; /* run blocks last to first */
  char *message;          /* optional: what the race checker found */
  size_t message_size;
  size_t checker_limit_bytes; /* most shadow memory the race checker may take; 0 = no limit */
} c128_host_options;

typedef struct c128_instance_info {
  const char *name;
  int32_t head_dim;
  c128_dtype state_dtype, input_dtype, output_dtype;
  int32_t num_split;  /* blocks per compress event */
  int64_t row_elems;  /* elements per state / input row */
  int64_t page_elems; /* elements per state page */
  /* The instance's typed entry points. */
  c128_status (*decode)(const c128_decode_args *args, cudaStream_t stream);
  c128_status (*prefill)(const c128_prefill_args *args, cudaStream_t stream);
  c128_status (*decode_host)(const c128_decode_args *args, const struct c128_host_options *options);
  c128_status (*prefill_host)(const c128_prefill_args *args, const struct c128_host_options *options);
} c128_instance_info;

/* How the implementation was compiled. */
typedef struct c128_build_info {
  const char *version;    /* C128_VERSION_STRING */
  int32_t version_number; /* C128_VERSION */
  int32_t math;           /* C128_MATH_FAST or C128_MATH_EXACT */
  int32_t epilogue;       /* C128_EPILOGUE_TWO_WARP or C128_EPILOGUE_LEGACY */
  int32_t instance_count;
} c128_build_info;

C128_API const char *c128_status_string(c128_status status);
C128_API int c128_instance_count(void);
C128_API const char *c128_instance_name(int index); /* NULL out of range */
C128_API c128_status c128_instance_info_get(int index, c128_instance_info *info);
/* Index of the instance for (head_dim, dtypes), or -1. */
C128_API int c128_find_instance(int head_dim, c128_dtype state, c128_dtype input, c128_dtype output);
/* Bytes of one element of the dtype; 0 for a value outside C128_DTYPES. */
C128_API size_t c128_dtype_size(c128_dtype dtype);
C128_API c128_status c128_build_info_get(c128_build_info *info);

/* Requests per decode block chosen when args.requests_per_block is 0, for a GPU of sm_count
   multiprocessors: the largest group that costs no more block-windows per SM slot than any
   other when every request is at a boundary (few blocks when few are: the common step).
   Defined for every argument (1 for sizes a launch would refuse). */
C128_API int32_t c128_decode_group_size(int64_t batch, int32_t head_dim, int32_t sm_count);
/* Bytes of a cache-entry launch's workspace (c128_entry_args.workspace) for `jobs` decode
   requests or compress plans: a counter and head_dim floats a job; -1 for a negative count or a
   head_dim out of range. */
C128_API int64_t c128_entry_workspace_bytes(int64_t jobs, int32_t head_dim);
/* The same rule for compress windows per block (args.windows_per_block = 0). */
C128_API int32_t c128_prefill_group_size(int64_t num_compress, int32_t head_dim, int32_t sm_count);

C128_API c128_status c128_decode(const c128_decode_args *args, cudaStream_t stream);
C128_API c128_status c128_prefill(const c128_prefill_args *args, cudaStream_t stream);
/* The same kernels run on the CPU over host pointers; options may be NULL. */
C128_API c128_status c128_decode_host(const c128_decode_args *args, const c128_host_options *options);
C128_API c128_status c128_prefill_host(const c128_prefill_args *args, const c128_host_options *options);

#define C128__DECLARE_TYPED(name, D, state, input, output)                                                      \
  C128_API c128_status c128_decode_##name(const c128_decode_args *args, cudaStream_t stream);                   \
  C128_API c128_status c128_prefill_##name(const c128_prefill_args *args, cudaStream_t stream);                 \
  C128_API c128_status c128_decode_host_##name(const c128_decode_args *args, const c128_host_options *options); \
  C128_API c128_status c128_prefill_host_##name(const c128_prefill_args *args, const c128_host_options *options);
C128_INSTANCES(C128__DECLARE_TYPED)
#undef C128__DECLARE_TYPED

/* bf16 storage from C: round to nearest even, NaN stays NaN. */
C128_API uint16_t c128_bf16_from_float(float value);
C128_API float c128_bf16_to_float(uint16_t bits);

/* >>checker-api --------------------------------------------------------------------------- */
typedef struct c128_plan_report {
  int64_t index;       /* out: the first offending plan, -1 when every plan is fine */
  c128_plan_kind kind; /* out: which array it is in */
  char *message;       /* optional buffer for what is wrong */
  size_t message_size;
} c128_plan_report;

/* Checks plans held in HOST memory against the sizes in args. The arguments are checked as the
   generic launch checks them, tensor pointers excepted (they are not used and may be NULL): a
   call the launch would refuse gets the launch's status. Then C128_SUCCESS, or
   C128_ERROR_INVALID_PLAN with the first offending plan (lowest index, compress plans before
   write plans) in *report. It reports every condition that makes a kernel skip a plan (padding
   rows and sentinels excepted), and also: a boundary decode whose write slot is not row 127 of
   its read page, a compress plan whose seq_len is not a multiple of 128, and a plan whose state
   access conflicts with an earlier plan's in the same launch: it writes a slot an earlier plan
   writes, or (decode) it writes a slot an earlier plan's window reads, or its window reads a
   slot an earlier plan writes (the result would depend on block order). Uses 48 bytes of host
   scratch per plan. */
C128_API c128_status c128_check_decode_plans(const c128_decode_args *args, c128_plan_report *report);
C128_API c128_status c128_check_prefill_plans(const c128_prefill_args *args, c128_plan_report *report);

/* >>planner-api --------------------------------------------------------------------------- */
/* Where a request's tokens live (DESIGN 5). Zero-initialised = legacy layout (R = 128, page =
   pool index), which still needs state_pages. */
typedef struct c128_ring {
  int32_t ring_tokens;       /* R: slots per request, a multiple of 128; 0 = 128 */
  int32_t speculative;       /* the engine runs speculative decoding on this ring */
  const int32_t *page_table; /* optional [num_pool][page_table_stride]; NULL = request ring */
  int64_t page_table_stride; /* entries per pool row, >= R / 128 */
  int64_t num_pool;          /* rows of page_table (ignored without one) */
  int64_t state_pages;       /* logical pages of the state (with a block table: its physical blocks) */
  /* Persist every new token the ring can hold, the last R of each request, not only the open
     window's (vLLM and TensorRT-LLM keep every row, for prefix caching and block reuse). */
  int32_t write_all;
  /* The kernels' state layout, the value the launches get (zero: today's). With a block table,
     plans name logical rows: R = 2^row_shift (ring_tokens 0 or that), page(rid, pos) = rid * R /
     128 + (pos mod R) / 128 for rid < table_rows, no page_table; every block a plan reads or
     writes must be allocated: an entry in [0, state_pages) that is not the null block; and a
     block the batch writes belongs to one request and one column (PAGE_SHARED otherwise). */
  c128_state_layout state_layout;
  int32_t has_null_block, null_block; /* a table entry that marks a missing block (vLLM's block 0) */
  int64_t rope_positions;             /* > 0: every window must start below it (the RoPE table's rows) */
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
  int64_t capacity;        /* entries of each array, <= 65536; input rows always suffice */
  int32_t pad_to_capacity; /* fill the tails with invalid sentinels */
  int64_t num_compress;    /* out: plans emitted (before padding) */
  int64_t num_write;       /* out */
} c128_prefill_plans;

/* Prefill / extend / verify batch -> plans in (request, position) order. verify != 0 marks a
   speculative verify batch (extend_len = drafts, root included). Each request is read once; a
   refused batch leaves the arrays untouched, except when a page-table entry changes during the
   call: C128_ERROR_PAGE_OUT_OF_RANGE then leaves sentinels in the entries written so far. */
C128_API c128_status c128_plan_prefill(const c128_ring *ring, const c128_request *requests, int64_t num_requests,
                                       int32_t verify, c128_prefill_plans *plans);
/* Decode batch: one plan per request (extend_len ignored; seq_len 0 = padding row). */
C128_API c128_status c128_plan_decode(const c128_ring *ring, const c128_request *requests, int64_t batch,
                                      c128_decode_plan *plans);

/* The same planners on the device, from device arrays, for CUDA graphs: plans are padded to
   `capacity` with sentinels, and the batch's status and counts are written to device memory, so
   a captured step needs no host round trip. Byte-identical to the host planners with
   pad_to_capacity, with the same status; deterministic (closed-form counts per request, one
   prefix sum, no atomics on the plans). The first kernel copies the requests into the
   workspace and the second reads only that copy. On a bad batch *status gets the host
   planner's status, counts are 0 and every plan is a sentinel / padding row. Arguments the host
   refuses are returned, and also written to *status (counts 0) when status (and counts) are
   usable device pointers, so that a captured step never reads a stale status. */
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
  /* Instead of `requests` (NULL): an engine's own arrays, device, request i = {pool_indices ?
     pool_indices[i] : i, seq_lens[i], query_start[i + 1] - query_start[i]} (vLLM: seq_lens and
     query_start_loc; TensorRT-LLM: kv_lens and cu_seq_lens). Request i's new tokens are input
     rows query_start[i] ..: with query_start[0] > 0 (TensorRT-LLM's generation call, whose rows
     follow the context requests') every plan's input row is query_start[0] past the host
     planner's, and the rows before it count towards the 65536 a launch addresses; a negative
     query_start[0] is C128_ERROR_NEGATIVE_SIZE. Decode reads no query_start. */
  const int32_t *seq_lens, *query_start, *pool_indices;
  /* Optional, both or neither (device): where each window goes, for the launch's output_index.
     Request i's j-th window of the batch goes to output_first[i] + j (TensorRT-LLM's cu_kv_comp),
     written to output_index[its input row]: prefill, [capacity] entries (every input row must be
     below capacity, else C128_ERROR_CAPACITY_TOO_SMALL), only the windows' rows written; decode,
     [num_requests], output_first[b] (-1 for padding rows and a refused batch). */
  const int32_t *output_first;
  int64_t *output_index;
} c128_device_plan_args;

/* The host's form of an engine's arrays (see c128_device_plan_args): requests[i] = {pool_indices ?
   pool_indices[i] : i, seq_lens[i], query_start[i + 1] - query_start[i]}, all host memory;
   query_start has n + 1 entries (NULL for decode: extend_len 1). C128_ERROR_NEGATIVE_SIZE where
   query_start decreases. */
C128_API c128_status c128_requests_from_lens(const int32_t *seq_lens, const int32_t *query_start,
                                             const int32_t *pool_indices, int64_t n, c128_request *requests);

/* Bytes of workspace for num_requests; 0 for a count the planners refuse. */
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
/* For what one build mode or one compilation pass leaves unreferenced (nvcc warns #177-D when the
   header itself is the file compiled). */
#define C128__MAYBE_UNUSED __attribute__((unused))
#define C128__DEVICE static __device__ __forceinline__
#define C128__ALL_LANES 0xFFFFFFFFu
#ifdef __CUDA_ARCH__
#define C128__UNROLL _Pragma("unroll")
#define C128__NO_UNROLL _Pragma("unroll 1")
#else
#define C128__UNROLL
#define C128__NO_UNROLL
#endif
#define C128__LAST_ROW (C128_WINDOW - 1)
#define C128__LOG2_WINDOW 7
#define C128__MAX_GROUP C128_WARP_THREADS
C128__STATIC_ASSERT(C128_MAX_DECODE_GROUP <= C128__MAX_GROUP && C128_MAX_PREFILL_GROUP <= C128__MAX_GROUP,
                    "one ballot lane per job of a group");

/* Every instance row: a splittable head_dim, and dtypes the table knows. */
#define C128__CHECK_ROW(name, D, state, input, output)                                              \
  static_assert((D) % C128_TILE_DIM == 0, #name ": head_dim must be a multiple of 64");             \
  static_assert((D) > 0 && (D) <= C128_MAX_HEAD_DIM, #name ": head_dim in (0, C128_MAX_HEAD_DIM]"); \
  static_assert(C128_NUM_SPLIT(D) * C128_TILE_DIM == (D), #name ": splits cover head_dim");         \
  static_assert(sizeof(c128__storage_##state) == c128__dtype_bytes(C128__DTYPE_##state), #name);    \
  static_assert(sizeof(c128__storage_##input) == c128__dtype_bytes(C128__DTYPE_##input), #name);    \
  static_assert(sizeof(c128__storage_##output) == c128__dtype_bytes(C128__DTYPE_##output), #name);

/* >>numerics ------------------------------------------------------------------------------ */
/* Storage types and element sizes, from the dtype table. */
#define C128__STORAGE_TYPE(name, NAME, value, bytes, type) typedef type c128__storage_##name;
C128_DTYPES(C128__STORAGE_TYPE)
#undef C128__STORAGE_TYPE
static __host__ __device__ constexpr int c128__dtype_bytes(int dtype) {
#define C128__DTYPE_BYTES(name, NAME, value, bytes, type) dtype == value ? bytes:
  return C128_DTYPES(C128__DTYPE_BYTES) 0;
#undef C128__DTYPE_BYTES
}
C128_INSTANCES(C128__CHECK_ROW)
#undef C128__CHECK_ROW

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

/* Each dtype's widen (storage bits -> f32) and narrow (f32 -> storage bits, round to nearest
   even, NaN stays a quiet NaN). The library's own, so that host and device round alike. */
C128__FN float c128__widen_f32(uint32_t bits) { return c128__from_bits(bits); }
C128__FN uint32_t c128__narrow_f32(float f) { return c128__bits(f); }
C128__FN float c128__widen_bf16(uint32_t bits) { return c128__from_bits(bits << 16); }
C128__FN uint32_t c128__narrow_bf16(float f) {
  const uint32_t u = c128__bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (u >> 16) | 0x0040u;
  return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
}
/* Dispatch on a dtype; in kernels the dtype is a compile-time constant and the switch folds. */
C128__FN float c128__widen(int dtype, uint32_t bits) {
  switch (dtype) {
#define C128__WIDEN_CASE(name, NAME, value, bytes, type) \
  case value:                                            \
    return c128__widen_##name(bits);
    C128_DTYPES(C128__WIDEN_CASE)
#undef C128__WIDEN_CASE
  }
  return 0.0f;
}
C128__FN uint32_t c128__narrow(int dtype, float f) {
  switch (dtype) {
#define C128__NARROW_CASE(name, NAME, value, bytes, type) \
  case value:                                             \
    return c128__narrow_##name(f);
    C128_DTYPES(C128__NARROW_CASE)
#undef C128__NARROW_CASE
  }
  return 0u;
}

/* IEEE maximum in which NaN wins (fmaxf drops it). */
C128__FN float c128__max_nan(float x, float lo) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float y;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(y) : "f"(x), "f"(lo));
  return y;
#else
  return x != x ? x : fmaxf(x, lo);
#endif
}

/* The library's exp(x) for x <= 0 (a score minus its maximum: every argument the kernels
   pass), within 1.05 ulp (checked against double over every float in [-88, 0]), from fma and
   exact operations only, so that the host runner and the GPU get the same bits. Branch-free.
   Results below 2^-126 may flush to 0; exp(-inf) = 0, exp(NaN) is a NaN. */
C128__FN C128__MAYBE_UNUSED float c128__exp_exact(float x) {
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

/* The kernels' exp: the exact one, or on the GPU in C128_MATH_FAST the exp2 unit on x * log2(e)
   (ex2.approx.ftz: within 2 ulp, flushes results below 2^-126; -inf gives 0, NaN a NaN). */
C128__FN float c128__exp(float x) {
#if defined(__CUDA_ARCH__) && C128_MATH == C128_MATH_FAST
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(c128__mul(x, 1.44269504088896341f)));
  return y;
#else
  return c128__exp_exact(x);
#endif
}

/* >>memory -------------------------------------------------------------------------------- */
typedef struct c128__checker c128__checker; /* host runner only (>>runner) */

/* An instance's compile-time identity; constant-folded wherever a kernel is stamped. Each
   instance has kernels for today's state layout and pooled rows (layout = entry = 0), and the
   same program for any state layout and output index (layout = 1, DESIGN 5.9) and for cache
   entries (entry = 1, DESIGN 11), and today's decode for one request a block (single = 1,
   DESIGN 6.2): a launch picks the one its arguments need. */
typedef struct c128__trait {
  int head_dim;
  int buf, in, out; /* c128_dtype of state, input, output */
  int layout;       /* reads c128__params' layout fields; 0: they are the default and go unread */
  int entry;        /* writes cache entries: the last of a window's splits to arrive */
  int single;       /* decode, one request a block (group 1): no list, its window in registers */
  int cluster;      /* cache entries: a group's blocks (one a split) form a cluster (DESIGN 11.3) */
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
  int32_t group; /* jobs per block (decode, compress) */
  int32_t pdl;   /* args.pdl: 0, C128_PDL_ON or C128_PDL_PLANS_READY (validated) */
  c128__checker *checker;
  const struct c128__more *more; /* kernels of a layout or with cache entries (c128__trait) */
} c128__params;

/* What only kernels of any layout or with cache entries read (c128__trait.layout, .entry). It is
   their second kernel parameter, so that c128__params stays within the 128 bytes up to which nvcc
   keeps a kernel's parameters in registers: past them, every kernel's machine code changed. */
typedef struct c128__more {
  /* any layout: the state layout and the output index */
  void *score;                        /* the plane of the scores: `state`, or the score plane */
  const int32_t *table, *score_table; /* block tables (NULL: plans name physical rows) */
  int64_t table_rows, table_stride;
  int32_t block_shift, row_shift; /* log2 of the block rows; logical row = table row << row_shift | position */
  int32_t split, biased;          /* two planes; scores stored with ape added */
  const int64_t *out_index;
  /* cache entries */
  int32_t entry_kind, entry_shift; /* c128_output_kind; log2 of the entries per page */
  const float *gamma, *rope;
  float eps;
  char *cache;
  int64_t cache_entries, rope_positions, page_bytes;
  uint32_t *arrivals;               /* the workspace: a counter a job, */
  float *pooled;                    /* then its window's pooled vector (bf16-rounded), [jobs][head_dim] */
  int32_t whole;                    /* blocks take whole windows, every split of `group` jobs (DESIGN 11.3) */
  const int64_t *slots, *positions; /* write launches: c128_prefill_args.write_slots, write_positions */
} c128__more;

static C128__MAYBE_UNUSED void c128__track(c128__checker *checker, const void *addr, int count, int elem_size,
                                           int is_write, const uint32_t *bits);

/* Two consecutive elements at base[i] (i even) as raw storage bits, as one vector access moves
   them: 4-byte elements one a word, narrower ones packed into `lo` (element 0 in the low bits).
   f32 rows are read once (`stream`: evict first), so that ape, which every window re-reads,
   stays in L1. bf16 rows go without the hint: with it, bf16-state boundary decode at B >= 128
   ran 6-9 % faster but B <= 8 2-6 % and steady-state steps up to 2 % slower (DESIGN 6.1). Every
   access of the host runner is shown to the race checker. */
typedef struct c128__raw2 {
  uint32_t lo, hi;
} c128__raw2;

C128__FN uint32_t c128__raw_elem(int dtype, c128__raw2 v, int k) {
  const int bits = 8 * c128__dtype_bytes(dtype);
  if (bits == 32) return k ? v.hi : v.lo;
  return (v.lo >> (k * bits)) & ((1u << bits) - 1u);
}
C128__FN c128__raw2 c128__raw_pack(int dtype, uint32_t e0, uint32_t e1) {
  const int bits = 8 * c128__dtype_bytes(dtype);
  c128__raw2 v = {e0, e1};
  if (bits < 32) v.lo = e0 | (e1 << bits), v.hi = 0u;
  return v;
}

C128__FN c128__raw2 c128__load_raw2(const c128__params *p, const void *base, int64_t i, int dtype, int stream) {
  c128__raw2 v = {0u, 0u};
  const int bytes = c128__dtype_bytes(dtype);
  const char *a = (const char *)base + i * bytes;
#ifdef __CUDA_ARCH__
  (void)p;
  if (bytes == 4) {
    const uint2 u = stream ? __ldcs((const uint2 *)a) : *(const uint2 *)a;
    v.lo = u.x, v.hi = u.y;
  } else if (bytes == 2) {
    v.lo = *(const uint32_t *)a;
  } else {
    v.lo = *(const uint16_t *)a;
  }
#else
  (void)stream;
  if (bytes == 4) memcpy(&v.lo, a, 4), memcpy(&v.hi, a + 4, 4);
  else memcpy(&v.lo, a, (size_t)(2 * bytes)); /* little-endian: element 0 in the low bits */
  if (p->checker) {
    const uint32_t bits[2] = {c128__raw_elem(dtype, v, 0), c128__raw_elem(dtype, v, 1)};
    c128__track(p->checker, a, 2, bytes, 0, bits);
  }
#endif
  return v;
}

C128__FN float2 c128__widen2(int dtype, c128__raw2 v) {
  return make_float2(c128__widen(dtype, c128__raw_elem(dtype, v, 0)), c128__widen(dtype, c128__raw_elem(dtype, v, 1)));
}

C128__FN float2 c128__load2(const c128__params *p, const void *base, int64_t i, int dtype, int stream) {
  return c128__widen2(dtype, c128__load_raw2(p, base, i, dtype, stream));
}

/* Store two elements (one vector access) or one at base[i]. */
C128__FN void c128__store_raw2(const c128__params *p, void *base, int64_t i, int dtype, c128__raw2 v) {
  const int bytes = c128__dtype_bytes(dtype);
  char *a = (char *)base + i * bytes;
#ifdef __CUDA_ARCH__
  (void)p;
  if (bytes == 4) *(uint2 *)a = make_uint2(v.lo, v.hi);
  else if (bytes == 2) *(uint32_t *)a = v.lo;
  else *(uint16_t *)a = (uint16_t)v.lo;
#else
  if (p->checker) {
    const uint32_t bits[2] = {c128__raw_elem(dtype, v, 0), c128__raw_elem(dtype, v, 1)};
    c128__track(p->checker, a, 2, bytes, 1, bits);
  }
  if (bytes == 4) memcpy(a, &v.lo, 4), memcpy(a + 4, &v.hi, 4);
  else memcpy(a, &v.lo, (size_t)(2 * bytes));
#endif
}

/* Store one f32 value into base[i], narrowed to the dtype. */
C128__FN void c128__store1(const c128__params *p, void *base, int64_t i, int dtype, float value) {
  const uint32_t bits = c128__narrow(dtype, value);
  const int bytes = c128__dtype_bytes(dtype);
  char *a = (char *)base + i * bytes;
#ifdef __CUDA_ARCH__
  (void)p;
  if (bytes == 4) *(uint32_t *)a = bits;
  else if (bytes == 2) *(uint16_t *)a = (uint16_t)bits;
  else *(uint8_t *)a = (uint8_t)bits;
#else
  if (p->checker) c128__track(p->checker, a, 1, bytes, 1, &bits);
  memcpy(a, &bits, (size_t)bytes); /* little-endian */
#endif
}

/* Two elements of an input row on their way to a state row: the raw bits travel untouched when
   the dtypes agree, else they are widened and narrowed. */
C128__FN c128__raw2 c128__fetch2(const c128__params *p, c128__trait t, int64_t in_elem) {
  return c128__load_raw2(p, p->input, in_elem, t.in, t.buf != t.in);
}

C128__FN void c128__put2(const c128__params *p, c128__trait t, c128__raw2 v, void *plane, int64_t st_elem) {
  if (t.buf != t.in)
    v = c128__raw_pack(t.buf, c128__narrow(t.buf, c128__widen(t.in, c128__raw_elem(t.in, v, 0))),
                       c128__narrow(t.buf, c128__widen(t.in, c128__raw_elem(t.in, v, 1))));
  c128__store_raw2(p, plane, st_elem, t.buf, v);
}

/* A score pair stored with ape's pair for its window row added (a biased state, DESIGN 5.9): the
   sum each window forms from an input row, rounded once to the state's dtype. */
C128__FN void c128__put2_biased(const c128__params *p, c128__trait t, c128__raw2 v, void *plane, int64_t st_elem,
                                float2 ape) {
  const float x = c128__add(c128__widen(t.in, c128__raw_elem(t.in, v, 0)), ape.x);
  const float y = c128__add(c128__widen(t.in, c128__raw_elem(t.in, v, 1)), ape.y);
  c128__store_raw2(p, plane, st_elem, t.buf, c128__raw_pack(t.buf, c128__narrow(t.buf, x), c128__narrow(t.buf, y)));
}

/* The state's two halves, kv (half 0) and score (half 1): one plane of kv | score rows, or two
   planes of one half each (c128_state_layout.score_plane). Element `ch` of a half of state row
   `row` is at c128__plane_elem in c128__plane. */
C128__FN void *c128__plane(const c128__params *p, c128__trait t, int half) {
  return t.layout && half ? p->more->score : p->state;
}
C128__FN int64_t c128__plane_row_elems(const c128__params *p, c128__trait t) {
  return t.layout && p->more->split ? t.head_dim : C128_ROW_ELEMS(t.head_dim);
}
C128__FN int64_t c128__plane_elem(const c128__params *p, c128__trait t, int half, int64_t row, int64_t ch) {
  if (t.layout && p->more->split) return row * t.head_dim + ch;
  return row * C128_ROW_ELEMS(t.head_dim) + half * C128_SCORE_OFFSET(t.head_dim) + ch;
}

/* >>rules: which plans run (DESIGN 6.5) ---------------------------------------------------- */
/* Physical page of a logical one, or -1 when the logical page is outside the logical range
   (checked before translation: a bad logical page could otherwise land on a good one) or its
   translation is outside this rank's pages. Pages come from int32 plan fields; the owner
   arithmetic stays in 32 bits without overflow (a 64-bit division is a call, whose saved
   registers the window loop cannot afford), the page offset in 64. */
C128__FN int64_t c128__physical_page(const c128__params *p, int32_t logical) {
  if (p->size <= 1) return logical >= 0 && logical < p->state_pages ? logical : -1;
  if (logical < 0 || (int64_t)logical >= (int64_t)p->size * p->pages_per_rank) return -1;
  const int32_t owner = logical % p->size;
  const int32_t shard = owner >= p->rank ? owner - p->rank : owner + (p->size - p->rank);
  const int64_t physical = (int64_t)shard * p->pages_per_rank + logical / p->size;
  return physical < p->state_pages ? physical : -1;
}
C128__FN int c128__owned(const c128__params *p, int32_t logical_page) {
  return p->size <= 1 || logical_page % p->size == p->rank;
}

/* Plans are read-only for a launch: the non-coherent path lets their loads move ahead of the
   kernel's stores. `guess` reads through L2 only, for the prologue's prefetch (>>kernels). */
C128__FN void c128__read_plan(const void *src, void *dst, int bytes, int guess) {
#ifdef __CUDA_ARCH__
  if (bytes == 16) *(uint4 *)dst = guess ? __ldcg((const uint4 *)src) : __ldg((const uint4 *)src);
  else *(uint2 *)dst = guess ? __ldcg((const uint2 *)src) : __ldg((const uint2 *)src);
#else
  (void)guess;
  memcpy(dst, src, (size_t)bytes);
#endif
}

/* A block-table entry or an output index: read-only for a launch, like the plans. */
C128__FN int32_t c128__read_i32(const int32_t *at) {
#ifdef __CUDA_ARCH__
  return __ldg(at);
#else
  return *at;
#endif
}
C128__FN int64_t c128__read_i64(const int64_t *at) {
#ifdef __CUDA_ARCH__
  return __ldg((const long long *)at);
#else
  return *at;
#endif
}

/* Where a state row is: its row in the kv plane and in the score plane (the same row unless the
   scores have a plane and a table of their own; -1: not in the state), and its window row, the
   position mod 128 (the ape row of a biased score). */
typedef struct c128__dest {
  int64_t kv, score;
  int32_t slot;
} c128__dest;

/* Kernels of any layout (DESIGN 5.9): the physical row of a logical one in the plane that
   `table` maps, or -1. Without a table logical rows are physical, or on a sharded state (today's
   layout with an output index: sharding comes with no other layout) rows of logical pages that
   c128__physical_page translates, as today's kernels do; with one, logical row = table row <<
   row_shift | position, and the row is table[table row][position / B] * B + position % B. */
C128__FN int64_t c128__table_row(const c128__params *p, const int32_t *table, int64_t logical) {
  if (logical < 0) return -1;
  if (!table && p->size > 1) { /* logical < 2^31 * 128: plans name pages in int32 */
    const int64_t page = c128__physical_page(p, (int32_t)(logical >> C128__LOG2_WINDOW));
    return page < 0 ? -1 : page * C128_WINDOW + (logical & (C128_WINDOW - 1));
  }
  if (!table) return logical < p->state_pages << p->more->block_shift ? logical : -1;
  const int64_t row = logical >> p->more->row_shift, at = logical & (((int64_t)1 << p->more->row_shift) - 1);
  const int64_t column = at >> p->more->block_shift;
  if (row >= p->more->table_rows || column >= p->more->table_stride) return -1;
  const int32_t block = c128__read_i32(table + row * p->more->table_stride + column);
  if (block < 0 || block >= p->state_pages) return -1;
  return ((int64_t)block << p->more->block_shift) + (at & (((int64_t)1 << p->more->block_shift) - 1));
}

/* The state row a plan names by its logical row, in both planes (kernels of any layout). */
C128__FN c128__dest c128__rows_of(const c128__params *p, int64_t logical) {
  c128__dest d;
  d.kv = c128__table_row(p, p->more->table, logical);
  d.score = p->more->score_table == p->more->table ? d.kv : c128__table_row(p, p->more->score_table, logical);
  d.slot = (int32_t)(logical & (C128_WINDOW - 1));
  return d;
}

/* Whether rows 0 .. count - 1 (count >= 1) of the window at logical row row0 are in the state,
   in both planes: without a table its first and last row, with one the blocks they lie in. A
   window is 128-aligned, so it lies in one table row, where its blocks' entries are consecutive
   (it starts a block of B <= 128 rows, or lies within one of 256), in the score table too. The
   entries are read before any is checked, and no missing one ends the loop: one round trip,
   where a look-up a block that stopped at the first missing one made 16 for blocks of 8 (B = 1
   decode took 9.1 us against today's layout's 4.4) and the score table's came after the kv's. */
C128__FN int c128__rows_present(const c128__params *p, int64_t row0, int count) {
  if (!p->more->table) return c128__table_row(p, NULL, row0) >= 0 && c128__table_row(p, NULL, row0 + count - 1) >= 0;
  const int64_t row = row0 >> p->more->row_shift, at = row0 & (((int64_t)1 << p->more->row_shift) - 1);
  const int64_t column = at >> p->more->block_shift, blocks = ((count - 1) >> p->more->block_shift) + 1;
  if (row0 < 0 || row >= p->more->table_rows || column + blocks > p->more->table_stride) return 0;
  const int64_t first = row * p->more->table_stride + column;
  const int32_t *kv = p->more->table + first, *score = p->more->score_table + first;
  const int two = p->more->score_table != p->more->table;
  int present = 1;
  C128__UNROLL
  for (int i = 0; i < C128_WINDOW / C128_ROWS_PER_WARP; ++i) { /* blocks hold 8 rows or more */
    if (i < blocks) {
      const int32_t k = c128__read_i32(kv + i), s = two ? c128__read_i32(score + i) : k;
      present &= (k >= 0) & (k < p->state_pages) & (s >= 0) & (s < p->state_pages);
    }
  }
  return present;
}

/* Kernels of any layout and cache-entry kernels: where the window that ends at input row r goes,
   output_index[r] (or k, the plan's own row, without an index), or -1 outside the output rows
   (or the cache's entries). */
C128__FN int64_t c128__target(const c128__params *p, c128__trait t, int64_t r, int64_t k) {
  const int64_t at = p->more->out_index ? c128__read_i64(p->more->out_index + r) : k;
  return at >= 0 && at < (t.entry ? p->more->cache_entries : p->output_rows) ? at : -1;
}
C128__FN int c128__indexed(c128__trait t) { return t.layout || t.entry; }

/* Why a plan does not run: X(reason, text). The kernels skip a plan for any reason but RUN; the
   plan checker reports the first plan whose reason is neither RUN nor PADDING, with this text. */
#define C128__PLAN_REASONS(X)                                                                       \
  X(C128__RUN, "runs")                                                                              \
  X(C128__PADDING, "padding row or invalid sentinel")                                               \
  X(C128__BAD_WRITE_PAGE, "write slot outside the state (negative write_loc or page out of range)") \
  X(C128__BAD_READ_PAGE, "read_page_1 outside the state")                                           \
  X(C128__BAD_INPUT_ROW, "input row outside [0, input_rows)")                                       \
  X(C128__BAD_WINDOW_START, "window's first input row lies before input row 0")                     \
  X(C128__BAD_OUTPUT_ROW, "output row (or cache entry) outside the output (or the cache)")          \
  X(C128__BAD_BUFFER_LEN, "buffer_len > 127")                                                       \
  X(C128__BAD_POSITION, "window position (seq_len - 128) outside the RoPE table")
enum c128__plan_reason {
#define C128__REASON_ENUM(name, text) name,
  C128__PLAN_REASONS(C128__REASON_ENUM)
#undef C128__REASON_ENUM
};

/* One window of one compress event, as a block sees it after its plan was checked. */
typedef struct c128__window {
  int64_t state_row0; /* state row of window row 0 (rows < buffer_len come from here); logical in
                         kernels of any layout, whose warps find their rows in c128__block_ext */
  int64_t input_row0; /* input row of window row 0 (rows >= buffer_len come from here) */
  int64_t out_row;    /* output row, or the cache entry */
  int32_t buffer_len;
  int32_t split;
} c128__window;

/* What a decode plan asks of a block. */
typedef struct c128__decode_job {
  c128__window win;
  c128__dest write_row; /* the state row of the new token */
  int32_t boundary, write, position;
} c128__decode_job;

/* Cache-entry kernels: the window's position (its first token) from the plan's seq_len, or -1
   outside the RoPE table. */
C128__FN int64_t c128__window_position(const c128__params *p, uint32_t seq_len) {
  const int64_t position = (int64_t)seq_len - C128_WINDOW;
  return position >= 0 && position < p->more->rope_positions ? position : -1;
}

/* Decode plan b in split `split`: its job, or why it has nothing to do. */
C128__FN int c128__decode_prepare(const c128__params *p, c128__trait t, int64_t b, int split, int guess,
                                  c128__decode_job *job) {
  c128_decode_plan plan;
  c128__read_plan((const c128_decode_plan *)p->plans + b, &plan, sizeof plan, guess);
  if (plan.seq_len == 0 || plan.write_loc < 0) return C128__PADDING;
  if (b >= p->input_rows) return C128__BAD_INPUT_ROW;
  if (t.layout) {
    job->write_row = c128__rows_of(p, plan.write_loc);
    if (job->write_row.kv < 0 || job->write_row.score < 0) return C128__BAD_WRITE_PAGE;
    job->write = c128__owned(p, plan.write_loc / C128_WINDOW); /* a sharded state's other ranks' slots */
  } else {
    const int32_t write_page = plan.write_loc / C128_WINDOW;
    const int64_t write_phys = c128__physical_page(p, write_page);
    if (write_phys < 0) return C128__BAD_WRITE_PAGE;
    job->write_row.kv = job->write_row.score = write_phys * C128_WINDOW + plan.write_loc % C128_WINDOW;
    job->write_row.slot = plan.write_loc % C128_WINDOW;
    job->write = c128__owned(p, write_page);
  }
  job->boundary = plan.write_loc % C128_WINDOW == C128__LAST_ROW;
  job->win.split = split;
  if (!job->boundary) return C128__RUN;
  /* Rows 0..126 from the read page, row 127 straight from the input (DESIGN 6.2). */
  if (t.layout) {
    job->win.state_row0 = (int64_t)plan.read_page_1 * C128_WINDOW;
    if (plan.read_page_1 < 0 || (!guess && !c128__rows_present(p, job->win.state_row0, C128__LAST_ROW)))
      return C128__BAD_READ_PAGE; /* a guess (the prologue's prefetch) does without the look-ups */
  } else {
    const int64_t read_phys = c128__physical_page(p, plan.read_page_1);
    if (read_phys < 0) return C128__BAD_READ_PAGE;
    job->win.state_row0 = read_phys * C128_WINDOW;
  }
  if (c128__indexed(t)) {
    if ((job->win.out_row = c128__target(p, t, b, b)) < 0) return C128__BAD_OUTPUT_ROW;
  } else {
    if (b >= p->output_rows) return C128__BAD_OUTPUT_ROW;
    job->win.out_row = b;
  }
  if (t.entry && (job->position = (int32_t)c128__window_position(p, plan.seq_len)) < 0) return C128__BAD_POSITION;
  job->win.input_row0 = b - C128__LAST_ROW;
  job->win.buffer_len = C128__LAST_ROW;
  return C128__RUN;
}

/* Compress plan k in split `split`: its window (and in cache-entry kernels its position), or why
   it does not run. */
C128__FN int c128__compress_prepare(const c128__params *p, c128__trait t, int64_t k, int split, int guess,
                                    c128__window *w, int32_t *position) {
  c128_compress_plan plan;
  c128__read_plan((const c128_compress_plan *)p->plans + k, &plan, sizeof plan, guess);
  if (plan.seq_len == C128_INVALID_ID) return C128__PADDING;
  if (plan.buffer_len > C128__LAST_ROW) return C128__BAD_BUFFER_LEN;
  if (!c128__indexed(t) && k >= p->output_rows) return C128__BAD_OUTPUT_ROW;
  if (plan.ragged_id >= p->input_rows) return C128__BAD_INPUT_ROW;
  if ((int64_t)plan.ragged_id - C128__LAST_ROW + plan.buffer_len < 0) return C128__BAD_WINDOW_START;
  int64_t read_page = 0; /* logical in kernels of any layout: the warps translate its rows */
  if (t.layout) {
    read_page = plan.read_page_1;
    if (plan.buffer_len > 0 &&
        (plan.read_page_1 < 0 || (!guess && !c128__rows_present(p, read_page * C128_WINDOW, plan.buffer_len))))
      return C128__BAD_READ_PAGE;
  } else if (plan.buffer_len > 0 && (read_page = c128__physical_page(p, plan.read_page_1)) < 0) {
    return C128__BAD_READ_PAGE;
  }
  w->out_row = k;
  if (c128__indexed(t) && (w->out_row = c128__target(p, t, plan.ragged_id, k)) < 0) return C128__BAD_OUTPUT_ROW;
  if (t.entry && (*position = (int32_t)c128__window_position(p, plan.seq_len)) < 0) return C128__BAD_POSITION;
  w->state_row0 = read_page * C128_WINDOW;
  w->input_row0 = (int64_t)plan.ragged_id - C128__LAST_ROW;
  w->buffer_len = plan.buffer_len;
  w->split = split;
  return C128__RUN;
}

/* Write plan -> (input row, physical state row), or why it does not run. A slot another rank owns
   runs as a no-op: dst_row = -1. */
C128__FN int c128__write_prepare(const c128__params *p, int64_t index, int guess, int64_t *src_row, int64_t *dst_row) {
  c128_write_plan plan;
  c128__read_plan((const c128_write_plan *)p->plans + index, &plan, sizeof plan, guess);
  if (plan.ragged_id == C128_INVALID_ID) return C128__PADDING;
  if (plan.ragged_id >= p->input_rows) return C128__BAD_INPUT_ROW;
  const int32_t page = plan.write_loc < 0 ? -1 : plan.write_loc / C128_WINDOW;
  const int64_t phys = c128__physical_page(p, page);
  if (phys < 0) return C128__BAD_WRITE_PAGE;
  *src_row = plan.ragged_id;
  *dst_row = c128__owned(p, page) ? phys * C128_WINDOW + plan.write_loc % C128_WINDOW : -1;
  return C128__RUN;
}

/* The same in kernels of any layout, whose plans name logical rows (c128__rows_of); and the one
   the kernels call, by their trait. The two stay apart: passing the plain one's row through a
   c128__dest changed the write kernel's machine code. */
C128__FN int c128__write_prepare_rows(const c128__params *p, int64_t index, int guess, int64_t *src_row,
                                      c128__dest *dst) {
  if (p->more->slots) { /* an engine's per-token arrays: input row `index` to a physical row */
    if (index >= p->input_rows) return C128__BAD_INPUT_ROW;
    const int64_t slot = c128__read_i64(p->more->slots + index);
    if (slot < 0) return C128__PADDING;
    if (slot >= p->state_pages << p->more->block_shift) return C128__BAD_WRITE_PAGE;
    *src_row = index;
    dst->kv = dst->score = slot;
    dst->slot = (int32_t)(c128__read_i64(p->more->positions + index) & (C128_WINDOW - 1));
    return C128__RUN;
  }
  c128_write_plan plan;
  c128__read_plan((const c128_write_plan *)p->plans + index, &plan, sizeof plan, guess);
  if (plan.ragged_id == C128_INVALID_ID) return C128__PADDING;
  if (plan.ragged_id >= p->input_rows) return C128__BAD_INPUT_ROW;
  *src_row = plan.ragged_id;
  *dst = c128__rows_of(p, plan.write_loc);
  return dst->kv < 0 || dst->score < 0 ? C128__BAD_WRITE_PAGE : C128__RUN;
}
C128__FN int c128__write_target(const c128__params *p, c128__trait t, int64_t index, int guess, int64_t *src_row,
                                c128__dest *dst) {
  if (t.layout) return c128__write_prepare_rows(p, index, guess, src_row, dst);
  return c128__write_prepare(p, index, guess, src_row, &dst->kv);
}

/* >>compress: one window, one 64-channel split (DESIGN 6.1) -------------------------------- */
/* The legacy epilogue pads the lane axis to dodge 16-way bank conflicts; the two-warp one reads
   32 consecutive floats per source warp and needs no padding. */
#if C128_EPILOGUE == C128_EPILOGUE_LEGACY
#define C128__SMEM_LANES (C128_WARP_THREADS + 1)
#else
#define C128__SMEM_LANES C128_WARP_THREADS
#endif
#define C128__SMEM_FLOATS_PER_WARP (C128_TILE_ELEMS * C128__SMEM_LANES)
#define C128__HALF_WARP (C128_WARP_THREADS / 2)
C128__STATIC_ASSERT(C128_NUM_WARPS == C128__HALF_WARP, "the legacy fold gives each of a half-warp's lanes one warp");

/* Per-warp partial softmax triples, one 2-float vector per lane (= 2 channels). */
typedef struct c128__smem {
  float2 max[C128_NUM_WARPS][C128__SMEM_LANES];
  float2 sum[C128_NUM_WARPS][C128__SMEM_LANES];
  float2 acc[C128_NUM_WARPS][C128__SMEM_LANES];
} c128__smem;

/* A thread's share of a window: kv and score of its 8 rows x 2 channels, as loaded. */
typedef struct c128__rows {
  c128__raw2 kv[C128_ROWS_PER_WARP], score[C128_ROWS_PER_WARP];
} c128__rows;

/* What a block of a layout or cache-entry kernel keeps beside its list (DESIGN 5.9, 11): per
   listed window, each warp's first state row in each plane (its rows lie in one block: blocks
   hold a multiple of 8 rows); in cache-entry kernels the window's cache entry and position (its
   c128__window.out_row is then the job, its row of the workspace), whether this block was the
   last of its splits to arrive; for the last two folded windows the block's own 64 channels,
   and for the last two staged ones the whole pooled vector (with whole windows the last two
   windows' rows); in a cluster's block every listed window's row, as bf16 bits (its values are
   bf16, and floats would pass the 48 KiB of static shared memory a block may have). */
#define C128__ENTRY_FLOATS (C128_MAX_ENTRY_SPLITS * C128_TILE_DIM)
typedef struct c128__block_ext {
  int64_t kv_row[C128__MAX_GROUP][C128_NUM_WARPS], score_row[C128__MAX_GROUP][C128_NUM_WARPS];
  int64_t entry[C128__MAX_GROUP];
  int32_t position[C128__MAX_GROUP], last[C128__MAX_GROUP];
  float mine[2][C128_TILE_DIM];
  float y[2][C128__ENTRY_FLOATS];
  uint16_t rows[C128_MAX_ENTRY_SPLITS - 1][C128__ENTRY_FLOATS]; /* a cluster's block: a window's, bf16 bits */
} c128__block_ext;

/* Warp w loads window rows 8w .. 8w+7, lane l channels 2l, 2l+1 of the split. Row j < buffer_len
   comes from the state, the others from the input. A warp whose rows all come from one tensor
   (every warp but at most one) addresses them from one base, and every load is issued before
   any is used. */
C128__FN void c128__load_rows(const c128__params *p, c128__trait t, const c128__window *w, c128__dest from, int tid,
                              int64_t stride, c128__rows *r) {
  const int warp = tid / C128_WARP_THREADS, lane = tid % C128_WARP_THREADS;
  const int first = warp * C128_ROWS_PER_WARP;
  const int64_t row = C128_ROW_ELEMS(t.head_dim), score = C128_SCORE_OFFSET(t.head_dim);
  const int64_t ch = (int64_t)w->split * C128_TILE_DIM + C128_TILE_ELEMS * lane;
  const int64_t from_input = (w->input_row0 + first) * row + ch;
  /* `from`: the warp's first state row in each plane, whose rows are `stride` elements apart */
  const int64_t kv_state = c128__plane_elem(p, t, 0, from.kv, ch),
                score_state = c128__plane_elem(p, t, 1, from.score, ch);
  const void *kv_plane = c128__plane(p, t, 0), *score_plane = c128__plane(p, t, 1);
  if (first + C128_ROWS_PER_WARP <= w->buffer_len) {
    C128__UNROLL
    for (int k = 0; k < C128_ROWS_PER_WARP; ++k) {
      r->kv[k] = c128__load_raw2(p, kv_plane, kv_state + k * stride, t.buf, 1);
      r->score[k] = c128__load_raw2(p, score_plane, score_state + k * stride, t.buf, 1);
    }
  } else if (first >= w->buffer_len) {
    C128__UNROLL
    for (int k = 0; k < C128_ROWS_PER_WARP; ++k) {
      r->kv[k] = c128__load_raw2(p, p->input, from_input + k * row, t.in, 1);
      r->score[k] = c128__load_raw2(p, p->input, from_input + k * row + score, t.in, 1);
    }
  } else if (t.buf == t.in) { /* the one warp whose rows straddle buffer_len: one dtype */
    C128__UNROLL
    for (int k = 0; k < C128_ROWS_PER_WARP; ++k) {
      const int state_row = first + k < w->buffer_len;
      if (!t.layout) { /* one plane: the score is `score` elements past the kv in either tensor */
        const void *base = state_row ? (const void *)p->state : p->input;
        const int64_t at = state_row ? kv_state + k * row : from_input + k * row;
        r->kv[k] = c128__load_raw2(p, base, at, t.buf, 1);
        r->score[k] = c128__load_raw2(p, base, at + score, t.buf, 1);
      } else if (state_row) {
        r->kv[k] = c128__load_raw2(p, kv_plane, kv_state + k * stride, t.buf, 1);
        r->score[k] = c128__load_raw2(p, score_plane, score_state + k * stride, t.buf, 1);
      } else {
        r->kv[k] = c128__load_raw2(p, p->input, from_input + k * row, t.in, 1);
        r->score[k] = c128__load_raw2(p, p->input, from_input + k * row + score, t.in, 1);
      }
    }
  } else { /* the straddling warp of a mixed instance: rows widened to f32 bits as they arrive */
    C128__UNROLL
    for (int k = 0; k < C128_ROWS_PER_WARP; ++k) {
      float2 kv, sc;
      if (first + k < w->buffer_len) {
        kv = c128__load2(p, kv_plane, kv_state + k * stride, t.buf, 1);
        sc = c128__load2(p, score_plane, score_state + k * stride, t.buf, 1);
      } else {
        kv = c128__load2(p, p->input, from_input + k * row, t.in, 1);
        sc = c128__load2(p, p->input, from_input + k * row + score, t.in, 1);
      }
      r->kv[k] = c128__raw_pack(C128_F32, c128__bits(kv.x), c128__bits(kv.y));
      r->score[k] = c128__raw_pack(C128_F32, c128__bits(sc.x), c128__bits(sc.y));
    }
  }
}

/* The window's rows for this thread. State rows are a row of the plane apart, a compile-time
   constant in each call below, so that every load is one base and an immediate offset (a run-time
   stride gave each load a register pair of its own, which spilled). */
C128__FN void c128__load_window(const c128__params *p, c128__trait t, const c128__window *w, c128__dest from, int tid,
                                c128__rows *r) {
  if (t.layout && p->more->split) c128__load_rows(p, t, w, from, tid, t.head_dim, r);
  else c128__load_rows(p, t, w, from, tid, C128_ROW_ELEMS(t.head_dim), r);
}

/* The raw rows widened to f32 by the dtype of the tensor they came from: one per warp (the
   straddling warp of a mixed instance holds f32 bits already). */
C128__FN void c128__widen_rows(c128__trait t, const c128__window *w, int first, const c128__rows *r, float2 *kv,
                               float2 *score) {
  const int straddles = first < w->buffer_len && first + C128_ROWS_PER_WARP > w->buffer_len;
  const int dtype = t.buf == t.in ? t.buf : straddles ? C128_F32 : first < w->buffer_len ? t.buf : t.in;
  C128__UNROLL
  for (int k = 0; k < C128_ROWS_PER_WARP; ++k)
    kv[k] = c128__widen2(dtype, r->kv[k]), score[k] = c128__widen2(dtype, r->score[k]);
}

/* The loaded rows -> the thread's partial (max, sum of exp, exp-weighted kv) per channel, rows
   ascending, into shared memory. */
C128__FN void c128__partials(const c128__params *p, c128__trait t, const c128__window *w, int tid, const c128__rows *r,
                             c128__smem *sm) {
  const int warp = tid / C128_WARP_THREADS, lane = tid % C128_WARP_THREADS;
  const int first = warp * C128_ROWS_PER_WARP;
  const int64_t ch = (int64_t)w->split * C128_TILE_DIM + C128_TILE_ELEMS * lane;
  float2 kv[C128_ROWS_PER_WARP], s[C128_ROWS_PER_WARP];
  c128__widen_rows(t, w, first, r, kv, s);
  float2 m = make_float2(-INFINITY, -INFINITY);
  C128__UNROLL
  for (int k = 0; k < C128_ROWS_PER_WARP; ++k) {
    /* a biased state's rows hold score + ape already (DESIGN 5.9) */
    if (!(t.layout && p->more->biased && first + k < w->buffer_len)) {
      const float2 ape = c128__load2(p, p->ape, (int64_t)(first + k) * t.head_dim + ch, C128_F32, 0);
      s[k] = make_float2(c128__add(s[k].x, ape.x), c128__add(s[k].y, ape.y));
    }
    m.x = fmaxf(m.x, s[k].x);
    m.y = fmaxf(m.y, s[k].y);
  }
  /* A warp whose 8 scores are all -inf contributes nothing, not NaN. */
  const float2 shift = make_float2(m.x == -INFINITY ? 0.0f : m.x, m.y == -INFINITY ? 0.0f : m.y);
  float2 sum = make_float2(0.0f, 0.0f), acc = make_float2(0.0f, 0.0f);
  C128__UNROLL
  for (int k = 0; k < C128_ROWS_PER_WARP; ++k) {
    const float ex = c128__exp(c128__sub(s[k].x, shift.x));
    const float ey = c128__exp(c128__sub(s[k].y, shift.y));
    sum.x = c128__add(sum.x, ex);
    sum.y = c128__add(sum.y, ey);
    acc.x = fmaf(kv[k].x, ex, acc.x);
    acc.y = fmaf(kv[k].y, ey, acc.y);
  }
  sm->max[warp][lane] = m;
  sm->sum[warp][lane] = sum;
  sm->acc[warp][lane] = acc;
}

/* Partial of source warp w for channel c (0..63) of the split. */
// clang-format off
#define C128__PARTIAL(sm, field, w, c) ((&(sm)->field[0][0].x)[(w) * C128__SMEM_FLOATS_PER_WARP + (c)])
// clang-format on

/* Whether a window's splits meet in a cluster (DESIGN 11.3): cache entries in a one-request block
   or a cluster's block. */
C128__FN int c128__in_cluster(c128__trait t) { return t.entry && (t.single || t.cluster); }

/* `v` into the 16 bits at `local`'s place in the shared memory of block `rank` of the block's
   cluster (sm_90 and newer: cache entries in clusters, whose window's splits are one cluster).
   The host runner keeps a cluster's blocks' c128__block_ext in one array, this block's (`me`)
   holding `local`. */
C128__FN void c128__cluster_put(uint16_t *local, int me, int rank, uint16_t v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t remote;
  (void)me;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(remote)
               : "r"((uint32_t)__cvta_generic_to_shared(local)), "r"(rank));
  asm volatile("st.shared::cluster.u16 [%0], %1;" ::"r"(remote), "h"(v) : "memory");
#elif defined(__CUDA_ARCH__)
  (void)local, (void)me, (void)rank, (void)v; /* never launched: c128__cluster_wave */
#else
  *(uint16_t *)((char *)local + (ptrdiff_t)(rank - me) * (ptrdiff_t)sizeof(c128__block_ext)) = v;
#endif
}

/* A folded value: into the output row, or (cache-entry kernels) rounded to bf16, the reference's
   first step, into the block's own channels in shared memory (`folded`: floats, which
   c128__arrive copies to the workspace, or a cluster's block's bf16 row of the window, which it
   also puts into the row of each other block of its cluster, at the same place). `lanes` threads
   hold `v` (the legacy fold's half-warp, or one thread), lane `lane` of them puts it into every
   lanes-th peer from `lane` on: one store a peer. */
C128__FN void c128__store_output(const c128__params *p, c128__trait t, const c128__window *w, int c, float v,
                                 void *folded, int lane, int lanes) {
  if (c128__in_cluster(t)) {
    uint16_t *row = (uint16_t *)folded;
    row[c] = (uint16_t)c128__narrow_bf16(v);
    for (int rank = lane; rank < C128_NUM_SPLIT(t.head_dim); rank += lanes)
      if (rank != w->split) c128__cluster_put(row + c, w->split, rank, row[c]);
    return;
  }
  if (t.entry) {
    ((float *)folded)[c] = c128__widen_bf16(c128__narrow_bf16(v));
    return;
  }
  c128__store1(p, p->output, w->out_row * t.head_dim + (int64_t)w->split * C128_TILE_DIM + c, t.out, v);
}

/* Two-warp epilogue: thread t < 64 folds the 16 partials of channel t in registers. */
C128__FN void c128__fold_two_warp(const c128__params *p, c128__trait t, const c128__window *w, int tid,
                                  const c128__smem *sm, void *mine) {
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
  c128__store_output(p, t, w, tid, c128__div(numer, denom), mine, 0, 1);
}

/* xor-butterfly over the 16 lanes of a half-warp. The device trades registers; the host runner,
   which runs one lane at a time, replays the same tree over all 16 lanes' inputs (`lanes`), so
   both produce the same bits. */
C128__FN float c128__butterfly16(float own, const float *lanes, int is_max, int lane) {
#ifdef __CUDA_ARCH__
  (void)lanes;
  (void)lane;
  C128__UNROLL
  for (int o = C128__HALF_WARP / 2; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(C128__ALL_LANES, own, o);
    own = is_max ? fmaxf(own, other) : c128__add(own, other);
  }
  return own;
#else
  (void)own;
  float v[C128__HALF_WARP], next[C128__HALF_WARP];
  memcpy(v, lanes, sizeof v);
  for (int o = C128__HALF_WARP / 2; o > 0; o >>= 1) {
    for (int i = 0; i < C128__HALF_WARP; ++i) next[i] = is_max ? fmaxf(v[i], v[i ^ o]) : c128__add(v[i], v[i ^ o]);
    memcpy(v, next, sizeof v);
  }
  return v[lane];
#endif
}

/* Legacy epilogue: all 512 threads in 2 passes; each half-warp owns one channel, its 16 lanes
   hold the 16 warps' partials; every lane stores the result. */
C128__FN C128__MAYBE_UNUSED void c128__fold_legacy(const c128__params *p, c128__trait t, const c128__window *w, int tid,
                                                   const c128__smem *sm, void *mine) {
  const int src = tid % C128__HALF_WARP, half = tid / C128__HALF_WARP;
  const int halves = C128_BLOCK_THREADS / C128__HALF_WARP;
  float lanes_m[C128__HALF_WARP], lanes_s[C128__HALF_WARP], lanes_p[C128__HALF_WARP]; /* host replay only */
  C128__UNROLL
  for (int pass = 0; pass < C128_TILE_DIM / halves; ++pass) {
    const int c = pass * halves + half;
    const float m = C128__PARTIAL(sm, max, src, c);
#ifndef __CUDA_ARCH__
    for (int i = 0; i < C128__HALF_WARP; ++i) lanes_m[i] = C128__PARTIAL(sm, max, i, c);
#endif
    const float big = c128__butterfly16(m, lanes_m, 1, src);
    const float shift = big == -INFINITY ? 0.0f : big;
    const float r = c128__exp(c128__sub(m, shift));
#ifndef __CUDA_ARCH__
    for (int i = 0; i < C128__HALF_WARP; ++i)
      lanes_s[i] = c128__mul(C128__PARTIAL(sm, sum, i, c), c128__exp(c128__sub(lanes_m[i], shift)));
#endif
    const float denom = c128__butterfly16(c128__mul(C128__PARTIAL(sm, sum, src, c), r), lanes_s, 0, src);
#ifndef __CUDA_ARCH__
    for (int i = 0; i < C128__HALF_WARP; ++i)
      lanes_p[i] = c128__mul(C128__PARTIAL(sm, acc, i, c), c128__div(c128__exp(c128__sub(lanes_m[i], shift)), denom));
#endif
    const float out =
        c128__butterfly16(c128__mul(C128__PARTIAL(sm, acc, src, c), c128__div(r, denom)), lanes_p, 0, src);
    c128__store_output(p, t, w, c, out, mine, src, C128__HALF_WARP);
  }
  (void)lanes_m;
  (void)lanes_s;
  (void)lanes_p;
}

C128__FN void c128__fold(const c128__params *p, c128__trait t, const c128__window *w, int tid, const c128__smem *sm,
                         void *mine) {
#if C128_EPILOGUE == C128_EPILOGUE_LEGACY
  c128__fold_legacy(p, t, w, tid, sm, mine);
#else
  c128__fold_two_warp(p, t, w, tid, sm, mine);
#endif
}

/* >>block: the block program of the decode and compress kernels (DESIGN 6.1-6.3) ------------- */
/* A block takes `group` consecutive jobs of one split (decode: requests, prefill: compress
   plans) and compresses their windows one after another, as a sequence of steps with one
   barrier between steps. Step 0 lists the windows (and in decode persists the new rows); step s
   >= 1 folds window s - 2 and forms the partials of window s - 1. Window i's partials go to
   buffer i % 2, so one barrier a step suffices: the threads that fold window i finish that fold
   before the next barrier, and only past it does anyone overwrite buffer i % 2. In homogeneous
   instances the loads of window s - 1 are issued before the fold of window s - 2, so the
   folding warps' loads are in flight while they fold. The GPU drivers (>>kernels) and the host
   runner (>>runner) run these same steps; the race checker's phase is the step index. */
typedef struct c128__block_shared {
  c128__smem fold[2];
  c128__window windows[C128__MAX_GROUP]; /* the group's compressing windows, in job order */
} c128__block_shared;

/* The block's jobs: first .. end - 1, of its split, or in a cache-entry launch of whole windows
   (c128__more.whole) of every split. A block's items are its jobs' splits in job order, one a
   job or (whole windows) every split of each: its list, windows, steps and decode rows count
   items. Plan indices fit int32 (checked at launch). */
typedef struct c128__jobs {
  int32_t first, end, split, whole;
} c128__jobs;

C128__FN c128__jobs c128__block_jobs(const c128__params *p, c128__trait t, int64_t block) {
  const int num_split = C128_NUM_SPLIT(t.head_dim);
  c128__jobs j;
  if (t.single) { /* the launch has a block per request and split */
    j.whole = 0, j.split = (int32_t)(block % num_split), j.first = (int32_t)(block / num_split);
    j.end = j.first + 1;
    return j;
  }
  j.whole = t.entry && p->more->whole;
  j.split = j.whole ? 0 : (int32_t)(block % num_split);
  j.first = (int32_t)((j.whole ? block : block / num_split) * p->group);
  j.end = (int32_t)(j.first + p->group < p->num_plans ? j.first + p->group : p->num_plans);
  return j;
}

/* Items a job: 1, or with whole windows its splits. */
C128__FN int c128__items_per_job(c128__trait t, const c128__jobs *j) {
  return j->whole ? C128_NUM_SPLIT(t.head_dim) : 1;
}

/* Job k's window, if it compresses in this launch (decode: the request runs and completes a
   window; prefill: the plan runs), its position (cache-entry kernels), and in decode the state
   row it persists its new token into (kv -1: none). */
C128__FN int c128__job_window(const c128__params *p, c128__trait t, int kind, const c128__jobs *j, int k, int guess,
                              c128__window *w, c128__dest *write_row, int32_t *position) {
  write_row->kv = -1;
  if (j->first + k >= j->end) return 0;
  if (kind == C128_PLAN_COMPRESS)
    return c128__compress_prepare(p, t, j->first + k, j->split, guess, w, position) == C128__RUN;
  c128__decode_job job;
#ifndef __CUDA_ARCH__
  job.position = 0; /* gcc -O2 cannot see that only a window with a position reaches it (nvcc can) */
#endif
  const int status = c128__decode_prepare(p, t, j->first + k, j->split, guess, &job);
  if (status == C128__RUN && job.write) *write_row = job.write_row;
  *w = job.win;
  if (t.entry) *position = job.position;
  return status == C128__RUN && job.boundary;
}

/* Kernels of any layout: warp `warp`'s first state row of listed window n in each plane, found
   once in step 0 (a table look-up) for every step that loads the window; 0 for a warp whose rows
   all come from the input (never read). The window's plan was checked, so the rows exist unless
   a table changed under the launch; row 0 then keeps every load inside the state. */
C128__FN void c128__resolve_rows(const c128__params *p, const c128__window *w, int warp, c128__block_ext *ext, int n) {
  const int first = warp * C128_ROWS_PER_WARP;
  c128__dest d = {0, 0, 0};
  if (first < w->buffer_len) d = c128__rows_of(p, w->state_row0 + first);
  ext->kv_row[n][warp] = d.kv < 0 ? 0 : d.kv;
  ext->score_row[n][warp] = d.score < 0 ? 0 : d.score;
}

/* Step 0's list. Bit k of the result: job k compresses. Lane k of every warp looks at job k and a
   ballot gathers the answers, so every warp knows the count without waiting for another; warp 0
   also lists the windows in shared memory (read after the barrier), with their positions in
   cache-entry kernels, and in kernels of any layout each warp resolves its own rows of every
   window; in cache-entry kernels a window's out_row becomes its job (the workspace row), and
   ext keeps the entry. listed[k] is job k's persisted row (decode; kv -1: none): on the GPU each lane holds
   its own job's (listed[0]), which the warp's writes take from that lane by shuffle; the host
   runner fills all 32 and the writes index them the same way. The host runner calls it once per
   block: one pass stands for every warp's identical ballot. A one-request block (t.single) lists
   nothing: every thread checks the one plan (a broadcast load) and keeps its window in `own`. */
C128__FN uint32_t c128__list_windows(const c128__params *p, c128__trait t, int kind, const c128__jobs *j, int tid,
                                     c128__block_shared *sh, c128__block_ext *ext, c128__dest *listed,
                                     c128__window *own) {
  int32_t position = 0;
  if (t.single) {
    const int runs = c128__job_window(p, t, kind, j, 0, 0, own, listed, &position);
    if (t.entry && runs && tid == 0) ext->entry[0] = own->out_row, ext->position[0] = position;
    return (uint32_t)runs;
  }
#ifdef __CUDA_ARCH__
  const int lane = tid % C128_WARP_THREADS;
  c128__window w;
  const int runs = lane < p->group && c128__job_window(p, t, kind, j, lane, 0, &w, listed, &position);
  const uint32_t mask = __ballot_sync(C128__ALL_LANES, runs);
  const int n = __popc(mask & ((1u << lane) - 1u));
  if (runs && tid < C128_WARP_THREADS) {
    if (t.entry) ext->entry[n] = w.out_row, ext->position[n] = position, w.out_row = j->first + lane;
    for (int s = 0; s < c128__items_per_job(t, j); ++s) {
      if (j->whole) w.split = s;
      sh->windows[n * c128__items_per_job(t, j) + s] = w;
    }
  }
  if (runs && t.layout) c128__resolve_rows(p, &w, tid / C128_WARP_THREADS, ext, n);
  return mask;
#else
  uint32_t mask = 0;
  for (int k = 0; k < C128__MAX_GROUP; ++k) listed[k].kv = -1;
  for (int k = 0, n = 0; k < p->group; ++k) {
    c128__window w;
    if (!c128__job_window(p, t, kind, j, k, 0, &w, &listed[k], &position)) continue;
    mask |= 1u << k;
    if (t.entry) ext->entry[n] = w.out_row, ext->position[n] = position, w.out_row = j->first + k;
    for (int warp = 0; t.layout && warp < C128_NUM_WARPS; ++warp) c128__resolve_rows(p, &w, warp, ext, n);
    for (int s = 0; s < c128__items_per_job(t, j); ++s) {
      if (j->whole) w.split = s;
      sh->windows[n * c128__items_per_job(t, j) + s] = w;
    }
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

/* A block's items that compress: its listed jobs' splits. */
C128__FN int c128__block_items(c128__trait t, const c128__jobs *j, uint32_t mask) {
  return c128__popcount(mask) * c128__items_per_job(t, j);
}

/* Steps of a block with `items` to compress: the list alone, or the list, one step per item and
   the last fold; in cache-entry kernels also the last window's arrival, staging and entry, or
   with whole windows or one request a block (a cluster) its entry alone. */
C128__FN int c128__block_steps(const c128__params *p, c128__trait t, int items) {
  return items ? items + (!t.entry ? 2 : p->more->whole || c128__in_cluster(t) ? 3 : 5) : 1;
}

/* Blocks a cluster: a window's splits where they meet in one (DESIGN 11.3), else 1. */
C128__FN int c128__cluster_blocks(c128__trait t) { return c128__in_cluster(t) ? C128_NUM_SPLIT(t.head_dim) : 1; }

C128__FN void c128__arrive(const c128__params *p, c128__trait t, const c128__block_shared *sh, c128__block_ext *ext,
                           int e, int lane);
C128__FN void c128__stage_entry(const c128__params *p, c128__trait t, const c128__block_shared *sh,
                                c128__block_ext *ext, int e, int split, int lane);
C128__FN void c128__write_entry(const c128__params *p, c128__trait t, const c128__block_ext *ext, int e, int split,
                                int lane);
/* Cache-entry kernels: warps 0 and 1 fold, warp C128__ENTRY_WARP + k stages split k's channels
   and writes split k's part of an entry, and a warp that does neither brings the block's
   channels to the workspace and counts its arrival. */
#define C128__ENTRY_WARP 2
#define C128__ARRIVE_WARP (C128__ENTRY_WARP + C128_MAX_ENTRY_SPLITS)
C128__STATIC_ASSERT(C128__ARRIVE_WARP < C128_NUM_WARPS, "a warp beside the folding and entry warps");

/* Step s >= 1 of a block with `count` items: item s - 1's loads and partials, item s - 2's fold,
   and in cache-entry kernels either (the workspace) window s - 3's arrival and, in the window's
   last block, window s - 4's staging and window s - 5's entry, or (whole windows) the entry of the
   window whose last split item s - 3 was, or (a cluster's block: one request a block, or a
   group) in step count + 2 its split of each window's entry, the cluster's blocks having put
   their splits into its rows as they folded. In every other kernel an item is a window. A
   one-request block's window is `own`, not the list's. */
C128__FN void c128__window_step(const c128__params *p, c128__trait t, int kind, int step, int count, int tid,
                                c128__block_shared *sh, c128__block_ext *ext, const c128__window *own) {
  const int item = step - 1, warp = tid / C128_WARP_THREADS, lane = tid % C128_WARP_THREADS;
  const int whole = t.entry && p->more->whole, splits = C128_NUM_SPLIT(t.head_dim);
  /* Homogeneous instances send the window's loads out before the fold. Mixed ones fold first:
     measured faster for bf16-state decode (B = 128: 12.6 against 13.3 us), and their exact build
     would spill, as did the decode kernels of any layout and the kernels with cache entries
     (more addresses to form). */
  const int entry_warp = t.entry && warp >= C128__ENTRY_WARP && warp < C128__ENTRY_WARP + splits;
  const int loads_first = t.buf == t.in && !t.entry && (!t.layout || kind == C128_PLAN_COMPRESS);
  if (whole) {
    if (entry_warp && item >= 2 && item - 2 < count && (item - 2) % splits == splits - 1)
      c128__write_entry(p, t, ext, (item - 2) / splits, warp - C128__ENTRY_WARP, lane);
  } else if (c128__in_cluster(t)) { /* past the cluster barrier, warp 2 + e writes window e's split */
    const int e = warp - C128__ENTRY_WARP;
    if (e >= 0 && e < count && item == count + 1)
      c128__write_entry(p, t, ext, e, t.single ? own->split : sh->windows[e].split, lane);
  } else if (t.entry) {
    if (warp == C128__ARRIVE_WARP && item >= 2 && item - 2 < count) c128__arrive(p, t, sh, ext, item - 2, lane);
    if (entry_warp && item >= 4 && item - 4 < count && ext->last[item - 4])
      c128__write_entry(p, t, ext, item - 4, warp - C128__ENTRY_WARP, lane);
    if (entry_warp && item >= 3 && item - 3 < count && ext->last[item - 3])
      c128__stage_entry(p, t, sh, ext, item - 3, warp - C128__ENTRY_WARP, lane);
  }
  c128__rows rows;
  c128__window cur = {0, 0, 0, 0, 0}; /* in registers: reading it from shared at each use costs a spill */
  c128__dest from;                    /* the warp's first state row in each plane */
  if (item < count) cur = t.single ? *own : sh->windows[item];
  if (t.layout && item < count) { /* a window's rows, found once for all its splits */
    const int window = whole ? item / splits : item;
    from.kv = ext->kv_row[window][warp], from.score = ext->score_row[window][warp];
  } else {
    from.kv = from.score = cur.state_row0 + warp * C128_ROWS_PER_WARP;
  }
  if (item < count && loads_first) c128__load_window(p, t, &cur, from, tid, &rows);
  if (item >= 1 && (!t.entry || item - 1 < count)) {
    const c128__window prev = t.single ? *own : sh->windows[item - 1];
    /* cache entries: the block's 64 channels, or its split of the window's row: with whole windows
       two rows in turn, in a cluster's block one a window */
    void *folded = !t.entry              ? NULL
                   : c128__in_cluster(t) ? (void *)(ext->rows[item - 1] + prev.split * C128_TILE_DIM)
                   : whole               ? (void *)(ext->y[(item - 1) / splits % 2] + prev.split * C128_TILE_DIM)
                                         : (void *)ext->mine[(item - 1) % 2];
    c128__fold(p, t, &prev, tid, &sh->fold[(item - 1) % 2], folded);
  }
  if (item < count && !loads_first) c128__load_window(p, t, &cur, from, tid, &rows);
  if (item < count) c128__partials(p, t, &cur, tid, &rows, &sh->fold[item % 2]);
}

/* >>decode: the new rows (DESIGN 6.2) ----------------------------------------------------------- */
/* In step 0 warp w persists the new token of requests first + w and first + w + 16 (within the
   group). Their input rows are requested first (row b belongs to plan b), before anything waits
   on a plan, so that the input and plan loads overlap; the stores follow the plans. Valid plans'
   windows never read these rows; the barrier after step 0 orders the two within a block anyway. */
#define C128__WRITES_PER_WARP 2
C128__STATIC_ASSERT(C128_MAX_DECODE_GROUP <= C128__WRITES_PER_WARP * C128_NUM_WARPS, "rows a decode warp persists");
typedef struct c128__decode_rows {
  c128__raw2 kv[C128__WRITES_PER_WARP], score[C128__WRITES_PER_WARP];
} c128__decode_rows;

/* Warp w persists items w and w + 16 of the group (c128__jobs): request and channels of its i-th. */
C128__FN int32_t c128__decode_request(c128__trait t, const c128__jobs *j, int tid, int i) {
  if (!j->whole) return j->first + tid / C128_WARP_THREADS + i * C128_NUM_WARPS;
  return j->first + (tid / C128_WARP_THREADS + i * C128_NUM_WARPS) / C128_NUM_SPLIT(t.head_dim);
}
/* Whether the warp's i-th item (request b) exists: in a one-request block warp 0's first alone. */
C128__FN int c128__decode_item(c128__trait t, const c128__jobs *j, int tid, int i, int32_t b) {
  return t.single ? i == 0 && tid < C128_WARP_THREADS : b < j->end;
}
C128__FN int64_t c128__decode_channel(c128__trait t, const c128__jobs *j, int tid, int i) {
  const int split = j->whole ? (tid / C128_WARP_THREADS + i * C128_NUM_WARPS) % C128_NUM_SPLIT(t.head_dim) : j->split;
  return (int64_t)split * C128_TILE_DIM + C128_TILE_ELEMS * (tid % C128_WARP_THREADS);
}

C128__FN void c128__decode_fetch(const c128__params *p, c128__trait t, const c128__jobs *j, int tid,
                                 c128__decode_rows *rows) {
  const int64_t row = C128_ROW_ELEMS(t.head_dim), ch0 = c128__decode_channel(t, j, tid, 0);
  C128__UNROLL
  for (int i = 0; i < C128__WRITES_PER_WARP; ++i) {
    const int32_t b = c128__decode_request(t, j, tid, i);
    const int64_t ch = j->whole ? c128__decode_channel(t, j, tid, i) : ch0;
    if (!c128__decode_item(t, j, tid, i, b)) break;
    rows->kv[i] = c128__fetch2(p, t, (int64_t)b * row + ch);
    rows->score[i] = c128__fetch2(p, t, (int64_t)b * row + C128_SCORE_OFFSET(t.head_dim) + ch);
  }
}

/* Element e (even) of an input row, as the pair v, into state row `to`: elements below head_dim
   are kv, the others score (a biased state's scores get ape's pair of the row's window row). */
C128__FN void c128__write_pair(const c128__params *p, c128__trait t, c128__dest to, int64_t e, c128__raw2 v) {
  if (!t.layout) {
    c128__put2(p, t, v, p->state, to.kv * C128_ROW_ELEMS(t.head_dim) + e);
    return;
  }
  const int half = e >= t.head_dim;
  const int64_t ch = e - half * t.head_dim, at = c128__plane_elem(p, t, half, half ? to.score : to.kv, ch);
  if (half && p->more->biased)
    c128__put2_biased(p, t, v, p->more->score, at,
                      c128__load2(p, p->ape, (int64_t)to.slot * t.head_dim + ch, C128_F32, 0));
  else c128__put2(p, t, v, c128__plane(p, t, half), at);
}

/* Each request's persisted row comes from the list's check of its plan (`listed`, from
   c128__list_windows), not from a second check: on the GPU from the lane that checked it. */
C128__FN void c128__decode_writes(const c128__params *p, c128__trait t, const c128__jobs *j, int tid,
                                  const c128__decode_rows *rows, const c128__dest *listed) {
  const int64_t ch0 = c128__decode_channel(t, j, tid, 0);
  C128__UNROLL
  for (int i = 0; i < C128__WRITES_PER_WARP; ++i) {
    const int32_t b = c128__decode_request(t, j, tid, i);
    const int64_t ch = j->whole ? c128__decode_channel(t, j, tid, i) : ch0;
    if (!c128__decode_item(t, j, tid, i, b)) break;
#ifdef __CUDA_ARCH__
    c128__dest to;
    if (t.single) to = *listed; /* every lane checked the one plan */
    else to.kv = __shfl_sync(C128__ALL_LANES, listed->kv, b - j->first);
    if (t.layout && !t.single) {
      to.score = __shfl_sync(C128__ALL_LANES, listed->score, b - j->first);
      to.slot = __shfl_sync(C128__ALL_LANES, listed->slot, b - j->first);
    }
#else
    const c128__dest to = listed[b - j->first];
#endif
    if (to.kv < 0) continue;
    c128__write_pair(p, t, to, ch, rows->kv[i]);
    c128__write_pair(p, t, to, C128_SCORE_OFFSET(t.head_dim) + ch, rows->score[i]);
  }
}

/* >>write: the prefill write kernel's row copy (DESIGN 6.3) ------------------------------------- */
/* One warp per write plan: the warp copies the whole row, a batch of pairs at a time with every
   load of a batch issued before its stores (a plan's row is 2 * head_dim elements; lane l takes
   the pairs l, l + 32, ...). */
#define C128__WRITE_BATCH 8 /* pairs in flight per lane; 4 in kernels of any layout, which spilled with 8 */
C128__FN void c128__write_row(const c128__params *p, c128__trait t, int64_t index, int lane) {
  int64_t src_row;
  c128__dest dst;
  if (c128__write_target(p, t, index, 0, &src_row, &dst) != C128__RUN || dst.kv < 0) return;
  const int64_t row = C128_ROW_ELEMS(t.head_dim);
  const int pairs = C128_ROW_ELEMS(t.head_dim) / (C128_TILE_ELEMS * C128_WARP_THREADS);
  const int batch = t.layout ? C128__WRITE_BATCH / 2 : C128__WRITE_BATCH;
  for (int k0 = 0; k0 < pairs; k0 += batch) {
    c128__raw2 v[C128__WRITE_BATCH];
    C128__UNROLL
    for (int k = 0; k < C128__WRITE_BATCH; ++k)
      if (k < batch && k0 + k < pairs)
        v[k] = c128__fetch2(p, t, src_row * row + C128_TILE_ELEMS * ((k0 + k) * C128_WARP_THREADS + lane));
    C128__UNROLL
    for (int k = 0; k < C128__WRITE_BATCH; ++k)
      if (k < batch && k0 + k < pairs)
        c128__write_pair(p, t, dst, C128_TILE_ELEMS * ((k0 + k) * C128_WARP_THREADS + lane), v[k]);
  }
}

/* >>entry: the cache-entry epilogue (DESIGN 11) ------------------------------------------------- */
/* A window's splits are head_dim / 64 blocks that never wait for each other. Each stores its
   64 folded values, rounded to bf16, into the job's row of the workspace and counts itself in
   the job's counter; the block that brings the count to the splits is the last (any of them, in
   any order) and writes the whole entry: warp C128__ENTRY_WARP + k reads the row, forms the
   RMSNorm's sum of squares in a fixed order, and writes split k's part, an FP8 block of 64
   channels with its scale byte, or (the last split) the 32 RoPE pairs. So the entry depends on
   the row alone, never on which block came last. Every value of the reference chain is rounded
   as DESIGN 11 says, with IEEE operations only, so that the host runner's bits are the GPU's. */
/* Listed window e's split arrives, by lane `lane` of C128__ARRIVE_WARP: the warp stores the
   block's 64 folded channels into the job's row of the workspace, and lane 0 counts the block.
   A grid barrier's pattern: the fence before the count makes the warp's stores visible to
   whichever block reads the count last, and that block's fence after it orders its reads of the
   row (c128__stage_entry) after every block's stores. That block sets the counter back to zero
   (and its staging the row). */
C128__FN void c128__arrive(const c128__params *p, c128__trait t, const c128__block_shared *sh, c128__block_ext *ext,
                           int e, int lane) {
  const c128__window w = sh->windows[e];
  const int c = C128_TILE_ELEMS * lane;
  float *to = p->more->pooled + w.out_row * t.head_dim + (int64_t)w.split * C128_TILE_DIM + c;
  to[0] = ext->mine[e % 2][c], to[1] = ext->mine[e % 2][c + 1]; /* the workspace: no race to check */
  uint32_t *count = p->more->arrivals + w.out_row;
#ifdef __CUDA_ARCH__
  __syncwarp();
  if (lane != 0) return;
  __threadfence();
  const uint32_t before = atomicAdd(count, 1u);
#else
  if (lane != 0) return;
  const uint32_t before = (*count)++; /* the host runner runs one block at a time */
#endif
  const int last = before == (uint32_t)C128_NUM_SPLIT(t.head_dim) - 1u;
  if (last) {
    *count = 0u;
#ifdef __CUDA_ARCH__
    __threadfence();
#endif
  }
  ext->last[e] = last;
}

/* The last block's copy of listed window e's pooled vector, split `split` of it by lane `lane`
   of warp C128__ENTRY_WARP + split: from L2 (other blocks stored it in this launch: past the
   SM's L1) into shared memory, from which the next step's entry reads the whole vector; the
   workspace's row goes back to zero (no one reads it again in this launch). */
C128__FN void c128__stage_entry(const c128__params *p, c128__trait t, const c128__block_shared *sh,
                                c128__block_ext *ext, int e, int split, int lane) {
  const int c = split * C128_TILE_DIM + C128_TILE_ELEMS * lane;
  float *from = p->more->pooled + sh->windows[e].out_row * t.head_dim + c;
#ifdef __CUDA_ARCH__
  const float2 v = __ldcg((const float2 *)from);
  *(float2 *)from = make_float2(0.0f, 0.0f); /* the workspace as it was found */
#else
  const float2 v = {from[0], from[1]};
  from[0] = from[1] = 0.0f;
#endif
  ext->y[e % 2][c] = v.x, ext->y[e % 2][c + 1] = v.y;
}

C128__FN float c128__sqrt(float x) {
#ifdef __CUDA_ARCH__
  return __fsqrt_rn(x);
#else
  return sqrtf(x);
#endif
}

/* IEEE maximum in which a NaN on either side wins (|z| holds no -0, so the sign of zeros does not
   matter). */
C128__FN float c128__max_either(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  return c128__max_nan(a, b);
#else
  return a != a ? a : b != b ? b : fmaxf(a, b);
#endif
}

/* 2^e as a float, e in [-126, 127]. */
C128__FN float c128__pow2(int e) { return c128__from_bits((uint32_t)(e + 127) << 23); }

/* The e4m3 (FN) code of x, round to nearest even; |x| >= 448 saturates to 448 (the block's scale
   keeps |x| <= 448 anyway), NaN gives 0x7F, values below half the smallest subnormal 0. */
C128__FN uint32_t c128__e4m3(float x) {
  const uint32_t u = c128__bits(x), sign = (u >> 24) & 0x80u, a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7Fu;
  if (a >= 0x43E00000u) return sign | 0x7Eu; /* 448 */
  const int e = (int)(a >> 23) - 127;
  if (e >= -6) { /* normal: 3 of the 23 mantissa bits; a carry into the exponent is the next code */
    const uint32_t m = a & 0x7FFFFFu, q = m >> 20, rest = m & 0xFFFFFu;
    const uint32_t code = ((uint32_t)(e + 7) << 3) + q + (rest > 0x80000u || (rest == 0x80000u && (q & 1u)));
    return sign | (code > 0x7Eu ? 0x7Eu : code);
  }
  /* subnormal: a / 2^-9 rounded; q = 8 is the smallest normal code */
  const int shift = 14 - e;
  if (a < 0x00800000u || shift > 24) return sign;
  const uint32_t mant = (a & 0x7FFFFFu) | 0x800000u, q = mant >> shift, rest = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  return sign | (q + (rest > half || (rest == half && (q & 1u))));
}

/* The value of an e4m3 (FN) code (0x7F and 0xFF are NaN). */
C128__FN float c128__e4m3_value(uint32_t code) {
  const uint32_t e = (code >> 3) & 15u, m = code & 7u;
  if (e == 15u && m == 7u) return c128__from_bits(0x7FC00000u);
  const float v = e ? c128__mul((float)(8u + m), c128__pow2((int)e - 10)) : c128__mul((float)m, c128__pow2(-9));
  return code & 0x80u ? -v : v;
}

/* The UE8M0 exponent of a block whose largest |z| is amax (finite): E = ceil(log2(max(amax,
   1e-4) / 448)) from the bits of the quotient, which is a normal float. */
C128__FN int c128__scale_exponent(float amax) {
  const uint32_t f = c128__bits(c128__div(amax > 1e-4f ? amax : 1e-4f, 448.0f));
  return (int)(f >> 23) - 127 + ((f & 0x7FFFFFu) != 0u);
}

/* Reduction over the 32 lanes of a warp by xor butterflies (offsets 16 .. 1): every lane ends with
   the same bits. The host runner, one lane at a time, replays the same tree over all lanes'
   values (`lanes`). */
C128__FN float c128__warp_tree(float own, const float *lanes, int is_max, int lane) {
#ifdef __CUDA_ARCH__
  (void)lanes, (void)lane;
  C128__UNROLL
  for (int o = C128_WARP_THREADS / 2; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(C128__ALL_LANES, own, o);
    own = is_max ? c128__max_either(own, other) : c128__add(own, other);
  }
  return own;
#else
  float v[C128_WARP_THREADS], next[C128_WARP_THREADS];
  memcpy(v, lanes, sizeof v);
  for (int o = C128_WARP_THREADS / 2; o > 0; o >>= 1) {
    for (int l = 0; l < C128_WARP_THREADS; ++l)
      next[l] = is_max ? c128__max_either(v[l], v[l ^ o]) : c128__add(v[l], v[l ^ o]);
    memcpy(v, next, sizeof v);
  }
  (void)own;
  return v[lane];
#endif
}

/* `bytes` (1, 2 or 4) little-endian bytes of bits at `at` in the cache. */
C128__FN void c128__store_bytes(const c128__params *p, char *at, uint32_t bits, int bytes) {
#ifdef __CUDA_ARCH__
  (void)p;
  if (bytes == 4) *(uint32_t *)at = bits;
  else if (bytes == 2) *(uint16_t *)at = (uint16_t)bits;
  else *(uint8_t *)at = (uint8_t)bits;
#else
  if (p->checker) {
    const uint32_t each[4] = {bits & 0xFFu, (bits >> 8) & 0xFFu, (bits >> 16) & 0xFFu, bits >> 24};
    c128__track(p->checker, at, bytes, 1, 1, each);
  }
  memcpy(at, &bits, (size_t)bytes);
#endif
}

/* A window's pooled row, bf16-rounded: floats, or (a cluster's block) bf16 bits. */
typedef struct c128__entry_row {
  const float *f32;
  const uint16_t *bf16;
} c128__entry_row;
C128__FN float c128__row_at(c128__entry_row y, int c) { return y.bf16 ? c128__widen_bf16(y.bf16[c]) : y.f32[c]; }

/* Lane l's sum of squares of the window's channels l, l + 32, ... (ascending). */
C128__FN float c128__lane_squares(c128__entry_row y, int head_dim, int lane) {
  float sum = 0.0f;
  for (int c = lane; c < head_dim; c += C128_WARP_THREADS) {
    const float b = c128__row_at(y, c);
    sum = c128__add(sum, c128__mul(b, b));
  }
  return sum;
}
/* Channel c of the normalised window: z = bf16(gamma_c * (b_c * r)). */
C128__FN float c128__z_of(float gamma, float b, float r) {
  return c128__widen_bf16(c128__narrow_bf16(c128__mul(gamma, c128__mul(b, r))));
}
#ifndef __CUDA_ARCH__ /* the host runner replays the amax tree from every lane's channels */
C128__FN float c128__entry_z(const c128__params *p, c128__entry_row y, float r, int c) {
  return c128__z_of(p->more->gamma[c], c128__row_at(y, c), r);
}
/* Lane l's largest |z| of channels base + 2l, base + 2l + 1. */
C128__FN float c128__lane_amax(const c128__params *p, c128__entry_row y, float r, int base, int lane) {
  const int c = base + C128_TILE_ELEMS * lane;
  return c128__max_either(fabsf(c128__entry_z(p, y, r, c)), fabsf(c128__entry_z(p, y, r, c + 1)));
}
#endif

/* What an entry's split takes besides the row: gamma of channels c and c + 1, and in the last
   split (`rope`) RoPE pair `lane` at window e's position. */
C128__FN void c128__entry_constants(const c128__params *p, const c128__block_ext *ext, int e, int c, int rope, int lane,
                                    float *g0, float *g1, float2 *cs) {
  *g0 = p->more->gamma[c], *g1 = p->more->gamma[c + 1];
  if (rope)
    *cs = c128__load2(p, p->more->rope, ((int64_t)ext->position[e] * C128_WARP_THREADS + lane) * 2, C128_F32, 0);
}
/* Listed window e's entry: split `split` of it, by lane `lane` of warp C128__ENTRY_WARP + split. */
C128__FN void c128__write_entry(const c128__params *p, c128__trait t, const c128__block_ext *ext, int e, int split,
                                int lane) {
  const int D = t.head_dim, splits = C128_NUM_SPLIT(t.head_dim), fp8 = p->more->entry_kind == C128_OUTPUT_DSV4_FP8;
  c128__entry_row y = {NULL, NULL};
  if (c128__in_cluster(t)) y.bf16 = ext->rows[e];
  else y.f32 = ext->y[e % 2];
  /* A cluster's block loads gamma and the RoPE pair first, so that their round trips overlap the
     sum of squares, its tree and the square root (the workspace form's kernels spilled on sm_100
     holding them that long: they load them after). */
  const int base = split * C128_TILE_DIM, c = base + C128_TILE_ELEMS * lane, rope = split == splits - 1;
  const int early = c128__in_cluster(t);
  float g0 = 0.0f, g1 = 0.0f;
  float2 cs = {0.0f, 0.0f};
  if (early) c128__entry_constants(p, ext, e, c, rope, lane, &g0, &g1, &cs);
  float lanes[C128_WARP_THREADS]; /* the host runner's replay of the reductions */
#ifndef __CUDA_ARCH__
  for (int l = 0; l < C128_WARP_THREADS; ++l) lanes[l] = c128__lane_squares(y, D, l);
#endif
  const float squares = c128__warp_tree(c128__lane_squares(y, D, lane), lanes, 0, lane);
  const float r = c128__div(1.0f, c128__sqrt(c128__add(c128__div(squares, (float)D), p->more->eps)));
  const int64_t loc = ext->entry[e];
  if (!early) c128__entry_constants(p, ext, e, c, rope, lane, &g0, &g1, &cs);
  const float z0 = c128__z_of(g0, c128__row_at(y, c), r), z1 = c128__z_of(g1, c128__row_at(y, c + 1), r);
  const int64_t entries = (int64_t)1 << p->more->entry_shift, slot = loc & (entries - 1);
  char *page = p->more->cache + (loc >> p->more->entry_shift) * p->more->page_bytes;
  char *entry = page + slot * (fp8 ? D + C128_ROPE_DIMS : 2 * D), *scales = page + (D + C128_ROPE_DIMS) * entries;
  if (rope) { /* RoPE pair `lane` of the last 64 channels at the window's position */
    const uint32_t re = c128__narrow_bf16(c128__sub(c128__mul(z0, cs.x), c128__mul(z1, cs.y)));
    const uint32_t im = c128__narrow_bf16(c128__add(c128__mul(z0, cs.y), c128__mul(z1, cs.x)));
    c128__store_bytes(p, entry + (fp8 ? D - C128_ROPE_DIMS + 2 * C128_TILE_ELEMS * lane : 2 * c), re | im << 16, 4);
    if (fp8 && lane == 0) c128__store_bytes(p, scales + (int64_t)splits * slot + splits - 1, 0u, 1); /* the pad byte */
    return;
  }
  /* FP8 block `split` of 64 channels: q = e4m3(z * 2^-E) with 2^E the UE8M0 scale. A block that
     holds a NaN (or an infinity) is all NaN: codes 0x7F, scale byte 0xFF. */
#ifndef __CUDA_ARCH__
  for (int l = 0; l < C128_WARP_THREADS; ++l) lanes[l] = c128__lane_amax(p, y, r, base, l);
#endif
  const float amax = c128__warp_tree(c128__max_either(fabsf(z0), fabsf(z1)), lanes, 1, lane); /* its lane_amax */
  const int finite = amax <= 3.402823466e38f, E = finite ? c128__scale_exponent(amax) : 0;
  const uint32_t q0 = finite ? c128__e4m3(c128__mul(z0, c128__pow2(-E))) : 0x7Fu;
  const uint32_t q1 = finite ? c128__e4m3(c128__mul(z1, c128__pow2(-E))) : 0x7Fu;
  if (fp8) {
    c128__store_bytes(p, entry + c, q0 | q1 << 8, 2);
    if (lane == 0)
      c128__store_bytes(p, scales + (int64_t)splits * slot + split, finite ? (uint32_t)(E + 127) : 0xFFu, 1);
    return;
  }
  const uint32_t v0 = c128__narrow_bf16(c128__mul(c128__e4m3_value(q0), c128__pow2(E))); /* exact */
  const uint32_t v1 = c128__narrow_bf16(c128__mul(c128__e4m3_value(q1), c128__pow2(E)));
  c128__store_bytes(p, entry + 2 * c, v0 | v1 << 16, 4);
}

/* >>kernels: the GPU drivers ------------------------------------------------------------------- */
/* PDL (DESIGN 6.4). Dependents wait for this grid to complete (griddepcontrol.wait) before they
   read or write anything that matters, so the trigger only decides how early their launch and
   prologue may overlap this grid: a compress block that folds windows triggers once its last
   loads are out (dependents resident any earlier slowed the folds: extend 8K 16.3 against
   11.7 us), one with nothing to fold as soon as it knows; decode blocks (short) and the write
   kernel trigger first thing. Before its own wait a kernel reads nothing a predecessor may
   write, except as a guess: the prologue reads plans through L2 only (never L1, so the real
   read after the wait cannot hit a stale line) and uses them only as prefetch addresses. L2 is
   the GPU's point of coherence, so a prefetched line is never stale; a wrong guess costs
   bandwidth, not results. */
C128__DEVICE void c128__pdl_wait(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
C128__DEVICE void c128__pdl_trigger(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* The cluster barrier where a window's splits meet in a cluster (sm_90 and newer), in two halves:
   every thread arrives (`release`: its earlier stores, c128__cluster_put's included, become
   visible to the cluster) and later waits for every thread of the cluster to have arrived. */
C128__DEVICE void c128__cluster_arrive(int release) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (release) asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
  else asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#else
  (void)release;
#endif
}
C128__DEVICE void c128__cluster_wait(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}

#define C128__LINE_BYTES 128 /* an L2 cache line */
C128__DEVICE void c128__prefetch_line(const void *at) { asm volatile("prefetch.global.L2 [%0];" ::"l"(at)); }
C128__DEVICE void c128__prefetch_l2(const void *base, int64_t elem, int dtype, int line) {
  c128__prefetch_line((const char *)base + elem * c128__dtype_bytes(dtype) + (int64_t)line * C128__LINE_BYTES);
}

/* Line `line` of the split's 64 channels of one half (kv or score) of `row`, if the split is
   that long in this dtype. */
C128__DEVICE void c128__prefetch_split(const void *base, int64_t row, int half, int line, c128__trait t, int dtype,
                                       int split) {
  if (line * C128__LINE_BYTES >= C128_TILE_DIM * c128__dtype_bytes(dtype)) return;
  c128__prefetch_l2(
      base, row * C128_ROW_ELEMS(t.head_dim) + half * C128_SCORE_OFFSET(t.head_dim) + (int64_t)split * C128_TILE_DIM,
      dtype, line);
}

/* One warp asks L2, before the wait, for what the block will read first: lane k guesses job k's
   plan through L2, and the first window the guesses compress has its 128 rows prefetched (kv
   and score, 64 channels each: two 128-byte lines in f32, one in bf16; up to 16 lines a lane).
   In compress that is warp 0. Decode guesses on its last warp, which persists nothing in groups
   of up to 15 requests and so is off the critical path of a step without a window, while warp 0
   prefetches the plans and the group's new rows, whose addresses need no plan, without waiting
   for anything. */
#define C128__LINES_PER_ROW 4
C128__DEVICE void c128__prologue(const c128__params *p, c128__trait t, int kind, const c128__jobs *j, int tid) {
  const int warp = tid / C128_WARP_THREADS, lane = tid % C128_WARP_THREADS;
  if (kind == C128_PLAN_DECODE && warp == 0) {
    if (j->first + lane < j->end) {
      c128__prefetch_line((const c128_decode_plan *)p->plans + j->first + lane);
      for (int line = 0; line < C128__LINES_PER_ROW; ++line)
        c128__prefetch_split(p->input, j->first + lane, line / 2, line % 2, t, t.in, j->split);
    }
    return;
  }
  if (warp != (kind == C128_PLAN_DECODE ? C128_NUM_WARPS - 1 : 0)) return;
  c128__window w = {0, 0, 0, 0, 0};
  c128__dest write_row;
  int32_t position;
  const int job = t.single ? 0 : lane; /* a one-request block: every lane guesses the one plan */
  const int runs = job < p->group && c128__job_window(p, t, kind, j, job, 1, &w, &write_row, &position);
  const uint32_t mask = __ballot_sync(C128__ALL_LANES, runs);
  if (!mask) return;
  const int src = __ffs(mask) - 1;
  const int64_t state_row0 = t.single ? w.state_row0 : __shfl_sync(C128__ALL_LANES, w.state_row0, src);
  const int64_t input_row0 = t.single ? w.input_row0 : __shfl_sync(C128__ALL_LANES, w.input_row0, src);
  const int buffer_len = t.single ? w.buffer_len : __shfl_sync(C128__ALL_LANES, w.buffer_len, src);
  C128__UNROLL
  for (int i = 0; i < C128_WINDOW * C128__LINES_PER_ROW / C128_WARP_THREADS; ++i) {
    const int at = lane + i * C128_WARP_THREADS, row = at / C128__LINES_PER_ROW, line = at % C128__LINES_PER_ROW;
    const int from_state = row < buffer_len;
    if (t.layout && from_state) continue; /* its rows need the block table: found after the wait */
    c128__prefetch_split(from_state ? (const void *)p->state : p->input, (from_state ? state_row0 : input_row0) + row,
                         line / 2, line % 2, t, from_state ? t.buf : t.in, j->split);
  }
}

/* The barrier before step s of a block with `count` items: the block's; where a window's splits
   meet in a cluster, before the entries' step (count + 2) the cluster's, which makes every put
   visible (release, acquire), and before the first put (step 2) the wait for every block of the
   cluster to have arrived on listing its windows, so that none is yet to start. */
C128__DEVICE void c128__step_barrier(c128__trait t, int s, int count) {
  if (c128__in_cluster(t) && s == count + 2) c128__cluster_arrive(1), c128__cluster_wait();
  else __syncthreads();
  if (c128__in_cluster(t) && s == 2) c128__cluster_wait();
}

/* A decode or compress block: prologue, wait, then the steps with a barrier between. `ext` (the
   layout and cache-entry kernels' shared memory beside the list) is NULL in the others. */
C128__DEVICE void c128__run_block(const c128__params *p, c128__trait t, int kind, c128__block_shared *sh,
                                  c128__block_ext *ext) {
  const int tid = (int)threadIdx.x;
  const c128__jobs j = c128__block_jobs(p, t, blockIdx.x);
  if (kind == C128_PLAN_DECODE) c128__pdl_trigger(); /* decode blocks are short: overlap the next launch */
  if (p->pdl) c128__prologue(p, t, kind, &j, tid);
  /* With the caller's promise that plans, tables and output index were complete before the
     previous kernel began (C128_PDL_PLANS_READY), the list reads them before the wait; the rows,
     which that kernel may write, come after it. Otherwise the new rows are fetched right after
     the wait, before the list, so that their loads overlap the plans' (cache-entry kernels and
     mixed-dtype kernels of any layout fetch after it: their look-ups beside the rows in flight
     spilled, as did reading early in the latter). One call of the list: two spilled the kernels
     of any layout. A cluster's blocks read their plan after the wait whatever the promise: they
     must agree on it (one that returns for want of a window would no longer take its peers'
     puts), and after the wait no kernel in the stream still writes it. */
  const int plans_ready = p->pdl == C128_PDL_PLANS_READY && (!t.layout || t.buf == t.in) && /* mixed ones spilled */
                          c128__cluster_blocks(t) == 1;
  const int fetch_first = (t.single ? 1 : !t.entry) && !plans_ready && (!t.layout || t.buf == t.in);
  c128__decode_rows rows;
  if (!plans_ready) {
    c128__pdl_wait();
    if (kind == C128_PLAN_DECODE && fetch_first) c128__decode_fetch(p, t, &j, tid, &rows);
  }
  c128__dest listed; /* this lane's job's persisted row */
  c128__window own;  /* a one-request block's window */
  const uint32_t mask = c128__list_windows(p, t, kind, &j, tid, sh, ext, &listed, &own);
  if (plans_ready) c128__pdl_wait();
  if (kind == C128_PLAN_DECODE && !fetch_first) c128__decode_fetch(p, t, &j, tid, &rows);
  if (!mask && kind == C128_PLAN_COMPRESS) c128__pdl_trigger(); /* nothing to fold: about done */
  if (kind == C128_PLAN_DECODE) c128__decode_writes(p, t, &j, tid, &rows, &listed);
  /* Where a window's splits meet in a cluster, a block with windows arrives once it has listed
     them; c128__step_barrier waits for that before the first put. A block without a window
     takes no barrier: its peers read the same plans, so none of them has one either. */
  if (c128__in_cluster(t) && mask) c128__cluster_arrive(0);
  /* A one-request block: steps 1 and 2 of its window, if it has one, and with cache entries 3. */
  if (t.single) {
    if (!mask) return;
    c128__step_barrier(t, 1, 1);
    c128__window_step(p, t, kind, 1, 1, tid, sh, ext, &own);
    c128__step_barrier(t, 2, 1);
    c128__window_step(p, t, kind, 2, 1, tid, sh, ext, &own);
    if (!t.entry) return;
    c128__step_barrier(t, 3, 1);
    c128__window_step(p, t, kind, 3, 1, tid, sh, ext, &own);
    return;
  }
  const int count = c128__block_items(t, &j, mask), steps = c128__block_steps(p, t, count);
  C128__NO_UNROLL
  for (int s = 1; s < steps; ++s) {
    if (s == count + 1 && kind == C128_PLAN_COMPRESS) c128__pdl_trigger(); /* the last loads are out */
    c128__step_barrier(t, s, count);
    c128__window_step(p, t, kind, s, count, tid, sh, ext, NULL);
  }
}

/* A write block: warp w copies plan 4 * block + w; warps past the last plan read nothing. */
C128__DEVICE void c128__run_write_block(const c128__params *p, c128__trait t) {
  const int64_t index = (int64_t)blockIdx.x * C128_WRITE_WARPS + threadIdx.x / C128_WARP_THREADS;
  const int lane = (int)(threadIdx.x % C128_WARP_THREADS);
  const int runs = index < p->num_plans;
  c128__pdl_trigger();
  if (runs && p->pdl) { /* prologue: the source row, guessed */
    int64_t src_row;
    c128__dest dst;
    if (c128__write_target(p, t, index, 1, &src_row, &dst) == C128__RUN && dst.kv >= 0) {
      const int lines = (int)(C128_ROW_ELEMS(t.head_dim) * c128__dtype_bytes(t.in) / C128__LINE_BYTES);
      for (int line = lane; line < lines; line += C128_WARP_THREADS)
        c128__prefetch_l2(p->input, src_row * C128_ROW_ELEMS(t.head_dim), t.in, line);
    }
  }
  c128__pdl_wait();
  if (runs) c128__write_row(p, t, index, lane);
}

/* A kernel's form (c128__trait.single, .cluster). */
#define C128__FORM_GROUPED 0
#define C128__FORM_SINGLE 1
#define C128__FORM_CLUSTER 2
/* An instance's kernels, for each variant of c128__trait: today's layout with pooled rows (no
   suffix), any layout (_layout), cache entries (_entry), both (_layout_entry), and cache entries
   on today's layout whose window splits form a cluster (_cluster_entry; a decode's one-request
   kernels are _single and _single_entry); the write kernel has no output, so no entry variants.
   The variants take their c128__more as a second parameter and have a c128__block_ext beside the
   block's shared memory. */
#define C128__TRAIT(D, state, input, output, layout, entry) \
  { D, C128__DTYPE_##state, C128__DTYPE_##input, C128__DTYPE_##output, layout, entry, 0, 0 }
#define C128__BLOCK_KERNEL(kernel, KIND, name, suffix, D, state, input, output, one_request) \
  static __global__ void __launch_bounds__(C128_BLOCK_THREADS, C128_BLOCKS_PER_SM)           \
      c128__##kernel##_kernel_##name##suffix(const c128__params p) {                         \
    __shared__ c128__block_shared sh;                                                        \
    c128__trait t = C128__TRAIT(D, state, input, output, 0, 0);                              \
    t.single = one_request;                                                                  \
    c128__run_block(&p, t, KIND, &sh, NULL);                                                 \
  }
/* The legacy epilogue's cache-entry kernels of any layout spilled at two blocks an SM (sm_90):
   that build's cache-entry kernels take one. */
#if C128_EPILOGUE == C128_EPILOGUE_LEGACY
#define C128__BLOCKS_PER_SM_OF(entry) ((entry) ? 1 : C128_BLOCKS_PER_SM)
#else
#define C128__BLOCKS_PER_SM_OF(entry) C128_BLOCKS_PER_SM
#endif
#define C128__BLOCK_KERNEL_MORE(kernel, KIND, name, suffix, D, state, input, output, layout, entry, form) \
  static __global__ void __launch_bounds__(C128_BLOCK_THREADS, C128__BLOCKS_PER_SM_OF(entry))             \
      c128__##kernel##_kernel_##name##suffix(const c128__params given, const c128__more more) {           \
    __shared__ c128__block_shared sh;                                                                     \
    __shared__ c128__block_ext ext;                                                                       \
    c128__params p = given;                                                                               \
    p.more = &more;                                                                                       \
    c128__trait t = C128__TRAIT(D, state, input, output, layout, entry);                                  \
    t.single = (form) == C128__FORM_SINGLE, t.cluster = (form) == C128__FORM_CLUSTER;                     \
    c128__run_block(&p, t, KIND, &sh, &ext);                                                              \
  }
#define C128__WRITE_KERNEL(name, D, state, input, output)                                             \
  static __global__ void __launch_bounds__(C128_WRITE_BLOCK_THREADS, C128_WRITE_BLOCKS_PER_SM)        \
      c128__write_kernel_##name(const c128__params p) {                                               \
    const c128__trait t = C128__TRAIT(D, state, input, output, 0, 0);                                 \
    c128__run_write_block(&p, t);                                                                     \
  }                                                                                                   \
  static __global__ void __launch_bounds__(C128_WRITE_BLOCK_THREADS, C128_WRITE_LAYOUT_BLOCKS_PER_SM) \
      c128__write_kernel_##name##_layout(const c128__params given, const c128__more more) {           \
    c128__params p = given;                                                                           \
    p.more = &more;                                                                                   \
    const c128__trait t = C128__TRAIT(D, state, input, output, 1, 0);                                 \
    c128__run_write_block(&p, t);                                                                     \
  }
#define C128__VARIANTS(kernel, KIND, name, D, state, input, output)                                             \
  C128__BLOCK_KERNEL(kernel, KIND, name, , D, state, input, output, 0)                                          \
  C128__BLOCK_KERNEL_MORE(kernel, KIND, name, _layout, D, state, input, output, 1, 0, C128__FORM_GROUPED)       \
  C128__BLOCK_KERNEL_MORE(kernel, KIND, name, _entry, D, state, input, output, 0, 1, C128__FORM_GROUPED)        \
  C128__BLOCK_KERNEL_MORE(kernel, KIND, name, _layout_entry, D, state, input, output, 1, 1, C128__FORM_GROUPED) \
  C128__BLOCK_KERNEL_MORE(kernel, KIND, name, _cluster_entry, D, state, input, output, 0, 1, C128__FORM_CLUSTER)
#define C128__KERNELS(name, D, state, input, output)                                                    \
  C128__VARIANTS(decode, C128_PLAN_DECODE, name, D, state, input, output)                               \
  C128__VARIANTS(compress, C128_PLAN_COMPRESS, name, D, state, input, output)                           \
  C128__BLOCK_KERNEL(decode, C128_PLAN_DECODE, name, _single, D, state, input, output, 1)               \
  C128__BLOCK_KERNEL_MORE(decode, C128_PLAN_DECODE, name, _single_entry, D, state, input, output, 0, 1, \
                          C128__FORM_SINGLE)                                                            \
  C128__WRITE_KERNEL(name, D, state, input, output)
C128_INSTANCES(C128__KERNELS)
#undef C128__KERNELS
#undef C128__VARIANTS
#undef C128__WRITE_KERNEL
#undef C128__BLOCK_KERNEL_MORE
#undef C128__BLOCK_KERNEL

/* >>runner: the CPU runner and its race checker (DESIGN 7) -------------------------------------- */
/* Last writer and up to two readers of one state/output element within one launch. Block ids
   are stored + 1 so that a zeroed shadow means "untouched". */
typedef struct c128__shadow {
  uint32_t bits;
  int32_t wblock, rblock[2];
  int16_t wtid, rtid[2];
  int8_t wphase, rphase[2];
} c128__shadow;

/* Tracked regions: the state (its kv plane), the score plane of a split state, and the output
   (or the cache of entries, by byte). */
enum { C128__STATE_REGION, C128__SCORE_REGION, C128__OUTPUT_REGION, C128__REGIONS };
#define C128__SHADOW_CHUNK 4096 /* elements per piece of shadow, allocated when first touched */

/* The shadow's pieces live in an open-addressing table keyed by (region, piece): its size follows
   what a launch touches, never the size of the buffers. */
typedef struct c128__piece {
  uint64_t key; /* (region << 62 | piece) + 1; 0 = empty */
  c128__shadow *shadow;
} c128__piece;

struct c128__checker {
  const char *base[C128__REGIONS];
  size_t bytes[C128__REGIONS];
  int dtype[C128__REGIONS]; /* an element's dtype, or -1 for the bytes of cache entries */
  int elem_bytes[C128__REGIONS];
  c128__piece *table;
  size_t capacity, used; /* capacity: 0 or a power of two */
  size_t allocated, limit;
  int32_t block, tid, phase;
  int raced, out_of_memory;
  char *message;
  size_t message_size;
};

/* calloc within the checker's limit. */
static void *c128__checker_alloc(c128__checker *c, size_t count, size_t size) {
  const size_t bytes = count * size; /* count and size are small: table slots or one piece */
  void *ptr = NULL;
  if (!c->out_of_memory && (!c->limit || bytes <= c->limit - c->allocated) && (ptr = calloc(count, size)))
    c->allocated += bytes;
  if (!ptr) c->out_of_memory = 1;
  return ptr;
}

static size_t c128__slot_of(const c128__piece *table, size_t capacity, uint64_t key) {
  size_t i = (size_t)(key * 0x9E3779B97F4A7C15ull) & (capacity - 1);
  while (table[i].key && table[i].key != key) i = (i + 1) & (capacity - 1);
  return i;
}

static c128__shadow *c128__shadow_of(c128__checker *c, int region, size_t elem) {
  const uint64_t key = ((uint64_t)region << 62 | (uint64_t)(elem / C128__SHADOW_CHUNK)) + 1;
  if (c->capacity) {
    const size_t i = c128__slot_of(c->table, c->capacity, key);
    if (c->table[i].key) return c->table[i].shadow + elem % C128__SHADOW_CHUNK;
  }
  if (2 * (c->used + 1) > c->capacity) { /* grow: rehash every piece */
    const size_t capacity = c->capacity ? 2 * c->capacity : 64;
    c128__piece *table = (c128__piece *)c128__checker_alloc(c, capacity, sizeof *table);
    if (!table) return NULL;
    for (size_t k = 0; k < c->capacity; ++k)
      if (c->table[k].key) table[c128__slot_of(table, capacity, c->table[k].key)] = c->table[k];
    free(c->table);
    c->allocated -= c->capacity * sizeof *table;
    c->table = table, c->capacity = capacity;
  }
  c128__shadow *shadow = (c128__shadow *)c128__checker_alloc(c, C128__SHADOW_CHUNK, sizeof(c128__shadow));
  if (!shadow) return NULL;
  const size_t i = c128__slot_of(c->table, c->capacity, key);
  c->table[i].key = key, c->table[i].shadow = shadow;
  ++c->used;
  return shadow + elem % C128__SHADOW_CHUNK;
}

static void c128__checker_free(c128__checker *c) {
  for (size_t k = 0; k < c->capacity; ++k) free(c->table[k].shadow);
  free(c->table);
}

static void c128__race(c128__checker *c, const char *what, int region, size_t elem, int32_t block, int tid) {
  if (c->raced++ || !c->message || !c->message_size) return;
  snprintf(c->message, c->message_size, "%s on %s element %zu: block %d thread %d phase %d vs block %d thread %d", what,
           region == C128__OUTPUT_REGION  ? "output"
           : region == C128__SCORE_REGION ? "score plane"
                                          : "state",
           elem, (int)c->block, (int)c->tid, (int)c->phase, (int)block - 1, tid);
}

/* One access of `count` elements of `elem_size` bytes at addr; bits[i] are the elements' storage
   bits. Only the state and output are tracked; an element is indexed in its region's own dtype. */
static C128__MAYBE_UNUSED void c128__track(c128__checker *c, const void *addr, int count, int elem_size, int is_write,
                                           const uint32_t *bits) {
  const char *a = (const char *)addr;
  for (int region = 0; region < C128__REGIONS; ++region) {
    if (!c->base[region] || a < c->base[region] || a >= c->base[region] + c->bytes[region]) continue;
    const int dtype = c->dtype[region];
    const int32_t block = c->block + 1;
    for (int i = 0; i < count; ++i) {
      const size_t offset = (size_t)(a - c->base[region]) + (size_t)i * (size_t)elem_size;
      if (offset >= c->bytes[region]) return;
      const size_t elem = offset / (size_t)c->elem_bytes[region];
      c128__shadow *s = c128__shadow_of(c, region, elem);
      if (!s) return;
      const int same_phase_other = s->wphase == c->phase && s->wtid != c->tid;
      if (!is_write) {
        if (s->wblock && (s->wblock != block || same_phase_other))
          c128__race(c, "read after write", region, elem, s->wblock, s->wtid);
        const int slot = !s->rblock[0] || (s->rblock[0] == block && s->rtid[0] == c->tid) ? 0 : 1;
        s->rblock[slot] = block;
        s->rtid[slot] = (int16_t)c->tid;
        s->rphase[slot] = (int8_t)c->phase;
        continue;
      }
      /* Lanes of one warp storing identical bits in one phase (the legacy epilogue) are fine. Two
         NaNs count as the same value: the host keeps NaN payloads, so lanes that replay a
         butterfly in different operand orders may end with different NaN bits. */
      const int both_nan = c128__widen(dtype, s->bits) != c128__widen(dtype, s->bits) &&
                           c128__widen(dtype, bits[i]) != c128__widen(dtype, bits[i]);
      const int same_warp_same_bits =
          s->wtid / C128_WARP_THREADS == c->tid / C128_WARP_THREADS && (s->bits == bits[i] || both_nan);
      if (s->wblock && (s->wblock != block || (same_phase_other && !same_warp_same_bits)))
        c128__race(c, "write after write", region, elem, s->wblock, s->wtid);
      for (int r = 0; r < 2; ++r)
        if (s->rblock[r] && (s->rblock[r] != block || (s->rphase[r] == c->phase && s->rtid[r] != c->tid)))
          c128__race(c, "write after read", region, elem, s->rblock[r], s->rtid[r]);
      s->wblock = block;
      s->wtid = (int16_t)c->tid;
      s->wphase = (int8_t)c->phase;
      s->bits = bits[i];
    }
    return;
  }
}

/* Bytes of the state's kv plane (the whole state when it is one plane). */
static size_t c128__state_bytes(const c128__params *p, c128__trait t) {
  return (size_t)(p->state_pages << p->more->block_shift) * (size_t)c128__plane_row_elems(p, t) *
         c128__dtype_bytes(t.buf);
}

/* Runs one launch on the CPU: for each block, each step of the block program for every thread,
   in thread order (DESIGN 7). */
static c128_status c128__run_host(c128__params p, c128__trait t, int kind, int64_t blocks, const c128_host_options *o) {
  c128__checker checker;
  memset(&checker, 0, sizeof checker);
  if (o && o->check_races) {
    const size_t state = c128__state_bytes(&p, t);
    checker.base[C128__STATE_REGION] = (const char *)p.state;
    checker.bytes[C128__STATE_REGION] = state;
    checker.base[C128__SCORE_REGION] = t.layout && p.more->split ? (const char *)p.more->score : NULL;
    checker.bytes[C128__SCORE_REGION] = state;
    checker.dtype[C128__STATE_REGION] = checker.dtype[C128__SCORE_REGION] = t.buf;
    checker.elem_bytes[C128__STATE_REGION] = checker.elem_bytes[C128__SCORE_REGION] = c128__dtype_bytes(t.buf);
    checker.base[C128__OUTPUT_REGION] = t.entry ? (const char *)p.more->cache : (const char *)p.output;
    checker.bytes[C128__OUTPUT_REGION] =
        t.entry ? (size_t)(p.more->cache_entries >> p.more->entry_shift) * (size_t)p.more->page_bytes
                : (size_t)p.output_rows * t.head_dim * c128__dtype_bytes(t.out);
    checker.dtype[C128__OUTPUT_REGION] = t.entry ? -1 : t.out;
    checker.elem_bytes[C128__OUTPUT_REGION] = t.entry ? 1 : c128__dtype_bytes(t.out);
    checker.limit = o->checker_limit_bytes;
    checker.message = o->message;
    checker.message_size = o->message_size;
    p.checker = &checker;
  }
  const int threads = kind == C128_PLAN_WRITE ? C128_WRITE_BLOCK_THREADS : C128_BLOCK_THREADS;
  const int reverse = o && o->reverse_blocks;
  /* A cluster's blocks (c128__cluster_blocks) run step by step together: step s of each, then
     step s + 1, as their cluster barrier before the entries' step orders them on the device;
     every other launch has clusters of one block. */
  const int cluster = kind == C128_PLAN_WRITE ? 1 : c128__cluster_blocks(t);
  c128__block_shared *sh = (c128__block_shared *)malloc(cluster * sizeof *sh);
  c128__block_ext *ext = (c128__block_ext *)malloc(cluster * sizeof *ext);
  c128__dest listed[C128__MAX_GROUP];
  c128__window own[C128_MAX_ENTRY_SPLITS];
  int count[C128_MAX_ENTRY_SPLITS], steps[C128_MAX_ENTRY_SPLITS];
  if (!sh || !ext) checker.out_of_memory = 1;
  for (int64_t i = 0; i < blocks && !checker.out_of_memory; i += cluster) {
    const int64_t first = reverse ? blocks - cluster - i : i;
    int last_step = 0;
    for (int n = 0; n < cluster; ++n) {            /* step 0: the list, and in decode the new rows */
      const int k = reverse ? cluster - 1 - n : n; /* the block's rank in its cluster */
      const int64_t block = first + k;
      checker.block = (int32_t)block;
      checker.phase = 0;
      if (kind == C128_PLAN_WRITE) {
        for (checker.tid = 0; checker.tid < threads; ++checker.tid) {
          const int64_t index = block * C128_WRITE_WARPS + checker.tid / C128_WARP_THREADS;
          if (index < p.num_plans) c128__write_row(&p, t, index, checker.tid % C128_WARP_THREADS);
        }
        steps[k] = 0;
        continue;
      }
      memset(&sh[k], 0xFF, sizeof sh[k]); /* NaN: a fold that reads an unwritten partial shows it */
      memset(&ext[k], 0xFF, sizeof ext[k]);
      const c128__jobs j = c128__block_jobs(&p, t, block);
      const uint32_t mask = c128__list_windows(&p, t, kind, &j, 0, &sh[k], &ext[k], listed, &own[k]);
      count[k] = c128__block_items(t, &j, mask), steps[k] = c128__block_steps(&p, t, count[k]);
      last_step = steps[k] > last_step ? steps[k] : last_step;
      for (checker.tid = 0; kind == C128_PLAN_DECODE && checker.tid < threads; ++checker.tid) {
        c128__decode_rows rows;
        c128__decode_fetch(&p, t, &j, checker.tid, &rows);
        c128__decode_writes(&p, t, &j, checker.tid, &rows, listed);
      }
    }
    for (int s = 1; s < last_step; ++s)
      for (int n = 0; n < cluster; ++n) {
        const int k = reverse ? cluster - 1 - n : n;
        if (s >= steps[k]) continue;
        checker.block = (int32_t)(first + k);
        checker.phase = s;
        for (checker.tid = 0; checker.tid < threads; ++checker.tid)
          c128__window_step(&p, t, kind, s, count[k], checker.tid, &sh[k], &ext[k], &own[k]);
      }
  }
  free(sh), free(ext);
  c128__checker_free(&checker);
  if (checker.out_of_memory) return C128_ERROR_OUT_OF_MEMORY;
  return checker.raced ? C128_ERROR_RACE_DETECTED : C128_SUCCESS;
}

/* >>launch: validation and launches --------------------------------------------------------- */
static int c128__misaligned(const void *ptr, size_t align) { return (uintptr_t)ptr % align != 0; }

/* [a, a + an) and [b, b + bn) overlap; an empty or NULL range overlaps nothing. */
static int c128__overlap(const void *a, uint64_t an, const void *b, uint64_t bn) {
  if (!a || !b || !an || !bn) return 0;
  const uint64_t x = (uint64_t)(uintptr_t)a, y = (uint64_t)(uintptr_t)b;
  return x < y ? y - x < an : x - y < bn;
}

/* The arguments every launch and checker shares, in the order both test them. */
static c128_status c128__check_common(int32_t head_dim, c128_dtype sd, c128_dtype id, c128_dtype od, c128__trait t,
                                      int64_t state_pages, c128_shared_layout l) {
  if (head_dim != t.head_dim || (int)sd != t.buf || (int)id != t.in || (int)od != t.out)
    return C128_ERROR_INSTANCE_MISMATCH;
  if (state_pages < 0) return C128_ERROR_NEGATIVE_SIZE;
  if (state_pages > INT64_MAX / ((int64_t)C128_PAGE_ELEMS(t.head_dim) * 4)) return C128_ERROR_STATE_TOO_LARGE;
  const int32_t size = l.size == 0 ? 1 : l.size;
  if (size < 1 || l.rank < 0 || l.rank >= size || l.pages_per_rank < 0) return C128_ERROR_INVALID_LAYOUT;
  return C128_SUCCESS;
}

/* The extents a launch may touch, for the aliasing rule: written tensors (state, output) overlap
   nothing else. */
typedef struct c128__extent {
  const void *ptr;
  uint64_t bytes;
} c128__extent;

/* A launch's state layout and output, checked once for the launch and the checker alike. */
typedef struct c128__shape_of {
  int layout;      /* a state layout other than the default */
  int block_shift; /* log2 of the block rows */
  int entry_shift; /* log2 of the entries per page (cache entries) */
} c128__shape_of;

C128__FN int c128__log2_exact(int64_t v) { /* log2 of a power of two, else -1 */
  int k = 0;
  while (k < 62 && ((int64_t)1 << k) < v) ++k;
  return v > 0 && ((int64_t)1 << k) == v ? k : -1;
}

static c128_status c128__check_state_layout(const c128_state_layout *l, c128_shared_layout shared, int64_t state_pages,
                                            c128__trait t, c128__shape_of *shape) {
  const int32_t rows = l->block_rows ? l->block_rows : C128_WINDOW;
  shape->block_shift = c128__log2_exact(rows);
  if (shape->block_shift < 3 || shape->block_shift > 8) return C128_ERROR_INVALID_STATE_LAYOUT;
  shape->layout = rows != C128_WINDOW || l->score_biased || l->score_plane || l->block_table || l->score_block_table;
  if (!shape->layout) return C128_SUCCESS;
  if (shared.size > 1 || (l->score_block_table && (!l->block_table || !l->score_plane)))
    return C128_ERROR_INVALID_STATE_LAYOUT; /* sharding is today's layout's; a score table needs its plane */
  if (state_pages > INT64_MAX / ((int64_t)rows * C128_ROW_ELEMS(t.head_dim) * 4)) return C128_ERROR_STATE_TOO_LARGE;
  if (!l->block_table) return C128_SUCCESS;
  if (l->table_rows < 0 || l->table_stride < 0) return C128_ERROR_NEGATIVE_SIZE;
  if (l->row_shift < C128__LOG2_WINDOW || l->row_shift > 30 || l->table_rows > ((int64_t)1 << (31 - l->row_shift)) ||
      (l->table_rows > 0 && l->table_stride > INT64_MAX / 4 / l->table_rows))
    return C128_ERROR_INVALID_STATE_LAYOUT; /* logical rows are int32; the tables' bytes fit int64 */
  if (c128__misaligned(l->block_table, sizeof(int32_t)) || c128__misaligned(l->score_block_table, sizeof(int32_t)))
    return C128_ERROR_MISALIGNED;
  return C128_SUCCESS;
}

/* Bytes of one cache entry (with its scale bytes) in a page of the kind's layout. */
C128__FN int64_t c128__entry_bytes(c128__trait t, int kind) {
  return kind == C128_OUTPUT_DSV4_FP8 ? t.head_dim + C128_ROPE_DIMS + C128_NUM_SPLIT(t.head_dim) : 2 * t.head_dim;
}

/* The workspace of a cache-entry launch of `jobs`: the counters, then (16-byte aligned) the pooled rows. */
C128__FN int64_t c128__pooled_offset(int64_t jobs) { return (jobs * (int64_t)sizeof(uint32_t) + 15) & ~(int64_t)15; }

C128_API int64_t c128_entry_workspace_bytes(int64_t jobs, int32_t head_dim) {
  if (jobs < 0 || head_dim < C128_TILE_DIM || head_dim > C128_MAX_HEAD_DIM || head_dim % C128_TILE_DIM != 0) return -1;
  const int64_t row = (int64_t)head_dim * (int64_t)sizeof(float) + (int64_t)sizeof(uint32_t);
  return jobs > (INT64_MAX - 16) / row ? -1
                                       : c128__pooled_offset(jobs) + jobs * (int64_t)head_dim * (int64_t)sizeof(float);
}

static c128_status c128__check_entry(const c128_entry_args *e, c128__trait t, c128__shape_of *shape) {
  shape->entry_shift = 0;
  if (e->kind == C128_OUTPUT_POOLED) return C128_SUCCESS;
  if (e->kind != C128_OUTPUT_DSV4_FP8 && e->kind != C128_OUTPUT_DSV4_BF16) return C128_ERROR_INVALID_ENTRY;
  if (C128_NUM_SPLIT(t.head_dim) > C128_MAX_ENTRY_SPLITS) return C128_ERROR_INVALID_ENTRY; /* a warp a split */
  if (e->cache_pages < 0 || e->rope_positions < 0 || e->page_bytes < 0 || e->entries_per_page < 0)
    return C128_ERROR_NEGATIVE_SIZE;
  shape->entry_shift = c128__log2_exact(e->entries_per_page);
  if (shape->entry_shift < 0 || shape->entry_shift > 30 || e->page_bytes % 4 != 0 ||
      e->page_bytes < c128__entry_bytes(t, e->kind) * e->entries_per_page ||
      (e->cache_pages > 0 && e->page_bytes > INT64_MAX / e->cache_pages) ||
      e->cache_pages > (INT64_MAX >> shape->entry_shift) ||
      e->rope_positions > INT64_MAX / (C128_ROPE_DIMS * (int64_t)sizeof(float)) || !(e->norm_eps >= 0.0f) ||
      !(e->norm_eps <= 3.402823466e38f))
    return C128_ERROR_INVALID_ENTRY;
  return C128_SUCCESS;
}

/* Pointers and extents of a launch. Every tensor a kernel writes (state, score plane, output or
   cache) overlaps nothing else of the call; read-only ones (input, ape, plans, tables, index,
   gamma, RoPE table) may overlap each other. A tensor the call never reads goes unchecked: the
   output (or cache, gamma and RoPE table) when no window can be written, and ape when in
   addition no biased score is stored (`stores`: the call persists state rows). */
static c128_status c128__check_tensors(c128__trait t, const c128__shape_of *shape, void *state, int64_t state_pages,
                                       const c128_state_layout *lay, const void *input, int64_t input_rows,
                                       const float *ape, void *output, int64_t output_rows, const int64_t *index,
                                       int64_t index_rows, const c128_entry_args *e, int64_t jobs,
                                       const c128__extent *plans, int num_plans, int stores) {
  const int entry = e->kind != C128_OUTPUT_POOLED;
  const int need_output = entry ? e->cache_pages > 0 : output_rows > 0; /* else no window can be written */
  const int need_ape = need_output || (shape->layout && lay->score_biased && stores); /* biased writes add ape */
  if (!state || !input || (need_ape && !ape) ||
      (need_output && (entry ? !e->cache || !e->norm_weight || !e->rope_table || !e->workspace : !output)))
    return C128_ERROR_NULL_POINTER;
  /* Vector accesses: a pair of elements is one access; outputs are stored singly. */
  if (c128__misaligned(state, 2 * (size_t)c128__dtype_bytes(t.buf)) ||
      c128__misaligned(lay->score_plane, 2 * (size_t)c128__dtype_bytes(t.buf)) ||
      c128__misaligned(input, 2 * (size_t)c128__dtype_bytes(t.in)) ||
      (need_ape && c128__misaligned(ape, 2 * sizeof(float))) ||
      (need_output && !entry && c128__misaligned(output, (size_t)c128__dtype_bytes(t.out))) ||
      (need_output && entry &&
       (c128__misaligned(e->cache, 4) || c128__misaligned(e->norm_weight, 4) || c128__misaligned(e->rope_table, 8) ||
        c128__misaligned(e->workspace, 16))))
    return C128_ERROR_MISALIGNED;
  const int64_t workspace = need_output && entry ? c128_entry_workspace_bytes(jobs, t.head_dim) : 0;
  if (workspace != 0 && (workspace < 0 || e->workspace_bytes < workspace)) return C128_ERROR_WORKSPACE_TOO_SMALL;
  const int split = shape->layout && lay->score_plane;
  const uint64_t plane = (uint64_t)state_pages << shape->block_shift;
  const uint64_t plane_row = split ? (uint64_t)t.head_dim : (uint64_t)C128_ROW_ELEMS(t.head_dim);
  const uint64_t table = lay->block_table ? (uint64_t)lay->table_rows * (uint64_t)lay->table_stride * 4 : 0;
  const c128__extent written[4] = {{state, plane * plane_row * c128__dtype_bytes(t.buf)},
                                   {split ? lay->score_plane : NULL, plane * plane_row * c128__dtype_bytes(t.buf)},
                                   {!need_output ? NULL
                                    : entry      ? e->cache
                                                 : output,
                                    entry ? (uint64_t)e->cache_pages * (uint64_t)e->page_bytes
                                          : (uint64_t)output_rows * t.head_dim * c128__dtype_bytes(t.out)},
                                   {workspace ? e->workspace : NULL, (uint64_t)workspace}};
  const c128__extent read[8] = {{input, (uint64_t)input_rows * C128_ROW_ELEMS(t.head_dim) * c128__dtype_bytes(t.in)},
                                {need_ape ? ape : NULL, (uint64_t)C128_WINDOW * t.head_dim * sizeof(float)},
                                {written[2].ptr, written[2].bytes},
                                {shape->layout ? lay->block_table : NULL, table},
                                {shape->layout ? lay->score_block_table : NULL, table},
                                {index, (uint64_t)index_rows * sizeof(int64_t)},
                                {entry ? e->norm_weight : NULL, (uint64_t)t.head_dim * sizeof(float)},
                                {entry ? e->rope_table : NULL, (uint64_t)e->rope_positions * C128_ROPE_DIMS * 4}};
  for (int w = 0; w < 4; ++w) {
    for (int r = 0; r < 8; ++r) /* the output (read[2]) against the state planes and workspace, not itself */
      if ((r != 2 || w != 2) && c128__overlap(written[w].ptr, written[w].bytes, read[r].ptr, read[r].bytes))
        return C128_ERROR_ALIASED;
    for (int k = 0; k < num_plans; ++k)
      if (c128__overlap(written[w].ptr, written[w].bytes, plans[k].ptr, plans[k].bytes)) return C128_ERROR_ALIASED;
  }
  if (c128__overlap(written[0].ptr, written[0].bytes, written[1].ptr, written[1].bytes) ||
      c128__overlap(written[0].ptr, written[0].bytes, written[3].ptr, written[3].bytes) ||
      c128__overlap(written[1].ptr, written[1].bytes, written[3].ptr, written[3].bytes))
    return C128_ERROR_ALIASED;
  return C128_SUCCESS;
}

/* The decode arguments, as the launch and the checker see them (`tensors`: the launch, which
   also checks the tensor pointers; the checker reads only the plans, tables and index). */
static c128_status c128__validate_decode(const c128_decode_args *a, c128__trait t, int tensors, c128__shape_of *shape) {
  c128_status st =
      c128__check_common(a->head_dim, a->state_dtype, a->input_dtype, a->output_dtype, t, a->state_pages, a->layout);
  if (st == C128_SUCCESS) st = c128__check_state_layout(&a->state_layout, a->layout, a->state_pages, t, shape);
  if (st == C128_SUCCESS) st = c128__check_entry(&a->entry, t, shape);
  if (st != C128_SUCCESS) return st;
  if (a->batch < 0 || a->output_rows < 0) return C128_ERROR_NEGATIVE_SIZE;
  if (a->batch > INT32_MAX / C128_NUM_SPLIT(t.head_dim)) return C128_ERROR_TOO_MANY_PLANS;
  if (a->requests_per_block < 0 || a->requests_per_block > C128_MAX_DECODE_GROUP) return C128_ERROR_INVALID_GROUP;
  if (a->pdl < 0 || a->pdl > C128_PDL_PLANS_READY) return C128_ERROR_INVALID_PDL;
  if (a->batch == 0) return C128_SUCCESS;
  const int compact = a->entry.kind == C128_OUTPUT_POOLED && !a->output_index;
  if (compact && a->output_rows < a->batch) return C128_ERROR_OUTPUT_TOO_SMALL;
  if (!a->plans) return C128_ERROR_NULL_POINTER;
  if (c128__misaligned(a->plans, sizeof(c128_decode_plan)) || c128__misaligned(a->output_index, sizeof(int64_t)))
    return C128_ERROR_MISALIGNED;
  if (!tensors) return C128_SUCCESS;
  const c128__extent plans = {a->plans, (uint64_t)a->batch * sizeof(c128_decode_plan)};
  /* The kernel reads input rows below batch only, and without an index writes output rows below it. */
  return c128__check_tensors(t, shape, a->state, a->state_pages, &a->state_layout, a->input, a->batch, a->ape,
                             a->output, compact ? a->batch : a->output_rows, a->output_index, a->batch, &a->entry,
                             a->batch, &plans, 1, 1);
}

static c128_status c128__validate_prefill(const c128_prefill_args *a, c128__trait t, int tensors,
                                          c128__shape_of *shape) {
  c128_status st =
      c128__check_common(a->head_dim, a->state_dtype, a->input_dtype, a->output_dtype, t, a->state_pages, a->layout);
  if (st == C128_SUCCESS) st = c128__check_state_layout(&a->state_layout, a->layout, a->state_pages, t, shape);
  if (st == C128_SUCCESS) st = c128__check_entry(&a->entry, t, shape);
  if (st != C128_SUCCESS) return st;
  if (a->input_rows < 0 || a->output_rows < 0 || a->num_compress < 0 || a->num_write < 0)
    return C128_ERROR_NEGATIVE_SIZE;
  if (a->input_rows > C128_MAX_PREFILL_ROWS) return C128_ERROR_TOO_MANY_ROWS;
  if (a->num_compress > C128_MAX_PREFILL_ROWS || a->num_write > C128_MAX_PREFILL_ROWS) return C128_ERROR_TOO_MANY_PLANS;
  if (a->windows_per_block < 0 || a->windows_per_block > C128_MAX_PREFILL_GROUP) return C128_ERROR_INVALID_GROUP;
  if (a->pdl < 0 || a->pdl > C128_PDL_PLANS_READY) return C128_ERROR_INVALID_PDL;
  if (a->num_compress == 0 && a->num_write == 0) return C128_SUCCESS;
  const int compact = a->entry.kind == C128_OUTPUT_POOLED && !a->output_index;
  if (compact && a->output_rows < a->num_compress) return C128_ERROR_OUTPUT_TOO_SMALL;
  if (a->write_slots && a->write_plans) return C128_ERROR_INVALID_PLAN;             /* one source of writes */
  if (a->write_slots && a->layout.size > 1) return C128_ERROR_INVALID_STATE_LAYOUT; /* slots are physical rows */
  if ((a->num_compress && !a->compress_plans) || (a->num_write && !a->write_plans && !a->write_slots) ||
      (a->write_slots && !a->write_positions))
    return C128_ERROR_NULL_POINTER;
  if (c128__misaligned(a->compress_plans, sizeof(c128_compress_plan)) ||
      c128__misaligned(a->write_plans, sizeof(c128_write_plan)) || c128__misaligned(a->output_index, sizeof(int64_t)) ||
      c128__misaligned(a->write_slots, sizeof(int64_t)) || c128__misaligned(a->write_positions, sizeof(int64_t)))
    return C128_ERROR_MISALIGNED;
  if (!tensors) return C128_SUCCESS;
  const uint64_t slot_bytes = a->write_slots ? (uint64_t)a->num_write * sizeof(int64_t) : 0;
  const c128__extent plans[4] = {{a->compress_plans, (uint64_t)a->num_compress * sizeof(c128_compress_plan)},
                                 {a->write_plans, (uint64_t)a->num_write * sizeof(c128_write_plan)},
                                 {a->write_slots, slot_bytes},
                                 {a->write_positions, slot_bytes}};
  /* Compress plan k writes output row k without an index: rows below num_compress only. */
  return c128__check_tensors(t, shape, a->state, a->state_pages, &a->state_layout, a->input, a->input_rows, a->ape,
                             a->output, compact ? a->num_compress : a->output_rows, a->output_index, a->input_rows,
                             &a->entry, a->num_compress, plans, 4, a->num_write > 0);
}

static c128__params c128__base_params(void *state, int64_t state_pages, const void *input, int64_t input_rows,
                                      const float *ape, void *output, int64_t output_rows, c128_shared_layout layout,
                                      int32_t pdl, const c128_state_layout *lay, const int64_t *index,
                                      const c128_entry_args *e, const c128__shape_of *shape, c128__more *m) {
  c128__params p;
  memset(&p, 0, sizeof p);
  memset(m, 0, sizeof *m);
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
  p.pdl = pdl;
  p.more = m; /* the host runner's; a launch passes *m as the kernel's second parameter */
  m->score = lay->score_plane ? lay->score_plane : state;
  m->table = lay->block_table;
  m->score_table = lay->score_block_table ? lay->score_block_table : lay->block_table;
  m->table_rows = lay->table_rows, m->table_stride = lay->table_stride;
  m->block_shift = shape->block_shift, m->row_shift = lay->row_shift;
  m->split = lay->score_plane != NULL, m->biased = lay->score_biased != 0;
  m->out_index = index;
  m->entry_kind = e->kind, m->entry_shift = shape->entry_shift;
  m->gamma = e->norm_weight, m->rope = e->rope_table, m->eps = e->norm_eps;
  m->cache = (char *)e->cache;
  m->cache_entries = e->kind == C128_OUTPUT_POOLED ? 0 : e->cache_pages << shape->entry_shift;
  m->rope_positions = e->rope_positions, m->page_bytes = e->page_bytes;
  return p;
}

/* A cache-entry launch's workspace, for its `jobs`. */
static void c128__set_workspace(c128__more *m, const c128_entry_args *e, int64_t jobs) {
  m->arrivals = (uint32_t *)e->workspace;
  m->pooled = e->workspace ? (float *)((char *)e->workspace + c128__pooled_offset(jobs)) : NULL;
}

static c128__params c128__decode_params(const c128_decode_args *a, const c128__shape_of *shape, c128__more *m) {
  c128__params p = c128__base_params(a->state, a->state_pages, a->input, a->batch, a->ape, a->output, a->output_rows,
                                     a->layout, a->pdl, &a->state_layout, a->output_index, &a->entry, shape, m);
  p.plans = a->plans;
  p.num_plans = a->batch;
  c128__set_workspace(m, &a->entry, a->batch);
  return p;
}

static c128__params c128__prefill_params(const c128_prefill_args *a, int kind, const c128__shape_of *shape,
                                         c128__more *m) {
  c128__params p =
      c128__base_params(a->state, a->state_pages, a->input, a->input_rows, a->ape, a->output, a->output_rows, a->layout,
                        a->pdl, &a->state_layout, a->output_index, &a->entry, shape, m);
  p.plans = kind == C128_PLAN_COMPRESS ? (const void *)a->compress_plans : (const void *)a->write_plans;
  p.num_plans = kind == C128_PLAN_COMPRESS ? a->num_compress : a->num_write;
  c128__set_workspace(m, &a->entry, a->num_compress);
  if (kind == C128_PLAN_WRITE) m->slots = a->write_slots, m->positions = a->write_positions;
  return p;
}

/* The write kernel stores no output: its variant is the state layout's alone, and the kernels of
   any layout's where per-token slots name the rows. */
static int c128__write_variant(const c128_prefill_args *a, const c128__shape_of *shape) {
  return shape->layout || a->write_slots != NULL;
}

static int64_t c128__write_blocks(int64_t num_write) { /* a warp per write plan */
  return (num_write + C128_WRITE_WARPS - 1) / C128_WRITE_WARPS;
}

/* `cluster`: blocks a cluster (1: none; blocks is a multiple of it). */
static c128_status c128__launch(const void *kernel, int64_t blocks, int threads, int32_t pdl, cudaStream_t stream,
                                const void *params /* the kernel's by-value argument */, const c128__more *more,
                                int cluster) {
  cudaLaunchConfig_t config = {};
  cudaLaunchAttribute attributes[2] = {};
  attributes[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attributes[0].val.programmaticStreamSerializationAllowed = pdl != 0;
  attributes[1].id = cudaLaunchAttributeClusterDimension;
  attributes[1].val.clusterDim.x = (unsigned)cluster, attributes[1].val.clusterDim.y = 1;
  attributes[1].val.clusterDim.z = 1;
  config.gridDim = dim3((unsigned)blocks, 1, 1);
  config.blockDim = dim3((unsigned)threads, 1, 1);
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = cluster > 1 ? 2 : 1;
  void *args[2] = {(void *)params, (void *)more}; /* kernels of a layout or with entries take the second */
  return cudaLaunchKernelExC(&config, kernel, args) == cudaSuccess ? C128_SUCCESS : C128_ERROR_LAUNCH_FAILED;
}

/* A launch's kernel among an instance's variants (c128__trait): its index in the tables the
   typed entry points pass. */
static int c128__variant(const c128__shape_of *shape, const c128_entry_args *e, const int64_t *index) {
  const int entry = e->kind != C128_OUTPUT_POOLED;
  return (shape->layout || (!entry && index)) + 2 * entry; /* entry kernels read the index in any layout */
}

static c128_status c128__launch_blocks(const void *kernel, int64_t blocks, const c128__params *p, c128__trait t,
                                       int kind, int32_t pdl, cudaStream_t stream, const c128_host_options *o) {
  if (!kernel) return c128__run_host(*p, t, kind, blocks, o);
  return c128__launch(kernel, blocks, C128_BLOCK_THREADS, pdl, stream, p, p->more, c128__cluster_blocks(t));
}

/* A block compresses its windows one after another, so with every window present a group of g
   costs waves(units) * g window-times, a unit being `per_group` blocks (a group's splits, or
   their cluster) and a wave the units the device runs at once; the largest g of least cost wins.
   Launches refuse more than INT32_MAX jobs, so larger counts are costed as that many (no
   overflow). */
/* Window steps a block of group g takes for `jobs` jobs of `per_group` blocks each, `wave` blocks
   (or clusters) at once: waves times jobs a block. */
static int64_t c128__group_cost(int64_t jobs, int64_t per_group, int64_t wave, int32_t g) {
  const int64_t units = (jobs / g + (jobs % g != 0)) * per_group;
  return (units / wave + (units % wave != 0)) * g;
}
static int32_t c128__least_cost_group(int64_t jobs, int64_t per_group, int64_t wave, int32_t max_group) {
  if (jobs <= 0) return 1;
  if (jobs > INT32_MAX) jobs = INT32_MAX;
  int32_t best = 1;
  int64_t best_cost = INT64_MAX;
  for (int32_t g = 1; g <= max_group; ++g) {
    const int64_t cost = c128__group_cost(jobs, per_group, wave, g);
    if (cost <= best_cost) best = g, best_cost = cost;
  }
  return best;
}

/* The automatic group: a wave is two blocks an SM. */
static int32_t c128__group_size(int64_t jobs, int32_t head_dim, int32_t sm_count, int32_t max_group) {
  const int64_t splits = head_dim >= C128_TILE_DIM && head_dim <= C128_MAX_HEAD_DIM ? C128_NUM_SPLIT(head_dim) : 1;
  return c128__least_cost_group(jobs, splits, (int64_t)C128_BLOCKS_PER_SM * (sm_count > 0 ? sm_count : 1), max_group);
}

C128_API int32_t c128_decode_group_size(int64_t batch, int32_t head_dim, int32_t sm_count) {
  return c128__group_size(batch, head_dim, sm_count, C128_MAX_DECODE_GROUP);
}
C128_API int32_t c128_prefill_group_size(int64_t num_compress, int32_t head_dim, int32_t sm_count) {
  return c128__group_size(num_compress, head_dim, sm_count, C128_MAX_PREFILL_GROUP);
}

/* Cache entries (DESIGN 11.3): a group of at least a window's splits takes whole windows, group /
   splits jobs a block with every split each, and writes each entry from the block's own shared
   memory, where `allowed` (a decode's automatic group is not); other launches leave a window's
   splits to as many blocks, which meet in the workspace. */
static void c128__take_whole_windows(c128__params *p, c128__more *m, c128__trait t, int allowed) {
  const int32_t splits = C128_NUM_SPLIT(t.head_dim);
  m->whole = allowed && t.entry && p->group >= splits;
  if (m->whole) p->group /= splits;
}

static int64_t c128__grouped_blocks(int64_t jobs, c128__trait t, const c128__params *p) {
  return (jobs + p->group - 1) / p->group * (t.entry && p->more->whole ? 1 : C128_NUM_SPLIT(t.head_dim));
}

/* A launch's group: the caller's, or the automatic one, which needs the device's SM count (kept
   in *sm_count for the cluster costing; 0 with the caller's group); the host runner takes an
   H200's 132 SMs: results do not depend on the grouping. */
#define C128__HOST_SM_COUNT 132
static c128_status c128__pick_group(int32_t requested, int64_t jobs, c128__trait t, int32_t max_group,
                                    const void *kernel, int32_t *group, int *sm_count) {
  int device = 0;
  *group = requested, *sm_count = 0;
  if (requested > 0) return C128_SUCCESS;
  *sm_count = C128__HOST_SM_COUNT;
  if (kernel && (cudaGetDevice(&device) != cudaSuccess ||
                 cudaDeviceGetAttribute(sm_count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess))
    return C128_ERROR_LAUNCH_FAILED;
  *group = c128__group_size(jobs, t.head_dim, *sm_count, max_group);
  return C128_SUCCESS;
}

/* The trait of a launch's variant; decode's fifth and sixth kernels are today's layout for one
   request a block, pooled and with cache entries, and its seventh (compress: fifth) today's
   layout with cache entries in clusters. */
#define C128__SINGLE_VARIANT 4
#define C128__CLUSTER_DECODE_VARIANT 6
#define C128__CLUSTER_COMPRESS_VARIANT 4
static c128__trait c128__variant_trait(c128__trait t, int variant) {
  t.layout = variant & 1, t.entry = variant >> 1;
  return t;
}

/* The clusters of a window's splits that the cluster kernel `kernel` runs at once on the current
   device, or 0 where it runs none: a device without cluster launches (below sm_90), or machine
   code built below sm_90 (a PTX-only build for an older architecture, JIT-compiled on a newer
   device, has no puts or cluster barriers in it). Asked of the runtime once a kernel and device
   (it is not a cheap call): a slot holds a key in its high bits and the answer in its low 16
   (0xFFFF: none), in one word, so that two threads filling one slot leave one answer whole (a
   colliding key costs a grouping or a form, never a result). */
#define C128__WAVE_SLOTS 64
#define C128__WAVE_NONE 0xFFFFu
static uint64_t c128__wave_cache[C128__WAVE_SLOTS];
static int64_t c128__cluster_wave(const void *kernel, int splits) {
  int device = 0, launches = 0, clusters = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  const uint64_t key =
      ((uint64_t)(uintptr_t)kernel * 0x9E3779B97F4A7C15ull ^ (uint64_t)(device + 1) * 0xC2B2AE3D27D4EB4Full) &
      ~(uint64_t)0xFFFF;
  uint64_t *slot = &c128__wave_cache[(key >> 16) % C128__WAVE_SLOTS];
  const uint64_t seen = __atomic_load_n(slot, __ATOMIC_RELAXED);
  if ((seen & ~(uint64_t)0xFFFF) == key && (seen & 0xFFFF))
    return (seen & 0xFFFF) == C128__WAVE_NONE ? 0 : (int64_t)(seen & 0xFFFF);
  cudaFuncAttributes built;
  cudaLaunchConfig_t config = {};
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = (unsigned)splits, attribute.val.clusterDim.y = attribute.val.clusterDim.z = 1;
  config.gridDim = dim3((unsigned)splits, 1, 1);
  config.blockDim = dim3(C128_BLOCK_THREADS, 1, 1);
  config.attrs = &attribute;
  config.numAttrs = 1;
  if (cudaDeviceGetAttribute(&launches, cudaDevAttrClusterLaunch, device) != cudaSuccess || !launches ||
      cudaFuncGetAttributes(&built, kernel) != cudaSuccess || built.binaryVersion < 90 ||
      cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) != cudaSuccess || clusters <= 0)
    clusters = 0;
  if (clusters >= (int)C128__WAVE_NONE) clusters = (int)C128__WAVE_NONE - 1;
  __atomic_store_n(slot, key | (uint64_t)(clusters ? (unsigned)clusters : C128__WAVE_NONE), __ATOMIC_RELAXED);
  return clusters;
}

/* Whether a launch with cache entries on today's layout (variant 2) whose blocks take fewer jobs
   than a window has splits makes each group's splits a cluster (DESIGN 11.3): where the
   instance's cluster kernel (`cluster_kernel`; NULL: the host runner, which runs clusters) does. */
static int c128__entries_in_clusters(int variant, int32_t group, c128__trait t, const void *cluster_kernel) {
  if (variant != 2 || group >= C128_NUM_SPLIT(t.head_dim)) return 0;
  return !cluster_kernel || c128__cluster_wave(cluster_kernel, C128_NUM_SPLIT(t.head_dim)) > 0;
}

/* An automatic group in clusters: costed in the clusters the device runs at once (fewer than its
   blocks / splits: a cluster's blocks share a GPC), below a window's splits. The host runner
   (kernel NULL) keeps its group: results do not depend on it. Returns whether the clusters cost
   at most a quarter more window steps than the automatic group `*group` had without them, whose
   splits meet in the workspace (always, for a caller's group or the host runner). A decode heeds
   it: on an H100, boundary decode B = 32 took 11.60 us in clusters (2 requests a block, 32
   clusters not running at once) against 10.05 at one request a block in the workspace; B = 8
   (clusters as cheap) 6.08 against 6.88, B = 128 (a quarter dearer) 25.78 against 27.58.
   `sm_count` is the one c128__pick_group found. */
static int c128__cluster_group(int32_t requested, int64_t jobs, c128__trait t, const void *kernel, int sm_count,
                               int32_t *group) {
  const int splits = C128_NUM_SPLIT(t.head_dim);
  const int64_t wave = requested > 0 || !kernel ? 0 : c128__cluster_wave(kernel, splits);
  if (wave <= 0 || sm_count <= 0) return 1;
  const int32_t pooled = *group;
  *group = c128__least_cost_group(jobs, 1, wave, splits - 1);
  const int64_t without = c128__group_cost(jobs, splits, (int64_t)C128_BLOCKS_PER_SM * sm_count, pooled);
  return 4 * c128__group_cost(jobs, 1, wave, *group) <= 5 * without;
}

/* The rest of a decode launch's form once its group is known: a decode with entries takes whole
   windows only in the caller's group (`requested`), since a step's few boundary requests would
   each fold their splits one after another in one block (DESIGN 11.3); one request a block on
   today's layout runs the one-request kernel (DESIGN 6.2), pooled, or with entries where the
   device runs clusters (`clusters`: c128__entries_in_clusters), as do, in the grouped program,
   entries at other groups below the splits. */
static void c128__decode_form(int32_t requested, int variant, int clusters, c128__params *p, c128__more *m,
                              c128__trait *t) {
  c128__take_whole_windows(p, m, *t, requested > 0);
  t->single = p->group == 1 && !m->whole && (variant == 0 || (variant == 2 && clusters)) &&
              C128_DECODE_BLOCKS == C128_DECODE_BLOCKS_SINGLE;
  t->cluster = variant == 2 && clusters && !m->whole && !t->single;
}

/* One decode launch on the GPU (kernels: the instance's decode kernel of each variant) or the
   host runner (kernels NULL; options). */
static c128_status c128__decode_run(const c128_decode_args *a, c128__trait t, const void *const *kernels,
                                    cudaStream_t stream, const c128_host_options *o) {
  if (!a) return C128_ERROR_NULL_POINTER;
  c128__shape_of shape;
  c128_status st = c128__validate_decode(a, t, 1, &shape);
  if (st != C128_SUCCESS || a->batch == 0) return st;
  const int variant = c128__variant(&shape, &a->entry, a->output_index);
  c128__more more;
  c128__params p = c128__decode_params(a, &shape, &more);
  c128__trait tv = c128__variant_trait(t, variant);
  const void *kernel = kernels ? kernels[variant] : NULL;
  int sm_count = 0;
  st = c128__pick_group(a->requests_per_block, a->batch, tv, C128_MAX_DECODE_GROUP, kernel, &p.group, &sm_count);
  if (st != C128_SUCCESS) return st;
  const void *cluster_kernel = kernels ? kernels[C128__CLUSTER_DECODE_VARIANT] : NULL;
  const int32_t pooled_group = p.group;
  int clusters = c128__entries_in_clusters(variant, p.group, tv, cluster_kernel);
  if (clusters && !c128__cluster_group(a->requests_per_block, a->batch, tv, cluster_kernel, sm_count, &p.group))
    clusters = 0, p.group = pooled_group; /* the workspace at the automatic group */
  c128__decode_form(a->requests_per_block, variant, clusters, &p, &more, &tv);
  if (tv.single) kernel = kernels ? kernels[C128__SINGLE_VARIANT + tv.entry] : NULL;
  if (tv.cluster) kernel = kernels ? kernels[C128__CLUSTER_DECODE_VARIANT] : NULL;
  return c128__launch_blocks(kernel, c128__grouped_blocks(a->batch, tv, &p), &p, tv, C128_PLAN_DECODE, a->pdl, stream,
                             o);
}

/* Compress first, write second, on one stream: a batch's writes may land on slots its own
   compress events still read (DESIGN 6.3). */
static c128_status c128__prefill_run(const c128_prefill_args *a, c128__trait t, const void *const *compress_kernels,
                                     const void *const *write_kernels, cudaStream_t stream,
                                     const c128_host_options *o) {
  if (!a) return C128_ERROR_NULL_POINTER;
  c128__shape_of shape;
  c128_status st = c128__validate_prefill(a, t, 1, &shape);
  if (st != C128_SUCCESS) return st;
  const int variant = c128__variant(&shape, &a->entry, a->output_index);
  if (a->num_compress > 0) {
    c128__more more;
    c128__params p = c128__prefill_params(a, C128_PLAN_COMPRESS, &shape, &more);
    c128__trait tv = c128__variant_trait(t, variant);
    const void *kernel = compress_kernels ? compress_kernels[variant] : NULL;
    int sm_count = 0;
    st = c128__pick_group(a->windows_per_block, a->num_compress, tv, C128_MAX_PREFILL_GROUP, kernel, &p.group,
                          &sm_count);
    if (st != C128_SUCCESS) return st;
    c128__take_whole_windows(&p, &more, tv, 1);
    const void *cluster_kernel = compress_kernels ? compress_kernels[C128__CLUSTER_COMPRESS_VARIANT] : NULL;
    if (!more.whole && c128__entries_in_clusters(variant, p.group, tv, cluster_kernel)) { /* DESIGN 11.3 */
      tv.cluster = 1;
      kernel = cluster_kernel;
      /* a compress keeps its clusters whatever they cost against the workspace: measured faster
         from 8K to 32K tokens (BENCHMARKS.md, cache entries in clusters) */
      (void)c128__cluster_group(a->windows_per_block, a->num_compress, tv, kernel, sm_count, &p.group);
    }
    st = c128__launch_blocks(kernel, c128__grouped_blocks(a->num_compress, tv, &p), &p, tv, C128_PLAN_COMPRESS, a->pdl,
                             stream, o);
  }
  if (st == C128_SUCCESS && a->num_write > 0) {
    c128__more more;
    const c128__params p = c128__prefill_params(a, C128_PLAN_WRITE, &shape, &more);
    const int64_t blocks = c128__write_blocks(a->num_write);
    const int writes = c128__write_variant(a, &shape);
    st = write_kernels
             ? c128__launch(write_kernels[writes], blocks, C128_WRITE_BLOCK_THREADS, a->pdl, stream, &p, &more, 1)
             : c128__run_host(p, c128__variant_trait(t, writes), C128_PLAN_WRITE, blocks, o);
  }
  return st;
}

/* >>dispatch ------------------------------------------------------------------------------ */
/* The typed entry points, with their instance's kernels of every variant (c128__variant). */
#define C128__ENTRY_POINTS(name, D, state, input, output)                                                              \
  C128_API c128_status c128_decode_##name(const c128_decode_args *a, cudaStream_t stream) {                            \
    const c128__trait t = C128__TRAIT(D, state, input, output, 0, 0);                                                  \
    const void *const kernels[C128__CLUSTER_DECODE_VARIANT + 1] = {                                                    \
        (const void *)c128__decode_kernel_##name,                                                                      \
        (const void *)c128__decode_kernel_##name##_layout,                                                             \
        (const void *)c128__decode_kernel_##name##_entry,                                                              \
        (const void *)c128__decode_kernel_##name##_layout_entry,                                                       \
        (const void *)c128__decode_kernel_##name##_single,                                                             \
        (const void *)c128__decode_kernel_##name##_single_entry,                                                       \
        (const void *)c128__decode_kernel_##name##_cluster_entry};                                                     \
    return c128__decode_run(a, t, kernels, stream, NULL);                                                              \
  }                                                                                                                    \
  C128_API c128_status c128_prefill_##name(const c128_prefill_args *a, cudaStream_t stream) {                          \
    const c128__trait t = C128__TRAIT(D, state, input, output, 0, 0);                                                  \
    const void *const compress[C128__CLUSTER_COMPRESS_VARIANT + 1] = {                                                 \
        (const void *)c128__compress_kernel_##name, (const void *)c128__compress_kernel_##name##_layout,               \
        (const void *)c128__compress_kernel_##name##_entry, (const void *)c128__compress_kernel_##name##_layout_entry, \
        (const void *)c128__compress_kernel_##name##_cluster_entry};                                                   \
    const void *const write[2] = {(const void *)c128__write_kernel_##name,                                             \
                                  (const void *)c128__write_kernel_##name##_layout};                                   \
    return c128__prefill_run(a, t, compress, write, stream, NULL);                                                     \
  }                                                                                                                    \
  C128_API c128_status c128_decode_host_##name(const c128_decode_args *a, const c128_host_options *o) {                \
    const c128__trait t = C128__TRAIT(D, state, input, output, 0, 0);                                                  \
    return c128__decode_run(a, t, NULL, NULL, o);                                                                      \
  }                                                                                                                    \
  C128_API c128_status c128_prefill_host_##name(const c128_prefill_args *a, const c128_host_options *o) {              \
    const c128__trait t = C128__TRAIT(D, state, input, output, 0, 0);                                                  \
    return c128__prefill_run(a, t, NULL, NULL, NULL, o);                                                               \
  }
C128_INSTANCES(C128__ENTRY_POINTS)
#undef C128__ENTRY_POINTS

#define C128__INSTANCE_ROW(name, D, state, input, output) \
  {#name,                                                 \
   D,                                                     \
   (c128_dtype)C128__DTYPE_##state,                       \
   (c128_dtype)C128__DTYPE_##input,                       \
   (c128_dtype)C128__DTYPE_##output,                      \
   C128_NUM_SPLIT(D),                                     \
   C128_ROW_ELEMS(D),                                     \
   C128_PAGE_ELEMS(D),                                    \
   c128_decode_##name,                                    \
   c128_prefill_##name,                                   \
   c128_decode_host_##name,                               \
   c128_prefill_host_##name},
static const c128_instance_info c128__instances[] = {C128_INSTANCES(C128__INSTANCE_ROW)};
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
  return index >= 0 && index < C128_INSTANCE_COUNT ? c128__instances[index].name : NULL;
}

C128_API c128_status c128_instance_info_get(int index, c128_instance_info *info) {
  if (!info) return C128_ERROR_NULL_POINTER;
  if (index < 0 || index >= C128_INSTANCE_COUNT) return C128_ERROR_UNSUPPORTED_INSTANCE;
  *info = c128__instances[index];
  return C128_SUCCESS;
}

C128_API int c128_find_instance(int head_dim, c128_dtype state, c128_dtype input, c128_dtype output) {
  for (int i = 0; i < C128_INSTANCE_COUNT; ++i) {
    const c128_instance_info *f = &c128__instances[i];
    if (f->head_dim == head_dim && f->state_dtype == state && f->input_dtype == input && f->output_dtype == output)
      return i;
  }
  return -1;
}

C128_API size_t c128_dtype_size(c128_dtype dtype) { return (size_t)c128__dtype_bytes((int)dtype); }

C128_API c128_status c128_build_info_get(c128_build_info *info) {
  if (!info) return C128_ERROR_NULL_POINTER;
  info->version = C128_VERSION_STRING;
  info->version_number = C128_VERSION;
  info->math = C128_MATH;
  info->epilogue = C128_EPILOGUE;
  info->instance_count = C128_INSTANCE_COUNT;
  return C128_SUCCESS;
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

C128_API uint16_t c128_bf16_from_float(float value) { return (uint16_t)c128__narrow_bf16(value); }
C128_API float c128_bf16_to_float(uint16_t bits) { return c128__widen_bf16(bits); }

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

static const char *c128__kind_text(c128_plan_kind kind) {
  switch (kind) {
#define C128__KIND_CASE(name, value, text) \
  case name:                               \
    return text;
    C128_PLAN_KINDS(C128__KIND_CASE)
#undef C128__KIND_CASE
  default:
    break;
  }
  return "unknown";
}

static c128_status c128__report(c128_plan_report *r, c128_plan_kind kind, int64_t index, const char *fmt, ...) {
  r->index = index;
  r->kind = kind;
  if (r->message && r->message_size) {
    const int n = snprintf(r->message, r->message_size, "%s plan %lld: ", c128__kind_text(kind), (long long)index);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < r->message_size) vsnprintf(r->message + n, r->message_size - (size_t)n, fmt, ap);
    va_end(ap);
  }
  return C128_ERROR_INVALID_PLAN;
}

/* The trait of the compiled instance the arguments name, as the generic launch finds it. */
static c128_status c128__instance_trait(int32_t head_dim, c128_dtype sd, c128_dtype id, c128_dtype od, c128__trait *t) {
  if (c128_find_instance(head_dim, sd, id, od) < 0) return C128_ERROR_UNSUPPORTED_INSTANCE;
  const c128__trait trait = {head_dim, (int)sd, (int)id, (int)od, 0, 0, 0, 0};
  *t = trait;
  return C128_SUCCESS;
}

/* An access of one plan, as the checker sees it: a write of row `key + offset` (length 0) or a
   read of rows key + offset .. key + offset + length - 1, all within one page of 128 rows that
   starts at row `key`, so that a write and a read can only meet within one key. State rows keep
   their plane in bit 62 of the key (the score plane's rows are other rows); outputs (rows or
   cache entries) are written only, in a list of their own. */
typedef struct c128__slot_use {
  int64_t key, index;
  int32_t offset, length;
} c128__slot_use;

static int c128__slot_order(const void *a, const void *b) {
  const c128__slot_use *x = (const c128__slot_use *)a, *y = (const c128__slot_use *)b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return x->index < y->index ? -1 : x->index > y->index;
}

/* Rows [offset, offset + length) of a page as a 128-bit set (length 0: the one row offset). */
static void c128__row_set(const c128__slot_use *u, uint64_t set[2]) {
  set[0] = set[1] = 0;
  for (int r = u->offset; r < u->offset + (u->length ? u->length : 1); ++r) set[r / 64] |= (uint64_t)1 << (r % 64);
}

/* Whether use u conflicts with an earlier plan's use v of the same key: a row written twice, or
   a row one writes and the other reads. */
static int c128__uses_conflict(const c128__slot_use *u, const c128__slot_use *v) {
  if (u->length && v->length) return 0;
  uint64_t a[2], b[2];
  c128__row_set(u, a), c128__row_set(v, b);
  return ((a[0] & b[0]) | (a[1] & b[1])) != 0;
}

/* The first plan (lowest index) whose access conflicts with an earlier plan's in the same launch
   (c128__uses_conflict): its index, or `limit` when none below it does; *use and *earlier get
   the two conflicting uses. Within a key the uses are walked in plan order, keeping the rows
   earlier plans wrote and read. Frees `uses`. */
static int64_t c128__first_conflict(c128__slot_use *uses, int64_t n, int64_t limit, c128__slot_use *use,
                                    c128__slot_use *earlier) {
  qsort(uses, (size_t)n, sizeof *uses, c128__slot_order);
  int64_t first = limit;
  for (int64_t g = 0; g < n;) {
    int64_t end = g;
    while (end < n && uses[end].key == uses[g].key) ++end;
    uint64_t written[2] = {0, 0}, read[2] = {0, 0}, wrote[2] = {0, 0},
             reads[2] = {0, 0}; /* earlier plans', this one's */
    for (int64_t i = g; i < end && uses[i].index < first; ++i) {
      if (i > g && uses[i].index != uses[i - 1].index) /* a new plan: the last one's uses count now */
        for (int h = 0; h < 2; ++h) written[h] |= wrote[h], read[h] |= reads[h], wrote[h] = reads[h] = 0;
      const c128__slot_use *u = &uses[i];
      uint64_t rows[2];
      c128__row_set(u, rows);
      const uint64_t *against = u->length ? written : read;
      if (((rows[0] & against[0]) | (rows[1] & against[1])) ||
          (!u->length && ((rows[0] & written[0]) | (rows[1] & written[1])))) {
        first = u->index, *use = *u;
        for (int64_t k = g; k < i; ++k)
          if (uses[k].index < u->index && c128__uses_conflict(u, &uses[k])) {
            *earlier = uses[k];
            break;
          }
        break;
      }
      for (int h = 0; h < 2; ++h) (u->length ? reads : wrote)[h] |= rows[h];
    }
    g = end;
  }
  free(uses);
  return first;
}

#define C128__SCORE_PLANE_KEY ((int64_t)1 << 62)
/* A write of physical row `row` of a plane (1: the score plane) by plan `index`. */
static c128__slot_use c128__write_use(int64_t row, int plane, int64_t index) {
  const c128__slot_use u = {row / C128_WINDOW * C128_WINDOW + plane * C128__SCORE_PLANE_KEY, index,
                            (int32_t)(row % C128_WINDOW), 0};
  return u;
}
static c128__slot_use c128__read_use(int64_t row, int length, int plane, int64_t index) {
  c128__slot_use u = c128__write_use(row, plane, index);
  u.length = length;
  return u;
}

/* The checker's view of one launch's accesses: state uses (both planes) and output uses. */
typedef struct c128__uses {
  c128__slot_use *state, *out;
  int64_t n_state, n_out;
} c128__uses;

static int c128__uses_alloc(c128__uses *u, int64_t state, int64_t out) {
  u->state = (c128__slot_use *)malloc((size_t)(state ? state : 1) * sizeof *u->state);
  u->out = (c128__slot_use *)malloc((size_t)(out ? out : 1) * sizeof *u->out);
  u->n_state = u->n_out = 0;
  if (u->state && u->out) return 1;
  free(u->state), free(u->out);
  return 0;
}

/* A running plan's state write (`to`): its kv row, and its score row when the scores have a
   table of their own. */
static void c128__add_write(c128__uses *u, const c128__params *p, c128__trait t, c128__dest to, int64_t index) {
  u->state[u->n_state++] = c128__write_use(to.kv, 0, index);
  if (t.layout && p->more->score_table != p->more->table) u->state[u->n_state++] = c128__write_use(to.score, 1, index);
}

/* A running window's state reads: rows 0 .. buffer_len - 1, one use a warp's 8 rows in kernels
   of any layout (the rows each warp finds), one use in today's layout (its page's rows). */
static void c128__add_reads(c128__uses *u, const c128__params *p, c128__trait t, const c128__window *w, int64_t index) {
  if (!t.layout) {
    if (w->buffer_len) u->state[u->n_state++] = c128__read_use(w->state_row0, w->buffer_len, 0, index);
    return;
  }
  for (int first = 0; first < w->buffer_len; first += C128_ROWS_PER_WARP) {
    const c128__dest d = c128__rows_of(p, w->state_row0 + first);
    const int rows = w->buffer_len - first < C128_ROWS_PER_WARP ? w->buffer_len - first : C128_ROWS_PER_WARP;
    u->state[u->n_state++] = c128__read_use(d.kv, rows, 0, index);
    if (p->more->score_table != p->more->table) u->state[u->n_state++] = c128__read_use(d.score, rows, 1, index);
  }
}

/* The most state uses one plan adds: a write and a window's reads, in each plane. */
static int64_t c128__uses_per_plan(c128__trait t) { return t.layout ? 2 + 2 * C128_NUM_WARPS : 2; }

/* Reports the earliest of a plan's own failure (own < limit, with its text), a state conflict
   and two windows with one output row or entry; frees the uses. */
static c128_status c128__report_first(c128_plan_report *r, c128_plan_kind kind, c128__uses *u, int64_t own,
                                      const char *own_text, int entry) {
  c128__slot_use use = {0, 0, 0, 0}, earlier = use, out = use, out_earlier = use;
  const int64_t limit = own >= 0 ? own : INT64_MAX;
  const int64_t state = c128__first_conflict(u->state, u->n_state, limit, &use, &earlier);
  const int64_t output = c128__first_conflict(u->out, u->n_out, state < limit ? state : limit, &out, &out_earlier);
  if (output < limit && output < state)
    return c128__report(r, kind, output, "writes %s %lld, as plan %lld does", entry ? "cache entry" : "output row",
                        (long long)(out.key + out.offset), (long long)out_earlier.index);
  if (state < limit) {
    const char *plane = use.key >= C128__SCORE_PLANE_KEY ? "score plane row" : "state row";
    const int64_t row = use.key % C128__SCORE_PLANE_KEY + use.offset;
    if (use.length)
      return c128__report(r, kind, state, "its window reads %s %lld .. %lld; plan %lld writes row %lld", plane,
                          (long long)row, (long long)(row + use.length - 1), (long long)earlier.index,
                          (long long)(earlier.key % C128__SCORE_PLANE_KEY + earlier.offset));
    return earlier.length ? c128__report(r, kind, state, "writes %s %lld, which plan %lld reads in its window", plane,
                                         (long long)row, (long long)earlier.index)
                          : c128__report(r, kind, state, "writes %s %lld, as plan %lld does", plane, (long long)row,
                                         (long long)earlier.index);
  }
  return own >= 0 ? c128__report(r, kind, own, "%s", own_text) : C128_SUCCESS;
}

C128_API c128_status c128_check_decode_plans(const c128_decode_args *a, c128_plan_report *report) {
  if (!a || !report) return C128_ERROR_NULL_POINTER;
  report->index = -1;
  c128__trait t;
  c128__shape_of shape;
  c128_status st = c128__instance_trait(a->head_dim, a->state_dtype, a->input_dtype, a->output_dtype, &t);
  if (st == C128_SUCCESS) st = c128__validate_decode(a, t, 0, &shape);
  if (st != C128_SUCCESS || a->batch == 0) return st;
  t = c128__variant_trait(t, c128__variant(&shape, &a->entry, a->output_index));
  /* Each running plan writes its new row; a boundary plan's window also reads rows 0..126. */
  c128__uses u;
  if (!c128__uses_alloc(&u, a->batch * c128__uses_per_plan(t), a->batch)) return C128_ERROR_OUT_OF_MEMORY;
  c128__more more;
  const c128__params p = c128__decode_params(a, &shape, &more);
  int64_t own = -1;
  char text[96] = "";
  for (int64_t b = 0; b < a->batch && own < 0; ++b) {
    c128__decode_job job;
    memset(&job, 0, sizeof job);
    const int reason = c128__decode_prepare(&p, t, b, 0, 0, &job);
    if (reason == C128__PADDING) continue;
    const c128_decode_plan plan = a->plans[b];
    if (reason != C128__RUN) {
      own = b, snprintf(text, sizeof text, "%s", c128__reason_text(reason));
    } else if (job.boundary && plan.read_page_1 != plan.write_loc / C128_WINDOW) {
      own = b, snprintf(text, sizeof text, "boundary write slot %d is not row 127 of read page %d", (int)plan.write_loc,
                        (int)plan.read_page_1);
    } else {
      c128__add_write(&u, &p, t, job.write_row, b);
      if (job.boundary) {
        c128__add_reads(&u, &p, t, &job.win, b);
        u.out[u.n_out++] = c128__write_use(job.win.out_row, 0, b);
      }
    }
  }
  return c128__report_first(report, C128_PLAN_DECODE, &u, own, text, t.entry);
}

C128_API c128_status c128_check_prefill_plans(const c128_prefill_args *a, c128_plan_report *report) {
  if (!a || !report) return C128_ERROR_NULL_POINTER;
  report->index = -1;
  c128__trait t;
  c128__shape_of shape;
  c128_status st = c128__instance_trait(a->head_dim, a->state_dtype, a->input_dtype, a->output_dtype, &t);
  if (st == C128_SUCCESS) st = c128__validate_prefill(a, t, 0, &shape);
  if (st != C128_SUCCESS) return st;
  const c128__trait tc = c128__variant_trait(t, c128__variant(&shape, &a->entry, a->output_index));
  const c128__trait tw = c128__variant_trait(t, c128__write_variant(a, &shape));
  c128__more more;
  const c128__params pc = c128__prefill_params(a, C128_PLAN_COMPRESS, &shape, &more),
                     pw = c128__prefill_params(a, C128_PLAN_WRITE, &shape, &more);
  /* Compress plans first: their own failures and two windows with one output (a launch of its
     own: the write launch follows it). */
  c128__uses u;
  if (!c128__uses_alloc(&u, 0, a->num_compress)) return C128_ERROR_OUT_OF_MEMORY;
  int64_t own = -1;
  char text[96] = "";
  for (int64_t k = 0; k < a->num_compress && own < 0; ++k) {
    c128__window w;
    int32_t position;
    const int reason = c128__compress_prepare(&pc, tc, k, 0, 0, &w, &position);
    if (reason != C128__RUN && reason != C128__PADDING)
      own = k, snprintf(text, sizeof text, "%s", c128__reason_text(reason));
    else if (reason == C128__RUN && a->compress_plans[k].seq_len % C128_WINDOW != 0)
      own = k, snprintf(text, sizeof text, "seq_len %u is not a multiple of 128", a->compress_plans[k].seq_len);
    else if (reason == C128__RUN) u.out[u.n_out++] = c128__write_use(w.out_row, 0, k);
  }
  st = c128__report_first(report, C128_PLAN_COMPRESS, &u, own, text, tc.entry);
  if (st != C128_SUCCESS) return st;
  if (!c128__uses_alloc(&u, a->num_write * c128__uses_per_plan(tw), 0)) return C128_ERROR_OUT_OF_MEMORY;
  own = -1;
  const char *why = "";
  for (int64_t k = 0; k < a->num_write && own < 0; ++k) {
    int64_t src;
    c128__dest dst = {-1, -1, 0};
    const int reason = c128__write_target(&pw, tw, k, 0, &src, &dst);
    if (reason == C128__PADDING) continue;
    if (reason != C128__RUN) {
      own = k, why = c128__reason_text(reason);
    } else if (!tw.layout) { /* the row in this rank's view, owned or not: the owner writes it in the same batch */
      const int32_t loc = a->write_plans[k].write_loc;
      dst.kv = c128__physical_page(&pw, loc / C128_WINDOW) * C128_WINDOW + loc % C128_WINDOW;
      c128__add_write(&u, &pw, tw, dst, k);
    } else {
      c128__add_write(&u, &pw, tw, dst, k);
    }
  }
  return c128__report_first(report, C128_PLAN_WRITE, &u, own, why, 0);
}

/* >>planners (DESIGN 5) ----------------------------------------------------------------------- */
/* The per-request rules in closed form, shared by the host planners and the device planners. A
   planner reads each request once, into a copy (host: scratch; device: the workspace), and works
   from the copy only; pages are looked up, and checked, where a plan names them. */
C128__FN int c128__tabled(const c128_ring *r) { return r->state_layout.block_table != NULL; }
C128__FN int64_t c128__ring_tokens(const c128_ring *r) {
  if (c128__tabled(r)) return (int64_t)1 << r->state_layout.row_shift;
  return r->ring_tokens ? r->ring_tokens : C128_WINDOW;
}

/* A block table's shape, for the planners (the launches check theirs, c128__check_state_layout). */
static c128_status c128__check_ring_table(const c128_ring *r) {
  const c128_state_layout *l = &r->state_layout;
  const int rows = c128__log2_exact(l->block_rows ? l->block_rows : C128_WINDOW);
  if (l->table_rows < 0 || l->table_stride < 0) return C128_ERROR_NEGATIVE_SIZE;
  if (rows < 3 || rows > 8 || l->row_shift < C128__LOG2_WINDOW || l->row_shift > 30 || r->page_table ||
      (r->ring_tokens && r->ring_tokens != (int64_t)1 << l->row_shift) ||
      l->table_rows > ((int64_t)1 << (31 - l->row_shift)) ||
      (l->table_rows > 0 && l->table_stride > INT64_MAX / 4 / l->table_rows) ||
      (l->score_block_table && !l->score_plane))
    return C128_ERROR_INVALID_STATE_LAYOUT;
  if (c128__misaligned(l->block_table, sizeof(int32_t)) || c128__misaligned(l->score_block_table, sizeof(int32_t)))
    return C128_ERROR_MISALIGNED;
  return C128_SUCCESS;
}

static c128_status c128__check_ring(const c128_ring *r) {
  if (!r) return C128_ERROR_NULL_POINTER;
  if (r->rope_positions < 0) return C128_ERROR_NEGATIVE_SIZE;
  if (c128__tabled(r)) {
    if (r->state_pages < 0) return C128_ERROR_NEGATIVE_SIZE;
    return c128__check_ring_table(r);
  }
  const int64_t ring = c128__ring_tokens(r);
  if (ring <= 0 || ring % C128_WINDOW != 0) return C128_ERROR_INVALID_RING;
  if (r->state_pages < 0 || (r->page_table && r->num_pool < 0)) return C128_ERROR_NEGATIVE_SIZE;
  if (r->state_pages > INT32_MAX / C128_WINDOW) return C128_ERROR_STATE_TOO_LARGE; /* write_loc is i32 */
  if (r->page_table && (r->page_table_stride < ring / C128_WINDOW ||
                        (r->num_pool > 0 && r->page_table_stride > INT64_MAX / r->num_pool)))
    return C128_ERROR_INVALID_RING; /* a row shorter than the ring, or a table past int64 */
  if (c128__misaligned(r->page_table, sizeof(int32_t))) return C128_ERROR_MISALIGNED;
  return C128_SUCCESS;
}

/* page(rid, pos) of DESIGN 5, checked against the pool and the state. */
C128__FN c128_status c128__ring_page(const c128_ring *r, int32_t rid, int64_t pos, int32_t *page) {
  if (pos < 0) return C128_ERROR_NEGATIVE_SIZE;
  /* Positions come from int32 lengths: the remainder in 32 bits (a 64-bit one is a call, whose
     saved registers spilled in the device planner on sm_100). */
  const int64_t ring = c128__ring_tokens(r), k = ((int32_t)pos % (int32_t)ring) / C128_WINDOW;
  int64_t pg;
  if (rid < 0 || (r->page_table && rid >= r->num_pool)) return C128_ERROR_POOL_INDEX_OUT_OF_RANGE;
  if (c128__tabled(r)) { /* a logical page: its blocks are checked where the plans name them */
    if (rid >= r->state_layout.table_rows) return C128_ERROR_POOL_INDEX_OUT_OF_RANGE;
    pg = (int64_t)rid * (ring / C128_WINDOW) + k;
  } else if (r->page_table) {
    pg = r->page_table[rid * r->page_table_stride + k];
    if (pg < 0 || pg >= r->state_pages) return C128_ERROR_PAGE_OUT_OF_RANGE;
  } else {
    pg = (int64_t)rid * (ring / C128_WINDOW) + k;
    if (pg >= r->state_pages) return C128_ERROR_POOL_INDEX_OUT_OF_RANGE;
  }
  *page = (int32_t)pg;
  return C128_SUCCESS;
}

/* With a block table: the blocks that hold positions pos .. pos + count - 1 of request rid are
   allocated (an entry in [0, state_pages), not the null block) in every plane's table. */
C128__FN c128_status c128__ring_blocks(const c128_ring *r, int32_t rid, int64_t pos, int64_t count) {
  const c128_state_layout *l = &r->state_layout;
  if (!c128__tabled(r) || count <= 0) return C128_SUCCESS;
  const int shift = c128__log2_exact(l->block_rows ? l->block_rows : C128_WINDOW);
  const int64_t ring = c128__ring_tokens(r);
  for (int64_t at = pos; at < pos + count; at = ((at >> shift) + 1) << shift) {
    const int64_t column = (at & (ring - 1)) >> shift; /* R = 2^row_shift: a mask, not a 64-bit division */
    if (column >= l->table_stride) return C128_ERROR_PAGE_OUT_OF_RANGE;
    for (int plane = 0; plane < 1 + (l->score_block_table != NULL); ++plane) {
      const int32_t block = (plane ? l->score_block_table : l->block_table)[rid * l->table_stride + column];
      if (block < 0 || (r->has_null_block && block == r->null_block)) return C128_ERROR_BLOCK_MISSING;
      if (block >= r->state_pages) return C128_ERROR_PAGE_OUT_OF_RANGE;
    }
  }
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

/* query_start[i + 1] - query_start[i] as an extend_len: -1 where it decreases (refused as a
   negative size), INT32_MAX past it (refused as too many rows). */
C128__FN int32_t c128__extend_of(const int32_t *query_start, int64_t i) {
  const int64_t d = (int64_t)query_start[i + 1] - query_start[i];
  return d < 0 ? -1 : d > INT32_MAX ? INT32_MAX : (int32_t)d;
}

/* Argument rules of one request, in the order both planners apply them; the batch's row limit
   comes next, the pages last. An absent request passes. */
C128__FN c128_status c128__request_check(const c128_ring *r, c128_request q, int32_t verify) {
  const int64_t max_drafts = r->speculative ? c128__ring_tokens(r) - C128_WINDOW + 2 : 1;
  if (c128__absent(q)) return C128_SUCCESS;
  if (q.seq_len < 0 || q.extend_len < 0) return C128_ERROR_NEGATIVE_SIZE;
  if (q.extend_len == 0) return C128_ERROR_EMPTY_EXTEND;
  if (q.extend_len > q.seq_len) return C128_ERROR_EXTEND_EXCEEDS_SEQ;
  if (q.extend_len > C128_MAX_PREFILL_ROWS) return C128_ERROR_TOO_MANY_ROWS; /* before any work per row */
  if (verify && q.extend_len > max_drafts) return C128_ERROR_TOO_MANY_DRAFTS;
  return C128_SUCCESS;
}

C128__FN c128__shape c128__request_shape(const c128_ring *r, c128_request q) {
  /* Writes persist the trailing partial window, and with speculation the last `pad` tokens:
     first_write = min(floor(seq / 128) * 128, seq - pad), in signed arithmetic. */
  const int64_t pad = r->speculative ? c128__ring_tokens(r) - C128_WINDOW + 2 : 0;
  const int64_t seq = q.seq_len, boundary = seq / C128_WINDOW * C128_WINDOW;
  /* write_all: the last R tokens (earlier ones would share slots with them) */
  const int64_t first_write = r->write_all ? seq - c128__ring_tokens(r) : boundary < seq - pad ? boundary : seq - pad;
  c128__shape s;
  s.prefix = seq - q.extend_len;
  s.first_event = s.prefix / C128_WINDOW * C128_WINDOW + C128__LAST_ROW;
  s.first_write = first_write > s.prefix ? first_write : s.prefix;
  s.num_compress = seq / C128_WINDOW - s.prefix / C128_WINDOW;
  s.num_write = seq - s.first_write;
  return s;
}

/* A request's checks and claims are split into units, one per 128-position chunk of the
   positions it pools or writes, so that the device planner's threads share a long request (a
   thread per request took 137 us for one of 8192 new tokens on the H200: ~200 dependent loads
   and atomics). Unit u covers chunk (lo >> 7) + u, lo the first window's last position or the
   first persisted one, whichever is lower, up to the chunk of seq_len - 1; none without either. */
C128__FN int64_t c128__units_lo(c128__shape s) {
  return s.num_compress > 0 && s.first_event < s.first_write ? s.first_event : s.first_write;
}
C128__FN int64_t c128__units_of(c128_request q, c128__shape s) {
  if (c128__absent(q) || (s.num_compress <= 0 && s.num_write <= 0)) return 0;
  return ((int64_t)q.seq_len - 1) / C128_WINDOW - c128__units_lo(s) / C128_WINDOW + 1;
}

/* Every page that unit u's plans name lies in the pool and the state: the window that ends in
   its chunk, if any, then the positions it persists. The host planner runs a request's units in
   order and keeps the first failure; the device planner keeps the batch's lowest failing unit,
   the same one. */
C128__FN c128_status c128__unit_pages(const c128_ring *r, c128_request q, c128__shape s, int64_t u) {
  int32_t page;
  c128_status st = C128_SUCCESS;
  const int64_t chunk = (c128__units_lo(s) / C128_WINDOW + u) * C128_WINDOW, pos = chunk + C128__LAST_ROW;
  if (s.num_compress > 0 && pos >= s.first_event && pos <= s.first_event + (s.num_compress - 1) * C128_WINDOW) {
    const int64_t start = pos - C128__LAST_ROW;
    st = c128__ring_page(r, q.pool_index, pos, &page);
    if (st == C128_SUCCESS) st = c128__ring_page(r, q.pool_index, pos >= C128_WINDOW ? pos - C128_WINDOW : 0, &page);
    /* the window rows before the batch come from the state */
    if (st == C128_SUCCESS) st = c128__ring_blocks(r, q.pool_index, start, s.prefix - start);
    if (st == C128_SUCCESS && r->rope_positions > 0 && start >= r->rope_positions) st = C128_ERROR_ROPE_TABLE_TOO_SHORT;
  }
  const int64_t lo = chunk > s.first_write ? chunk : s.first_write, hi = q.seq_len < pos + 1 ? q.seq_len : pos + 1;
  if (st == C128_SUCCESS && lo < hi) st = c128__ring_page(r, q.pool_index, lo, &page);
  if (st == C128_SUCCESS && lo < hi) st = c128__ring_blocks(r, q.pool_index, lo, hi - lo);
  return st;
}

C128__FN c128_status c128__request_pages(const c128_ring *r, c128_request q, c128__shape s) {
  c128_status st = C128_SUCCESS;
  for (int64_t u = 0, units = c128__units_of(q, s); u < units && st == C128_SUCCESS; ++u)
    st = c128__unit_pages(r, q, s, u);
  return st;
}

/* The m-th compress / write plan of a request whose first input row is `rag0`, or the status
   of a page that is no longer valid (a page table changed during the call). */
C128__FN c128_status c128__compress_plan_of(const c128_ring *r, c128_request q, c128__shape s, int64_t m, int64_t rag0,
                                            c128_compress_plan *c) {
  const int64_t pos = s.first_event + m * C128_WINDOW, j = pos - s.prefix;
  c->seq_len = (uint32_t)(pos + 1);
  c->ragged_id = (uint16_t)(rag0 + j);
  c->buffer_len = (uint16_t)(j < C128__LAST_ROW ? C128__LAST_ROW - j : 0);
  const c128_status st = c128__ring_page(r, q.pool_index, pos >= C128_WINDOW ? pos - C128_WINDOW : 0, &c->read_page_0);
  return st == C128_SUCCESS ? c128__ring_page(r, q.pool_index, pos, &c->read_page_1) : st;
}

C128__FN c128_status c128__write_plan_of(const c128_ring *r, c128_request q, c128__shape s, int64_t m, int64_t rag0,
                                         c128_write_plan *w) {
  const int64_t pos = s.first_write + m;
  int32_t page = 0;
  const c128_status st = c128__ring_page(r, q.pool_index, pos, &page);
  w->ragged_id = (uint32_t)(rag0 + pos - s.prefix);
  w->write_loc = (int32_t)(page * C128_WINDOW + pos % C128_WINDOW);
  return st;
}

/* A decode request's plan, or its status. */
C128__FN c128_status c128__decode_plan_of(const c128_ring *r, c128_request q, c128_decode_plan *d) {
  const c128_decode_plan padding = C128_PADDING_DECODE_PLAN;
  *d = padding;
  if (q.seq_len < 0) return C128_ERROR_NEGATIVE_SIZE;
  if (q.seq_len == 0) return C128_SUCCESS;
  const int64_t pos = (int64_t)q.seq_len - 1, boundary = pos % C128_WINDOW == C128__LAST_ROW;
  int32_t page0, page1;
  c128_status st = c128__ring_page(r, q.pool_index, pos, &page1);
  if (st == C128_SUCCESS) st = c128__ring_page(r, q.pool_index, pos >= C128_WINDOW ? pos - C128_WINDOW : 0, &page0);
  /* the new token's block, and at a boundary the window's 127 rows before it */
  if (st == C128_SUCCESS)
    st = c128__ring_blocks(r, q.pool_index, boundary ? pos - C128__LAST_ROW : pos, boundary ? C128_WINDOW : 1);
  if (st == C128_SUCCESS && boundary && r->rope_positions > 0 && pos - C128__LAST_ROW >= r->rope_positions)
    st = C128_ERROR_ROPE_TABLE_TOO_SHORT;
  if (st != C128_SUCCESS) return st;
  d->seq_len = (uint32_t)q.seq_len;
  d->write_loc = (int32_t)(page1 * C128_WINDOW + pos % C128_WINDOW);
  d->read_page_0 = page0;
  d->read_page_1 = page1;
  return C128_SUCCESS;
}

/* What a batch writes, each part claimed once (DESIGN 5.7 item 4): the page of every ring chunk a
   request writes, or with a block table the physical block of every table column it writes, in
   each plane's table. An open-addressing table of key << 32 | (request + 1), 0 = empty, with at
   least twice as many slots as claims. Insertion is lock-free, so the device planner's threads
   share it; a key claimed a second time marks the batch: another request writes the part, or
   another chunk or column of the same request (a page-table or block-table row that names one
   part twice: their rows would collide). */
C128__FN int64_t c128__claim_slots(int64_t claims) {
  int64_t slots = 64;
  while (slots < 2 * claims) slots *= 2;
  return slots;
}
/* A claimed part's rows (log2: a page's, or a block's) and the tables claimed (a score table is
   a plane of its own). */
C128__FN int c128__claim_shift(const c128_ring *r) {
  return c128__tabled(r) ? c128__log2_exact(r->state_layout.block_rows ? r->state_layout.block_rows : C128_WINDOW)
                         : C128__LOG2_WINDOW;
}
C128__FN int c128__claim_planes(const c128_ring *r) {
  return 1 + (c128__tabled(r) && r->state_layout.score_block_table != NULL);
}
/* The most claims of a request that writes `count` positions (the parts they span, each plane),
   and of a batch of `requests` within its row limit: claims are made only for a batch that passed
   every other check. The device workspace holds the largest table any ring needs (blocks of 8
   rows in two planes), sized before any request is read; the planners use their ring's. */
C128__FN int64_t c128__claims_of(const c128_ring *r, int64_t count) {
  return c128__claim_planes(r) * ((count >> c128__claim_shift(r)) + 2);
}
C128__FN int64_t c128__ring_claim_slots(const c128_ring *r, int64_t requests, int decode) {
  /* decode: one part a plane per request (the table the device planner clears every call stays
     as small as the batch) */
  const int64_t parts = decode ? requests : (C128_MAX_PREFILL_ROWS >> c128__claim_shift(r)) + 2 * requests;
  return c128__claim_slots(c128__claim_planes(r) * parts);
}
C128__FN int64_t c128__page_table_slots(int64_t requests) {
  return c128__claim_slots(2 * ((C128_MAX_PREFILL_ROWS >> 3) + 2 * requests));
}
C128__FN uint64_t c128__cas64(uint64_t *slot, uint64_t expected, uint64_t desired) {
#ifdef __CUDA_ARCH__
  return atomicCAS((unsigned long long *)slot, (unsigned long long)expected, (unsigned long long)desired);
#else
  const uint64_t old = *slot;
  if (old == expected) *slot = desired;
  return old;
#endif
}
C128__FN int64_t c128__claim_home(int64_t key, int64_t slots) {
  return (int64_t)(((uint64_t)key * 0x9E3779B97F4A7C15ull) >> 40) & (slots - 1);
}
/* Claims `key` (below 2^32) for request `req`; 0 when it is claimed already. */
C128__FN int c128__claim(uint64_t *table, int64_t slots, int64_t key, int64_t req) {
  const uint64_t word = (uint64_t)key << 32 | (uint32_t)(req + 1);
  int64_t i = c128__claim_home(key, slots);
  for (int64_t probe = 0; probe < slots; ++probe, i = (i + 1) & (slots - 1)) {
    const uint64_t old = c128__cas64(&table[i], 0, word);
    if (old == 0) return 1;
    if (old >> 32 == (uint64_t)key) return 0;
  }
  return 1; /* full: never, the table has twice the slots of a batch's claims */
}
/* Whether `key` is claimed; read once every claim is made. */
C128__FN int c128__claimed(const uint64_t *table, int64_t slots, int64_t key) {
  int64_t i = c128__claim_home(key, slots);
  for (int64_t probe = 0; probe < slots && table[i]; ++probe, i = (i + 1) & (slots - 1))
    if (table[i] >> 32 == (uint64_t)key) return 1;
  return 0;
}
/* The key of the part that holds logical row `row` (as plans name it) in plane `plane`: its page,
   or with a block table plane << 31 | its block; -1 where a table names no block (only a table
   changed during the call: the batch's blocks were checked). */
C128__FN int64_t c128__claim_key(const c128_ring *r, int64_t row, int plane) {
  const c128_state_layout *l = &r->state_layout;
  if (!c128__tabled(r)) return row / C128_WINDOW;
  const int64_t table_row = row >> l->row_shift;
  const int64_t column = (row & (((int64_t)1 << l->row_shift) - 1)) >> c128__claim_shift(r);
  if (table_row >= l->table_rows || column >= l->table_stride) return -1;
  const int32_t block = (plane ? l->score_block_table : l->block_table)[table_row * l->table_stride + column];
  return block < 0 ? -1 : (int64_t)plane << 31 | block;
}
/* Claims the parts of logical row `row`, one a plane, for request `req`; 0 when one is claimed. */
C128__FN int c128__claim_row(const c128_ring *r, int64_t row, uint64_t *table, int64_t slots, int64_t req) {
  for (int plane = 0; plane < c128__claim_planes(r); ++plane) {
    const int64_t key = c128__claim_key(r, row, plane);
    if (key >= 0 && !c128__claim(table, slots, key, req)) return 0;
  }
  return 1;
}
/* Claims what unit u of a request writes (c128__units_of): the part (ring chunk or table block)
   of each position it persists that is the request's first persisted position or starts a
   part, each part once. The persisted positions span at most R, so a part recurs only as the
   last one, the first part's other rows, R positions past the first part's start (or, with
   blocks longer than R, as the second): it is not claimed again. 0 when a part is claimed
   already. Positions fit 32 bits (int32 lengths), counted unsigned so that the step past the
   last part cannot overflow: 64-bit arithmetic here made the device planner spill on sm_100. */
C128__FN int c128__claim_unit(const c128_ring *r, c128_request q, c128__shape s, int64_t u, uint64_t *table,
                              int64_t slots, int64_t req) {
  const int shift = c128__claim_shift(r);
  const uint32_t first = (uint32_t)s.first_write, ring = (uint32_t)c128__ring_tokens(r),
                 start0 = first >> shift << shift;
  const uint32_t chunk = (uint32_t)((c128__units_lo(s) / C128_WINDOW + u) * C128_WINDOW);
  const uint32_t end = (uint32_t)q.seq_len < chunk + C128_WINDOW ? (uint32_t)q.seq_len : chunk + C128_WINDOW;
  uint32_t pos = chunk > first ? (((chunk - 1) >> shift) + 1) << shift : first; /* the first part start in the chunk */
  int32_t page;
  for (; pos < end; pos = ((pos >> shift) + 1) << shift) {
    if (pos != first && pos - start0 >= ring) break;
    if (c128__ring_page(r, q.pool_index, pos, &page) != C128_SUCCESS) continue;
    if (!c128__claim_row(r, (int64_t)page * C128_WINDOW + pos % C128_WINDOW, table, slots, req)) return 0;
  }
  return 1;
}
C128__FN int c128__claim_written(const c128_ring *r, c128_request q, uint64_t *table, int64_t slots, int64_t req) {
  const c128__shape s = c128__request_shape(r, q);
  for (int64_t u = 0, units = c128__units_of(q, s); u < units; ++u)
    if (!c128__claim_unit(r, q, s, u, table, slots, req)) return 0;
  return 1;
}
/* A decode plan's boundary window reads window rows 0..126 from the state in the same launch in
   which every plan writes its new row: with blocks smaller than a window, none of the window's
   blocks may be one the batch writes, but the new token's own (its column). Blocks nobody writes
   may be read by any number of requests (prefix caching). 0 when one is claimed. */
C128__FN int c128__window_unclaimed(const c128_ring *r, c128_decode_plan d, const uint64_t *table, int64_t slots) {
  const int shift = c128__claim_shift(r);
  if (!d.seq_len || d.write_loc % C128_WINDOW != C128__LAST_ROW || shift >= C128__LOG2_WINDOW) return 1;
  for (int64_t row = (int64_t)d.read_page_1 * C128_WINDOW; row < d.write_loc; row += (int64_t)1 << shift) {
    if (row >> shift == d.write_loc >> shift) continue;
    for (int plane = 0; plane < c128__claim_planes(r); ++plane) {
      const int64_t key = c128__claim_key(r, row, plane);
      if (key >= 0 && c128__claimed(table, slots, key)) return 0;
    }
  }
  return 1;
}

/* Host scratch, zeroed: 4 KiB on the stack, calloc beyond. */
typedef struct c128__scratch {
  uint64_t stack[512];
  void *heap;
} c128__scratch;
static void *c128__scratch_get(c128__scratch *s, size_t bytes) {
  s->heap = NULL;
  if (bytes <= sizeof s->stack) return memset(s->stack, 0, bytes);
  return s->heap = calloc(1, bytes);
}

/* [a, a + an) and [b, b + bn) in elements of their sizes. */
static int c128__arrays_overlap(const void *a, int64_t an, size_t as, const void *b, int64_t bn, size_t bs) {
  return an > 0 && bn > 0 && c128__overlap(a, (uint64_t)an * as, b, (uint64_t)bn * bs);
}
/* Bytes of a checked ring's page table (saturated: num_pool * stride fits int64). */
C128__FN uint64_t c128__page_table_bytes(const c128_ring *r) {
  if (!r->page_table || r->num_pool <= 0) return 0;
  const uint64_t entries = (uint64_t)r->num_pool * (uint64_t)r->page_table_stride;
  return entries > UINT64_MAX / sizeof(int32_t) ? UINT64_MAX : entries * sizeof(int32_t);
}
/* Bytes of a state layout's block table (the score plane's, when it has one, is as long). */
static uint64_t c128__block_table_bytes(const c128_state_layout *l) {
  return l->block_table ? (uint64_t)l->table_rows * (uint64_t)l->table_stride * 4 : 0;
}
/* Plans written over a table the planner reads: the page table or a block table. */
static int c128__ring_overlaps(const c128_ring *r, const void *plans, int64_t n, size_t size) {
  const c128_state_layout *l = &r->state_layout;
  const uint64_t bytes = (uint64_t)n * size, table = c128__block_table_bytes(l);
  return n > 0 && (c128__overlap(r->page_table, c128__page_table_bytes(r), plans, bytes) ||
                   c128__overlap(l->block_table, table, plans, bytes) ||
                   c128__overlap(l->block_table ? l->score_block_table : NULL, table, plans, bytes));
}

/* Host planner: validate the batch into scratch first, so that a bad batch leaves the arrays
   untouched. */
C128_API c128_status c128_plan_prefill(const c128_ring *ring, const c128_request *requests, int64_t num_requests,
                                       int32_t verify, c128_prefill_plans *plans) {
  if (!ring || !plans) return C128_ERROR_NULL_POINTER;
  const c128_ring r = *ring;
  c128_status st = c128__check_ring(&r);
  if (st != C128_SUCCESS) return st;
  if (num_requests > 0 && !requests) return C128_ERROR_NULL_POINTER;
  const int64_t capacity = plans->capacity; /* read once: the struct is caller memory too */
  const int32_t pad = plans->pad_to_capacity;
  c128_compress_plan *compress = plans->compress;
  c128_write_plan *write = plans->write;
  if (num_requests < 0 || capacity < 0) return C128_ERROR_NEGATIVE_SIZE;
  if (capacity > C128_MAX_PREFILL_ROWS) return C128_ERROR_TOO_MANY_PLANS; /* a launch refuses more */
  if (num_requests > INT32_MAX / 2) return C128_ERROR_TOO_MANY_PLANS;
  if (capacity > 0 && (!compress || !write)) return C128_ERROR_NULL_POINTER;
  if (c128__misaligned(compress, sizeof *compress) || c128__misaligned(write, sizeof *write))
    return C128_ERROR_MISALIGNED;
  c128__scratch request_scratch, claim_scratch;
  claim_scratch.heap = NULL;
  c128_request *q = (c128_request *)c128__scratch_get(&request_scratch, (size_t)num_requests * sizeof *q);
  if (!q) return C128_ERROR_OUT_OF_MEMORY;
  memcpy(q, requests, (size_t)num_requests * sizeof *q);
  int64_t rows = 0, nc = 0, nw = 0, claims = 0;
  for (int64_t i = 0; i < num_requests && st == C128_SUCCESS; ++i) {
    if ((st = c128__request_check(&r, q[i], verify)) != C128_SUCCESS || c128__absent(q[i])) continue;
    if (rows + q[i].extend_len > C128_MAX_PREFILL_ROWS) st = C128_ERROR_TOO_MANY_ROWS;
    const c128__shape s = c128__request_shape(&r, q[i]);
    if (st == C128_SUCCESS) st = c128__request_pages(&r, q[i], s);
    rows += q[i].extend_len, nc += s.num_compress, nw += s.num_write;
    claims += c128__claims_of(&r, s.num_write);
  }
  if (st == C128_SUCCESS && (nc > capacity || nw > capacity)) st = C128_ERROR_CAPACITY_TOO_SMALL;
  /* The entries this call writes (all of them when padding) overlap nothing it reads, nor each other. */
  const int64_t wc = pad ? capacity : nc, ww = pad ? capacity : nw;
  if (st == C128_SUCCESS &&
      (c128__arrays_overlap(requests, num_requests, sizeof *requests, compress, wc, sizeof *compress) ||
       c128__arrays_overlap(requests, num_requests, sizeof *requests, write, ww, sizeof *write) ||
       c128__arrays_overlap(compress, wc, sizeof *compress, write, ww, sizeof *write) ||
       c128__ring_overlaps(&r, compress, wc, sizeof *compress) || c128__ring_overlaps(&r, write, ww, sizeof *write) ||
       c128__arrays_overlap(plans, 1, sizeof *plans, compress, wc, sizeof *compress) ||
       c128__arrays_overlap(plans, 1, sizeof *plans, write, ww, sizeof *write)))
    st = C128_ERROR_ALIASED;
  const int64_t slots = c128__claim_slots(claims);
  uint64_t *claimed = NULL;
  if (st == C128_SUCCESS && !(claimed = (uint64_t *)c128__scratch_get(&claim_scratch, (size_t)slots * sizeof *claimed)))
    st = C128_ERROR_OUT_OF_MEMORY;
  for (int64_t i = 0; i < num_requests && st == C128_SUCCESS; ++i)
    if (!c128__absent(q[i]) && !c128__claim_written(&r, q[i], claimed, slots, i)) st = C128_ERROR_PAGE_SHARED;
  /* Each plan is built whole in a local. A page that no longer checks (the page table changed
     during the call) turns every entry written so far back into a sentinel. */
  const c128_compress_plan no_compress = C128_INVALID_COMPRESS_PLAN;
  const c128_write_plan no_write = C128_INVALID_WRITE_PLAN;
  rows = nc = nw = 0; /* the counts again: the shapes come from the private copy, so they match */
  for (int64_t i = 0; i < num_requests && st == C128_SUCCESS; ++i) {
    if (c128__absent(q[i])) continue;
    const c128__shape s = c128__request_shape(&r, q[i]);
    for (int64_t m = 0; m < s.num_compress && st == C128_SUCCESS; ++m) {
      c128_compress_plan c;
      if ((st = c128__compress_plan_of(&r, q[i], s, m, rows, &c)) == C128_SUCCESS) compress[nc++] = c;
    }
    for (int64_t m = 0; m < s.num_write && st == C128_SUCCESS; ++m) {
      c128_write_plan w;
      if ((st = c128__write_plan_of(&r, q[i], s, m, rows, &w)) == C128_SUCCESS) write[nw++] = w;
    }
    rows += q[i].extend_len;
  }
  free(request_scratch.heap), free(claim_scratch.heap);
  if (st != C128_SUCCESS) {
    for (int64_t k = 0; k < nc; ++k) compress[k] = no_compress;
    for (int64_t k = 0; k < nw; ++k) write[k] = no_write;
    return st;
  }
  plans->num_compress = nc;
  plans->num_write = nw;
  if (pad) {
    for (int64_t k = nc; k < capacity; ++k) compress[k] = no_compress;
    for (int64_t k = nw; k < capacity; ++k) write[k] = no_write;
  }
  return C128_SUCCESS;
}

C128_API c128_status c128_plan_decode(const c128_ring *ring, const c128_request *requests, int64_t batch,
                                      c128_decode_plan *plans) {
  if (!ring) return C128_ERROR_NULL_POINTER;
  const c128_ring r = *ring;
  c128_status st = c128__check_ring(&r);
  if (st != C128_SUCCESS) return st;
  if (batch < 0) return C128_ERROR_NEGATIVE_SIZE;
  if (batch > INT32_MAX / 2) return C128_ERROR_TOO_MANY_PLANS;
  if (batch == 0) return C128_SUCCESS;
  if (!requests || !plans) return C128_ERROR_NULL_POINTER;
  if (c128__misaligned(plans, sizeof *plans)) return C128_ERROR_MISALIGNED;
  if (c128__arrays_overlap(requests, batch, sizeof *requests, plans, batch, sizeof *plans) ||
      c128__ring_overlaps(&r, plans, batch, sizeof *plans))
    return C128_ERROR_ALIASED;
  const int64_t slots = c128__ring_claim_slots(&r, batch, 1);
  c128__scratch scratch;
  c128_decode_plan *d =
      (c128_decode_plan *)c128__scratch_get(&scratch, (size_t)batch * sizeof *d + (size_t)slots * sizeof(uint64_t));
  if (!d) return C128_ERROR_OUT_OF_MEMORY;
  uint64_t *claimed = (uint64_t *)(d + batch);
  for (int64_t b = 0; b < batch && st == C128_SUCCESS; ++b) {
    const c128_request q = requests[b]; /* read once */
    st = c128__decode_plan_of(&r, q, &d[b]);
  }
  for (int64_t b = 0; b < batch && st == C128_SUCCESS; ++b) /* the new rows, then the windows */
    if (d[b].seq_len && !c128__claim_row(&r, d[b].write_loc, claimed, slots, b)) st = C128_ERROR_PAGE_SHARED;
  for (int64_t b = 0; b < batch && st == C128_SUCCESS; ++b)
    if (!c128__window_unclaimed(&r, d[b], claimed, slots)) st = C128_ERROR_PAGE_SHARED;
  if (st == C128_SUCCESS) memcpy(plans, d, (size_t)batch * sizeof *d);
  free(scratch.heap);
  return st;
}

C128_API c128_status c128_requests_from_lens(const int32_t *seq_lens, const int32_t *query_start,
                                             const int32_t *pool_indices, int64_t n, c128_request *requests) {
  if (n < 0) return C128_ERROR_NEGATIVE_SIZE;
  if (n == 0) return C128_SUCCESS;
  if (!seq_lens || !requests) return C128_ERROR_NULL_POINTER;
  for (int64_t i = 0; i < n; ++i)
    if (query_start && query_start[i + 1] < query_start[i]) return C128_ERROR_NEGATIVE_SIZE;
  for (int64_t i = 0; i < n; ++i) {
    c128_request q;
    q.pool_index = pool_indices ? pool_indices[i] : (int32_t)i;
    q.seq_len = seq_lens[i];
    q.extend_len = query_start ? c128__extend_of(query_start, i) : 1;
    requests[i] = q;
  }
  return C128_SUCCESS;
}

/* The device planners: two launches, each a block program of steps (as the kernels'), which
   c128_plan_*_device_host runs on the CPU. Kernel 1 is one block: step 0 clears the claim table;
   then per chunk of 256 requests, a step in which thread t copies request base + t into the
   workspace, checks it and counts its plans and units (c128__units_of), and a step in which
   thread 0 turns the counts into exclusive prefix sums and the first failed check; then a step
   in which the threads share the batch's units and check their pages, one that takes the
   batch's first failure, and, if there is none, a step in which they share the units' claims,
   and one in which every thread checks its requests' decode windows against the claims; the last
   step publishes status and counts. A failure is keyed by its place in the host planner's order
   (request, its checks, its units in order) and the lowest key wins, whatever thread found it.
   Kernel 2: one thread per plan slot finds its request by binary search over the sums and
   computes its plan from the workspace's copy. */
#define C128__PLAN_THREADS 256

/* Workspace, in int64 words: the header, 4 x (n + 1) sums, the requests' copy, the page table. */
enum { C128__WS_STATUS, C128__WS_COMPRESS, C128__WS_WRITE, C128__WS_SHARED, C128__WS_FAILED, C128__WS_HEADER };

typedef struct c128__plan_params {
  c128_device_plan_args a;
  int32_t decode; /* which planner */
} c128__plan_params;

typedef struct c128__plan_chunk {
  int32_t check[C128__PLAN_THREADS];
  int64_t num_compress[C128__PLAN_THREADS], num_write[C128__PLAN_THREADS], rows[C128__PLAN_THREADS];
  int64_t units[C128__PLAN_THREADS];
  int64_t total_compress, total_write, total_rows, total_units;
  uint64_t failed; /* the first failed check's key (c128__fail_key), or ~0 */
  int32_t status;
} c128__plan_chunk;

/* Word offset of part `part` of a workspace for n requests: parts 0..3 are the sums (plans,
   writes, rows, units), then the requests' copy, the page table and the end. n <= INT32_MAX / 2
   keeps every offset in range. */
enum {
  C128__WS_SUM_COMPRESS,
  C128__WS_SUM_WRITE,
  C128__WS_SUM_ROWS,
  C128__WS_SUM_UNITS,
  C128__WS_PART_REQUESTS,
  C128__WS_PART_PAGES,
  C128__WS_PART_END
};
C128__FN int64_t c128__ws_offset(int64_t n, int part) {
  const int64_t requests = C128__WS_HEADER + C128__WS_PART_REQUESTS * (n + 1);
  const int64_t pages = requests + (n * (int64_t)sizeof(c128_request) + 7) / 8;
  if (part < C128__WS_PART_REQUESTS) return C128__WS_HEADER + part * (n + 1);
  if (part == C128__WS_PART_REQUESTS) return requests;
  return part == C128__WS_PART_PAGES ? pages : pages + c128__page_table_slots(n);
}
C128__FN int64_t *c128__ws_sums(const c128__plan_params *p, int which) {
  return (int64_t *)p->a.workspace + c128__ws_offset(p->a.num_requests, which);
}
C128__FN c128_request *c128__ws_requests(const c128__plan_params *p) {
  return (c128_request *)c128__ws_sums(p, C128__WS_PART_REQUESTS);
}
C128__FN uint64_t *c128__ws_pages(const c128__plan_params *p) {
  return (uint64_t *)c128__ws_sums(p, C128__WS_PART_PAGES);
}

C128_API size_t c128_plan_workspace_size(int64_t num_requests) {
  if (num_requests < 0 || num_requests > INT32_MAX / 2) return 0;
  return (size_t)c128__ws_offset(num_requests, C128__WS_PART_END) * sizeof(int64_t);
}

/* step 0; count and scan per chunk; pages, verdict, claims, windows, finish */
C128__FN int c128__plan_steps(const c128__plan_params *p) {
  return 6 + 2 * (int)((p->a.num_requests + C128__PLAN_THREADS - 1) / C128__PLAN_THREADS);
}

/* Request i of the device planner's batch, from a c128_request array or the engine's arrays. */
C128__FN c128_request c128__request_at(const c128_device_plan_args *a, int decode, int64_t i) {
  if (a->requests) return a->requests[i];
  c128_request q;
  q.pool_index = a->pool_indices ? a->pool_indices[i] : (int32_t)i;
  q.seq_len = a->seq_lens[i];
  q.extend_len = decode ? 1 : c128__extend_of(a->query_start, i);
  return q;
}

/* Request owning plan slot (or unit) k: the last i with sums[i] <= k (sums non-decreasing). */
C128__FN int64_t c128__owner(const int64_t *sums, int64_t n, int64_t k) {
  int64_t lo = 0, hi = n - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (sums[mid] <= k) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/* The order of the host planner: request i's checks (and the row limit) at place units_before +
   i, its unit u at units_before + i + 1 + u; the status in the low byte. */
C128__FN uint64_t c128__fail_key(int64_t place, c128_status st) { return (uint64_t)place << 8 | (uint32_t)st; }
C128__FN void c128__fail_at(uint64_t *failed, uint64_t key) {
#ifdef __CUDA_ARCH__
  atomicMin((unsigned long long *)failed, (unsigned long long)key);
#else
  if (key < *failed) *failed = key;
#endif
}

C128__FN void c128__plan_count(const c128__plan_params *p, int64_t base, int tid, c128__plan_chunk *c) {
  const int64_t i = base + tid;
  c->check[tid] = C128_SUCCESS;
  c->num_compress[tid] = c->num_write[tid] = c->rows[tid] = c->units[tid] = 0;
  if (i >= p->a.num_requests) return;
  const c128_request q = c128__request_at(&p->a, p->decode, i); /* the one read of the caller's request */
  c128__ws_requests(p)[i] = q;
  const c128_ring *r = &p->a.ring;
  if (p->decode) {
    c128_decode_plan d;
    c->check[tid] = c128__decode_plan_of(r, q, &d);
    return;
  }
  if ((c->check[tid] = c128__request_check(r, q, p->a.verify)) != C128_SUCCESS || c128__absent(q)) return;
  const c128__shape s = c128__request_shape(r, q);
  c->num_compress[tid] = s.num_compress, c->num_write[tid] = s.num_write, c->rows[tid] = q.extend_len;
  c->units[tid] = c128__units_of(q, s);
}

/* The running totals live in registers: read and written through `c` in every iteration (shared
   memory the compiler must assume the sums' stores may alias), 128 one-token requests took most
   of kernel 1's 30 us on the H200. */
C128__FN void c128__plan_scan(const c128__plan_params *p, int64_t base, c128__plan_chunk *c) {
  int64_t *sum_c = c128__ws_sums(p, C128__WS_SUM_COMPRESS), *sum_w = c128__ws_sums(p, C128__WS_SUM_WRITE);
  int64_t *sum_r = c128__ws_sums(p, C128__WS_SUM_ROWS), *sum_u = c128__ws_sums(p, C128__WS_SUM_UNITS);
  int64_t compress = c->total_compress, write = c->total_write, rows = c->total_rows, units = c->total_units;
  uint64_t failed = c->failed;
  const int count =
      p->a.num_requests - base < C128__PLAN_THREADS ? (int)(p->a.num_requests - base) : C128__PLAN_THREADS;
  for (int t = 0; t < count; ++t) {
    const int64_t i = base + t;
    sum_c[i] = compress, sum_w[i] = write, sum_r[i] = rows, sum_u[i] = units;
    const c128_status st = c->check[t] != C128_SUCCESS                                   ? (c128_status)c->check[t]
                           : c->rows[t] > 0 && rows + c->rows[t] > C128_MAX_PREFILL_ROWS ? C128_ERROR_TOO_MANY_ROWS
                                                                                         : C128_SUCCESS;
    if (st != C128_SUCCESS && failed == ~0ull) failed = c128__fail_key(units + i, st);
    compress += c->num_compress[t], write += c->num_write[t], rows += c->rows[t], units += c->units[t];
  }
  c->total_compress = compress, c->total_write = write, c->total_rows = rows, c->total_units = units;
  c->failed = failed;
}

/* Units g = tid, tid + 256, ... of the batch: their pages (`claims` 0), or, the batch having
   passed, their claims (1). A page that no longer checks (a page table changed) claims nothing:
   its plan's emission fails. */
C128__FN void c128__plan_units(const c128__plan_params *p, int claims, int tid, const c128__plan_chunk *c) {
  if (claims && c->status != C128_SUCCESS) return;
  const c128_ring *r = &p->a.ring;
  const c128_request *q = c128__ws_requests(p);
  const int64_t *sum_u = c128__ws_sums(p, C128__WS_SUM_UNITS), n = p->a.num_requests;
  uint64_t *ws = (uint64_t *)p->a.workspace, *claimed = c128__ws_pages(p);
  const int64_t slots = c128__ring_claim_slots(r, n, p->decode);
  for (int64_t g = tid; g < c->total_units; g += C128__PLAN_THREADS) {
    const int64_t i = c128__owner(sum_u, n, g), u = g - sum_u[i];
    const c128__shape s = c128__request_shape(r, q[i]);
    if (claims) {
      if (!c128__claim_unit(r, q[i], s, u, claimed, slots, i)) ws[C128__WS_SHARED] = 1;
    } else {
      const c128_status st = c128__unit_pages(r, q[i], s, u);
      if (st != C128_SUCCESS) c128__fail_at(&ws[C128__WS_FAILED], c128__fail_key(g + i + 1, st));
    }
  }
}

/* A decode batch that passed: thread tid claims the rows its requests tid, tid + 256, ... write
   (`windows` 0), then, every claim made, checks the blocks their windows read (1). */
C128__FN void c128__plan_decode_claims(const c128__plan_params *p, int windows, int tid, const c128__plan_chunk *c) {
  if (c->status != C128_SUCCESS || !p->decode) return;
  const c128_ring *r = &p->a.ring;
  const c128_request *q = c128__ws_requests(p);
  uint64_t *claimed = c128__ws_pages(p), *shared = (uint64_t *)p->a.workspace + C128__WS_SHARED;
  const int64_t slots = c128__ring_claim_slots(r, p->a.num_requests, p->decode);
  for (int64_t i = tid; i < p->a.num_requests; i += C128__PLAN_THREADS) {
    c128_decode_plan d;
    if (c128__decode_plan_of(r, q[i], &d) == C128_SUCCESS && d.seq_len &&
        (windows ? !c128__window_unclaimed(r, d, claimed, slots) : !c128__claim_row(r, d.write_loc, claimed, slots, i)))
      *shared = 1;
  }
}

C128__FN void c128__plan_finish(const c128__plan_params *p, c128__plan_chunk *c) {
  const int64_t n = p->a.num_requests;
  int64_t *ws = (int64_t *)p->a.workspace;
  c128__ws_sums(p, C128__WS_SUM_COMPRESS)[n] = c->total_compress,
                   c128__ws_sums(p, C128__WS_SUM_WRITE)[n] = c->total_write;
  c128__ws_sums(p, C128__WS_SUM_ROWS)[n] = c->total_rows, c128__ws_sums(p, C128__WS_SUM_UNITS)[n] = c->total_units;
  if (c->status == C128_SUCCESS && !p->decode &&
      (c->total_compress > p->a.capacity || c->total_write > p->a.capacity ||
       (p->a.output_index && c->total_rows > p->a.capacity)))
    c->status = C128_ERROR_CAPACITY_TOO_SMALL;
  if (c->status == C128_SUCCESS && ws[C128__WS_SHARED]) c->status = C128_ERROR_PAGE_SHARED;
  const int ok = c->status == C128_SUCCESS && !p->decode;
  ws[C128__WS_STATUS] = c->status;
  ws[C128__WS_COMPRESS] = ok ? c->total_compress : 0;
  ws[C128__WS_WRITE] = ok ? c->total_write : 0;
  *p->a.status = c->status;
  if (p->a.counts) p->a.counts[0] = ws[C128__WS_COMPRESS], p->a.counts[1] = ws[C128__WS_WRITE];
}

/* Step `step` of kernel 1 for thread tid. */
C128__FN void c128__plan_step(const c128__plan_params *p, int step, int tid, c128__plan_chunk *c) {
  const int last = c128__plan_steps(p) - 1;
  if (step == 0) {
    const int64_t slots = c128__ring_claim_slots(&p->a.ring, p->a.num_requests, p->decode);
    uint64_t *claimed = c128__ws_pages(p), *ws = (uint64_t *)p->a.workspace;
    for (int64_t k = tid; k < slots; k += C128__PLAN_THREADS) claimed[k] = 0;
    if (tid == 0) {
      ws[C128__WS_SHARED] = 0, ws[C128__WS_FAILED] = ~0ull;
      c->total_compress = c->total_write = c->total_units = 0, c->status = C128_SUCCESS, c->failed = ~0ull;
      /* the engine's query_start names the batch's input rows, the first possibly past row 0 */
      const int from_query = !p->decode && !p->a.requests && p->a.query_start;
      c->total_rows = from_query ? p->a.query_start[0] : 0;
      if (c->total_rows < 0) c->failed = c128__fail_key(0, C128_ERROR_NEGATIVE_SIZE), c->total_rows = 0;
    }
  } else if (step == last) {
    if (tid == 0) c128__plan_finish(p, c);
  } else if (step == last - 4) {
    c128__plan_units(p, 0, tid, c);
  } else if (step == last - 3) {
    if (tid == 0) {
      const uint64_t unit = ((const uint64_t *)p->a.workspace)[C128__WS_FAILED];
      const uint64_t first = unit < c->failed ? unit : c->failed;
      c->status = first == ~0ull ? C128_SUCCESS : (int32_t)(first & 0xFF);
    }
  } else if (step == last - 2) {
    c128__plan_units(p, 1, tid, c);
    c128__plan_decode_claims(p, 0, tid, c);
  } else if (step == last - 1) {
    c128__plan_decode_claims(p, 1, tid, c);
  } else {
    const int64_t base = (int64_t)((step - 1) / 2) * C128__PLAN_THREADS;
    if ((step - 1) % 2 == 0) c128__plan_count(p, base, tid, c);
    else if (tid == 0) c128__plan_scan(p, base, c);
  }
}

/* Kernel 2, slot k. A page that no longer checks (a page table changed between the kernels)
   gives a sentinel and marks the batch. */
C128__FN void c128__plan_emit(const c128__plan_params *p, int64_t k) {
  const int64_t *ws = (const int64_t *)p->a.workspace;
  const c128_device_plan_args *a = &p->a;
  const c128_request *q = c128__ws_requests(p);
  c128_status st = C128_SUCCESS;
  if (p->decode) {
    if (k >= a->num_requests) return;
    c128_decode_plan d;
    if (ws[C128__WS_STATUS] == C128_SUCCESS) st = c128__decode_plan_of(&a->ring, q[k], &d);
    const c128_decode_plan padding = C128_PADDING_DECODE_PLAN;
    const int planned = ws[C128__WS_STATUS] == C128_SUCCESS && st == C128_SUCCESS;
    a->decode[k] = planned ? d : padding;
    if (a->output_index) a->output_index[k] = planned && d.seq_len ? a->output_first[k] : -1;
  } else {
    if (k >= a->capacity) return;
    const c128_compress_plan no_compress = C128_INVALID_COMPRESS_PLAN;
    const c128_write_plan no_write = C128_INVALID_WRITE_PLAN;
    c128_compress_plan c = no_compress;
    c128_write_plan w = no_write;
    if (k < ws[C128__WS_COMPRESS]) {
      const int64_t *sums = c128__ws_sums(p, C128__WS_SUM_COMPRESS), i = c128__owner(sums, a->num_requests, k);
      st = c128__compress_plan_of(&a->ring, q[i], c128__request_shape(&a->ring, q[i]), k - sums[i],
                                  c128__ws_sums(p, C128__WS_SUM_ROWS)[i], &c);
      if (st != C128_SUCCESS) c = no_compress;
      else if (a->output_index) a->output_index[c.ragged_id] = (int64_t)a->output_first[i] + (k - sums[i]);
    }
    if (k < ws[C128__WS_WRITE]) {
      const int64_t *sums = c128__ws_sums(p, C128__WS_SUM_WRITE), i = c128__owner(sums, a->num_requests, k);
      const c128_status sw = c128__write_plan_of(&a->ring, q[i], c128__request_shape(&a->ring, q[i]), k - sums[i],
                                                 c128__ws_sums(p, C128__WS_SUM_ROWS)[i], &w);
      if (sw != C128_SUCCESS) w = no_write, st = sw;
    }
    a->compress[k] = c;
    a->write[k] = w;
  }
  if (st != C128_SUCCESS) {
    *a->status = st;
    if (a->counts) a->counts[0] = a->counts[1] = 0;
  }
}

/* One block a launch: a bound of one block an SM lets ptxas use the registers (without it, it
   aimed at 40 and spilled). */
static __global__ void __launch_bounds__(C128__PLAN_THREADS, 1) c128__plan_count_kernel(const c128__plan_params p) {
  __shared__ c128__plan_chunk c;
  c128__pdl_trigger();
  c128__pdl_wait();
  const int steps = c128__plan_steps(&p);
  for (int s = 0; s < steps; ++s) {
    if (s) __syncthreads();
    c128__plan_step(&p, s, (int)threadIdx.x, &c);
  }
}

static __global__ void __launch_bounds__(C128__PLAN_THREADS) c128__plan_emit_kernel(const c128__plan_params p) {
  c128__pdl_trigger();
  c128__pdl_wait();
  c128__plan_emit(&p, (int64_t)blockIdx.x * C128__PLAN_THREADS + threadIdx.x);
}

/* A refused call's status (and zero counts, where usable), for a captured step to read. */
typedef struct c128__refusal {
  int32_t *status;
  int64_t *counts;
  int32_t value;
} c128__refusal;

C128__FN void c128__write_refusal(const c128__refusal *r) {
  if (r->counts) r->counts[0] = r->counts[1] = 0;
  *r->status = r->value;
}

static __global__ void __launch_bounds__(1) c128__plan_refused_kernel(const c128__refusal r) {
  c128__write_refusal(&r);
}

static c128_status c128__check_device_plan_args(const c128_device_plan_args *a, int decode) {
  c128_status st = c128__check_ring(&a->ring);
  if (st != C128_SUCCESS) return st;
  if (a->num_requests < 0 || a->capacity < 0) return C128_ERROR_NEGATIVE_SIZE;
  if (a->num_requests > INT32_MAX / 2 || (!decode && a->capacity > C128_MAX_PREFILL_ROWS))
    return C128_ERROR_TOO_MANY_PLANS;
  /* the requests: a c128_request array, or the engine's arrays (query_start for prefill only) */
  const int lens = !a->requests && a->seq_lens;
  if (!a->status || !a->workspace ||
      (a->num_requests > 0 && !a->requests && (!a->seq_lens || (!decode && !a->query_start))))
    return C128_ERROR_NULL_POINTER;
  if (decode ? a->num_requests > 0 && !a->decode : a->capacity > 0 && (!a->compress || !a->write))
    return C128_ERROR_NULL_POINTER;
  if (!a->output_first != !a->output_index) return C128_ERROR_NULL_POINTER;
  if (c128__misaligned(a->workspace, sizeof(int64_t)) || c128__misaligned(a->counts, sizeof(int64_t)) ||
      c128__misaligned(a->status, sizeof(int32_t)) || c128__misaligned(a->compress, sizeof(c128_compress_plan)) ||
      c128__misaligned(a->write, sizeof(c128_write_plan)) || c128__misaligned(a->decode, sizeof(c128_decode_plan)) ||
      c128__misaligned(a->requests, sizeof(int32_t)) || c128__misaligned(a->seq_lens, sizeof(int32_t)) ||
      c128__misaligned(a->query_start, sizeof(int32_t)) || c128__misaligned(a->pool_indices, sizeof(int32_t)) ||
      c128__misaligned(a->output_first, sizeof(int32_t)) || c128__misaligned(a->output_index, sizeof(int64_t)))
    return C128_ERROR_MISALIGNED;
  const uint64_t ws = c128_plan_workspace_size(a->num_requests), n = (uint64_t)a->num_requests;
  /* *status is an output like the others: the emit kernel may write it while other threads
     still read the page table. */
  const c128__extent out[7] = {{a->workspace, ws},
                               {decode ? NULL : a->compress, (uint64_t)a->capacity * sizeof(c128_compress_plan)},
                               {decode ? NULL : a->write, (uint64_t)a->capacity * sizeof(c128_write_plan)},
                               {decode ? a->decode : NULL, (uint64_t)a->num_requests * sizeof(c128_decode_plan)},
                               {a->counts, 2 * sizeof(int64_t)},
                               {a->status, sizeof(int32_t)},
                               {a->output_index, (uint64_t)(decode ? a->num_requests : a->capacity) * sizeof(int64_t)}};
  const c128_state_layout *l = &a->ring.state_layout;
  const uint64_t table = c128__block_table_bytes(l);
  const c128__extent in[8] = {{lens ? NULL : a->requests, n * sizeof(c128_request)},
                              {a->ring.page_table, c128__page_table_bytes(&a->ring)},
                              {lens ? a->seq_lens : NULL, n * sizeof(int32_t)},
                              {lens && !decode ? a->query_start : NULL, (n + 1) * sizeof(int32_t)},
                              {lens ? a->pool_indices : NULL, n * sizeof(int32_t)},
                              {l->block_table, table},
                              {l->block_table ? l->score_block_table : NULL, table},
                              {a->output_first, n * sizeof(int32_t)}};
  for (int i = 0; i < 7; ++i) {
    for (int j = i + 1; j < 7; ++j)
      if (c128__overlap(out[i].ptr, out[i].bytes, out[j].ptr, out[j].bytes)) return C128_ERROR_ALIASED;
    for (int j = 0; j < 8; ++j)
      if (c128__overlap(out[i].ptr, out[i].bytes, in[j].ptr, in[j].bytes)) return C128_ERROR_ALIASED;
  }
  return C128_SUCCESS;
}

/* The refusal also goes to *status (and zero counts) where those pointers are usable. */
static c128_status c128__plan_refuse(const c128_device_plan_args *a, c128_status st, int on_device,
                                     cudaStream_t stream) {
  if (!a || !a->status || c128__misaligned(a->status, sizeof(int32_t))) return st;
  c128__refusal r;
  r.status = a->status, r.value = st;
  r.counts = a->counts && !c128__misaligned(a->counts, sizeof(int64_t)) &&
                     !c128__overlap(a->counts, 2 * sizeof(int64_t), a->status, sizeof(int32_t))
                 ? a->counts
                 : NULL;
  /* Without PDL: the kernel does not wait, and a predecessor may still read status or counts. */
  if (on_device) (void)c128__launch((const void *)c128__plan_refused_kernel, 1, 1, 0, stream, &r, NULL, 1);
  else c128__write_refusal(&r);
  return st;
}

static c128_status c128__plan_device(const c128_device_plan_args *a, int decode, cudaStream_t stream, int on_device) {
  if (!a) return C128_ERROR_NULL_POINTER;
  const c128_status st = c128__check_device_plan_args(a, decode);
  if (st != C128_SUCCESS) return c128__plan_refuse(a, st, on_device, stream);
  c128__plan_params p;
  memset(&p, 0, sizeof p);
  p.a = *a;
  p.decode = decode;
  const int64_t slots = decode ? a->num_requests : a->capacity;
  if (!on_device) {
    c128__plan_chunk c;
    memset(&c, 0, sizeof c);
    const int steps = c128__plan_steps(&p);
    for (int s = 0; s < steps; ++s)
      for (int tid = 0; tid < C128__PLAN_THREADS; ++tid) c128__plan_step(&p, s, tid, &c);
    for (int64_t k = 0; k < slots; ++k) c128__plan_emit(&p, k);
    return C128_SUCCESS;
  }
  c128_status launched =
      c128__launch((const void *)c128__plan_count_kernel, 1, C128__PLAN_THREADS, a->pdl, stream, &p, NULL, 1);
  if (launched == C128_SUCCESS && slots > 0)
    launched = c128__launch((const void *)c128__plan_emit_kernel, (slots + C128__PLAN_THREADS - 1) / C128__PLAN_THREADS,
                            C128__PLAN_THREADS, a->pdl, stream, &p, NULL, 1);
  return launched;
}

C128_API c128_status c128_plan_prefill_device(const c128_device_plan_args *a, cudaStream_t s) {
  return c128__plan_device(a, 0, s, 1);
}
C128_API c128_status c128_plan_decode_device(const c128_device_plan_args *a, cudaStream_t s) {
  return c128__plan_device(a, 1, s, 1);
}
C128_API c128_status c128_plan_prefill_device_host(const c128_device_plan_args *a) {
  return c128__plan_device(a, 0, NULL, 0);
}
C128_API c128_status c128_plan_decode_device_host(const c128_device_plan_args *a) {
  return c128__plan_device(a, 1, NULL, 0);
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
