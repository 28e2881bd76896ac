/* bench.c - the c128 benchmark (BENCHMARKS.md).

   Times every case of BENCHMARKS.md with CUDA events after a warm-up, rotating over enough
   independent inputs and states that each launch misses the 60 MB L2, and writes one CSV row per
   (case, variant, timing mode): median, p10 and p90 of the per-launch time, the minimum bytes the
   case must move (SPEC 10), GB/s and % of a device-to-device copy measured in the same run, and
   for decode the time of an empty launch of the same grid (the grid c128_decode launches), also
   measured in the same run.

   Timing modes: "stream"     many launches back to back between two events, per-launch figure;
                 "graph"      the same launches captured in CUDA graphs, per-launch figure;
                 "step_graph" one decode step per graph, replayed back to back (what a serving
                              engine does each step), per-step figure.
   Comparisons (the two epilogues, PDL on/off) alternate A B A B within one run.

   Variants of every decode and prefill case (two-warp epilogue), after the cases themselves:
     layout_<case>  each other engine's state layout (bench_layouts: vLLM's blocks of 8 through a
                    shuffled position-indexed table with biased scores, blocks of 16, TensorRT-LLM's
                    two planes and two tables of 128 and 256 rows with biased scores, a ring of
                    128-row blocks through a table) A/B against today's layout on the same logical
                    data and plans (variants <layout> and today_vs_<layout>); bytes: today's plus
                    the table entries read.
     entry_<case>   today's pooled launch (variant pooled) against DeepSeek-V4's cache entries,
                    FP8 and BF16, written by the decode / compress launch itself (fused_fp8,
                    fused_bf16) or by the pooled launch and bench's epilogue launch after it
                    (split_fp8, split_bf16; bench_epilogue.cuh), A B C D E, E D C B A; bytes: the
                    pooled path's less the pooled rows plus the entries (584 B FP8, 1024 B BF16).
   Set 0 of every variant is compared with today's first, bit for bit (the check column).

   Usage: c128_bench [--csv FILE] [--commit SHA] [--quick] [--filter SUBSTRING[|SUBSTRING...]]
                     [--profile CASE:SIZE:STATE[:VARIANT]] [--cpu-check] [--pdl 0|1|2]
                     [--entry-group G] [--sizes N[,N...]]
   --pdl sets args.pdl of every case's launches (default 0; 2 = C128_PDL_PLANS_READY: the plans
   are uploaded once, before any launch).
   --entry-group sets the group (requests_per_block, windows_per_block) of the fused cache-entry
   launches (default 0: automatic); from head_dim / 64 up their blocks take whole windows.
   --sizes runs only the batch sizes and token counts listed (with --quick: those, not its own).
   --filter runs the cases whose name holds any of the substrings (layout_|entry_: only the
   variants), or is one that starts with '=' (=decode_boundary: today's pooled case alone); the
   ceilings and empty launches always run.
   The commit is also read from $BENCH_COMMIT (the device copy of the tree may lack .git).
   Without a GPU it says so and exits with status 77; --cpu-check then builds the small cases
   in host memory and runs them through the host runner of both epilogues instead, then every
   variant of them, comparing pooled rows, entries and states (bench_cpu_variants). */
#define _POSIX_C_SOURCE 200809L /* popen */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "bench.h"

/* ---- configuration -------------------------------------------------------------------- */
#define BENCH_FOOTPRINT_BYTES (256.0 * 1024.0 * 1024.0) /* rotation target: > 4x the 60 MB L2 */
#define BENCH_MAX_SETS 4096                             /* rotation sets per case */
#define BENCH_SAMPLE_US 1000.0                          /* each sample times about 1 ms of launches */
#define BENCH_ROUNDS 4                                  /* A B A B; more variants: A B C, C B A */
#define BENCH_MAX_VARIANTS 5                            /* timed in one run: today's and 4 cache-entry paths */
#define BENCH_MAX_SAMPLES 64                            /* per round */
#define BENCH_MAX_GRAPHS 64
#define BENCH_STEP_GRAPHS 256                      /* one-step graphs per variant; a multiple of 128 */
#define BENCH_MAX_CALL_ROWS 65536                  /* u16 ragged_id: input rows per prefill call */
#define BENCH_EXTEND_LEN 1024                      /* prefill_extend: tokens per request */
#define BENCH_EXTEND_PREFIX (4 * C128_WINDOW + 64) /* its first window has 64 state rows */
#define BENCH_COPY_BYTES ((size_t)1 << 30)

static const int64_t bench_batches[] = {1, 8, 32, 64, 128, 256, 1024};
static const int64_t bench_tokens[] = {8192, 32768, 131072};
#define BENCH_COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* The examples' CHECK / CUDA, with file:line, and status strings from the two-warp copy. */
#define BENCH_CUDA(call)                                                                     \
  do {                                                                                       \
    cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess) {                                                                 \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      exit(1);                                                                               \
    }                                                                                        \
  } while (0)
#define BENCH_C128(call)                                                                               \
  do {                                                                                                 \
    c128_status s_ = (call);                                                                           \
    if (s_ != C128_SUCCESS) {                                                                          \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, bench_two_warp_status_string(s_)); \
      exit(1);                                                                                         \
    }                                                                                                  \
  } while (0)

/* ---- the two library copies ------------------------------------------------------------- */
typedef struct bench_lib {
  const char *name;
  c128_status (*decode)(const c128_decode_args *, cudaStream_t);
  c128_status (*prefill)(const c128_prefill_args *, cudaStream_t);
  c128_status (*decode_host)(const c128_decode_args *, const c128_host_options *);
  c128_status (*prefill_host)(const c128_prefill_args *, const c128_host_options *);
  int (*epilogue)(void);
} bench_lib;

static const bench_lib bench_libs[2] = {
    {"two_warp", bench_two_warp_decode, bench_two_warp_prefill, bench_two_warp_decode_host, bench_two_warp_prefill_host,
     bench_two_warp_epilogue},
    {"legacy", bench_legacy_decode, bench_legacy_prefill, bench_legacy_decode_host, bench_legacy_prefill_host,
     bench_legacy_epilogue},
};

/* ---- options and run state -------------------------------------------------------------- */
static struct {
  const char *csv_path, *commit, *filter, *profile;
  int quick, cpu_check, samples_per_round;
  int32_t pdl;         /* args.pdl of every case's launches (--pdl) */
  int32_t entry_group; /* the fused cache-entry launches' group (--entry-group; 0: automatic) */
  const char *sizes;   /* --sizes: the batch sizes and token counts to run, comma-separated */
  double footprint;
} bench_opt;

static int bench_gpu; /* buffers live on the device (else host memory, for --cpu-check) */
static cudaStream_t bench_stream;
static cudaEvent_t bench_events[BENCH_MAX_SAMPLES + 1];
static FILE *bench_csv;
static char bench_meta[512];                    /* gpu,driver,nvcc,cuda,commit prefix of every CSV row */
static double bench_copy_gbps, bench_read_gbps; /* the two ceilings, measured at the start */

/* ---- memory that is device memory in a GPU run and host memory in --cpu-check ---------- */
static void *bench_alloc(size_t bytes) {
  void *p = NULL;
  if (bytes == 0) bytes = 16;
  if (bench_gpu) BENCH_CUDA(cudaMalloc(&p, bytes));
  else if (!(p = malloc(bytes))) {
    fprintf(stderr, "out of host memory (%zu bytes)\n", bytes);
    exit(1);
  }
  return p;
}
static void bench_release(void *p) {
  if (!p) return;
  if (bench_gpu) BENCH_CUDA(cudaFree(p));
  else free(p);
}
static void bench_upload(void *dst, const void *src, size_t bytes) {
  if (bench_gpu) BENCH_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  else memcpy(dst, src, bytes);
}
static void bench_fill(void *base, int64_t rows, int64_t row_elems, int64_t kv_elems, int bf16, float kv_scale,
                       float score_scale, uint64_t seed) {
  if (bench_gpu)
    BENCH_CUDA(bench_fill_device(base, rows, row_elems, kv_elems, bf16, kv_scale, score_scale, seed, bench_stream));
  else bench_fill_host(base, rows, row_elems, kv_elems, bf16, kv_scale, score_scale, seed);
}
static void bench_memset(void *base, int byte, size_t bytes) {
  if (bench_gpu) BENCH_CUDA(cudaMemsetAsync(base, byte, bytes, bench_stream));
  else memset(base, byte, bytes);
}
static void bench_poison(void *base, size_t bytes) { bench_memset(base, 0xFF, bytes); /* NaN */ }
/* Copies within the benchmark's memory, and out of it into host memory, ordered after
   everything on bench_stream (which does not synchronise with the legacy stream). */
static void bench_copy_mem(void *dst, const void *src, size_t bytes) {
  if (!bench_gpu) {
    memcpy(dst, src, bytes);
    return;
  }
  BENCH_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, bench_stream));
  BENCH_CUDA(cudaStreamSynchronize(bench_stream));
}
static void bench_download(void *dst, const void *src, size_t bytes) {
  if (!bench_gpu) {
    memcpy(dst, src, bytes);
    return;
  }
  BENCH_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, bench_stream));
  BENCH_CUDA(cudaStreamSynchronize(bench_stream));
}
static void *bench_host(size_t bytes) { /* host scratch */
  void *p = malloc(bytes ? bytes : 16);
  if (!p) {
    fprintf(stderr, "out of host memory (%zu bytes)\n", bytes);
    exit(1);
  }
  return p;
}

/* ---- cases ------------------------------------------------------------------------------ */
typedef enum bench_kind {
  BENCH_DECODE_BOUNDARY, /* every request completes a window this step */
  BENCH_DECODE_OFF,      /* no request does */
  BENCH_DECODE_MIX,      /* steady state: 1 in 128 requests does */
  BENCH_PREFILL_1REQ,    /* N tokens from position 0 as one request */
  BENCH_PREFILL_8REQ,    /* N tokens as 8 requests of N / 8 */
  BENCH_PREFILL_EXTEND,  /* N / 1024 requests extending by 1024 from prefix 128k + 64 */
  BENCH_KINDS
} bench_kind;
static const char *const bench_kind_names[BENCH_KINDS] = {"decode_boundary", "decode_off",   "decode_mix",
                                                          "prefill_1req",    "prefill_8req", "prefill_extend"};

typedef struct bench_case {
  bench_kind kind;
  int decode, state_bf16;
  int64_t size;   /* decode batch B, or prefill tokens N */
  int64_t nsets;  /* independent inputs/states the launches rotate over */
  int64_t period; /* units per sample must be a multiple (decode_mix: exact 1-in-128 share) */
  int calls;      /* prefill calls per unit (N > 65536 rows is chunked) */
  double bytes;   /* minimum bytes one unit must move (SPEC 10), averaged over the sets */
  int64_t grid;   /* decode: blocks of the launch */
  int64_t boundary_in_set0, compress_per_unit, write_per_unit, state_rows_read_per_unit;
  /* buffers */
  void *state, *input, *output, *plans_c, *plans_w;
  float *ape, *normed;
  size_t state_bytes, input_bytes, output_bytes, plans_c_bytes, plans_w_bytes;
  int64_t pages, out_rows_per_unit;
  int64_t rows, nc_max, nw_max; /* prefill: input rows per call, plans a unit's arrays hold */
  double emitted;               /* windows per unit, averaged over the sets */
  c128_decode_args *dargs;      /* [nsets] */
  c128_prefill_args *pargs;     /* [nsets * calls] */
  /* host copies, for the variants (which plan the same requests) and the checks */
  c128_request *reqs; /* decode: [nsets * B] */
  void *host_plans_c, *host_plans_w;
} bench_case;

static size_t bench_state_row_bytes(const bench_case *c) { return BENCH_ROW_ELEMS * (c->state_bf16 ? 2u : 4u); }
#define BENCH_INPUT_ROW_BYTES (BENCH_ROW_ELEMS * sizeof(float))
#define BENCH_OUTPUT_ROW_BYTES (BENCH_HEAD_DIM * sizeof(float))

static int64_t bench_gcd(int64_t a, int64_t b) { return b ? bench_gcd(b, a % b) : a; }
static int64_t bench_round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

static int bench_is_boundary(bench_kind kind, int64_t q) {
  return kind == BENCH_DECODE_BOUNDARY || (kind == BENCH_DECODE_MIX && q % C128_WINDOW == 0);
}

static int64_t bench_sets_for(double bytes_per_unit) {
  int64_t n = (int64_t)ceil(bench_opt.footprint / bytes_per_unit);
  return n < 2 ? 2 : n > BENCH_MAX_SETS ? BENCH_MAX_SETS : n;
}

static void bench_alloc_common(bench_case *c) {
  c->state = bench_alloc(c->state_bytes);
  c->input = bench_alloc(c->input_bytes);
  c->output = bench_alloc(c->output_bytes);
  c->ape = (float *)bench_alloc(C128_WINDOW * BENCH_HEAD_DIM * sizeof(float));
  /* kv ~ U(-1, 1), raw scores ~ U(-4, 4), ape ~ U(-0.5, 0.5): never zeros */
  bench_fill(c->state, c->pages * C128_WINDOW, BENCH_ROW_ELEMS, BENCH_HEAD_DIM, c->state_bf16, 1.0f, 4.0f,
             0x5747 + (uint64_t)c->kind);
  bench_fill(c->input, (int64_t)(c->input_bytes / BENCH_INPUT_ROW_BYTES), BENCH_ROW_ELEMS, BENCH_HEAD_DIM, 0, 1.0f,
             4.0f, 0x1A9 + (uint64_t)c->size);
  bench_fill(c->ape, C128_WINDOW, BENCH_HEAD_DIM, 0, 0, 0.0f, 0.5f, 0xA9E);
  bench_poison(c->output, c->output_bytes);
}

/* Decode: request q = set * B + b. A boundary request owns a whole page (rows 0..126 read, row
   127 written); the others write one row each, packed into B * m further pages so that the B
   requests of one step always sit on distinct pages. Legacy ring: page = pool index. */
