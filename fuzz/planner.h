/* Mode 3: the host planners against the device planners' host path on fuzzed rings and request
   arrays, valid or not, with aliased arguments, huge counts, and a thread that scribbles the
   requests (or the page table) while the planners run. Part of fuzz_c128.cu.

   Property 3 (SPEC 5 and the header's rules): the host planner's status is exactly the model's
   (the argument checks in the planner's order, then per request in batch order
   its own checks, the row limit and its pages, then the capacity, then pages shared between
   requests; absent requests {any, 0, 0} skipped); a successful plan is SPEC 5 byte for byte and
   passes the plan checker (the planner never emits a batch its checker rejects); a refused
   batch leaves the arrays and counts untouched.
   Property 4: the device planner's host path gives the same status (returned for an argument
   error, which it also writes to *status where it can; in *status for a bad batch); on success
   the same plans byte for byte (padded to capacity with sentinels, counts equal); on a bad
   batch zero counts and sentinels / padding rows only; on an argument error no plan written.
   Property 6 (concurrent modification): with a thread writing random values into the request
   array (or the page table) during the call, no crash, no access outside the arrays, a status
   from the enum; a successful batch has counts within the capacity and plans that pass the
   checker (every page named inside the state); a refused batch leaves the host arrays alone
   (the request scribbler; a page table changed during the call may leave partial output). */

#include <pthread.h>

static int32_t rd_seq(fz_reader *r) {
  const int sel = rd_below(r, 16);
  static const int32_t edges[] = {127, 128, 129, 255, 256, 257, 383, 384, 65535, 65536, 65537, 1};
  if (sel < 7) return rd_below16(r, 600);
  if (sel == 7) return 0;
  if (sel == 8) return edges[rd_below(r, 12)];
  if (sel == 9) return INT32_MAX - rd_u8(r);
  if (sel == 10) return -1 - rd_u8(r);
  if (sel == 11) return (int32_t)rd_u32(r);
  const int32_t windows = rd_below16(r, 1200);
  return 128 * windows + rd_below(r, 130) - 1;
}
static int32_t rd_extend(fz_reader *r, int32_t seq) {
  const int sel = rd_below(r, 16);
  int64_t e;
  if (sel < 8) e = seq > 0 ? 1 + rd_below16(r, seq < 300 ? seq : 300) : rd_below(r, 3);
  else if (sel == 8) e = 0;
  else if (sel == 9) e = seq;
  else if (sel == 10) e = (int64_t)seq + 1;
  else if (sel == 11) e = -1 - rd_u8(r);
  else if (sel == 12) e = 65535 + rd_below(r, 3);
  else if (sel == 13) e = (int32_t)rd_u32(r);
  else e = (int64_t)seq - rd_below16(r, 400);
  /* Long extends are refused before any work per row (TOO_MANY_ROWS past 65536), so huge ones
     cost nothing; keep a few under 2^17 anyway. */
  if (e > (1 << 17) && e <= seq && sel != 13) e %= 1 << 17;
  return (int32_t)(e > INT32_MAX ? INT32_MAX : e);
}
static int32_t rd_pool(fz_reader *r, int64_t num_pool) {
  const int sel = rd_below(r, 16);
  if (sel < 12) return (int32_t)rd_below(r, (int)(num_pool > 0 && num_pool < 200 ? num_pool : 4) + 2) - 1;
  if (sel == 12) return (int32_t)rd_u32(r);
  if (sel == 13) return INT32_MAX;
  if (sel == 14) return INT32_MIN;
  return rd_u16(r);
}
static int64_t rd_pages(fz_reader *r) {
  const int sel = rd_below(r, 16);
  if (sel < 10) return rd_below(r, 25);
  if (sel == 10) return INT32_MAX / 128;
  if (sel == 11) return INT32_MAX / 128 + 1;
  if (sel == 12) return -1 - rd_u8(r);
  if (sel == 13) return (int64_t)rd_u64(r);
  if (sel == 14) return 1 + rd_u16(r);
  return 40000 + rd_u16(r);
}
/* A request count the planners must refuse before they read a request. */
static int64_t rd_huge_requests(fz_reader *r) {
  switch (rd_below(r, 6)) {
  case 0:
    return INT32_MAX / 2 + 1;
  case 1:
    return INT32_MAX / 2 + 1 + rd_u16(r);
  case 2:
    return INT32_MAX;
  case 3:
    return INT64_MAX;
  case 4:
    return INT64_C(1) << (60 + rd_below(r, 3)); /* * 12 bytes wraps */
  default:
    return INT64_MIN + rd_u8(r);
  }
}

static uint64_t fz_table_bytes(const c128_ring *ring) {
  if (!ring->page_table || ring->num_pool <= 0) return 0;
  return (uint64_t)ring->num_pool * (uint64_t)ring->page_table_stride * 4u;
}

/* >>model: the planners' statuses ------------------------------------------------------------ */
static c128_status m_ring_status(const c128_ring *ring) {
  if (ring->rope_positions < 0) return C128_ERROR_NEGATIVE_SIZE;
  const c128_state_layout *l = &ring->state_layout;
  if (l->block_table) { /* DESIGN 5.11: the kernels' layout with its table; R = 2^row_shift */
    if (ring->state_pages < 0 || l->table_rows < 0 || l->table_stride < 0) return C128_ERROR_NEGATIVE_SIZE;
    const int shift = m_log2(l->block_rows ? l->block_rows : 128), rs = l->row_shift;
    if (shift < 3 || shift > 8 || rs < 7 || rs > 30 || ring->page_table ||
        (ring->ring_tokens && ring->ring_tokens != (int64_t)1 << rs) || l->table_rows > ((int64_t)1 << (31 - rs)) ||
        (l->table_rows > 0 && l->table_stride > INT64_MAX / 4 / l->table_rows) ||
        (l->score_block_table && !l->score_plane))
      return C128_ERROR_INVALID_STATE_LAYOUT;
    if (fz_misaligned(l->block_table, 4) || fz_misaligned(l->score_block_table, 4)) return C128_ERROR_MISALIGNED;
    return C128_SUCCESS;
  }
  const int64_t R = ring->ring_tokens ? ring->ring_tokens : 128;
  if (R <= 0 || R % 128) return C128_ERROR_INVALID_RING;
  if (ring->state_pages < 0 || (ring->page_table && ring->num_pool < 0)) return C128_ERROR_NEGATIVE_SIZE;
  if (ring->state_pages > INT32_MAX / 128) return C128_ERROR_STATE_TOO_LARGE;
  if (ring->page_table && (ring->page_table_stride < R / 128 ||
                           (ring->num_pool > 0 && ring->page_table_stride > INT64_MAX / ring->num_pool)))
    return C128_ERROR_INVALID_RING;
  if (fz_misaligned(ring->page_table, 4)) return C128_ERROR_MISALIGNED;
  return C128_SUCCESS;
}
/* Bytes of a ring's block table (one table's). */
static uint64_t fz_block_table_bytes(const c128_ring *ring) {
  const c128_state_layout *l = &ring->state_layout;
  return l->block_table ? (uint64_t)l->table_rows * (uint64_t)l->table_stride * 4u : 0u;
}

typedef struct m_page_use {
  int64_t page, request, chunk; /* chunk: the ring chunk (pos mod R) / 128 the page serves, or the
                                   table column (pos mod R) / B the block serves */
} m_page_use;
static int m_page_use_order(const void *x, const void *y) {
  const m_page_use *a = (const m_page_use *)x, *b = (const m_page_use *)y;
  if (a->page != b->page) return a->page < b->page ? -1 : 1;
  if (a->request != b->request) return a->request < b->request ? -1 : 1;
  return (a->chunk > b->chunk) - (a->chunk < b->chunk);
}
/* One page written for two requests, or for two ring chunks of one request (their slots
   collide: a page-table row that names a page twice); with a block table the same of the physical
   blocks, in each plane's table (`page` is plane << 31 | block), and table columns. */
static int m_pages_shared(m_page_use *u, int64_t n) {
  qsort(u, (size_t)n, sizeof *u, m_page_use_order);
  for (int64_t i = 1; i < n; ++i)
    if (u[i].page == u[i - 1].page && (u[i].request != u[i - 1].request || u[i].chunk != u[i - 1].chunk)) return 1;
  return 0;
}
static int m_planes(const m_ring *mr) { return mr->tabled && mr->st ? 2 : 1; }
/* The part of position pos of request x that holds its row in plane `plane`: page and chunk, or
   with a block table plane << 31 | block and column. */
static m_page_use m_part(const m_ring *mr, c128_request x, int64_t k, int64_t pos, int plane) {
  m_page_use u = {0, k, 0};
  if (mr->tabled) {
    u.chunk = (pos % mr->R) / mr->B;
    u.page = (int64_t)plane << 31 | (plane ? mr->st : mr->bt)[x.pool_index * mr->table_stride + u.chunk];
  } else {
    m_page(mr, x.pool_index, pos, &u.page), u.chunk = (pos % mr->R) / 128;
  }
  return u;
}
/* The parts request k writes at positions fw .. seq_len - 1 (all of them into u, when given), one
   per ring chunk or table column they meet, in every plane. */
