/* The serving simulator of scenario.h. */
#include "scenario.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { W = REF_WINDOW, PLAN_POISON = 0xA5, OUT_POISON = 0xFF };

/* ---- SPEC 5, written out again ------------------------------------------------------------ */

/* With a block table (DESIGN 5.9) plans name logical rows: the request ring with R = 2^row_shift. */
static int spec_tabled(const c128_ring *ring) { return ring->state_layout.block_table != NULL; }

static int64_t spec_ring_tokens(const c128_ring *ring) {
  if (spec_tabled(ring)) return (int64_t)1 << ring->state_layout.row_shift;
  return ring->ring_tokens ? ring->ring_tokens : W;
}

/* The first persisted position of a request of seq_len seq (before clamping to its prefix):
   min(floor(seq / 128) * 128, seq - pad), or with write_all the last R tokens (DESIGN 5.11). */
static int64_t spec_first_write(const c128_ring *ring, int64_t seq) {
  const int64_t R = spec_ring_tokens(ring), pad = ring->speculative ? R - W + 2 : 0;
  if (ring->write_all) return seq - R;
  const int64_t boundary = seq - seq % W;
  return boundary < seq - pad ? boundary : seq - pad;
}

c128_status spec_page(const c128_ring *ring, int32_t pool_index, int64_t pos, int32_t *page) {
  const int64_t R = spec_ring_tokens(ring), k = (pos % R) / W;
  if (pool_index < 0) return C128_ERROR_POOL_INDEX_OUT_OF_RANGE;
  if (spec_tabled(ring)) { /* a logical page; its blocks are checked where a plan reads or writes them */
    if (pool_index >= ring->state_layout.table_rows) return C128_ERROR_POOL_INDEX_OUT_OF_RANGE;
    *page = (int32_t)((int64_t)pool_index * (R / W) + k);
    return C128_SUCCESS;
  }
  if (ring->page_table) {
    if (pool_index >= ring->num_pool) return C128_ERROR_POOL_INDEX_OUT_OF_RANGE;
    const int64_t entry = ring->page_table[pool_index * ring->page_table_stride + k];
    if (entry < 0 || entry >= ring->state_pages) return C128_ERROR_PAGE_OUT_OF_RANGE;
    *page = (int32_t)entry;
    return C128_SUCCESS;
  }
  const int64_t p = (int64_t)pool_index * (R / W) + k; /* request ring; legacy is R = 128 */
  if (p >= ring->state_pages) return C128_ERROR_POOL_INDEX_OUT_OF_RANGE;
  *page = (int32_t)p;
  return C128_SUCCESS;
}

static c128_status spec_slot(const c128_ring *ring, int32_t pool_index, int64_t pos, int32_t *slot) {
  int32_t page;
  const c128_status st = spec_page(ring, pool_index, pos, &page);
  if (st == C128_SUCCESS) *slot = page * W + (int32_t)(pos % W);
  return st;
}

/* With a block table (DESIGN 5.11): the block of every position lo .. hi - 1 of pool row rid
   (column (pos mod R) / B of its row) exists in the row, and in every table it is allocated
   (not negative, not the null block) and inside the state. pool_index is a checked one. */
static c128_status spec_blocks(const c128_ring *ring, int32_t pool_index, int64_t lo, int64_t hi) {
  const c128_state_layout *l = &ring->state_layout;
  if (!spec_tabled(ring)) return C128_SUCCESS;
  const int64_t R = spec_ring_tokens(ring), B = l->block_rows ? l->block_rows : W;
  const int32_t *tables[2] = {l->block_table, l->score_block_table};
  for (int64_t pos = lo; pos < hi; ++pos) {
    const int64_t column = (pos % R) / B;
    if (column >= l->table_stride) return C128_ERROR_PAGE_OUT_OF_RANGE;
    for (int t = 0; t < 2; ++t) {
      if (!tables[t]) continue;
      const int32_t block = tables[t][pool_index * l->table_stride + column];
      if (block < 0 || (ring->has_null_block && block == ring->null_block)) return C128_ERROR_BLOCK_MISSING;
      if (block >= ring->state_pages) return C128_ERROR_PAGE_OUT_OF_RANGE;
    }
  }
  return C128_SUCCESS;
}

/* Every request is checked before any plan is built; compress events are enumerated by window
   end and writes by position range (the closed forms of SPEC 5), then copied out if they fit. */
/* What holds the row `row` a plan names in table `t` (0: kv, 1: the score table): its page, or with
   a block table (DESIGN 5.11) its block, t << 31 | block, and the table column it serves. */
static int64_t spec_part(const c128_ring *ring, int64_t row, int t, int64_t *chunk) {
  const c128_state_layout *l = &ring->state_layout;
  const int64_t R = spec_ring_tokens(ring);
  if (!spec_tabled(ring)) return *chunk = -1, row / W; /* the page; its chunk comes from the position */
  const int64_t B = l->block_rows ? l->block_rows : W, column = (row % R) / B;
  *chunk = column;
  return (int64_t)t << 31 | (t ? l->score_block_table : l->block_table)[(row / R) * l->table_stride + column];
}
static int spec_tables(const c128_ring *ring) {
  return spec_tabled(ring) && ring->state_layout.score_block_table ? 2 : 1;
}
/* Pages of different requests are distinct, and so are the pages of one request's ring chunks:
   no state page may be written by two requests of one batch, or for two chunks of one request
   (the write plans of request i are contiguous, in batch order). With a block table the same of
   the blocks in each table and the table columns. */
static c128_status spec_pages_unshared(const c128_write_plan *wp, int64_t nw, const c128_request *reqs, int64_t n,
                                       const c128_ring *ring) {
  int64_t *owner = malloc((size_t)(nw + 1) * sizeof *owner), *chunk = malloc((size_t)(nw + 1) * sizeof *chunk);
  cr_assert(owner && chunk);
  const int64_t R = spec_ring_tokens(ring);
  int64_t k = 0;
  for (int64_t i = 0; i < n; ++i) { /* the same count as the planner's write loop */
    const int64_t seq = reqs[i].seq_len, prefix = seq - reqs[i].extend_len, first = spec_first_write(ring, seq);
    for (int64_t pos = first > prefix ? first : prefix; pos < seq; ++pos) owner[k] = i, chunk[k++] = (pos % R) / W;
  }
  c128_status st = C128_SUCCESS;
  for (int t = 0; t < spec_tables(ring); ++t)
    for (int64_t a = 0; a < nw && st == C128_SUCCESS; ++a)
      for (int64_t b = a + 1; b < nw; ++b) {
        int64_t ca, cb;
        const int64_t pa = spec_part(ring, wp[a].write_loc, t, &ca), pb = spec_part(ring, wp[b].write_loc, t, &cb);
        if (spec_tabled(ring)) chunk[a] = ca, chunk[b] = cb;
        if ((owner[a] != owner[b] || chunk[a] != chunk[b]) && pa == pb) {
          st = C128_ERROR_PAGE_SHARED;
          break;
        }
      }
  free(owner), free(chunk);
  return st;
}

