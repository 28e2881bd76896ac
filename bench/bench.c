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

   Usage: c128_bench [--csv FILE] [--commit SHA] [--quick] [--filter SUBSTRING]
                     [--profile CASE:SIZE:STATE] [--cpu-check]
   The commit is also read from $BENCH_COMMIT (the device copy of the tree may lack .git).
   Without a GPU it says so and exits with status 77; --cpu-check then builds the small cases
   in host memory and runs them through the host runner of both epilogues instead. */
#define _POSIX_C_SOURCE 200809L /* popen */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "bench.h"

/* ---- configuration -------------------------------------------------------------------- */
#define BENCH_FOOTPRINT_BYTES (256.0 * 1024.0 * 1024.0) /* rotation target: > 4x the 60 MB L2 */
#define BENCH_MAX_SETS 4096                             /* rotation sets per case */
#define BENCH_SAMPLE_US 1000.0                          /* each sample times about 1 ms of launches */
#define BENCH_ROUNDS 4                                  /* A B A B */
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
static void bench_poison(void *base, size_t bytes) {
  if (bench_gpu) BENCH_CUDA(cudaMemsetAsync(base, 0xFF, bytes, bench_stream)); /* NaN */
  else memset(base, 0xFF, bytes);
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
  c128_decode_args *dargs;  /* [nsets] */
  c128_prefill_args *pargs; /* [nsets * calls] */
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
  free(reqs);
  free(plans);
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
  if (alloc) {
    bench_upload(c->plans_c, all_c, c->plans_c_bytes);
    if (c->plans_w_bytes) bench_upload(c->plans_w, all_w, c->plans_w_bytes);
  }
  free(reqs), free(cp), free(wp), free(all_c), free(all_w);
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
  free(c->dargs), free(c->pargs);
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
  int variants;   /* 1, or 2 for an A/B pair timed A B A B */
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
                             double samples[2][BENCH_ROUNDS * BENCH_MAX_SAMPLES], bench_stats out[2][BENCH_MODES]) {
  _Static_assert(BENCH_MAX_GRAPHS <= BENCH_STEP_GRAPHS, "exec holds the larger of the two counts");
  const int spr = bench_opt.samples_per_round;
  static cudaGraphExec_t exec[2][BENCH_STEP_GRAPHS];
  for (int v = 0; v < r->variants; ++v)
    for (int64_t g = 0; g < count; ++g) exec[v][g] = bench_capture(r, v, g * per_graph, per_graph);
  for (int v = 0; v < r->variants; ++v)
    for (int64_t g = 0; g < count; ++g) BENCH_CUDA(cudaGraphLaunch(exec[v][g], bench_stream));
  BENCH_CUDA(cudaStreamSynchronize(bench_stream));
  int64_t next[2] = {0, 0};
  int n[2] = {0, 0};
  for (int round = 0; round < BENCH_ROUNDS; ++round) {
    const int v = round % r->variants;
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
static void bench_measure(const bench_runner *r, bench_stats out[2][BENCH_MODES]) {
  const int spr = bench_opt.samples_per_round;
  static double samples[2][BENCH_ROUNDS * BENCH_MAX_SAMPLES];
  int n[2];
  int64_t index = 0;
  memset(out, 0, 2 * BENCH_MODES * sizeof(bench_stats));
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
    n[0] = n[1] = 0;
    for (int round = 0; round < BENCH_ROUNDS; ++round) {
      const int v = round % r->variants;
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

/* ---- the runs --------------------------------------------------------------------------- */
static int bench_selected(const char *name) { return !bench_opt.filter || strstr(name, bench_opt.filter); }

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
  bench_stats st[2][BENCH_MODES];
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
  bench_stats st[2][BENCH_MODES];
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
    bench_stats st[2][BENCH_MODES];
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
  bench_stats st[2][BENCH_MODES];
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
  bench_stats st[2][BENCH_MODES];
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

/* --profile CASE:SIZE:STATE: a few launches of one case and both epilogues, for ncu. */
static int bench_profile(void) {
  char kind_name[64] = "";
  long long size = 0;
  char state[8] = "f32";
  if (sscanf(bench_opt.profile, "%63[^:]:%lld:%7s", kind_name, &size, state) < 2) {
    fprintf(stderr, "--profile wants CASE:SIZE[:STATE], e.g. decode_boundary:128:f32\n");
    return 2;
  }
  int kind = -1;
  for (int k = 0; k < BENCH_KINDS; ++k)
    if (!strcmp(kind_name, bench_kind_names[k])) kind = k;
  if (kind < 0) {
    fprintf(stderr, "unknown case %s\n", kind_name);
    return 2;
  }
  bench_case c;
  bench_case_build(&c, (bench_kind)kind, !strcmp(state, "bf16"), size, 1);
  for (int lib = 0; lib < 2; ++lib)
    for (int64_t i = 0; i < 3; ++i) bench_run_unit(&c, lib, i % c.nsets, bench_stream);
  BENCH_CUDA(cudaStreamSynchronize(bench_stream));
  printf("profiled %s %s %lld: 3 units per epilogue (two_warp first), %.0f bytes per unit\n", kind_name, state, size,
         c.bytes);
  bench_case_free(&c);
  return 0;
}

/* --cpu-check: the small cases built in host memory, run by both epilogues' host runners. */
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
      free(out[0]), free(out[1]), free(state0);
    }
    printf("\n");
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
    else if (!strcmp(a, "--cpu-check")) bench_opt.cpu_check = 1;
    else {
      fprintf(stderr,
              "usage: %s [--csv FILE] [--commit SHA] [--quick] [--filter SUBSTRING] "
              "[--profile CASE:SIZE:STATE] [--cpu-check]\n",
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
  const int nb = BENCH_COUNT(bench_batches), nt = bench_opt.quick ? 1 : BENCH_COUNT(bench_tokens);
  for (int kind = BENCH_DECODE_BOUNDARY; kind <= BENCH_DECODE_MIX; ++kind)
    for (int bf16 = 0; bf16 < 2; ++bf16)
      for (int i = 0; i < nb; ++i) {
        if (bench_opt.quick && bench_batches[i] != 1 && bench_batches[i] != 128) continue;
        bench_one_case((bench_kind)kind, bf16, bench_batches[i]);
      }
  for (int kind = BENCH_PREFILL_1REQ; kind <= BENCH_PREFILL_EXTEND; ++kind)
    for (int bf16 = 0; bf16 < 2; ++bf16)
      for (int i = 0; i < nt; ++i) bench_one_case((bench_kind)kind, bf16, bench_tokens[i]);
  bench_chain(BENCH_DECODE_BOUNDARY, 8);
  bench_chain(BENCH_DECODE_BOUNDARY, 128);
  bench_chain(BENCH_DECODE_OFF, 64);
  bench_chain(BENCH_DECODE_MIX, 256);
  bench_measure_copy("end");
  bench_measure_read("end");
  fclose(bench_csv);
  printf("wrote %s\n", bench_opt.csv_path);
  return 0;
}