static int64_t m_written(const m_ring *mr, c128_request x, int64_t k, int64_t fw, m_page_use *u) {
  const int64_t unit = mr->tabled ? mr->B : 128;
  int64_t m = 0;
  for (int64_t pos = fw; pos < x.seq_len; pos = (pos / unit + 1) * unit)
    for (int plane = 0; plane < m_planes(mr); ++plane, ++m)
      if (u) u[m] = m_part(mr, x, k, pos, plane);
  return m;
}
static int m_absent(c128_request q) { return q.seq_len == 0 && q.extend_len == 0; }

/* The status of a batch whose arguments are fine, and its plan counts (prefill). `aliased`: the
   entries the call would write overlap another argument, refused after the capacity check. */
static c128_status m_prefill_batch(const m_ring *mr, const c128_request *q, int64_t n, int verify, int64_t capacity,
                                   int aliased, int64_t *num_compress, int64_t *num_write) {
  const int64_t max_drafts = mr->spec ? mr->R - 128 + 2 : 1;
  int64_t nc = 0, nw = 0, rows = 0, nuse = 0;
  *num_compress = *num_write = 0;
  for (int64_t k = 0; k < n; ++k) {
    const c128_request x = q[k];
    if (m_absent(x)) continue;
    if (x.seq_len < 0 || x.extend_len < 0) return C128_ERROR_NEGATIVE_SIZE;
    if (x.extend_len == 0) return C128_ERROR_EMPTY_EXTEND;
    if (x.extend_len > x.seq_len) return C128_ERROR_EXTEND_EXCEEDS_SEQ;
    if (x.extend_len > C128_MAX_PREFILL_ROWS) return C128_ERROR_TOO_MANY_ROWS;
    if (verify && x.extend_len > max_drafts) return C128_ERROR_TOO_MANY_DRAFTS;
    if (rows + x.extend_len > C128_MAX_PREFILL_ROWS) return C128_ERROR_TOO_MANY_ROWS;
    const int64_t seq = x.seq_len, prefix = seq - x.extend_len, fw0 = m_first_write(mr, seq);
    const int64_t fw = fw0 > prefix ? fw0 : prefix, first_end = (prefix / 128 + 1) * 128 - 1;
    int64_t page;
    /* DESIGN 5.7: chunk by chunk of 128 positions, from the first window's or the first write's,
       whichever is lower: the window that ends in the chunk, then the chunk's writes */
    const int64_t lo = first_end < seq && first_end < fw ? first_end : fw;
    for (int64_t chunk = lo / 128 * 128; chunk < seq; chunk += 128) {
      const int64_t end = chunk + 127;
      c128_status st = C128_SUCCESS;
      if (end >= first_end && end < seq) { /* a compress event */
        st = m_page(mr, x.pool_index, end, &page);
        if (st == C128_SUCCESS) st = m_page(mr, x.pool_index, end >= 128 ? end - 128 : 0, &page);
        /* the window's rows before the batch come from the state: their blocks must be there */
        if (st == C128_SUCCESS) st = m_blocks(mr, x.pool_index, end - 127, prefix - (end - 127));
        if (st == C128_SUCCESS && mr->rope > 0 && end - 127 >= mr->rope) st = C128_ERROR_ROPE_TABLE_TOO_SHORT;
      }
      const int64_t wlo = chunk > fw ? chunk : fw, whi = seq < end + 1 ? seq : end + 1;
      if (st == C128_SUCCESS && wlo < whi) st = m_page(mr, x.pool_index, wlo, &page);       /* one page a chunk */
      if (st == C128_SUCCESS && wlo < whi) st = m_blocks(mr, x.pool_index, wlo, whi - wlo); /* the rows' blocks */
      if (st != C128_SUCCESS) return st;
    }
    nuse += m_written(mr, x, k, fw, NULL);
    nc += seq / 128 - prefix / 128, nw += seq - fw, rows += x.extend_len;
  }
  if (nc > capacity || nw > capacity) return C128_ERROR_CAPACITY_TOO_SMALL;
  if (aliased) return C128_ERROR_ALIASED;
  m_page_use *u = (m_page_use *)fz_alloc((size_t)nuse * sizeof *u + 1);
  int64_t m = 0;
  for (int64_t k = 0; k < n; ++k) {
    const c128_request x = q[k];
    if (m_absent(x)) continue;
    const int64_t seq = x.seq_len, prefix = seq - x.extend_len, fw0 = m_first_write(mr, seq);
    m += m_written(mr, x, k, fw0 > prefix ? fw0 : prefix, u + m);
  }
  const int shared = m_pages_shared(u, m);
  free(u);
  if (shared) return C128_ERROR_PAGE_SHARED;
  *num_compress = nc, *num_write = nw;
  return C128_SUCCESS;
}
static c128_status m_decode_batch(const m_ring *mr, const c128_request *q, int64_t n) {
  m_page_use *u = (m_page_use *)fz_alloc((size_t)n * 2 * sizeof *u + 1);
  int64_t m = 0;
  c128_status st = C128_SUCCESS;
  for (int64_t k = 0; k < n && st == C128_SUCCESS; ++k) {
    if (q[k].seq_len < 0) st = C128_ERROR_NEGATIVE_SIZE;
    if (q[k].seq_len <= 0) continue;
    const int64_t p = (int64_t)q[k].seq_len - 1;
    const int boundary = p % 128 == 127;
    int64_t page1, page0;
    st = m_page(mr, q[k].pool_index, p, &page1);
    if (st == C128_SUCCESS) st = m_page(mr, q[k].pool_index, p >= 128 ? p - 128 : 0, &page0);
    /* the new row's block, and at a boundary the blocks of the window's 127 rows before it */
    if (st == C128_SUCCESS) st = m_blocks(mr, q[k].pool_index, boundary ? p - 127 : p, boundary ? 128 : 1);
    if (st == C128_SUCCESS && boundary && mr->rope > 0 && p - 127 >= mr->rope) st = C128_ERROR_ROPE_TABLE_TOO_SHORT;
    if (st == C128_SUCCESS) m += m_written(mr, q[k], k, p, u + m); /* the new row's page, or blocks */
  }
  if (st == C128_SUCCESS && m_pages_shared(u, m)) st = C128_ERROR_PAGE_SHARED;
  /* A boundary window reads its rows in the launch that writes every new row: with blocks of
     fewer than 128 rows, none of its blocks may be written by the batch, but its own new row's
     (its column); blocks nobody writes any request may read. */
  for (int64_t k = 0; k < n && st == C128_SUCCESS && mr->tabled && mr->B < 128; ++k) {
    const int64_t p = (int64_t)q[k].seq_len - 1;
    if (p < 0 || p % 128 != 127) continue;
    for (int64_t pos = p - 127; pos < p && st == C128_SUCCESS; pos += mr->B) {
      if ((pos % mr->R) / mr->B == (p % mr->R) / mr->B) continue;
      for (int plane = 0; plane < m_planes(mr); ++plane) {
        const m_page_use w = m_part(mr, q[k], k, pos, plane);
        for (int64_t i = 0; i < m; ++i)
          if (u[i].page == w.page) st = C128_ERROR_PAGE_SHARED;
      }
    }
  }
  free(u);
  return st;
}

/* >>the scribbler: a thread that writes random int32s into an array until told to stop ------- */
typedef struct fz_scribbler {
  int32_t *words;
  size_t count;
  uint64_t seed;
  int started, stop; /* __atomic */
  uint64_t writes;
  pthread_t thread;
} fz_scribbler;
static void *fz_scribble(void *arg) {
  fz_scribbler *s = (fz_scribbler *)arg;
  fz_rng g = {s->seed};
  __atomic_store_n(&s->started, 1, __ATOMIC_RELEASE);
  while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
    const uint64_t x = rng_next(&g);
    const size_t i = (size_t)(x % s->count);
    const int sel = (int)((x >> 32) % 8);
    /* small values (valid-looking), negatives, huge ones, and back to something plausible */
    const int32_t v = sel < 3    ? (int32_t)((x >> 40) % 700)
                      : sel == 3 ? -(int32_t)((x >> 40) % 3) - 1
                      : sel == 4 ? INT32_MAX
                      : sel == 5 ? (int32_t)(x >> 16)
                      : sel == 6 ? 65536 + (int32_t)(x >> 60)
                                 : 0;
    __atomic_store_n(&s->words[i], v, __ATOMIC_RELAXED);
    ++s->writes;
  }
  return NULL;
}
static void fz_scribble_start(fz_scribbler *s, void *words, size_t bytes, uint64_t seed) {
  memset(s, 0, sizeof *s);
  s->words = (int32_t *)words, s->count = bytes / 4, s->seed = seed;
  if (!s->count) return;
  if (pthread_create(&s->thread, NULL, fz_scribble, s) != 0) {
    s->count = 0;
    return;
  }
  while (!__atomic_load_n(&s->started, __ATOMIC_ACQUIRE)) {
  }
}
static void fz_scribble_stop(fz_scribbler *s) {
  if (!s->count) return;
  __atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
  pthread_join(s->thread, NULL);
}

