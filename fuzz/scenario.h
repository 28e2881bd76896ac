/* Mode 2: a serving scenario decoded from the input. Up to three requests on a legacy ring, a
   request ring or a shuffled page table (R = 128, 256 or 384, speculative or not), optionally
   owner-sharded over 2 or 3 ranks (each rank runs the kernels on its own view of the state),
   go through prefill / extend, decode and speculative verify batches planned by the host
   planner or the device planner's host path. Part of fuzz_c128.cu.

   Property 3: every plan is SPEC 5 byte for byte, passes the plan checker and runs without a
   race; every compressed window whose tokens are all committed matches the fp64 oracle over the
   request's committed tokens (rows read from the state rounded to its dtype); output rows no
   valid plan names stay untouched; exactly the rows named by write plans changed, each its input
   row converted; every rank leaves the pages it does not own alone, and all ranks emit the same
   bits; after every batch the ring holds every committed position of each open window.
   Property 4 on valid batches: the device planner's host path emits the host planner's bytes. */

enum { SC_MAXREQ = 3, SC_MAXPOS = 768, SC_MAXROWS = 320, SC_MAXBATCH = 8 };

static float sc_tok[SC_MAXREQ][SC_MAXPOS][2 * FZ_MAX_D]; /* committed (and draft) tokens, in the input dtype */

typedef struct sc_req {
  int32_t pool;
  int64_t len; /* committed tokens */
} sc_req;

typedef struct sc {
  const fz_instance *I;
  int D;
  uint8_t flags;
  c128_ring ring;
  m_ring mr;
  int32_t *page_table;
  c128_shared_layout lay; /* size 1 or the sharded layout (rank set per run) */
  int64_t pages;          /* logical = physical pages of every view */
  size_t page_bytes, row_bytes;
  void *G; /* the state, indexed by logical page */
  int nreq;
  sc_req req[SC_MAXREQ];
  fz_rng g;
  int style;
  float *ape;
  int step;
} sc;

static int64_t sc_logical_row(const sc *s, int32_t pool, int64_t pos) {
  int64_t page = -1;
  const c128_status st = m_page(&s->mr, pool, pos, &page);
  if (st != C128_SUCCESS)
    fz_fail(3, "harness: page of pool %d position %lld: %s", pool, (long long)pos, c128_status_string(st));
  return page * 128 + pos % 128;
}

/* Row `row` of the state (logical) is token `tok` converted to the state dtype. */
static int sc_row_is(const sc *s, const void *state, int64_t row, const float *tok) {
  for (int e = 0; e < 2 * s->D; ++e) {
    const float got = fz_get(state, row * 2 * s->D + e, s->I->buf);
    if (fz_bits(got) != fz_bits(fz_round_to(s->I->buf, tok[e]))) return 0;
  }
  return 1;
}

static void sc_new_token(sc *s, int i, int64_t pos) {
  for (int c = 0; c < 2 * s->D; ++c) {
    const float x = rng_randn(&s->g);
    sc_tok[i][pos][c] = fz_round_to(s->I->in, c >= s->D && s->style ? 60.0f * x : x);
  }
}

/* Runs one batch on every rank: views of G, the host runner, merge of each rank's own pages.
   Returns the output of rank 0; the other ranks' outputs must equal it bit for bit. */
typedef struct sc_launch {
  int decode;
  c128_decode_args d;
  c128_prefill_args p;
} sc_launch;

