/* The serving simulator of scenario.h. */
#include "scenario.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { W = REF_WINDOW, PLAN_POISON = 0xA5, OUT_POISON = 0xFF };

/* ---- SPEC 5, written out again ------------------------------------------------------------ */

static int64_t spec_ring_tokens(const c128_ring *ring) { return ring->ring_tokens ? ring->ring_tokens : W; }

c128_status spec_page(const c128_ring *ring, int32_t pool_index, int64_t pos, int32_t *page) {
  const int64_t R = spec_ring_tokens(ring), k = (pos % R) / W;
  if (pool_index < 0) return C128_ERROR_POOL_INDEX_OUT_OF_RANGE;
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

/* Every request is checked before any plan is built; compress events are enumerated by window
   end and writes by position range (the closed forms of SPEC 5), then copied out if they fit. */
/* Pages of different requests are distinct, and so are the pages of one request's ring chunks:
   no state page may be written by two requests of one batch, or for two chunks of one request
   (the write plans of request i are contiguous, in batch order). */
static c128_status spec_pages_unshared(const c128_write_plan *wp, int64_t nw, const c128_request *reqs, int64_t n,
                                       const c128_ring *ring) {
  int64_t *owner = malloc((size_t)(nw + 1) * sizeof *owner), *chunk = malloc((size_t)(nw + 1) * sizeof *chunk);
  cr_assert(owner && chunk);
  const int64_t R = spec_ring_tokens(ring), pad = ring->speculative ? R - W + 2 : 0;
  int64_t k = 0;
  for (int64_t i = 0; i < n; ++i) { /* the same count as the planner's write loop */
    const int64_t seq = reqs[i].seq_len, prefix = seq - reqs[i].extend_len;
    const int64_t boundary = seq - seq % W, first = boundary < seq - pad ? boundary : seq - pad;
    for (int64_t pos = first > prefix ? first : prefix; pos < seq; ++pos) owner[k] = i, chunk[k++] = (pos % R) / W;
  }
  c128_status st = C128_SUCCESS;
  for (int64_t a = 0; a < nw && st == C128_SUCCESS; ++a)
    for (int64_t b = a + 1; b < nw; ++b)
      if ((owner[a] != owner[b] || chunk[a] != chunk[b]) && wp[a].write_loc / W == wp[b].write_loc / W) {
        st = C128_ERROR_PAGE_SHARED;
        break;
      }
  free(owner), free(chunk);
  return st;
}

c128_status spec_plan_prefill(const c128_ring *ring, const c128_request *reqs, int64_t n, int32_t verify,
                              int64_t capacity, c128_compress_plan *compress, int64_t *num_compress,
                              c128_write_plan *write, int64_t *num_write) {
  const int64_t R = spec_ring_tokens(ring);
  const int64_t pad = ring->speculative ? R - W + 2 : 0;
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
      cp[nc++] = c;
    }
    /* persisted: positions >= min(floor(seq / 128) * 128, seq - pad) */
    const int64_t boundary = seq - seq % W;
    const int64_t first = boundary < seq - pad ? boundary : seq - pad;
    for (int64_t pos = first > prefix ? first : prefix; pos < seq && st == C128_SUCCESS; ++pos) {
      c128_write_plan w;
      w.ragged_id = (uint32_t)(base + pos - prefix);
      st = spec_slot(ring, rid, pos, &w.write_loc);
      wp[nw++] = w;
    }
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
      if (st != C128_SUCCESS) return st;
      d.seq_len = (uint32_t)reqs[b].seq_len;
      d.read_page_1 = d.write_loc / W;
    }
    plans[b] = d;
  }
  for (int64_t a = 0; a < n; ++a) /* two requests never write one page */
    for (int64_t b = a + 1; b < n; ++b)
      if (plans[a].seq_len && plans[b].seq_len && plans[a].read_page_1 == plans[b].read_page_1)
        return C128_ERROR_PAGE_SHARED;
  return C128_SUCCESS;
}

/* ---- the simulator ------------------------------------------------------------------------ */