/* Every byte of [base, base + n) outside the regions equals its copy in `before`. */
typedef struct fz_region {
  const void *p;
  size_t n;
} fz_region;
static void fz_check_outside(int property, const char *base, const char *before, size_t n, const fz_region *reg,
                             int nreg, const char *who) {
  /* the regions as byte ranges of the arena, sorted; the gaps between them compared whole */
  size_t lo[16], hi[16];
  int m = 0;
  for (int i = 0; i < nreg && m < 16; ++i) {
    const char *p = (const char *)reg[i].p;
    if (!p || !reg[i].n || p + reg[i].n <= base || p >= base + n) continue;
    lo[m] = p < base ? 0 : (size_t)(p - base);
    hi[m] = p + reg[i].n > base + n ? n : (size_t)(p + reg[i].n - base);
    ++m;
  }
  for (int i = 1; i < m; ++i) /* insertion sort by start */
    for (int j = i; j > 0 && lo[j] < lo[j - 1]; --j) {
      const size_t a = lo[j], b = hi[j];
      lo[j] = lo[j - 1], hi[j] = hi[j - 1], lo[j - 1] = a, hi[j - 1] = b;
    }
  size_t at = 0;
  for (int i = 0; i <= m; ++i) {
    const size_t end = i < m ? lo[i] : n;
    if (end > at && memcmp(base + at, before + at, end - at) != 0)
      for (size_t k = at; k < end; ++k)
        FZ_CHECK(property, base[k] == before[k], "%s wrote byte %zu of its arena, outside the arrays it may write", who,
                 k);
    if (i < m && hi[i] > at) at = hi[i];
  }
}

static int fz_status_known(c128_status st) { return strcmp(c128_status_string(st), "unknown c128_status") != 0; }

/* A batch planned while its requests (or pages) changed: whatever the planner read, what it
   emitted is a batch the kernels can run and the checker accepts (pages inside the state; with
   a changing page table two requests may end up on one page, so there only the pages count). */
static void fz_check_planned(const c128_ring *ring, const c128_compress_plan *c, int64_t nc, const c128_write_plan *w,
                             int64_t nw, const c128_decode_plan *d, int64_t nd, int64_t capacity, int pages_only,
                             const char *who) {
  const c128_state_layout *l = &ring->state_layout;
  const int tabled = l->block_table != NULL;
  /* the pages plans may name: logical ones through a block table (DESIGN 5.9), else the state's */
  const int64_t P = tabled ? l->table_rows * (((int64_t)1 << l->row_shift) / 128) : ring->state_pages;
  /* a block table's state as the checker (h128, f32) takes it: more blocks than a launch of that
     instance accepts are the planner's to allow (it knows no head_dim), not the checker's */
  const int64_t B = l->block_rows ? l->block_rows : 128;
  const int checkable = !tabled || ring->state_pages <= INT64_MAX / ((B > 128 ? B : 128) * 256 * 4);
  if (d) {
    for (int64_t k = 0; k < nd; ++k)
      if (d[k].seq_len)
        FZ_CHECK(6,
                 d[k].write_loc >= 0 && d[k].write_loc / 128 < P && d[k].read_page_1 == d[k].write_loc / 128 &&
                     d[k].read_page_0 >= 0 && d[k].read_page_0 < P,
                 "%s: decode plan %lld names a page outside the state", who, (long long)k);
    if (pages_only || !checkable) return;
    c128_decode_args a;
    memset(&a, 0, sizeof a);
    a.head_dim = 128, a.state_pages = ring->state_pages, a.output_rows = nd, a.batch = nd, a.plans = d;
    a.state_layout = *l;
    char msg[160] = "";
    c128_plan_report rep = {0, C128_PLAN_DECODE, msg, sizeof msg};
    const c128_status st = c128_check_decode_plans(&a, &rep);
    FZ_CHECK(6, st == C128_SUCCESS, "%s: planned decode batch fails the checker: %s (%s)", who, c128_status_string(st),
             msg);
    return;
  }
  FZ_CHECK(6, nc >= 0 && nw >= 0 && nc <= capacity && nw <= capacity, "%s: counts %lld/%lld for capacity %lld", who,
           (long long)nc, (long long)nw, (long long)capacity);
  for (int64_t k = 0; k < nc; ++k)
    FZ_CHECK(6, c[k].read_page_1 >= 0 && c[k].read_page_1 < P && c[k].read_page_0 >= 0 && c[k].read_page_0 < P,
             "%s: compress plan %lld names a page outside the state", who, (long long)k);
  for (int64_t k = 0; k < nw; ++k)
    FZ_CHECK(6, w[k].write_loc >= 0 && w[k].write_loc / 128 < P, "%s: write plan %lld names a page outside the state",
             who, (long long)k);
  if (pages_only || !checkable) return;
  c128_prefill_args a;
  memset(&a, 0, sizeof a);
  a.head_dim = 128, a.state_pages = ring->state_pages, a.input_rows = C128_MAX_PREFILL_ROWS, a.output_rows = nc;
  a.state_layout = *l;
  a.compress_plans = c, a.num_compress = nc, a.write_plans = w, a.num_write = nw;
  char msg[160] = "";
  c128_plan_report rep = {0, C128_PLAN_DECODE, msg, sizeof msg};
  const c128_status st = c128_check_prefill_plans(&a, &rep);
  FZ_CHECK(6, st == C128_SUCCESS, "%s: planned batch fails the checker: %s (%s)", who, c128_status_string(st), msg);
}

/* The device planner's argument checks, in its order: the ring; negative sizes; counts past the
   limits; NULL status, workspace, requests (or the engine's arrays: seq_lens, and query_start for
   prefill) and plan arrays; misalignment of every array; then aliasing: what it writes
   (workspace, plans, counts, status) overlaps nothing it reads (requests or the engine's arrays,
   the page table, the block tables) nor each other. */
static c128_status m_device_args(const c128_device_plan_args *b, int decode) {
  c128_status st = m_ring_status(&b->ring);
  if (st != C128_SUCCESS) return st;
  if (b->num_requests < 0 || b->capacity < 0) return C128_ERROR_NEGATIVE_SIZE;
  if (b->num_requests > INT32_MAX / 2 || (!decode && b->capacity > C128_MAX_PREFILL_ROWS))
    return C128_ERROR_TOO_MANY_PLANS;
  const int lens = !b->requests && b->seq_lens;
  if (!b->status || !b->workspace ||
      (b->num_requests > 0 && !b->requests && (!b->seq_lens || (!decode && !b->query_start))))
    return C128_ERROR_NULL_POINTER;
  if (decode ? b->num_requests > 0 && !b->decode : b->capacity > 0 && (!b->compress || !b->write))
    return C128_ERROR_NULL_POINTER;
  if (fz_misaligned(b->workspace, 8) || fz_misaligned(b->counts, 8) || fz_misaligned(b->status, 4) ||
      fz_misaligned(b->compress, 16) || fz_misaligned(b->write, 8) || fz_misaligned(b->decode, 16) ||
      fz_misaligned(b->requests, 4) || fz_misaligned(b->seq_lens, 4) || fz_misaligned(b->query_start, 4) ||
      fz_misaligned(b->pool_indices, 4))
    return C128_ERROR_MISALIGNED;
  const uint64_t ws = c128_plan_workspace_size(b->num_requests), n = (uint64_t)b->num_requests;
  const void *out[6] = {
      b->workspace, decode ? NULL : b->compress, decode ? NULL : b->write, decode ? b->decode : NULL, b->counts,
      b->status};
  const uint64_t outn[6] = {ws, (uint64_t)b->capacity * 16, (uint64_t)b->capacity * 8, n * 16, 16, 4};
  const c128_state_layout *l = &b->ring.state_layout;
  const void *in[7] = {lens ? NULL : b->requests,
                       b->ring.page_table,
                       lens ? b->seq_lens : NULL,
                       lens && !decode ? b->query_start : NULL,
                       lens ? b->pool_indices : NULL,
                       l->block_table,
                       l->block_table ? l->score_block_table : NULL};
  const uint64_t inn[7] = {n * 12,
                           fz_table_bytes(&b->ring),
                           n * 4,
                           (n + 1) * 4,
                           n * 4,
                           fz_block_table_bytes(&b->ring),
                           fz_block_table_bytes(&b->ring)};
  for (int i = 0; i < 6; ++i) {
    for (int j = i + 1; j < 6; ++j)
      if (fz_overlaps(out[i], outn[i], out[j], outn[j])) return C128_ERROR_ALIASED;
    for (int j = 0; j < 7; ++j)
      if (fz_overlaps(out[i], outn[i], in[j], inn[j])) return C128_ERROR_ALIASED;
  }
  return C128_SUCCESS;
}