c128_status spec_plan_prefill(const c128_ring *ring, const c128_request *reqs, int64_t n, int32_t verify,
                              int64_t capacity, c128_compress_plan *compress, int64_t *num_compress,
                              c128_write_plan *write, int64_t *num_write) {
  const int64_t R = spec_ring_tokens(ring);
  const int64_t max_drafts = ring->speculative ? R - W + 2 : 1;
  int64_t total = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (reqs[i].seq_len < 0 || reqs[i].extend_len < 0) return C128_ERROR_NEGATIVE_SIZE;
    if (reqs[i].extend_len == 0) return C128_ERROR_EMPTY_EXTEND;
    if (reqs[i].extend_len > reqs[i].seq_len) return C128_ERROR_EXTEND_EXCEEDS_SEQ;
    if (verify && reqs[i].extend_len > max_drafts) return C128_ERROR_TOO_MANY_DRAFTS;
    total += reqs[i].extend_len;
  }
  if (total > C128_MAX_PREFILL_ROWS) return C128_ERROR_TOO_MANY_ROWS;
  c128_compress_plan *cp = malloc((size_t)(total + 1) * sizeof *cp);
  c128_write_plan *wp = malloc((size_t)(total + 1) * sizeof *wp);
  cr_assert(cp && wp);
  int64_t nc = 0, nw = 0, base = 0;
  c128_status st = C128_SUCCESS;
  for (int64_t i = 0; i < n && st == C128_SUCCESS; ++i) {
    const int32_t rid = reqs[i].pool_index;
    const int64_t seq = reqs[i].seq_len, prefix = seq - reqs[i].extend_len;
    /* windows whose last token is new: ends e = 128m - 1 with prefix <= e < seq */
    for (int64_t end = (prefix / W + 1) * W - 1; end < seq && st == C128_SUCCESS; end += W) {
      const int64_t j = end - prefix;
      c128_compress_plan c;
      memset(&c, 0, sizeof c);
      c.seq_len = (uint32_t)(end + 1);
      c.ragged_id = (uint16_t)(base + j);
      c.buffer_len = (uint16_t)(j < W - 1 ? W - 1 - j : 0);
      if ((st = spec_page(ring, rid, end, &c.read_page_1)) == C128_SUCCESS)
        st = spec_page(ring, rid, end >= W ? end - W : 0, &c.read_page_0);
      /* the window's rows before the batch are read from the state */
      if (st == C128_SUCCESS) st = spec_blocks(ring, rid, end - (W - 1), prefix);
      cp[nc++] = c;
    }
    /* persisted: positions >= min(floor(seq / 128) * 128, seq - pad), or the last R (write_all) */
    const int64_t first = spec_first_write(ring, seq);
    for (int64_t pos = first > prefix ? first : prefix; pos < seq && st == C128_SUCCESS; ++pos) {
      c128_write_plan w;
      w.ragged_id = (uint32_t)(base + pos - prefix);
      st = spec_slot(ring, rid, pos, &w.write_loc);
      wp[nw++] = w;
    }
    if (st == C128_SUCCESS) st = spec_blocks(ring, rid, first > prefix ? first : prefix, seq);
    base += reqs[i].extend_len;
  }
  if (st == C128_SUCCESS && (nc > capacity || nw > capacity)) st = C128_ERROR_CAPACITY_TOO_SMALL;
  if (st == C128_SUCCESS) st = spec_pages_unshared(wp, nw, reqs, n, ring);
  if (st == C128_SUCCESS) {
    memcpy(compress, cp, (size_t)nc * sizeof *cp);
    memcpy(write, wp, (size_t)nw * sizeof *wp);
    *num_compress = nc;
    *num_write = nw;
  }
  free(cp);
  free(wp);
  return st;
}

c128_status spec_plan_decode(const c128_ring *ring, const c128_request *reqs, int64_t n, c128_decode_plan *plans) {
  for (int64_t b = 0; b < n; ++b) {
    c128_decode_plan d = {0, -1, -1, -1};
    if (reqs[b].seq_len < 0) return C128_ERROR_NEGATIVE_SIZE;
    if (reqs[b].seq_len > 0) {
      const int64_t p = reqs[b].seq_len - 1;
      c128_status st = spec_slot(ring, reqs[b].pool_index, p, &d.write_loc);
      if (st == C128_SUCCESS) st = spec_page(ring, reqs[b].pool_index, p >= W ? p - W : 0, &d.read_page_0);
      /* the new token's row, and at a boundary the 127 window rows before it */
      if (st == C128_SUCCESS) st = spec_blocks(ring, reqs[b].pool_index, p % W == W - 1 ? p - (W - 1) : p, p + 1);
      if (st != C128_SUCCESS) return st;
      d.seq_len = (uint32_t)reqs[b].seq_len;
      d.read_page_1 = d.write_loc / W;
    }
    plans[b] = d;
  }
  for (int t = 0; t < spec_tables(ring); ++t) /* two requests never write one page (or block) */
    for (int64_t a = 0; a < n; ++a)
      for (int64_t b = a + 1; b < n; ++b) {
        int64_t chunk;
        if (plans[a].seq_len && plans[b].seq_len &&
            spec_part(ring, plans[a].write_loc, t, &chunk) == spec_part(ring, plans[b].write_loc, t, &chunk))
          return C128_ERROR_PAGE_SHARED;
      }
  /* With blocks of fewer than 128 rows a boundary window reads blocks other than its new row's, in
     the launch that writes every new row: none of them may be a block the batch writes (a block
     nobody writes may be read by any request). */
  const int64_t B = ring->state_layout.block_rows ? ring->state_layout.block_rows : W;
  for (int64_t a = 0; a < n && spec_tabled(ring) && B < W; ++a) {
    if (!plans[a].seq_len || plans[a].write_loc % W != W - 1) continue;
    for (int64_t row = (int64_t)plans[a].read_page_1 * W; row < plans[a].write_loc; ++row) {
      if (row / B == plans[a].write_loc / B) continue; /* the new row's own block */
      for (int t = 0; t < spec_tables(ring); ++t)
        for (int64_t b = 0; b < n; ++b) {
          int64_t chunk;
          if (plans[b].seq_len && spec_part(ring, row, t, &chunk) == spec_part(ring, plans[b].write_loc, t, &chunk))
            return C128_ERROR_PAGE_SHARED;
        }
    }
  }
  return C128_SUCCESS;
}

/* ---- the simulator ------------------------------------------------------------------------ */

typedef struct request {
  int live, pool_index;
  int lost;                /* scen_evict took blocks from it: refused batches only from then on */
  unsigned char *withheld; /* [tables][stride]: entries scen_evict emptied, which stay empty */
  int64_t len, cap, windows_done;
  int64_t held_from;      /* write_all: every committed position from here on is still in the ring */
  unsigned char *history; /* [cap][2D] committed rows, input dtype */
  float *outputs;         /* keep_outputs: [cap / 128][D] */
} request;

struct scenario {
  scen_config cfg;
  c128_instance_info f;
  rng r;
  c128_ring ring;
  c128_state_layout layout; /* what the launches get: host pointers (the GPU backend swaps them) */
  int32_t *page_table;
  int64_t pages; /* without a block table: the planner's 128-row pages */
  int64_t R, B;  /* ring tokens (with a table 2^row_shift), rows per block */
  int tabled, planes, tables;
  int64_t blocks, rows;    /* physical blocks of every plane, and their rows (blocks * B) */
  int64_t stride, columns; /* table: entries per row, and how many of them positions reach */
  int32_t *table[2];       /* table: [num_pool][stride]; table[1] the score plane's own */
  int32_t *free_blocks[2]; /* per table: blocks nobody holds */
  int64_t num_free[2];
  size_t state_row, half, plane_row[2], plane_bytes[2], input_row, out_row;
  unsigned char *state[2];  /* CPU: the state itself; GPU: its copy after the last batch */
  unsigned char *expect[2]; /* the state as the plans say it must be (equal to state between batches) */
  float *ape;
  request *reqs;
  int num_reqs, cap_reqs;
  int *pool_owner; /* request per pool row, -1 = free */
  scen_stats stats;
  float *window_rows; /* oracle scratch: [128][2D] */
  float *window_ape;  /* the ape the oracle adds to each window row: [128][D] */
  unsigned char *row_tmp;
  double *ref;
  double max_kv; /* largest |kv| of any row drawn so far: bounds every window's */
  device_buffer d_state[2], d_table[2], d_index, d_input, d_ape, d_out, d_plans_a, d_plans_b;
};

static void *xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  cr_assert_not_null(p);
  return p;
}

/* 16-byte aligned (plan structs), poisoned. */
static void *plan_alloc(size_t bytes) {
  const size_t rounded = (bytes + 15) / 16 * 16;
  void *p = aligned_alloc(16, rounded ? rounded : 16);
  cr_assert_not_null(p);
  memset(p, PLAN_POISON, rounded ? rounded : 16);
  return p;
}

static int all_bytes(const void *p, size_t bytes, unsigned char value) {
  for (size_t i = 0; i < bytes; ++i)
    if (((const unsigned char *)p)[i] != value) return 0;
  return 1;
}