static void sc_run(sc *s, sc_launch *l, void *out, size_t out_bytes) {
  const int S = s->lay.size > 1 ? s->lay.size : 1;
  const int64_t ppr = s->lay.pages_per_rank;
  const size_t state_bytes = (size_t)s->pages * s->page_bytes;
  void *before = fz_clone(s->G, state_bytes);
  void **views = (void **)fz_alloc(sizeof(void *) * S);
  for (int r = 0; r < S; ++r) { /* every view from the state before the batch (the barrier) */
    if (S == 1) {
      views[r] = s->G;
      continue;
    }
    views[r] = fz_alloc(state_bytes);
    for (int64_t v = 0; v < s->pages; ++v) {
      const int64_t logical = (v % ppr) * S + (v / ppr + r) % S;
      memcpy((char *)views[r] + v * s->page_bytes, (char *)s->G + logical * s->page_bytes, s->page_bytes);
    }
  }
  void *out_r = S > 1 ? fz_alloc(out_bytes) : out;
  for (int r = 0; r < S; ++r) {
    void *o = r == 0 ? out : out_r;
    if (r > 0) memset(o, 0x5A, out_bytes);
    c128_shared_layout lay = s->lay;
    lay.rank = r;
    fz_options opt = fz_make_options((uint8_t)(s->flags & 0x13));
    c128_status st;
    if (l->decode) {
      c128_decode_args a = l->d;
      a.state = views[r], a.output = o, a.layout = lay;
      st = s->I->decode_host(&a, opt.ptr);
    } else {
      c128_prefill_args a = l->p;
      a.state = views[r], a.output = o, a.layout = lay;
      if (s->flags & 0x40) { /* compress on its own, then the writes */
        c128_prefill_args w = a;
        a.num_write = 0, w.num_compress = 0;
        st = c128_prefill_host(&a, opt.ptr);
        if (st == C128_SUCCESS) st = c128_prefill_host(&w, opt.ptr);
      } else {
        st = c128_prefill_host(&a, opt.ptr);
      }
    }
    FZ_CHECK(3, st == C128_SUCCESS, "step %d rank %d: planned batch ran with %s (%s)", s->step, r,
             c128_status_string(st), opt.msg ? opt.msg : "-");
    fz_check_message(&opt, st);
    if (r > 0) FZ_CHECK(3, memcmp(o, out, out_bytes) == 0, "step %d: rank %d output differs from rank 0's", s->step, r);
  }
  for (int r = 0; r < S && S > 1; ++r) { /* merge the owned pages; the others must be as they were */
    for (int64_t v = 0; v < s->pages; ++v) {
      const int64_t logical = (v % ppr) * S + (v / ppr + r) % S;
      const char *vp = (char *)views[r] + v * s->page_bytes;
      if (logical % S == r) memcpy((char *)s->G + logical * s->page_bytes, vp, s->page_bytes);
      else
        FZ_CHECK(3, memcmp(vp, (char *)before + logical * s->page_bytes, s->page_bytes) == 0,
                 "step %d: rank %d changed view page %lld (logical page %lld), which rank %lld owns", s->step, r,
                 (long long)v, (long long)logical, (long long)(logical % S));
    }
    free(views[r]);
  }
  free(views);
  if (S > 1) free(out_r);
  free(before);
}

/* Exactly the rows in `rows` (logical, with their tokens) changed. */
static void sc_check_state(const sc *s, const void *before, const int64_t *rows, const float *const *toks, int n) {
  for (int64_t row = 0; row < s->pages * 128; ++row) {
    int k = n - 1;
    while (k >= 0 && rows[k] != row) --k; /* the last plan writing a row is the one that stays */
    if (k < 0) {
      FZ_CHECK(3, memcmp((char *)s->G + row * s->row_bytes, (char *)before + row * s->row_bytes, s->row_bytes) == 0,
               "step %d: state row %lld changed, but no plan writes it", s->step, (long long)row);
    } else {
      FZ_CHECK(3, sc_row_is(s, s->G, row, toks[k]), "step %d: state row %lld is not its written token", s->step,
               (long long)row);
    }
  }
}

static void sc_check_ring(const sc *s) {
  for (int i = 0; i < s->nreq; ++i)
    for (int64_t pos = s->req[i].len / 128 * 128; pos < s->req[i].len; ++pos)
      FZ_CHECK(3, sc_row_is(s, s->G, sc_logical_row(s, s->req[i].pool, pos), sc_tok[i][pos]),
               "step %d: ring invariant: request %d (pool %d) position %lld is not in its slot", s->step, i,
               s->req[i].pool, (long long)pos);
}