#define FZ_UP64(x) (((x) + 63) / 64 * 64)
/* The engine's arrays of a batch (DESIGN 5.11): c128_requests_from_lens against its definition,
   and the device planner reading seq_lens / query_start / pool_indices gives the host planner's
   status and bytes over the requests those arrays name. lsel % 4: 0 the arrays beside a request
   array (which wins), 1 all three arrays, 2 no pool_indices (request i is row i), 3 a
   query_start that decreases somewhere. lcorrupt: 1..3 requests_from_lens's arguments (NULL
   seq_lens, NULL requests, n = -1), 4..10 the device planner's (NULL, misaligned, aliased arrays). */
static void fz_check_engine_arrays(const c128_ring *ring, const c128_request *q, int64_t n, int decode, int verify,
                                   int64_t capacity, int lsel, int32_t qs0, int lcorrupt, uint64_t seed) {
  const int mode = lsel % 4, with_pool = mode != 2, with_requests = mode == 0;
  int32_t *seq = (int32_t *)fz_alloc((size_t)n * 4 + 1), *pool = (int32_t *)fz_alloc((size_t)n * 4 + 1);
  int32_t *qs = (int32_t *)fz_alloc((size_t)(n + 1) * 4);
  qs[0] = qs0;
  for (int64_t i = 0; i < n; ++i) {
    seq[i] = q[i].seq_len, pool[i] = q[i].pool_index;
    qs[i + 1] = (int32_t)((uint32_t)qs[i] + (uint32_t)q[i].extend_len);
  }
  if (mode == 3 && n > 0) {
    const int64_t i = (int64_t)(seed % (uint64_t)n);
    if (qs[i] == INT32_MIN) qs[i] = 0;
    qs[i + 1] = qs[i] - 1;
  }
  /* the requests the arrays name (an extend_len past INT32_MAX reads as INT32_MAX, a decreasing
     query_start as -1: refused as a negative size) */
  c128_request *want = (c128_request *)fz_alloc((size_t)n * sizeof *want + 1);
  int decreasing = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t d = (int64_t)qs[i + 1] - qs[i];
    decreasing |= d < 0;
    want[i].pool_index = with_pool ? pool[i] : (int32_t)i, want[i].seq_len = seq[i];
    want[i].extend_len = decode ? 1 : d < 0 ? -1 : d > INT32_MAX ? INT32_MAX : (int32_t)d;
  }
  { /* c128_requests_from_lens */
    const int32_t *qsp = decode ? NULL : qs;
    const int64_t nn = lcorrupt == 3 ? -1 : n;
    c128_request *out = (c128_request *)fz_alloc((size_t)n * sizeof *out + 1);
    memset(out, 0xCD, (size_t)n * sizeof *out + 1);
    const c128_status fst = c128_requests_from_lens(lcorrupt == 1 ? NULL : seq, qsp, with_pool ? pool : NULL, nn,
                                                    lcorrupt == 2 ? NULL : out);
    const c128_status fwant = nn < 0                           ? C128_ERROR_NEGATIVE_SIZE
                              : nn == 0                        ? C128_SUCCESS
                              : lcorrupt == 1 || lcorrupt == 2 ? C128_ERROR_NULL_POINTER
                              : qsp && decreasing              ? C128_ERROR_NEGATIVE_SIZE
                                                               : C128_SUCCESS;
    FZ_CHECK(3, fst == fwant, "c128_requests_from_lens: %s, expected %s", c128_status_string(fst),
             c128_status_string(fwant));
    if (fst != C128_SUCCESS || nn == 0) {
      for (size_t k = 0; k < (size_t)n * sizeof *out; ++k)
        FZ_CHECK(3, ((uint8_t *)out)[k] == 0xCD, "c128_requests_from_lens refused (%s) but wrote its output",
                 c128_status_string(fst));
    } else {
      for (int64_t i = 0; i < n; ++i)
        FZ_CHECK(3,
                 out[i].pool_index == want[i].pool_index && out[i].seq_len == want[i].seq_len &&
                     out[i].extend_len == want[i].extend_len,
                 "c128_requests_from_lens: request %lld is {%d, %d, %d}, the arrays say {%d, %d, %d}", (long long)i,
                 out[i].pool_index, out[i].seq_len, out[i].extend_len, want[i].pool_index, want[i].seq_len,
                 want[i].extend_len);
    }
    free(out);
  }
  if (capacity < 0 || capacity > 700) capacity = 0;
  if (decode) capacity = 0;
  /* the device planner from the arrays, its outputs in an arena of their own */
  const size_t ws_bytes = c128_plan_workspace_size(n), cb = (size_t)capacity * 16, wb = (size_t)capacity * 8,
               db = (size_t)n * 16;
  const size_t bytes = FZ_UP64(ws_bytes) + FZ_UP64(cb) + FZ_UP64(wb) + FZ_UP64(db) + 64 * 8;
  char *dev = (char *)fz_alloc(bytes);
  memset(dev, 0xEE, bytes);
  size_t off = 64;
  c128_device_plan_args a;
  memset(&a, 0, sizeof a);
  a.ring = *ring, a.num_requests = n, a.verify = verify, a.capacity = capacity;
  a.requests = with_requests ? q : NULL;
  a.seq_lens = seq, a.query_start = decode && !(lsel & 8) ? NULL : qs, a.pool_indices = with_pool ? pool : NULL;
  a.workspace = dev + off, off += FZ_UP64(ws_bytes) + 64;
  a.compress = decode ? NULL : (c128_compress_plan *)(dev + off), off += FZ_UP64(cb) + 64;
  a.write = decode ? NULL : (c128_write_plan *)(dev + off), off += FZ_UP64(wb) + 64;
  a.decode = decode ? (c128_decode_plan *)(dev + off) : NULL, off += FZ_UP64(db) + 64;
  a.counts = (int64_t *)(dev + off), off += 64;
  a.status = (int32_t *)(dev + off);
  *a.status = 0x5A5A5A5A;
  int32_t *shifted = NULL;
  switch (lcorrupt) {
  case 4:
    a.seq_lens = NULL;
    break;
  case 5:
    a.query_start = NULL;
    break;
  case 6:
  case 7:
    shifted = (int32_t *)fz_alloc((size_t)n * 4 + 8);
    memcpy((char *)shifted + 2, lcorrupt == 6 ? seq : pool, (size_t)n * 4);
    if (lcorrupt == 6) a.seq_lens = (const int32_t *)((char *)shifted + 2);
    else if (a.pool_indices) a.pool_indices = (const int32_t *)((char *)shifted + 2);
    break;
  case 8:
    a.seq_lens = (const int32_t *)a.workspace;
    break;
  case 9:
    if (a.query_start) a.query_start = (const int32_t *)a.counts;
    break;
  case 10:
    if (a.pool_indices) a.pool_indices = a.status;
    break;
  default:
    break;
  }
  const c128_status dwant = m_device_args(&a, decode);
  char *dev0 = (char *)fz_clone(dev, bytes);
  const c128_status dret = decode ? c128_plan_decode_device_host(&a) : c128_plan_prefill_device_host(&a);
  FZ_CHECK(4, dret == dwant, "device planner from the engine's arrays (corruption %d): %s, expected %s", lcorrupt,
           c128_status_string(dret), c128_status_string(dwant));
  if (dret != C128_SUCCESS) {
    FZ_CHECK(4, *a.status == (int32_t)dret, "device planner refused its arguments (%s) but *status is %d",
             c128_status_string(dret), *a.status);
    const fz_region may[2] = {{a.status, 4}, {a.counts, 16}};
    fz_check_outside(4, dev, dev0, bytes, may, 2, "device planner refusing the engine's arrays");
  } else { /* the host planner over the requests the arrays name */
    const c128_request *hq = with_requests ? q : want;
    c128_status hst;
    char *host = (char *)fz_alloc(cb + wb + db + 1);
    memset(host, 0xCD, cb + wb + db + 1);
    c128_prefill_plans pp = {(c128_compress_plan *)host, (c128_write_plan *)(host + cb), capacity, 1, 0, 0};
    if (decode) hst = c128_plan_decode(ring, hq, n, (c128_decode_plan *)(host + cb + wb));
    else hst = c128_plan_prefill(ring, hq, n, verify, &pp);
    /* rows from query_start[0] (DESIGN 5.11): a negative one is refused first; past 0 every plan's
       row moves by it, and the rows before it count towards the launch's 65536, so a batch past
       them is TOO_MANY_ROWS where the host planner passed it (where it failed, whichever request
       fails first decides: either status) */
    const int32_t row0 = !decode && !with_requests && a.query_start ? qs[0] : 0;
    int64_t rows = 0;
    for (int64_t i = 0; i < n; ++i) rows += hq[i].extend_len > 0 ? hq[i].extend_len : 0;
    const int past = row0 > 0 && rows > 0 && row0 + rows > C128_MAX_PREFILL_ROWS; /* no rows: nothing addressed */
    const c128_status expect = row0 < 0                      ? C128_ERROR_NEGATIVE_SIZE
                               : past && hst == C128_SUCCESS ? C128_ERROR_TOO_MANY_ROWS
                                                             : hst;
    FZ_CHECK(4, *a.status == (int32_t)expect || (past && *a.status == (int32_t)C128_ERROR_TOO_MANY_ROWS),
             "device planner from the engine's arrays: %s, host planner %s (query_start[0] %d)",
             c128_status_string((c128_status)*a.status), c128_status_string(hst), row0);
    for (int64_t k = 0; expect == C128_SUCCESS && k < pp.num_compress; ++k)
      ((c128_compress_plan *)host)[k].ragged_id = (uint16_t)(((c128_compress_plan *)host)[k].ragged_id + row0);
    for (int64_t k = 0; expect == C128_SUCCESS && k < pp.num_write; ++k)
      ((c128_write_plan *)(host + cb))[k].ragged_id += (uint32_t)row0;
    if (expect == C128_SUCCESS) {
      if (decode) {
        FZ_CHECK(4, memcmp(a.decode, host + cb + wb, db) == 0,
                 "decode plans from the engine's arrays differ from the host planner's");
      } else {
        FZ_CHECK(4, a.counts[0] == pp.num_compress && a.counts[1] == pp.num_write,
                 "counts from the engine's arrays %lld/%lld, host %lld/%lld", (long long)a.counts[0],
                 (long long)a.counts[1], (long long)pp.num_compress, (long long)pp.num_write);
        FZ_CHECK(4, memcmp(a.compress, host, cb) == 0 && memcmp(a.write, host + cb, wb) == 0,
                 "prefill plans from the engine's arrays differ from the host planner's");
        fz_check_planned(ring, a.compress, pp.num_compress, a.write, pp.num_write, NULL, 0, capacity, 0,
                         "device planner (engine's arrays)");
      }
    }
    free(host);
  }
  free(dev0), free(dev), free(shifted), free(seq), free(pool), free(qs), free(want);
}