static void bench_build_decode(bench_case *c, int alloc) {
  const int64_t B = c->size;
  const double sb = (double)bench_state_row_bytes(c);
  const double emit = (C128_WINDOW - 1) * sb + BENCH_INPUT_ROW_BYTES + sb + BENCH_OUTPUT_ROW_BYTES;
  const double quiet = BENCH_INPUT_ROW_BYTES + sb;
  const double share = c->kind == BENCH_DECODE_BOUNDARY ? 1.0 : c->kind == BENCH_DECODE_OFF ? 0.0 : 1.0 / C128_WINDOW;
  c->period = c->kind == BENCH_DECODE_MIX ? C128_WINDOW / bench_gcd(B, C128_WINDOW) : 1;
  c->nsets = bench_round_up(bench_sets_for(B * (share * emit + (1.0 - share) * quiet)), c->period);
  c->calls = 1;
  c->grid = B * C128_NUM_SPLIT(BENCH_HEAD_DIM);
  const int64_t total = c->nsets * B;
  int64_t boundary_pages = 0;
  for (int64_t q = 0; q < total; ++q) boundary_pages += bench_is_boundary(c->kind, q);
  const int64_t m = (c->nsets + C128_WINDOW - 3) / (C128_WINDOW - 2); /* slots 0..125 of a page */
  const int64_t quiet_pages = c->kind == BENCH_DECODE_BOUNDARY ? 0 : B * m;
  c->pages = boundary_pages + quiet_pages;
  for (int64_t b = 0; b < B; ++b) c->boundary_in_set0 += bench_is_boundary(c->kind, b);

  c128_request *reqs = (c128_request *)calloc((size_t)total, sizeof *reqs);
  c128_decode_plan *plans = (c128_decode_plan *)calloc((size_t)total, sizeof *plans);
  if (!reqs || !plans) exit(1);
  double bytes = 0.0;
  int64_t next_page = 0;
  for (int64_t q = 0; q < total; ++q) {
    if (bench_is_boundary(c->kind, q)) {
      reqs[q].pool_index = (int32_t)next_page++;
      reqs[q].seq_len = (int32_t)(C128_WINDOW * (1 + q % 3));
      bytes += emit;
    } else {
      const int64_t slot = (q / quiet_pages) % (C128_WINDOW - 2);
      reqs[q].pool_index = (int32_t)(boundary_pages + q % quiet_pages);
      reqs[q].seq_len = (int32_t)(2 * C128_WINDOW + slot + 1);
      bytes += quiet;
    }
    reqs[q].extend_len = 1;
  }
  c->bytes = bytes / (double)c->nsets;
  c->emitted = (double)boundary_pages / (double)c->nsets;
  c128_ring ring;
  memset(&ring, 0, sizeof ring); /* legacy layout */
  ring.state_pages = c->pages;
  for (int64_t r = 0; r < c->nsets; ++r) BENCH_C128(bench_two_warp_plan_decode(&ring, reqs + r * B, B, plans + r * B));

  c->state_bytes = (size_t)c->pages * C128_WINDOW * bench_state_row_bytes(c);
  c->input_bytes = (size_t)total * BENCH_INPUT_ROW_BYTES;
  c->output_bytes = (size_t)total * BENCH_OUTPUT_ROW_BYTES;
  c->plans_c_bytes = (size_t)total * sizeof *plans;
  c->out_rows_per_unit = B;
  c->dargs = (c128_decode_args *)calloc((size_t)c->nsets, sizeof *c->dargs);
  if (!c->dargs) exit(1);
  if (alloc) {
    bench_alloc_common(c);
    c->plans_c = bench_alloc(c->plans_c_bytes);
    bench_upload(c->plans_c, plans, c->plans_c_bytes);
    c->normed = (float *)bench_alloc((size_t)B * BENCH_OUTPUT_ROW_BYTES);
  }
  for (int64_t r = 0; r < c->nsets; ++r) {
    c128_decode_args *a = &c->dargs[r];
    a->pdl = bench_opt.pdl;
    a->head_dim = BENCH_HEAD_DIM;
    a->state_dtype = c->state_bf16 ? C128_BF16 : C128_F32;
    a->input_dtype = C128_F32;
    a->output_dtype = C128_F32;
    a->state = c->state;
    a->state_pages = c->pages;
    a->input = c->input ? (const char *)c->input + (size_t)(r * B) * BENCH_INPUT_ROW_BYTES : NULL;
    a->ape = c->ape;
    a->output = c->output ? (char *)c->output + (size_t)(r * B) * BENCH_OUTPUT_ROW_BYTES : NULL;
    a->output_rows = B;
    a->plans = c->plans_c ? (const c128_decode_plan *)c->plans_c + r * B : NULL;
    a->batch = B;
  }
  c->reqs = reqs;
  c->host_plans_c = plans;
}

/* Requests of prefill call `call` of set `set`. Returns their count. */
static int64_t bench_prefill_requests(const bench_case *c, int64_t set, int call, c128_request *reqs) {
  const int64_t N = c->size, per_call = N / c->calls;
  int64_t n = 0;
  if (c->kind == BENCH_PREFILL_1REQ || c->kind == BENCH_PREFILL_8REQ) {
    const int64_t nreq = c->kind == BENCH_PREFILL_1REQ ? 1 : 8, chunk = per_call / nreq;
    for (int64_t i = 0; i < nreq; ++i, ++n) { /* chunked prefill: every request advances by chunk */
      reqs[n].pool_index = (int32_t)(set * nreq + i);
      reqs[n].seq_len = (int32_t)((call + 1) * chunk);
      reqs[n].extend_len = (int32_t)chunk;
    }
  } else {
    const int64_t nreq_total = N / BENCH_EXTEND_LEN, nreq = nreq_total / c->calls;
    for (int64_t i = 0; i < nreq; ++i, ++n) { /* distinct requests per call */
      reqs[n].pool_index = (int32_t)(set * nreq_total + call * nreq + i);
      reqs[n].seq_len = BENCH_EXTEND_PREFIX + BENCH_EXTEND_LEN;
      reqs[n].extend_len = BENCH_EXTEND_LEN;
    }
  }
  return n;
}

static void bench_build_prefill(bench_case *c, int alloc) {
  const int64_t N = c->size;
  c->calls = (int)((N + BENCH_MAX_CALL_ROWS - 1) / BENCH_MAX_CALL_ROWS);
  const int64_t rows = N / c->calls;
  const int64_t nreq_total = c->kind == BENCH_PREFILL_1REQ   ? 1
                             : c->kind == BENCH_PREFILL_8REQ ? 8
                                                             : N / BENCH_EXTEND_LEN;
  c->period = 1;
  c->nsets = bench_sets_for((double)N * BENCH_INPUT_ROW_BYTES);
  c->pages = c->nsets * nreq_total;
  c128_ring ring;
  memset(&ring, 0, sizeof ring);
  ring.state_pages = c->pages;

  c128_request *reqs = (c128_request *)calloc((size_t)nreq_total, sizeof *reqs);
  c128_compress_plan *cp = (c128_compress_plan *)calloc((size_t)rows, sizeof *cp);
  c128_write_plan *wp = (c128_write_plan *)calloc((size_t)rows, sizeof *wp);
  if (!reqs || !cp || !wp) exit(1);
  /* Plan counts are the same for every set: take them from set 0. */
  int64_t nc[8] = {0}, nw[8] = {0}, nc_max = 0, nw_max = 0;
  for (int k = 0; k < c->calls; ++k) {
    c128_prefill_plans p;
    memset(&p, 0, sizeof p);
    p.compress = cp, p.write = wp, p.capacity = rows;
    BENCH_C128(bench_two_warp_plan_prefill(&ring, reqs, bench_prefill_requests(c, 0, k, reqs), 0, &p));
    nc[k] = p.num_compress, nw[k] = p.num_write;
    nc_max = nc[k] > nc_max ? nc[k] : nc_max;
    nw_max = nw[k] > nw_max ? nw[k] : nw_max;
  }
  const int64_t units = c->nsets * c->calls;
  c->out_rows_per_unit = c->calls * nc_max;
  c->rows = rows, c->nc_max = nc_max, c->nw_max = nw_max;
  c->state_bytes = (size_t)c->pages * C128_WINDOW * bench_state_row_bytes(c);
  c->input_bytes = (size_t)(units * rows) * BENCH_INPUT_ROW_BYTES;
  c->output_bytes = (size_t)(units * nc_max) * BENCH_OUTPUT_ROW_BYTES;
  c->plans_c_bytes = (size_t)(units * nc_max) * sizeof(c128_compress_plan);
  c->plans_w_bytes = (size_t)(units * nw_max) * sizeof(c128_write_plan);
  c128_compress_plan *all_c = (c128_compress_plan *)calloc((size_t)(units * nc_max) + 1, sizeof *all_c);
  c128_write_plan *all_w = (c128_write_plan *)calloc((size_t)(units * nw_max) + 1, sizeof *all_w);
  c->pargs = (c128_prefill_args *)calloc((size_t)units, sizeof *c->pargs);
  if (!all_c || !all_w || !c->pargs) exit(1);
  if (alloc) {
    bench_alloc_common(c);
    c->plans_c = bench_alloc(c->plans_c_bytes);
    c->plans_w = bench_alloc(c->plans_w_bytes);
  }
  double bytes = 0.0;
  c->compress_per_unit = c->write_per_unit = c->state_rows_read_per_unit = 0;
  for (int64_t r = 0; r < c->nsets; ++r) {
    for (int k = 0; k < c->calls; ++k) {
      const int64_t u = r * c->calls + k;
      c128_prefill_plans p;
      memset(&p, 0, sizeof p);
      p.compress = all_c + u * nc_max, p.write = all_w + u * nw_max, p.capacity = rows;
      if (nc_max == 0) p.compress = cp; /* never happens for these cases; keeps the planner happy */
      if (nw_max == 0) p.write = wp;
      BENCH_C128(bench_two_warp_plan_prefill(&ring, reqs, bench_prefill_requests(c, r, k, reqs), 0, &p));
      if (p.num_compress != nc[k] || p.num_write != nw[k]) {
        fprintf(stderr, "plan counts differ between sets\n");
        exit(1);
      }
      int64_t buffered = 0;
      for (int64_t i = 0; i < p.num_compress; ++i) buffered += p.compress[i].buffer_len;
      bytes += (double)rows * BENCH_INPUT_ROW_BYTES + (double)buffered * (double)bench_state_row_bytes(c) +
               (double)p.num_compress * BENCH_OUTPUT_ROW_BYTES + (double)p.num_write * (double)bench_state_row_bytes(c);
      if (r == 0) {
        c->compress_per_unit += p.num_compress;
        c->write_per_unit += p.num_write;
        c->state_rows_read_per_unit += buffered;
      }
      c128_prefill_args *a = &c->pargs[u];
      a->pdl = bench_opt.pdl;
      a->head_dim = BENCH_HEAD_DIM;
      a->state_dtype = c->state_bf16 ? C128_BF16 : C128_F32;
      a->input_dtype = C128_F32;
      a->output_dtype = C128_F32;
      a->state = c->state;
      a->state_pages = c->pages;
      a->input = c->input ? (const char *)c->input + (size_t)(u * rows) * BENCH_INPUT_ROW_BYTES : NULL;
      a->input_rows = rows;
      a->ape = c->ape;
      a->output = c->output ? (char *)c->output + (size_t)(u * nc_max) * BENCH_OUTPUT_ROW_BYTES : NULL;
      a->output_rows = nc_max;
      a->compress_plans = c->plans_c ? (const c128_compress_plan *)c->plans_c + u * nc_max : NULL;
      a->num_compress = p.num_compress;
      a->write_plans = c->plans_w && nw_max ? (const c128_write_plan *)c->plans_w + u * nw_max : NULL;
      a->num_write = p.num_write;
    }
  }
  c->bytes = bytes / (double)c->nsets;
  c->emitted = (double)c->compress_per_unit;
  if (alloc) {
    bench_upload(c->plans_c, all_c, c->plans_c_bytes);
    if (c->plans_w_bytes) bench_upload(c->plans_w, all_w, c->plans_w_bytes);
  }
  c->host_plans_c = all_c, c->host_plans_w = all_w;
  free(reqs), free(cp), free(wp);
}

static void bench_case_build(bench_case *c, bench_kind kind, int state_bf16, int64_t size, int alloc) {
  memset(c, 0, sizeof *c);
  c->kind = kind;
  c->decode = kind <= BENCH_DECODE_MIX;
  c->state_bf16 = state_bf16;
  c->size = size;
  if (c->decode) bench_build_decode(c, alloc);
  else bench_build_prefill(c, alloc);
  /* cudaMemcpy from pageable memory may return before the copy lands, and bench_stream does not
     synchronise with the legacy stream: wait for everything before the first launch. */
  if (alloc && bench_gpu) BENCH_CUDA(cudaDeviceSynchronize());
}

static void bench_case_free(bench_case *c) {
  bench_release(c->state), bench_release(c->input), bench_release(c->output);
  bench_release(c->plans_c), bench_release(c->plans_w), bench_release(c->ape), bench_release(c->normed);
  free(c->dargs), free(c->pargs), free(c->reqs), free(c->host_plans_c), free(c->host_plans_w);
  memset(c, 0, sizeof *c);
}

/* One unit of a case: one decode launch, or the whole prefill (all its calls). */
static void bench_run_unit(const bench_case *c, int lib, int64_t set, cudaStream_t s) {
  if (c->decode) {
    BENCH_C128(bench_libs[lib].decode(&c->dargs[set], s));
  } else {
    for (int k = 0; k < c->calls; ++k) BENCH_C128(bench_libs[lib].prefill(&c->pargs[set * c->calls + k], s));
  }
}

/* ---- timing ----------------------------------------------------------------------------- */
enum { BENCH_STREAM, BENCH_GRAPH, BENCH_STEP_GRAPH, BENCH_MODES };
static const char *const bench_mode_names[BENCH_MODES] = {"stream", "graph", "step_graph"};

typedef void (*bench_unit_fn)(void *ctx, int variant, int64_t index, cudaStream_t stream);

typedef struct bench_runner {
  bench_unit_fn unit;
  void *ctx;
  int variants;   /* 1; 2 for an A/B pair timed A B A B; up to BENCH_MAX_VARIANTS, A B C ... C B A */
  int64_t nsets;  /* the unit rotates over index % nsets */
  int64_t period; /* units per sample: a multiple of this */
  int modes;      /* bit mask of BENCH_STREAM... */
} bench_runner;

typedef struct bench_stats {
  double median, p10, p90;
  int samples;
  int64_t reps; /* units per sample */
} bench_stats;

static int bench_cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
static double bench_quantile(const double *sorted, int n, double q) {
  const double pos = q * (n - 1);
  const int i = (int)pos;
  return i + 1 < n ? sorted[i] + (pos - i) * (sorted[i + 1] - sorted[i]) : sorted[n - 1];
}
static bench_stats bench_summarise(double *v, int n, int64_t reps) {
  bench_stats s;
  qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
  s.median = bench_quantile(v, n, 0.5);
  s.p10 = bench_quantile(v, n, 0.1);
  s.p90 = bench_quantile(v, n, 0.9);
  s.samples = n;
  s.reps = reps;
  return s;
}

/* Rounds of a comparison of `variants`, and the variant that round `round` times: A B A B for a
   pair (and a variant alone), each variant twice for more, in the order A B C, C B A. */
