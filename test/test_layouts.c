/* The kernels, the plan checker and the planners in the state layouts of DESIGN 5.9-5.11: blocks
   of 8..256 rows, one plane or two (the score plane with or without a table of its own), raw or
   biased scores, shuffled block tables through which plans name logical rows, output rows by
   index, write_all, and planning from an engine's seq_lens / query_start / pool_indices.

   The kernel cases draw one logical state (the rows of TABLE_ROWS requests of R = 2^ROW_SHIFT
   logical rows each, in the input dtype), place it in every layout (each row at the physical
   rows the test's own model of the table gives, converted to the state dtype, with ape folded in
   for biased scores) and run the same logical plans. Each run is checked against the fp64
   oracle with the state's rounding modelled as SPEC 8 says, against today's layout (bit for
   bit where the stored values are the same fp32 numbers), and the state plane by plane: exactly
   the rows the plans name changed, each to its input row as the state stores it; physical rows
   no table names are NaN and stay so. The CPU runs use the race checker (blocks forward and
   reversed); the GPU runs must also match the host runner (check_gpu_output). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "scenario.h"

enum {
  W = REF_WINDOW,
  ROW_SHIFT = 8, /* R = 256 logical rows a table row */
  TABLE_ROWS = 3,
  HIST_ROWS = 5,    /* table rows of logical state a batch draws (the hostile cases use 5) */
  SPARE_BLOCKS = 3, /* physical blocks no table names: they must stay untouched */
  GUARD = 256,      /* canary bytes around every host tensor the kernels write */
  CANARY = 0x5A
};

/* ---- host buffers with canaries --------------------------------------------------------------- */
static void *guarded_alloc(size_t bytes) {
  char *p = malloc(bytes + 2 * GUARD);
  cr_assert_not_null(p);
  memset(p, CANARY, GUARD), memset(p + GUARD + bytes, CANARY, GUARD);
  return p + GUARD;
}
static void guarded_check(const void *inside, size_t bytes, const char *what, uint64_t seed) {
  const unsigned char *p = (const unsigned char *)inside - GUARD;
  for (size_t i = 0; i < GUARD; ++i)
    cr_assert(p[i] == CANARY && p[GUARD + bytes + i] == CANARY, "%s: written outside the buffer (seed %llu)", what,
              (unsigned long long)seed);
}
static void guarded_free(void *inside) {
  if (inside) free((char *)inside - GUARD);
}

/* A value as a tensor of `dtype` stores it (round to nearest even for bf16). */
static float through(c128_dtype dtype, float v) {
  uint32_t bits = 0;
  elem_set(&bits, 0, dtype, v);
  return elem_get(&bits, 0, dtype);
}

static void shuffle(rng *r, int32_t *v, int64_t n) {
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = rng_below(r, i + 1);
    const int32_t t = v[i];
    v[i] = v[j], v[j] = t;
  }
}

/* ---- layouts and the states stored in them ---------------------------------------------------- */
typedef enum planes {
  ONE_PLANE,  /* rows of kv | score */
  TWO_PLANES, /* kv in `state`, scores in the score plane, one table for both */
  TWO_TABLES  /* the same, the score plane through a table of its own */
} planes;

typedef struct lay {
  int block_rows; /* B */
  planes planes;
  int table;  /* plans name logical rows through a shuffled block table; else physical rows */
  int biased; /* scores stored with ape added */
} lay;

static const lay TODAY = {128, ONE_PLANE, 0, 0};

static int lay_is_today(const lay *l) {
  return l->block_rows == 128 && l->planes == ONE_PLANE && !l->table && !l->biased;
}

static void lay_name(const lay *l, char *buf, size_t size) {
  static const char *pl[] = {"one plane", "two planes", "two planes, two tables"};
  snprintf(buf, size, "B %d, %s, %s, %s", l->block_rows, pl[l->planes], l->table ? "table" : "no table",
           l->biased ? "biased" : "raw");
}

/* A state in one layout: its planes (guarded), its tables, the launch's c128_state_layout. */
typedef struct store {
  lay l;
  const c128_instance_info *f;
  int64_t blocks, rows; /* state_pages, and rows of each plane */
  size_t row_bytes;     /* bytes of a row of a plane */
  char *kv, *score;     /* score: the score plane (NULL with one plane) */
  int32_t *table, *score_table;
  int64_t table_rows, stride;
  int shift; /* row_shift: R = 2^shift logical rows a table row */
  int owns_tables;
  c128_state_layout sl;
} store;

static size_t store_bytes(const store *s) { return (size_t)s->rows * s->row_bytes; }

/* An empty (NaN) state of layout l holding table_rows x 2^shift logical rows: with a table
   of `stride` columns (0: R / B), table_rows x stride blocks of a random permutation of all
   blocks (the score table another one); without, the logical rows are the first physical rows.
   Either way SPARE_BLOCKS more (today's layout: none). */
static store store_make_shaped(const c128_instance_info *f, const lay *l, rng *r, int64_t table_rows, int64_t stride,
                               int shift) {
  store s;
  memset(&s, 0, sizeof s);
  s.l = *l, s.f = f, s.owns_tables = 1, s.table_rows = table_rows, s.shift = shift;
  const int64_t logical_rows = table_rows << shift;
  const int64_t spare = lay_is_today(l) ? 0 : SPARE_BLOCKS;
  if (l->table) {
    s.stride = stride ? stride : ((int64_t)1 << shift) / l->block_rows;
    if (s.stride < 1) s.stride = 1;
    s.blocks = table_rows * s.stride + spare;
    int32_t *perm = malloc((size_t)s.blocks * sizeof *perm);
    for (int pass = 0; pass < (l->planes == TWO_TABLES ? 2 : 1); ++pass) {
      for (int64_t i = 0; i < s.blocks; ++i) perm[i] = (int32_t)i;
      shuffle(r, perm, s.blocks);
      int32_t *t = clone_bytes(perm, (size_t)table_rows * (size_t)s.stride * sizeof *t);
      *(pass ? &s.score_table : &s.table) = t;
    }
    free(perm);
  } else {
    s.blocks = logical_rows / l->block_rows + spare;
  }
  s.rows = s.blocks * l->block_rows;
  s.row_bytes = (size_t)(l->planes == ONE_PLANE ? 2 : 1) * (size_t)f->head_dim * dtype_size(f->state_dtype);
  s.kv = guarded_alloc(store_bytes(&s));
  poison(s.kv, store_bytes(&s));
  if (l->planes != ONE_PLANE) {
    s.score = guarded_alloc(store_bytes(&s));
    poison(s.score, store_bytes(&s));
  }
  s.sl.block_rows = lay_is_today(l) ? 0 : l->block_rows;
  s.sl.score_biased = l->biased;
  s.sl.score_plane = s.score;
  if (l->table) {
    s.sl.block_table = s.table, s.sl.score_block_table = s.score_table;
    s.sl.table_rows = table_rows, s.sl.table_stride = s.stride, s.sl.row_shift = shift;
  }
  return s;
}
static store store_make(const c128_instance_info *f, const lay *l, rng *r) {
  return store_make_shaped(f, l, r, TABLE_ROWS, 0, ROW_SHIFT);
}

/* The same layout and tables with a copy of the planes. */
static store store_dup(const store *s) {
  store c = *s;
  c.owns_tables = 0;
  c.kv = clone_bytes(s->kv - GUARD, store_bytes(s) + 2 * GUARD), c.kv += GUARD;
  if (s->score) c.score = clone_bytes(s->score - GUARD, store_bytes(s) + 2 * GUARD), c.score += GUARD;
  c.sl.score_plane = c.score;
  return c;
}

static void store_free(store *s) {
  guarded_free(s->kv), guarded_free(s->score);
  if (s->owns_tables) free(s->table), free(s->score_table);
}

/* The test's own model of DESIGN 5.9: the physical row of logical row L in plane `plane` (1: the
   score plane's table), or -1. */
static int64_t store_row(const store *s, int64_t L, int plane) {
  if (L < 0) return -1;
  if (!s->l.table) return L < s->rows ? L : -1;
  const int64_t row = L >> s->shift, pos = L & (((int64_t)1 << s->shift) - 1), col = pos / s->l.block_rows;
  if (row >= s->table_rows || col >= s->stride) return -1;
  const int32_t block = (plane && s->score_table ? s->score_table : s->table)[row * s->stride + col];
  if (block < 0 || block >= s->blocks) return -1;
  return (int64_t)block * s->l.block_rows + pos % s->l.block_rows;
}

/* Logical row L <- row `src_row` of src (kv | score in src_dtype) as the state stores it: each
   value converted to the state dtype; biased scores as narrow(fl32(score + ape[L mod 128])). */
static void store_put(store *s, int64_t L, const void *src, c128_dtype src_dtype, int64_t src_row, const float *ape) {
  const int D = s->f->head_dim;
  const c128_dtype buf = s->f->state_dtype;
  const int64_t kv_row = store_row(s, L, 0), score_row = store_row(s, L, 1);
  cr_assert(kv_row >= 0 && score_row >= 0, "logical row %lld is not in the state", (long long)L);
  const size_t in0 = (size_t)src_row * 2 * (size_t)D;
  for (int c = 0; c < 2 * D; ++c) {
    float v = elem_get(src, in0 + (size_t)c, src_dtype);
    if (c >= D && s->l.biased) v = v + ape[(L % W) * D + (c - D)];
    if (s->l.planes == ONE_PLANE) elem_set(s->kv, (size_t)kv_row * 2 * (size_t)D + (size_t)c, buf, v);
    else if (c < D) elem_set(s->kv, (size_t)kv_row * (size_t)D + (size_t)c, buf, v);
    else elem_set(s->score, (size_t)score_row * (size_t)D + (size_t)(c - D), buf, v);
  }
}

/* Every logical row the state holds <- the same row of hist. */
static void store_fill(store *s, const void *hist, const float *ape) {
  for (int64_t L = 0; L < s->table_rows << s->shift; ++L)
    if (store_row(s, L, 0) >= 0 && store_row(s, L, 1) >= 0) store_put(s, L, hist, s->f->input_dtype, L, ape);
}

static void store_expect_equal(const store *got, const store *want, const char *what, uint64_t seed) {
  char name[160];
  snprintf(name, sizeof name, "%s (kv%s plane)", what, got->score ? "" : " | score");
  check_rows_equal(got->kv, want->kv, (size_t)got->rows, got->row_bytes, name, seed);
  guarded_check(got->kv, store_bytes(got), name, seed);
  if (got->score) {
    snprintf(name, sizeof name, "%s (score plane)", what);
    check_rows_equal(got->score, want->score, (size_t)got->rows, got->row_bytes, name, seed);
    guarded_check(got->score, store_bytes(got), name, seed);
  }
}

/* ---- the oracle --------------------------------------------------------------------------------- */
/* The fp64 oracle of a window whose rows < buffer_len come from logical page `page` of the state
   (hist as it was before the batch) and the others from input rows input_row0 + j. A state row is
   its hist row rounded to the state dtype; with biased scores its score is the stored sum,
   bf16(fl32(score + ape)) or fl32(score + ape), and ape is not added again (the window's own ape
   row is zero there); rows from the input are used as they are, with ape. */
static void oracle(const c128_instance_info *f, int biased, const void *hist, int64_t page, int buffer_len,
                   const void *input, int64_t input_row0, const float *ape, double *ref) {
  const int D = f->head_dim;
  float *rows = malloc((size_t)W * 2 * (size_t)D * sizeof(float));
  float *ape_seen = clone_bytes(ape, (size_t)W * (size_t)D * sizeof(float));
  const float *ptr[REF_WINDOW];
  for (int j = 0; j < W; ++j) {
    float *dst = rows + (size_t)j * 2 * (size_t)D;
    ptr[j] = dst;
    if (j >= buffer_len) {
      row_widen(input, (size_t)(input_row0 + j), D, f->input_dtype, dst);
      continue;
    }
    row_widen(hist, (size_t)(page * W + j), D, f->input_dtype, dst);
    for (int c = 0; c < D; ++c) dst[c] = through(f->state_dtype, dst[c]);
    for (int c = 0; c < D; ++c) {
      if (biased) {
        const float sum = dst[D + c] + ape[j * D + c]; /* the fp32 sum the state stores */
        dst[D + c] = through(f->state_dtype, sum);
        ape_seen[j * D + c] = 0.0f;
      } else {
        dst[D + c] = through(f->state_dtype, dst[D + c]);
      }
    }
  }
  ref_window(D, ptr, ape_seen, ref);
  free(rows), free(ape_seen);
}

/* ---- one batch of logical plans, run in many layouts ------------------------------------------ */
enum { DECODE_BATCH = 7, NUM_EVENTS = 5, TAIL = 37, NUM_WRITES = TAIL + 3 + 11, INDEX_SPARE = 3 };
enum { MAX_DECODE = 16, MAX_EVENTS = 16, MAX_WRITES = 64 }; /* what a batch holds (the hostile ones are larger) */

/* A window the batch compresses: its output row, and where its rows come from. */
typedef struct win {
  int64_t out_row, page, input_row0;
  int buffer_len;
  int64_t plan; /* its plan (decode: its request) */
  int skipped;  /* its output index is outside the output rows: the plan does not run */
} win;

typedef struct batch {
  const instance_entry *e;
  const c128_instance_info *f;
  backend be;
  rng r;
  int decode;
  void *hist, *input; /* the logical state before the batch, and the new rows (input dtype) */
  float *ape;
  int64_t input_rows, out_rows;
  c128_decode_plan dp[MAX_DECODE];
  c128_compress_plan cp[MAX_EVENTS];
  c128_write_plan wp[MAX_WRITES];
  int64_t nd, nc, nw;
  int64_t *index; /* output_index, or NULL */
  win wins[MAX_DECODE];
  int nwins;
  void *today_out; /* today's layout's output: what every layout must reproduce */
  int64_t refused; /* the plan the checker must name (an output index out of range), or -1 */
  int guarded;     /* GPU: every tensor in a device buffer with canaries (dev_guarded) */
  double max_kv;   /* bounds |kv| of every window (check_gpu_output) */
  size_t out_row;  /* bytes of an output row */
} batch;

/* max_kv of the batch's rows. */
static void batch_bound(batch *b) {
  const int D = b->f->head_dim;
  b->max_kv = fmax(max_abs_kv(b->hist, (size_t)HIST_ROWS << ROW_SHIFT, D, b->f->input_dtype),
                   max_abs_kv(b->input, (size_t)b->input_rows, D, b->f->input_dtype));
}

/* Logical pages 2t, 2t + 1 are table row t's. Decode: boundaries on pages 1, 4, 3, 0, new rows
   off a boundary on pages 2 and 5, a padding row. Prefill: windows of buffer_len 0, 1, 64, 120,
   127 (pages -, 5, 0, 3, 1), a tail of 37 rows persisted on page 2, three rows on page 1 that the
   last window still reads (the write kernel runs after the compress kernel), eleven on page 4.
   index: output rows a random permutation of out_rows = windows + INDEX_SPARE rows. */