typedef struct request {
  int live, pool_index;
  int64_t len, cap, windows_done;
  unsigned char *history; /* [cap][2D] committed rows, input dtype */
  float *outputs;         /* keep_outputs: [cap / 128][D] */
} request;

struct scenario {
  scen_config cfg;
  c128_instance_info f;
  rng r;
  c128_ring ring;
  int32_t *page_table;
  int64_t pages;
  size_t state_row, input_row, out_row, state_bytes;
  unsigned char *state;  /* CPU: the state itself; GPU: its copy after the last batch */
  unsigned char *expect; /* the state a batch must leave */
  float *ape;
  request *reqs;
  int num_reqs, cap_reqs;
  int *pool_owner; /* request per pool row, -1 = free */
  scen_stats stats;
  float *window_rows; /* oracle scratch: [128][2D] */
  unsigned char *row_tmp;
  double *ref;
  double max_kv; /* largest |kv| of any row drawn so far: bounds every window's */
  device_buffer d_state, d_input, d_ape, d_out, d_plans_a, d_plans_b;
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

scenario *scen_create(const scen_config *config) {
  scenario *s = calloc(1, sizeof *s);
  cr_assert_not_null(s);
  s->cfg = *config;
  cr_assert(config->entry && config->num_pool > 0);
  s->f = *config->entry;
  s->r.seed = s->r.state = config->seed ? config->seed : rng_fresh().seed;
  if (s->cfg.layout == SCEN_LEGACY) s->cfg.ring_tokens = W, s->cfg.speculative = 0;
  const int R = s->cfg.ring_tokens, per = R / W;
  cr_assert(R > 0 && R % W == 0);
  const int D = s->f.head_dim;

  /* Legacy is the zero-initialised ring; the page table maps pool rows to shuffled pages (three
     spare pages that nobody owns, and a spare column of unallocated entries). */
  memset(&s->ring, 0, sizeof s->ring);
  s->ring.ring_tokens = s->cfg.layout == SCEN_LEGACY ? 0 : R;
  s->ring.speculative = s->cfg.speculative;
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
    const int stride = per + 1;
    s->page_table = xmalloc((size_t)s->cfg.num_pool * stride * sizeof *s->page_table);
    for (int p = 0; p < s->cfg.num_pool; ++p) {
      for (int k = 0; k < per; ++k) s->page_table[p * stride + k] = perm[p * per + k];
      s->page_table[p * stride + per] = -1;
    }
    free(perm);
    s->ring.page_table = s->page_table;
    s->ring.page_table_stride = stride;
    s->ring.num_pool = s->cfg.num_pool;
  }
  s->ring.state_pages = s->pages;

