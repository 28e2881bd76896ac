/* The launch arguments added with other engines' layouts (DESIGN 5.9, 5.10, 11): their drawing
   from the input (after every older field, so that older inputs decode as they did), their
   buffers, the launch's argument checks written again (m_validate, m_tensors) and the plan
   checker's offending plans over any layout (m_check_decode, m_check_prefill), shared by modes
   0, 1 and 4. Part of fuzz_c128.cu. */

/* The compiled instance named by (head_dim, dtypes), or -1: the generic launch's lookup. */
static int fz_find_instance(int32_t D, int32_t sd, int32_t id, int32_t od) {
  for (int i = 0; i < FZ_NUM_INSTANCES; ++i)
    if (fz_instances[i].head_dim == D && (int32_t)fz_instances[i].buf == sd && (int32_t)fz_instances[i].in == id &&
        (int32_t)fz_instances[i].out == od)
      return i;
  return -1;
}

/* >>model: the launch's argument checks, in its order ------------------------------------------ */
/* The arguments as the generic launch validates them, tensor pointers excepted, in its order
   (the header: "the checker accepts exactly what the generic launch accepts"). Written again on
   purpose: the fuzzer checks the library's validation against this model, not against itself.
   sl / index / en: the state layout, output index and cache-entry arguments (NULL: zero). */
typedef struct m_args {
  int prefill;
  int32_t D, sd, id, od;
  int64_t pages, input_rows, output_rows, count1, count2; /* decode: count1 = batch */
  c128_shared_layout layout;
  int32_t group;
  const void *plans1, *plans2;
  const c128_state_layout *sl;
  const int64_t *index;
  const c128_entry_args *en;
} m_args;

/* DESIGN 5.9: blocks of 8..256 rows; a layout other than today's is unsharded; a score table
   needs a table and a score plane; the blocks' bytes fit int64; a table's logical rows fit
   int32 (row_shift 7..30, table_rows << row_shift <= 2^31) and its bytes int64. */
static c128_status m_check_state_layout(const c128_state_layout *l, c128_shared_layout shared, int64_t pages,
                                        int32_t D) {
  if (!l) return C128_SUCCESS;
  const int64_t rows = l->block_rows ? l->block_rows : 128;
  const int shift = m_log2(rows);
  if (shift < 3 || shift > 8) return C128_ERROR_INVALID_STATE_LAYOUT;
  const int layout = rows != 128 || l->score_biased || l->score_plane || l->block_table || l->score_block_table;
  if (!layout) return C128_SUCCESS;
  if (shared.size > 1 || (l->score_block_table && (!l->block_table || !l->score_plane)))
    return C128_ERROR_INVALID_STATE_LAYOUT;
  if (pages > INT64_MAX / (rows * 2 * D * 4)) return C128_ERROR_STATE_TOO_LARGE;
  if (!l->block_table) return C128_SUCCESS;
  if (l->table_rows < 0 || l->table_stride < 0) return C128_ERROR_NEGATIVE_SIZE;
  if (l->row_shift < 7 || l->row_shift > 30 || l->table_rows > ((int64_t)1 << (31 - l->row_shift)) ||
      (l->table_rows > 0 && l->table_stride > INT64_MAX / 4 / l->table_rows))
    return C128_ERROR_INVALID_STATE_LAYOUT;
  if (fz_misaligned(l->block_table, 4) || fz_misaligned(l->score_block_table, 4)) return C128_ERROR_MISALIGNED;
  return C128_SUCCESS;
}
/* DESIGN 11 and c128_entry_args: a known kind, an entry warp for each of a window's splits
   (head_dim <= 512), sizes not negative, P a power of two (<= 2^30), pages that hold P entries at a multiple of 4
   bytes, byte sizes within int64, eps finite and >= 0. */
static c128_status m_check_entry(const c128_entry_args *e, int32_t D) {
  if (!e || e->kind == C128_OUTPUT_POOLED) return C128_SUCCESS;
  if (e->kind != C128_OUTPUT_DSV4_FP8 && e->kind != C128_OUTPUT_DSV4_BF16) return C128_ERROR_INVALID_ENTRY;
  if (D / 64 > 8) return C128_ERROR_INVALID_ENTRY;
  if (e->cache_pages < 0 || e->rope_positions < 0 || e->page_bytes < 0 || e->entries_per_page < 0)
    return C128_ERROR_NEGATIVE_SIZE;
  const int shift = m_log2(e->entries_per_page);
  if (shift < 0 || shift > 30 || e->page_bytes % 4 != 0 ||
      e->page_bytes < m_entry_bytes(D, e->kind == C128_OUTPUT_DSV4_FP8) * e->entries_per_page ||
      (e->cache_pages > 0 && e->page_bytes > INT64_MAX / e->cache_pages) || e->cache_pages > (INT64_MAX >> shift) ||
      e->rope_positions > INT64_MAX / 256 || !(e->norm_eps >= 0.0f) || !(e->norm_eps <= 3.402823466e38f))
    return C128_ERROR_INVALID_ENTRY;
  return C128_SUCCESS;
}
static int m_entry_on(const m_args *a) { return a->en && a->en->kind != C128_OUTPUT_POOLED; }
/* DESIGN 11.3: a cache-entry launch's workspace for `jobs` (decode requests or compress plans): a
   uint32 counter a job, then, 16-byte aligned, head_dim floats a job. Valid sizes only (the
   fuzzer's jobs and head_dims are small). */
static int64_t m_workspace_bytes(int64_t jobs, int32_t D) { return (4 * jobs + 15) / 16 * 16 + jobs * D * 4; }
static int m_compact(const m_args *a) { return !m_entry_on(a) && !a->index; }