static int bench_rounds(int variants) { return variants <= 2 ? BENCH_ROUNDS : 2 * variants; }
static int bench_round_variant(int round, int variants) {
  if (variants <= 2) return round % variants;
  return (round / variants) % 2 ? variants - 1 - round % variants : round % variants;
}

/* Per-unit microseconds of the spr samples just recorded after events[0]. */
static void bench_collect(int spr, int64_t units_per_sample, double *dst) {
  BENCH_CUDA(cudaEventSynchronize(bench_events[spr]));
  BENCH_CUDA(cudaGetLastError());
  for (int k = 0; k < spr; ++k) {
    float ms = 0.0f;
    BENCH_CUDA(cudaEventElapsedTime(&ms, bench_events[k], bench_events[k + 1]));
    dst[k] = 1000.0 * ms / (double)units_per_sample;
  }
}

static cudaGraphExec_t bench_capture(const bench_runner *r, int variant, int64_t first, int64_t count) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  BENCH_CUDA(cudaStreamBeginCapture(bench_stream, cudaStreamCaptureModeThreadLocal));
  for (int64_t i = 0; i < count; ++i) r->unit(r->ctx, variant, first + i, bench_stream);
  BENCH_CUDA(cudaStreamEndCapture(bench_stream, &graph));
  BENCH_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  BENCH_CUDA(cudaGraphDestroy(graph));
  return exec;
}

/* A graph mode of bench_measure: per variant, `count` graphs of `per_graph` units each (graph g
   runs the units from g * per_graph on), each replayed once to warm it, then timed round-robin
   with reps / per_graph graph launches a sample; out[variant][mode]. */
static void bench_graph_mode(const bench_runner *r, int mode, int64_t count, int64_t per_graph, int64_t reps,
                             double samples[BENCH_MAX_VARIANTS][BENCH_ROUNDS * BENCH_MAX_SAMPLES],
                             bench_stats out[BENCH_MAX_VARIANTS][BENCH_MODES]) {
  _Static_assert(BENCH_MAX_GRAPHS <= BENCH_STEP_GRAPHS, "exec holds the larger of the two counts");
  const int spr = bench_opt.samples_per_round;
  static cudaGraphExec_t exec[BENCH_MAX_VARIANTS][BENCH_STEP_GRAPHS];
  for (int v = 0; v < r->variants; ++v)
    for (int64_t g = 0; g < count; ++g) exec[v][g] = bench_capture(r, v, g * per_graph, per_graph);
  for (int v = 0; v < r->variants; ++v)
    for (int64_t g = 0; g < count; ++g) BENCH_CUDA(cudaGraphLaunch(exec[v][g], bench_stream));
  BENCH_CUDA(cudaStreamSynchronize(bench_stream));
  int64_t next[BENCH_MAX_VARIANTS] = {0};
  int n[BENCH_MAX_VARIANTS] = {0};
  for (int round = 0; round < bench_rounds(r->variants); ++round) {
    const int v = bench_round_variant(round, r->variants);
    BENCH_CUDA(cudaEventRecord(bench_events[0], bench_stream));
    for (int k = 0; k < spr; ++k) {
      for (int64_t i = 0; i < reps / per_graph; ++i)
        BENCH_CUDA(cudaGraphLaunch(exec[v][next[v]++ % count], bench_stream));
      BENCH_CUDA(cudaEventRecord(bench_events[k + 1], bench_stream));
    }
    bench_collect(spr, reps, samples[v] + n[v]);
    n[v] += spr;
  }
  for (int v = 0; v < r->variants; ++v) {
    out[v][mode] = bench_summarise(samples[v], n[v], reps);
    for (int64_t g = 0; g < count; ++g) BENCH_CUDA(cudaGraphExecDestroy(exec[v][g]));
  }
}

/* Times every mode of r for every variant; out[variant][mode]. */
static void bench_measure(const bench_runner *r, bench_stats out[BENCH_MAX_VARIANTS][BENCH_MODES]) {
  _Static_assert(BENCH_ROUNDS >= 2, "a variant of more than two runs two rounds: samples holds them");
  const int spr = bench_opt.samples_per_round;
  static double samples[BENCH_MAX_VARIANTS][BENCH_ROUNDS * BENCH_MAX_SAMPLES];
  int n[BENCH_MAX_VARIANTS];
  int64_t index = 0;
  memset(out, 0, BENCH_MAX_VARIANTS * BENCH_MODES * sizeof(bench_stats));
  /* Warm-up: every set once per variant. */
  const int64_t warm = r->nsets < 16 ? 16 : r->nsets;
  for (int v = 0; v < r->variants; ++v)
    for (int64_t i = 0; i < warm; ++i) r->unit(r->ctx, v, index++, bench_stream);
  BENCH_CUDA(cudaStreamSynchronize(bench_stream));
  BENCH_CUDA(cudaGetLastError());
  /* Calibrate: units per ~1 ms sample. */
  BENCH_CUDA(cudaEventRecord(bench_events[0], bench_stream));
  for (int i = 0; i < 16; ++i) r->unit(r->ctx, 0, index++, bench_stream);
  BENCH_CUDA(cudaEventRecord(bench_events[1], bench_stream));
  double est;
  bench_collect(1, 16, &est);
  int64_t reps = (int64_t)ceil(BENCH_SAMPLE_US / (est > 0.05 ? est : 0.05));
  reps = reps < 4 ? 4 : reps > 4096 ? 4096 : reps;
  reps = bench_round_up(reps, r->period);

  if (r->modes & (1 << BENCH_STREAM)) {
    memset(n, 0, sizeof n);
    for (int round = 0; round < bench_rounds(r->variants); ++round) {
      const int v = bench_round_variant(round, r->variants);
      BENCH_CUDA(cudaEventRecord(bench_events[0], bench_stream));
      for (int k = 0; k < spr; ++k) {
        for (int64_t i = 0; i < reps; ++i) r->unit(r->ctx, v, index++, bench_stream);
        BENCH_CUDA(cudaEventRecord(bench_events[k + 1], bench_stream));
      }
      bench_collect(spr, reps, samples[v] + n[v]);
      n[v] += spr;
    }
    for (int v = 0; v < r->variants; ++v) out[v][BENCH_STREAM] = bench_summarise(samples[v], n[v], reps);
  }

  if (r->modes & (1 << BENCH_GRAPH)) { /* graphs of `reps` launches covering all sets */
    int64_t ngraphs = (r->nsets + reps - 1) / reps;
    ngraphs = ngraphs < 1 ? 1 : ngraphs > BENCH_MAX_GRAPHS ? BENCH_MAX_GRAPHS : ngraphs;
    bench_graph_mode(r, BENCH_GRAPH, ngraphs, reps, reps, samples, out);
  }

  if (r->modes & (1 << BENCH_STEP_GRAPH)) { /* one unit per graph, replayed back to back */
    const int64_t nstep = r->nsets < BENCH_STEP_GRAPHS ? r->nsets : BENCH_STEP_GRAPHS;
    bench_graph_mode(r, BENCH_STEP_GRAPH, nstep, 1, reps, samples, out);
  }
}

/* ---- units ------------------------------------------------------------------------------ */
static void bench_unit_case(void *ctx, int variant, int64_t index, cudaStream_t s) {
  const bench_case *c = (const bench_case *)ctx;
  bench_run_unit(c, variant, index % c->nsets, s);
}

/* Decode step followed by its consumer; variant = PDL off (0) / on (1). */
static void bench_unit_chain(void *ctx, int variant, int64_t index, cudaStream_t s) {
  const bench_case *c = (const bench_case *)ctx;
  c128_decode_args a = c->dargs[index % c->nsets];
  a.pdl = variant;
  BENCH_C128(bench_libs[0].decode(&a, s));
  BENCH_CUDA(bench_launch_consumer((const float *)a.output, c->normed, c->size, variant, s));
}

static void bench_unit_empty(void *ctx, int variant, int64_t index, cudaStream_t s) {
  (void)variant, (void)index;
  BENCH_CUDA(bench_launch_empty(*(const int64_t *)ctx, s));
}

typedef struct bench_copy_ctx {
  void *src, *dst;
  size_t bytes;
} bench_copy_ctx;
static void bench_unit_copy(void *ctx, int variant, int64_t index, cudaStream_t s) {
  const bench_copy_ctx *c = (const bench_copy_ctx *)ctx;
  (void)variant;
  /* two buffer pairs, alternating direction, so nothing stays in L2 */
  void *src = index % 2 ? c->dst : c->src, *dst = index % 2 ? c->src : c->dst;
  BENCH_CUDA(cudaMemcpyAsync(dst, src, c->bytes, cudaMemcpyDeviceToDevice, s));
}

/* ---- output ----------------------------------------------------------------------------- */
static const char *bench_state_name(int bf16) { return bf16 ? "bf16" : "f32"; }

static void bench_row(const char *name, const char *state, int64_t size, const char *variant, int mode, int pdl,
                      const bench_stats *s, double bytes, double empty_us, int64_t nsets, double footprint,
                      const char *check) {
  const double gbps = bytes > 0 ? bytes / (s->median * 1e-6) / 1e9 : 0.0;
  const double pct = bench_copy_gbps > 0 ? 100.0 * gbps / bench_copy_gbps : 0.0;
  const double pct_read = bench_read_gbps > 0 ? 100.0 * gbps / bench_read_gbps : 0.0;
  fprintf(bench_csv, "%s,%s,%s,%lld,%s,%s,%d,%lld,%d,%.3f,%.3f,%.3f,%.0f,%.1f,%.1f,%.3f,%lld,%.1f,%s,%.1f\n",
          bench_meta, name, state, (long long)size, variant, bench_mode_names[mode], pdl, (long long)s->reps,
          s->samples, s->median, s->p10, s->p90, bytes, gbps, pct, empty_us, (long long)nsets, footprint / 1048576.0,
          check ? check : "", pct_read);
  fflush(bench_csv);
}

/* ---- verification: GPU (both epilogues) against the host runner on set 0 ---------------- */
static int bench_same(float a, float b) { return (a != a && b != b) || a == b; }

static void bench_verify(const bench_case *c, char *msg, size_t msg_size) {
  const size_t out_bytes = (size_t)c->out_rows_per_unit * BENCH_OUTPUT_ROW_BYTES;
  char *hs = (char *)malloc(c->state_bytes), *hs_run = (char *)malloc(c->state_bytes);
  char *hin = (char *)malloc(c->input_bytes), *hout = (char *)malloc(c->output_bytes);
  char *hpc = (char *)malloc(c->plans_c_bytes + 16), *hpw = (char *)malloc(c->plans_w_bytes + 16);
  float *ape = (float *)malloc(C128_WINDOW * BENCH_HEAD_DIM * sizeof(float));
  float *gpu[2] = {(float *)malloc(out_bytes), (float *)malloc(out_bytes)};
  if (!hs || !hs_run || !hin || !hout || !hpc || !hpw || !ape || !gpu[0] || !gpu[1]) exit(1);
  BENCH_CUDA(cudaMemcpy(hs, c->state, c->state_bytes, cudaMemcpyDeviceToHost));
  BENCH_CUDA(cudaMemcpy(hin, c->input, c->input_bytes, cudaMemcpyDeviceToHost));
  BENCH_CUDA(cudaMemcpy(hpc, c->plans_c, c->plans_c_bytes, cudaMemcpyDeviceToHost));
  if (c->plans_w_bytes) BENCH_CUDA(cudaMemcpy(hpw, c->plans_w, c->plans_w_bytes, cudaMemcpyDeviceToHost));
  BENCH_CUDA(cudaMemcpy(ape, c->ape, C128_WINDOW * BENCH_HEAD_DIM * sizeof(float), cudaMemcpyDeviceToHost));
  for (int lib = 0; lib < 2; ++lib) { /* fresh state each time: prefill_extend overwrites what it read */
    BENCH_CUDA(cudaMemcpy(c->state, hs, c->state_bytes, cudaMemcpyHostToDevice));
    BENCH_CUDA(cudaMemset(c->output, 0xFF, out_bytes));
    BENCH_CUDA(cudaDeviceSynchronize()); /* legacy-stream copies before the bench_stream launch */
    bench_run_unit(c, lib, 0, bench_stream);
    BENCH_CUDA(cudaStreamSynchronize(bench_stream));
    BENCH_CUDA(cudaMemcpy(gpu[lib], c->output, out_bytes, cudaMemcpyDeviceToHost));
  }
  /* The host runner (two-warp epilogue) on host copies of set 0's arguments. */
#define BENCH_REBASE(p, dbase, hbase) ((void *)((char *)(hbase) + ((const char *)(p) - (const char *)(dbase))))
  memcpy(hs_run, hs, c->state_bytes);
  memset(hout, 0xFF, out_bytes);
  if (c->decode) {
    c128_decode_args a = c->dargs[0];
    a.state = hs_run, a.ape = ape, a.output = hout;
    a.input = BENCH_REBASE(a.input, c->input, hin);
    a.plans = (const c128_decode_plan *)BENCH_REBASE(a.plans, c->plans_c, hpc);
    BENCH_C128(bench_libs[0].decode_host(&a, NULL));
  } else {
    for (int k = 0; k < c->calls; ++k) {
      c128_prefill_args a = c->pargs[k];
      a.state = hs_run, a.ape = ape;
      a.output = BENCH_REBASE(a.output, c->output, hout);
      a.input = BENCH_REBASE(a.input, c->input, hin);
      a.compress_plans = (const c128_compress_plan *)BENCH_REBASE(a.compress_plans, c->plans_c, hpc);
      if (a.write_plans) a.write_plans = (const c128_write_plan *)BENCH_REBASE(a.write_plans, c->plans_w, hpw);
      BENCH_C128(bench_libs[0].prefill_host(&a, NULL));
    }
  }
#undef BENCH_REBASE
  const float *ref = (const float *)hout;
  double err[2] = {0.0, 0.0};
  int bad[2] = {0, 0};
  int64_t written = 0;
  for (size_t i = 0; i < out_bytes / sizeof(float); ++i) {
    written += ref[i] == ref[i];
    for (int lib = 0; lib < 2; ++lib) {
      const float g = gpu[lib][i];
      if ((g != g) != (ref[i] != ref[i])) ++bad[lib];
      else if (!bench_same(g, ref[i]) && fabs((double)g - ref[i]) > err[lib]) err[lib] = fabs((double)g - ref[i]);
    }
  }
  snprintf(msg, msg_size, "%s two_warp %.1e legacy %.1e vs host runner (%lld values%s)",
           bad[0] || bad[1] || err[0] > 1e-4 || err[1] > 1e-4 || written == 0 ? "FAILED" : "ok", err[0], err[1],
           (long long)written, bad[0] || bad[1] ? ", NaN pattern differs" : "");
  free(hs), free(hs_run), free(hin), free(hout), free(hpc), free(hpw), free(ape), free(gpu[0]), free(gpu[1]);
}