static int is_pow2(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

/* A table entry that names no block: negative, or the null block (block 0) where there is one. */
static int missing(const scenario *s, int32_t block) { return block < 0 || (s->cfg.storage.null_block && block == 0); }
static int32_t missing_entry(const scenario *s) { return s->cfg.storage.null_block ? 0 : -1; }

/* The physical row of logical row `logical` in the plane table t maps (without a table, logical
   rows are physical), or -1 where its block is missing. */
static int64_t physical(const scenario *s, int t, int64_t logical) {
  cr_assert(logical >= 0);
  if (!s->tabled) {
    cr_assert(logical < s->rows, "row %lld outside the state's %lld rows", (long long)logical, (long long)s->rows);
    return logical;
  }
  const int64_t row = logical >> s->cfg.storage.row_shift, at = logical & (s->R - 1), column = at / s->B;
  cr_assert(row < s->cfg.num_pool && column < s->stride);
  const int32_t block = s->table[t][row * s->stride + column];
  if (missing(s, block)) return -1;
  cr_assert(block < s->blocks);
  return (int64_t)block * s->B + at % s->B;
}

/* The kv and score halves of a physical row (kv row, score row: the same row with one plane). */
static unsigned char *kv_at(const scenario *s, unsigned char *const *planes, int64_t row) {
  return planes[0] + (size_t)row * s->plane_row[0];
}
static unsigned char *score_at(const scenario *s, unsigned char *const *planes, int64_t row) {
  return s->planes == 2 ? planes[1] + (size_t)row * s->half : planes[0] + (size_t)row * s->plane_row[0] + s->half;
}

/* Input row `row` as the kernels store it (kv | score in the state dtype): converted, and with a
   biased state the score first has ape's row `slot` added, the one f32 add a window forms from
   an input row, then one rounding to the state dtype (DESIGN 5.9). */
static void stored_row(const scenario *s, const void *rows, size_t row, int64_t slot, void *dst) {
  const int D = s->f.head_dim;
  if (!s->cfg.storage.biased) {
    row_to_state(rows, row, s->f.input_dtype, dst, s->f.state_dtype, D);
    return;
  }
  const size_t base = row * 2 * (size_t)D;
  for (int c = 0; c < D; ++c) elem_set(dst, (size_t)c, s->f.state_dtype, elem_get(rows, base + c, s->f.input_dtype));
  for (int c = 0; c < D; ++c) {
    const float sum = elem_get(rows, base + D + c, s->f.input_dtype) + s->ape[slot * D + c];
    elem_set(dst, (size_t)D + (size_t)c, s->f.state_dtype, sum);
  }
}

/* Block pool: a random free block into every table's entry of a column that has none. */
static void take_block(scenario *s, int t, int32_t *entry) {
  cr_assert(s->num_free[t] > 0, "the block pool is exhausted (seed %llu)", (unsigned long long)s->r.seed);
  const int64_t k = rng_below(&s->r, s->num_free[t]);
  *entry = s->free_blocks[t][k];
  s->free_blocks[t][k] = s->free_blocks[t][--s->num_free[t]];
  s->stats.blocks_taken++;
}
static void give_block(scenario *s, int t, int32_t *entry) {
  if (missing(s, *entry)) return;
  s->free_blocks[t][s->num_free[t]++] = *entry;
  *entry = missing_entry(s);
}

/* The engine's allocation: the blocks of positions lo .. hi - 1 of q exist before the batch
   (except those scen_evict withholds). */
static void allocate(scenario *s, const request *q, int64_t lo, int64_t hi) {
  if (!s->tabled) return;
  for (int64_t pos = lo; pos < hi; pos = (pos / s->B + 1) * s->B) {
    const int64_t column = (pos % s->R) / s->B;
    cr_assert(column < s->stride,
              "position %lld is past what a table row maps (%lld columns of %lld rows): the scenario outgrew "
              "scen_max_len",
              (long long)pos, (long long)s->stride, (long long)s->B);
    for (int t = 0; t < s->tables; ++t) {
      int32_t *entry = &s->table[t][q->pool_index * s->stride + column];
      if (missing(s, *entry) && !(q->withheld && q->withheld[t * s->stride + column])) take_block(s, t, entry);
    }
  }
}

scenario *scen_create(const scen_config *config) {
  scenario *s = calloc(1, sizeof *s);
  cr_assert_not_null(s);
  s->cfg = *config;
  const scen_storage *st = &s->cfg.storage;
  cr_assert(config->entry && config->num_pool > 0);
  s->f = *config->entry;
  s->r.seed = s->r.state = config->seed ? config->seed : rng_fresh().seed;
  if (s->cfg.layout == SCEN_LEGACY) s->cfg.ring_tokens = W, s->cfg.speculative = 0;
  s->tabled = s->cfg.layout == SCEN_BLOCK_TABLE;
  s->B = st->block_rows ? st->block_rows : W;
  s->planes = st->two_planes ? 2 : 1;
  s->tables = s->tabled ? 1 + (st->score_table != 0) : 0;
  cr_assert(is_pow2(s->B) && s->B >= 8 && s->B <= 256);
  cr_assert(!st->score_table || (s->tabled && st->two_planes));
  cr_assert(s->tabled || (!st->null_block && !st->evict), "null blocks and eviction need a block table");
  if (s->tabled) {
    cr_assert(st->row_shift >= 7 && st->row_shift <= 20);
    s->R = (int64_t)1 << st->row_shift;
    cr_assert(s->cfg.ring_tokens == 0 || s->cfg.ring_tokens == s->R);
  } else {
    s->R = s->cfg.ring_tokens;
  }
  const int64_t R = s->R, per = R / W;
  cr_assert(R > 0 && R % W == 0);
  const int D = s->f.head_dim;

  /* Legacy is the zero-initialised ring; the page table maps pool rows to shuffled pages (three
     spare pages that nobody owns, and a spare column of unallocated entries). */
  memset(&s->ring, 0, sizeof s->ring);
  s->ring.ring_tokens = s->cfg.layout == SCEN_LEGACY ? 0 : s->cfg.ring_tokens;
  s->ring.speculative = s->cfg.speculative;
  s->ring.write_all = st->write_all;
  if (s->tabled) {
    /* Blocks for every column a position reaches in every pool row, three spare, the null block. */
    cr_assert(s->B <= R);
    s->stride = st->table_stride ? st->table_stride : R / s->B;
    s->columns = s->stride < R / s->B ? s->stride : R / s->B;
    s->blocks = (int64_t)s->cfg.num_pool * s->columns + 3 + (st->null_block != 0);
    for (int t = 0; t < s->tables; ++t) {
      s->table[t] = xmalloc((size_t)s->cfg.num_pool * (size_t)s->stride * sizeof(int32_t));
      for (int64_t i = 0; i < s->cfg.num_pool * s->stride; ++i) s->table[t][i] = missing_entry(s);
      s->free_blocks[t] = xmalloc((size_t)s->blocks * sizeof(int32_t));
      for (int64_t b = st->null_block != 0; b < s->blocks; ++b) s->free_blocks[t][s->num_free[t]++] = (int32_t)b;
    }
    s->rows = s->blocks * s->B;
    s->ring.state_pages = s->blocks;
    s->ring.has_null_block = st->null_block != 0;
    s->ring.null_block = 0;
  } else {
    s->pages = (int64_t)s->cfg.num_pool * per;
    if (s->cfg.layout == SCEN_PAGE_TABLE) {
      s->pages += 3;
      int32_t *perm = xmalloc((size_t)s->pages * sizeof *perm);
      for (int64_t i = 0; i < s->pages; ++i) perm[i] = (int32_t)i;
      for (int64_t i = s->pages - 1; i > 0; --i) {
        const int64_t j = (int64_t)(rng_u64(&s->r) % (uint64_t)(i + 1));
        const int32_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
      }
      const int64_t stride = per + 1;
      s->page_table = xmalloc((size_t)s->cfg.num_pool * (size_t)stride * sizeof *s->page_table);
      for (int p = 0; p < s->cfg.num_pool; ++p) {
        for (int64_t k = 0; k < per; ++k) s->page_table[p * stride + k] = perm[p * per + k];
        s->page_table[p * stride + per] = -1;
      }
      free(perm);
      s->ring.page_table = s->page_table;
      s->ring.page_table_stride = stride;
      s->ring.num_pool = s->cfg.num_pool;
    }
    s->ring.state_pages = s->pages;
    s->rows = s->pages * W; /* plans name these rows; the launch counts blocks of B of them */
    cr_assert(s->rows % s->B == 0);
    s->blocks = s->rows / s->B;
  }

  s->state_row = (size_t)s->f.row_elems * dtype_size(s->f.state_dtype);
  s->half = s->state_row / 2;
  s->plane_row[0] = s->planes == 2 ? s->half : s->state_row;
  s->plane_row[1] = s->half;
  s->input_row = (size_t)s->f.row_elems * dtype_size(s->f.input_dtype);
  s->out_row = (size_t)D * dtype_size(s->f.output_dtype);
  for (int p = 0; p < s->planes; ++p) {
    s->plane_bytes[p] = (size_t)s->rows * s->plane_row[p];
    s->state[p] = xmalloc(s->plane_bytes[p]);
    poison(s->state[p], s->plane_bytes[p]); /* a read of a row nobody wrote gives NaN */
    s->expect[p] = clone_bytes(s->state[p], s->plane_bytes[p]);
  }

  memset(&s->layout, 0, sizeof s->layout);
  s->layout.block_rows = st->block_rows;
  s->layout.score_biased = st->biased;
  s->layout.score_plane = s->state[1];
  if (s->tabled) {
    s->layout.block_table = s->table[0];
    s->layout.score_block_table = s->table[1];
    s->layout.table_rows = s->cfg.num_pool;
    s->layout.table_stride = s->stride;
    s->layout.row_shift = st->row_shift;
  }
  s->ring.state_layout = s->layout;

  s->ape = ape_make(D, &s->r);
  s->pool_owner = xmalloc((size_t)s->cfg.num_pool * sizeof *s->pool_owner);
  for (int p = 0; p < s->cfg.num_pool; ++p) s->pool_owner[p] = -1;
  s->window_rows = xmalloc((size_t)W * 2 * (size_t)D * sizeof(float));
  s->window_ape = xmalloc((size_t)W * (size_t)D * sizeof(float));
  s->row_tmp = xmalloc(s->state_row);
  s->ref = xmalloc((size_t)D * sizeof(double));
  if (s->cfg.be == BACKEND_GPU) {
    for (int p = 0; p < s->planes; ++p) device_upload(&s->d_state[p], s->state[p], s->plane_bytes[p]);
    device_upload(&s->d_ape, s->ape, (size_t)W * (size_t)D * sizeof(float));
  }
  return s;
}

uint64_t scen_seed(const scenario *s) { return s->r.seed; }

static request *req_of(scenario *s, int id) {
  cr_assert(id >= 0 && id < s->num_reqs && s->reqs[id].live, "request %d is not open", id);
  return &s->reqs[id];
}

int scen_open(scenario *s, int pool_index) {
  cr_assert(pool_index >= 0 && pool_index < s->cfg.num_pool && s->pool_owner[pool_index] < 0, "pool row %d is not free",
            pool_index);
  if (s->num_reqs == s->cap_reqs) {
    s->cap_reqs = s->cap_reqs ? 2 * s->cap_reqs : 16;
    s->reqs = realloc(s->reqs, (size_t)s->cap_reqs * sizeof *s->reqs);
    cr_assert_not_null(s->reqs);
  }
  request *q = &s->reqs[s->num_reqs];
  memset(q, 0, sizeof *q);
  q->live = 1;
  q->pool_index = pool_index;
  s->pool_owner[pool_index] = s->num_reqs;
  for (int t = 0; t < s->tables; ++t)
    for (int64_t k = 0; k < s->stride; ++k) cr_assert(missing(s, s->table[t][pool_index * s->stride + k]));
  return s->num_reqs++;
}

static void check_all_windows(const scenario *s, const request *q, int id) {
  cr_assert_eq(q->windows_done, q->len / W,
               "request %d: %lld tokens committed but %lld windows emitted and checked (seed %llu)", id,
               (long long)q->len, (long long)q->windows_done, (unsigned long long)s->r.seed);
}

static void check_held(scenario *s, const request *q, int id, int64_t from, const char *kind);

void scen_close(scenario *s, int id) {
  request *q = req_of(s, id);
  check_all_windows(s, q, id);
  if (s->cfg.storage.write_all) check_held(s, q, id, q->held_from, "close");
  s->pool_owner[q->pool_index] = -1;
  for (int t = 0; t < s->tables; ++t) /* its blocks go back to the pool, stale rows and all */
    for (int64_t k = 0; k < s->stride; ++k) give_block(s, t, &s->table[t][q->pool_index * s->stride + k]);
  free(q->history), free(q->withheld);
  q->history = NULL, q->withheld = NULL;
  q->live = 0;
}

int64_t scen_len(const scenario *s, int id) { return s->reqs[id].len; }
int scen_pool_index(const scenario *s, int id) { return s->reqs[id].pool_index; }
int scen_num_requests(const scenario *s) { return s->num_reqs; }
scen_stats scen_get_stats(const scenario *s) { return s->stats; }

int64_t scen_max_len(const scenario *s) { return s->tabled && s->stride * s->B < s->R ? s->stride * s->B : INT64_MAX; }

const float *scen_window(const scenario *s, int id, int64_t window) {
  if (id < 0 || id >= s->num_reqs || !s->reqs[id].outputs || window >= s->reqs[id].windows_done) return NULL;
  return s->reqs[id].outputs + window * s->f.head_dim;
}

const void *scen_state(const scenario *s, int plane, size_t *bytes) {
  cr_assert(plane == 0 || plane == 1);
  if (bytes) *bytes = plane < s->planes ? s->plane_bytes[plane] : 0;
  return plane < s->planes ? s->state[plane] : NULL;
}

int scen_evict(scenario *s, int id, int64_t first, int64_t count, int tables) {
  request *q = req_of(s, id);
  cr_assert(s->tabled && count > 0 && first >= 0);
  if (!q->withheld) {
    q->withheld = calloc((size_t)(s->tables * s->stride), 1);
    cr_assert_not_null(q->withheld);
  }
  int evicted = 0;
  for (int64_t pos = first; pos < first + count; pos = (pos / s->B + 1) * s->B)
    for (int t = 0; t < s->tables; ++t) {
      const int64_t column = (pos % s->R) / s->B;
      int32_t *entry = &s->table[t][q->pool_index * s->stride + column];
      if (!(tables >> t & 1)) continue;
      q->withheld[t * s->stride + column] = 1;
      if (missing(s, *entry)) continue;
      give_block(s, t, entry);
      ++evicted;
    }
  q->lost = 1;
  return evicted;
}

void scen_destroy(scenario *s) {
  for (int i = 0; i < s->num_reqs; ++i) {
    if (s->reqs[i].live) {
      check_all_windows(s, &s->reqs[i], i);
      if (s->cfg.storage.write_all) check_held(s, &s->reqs[i], i, s->reqs[i].held_from, "end of the run");
    }
    free(s->reqs[i].history), free(s->reqs[i].withheld);
    free(s->reqs[i].outputs);
  }
  for (int p = 0; p < 2; ++p) {
    device_release(&s->d_state[p]), device_release(&s->d_table[p]);
    free(s->state[p]), free(s->expect[p]), free(s->table[p]), free(s->free_blocks[p]);
  }
  device_release(&s->d_input), device_release(&s->d_ape), device_release(&s->d_index);
  device_release(&s->d_out), device_release(&s->d_plans_a), device_release(&s->d_plans_b);
  free(s->reqs), free(s->page_table), free(s->ape), free(s->pool_owner);
  free(s->window_rows), free(s->window_ape), free(s->row_tmp), free(s->ref);
  free(s);
}

/* Appends committed rows to a request's history. */
static void commit(scenario *s, request *q, const void *input, int64_t first_row, int64_t count) {
  if (q->len + count > q->cap) {
    int64_t cap = q->cap ? q->cap : 256;
    while (cap < q->len + count) cap *= 2;
    q->history = realloc(q->history, (size_t)cap * s->input_row);
    cr_assert_not_null(q->history);
    if (s->cfg.keep_outputs) {
      q->outputs = realloc(q->outputs, (size_t)(cap / W + 1) * (size_t)s->f.head_dim * sizeof(float));
      cr_assert_not_null(q->outputs);
    }
    q->cap = cap;
  }
  memcpy(q->history + (size_t)q->len * s->input_row, (const char *)input + (size_t)first_row * s->input_row,
         (size_t)count * s->input_row);
  q->len += count;
}

/* The window's rows as the kernel must have seen them: rows < buffer_len went through the state
   (stored_row: rounded to its dtype, and with a biased state holding score + ape, to which the
   oracle then adds no ape), the others come from the input as committed. */
static void check_window(scenario *s, int id, int64_t window, int buffer_len, const void *out, int64_t out_row,
                         const char *kind) {
  request *q = &s->reqs[id];
  const int D = s->f.head_dim;
  cr_assert_eq(window, q->windows_done,
               "request %d: window %lld emitted, but window %lld is the next one due (seed %llu)", id,
               (long long)window, (long long)q->windows_done, (unsigned long long)s->r.seed);
  cr_assert((window + 1) * W <= q->len);
  const float *rows[W];
  for (int j = 0; j < W; ++j) {
    float *dst = s->window_rows + (size_t)j * 2 * (size_t)D;
    float *ape = s->window_ape + (size_t)j * (size_t)D;
    const int64_t pos = window * W + j;
    if (j < buffer_len) {
      stored_row(s, q->history, (size_t)pos, j, s->row_tmp);
      row_widen(s->row_tmp, 0, D, s->f.state_dtype, dst);
    } else {
      row_widen(q->history, (size_t)pos, D, s->f.input_dtype, dst);
    }
    if (j < buffer_len && s->cfg.storage.biased) memset(ape, 0, (size_t)D * sizeof(float));
    else memcpy(ape, s->ape + (size_t)j * (size_t)D, (size_t)D * sizeof(float));
    rows[j] = dst;
  }
  ref_window(D, rows, s->window_ape, s->ref);
  char what[192];
  snprintf(what, sizeof what, "%s: request %d (pool row %d) window %lld, buffer_len %d, output row %lld", kind, id,
           q->pool_index, (long long)window, buffer_len, (long long)out_row);
  check_output_row(out, (size_t)out_row, s->f.output_dtype, s->ref, D, what, s->r.seed);
  double err2 = 0.0, ref2 = 0.0;
  for (int c = 0; c < D; ++c) {
    const double got = elem_get(out, (size_t)out_row * (size_t)D + (size_t)c, s->f.output_dtype);
    const double d = fabs(got - s->ref[c]);
    err2 += d * d, ref2 += s->ref[c] * s->ref[c];
    if (d > s->stats.max_abs) s->stats.max_abs = d;
    if (q->outputs) q->outputs[window * D + c] = (float)got;
  }
  const double rel = ref2 > 0.0 ? sqrt(err2 / ref2) : sqrt(err2);
  if (rel > s->stats.max_rel_l2) s->stats.max_rel_l2 = rel;
  q->windows_done++;
  s->stats.windows_checked++;
}

/* After a batch: every plane equals the expected one (written rows as stored, all others as they
   were: the null block, free blocks and other requests' rows included). */
static void check_written(scenario *s, const char *kind) {
  for (int p = 0; p < s->planes; ++p) {
    if (memcmp(s->state[p], s->expect[p], s->plane_bytes[p]) == 0) continue;
    for (int64_t row = 0; row < s->rows; ++row)
      cr_assert(memcmp(s->state[p] + (size_t)row * s->plane_row[p], s->expect[p] + (size_t)row * s->plane_row[p],
                       s->plane_row[p]) == 0,
                "%s, batch %lld: plane %d row %lld (block %lld row %lld) is not what the plans wrote / left (seed "
                "%llu)",
                kind, (long long)s->stats.batches, p, (long long)row, (long long)(row / s->B), (long long)(row % s->B),
                (unsigned long long)s->r.seed);
  }
}

/* Position pos of request q in its physical rows: 1 when they hold its committed value, 0 when
   its block is missing (evicted), a failure otherwise. */
static int check_position(scenario *s, const request *q, int id, int64_t pos, const char *what, const char *kind) {
  int32_t logical = -1;
  cr_assert_eq(spec_slot(&s->ring, q->pool_index, pos, &logical), C128_SUCCESS);
  const int64_t kv = physical(s, 0, logical), score = physical(s, s->tables > 1, logical);
  if (kv < 0 || score < 0) return 0;
  stored_row(s, q->history, (size_t)pos, pos % W, s->row_tmp);
  const int same = memcmp(kv_at(s, s->state, kv), s->row_tmp, s->half) == 0 &&
                   memcmp(score_at(s, s->state, score), s->row_tmp + s->half, s->half) == 0;
  cr_assert(same,
            "%s, batch %lld: %s: request %d (pool row %d, %lld committed) position %lld is not in its rows (logical "
            "%d, kv row %lld, score row %lld) (seed %llu)",
            kind, (long long)s->stats.batches, what, id, q->pool_index, (long long)q->len, (long long)pos, (int)logical,
            (long long)kv, (long long)score, (unsigned long long)s->r.seed);
  return 1;
}

/* write_all: committed positions from `from` on are in their rows, where their blocks remain. */
static void check_held(scenario *s, const request *q, int id, int64_t from, const char *kind) {
  for (int64_t pos = from > 0 ? from : 0; pos < q->len; ++pos)
    check_position(s, q, id, pos, "write_all lost a committed token", kind);
}

/* After the commit: every live request's open window is in its rows (a request scen_evict took
   blocks from: where they remain), and every 8th batch the write_all tokens as well. */
static void check_ring(scenario *s, const char *kind) {
  for (int id = 0; id < s->num_reqs; ++id) {
    const request *q = &s->reqs[id];
    if (!q->live) continue;
    const int64_t open = q->len / W * W;
    for (int64_t pos = open; pos < q->len; ++pos)
      cr_assert(check_position(s, q, id, pos, "ring invariant broken", kind) || q->lost,
                "%s: request %d position %lld of the open window has no block (seed %llu)", kind, id, (long long)pos,
                (unsigned long long)s->r.seed);
    if (s->cfg.storage.write_all && s->stats.batches % 8 == 0) check_held(s, q, id, q->held_from, kind);
  }
}

/* The engine evicts blocks that no window will read again: those whose latest positions below
   the request's length all lie below its open window, each with odds 1/2 (DESIGN 5.11's null
   block). A later position of the same column gets a fresh block. */
static void evict_old_blocks(scenario *s) {
  for (int id = 0; id < s->num_reqs; ++id) {
    const request *q = &s->reqs[id];
    if (!q->live || q->lost) continue;
    const int64_t open = q->len / W * W;
    for (int64_t column = 0; column < s->columns; ++column) {
      const int64_t first = column * s->B;
      if (q->len - 1 < first) continue;
      const int64_t start = first + (q->len - 1 - first) / s->R * s->R; /* its latest block's first position */
      if (start + s->B > open || rng_below(&s->r, 2)) continue;
      for (int t = 0; t < s->tables; ++t) {
        int32_t *entry = &s->table[t][q->pool_index * s->stride + column];
        s->stats.blocks_evicted += !missing(s, *entry);
        give_block(s, t, entry);
      }
    }
  }
}

/* The write of input row in_row into the logical row a plan names, in the expected state. */
static void apply_write(scenario *s, const void *input, int64_t in_row, int64_t logical) {
  const int64_t kv = physical(s, 0, logical), score = physical(s, s->tables > 1, logical);
  cr_assert(kv >= 0 && score >= 0, "a write plan names logical row %lld, whose block is missing (seed %llu)",
            (long long)logical, (unsigned long long)s->r.seed);
  stored_row(s, input, (size_t)in_row, logical % W, s->row_tmp);
  memcpy(kv_at(s, s->expect, kv), s->row_tmp, s->half);
  memcpy(score_at(s, s->expect, score), s->row_tmp + s->half, s->half);
  s->stats.writes++;
}

/* The plan checker accepts what the planner emits, in every layout (host copies of the batch),
   except a window the batch's output_index sends outside the output on purpose (`skipped`: the
   first such compress plan, or -1), which it must name as the first offending plan. */
static void check_plans(const scenario *s, const c128_prefill_args *p, const c128_decode_args *d, int64_t skipped) {
  char msg[256] = "";
  c128_plan_report report;
  memset(&report, 0, sizeof report);
  report.message = msg, report.message_size = sizeof msg;
  const c128_status st = p ? c128_check_prefill_plans(p, &report) : c128_check_decode_plans(d, &report);
  if (skipped >= 0) {
    cr_assert(st == C128_ERROR_INVALID_PLAN && report.index == skipped && report.kind == C128_PLAN_COMPRESS,
              "the plan checker should name compress plan %lld (its window's output_index is outside the output), "
              "not %s, plan %lld: %s (seed %llu)",
              (long long)skipped, c128_status_string(st), (long long)report.index, msg, (unsigned long long)s->r.seed);
    return;
  }
  cr_assert_eq(st, C128_SUCCESS, "the plan checker refuses a planned batch: %s, plan %lld: %s (seed %llu)",
               c128_status_string(st), (long long)report.index, msg, (unsigned long long)s->r.seed);
}

/* Windows / requests per block of a launch: automatic, or (random_groups) any of 1..most half the
   time. */
static int32_t group_size(scenario *s, int32_t most) {
  if (!s->cfg.random_groups || rng_below(&s->r, 2)) return 0;
  return (int32_t)(1 + rng_below(&s->r, most));
}

static int reverse_now(const scenario *s) { return s->cfg.reverse && (s->stats.batches & 1); }

/* GPU: the state (both planes) stays on the device; input, plans, block tables, output_index and
   the poisoned output go up, state and output come back. With cross_check the host runner
   repeats the batch from the same state. */
/* The GPU's output rows against the host runner's (check_gpu_output: bit for bit in the exact
   build, within the fast build's bound otherwise), over the input and state this batch read. */
static void cross_check_output(const scenario *s, const void *host_out, const void *gpu_out, size_t out_bytes) {
  const size_t rows = out_bytes / ((size_t)s->f.head_dim * dtype_size(s->f.output_dtype));
  check_gpu_output(gpu_out, host_out, rows, s->f.output_dtype, s->f.head_dim, s->max_kv, "GPU vs host runner outputs",
                   s->r.seed);
}

/* The device side of a batch's layout and output_index (index_rows entries). */
static void layout_up(scenario *s, c128_state_layout *l, const int64_t **index, int64_t index_rows) {
  const size_t table = (size_t)s->cfg.num_pool * (size_t)s->stride * sizeof(int32_t);
  l->score_plane = s->planes == 2 ? s->d_state[1].ptr : NULL;
  if (s->tables > 0) l->block_table = device_upload(&s->d_table[0], s->table[0], table);
  if (s->tables > 1) l->score_block_table = device_upload(&s->d_table[1], s->table[1], table);
  if (*index) *index = device_upload(&s->d_index, *index, (size_t)index_rows * sizeof(int64_t));
}

/* Host runner copies of the state for the cross-check; compared with the GPU's, then freed. */
static void host_copies(const scenario *s, void **copy, c128_state_layout *l) {
  cr_assert(s->planes == 1 || s->planes == 2);
  copy[1] = NULL;
  for (int p = 0; p < s->planes; ++p) copy[p] = clone_bytes(s->state[p], s->plane_bytes[p]);
  l->score_plane = copy[1];
}
static void host_copies_check(const scenario *s, void **copy) {
  for (int p = 0; p < 2 && copy[p]; ++p) {
    cr_assert(memcmp(copy[p], s->state[p], s->plane_bytes[p]) == 0,
              "GPU and host runner states differ in plane %d (seed %llu)", p, (unsigned long long)s->r.seed);
    free(copy[p]);
  }
}

static void run_prefill_batch(scenario *s, c128_prefill_args *a, size_t out_bytes) {
  const instance_entry *e = s->cfg.entry;
  if (s->cfg.be == BACKEND_CPU) {
    a->state = s->state[0];
    const c128_status st = run_prefill(e, BACKEND_CPU, a, reverse_now(s));
    cr_assert_eq(st, C128_SUCCESS, "%s (seed %llu)", c128_status_string(st), (unsigned long long)s->r.seed);
    return;
  }
  void *host_state[2] = {NULL, NULL}, *host_out = NULL;
  if (s->cfg.cross_check) {
    c128_prefill_args h = *a;
    host_copies(s, host_state, &h.state_layout);
    h.state = host_state[0];
    h.output = host_out = clone_bytes(a->output, out_bytes);
    cr_assert_eq(e->prefill_host(&h, NULL), C128_SUCCESS);
  }
  c128_prefill_args d = *a;
  d.state = s->d_state[0].ptr;
  d.ape = s->d_ape.ptr;
  layout_up(s, &d.state_layout, &d.output_index, a->input_rows);
  d.input = device_upload(&s->d_input, a->input, (size_t)a->input_rows * s->input_row);
  d.output = device_upload(&s->d_out, a->output, out_bytes);
  d.compress_plans =
      device_upload(&s->d_plans_a, a->compress_plans, (size_t)a->num_compress * sizeof(c128_compress_plan));
  d.write_plans = device_upload(&s->d_plans_b, a->write_plans, (size_t)a->num_write * sizeof(c128_write_plan));
  const c128_status st = e->prefill(&d, 0);
  cr_assert_eq(st, C128_SUCCESS, "%s", c128_status_string(st));
  cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess);
  for (int p = 0; p < s->planes; ++p) device_download(&s->d_state[p], s->state[p], s->plane_bytes[p]);
  device_download(&s->d_out, a->output, out_bytes);
  if (host_out) {
    host_copies_check(s, host_state);
    cross_check_output(s, host_out, a->output, out_bytes);
  }
  free(host_out);
}