static void sc_check_window(const sc *s, int i, int64_t end, int buffer_len, const void *out, int64_t row,
                            const char *what) {
  for (int j = 0; j < 128; ++j) {
    for (int c = 0; c < 2 * s->D; ++c) {
      const float x = sc_tok[i][end - 127 + j][c];
      fz_rows[j][c] = j < buffer_len ? fz_round_to(s->I->buf, x) : x;
    }
    fz_row_ptr[j] = fz_rows[j];
  }
  ref_window(s->D, fz_row_ptr, s->ape, fz_ref);
  char why[240];
  if (fz_compare_row(out, row, s->I->out, fz_ref, NULL, s->D, why, sizeof why))
    fz_fail(3, "step %d: %s: request %d window ending at %lld (output row %lld) differs from the oracle: %s", s->step,
            what, i, (long long)end, (long long)row, why);
}

static void sc_check_untouched(const sc *s, const void *out, int64_t row, const char *what) {
  const size_t rb = (size_t)s->D * fz_es(s->I->out);
  for (size_t k = 0; k < rb; ++k)
    FZ_CHECK(3, ((const uint8_t *)out)[row * rb + k] == 0x5A,
             "step %d: %s: output row %lld changed, but no plan writes it", s->step, what, (long long)row);
}

/* The device planner's host path over the same batch (with absent requests sprinkled in) must
   give the host planner's bytes. */
static void sc_device_plans(sc *s, fz_reader *r, const c128_request *q, int64_t n, int verify, int decode,
                            int64_t capacity, const void *want_a, const void *want_b, int64_t nc, int64_t nw) {
  c128_request *qq = (c128_request *)fz_alloc(sizeof *qq * (size_t)(2 * n + 1));
  int64_t m = 0;
  for (int64_t k = 0; k < n; ++k) {
    if (!decode && rd_below(r, 4) == 0)
      qq[m].pool_index = (int32_t)rd_u8(r) - 3, qq[m].seq_len = 0, qq[m++].extend_len = 0;
    qq[m++] = q[k];
  }
  c128_device_plan_args a;
  memset(&a, 0, sizeof a);
  a.ring = s->ring, a.requests = qq, a.num_requests = m, a.verify = verify, a.capacity = capacity;
  const size_t ws_bytes = c128_plan_workspace_size(m);
  a.workspace = fz_alloc(ws_bytes);
  int32_t *status = (int32_t *)fz_alloc(sizeof(int32_t));
  int64_t *counts = (int64_t *)fz_alloc(2 * sizeof(int64_t));
  *status = -1;
  a.status = status, a.counts = counts;
  c128_status st;
  if (decode) {
    a.decode = (c128_decode_plan *)fz_alloc(sizeof(c128_decode_plan) * (size_t)m);
    st = c128_plan_decode_device_host(&a);
    FZ_CHECK(4, st == C128_SUCCESS && *status == C128_SUCCESS, "step %d: device decode planner: %s / %s", s->step,
             c128_status_string(st), c128_status_string((c128_status)*status));
    FZ_CHECK(4, memcmp(a.decode, want_a, sizeof(c128_decode_plan) * (size_t)n) == 0,
             "step %d: device decode planner's plans differ from the host planner's", s->step);
    free(a.decode);
  } else {
    a.compress = (c128_compress_plan *)fz_alloc(sizeof(c128_compress_plan) * (size_t)capacity);
    a.write = (c128_write_plan *)fz_alloc(sizeof(c128_write_plan) * (size_t)capacity);
    st = c128_plan_prefill_device_host(&a);
    FZ_CHECK(4, st == C128_SUCCESS && *status == C128_SUCCESS, "step %d: device prefill planner: %s / %s", s->step,
             c128_status_string(st), c128_status_string((c128_status)*status));
    FZ_CHECK(4, counts[0] == nc && counts[1] == nw, "step %d: device planner counts %lld/%lld, host %lld/%lld", s->step,
             (long long)counts[0], (long long)counts[1], (long long)nc, (long long)nw);
    FZ_CHECK(4,
             memcmp(a.compress, want_a, sizeof(c128_compress_plan) * (size_t)capacity) == 0 &&
                 memcmp(a.write, want_b, sizeof(c128_write_plan) * (size_t)capacity) == 0,
             "step %d: device prefill planner's plans differ from the host planner's (padded to capacity)", s->step);
    free(a.compress), free(a.write);
  }
  free(a.workspace), free(status), free(counts), free(qq);
}