  s->state_row = (size_t)s->f.row_elems * dtype_size(s->f.state_dtype);
  s->input_row = (size_t)s->f.row_elems * dtype_size(s->f.input_dtype);
  s->out_row = (size_t)D * dtype_size(s->f.output_dtype);
  s->state_bytes = (size_t)s->pages * W * s->state_row;
  s->state = xmalloc(s->state_bytes);
  s->expect = xmalloc(s->state_bytes);
  poison(s->state, s->state_bytes); /* a read of a row nobody wrote gives NaN */
  s->ape = ape_make(D, &s->r);
  s->pool_owner = xmalloc((size_t)s->cfg.num_pool * sizeof *s->pool_owner);
  for (int p = 0; p < s->cfg.num_pool; ++p) s->pool_owner[p] = -1;
  s->window_rows = xmalloc((size_t)W * 2 * (size_t)D * sizeof(float));
  s->row_tmp = xmalloc(s->state_row);
  s->ref = xmalloc((size_t)D * sizeof(double));
  if (s->cfg.be == BACKEND_GPU) {
    device_upload(&s->d_state, s->state, s->state_bytes);
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
  return s->num_reqs++;
}

static void check_all_windows(const scenario *s, const request *q, int id) {
  cr_assert_eq(q->windows_done, q->len / W,
               "request %d: %lld tokens committed but %lld windows emitted and checked (seed %llu)", id,
               (long long)q->len, (long long)q->windows_done, (unsigned long long)s->r.seed);
}

void scen_close(scenario *s, int id) {
  request *q = req_of(s, id);
  check_all_windows(s, q, id);
  s->pool_owner[q->pool_index] = -1;
  free(q->history);
  q->history = NULL;
  q->live = 0;
}

int64_t scen_len(const scenario *s, int id) { return s->reqs[id].len; }
int scen_pool_index(const scenario *s, int id) { return s->reqs[id].pool_index; }
int scen_num_requests(const scenario *s) { return s->num_reqs; }
scen_stats scen_get_stats(const scenario *s) { return s->stats; }

const float *scen_window(const scenario *s, int id, int64_t window) {
  if (id < 0 || id >= s->num_reqs || !s->reqs[id].outputs || window >= s->reqs[id].windows_done) return NULL;
  return s->reqs[id].outputs + window * s->f.head_dim;
}

const void *scen_state(const scenario *s, size_t *bytes) {
  if (bytes) *bytes = s->state_bytes;
  return s->state;
}

void scen_destroy(scenario *s) {
  for (int i = 0; i < s->num_reqs; ++i) {
    if (s->reqs[i].live) check_all_windows(s, &s->reqs[i], i);
    free(s->reqs[i].history);
    free(s->reqs[i].outputs);
  }
  device_release(&s->d_state), device_release(&s->d_input), device_release(&s->d_ape);
  device_release(&s->d_out), device_release(&s->d_plans_a), device_release(&s->d_plans_b);
  free(s->reqs), free(s->page_table), free(s->state), free(s->expect), free(s->ape), free(s->pool_owner);
  free(s->window_rows), free(s->row_tmp), free(s->ref);
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
   (rounded to its dtype), the others come from the input as committed. */
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
    const int64_t pos = window * W + j;
    if (j < buffer_len) {
      row_to_state(q->history, (size_t)pos, s->f.input_dtype, s->row_tmp, s->f.state_dtype, D);
      row_widen(s->row_tmp, 0, D, s->f.state_dtype, dst);
    } else {
      row_widen(q->history, (size_t)pos, D, s->f.input_dtype, dst);
    }
    rows[j] = dst;
  }
  ref_window(D, rows, s->ape, s->ref);
  char what[160];
  snprintf(what, sizeof what, "%s: request %d (pool row %d) window %lld, buffer_len %d", kind, id, q->pool_index,
           (long long)window, buffer_len);
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

/* After a batch: the state equals the expected one (written rows converted, all others as they
   were). */
static void check_written(scenario *s, const char *kind) {
  for (int64_t row = 0; row < s->pages * W; ++row)
    cr_assert(memcmp(s->state + (size_t)row * s->state_row, s->expect + (size_t)row * s->state_row, s->state_row) == 0,
              "%s, batch %lld: state row %lld (page %lld slot %lld) is not what the plans wrote / left (seed %llu)",
              kind, (long long)s->stats.batches, (long long)row, (long long)(row / W), (long long)(row % W),
              (unsigned long long)s->r.seed);
}

/* After the commit: every live request's open window is in its ring slots. */
static void check_ring(scenario *s, const char *kind) {
  for (int id = 0; id < s->num_reqs; ++id) {
    const request *q = &s->reqs[id];
    if (!q->live) continue;
    for (int64_t pos = q->len / W * W; pos < q->len; ++pos) {
      int32_t slot = -1;
      cr_assert_eq(spec_slot(&s->ring, q->pool_index, pos, &slot), C128_SUCCESS);
      row_to_state(q->history, (size_t)pos, s->f.input_dtype, s->row_tmp, s->f.state_dtype, s->f.head_dim);
      cr_assert(memcmp(s->state + (size_t)slot * s->state_row, s->row_tmp, s->state_row) == 0,
                "%s, batch %lld: ring invariant broken: request %d (pool row %d, %lld committed) position %lld "
                "is not in its slot %d (seed %llu)",
                kind, (long long)s->stats.batches, id, q->pool_index, (long long)q->len, (long long)pos, (int)slot,
                (unsigned long long)s->r.seed);
    }
  }
}

static void apply_write(scenario *s, const void *input, int64_t in_row, int64_t state_row) {
  cr_assert(state_row >= 0 && state_row < s->pages * W);
  row_to_state(input, (size_t)in_row, s->f.input_dtype, s->expect + (size_t)state_row * s->state_row, s->f.state_dtype,
               s->f.head_dim);
  s->stats.writes++;
}

static int reverse_now(const scenario *s) { return s->cfg.reverse && (s->stats.batches & 1); }

/* GPU: the state stays on the device; input, plans and the poisoned output go up, state and
   output come back. With cross_check the host runner repeats the batch from the same state. */
/* The GPU's output rows against the host runner's (check_gpu_output: bit for bit in the exact
   build, within the fast build's bound otherwise), over the input and state this batch read. */
static void cross_check_output(const scenario *s, const void *host_out, const void *gpu_out, size_t out_bytes) {
  const size_t rows = out_bytes / ((size_t)s->f.head_dim * dtype_size(s->f.output_dtype));
  check_gpu_output(gpu_out, host_out, rows, s->f.output_dtype, s->f.head_dim, s->max_kv, "GPU vs host runner outputs",
                   s->r.seed);
}

static void run_prefill_batch(scenario *s, c128_prefill_args *a, size_t out_bytes) {
  const instance_entry *e = s->cfg.entry;
  if (s->cfg.be == BACKEND_CPU) {
    a->state = s->state;
    const c128_status st = run_prefill(e, BACKEND_CPU, a, reverse_now(s));
    cr_assert_eq(st, C128_SUCCESS, "%s (seed %llu)", c128_status_string(st), (unsigned long long)s->r.seed);
    return;
  }
  void *host_state = NULL, *host_out = NULL;
  if (s->cfg.cross_check) {
    c128_prefill_args h = *a;
    h.state = host_state = clone_bytes(s->state, s->state_bytes);
    h.output = host_out = clone_bytes(a->output, out_bytes);
    cr_assert_eq(e->prefill_host(&h, NULL), C128_SUCCESS);
  }
  c128_prefill_args d = *a;
  d.state = s->d_state.ptr;
  d.ape = s->d_ape.ptr;
  d.input = device_upload(&s->d_input, a->input, (size_t)a->input_rows * s->input_row);
  d.output = device_upload(&s->d_out, a->output, out_bytes);
  d.compress_plans =
      device_upload(&s->d_plans_a, a->compress_plans, (size_t)a->num_compress * sizeof(c128_compress_plan));
  d.write_plans = device_upload(&s->d_plans_b, a->write_plans, (size_t)a->num_write * sizeof(c128_write_plan));
  const c128_status st = e->prefill(&d, 0);
  cr_assert_eq(st, C128_SUCCESS, "%s", c128_status_string(st));
  cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess);
  device_download(&s->d_state, s->state, s->state_bytes);
  device_download(&s->d_out, a->output, out_bytes);
  if (host_state) {
    cr_assert(memcmp(host_state, s->state, s->state_bytes) == 0, "GPU and host runner states differ (seed %llu)",
              (unsigned long long)s->r.seed);
    cross_check_output(s, host_out, a->output, out_bytes);
  }
  free(host_state), free(host_out);
}