static c128_status m_validate(const m_args *a) {
  if (fz_find_instance(a->D, a->sd, a->id, a->od) < 0) return C128_ERROR_UNSUPPORTED_INSTANCE;
  if (a->pages < 0) return C128_ERROR_NEGATIVE_SIZE;
  if (a->pages > INT64_MAX / ((int64_t)128 * 2 * a->D * 4)) return C128_ERROR_STATE_TOO_LARGE;
  if (!fz_layout_valid(a->layout)) return C128_ERROR_INVALID_LAYOUT;
  c128_status st = m_check_state_layout(a->sl, a->layout, a->pages, a->D);
  if (st == C128_SUCCESS) st = m_check_entry(a->en, a->D);
  if (st != C128_SUCCESS) return st;
  if (!a->prefill) {
    if (a->count1 < 0 || a->output_rows < 0) return C128_ERROR_NEGATIVE_SIZE;
    if (a->count1 > INT32_MAX / (a->D / 64)) return C128_ERROR_TOO_MANY_PLANS;
    if (a->group < 0 || a->group > C128_MAX_DECODE_GROUP) return C128_ERROR_INVALID_GROUP;
    if (a->count1 == 0) return C128_SUCCESS;
    if (m_compact(a) && a->output_rows < a->count1) return C128_ERROR_OUTPUT_TOO_SMALL;
    if (!a->plans1) return C128_ERROR_NULL_POINTER;
    if (fz_misaligned(a->plans1, 16) || fz_misaligned(a->index, 8)) return C128_ERROR_MISALIGNED;
    return C128_SUCCESS;
  }
  if (a->input_rows < 0 || a->output_rows < 0 || a->count1 < 0 || a->count2 < 0) return C128_ERROR_NEGATIVE_SIZE;
  if (a->input_rows > C128_MAX_PREFILL_ROWS) return C128_ERROR_TOO_MANY_ROWS;
  if (a->count1 > C128_MAX_PREFILL_ROWS || a->count2 > C128_MAX_PREFILL_ROWS) return C128_ERROR_TOO_MANY_PLANS;
  if (a->group < 0 || a->group > C128_MAX_PREFILL_GROUP) return C128_ERROR_INVALID_GROUP;
  if (a->count1 == 0 && a->count2 == 0) return C128_SUCCESS;
  if (m_compact(a) && a->output_rows < a->count1) return C128_ERROR_OUTPUT_TOO_SMALL;
  if ((a->count1 && !a->plans1) || (a->count2 && !a->plans2)) return C128_ERROR_NULL_POINTER;
  if (fz_misaligned(a->plans1, 16) || fz_misaligned(a->plans2, 8) || fz_misaligned(a->index, 8))
    return C128_ERROR_MISALIGNED;
  return C128_SUCCESS;
}
/* Does a call with these (valid) arguments have work, i.e. get past the no-work return? */
static int m_has_work(const m_args *a) { return a->prefill ? a->count1 > 0 || a->count2 > 0 : a->count1 > 0; }

/* The tensor pointers of a launch (the score plane, cache, gamma and RoPE table are in sl / en). */
typedef struct m_tensors_of {
  const void *state, *input, *ape, *output;
} m_tensors_of;

/* The launch's tensor checks for valid arguments with work: NULL, then misaligned, then aliased
   (DESIGN 3.2: the tensors it writes, state, score plane, output or cache and the entries'
   workspace, overlap nothing else of the call; read-only ones may overlap each other), with the
   workspace's size between misaligned and aliased. Which tensors a call needs: the output (or
   cache, gamma, RoPE table and workspace) when a window can be written, ape when a window can be
   written or a biased state stores a score (DESIGN 5.9: "state writes add it before they round").
   The workspace must hold m_workspace_bytes(jobs) (none for no jobs), and those bytes are what
   must overlap nothing. */
static c128_status m_tensors(const m_args *a, const fz_instance *I, const m_tensors_of *t) {
  const int entry = m_entry_on(a), D = I->head_dim;
  const c128_state_layout *sl = a->sl;
  const int64_t in_rows = a->prefill ? a->input_rows : a->count1;
  const int64_t out_rows = m_compact(a) ? a->count1 : a->output_rows;
  const int need_output = entry ? a->en->cache_pages > 0 : out_rows > 0;
  const int rows = sl && sl->block_rows ? sl->block_rows : 128;
  const int layout =
      sl && (rows != 128 || sl->score_biased || sl->score_plane || sl->block_table || sl->score_block_table);
  const int writes = a->prefill ? a->count2 > 0 : a->count1 > 0;
  const int need_ape = need_output || (layout && sl->score_biased && writes);
  const void *plane = sl ? sl->score_plane : NULL;
  const c128_entry_args *e = a->en;
  if (!t->state || !t->input || (need_ape && !t->ape) ||
      (need_output && (entry ? !e->cache || !e->norm_weight || !e->rope_table || !e->workspace : !t->output)))
    return C128_ERROR_NULL_POINTER;
  const size_t eb = fz_es(I->buf), ei = fz_es(I->in), eo = fz_es(I->out);
  if (fz_misaligned(t->state, 2 * eb) || fz_misaligned(plane, 2 * eb) || fz_misaligned(t->input, 2 * ei) ||
      (need_ape && fz_misaligned(t->ape, 8)) || (need_output && !entry && fz_misaligned(t->output, eo)) ||
      (need_output && entry &&
       (fz_misaligned(e->cache, 4) || fz_misaligned(e->norm_weight, 4) || fz_misaligned(e->rope_table, 8) ||
        fz_misaligned(e->workspace, 16))))
    return C128_ERROR_MISALIGNED;
  const int64_t ws = need_output && entry ? m_workspace_bytes(a->count1, D) : 0; /* count1: the jobs */
  if (ws > 0 && e->workspace_bytes < ws) return C128_ERROR_WORKSPACE_TOO_SMALL;
  const int split = layout && plane;
  const uint64_t plane_bytes = (uint64_t)a->pages * (uint64_t)rows * (uint64_t)(split ? D : 2 * D) * eb;
  const uint64_t table = layout && sl->block_table ? (uint64_t)sl->table_rows * (uint64_t)sl->table_stride * 4 : 0;
  const void *wp[4] = {t->state, split ? plane : NULL,
                       !need_output ? NULL
                       : entry      ? e->cache
                                    : t->output,
                       ws > 0 ? e->workspace : NULL};
  const uint64_t wn[4] = {
      plane_bytes, plane_bytes,
      entry ? (uint64_t)e->cache_pages * (uint64_t)e->page_bytes : (uint64_t)out_rows * (uint64_t)D * eo, (uint64_t)ws};
  const void *rp[9] = {t->input,
                       need_ape ? t->ape : NULL,
                       layout ? sl->block_table : NULL,
                       layout ? sl->score_block_table : NULL,
                       a->index,
                       entry ? e->norm_weight : NULL,
                       entry ? e->rope_table : NULL,
                       a->plans1,
                       a->prefill ? a->plans2 : NULL};
  const uint64_t rn[9] = {(uint64_t)in_rows * 2 * D * ei,
                          128u * (uint64_t)D * 4u,
                          table,
                          table,
                          (uint64_t)in_rows * 8u,
                          (uint64_t)D * 4u,
                          entry ? (uint64_t)e->rope_positions * 256u : 0u,
                          (uint64_t)a->count1 * 16u,
                          (uint64_t)a->count2 * 8u};
  for (int w = 0; w < 4; ++w) {
    for (int k = 0; k < 9; ++k)
      if (fz_overlaps(wp[w], wn[w], rp[k], rn[k])) return C128_ERROR_ALIASED;
    for (int v = w + 1; v < 4; ++v)
      if (fz_overlaps(wp[w], wn[w], wp[v], wn[v])) return C128_ERROR_ALIASED;
  }
  return C128_SUCCESS;
}