/* run_prefill_batch's steps for the other args struct and its one plan array. */
static void run_decode_batch(scenario *s, c128_decode_args *a, size_t out_bytes) {
  const instance_entry *e = s->cfg.entry;
  if (s->cfg.be == BACKEND_CPU) {
    a->state = s->state[0];
    const c128_status st = run_decode(e, BACKEND_CPU, a, reverse_now(s));
    cr_assert_eq(st, C128_SUCCESS, "%s (seed %llu)", c128_status_string(st), (unsigned long long)s->r.seed);
    return;
  }
  void *host_state[2] = {NULL, NULL}, *host_out = NULL;
  if (s->cfg.cross_check) {
    c128_decode_args h = *a;
    host_copies(s, host_state, &h.state_layout);
    h.state = host_state[0];
    h.output = host_out = clone_bytes(a->output, out_bytes);
    cr_assert_eq(e->decode_host(&h, NULL), C128_SUCCESS);
  }
  c128_decode_args d = *a;
  d.state = s->d_state[0].ptr;
  d.ape = s->d_ape.ptr;
  layout_up(s, &d.state_layout, &d.output_index, a->batch);
  d.input = device_upload(&s->d_input, a->input, (size_t)a->batch * s->input_row);
  d.output = device_upload(&s->d_out, a->output, out_bytes);
  d.plans = device_upload(&s->d_plans_a, a->plans, (size_t)a->batch * sizeof(c128_decode_plan));
  const c128_status st = e->decode(&d, 0);
  cr_assert_eq(st, C128_SUCCESS, "%s", c128_status_string(st));
  cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess);
  for (int p = 0; p < s->planes; ++p) device_download(&s->d_state[p], s->state[p], s->plane_bytes[p]);
  device_download(&s->d_out, a->output, out_bytes);
  if (host_out) {
    host_copies_check(s, host_state);
    cross_check_output(s, host_out, a->output, out_bytes);
  }
  free(host_out);
}