/* run_prefill_batch's steps for the other args struct and its one plan array. */
static void run_decode_batch(scenario *s, c128_decode_args *a, size_t out_bytes) {
  const instance_entry *e = s->cfg.entry;
  if (s->cfg.be == BACKEND_CPU) {
    a->state = s->state;
    const c128_status st = run_decode(e, BACKEND_CPU, a, reverse_now(s));
    cr_assert_eq(st, C128_SUCCESS, "%s (seed %llu)", c128_status_string(st), (unsigned long long)s->r.seed);
    return;
  }
  void *host_state = NULL, *host_out = NULL;
  if (s->cfg.cross_check) {
    c128_decode_args h = *a;
    h.state = host_state = clone_bytes(s->state, s->state_bytes);
    h.output = host_out = clone_bytes(a->output, out_bytes);
    cr_assert_eq(e->decode_host(&h, NULL), C128_SUCCESS);
  }
  c128_decode_args d = *a;
  d.state = s->d_state.ptr;
  d.ape = s->d_ape.ptr;
  d.input = device_upload(&s->d_input, a->input, (size_t)a->batch * s->input_row);
  d.output = device_upload(&s->d_out, a->output, out_bytes);
  d.plans = device_upload(&s->d_plans_a, a->plans, (size_t)a->batch * sizeof(c128_decode_plan));
  const c128_status st = e->decode(&d, 0);
  cr_assert_eq(st, C128_SUCCESS, "%s", c128_status_string(st));
  cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess);
  device_download(&s->d_state, s->state, s->state_bytes);
  device_download(&s->d_out, a->output, out_bytes);
  if (host_state) {
    cr_assert(memcmp(host_state, s->state, s->state_bytes) == 0, "GPU and host runner states differ (seed %llu)",
              (unsigned long long)s->r.seed);
    cross_check_output(s, host_out, a->output, out_bytes);
  }
  free(host_state), free(host_out);
}