/* >>one prefill / extend / verify batch --------------------------------------------------------- */
static void sc_extend(sc *s, fz_reader *r, int verify) {
  int idx[SC_MAXREQ], ext[SC_MAXREQ], acc[SC_MAXREQ], n = 0, rows = 0, refuse = 0;
  const int64_t max_drafts = s->ring.speculative ? s->mr.R - 128 + 2 : 1;
  const int first = rd_below(r, s->nreq);
  for (int t = 0; t < s->nreq; ++t) { /* batch order: a rotation of the requests, some left out */
    const int i = (first + t) % s->nreq;
    const int sel = rd_u8(r);
    if (t > 0 && sel % 5 == 0) continue;
    int64_t e;
    if (verify) {
      e = sel % 16 == 1 ? max_drafts + 1 : 1 + rd_below16(r, (int)max_drafts);
    } else {
      const int64_t to_boundary = 128 - s->req[i].len % 128;
      e = sel < 100 ? 1 + sel % 40 : sel < 180 ? to_boundary + (sel % 5) - 2 : 100 + rd_below(r, 201);
    }
    if (e < 1) e = 1;
    if (s->req[i].len + e > SC_MAXPOS || rows + e > SC_MAXROWS) continue;
    refuse |= verify && e > max_drafts;
    idx[n] = i, ext[n] = (int)e, acc[n] = verify ? 1 + rd_below16(r, (int)e) : (int)e, rows += (int)e, ++n;
  }
  if (!n) return;
  fz_add_context("; %d:%s", s->step, verify ? "verify" : "extend");
  for (int k = 0; k < n; ++k) fz_add_context(" r%d+%d/%d@%lld", idx[k], ext[k], acc[k], (long long)s->req[idx[k]].len);
  c128_request q[SC_MAXREQ];
  for (int k = 0; k < n; ++k) {
    q[k].pool_index = s->req[idx[k]].pool;
    q[k].seq_len = (int32_t)(s->req[idx[k]].len + ext[k]);
    q[k].extend_len = ext[k];
  }
  const int64_t capacity = rows + rd_below(r, 3);
  const int pad = (s->flags >> 3) & 1;
  c128_compress_plan *cp = (c128_compress_plan *)fz_alloc(sizeof *cp * (size_t)capacity);
  c128_write_plan *wp = (c128_write_plan *)fz_alloc(sizeof *wp * (size_t)capacity);
  memset(cp, 0xCD, sizeof *cp * (size_t)capacity), memset(wp, 0xCD, sizeof *wp * (size_t)capacity);
  c128_prefill_plans plans = {cp, wp, capacity, pad, -7, -7};
  const c128_status st = c128_plan_prefill(&s->ring, q, n, verify, &plans);
  if (refuse) {
    FZ_CHECK(3, st == C128_ERROR_TOO_MANY_DRAFTS, "step %d: verify batch over the draft limit %lld planned with %s",
             s->step, (long long)max_drafts, c128_status_string(st));
    for (size_t k = 0; k < sizeof *cp * (size_t)capacity; ++k)
      FZ_CHECK(3, ((uint8_t *)cp)[k] == 0xCD, "step %d: refused batch wrote compress plans", s->step);
    for (size_t k = 0; k < sizeof *wp * (size_t)capacity; ++k)
      FZ_CHECK(3, ((uint8_t *)wp)[k] == 0xCD, "step %d: refused batch wrote write plans", s->step);
    FZ_CHECK(3, plans.num_compress == -7 && plans.num_write == -7, "step %d: refused batch set counts", s->step);
    free(cp), free(wp);
    return;
  }
  FZ_CHECK(3, st == C128_SUCCESS, "step %d: planner refused a valid batch: %s", s->step, c128_status_string(st));

  /* SPEC 5 again: the expected plans, and which request and window each compress plan is. */
  c128_compress_plan *ec = (c128_compress_plan *)fz_alloc(sizeof *ec * (size_t)rows);
  c128_write_plan *ew = (c128_write_plan *)fz_alloc(sizeof *ew * (size_t)rows);
  int *c_req = (int *)fz_alloc(sizeof(int) * (size_t)rows);
  int64_t nc = 0, nw = 0, base = 0;
  for (int k = 0; k < n; ++k) {
    const int64_t seq = q[k].seq_len, prefix = seq - ext[k], fw = m_first_write(&s->mr, seq);
    for (int64_t j = 0; j < ext[k]; ++j) {
      const int64_t pos = prefix + j;
      int64_t p1 = 0, p0 = 0;
      if ((pos + 1) % 128 == 0) {
        m_page(&s->mr, q[k].pool_index, pos, &p1), m_page(&s->mr, q[k].pool_index, pos >= 128 ? pos - 128 : 0, &p0);
        c128_compress_plan c = {(uint32_t)(pos + 1), (uint16_t)(base + j), (uint16_t)(j < 127 ? 127 - j : 0),
                                (int32_t)p0, (int32_t)p1};
        c_req[nc] = k, ec[nc++] = c;
      }
      if (pos >= fw) {
        c128_write_plan w = {(uint32_t)(base + j), (int32_t)sc_logical_row(s, q[k].pool_index, pos)};
        ew[nw++] = w;
      }
    }
    base += ext[k];
  }
  FZ_CHECK(3, plans.num_compress == nc && plans.num_write == nw, "step %d: planner counts %lld/%lld, SPEC 5 %lld/%lld",
           s->step, (long long)plans.num_compress, (long long)plans.num_write, (long long)nc, (long long)nw);
  for (int64_t k = 0; k < nc; ++k)
    FZ_CHECK(3, memcmp(&cp[k], &ec[k], sizeof ec[k]) == 0,
             "step %d: compress plan %lld is {%u, %u, %u, %d, %d}, SPEC 5 {%u, %u, %u, %d, %d}", s->step, (long long)k,
             cp[k].seq_len, cp[k].ragged_id, cp[k].buffer_len, cp[k].read_page_0, cp[k].read_page_1, ec[k].seq_len,
             ec[k].ragged_id, ec[k].buffer_len, ec[k].read_page_0, ec[k].read_page_1);
  for (int64_t k = 0; k < nw; ++k)
    FZ_CHECK(3, memcmp(&wp[k], &ew[k], sizeof ew[k]) == 0, "step %d: write plan %lld is {%u, %d}, SPEC 5 {%u, %d}",
             s->step, (long long)k, wp[k].ragged_id, wp[k].write_loc, ew[k].ragged_id, ew[k].write_loc);
  if (pad) {
    const c128_compress_plan nc_ = C128_INVALID_COMPRESS_PLAN;
    const c128_write_plan nw_ = C128_INVALID_WRITE_PLAN;
    for (int64_t k = nc; k < capacity; ++k)
      FZ_CHECK(3, memcmp(&cp[k], &nc_, sizeof nc_) == 0, "step %d: compress slot %lld is not a sentinel", s->step,
               (long long)k);
    for (int64_t k = nw; k < capacity; ++k)
      FZ_CHECK(3, memcmp(&wp[k], &nw_, sizeof nw_) == 0, "step %d: write slot %lld is not a sentinel", s->step,
               (long long)k);
    if (s->flags & 4) sc_device_plans(s, r, q, n, verify, 0, capacity, cp, wp, nc, nw);
  }

  /* New tokens (drafts for verify), the input rows in batch order. */
  void *input = fz_alloc((size_t)rows * s->row_bytes / fz_es(s->I->buf) * fz_es(s->I->in));
  base = 0;
  for (int k = 0; k < n; ++k) {
    for (int64_t j = 0; j < ext[k]; ++j) {
      const int64_t pos = s->req[idx[k]].len + j;
      sc_new_token(s, idx[k], pos);
      for (int c = 0; c < 2 * s->D; ++c) fz_set(input, (base + j) * 2 * s->D + c, s->I->in, sc_tok[idx[k]][pos][c]);
    }
    base += ext[k];
  }

  const int64_t launch_c = pad ? capacity : nc, launch_w = pad ? capacity : nw;
  const int64_t out_rows = launch_c + rd_below(r, 2);
  const size_t out_bytes = (size_t)out_rows * s->D * fz_es(s->I->out);
  void *out = fz_alloc(out_bytes);
  memset(out, 0x5A, out_bytes);
  sc_launch l;
  memset(&l, 0, sizeof l);
  l.p.head_dim = s->D, l.p.state_dtype = s->I->buf, l.p.input_dtype = s->I->in, l.p.output_dtype = s->I->out;
  l.p.state_pages = s->pages, l.p.input = input, l.p.input_rows = rows, l.p.ape = s->ape, l.p.output_rows = out_rows;
  l.p.compress_plans = cp, l.p.num_compress = launch_c, l.p.write_plans = wp, l.p.num_write = launch_w;
  l.p.layout = s->lay;

  { /* the planner's plans pass the checker */
    char msg[160];
    c128_plan_report rep = {0, C128_PLAN_DECODE, msg, sizeof msg};
    msg[0] = 0;
    const c128_status cst = c128_check_prefill_plans(&l.p, &rep);
    FZ_CHECK(3, cst == C128_SUCCESS, "step %d: the checker refuses the planner's plans: %s: %s", s->step,
             c128_status_string(cst), msg);
  }

  void *before = fz_clone(s->G, (size_t)s->pages * s->page_bytes);
  sc_run(s, &l, out, out_bytes);

  char what[48];
  snprintf(what, sizeof what, verify ? "verify batch" : "extend batch");
  for (int64_t k = 0; k < nc; ++k) { /* windows whose tokens are all committed */
    const int i = idx[c_req[k]];
    const int64_t end = (int64_t)ec[k].seq_len - 1;
    if (end < s->req[i].len + acc[c_req[k]]) sc_check_window(s, i, end, ec[k].buffer_len, out, k, what);
  }
  for (int64_t k = nc; k < out_rows; ++k) sc_check_untouched(s, out, k, what);

  int64_t *wrows = (int64_t *)fz_alloc(sizeof(int64_t) * (size_t)(nw + 1));
  const float **wtok = (const float **)fz_alloc(sizeof(float *) * (size_t)(nw + 1));
  int64_t m = 0;
  base = 0;
  for (int k = 0; k < n; ++k) { /* the write plans, in order, with their tokens */
    for (; m < nw && ew[m].ragged_id < base + ext[k]; ++m)
      wrows[m] = ew[m].write_loc, wtok[m] = sc_tok[idx[k]][s->req[idx[k]].len + (ew[m].ragged_id - base)];
    base += ext[k];
  }
  sc_check_state(s, before, wrows, wtok, (int)nw);
  for (int k = 0; k < n; ++k) s->req[idx[k]].len += acc[k];
  sc_check_ring(s);

  free(wrows), free(wtok), free(before), free(out), free(input), free(ec), free(ew), free(c_req), free(cp), free(wp);
}