/* The launch's status: typed entry point of another instance, the arguments, the tensors. */
static c128_status m_launch_status(const m_args *a, const fz_instance *I, int typed, const m_tensors_of *t) {
  if (typed && (a->D != I->head_dim || a->sd != (int32_t)I->buf || a->id != (int32_t)I->in || a->od != (int32_t)I->out))
    return C128_ERROR_INSTANCE_MISMATCH;
  const c128_status st = m_validate(a);
  if (st != C128_SUCCESS || !m_has_work(a)) return st;
  return m_tensors(a, I, t);
}

/* The model of a launch's plans: state (DESIGN 5.9, with today's shared layout), index, entries. */
static m_kern m_kern_of(const m_args *a) {
  m_kern K;
  memset(&K, 0, sizeof K);
  K.S = m_state_of(a->pages, a->layout, a->sl);
  K.index = a->index;
  K.entry = m_entry_on(a);
  if (K.entry && m_check_entry(a->en, a->D) != C128_SUCCESS) return K; /* refused: no targets */
  K.targets = K.entry ? a->en->cache_pages * a->en->entries_per_page : a->output_rows;
  K.rope = K.entry ? a->en->rope_positions : 0;
  return K;
}
/* The scores have a table of their own (the checker's second plane of uses). */
static int m_separate_scores(const m_kern *K) {
  return K->S.layout && K->S.score_table && K->S.score_table != K->S.table;
}

/* >>model: the plan checker's offending plans (DESIGN 6.5, 5.10, 11.4) ------------------------- */
/* A use of a state row: plane << 62 | physical row. */
static int64_t m_key(int plane, int64_t row) { return (int64_t)plane << 62 | row; }
typedef struct m_uses {
  int64_t w[2];
  int nw;
  int64_t *r; /* [254], allocated for a window's reads only */
  int nr;
  int64_t out; /* -1: none */
} m_uses;
static int m_has(const int64_t *set, int n, int64_t key) {
  for (int i = 0; i < n; ++i)
    if (set[i] == key) return 1;
  return 0;
}
/* Plan k's uses conflict with an earlier plan's: a row written twice, a row one writes and the
   other reads, one output row or entry for two windows. */
static int m_uses_conflict(const m_uses *k, const m_uses *j) {
  for (int i = 0; i < k->nw; ++i)
    if (m_has(j->w, j->nw, k->w[i]) || m_has(j->r, j->nr, k->w[i])) return 1;
  for (int i = 0; i < k->nr; ++i)
    if (m_has(j->w, j->nw, k->r[i])) return 1;
  return k->out >= 0 && k->out == j->out;
}
/* off[k] != 0 for the plans the checker must refuse; the first is the one it names: a plan's own
   failure (1: a kernel skips it, 2: the checker's extra rules), or (3) among the plans before the
   first own failure, a running plan whose uses conflict with an earlier running plan's. */
static void m_mark_conflicts(m_uses *u, const int *run, int64_t n, int *off) {
  int64_t first_own = n, m = 0;
  for (int64_t k = 0; k < n && first_own == n; ++k)
    if (off[k]) first_own = k;
  int64_t *live = (int64_t *)fz_alloc((size_t)(n ? n : 1) * sizeof(int64_t));
  for (int64_t k = 0; k < first_own; ++k) {
    if (!run[k]) continue;
    for (int64_t i = 0; i < m; ++i)
      if (m_uses_conflict(&u[k], &u[live[i]])) {
        off[k] = 3;
        free(live);
        return;
      }
    live[m++] = k;
  }
  free(live);
}
static m_uses *m_uses_alloc(int64_t n) {
  m_uses *u = (m_uses *)fz_alloc((size_t)(n ? n : 1) * sizeof *u);
  memset(u, 0, (size_t)(n ? n : 1) * sizeof *u);
  for (int64_t k = 0; k < n; ++k) u[k].out = -1;
  return u;
}
static void m_uses_free(m_uses *u, int64_t n) {
  for (int64_t k = 0; k < n; ++k) free(u[k].r);
  free(u);
}