static void fill_args_common(const scenario *s, int32_t *head_dim, c128_dtype *sd, c128_dtype *id, c128_dtype *od) {
  *head_dim = s->f.head_dim;
  *sd = s->f.state_dtype;
  *id = s->f.input_dtype;
  *od = s->f.output_dtype;
}

/* The batch's planner requests; checks the items. */
static c128_request *batch_requests(scenario *s, const scen_item *items, int n, int verify, int64_t *rows) {
  c128_request *q = xmalloc((size_t)n * sizeof *q);
  *rows = 0;
  for (int i = 0; i < n; ++i) {
    const request *r = req_of(s, items[i].req);
    for (int k = 0; k < i; ++k) cr_assert_neq(items[k].req, items[i].req, "a request twice in one batch");
    if (verify) cr_assert(items[i].accept >= 1 && items[i].accept <= items[i].extend);
    q[i].pool_index = r->pool_index;
    q[i].seq_len = (int32_t)(r->len + items[i].extend);
    q[i].extend_len = items[i].extend;
    *rows += items[i].extend;
  }
  return q;
}

void scen_extend(scenario *s, const scen_item *items, int n, int verify) {
  const int D = s->f.head_dim;
  const uint64_t seed = s->r.seed;
  int64_t rows;
  c128_request *q = batch_requests(s, items, n, verify, &rows);
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

  /* Run: launch the counts, or the whole capacity when padded (CUDA-graph style). */
  const int64_t launch_c = s->cfg.pad_plans ? cap : nc, launch_w = s->cfg.pad_plans ? cap : nw;
  const int64_t out_rows = launch_c > 0 ? launch_c : 1;
  const size_t out_bytes = (size_t)out_rows * s->out_row;
  void *out = xmalloc(out_bytes);
  memset(out, OUT_POISON, out_bytes);
  memcpy(s->expect, s->state, s->state_bytes);
  for (int64_t k = 0; k < nw; ++k) apply_write(s, input, plans.write[k].ragged_id, plans.write[k].write_loc);
  c128_prefill_args a;
  memset(&a, 0, sizeof a);
  fill_args_common(s, &a.head_dim, &a.state_dtype, &a.input_dtype, &a.output_dtype);
  a.state_pages = s->pages;
  a.input = input;
  a.input_rows = rows;
  a.ape = s->ape;
  a.output = out;
  a.output_rows = out_rows;
  a.compress_plans = plans.compress;
  a.num_compress = launch_c;
  a.write_plans = plans.write;
  a.num_write = launch_w;
  run_prefill_batch(s, &a, out_bytes);
  const char *kind = verify ? "verify batch" : "prefill/extend batch";
  check_written(s, kind);

  /* Commit, then check the windows whose tokens are all committed; discard the others. */
  int64_t base = 0, k = 0;
  for (int i = 0; i < n; ++i) {
    request *r = &s->reqs[items[i].req];
    const int64_t prefix = r->len, accept = verify ? items[i].accept : items[i].extend;
    commit(s, r, input, base, accept);
    for (int64_t end = (prefix / W + 1) * W - 1; end < prefix + items[i].extend; end += W, ++k) {
      const int64_t j = end - prefix;
      if (end < prefix + accept) check_window(s, items[i].req, end / W, j < W - 1 ? (int)(W - 1 - j) : 0, out, k, kind);
      else s->stats.windows_discarded++;
    }
    base += items[i].extend;
  }
  cr_assert_eq(k, nc);
  for (int64_t row = nc; row < out_rows; ++row)
    cr_assert(all_bytes((char *)out + (size_t)row * s->out_row, s->out_row, OUT_POISON),
              "output row %lld of no valid plan was written (seed %llu)", (long long)row, (unsigned long long)seed);
  check_ring(s, kind);
  s->stats.batches++;
  s->stats.rows += rows;
  free(q), free(input), free(plans.compress), free(plans.write), free(want_c), free(want_w), free(out);
}

