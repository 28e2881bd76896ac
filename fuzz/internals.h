/* The library's own plan reasons (SPEC 6.5), called directly: the one place that knows the
   implementation's internal names, so that a refactoring of c128.cuh touches this file only.
   Part of fuzz_c128.cu. Classes: M_RUN, M_PAD, M_SKIP. */

static int fz_reason_class(int reason) {
  return reason == C128__RUN ? M_RUN : reason == C128__PADDING ? M_PAD : M_SKIP;
}

/* The fuzzer draws today's layout and pooled rows: the kernels of no variant (c128__trait). */
static const c128__shape_of fz_today = {0, C128__LOG2_WINDOW, 0};
static const c128__trait fz_today_trait = {0, 0, 0, 0, 0, 0};

typedef struct fz_lib_decode {
  int reason;
  int64_t write_row; /* -1: the slot belongs to another rank */
  int boundary;
  int64_t read_row0, out_row;
  int buffer_len;
} fz_lib_decode;

static fz_lib_decode fz_lib_decode_reason(const c128_decode_args *a, int64_t b) {
  c128__more more;
  const c128__params p = c128__decode_params(a, &fz_today, &more);
  c128__decode_job job;
  memset(&job, 0, sizeof job);
  const int reason = c128__decode_prepare(&p, fz_today_trait, b, 0, 0, &job);
  fz_lib_decode d = {
      reason, job.write ? job.write_row.kv : -1, job.boundary, job.win.state_row0, job.win.out_row, job.win.buffer_len};
  return d;
}

typedef struct fz_lib_compress {
  int reason;
  int64_t state_row0, input_row0, out_row;
  int buffer_len;
} fz_lib_compress;

static fz_lib_compress fz_lib_compress_reason(const c128_prefill_args *a, int64_t k) {
  c128__more more;
  const c128__params p = c128__prefill_params(a, C128_PLAN_COMPRESS, &fz_today, &more);
  c128__window w;
  int32_t position = 0;
  memset(&w, 0, sizeof w);
  const int reason = c128__compress_prepare(&p, fz_today_trait, k, 0, 0, &w, &position);
  fz_lib_compress c = {reason, w.state_row0, w.input_row0, w.out_row, w.buffer_len};
  return c;
}

static int fz_lib_write_reason(const c128_prefill_args *a, int64_t k, int64_t *src, int64_t *dst) {
  c128__more more;
  const c128__params p = c128__prefill_params(a, C128_PLAN_WRITE, &fz_today, &more);
  return c128__write_prepare(&p, k, 0, src, dst);
}

static const char *fz_lib_reason_text(int reason) { return c128__reason_text(reason); }

/* Requests per decode block the host runner uses (0 = automatic), and the grouping's limit. */
#define FZ_MAX_GROUP C128_MAX_DECODE_GROUP
static int32_t fz_host_group(const c128_decode_args *a) { /* the launch's rule, with the host runner's SM count */
  return a->requests_per_block > 0 ? a->requests_per_block : c128_decode_group_size(a->batch, a->head_dim, 132);
}
static void fz_set_group(c128_decode_args *a, int32_t g) { a->requests_per_block = g; }

/* Compress windows per block (0 = automatic). */
#define FZ_MAX_PREFILL_GROUP C128_MAX_PREFILL_GROUP
static void fz_set_prefill_group(c128_prefill_args *a, int32_t g) { a->windows_per_block = g; }