/* Decode: off[b] for the `n` plans of valid arguments (a). */
static void m_check_decode(const m_args *a, const c128_decode_plan *plans, int64_t n, int *off) {
  const m_kern K = m_kern_of(a);
  const int sep = m_separate_scores(&K);
  int *run = (int *)fz_alloc((size_t)n * sizeof(int) + 1);
  m_uses *u = m_uses_alloc(n);
  for (int64_t b = 0; b < n; ++b) {
    const c128_decode_plan p = plans[b];
    const m_decode m = m_decode_plan(&K, b, n, p);
    off[b] = m.reason == M_SKIP;
    if (m.reason == M_RUN && m.boundary && p.read_page_1 != p.write_loc / 128) off[b] = 2;
    run[b] = m.reason == M_RUN;
    if (!run[b]) continue;
    u[b].w[u[b].nw++] = m_key(0, m.vrow);
    if (sep) u[b].w[u[b].nw++] = m_key(1, m_row(&K.S, p.write_loc, 1, NULL));
    if (!m.boundary) continue;
    u[b].r = (int64_t *)fz_alloc(254 * sizeof(int64_t));
    for (int j = 0; j < 127; ++j) {
      u[b].r[u[b].nr++] = m_key(0, m_window_row(&K, m.row0, j, 0));
      if (sep) u[b].r[u[b].nr++] = m_key(1, m_window_row(&K, m.row0, j, 1));
    }
    u[b].out = m.out;
  }
  m_mark_conflicts(u, run, n, off);
  m_uses_free(u, n), free(run);
}
/* Prefill: off_c[k] (compress: own failures, then two windows with one output) and off_w[k]
   (write: own failures, then two plans on one state row). */
static void m_check_prefill(const m_args *a, const c128_compress_plan *cp, int64_t nc, const c128_write_plan *wp,
                            int64_t nw, int *off_c, int *off_w) {
  const m_kern K = m_kern_of(a);
  const int sep = m_separate_scores(&K);
  const int64_t n = nc > nw ? nc : nw;
  int *run = (int *)fz_alloc((size_t)n * sizeof(int) + 1);
  m_uses *u = m_uses_alloc(n);
  for (int64_t k = 0; k < nc; ++k) {
    const m_compress m = m_compress_plan(&K, k, a->input_rows, cp[k]);
    off_c[k] = m.reason == M_SKIP ? 1 : m.reason == M_RUN && cp[k].seq_len % 128 != 0 ? 2 : 0;
    run[k] = m.reason == M_RUN, u[k].out = run[k] ? m.out : -1;
  }
  m_mark_conflicts(u, run, nc, off_c);
  for (int64_t k = 0; k < nw; ++k) {
    const m_write m = m_write_plan(&K, a->input_rows, wp[k]);
    off_w[k] = m.reason == M_SKIP;
    run[k] = m.reason == M_RUN, u[k].nw = 0, u[k].out = -1;
    if (!run[k]) continue;
    u[k].w[u[k].nw++] = m_key(0, m.vrow);
    if (sep) u[k].w[u[k].nw++] = m_key(1, m.dsc);
  }
  m_mark_conflicts(u, run, nw, off_w);
  m_uses_free(u, n), free(run);
}

/* >>input: the new arguments, read after every older field ------------------------------------- */
typedef struct fz_ext {
  /* drawn */
  int lsel, bsel, fsel, asel, rsel, tsel, ssel, tstyle;
  uint64_t tseed;
  int isel;
  uint64_t iseed;
  int esel, psel, pbsel, cpsel, ropesel, epssel;
  uint64_t eseed;
  int xc;
  int wssel; /* the entries' workspace: < 200 a good one (claiming more bytes now and then), else a corruption */
  /* built */
  c128_state_layout sl;
  int64_t blocks, rows; /* the state's pages (blocks) and rows of each plane */
  int32_t *table, *score_table;
  void *score_plane;
  int64_t *index;
  int64_t index_rows;
  c128_entry_args en;
  float *gamma, *rope;
  uint8_t *cache;
  int64_t cache_bytes;
  char *xbuf;      /* a buffer a corruption points into */
  uint8_t *ws;     /* the workspace: exactly m_workspace_bytes(ws_jobs) bytes, zero before the launch */
  int64_t ws_jobs; /* the launch's jobs: batch or num_compress */
  int64_t ws_bytes;
} fz_ext;

static void rd_ext(fz_reader *r, fz_ext *x) {
  memset(x, 0, sizeof *x);
  x->lsel = rd_u8(r);
  if (x->lsel) {
    x->bsel = rd_u8(r), x->fsel = rd_u8(r), x->asel = rd_u8(r), x->rsel = rd_u8(r), x->tsel = rd_u8(r);
    x->ssel = rd_u8(r), x->tstyle = rd_u8(r), x->tseed = rd_u64(r);
  }
  x->isel = rd_u8(r);
  if (x->isel) x->iseed = rd_u64(r);
  x->esel = rd_u8(r);
  if (x->esel) {
    x->psel = rd_u8(r), x->pbsel = rd_u8(r), x->cpsel = rd_u8(r), x->ropesel = rd_u8(r), x->epssel = rd_u8(r);
    x->eseed = rd_u64(r);
  }
  const int v = rd_u8(r);
  x->xc = v < 200 ? 0 : 1 + (v - 200) % 20;
  x->wssel = rd_u8(r); /* added with the workspace (DESIGN 11.3): older inputs read 0, a good one */
}
/* The workspace corruption drawn (fz_corrupt_workspace), 0 for none; only with cache entries drawn. */
static int fz_ws_corruption(const fz_ext *x) { return x->esel && x->wssel >= 200 ? 1 + (x->wssel - 200) % 25 : 0; }

/* A block table's entries: style 0, 5..7 a permutation of the blocks (repeating past them), 1
   random blocks, 2 a mix of blocks, -1, past the state and random words, 3 a permutation with one
   repeated block, 4 mostly unallocated. */