static void fill_args_common(const scenario *s, int32_t *head_dim, c128_dtype *sd, c128_dtype *id, c128_dtype *od) {
  *head_dim = s->f.head_dim;
  *sd = s->f.state_dtype;
  *id = s->f.input_dtype;
  *od = s->f.output_dtype;
}

/* output_index for a batch of `rows` input rows (storage.output_index), into out_rows = rows + 3
   output rows: the n windows of the batch, ending at input rows ends[k], each get a distinct
   random row, except that a window computed on rejected drafts (discard[k]) is sent outside
   the output (skipped by the kernels) one time in three; every other input row holds junk,
   rows of other windows and values outside the output included, which no kernel may read. */
static int64_t *index_make(scenario *s, int64_t rows, const int64_t *ends, const int *discard, int64_t n,
                           int64_t *out_rows) {
  *out_rows = rows + 3;
  int64_t *index = xmalloc((size_t)rows * sizeof *index), *perm = xmalloc((size_t)*out_rows * sizeof *perm);
  for (int64_t i = 0; i < rows; ++i) index[i] = rng_below(&s->r, *out_rows + 6) - 3;
  for (int64_t i = 0; i < *out_rows; ++i) perm[i] = i;
  for (int64_t i = *out_rows - 1; i > 0; --i) {
    const int64_t j = rng_below(&s->r, i + 1), t = perm[i];
    perm[i] = perm[j], perm[j] = t;
  }
  cr_assert(n <= *out_rows);
  for (int64_t k = 0; k < n; ++k) {
    const int outside = discard && discard[k] && rng_below(&s->r, 3) == 0;
    index[ends[k]] =
        outside ? (rng_below(&s->r, 2) ? -1 - rng_below(&s->r, 3) : *out_rows + rng_below(&s->r, 3)) : perm[k];
  }
  free(perm);
  return index;
}