static batch batch_make(const instance_entry *e, backend be, int decode, float scale, int with_index) {
  batch b;
  memset(&b, 0, sizeof b);
  b.e = e, b.f = e, b.be = be, b.r = rng_fresh(), b.decode = decode, b.refused = -1;
  const c128_instance_info *f = e;
  const int D = f->head_dim;
  const int64_t logical_rows = (int64_t)HIST_ROWS << ROW_SHIFT;
  b.hist = rows_alloc((size_t)logical_rows, D, f->input_dtype);
  rows_fill(b.hist, (size_t)logical_rows, D, f->input_dtype, &b.r, scale);
  b.ape = ape_make(D, &b.r);
  b.out_row = (size_t)D * dtype_size(f->output_dtype);
  if (decode) {
    static const c128_decode_plan plans[DECODE_BATCH] = {
        {256, 1 * W + 127, 0, 1}, {41, 2 * W + 40, 2, 2},   {0, -1, -1, -1},         {128, 4 * W + 127, 4, 4},
        {129, 5 * W, 4, 5},       {256, 3 * W + 127, 2, 3}, {128, 0 * W + 127, 0, 0}};
    memcpy(b.dp, plans, sizeof plans);
    b.nd = b.input_rows = DECODE_BATCH;
    for (int k = 0; k < DECODE_BATCH; ++k)
      if (plans[k].seq_len && plans[k].write_loc % W == W - 1)
        b.wins[b.nwins++] = (win){k, plans[k].read_page_1, k - (W - 1), W - 1, k, 0};
  } else {
    static const int buffer_len[NUM_EVENTS] = {0, 1, 64, 120, 127};
    static const int32_t page[NUM_EVENTS] = {-1, 5, 0, 3, 1};
    int64_t first_row[NUM_EVENTS], rows = 0;
    for (int k = 0; k < NUM_EVENTS; ++k) {
      first_row[k] = rows, rows += W - buffer_len[k];
      b.cp[k] = (c128_compress_plan){(uint32_t)(W * (k + 2)), (uint16_t)(rows - 1), (uint16_t)buffer_len[k], page[k],
                                     page[k]};
      b.wins[b.nwins++] = (win){k, page[k], first_row[k] - buffer_len[k], buffer_len[k], k, 0};
    }
    int n = 0;
    for (int i = 0; i < TAIL; ++i) b.wp[n++] = (c128_write_plan){(uint32_t)(rows + i), 2 * W + i};
    for (int i = 0; i < 3; ++i) b.wp[n++] = (c128_write_plan){(uint32_t)(first_row[1] + i), 1 * W + i};
    for (int i = 0; i < 10; ++i) b.wp[n++] = (c128_write_plan){(uint32_t)(first_row[0] + i), 4 * W + 60 + i};
    b.wp[n++] = (c128_write_plan){(uint32_t)(first_row[0] + W - 1), 4 * W + W - 1};
    cr_assert_eq(n, NUM_WRITES);
    b.nc = NUM_EVENTS, b.nw = NUM_WRITES, b.input_rows = rows + TAIL;
  }
  b.input = rows_alloc((size_t)b.input_rows, D, f->input_dtype);
  rows_fill(b.input, (size_t)b.input_rows, D, f->input_dtype, &b.r, scale);
  b.out_rows = decode ? b.nd : b.nc;
  if (with_index) { /* windows to a permutation of the rows; the other entries hold anything */
    b.out_rows += INDEX_SPARE;
    int32_t *perm = malloc((size_t)b.out_rows * sizeof *perm);
    for (int64_t i = 0; i < b.out_rows; ++i) perm[i] = (int32_t)i;
    shuffle(&b.r, perm, b.out_rows);
    b.index = malloc((size_t)b.input_rows * sizeof *b.index);
    for (int64_t i = 0; i < b.input_rows; ++i) b.index[i] = (int64_t)rng_u64(&b.r);
    for (int k = 0; k < b.nwins; ++k) {
      const int64_t r = decode ? b.wins[k].plan : b.cp[b.wins[k].plan].ragged_id;
      b.index[r] = perm[k], b.wins[k].out_row = perm[k];
    }
    free(perm);
  }
  batch_bound(&b);
  return b;
}

static void batch_free(batch *b) { free(b->hist), free(b->input), free(b->ape), free(b->index), free(b->today_out); }

static c128_decode_args decode_args_of(const batch *b, const store *s, void *out, int group) {
  c128_decode_args a = {0};
  a.head_dim = b->f->head_dim;
  a.state_dtype = b->f->state_dtype, a.input_dtype = b->f->input_dtype, a.output_dtype = b->f->output_dtype;
  a.state = s->kv, a.state_pages = s->blocks, a.state_layout = s->sl;
  a.input = b->input, a.ape = b->ape, a.output = out, a.output_rows = b->out_rows;
  a.plans = b->dp, a.batch = b->nd, a.requests_per_block = group, a.output_index = b->index;
  return a;
}

static c128_prefill_args prefill_args_of(const batch *b, const store *s, void *out, int group) {
  c128_prefill_args a = {0};
  a.head_dim = b->f->head_dim;
  a.state_dtype = b->f->state_dtype, a.input_dtype = b->f->input_dtype, a.output_dtype = b->f->output_dtype;
  a.state = s->kv, a.state_pages = s->blocks, a.state_layout = s->sl;
  a.input = b->input, a.input_rows = b->input_rows, a.ape = b->ape, a.output = out, a.output_rows = b->out_rows;
  a.compress_plans = b->cp, a.num_compress = b->nc, a.write_plans = b->wp, a.num_write = b->nw;
  a.windows_per_block = group, a.output_index = b->index;
  return a;
}

static c128_status launch_on(const batch *b, backend be, store *s, void *out, int reverse, int group) {
  if (b->decode) {
    const c128_decode_args a = decode_args_of(b, s, out, group);
    return run_decode(b->e, be, &a, reverse);
  }
  const c128_prefill_args a = prefill_args_of(b, s, out, group);
  return run_prefill(b->e, be, &a, reverse);
}

/* The batch on the GPU with every tensor, table and plan array in a buffer with canaries: a
   kernel that wrote outside one fails the test (dev_guarded_fetch). */
static dev_guarded guarded_up(const void *host, size_t bytes) { return dev_guarded_make(host, bytes ? bytes : 16); }
enum { G_STATE, G_SCORE, G_OUT, G_TABLE, G_SCORE_TABLE, G_INPUT, G_APE, G_INDEX, G_PLANS, G_WRITES, G_COUNT };
static c128_status launch_guarded(const batch *b, store *s, void *out, int group) {
  const c128_instance_info *f = b->f;
  const size_t sb = store_bytes(s), ob = (size_t)b->out_rows * b->out_row;
  const size_t tb = (size_t)s->table_rows * (size_t)s->stride * sizeof(int32_t);
  dev_guarded g[G_COUNT];
  g[G_STATE] = guarded_up(s->kv, sb);
  g[G_SCORE] = guarded_up(s->score, s->score ? sb : 0);
  g[G_OUT] = guarded_up(out, ob);
  g[G_TABLE] = guarded_up(s->table, s->table ? tb : 0);
  g[G_SCORE_TABLE] = guarded_up(s->score_table, s->score_table ? tb : 0);
  g[G_INPUT] = guarded_up(b->input, (size_t)b->input_rows * (size_t)f->row_elems * dtype_size(f->input_dtype));
  g[G_APE] = guarded_up(b->ape, (size_t)W * (size_t)f->head_dim * sizeof(float));
  g[G_INDEX] = guarded_up(b->index, b->index ? (size_t)b->input_rows * sizeof(int64_t) : 0);
  g[G_PLANS] = b->decode ? guarded_up(b->dp, sizeof b->dp) : guarded_up(b->cp, sizeof b->cp);
  g[G_WRITES] = guarded_up(b->wp, sizeof b->wp);
  c128_state_layout sl = s->sl;
  if (s->score) sl.score_plane = dev_guarded_inside(&g[G_SCORE]);
  if (s->table) sl.block_table = dev_guarded_inside(&g[G_TABLE]);
  if (s->score_table) sl.score_block_table = dev_guarded_inside(&g[G_SCORE_TABLE]);
  const int64_t *index = b->index ? dev_guarded_inside(&g[G_INDEX]) : NULL;
  c128_status st;
  if (b->decode) {
    c128_decode_args a = decode_args_of(b, s, dev_guarded_inside(&g[G_OUT]), group);
    a.state = dev_guarded_inside(&g[G_STATE]), a.state_layout = sl, a.input = dev_guarded_inside(&g[G_INPUT]);
    a.ape = dev_guarded_inside(&g[G_APE]), a.output_index = index, a.plans = dev_guarded_inside(&g[G_PLANS]);
    st = b->e->decode(&a, 0);
  } else {
    c128_prefill_args a = prefill_args_of(b, s, dev_guarded_inside(&g[G_OUT]), group);
    a.state = dev_guarded_inside(&g[G_STATE]), a.state_layout = sl, a.input = dev_guarded_inside(&g[G_INPUT]);
    a.ape = dev_guarded_inside(&g[G_APE]), a.output_index = index;
    a.compress_plans = dev_guarded_inside(&g[G_PLANS]), a.write_plans = dev_guarded_inside(&g[G_WRITES]);
    st = b->e->prefill(&a, 0);
  }
  CUDA_OK(cudaDeviceSynchronize());
  static const char *names[G_COUNT] = {"state", "score plane", "output",       "block table", "score table",
                                       "input", "ape",         "output index", "plans",       "write plans"};
  for (int i = 0; i < G_COUNT; ++i) {
    const char *inside = dev_guarded_fetch(&g[i], names[i], b->r.seed);
    if (i == G_STATE) memcpy(s->kv, inside, sb);
    if (i == G_SCORE && s->score) memcpy(s->score, inside, sb);
    if (i == G_OUT) memcpy(out, inside, ob);
    dev_guarded_free(&g[i]);
  }
  return st;
}

/* Runs the batch on its backend; a GPU run is repeated on the host runner from the same state,
   which must leave the same state bits and outputs within check_gpu_output's bound. */
static c128_status run_batch(const batch *b, store *s, void *out, int reverse, int group, const char *what) {
  store cpu;
  void *cpu_out = NULL;
  const size_t out_bytes = (size_t)b->out_rows * b->out_row;
  const int gpu = b->be == BACKEND_GPU; /* read once: the calls below could change *b for all the analyzer knows */
  if (gpu) cpu = store_dup(s), cpu_out = clone_bytes(out, out_bytes);
  const c128_status st =
      gpu && b->guarded ? launch_guarded(b, s, out, group) : launch_on(b, b->be, s, out, reverse, group);
  if (gpu) {
    cr_assert_eq(launch_on(b, BACKEND_CPU, &cpu, cpu_out, 0, group), st, "%s: GPU %s", what, c128_status_string(st));
    char name[300];
    snprintf(name, sizeof name, "%s: GPU vs host runner state", what);
    store_expect_equal(s, &cpu, name, b->r.seed);
    snprintf(name, sizeof name, "%s: GPU vs host runner output", what);
    check_gpu_output(out, cpu_out, (size_t)b->out_rows, b->f->output_dtype, b->f->head_dim, b->max_kv, name, b->r.seed);
    store_free(&cpu), free(cpu_out);
  }
  guarded_check(out, out_bytes, what, b->r.seed);
  return st;
}

/* The batch in layout l: the checker accepts it; the state changes exactly at the written rows
   (through the table, in each plane); each window matches the oracle and, where the stored values
   are today's fp32 numbers (raw scores, or an f32 state), today's layout bit for bit; output rows
   no window names stay poisoned. Today's layout, run first, keeps its output for that. */
static void layout_case(batch *b, const lay *l, int reverse, int group) {
  const c128_instance_info *f = b->f;
  const int D = f->head_dim;
  char name[120], what[200];
  lay_name(l, name, sizeof name);
  store s = store_make(f, l, &b->r);
  store_fill(&s, b->hist, b->ape);
  store want = store_dup(&s);
  if (b->decode) {
    for (int64_t k = 0; k < b->nd; ++k) {
      int runs = b->dp[k].seq_len && b->dp[k].write_loc >= 0; /* a skipped window's plan writes nothing (DESIGN 6.5) */
      for (int w = 0; w < b->nwins; ++w) runs &= !(b->wins[w].plan == k && b->wins[w].skipped);
      if (runs) store_put(&want, b->dp[k].write_loc, b->input, f->input_dtype, k, b->ape);
    }
  } else {
    for (int64_t k = 0; k < b->nw; ++k)
      store_put(&want, b->wp[k].write_loc, b->input, f->input_dtype, b->wp[k].ragged_id, b->ape);
  }
  const size_t out_bytes = (size_t)b->out_rows * b->out_row;
  char *out = guarded_alloc(out_bytes);
  poison(out, out_bytes);
  char msg[200] = "";
  c128_plan_report rep = {0, 0, msg, sizeof msg};
  const c128_decode_args da = decode_args_of(b, &s, out, group);
  const c128_prefill_args pa = prefill_args_of(b, &s, out, group);
  const c128_status cst = b->decode ? c128_check_decode_plans(&da, &rep) : c128_check_prefill_plans(&pa, &rep);
  if (b->refused < 0) {
    cr_assert_eq(cst, C128_SUCCESS, "%s: the checker refuses the batch: %s %s (seed %llu)", name,
                 c128_status_string(cst), msg, (unsigned long long)b->r.seed);
  } else {
    cr_assert(cst == C128_ERROR_INVALID_PLAN && rep.index == b->refused && strstr(msg, "output row"),
              "%s: checker %s, plan %lld (%s); expected plan %lld's output row (seed %llu)", name,
              c128_status_string(cst), (long long)rep.index, msg, (long long)b->refused, (unsigned long long)b->r.seed);
  }

  snprintf(what, sizeof what, "%s %s, group %d", b->decode ? "decode" : "prefill", name, group);
  const c128_status st = run_batch(b, &s, out, reverse, group, what);
  cr_assert_eq(st, C128_SUCCESS, "%s: %s", what, c128_status_string(st));
  store_expect_equal(&s, &want, what, b->r.seed);

  double *ref = malloc((size_t)D * sizeof *ref);
  char *named = calloc((size_t)b->out_rows, 1);
  for (int k = 0; k < b->nwins; ++k) {
    const win *w = &b->wins[k];
    if (w->skipped) continue;
    named[w->out_row] = 1;
    oracle(f, l->biased, b->hist, w->page, w->buffer_len, b->input, w->input_row0, b->ape, ref);
    snprintf(what, sizeof what, "%s %s: window %d (buffer_len %d) vs the oracle", b->decode ? "decode" : "prefill",
             name, k, w->buffer_len);
    check_output_row(out, (size_t)w->out_row, f->output_dtype, ref, D, what, b->r.seed);
    if (b->today_out && (!l->biased || f->state_dtype == C128_F32)) {
      snprintf(what, sizeof what, "%s %s: window %d vs today's layout", b->decode ? "decode" : "prefill", name, k);
      check_rows_equal(out + (size_t)w->out_row * b->out_row, (char *)b->today_out + (size_t)w->out_row * b->out_row, 1,
                       b->out_row, what, b->r.seed);
    }
  }
  char *poisoned = malloc(b->out_row);
  poison(poisoned, b->out_row);
  for (int64_t row = 0; row < b->out_rows; ++row)
    if (!named[row]) {
      snprintf(what, sizeof what, "%s %s: output row %lld (no window's)", b->decode ? "decode" : "prefill", name,
               (long long)row);
      check_rows_equal(out + (size_t)row * b->out_row, poisoned, 1, b->out_row, what, b->r.seed);
    }
  if (lay_is_today(l) && !b->today_out) b->today_out = clone_bytes(out, out_bytes);
  free(ref), free(named), free(poisoned), guarded_free(out);
  store_free(&s), store_free(&want);
}

static const int32_t GROUPS[] = {0, 1, 4, 32};

/* Today's layout first (the reference), then each of n layouts, blocks reversed every other run
   on the CPU, the groups in turn. */
static void layouts_run(const instance_entry *e, backend be, int decode, float scale, int with_index, const lay *ls,
                        int n) {
  require_backend(be);
  batch b = batch_make(e, be, decode, scale, with_index);
  layout_case(&b, &TODAY, 0, 0);
  for (int i = 0; i < n; ++i) layout_case(&b, &ls[i], be == BACKEND_CPU && i % 2 == 1, GROUPS[i % 4]);
  batch_free(&b);
}

/* Every instance, two layouts: vLLM's (B = 8, biased) with a score plane of its own table, and B =
   256 through a table with raw scores (every_layout below has the others, for three instances). */