static void fz_fill_table(int32_t *t, int64_t n, int64_t blocks, int style, fz_rng *g) {
  for (int64_t k = 0; k < n; ++k) t[k] = blocks > 0 ? (int32_t)(k % blocks) : -1;
  for (int64_t k = n - 1; k > 0; --k) {
    const int64_t j = (int64_t)(rng_next(g) % (uint64_t)(k + 1));
    const int32_t s = t[k];
    t[k] = t[j], t[j] = s;
  }
  for (int64_t k = 0; k < n; ++k) {
    const uint64_t x = rng_next(g);
    switch (style % 8) {
    case 1:
      t[k] = blocks > 0 ? (int32_t)(x % (uint64_t)blocks) : -1;
      break;
    case 2: {
      const int sel = (int)(x % 10);
      t[k] = sel < 6    ? t[k]
             : sel == 6 ? -1 - (int32_t)((x >> 8) % 3)
             : sel == 7 ? (int32_t)blocks + (int32_t)((x >> 8) % 2)
             : sel == 8 ? (int32_t)(x >> 16)
                        : 0;
      break;
    }
    case 3:
      if (k == 0 && n > 1) t[k] = t[n - 1];
      break;
    case 4:
      if (x % 4) t[k] = -1;
      break;
    default:
      break;
    }
  }
}

/* Builds the state layout, index and entries of a launch over instance I: `pages` the older
   pages of 128 rows (the state's size without a layout), `index_rows` the input rows, `out_rows`
   the output rows, `span` the logical pages plans name. */