/* The output row window k (ending at input row `end`) goes to, or -1 where it is skipped. */
static int64_t target_row(const int64_t *index, int64_t end, int64_t k, int64_t out_rows) {
  const int64_t at = index ? index[end] : k;
  return at >= 0 && at < out_rows ? at : -1;
}

/* The batch's planner requests; checks the items and allocates the blocks of the new positions. */
static c128_request *batch_requests(scenario *s, const scen_item *items, int n, int verify, int refused,
                                    int64_t *rows) {
  c128_request *q = xmalloc((size_t)n * sizeof *q);
  *rows = 0;
  for (int i = 0; i < n; ++i) {
    const request *r = req_of(s, items[i].req);
    for (int k = 0; k < i; ++k) cr_assert_neq(items[k].req, items[i].req, "a request twice in one batch");
    if (verify && !refused) cr_assert(items[i].accept >= 1 && items[i].accept <= items[i].extend);
    cr_assert(refused || !r->lost, "request %d lost blocks it needs: it can only be refused", items[i].req);
    q[i].pool_index = r->pool_index;
    q[i].seq_len = (int32_t)(r->len + items[i].extend);
    q[i].extend_len = items[i].extend;
    *rows += items[i].extend;
    allocate(s, r, r->len, r->len + items[i].extend);
  }
  return q;
}