/* >>one decode batch ---------------------------------------------------------------------------- */
static void sc_decode(sc *s, fz_reader *r) {
  int who[SC_MAXBATCH], B = 0;
  for (int i = 0; i < s->nreq && B < SC_MAXBATCH; ++i) {
    while (B < SC_MAXBATCH && rd_below(r, 4) == 0) who[B++] = -1; /* padding rows */
    if (rd_below(r, 6) != 0 && s->req[i].len < SC_MAXPOS && B < SC_MAXBATCH) who[B++] = i;
  }
  if (!B) return;
  fz_add_context("; %d:decode", s->step);
  for (int b = 0; b < B; ++b) {
    if (who[b] < 0) fz_add_context(" pad");
    else fz_add_context(" r%d@%lld", who[b], (long long)s->req[who[b]].len);
  }
  c128_request q[SC_MAXBATCH];
  for (int b = 0; b < B; ++b) {
    if (who[b] < 0) {
      q[b].pool_index = (int32_t)rd_u8(r) - 3, q[b].seq_len = 0, q[b].extend_len = 0;
    } else {
      q[b].pool_index = s->req[who[b]].pool, q[b].seq_len = (int32_t)s->req[who[b]].len + 1;
      q[b].extend_len = rd_below(r, 2);
    }
  }
  c128_decode_plan *plans = (c128_decode_plan *)fz_alloc(sizeof *plans * (size_t)B);
  const c128_status st = c128_plan_decode(&s->ring, q, B, plans);
  FZ_CHECK(3, st == C128_SUCCESS, "step %d: decode planner refused a valid batch: %s", s->step, c128_status_string(st));
  for (int b = 0; b < B; ++b) {
    c128_decode_plan want = {0, -1, -1, -1};
    if (who[b] >= 0) {
      const int64_t p = s->req[who[b]].len;
      int64_t p0 = 0;
      m_page(&s->mr, q[b].pool_index, p >= 128 ? p - 128 : 0, &p0);
      want.seq_len = (uint32_t)(p + 1);
      want.write_loc = (int32_t)sc_logical_row(s, q[b].pool_index, p);
      want.read_page_1 = want.write_loc / 128, want.read_page_0 = (int32_t)p0;
    }
    FZ_CHECK(3, memcmp(&plans[b], &want, sizeof want) == 0,
             "step %d: decode plan %d is {%u, %d, %d, %d}, SPEC 5 {%u, %d, %d, %d}", s->step, b, plans[b].seq_len,
             plans[b].write_loc, plans[b].read_page_0, plans[b].read_page_1, want.seq_len, want.write_loc,
             want.read_page_0, want.read_page_1);
  }
  if (s->flags & 4) sc_device_plans(s, r, q, B, 0, 1, 0, plans, NULL, 0, 0);

  void *input = fz_alloc((size_t)B * 2 * s->D * fz_es(s->I->in));
  for (int b = 0; b < B; ++b) {
    if (who[b] < 0) {
      for (int c = 0; c < 2 * s->D; ++c) fz_set(input, (int64_t)b * 2 * s->D + c, s->I->in, rng_randn(&s->g));
      continue;
    }
    sc_new_token(s, who[b], s->req[who[b]].len);
    for (int c = 0; c < 2 * s->D; ++c)
      fz_set(input, (int64_t)b * 2 * s->D + c, s->I->in, sc_tok[who[b]][s->req[who[b]].len][c]);
  }
  const int64_t out_rows = B + rd_below(r, 2);
  const size_t out_bytes = (size_t)out_rows * s->D * fz_es(s->I->out);
  void *out = fz_alloc(out_bytes);
  memset(out, 0x5A, out_bytes);
  sc_launch l;
  memset(&l, 0, sizeof l);
  l.decode = 1;
  l.d.head_dim = s->D, l.d.state_dtype = s->I->buf, l.d.input_dtype = s->I->in, l.d.output_dtype = s->I->out;
  l.d.state_pages = s->pages, l.d.input = input, l.d.ape = s->ape, l.d.output_rows = out_rows;
  l.d.plans = plans, l.d.batch = B, l.d.layout = s->lay;
  fz_set_group(&l.d, rd_below(r, FZ_MAX_GROUP + 1)); /* results do not depend on it */
  {
    char msg[160];
    c128_plan_report rep = {0, C128_PLAN_WRITE, msg, sizeof msg};
    msg[0] = 0;
    const c128_status cst = c128_check_decode_plans(&l.d, &rep);
    FZ_CHECK(3, cst == C128_SUCCESS, "step %d: the checker refuses the decode planner's plans: %s: %s", s->step,
             c128_status_string(cst), msg);
  }
  void *before = fz_clone(s->G, (size_t)s->pages * s->page_bytes);
  sc_run(s, &l, out, out_bytes);

  int64_t wrows[SC_MAXBATCH];
  const float *wtok[SC_MAXBATCH];
  int nw = 0;
  for (int64_t b = 0; b < out_rows; ++b) {
    const int i = b < B ? who[b] : -1;
    if (i >= 0 && (s->req[i].len + 1) % 128 == 0) sc_check_window(s, i, s->req[i].len, 127, out, b, "decode");
    else sc_check_untouched(s, out, b, "decode");
    if (i >= 0) wrows[nw] = plans[b].write_loc, wtok[nw++] = sc_tok[i][s->req[i].len];
  }
  sc_check_state(s, before, wrows, wtok, nw);
  for (int b = 0; b < B; ++b)
    if (who[b] >= 0) s->req[who[b]].len += 1;
  sc_check_ring(s);
  free(before), free(out), free(input), free(plans);
}