static void fz_build_ext(fz_ext *x, int D, size_t state_es, int64_t pages, int64_t span, int64_t index_rows,
                         int64_t out_rows, int64_t fill_blocks) {
  x->blocks = pages, x->rows = pages * 128;
  if (x->lsel) {
    static const int32_t bad_rows[8] = {3, 12, 4, 512, -8, 1024, 100, 1};
    c128_state_layout *l = &x->sl;
    l->block_rows = x->bsel < 200 ? 8 << (x->bsel % 6) : x->bsel < 220 ? 0 : bad_rows[x->bsel % 8];
    const int64_t B =
        m_log2(l->block_rows ? l->block_rows : 128) >= 3 && m_log2(l->block_rows ? l->block_rows : 128) <= 8
            ? (l->block_rows ? l->block_rows : 128)
            : 128;
    l->score_biased = (x->fsel >> 1) & 1;
    const int split = x->fsel & 1, tab = (x->fsel >> 2) & 1;
    int stab = (x->fsel >> 3) & 1;
    if (!(x->fsel & 0x10)) stab = stab && tab && split; /* 0x10: the refused combinations too */
    if (!tab) {
      static const int adj[4] = {0, -1, 1, 0};
      x->blocks = pages * 128 / B + adj[x->asel % 4];
    } else {
      const int64_t cap = 1024 / B > 2 ? 1024 / B : 2;
      x->blocks = x->asel % (cap + 1);
    }
    if (x->blocks < 0) x->blocks = 0;
    x->rows = x->blocks * B;
    if (x->asel == 255) /* past what the blocks' bytes allow: refused (no rows) */
      x->blocks = INT64_MAX / (B * 2 * D * 4) + 1, x->rows = 0;
    if (split) x->score_plane = fz_alloc((size_t)x->rows * D * state_es);
    l->score_plane = x->score_plane;
    if (tab) {
      static const int32_t edge_rs[8] = {6, 30, 31, -1, 0, 29, 24, 25};
      l->row_shift = x->rsel < 200 ? 7 + x->rsel % 4 : edge_rs[x->rsel % 8];
      const int rs = l->row_shift;
      const int64_t lim = rs >= 7 && rs <= 30 ? (int64_t)1 << (31 - rs) : 0;
      const int shift_pages = rs > 7 && rs < 62 ? rs - 7 : 0;
      const int64_t span2 = ((span + 2) >> shift_pages) + 1;
      const int64_t edge_tr[8] = {lim, lim + 1, -1, INT64_MAX, lim - 1, 0, 1, 2};
      l->table_rows = x->tsel < 200 ? x->tsel % (span2 + 2) : edge_tr[x->tsel % 8];
      int64_t need = rs >= 0 && rs <= 30 ? ((int64_t)1 << rs) / B : 1;
      if (need < 1) need = 1;
      if (need > 64) need = 1 + x->ssel % 4; /* positions past the first columns have no block */
      const int64_t tr = l->table_rows > 0 ? l->table_rows : 1;
      const int64_t edge_st[8] = {0, -1, 1, INT64_MAX / 4 / tr + 1, 2 * need, INT64_MAX, 2, need};
      l->table_stride =
          x->ssel < 200 ? (need - 1 + x->ssel % 3 > 0 ? need - 1 + x->ssel % 3 : 0) : edge_st[x->ssel % 8];
      const int64_t rows_t = l->table_rows, st = l->table_stride;
      const int64_t entries =
          rows_t >= 0 && st >= 0 && (rows_t == 0 || st <= 65536 / (rows_t ? rows_t : 1)) ? rows_t * st : -1;
      fz_rng g = {x->tseed};
      if (entries >= 0) {
        x->table = (int32_t *)fz_alloc((size_t)entries * 4);
        const int64_t fb = fill_blocks >= 0 ? fill_blocks : x->blocks; /* the values a valid entry takes */
        fz_fill_table(x->table, entries, fb, x->tstyle, &g);
        if (stab) {
          x->score_table = (int32_t *)fz_alloc((size_t)entries * 4);
          fz_fill_table(x->score_table, entries, fb, x->tstyle >> 3, &g);
        }
      } else { /* sizes no buffer here holds: only where a launch refuses them */
        x->table = (int32_t *)fz_alloc(16);
        memset(x->table, 0xFF, 16);
        if (stab) x->score_table = (int32_t *)fz_alloc(16), memset(x->score_table, 0xFF, 16);
      }
    } else if (stab) { /* a score table without a table: refused */
      x->score_table = (int32_t *)fz_alloc(16);
      memset(x->score_table, 0, 16);
    }
    l->block_table = x->table, l->score_block_table = x->score_table;
    if (tab && !(l->table_rows >= 0 && l->table_stride >= 0 &&
                 (l->table_rows == 0 || l->table_stride <= 65536 / l->table_rows))) {
      const c128_shared_layout one = {0, 1, 0};
      if (m_check_state_layout(l, one, x->blocks, D) == C128_SUCCESS) l->table_rows = -1; /* refused */
    }
  }
  /* entries */
  if (x->esel) {
    c128_entry_args *e = &x->en;
    static const int32_t bad_kind[4] = {3, -1, 100, INT32_MIN};
    const int k = x->esel % 8;
    const int32_t kind = k >= 1 && k <= 4 ? C128_OUTPUT_DSV4_FP8
                         : k <= 6 && k    ? C128_OUTPUT_DSV4_BF16
                         : k == 7         ? bad_kind[(x->esel >> 3) % 4]
                                          : C128_OUTPUT_POOLED;
    memcpy(&e->kind, &kind, sizeof kind);
    const int fp8 = kind == C128_OUTPUT_DSV4_FP8;
    static const int32_t good_p[8] = {1, 2, 4, 64, 1, 2, 8, 16}, bad_p[8] = {0, 3, -1, 6, 1 << 30, INT32_MIN, 12, 96};
    e->entries_per_page = x->psel < 224 ? good_p[x->psel % 8] : bad_p[x->psel % 8];
    const int64_t P = e->entries_per_page, eb = m_entry_bytes(D, fp8), exact = P > 0 ? eb * P : 4;
    const int64_t flash = (exact + D + 63) / (D + 64) * (D + 64);
    const int64_t pb[10] = {exact,     exact,     exact + 4, (flash + 3) / 4 * 4, exact + 64, exact - 4,
                            exact + 1, exact + 2, -4,        INT64_MAX - 3};
    e->page_bytes = pb[x->pbsel % 10];
    const int shift = m_log2(P) >= 0 ? m_log2(P) : 0;
    const int64_t pbv = e->page_bytes > 0 ? e->page_bytes : 1;
    const int64_t edge_cp[8] = {-1, 0, INT64_MAX, INT64_MAX / pbv + (pbv > 1), 1, 2, (INT64_MAX >> shift) + (shift > 0),
                                3};
    e->cache_pages = x->cpsel < 200 ? x->cpsel % 4 : edge_cp[x->cpsel % 8];
    if (x->pbsel % 10 == 9 && e->cache_pages < 2) e->page_bytes = exact; /* huge pages only where refused */
    static const int64_t rope_good[8] = {0, 1, 2, 3, 128, 1100, 1100, 300};
    const int64_t rope_edge[8] = {65536, -1, INT64_MAX / 256 + 1, INT64_MAX / 256, 1, 0, 65409, 200};
    e->rope_positions = x->ropesel < 240 ? rope_good[x->ropesel % 8] : rope_edge[x->ropesel % 8];
    if (e->rope_positions == INT64_MAX / 256) e->rope_positions = 1100; /* valid, but not allocatable */
    static const float eps[10] = {1e-6f, 1e-6f, 0.0f, 1.0f, 1e-30f, -1e-6f, NAN, INFINITY, 3.402823466e38f, -0.0f};
    e->norm_eps = eps[x->epssel % 10];
    fz_rng g = {x->eseed};
    x->gamma = (float *)fz_alloc((size_t)D * 4);
    const int specials = (x->eseed & 15) == 0;
    for (int c = 0; c < D; ++c) {
      float v = 1.0f + 0.5f * rng_randn(&g);
      if (specials && rng_next(&g) % 16 == 0) {
        static const float sp[4] = {0.0f, 1e30f, NAN, -INFINITY};
        v = sp[rng_next(&g) % 4];
      }
      x->gamma[c] = m_bf16f(v); /* bf16 values, as checkpoints hold */
    }
    const int64_t rp = e->rope_positions >= 0 && e->rope_positions <= 65536 ? e->rope_positions : 0;
    x->rope = (float *)fz_alloc((size_t)rp * 64 * 4);
    const int raw_rope = ((x->eseed >> 4) & 7) == 0;
    for (int64_t k2 = 0; k2 < rp * 32; ++k2) {
      if (raw_rope && rp <= 2048) {
        x->rope[2 * k2] = rng_randn(&g), x->rope[2 * k2 + 1] = rng_randn(&g);
        if (specials && rng_next(&g) % 64 == 0) x->rope[2 * k2] = NAN;
      } else if (rp <= 2048) {
        const double angle = 6.283185307179586 * rng_unit(&g);
        x->rope[2 * k2] = (float)cos(angle), x->rope[2 * k2 + 1] = (float)sin(angle);
      } else { /* long tables: values in [-1, 1), cheaply */
        const uint64_t v = rng_next(&g);
        x->rope[2 * k2] = (float)(v >> 40) * 0x1.0p-23f - 1.0f;
        x->rope[2 * k2 + 1] = (float)((v >> 16) & 0xFFFFFF) * 0x1.0p-23f - 1.0f;
      }
    }
    const int valid = m_check_entry(e, D) == C128_SUCCESS && e->kind != C128_OUTPUT_POOLED;
    int64_t bytes = 0;
    if (valid && e->cache_pages > 0 && e->page_bytes <= (4 << 20) / e->cache_pages)
      bytes = e->cache_pages * e->page_bytes;
    else if (valid && e->cache_pages > 0) e->cache_pages = 0; /* valid but too large to hold: none */
    x->cache_bytes = bytes;
    x->cache = (uint8_t *)fz_alloc((size_t)bytes);
    memset(x->cache, 0xA5, (size_t)bytes);
    e->norm_weight = x->gamma, e->rope_table = x->rope, e->cache = x->cache;
  }
  /* the output index */
  x->index_rows = index_rows;
  if (x->isel) {
    const int entry = x->esel && x->en.kind != C128_OUTPUT_POOLED;
    const int64_t T = !entry                                     ? out_rows
                      : m_check_entry(&x->en, D) == C128_SUCCESS ? x->en.cache_pages * x->en.entries_per_page
                                                                 : 0;
    x->index = (int64_t *)fz_alloc((size_t)index_rows * 8);
    fz_rng g = {x->iseed};
    const int64_t Tn = T > 0 && T < (1 << 20) ? T : 1;
    int64_t *perm = (int64_t *)fz_alloc((size_t)Tn * 8);
    for (int64_t k = 0; k < Tn; ++k) perm[k] = k;
    for (int64_t k = Tn - 1; k > 0; --k) {
      const int64_t j = (int64_t)(rng_next(&g) % (uint64_t)(k + 1)), s = perm[k];
      perm[k] = perm[j], perm[j] = s;
    }
    for (int64_t k = 0; k < index_rows; ++k) {
      const uint64_t v = rng_next(&g);
      const int64_t in_range = T > 0 ? (int64_t)(v % (uint64_t)T) : 0;
      int64_t at = T > 0 ? perm[k % Tn] : -1;
      switch (x->isel % 4) {
      case 1:
        at = in_range;
        break;
      case 2: {
        static const int64_t extreme[4] = {INT64_MIN, INT64_MAX, -((int64_t)1 << 40), (int64_t)1 << 40};
        const int sel = (int)((v >> 32) % 10);
        at = sel < 6    ? in_range
             : sel == 6 ? -1
             : sel == 7 ? T
             : sel == 8 ? (k > 0 ? x->index[k - 1] : 0)
                        : extreme[(v >> 40) % 4];
        break;
      }
      case 3:
        if ((v >> 32) % 8 == 0) at = (v >> 40) & 1 ? -1 - (int64_t)((v >> 41) % 3) : T + (int64_t)((v >> 41) % 3);
        break;
      default:
        break;
      }
      x->index[k] = at;
    }
    free(perm);
  }
}