/* ---- variants: other state layouts and the cache-entry paths, over one case's data ------- */
/* A variant runs a case's units over the case's input and the same logical state and requests:
   today's layout itself (the baseline, which borrows the case's buffers and plans); another
   engine's state layout (DESIGN 5.9), whose state holds today's rows where its block table puts
   them and whose plans come from the planner given ring.state_layout (logical rows); or today's
   layout writing DeepSeek-V4's cache entries (DESIGN 11), in the decode / compress launch itself
   (fused) or in bench's own epilogue launch after the pooled one (split, bench_epilogue.cuh). */
typedef struct bench_layout {
  const char *name;
  int32_t block_rows;
  int tables;      /* 0: plans name physical rows; 1: one block table; 2: a table per plane */
  int planes;      /* 1: rows of kv | score; 2: a kv plane and a score plane */
  int biased;      /* scores stored with ape added */
  int by_position; /* a position-indexed table (no position wraps); else a ring of 128 rows */
  int null_block;  /* block 0 is the engine's null block, never handed out (vLLM's) */
} bench_layout;
static const bench_layout bench_layouts[] = {
    {"vllm_b8", 8, 1, 1, 1, 1, 1},       /* vLLM: blocks of 8, block_table[req][pos / 8], biased */
    {"b16", 16, 0, 1, 0, 0, 0},          /* blocks of 16 and no table: today's bytes, another kernel */
    {"trtllm_b128", 128, 2, 2, 1, 1, 0}, /* TensorRT-LLM: kv and score planes with a table each, biased */
    {"trtllm_b256", 256, 2, 2, 1, 1, 0},
    {"ring_b128", 128, 1, 1, 0, 0, 0}, /* a ring: one 128-row block a request through a table, raw */
};
#define BENCH_MAX_CALL_REQS (BENCH_MAX_CALL_ROWS / BENCH_EXTEND_LEN) /* requests of a prefill call, at most */
#define BENCH_ENTRIES_PER_PAGE 2                                     /* cache entries per page */
#define BENCH_ROPE_POSITIONS 131072 /* rows of the RoPE table: past every window's position */
#define BENCH_ENTRY_POISON 0xA5     /* the caches' bytes before a check's run */
#define BENCH_ENTRY_FP8_BYTES (BENCH_HEAD_DIM + 64 + BENCH_HEAD_DIM / 64) /* 584: codes, rope, scales */
#define BENCH_ENTRY_BF16_BYTES (2 * BENCH_HEAD_DIM)

typedef struct bench_alt {
  const char *name;
  const bench_layout *layout; /* NULL: today's layout (and the case's state) */
  c128_output_kind entry;     /* C128_OUTPUT_POOLED: pooled rows */
  int epilogue;               /* the pooled launch, then bench's epilogue writes the entries */
  int owns;                   /* its buffers and arguments are its own (today's are the case's) */
  double bytes;               /* bytes model of one unit */
  void *state, *score, *output, *plans_c, *plans_w, *tables, *index, *cache;
  size_t state_bytes, score_bytes, output_bytes, cache_bytes;
  void *workspace;        /* the fused path's entry workspace (DESIGN 11.3), zero between launches */
  int64_t workspace_jobs; /* the most requests or compress plans of a launch: the counters */
  size_t workspace_bytes;
  int64_t blocks, cells; /* physical blocks of the state; table entries the units use, all sets */
  c128_decode_args *dargs;
  c128_prefill_args *pargs;
  bench_epilogue_args *eargs;        /* [units] */
  c128_state_layout host_layout;     /* the launches' layout, with the host's tables */
  int32_t *host_tables[2];           /* kv table, score table (NULL: none / the kv table) */
  void *host_plans_c, *host_plans_w; /* as the case's */
} bench_alt;