static const lay INSTANCE_LAYOUTS[] = {{8, TWO_TABLES, 1, 1}, {256, ONE_PLANE, 1, 0}};
static void instance_layouts(const instance_entry *e, backend be) {
  const int n = (int)(sizeof INSTANCE_LAYOUTS / sizeof INSTANCE_LAYOUTS[0]);
  layouts_run(e, be, 1, 60.0f, 0, INSTANCE_LAYOUTS, n);
  layouts_run(e, be, 0, 1.0f, 1, INSTANCE_LAYOUTS, n);
}
#define INSTANCE_TESTS(name, D, state, input, output)                                         \
  Test(cpu, layout_##name) { instance_layouts(instance(C128_INSTANCE_##name), BACKEND_CPU); } \
  Test(gpu, layout_##name) { instance_layouts(instance(C128_INSTANCE_##name), BACKEND_GPU); }
C128_INSTANCES(INSTANCE_TESTS)

/* Every layout of one block size: one plane or two, with a table or without, the score plane's own
   table, raw and biased: 10 layouts, decode (scores ~60, output rows by index) and prefill (randn). */
static void every_layout(const instance_entry *e, backend be, int block_rows) {
  lay ls[10];
  int n = 0;
  for (int biased = 0; biased < 2; ++biased) {
    ls[n++] = (lay){block_rows, ONE_PLANE, 0, biased};
    ls[n++] = (lay){block_rows, ONE_PLANE, 1, biased};
    ls[n++] = (lay){block_rows, TWO_PLANES, 0, biased};
    ls[n++] = (lay){block_rows, TWO_PLANES, 1, biased};
    ls[n++] = (lay){block_rows, TWO_TABLES, 1, biased};
  }
  layouts_run(e, be, 1, 60.0f, 1, ls, n);
  layouts_run(e, be, 0, 1.0f, 0, ls, n);
}
#define EVERY_LAYOUT(name, B)                                                                        \
  Test(cpu, layouts_##name##_b##B) { every_layout(instance(C128_INSTANCE_##name), BACKEND_CPU, B); } \
  Test(gpu, layouts_##name##_b##B) { every_layout(instance(C128_INSTANCE_##name), BACKEND_GPU, B); }
#define EVERY_BLOCK(name) \
  EVERY_LAYOUT(name, 8)   \
  EVERY_LAYOUT(name, 16)  \
  EVERY_LAYOUT(name, 32)  \
  EVERY_LAYOUT(name, 64)  \
  EVERY_LAYOUT(name, 128) \
  EVERY_LAYOUT(name, 256)
EVERY_BLOCK(h512_f32_f32_f32)
EVERY_BLOCK(h512_bf16_f32_f32)
EVERY_BLOCK(h128_bf16_bf16_bf16)

/* ---- output rows by index (DESIGN 5.10) ------------------------------------------------------- */
/* Windows go to a random permutation of the output rows; rows no window names stay untouched. A
   window whose index is past the output rows, and one whose index is negative, are skipped (the
   plan runs nowhere: a decode plan then persists nothing either, as any skipped plan, DESIGN
   6.5), and the checker names the first of them. In today's layout (the index alone selects the
   kernels of any layout) and through a table. */
static void index_case(const instance_entry *e, backend be, int decode, const lay *l) {
  require_backend(be);
  batch b = batch_make(e, be, decode, 1.0f, 1);
  win *w1 = &b.wins[1], *w3 = &b.wins[3];
  b.index[decode ? w1->plan : b.cp[w1->plan].ragged_id] = b.out_rows, w1->skipped = 1;
  b.index[decode ? w3->plan : b.cp[w3->plan].ragged_id] = -1, w3->skipped = 1;
  b.refused = w1->plan;
  layout_case(&b, l, be == BACKEND_CPU, 3);
  batch_free(&b);
}
static void index_cases(const instance_entry *e, backend be) {
  const lay table = {16, TWO_TABLES, 1, 1};
  for (int decode = 0; decode < 2; ++decode) index_case(e, be, decode, &TODAY), index_case(e, be, decode, &table);
}
Test(cpu, layout_output_index) {
  index_cases(instance(C128_INSTANCE_h256_f32_bf16_bf16), BACKEND_CPU);
  index_cases(instance(C128_INSTANCE_h128_bf16_f32_f32), BACKEND_CPU);
}
Test(gpu, layout_output_index) {
  index_cases(instance(C128_INSTANCE_h256_f32_bf16_bf16), BACKEND_GPU);
  index_cases(instance(C128_INSTANCE_h128_bf16_f32_f32), BACKEND_GPU);
}

/* Two windows of one launch with one output index: the checker names the later one, in either
   kind of launch and layout. */
Test(cpu, layout_checker_refuses_two_windows_one_index) {
  const instance_entry *e = instance(C128_INSTANCE_h128_f32_f32_f32);
  for (int decode = 0; decode < 2; ++decode)
    for (int table = 0; table < 2; ++table) {
      batch b = batch_make(e, BACKEND_CPU, decode, 1.0f, 1);
      rng r = b.r;
      const lay l = {table ? 8 : 128, ONE_PLANE, table, 0};
      store s = store_make(e, &l, &r);
      const int64_t row0 = decode ? b.wins[0].plan : b.cp[b.wins[0].plan].ragged_id;
      const int64_t row2 = decode ? b.wins[2].plan : b.cp[b.wins[2].plan].ragged_id;
      b.index[row2] = b.index[row0];
      char msg[200] = "";
      c128_plan_report rep = {0, 0, msg, sizeof msg};
      const c128_decode_args da = decode_args_of(&b, &s, NULL, 0);
      const c128_prefill_args pa = prefill_args_of(&b, &s, NULL, 0);
      const c128_status st = decode ? c128_check_decode_plans(&da, &rep) : c128_check_prefill_plans(&pa, &rep);
      char want[80];
      snprintf(want, sizeof want, "writes output row %lld, as plan %lld does", (long long)b.index[row0],
               (long long)b.wins[0].plan);
      cr_assert(st == C128_ERROR_INVALID_PLAN && rep.index == b.wins[2].plan && strstr(msg, want),
                "decode %d table %d: %s, plan %lld: %s (want plan %lld: %s)", decode, table, c128_status_string(st),
                (long long)rep.index, msg, (long long)b.wins[2].plan, want);
      store_free(&s), batch_free(&b);
    }
}

/* ---- hostile tables and plans (DESIGN 6.5 through a table) ------------------------------------- */
/* A state of HOSTILE_ROWS table rows whose tables cover positions 0..191 of each (R = 256: the
   columns of positions 192..255 are past the stride) and hold bad entries: the block of row 0
   position 48 is -1, of row 1 position 80 is state_pages, of row 3 position 176 INT32_MAX, and
   the score plane's block of row 2 position 0 (the kv table's with one plane) -5. For B = 8 and
   16 the plans below meet each exactly as the comments say. */
enum { HOSTILE_ROWS = HIST_ROWS, HOSTILE_POSITIONS = 192 };

static store hostile_store(const c128_instance_info *f, const lay *l, rng *r) {
  store s = store_make_shaped(f, l, r, HOSTILE_ROWS, HOSTILE_POSITIONS / l->block_rows, ROW_SHIFT);
  const int64_t B = l->block_rows;
  s.table[0 * s.stride + 48 / B] = -1;
  s.table[1 * s.stride + 80 / B] = (int32_t)s.blocks;
  s.table[3 * s.stride + 176 / B] = INT32_MAX;
  (s.score_table ? s.score_table : s.table)[2 * s.stride + 0] = -5;
  return s;
}

/* The batch with every plan but `keep` (and the good ones) made padding or a sentinel. */
static c128_status check_only(const batch *b, const store *s, const int *good, int ngood, int64_t keep,
                              c128_plan_kind kind, c128_plan_report *rep) {
  batch c = *b;
  const c128_compress_plan no_compress = C128_INVALID_COMPRESS_PLAN;
  const c128_write_plan no_write = C128_INVALID_WRITE_PLAN;
  for (int64_t k = 0; k < (b->decode ? b->nd : b->nc); ++k) {
    int ok = k == keep && kind != C128_PLAN_WRITE;
    for (int i = 0; i < ngood; ++i) ok |= good[i] == k;
    if (!ok && b->decode) c.dp[k] = (c128_decode_plan){0, -1, -1, -1};
    if (!ok && !b->decode) c.cp[k] = no_compress;
  }
  if (!b->decode)
    for (int64_t k = 0; k < b->nw; ++k)
      if (!(kind == C128_PLAN_WRITE && k == keep)) c.wp[k] = no_write;
  const c128_decode_args da = decode_args_of(&c, s, NULL, 0);
  const c128_prefill_args pa = prefill_args_of(&c, s, NULL, 0);
  return b->decode ? c128_check_decode_plans(&da, rep) : c128_check_prefill_plans(&pa, rep);
}

static void expect_named(c128_status st, const c128_plan_report *rep, c128_plan_kind kind, int64_t index,
                         const char *text, const char *what, uint64_t seed) {
  cr_assert(
      st == C128_ERROR_INVALID_PLAN && rep->kind == kind && rep->index == index && strstr(rep->message, text) != NULL,
      "%s: checker %s names %d plan %lld (%s); expected %d plan %lld, '%s' (seed %llu)", what, c128_status_string(st),
      (int)rep->kind, (long long)rep->index, rep->message, (int)kind, (long long)index, text, (unsigned long long)seed);
}

/* New input rows for a batch of `rows` (its plans rewritten by the caller). */
static void batch_input(batch *b, int64_t rows) {
  free(b->input);
  b->input_rows = rows;
  b->input = rows_alloc((size_t)rows, b->f->head_dim, b->f->input_dtype);
  rows_fill(b->input, (size_t)rows, b->f->head_dim, b->f->input_dtype, &b->r, 1.0f);
  batch_bound(b);
}

/* Runs a hostile batch in layout l (forward and reversed on the CPU): the checker names the
   first bad plan of the batch and, with the other bad ones padded out, each bad one with `why`;
   only the plans in `good` take effect (the rest write nothing, state or output); every good
   window matches the oracle. */
static void hostile_run(batch *b, const lay *l, const int *good, int ngood, const char *const *why,
                        const c128_plan_kind *kind, int64_t nplans) {
  const c128_instance_info *f = b->f;
  char name[120], what[240];
  lay_name(l, name, sizeof name);
  store s = hostile_store(f, l, &b->r);
  store_fill(&s, b->hist, b->ape);
  store want = store_dup(&s);
  for (int i = 0; i < ngood; ++i) {
    const int k = good[i];
    if (kind[k] == C128_PLAN_DECODE) store_put(&want, b->dp[k].write_loc, b->input, f->input_dtype, k, b->ape);
    if (kind[k] == C128_PLAN_WRITE)
      store_put(&want, b->wp[k - b->nc].write_loc, b->input, f->input_dtype, b->wp[k - b->nc].ragged_id, b->ape);
  }
  /* the checker: the first bad plan, then each alone among the good ones */
  char msg[200] = "";
  c128_plan_report rep = {0, 0, msg, sizeof msg};
  int64_t first = -1;
  for (int64_t k = 0; k < nplans && first < 0; ++k)
    if (why[k]) first = k;
  cr_assert(first >= 0, "%s: a hostile batch without a bad plan", name);
  const c128_decode_args da = decode_args_of(b, &s, NULL, 0);
  const c128_prefill_args pa = prefill_args_of(b, &s, NULL, 0);
  c128_status st = b->decode ? c128_check_decode_plans(&da, &rep) : c128_check_prefill_plans(&pa, &rep);
  snprintf(what, sizeof what, "%s: the whole batch", name);
  expect_named(st, &rep, kind[first], kind[first] == C128_PLAN_WRITE ? first - b->nc : first, why[first], what,
               b->r.seed);
  int goods[MAX_EVENTS];
  int ng = 0;
  for (int i = 0; i < ngood; ++i)
    if (kind[good[i]] != C128_PLAN_WRITE) goods[ng++] = good[i];
  for (int64_t k = 0; k < nplans; ++k) {
    if (!why[k]) continue;
    const int64_t index = kind[k] == C128_PLAN_WRITE ? k - b->nc : k;
    st = check_only(b, &s, goods, ng, index, kind[k], &rep);
    snprintf(what, sizeof what, "%s: %s plan %lld alone", name, kind[k] == C128_PLAN_WRITE ? "write" : "its",
             (long long)index);
    expect_named(st, &rep, kind[k], index, why[k], what, b->r.seed);
  }
  const size_t out_bytes = (size_t)b->out_rows * b->out_row;
  char *out = guarded_alloc(out_bytes), *poisoned = malloc(b->out_row);
  poison(poisoned, b->out_row);
  double *ref = malloc((size_t)f->head_dim * sizeof *ref);
  for (int reverse = 0; reverse < (b->be == BACKEND_CPU ? 2 : 1); ++reverse) {
    store run = store_dup(&s);
    poison(out, out_bytes);
    snprintf(what, sizeof what, "hostile %s %s%s", b->decode ? "decode" : "prefill", name, reverse ? ", reversed" : "");
    st = run_batch(b, &run, out, reverse, reverse ? 3 : 0, what);
    cr_assert_eq(st, C128_SUCCESS, "%s: %s", what, c128_status_string(st));
    store_expect_equal(&run, &want, what, b->r.seed);
    char *named = calloc((size_t)b->out_rows, 1);
    for (int k = 0; k < b->nwins; ++k) {
      const win *w = &b->wins[k];
      named[w->out_row] = 1;
      oracle(f, l->biased, b->hist, w->page, w->buffer_len, b->input, w->input_row0, b->ape, ref);
      check_output_row(out, (size_t)w->out_row, f->output_dtype, ref, f->head_dim, what, b->r.seed);
    }
    for (int64_t row = 0; row < b->out_rows; ++row)
      if (!named[row]) check_rows_equal(out + (size_t)row * b->out_row, poisoned, 1, b->out_row, what, b->r.seed);
    free(named), store_free(&run);
  }
  guarded_free(out), free(poisoned), free(ref), store_free(&s), store_free(&want);
}

/* Decode: a boundary on page 6 and new rows on pages 8 and 4 run; every other plan meets a bad
   entry, a column past the stride, a row past the table or a negative page, and is skipped whole. */
static void hostile_decode(const instance_entry *e, backend be, const lay *l) {
  require_backend(be);
  batch b = batch_make(e, be, 1, 1.0f, 0);
  b.guarded = 1;
  static const c128_decode_plan plans[] = {
      {128, 6 * W + 127, 6, 6},          /* runs */
      {51, 0 * W + 50, 0, 0},            /* writes into row 0's missing block */
      {128, 0 * W + 127, 0, 0},          /* its window holds row 0's missing block */
      {6, 8 * W + 5, 8, 8},              /* runs */
      {199, 3 * W + 70, 2, 3},           /* row 1 position 198: past the stride */
      {4, (5 << ROW_SHIFT) + 3, 10, 10}, /* table row 5 of 5 */
      {128, 4 * W + 127, 4, 4},          /* its window's first scores are in no block */
      {86, 2 * W + 85, 2, 2},            /* row 1's block numbered state_pages */
      {5, -3, 0, 0},                     /* padding (write_loc < 0) */
      {128, 2 * W + 127, 2, 2},          /* writes a good row, but its window holds that block */
      {128, 8 * W + 127, 8, -1},         /* a negative read page */
      {21, 4 * W + 20, 4, 4},            /* runs */
      {128, 8 * W + 127, 8, 10},         /* its window is past the table */
      {200, 7 * W + 50, 6, 7},           /* row 3's block INT32_MAX */
  };
  enum { N = sizeof plans / sizeof plans[0] };
  static const int good[] = {0, 3, 11};
  static const char *const why[N] = {NULL,          "write slot",  "read_page_1", NULL,        "write slot",
                                     "write slot",  "read_page_1", "write slot",  NULL,        "read_page_1",
                                     "read_page_1", NULL,          "read_page_1", "write slot"};
  c128_plan_kind kind[N];
  for (int k = 0; k < N; ++k) kind[k] = C128_PLAN_DECODE;
  memcpy(b.dp, plans, sizeof plans);
  b.nd = b.out_rows = N;
  batch_input(&b, N);
  b.nwins = 1, b.wins[0] = (win){0, 6, 0 - (W - 1), W - 1, 0, 0};
  hostile_run(&b, l, good, 3, why, kind, N);
  batch_free(&b);
}

/* Prefill: windows that read only blocks that are there run (a missing block past buffer_len is
   never read), the others are skipped; writes through a bad entry, past the stride or the table,
   to a negative row or from a row past the input are skipped. */
static void hostile_prefill(const instance_entry *e, backend be, const lay *l) {
  require_backend(be);
  batch b = batch_make(e, be, 0, 1.0f, 0);
  b.guarded = 1;
  static const struct {
    int buffer_len;
    int32_t page;
    const char *why;
  } events[] = {
      {127, 6, NULL},           /* runs */
      {60, 0, "read_page_1"},   /* rows 0..59 hold row 0's missing block */
      {40, 0, NULL},            /* rows 0..39 do not */
      {100, 1, "read_page_1"},  /* rows 64..99 are past the stride */
      {64, 1, NULL},            /* rows 0..63 are not */
      {1, 10, "read_page_1"},   /* past the table */
      {0, 10, NULL},            /* reads no state row: runs */
      {20, 4, "read_page_1"},   /* the scores of rows 0..15 are in no block */
      {120, -1, "read_page_1"}, /* a negative page */
      {100, 2, "read_page_1"},  /* block state_pages */
      {48, 7, NULL},            /* rows 0..47 of row 3's second page */
      {60, 7, "read_page_1"},   /* rows 48..59: block INT32_MAX */
  };
  enum { NC = sizeof events / sizeof events[0] };
  int64_t rows = 0;
  b.nwins = 0;
  for (int k = 0; k < NC; ++k) {
    const int64_t first = rows;
    rows += W - events[k].buffer_len;
    b.cp[k] = (c128_compress_plan){(uint32_t)(W * (k + 2)), (uint16_t)(rows - 1), (uint16_t)events[k].buffer_len,
                                   events[k].page, events[k].page};
    if (!events[k].why)
      b.wins[b.nwins++] = (win){k, events[k].page, first - events[k].buffer_len, events[k].buffer_len, k, 0};
  }
  static const struct {
    int32_t loc;
    const char *why;
  } writes[] = {
      {0 * W + 50, "write slot"},           /* row 0's missing block */
      {3 * W + 100, "write slot"},          /* row 1 position 228: past the stride */
      {(5 << ROW_SHIFT) + 1, "write slot"}, /* past the table */
      {2 * W + 85, "write slot"},           /* block state_pages */
      {4 * W + 3, "write slot"},            /* the score plane's block -5 (one plane: the block) */
      {9 * W + 10, NULL},                   /* runs */
      {7 * W + 50, "write slot"},           /* block INT32_MAX */
      {-7, "write slot"},                   /* a negative row */
      {8 * W + 20, "input row"},            /* from a row past the input */
  };
  enum { NB = sizeof writes / sizeof writes[0], NGOOD_WRITES = 10, NW = NGOOD_WRITES + NB };
  for (int i = 0; i < NGOOD_WRITES; ++i) b.wp[i] = (c128_write_plan){(uint32_t)(rows + i), 8 * W + i};
  for (int i = 0; i < NB; ++i)
    b.wp[NGOOD_WRITES + i] = (c128_write_plan){(uint32_t)(rows + NGOOD_WRITES + i), writes[i].loc};
  b.wp[NW - 1].ragged_id = (uint32_t)(rows + NW);
  b.nc = b.out_rows = NC, b.nw = NW;
  batch_input(&b, rows + NW);
  const char *why[NC + NW];
  c128_plan_kind kind[NC + NW];
  int good[NC + NW], ngood = 0;
  for (int k = 0; k < NC + NW; ++k) {
    kind[k] = k < NC ? C128_PLAN_COMPRESS : C128_PLAN_WRITE;
    why[k] = k < NC ? events[k].why : k - NC < NGOOD_WRITES ? NULL : writes[k - NC - NGOOD_WRITES].why;
    if (!why[k]) good[ngood++] = k;
  }
  hostile_run(&b, l, good, ngood, why, kind, NC + NW);
  batch_free(&b);
}

static const lay HOSTILE_LAYOUTS[] = {{16, TWO_TABLES, 1, 1}, {8, ONE_PLANE, 1, 0}};
static void hostile_cases(const instance_entry *e, backend be) {
  for (int i = 0; i < 2; ++i) hostile_decode(e, be, &HOSTILE_LAYOUTS[i]), hostile_prefill(e, be, &HOSTILE_LAYOUTS[i]);
}
Test(cpu, layout_hostile_tables_and_plans) {
  hostile_cases(instance(C128_INSTANCE_h128_f32_f32_f32), BACKEND_CPU);
  hostile_cases(instance(C128_INSTANCE_h256_bf16_bf16_f32), BACKEND_CPU);
}
Test(gpu, layout_hostile_tables_and_plans) {
  hostile_cases(instance(C128_INSTANCE_h128_f32_f32_f32), BACKEND_GPU);
  hostile_cases(instance(C128_INSTANCE_h256_bf16_bf16_f32), BACKEND_GPU);
}

/* ---- argument refusals of the state layout: the launch and the checker agree -------------------- */
typedef struct refusal {
  const char *what;
  c128_status want;
  int tensors; /* refused on the tensor pointers, which the checker does not see (as test_attack.c has it) */
} refusal;

/* Mutation m of a valid call (B = 8, two planes, two tables, biased, output rows by index): what
   it does and the status the launches (and, unless it is about tensors, the checker) must give.
   Accepted changes of the block size shrink state_pages so that the state still holds it. */
static refusal mutate(int m, c128_state_layout *l, c128_shared_layout *shared, const int64_t **index, int64_t *pages,
                      const store *s, const void *input, void *out) {
  char *kv = s->kv, *sp = s->score;
  const int32_t blocks = (int32_t)s->blocks;
  refusal r = {NULL, C128_SUCCESS, 0};
  switch (m) {
  case 0:
    return (refusal){"valid", C128_SUCCESS, 0};
  case 1:
    l->block_rows = 4, r = (refusal){"block_rows 4", C128_ERROR_INVALID_STATE_LAYOUT, 0};
    break;
  case 2:
    l->block_rows = 512, r = (refusal){"block_rows 512", C128_ERROR_INVALID_STATE_LAYOUT, 0};
    break;
  case 3:
    l->block_rows = 24, r = (refusal){"block_rows 24", C128_ERROR_INVALID_STATE_LAYOUT, 0};
    break;
  case 4:
    l->block_rows = -8, r = (refusal){"block_rows -8", C128_ERROR_INVALID_STATE_LAYOUT, 0};
    break;
  case 5:
    l->block_rows = INT32_MIN, r = (refusal){"block_rows INT32_MIN", C128_ERROR_INVALID_STATE_LAYOUT, 0};
    break;
  case 6:
    l->row_shift = 6, r = (refusal){"row_shift 6", C128_ERROR_INVALID_STATE_LAYOUT, 0};
    break;
  case 7:
    l->row_shift = 31, r = (refusal){"row_shift 31", C128_ERROR_INVALID_STATE_LAYOUT, 0};
    break;
  case 8:
    l->row_shift = -1, r = (refusal){"row_shift -1", C128_ERROR_INVALID_STATE_LAYOUT, 0};
    break;
  case 9:
    l->row_shift = 30, l->table_rows = 3, r = (refusal){"3 << 30 rows", C128_ERROR_INVALID_STATE_LAYOUT, 0};
    break;
  case 10:
    l->row_shift = 29, l->table_rows = 5, r = (refusal){"5 << 29 rows", C128_ERROR_INVALID_STATE_LAYOUT, 0};
    break;
  case 11:
    l->table_rows = ((int64_t)1 << 23) + 1, r = (refusal){"2^23 + 1 << 8 rows", C128_ERROR_INVALID_STATE_LAYOUT, 0};
    break;
  case 12:
    l->score_plane = NULL, r = (refusal){"score table, no score plane", C128_ERROR_INVALID_STATE_LAYOUT, 0};
    break;
  case 13:
    l->block_table = NULL, r = (refusal){"score table, no block table", C128_ERROR_INVALID_STATE_LAYOUT, 0};
    break;
  case 14:
    l->block_table = (const int32_t *)((const char *)l->block_table + 2);
    r = (refusal){"misaligned block table", C128_ERROR_MISALIGNED, 0};
    break;
  case 15:
    l->score_block_table = (const int32_t *)((const char *)l->score_block_table + 1);
    r = (refusal){"misaligned score table", C128_ERROR_MISALIGNED, 0};
    break;
  case 16:
    l->score_plane = sp + 2, r = (refusal){"misaligned score plane", C128_ERROR_MISALIGNED, 1};
    break;
  case 17:
    shared->size = 2, shared->pages_per_rank = blocks;
    r = (refusal){"sharded, blocks of 8", C128_ERROR_INVALID_STATE_LAYOUT, 0};
    break;
  case 18:
    memset(l, 0, sizeof *l), l->score_biased = 1, shared->size = 2, shared->pages_per_rank = blocks;
    r = (refusal){"sharded, only biased scores", C128_ERROR_INVALID_STATE_LAYOUT, 0};
    break;
  case 19:
    l->table_rows = -1, r = (refusal){"table_rows -1", C128_ERROR_NEGATIVE_SIZE, 0};
    break;
  case 20:
    l->table_stride = -1, r = (refusal){"table_stride -1", C128_ERROR_NEGATIVE_SIZE, 0};
    break;
  case 21:
    l->block_table = (const int32_t *)(kv + 64), r = (refusal){"block table in the state", C128_ERROR_ALIASED, 1};
    break;
  case 22:
    l->score_block_table = (const int32_t *)(sp + store_bytes(s) - 64);
    r = (refusal){"score table in the score plane", C128_ERROR_ALIASED, 1};
    break;
  case 23:
    l->block_table = (const int32_t *)out, r = (refusal){"block table on the output", C128_ERROR_ALIASED, 1};
    break;
  case 24:
    l->score_plane = kv + store_bytes(s) - 256, r = (refusal){"score plane over the state", C128_ERROR_ALIASED, 1};
    break;
  case 25:
    l->score_plane = (void *)input, r = (refusal){"score plane on the input", C128_ERROR_ALIASED, 1};
    break;
  case 26:
    *index = (const int64_t *)(sp + 128), r = (refusal){"index in the score plane", C128_ERROR_ALIASED, 1};
    break;
  case 27:
    *index = (const int64_t *)((const char *)*index + 4), r = (refusal){"misaligned index", C128_ERROR_MISALIGNED, 0};
    break;
  case 28:
    l->score_plane = out, r = (refusal){"score plane on the output", C128_ERROR_ALIASED, 1};
    break;
  case 29:
    l->block_rows = 0, *pages = blocks / 16, r = (refusal){"block_rows 0 (128)", C128_SUCCESS, 0};
    break;
  case 30:
    l->block_rows = 256, *pages = blocks / 32, r = (refusal){"block_rows 256", C128_SUCCESS, 0};
    break;
  case 31:
    l->row_shift = 30, l->table_rows = 2, r = (refusal){"2 << 30 rows: 2^31", C128_SUCCESS, 0};
    break;
  case 32:
    l->table_rows = 0, r = (refusal){"a table of no rows", C128_SUCCESS, 0};
    break;
  case 33:
    *index = NULL, r = (refusal){"no index", C128_SUCCESS, 0};
    break;
  default:
    break;
  }
  return r;
}

/* Every mutation through the host launch, the checker and (gpu) the device launch: one status.
   Accepted ones run on the host runner (race checker on), whose plans may now lie outside the
   state (skipped). */
static void refusals(backend be) {
  require_backend(be);
  const instance_entry *e = instance(C128_INSTANCE_h128_bf16_f32_f32);
  const lay l0 = {8, TWO_TABLES, 1, 1};
  for (int decode = 0; decode < 2; ++decode) {
    batch b = batch_make(e, BACKEND_CPU, decode, 1.0f, 1);
    store s = store_make(e, &l0, &b.r);
    store_fill(&s, b.hist, b.ape);
    const size_t out_bytes = (size_t)b.out_rows * b.out_row;
    char *out = guarded_alloc(out_bytes);
    int64_t *index0 = b.index;
    for (int m = 0;; ++m) {
      store run = store_dup(&s);
      c128_state_layout l = run.sl;
      c128_shared_layout shared = {0, 0, 0};
      const int64_t *index = index0;
      int64_t pages = s.blocks;
      const refusal want = mutate(m, &l, &shared, &index, &pages, &run, b.input, out);
      if (!want.what) {
        store_free(&run);
        break;
      }
      b.index = (int64_t *)index;
      c128_decode_args da = decode_args_of(&b, &run, out, 0);
      c128_prefill_args pa = prefill_args_of(&b, &run, out, 0);
      da.state_layout = pa.state_layout = l, da.layout = pa.layout = shared, da.state_pages = pa.state_pages = pages;
      char msg[200] = "";
      c128_plan_report rep = {0, 0, msg, sizeof msg};
      const c128_status checked = decode ? c128_check_decode_plans(&da, &rep) : c128_check_prefill_plans(&pa, &rep);
      char race[256];
      const c128_host_options o = cpu_options(0, race, sizeof race);
      const c128_status launched = decode ? c128_decode_host(&da, &o) : c128_prefill_host(&pa, &o);
      const char *kind = decode ? "decode" : "prefill";
      cr_assert_eq(launched, want.want, "%s %s: launch %s, expected %s", kind, want.what, c128_status_string(launched),
                   c128_status_string(want.want));
      if (want.want != C128_SUCCESS && !want.tensors)
        cr_assert_eq(checked, want.want, "%s %s: checker %s, launch %s", kind, want.what, c128_status_string(checked),
                     c128_status_string(launched));
      else if (m == 0 || m == 33)
        cr_assert_eq(checked, C128_SUCCESS, "%s %s: checker %s (%s)", kind, want.what, c128_status_string(checked),
                     msg);
      else
        cr_assert(checked == C128_SUCCESS || checked == C128_ERROR_INVALID_PLAN, "%s %s: checker %s", kind, want.what,
                  c128_status_string(checked));
      if (be == BACKEND_GPU &&
          want.want != C128_SUCCESS) { /* refused before any launch: host pointers stay untouched */
        const c128_status gpu = decode ? c128_decode(&da, 0) : c128_prefill(&pa, 0);
        cr_assert_eq(gpu, want.want, "%s %s: GPU launch %s", kind, want.what, c128_status_string(gpu));
      }
      guarded_check(run.kv, store_bytes(&run), want.what, b.r.seed), guarded_check(out, out_bytes, want.what, b.r.seed);
      store_free(&run);
    }
    b.index = index0;
    guarded_free(out), store_free(&s), batch_free(&b);
  }
}
Test(cpu, layout_argument_refusals) { refusals(BACKEND_CPU); }
Test(gpu, layout_argument_refusals) { refusals(BACKEND_GPU); }

/* ---- the checker on table layouts: conflicts between physical rows ------------------------------ */
/* Two table entries naming one block: logical rows that differ land on one physical row. Write
   plans storing both are a write conflict (in the score plane when only its table aliases), and a
   decode write into a block another plan's window reads through the other entry is refused, in
   either order; the host runner's race checker flags the same batches (one request or window a
   block). */
static c128_status host_raced(const c128_decode_args *da, const c128_prefill_args *pa, char *msg, size_t size) {
  const c128_host_options o = cpu_options(0, msg, size);
  return da ? c128_decode_host(da, &o) : c128_prefill_host(pa, &o);
}

Test(cpu, layout_checker_conflicts_through_the_table) {
  const instance_entry *e = instance(C128_INSTANCE_h128_f32_f32_f32);
  for (int plane = 0; plane < 2; ++plane) { /* the kv table aliases, or only the score plane's */
    const lay l = {16, plane ? TWO_TABLES : ONE_PLANE, 1, 1};
    batch b = batch_make(e, BACKEND_CPU, 0, 1.0f, 0);
    store s = store_make(e, &l, &b.r);
    int32_t *t = plane ? s.score_table : s.table;
    t[1 * s.stride + 0] = t[0 * s.stride + 2]; /* row 1 positions 0..15 = row 0 positions 32..47 */
    store_fill(&s, b.hist, b.ape);
    const int64_t phys = (int64_t)t[0 * s.stride + 2] * 16 + 3;
    const c128_write_plan wp[3] = {{0, 0 * W + 35}, {1, 5 * W + 9}, {2, 2 * W + 3}};
    b.nc = 0, b.nw = 3;
    memcpy(b.wp, wp, sizeof wp);
    char *out = guarded_alloc((size_t)b.out_rows * b.out_row);
    c128_prefill_args pa = prefill_args_of(&b, &s, out, 0);
    char msg[200] = "", want[120];
    c128_plan_report rep = {0, 0, msg, sizeof msg};
    snprintf(want, sizeof want, "writes %s %lld, as plan 0 does", plane ? "score plane row" : "state row",
             (long long)phys);
    expect_named(c128_check_prefill_plans(&pa, &rep), &rep, C128_PLAN_WRITE, 2, want, "write conflict", b.r.seed);
    char race[256];
    cr_assert_eq(host_raced(NULL, &pa, race, sizeof race), C128_ERROR_RACE_DETECTED, "plane %d", plane);
    cr_assert(strstr(race, plane ? "score plane" : "state"), "%s", race);

    /* decode: plan 0's window (page 0, rows 0..126) and a new row at row 1 position 5 */
    const c128_decode_plan reads_first[2] = {{128, 0 * W + 127, 0, 0}, {6, 2 * W + 5, 2, 2}};
    const c128_decode_plan writes_first[2] = {{6, 2 * W + 5, 2, 2}, {128, 0 * W + 127, 0, 0}};
    b.decode = 1, b.nd = 2, b.out_rows = 2;
    const char *plane_name = plane ? "score plane row" : "state row";
    for (int order = 0; order < 2; ++order) {
      memcpy(b.dp, order ? writes_first : reads_first, sizeof reads_first);
      c128_decode_args da = decode_args_of(&b, &s, out, 1);
      if (order == 0)
        snprintf(want, sizeof want, "writes %s %lld, which plan 0 reads in its window", plane_name,
                 (long long)phys + 2);
      else snprintf(want, sizeof want, "its window reads %s", plane_name);
      expect_named(c128_check_decode_plans(&da, &rep), &rep, C128_PLAN_DECODE, 1, want, "decode conflict", b.r.seed);
      cr_assert_eq(host_raced(&da, NULL, race, sizeof race), C128_ERROR_RACE_DETECTED, "plane %d order %d", plane,
                   order);
    }
    /* the same rows through distinct entries: no conflict */
    int32_t spare = 0; /* a block no entry names */
    for (int found = 0; !found; spare += !found) {
      found = 1;
      for (int64_t k = 0; k < TABLE_ROWS * s.stride; ++k) found &= t[k] != spare;
    }
    t[1 * s.stride + 0] = spare;
    memcpy(b.dp, reads_first, sizeof reads_first);
    c128_decode_args da = decode_args_of(&b, &s, out, 1);
    cr_assert_eq(c128_check_decode_plans(&da, &rep), C128_SUCCESS, "%s", msg);
    cr_assert_eq(host_raced(&da, NULL, race, sizeof race), C128_SUCCESS, "%s", race);
    b.decode = 0;
    pa = prefill_args_of(&b, &s, out, 0);
    cr_assert_eq(c128_check_prefill_plans(&pa, &rep), C128_SUCCESS, "%s", msg);
    guarded_free(out), store_free(&s), batch_free(&b);
  }
}

/* ---- the planners with a block table (DESIGN 5.9, 5.11) ------------------------------------------ */
enum { PLAN_POOL = 12, PLAN_MAX_REQ = 8, PLAN_CAP = 4096 };

/* A ring whose state_layout has a block table: R = 2^row_shift, PLAN_POOL table rows of R / B
   columns (sometimes one spare) from a shuffled pool of blocks, sometimes two planes with a
   score table of their own; and the request ring that names the same logical rows. */
typedef struct tabled_ring {
  c128_ring ring, same; /* same: ring_tokens R, no table, state_pages = logical pages */
  int32_t *table, *score_table;
  int64_t entries;
  char plane[16]; /* a score plane for the planner's check (it only needs one to exist) */
} tabled_ring;

static void tabled_ring_make(rng *r, tabled_ring *t, int row_shift, int block_rows, int two_tables) {
  memset(t, 0, sizeof *t);
  const int64_t R = (int64_t)1 << row_shift;
  const int64_t stride = (R / block_rows > 0 ? R / block_rows : 1) + rng_below(r, 2);
  const int64_t blocks = PLAN_POOL * stride + 5;
  t->entries = PLAN_POOL * stride;
  int32_t *perm = malloc((size_t)blocks * sizeof *perm);
  for (int pass = 0; pass < 1 + two_tables; ++pass) {
    for (int64_t i = 0; i < blocks; ++i) perm[i] = (int32_t)i;
    shuffle(r, perm, blocks);
    *(pass ? &t->score_table : &t->table) = clone_bytes(perm, (size_t)t->entries * sizeof *perm);
  }
  free(perm);
  c128_state_layout *l = &t->ring.state_layout;
  l->block_rows = block_rows, l->score_biased = 1, l->block_table = t->table, l->row_shift = row_shift;
  l->table_rows = PLAN_POOL, l->table_stride = stride;
  if (two_tables) l->score_plane = t->plane, l->score_block_table = t->score_table;
  t->ring.state_pages = blocks;
  t->ring.speculative = (int32_t)rng_below(r, 2);
  t->same.ring_tokens = (int32_t)R, t->same.speculative = t->ring.speculative;
  t->same.state_pages = PLAN_POOL * (R / W);
}
static void tabled_ring_free(tabled_ring *t) { free(t->table), free(t->score_table); }

/* Requests on distinct pool rows (sometimes one past the table, or negative), within what a
   verify batch may carry when `verify`. */
static int64_t random_requests(rng *r, const c128_ring *ring, int verify, int decode, c128_request *q) {
  int32_t pool[PLAN_POOL];
  for (int i = 0; i < PLAN_POOL; ++i) pool[i] = i;
  shuffle(r, pool, PLAN_POOL);
  const int64_t n = 1 + rng_below(r, PLAN_MAX_REQ);
  const int64_t R = (int64_t)1 << ring->state_layout.row_shift;
  for (int64_t i = 0; i < n; ++i) {
    q[i].pool_index = pool[i];
    if (decode) {
      q[i].seq_len = (int32_t)rng_below(r, 3 * R), q[i].extend_len = 1;
      if (rng_below(r, 3) == 0) q[i].seq_len = (int32_t)((1 + rng_below(r, 5)) * W); /* a boundary */
    } else {
      const int64_t most = verify ? (ring->speculative ? R - W + 2 : 1) : 300;
      q[i].extend_len = (int32_t)(1 + rng_below(r, most));
      q[i].seq_len = q[i].extend_len + (int32_t)rng_below(r, 3 * R);
    }
  }
  if (rng_below(r, 8) == 0) q[rng_below(r, n)].pool_index = rng_below(r, 2) ? PLAN_POOL : -1;
  return n;
}

/* DESIGN 5.11's write_all, written out: the compress plans of SPEC 5, and a write for each of the
   last R positions of a request that are new. */
static c128_status spec_write_all(const c128_ring *same, const c128_request *q, int64_t n, int32_t verify,
                                  c128_compress_plan *cp, int64_t *nc, c128_write_plan *wp, int64_t *nw) {
  static c128_write_plan ignored[PLAN_CAP];
  int64_t ignored_n;
  const c128_status st = spec_plan_prefill(same, q, n, verify, PLAN_CAP, cp, nc, ignored, &ignored_n);
  if (st != C128_SUCCESS) return st;
  const int64_t R = same->ring_tokens;
  int64_t rows = 0;
  *nw = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t seq = q[i].seq_len, prefix = seq - q[i].extend_len;
    for (int64_t pos = prefix > seq - R ? prefix : seq - R; pos < seq; ++pos) {
      int32_t page;
      cr_assert_eq(spec_page(same, q[i].pool_index, pos, &page), C128_SUCCESS);
      wp[(*nw)++] = (c128_write_plan){(uint32_t)(rows + pos - prefix), (int32_t)(page * W + pos % W)};
    }
    rows += q[i].extend_len;
  }
  return C128_SUCCESS;
}

/* The device planner's code (host, or `be` = GPU with every array on the device) from requests
   (form 0) or from an engine's arrays (seq_lens, query_start, pool_indices), padded to capacity;
   form 2 also gives each request's first output row (output_first) and starts the rows at
   query_start[0] = row0, as TensorRT-LLM's generation call does. */
enum { FORM_REQUESTS, FORM_ARRAYS, FORM_OUTPUT_ROWS, FORMS };
typedef struct device_plans {
  c128_compress_plan cp[PLAN_CAP];
  c128_write_plan wp[PLAN_CAP];
  c128_decode_plan dp[PLAN_MAX_REQ];
  int64_t index[PLAN_CAP]; /* output_index (form 2) */
  int64_t counts[2];
  int32_t status;
  c128_status returned; /* the call's own status: an argument refusal, or success */
} device_plans;

/* Form 2's output_first: distinct, unordered rows. */
static int32_t output_first_of(int64_t i) { return (int32_t)(1000 * ((i * 5) % PLAN_MAX_REQ) + 3); }

static void *dev_copy(const void *host, size_t bytes) {
  void *d = NULL;
  CUDA_OK(cudaMalloc(&d, bytes ? bytes : 16));
  if (host && bytes) CUDA_OK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
  return d;
}

static void device_plan(backend be, const tabled_ring *t, const c128_request *q, int64_t n, int32_t verify, int decode,
                        int form, int32_t row0, int64_t capacity, device_plans *out) {
  int32_t seq[PLAN_MAX_REQ], start[PLAN_MAX_REQ + 1], pool[PLAN_MAX_REQ], first[PLAN_MAX_REQ];
  const int lens = form != FORM_REQUESTS;
  start[0] = row0;
  for (int64_t i = 0; i < n; ++i) {
    seq[i] = q[i].seq_len, pool[i] = q[i].pool_index, start[i + 1] = start[i] + (decode ? 1 : q[i].extend_len);
    first[i] = output_first_of(i);
  }
  c128_device_plan_args a = {0};
  a.ring = t->ring, a.num_requests = n, a.verify = verify, a.capacity = capacity;
  memset(out, 0xAB, sizeof *out);
  const size_t ws = c128_plan_workspace_size(n);
  const size_t tb = (size_t)t->entries * sizeof(int32_t);
  if (be == BACKEND_CPU) {
    a.compress = out->cp, a.write = out->wp, a.decode = out->dp, a.counts = out->counts, a.status = &out->status;
    if (lens) a.seq_lens = seq, a.query_start = decode ? NULL : start, a.pool_indices = pool;
    else a.requests = q;
    if (form == FORM_OUTPUT_ROWS) a.output_first = first, a.output_index = out->index;
    a.workspace = malloc(ws);
    const c128_status st = decode ? c128_plan_decode_device_host(&a) : c128_plan_prefill_device_host(&a);
    cr_assert(st == C128_SUCCESS || st == out->status, "a refusal (%s) must be in *status too", c128_status_string(st));
    out->returned = st;
    free(a.workspace);
    return;
  }
  a.ring.state_layout.block_table = dev_copy(t->table, tb);
  if (t->score_table) a.ring.state_layout.score_block_table = dev_copy(t->score_table, tb);
  a.compress = dev_copy(out->cp, sizeof out->cp), a.write = dev_copy(out->wp, sizeof out->wp);
  a.decode = dev_copy(out->dp, sizeof out->dp), a.counts = dev_copy(NULL, sizeof out->counts);
  a.status = dev_copy(NULL, sizeof out->status), a.workspace = dev_copy(NULL, ws);
  if (lens) {
    a.seq_lens = dev_copy(seq, sizeof seq), a.pool_indices = dev_copy(pool, sizeof pool);
    a.query_start = decode ? NULL : dev_copy(start, sizeof start);
  } else {
    a.requests = dev_copy(q, (size_t)n * sizeof *q);
  }
  if (form == FORM_OUTPUT_ROWS)
    a.output_first = dev_copy(first, sizeof first), a.output_index = dev_copy(out->index, sizeof out->index);
  const c128_status st = decode ? c128_plan_decode_device(&a, 0) : c128_plan_prefill_device(&a, 0);
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpy(out->cp, a.compress, sizeof out->cp, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(out->wp, a.write, sizeof out->wp, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(out->dp, a.decode, sizeof out->dp, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(out->counts, a.counts, sizeof out->counts, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(&out->status, a.status, sizeof out->status, cudaMemcpyDeviceToHost));
  if (a.output_index) CUDA_OK(cudaMemcpy(out->index, a.output_index, sizeof out->index, cudaMemcpyDeviceToHost));
  cr_assert(st == C128_SUCCESS || st == out->status, "a refusal (%s) must be in *status too", c128_status_string(st));
  out->returned = st;
  void *all[] = {(void *)a.ring.state_layout.block_table,
                 (void *)a.ring.state_layout.score_block_table,
                 a.compress,
                 a.write,
                 a.decode,
                 a.counts,
                 a.status,
                 a.workspace,
                 (void *)a.seq_lens,
                 (void *)a.pool_indices,
                 (void *)a.query_start,
                 (void *)a.requests,
                 (void *)a.output_first,
                 a.output_index};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) cudaFree(all[i]);
}

static int all_bytes(const void *p, size_t bytes, unsigned char value) {
  for (size_t i = 0; i < bytes; ++i)
    if (((const unsigned char *)p)[i] != value) return 0;
  return 1;
}

/* Form 2's output_index: request i's j-th window (the host planner's plans, in request order) at
   output_first_of(i) + j, written at its input row (row0 further); a decode request's entry
   output_first_of(b), -1 for padding and a refused batch; every other entry left as it was, and
   all of them when the arguments are refused. */
static void check_output_index(const device_plans *got, const c128_request *q, int64_t n, int decode, int ok,
                               int32_t row0, const c128_compress_plan *cp, int64_t nc, uint64_t seed) {
  static int64_t want[PLAN_CAP];
  memset(want, 0xAB, sizeof want);
  if (got->returned != C128_SUCCESS) { /* arguments refused: nothing written */
  } else if (decode) {
    for (int64_t b = 0; b < n; ++b) want[b] = ok && q[b].seq_len ? output_first_of(b) : -1;
  } else if (ok) {
    for (int64_t i = 0, k = 0; i < n; ++i) {
      const int64_t seq = q[i].seq_len, windows = seq / W - (seq - q[i].extend_len) / W; /* 0 when absent */
      for (int64_t j = 0; j < windows; ++j, ++k) {
        cr_assert(k < nc, "more windows than compress plans (seed %llu)", (unsigned long long)seed);
        want[cp[k].ragged_id + row0] = output_first_of(i) + j;
      }
    }
  }
  for (int64_t r = 0; r < PLAN_CAP; ++r)
    cr_assert_eq(got->index[r], want[r],
                 "device planner (output rows): output_index[%lld] = %lld, want %lld (seed %llu)", (long long)r,
                 (long long)got->index[r], (long long)want[r], (unsigned long long)seed);
}

/* The host planner's result (status, plans padded to `capacity`) against the device planner's, in
   every form. */
static void expect_device_planner(backend be, const tabled_ring *t, const c128_request *q, int64_t n, int32_t verify,
                                  int decode, c128_status want, const c128_compress_plan *cp, int64_t nc,
                                  const c128_write_plan *wp, int64_t nw, const c128_decode_plan *dp, int64_t capacity,
                                  uint64_t seed) {
  static device_plans got;
  const c128_compress_plan no_compress = C128_INVALID_COMPRESS_PLAN;
  const c128_write_plan no_write = C128_INVALID_WRITE_PLAN;
  const c128_decode_plan padding = C128_PADDING_DECODE_PLAN;
  int64_t rows = 0;
  for (int64_t i = 0; i < n; ++i) rows += q[i].extend_len > 0 ? q[i].extend_len : 0;
  for (int f = 0; f < FORMS; ++f) {
    /* form 2: rows from row0 (37 where the batch fits the capacity and a launch's rows after it) */
    const int32_t row0 = f == FORM_OUTPUT_ROWS && !decode && want == C128_SUCCESS && rows + 37 <= capacity ? 37 : 0;
    device_plan(be, t, q, n, verify, decode, f, row0, capacity, &got);
    const char *form = f == FORM_REQUESTS ? "requests" : f == FORM_ARRAYS ? "engine arrays" : "output rows";
    /* output_index needs an entry for every input row */
    const c128_status expected = f == FORM_OUTPUT_ROWS && !decode && want == C128_SUCCESS && rows > capacity
                                     ? C128_ERROR_CAPACITY_TOO_SMALL
                                     : want;
    cr_assert_eq(got.status, (int32_t)expected, "device planner (%s) %s, host %s (seed %llu)", form,
                 c128_status_string((c128_status)got.status), c128_status_string(expected), (unsigned long long)seed);
    const int ok = expected == C128_SUCCESS;
    if (f == FORM_OUTPUT_ROWS) check_output_index(&got, q, n, decode, ok, row0, cp, nc, seed);
    if (got.returned != C128_SUCCESS) { /* refused arguments: status and zero counts, no plan written */
      cr_assert_eq(got.returned, want);
      cr_assert(decode || (got.counts[0] == 0 && got.counts[1] == 0), "device planner (%s): counts of a refusal", form);
      cr_assert(all_bytes(got.cp, sizeof got.cp, 0xAB) && all_bytes(got.wp, sizeof got.wp, 0xAB) &&
                    all_bytes(got.dp, sizeof got.dp, 0xAB),
                "device planner (%s): a refused call wrote plans", form);
      continue;
    }
    if (decode) {
      for (int64_t k = 0; k < n; ++k)
        cr_assert(memcmp(&got.dp[k], ok ? &dp[k] : &padding, sizeof padding) == 0,
                  "device planner (%s): decode plan %lld differs (seed %llu)", form, (long long)k,
                  (unsigned long long)seed);
      continue;
    }
    cr_assert(got.counts[0] == (ok ? nc : 0) && got.counts[1] == (ok ? nw : 0),
              "device planner (%s): counts (seed %llu)", form, (unsigned long long)seed);
    for (int64_t k = 0; k < capacity; ++k) {
      c128_compress_plan c = ok && k < nc ? cp[k] : no_compress;
      c128_write_plan w = ok && k < nw ? wp[k] : no_write;
      if (ok && k < nc) c.ragged_id = (uint16_t)(c.ragged_id + row0);
      if (ok && k < nw) w.ragged_id += (uint32_t)row0;
      cr_assert(memcmp(&got.cp[k], &c, sizeof c) == 0, "device planner (%s): compress plan %lld differs (seed %llu)",
                form, (long long)k, (unsigned long long)seed);
      cr_assert(memcmp(&got.wp[k], &w, sizeof w) == 0, "device planner (%s): write plan %lld differs (seed %llu)", form,
                (long long)k, (unsigned long long)seed);
    }
  }
}

/* Random batches on tabled rings (every block allocated): the plans are SPEC 5's for the request
   ring of R = 2^row_shift (write_all: DESIGN 5.11's, written out above), in status and bytes, for
   the host planner and the device planner in both request forms. */
static void planners_match_the_ring(backend be) {
  require_backend(be);
  rng r = rng_fresh();
  static c128_compress_plan hc[PLAN_CAP], sc[PLAN_CAP];
  static c128_write_plan hw[PLAN_CAP], sw[PLAN_CAP];
  const int trials = be == BACKEND_CPU ? 150 : 40;
  int refused = 0;
  for (int trial = 0; trial < trials; ++trial) {
    tabled_ring t;
    static const int blocks[] = {8, 16, 32, 64, 128, 256};
    const int shift = 7 + (int)rng_below(&r, 3);
    tabled_ring_make(&r, &t, shift, blocks[rng_below(&r, 6)], (int)rng_below(&r, 2));
    t.ring.write_all = (int32_t)rng_below(&r, 2);
    const int32_t verify = t.ring.speculative && rng_below(&r, 3) == 0;
    c128_request q[PLAN_MAX_REQ];
    const int64_t n = random_requests(&r, &t.ring, verify, 0, q);
    c128_prefill_plans hp = {hc, hw, PLAN_CAP, 1, 0, 0};
    const c128_status got = c128_plan_prefill(&t.ring, q, n, verify, &hp);
    int64_t nc = 0, nw = 0;
    const c128_status want = t.ring.write_all ? spec_write_all(&t.same, q, n, verify, sc, &nc, sw, &nw)
                                              : spec_plan_prefill(&t.same, q, n, verify, PLAN_CAP, sc, &nc, sw, &nw);
    cr_assert_eq(got, want, "trial %d (R %d, B %d, write_all %d): planner %s, SPEC %s (seed %llu)", trial, 1 << shift,
                 t.ring.state_layout.block_rows, t.ring.write_all, c128_status_string(got), c128_status_string(want),
                 (unsigned long long)r.seed);
    if (got == C128_SUCCESS) {
      cr_assert(hp.num_compress == nc && hp.num_write == nw, "trial %d: counts (seed %llu)", trial,
                (unsigned long long)r.seed);
      cr_assert(memcmp(hc, sc, (size_t)nc * sizeof *hc) == 0, "trial %d: compress plans (seed %llu)", trial,
                (unsigned long long)r.seed);
      cr_assert(memcmp(hw, sw, (size_t)nw * sizeof *hw) == 0, "trial %d: write plans (seed %llu)", trial,
                (unsigned long long)r.seed);
    }
    for (int64_t a = 0; got == C128_SUCCESS && a < hp.num_write; ++a) /* no slot written twice */
      for (int64_t b = a + 1; b < hp.num_write; ++b)
        cr_assert_neq(hw[a].write_loc, hw[b].write_loc, "trial %d: write plans %lld and %lld share row %d (seed %llu)",
                      trial, (long long)a, (long long)b, hw[a].write_loc, (unsigned long long)r.seed);
    refused += got != C128_SUCCESS;
    expect_device_planner(be, &t, q, n, verify, 0, got, hc, hp.num_compress, hw, hp.num_write, NULL, PLAN_CAP, r.seed);

    c128_decode_plan hd[PLAN_MAX_REQ], sd[PLAN_MAX_REQ];
    const int64_t m = random_requests(&r, &t.ring, 0, 1, q);
    const c128_status dgot = c128_plan_decode(&t.ring, q, m, hd), dwant = spec_plan_decode(&t.same, q, m, sd);
    cr_assert_eq(dgot, dwant, "trial %d: decode planner %s, SPEC %s (seed %llu)", trial, c128_status_string(dgot),
                 c128_status_string(dwant), (unsigned long long)r.seed);
    if (dgot == C128_SUCCESS)
      cr_assert(memcmp(hd, sd, (size_t)m * sizeof *hd) == 0, "trial %d: decode plans (seed %llu)", trial,
                (unsigned long long)r.seed);
    expect_device_planner(be, &t, q, m, 0, 1, dgot, NULL, 0, NULL, 0, hd, 0, r.seed);
    tabled_ring_free(&t);
  }
  cr_assert(refused > 0 && refused < trials / 2, "%d of %d batches refused (seed %llu)", refused, trials,
            (unsigned long long)r.seed);
}
Test(cpu, layout_planners_match_the_ring) { planners_match_the_ring(BACKEND_CPU); }
Test(gpu, layout_planners_match_the_ring) { planners_match_the_ring(BACKEND_GPU); }

/* Which blocks the planners check: those of the window rows a compress event reads from the state,
   of the written positions, and in decode of the new token and, at a boundary, of its window;
   negative entries and the null block are missing (C128_ERROR_BLOCK_MISSING), entries past
   state_pages and columns past the stride out of range (C128_ERROR_PAGE_OUT_OF_RANGE). A block
   nothing reads or writes may be missing. Request {3, 300, 100} on R = 512, B = 8: its window
   128..255 reads positions 128..199 (columns 16..24) from the state; it writes 256..299
   (columns 32..37), or with write_all every new position 200..299 (columns 25..37). */
typedef struct block_case {
  const char *what;
  int column, plane;   /* the entry changed: column of pool row 3 (plane 1: the score table) */
  int32_t value;       /* NULL_BLOCK: the null block; PAST: state_pages */
  int64_t stride;      /* > 0: the table's stride instead */
  c128_status want[2]; /* without write_all, with it */
} block_case;
enum { NULL_BLOCK = -1000, PAST = -1001 };

static void check_blocks(backend be, int decode, const block_case *cases, int n, int32_t seq_len) {
  rng r = rng_fresh();
  for (int write_all = 0; write_all < 2; ++write_all)
    for (int i = 0; i < n; ++i) {
      const block_case *c = &cases[i];
      tabled_ring t;
      tabled_ring_make(&r, &t, 9, 8, 1);
      t.ring.speculative = 0, t.ring.write_all = write_all;
      t.ring.has_null_block = 1, t.ring.null_block = 7;
      int32_t *table = c->plane ? t.score_table : t.table;
      for (int64_t k = 0; k < t.entries; ++k) /* block 7 is the null block: never in a table but where asked */
        if (t.table[k] == 7) t.table[k] = (int32_t)t.ring.state_pages - 1;
      for (int64_t k = 0; k < t.entries; ++k)
        if (t.score_table[k] == 7) t.score_table[k] = (int32_t)t.ring.state_pages - 1;
      if (c->stride) t.ring.state_layout.table_stride = c->stride;
      else if (c->column >= 0)
        table[3 * t.ring.state_layout.table_stride + c->column] = c->value == NULL_BLOCK ? 7
                                                                  : c->value == PAST     ? (int32_t)t.ring.state_pages
                                                                                         : c->value;
      const c128_request q = {3, seq_len, decode ? 1 : 100};
      const c128_status want = c->want[write_all];
      static c128_compress_plan cp[PLAN_CAP];
      static c128_write_plan wp[PLAN_CAP];
      c128_decode_plan dp[1] = {C128_PADDING_DECODE_PLAN};
      c128_prefill_plans plans = {cp, wp, PLAN_CAP, 1, 0, 0};
      const c128_status got =
          decode ? c128_plan_decode(&t.ring, &q, 1, dp) : c128_plan_prefill(&t.ring, &q, 1, 0, &plans);
      cr_assert_eq(got, want, "%s %s (write_all %d): %s, expected %s", decode ? "decode" : "prefill", c->what,
                   write_all, c128_status_string(got), c128_status_string(want));
      expect_device_planner(be, &t, &q, 1, 0, decode, got, cp, plans.num_compress, wp, plans.num_write, dp, PLAN_CAP,
                            r.seed);
      tabled_ring_free(&t);
    }
}

static void planner_block_checks(backend be) {
  require_backend(be);
  const c128_status ok = C128_SUCCESS, missing = C128_ERROR_BLOCK_MISSING, out = C128_ERROR_PAGE_OUT_OF_RANGE;
  const c128_status pool = C128_ERROR_POOL_INDEX_OUT_OF_RANGE;
  const block_case prefill[] = {
      {"every block there", -1, 0, 0, 0, {ok, ok}},
      {"a window row's block -1", 20, 0, -1, 0, {missing, missing}},
      {"a window row's block the null block", 20, 0, NULL_BLOCK, 0, {missing, missing}},
      {"a window row's block state_pages", 20, 0, PAST, 0, {out, out}},
      {"a window row's block INT32_MAX", 16, 0, INT32_MAX, 0, {out, out}},
      {"a window row's score block -1", 24, 1, -1, 0, {missing, missing}},
      {"the block of new rows read from the input", 30, 0, -1, 0, {ok, missing}},
      {"the block of new rows, the null block", 25, 1, NULL_BLOCK, 0, {ok, missing}},
      {"a written row's block -1", 35, 0, -1, 0, {missing, missing}},
      {"a written row's score block state_pages", 37, 1, PAST, 0, {out, out}},
      {"an earlier window's block", 10, 0, -1, 0, {ok, ok}},
      {"a block past seq_len", 40, 0, -1, 0, {ok, ok}},
      {"columns past 34: positions 272..", -1, 0, 0, 34, {out, out}},
      {"columns past 25: the written rows", -1, 0, 0, 25, {out, out}},
  };
  check_blocks(be, 0, prefill, (int)(sizeof prefill / sizeof prefill[0]), 300);
  /* decode of position 299 (column 37), and of 383, a boundary whose window is 256..383 (32..47) */
  const block_case step[] = {
      {"every block there", -1, 0, 0, 0, {ok, ok}},
      {"the new row's block -1", 37, 0, -1, 0, {missing, missing}},
      {"the new row's score block, the null block", 37, 1, NULL_BLOCK, 0, {missing, missing}},
      {"the new row's block state_pages", 37, 0, PAST, 0, {out, out}},
      {"an earlier row's block, off a boundary", 36, 0, -1, 0, {ok, ok}},
      {"columns past 37", -1, 0, 0, 37, {out, out}},
  };
  check_blocks(be, 1, step, (int)(sizeof step / sizeof step[0]), 300);
  const block_case boundary[] = {
      {"every block there", -1, 0, 0, 0, {ok, ok}},
      {"a window row's block -1", 33, 0, -1, 0, {missing, missing}},
      {"a window row's score block, the null block", 32, 1, NULL_BLOCK, 0, {missing, missing}},
      {"a window row's block state_pages", 40, 0, PAST, 0, {out, out}},
      {"the previous window's block", 31, 0, -1, 0, {ok, ok}},
      {"columns past 40", -1, 0, 0, 40, {out, out}},
  };
  check_blocks(be, 1, boundary, (int)(sizeof boundary / sizeof boundary[0]), 384);
  /* a pool row past the table */
  rng r = rng_fresh();
  tabled_ring t;
  tabled_ring_make(&r, &t, 9, 8, 0);
  const c128_request q = {PLAN_POOL, 300, 100};
  static c128_compress_plan cp[PLAN_CAP];
  static c128_write_plan wp[PLAN_CAP];
  c128_prefill_plans plans = {cp, wp, PLAN_CAP, 1, 0, 0};
  cr_assert_eq(c128_plan_prefill(&t.ring, &q, 1, 0, &plans), pool);
  expect_device_planner(be, &t, &q, 1, 0, 0, pool, cp, 0, wp, 0, NULL, PLAN_CAP, r.seed);
  c128_decode_plan dp[1] = {C128_PADDING_DECODE_PLAN};
  cr_assert_eq(c128_plan_decode(&t.ring, &q, 1, dp), pool);
  expect_device_planner(be, &t, &q, 1, 0, 1, pool, NULL, 0, NULL, 0, dp, 0, r.seed);
  tabled_ring_free(&t);
}
Test(cpu, layout_planner_block_checks) { planner_block_checks(BACKEND_CPU); }
Test(gpu, layout_planner_block_checks) { planner_block_checks(BACKEND_GPU); }

/* The planners' refusals of a ring's state layout, host and device planner alike, and of plan
   arrays that overlap a block table (the tabled ring's page table: DESIGN 5.7 refuses arrays that
   overlap what the planner reads). */
static void planner_refusals(backend be) {
  require_backend(be);
  rng r = rng_fresh();
  const c128_request q[2] = {{3, 300, 100}, {5, 129, 129}};
  static c128_compress_plan cp[PLAN_CAP];
  static c128_write_plan wp[PLAN_CAP];
  for (int m = 0; m < 14; ++m) {
    tabled_ring t;
    tabled_ring_make(&r, &t, 9, 8, 1);
    c128_state_layout *l = &t.ring.state_layout;
    const char *what = "";
    c128_status want = C128_ERROR_INVALID_STATE_LAYOUT;
    static int32_t page_table[PLAN_POOL * 4];
    switch (m) {
    case 0:
      what = "valid", want = C128_SUCCESS;
      break;
    case 1:
      what = "a page table too", t.ring.page_table = page_table, t.ring.page_table_stride = 4,
      t.ring.num_pool = PLAN_POOL;
      break;
    case 2:
      what = "ring_tokens 256, R 512", t.ring.ring_tokens = 256;
      break;
    case 3:
      what = "ring_tokens 512 = R", t.ring.ring_tokens = 512, want = C128_SUCCESS;
      break;
    case 4:
      what = "row_shift 6", l->row_shift = 6;
      break;
    case 5:
      what = "row_shift 31", l->row_shift = 31;
      break;
    case 6:
      what = "block_rows 12", l->block_rows = 12;
      break;
    case 7:
      what = "block_rows 512", l->block_rows = 512;
      break;
    case 8:
      what = "a score table without a score plane", l->score_plane = NULL;
      break;
    case 9:
      what = "5 << 29 rows", l->row_shift = 29, l->table_rows = 5;
      break;
    case 10:
      what = "misaligned table", l->block_table = (const int32_t *)((const char *)t.table + 2),
      want = C128_ERROR_MISALIGNED;
      break;
    case 11:
      what = "table_rows -1", l->table_rows = -1, want = C128_ERROR_NEGATIVE_SIZE;
      break;
    case 12:
      what = "state_pages -1", t.ring.state_pages = -1, want = C128_ERROR_NEGATIVE_SIZE;
      break;
    default:
      what = "block_rows 0 (128)", l->block_rows = 0, want = C128_SUCCESS;
      break;
    }
    c128_prefill_plans plans = {cp, wp, PLAN_CAP, 1, 0, 0};
    const c128_status got = c128_plan_prefill(&t.ring, q, 2, 0, &plans);
    c128_decode_plan dp[2] = {C128_PADDING_DECODE_PLAN, C128_PADDING_DECODE_PLAN};
    const c128_status dgot = c128_plan_decode(&t.ring, q, 2, dp);
    cr_assert(got == want && dgot == want, "%s: prefill %s, decode %s, expected %s", what, c128_status_string(got),
              c128_status_string(dgot), c128_status_string(want));
    if (m != 10) { /* the device form of a misaligned table is its own test below */
      expect_device_planner(be, &t, q, 2, 0, 0, got, cp, plans.num_compress, wp, plans.num_write, NULL, PLAN_CAP,
                            r.seed);
      expect_device_planner(be, &t, q, 2, 0, 1, dgot, NULL, 0, NULL, 0, dp, 0, r.seed);
    }
    tabled_ring_free(&t);
  }
}
Test(cpu, layout_planner_refusals) { planner_refusals(BACKEND_CPU); }
Test(gpu, layout_planner_refusals) { planner_refusals(BACKEND_GPU); }

/* Plan arrays over a block table (or the score plane's): the device planner refuses them
   (C128_ERROR_ALIASED); so must the host planners, which read the same tables, for both to give one
   status (DESIGN 5.8). */
Test(cpu, layout_planner_refuses_plans_over_a_table) {
  rng r = rng_fresh();
  const c128_request q[2] = {{3, 300, 100}, {5, 129, 129}};
  for (int which = 0; which < 2; ++which) {
    tabled_ring t;
    tabled_ring_make(&r, &t, 7, 8, 1);
    /* one buffer: the table at its start, then room; plans over the table */
    const int64_t entries = t.entries;
    int32_t *buf = aligned_alloc(16, (size_t)(entries + 4 * PLAN_CAP) * 4 + 64);
    memcpy(buf, which ? t.score_table : t.table, (size_t)entries * 4);
    if (which) t.ring.state_layout.score_block_table = buf;
    else t.ring.state_layout.block_table = buf;
    c128_compress_plan *cp = (c128_compress_plan *)buf;
    static c128_write_plan wp[PLAN_CAP];
    c128_prefill_plans plans = {cp, wp, 64, 1, 0, 0};
    const c128_status host = c128_plan_prefill(&t.ring, q, 2, 0, &plans);
    memcpy(buf, which ? t.score_table : t.table, (size_t)entries * 4);
    c128_device_plan_args a = {0};
    int64_t counts[2];
    int32_t status = -1;
    a.ring = t.ring, a.requests = q, a.num_requests = 2, a.compress = cp, a.write = wp, a.capacity = 64;
    a.counts = counts, a.status = &status, a.workspace = malloc(c128_plan_workspace_size(2));
    const c128_status device = c128_plan_prefill_device_host(&a);
    memcpy(buf, which ? t.score_table : t.table, (size_t)entries * 4); /* the prefill may have written over it */
    c128_decode_plan *dp = (c128_decode_plan *)buf;
    const c128_status host_decode = c128_plan_decode(&t.ring, q, 2, dp);
    c128_device_plan_args d = {0};
    d.ring = t.ring, d.requests = q, d.num_requests = 2, d.decode = dp, d.status = &status, d.workspace = a.workspace;
    const c128_status device_decode = c128_plan_decode_device_host(&d);
    cr_assert(host == C128_ERROR_ALIASED && device == C128_ERROR_ALIASED && host_decode == C128_ERROR_ALIASED &&
                  device_decode == C128_ERROR_ALIASED,
              "plans over the %s table: host prefill %s, device prefill %s, host decode %s, device decode %s",
              which ? "score" : "block", c128_status_string(host), c128_status_string(device),
              c128_status_string(host_decode), c128_status_string(device_decode));
    free(a.workspace), free(buf), tabled_ring_free(&t);
  }
}

/* c128_requests_from_lens: the engine's arrays as requests; NULL, a negative count and a
   decreasing query_start are refused; the device planner's rows from query_start[0] and its
   output rows' arguments. */
Test(cpu, layout_requests_from_lens) {
  const int32_t seq[3] = {300, 129, 7}, start[4] = {0, 100, 229, 230}, pool[3] = {9, 2, 4};
  c128_request q[3];
  memset(q, 0xAB, sizeof q);
  cr_assert_eq(c128_requests_from_lens(seq, start, pool, 3, q), C128_SUCCESS);
  const c128_request want[3] = {{9, 300, 100}, {2, 129, 129}, {4, 7, 1}};
  cr_assert(memcmp(q, want, sizeof q) == 0);
  cr_assert_eq(c128_requests_from_lens(seq, start, NULL, 3, q), C128_SUCCESS);
  cr_assert(q[0].pool_index == 0 && q[1].pool_index == 1 && q[2].pool_index == 2);
  cr_assert_eq(c128_requests_from_lens(seq, NULL, pool, 3, q), C128_SUCCESS); /* decode */
  cr_assert(q[0].extend_len == 1 && q[1].extend_len == 1 && q[2].extend_len == 1 && q[1].seq_len == 129);
  cr_assert_eq(c128_requests_from_lens(NULL, start, pool, 3, q), C128_ERROR_NULL_POINTER);
  cr_assert_eq(c128_requests_from_lens(seq, start, pool, 3, NULL), C128_ERROR_NULL_POINTER);
  cr_assert_eq(c128_requests_from_lens(seq, start, pool, -1, q), C128_ERROR_NEGATIVE_SIZE);
  cr_assert_eq(c128_requests_from_lens(NULL, NULL, NULL, 0, NULL), C128_SUCCESS);
  const int32_t down[4] = {0, 100, 99, 120};
  memcpy(q, want, sizeof q);
  cr_assert_eq(c128_requests_from_lens(seq, down, pool, 3, q), C128_ERROR_NEGATIVE_SIZE);
  cr_assert(memcmp(q, want, sizeof q) == 0, "a refused call wrote requests");
  const int32_t wide[2] = {INT32_MIN, INT32_MAX}, one[1] = {5}; /* a difference past int32 */
  cr_assert_eq(c128_requests_from_lens(one, wide, NULL, 1, q), C128_SUCCESS);
  cr_assert_eq(q[0].extend_len, INT32_MAX);
  /* the device planner reads the same arrays: a decreasing query_start is its NEGATIVE_SIZE */
  tabled_ring t;
  rng r = rng_fresh();
  tabled_ring_make(&r, &t, 9, 8, 0);
  static c128_compress_plan cp[PLAN_CAP];
  static c128_write_plan wp[PLAN_CAP];
  int64_t counts[2];
  int32_t status = -1;
  c128_device_plan_args a = {0};
  a.ring = t.ring, a.num_requests = 3, a.seq_lens = seq, a.query_start = down, a.pool_indices = pool;
  a.compress = cp, a.write = wp, a.capacity = PLAN_CAP, a.counts = counts, a.status = &status;
  a.workspace = malloc(c128_plan_workspace_size(3));
  cr_assert_eq(c128_plan_prefill_device_host(&a), C128_SUCCESS);
  cr_assert_eq(status, C128_ERROR_NEGATIVE_SIZE);
  a.query_start = NULL; /* prefill needs it */
  cr_assert_eq(c128_plan_prefill_device_host(&a), C128_ERROR_NULL_POINTER);
  /* rows from query_start[0]: a negative first row is NEGATIVE_SIZE; the output rows come in
     pairs, aligned, not aliasing a plan array, and need an entry for every input row */
  const int32_t below[4] = {-1, 99, 228, 229}, past[4] = {PLAN_CAP - 230, PLAN_CAP - 130, PLAN_CAP - 1, PLAN_CAP};
  const int32_t first[3] = {5, 50, 500};
  static int64_t index[PLAN_CAP + 1];
  a.query_start = below;
  cr_assert_eq(c128_plan_prefill_device_host(&a), C128_SUCCESS);
  cr_assert_eq(status, C128_ERROR_NEGATIVE_SIZE, "query_start[0] < 0: %s", c128_status_string(status));
  a.query_start = start, a.output_first = first;
  cr_assert_eq(c128_plan_prefill_device_host(&a), C128_ERROR_NULL_POINTER);
  a.output_first = NULL, a.output_index = index;
  cr_assert_eq(c128_plan_prefill_device_host(&a), C128_ERROR_NULL_POINTER);
  a.output_first = first, a.output_index = (int64_t *)((char *)index + 4);
  cr_assert_eq(c128_plan_prefill_device_host(&a), C128_ERROR_MISALIGNED);
  a.output_index = (int64_t *)(void *)cp;
  cr_assert_eq(c128_plan_prefill_device_host(&a), C128_ERROR_ALIASED);
  a.output_index = index;
  status = -1;
  cr_assert_eq(c128_plan_prefill_device_host(&a), C128_SUCCESS);
  cr_assert_eq(status, C128_SUCCESS, "%s", c128_status_string(status));
  a.query_start = past; /* the last row is PLAN_CAP - 1: fits; one more does not */
  cr_assert_eq(c128_plan_prefill_device_host(&a), C128_SUCCESS);
  cr_assert_eq(status, C128_SUCCESS, "%s", c128_status_string(status));
  a.capacity = PLAN_CAP - 1;
  cr_assert_eq(c128_plan_prefill_device_host(&a), C128_SUCCESS);
  cr_assert_eq(status, C128_ERROR_CAPACITY_TOO_SMALL, "%s", c128_status_string(status));
  /* rows past the 65536 a launch addresses refuse a request that has some, not an absent one */
  const int32_t none[1] = {0}, far[2] = {70000, 70000}, far_one[2] = {70000, 70001};
  a.output_first = NULL, a.output_index = NULL, a.capacity = PLAN_CAP, a.num_requests = 1;
  a.seq_lens = none, a.query_start = far;
  cr_assert_eq(c128_plan_prefill_device_host(&a), C128_SUCCESS);
  cr_assert_eq(status, C128_SUCCESS, "an absent request past row 65536: %s", c128_status_string(status));
  a.seq_lens = one, a.query_start = far_one;
  cr_assert_eq(c128_plan_prefill_device_host(&a), C128_SUCCESS);
  cr_assert_eq(status, C128_ERROR_TOO_MANY_ROWS, "a row past 65536: %s", c128_status_string(status));
  free(a.workspace), tabled_ring_free(&t);
}

/* ---- end to end: engines' layouts planned by the library ------------------------------------------ */
/* A small serving engine over one of the layouts: requests of up to E2E_POSITIONS tokens on a
   position-indexed table (row_shift = log2(B x stride): no position wraps), blocks handed out
   from a shuffled free list as sequences grow (a null block, or -1, elsewhere), write_all, biased
   scores. Every batch is planned by c128_plan_prefill / c128_plan_decode from the ring with the
   kernels' state layout, accepted by the checker, run (GPU: and on the host runner, which must
   agree), and then: every window it compressed matches the oracle over the request's committed
   tokens (each window once, in order), and the state equals, plane by plane, the one in which
   every committed token is at its rows and everything else (the null block included) is as
   poisoned. */
enum { E2E_POSITIONS = 512, E2E_SHIFT = 9, E2E_REQS = 3 };

typedef struct e2e_request {
  int32_t pool;
  int64_t len, windows;
  unsigned char *hist; /* [E2E_POSITIONS][2D] committed rows, input dtype */
} e2e_request;

typedef struct engine {
  const instance_entry *e;
  const c128_instance_info *f;
  backend be;
  rng r;
  store s, want;
  c128_ring ring;
  float *ape;
  e2e_request req[E2E_REQS];
  int32_t *free_list[2];
  int64_t nfree[2];
  int32_t unallocated;
  int by_index; /* output_index[r] = r, vLLM's per-token rows */
  size_t in_row;
  const char *name;
} engine;

static void engine_make(engine *g, const instance_entry *e, backend be, int block_rows, planes planes, int null_block,
                        int by_index, const char *name) {
  memset(g, 0, sizeof *g);
  g->e = e, g->f = e, g->be = be, g->r = rng_fresh(), g->by_index = by_index, g->name = name;
  const lay l = {block_rows, planes, 1, 1};
  const int64_t stride = E2E_POSITIONS / block_rows;
  g->s = store_make_shaped(e, &l, &g->r, 4, stride, E2E_SHIFT);
  g->unallocated = null_block ? 0 : -1;
  for (int t = 0; t < (planes == TWO_TABLES ? 2 : 1); ++t) {
    int32_t *table = t ? g->s.score_table : g->s.table;
    for (int64_t k = 0; k < 4 * stride; ++k) table[k] = g->unallocated;
    g->free_list[t] = malloc((size_t)g->s.blocks * sizeof(int32_t));
    for (int64_t b = null_block ? 1 : 0; b < g->s.blocks; ++b) g->free_list[t][g->nfree[t]++] = (int32_t)b;
    shuffle(&g->r, g->free_list[t], g->nfree[t]);
  }
  g->want = store_dup(&g->s);
  g->ring.state_pages = g->s.blocks, g->ring.write_all = 1, g->ring.state_layout = g->s.sl;
  g->ring.has_null_block = null_block, g->ring.null_block = 0;
  g->ape = ape_make(e->head_dim, &g->r);
  g->in_row = (size_t)e->row_elems * dtype_size(e->input_dtype);
  static const int32_t pools[E2E_REQS] = {2, 0, 3};
  for (int i = 0; i < E2E_REQS; ++i) {
    g->req[i].pool = pools[i];
    g->req[i].hist = rows_alloc(E2E_POSITIONS, e->head_dim, e->input_dtype);
    rows_fill(g->req[i].hist, E2E_POSITIONS, e->head_dim, e->input_dtype, &g->r, 30.0f);
  }
}

static void engine_free(engine *g) {
  for (int i = 0; i < E2E_REQS; ++i) {
    cr_assert_eq(g->req[i].windows, g->req[i].len / W, "%s: request %d: %lld of %lld windows checked", g->name, i,
                 (long long)g->req[i].windows, (long long)(g->req[i].len / W));
    free(g->req[i].hist);
  }
  free(g->free_list[0]), free(g->free_list[1]), free(g->ape);
  store_free(&g->want), store_free(&g->s);
}

/* The engine's allocation: every block of positions below len, in each table. */
static void engine_allocate(engine *g, int i, int64_t len) {
  for (int t = 0; t < (g->s.score_table ? 2 : 1); ++t) {
    int32_t *row = (t ? g->s.score_table : g->s.table) + g->req[i].pool * g->s.stride;
    for (int64_t col = 0; col * g->s.l.block_rows < len; ++col)
      if (row[col] == g->unallocated) {
        cr_assert_gt(g->nfree[t], 0);
        row[col] = g->free_list[t][--g->nfree[t]];
      }
  }
}

/* Window n of request i (its plan read buffer_len rows from the state) against the oracle. */
static void engine_check_window(engine *g, int i, int64_t n, int buffer_len, int64_t new_len, const void *out,
                                int64_t row, const char *what) {
  e2e_request *q = &g->req[i];
  cr_assert_eq(n, q->windows, "%s: request %d window %lld compressed, expected window %lld", what, i, (long long)n,
               (long long)q->windows);
  cr_assert((n + 1) * W <= new_len, "%s: request %d window %lld is not complete", what, i, (long long)n);
  double *ref = malloc((size_t)g->f->head_dim * sizeof *ref);
  oracle(g->f, 1, q->hist, n, buffer_len, q->hist, n * W, g->ape, ref);
  char name[200];
  snprintf(name, sizeof name, "%s: request %d window %lld (buffer_len %d)", what, i, (long long)n, buffer_len);
  check_output_row(out, (size_t)row, g->f->output_dtype, ref, g->f->head_dim, name, g->r.seed);
  q->windows++;
  free(ref);
}

/* Runs a planned batch: the checker accepts it; on the GPU the host runner repeats it. */
static void engine_run(engine *g, c128_decode_args *da, c128_prefill_args *pa, void *out, int64_t out_rows,
                       const char *what, int reverse) {
  char msg[200] = "";
  c128_plan_report rep = {0, 0, msg, sizeof msg};
  const c128_status cst = da ? c128_check_decode_plans(da, &rep) : c128_check_prefill_plans(pa, &rep);
  cr_assert_eq(cst, C128_SUCCESS, "%s: the checker refuses the planned batch: %s (seed %llu)", what, msg,
               (unsigned long long)g->r.seed);
  store cpu;
  void *cpu_out = NULL;
  const size_t out_bytes = (size_t)out_rows * (size_t)g->f->head_dim * dtype_size(g->f->output_dtype);
  if (g->be == BACKEND_GPU) cpu = store_dup(&g->s), cpu_out = clone_bytes(out, out_bytes);
  c128_status st = da ? run_decode(g->e, g->be, da, reverse) : run_prefill(g->e, g->be, pa, reverse);
  cr_assert_eq(st, C128_SUCCESS, "%s: %s", what, c128_status_string(st));
  if (g->be == BACKEND_GPU) {
    c128_decode_args dc;
    c128_prefill_args pc;
    if (da) dc = *da, dc.state = cpu.kv, dc.state_layout.score_plane = cpu.score, dc.output = cpu_out;
    else pc = *pa, pc.state = cpu.kv, pc.state_layout.score_plane = cpu.score, pc.output = cpu_out;
    st = da ? run_decode(g->e, BACKEND_CPU, &dc, 0) : run_prefill(g->e, BACKEND_CPU, &pc, 0);
    cr_assert_eq(st, C128_SUCCESS);
    store_expect_equal(&g->s, &cpu, "GPU vs host runner state", g->r.seed);
    double kv = 0.0;
    for (int i = 0; i < E2E_REQS; ++i)
      kv = fmax(kv, max_abs_kv(g->req[i].hist, E2E_POSITIONS, g->f->head_dim, g->f->input_dtype));
    check_gpu_output(out, cpu_out, (size_t)out_rows, g->f->output_dtype, g->f->head_dim, kv, "GPU vs host output",
                     g->r.seed);
    store_free(&cpu), free(cpu_out);
  }
}

/* The committed rows of the batch into the expected state, which the state must equal. */
static void engine_commit(engine *g, const int *reqs, const int64_t *new_len, int n, const char *what) {
  for (int k = 0; k < n; ++k) {
    e2e_request *q = &g->req[reqs[k]];
    for (int64_t pos = q->len; pos < new_len[k]; ++pos)
      store_put(&g->want, ((int64_t)q->pool << E2E_SHIFT) | pos, q->hist, g->f->input_dtype, pos, g->ape);
    q->len = new_len[k];
  }
  store_expect_equal(&g->s, &g->want, what, g->r.seed);
}

/* A prefill / extend batch: request reqs[k] grows by extend[k] tokens. */
static void engine_extend(engine *g, const int *reqs, const int *extend, int n) {
  const c128_instance_info *f = g->f;
  c128_request q[E2E_REQS];
  int64_t rows = 0, new_len[E2E_REQS], first[E2E_REQS];
  for (int k = 0; k < n; ++k) {
    e2e_request *r = &g->req[reqs[k]];
    new_len[k] = r->len + extend[k], first[k] = rows, rows += extend[k];
    engine_allocate(g, reqs[k], new_len[k]);
    q[k] = (c128_request){r->pool, (int32_t)new_len[k], extend[k]};
  }
  unsigned char *input = malloc((size_t)rows * g->in_row);
  for (int k = 0; k < n; ++k)
    memcpy(input + (size_t)first[k] * g->in_row, g->req[reqs[k]].hist + (size_t)g->req[reqs[k]].len * g->in_row,
           (size_t)extend[k] * g->in_row);
  c128_compress_plan *cp = malloc((size_t)rows * sizeof *cp);
  c128_write_plan *wp = malloc((size_t)rows * sizeof *wp);
  c128_prefill_plans plans = {cp, wp, rows, 0, 0, 0};
  c128_status st = c128_plan_prefill(&g->ring, q, n, 0, &plans);
  cr_assert_eq(st, C128_SUCCESS, "%s: the planner refuses the batch: %s", g->name, c128_status_string(st));
  cr_assert_eq(plans.num_write, rows, "%s: write_all on a position-indexed table persists every new token", g->name);
  const int64_t out_rows = g->by_index ? rows : (plans.num_compress ? plans.num_compress : 1);
  const size_t out_bytes = (size_t)out_rows * (size_t)f->head_dim * dtype_size(f->output_dtype);
  void *out = malloc(out_bytes);
  poison(out, out_bytes);
  int64_t *index = NULL;
  if (g->by_index) {
    index = malloc((size_t)rows * sizeof *index);
    for (int64_t k = 0; k < rows; ++k) index[k] = k;
  }
  c128_prefill_args a = {0};
  a.head_dim = f->head_dim, a.state_dtype = f->state_dtype, a.input_dtype = f->input_dtype;
  a.output_dtype = f->output_dtype, a.state = g->s.kv, a.state_pages = g->s.blocks, a.state_layout = g->s.sl;
  a.input = input, a.input_rows = rows, a.ape = g->ape, a.output = out, a.output_rows = out_rows;
  a.compress_plans = cp, a.num_compress = plans.num_compress, a.write_plans = wp, a.num_write = plans.num_write;
  a.output_index = index;
  char what[120];
  snprintf(what, sizeof what, "%s extend", g->name);
  engine_run(g, NULL, &a, out, out_rows, what, 1);
  for (int64_t c = 0; c < plans.num_compress; ++c) {
    int k = 0;
    while (k + 1 < n && first[k + 1] <= cp[c].ragged_id) ++k;
    engine_check_window(g, reqs[k], cp[c].seq_len / W - 1, cp[c].buffer_len, new_len[k], out,
                        g->by_index ? cp[c].ragged_id : c, what);
  }
  engine_commit(g, reqs, new_len, n, what);
  free(input), free(cp), free(wp), free(out), free(index);
}

/* One decode step of requests reqs (batch order). */
static void engine_decode(engine *g, const int *reqs, int n, int step) {
  const c128_instance_info *f = g->f;
  c128_request q[E2E_REQS];
  int64_t new_len[E2E_REQS];
  unsigned char *input = malloc((size_t)n * g->in_row);
  for (int k = 0; k < n; ++k) {
    e2e_request *r = &g->req[reqs[k]];
    new_len[k] = r->len + 1;
    engine_allocate(g, reqs[k], new_len[k]);
    q[k] = (c128_request){r->pool, (int32_t)new_len[k], 1};
    memcpy(input + (size_t)k * g->in_row, r->hist + (size_t)r->len * g->in_row, g->in_row);
  }
  c128_decode_plan dp[E2E_REQS];
  const c128_status st = c128_plan_decode(&g->ring, q, n, dp);
  cr_assert_eq(st, C128_SUCCESS, "%s: the decode planner refuses step %d: %s", g->name, step, c128_status_string(st));
  const size_t out_bytes = (size_t)n * (size_t)f->head_dim * dtype_size(f->output_dtype);
  void *out = malloc(out_bytes);
  poison(out, out_bytes);
  const int64_t index[E2E_REQS] = {2, 0, 1}; /* output rows by index, or request b's row b */
  c128_decode_args a = {0};
  a.head_dim = f->head_dim, a.state_dtype = f->state_dtype, a.input_dtype = f->input_dtype;
  a.output_dtype = f->output_dtype, a.state = g->s.kv, a.state_pages = g->s.blocks, a.state_layout = g->s.sl;
  a.input = input, a.batch = n, a.ape = g->ape, a.output = out, a.output_rows = n, a.plans = dp;
  a.output_index = g->by_index && n == E2E_REQS ? index : NULL;
  char what[120];
  snprintf(what, sizeof what, "%s decode step %d", g->name, step);
  engine_run(g, &a, NULL, out, n, what, step % 2);
  for (int k = 0; k < n; ++k)
    if (new_len[k] % W == 0)
      engine_check_window(g, reqs[k], new_len[k] / W - 1, W - 1, new_len[k], out,
                          a.output_index ? a.output_index[k] : k, what);
  engine_commit(g, reqs, new_len, n, what);
  free(input), free(out);
}

/* Prefill, decode to request 0's next boundary, an extend that crosses windows, decode to the
   table's last position. */
static void engine_script(engine *g) {
  const int all[E2E_REQS] = {1, 0, 2};
  const int prefill[E2E_REQS] = {130, 300, 77};
  engine_extend(g, all, prefill, E2E_REQS);
  int step = 0;
  while (g->req[0].len % W != 0) engine_decode(g, all, E2E_REQS, step++);
  const int extend[E2E_REQS] = {170, 100, 95};
  engine_extend(g, all, extend, E2E_REQS);
  const int two[2] = {0, 2};
  while (g->req[0].len < E2E_POSITIONS) engine_decode(g, two, 2, step++);
}

/* vLLM: blocks of 8, block 0 the null block, one plane, output rows per token. */
static void e2e_vllm(backend be) {
  require_backend(be);
  engine g;
  engine_make(&g, instance(C128_INSTANCE_h512_f32_f32_f32), be, 8, ONE_PLANE, 1, 1, "vLLM-like");
  engine_script(&g);
  engine_free(&g);
}
/* TensorRT-LLM: pages of 128 (and 256) tokens, kv and scores in two planes of two tables, compact rows. */
static void e2e_trt(backend be, int block_rows) {
  require_backend(be);
  engine g;
  engine_make(&g, instance(C128_INSTANCE_h512_bf16_f32_f32), be, block_rows, TWO_TABLES, 0, 0, "TensorRT-LLM-like");
  engine_script(&g);
  engine_free(&g);
}
Test(cpu, layout_end_to_end_vllm) { e2e_vllm(BACKEND_CPU); }
Test(gpu, layout_end_to_end_vllm) { e2e_vllm(BACKEND_GPU); }
Test(cpu, layout_end_to_end_tensorrt) { e2e_trt(BACKEND_CPU, 128), e2e_trt(BACKEND_CPU, 256); }
Test(gpu, layout_end_to_end_tensorrt) { e2e_trt(BACKEND_GPU, 128), e2e_trt(BACKEND_GPU, 256); }

/* ---- writes named by an engine's per-token arrays ------------------------------------------------ */
/* c128_prefill_args.write_slots / write_positions (vLLM's slot_mapping and positions), for every
   instance: input row t lands at physical row slots[t], its score plus ape row positions[t] mod 128
   where scores are biased, whatever the slot's offset in its block; negative slots and the first
   row past the state are skipped, and every other byte of the state (NaN, with canaries around
   it) stays as it was. One plane and two, raw and biased scores, blocks of 8, 64 and 256 rows. */
static void slots_case(const instance_entry *e, backend be, int block_rows, int two_planes, int biased, rng *r) {
  const int D = e->head_dim;
  const c128_dtype sd = e->state_dtype, in = e->input_dtype;
  const int64_t blocks = block_rows >= 96 ? 1 : 96 / block_rows, rows = blocks * block_rows, T = 48;
  const size_t width = (size_t)(two_planes ? D : 2 * D), bytes = (size_t)rows * width * dtype_size(sd);
  void *state = guarded_alloc(bytes), *score = two_planes ? guarded_alloc(bytes) : NULL;
  poison(state, bytes);
  if (score) poison(score, bytes);
  void *want = clone_bytes(state, bytes), *want_score = score ? clone_bytes(score, bytes) : NULL;
  void *input = rows_alloc((size_t)T, D, in);
  rows_fill(input, (size_t)T, D, in, r, 1.0f);
  float *ape = ape_make(D, r);
  int64_t *slots = malloc((size_t)T * sizeof *slots), *pos = malloc((size_t)T * sizeof *pos);
  int64_t *order = malloc((size_t)rows * sizeof *order);
  for (int64_t i = 0; i < rows; ++i) order[i] = i;
  for (int64_t i = rows - 1; i > 0; --i) {
    const int64_t j = rng_below(r, i + 1), v = order[i];
    order[i] = order[j], order[j] = v;
  }
  for (int64_t t = 0; t < T; ++t) {
    slots[t] = t % 7 == 3 ? -1 - rng_below(r, 5) : t % 11 == 5 ? rows : order[t]; /* T <= rows */
    pos[t] = rng_below(r, (int64_t)1 << 20);
    if (slots[t] < 0 || slots[t] >= rows) continue;
    for (int c = 0; c < 2 * D; ++c) {
      float v = elem_get(input, (size_t)t * 2 * (size_t)D + (size_t)c, in);
      if (c >= D && biased) v = v + ape[(pos[t] % W) * D + (c - D)];
      if (!two_planes || c < D) elem_set(want, (size_t)slots[t] * width + (size_t)c, sd, v);
      else elem_set(want_score, (size_t)slots[t] * width + (size_t)(c - D), sd, v);
    }
  }
  float out[1];
  c128_prefill_args a;
  memset(&a, 0, sizeof a);
  a.head_dim = D, a.state_dtype = sd, a.input_dtype = in, a.output_dtype = e->output_dtype;
  a.state = state, a.state_pages = blocks, a.input = input, a.input_rows = T, a.ape = ape, a.output = out;
  a.num_write = T, a.write_slots = slots, a.write_positions = pos;
  a.state_layout.block_rows = block_rows, a.state_layout.score_biased = biased, a.state_layout.score_plane = score;
  const c128_status st = run_prefill(e, be, &a, (int)(r->seed & 1));
  char what[160];
  snprintf(what, sizeof what, "%s: write slots, blocks of %d, %s, %s scores", e->name, block_rows,
           two_planes ? "two planes" : "one plane", biased ? "biased" : "raw");
  cr_assert_eq(st, C128_SUCCESS, "%s: %s (seed %llu)", what, c128_status_string(st), (unsigned long long)r->seed);
  check_rows_equal(state, want, (size_t)rows, width * dtype_size(sd), what, r->seed);
  guarded_check(state, bytes, what, r->seed);
  if (score) {
    check_rows_equal(score, want_score, (size_t)rows, width * dtype_size(sd), what, r->seed);
    guarded_check(score, bytes, what, r->seed);
  }
  guarded_free(state), guarded_free(score);
  free(want), free(want_score), free(input), free(ape), free(slots), free(pos), free(order);
}

static void write_slots_every_instance(backend be) {
  require_backend(be);
  rng r = rng_fresh();
  for (int id = 0; id < C128_INSTANCE_COUNT; ++id) {
    const instance_entry *e = instance((c128_instance_id)id);
    const int block_rows[3] = {8, 64, 256};
    for (int k = 0; k < 3; ++k) slots_case(e, be, block_rows[k], k == 1, k != 2, &r);
  }
}
Test(cpu, layout_write_slots) { write_slots_every_instance(BACKEND_CPU); }
Test(gpu, layout_write_slots) { write_slots_every_instance(BACKEND_GPU); }

/* What the launch refuses of write slots (and the sizes at -1, past the limit and 0; garbage
   slots and positions, which the kernel skips), and what the checker names: two tokens with one
   slot (the later one), a slot past the state. */
Test(cpu, layout_write_slots_refusals) {
  const instance_entry *e = instance(C128_INSTANCE_h128_f32_f32_f32);
  const int D = e->head_dim;
  enum { T = 8, BLOCKS = 2 };
  rng r = rng_fresh();
  float *state = rows_alloc((size_t)BLOCKS * 8, D, C128_F32), *input = rows_alloc(T, D, C128_F32);
  rows_fill(state, (size_t)BLOCKS * 8, D, C128_F32, &r, 1.0f);
  rows_fill(input, T, D, C128_F32, &r, 1.0f);
  float *ape = ape_make(D, &r);
  int64_t slots[T], pos[T];
  for (int t = 0; t < T; ++t) slots[t] = t, pos[t] = 100 + t;
  c128_write_plan plan[1] = {{0, 0}};
  c128_prefill_args a;
  memset(&a, 0, sizeof a);
  a.head_dim = D, a.state_dtype = a.input_dtype = a.output_dtype = C128_F32;
  a.state = state, a.state_pages = BLOCKS, a.input = input, a.input_rows = T, a.ape = ape;
  a.num_write = T, a.write_slots = slots, a.write_positions = pos;
  a.state_layout.block_rows = 8, a.state_layout.score_biased = 1;
  void *before = clone_bytes(state, (size_t)BLOCKS * 8 * 2 * (size_t)D * sizeof(float));
  c128_prefill_args b = a;
  b.write_plans = plan;
  cr_expect_eq(e->prefill_host(&b, NULL), C128_ERROR_INVALID_PLAN, "write plans and write slots together");
  b = a, b.write_positions = NULL;
  cr_expect_eq(e->prefill_host(&b, NULL), C128_ERROR_NULL_POINTER, "write slots without positions");
  b = a, b.write_slots = (const int64_t *)((const char *)slots + 4);
  cr_expect_eq(e->prefill_host(&b, NULL), C128_ERROR_MISALIGNED, "misaligned write slots");
  b = a, b.layout.size = 2, b.layout.pages_per_rank = BLOCKS; /* today's layout, sharded */
  memset(&b.state_layout, 0, sizeof b.state_layout);
  cr_expect_eq(e->prefill_host(&b, NULL), C128_ERROR_INVALID_STATE_LAYOUT, "write slots on a sharded state");
  b = a, b.write_positions = (const int64_t *)state;
  cr_expect_eq(e->prefill_host(&b, NULL), C128_ERROR_ALIASED, "positions inside the state");
  const int64_t sizes[3] = {-1, C128_MAX_PREFILL_ROWS + 1, 0}; /* refused, refused, nothing to do */
  const c128_status size_status[3] = {C128_ERROR_NEGATIVE_SIZE, C128_ERROR_TOO_MANY_PLANS, C128_SUCCESS};
  for (int k = 0; k < 3; ++k) {
    b = a, b.num_write = sizes[k];
    cr_expect_eq(e->prefill_host(&b, NULL), size_status[k], "num_write %lld", (long long)sizes[k]);
  }
  /* Garbage values are skipped in the kernel: slots far outside the state, any position. */
  int64_t wild[T], wild_pos[T];
  for (int t = 0; t < T; ++t)
    wild[t] = t % 2 ? INT64_MAX - t : INT64_MIN + t, wild_pos[t] = t % 2 ? INT64_MIN + t : INT64_MAX - t;
  b = a, b.write_slots = wild, b.write_positions = wild_pos;
  cr_expect_eq(e->prefill_host(&b, NULL), C128_SUCCESS, "garbage slots and positions");
  check_rows_equal(state, before, (size_t)BLOCKS * 8, 2 * (size_t)D * sizeof(float), "state after refusals", r.seed);
  c128_plan_report rep = {0, C128_PLAN_DECODE, NULL, 0};
  cr_expect_eq(c128_check_prefill_plans(&a, &rep), C128_SUCCESS);
  cr_expect_eq(rep.index, -1);
  int64_t twice[T], past[T]; /* token 5 writes token 2's row; token 6 the first row past the state */
  memcpy(twice, slots, sizeof slots), memcpy(past, slots, sizeof slots);
  twice[5] = 2, past[6] = BLOCKS * 8;
  const int64_t *named[2] = {twice, past};
  for (int k = 0; k < 2; ++k) {
    b = a, b.write_slots = named[k];
    cr_expect_eq(c128_check_prefill_plans(&b, &rep), C128_ERROR_INVALID_PLAN);
    cr_expect(rep.index == 5 + k && rep.kind == C128_PLAN_WRITE, "named write %lld", (long long)rep.index);
  }
  free(state), free(input), free(ape), free(before);
}