/* Corruptions of the new pointers (x->xc, after the older ones): 1..10 a NULL or misaligned
   gamma, RoPE table, cache, score plane, table or index; 11..20 one tensor placed inside
   another. The caller keeps an aliasing one only where the launch must refuse it. */
typedef struct fz_ptrs {
  void **state;
  const void **input;
  const float **ape;
  void **output;
  const void **plans;
} fz_ptrs;
static void fz_corrupt_ext(int xc, c128_state_layout *sl, const int64_t **index, c128_entry_args *e, const fz_ptrs *t) {
  switch (xc) {
  case 1:
    e->norm_weight = NULL;
    break;
  case 2:
    e->rope_table = NULL;
    break;
  case 3:
    e->cache = NULL;
    break;
  case 4:
    if (e->cache) e->cache = (char *)e->cache + 2;
    break;
  case 5:
    if (e->norm_weight) e->norm_weight = (const float *)((const char *)e->norm_weight + 2);
    break;
  case 6:
    if (e->rope_table) e->rope_table = e->rope_table + 1;
    break;
  case 7:
    if (sl->score_plane) sl->score_plane = (char *)sl->score_plane + 2;
    break;
  case 8:
    if (sl->block_table) sl->block_table = (const int32_t *)((const char *)sl->block_table + 2);
    break;
  case 9:
    if (sl->score_block_table) sl->score_block_table = (const int32_t *)((const char *)sl->score_block_table + 2);
    break;
  case 10:
    if (*index) *index = (const int64_t *)((const char *)*index + 4);
    break;
  case 11:
    e->cache = *t->state;
    break;
  case 12:
    e->cache = (void *)*t->input;
    break;
  case 13:
    if (sl->block_table) sl->block_table = (const int32_t *)*t->state;
    break;
  case 14:
    if (*index) *index = (const int64_t *)*t->output;
    break;
  case 15:
    if (e->cache) e->norm_weight = (const float *)e->cache;
    break;
  case 16:
    e->rope_table = (const float *)*t->state;
    break;
  case 17:
    if (sl->score_plane) sl->score_plane = *t->state;
    break;
  case 18:
    if (sl->score_plane) sl->score_plane = *t->output;
    break;
  case 19:
    if (sl->score_block_table) sl->score_block_table = (const int32_t *)*t->output;
    break;
  case 20:
    if (*index) *index = (const int64_t *)*t->plans; /* read-only over read-only: allowed */
    break;
  default:
    break;
  }
}

/* The read-only arrays corruptions 13, 14, 19 and 20 place inside another buffer must lie within
   it: the checker reads them whatever the tensors (it does not look at those). */
static int fz_ext_fits(int xc, const c128_state_layout *sl, const int64_t *index, int64_t index_rows,
                       uint64_t state_bytes, uint64_t out_bytes, uint64_t plans_bytes) {
  const uint64_t ib = index ? (uint64_t)index_rows * 8u : 0u;
  const uint64_t tb =
      sl->table_rows > 0 && sl->table_stride > 0 && sl->table_stride < (1 << 20) && sl->table_rows < (1 << 20)
          ? (uint64_t)sl->table_rows * (uint64_t)sl->table_stride * 4u
          : 0u;
  switch (xc) {
  case 13:
    return tb <= state_bytes;
  case 14:
    return ib <= out_bytes;
  case 19:
    return tb <= out_bytes;
  case 20:
    return ib <= plans_bytes;
  default:
    return 1;
  }
}