/* What a finished batch leaves in the model: write_all's held range, eviction, counters. */
static void batch_done(scenario *s, int id, int64_t seq) {
  request *q = &s->reqs[id];
  if (seq - s->R > q->held_from) q->held_from = seq - s->R; /* rows of x - R under every x written */
}

void scen_extend(scenario *s, const scen_item *items, int n, int verify) {
  const int D = s->f.head_dim;
  const uint64_t seed = s->r.seed;
  int64_t rows;
  c128_request *q = batch_requests(s, items, n, verify, 0, &rows);
  cr_assert(rows > 0);
  void *input = rows_alloc((size_t)rows, D, s->f.input_dtype);
  rows_fill(input, (size_t)rows, D, s->f.input_dtype, &s->r, s->cfg.score_scale);
  s->max_kv = fmax(s->max_kv, max_abs_kv(input, (size_t)rows, D, s->f.input_dtype));

  /* Plan, and compare with SPEC 5 byte for byte; the tails are sentinels or untouched. */
  const int64_t cap = rows;
  c128_prefill_plans plans;
  memset(&plans, 0, sizeof plans);
  plans.compress = plan_alloc((size_t)cap * sizeof(c128_compress_plan));
  plans.write = plan_alloc((size_t)cap * sizeof(c128_write_plan));
  plans.capacity = cap;
  plans.pad_to_capacity = s->cfg.pad_plans;
  c128_status st = c128_plan_prefill(&s->ring, q, n, verify, &plans);
  cr_assert_eq(st, C128_SUCCESS, "planner: %s (seed %llu)", c128_status_string(st), (unsigned long long)seed);
  c128_compress_plan *want_c = plan_alloc((size_t)cap * sizeof *want_c);
  c128_write_plan *want_w = plan_alloc((size_t)cap * sizeof *want_w);
  int64_t nc = -1, nw = -1;
  st = spec_plan_prefill(&s->ring, q, n, verify, cap, want_c, &nc, want_w, &nw);
  cr_assert_eq(st, C128_SUCCESS, "SPEC 5: %s", c128_status_string(st));
  cr_assert(plans.num_compress == nc && plans.num_write == nw,
            "planner emitted %lld compress / %lld write plans, SPEC 5 says %lld / %lld (seed %llu)",
            (long long)plans.num_compress, (long long)plans.num_write, (long long)nc, (long long)nw,
            (unsigned long long)seed);
  for (int64_t k = 0; k < nc; ++k)
    cr_assert(memcmp(&plans.compress[k], &want_c[k], sizeof want_c[k]) == 0,
              "compress plan %lld: planner {%u, %u, %u, %d, %d}, SPEC 5 {%u, %u, %u, %d, %d} (seed %llu)", (long long)k,
              plans.compress[k].seq_len, plans.compress[k].ragged_id, plans.compress[k].buffer_len,
              plans.compress[k].read_page_0, plans.compress[k].read_page_1, want_c[k].seq_len, want_c[k].ragged_id,
              want_c[k].buffer_len, want_c[k].read_page_0, want_c[k].read_page_1, (unsigned long long)seed);
  for (int64_t k = 0; k < nw; ++k)
    cr_assert(memcmp(&plans.write[k], &want_w[k], sizeof want_w[k]) == 0,
              "write plan %lld: planner {%u, %d}, SPEC 5 {%u, %d} (seed %llu)", (long long)k, plans.write[k].ragged_id,
              plans.write[k].write_loc, want_w[k].ragged_id, want_w[k].write_loc, (unsigned long long)seed);
  const c128_compress_plan no_c = C128_INVALID_COMPRESS_PLAN;
  const c128_write_plan no_w = C128_INVALID_WRITE_PLAN;
  for (int64_t k = nc; k < cap; ++k)
    cr_assert(s->cfg.pad_plans ? memcmp(&plans.compress[k], &no_c, sizeof no_c) == 0
                               : all_bytes(&plans.compress[k], sizeof no_c, PLAN_POISON),
              "compress plan %lld past the count: %s", (long long)k,
              s->cfg.pad_plans ? "not a sentinel" : "written without pad_to_capacity");
  for (int64_t k = nw; k < cap; ++k)
    cr_assert(s->cfg.pad_plans ? memcmp(&plans.write[k], &no_w, sizeof no_w) == 0
                               : all_bytes(&plans.write[k], sizeof no_w, PLAN_POISON),
              "write plan %lld past the count: %s", (long long)k,
              s->cfg.pad_plans ? "not a sentinel" : "written without pad_to_capacity");

  /* Which windows are computed on rejected drafts (in plan order), and where outputs go. */
  int64_t *ends = xmalloc((size_t)(nc + 1) * sizeof *ends);
  int *discard = xmalloc((size_t)(nc + 1) * sizeof *discard);
  for (int64_t k = 0; k < nc; ++k) ends[k] = plans.compress[k].ragged_id;
  {
    int64_t k = 0;
    for (int i = 0; i < n; ++i) {
      const int64_t prefix = s->reqs[items[i].req].len, accept = verify ? items[i].accept : items[i].extend;
      for (int64_t end = (prefix / W + 1) * W - 1; end < prefix + items[i].extend; end += W)
        discard[k++] = end >= prefix + accept;
    }
    cr_assert_eq(k, nc);
  }

  /* Run: launch the counts, or the whole capacity when padded (CUDA-graph style). */
  const int64_t launch_c = s->cfg.pad_plans ? cap : nc, launch_w = s->cfg.pad_plans ? cap : nw;
  int64_t out_rows = launch_c > 0 ? launch_c : 1;
  int64_t *index = s->cfg.storage.output_index ? index_make(s, rows, ends, discard, nc, &out_rows) : NULL;
  const size_t out_bytes = (size_t)out_rows * s->out_row;
  void *out = xmalloc(out_bytes);
  memset(out, OUT_POISON, out_bytes);
  for (int64_t k = 0; k < nw; ++k) apply_write(s, input, plans.write[k].ragged_id, plans.write[k].write_loc);
  c128_prefill_args a;
  memset(&a, 0, sizeof a);
  fill_args_common(s, &a.head_dim, &a.state_dtype, &a.input_dtype, &a.output_dtype);
  a.state_pages = s->blocks;
  a.input = input;
  a.input_rows = rows;
  a.ape = s->ape;
  a.output = out;
  a.output_rows = out_rows;
  a.compress_plans = plans.compress;
  a.num_compress = launch_c;
  a.write_plans = plans.write;
  a.num_write = launch_w;
  a.state_layout = s->layout;
  a.output_index = index;
  a.windows_per_block = group_size(s, C128_MAX_PREFILL_GROUP);
  int64_t skipped = -1;
  for (int64_t k = 0; k < nc && skipped < 0 && index; ++k)
    if (target_row(index, ends[k], k, out_rows) < 0) skipped = k;
  check_plans(s, &a, NULL, skipped);
  run_prefill_batch(s, &a, out_bytes);
  const char *kind = verify ? "verify batch" : "prefill/extend batch";
  check_written(s, kind);

  /* Commit, then check the windows whose tokens are all committed; discard the others. */
  unsigned char *named = calloc((size_t)out_rows, 1);
  cr_assert_not_null(named);
  int64_t base = 0, k = 0;
  for (int i = 0; i < n; ++i) {
    request *r = &s->reqs[items[i].req];
    const int64_t prefix = r->len, accept = verify ? items[i].accept : items[i].extend;
    commit(s, r, input, base, accept);
    for (int64_t end = (prefix / W + 1) * W - 1; end < prefix + items[i].extend; end += W, ++k) {
      const int64_t j = end - prefix, row = target_row(index, ends[k], k, out_rows);
      if (row >= 0) named[row] = 1;
      if (!discard[k]) {
        cr_assert(row >= 0);
        check_window(s, items[i].req, end / W, j < W - 1 ? (int)(W - 1 - j) : 0, out, row, kind);
      } else {
        s->stats.windows_discarded++;
      }
    }
    batch_done(s, items[i].req, q[i].seq_len);
    base += items[i].extend;
  }
  cr_assert_eq(k, nc);
  for (int64_t row = 0; row < out_rows; ++row)
    cr_assert(named[row] || all_bytes((char *)out + (size_t)row * s->out_row, s->out_row, OUT_POISON),
              "output row %lld of no valid plan was written (seed %llu)", (long long)row, (unsigned long long)seed);
  check_ring(s, kind);
  s->stats.batches++;
  s->stats.rows += rows;
  if (s->cfg.storage.evict) evict_old_blocks(s);
  free(q), free(input), free(plans.compress), free(plans.write), free(want_c), free(want_w), free(out);
  free(ends), free(discard), free(index), free(named);
}