void scen_decode(scenario *s, const int *ids, int n) {
  const int D = s->f.head_dim;
  const uint64_t seed = s->r.seed;
  cr_assert(n > 0);
  c128_request *q = xmalloc((size_t)n * sizeof *q);
  for (int b = 0; b < n; ++b) {
    memset(&q[b], 0, sizeof q[b]);
    if (ids[b] < 0) continue; /* padding row: seq_len 0 */
    const request *r = req_of(s, ids[b]);
    for (int k = 0; k < b; ++k) cr_assert_neq(ids[k], ids[b], "a request twice in one batch");
    q[b].pool_index = r->pool_index;
    q[b].seq_len = (int32_t)(r->len + 1);
    q[b].extend_len = 1;
  }
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
  const size_t out_bytes = (size_t)n * s->out_row;
  void *out = xmalloc(out_bytes);
  memset(out, OUT_POISON, out_bytes);
  memcpy(s->expect, s->state, s->state_bytes);
  for (int b = 0; b < n; ++b)
    if (plans[b].seq_len != 0 && plans[b].write_loc >= 0) apply_write(s, input, b, plans[b].write_loc);
  c128_decode_args a;
  memset(&a, 0, sizeof a);
  fill_args_common(s, &a.head_dim, &a.state_dtype, &a.input_dtype, &a.output_dtype);
  a.state_pages = s->pages;
  a.input = input;
  a.ape = s->ape;
  a.output = out;
  a.output_rows = n;
  a.plans = plans;
  a.batch = n;
  run_decode_batch(s, &a, out_bytes);
  check_written(s, "decode step");

  for (int b = 0; b < n; ++b) {
    const int boundary = ids[b] >= 0 && (s->reqs[ids[b]].len + 1) % W == 0;
    if (ids[b] >= 0) commit(s, &s->reqs[ids[b]], input, b, 1);
    if (boundary) {
      check_window(s, ids[b], s->reqs[ids[b]].len / W - 1, W - 1, out, b, "decode step");
    } else {
      cr_assert(all_bytes((char *)out + (size_t)b * s->out_row, s->out_row, OUT_POISON),
                "decode output row %d written without a boundary (seed %llu)", b, (unsigned long long)seed);
    }
  }
  check_ring(s, "decode step");
  s->stats.batches++;
  s->stats.rows += n;
  free(q), free(plans), free(want), free(input), free(out);
}

void scen_extend_refused(scenario *s, const scen_item *items, int n, int verify, c128_status want) {
  int64_t rows;
  c128_request *q = batch_requests(s, items, n, 0, &rows);
  const int64_t cap = rows > 0 ? rows : 1;
  c128_prefill_plans plans;
  memset(&plans, 0, sizeof plans);
  plans.compress = plan_alloc((size_t)cap * sizeof(c128_compress_plan));
  plans.write = plan_alloc((size_t)cap * sizeof(c128_write_plan));
  plans.capacity = cap;
  plans.pad_to_capacity = 1;
  plans.num_compress = plans.num_write = -7;
  const c128_status st = c128_plan_prefill(&s->ring, q, n, verify, &plans);
  cr_assert_eq(st, want, "planner: got %s, want %s", c128_status_string(st), c128_status_string(want));
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