static void fz_ext_context(const fz_ext *x) {
  if (x->lsel)
    fz_add_context(" state_layout {B %d, biased %d, plane %s, table %s rows %lld stride %lld shift %d, score table %s; "
                   "blocks %lld}",
                   x->sl.block_rows, x->sl.score_biased, x->sl.score_plane ? "yes" : "no",
                   x->sl.block_table ? "yes" : "no", (long long)x->sl.table_rows, (long long)x->sl.table_stride,
                   x->sl.row_shift, x->sl.score_block_table ? "yes" : "no", (long long)x->blocks);
  if (x->isel) fz_add_context(" output_index (sel %d)", x->isel % 4);
  if (x->esel)
    fz_add_context(" entry {kind %d, P %d, page_bytes %lld, cache_pages %lld, rope %lld, eps %g}", (int)x->en.kind,
                   x->en.entries_per_page, (long long)x->en.page_bytes, (long long)x->en.cache_pages,
                   (long long)x->en.rope_positions, (double)x->en.norm_eps);
  if (x->xc) fz_add_context(" ext corruption %d", x->xc);
  if (x->ws)
    fz_add_context(" workspace %lld bytes (%lld jobs) claiming %lld, corruption %d", (long long)x->ws_bytes,
                   (long long)x->ws_jobs, (long long)x->en.workspace_bytes, fz_ws_corruption(x));
  if (getenv("C128_FUZZ_VERBOSE") && atoi(getenv("C128_FUZZ_VERBOSE")) > 1)
    fprintf(stderr, "c128-fuzz: %s\n", fz_context);
}

static void fz_free_ext(fz_ext *x) {
  free(x->table), free(x->score_table), free(x->score_plane), free(x->index), free(x->gamma), free(x->rope);
  free(x->cache), free(x->xbuf), free(x->ws);
}

/* >>workspace: the cache-entry launch's workspace (DESIGN 11.3) -------------------------------- */
/* Builds the workspace of a launch of `jobs` (modes 0 and 1, with cache entries drawn): exactly
   its bytes, zero (as a caller's first launch finds it), in x->en. Most inputs claim its exact
   size; some claim more (a launch uses its own size, and AddressSanitizer sees a byte more). */
static void fz_build_workspace(fz_ext *x, int D, int64_t jobs) {
  if (!x->esel) return;
  x->ws_jobs = jobs, x->ws_bytes = m_workspace_bytes(jobs, D);
  x->ws = (uint8_t *)fz_alloc((size_t)x->ws_bytes);
  memset(x->ws, 0, (size_t)x->ws_bytes);
  const int64_t more[8] = {0, 0, 0, 0, 16, 1, 4096, INT64_MAX - x->ws_bytes};
  x->en.workspace = x->ws, x->en.workspace_bytes = x->ws_bytes + more[x->wssel % 8];
}

/* Workspace corruptions (x->wssel >= 200, after every other one): 1, 2 NULL; 3..5 misaligned;
   6..13 workspace_bytes short of the size (by 1, 4, 16 bytes, a row, every row) or
   0, -1, INT64_MIN; 14..25 the workspace placed on another tensor of the call (the state, inside
   it, the cache, input, the input's last 16 bytes, gamma, the RoPE table, index, ape, plans,
   score plane, block table). Returns 1 for a placement: the caller keeps it only where the
   launch must refuse it. */
enum { FZ_WS_PLACED = 14 };
static int fz_corrupt_workspace(const fz_ext *x, int D, c128_entry_args *e, const c128_state_layout *sl,
                                const int64_t *index, const fz_ptrs *t, uint64_t input_bytes) {
  const int k = fz_ws_corruption(x);
  const int64_t need = x->ws_bytes;
  switch (k) {
  case 1:
    e->workspace = NULL;
    break;
  case 2:
    e->workspace = NULL, e->workspace_bytes = 0;
    break;
  case 3:
    e->workspace = x->ws + 4;
    break;
  case 4:
    e->workspace = x->ws + 8;
    break;
  case 5:
    e->workspace = x->ws + 1;
    break;
  case 6:
    e->workspace_bytes = need - 1;
    break;
  case 7:
    e->workspace_bytes = need - 4;
    break;
  case 8:
    e->workspace_bytes = need - 16;
    break;
  case 9:
    e->workspace_bytes = need - 4 * (int64_t)D;
    break;
  case 10:
    e->workspace_bytes = (4 * x->ws_jobs + 15) / 16 * 16; /* the counters only */
    break;
  case 11:
    e->workspace_bytes = 0;
    break;
  case 12:
    e->workspace_bytes = -1;
    break;
  case 13:
    e->workspace_bytes = INT64_MIN;
    break;
  case 14:
    e->workspace = *t->state;
    break;
  case 15:
    e->workspace = *t->state ? (char *)*t->state + 16 : NULL;
    break;
  case 16:
    e->workspace = e->cache;
    break;
  case 17:
    e->workspace = (void *)*t->input;
    break;
  case 18:
    e->workspace = *t->input && input_bytes >= 16 ? (char *)*t->input + input_bytes - 16 : NULL;
    break;
  case 19:
    e->workspace = (void *)e->norm_weight;
    break;
  case 20:
    e->workspace = (void *)e->rope_table;
    break;
  case 21:
    e->workspace = (void *)index;
    break;
  case 22:
    e->workspace = (void *)*t->ape;
    break;
  case 23:
    e->workspace = (void *)*t->plans;
    break;
  case 24:
    e->workspace = sl->score_plane;
    break;
  case 25:
    e->workspace = (void *)sl->block_table;
    break;
  default:
    break;
  }
  return k >= FZ_WS_PLACED;
}

/* The workspace after any launch, refused or not, handed x->ws or not: all zero, as it was
   (DESIGN 11.3: the last block of a window sets its counter and its row back to zero). */
static void fz_check_workspace(const fz_ext *x, const char *what) {
  if (!x->ws) return;
  const int64_t counters = (4 * x->ws_jobs + 15) / 16 * 16;
  for (int64_t b = 0; b < x->ws_bytes; ++b)
    FZ_CHECK(2, x->ws[b] == 0, "%s: workspace byte %lld is 0x%02x after the launch (%s)", what, (long long)b, x->ws[b],
             b < 4 * x->ws_jobs ? "a job's counter"
             : b < counters     ? "padding after the counters"
                                : "a job's row");
}