static void fz_mode_planner(fz_reader *r) {
  const int decode = rd_below(r, 3) == 0;
  c128_ring ring;
  memset(&ring, 0, sizeof ring);
  const int rsel = rd_below(r, 8);
  ring.ring_tokens = rsel == 0   ? 0
                     : rsel < 4  ? 128 * rsel
                     : rsel == 4 ? 128 * rd_below(r, 40)
                     : rsel == 5 ? (int32_t)rd_u32(r)
                     : rsel == 6 ? -128
                                 : 100;
  ring.speculative = rd_below(r, 3);
  ring.state_pages = rd_pages(r);
  const int64_t R = ring.ring_tokens ? ring.ring_tokens : 128;
  const int64_t chunks = R > 0 && R % 128 == 0 ? R / 128 : 1;
  int32_t *table = NULL;
  int64_t entries = 0;
  if (rd_below(r, 2) && chunks <= 64) {
    ring.num_pool = rd_below(r, 8) == 0 ? -1 : rd_below(r, 6);
    ring.page_table_stride = chunks + rd_below(r, 3);
    ring.page_table_stride -= rd_below(r, 8) == 0;
    entries = (ring.num_pool > 0 ? ring.num_pool : 0) * (ring.page_table_stride > 0 ? ring.page_table_stride : 0);
    table = (int32_t *)fz_alloc(sizeof(int32_t) * (size_t)entries + 1);
    for (int64_t k = 0; k < entries; ++k) {
      const int sel = rd_below(r, 8);
      table[k] = sel < 6    ? (int32_t)rd_below(r, 12) - 1
                 : sel == 6 ? (int32_t)rd_u32(r)
                            : (int32_t)ring.state_pages - 1 + rd_below(r, 3);
    }
    ring.page_table = table;
  }
  const int verify = rd_below(r, 2);
  const int64_t n = rd_u8(r) < 224 ? rd_below(r, 9) : rd_below16(r, 601);
  c128_request *q = (c128_request *)fz_alloc(sizeof *q * (size_t)n + 1);
  for (int64_t k = 0; k < n; ++k) {
    q[k].pool_index = rd_pool(r, ring.num_pool);
    q[k].seq_len = rd_seq(r);
    q[k].extend_len = rd_below(r, 12) == 0 ? 0 : rd_extend(r, q[k].seq_len);
    if (rd_below(r, 12) == 0) q[k].seq_len = 0, q[k].extend_len = 0; /* absent */
  }
  const int csel = rd_below(r, 16);
  int64_t capacity = csel < 12 ? rd_below16(r, 700) : csel == 12 ? 0 : csel == 13 ? -1 : csel == 14 ? 65536 : -2;
  const int with_counts = rd_below(r, 4) != 0;
  const int csel2 = rd_u8(r), corrupt = csel2 < 224 ? 0 : 1 + (csel2 - 224) % 8;
  /* Fields added with the hardening (old inputs read them as 0). */
  const int xsel = rd_below(r, 16);
  const int xkind = rd_below(r, 10);
  const uint64_t xseed = rd_u64(r);
  int64_t n_call = n; /* the count passed to the planners */
  if (xsel == 9) n_call = rd_huge_requests(r);
  if (xsel == 10) capacity = C128_MAX_PREFILL_ROWS + 1 + rd_u16(r) * (xkind + 1);
  if (xsel == 15 && n >= 2) { /* two requests on one pool row, or two table rows on one page */
    const int64_t i = rd_below16(r, (int)n), j = (i + 1 + rd_below16(r, (int)n - 1)) % n;
    if (table && entries >= 2 && rd_below(r, 2)) {
      const int64_t to = rd_below16(r, (int)entries), from = rd_below16(r, (int)entries);
      table[to] = table[from];
    } else {
      q[j].pool_index = q[i].pool_index;
    }
  }
  /* Fields added with other engines' layouts (DESIGN 5.11; old inputs read them as 0): write_all,
     a block table in ring.state_layout (the planners check every block a plan uses), the RoPE
     table's rows, and the device planner's engine-array form. */
  ring.write_all = rd_below(r, 2);
  const int tsel = rd_u8(r);
  int32_t *btable = NULL, *stable = NULL;
  int64_t bentries = 0;
  if (tsel) {
    const int bsel = rd_u8(r), rs_sel = rd_u8(r), tr_sel = rd_u8(r), st_sel = rd_u8(r), style = rd_u8(r);
    const int nsel = rd_u8(r);
    fz_rng tg = {rd_u64(r)};
    c128_state_layout *l = &ring.state_layout;
    static const int32_t bad_rows[8] = {3, 12, 0, 512, -8, 4, 100, 1};
    static const int32_t edge_rs[8] = {6, 30, 31, -1, 24, 25, 8, 7};
    l->block_rows = bsel < 220 ? 8 << (bsel % 6) : bad_rows[bsel % 8];
    l->row_shift = rs_sel < 200 ? 7 + rs_sel % 4 : edge_rs[rs_sel % 8];
    const int rs = l->row_shift;
    const int64_t B = m_log2(l->block_rows ? l->block_rows : 128) >= 3 ? (l->block_rows ? l->block_rows : 128) : 128;
    const int64_t lim = rs >= 7 && rs <= 30 ? (int64_t)1 << (31 - rs) : 0;
    const int64_t edge_tr[8] = {lim, lim + 1, -1, INT64_MAX, lim - 1, 0, 1, 2};
    l->table_rows = tr_sel < 200 ? tr_sel % 7 : edge_tr[tr_sel % 8];
    int64_t need = rs >= 0 && rs <= 30 ? ((int64_t)1 << rs) / B : 1;
    if (need < 1) need = 1;
    if (need > 256) need = 1 + st_sel % 4; /* positions past the first columns have no block */
    const int64_t tr = l->table_rows > 0 ? l->table_rows : 1;
    const int64_t edge_st[8] = {0, -1, 1, INT64_MAX / 4 / tr + 1, 2 * need, INT64_MAX, need, need};
    l->table_stride = st_sel < 200 ? (need - 1 + st_sel % 3 > 0 ? need - 1 + st_sel % 3 : 0) : edge_st[st_sel % 8];
    const int64_t rt = l->table_rows, st = l->table_stride;
    bentries = rt >= 0 && st >= 0 && (rt == 0 || st <= 65536 / rt) ? rt * st : -1;
    const int64_t blocks = ring.state_pages >= 0 && ring.state_pages < 4096 ? ring.state_pages : 64;
    const int stab = (tsel >> 3) & 1;
    if (bentries >= 0) {
      btable = (int32_t *)fz_alloc((size_t)bentries * 4 + 1);
      fz_fill_table(btable, bentries, blocks, style, &tg);
      if (stab)
        stable = (int32_t *)fz_alloc((size_t)bentries * 4 + 1),
        fz_fill_table(stable, bentries, blocks, style >> 3, &tg);
    } else { /* sizes no buffer holds: only where the planners refuse them */
      btable = (int32_t *)fz_alloc(16), memset(btable, 0xFF, 16);
      if (stab) stable = (int32_t *)fz_alloc(16), memset(stable, 0xFF, 16);
    }
    l->block_table = btable, l->score_block_table = stable;
    if (stab || (tsel & 0x10)) l->score_plane = (void *)&ring; /* never read by a planner */
    if (stab && (tsel & 0x20)) l->score_plane = NULL;          /* refused */
    const int rmode = (tsel >> 1) & 3;
    ring.ring_tokens = rmode == 0                          ? 0
                       : rmode == 1 && rs >= 0 && rs <= 30 ? 1 << rs
                       : rmode == 2                        ? ring.ring_tokens
                                                           : 256;
    if (!(tsel & 0x40)) ring.page_table = NULL; /* 0x40: a page table beside the block table (refused) */
    ring.has_null_block = nsel & 1, ring.null_block = (int32_t)((nsel >> 1) % 4) - 1;
    if (bentries < 0 && m_ring_status(&ring) == C128_SUCCESS) l->table_rows = -1; /* refused */
  }
  const int ropesel = rd_u8(r);
  static const int64_t ropes[13] = {1, 127, 128, 129, 200, 256, 383, 384, 1000, -1, 600, 65536, INT64_MAX};
  ring.rope_positions = ropesel ? ropes[ropesel % 13] : 0;
  const int lsel = rd_u8(r); /* the device planner's engine arrays (0: none) */
  const int32_t qs0 = lsel & 4 ? (int32_t)rd_u32(r) : 0;
  const int lcorrupt_sel = rd_u8(r), lcorrupt = lcorrupt_sel < 200 ? 0 : 1 + (lcorrupt_sel - 200) % 10;
  const int tabled = ring.state_layout.block_table != NULL;

  const int alias_host = xsel == 11, alias_dev = xsel == 12, scribble = xsel == 13 || (xsel == 14 && !tabled);
  fz_set_context("mode 3 (planner) %s ring {R %d, spec %d, table %s stride %lld pool %lld, pages %lld} requests %lld "
                 "(count %lld) verify %d capacity %lld extra %d/%d",
                 decode ? "decode" : "prefill", ring.ring_tokens, ring.speculative, table ? "yes" : "no",
                 (long long)ring.page_table_stride, (long long)ring.num_pool, (long long)ring.state_pages, (long long)n,
                 (long long)n_call, verify, (long long)capacity, xsel, xkind);
  if (ring.write_all || tsel || ring.rope_positions || lsel)
    fz_add_context(" write_all %d block table %s {B %d, shift %d, rows %lld, stride %lld, score table %s, null %d:%d} "
                   "rope %lld engine arrays %d (corruption %d)",
                   ring.write_all, tabled ? "yes" : "no", ring.state_layout.block_rows, ring.state_layout.row_shift,
                   (long long)ring.state_layout.table_rows, (long long)ring.state_layout.table_stride,
                   stable ? "yes" : "no", ring.has_null_block, ring.null_block, (long long)ring.rope_positions, lsel,
                   lcorrupt);

  /* Host planner: arrays with canaries (the arena), placed to alias when asked. */
  const int64_t cap = capacity > 0 && capacity <= C128_MAX_PREFILL_ROWS ? capacity : 0; /* more is refused untouched */
  const size_t cbytes = sizeof(c128_compress_plan) * (size_t)cap, wbytes = sizeof(c128_write_plan) * (size_t)cap;
  const size_t dbytes = sizeof(c128_decode_plan) * (size_t)n, qbytes = sizeof *q * (size_t)n;
  const size_t arena_bytes =
      FZ_UP64(cbytes) + FZ_UP64(wbytes) + FZ_UP64(dbytes) + qbytes + sizeof(c128_prefill_plans) + 320;
  char *arena = (char *)fz_alloc(arena_bytes);
  memset(arena, 0xCD, arena_bytes);
  c128_compress_plan *hc = (c128_compress_plan *)(arena + 64);
  c128_write_plan *hw = (c128_write_plan *)(arena + 64 + FZ_UP64(cbytes) + 64);
  c128_decode_plan *hd = (c128_decode_plan *)(arena + 64 + FZ_UP64(cbytes) + 64 + FZ_UP64(wbytes) + 64);
  c128_prefill_plans plans_local = {hc, hw, capacity, 1, -7, -7}, *plans = &plans_local;
  const c128_request *hq = q;
  c128_ring hring = ring;
  if (alias_host) { /* overlapping arguments, the rest of the arena holding them */
    const int64_t dst = decode ? n : cap;
    char *into = decode ? (char *)hd : (char *)hc;
    const size_t into_bytes = decode ? dbytes : cbytes;
    const size_t at = into_bytes ? 4 * (size_t)(xseed % (into_bytes / 4)) : 0;
    switch (xkind % 5) {
    case 0: /* requests inside the plans */
      if (dst > 0 && n > 0)
        memmove(into + at, q, qbytes < into_bytes - at ? qbytes : into_bytes - at),
            hq = (const c128_request *)(into + at);
      break;
    case 1: /* requests inside the write plans (decode: the same as 0) */
      if (!decode && cap > 0 && n > 0) hq = (const c128_request *)((char *)hw + 4 * (size_t)(xseed % (wbytes / 4)));
      else if (dst > 0 && n > 0) hq = (const c128_request *)(into + at);
      break;
    case 2: /* compress and write plans overlap (decode: the page table inside the plans) */
      if (!decode && cap > 0) plans_local.write = (c128_write_plan *)((char *)hc + 8 * (size_t)(xseed % (cbytes / 8)));
      else if (table) hring.page_table = (const int32_t *)(into + at);
      break;
    case 3: /* the page table inside the plans */
      if (table && dst > 0) hring.page_table = (const int32_t *)(into + at);
      break;
    default: /* the plans struct inside the compress plans (decode: requests = the plans) */
      if (!decode && cap > 0) {
        plans = (c128_prefill_plans *)(into + 8 * (size_t)(xseed % (cbytes / 8 > 1 ? cbytes / 8 - 1 : 1)));
        memcpy(plans, &plans_local, sizeof plans_local);
      } else if (dst > 0) {
        hq = (const c128_request *)into;
      }
      break;
    }
  }
  char *arena0 = (char *)fz_clone(arena, arena_bytes);

  /* The statuses to expect. */
  const m_ring mr = m_ring_of(&ring);
  c128_status want = m_ring_status(&hring);
  int64_t nc = 0, nw = 0;
  if (want == C128_SUCCESS && !decode) {
    const c128_prefill_plans *pp = plans;
    if (n_call > 0 && !hq) want = C128_ERROR_NULL_POINTER;
    else if (n_call < 0 || pp->capacity < 0) want = C128_ERROR_NEGATIVE_SIZE;
    else if (pp->capacity > C128_MAX_PREFILL_ROWS) want = C128_ERROR_TOO_MANY_PLANS;
    else if (n_call > INT32_MAX / 2) want = C128_ERROR_TOO_MANY_PLANS;
    else { /* the entries it writes (every one: the arrays are padded) against what it reads */
      const int aliased =
          fz_overlaps(hq, (uint64_t)n_call * 12, pp->compress, (uint64_t)pp->capacity * 16) ||
          fz_overlaps(hq, (uint64_t)n_call * 12, pp->write, (uint64_t)pp->capacity * 8) ||
          fz_overlaps(pp->compress, (uint64_t)pp->capacity * 16, pp->write, (uint64_t)pp->capacity * 8) ||
          fz_overlaps(hring.page_table, fz_table_bytes(&hring), pp->compress, (uint64_t)pp->capacity * 16) ||
          fz_overlaps(hring.page_table, fz_table_bytes(&hring), pp->write, (uint64_t)pp->capacity * 8) ||
          fz_overlaps(pp, sizeof *pp, pp->compress, (uint64_t)pp->capacity * 16) ||
          fz_overlaps(pp, sizeof *pp, pp->write, (uint64_t)pp->capacity * 8);
      /* the batch as the planner reads it: the request array where it lies */
      want = m_prefill_batch(&mr, hq, n_call, verify, pp->capacity, aliased, &nc, &nw);
    }
  } else if (want == C128_SUCCESS) {
    if (n_call < 0) want = C128_ERROR_NEGATIVE_SIZE;
    else if (n_call > INT32_MAX / 2) want = C128_ERROR_TOO_MANY_PLANS;
    else if (n_call == 0) want = C128_SUCCESS;
    else if (fz_overlaps(hq, (uint64_t)n_call * 12, hd, (uint64_t)n_call * 16) ||
             fz_overlaps(hring.page_table, fz_table_bytes(&hring), hd, (uint64_t)n_call * 16))
      want = C128_ERROR_ALIASED;
    else want = m_decode_batch(&mr, hq, n_call);
  }

  fz_scribbler sc;
  memset(&sc, 0, sizeof sc);
  if (scribble && xsel == 13 && !alias_host) fz_scribble_start(&sc, q, qbytes, xseed);
  if (scribble && xsel == 14 && table) fz_scribble_start(&sc, table, (size_t)entries * 4, xseed);
  const c128_status hst =
      decode ? c128_plan_decode(&hring, hq, n_call, hd) : c128_plan_prefill(&hring, hq, n_call, verify, plans);
  fz_scribble_stop(&sc);
  fz_add_context(" -> %s", c128_status_string(hst));
  const int64_t pnc = plans->num_compress, pnw = plans->num_write;
  if (plans != &plans_local) memcpy(&plans_local, plans, sizeof plans_local); /* read it before the arena changes */

  {
    const fz_region reg[3] = {{hc, cbytes}, {hw, wbytes}, {hd, dbytes}};
    fz_check_outside(6, arena, arena0, arena_bytes, reg, 3, "host planner");
  }
  if (scribble) {
    FZ_CHECK(6, fz_status_known(hst), "host planner with a scribbler: status %d outside the enum", (int)hst);
    if (hst == C128_SUCCESS)
      fz_check_planned(&ring, hc, pnc, hw, pnw, decode ? hd : NULL, n, capacity, xsel == 14, "host planner");
    else if (xsel == 13)
      FZ_CHECK(6, memcmp(arena, arena0, arena_bytes) == 0, "host planner refused (%s) a scribbled batch but wrote",
               c128_status_string(hst));
    else { /* a changed page table may leave plans, but whole ones */
      for (int64_t k = 0; k < cap; ++k)
        if (memcmp(&hc[k], arena0 + ((char *)&hc[k] - arena), sizeof hc[k]) != 0 && hc[k].seq_len != C128_INVALID_ID)
          FZ_CHECK(6,
                   hc[k].read_page_0 >= 0 && hc[k].read_page_0 < ring.state_pages && hc[k].read_page_1 >= 0 &&
                       hc[k].read_page_1 < ring.state_pages,
                   "host planner refused (%s) a batch whose page table changed, leaving compress plan %lld half "
                   "written (pages %d, %d)",
                   c128_status_string(hst), (long long)k, hc[k].read_page_0, hc[k].read_page_1);
    }
  } else {
    FZ_CHECK(3, hst == want, "host planner: %s, the model %s", c128_status_string(hst), c128_status_string(want));
    if (hst != C128_SUCCESS)
      FZ_CHECK(3, memcmp(arena, arena0, arena_bytes) == 0 && (plans != &plans_local || (pnc == -7 && pnw == -7)),
               "host planner failed with %s but wrote plans or counts", c128_status_string(hst));
  }

  if (!scribble && hst == C128_SUCCESS && decode) {
    for (int64_t k = 0; k < n; ++k) { /* SPEC 5 */
      c128_decode_plan w = {0, -1, -1, -1};
      if (q[k].seq_len > 0) {
        const int64_t p = (int64_t)q[k].seq_len - 1;
        int64_t p1 = 0, p0 = 0;
        m_page(&mr, q[k].pool_index, p, &p1), m_page(&mr, q[k].pool_index, p >= 128 ? p - 128 : 0, &p0);
        w.seq_len = (uint32_t)q[k].seq_len, w.write_loc = (int32_t)(p1 * 128 + p % 128);
        w.read_page_0 = (int32_t)p0, w.read_page_1 = (int32_t)p1;
      }
      FZ_CHECK(3, memcmp(&hd[k], &w, sizeof w) == 0, "decode plan %lld: {%u, %d, %d, %d}, SPEC 5 {%u, %d, %d, %d}",
               (long long)k, hd[k].seq_len, hd[k].write_loc, hd[k].read_page_0, hd[k].read_page_1, w.seq_len,
               w.write_loc, w.read_page_0, w.read_page_1);
    }
    fz_check_planned(&ring, NULL, 0, NULL, 0, hd, n, 0, 0, "host planner (no scribbler)");
  } else if (!scribble && hst == C128_SUCCESS) {
    FZ_CHECK(3, pnc == nc && pnw == nw, "host counts %lld/%lld, SPEC 5 %lld/%lld", (long long)pnc, (long long)pnw,
             (long long)nc, (long long)nw);
    int64_t kc = 0, kw = 0, base = 0;
    for (int64_t k = 0; k < n; ++k) { /* SPEC 5, plan by plan */
      if (m_absent(q[k])) continue;
      const int64_t seq = q[k].seq_len, prefix = seq - q[k].extend_len, fw = m_first_write(&mr, seq);
      for (int64_t j = 0; j < q[k].extend_len; ++j) {
        const int64_t pos = prefix + j;
        int64_t p0 = 0, p1 = 0;
        if ((pos + 1) % 128 == 0) {
          m_page(&mr, q[k].pool_index, pos, &p1), m_page(&mr, q[k].pool_index, pos >= 128 ? pos - 128 : 0, &p0);
          const c128_compress_plan c = {(uint32_t)(pos + 1), (uint16_t)(base + j), (uint16_t)(j < 127 ? 127 - j : 0),
                                        (int32_t)p0, (int32_t)p1};
          FZ_CHECK(3, memcmp(&hc[kc], &c, sizeof c) == 0, "compress plan %lld differs from SPEC 5", (long long)kc);
          ++kc;
        }
        if (pos >= fw) {
          m_page(&mr, q[k].pool_index, pos, &p1);
          const c128_write_plan w = {(uint32_t)(base + j), (int32_t)(p1 * 128 + pos % 128)};
          FZ_CHECK(3, memcmp(&hw[kw], &w, sizeof w) == 0, "write plan %lld differs from SPEC 5", (long long)kw);
          ++kw;
        }
      }
      base += q[k].extend_len;
    }
    for (int64_t k = nc; k < cap; ++k) { /* padded */
      const c128_compress_plan no_c = C128_INVALID_COMPRESS_PLAN;
      const c128_write_plan no_w = C128_INVALID_WRITE_PLAN;
      FZ_CHECK(3, memcmp(&hc[k], &no_c, sizeof no_c) == 0, "compress slot %lld past the plans is not a sentinel",
               (long long)k);
      if (k >= nw)
        FZ_CHECK(3, memcmp(&hw[k], &no_w, sizeof no_w) == 0, "write slot %lld is not a sentinel", (long long)k);
    }
    /* The planner never emits a batch its checker rejects. */
    fz_check_planned(&ring, hc, nc, hw, nw, NULL, 0, capacity, 0, "host planner (no scribbler)");
  }

  /* Device planner's host path: outputs in their own arena with canaries. */
  c128_device_plan_args a;
  memset(&a, 0, sizeof a);
  a.ring = ring, a.requests = q, a.num_requests = n_call, a.verify = verify, a.capacity = decode ? 0 : capacity;
  const size_t ws_bytes = c128_plan_workspace_size(n_call > n ? n : n_call);
  const size_t dev_bytes = ws_bytes + cbytes + wbytes + dbytes + 16 * 64;
  char *dev = (char *)fz_alloc(dev_bytes);
  memset(dev, 0xEE, dev_bytes);
  size_t off = 64;
  a.workspace = dev + off, off += (ws_bytes + 63) / 64 * 64 + 64;
  c128_compress_plan *dc = (c128_compress_plan *)(dev + off);
  off += (cbytes + 63) / 64 * 64 + 64;
  c128_write_plan *dw = (c128_write_plan *)(dev + off);
  off += (wbytes + 63) / 64 * 64 + 64;
  c128_decode_plan *dd = (c128_decode_plan *)(dev + off);
  off += (dbytes + 63) / 64 * 64 + 64;
  int64_t *counts = with_counts ? (int64_t *)(dev + off) : NULL;
  off += 64;
  int32_t *status = (int32_t *)(dev + off);
  if (off + 4 > dev_bytes) fz_fail(4, "harness: device arena too small");
  *status = 0x5A5A5A5A;
  if (counts) counts[0] = counts[1] = -9;
  a.status = status, a.counts = counts;
  if (decode) a.decode = dd;
  else a.compress = dc, a.write = dw;

  /* Bad pointer arguments (corrupt) or overlapping ones (alias_dev): the device path refuses
     them with the status the model gives; it writes no plan, and the refusal to *status (zero
     counts) where status is usable. */
  c128_device_plan_args b = a;
  if (corrupt) {
    switch (corrupt) {
    case 1:
      b.status = NULL;
      break;
    case 2:
      b.workspace = NULL;
      break;
    case 3:
      b.requests = NULL;
      break;
    case 4:
      b.workspace = (char *)a.workspace + 4;
      break;
    case 5:
      b.counts = counts ? (int64_t *)((char *)counts + 4) : NULL;
      break;
    case 6:
      if (decode) b.decode = (c128_decode_plan *)((char *)dd + 8);
      else b.compress = (c128_compress_plan *)((char *)dc + 8);
      break;
    case 7:
      b.requests = (const c128_request *)((const char *)q + 2);
      break;
    default:
      if (decode) b.decode = NULL;
      else b.compress = NULL;
      break;
    }
  }
  if (alias_dev) {
    const size_t wsb = b.workspace ? ws_bytes : 0; /* a corruption may have made it NULL */
    switch (xkind) {
    case 0:
      if (wsb >= 16) b.requests = (const c128_request *)((char *)b.workspace + 4 * (xseed % (wsb / 4)));
      break;
    case 1:
      if (counts) b.status = (int32_t *)counts + (xseed & 3);
      break; /* status inside counts */
    case 2:
      if (wsb >= 16) b.counts = (int64_t *)((char *)b.workspace + 8 * (xseed % (wsb / 8)));
      break;
    case 3:
      if (wsb >= 16 && decode) b.decode = (c128_decode_plan *)((char *)b.workspace + 16 * (xseed % (wsb / 16 + 1)));
      if (wsb >= 16 && !decode)
        b.compress = (c128_compress_plan *)((char *)b.workspace + 16 * (xseed % (wsb / 16 + 1)));
      break;
    case 4:
      if (!decode && cap > 0) b.write = (c128_write_plan *)((char *)dc + 8 * (xseed % (cbytes / 8)));
      if (decode && n > 0) b.requests = (const c128_request *)dd;
      break;
    case 5:
      if (table) b.ring.page_table = decode ? (const int32_t *)dd : (const int32_t *)dc;
      break;
    case 6:
      if (wsb >= 16) b.status = (int32_t *)((char *)b.workspace + 4 * (xseed % (wsb / 4)));
      break;
    case 7:
      if (counts && decode && n > 0) b.counts = (int64_t *)dd;
      if (counts && !decode && cap > 0) b.counts = (int64_t *)dw;
      break;
    case 8: /* counts over the requests (an input) */
      if (counts && n >= 2 && ((uintptr_t)q % 8) == 0) b.counts = (int64_t *)q;
      break;
    default: /* status over the page table */
      if (table && entries > 0) b.status = table;
      break;
    }
  }
  /* The device planner's argument checks, in order. */
  const c128_status want_dev = m_device_args(&b, decode);
  if (want_dev != C128_SUCCESS || corrupt || alias_dev) {
    char *dev0 = (char *)fz_clone(dev, dev_bytes);
    const c128_status bst = decode ? c128_plan_decode_device_host(&b) : c128_plan_prefill_device_host(&b);
    const int status_usable = b.status && !fz_misaligned(b.status, 4);
    const int counts_usable = b.counts && !fz_misaligned(b.counts, 8);
    if (want_dev != C128_SUCCESS) {
      FZ_CHECK(4, bst == want_dev, "device planner with bad arguments (%d, alias %d/%d): %s, expected %s", corrupt,
               alias_dev, xkind, c128_status_string(bst), c128_status_string(want_dev));
      if (status_usable)
        FZ_CHECK(4, *b.status == (int32_t)bst, "device planner refused its arguments (%s) but *status is %d",
                 c128_status_string(bst), *b.status);
      /* Nothing else written: the arena is as it was but for status and counts. */
      const fz_region may[2] = {{b.status, status_usable ? 4u : 0u}, {b.counts, counts_usable ? 16u : 0u}};
      fz_check_outside(4, dev, dev0, dev_bytes, may, 2, "device planner refusing its arguments");
      if (status_usable && counts_usable && !fz_overlaps(b.status, 4, b.counts, 16))
        FZ_CHECK(4, b.counts[0] == 0 && b.counts[1] == 0, "device planner refused its arguments but counts %lld/%lld",
                 (long long)b.counts[0], (long long)b.counts[1]);
    }
    memcpy(dev, dev0, dev_bytes);
    free(dev0);
  }

  if (n_call == n && !alias_dev) { /* the real call */
    if (scribble && xsel == 13) fz_scribble_start(&sc, q, qbytes, xseed ^ 0x5555);
    if (scribble && xsel == 14 && table) fz_scribble_start(&sc, table, (size_t)entries * 4, xseed ^ 0x5555);
    const c128_status dret = decode ? c128_plan_decode_device_host(&a) : c128_plan_prefill_device_host(&a);
    fz_scribble_stop(&sc);
    const c128_status dst = dret != C128_SUCCESS ? dret : (c128_status)*status;
    if (scribble) {
      FZ_CHECK(6, fz_status_known(dst), "device planner with a scribbler: status %d outside the enum", (int)dst);
      if (dret == C128_SUCCESS && dst == C128_SUCCESS) {
        const int64_t dnc = counts ? counts[0] : 0, dnw = counts ? counts[1] : 0;
        if (counts || decode)
          fz_check_planned(&ring, dc, dnc, dw, dnw, decode ? dd : NULL, n, capacity, xsel == 14, "device planner");
      }
    } else if (!alias_host || hst == want) {
      /* The host's status, but for aliasing of the host's own arguments, which the device call
         does not share. */
      c128_status want_d = alias_host ? C128_SUCCESS : hst;
      if (alias_host) { /* recompute from the unaliased arguments */
        want_d = m_ring_status(&ring);
        int64_t x, y;
        if (want_d == C128_SUCCESS && !decode && capacity < 0) want_d = C128_ERROR_NEGATIVE_SIZE;
        else if (want_d == C128_SUCCESS && !decode && capacity > C128_MAX_PREFILL_ROWS)
          want_d = C128_ERROR_TOO_MANY_PLANS;
        else if (want_d == C128_SUCCESS)
          want_d = decode ? m_decode_batch(&mr, q, n) : m_prefill_batch(&mr, q, n, verify, capacity, 0, &x, &y);
      }
      FZ_CHECK(4, dst == want_d, "host planner %s (model %s), device planner %s (returned %s)", c128_status_string(hst),
               c128_status_string(want_d), c128_status_string(dst), c128_status_string(dret));
      if (dst == C128_SUCCESS && !alias_host) {
        if (decode) {
          FZ_CHECK(4, memcmp(hd, dd, dbytes) == 0, "decode plans differ between the host and device planners");
        } else {
          FZ_CHECK(4, !counts || (counts[0] == pnc && counts[1] == pnw), "counts: device %lld/%lld, host %lld/%lld",
                   (long long)counts[0], (long long)counts[1], (long long)pnc, (long long)pnw);
          FZ_CHECK(4, memcmp(hc, dc, cbytes) == 0 && memcmp(hw, dw, wbytes) == 0,
                   "prefill plans differ between the host and device planners");
        }
      } else if (dret == C128_SUCCESS && dst != C128_SUCCESS) { /* a bad batch: zero counts and sentinels only */
        const c128_compress_plan no_c = C128_INVALID_COMPRESS_PLAN;
        const c128_write_plan no_w = C128_INVALID_WRITE_PLAN;
        const c128_decode_plan no_d = {0, -1, -1, -1};
        FZ_CHECK(4, !counts || (counts[0] == 0 && counts[1] == 0), "device planner failed with counts %lld/%lld",
                 (long long)counts[0], (long long)counts[1]);
        for (int64_t k = 0; k < (decode ? n : cap); ++k) {
          if (decode)
            FZ_CHECK(4, memcmp(&dd[k], &no_d, sizeof no_d) == 0,
                     "device planner failed, decode plan %lld is not padding", (long long)k);
          else
            FZ_CHECK(4, memcmp(&dc[k], &no_c, sizeof no_c) == 0 && memcmp(&dw[k], &no_w, sizeof no_w) == 0,
                     "device planner failed, plan slot %lld is not a sentinel", (long long)k);
        }
      } else if (dret != C128_SUCCESS) {
        FZ_CHECK(4, *status == (int32_t)dret && (!counts || (counts[0] == 0 && counts[1] == 0)),
                 "device planner returned %s but *status is %d", c128_status_string(dret), *status);
      }
    }
    char *clean = (char *)fz_alloc(dev_bytes);
    memset(clean, 0xEE, dev_bytes);
    const fz_region reg[6] = {{a.workspace, ws_bytes},     {dc, cbytes}, {dw, wbytes}, {dd, dbytes},
                              {counts, counts ? 16u : 0u}, {status, 4}};
    fz_check_outside(6, dev, clean, dev_bytes, reg, 6, "device planner");
    free(clean);
  }
  if (lsel && !scribble && !alias_host && !alias_dev && !corrupt && n_call == n)
    fz_check_engine_arrays(&ring, q, n, decode, verify, capacity, lsel, qs0, lcorrupt, xseed);
  free(dev), free(arena), free(arena0), free(q), free(table), free(btable), free(stable);
}