/* >>the scenario ------------------------------------------------------------------------------------ */
static void fz_mode_scenario(fz_reader *r) {
  sc s;
  memset(&s, 0, sizeof s);
  s.I = &fz_instances[rd_below(r, FZ_NUM_INSTANCES)];
  s.D = s.I->head_dim;
  s.flags = rd_u8(r);
  const int kind = rd_below(r, 4); /* legacy, request ring, page table, page table with a spare column */
  const int R = kind == 0 ? 128 : 128 * (1 + rd_below(r, 3));
  const int spec = rd_below(r, 2);
  const int shards = rd_below(r, 8) < 6 ? 1 : 2 + rd_below(r, 2);
  const int num_pool = 1 + rd_below(r, shards > 1 ? 2 : 4);
  const int spare = rd_below(r, 3);
  s.nreq = 1 + rd_below(r, num_pool < SC_MAXREQ ? num_pool : SC_MAXREQ);
  int perm[4] = {0, 1, 2, 3};
  for (int k = num_pool - 1; k > 0; --k) { /* pool rows differ from batch positions */
    const int j = rd_below(r, k + 1), t = perm[k];
    perm[k] = perm[j], perm[j] = t;
  }
  for (int i = 0; i < s.nreq; ++i) s.req[i].pool = perm[i];
  s.g.s = rd_u64(r);
  s.style = rd_below(r, 2);

  const int64_t need = (int64_t)num_pool * (R / 128), logical = need + spare;
  s.lay.size = shards;
  s.lay.pages_per_rank = (int32_t)((logical + shards - 1) / shards + (shards > 1 ? rd_below(r, 2) : 0));
  s.pages = shards > 1 ? (int64_t)shards * s.lay.pages_per_rank : logical;
  if (shards == 1) s.lay.size = rd_below(r, 2), s.lay.pages_per_rank = rd_below(r, 3); /* ignored when unsharded */
  s.ring.ring_tokens = kind == 0 ? 0 : R;
  s.ring.speculative = spec;
  s.ring.state_pages = s.pages;
  if (kind >= 2) { /* distinct pages, shuffled */
    const int64_t stride = R / 128 + (kind == 3);
    s.page_table = (int32_t *)fz_alloc(sizeof(int32_t) * (size_t)(num_pool * stride));
    int32_t *pages = (int32_t *)fz_alloc(sizeof(int32_t) * (size_t)s.pages);
    for (int64_t k = 0; k < s.pages; ++k) pages[k] = (int32_t)k;
    for (int64_t k = s.pages - 1; k > 0; --k) {
      const int64_t j = rd_below(r, (int)k + 1);
      const int32_t t = pages[k];
      pages[k] = pages[j], pages[j] = t;
    }
    for (int64_t row = 0; row < num_pool; ++row)
      for (int64_t c = 0; c < stride; ++c)
        s.page_table[row * stride + c] = c < R / 128 ? pages[row * (R / 128) + c] : -1 - (int32_t)rd_below(r, 3);
    free(pages);
    s.ring.page_table = s.page_table, s.ring.page_table_stride = stride, s.ring.num_pool = num_pool;
  }
  s.mr = m_ring_of(&s.ring);
  s.row_bytes = (size_t)2 * s.D * fz_es(s.I->buf);
  s.page_bytes = 128 * s.row_bytes;
  s.G = fz_alloc((size_t)s.pages * s.page_bytes);
  memset(s.G, 0xFF, (size_t)s.pages * s.page_bytes); /* NaN: a slot read before it is written shows */
  s.ape = fz_make_ape(&s.g, s.D);
  fz_set_context(
      "mode 2 (scenario) %s %s R %d%s pool %d requests %d pages %lld shards %d flags 0x%02x scale %d", s.I->name,
      kind == 0   ? "legacy"
      : kind == 1 ? "ring"
                  : "page-table",
      R, spec ? " speculative" : "", num_pool, s.nreq, (long long)s.pages, shards, s.flags, s.style ? 60 : 1);

  const int steps = 1 + rd_below(r, 8);
  for (s.step = 0; s.step < steps; ++s.step) {
    const int op = rd_below(r, 8);
    if (op < 3) sc_extend(&s, r, 0);
    else if (op < 5) sc_decode(&s, r);
    else if (op < 7) sc_extend(&s, r, 1);
    else { /* the request ends; a new one takes its pool row */ const int i = rd_below(r, s.nreq);
      s.req[i].len = 0;
      fz_add_context("; %d:reset r%d", s.step, i);
    }
  }
  free(s.G), free(s.ape), free(s.page_table);
}
