/* The library's own plan reasons (SPEC 6.5), called directly: the one place that knows the
   implementation's internal names, so that a refactoring of c128.cuh touches this file only.
   Part of fuzz_c128.cu. Classes: M_RUN, M_PAD, M_SKIP. The launch's kernel variant (today's
   layout, any layout, cache entries) is the one the arguments select (c128__variant). */

static int fz_reason_class(int reason) {
  return reason == C128__RUN ? M_RUN : reason == C128__PADDING ? M_PAD : M_SKIP;
}

typedef struct fz_lib_decode {
  int reason;                    /* -1: the arguments do not validate */
  int layout;                    /* the kernel of any layout: read_row0 is a logical row */
  int64_t write_kv, write_score; /* -1: the slot belongs to another rank */
  int boundary;
  int64_t read_row0, out_row;
  int buffer_len;
  int32_t position;
} fz_lib_decode;

static fz_lib_decode fz_lib_decode_reason(const c128_decode_args *a, int64_t b) {
  fz_lib_decode d;
  memset(&d, 0, sizeof d);
  d.reason = -1;
  c128__trait t;
  c128__shape_of shape;
  if (c128__instance_trait(a->head_dim, a->state_dtype, a->input_dtype, a->output_dtype, &t) != C128_SUCCESS ||
      c128__validate_decode(a, t, 0, &shape) != C128_SUCCESS)
    return d;
  t = c128__variant_trait(t, c128__variant(&shape, &a->entry, a->output_index));
  c128__more more;
  const c128__params p = c128__decode_params(a, &shape, &more);
  c128__decode_job job;
  memset(&job, 0, sizeof job);
  d.reason = c128__decode_prepare(&p, t, b, 0, 0, &job);
  d.layout = t.layout;
  d.write_kv = job.write ? job.write_row.kv : -1;
  d.write_score = job.write ? job.write_row.score : -1;
  d.boundary = job.boundary, d.read_row0 = job.win.state_row0, d.out_row = job.win.out_row;
  d.buffer_len = job.win.buffer_len, d.position = job.position;
  return d;
}

typedef struct fz_lib_compress {
  int reason; /* -1: the arguments do not validate */
  int layout;
  int64_t state_row0, input_row0, out_row;
  int buffer_len;
  int32_t position;
} fz_lib_compress;

static fz_lib_compress fz_lib_compress_reason(const c128_prefill_args *a, int64_t k) {
  fz_lib_compress c;
  memset(&c, 0, sizeof c);
  c.reason = -1;
  c128__trait t;
  c128__shape_of shape;
  if (c128__instance_trait(a->head_dim, a->state_dtype, a->input_dtype, a->output_dtype, &t) != C128_SUCCESS ||
      c128__validate_prefill(a, t, 0, &shape) != C128_SUCCESS)
    return c;
  t = c128__variant_trait(t, c128__variant(&shape, &a->entry, a->output_index));
  c128__more more;
  const c128__params p = c128__prefill_params(a, C128_PLAN_COMPRESS, &shape, &more);
  c128__window w;
  memset(&w, 0, sizeof w);
  int32_t position = 0;
  c.reason = c128__compress_prepare(&p, t, k, 0, 0, &w, &position);
  c.layout = t.layout;
  c.state_row0 = w.state_row0, c.input_row0 = w.input_row0, c.out_row = w.out_row, c.buffer_len = w.buffer_len;
  c.position = position;
  return c;
}

/* The write kernel's reason; *dst_kv / *dst_score the rows in each plane (-1: another rank's slot). */
static int fz_lib_write_reason(const c128_prefill_args *a, int64_t k, int64_t *src, int64_t *dst_kv,
                               int64_t *dst_score) {
  c128__trait t;
  c128__shape_of shape;
  if (c128__instance_trait(a->head_dim, a->state_dtype, a->input_dtype, a->output_dtype, &t) != C128_SUCCESS ||
      c128__validate_prefill(a, t, 0, &shape) != C128_SUCCESS)
    return -1;
  t = c128__variant_trait(t, shape.layout);
  c128__more more;
  const c128__params p = c128__prefill_params(a, C128_PLAN_WRITE, &shape, &more);
  c128__dest dst = {-1, -1, 0};
  const int reason = c128__write_target(&p, t, k, 0, src, &dst);
  *dst_kv = dst.kv, *dst_score = t.layout ? dst.score : dst.kv;
  return reason;
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
static int32_t fz_host_prefill_group(const c128_prefill_args *a) {
  return a->windows_per_block > 0 ? a->windows_per_block : c128_prefill_group_size(a->num_compress, a->head_dim, 132);
}
/* Jobs (requests, compress plans) a block of a launch of `group` takes, and (`items`) the items a
   job: a cache-entry launch whose group holds a window's splits gives each block whole windows,
   group / splits jobs with every split each (DESIGN 11.3); otherwise group jobs of one split. */
static int32_t fz_jobs_per_block(int32_t group, int32_t head_dim, int entry, int *items) {
  const int32_t splits = head_dim / C128_TILE_DIM;
  *items = entry && group >= splits ? splits : 1;
  return group / *items;
}