/* The decode step's planner requests (req -1: a padding row); allocates the new tokens' blocks. */
static c128_request *decode_requests(scenario *s, const int *ids, int n, int refused) {
  c128_request *q = xmalloc((size_t)n * sizeof *q);
  for (int b = 0; b < n; ++b) {
    memset(&q[b], 0, sizeof q[b]);
    if (ids[b] < 0) continue; /* padding row: seq_len 0 */
    const request *r = req_of(s, ids[b]);
    for (int k = 0; k < b; ++k) cr_assert_neq(ids[k], ids[b], "a request twice in one batch");
    cr_assert(refused || !r->lost, "request %d lost blocks it needs: it can only be refused", ids[b]);
    q[b].pool_index = r->pool_index;
    q[b].seq_len = (int32_t)(r->len + 1);
    q[b].extend_len = 1;
    allocate(s, r, r->len, r->len + 1);
  }
  return q;
}

void scen_decode(scenario *s, const int *ids, int n) {
  const int D = s->f.head_dim;
  const uint64_t seed = s->r.seed;
  cr_assert(n > 0);
  c128_request *q = decode_requests(s, ids, n, 0);
  c128_decode_plan *plans = plan_alloc((size_t)n * sizeof *plans), *want = plan_alloc((size_t)n * sizeof *want);
  c128_status st = c128_plan_decode(&s->ring, q, n, plans);
  cr_assert_eq(st, C128_SUCCESS, "decode planner: %s (seed %llu)", c128_status_string(st), (unsigned long long)seed);
  cr_assert_eq(spec_plan_decode(&s->ring, q, n, want), C128_SUCCESS);
  for (int b = 0; b < n; ++b)
    cr_assert(memcmp(&plans[b], &want[b], sizeof want[b]) == 0,
              "decode plan %d: planner {%u, %d, %d, %d}, SPEC 5 {%u, %d, %d, %d} (seed %llu)", b, plans[b].seq_len,
              plans[b].write_loc, plans[b].read_page_0, plans[b].read_page_1, want[b].seq_len, want[b].write_loc,
              want[b].read_page_0, want[b].read_page_1, (unsigned long long)seed);

  void *input = rows_alloc((size_t)n, D, s->f.input_dtype);
  rows_fill(input, (size_t)n, D, s->f.input_dtype, &s->r, s->cfg.score_scale);
  s->max_kv = fmax(s->max_kv, max_abs_kv(input, (size_t)n, D, s->f.input_dtype));
  int64_t *ends = xmalloc((size_t)n * sizeof *ends), nb = 0;
  for (int b = 0; b < n; ++b)
    if (ids[b] >= 0 && (s->reqs[ids[b]].len + 1) % W == 0) ends[nb++] = b;
  int64_t out_rows = n;
  int64_t *index = s->cfg.storage.output_index ? index_make(s, n, ends, NULL, nb, &out_rows) : NULL;
  const size_t out_bytes = (size_t)out_rows * s->out_row;
  void *out = xmalloc(out_bytes);
  memset(out, OUT_POISON, out_bytes);
  for (int b = 0; b < n; ++b)
    if (plans[b].seq_len != 0 && plans[b].write_loc >= 0) apply_write(s, input, b, plans[b].write_loc);
  c128_decode_args a;
  memset(&a, 0, sizeof a);
  fill_args_common(s, &a.head_dim, &a.state_dtype, &a.input_dtype, &a.output_dtype);
  a.state_pages = s->blocks;
  a.input = input;
  a.ape = s->ape;
  a.output = out;
  a.output_rows = out_rows;
  a.plans = plans;
  a.batch = n;
  a.state_layout = s->layout;
  a.output_index = index;
  a.requests_per_block = group_size(s, C128_MAX_DECODE_GROUP);
  check_plans(s, NULL, &a, -1);
  run_decode_batch(s, &a, out_bytes);
  check_written(s, "decode step");

  unsigned char *named = calloc((size_t)out_rows, 1);
  cr_assert_not_null(named);
  for (int64_t k = 0; k < nb; ++k) { /* a decode window is never discarded: it always has a row */
    const int64_t row = target_row(index, ends[k], ends[k], out_rows);
    cr_assert(row >= 0);
    named[row] = 1;
  }
  for (int b = 0; b < n; ++b) {
    const int boundary = ids[b] >= 0 && (s->reqs[ids[b]].len + 1) % W == 0;
    if (ids[b] < 0) continue;
    commit(s, &s->reqs[ids[b]], input, b, 1);
    batch_done(s, ids[b], s->reqs[ids[b]].len);
    if (boundary)
      check_window(s, ids[b], s->reqs[ids[b]].len / W - 1, W - 1, out, target_row(index, b, b, out_rows),
                   "decode step");
  }
  for (int64_t row = 0; row < out_rows; ++row)
    cr_assert(named[row] || all_bytes((char *)out + (size_t)row * s->out_row, s->out_row, OUT_POISON),
              "decode output row %lld written, but no boundary window goes there (seed %llu)", (long long)row,
              (unsigned long long)seed);
  check_ring(s, "decode step");
  s->stats.batches++;
  s->stats.rows += n;
  if (s->cfg.storage.evict) evict_old_blocks(s);
  free(q), free(plans), free(want), free(input), free(out), free(ends), free(index), free(named);
}

void scen_extend_refused(scenario *s, const scen_item *items, int n, int verify, c128_status want) {
  int64_t rows;
  c128_request *q = batch_requests(s, items, n, verify, 1, &rows);
  const int64_t cap = rows > 0 ? rows : 1;
  c128_prefill_plans plans;
  memset(&plans, 0, sizeof plans);
  plans.compress = plan_alloc((size_t)cap * sizeof(c128_compress_plan));
  plans.write = plan_alloc((size_t)cap * sizeof(c128_write_plan));
  plans.capacity = cap;
  plans.pad_to_capacity = 1;
  plans.num_compress = plans.num_write = -7;
  const c128_status st = c128_plan_prefill(&s->ring, q, n, verify, &plans);
  cr_assert_eq(st, want, "planner: got %s, want %s (seed %llu)", c128_status_string(st), c128_status_string(want),
               (unsigned long long)s->r.seed);
  cr_assert(all_bytes(plans.compress, (size_t)cap * sizeof(c128_compress_plan), PLAN_POISON) &&
                all_bytes(plans.write, (size_t)cap * sizeof(c128_write_plan), PLAN_POISON),
            "a refused batch wrote the plan arrays");
  cr_assert(plans.num_compress == -7 && plans.num_write == -7, "a refused batch wrote the counts");
  int64_t nc, nw;
  c128_compress_plan *cp = plan_alloc((size_t)cap * sizeof *cp);
  c128_write_plan *wp = plan_alloc((size_t)cap * sizeof *wp);
  const c128_status spec = spec_plan_prefill(&s->ring, q, n, verify, cap, cp, &nc, wp, &nw);
  cr_assert_eq(spec, want, "SPEC 5: got %s, want %s", c128_status_string(spec), c128_status_string(want));
  free(q), free(plans.compress), free(plans.write), free(cp), free(wp);
}

void scen_decode_refused(scenario *s, const int *ids, int n, c128_status want) {
  cr_assert(n > 0);
  c128_request *q = decode_requests(s, ids, n, 1);
  c128_decode_plan *plans = plan_alloc((size_t)n * sizeof *plans), *spec = plan_alloc((size_t)n * sizeof *spec);
  const c128_status st = c128_plan_decode(&s->ring, q, n, plans);
  cr_assert_eq(st, want, "decode planner: got %s, want %s (seed %llu)", c128_status_string(st),
               c128_status_string(want), (unsigned long long)s->r.seed);
  cr_assert(all_bytes(plans, (size_t)n * sizeof *plans, PLAN_POISON), "a refused decode step wrote plans");
  const c128_status sp = spec_plan_decode(&s->ring, q, n, spec);
  cr_assert_eq(sp, want, "SPEC 5: got %s, want %s", c128_status_string(sp), c128_status_string(want));
  free(q), free(plans), free(spec);
}