static int64_t bench_units(const bench_case *c) { return c->nsets * c->calls; }
static int bench_log2(int64_t v) { /* of a power of two */
  int k = 0;
  while (((int64_t)1 << k) < v) ++k;
  return k;
}
static uint64_t bench_mix(uint64_t seed, uint64_t i) { /* splitmix64 */
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (i + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static int64_t *bench_shuffle(int64_t n, uint64_t seed) { /* a permutation of 0 .. n - 1 */
  int64_t *perm = (int64_t *)bench_host((size_t)n * sizeof *perm);
  for (int64_t i = 0; i < n; ++i) perm[i] = i;
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = (int64_t)(bench_mix(seed, (uint64_t)i) % (uint64_t)(i + 1)), t = perm[i];
    perm[i] = perm[j], perm[j] = t;
  }
  return perm;
}
static uint32_t bench_narrow(int bf16, float f) { /* a state element's bits: bf16 round to nearest even */
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return bf16 ? (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16 : u;
}
static float bench_widen_bf16(uint16_t bits) {
  const uint32_t u = (uint32_t)bits << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static void bench_alt_today(const bench_case *c, bench_alt *v) {
  memset(v, 0, sizeof *v);
  v->name = "today";
  v->bytes = c->bytes;
  v->state = c->state, v->state_bytes = c->state_bytes, v->blocks = c->pages;
  v->output = c->output, v->output_bytes = c->output_bytes;
  v->dargs = c->dargs, v->pargs = c->pargs;
  v->host_plans_c = c->host_plans_c, v->host_plans_w = c->host_plans_w;
}

static void bench_alt_free(bench_alt *v) {
  if (v->owns) {
    bench_release(v->state), bench_release(v->score), bench_release(v->output), bench_release(v->plans_c);
    bench_release(v->plans_w), bench_release(v->tables), bench_release(v->index), bench_release(v->cache);
    bench_release(v->workspace);
    free(v->dargs), free(v->pargs), free(v->eargs), free(v->host_tables[0]), free(v->host_tables[1]);
    free(v->host_plans_c), free(v->host_plans_w);
  }
  memset(v, 0, sizeof *v);
}

/* One unit of a variant: its decode launch, or its prefill calls; the split path's epilogue after
   each. On the host runner when there is no GPU (--cpu-check). */
static void bench_run_alt(const bench_case *c, const bench_alt *v, int64_t set, cudaStream_t s) {
  for (int k = 0; k < c->calls; ++k) {
    const int64_t u = set * c->calls + k;
    if (bench_gpu) {
      if (c->decode) BENCH_C128(bench_libs[0].decode(&v->dargs[set], s));
      else BENCH_C128(bench_libs[0].prefill(&v->pargs[u], s));
      if (v->epilogue) BENCH_CUDA(bench_entry_epilogue(&v->eargs[u], s));
    } else {
      if (c->decode) BENCH_C128(bench_libs[0].decode_host(&v->dargs[set], NULL));
      else BENCH_C128(bench_libs[0].prefill_host(&v->pargs[u], NULL));
      if (v->epilogue) bench_entry_epilogue_host(&v->eargs[u]);
    }
  }
}

/* The positions [begin, end) of request rid that a unit keeps in the state: a boundary decode's
   window and new row, another decode's new row; a prefill request's window rows from before the
   batch (buffer_len) and its persisted tail (DESIGN 5.3: write_all off, no speculation). First,
   for every request, the empty range at its seq_len: the positions a table must cover. */
typedef void (*bench_range_fn)(void *ctx, int32_t rid, int64_t begin, int64_t end);
static void bench_state_ranges(const bench_case *c, bench_range_fn fn, void *ctx) {
  if (c->decode) {
    for (int64_t q = 0; q < c->nsets * c->size; ++q) {
      const int64_t seq = c->reqs[q].seq_len;
      fn(ctx, c->reqs[q].pool_index, seq, seq);
      fn(ctx, c->reqs[q].pool_index, bench_is_boundary(c->kind, q) ? seq - C128_WINDOW : seq - 1, seq);
    }
    return;
  }
  c128_request reqs[BENCH_MAX_CALL_REQS];
  for (int64_t r = 0; r < c->nsets; ++r)
    for (int k = 0; k < c->calls; ++k) {
      const int64_t n = bench_prefill_requests(c, r, k, reqs);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t seq = reqs[i].seq_len, prefix = seq - reqs[i].extend_len, tail = seq / C128_WINDOW * C128_WINDOW;
        fn(ctx, reqs[i].pool_index, seq, seq);
        if (seq / C128_WINDOW > prefix / C128_WINDOW && prefix % C128_WINDOW)
          fn(ctx, reqs[i].pool_index, prefix / C128_WINDOW * C128_WINDOW, prefix);
        if ((tail > prefix ? tail : prefix) < seq) fn(ctx, reqs[i].pool_index, tail > prefix ? tail : prefix, seq);
      }
    }
}

/* A layout's table cells: cell rid * stride + column maps positions column * B .. of rid (mod R). */
typedef struct bench_cells {
  int shift;             /* log2 B */
  int64_t ring, stride;  /* R = 2^row_shift, table columns */
  int64_t max_end, used; /* the longest request; cells the ranges cover, counted per range */
  uint8_t *mark;         /* [table rows * stride] */
} bench_cells;
static void bench_range_end(void *ctx, int32_t rid, int64_t begin, int64_t end) {
  bench_cells *k = (bench_cells *)ctx;
  (void)rid, (void)begin;
  if (end > k->max_end) k->max_end = end;
}
static void bench_range_mark(void *ctx, int32_t rid, int64_t begin, int64_t end) {
  bench_cells *k = (bench_cells *)ctx;
  for (int64_t at = begin; at < end; at = ((at >> k->shift) + 1) << k->shift, ++k->used)
    k->mark[rid * k->stride + ((at & (k->ring - 1)) >> k->shift)] = 1;
}

/* The variant of case c in layout L: physical blocks for the cells the units use (shuffled, per
   plane), today's rows gathered into them, the planner's logical plans, the launches' arguments.
   Without alloc (--cpu-check's large cases) the tables and plans only. */
static void bench_build_layout(const bench_case *c, const bench_layout *L, bench_alt *v, int alloc) {
  memset(v, 0, sizeof *v);
  v->name = L->name, v->layout = L, v->owns = 1;
  const int64_t B = L->block_rows, D = BENCH_HEAD_DIM, units = bench_units(c);
  const size_t es = c->state_bf16 ? 2 : 4;
  bench_cells k;
  memset(&k, 0, sizeof k);
  k.shift = bench_log2(B);
  bench_state_ranges(c, bench_range_end, &k);
  int row_shift = 7; /* R = 128, or beyond every position */
  while (L->by_position && ((int64_t)1 << row_shift) < k.max_end) ++row_shift;
  k.ring = (int64_t)1 << row_shift;
  const int64_t table_rows = c->pages, span = k.ring < k.max_end ? k.ring : k.max_end;
  k.stride = L->tables ? (span + B - 1) / B : 0;
  int64_t *src[2] = {NULL, NULL}; /* today's row of each physical row, per plane */
  if (L->tables) {
    if (table_rows << row_shift > ((int64_t)1 << 31)) {
      fprintf(stderr, "%s: %lld table rows at row_shift %d pass 2^31 logical rows\n", L->name, (long long)table_rows,
              row_shift);
      exit(1);
    }
    const int64_t cells = table_rows * k.stride;
    k.mark = (uint8_t *)calloc((size_t)cells, 1);
    if (!k.mark) exit(1);
    bench_state_ranges(c, bench_range_mark, &k);
    int64_t n = 0;
    for (int64_t i = 0; i < cells; ++i) n += k.mark[i];
    int64_t *list = (int64_t *)bench_host((size_t)n * sizeof *list);
    for (int64_t i = 0, j = 0; i < cells; ++i)
      if (k.mark[i]) list[j++] = i;
    v->blocks = L->null_block + n > 0 ? L->null_block + n : 1;
    for (int t = 0; t < L->tables; ++t) {
      int64_t *perm = bench_shuffle(n, 0x7AB1E + (uint64_t)t);
      v->host_tables[t] = (int32_t *)bench_host((size_t)cells * sizeof(int32_t));
      for (int64_t i = 0; i < cells; ++i) v->host_tables[t][i] = L->null_block ? 0 : -1;
      for (int64_t i = 0; i < n; ++i) v->host_tables[t][list[i]] = (int32_t)(L->null_block + perm[i]);
      free(perm);
    }
    for (int plane = 0; plane < L->planes; ++plane) {
      const int32_t *table = v->host_tables[plane && L->tables == 2];
      src[plane] = (int64_t *)bench_host((size_t)(v->blocks * B) * sizeof(int64_t));
      for (int64_t i = 0; i < v->blocks * B; ++i) src[plane][i] = -1;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t rid = list[i] / k.stride, column = list[i] % k.stride, block = table[list[i]];
        for (int64_t r = 0; r < B; ++r) /* today's ring of 128: row = pool index * 128 + position mod 128 */
          src[plane][block * B + r] = rid * C128_WINDOW + (column * B + r) % C128_WINDOW;
      }
    }
    free(list), free(k.mark);
    v->cells = k.used;
  } else { /* plans name physical rows: today's rows, in blocks of B */
    v->blocks = c->pages * C128_WINDOW / B;
    for (int plane = 0; plane < L->planes; ++plane) {
      src[plane] = (int64_t *)bench_host((size_t)(v->blocks * B) * sizeof(int64_t));
      for (int64_t i = 0; i < v->blocks * B; ++i) src[plane][i] = i;
    }
  }
  c128_state_layout *lay = &v->host_layout;
  lay->block_rows = L->block_rows, lay->score_biased = L->biased;
  lay->block_table = v->host_tables[0], lay->score_block_table = v->host_tables[1];
  if (L->tables) lay->table_rows = table_rows, lay->table_stride = k.stride, lay->row_shift = row_shift;
  v->bytes = c->bytes + 4.0 * L->tables * (double)v->cells / (double)c->nsets; /* + the table entries */

  const int64_t plane_elems = L->planes == 2 ? D : 2 * D, rows = v->blocks * B;
  v->state_bytes = (size_t)(rows * plane_elems) * es;
  v->score_bytes = L->planes == 2 ? v->state_bytes : 0;
  const size_t table_bytes = L->tables ? (size_t)(table_rows * k.stride) * sizeof(int32_t) : 0;
  if (alloc) {
    v->state = bench_alloc(v->state_bytes);
    if (L->planes == 2) v->score = bench_alloc(v->score_bytes);
    v->output = bench_alloc(c->output_bytes), v->output_bytes = c->output_bytes;
    bench_poison(v->output, v->output_bytes);
    if (L->tables) {
      v->tables = bench_alloc((size_t)L->tables * table_bytes);
      for (int t = 0; t < L->tables; ++t)
        bench_upload((char *)v->tables + t * table_bytes, v->host_tables[t], table_bytes);
    }
    for (int plane = 0; plane < L->planes; ++plane) {
      void *dst = plane ? v->score : v->state;
      const int64_t offset = plane ? D : 0;
      if (!bench_gpu) {
        bench_gather_host(dst, rows, plane_elems, offset, src[plane], c->state, c->ape, L->biased, c->state_bf16);
        continue;
      }
      int64_t *map = (int64_t *)bench_alloc((size_t)rows * sizeof(int64_t));
      bench_upload(map, src[plane], (size_t)rows * sizeof(int64_t));
      BENCH_CUDA(cudaDeviceSynchronize()); /* the pageable upload lands before the gather reads it */
      BENCH_CUDA(bench_gather_device(dst, rows, plane_elems, offset, map, c->state, c->ape, L->biased, c->state_bf16,
                                     bench_stream));
      BENCH_CUDA(cudaStreamSynchronize(bench_stream));
      bench_release(map);
    }
  }
  free(src[0]), free(src[1]);

  /* The planner, on the host's tables; the launches get the device's. */
  c128_ring ring;
  memset(&ring, 0, sizeof ring);
  ring.state_pages = L->tables ? v->blocks : c->pages; /* untabled: today's pages (it plans today's rows) */
  ring.state_layout = *lay;
  ring.state_layout.score_plane = L->planes == 2 ? (v->score ? v->score : (void *)&ring) : NULL; /* only tested */
  ring.has_null_block = L->null_block, ring.null_block = 0;
  c128_state_layout dev = *lay;
  dev.score_plane = v->score;
  dev.block_table = L->tables ? (const int32_t *)v->tables : NULL;
  dev.score_block_table = L->tables == 2 && v->tables ? (const int32_t *)((char *)v->tables + table_bytes) : NULL;
  if (c->decode) {
    const int64_t Bq = c->size;
    c128_decode_plan *plans = (c128_decode_plan *)bench_host((size_t)(c->nsets * Bq) * sizeof *plans);
    for (int64_t r = 0; r < c->nsets; ++r)
      BENCH_C128(bench_two_warp_plan_decode(&ring, c->reqs + r * Bq, Bq, plans + r * Bq));
    v->host_plans_c = plans;
    v->dargs = (c128_decode_args *)bench_host((size_t)c->nsets * sizeof *v->dargs);
    if (alloc) {
      v->plans_c = bench_alloc(c->plans_c_bytes);
      bench_upload(v->plans_c, plans, c->plans_c_bytes);
    }
    for (int64_t r = 0; r < c->nsets; ++r) {
      c128_decode_args *a = &v->dargs[r];
      *a = c->dargs[r];
      a->state = v->state, a->state_pages = v->blocks, a->state_layout = dev;
      a->output = v->output ? (char *)v->output + (size_t)(r * Bq) * BENCH_OUTPUT_ROW_BYTES : NULL;
      a->plans = v->plans_c ? (const c128_decode_plan *)v->plans_c + r * Bq : NULL;
    }
    return;
  }
  c128_compress_plan *all_c = (c128_compress_plan *)calloc((size_t)(units * c->nc_max) + 1, sizeof *all_c);
  c128_write_plan *all_w = (c128_write_plan *)calloc((size_t)(units * c->nw_max) + 1, sizeof *all_w);
  v->pargs = (c128_prefill_args *)bench_host((size_t)units * sizeof *v->pargs);
  if (!all_c || !all_w) exit(1);
  c128_request reqs[BENCH_MAX_CALL_REQS];
  for (int64_t u = 0; u < units; ++u) {
    c128_prefill_plans p;
    memset(&p, 0, sizeof p);
    p.compress = all_c + u * c->nc_max, p.write = all_w + u * c->nw_max, p.capacity = c->rows;
    BENCH_C128(bench_two_warp_plan_prefill(&ring, reqs,
                                           bench_prefill_requests(c, u / c->calls, (int)(u % c->calls), reqs), 0, &p));
    if (p.num_compress != c->pargs[u].num_compress || p.num_write != c->pargs[u].num_write) {
      fprintf(stderr, "%s: plan counts differ from today's layout's\n", L->name);
      exit(1);
    }
  }
  v->host_plans_c = all_c, v->host_plans_w = all_w;
  if (alloc) {
    v->plans_c = bench_alloc(c->plans_c_bytes);
    bench_upload(v->plans_c, all_c, c->plans_c_bytes);
    if (c->plans_w_bytes) {
      v->plans_w = bench_alloc(c->plans_w_bytes);
      bench_upload(v->plans_w, all_w, c->plans_w_bytes);
    }
  }
  for (int64_t u = 0; u < units; ++u) {
    c128_prefill_args *a = &v->pargs[u];
    *a = c->pargs[u];
    a->state = v->state, a->state_pages = v->blocks, a->state_layout = dev;
    a->output = v->output ? (char *)v->output + (size_t)(u * c->nc_max) * BENCH_OUTPUT_ROW_BYTES : NULL;
    a->compress_plans = v->plans_c ? (const c128_compress_plan *)v->plans_c + u * c->nc_max : NULL;
    a->write_plans = v->plans_w && c->nw_max ? (const c128_write_plan *)v->plans_w + u * c->nw_max : NULL;
  }
}

/* What every cache-entry variant reads: gamma (bf16 values, as a checkpoint holds) and the
   layer's RoPE table, DeepSeek-V4's compressor table (precompute_freqs_cis: 64 rope channels,
   base 160000, YaRN factor 16 over an original length of 65536, beta 32 and 1; phi = fl32(p * f),
   no mscale). Built once, in the benchmark's memory. */
static float *bench_gamma, *bench_rope;
static void bench_entry_inputs(void) {
  if (bench_rope) return;
  const double base = 160000.0, factor = 16.0, original = 65536.0, pi = 3.14159265358979323846;
  const double fast = 64.0 * log(original / (32.0 * 2.0 * pi)) / (2.0 * log(base)); /* beta_fast 32 */
  const double slow = 64.0 * log(original / (1.0 * 2.0 * pi)) / (2.0 * log(base));  /* beta_slow 1 */
  const double low = fmax(floor(fast), 0.0), high = fmin(ceil(slow), 63.0) + (floor(fast) == ceil(slow) ? 0.001 : 0);
  float freq[32], gamma[BENCH_HEAD_DIM];
  for (int i = 0; i < 32; ++i) {
    const float f = (float)(1.0 / pow(base, 2.0 * i / 64.0));
    const double smooth = 1.0 - fmin(fmax((i - low) / (high - low), 0.0), 1.0);
    freq[i] = (float)(f / factor * (1.0 - smooth) + f * smooth);
  }
  const size_t rope_bytes = (size_t)BENCH_ROPE_POSITIONS * 64 * sizeof(float);
  float *rope = (float *)bench_host(rope_bytes);
  for (int64_t p = 0; p < BENCH_ROPE_POSITIONS; ++p)
    for (int i = 0; i < 32; ++i) {
      const float phi = (float)p * freq[i];
      rope[(p * 32 + i) * 2] = (float)cos(phi), rope[(p * 32 + i) * 2 + 1] = (float)sin(phi);
    }
  for (int c = 0; c < BENCH_HEAD_DIM; ++c)
    gamma[c] = bench_widen_bf16((uint16_t)bench_narrow(1, (float)(1.0 + 0.3 * sin(0.37 * c) + 0.1 * cos(1.3 * c))));
  bench_rope = (float *)bench_alloc(rope_bytes);
  bench_gamma = (float *)bench_alloc(sizeof gamma);
  bench_upload(bench_rope, rope, rope_bytes);
  bench_upload(bench_gamma, gamma, sizeof gamma);
  free(rope);
}

/* The variant of case c that writes cache entries of `kind`: at a shuffled entry per request
   (decode) or compress plan (prefill), entries_per_page 2, FlashMLA's page stride for FP8
   (ceil(584 P / 576) * 576 bytes), 2 D P bytes for BF16; fused in the launch, or (epilogue) the
   pooled launch into rows of its own, then bench's epilogue. Both paths of a kind put each
   window's entry at the same place. The fused path's launches share one workspace (they run one
   after another on one stream): c128_entry_workspace_bytes of the most jobs a launch has, zeroed
   once here; every launch leaves its counters at zero. Bytes model: the pooled path's, less the
   pooled rows, plus the entries. */
static void bench_build_entry(const bench_case *c, c128_output_kind kind, int epilogue, bench_alt *v, int alloc) {
  static const char *const names[2][2] = {{"fused_fp8", "split_fp8"}, {"fused_bf16", "split_bf16"}};
  memset(v, 0, sizeof *v);
  const int fp8 = kind == C128_OUTPUT_DSV4_FP8;
  v->name = names[!fp8][epilogue != 0], v->entry = kind, v->epilogue = epilogue, v->owns = 1;
  const int64_t P = BENCH_ENTRIES_PER_PAGE, units = bench_units(c), wide = BENCH_HEAD_DIM + 64;
  const int64_t entry_bytes = fp8 ? BENCH_ENTRY_FP8_BYTES : BENCH_ENTRY_BF16_BYTES;
  const int64_t page_bytes = fp8 ? (entry_bytes * P + wide - 1) / wide * wide : entry_bytes * P;
  const int64_t total = c->decode ? c->nsets * c->size : units * c->nc_max; /* an entry for each output row */
  const int64_t cache_pages = (total + P - 1) / P > 0 ? (total + P - 1) / P : 1;
  v->bytes = c->bytes + c->emitted * (double)(entry_bytes - (int64_t)BENCH_OUTPUT_ROW_BYTES);
  int64_t *perm = bench_shuffle(total, 0xE27 + (uint64_t)c->size);
  const int64_t index_rows = c->decode ? total : units * c->rows;
  int64_t *index = (int64_t *)bench_host((size_t)index_rows * sizeof *index);
  if (c->decode) {
    memcpy(index, perm, (size_t)total * sizeof *index);
  } else { /* by input row: the window that ends at row ragged_id */
    for (int64_t i = 0; i < index_rows; ++i) index[i] = -1;
    for (int64_t u = 0; u < units; ++u)
      for (int64_t k = 0; k < c->pargs[u].num_compress; ++k)
        index[u * c->rows + ((const c128_compress_plan *)c->host_plans_c)[u * c->nc_max + k].ragged_id] =
            perm[u * c->nc_max + k];
  }
  free(perm);
  c128_entry_args e;
  memset(&e, 0, sizeof e);
  e.kind = kind;
  e.norm_weight = bench_gamma, e.norm_eps = 1e-6f;
  e.rope_table = bench_rope, e.rope_positions = BENCH_ROPE_POSITIONS;
  e.cache_pages = cache_pages, e.entries_per_page = (int32_t)P, e.page_bytes = page_bytes;
  v->cache_bytes = (size_t)(cache_pages * page_bytes);
  if (!epilogue) {
    for (int64_t u = 0; u < (c->decode ? c->nsets : units); ++u) {
      const int64_t jobs = c->decode ? c->dargs[u].batch : c->pargs[u].num_compress;
      if (jobs > v->workspace_jobs) v->workspace_jobs = jobs;
    }
    const int64_t ws = bench_entry_workspace_bytes(v->workspace_jobs, BENCH_HEAD_DIM);
    if (ws < 0) {
      fprintf(stderr, "c128_entry_workspace_bytes(%lld, %d) refused\n", (long long)v->workspace_jobs, BENCH_HEAD_DIM);
      exit(1);
    }
    v->workspace_bytes = (size_t)ws, e.workspace_bytes = ws;
  }
  if (alloc) {
    bench_entry_inputs();
    e.norm_weight = bench_gamma, e.rope_table = bench_rope;
    v->index = bench_alloc((size_t)index_rows * sizeof *index);
    bench_upload(v->index, index, (size_t)index_rows * sizeof *index);
    v->cache = bench_alloc(v->cache_bytes);
    bench_memset(v->cache, BENCH_ENTRY_POISON, v->cache_bytes);
    e.cache = v->cache;
    if (!epilogue) {
      v->workspace = bench_alloc(v->workspace_bytes);
      bench_memset(v->workspace, 0, v->workspace_bytes);
      e.workspace = v->workspace;
    }
    if (epilogue) {
      v->output = bench_alloc(c->output_bytes), v->output_bytes = c->output_bytes;
      bench_poison(v->output, v->output_bytes);
    }
  }
  free(index);
  const int64_t *dindex = (const int64_t *)v->index;
  if (epilogue) v->eargs = (bench_epilogue_args *)calloc((size_t)units, sizeof *v->eargs);
  if (c->decode) v->dargs = (c128_decode_args *)bench_host((size_t)c->nsets * sizeof *v->dargs);
  else v->pargs = (c128_prefill_args *)bench_host((size_t)units * sizeof *v->pargs);
  if (epilogue && !v->eargs) exit(1);
  for (int64_t u = 0; u < units; ++u) {
    const int64_t rows_before = c->decode ? u * c->size : u * c->nc_max; /* output rows of earlier units */
    const int64_t *at = dindex ? dindex + (c->decode ? u * c->size : u * c->rows) : NULL;
    char *pooled = v->output ? (char *)v->output + (size_t)rows_before * BENCH_OUTPUT_ROW_BYTES : NULL;
    if (c->decode) {
      c128_decode_args *a = &v->dargs[u];
      *a = c->dargs[u];
      if (epilogue) a->output = pooled;
      else a->output = NULL, a->output_rows = 0, a->output_index = at, a->entry = e;
      if (!epilogue && bench_opt.entry_group) a->requests_per_block = bench_opt.entry_group;
    } else {
      c128_prefill_args *a = &v->pargs[u];
      *a = c->pargs[u];
      if (epilogue) a->output = pooled;
      else a->output = NULL, a->output_rows = 0, a->output_index = at, a->entry = e;
      if (!epilogue && bench_opt.entry_group) a->windows_per_block = bench_opt.entry_group;
    }
    if (epilogue) {
      bench_epilogue_args *g = &v->eargs[u];
      g->decode = c->decode;
      g->plans = c->decode ? (const void *)c->dargs[u].plans : (const void *)c->pargs[u].compress_plans;
      g->num_plans = c->decode ? c->size : c->pargs[u].num_compress;
      g->pooled = (const float *)pooled, g->output_index = at, g->entry = e;
    }
  }
}

/* ---- checks of a group of variants ------------------------------------------------------- */
/* Physical row of a variant's logical row in plane 0 (kv) or 1 (scores): through its table, or
   the row itself (today's layout, untabled layouts). */
static int64_t bench_alt_row(const bench_alt *v, int plane, int64_t logical) {
  const c128_state_layout *l = &v->host_layout;
  if (!l->block_table) return logical;
  const int32_t *table = plane && v->host_tables[1] ? v->host_tables[1] : v->host_tables[0];
  const int shift = bench_log2(l->block_rows);
  const int64_t at = logical & (((int64_t)1 << l->row_shift) - 1);
  const int64_t block = table[(logical >> l->row_shift) * l->table_stride + (at >> shift)];
  return (block << shift) + (at & ((1 << shift) - 1));
}

/* The token of input row `in` written into a variant's state (host memory) at logical row
   `logical`, as the kernels write it: narrowed to the state's dtype, scores with ape's row
   added first in a biased layout. */
static void bench_expect_write(const bench_case *c, const bench_alt *v, void *kv, void *score, int64_t logical,
                               const float *in) {
  const int D = BENCH_HEAD_DIM, split = v->layout && v->layout->planes == 2, biased = v->layout && v->layout->biased;
  const int64_t rows[2] = {bench_alt_row(v, 0, logical), bench_alt_row(v, 1, logical)};
  for (int e = 0; e < 2 * D; ++e) {
    const int half = e >= D;
    const float x = half && biased ? in[e] + c->ape[(logical % C128_WINDOW) * D + e - D] : in[e];
    const int64_t at = split ? rows[half] * D + e - half * D : rows[0] * 2 * D + e;
    const uint32_t bits = bench_narrow(c->state_bf16, x);
    if (c->state_bf16) ((uint16_t *)(split && half ? score : kv))[at] = (uint16_t)bits;
    else memcpy((float *)(split && half ? score : kv) + at, &bits, 4);
  }
}
/* What set 0 writes into a variant's state, applied to a copy of its state before the run. */
static void bench_expect_state(const bench_case *c, const bench_alt *v, void *kv, void *score) {
  if (c->decode) {
    for (int64_t b = 0; b < c->size; ++b) {
      const c128_decode_plan *plan = (const c128_decode_plan *)v->host_plans_c + b;
      if (plan->seq_len && plan->write_loc >= 0)
        bench_expect_write(c, v, kv, score, plan->write_loc, (const float *)c->input + b * BENCH_ROW_ELEMS);
    }
    return;
  }
  for (int k = 0; k < c->calls; ++k)
    for (int64_t j = 0; j < c->pargs[k].num_write; ++j) {
      const c128_write_plan *w = (const c128_write_plan *)v->host_plans_w + k * c->nw_max + j;
      bench_expect_write(c, v, kv, score, w->write_loc,
                         (const float *)c->pargs[k].input + (int64_t)w->ragged_id * BENCH_ROW_ELEMS);
    }
}

/* Entries of a cache that a run wrote (any byte of the entry changed from the poison). */
static int64_t bench_entries_written(const bench_alt *v, const unsigned char *cache) {
  const int fp8 = v->entry == C128_OUTPUT_DSV4_FP8;
  const int64_t P = BENCH_ENTRIES_PER_PAGE, wide = BENCH_HEAD_DIM + 64, size = fp8 ? wide : BENCH_ENTRY_BF16_BYTES;
  const int64_t page_bytes = fp8 ? (BENCH_ENTRY_FP8_BYTES * P + wide - 1) / wide * wide : BENCH_ENTRY_BF16_BYTES * P;
  int64_t n = 0;
  for (int64_t page = 0; page < (int64_t)v->cache_bytes / page_bytes; ++page)
    for (int64_t t = 0; t < P; ++t) {
      const unsigned char *entry = cache + page * page_bytes + t * size;
      for (int64_t i = 0; i < size; ++i)
        if (entry[i] != BENCH_ENTRY_POISON) {
          ++n;
          break;
        }
    }
  return n;
}

/* Appends to a check's message, which truncates. */
static void bench_say(char *msg, size_t size, size_t *used, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (*used < size) *used += (size_t)vsnprintf(msg + *used, size - *used, fmt, ap);
  va_end(ap);
}
#define BENCH_MSG(...) bench_say(msg, size, &used, __VA_ARGS__)

/* Runs set 0 of each variant of a group once, each from the case's initial state (those that
   write the case's own state get `snapshot` back first; a layout's state is fresh), on the GPU or
   the host runner, and compares what must agree, bit for bit: every pooled row of a layout and of
   the split path with today's (for a biased layout with bf16 state only when `biased_exact`: its
   stored scores are rounded once with ape added, today's without, so otherwise its largest
   difference is reported, not judged); the entries of the split path, byte for byte over the
   whole cache, with the fused path's of the same kind, and their count; the fused path's
   workspace counters back at zero. deep (host memory only):
   also each variant's state after the run, which must be its state before with exactly set 0's
   new tokens written where its plans put them (bench_expect_state), and the entry paths' states
   equal to today's. Alts[0] is today's. Returns the failures; msg says what was found (no commas:
   it goes into the CSV). */
static int bench_check_group(const bench_case *c, const void *snapshot, bench_alt *const *alts, int n, int deep,
                             int biased_exact, char *msg, size_t size) {
  const size_t out_bytes = (size_t)c->out_rows_per_unit * BENCH_OUTPUT_ROW_BYTES;
  const int64_t expect = c->decode ? c->boundary_in_set0 : c->compress_per_unit; /* windows of set 0 */
  float *ref = (float *)bench_host(out_bytes), *got = (float *)bench_host(out_bytes);
  unsigned char *caches[BENCH_MAX_VARIANTS] = {NULL};
  void *today_after = deep ? bench_host(c->state_bytes) : NULL;
  int failures = 0;
  size_t used = 0;
  msg[0] = 0;
  for (int i = 0; i < n; ++i) {
    const bench_alt *v = alts[i];
    void *state = v->layout ? v->state : c->state;
    if (!v->layout) bench_copy_mem(c->state, snapshot, c->state_bytes);
    void *before[2] = {NULL, NULL};
    if (deep) {
      before[0] = bench_host(v->layout ? v->state_bytes : c->state_bytes), before[1] = bench_host(v->score_bytes);
      memcpy(before[0], state, v->layout ? v->state_bytes : c->state_bytes);
      if (v->score_bytes) memcpy(before[1], v->score, v->score_bytes);
    }
    if (v->output) bench_poison(v->output, out_bytes);
    if (v->cache) bench_memset(v->cache, BENCH_ENTRY_POISON, v->cache_bytes);
    bench_run_alt(c, v, 0, bench_stream);
    if (bench_gpu) BENCH_CUDA(cudaStreamSynchronize(bench_stream));
    if (v->cache) {
      caches[i] = (unsigned char *)bench_host(v->cache_bytes);
      bench_download(caches[i], v->cache, v->cache_bytes);
    }
    if (v->output) bench_download(i ? got : ref, v->output, out_bytes);
    if (i == 0) {
      int64_t written = 0;
      for (size_t j = 0; j < out_bytes / sizeof(float); ++j) written += ref[j] == ref[j];
      const int ok = written == expect * BENCH_HEAD_DIM;
      failures += !ok;
      BENCH_MSG("today %lld values%s", (long long)written, ok ? "" : " (FAILED: expected more)");
    } else if (v->output) {
      int64_t differ = 0;
      double err = 0.0;
      for (size_t j = 0; j < out_bytes / sizeof(float); ++j)
        if (memcmp(&ref[j], &got[j], sizeof(float)) && !(ref[j] != ref[j] && got[j] != got[j])) {
          ++differ;
          if (fabs((double)ref[j] - got[j]) > err || got[j] != got[j]) err = fabs((double)ref[j] - got[j]);
        }
      const int judged = !(v->layout && v->layout->biased && c->state_bf16 && !biased_exact);
      failures += judged && differ;
      if (!differ) BENCH_MSG("; %s pooled = today's", v->name);
      else
        BENCH_MSG("; %s %lld values differ (max %.1e)%s", v->name, (long long)differ, err,
                  judged ? " FAILED" : " by design: bf16 of score + ape");
    }
    if (v->cache) {
      const int64_t entries = bench_entries_written(v, caches[i]);
      int same = 1;
      if (v->epilogue && i > 0 && alts[i - 1]->entry == v->entry && caches[i - 1])
        same = !memcmp(caches[i - 1], caches[i], v->cache_bytes);
      failures += entries != expect || !same;
      BENCH_MSG("; %s %lld entries%s%s", v->name, (long long)entries, entries == expect ? "" : " (FAILED)",
                !v->epilogue ? ""
                : same       ? " = fused bytes"
                             : " FAILED: differ from fused");
    }
    if (v->workspace && v->workspace_jobs > 0) { /* every launch leaves the counters at zero */
      uint32_t *count = (uint32_t *)bench_host((size_t)v->workspace_jobs * sizeof *count);
      bench_download(count, v->workspace, (size_t)v->workspace_jobs * sizeof *count);
      int64_t left = 0;
      for (int64_t k = 0; k < v->workspace_jobs; ++k) left += count[k] != 0;
      failures += left != 0;
      if (left) BENCH_MSG("; %s FAILED: %lld workspace counters not zero", v->name, (long long)left);
      free(count);
    }
    if (deep) {
      int ok;
      if (v->layout || i == 0) {
        bench_expect_state(c, v, before[0], before[1]);
        ok = !memcmp(before[0], state, v->layout ? v->state_bytes : c->state_bytes) &&
             (!v->score_bytes || !memcmp(before[1], v->score, v->score_bytes));
        if (i == 0) memcpy(today_after, c->state, c->state_bytes);
      } else {
        ok = !memcmp(today_after, c->state, c->state_bytes);
      }
      failures += !ok;
      BENCH_MSG(" (state %s)", ok ? "ok" : "FAILED");
      free(before[0]), free(before[1]);
    }
  }
  for (int i = 0; i < n; ++i) free(caches[i]);
  free(ref), free(got), free(today_after);
  return failures;
}
#undef BENCH_MSG

/* The timed unit of a group: variant v's unit. */
typedef struct bench_group {
  const bench_case *c;
  const bench_alt *alt[BENCH_MAX_VARIANTS];
} bench_group;
static void bench_unit_group(void *ctx, int variant, int64_t index, cudaStream_t s) {
  const bench_group *g = (const bench_group *)ctx;
  bench_run_alt(g->c, g->alt[variant], index % g->c->nsets, s);
}

/* ---- the runs --------------------------------------------------------------------------- */
/* Whether a batch size (decode) or token count runs: those of --sizes when given, else every
   one, or with --quick batches 1 and 128 and 8K tokens. */
static int bench_size_selected(int64_t size, int decode) {
  if (bench_opt.sizes) {
    for (const char *at = bench_opt.sizes; *at;) {
      char *end;
      const long long n = strtoll(at, &end, 10);
      if (end == at) break;
      if (n == size) return 1;
      at = *end == ',' ? end + 1 : end;
    }
    return 0;
  }
  if (!bench_opt.quick) return 1;
  return decode ? size == 1 || size == 128 : size == bench_tokens[0];
}

/* --filter: substrings separated by '|', any of which selects a case; one that starts with '='
   selects the case of exactly that name. */
static int bench_selected(const char *name) {
  if (!bench_opt.filter) return 1;
  for (const char *f = bench_opt.filter; *f;) {
    const size_t len = strcspn(f, "|");
    if (*f == '=' && len - 1 == strlen(name) && !strncmp(name, f + 1, len - 1)) return 1;
    for (const char *at = name; len && *f != '=' && *at; ++at)
      if (!strncmp(at, f, len)) return 1;
    f += len + (f[len] == '|');
  }
  return 0;
}

static int bench_batch_index(int64_t B) {
  for (int i = 0; i < BENCH_COUNT(bench_batches); ++i)
    if (bench_batches[i] == B) return i;
  return -1;
}
static bench_stats bench_empty[BENCH_COUNT(bench_batches)][BENCH_MODES];

static double bench_measure_copy(const char *label) {
  bench_copy_ctx ctx = {NULL, NULL, BENCH_COPY_BYTES};
  BENCH_CUDA(cudaMalloc(&ctx.src, ctx.bytes));
  BENCH_CUDA(cudaMalloc(&ctx.dst, ctx.bytes));
  BENCH_CUDA(bench_fill_device(ctx.src, (int64_t)(ctx.bytes / 4096), 1024, 1024, 0, 1.0f, 1.0f, 7, bench_stream));
  BENCH_CUDA(bench_fill_device(ctx.dst, (int64_t)(ctx.bytes / 4096), 1024, 1024, 0, 1.0f, 1.0f, 8, bench_stream));
  bench_runner r = {bench_unit_copy, &ctx, 1, 2, 1, 1 << BENCH_STREAM};
  bench_stats st[BENCH_MAX_VARIANTS][BENCH_MODES];
  bench_measure(&r, st);
  const double bytes = 2.0 * (double)ctx.bytes; /* read + written */
  const double gbps = bytes / (st[0][BENCH_STREAM].median * 1e-6) / 1e9;
  if (bench_copy_gbps == 0.0) bench_copy_gbps = gbps;
  bench_row("copy", label, (int64_t)ctx.bytes, "memcpy", BENCH_STREAM, 0, &st[0][BENCH_STREAM], bytes, 0.0, 2, bytes,
            "");
  printf("copy (%s): %.0f GB/s (1 GiB device-to-device, read + written; p10 %.1f p90 %.1f us)\n", label, gbps,
         st[0][BENCH_STREAM].p10, st[0][BENCH_STREAM].p90);
  BENCH_CUDA(cudaFree(ctx.src));
  BENCH_CUDA(cudaFree(ctx.dst));
  return gbps;
}

typedef struct bench_read_ctx {
  void *src;
  size_t bytes;
  unsigned *sink;
  int64_t blocks;
} bench_read_ctx;
static void bench_unit_read(void *ctx, int variant, int64_t index, cudaStream_t s) {
  const bench_read_ctx *c = (const bench_read_ctx *)ctx;
  (void)variant, (void)index;
  BENCH_CUDA(bench_launch_read(c->src, (int64_t)c->bytes, c->sink, c->blocks, s));
}

/* The read-only ceiling: 1 GiB streamed with 16-byte loads (bench_kernels.cu), GB/s of bytes read. */
static double bench_measure_read(const char *label) {
  int device = 0, sms = 0;
  BENCH_CUDA(cudaGetDevice(&device));
  BENCH_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  bench_read_ctx ctx = {NULL, BENCH_COPY_BYTES, NULL, 4 * (int64_t)sms};
  BENCH_CUDA(cudaMalloc(&ctx.src, ctx.bytes));
  BENCH_CUDA(cudaMalloc((void **)&ctx.sink, (size_t)ctx.blocks * sizeof(unsigned)));
  BENCH_CUDA(bench_fill_device(ctx.src, (int64_t)(ctx.bytes / 4096), 1024, 1024, 0, 1.0f, 1.0f, 9, bench_stream));
  bench_runner r = {bench_unit_read, &ctx, 1, 1, 1, 1 << BENCH_STREAM};
  bench_stats st[BENCH_MAX_VARIANTS][BENCH_MODES];
  bench_measure(&r, st);
  const double bytes = (double)ctx.bytes, gbps = bytes / (st[0][BENCH_STREAM].median * 1e-6) / 1e9;
  if (bench_read_gbps == 0.0) bench_read_gbps = gbps;
  bench_row("read", label, (int64_t)ctx.bytes, "stream", BENCH_STREAM, 0, &st[0][BENCH_STREAM], bytes, 0.0, 1, bytes,
            "");
  printf("read (%s): %.0f GB/s (1 GiB read with 16-byte loads, %lld blocks x 512 threads)\n", label, gbps,
         (long long)ctx.blocks);
  BENCH_CUDA(cudaFree(ctx.src));
  BENCH_CUDA(cudaFree(ctx.sink));
  return gbps;
}

/* The grid c128_decode launches for a batch (its automatic requests_per_block). */
static int64_t bench_decode_grid(int64_t batch) {
  int device = 0, sms = 0;
  BENCH_CUDA(cudaGetDevice(&device));
  BENCH_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int64_t group = bench_two_warp_decode_group_size(batch, BENCH_HEAD_DIM, sms);
  return (batch + group - 1) / group * C128_NUM_SPLIT(BENCH_HEAD_DIM);
}

static void bench_measure_empty(void) {
  for (int i = 0; i < BENCH_COUNT(bench_batches); ++i) {
    int64_t grid = bench_decode_grid(bench_batches[i]);
    bench_runner r = {
        bench_unit_empty, &grid, 1, 1, 1, (1 << BENCH_STREAM) | (1 << BENCH_GRAPH) | (1 << BENCH_STEP_GRAPH)};
    bench_stats st[BENCH_MAX_VARIANTS][BENCH_MODES];
    bench_measure(&r, st);
    for (int m = 0; m < BENCH_MODES; ++m) {
      bench_empty[i][m] = st[0][m];
      bench_row("empty", "-", bench_batches[i], "-", m, 0, &st[0][m], 0.0, st[0][m].median, 1, 0.0, "");
    }
    printf("empty launch %5lld x 512 threads: stream %6.2f  graph %6.2f  step_graph %6.2f us\n", (long long)grid,
           st[0][BENCH_STREAM].median, st[0][BENCH_GRAPH].median, st[0][BENCH_STEP_GRAPH].median);
  }
}

static void bench_one_case(bench_kind kind, int bf16, int64_t size) {
  char name[64];
  snprintf(name, sizeof name, "%s", bench_kind_names[kind]);
  if (!bench_selected(name)) return;
  bench_case c;
  bench_case_build(&c, kind, bf16, size, 1);
  char check[160] = "";
  if ((c.decode && (size == 1 || size == 64) && kind != BENCH_DECODE_OFF) || (!c.decode && size <= 8192)) {
    bench_verify(&c, check, sizeof check);
    printf("  verify %s %s %lld: %s\n", name, bench_state_name(bf16), (long long)size, check);
  }
  const int modes = (1 << BENCH_STREAM) | (1 << BENCH_GRAPH) | (c.decode ? 1 << BENCH_STEP_GRAPH : 0);
  bench_runner r = {bench_unit_case, &c, 2, c.nsets, c.period, modes};
  bench_stats st[BENCH_MAX_VARIANTS][BENCH_MODES];
  bench_measure(&r, st);
  const int bi = bench_batch_index(size);
  for (int lib = 0; lib < 2; ++lib)
    for (int m = 0; m < BENCH_MODES; ++m) {
      if (!(modes & (1 << m))) continue;
      const double empty = c.decode && bi >= 0 ? bench_empty[bi][m].median : 0.0;
      bench_row(name, bench_state_name(bf16), size, bench_libs[lib].name, m, 0, &st[lib][m], c.bytes, empty, c.nsets,
                c.bytes * (double)c.nsets, check);
    }
  const bench_stats *a = &st[0][BENCH_GRAPH], *b = &st[1][BENCH_GRAPH];
  const double gbps = c.bytes / (a->median * 1e-6) / 1e9;
  printf("%-16s %-4s %6lld | two_warp stream %8.2f graph %8.2f [%8.2f..%8.2f] | legacy graph %8.2f | %6.0f GB/s "
         "%5.1f%% copy %5.1f%% read",
         name, bench_state_name(bf16), (long long)size, st[0][BENCH_STREAM].median, a->median, a->p10, a->p90,
         b->median, gbps, 100.0 * gbps / bench_copy_gbps, 100.0 * gbps / bench_read_gbps);
  if (c.decode && bi >= 0) printf(" | vs empty %+6.2f us", a->median - bench_empty[bi][BENCH_GRAPH].median);
  printf("\n");
  fflush(stdout);
  bench_case_free(&c);
}

static void bench_chain(bench_kind kind, int64_t B) {
  char name[64];
  snprintf(name, sizeof name, "chain_%s", bench_kind_names[kind]);
  if (!bench_selected(name)) return;
  bench_case c;
  bench_case_build(&c, kind, 0, B, 1);
  bench_runner r = {bench_unit_chain, &c,       2,
                    c.nsets,          c.period, (1 << BENCH_STREAM) | (1 << BENCH_GRAPH) | (1 << BENCH_STEP_GRAPH)};
  bench_stats st[BENCH_MAX_VARIANTS][BENCH_MODES];
  bench_measure(&r, st);
  const double bytes = c.bytes + 2.0 * (double)B * BENCH_OUTPUT_ROW_BYTES; /* + the consumer's row */
  for (int pdl = 0; pdl < 2; ++pdl)
    for (int m = 0; m < BENCH_MODES; ++m)
      bench_row(name, "f32", B, pdl ? "pdl_on" : "pdl_off", m, pdl, &st[pdl][m], bytes, 0.0, c.nsets,
                bytes * (double)c.nsets, "");
  printf("%-24s B=%5lld decode+consumer | PDL off: stream %7.2f graph %7.2f step %7.2f | PDL on: stream %7.2f "
         "graph %7.2f step %7.2f us\n",
         name, (long long)B, st[0][0].median, st[0][1].median, st[0][2].median, st[1][0].median, st[1][1].median,
         st[1][2].median);
  fflush(stdout);
  bench_case_free(&c);
}

/* The variants of one case: each layout A/B against today's (case layout_<case>, variants <layout>
   and today_vs_<layout>: today's, timed in that pair), then today's pooled launch and the four
   cache-entry paths in one comparison, A B C D E, E D C B A (case entry_<case>, variants pooled,
   fused_fp8, split_fp8, fused_bf16, split_bf16). Set 0 of each is checked first (bench_check_group:
   GPU against GPU, bit for bit), into the check column. */
static void bench_variant_case(bench_kind kind, int bf16, int64_t size) {
  char lname[64], ename[64];
  snprintf(lname, sizeof lname, "layout_%s", bench_kind_names[kind]);
  snprintf(ename, sizeof ename, "entry_%s", bench_kind_names[kind]);
  const int layouts = bench_selected(lname), entries = bench_selected(ename);
  if (!layouts && !entries) return;
  bench_case c;
  bench_case_build(&c, kind, bf16, size, 1);
  void *snapshot = bench_alloc(c.state_bytes);
  bench_copy_mem(snapshot, c.state, c.state_bytes);
  bench_alt today;
  bench_alt_today(&c, &today);
  const int modes = (1 << BENCH_STREAM) | (1 << BENCH_GRAPH) | (c.decode ? 1 << BENCH_STEP_GRAPH : 0);
  const int bi = bench_batch_index(size);
  const char *state = bench_state_name(bf16);
  for (int l = 0; layouts && l < BENCH_COUNT(bench_layouts); ++l) {
    bench_alt alt;
    bench_copy_mem(c.state, snapshot, c.state_bytes); /* the gather reads today's initial state */
    bench_build_layout(&c, &bench_layouts[l], &alt, 1);
    if (bench_gpu) BENCH_CUDA(cudaDeviceSynchronize()); /* pageable uploads land before the first launch */
    bench_alt *pair[2] = {&today, &alt};
    char check[320];
    bench_check_group(&c, snapshot, pair, 2, 0, 0, check, sizeof check);
    bench_group g = {&c, {&today, &alt}};
    bench_runner r = {bench_unit_group, &g, 2, c.nsets, c.period, modes};
    bench_stats st[BENCH_MAX_VARIANTS][BENCH_MODES];
    bench_measure(&r, st);
    char base[64];
    snprintf(base, sizeof base, "today_vs_%s", alt.name);
    for (int v = 0; v < 2; ++v)
      for (int m = 0; m < BENCH_MODES; ++m) {
        if (!(modes & (1 << m))) continue;
        const double empty = c.decode && bi >= 0 ? bench_empty[bi][m].median : 0.0, bytes = v ? alt.bytes : c.bytes;
        bench_row(lname, state, size, v ? alt.name : base, m, 0, &st[v][m], bytes, empty, c.nsets,
                  bytes * (double)c.nsets, check);
      }
    printf("%-24s %-4s %6lld | today graph %8.2f | %-11s graph %8.2f x%.3f stream x%.3f", lname, state, (long long)size,
           st[0][BENCH_GRAPH].median, alt.name, st[1][BENCH_GRAPH].median,
           st[1][BENCH_GRAPH].median / st[0][BENCH_GRAPH].median,
           st[1][BENCH_STREAM].median / st[0][BENCH_STREAM].median);
    if (c.decode) printf(" step x%.3f", st[1][BENCH_STEP_GRAPH].median / st[0][BENCH_STEP_GRAPH].median);
    printf(" | %s\n", check);
    fflush(stdout);
    bench_alt_free(&alt);
  }
  if (entries) {
    bench_alt alts[4];
    for (int i = 0; i < 4; ++i)
      bench_build_entry(&c, i < 2 ? C128_OUTPUT_DSV4_FP8 : C128_OUTPUT_DSV4_BF16, i % 2, &alts[i], 1);
    if (bench_gpu) BENCH_CUDA(cudaDeviceSynchronize());
    bench_alt *group[5] = {&today, &alts[0], &alts[1], &alts[2], &alts[3]};
    char check[320];
    bench_check_group(&c, snapshot, group, 5, 0, 0, check, sizeof check);
    bench_group g = {&c, {&today, &alts[0], &alts[1], &alts[2], &alts[3]}};
    bench_runner r = {bench_unit_group, &g, 5, c.nsets, c.period, modes};
    bench_stats st[BENCH_MAX_VARIANTS][BENCH_MODES];
    bench_measure(&r, st);
    for (int v = 0; v < 5; ++v)
      for (int m = 0; m < BENCH_MODES; ++m) {
        if (!(modes & (1 << m))) continue;
        const double empty = c.decode && bi >= 0 ? bench_empty[bi][m].median : 0.0;
        const double bytes = v ? alts[v - 1].bytes : c.bytes;
        bench_row(ename, state, size, v ? alts[v - 1].name : "pooled", m, 0, &st[v][m], bytes, empty, c.nsets,
                  bytes * (double)c.nsets, check);
      }
    printf("%-24s %-4s %6lld | pooled graph %8.2f", ename, state, (long long)size, st[0][BENCH_GRAPH].median);
    for (int v = 1; v < 5; ++v)
      printf(" | %s %8.2f x%.3f", alts[v - 1].name, st[v][BENCH_GRAPH].median,
             st[v][BENCH_GRAPH].median / st[0][BENCH_GRAPH].median);
    printf(" | %s\n", check);
    fflush(stdout);
    for (int i = 0; i < 4; ++i) bench_alt_free(&alts[i]);
  }
  bench_release(snapshot);
  bench_case_free(&c);
}

/* --profile CASE:SIZE:STATE[:VARIANT]: a few launches of one case, for ncu: both epilogues; or,
   with a variant (a layout of bench_layouts, fused_fp8 or fused_bf16), today's launch three
   times and then the variant's three times. */
static int bench_profile(void) {
  char kind_name[64] = "", variant[32] = "";
  long long size = 0;
  char state[8] = "f32";
  if (sscanf(bench_opt.profile, "%63[^:]:%lld:%7[^:]:%31s", kind_name, &size, state, variant) < 2) {
    fprintf(stderr, "--profile wants CASE:SIZE[:STATE[:VARIANT]], e.g. decode_boundary:128:f32:vllm_b8\n");
    return 2;
  }
  int kind = -1;
  for (int k = 0; k < BENCH_KINDS; ++k)
    if (!strcmp(kind_name, bench_kind_names[k])) kind = k;
  const bench_layout *layout = NULL;
  for (int l = 0; l < BENCH_COUNT(bench_layouts); ++l)
    if (!strcmp(variant, bench_layouts[l].name)) layout = &bench_layouts[l];
  const int fused = !strcmp(variant, "fused_fp8") || !strcmp(variant, "fused_bf16");
  if (kind < 0 || (variant[0] && !layout && !fused)) {
    fprintf(stderr, "unknown case %s or variant %s\n", kind_name, variant);
    return 2;
  }
  bench_case c;
  bench_case_build(&c, (bench_kind)kind, !strcmp(state, "bf16"), size, 1);
  if (!variant[0]) {
    for (int lib = 0; lib < 2; ++lib)
      for (int64_t i = 0; i < 3; ++i) bench_run_unit(&c, lib, i % c.nsets, bench_stream);
  } else {
    bench_alt today, alt;
    bench_alt_today(&c, &today);
    if (layout) bench_build_layout(&c, layout, &alt, 1);
    else
      bench_build_entry(&c, !strcmp(variant, "fused_fp8") ? C128_OUTPUT_DSV4_FP8 : C128_OUTPUT_DSV4_BF16, 0, &alt, 1);
    BENCH_CUDA(cudaDeviceSynchronize());
    for (int64_t i = 0; i < 6; ++i) bench_run_alt(&c, i < 3 ? &today : &alt, i % c.nsets, bench_stream);
    BENCH_CUDA(cudaStreamSynchronize(bench_stream));
    bench_alt_free(&alt);
  }
  BENCH_CUDA(cudaStreamSynchronize(bench_stream));
  printf("profiled %s %s %lld %s: 3 units each, %.0f bytes per unit\n", kind_name, state, size,
         variant[0] ? variant : "(both epilogues)", c.bytes);
  bench_case_free(&c);
  return 0;
}

/* bf16-state cases of --cpu-check: scores and ape on a grid of 1/16, where score + ape is exact in
   bf16 (|score + ape| < 8 needs 7 bits), so that a biased layout stores exactly what today's
   windows form and must give today's bits too (with f32 state it does for any data). */
static void bench_quantize_scores(bench_case *c) {
  const int D = BENCH_HEAD_DIM;
  float *in = (float *)c->input;
  for (int64_t r = 0; r < (int64_t)(c->input_bytes / BENCH_INPUT_ROW_BYTES); ++r)
    for (int e = D; e < 2 * D; ++e) in[r * 2 * D + e] = roundf(in[r * 2 * D + e] * 16.0f) / 16.0f;
  for (int i = 0; i < C128_WINDOW * D; ++i) c->ape[i] = roundf(c->ape[i] * 16.0f) / 16.0f;
  uint16_t *state = (uint16_t *)c->state;
  for (int64_t r = 0; r < c->pages * C128_WINDOW; ++r)
    for (int e = D; e < 2 * D; ++e) {
      uint16_t *at = state + r * 2 * D + e;
      *at = (uint16_t)bench_narrow(1, roundf(bench_widen_bf16(*at) * 16.0f) / 16.0f);
    }
}

/* --cpu-check of a case's variants on the host runner: each layout with today's, then today's
   pooled launch with the four cache-entry paths, set 0 of each from one initial state, outputs
   and states compared (bench_check_group, deep). Without `run`, the variants' tables, plans and
   bytes only (the planner still checks every block the plans use). Returns the failures. */
static int bench_cpu_variants(bench_case *c, int run) {
  int failures = 0;
  if (run && c->state_bf16) bench_quantize_scores(c);
  void *snapshot = run ? bench_host(c->state_bytes) : NULL;
  if (run) memcpy(snapshot, c->state, c->state_bytes);
  bench_alt today;
  bench_alt_today(c, &today);
  char check[400];
  for (int l = 0; l < BENCH_COUNT(bench_layouts); ++l) {
    bench_alt alt;
    if (run) memcpy(c->state, snapshot, c->state_bytes); /* the gather reads today's initial state */
    bench_build_layout(c, &bench_layouts[l], &alt, run);
    const c128_state_layout *lay = &alt.host_layout;
    printf("  %-11s blocks %7lld", alt.name, (long long)alt.blocks);
    if (lay->block_table)
      printf(" table %5lld x %5lld row_shift %2d", (long long)lay->table_rows, (long long)lay->table_stride,
             lay->row_shift);
    else printf(" %-32s", " no table");
    printf(" bytes/unit %12.0f (+%.0f table)", alt.bytes, alt.bytes - c->bytes);
    if (run) {
      bench_alt *pair[2] = {&today, &alt};
      const int f = bench_check_group(c, snapshot, pair, 2, 1, 1, check, sizeof check);
      failures += f;
      printf(" | %s: %s", f ? "FAILED" : "ok", check);
    }
    printf("\n");
    bench_alt_free(&alt);
  }
  bench_alt alts[4];
  for (int i = 0; i < 4; ++i)
    bench_build_entry(c, i < 2 ? C128_OUTPUT_DSV4_FP8 : C128_OUTPUT_DSV4_BF16, i % 2, &alts[i], run);
  printf("  entries     cache %lld + %lld bytes, bytes/unit fp8 %.0f bf16 %.0f (pooled %.0f)",
         (long long)alts[0].cache_bytes, (long long)alts[2].cache_bytes, alts[0].bytes, alts[2].bytes, c->bytes);
  if (run) {
    bench_alt *group[5] = {&today, &alts[0], &alts[1], &alts[2], &alts[3]};
    const int f = bench_check_group(c, snapshot, group, 5, 1, 1, check, sizeof check);
    failures += f;
    printf(" | %s: %s", f ? "FAILED" : "ok", check);
  }
  printf("\n");
  for (int i = 0; i < 4; ++i) bench_alt_free(&alts[i]);
  free(snapshot);
  return failures;
}

/* --cpu-check: the small cases built in host memory, run by both epilogues' host runners, then
   their variants (bench_cpu_variants). */
static int bench_cpu_check(void) {
  static const struct {
    bench_kind kind;
    int bf16;
    int64_t size;
    int run;
  } list[] = {
      {BENCH_DECODE_BOUNDARY, 0, 8, 1},   {BENCH_DECODE_BOUNDARY, 1, 8, 1},    {BENCH_DECODE_OFF, 0, 32, 1},
      {BENCH_DECODE_MIX, 1, 256, 1},      {BENCH_DECODE_MIX, 0, 1, 1},         {BENCH_PREFILL_1REQ, 0, 8192, 1},
      {BENCH_PREFILL_8REQ, 1, 8192, 1},   {BENCH_PREFILL_EXTEND, 0, 8192, 1},  {BENCH_PREFILL_EXTEND, 1, 8192, 1},
      {BENCH_PREFILL_1REQ, 0, 131072, 0}, {BENCH_PREFILL_8REQ, 0, 131072, 0},  {BENCH_PREFILL_EXTEND, 1, 131072, 0},
      {BENCH_DECODE_MIX, 0, 1024, 0},     {BENCH_DECODE_BOUNDARY, 0, 1024, 0}, {BENCH_DECODE_OFF, 1, 1, 0},
  };
  int failures = 0;
  bench_opt.footprint = 16.0 * 1048576.0; /* small host buffers; the GPU run uses 256 MiB */
  for (int i = 0; i < BENCH_COUNT(list); ++i) {
    bench_case c;
    bench_case_build(&c, list[i].kind, list[i].bf16, list[i].size, list[i].run);
    printf("%-16s %-4s %7lld: sets %4lld calls %d bytes/unit %12.0f state %7.1f MiB", bench_kind_names[c.kind],
           bench_state_name(c.state_bf16), (long long)c.size, (long long)c.nsets, c.calls, c.bytes,
           c.state_bytes / 1048576.0);
    if (!c.decode)
      printf(" compress %lld write %lld state rows read %lld", (long long)c.compress_per_unit,
             (long long)c.write_per_unit, (long long)c.state_rows_read_per_unit);
    if (list[i].run) {
      const size_t out_bytes = (size_t)c.out_rows_per_unit * BENCH_OUTPUT_ROW_BYTES;
      float *out[2];
      void *state0 = malloc(c.state_bytes);
      if (!state0) exit(1);
      memcpy(state0, c.state, c.state_bytes);
      for (int lib = 0; lib < 2; ++lib) {
        memcpy(c.state, state0, c.state_bytes);
        memset(c.output, 0xFF, out_bytes);
        if (c.decode) BENCH_C128(bench_libs[lib].decode_host(&c.dargs[0], NULL));
        else
          for (int k = 0; k < c.calls; ++k) BENCH_C128(bench_libs[lib].prefill_host(&c.pargs[k], NULL));
        out[lib] = (float *)malloc(out_bytes);
        if (!out[lib]) exit(1);
        memcpy(out[lib], c.output, out_bytes);
      }
      double err = 0.0;
      int64_t written = 0, nan_mismatch = 0;
      for (size_t j = 0; j < out_bytes / sizeof(float); ++j) {
        const float x = out[0][j], y = out[1][j];
        written += x == x;
        if ((x != x) != (y != y)) ++nan_mismatch;
        else if (!bench_same(x, y) && fabs((double)x - y) > err) err = fabs((double)x - y);
      }
      const int64_t expect = c.decode ? c.boundary_in_set0 * BENCH_HEAD_DIM : c.compress_per_unit * BENCH_HEAD_DIM;
      const int ok = nan_mismatch == 0 && err <= 1e-5 && written == expect;
      failures += !ok;
      printf(" | host runners: %lld values (expect %lld), two_warp vs legacy max diff %.1e %s", (long long)written,
             (long long)expect, err, ok ? "ok" : "FAILED");
      memcpy(c.state, state0, c.state_bytes);
      free(out[0]), free(out[1]), free(state0);
    }
    printf("\n");
    failures += bench_cpu_variants(&c, list[i].run);
    fflush(stdout);
    bench_case_free(&c);
  }
  printf("%s\n", failures ? "cpu check FAILED" : "cpu check ok");
  return failures ? 1 : 0;
}

/* ---- metadata --------------------------------------------------------------------------- */
static void bench_clean(char *s) {
  for (; *s; ++s)
    if (*s == ',' || *s == '\n' || *s == '\r') *s = ' ';
}

static void bench_driver_version(char *dst, size_t size) {
  snprintf(dst, size, "unknown");
  FILE *f = popen("nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null", "r");
  if (f) {
    if (fgets(dst, (int)size, f)) dst[strcspn(dst, "\n")] = 0;
    pclose(f);
  }
  if (!dst[0]) snprintf(dst, size, "unknown");
}

static void bench_metadata(void) {
  struct cudaDeviceProp prop;
  int drv = 0, rt = 0;
  char driver[64], gpu[256], commit[128];
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  BENCH_CUDA(cudaDriverGetVersion(&drv));
  BENCH_CUDA(cudaRuntimeGetVersion(&rt));
  bench_driver_version(driver, sizeof driver);
  snprintf(gpu, sizeof gpu, "%s", prop.name);
  snprintf(commit, sizeof commit, "%s", bench_opt.commit);
  bench_clean(gpu), bench_clean(driver), bench_clean(commit);
  snprintf(bench_meta, sizeof bench_meta, "%s,%s,%s,%d.%d/%d.%d,%s", gpu, driver, bench_nvcc_version(), drv / 1000,
           (drv % 1000) / 10, rt / 1000, (rt % 1000) / 10, commit);
  printf("GPU %s (%d SMs, %.0f MB L2), driver %s (CUDA %d.%d), runtime %d.%d, nvcc %s, commit %s\n", prop.name,
         prop.multiProcessorCount, prop.l2CacheSize / 1e6, driver, drv / 1000, (drv % 1000) / 10, rt / 1000,
         (rt % 1000) / 10, bench_nvcc_version(), commit);
  printf("epilogues: %s = %d, %s = %d (C128_EPILOGUE of each copy)\n", bench_libs[0].name, bench_libs[0].epilogue(),
         bench_libs[1].name, bench_libs[1].epilogue());
}

int main(int argc, char **argv) {
  bench_opt.csv_path = "bench_c128.csv";
  bench_opt.commit = getenv("BENCH_COMMIT") ? getenv("BENCH_COMMIT") : "unknown";
  bench_opt.samples_per_round = 10;
  bench_opt.footprint = BENCH_FOOTPRINT_BYTES;
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--csv") && v) bench_opt.csv_path = v, ++i;
    else if (!strcmp(a, "--commit") && v) bench_opt.commit = v, ++i;
    else if (!strcmp(a, "--filter") && v) bench_opt.filter = v, ++i;
    else if (!strcmp(a, "--profile") && v) bench_opt.profile = v, ++i;
    else if (!strcmp(a, "--quick")) bench_opt.quick = 1, bench_opt.samples_per_round = 3;
    else if (!strcmp(a, "--pdl") && v) bench_opt.pdl = atoi(v), ++i;
    else if (!strcmp(a, "--entry-group") && v) bench_opt.entry_group = atoi(v), ++i;
    else if (!strcmp(a, "--sizes") && v) bench_opt.sizes = v, ++i;
    else if (!strcmp(a, "--cpu-check")) bench_opt.cpu_check = 1;
    else {
      fprintf(
          stderr,
          "usage: %s [--csv FILE] [--commit SHA] [--quick] [--filter SUBSTRING[|SUBSTRING...]] "
          "[--profile CASE:SIZE:STATE[:VARIANT]] [--cpu-check] [--pdl 0|1|2] [--entry-group G] [--sizes N[,N...]]\n",
          argv[0]);
      return 2;
    }
  }
  if (bench_opt.cpu_check) return bench_cpu_check();

  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    fprintf(stderr,
            "c128_bench: no CUDA GPU available (%s): nothing to measure.\n"
            "Run it on a machine with a GPU; --cpu-check exercises the case setup on the host runner.\n",
            e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 77;
  }
  bench_gpu = 1;
  BENCH_CUDA(cudaStreamCreateWithFlags(&bench_stream, cudaStreamNonBlocking));
  for (int i = 0; i <= BENCH_MAX_SAMPLES; ++i) BENCH_CUDA(cudaEventCreate(&bench_events[i]));
  if (bench_opt.profile) return bench_profile();

  bench_metadata();
  if (!(bench_csv = fopen(bench_opt.csv_path, "w"))) {
    perror(bench_opt.csv_path);
    return 1;
  }
  fprintf(bench_csv,
          "gpu,driver,nvcc,cuda_driver/runtime,commit,case,state,size,variant,mode,pdl,units_per_sample,"
          "samples,median_us,p10_us,p90_us,bytes,gbps,pct_copy,empty_us,nsets,footprint_mib,check,pct_read\n");

  bench_measure_copy("start");
  bench_measure_read("start");
  bench_measure_empty();
  const int nb = BENCH_COUNT(bench_batches), nt = BENCH_COUNT(bench_tokens);
  for (int kind = BENCH_DECODE_BOUNDARY; kind <= BENCH_DECODE_MIX; ++kind)
    for (int bf16 = 0; bf16 < 2; ++bf16)
      for (int i = 0; i < nb; ++i)
        if (bench_size_selected(bench_batches[i], 1)) bench_one_case((bench_kind)kind, bf16, bench_batches[i]);
  for (int kind = BENCH_PREFILL_1REQ; kind <= BENCH_PREFILL_EXTEND; ++kind)
    for (int bf16 = 0; bf16 < 2; ++bf16)
      for (int i = 0; i < nt; ++i)
        if (bench_size_selected(bench_tokens[i], 0)) bench_one_case((bench_kind)kind, bf16, bench_tokens[i]);
  bench_chain(BENCH_DECODE_BOUNDARY, 8);
  bench_chain(BENCH_DECODE_BOUNDARY, 128);
  bench_chain(BENCH_DECODE_OFF, 64);
  bench_chain(BENCH_DECODE_MIX, 256);
  for (int kind = BENCH_DECODE_BOUNDARY; kind <= BENCH_DECODE_MIX; ++kind)
    for (int bf16 = 0; bf16 < 2; ++bf16)
      for (int i = 0; i < nb; ++i)
        if (bench_size_selected(bench_batches[i], 1)) bench_variant_case((bench_kind)kind, bf16, bench_batches[i]);
  for (int kind = BENCH_PREFILL_1REQ; kind <= BENCH_PREFILL_EXTEND; ++kind)
    for (int bf16 = 0; bf16 < 2; ++bf16)
      for (int i = 0; i < nt; ++i)
        if (bench_size_selected(bench_tokens[i], 0)) bench_variant_case((bench_kind)kind, bf16, bench_tokens[i]);
  bench_release(bench_rope), bench_release(bench_gamma);
  bench_measure_copy("end");
  bench_measure_read("end");
  fclose(bench_csv);
  printf("wrote %s\n", bench_opt.csv_path);
  return 0;
}
