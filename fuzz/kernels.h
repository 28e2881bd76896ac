/* Modes 0 and 1: arbitrary plan bytes, counts, sizes, state layouts (DESIGN 5.9), output indices
   (5.10) and cache entries (11) through the host runner (decode, and prefill = compress +
   write). Part of fuzz_c128.cu.

   Properties (numbers as in fuzz/README.md):
   1  no crash, no out-of-bounds access, no undefined behaviour (the sanitizers);
   2  the launch's status is the model's (m_launch_status: the argument checks in the launch's
      order, then the tensors, then a race exactly when two runnable plans conflict with the race
      checker on), and what changed is what runnable plans allow: every changed row of every
      state plane is the write row of a plan whose reason is RUN (model of SPEC 6.5 / DESIGN 5.9
      and the library's own reason code, which must agree), each element equal to the input row
      of one such plan converted to the state dtype (a biased score with ape added); every
      changed output row is the target of a RUN plan, and holds the window of the plan that
      stores last, matching the fp64 oracle over the rows the plan names (unless a plan of the
      launch writes those rows); with cache entries, exactly the bytes of the entries the model
      says are written change, each entry DESIGN 11's function of the window's pooled vector
      (taken from the same launch with pooled rows) bit for bit; a rejected call changes nothing;
      results do not depend on the group size or the block order;
   5  the plan checker agrees: SUCCESS exactly when no plan is offending, else it names the first
      offending plan (own failures, conflicts through the layout, one output row or entry for two
      windows). */

static double fz_ref[FZ_MAX_D], fz_scale[FZ_MAX_D];
static float fz_rows[128][2 * FZ_MAX_D], fz_abs_rows[128][2 * FZ_MAX_D];
static const float *fz_row_ptr[128], *fz_abs_row_ptr[128];
static float fz_ape_w[128 * FZ_MAX_D]; /* a window's ape: zero on a biased state's rows */

/* >>input: layout, options, argument corruption --------------------------------------------- */
static c128_shared_layout rd_layout(fz_reader *r) {
  c128_shared_layout l = {0, 0, 0};
  const int sel = rd_below(r, 8);
  if (sel < 4) {
    l.size = sel & 1; /* 0 and 1 both mean unsharded */
    l.pages_per_rank = rd_below(r, 4);
  } else if (sel < 7) {
    l.size = 2 + rd_below(r, 3);
    l.rank = rd_below(r, l.size);
    l.pages_per_rank = rd_below(r, 6);
  } else {
    l.rank = (int32_t)rd_u32(r), l.size = (int32_t)rd_u32(r), l.pages_per_rank = (int32_t)rd_u32(r);
  }
  return l;
}
/* Logical pages worth naming in a plan: a few beyond the end and one before. */
static int64_t fz_page_span(int64_t pages, c128_shared_layout l) {
  int64_t span = pages;
  if (fz_layout_valid(l) && l.size > 1) span = (int64_t)l.size * l.pages_per_rank;
  return span < 0 ? 0 : span > 12 ? 12 : span;
}
static int32_t rd_page(fz_reader *r, int64_t span) { return (int32_t)rd_below(r, (int)span + 3) - 1; }
static int32_t rd_slot(fz_reader *r) {
  const int v = rd_u8(r);
  return v < 128 ? v : v < 192 ? 127 : 126;
}

typedef struct fz_options {
  c128_host_options o;
  const c128_host_options *ptr;
  char *msg;
} fz_options;
static fz_options fz_make_options(uint8_t flags) {
  fz_options f;
  memset(&f, 0, sizeof f);
  f.o.check_races = flags & 1;
  f.o.reverse_blocks = (flags >> 1) & 1;
  switch ((flags >> 2) & 3) {
  case 1:
    f.o.message_size = 64;
    break; /* a size but no buffer */
  case 2:
    f.msg = (char *)fz_alloc(1), f.msg[0] = 'x', f.o.message = f.msg, f.o.message_size = 1;
    break;
  case 3:
    f.msg = (char *)fz_alloc(48), f.msg[0] = 0, f.o.message = f.msg, f.o.message_size = 48;
    break;
  default:
    break;
  }
  f.ptr = (flags & 0x10) && !f.o.check_races && !f.o.reverse_blocks ? NULL : &f.o;
  return f;
}
static void fz_check_message(const fz_options *f, c128_status st) {
  if (st == C128_ERROR_RACE_DETECTED && f->msg)
    FZ_CHECK(2, memchr(f->msg, 0, f->o.message_size) != NULL, "race message is not NUL-terminated within %zu bytes",
             f->o.message_size);
  free(f->msg);
}
static int rd_corruption(fz_reader *r) {
  const int v = rd_u8(r);
  return v < 200 ? 0 : 1 + (v - 200) % 24; /* 1..18: one bad argument; 19..24: aliased tensors */
}

/* Corruptions 19..24: one tensor placed at the start of another. */
static void fz_alias(int corrupt, void **state, const void **input, const float **ape, void **output,
                     const void **plans) {
  switch (corrupt) {
  case 19:
    *output = *state;
    break;
  case 20:
    *input = *state;
    break;
  case 21:
    *plans = *state;
    break;
  case 22:
    *output = (void *)*input;
    break;
  case 23:
    *output = (void *)*plans;
    break;
  case 24:
    *state = (void *)*ape;
    break;
  default:
    break;
  }
}

/* Checker = launch (property 5): the checker over the call's own arguments refuses them with
   the launch's status; when it accepts them, the launch failed, if at all, on a tensor pointer
   (NULL, misaligned, aliased, a workspace too small: the checker does not look at tensors) or
   found a race. A typed
   entry point called with another instance's arguments is INSTANCE_MISMATCH first. */
static void fz_check_equals_launch(c128_status cst, c128_status st, int typed_mismatch) {
  if (typed_mismatch) {
    FZ_CHECK(5, st == C128_ERROR_INSTANCE_MISMATCH, "typed entry point with another instance's arguments: %s",
             c128_status_string(st));
  } else if (cst != C128_SUCCESS && cst != C128_ERROR_INVALID_PLAN) {
    FZ_CHECK(5, st == cst, "checker %s, launch %s over the same arguments", c128_status_string(cst),
             c128_status_string(st));
  } else {
    FZ_CHECK(5,
             st == C128_SUCCESS || st == C128_ERROR_RACE_DETECTED || st == C128_ERROR_NULL_POINTER ||
                 st == C128_ERROR_MISALIGNED || st == C128_ERROR_ALIASED || st == C128_ERROR_WORKSPACE_TOO_SMALL,
             "checker %s (accepts the arguments), launch %s", c128_status_string(cst), c128_status_string(st));
  }
}
static int fz_typed_mismatch(int typed, const fz_instance *I, int32_t D, c128_dtype sd, c128_dtype id, c128_dtype od) {
  return typed && (D != I->head_dim || sd != I->buf || id != I->in || od != I->out);
}

/* >>state planes ------------------------------------------------------------------------------- */
/* The state as tensors: one plane of kv | score rows, or (a score plane) kv rows in `kv` and
   score rows in `sc`, each D elements. */
typedef struct fz_planes {
  void *kv, *sc;
  int split, D;
  c128_dtype dt;
} fz_planes;
/* Element e (0 .. 2D - 1: kv, then score) of physical row `row` of its half's plane. */
static const void *fz_plane_of(const fz_planes *p, int e) { return p->split && e >= p->D ? p->sc : p->kv; }
static int64_t fz_plane_elem(const fz_planes *p, int64_t row, int e) {
  if (!p->split) return row * 2 * p->D + e;
  return row * p->D + (e >= p->D ? e - p->D : e);
}
static float fz_plane_get(const fz_planes *p, int64_t row, int e) {
  return fz_get(fz_plane_of(p, e), fz_plane_elem(p, row, e), p->dt);
}
static int fz_half_equal(const fz_planes *a, const fz_planes *b, int64_t row, int half) {
  const size_t es = fz_es(a->dt), n = (size_t)a->D * es;
  const int e = half * a->D;
  return memcmp((const char *)fz_plane_of(a, e) + fz_plane_elem(a, row, e) * es,
                (const char *)fz_plane_of(b, e) + fz_plane_elem(b, row, e) * es, n) == 0;
}
/* Rows of kv | score values (DESIGN 1's data) into the planes. */
static void fz_fill_planes(fz_rng *g, const fz_planes *p, int64_t rows, int style) {
  if (!p->split) {
    fz_fill_rows(g, p->kv, rows, p->D, p->dt, style);
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int dead = style == 2 && rng_next(g) % 17 == 0;
    for (int c = 0; c < 2 * p->D; ++c)
      fz_set((void *)fz_plane_of(p, c), fz_plane_elem(p, r, c), p->dt,
             dead && c >= p->D ? -INFINITY : fz_value(g, c >= p->D, style));
  }
}

/* A state write of a running plan: input row src into physical rows kv (plane 0) and sc (plane 1;
   -1: none), at window row `slot` (a biased score's ape row). */
typedef struct fz_wr {
  int64_t src, kv, sc;
  int32_t slot;
} fz_wr;

/* Element e of input row src as plan w stores it: bits kept when the dtypes agree, else
   rounded; a biased score is score + ape[slot] rounded once. */
static int fz_written_ok(const fz_instance *I, const fz_planes *now, int64_t row, int e, const void *input,
                         const fz_wr *w, const float *ape, int biased) {
  const int D = I->head_dim;
  const void *base = fz_plane_of(now, e);
  const int64_t si = fz_plane_elem(now, row, e);
  if (!(biased && e >= D)) return fz_state_elem_ok(base, si, I->buf, input, w->src * 2 * D + e, I->in);
  const float v = fz_get(input, w->src * 2 * D + e, I->in) + ape[w->slot * D + (e - D)];
  const float got = fz_get(base, si, I->buf);
  if (v != v) return got != got;
  return fz_bits(got) == fz_bits(fz_round_to(I->buf, v));
}
/* Every changed row of each plane has a runnable writer; every written row is, element by
   element, the converted input row of one of its writers. */
static void fz_check_planes(const fz_instance *I, const fz_planes *now, const fz_planes *before, int64_t rows,
                            const void *input, const float *ape, int biased, const fz_wr *w, int nw, const char *what) {
  const int D = I->head_dim;
  for (int half = 0; half < 2; ++half) {
    for (int64_t row = 0; row < rows; ++row) {
      int writers = 0;
      for (int k = 0; k < nw; ++k) writers += (half ? w[k].sc : w[k].kv) == row;
      const int changed = !fz_half_equal(now, before, row, half);
      FZ_CHECK(2, !changed || writers, "state %s row %lld changed, but no runnable %s plan writes it",
               half ? "score" : "kv", (long long)row, what);
      if (!writers) continue;
      for (int c = 0; c < D; ++c) {
        const int e = half * D + c;
        int ok = 0;
        for (int k = 0; k < nw && !ok; ++k)
          ok = (half ? w[k].sc : w[k].kv) == row && fz_written_ok(I, now, row, e, input, &w[k], ape, biased);
        FZ_CHECK(2, ok,
                 "state %s row %lld element %d (%g) is not the converted input of any runnable %s plan writing it",
                 half ? "score" : "kv", (long long)row, c, (double)fz_plane_get(now, row, e), what);
      }
    }
  }
}

/* Output row `row` was written in full (never to the sentinel) and matches the oracle over
   `rows` (when `numeric`). */
static void fz_check_output(const fz_instance *I, const void *out, int64_t row, const float *ape, int numeric,
                            int robust, const char *what) {
  const int D = I->head_dim;
  const size_t es = fz_es(I->out);
  for (int c = 0; c < D; ++c) {
    const uint32_t sentinel = 0x5A5A5A5Au;
    FZ_CHECK(2, memcmp((const char *)out + (row * D + c) * es, &sentinel, es) != 0,
             "%s: output row %lld channel %d was not written", what, (long long)row, c);
  }
  if (!numeric) return;
  for (int j = 0; j < 128; ++j) fz_row_ptr[j] = fz_rows[j];
  ref_window(D, fz_row_ptr, ape, fz_ref);
  if (robust) { /* the same weights over |kv|: each channel's scale */
    for (int j = 0; j < 128; ++j) {
      for (int c = 0; c < 2 * D; ++c) fz_abs_rows[j][c] = c < D ? fabsf(fz_rows[j][c]) : fz_rows[j][c];
      fz_abs_row_ptr[j] = fz_abs_rows[j];
    }
    ref_window(D, fz_abs_row_ptr, ape, fz_scale);
  }
  char why[240];
  if (fz_compare_row(out, row, I->out, fz_ref, robust ? fz_scale : NULL, D, why, sizeof why))
    fz_fail(3, "%s: output row %lld differs from the oracle over the rows its plan names: %s", what, (long long)row,
            why);
}

/* fz_rows = the window as the kernel reads it: rows < buffer_len from the state before the launch
   (window row j at its physical rows in each plane), the others from input rows in_row0 + j.
   Returns the ape the window adds: a biased state's rows hold theirs already (zero there). */
static const float *fz_window_rows(const fz_instance *I, const m_kern *K, const fz_planes *before, int64_t row0,
                                   int buffer_len, const void *input, int64_t in_row0, const float *ape) {
  const int D = I->head_dim;
  for (int j = 0; j < 128; ++j) {
    if (j < buffer_len) {
      const int64_t rk = m_window_row(K, row0, j, 0), rs = K->S.layout ? m_window_row(K, row0, j, 1) : rk;
      for (int c = 0; c < D; ++c)
        fz_rows[j][c] = fz_plane_get(before, rk, c), fz_rows[j][D + c] = fz_plane_get(before, rs, D + c);
    } else {
      for (int c = 0; c < 2 * D; ++c) fz_rows[j][c] = fz_get(input, (in_row0 + j) * 2 * D + c, I->in);
    }
  }
  if (!K->S.biased) return ape;
  memcpy(fz_ape_w, ape, (size_t)128 * D * sizeof(float));
  for (int j = 0; j < buffer_len; ++j)
    for (int c = 0; c < D; ++c) fz_ape_w[j * D + c] = 0.0f;
  return fz_ape_w;
}

/* The checker's answer against the offending plans of the model. `offending[k]` is 1 for a plan
   a kernel skips, 2 for a runnable plan the checker must still refuse (a wrong seq_len, a
   boundary slot outside its read page, a slot an earlier plan writes too). The checker names
   the first offending plan: the lowest index of the first array (compress or decode) that has
   one, else the lowest of the second (write). */
static void fz_check_report(c128_status st, const c128_plan_report *rep, const char *msg, size_t msg_size,
                            const int *off_c, int64_t nc, const int *off_w, int64_t nw, c128_plan_kind kc,
                            c128_plan_kind kw) {
  int64_t first_c = -1, first_w = -1;
  for (int64_t k = 0; k < nc && first_c < 0; ++k)
    if (off_c[k]) first_c = k;
  for (int64_t k = 0; k < nw && first_w < 0; ++k)
    if (off_w[k]) first_w = k;
  if (first_c < 0 && first_w < 0) {
    FZ_CHECK(5, st == C128_SUCCESS && rep->index == -1, "checker: %s (index %lld) for plans that are all fine",
             c128_status_string(st), (long long)rep->index);
    return;
  }
  FZ_CHECK(5, st == C128_ERROR_INVALID_PLAN, "checker: %s, but plan %lld/%lld is offending", c128_status_string(st),
           (long long)first_c, (long long)first_w);
  const c128_plan_kind want_kind = first_c >= 0 ? kc : kw;
  const int64_t want_index = first_c >= 0 ? first_c : first_w;
  FZ_CHECK(5, rep->kind == want_kind && rep->index == want_index,
           "checker names %s plan %lld (message: %s); the first offending plan is %s plan %lld (why: %d)",
           rep->kind == C128_PLAN_COMPRESS ? "compress"
           : rep->kind == C128_PLAN_WRITE  ? "write"
                                           : "decode",
           (long long)rep->index, msg ? msg : "-",
           want_kind == C128_PLAN_COMPRESS ? "compress"
           : want_kind == C128_PLAN_WRITE  ? "write"
                                           : "decode",
           (long long)want_index, first_c >= 0 ? off_c[first_c] : off_w[first_w]);
  if (msg && msg_size) FZ_CHECK(5, memchr(msg, 0, msg_size) != NULL, "checker message not NUL-terminated");
}

/* >>outputs: which window stores an output row or entry last ------------------------------------- */
/* winner[t] for targets t < T: among the jobs whose window goes to t (out[k], -1: none), the one
   whose store stays: blocks run group after group (reversed: last group first), the windows of a
   block in job order; -1 where none goes. dup: some target has two windows. */
static void fz_winners(const int64_t *out, int64_t n, int64_t G, int reverse, int64_t *winner, int64_t T, int *dup) {
  for (int64_t t = 0; t < T; ++t) winner[t] = -1;
  *dup = 0;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t t = out[k];
    if (t < 0 || t >= T) continue;
    if (winner[t] >= 0) *dup = 1;
    if (winner[t] < 0 || !reverse || winner[t] / G == k / G) winner[t] = k;
  }
}

/* The cache after a launch: bytes of the entries that windows wrote are DESIGN 11's entry of the
   winning window (its pooled vector ys[k], from the launch with pooled rows, at position pos[k]),
   every other byte as before. A winner whose rows the launch itself wrote (`unread`: its value
   depends on the blocks' order, which the pooled twin's grouping may not share) is not checked. */
static void fz_check_cache(const fz_instance *I, const c128_entry_args *e, const uint8_t *now, const uint8_t *before,
                           int64_t bytes, const int64_t *winner, int64_t T, const float *ys, const int64_t *pos,
                           const int *unread, const char *what) {
  const int D = I->head_dim;
  m_entry_ctx E = {
      D,          e->kind == C128_OUTPUT_DSV4_FP8, e->entries_per_page, e->page_bytes, e->norm_weight, e->rope_table,
      e->norm_eps};
  uint8_t *want = (uint8_t *)fz_clone(before, (size_t)bytes), *nan = (uint8_t *)fz_alloc((size_t)bytes + 1);
  int64_t *who = (int64_t *)fz_alloc((size_t)bytes * sizeof(int64_t) + 1);
  memset(nan, 0, (size_t)bytes + 1);
  for (int64_t k = 0; k < bytes; ++k) who[k] = -1;
  uint8_t entry[2 * FZ_MAX_D], scales[FZ_MAX_D / 64 + 1], pairs[FZ_MAX_D];
  for (int64_t t = 0; t < T; ++t) {
    const int64_t w = winner[t];
    if (w < 0) continue;
    m_entry(&E, ys + w * D, pos[w], entry, scales, pairs);
    int64_t off[2], len[2];
    const int n = m_entry_ranges(&E, t, off, len);
    FZ_CHECK(2, off[n - 1] + len[n - 1] <= bytes, "harness: entry %lld outside the cache", (long long)t);
    if (unread && unread[w]) { /* whatever the launch wrote there */
      for (int r = 0; r < n; ++r) memcpy(want + off[r], now + off[r], (size_t)len[r]);
      continue;
    }
    memcpy(want + off[0], entry, (size_t)len[0]);
    for (int64_t b = 0; b < len[0]; ++b) nan[off[0] + b] = pairs[b / 2], who[off[0] + b] = w;
    if (n == 2) {
      memcpy(want + off[1], scales, (size_t)len[1]);
      for (int64_t b = 0; b < len[1]; ++b) who[off[1] + b] = w;
    }
  }
  for (int64_t k = 0; k < bytes; ++k) {
    if (nan[k]) { /* a bf16 NaN: its bits are not a property */
      const int64_t at = k - (k - 0) % 2;
      uint16_t h;
      memcpy(&h, now + at, 2);
      FZ_CHECK(2, (h & 0x7FFFu) > 0x7F80u,
               "%s: cache byte %lld (entry of job %lld) should hold a bf16 NaN, holds 0x%04x", what, (long long)k,
               (long long)who[k], h);
      continue;
    }
    FZ_CHECK(2, now[k] == want[k],
             "%s: cache byte %lld is 0x%02x, DESIGN 11 gives 0x%02x (%s of job %lld; before 0x%02x)", what,
             (long long)k, now[k], want[k], who[k] >= 0 ? "the entry" : "no entry written: unchanged",
             (long long)who[k], before[k]);
  }
  if (getenv("C128_FUZZ_VERBOSE") && atoi(getenv("C128_FUZZ_VERBOSE")) > 1) {
    int64_t written = 0;
    for (int64_t t = 0; t < T; ++t) written += winner[t] >= 0;
    fprintf(stderr, "c128-fuzz: %s: %lld cache entries checked against DESIGN 11\n", what, (long long)written);
  }
  free(want), free(nan), free(who);
}

/* A run's buffers: the state planes, output and cache, cloned for a second launch. */
typedef struct fz_bufs {
  fz_planes st;
  void *output;
  uint8_t *cache;
} fz_bufs;
static fz_bufs fz_bufs_clone(const fz_bufs *b, size_t plane_bytes, size_t out_bytes, size_t cache_bytes) {
  fz_bufs c = *b;
  c.st.kv = fz_clone(b->st.kv, plane_bytes);
  c.st.sc = b->st.split ? fz_clone(b->st.sc, plane_bytes) : NULL;
  c.output = fz_clone(b->output, out_bytes);
  c.cache = (uint8_t *)fz_clone(b->cache, cache_bytes);
  return c;
}
static int fz_bufs_equal(const fz_bufs *a, const fz_bufs *b, size_t plane_bytes, size_t out_bytes, size_t cache_bytes) {
  return (!plane_bytes || memcmp(a->st.kv, b->st.kv, plane_bytes) == 0) &&
         (!a->st.split || !plane_bytes || memcmp(a->st.sc, b->st.sc, plane_bytes) == 0) &&
         (!out_bytes || memcmp(a->output, b->output, out_bytes) == 0) &&
         (!cache_bytes || memcmp(a->cache, b->cache, cache_bytes) == 0);
}
static void fz_bufs_free(fz_bufs *b) { free(b->st.kv), free(b->st.sc), free(b->output), free(b->cache); }

/* The ape of a cache-entry launch's pooled twin. A launch that can write no entry needs no ape,
   so it accepts one that is NULL or misaligned; its pooled twin can write rows and needs a valid
   one: zeros then (allocated, returned for freeing; NULL when the launch's own ape serves). */
static float *fz_twin_ape(const float **ape, int D) {
  if (*ape && (uintptr_t)*ape % (2 * sizeof(float)) == 0) return NULL;
  float *zeros = (float *)calloc((size_t)128 * D, sizeof(float));
  *ape = zeros;
  return zeros;
}

/* The companion launch's pooled vectors: row k of `out` (count rows, the instance's dtype) as f32. */
static float *fz_pooled_rows(const fz_instance *I, const void *out, int64_t count) {
  const int D = I->head_dim;
  float *ys = (float *)fz_alloc((size_t)(count ? count : 1) * D * sizeof(float));
  for (int64_t k = 0; k < count * D; ++k) ys[k] = fz_get(out, k, I->out);
  return ys;
}

/* >>mode 1: prefill ---------------------------------------------------------------------------- */
static c128_compress_plan rd_compress_plan(fz_reader *r, int64_t N, int64_t span) {
  c128_compress_plan p;
  const int kind = rd_u8(r);
  if (kind % 4 == 0) {
    rd_bytes(r, &p, sizeof p);
    return p;
  }
  const int sel = rd_u8(r);
  p.seq_len = sel == 0 ? 0xFFFFFFFFu : sel == 1 ? rd_u32(r) : (uint32_t)(sel % 8 + 1) * 128;
  const int bl = rd_u8(r);
  p.buffer_len = (uint16_t)(bl < 128 ? bl : bl < 192 ? 0 : 127 + bl % 4);
  const int64_t lo = p.buffer_len >= 127 ? 0 : 127 - p.buffer_len;
  int64_t rag = lo + rd_below16(r, (int)(N - lo + 2 > 1 ? N - lo + 2 : 1));
  rag -= rd_below(r, 2);
  if (kind % 4 == 3) rag = rd_u16(r);
  p.ragged_id = (uint16_t)(rag < 0 ? 0 : rag > 65535 ? 65535 : rag);
  p.read_page_1 = rd_page(r, span);
  p.read_page_0 = rd_page(r, span);
  return p;
}
static c128_write_plan rd_write_plan(fz_reader *r, int64_t N, int64_t span) {
  c128_write_plan p;
  const int kind = rd_u8(r);
  if (kind % 4 == 0) {
    rd_bytes(r, &p, sizeof p);
    return p;
  }
  p.ragged_id = kind % 16 == 1 ? 0xFFFFFFFFu : (uint32_t)rd_below16(r, (int)N + 2);
  const int32_t page = rd_page(r, span);
  p.write_loc = page < 0 ? (kind & 0x80 ? -1 : -(int32_t)rd_below(r, 200) - 1) : page * 128 + rd_slot(r);
  return p;
}

static void fz_corrupt_prefill(c128_prefill_args *a, int corrupt) {
  switch (corrupt) {
  case 1:
    a->state = NULL;
    break;
  case 2:
    a->input = NULL;
    break;
  case 3:
    a->ape = NULL;
    break;
  case 4:
    a->output = NULL;
    break;
  case 5:
    if (a->num_compress) a->compress_plans = NULL;
    else a->write_plans = NULL;
    break;
  case 6:
    a->state = (char *)a->state + 2;
    break;
  case 7:
    a->input = (const char *)a->input + 2;
    break;
  case 8:
    a->output = (char *)a->output + 1;
    break;
  case 9:
    a->ape = a->ape + 1;
    break;
  case 10:
    if (a->num_compress) a->compress_plans = (const c128_compress_plan *)((const char *)a->compress_plans + 8);
    else a->write_plans = (const c128_write_plan *)((const char *)a->write_plans + 4);
    break;
  case 11:
    a->head_dim = 192;
    break;
  case 12:
    a->output_dtype = (c128_dtype)7;
    break;
  case 13:
    a->state_pages = -1;
    break;
  case 14:
    a->output_rows = -1;
    break;
  case 15:
    a->num_write = -1;
    break;
  case 16:
    a->state_pages = INT64_MAX / 4;
    break;
  case 17:
    a->input_rows = 65537;
    break;
  case 18:
    a->num_compress = 65537;
    break;
  default:
    break;
  }
}

/* Sets up the argument fields every mode-0/1 launch shares from the extras. */
static void fz_apply_ext(const fz_ext *x, c128_state_layout *sl, const int64_t **index, c128_entry_args *e) {
  *sl = x->sl;
  *index = x->isel ? x->index : NULL;
  *e = x->en;
}

static void fz_mode_prefill(fz_reader *r) {
  const fz_instance *I = &fz_instances[rd_below(r, FZ_NUM_INSTANCES)];
  const int D = I->head_dim;
  const uint8_t flags = rd_u8(r);
  const int64_t P = rd_below(r, 5), N = rd_below16(r, 301), NC = rd_below(r, 7), NW = rd_below(r, 25);
  const int osel = rd_u8(r);
  const int64_t O = osel < 224 ? NC + osel % 3 : osel % (NC + 1);
  const c128_shared_layout lay = rd_layout(r);
  const int corrupt = rd_corruption(r);
  fz_rng g = {rd_u64(r)};
  int style = rd_below(r, 3);
  const int64_t span = fz_page_span(P, lay);
  c128_compress_plan *cp = (c128_compress_plan *)fz_alloc((size_t)NC * sizeof *cp);
  c128_write_plan *wp = (c128_write_plan *)fz_alloc((size_t)NW * sizeof *wp);
  for (int64_t k = 0; k < NC; ++k) cp[k] = rd_compress_plan(r, N, span);
  for (int64_t k = 0; k < NW; ++k) wp[k] = rd_write_plan(r, N, span);
  /* windows_per_block: mostly automatic, else 1..max, now and then out of range */
  const int wsel = rd_u8(r);
  const int32_t wgroup = wsel < 128    ? 0
                         : wsel < 248  ? 1 + wsel % FZ_MAX_PREFILL_GROUP
                         : wsel == 248 ? -1
                                       : FZ_MAX_PREFILL_GROUP + 1 + wsel % 4;
  /* read after the run in older versions of this mode: the same order */
  const int32_t wgroup2 = 1 + rd_below(r, FZ_MAX_PREFILL_GROUP);
  const size_t msg_size = (size_t)rd_below(r, 3) * 40;
  fz_ext x;
  rd_ext(r, &x); /* state layout, output index, cache entries: zero for older inputs */
  fz_set_context("mode 1 (prefill kernels) %s pages %lld input_rows %lld compress %lld write %lld output_rows %lld "
                 "layout {%d, %d, %d} corruption %d flags 0x%02x style %d windows_per_block %d",
                 I->name, (long long)P, (long long)N, (long long)NC, (long long)NW, (long long)O, lay.rank, lay.size,
                 lay.pages_per_rank, corrupt, flags, style, wgroup);
  fz_build_ext(&x, D, fz_es(I->buf), P, span, N, O, -1);
  fz_build_workspace(&x, D, NC); /* a job a compress plan */
  fz_ext_context(&x);

  const int64_t SP = x.blocks, rows = x.rows; /* state_pages, and rows of each plane */
  const int split = x.sl.score_plane != NULL;
  const size_t plane_bytes = (size_t)rows * (split ? D : 2 * D) * fz_es(I->buf);
  const size_t out_bytes = (size_t)O * D * fz_es(I->out), cache_bytes = (size_t)x.cache_bytes;
  fz_bufs run;
  memset(&run, 0, sizeof run);
  /* at least the compress plans' bytes: corruption 21 hands the state to the plan checker as the plans */
  run.st.kv = fz_alloc(plane_bytes > (size_t)NC * 16 ? plane_bytes : (size_t)NC * 16);
  run.st.sc = x.score_plane, run.st.split = split, run.st.D = D;
  run.st.dt = I->buf;
  void *input = fz_alloc((size_t)N * 2 * D * fz_es(I->in));
  run.output = fz_alloc(out_bytes);
  run.cache = x.cache;
  float *ape = fz_make_ape(&g, D);
  fz_fill_planes(&g, &run.st, rows, style);
  fz_fill_rows(&g, input, N, D, I->in, style);
  memset(run.output, 0x5A, out_bytes);
  fz_bufs before = fz_bufs_clone(&run, plane_bytes, out_bytes, cache_bytes);

  c128_prefill_args a;
  memset(&a, 0, sizeof a);
  a.head_dim = D, a.state_dtype = I->buf, a.input_dtype = I->in, a.output_dtype = I->out;
  a.state = run.st.kv, a.state_pages = SP, a.input = input, a.input_rows = N, a.ape = ape;
  a.output = run.output, a.output_rows = O;
  a.compress_plans = cp, a.num_compress = NC, a.write_plans = wp, a.num_write = NW;
  a.layout = lay;
  fz_set_prefill_group(&a, wgroup);
  fz_apply_ext(&x, &a.state_layout, &a.output_index, &a.entry);
  const c128_prefill_args clean = a;
  const int typed = (flags >> 5) & 1;
#define FZ_PREFILL_M_ARGS(v)  \
  {1,                         \
   (v).head_dim,              \
   (int32_t)(v).state_dtype,  \
   (int32_t)(v).input_dtype,  \
   (int32_t)(v).output_dtype, \
   (v).state_pages,           \
   (v).input_rows,            \
   (v).output_rows,           \
   (v).num_compress,          \
   (v).num_write,             \
   (v).layout,                \
   (v).windows_per_block,     \
   (v).compress_plans,        \
   (v).write_plans,           \
   &(v).state_layout,         \
   (v).output_index,          \
   &(v).entry}
#define FZ_PREFILL_TENSORS(v) \
  { (v).state, (v).input, (v).ape, (v).output }
  fz_corrupt_prefill(&a, corrupt);
  { /* aliasing (19..24) and the new pointers' corruptions: kept where the launch must refuse them */
    const c128_prefill_args b = a;
    const void *plans = a.compress_plans;
    if (corrupt >= 19) {
      fz_alias(corrupt, &a.state, &a.input, &a.ape, &a.output, &plans);
      a.compress_plans = (const c128_compress_plan *)plans;
    }
    const c128_prefill_args c = a;
    const fz_ptrs t = {&a.state, &a.input, &a.ape, &a.output, &plans};
    fz_corrupt_ext(x.xc, &a.state_layout, &a.output_index, &a.entry, &t);
    if (!fz_ext_fits(x.xc, &a.state_layout, a.output_index, N, plane_bytes, out_bytes, (uint64_t)NC * 16)) a = c;
    for (int pass = 0; pass < 2; ++pass) {
      const m_args ma = FZ_PREFILL_M_ARGS(a);
      const m_tensors_of tt = FZ_PREFILL_TENSORS(a);
      const int aliasing = pass == 0 ? x.xc >= 11 && x.xc <= 19 : corrupt >= 19;
      if (aliasing && m_launch_status(&ma, I, typed, &tt) == C128_SUCCESS) a = pass == 0 ? c : b;
    }
  }
  { /* the workspace's corruption (after the others): a placement kept where the launch must refuse it */
    const c128_prefill_args c = a;
    const void *plans = a.compress_plans;
    const fz_ptrs t = {&a.state, &a.input, &a.ape, &a.output, &plans};
    if (fz_corrupt_workspace(&x, D, &a.entry, &a.state_layout, a.output_index, &t,
                             (uint64_t)N * 2 * D * fz_es(I->in))) {
      const m_args mw = FZ_PREFILL_M_ARGS(a);
      const m_tensors_of tw = FZ_PREFILL_TENSORS(a);
      if (m_launch_status(&mw, I, typed, &tw) == C128_SUCCESS) a = c;
    }
  }
  const m_args ma = FZ_PREFILL_M_ARGS(a);
  const m_tensors_of mt = FZ_PREFILL_TENSORS(a);
  const c128_status want_args = m_launch_status(&ma, I, typed, &mt);
  const int accepted = want_args == C128_SUCCESS;
  fz_add_context(" -> model %s", c128_status_string(want_args));

  /* The model of the launch that runs: which plans run, what they write, and what conflicts. */
  const m_kern K = m_kern_of(&ma);
  m_compress *mc = (m_compress *)fz_alloc((size_t)NC * sizeof *mc + 1);
  m_write *mw = (m_write *)fz_alloc((size_t)NW * sizeof *mw + 1);
  fz_wr *wr = (fz_wr *)fz_alloc((size_t)NW * sizeof *wr + 1);
  int64_t *outs = (int64_t *)fz_alloc((size_t)NC * sizeof(int64_t) + 1);
  int nwr = 0, conflict_c = 0, conflict_w = 0, dup = 0;
  int items = 1; /* a whole-window block's jobs are its windows, in job order like a block's of one split */
  const int64_t Gp = accepted && NC > 0 ? fz_jobs_per_block(fz_host_prefill_group(&a), D, K.entry, &items) : 1;
  fz_options opt = fz_make_options(flags);
  const int64_t T = accepted ? K.targets : 0;
  int64_t *winner = (int64_t *)fz_alloc((size_t)(T > 0 ? T : 1) * sizeof(int64_t));
  for (int64_t t = 0; t < T; ++t) winner[t] = -1;
  if (accepted) {
    for (int64_t k = 0; k < NC; ++k) {
      mc[k] = m_compress_plan(&K, k, N, cp[k]);
      outs[k] = mc[k].reason == M_RUN ? mc[k].out : -1;
      for (int64_t j = 0; j < k && outs[k] >= 0; ++j) conflict_c |= outs[j] == outs[k] && j / Gp != k / Gp;
    }
    fz_winners(outs, NC, Gp, opt.o.reverse_blocks, winner, T, &dup);
    for (int64_t k = 0; k < NW; ++k) {
      mw[k] = m_write_plan(&K, N, wp[k]);
      if (mw[k].reason != M_RUN || mw[k].dkv < 0) continue;
      for (int j = 0; j < nwr; ++j) conflict_w |= wr[j].kv == mw[k].dkv || (split && wr[j].sc == mw[k].dsc);
      wr[nwr].src = mw[k].src_row, wr[nwr].kv = mw[k].dkv, wr[nwr].sc = mw[k].dsc, wr[nwr].slot = mw[k].slot, ++nwr;
    }
  }
  const int races = opt.o.check_races && accepted && m_has_work(&ma);
  const c128_status want = !accepted                             ? want_args
                           : races && (conflict_c || conflict_w) ? C128_ERROR_RACE_DETECTED
                                                                 : C128_SUCCESS;
  const int writes_ran = accepted && !(races && conflict_c); /* a compress that raced stops the call */
  fz_add_context(", want %s", c128_status_string(want));

  const c128_status st = typed ? I->prefill_host(&a, opt.ptr) : c128_prefill_host(&a, opt.ptr);
  FZ_CHECK(2, st == want, "status %s, the model %s (compress conflict %d, write conflict %d, race checker %d; %s)",
           c128_status_string(st), c128_status_string(want), conflict_c, conflict_w, opt.o.check_races,
           opt.msg && opt.msg[0] ? opt.msg : "no message");
  fz_check_message(&opt, st);
  {
    c128_plan_report rep0 = {0, C128_PLAN_DECODE, NULL, 0};
    fz_check_equals_launch(c128_check_prefill_plans(&a, &rep0), st,
                           fz_typed_mismatch(typed, I, a.head_dim, a.state_dtype, a.input_dtype, a.output_dtype));
  }

  fz_check_workspace(&x, "prefill");
  if (!accepted) {
    FZ_CHECK(2, fz_bufs_equal(&run, &before, plane_bytes, out_bytes, cache_bytes),
             "a call refused with %s changed the state, the output or the cache", c128_status_string(st));
  } else {
    fz_check_planes(I, &run.st, &before.st, rows, input, ape, K.S.biased, wr, writes_ran ? nwr : 0, "write");
    if (!K.entry) {
      for (int64_t row = 0; row < O; ++row) {
        const int64_t w = row < T ? winner[row] : -1;
        const size_t rb = (size_t)D * fz_es(I->out);
        if (w < 0) {
          FZ_CHECK(2, memcmp((char *)run.output + row * rb, (char *)before.output + row * rb, rb) == 0,
                   "output row %lld changed, but no running compress plan goes there", (long long)row);
          continue;
        }
        /* The compress launch runs before the write launch: windows read the state as it was. */
        const float *ape_w =
            fz_window_rows(I, &K, &before.st, mc[w].state_row0, mc[w].buffer_len, input, mc[w].input_row0, ape);
        char what[64];
        snprintf(what, sizeof what, "compress plan %lld", (long long)w);
        fz_check_output(I, run.output, row, ape_w, 1, style == 2, what);
      }
    } else {
      FZ_CHECK(2, memcmp(run.output, before.output, out_bytes) == 0, "a launch of cache entries changed the output");
      /* The pooled vectors of the same launch: pooled rows, compress plan k -> row k. */
      fz_bufs comp = fz_bufs_clone(&before, plane_bytes, 0, 0);
      free(comp.output);
      comp.output = fz_alloc((size_t)NC * D * fz_es(I->out) + 1);
      c128_prefill_args b = a;
      b.state = comp.st.kv, b.state_layout.score_plane = comp.st.sc;
      b.output = comp.output, b.output_rows = NC, b.output_index = NULL;
      memset(&b.entry, 0, sizeof b.entry);
      b.num_write = 0;
      float *no_ape = fz_twin_ape(&b.ape, D);
      c128_host_options o2 = {0, opt.o.reverse_blocks, NULL, 0, 0};
      const c128_status st2 = I->prefill_host(&b, &o2);
      free(no_ape);
      FZ_CHECK(2, st2 == C128_SUCCESS, "the same launch with pooled rows: %s", c128_status_string(st2));
      float *ys = fz_pooled_rows(I, comp.output, NC);
      int64_t *pos = (int64_t *)fz_alloc((size_t)NC * sizeof(int64_t) + 1);
      for (int64_t k = 0; k < NC; ++k) pos[k] = (int64_t)cp[k].seq_len - 128;
      fz_check_cache(I, &a.entry, run.cache, before.cache, x.cache_bytes, winner, T, ys, pos, NULL, "prefill");
      free(ys), free(pos), fz_bufs_free(&comp);
    }
  }

  (void)items;
  if (accepted && !conflict_c && !conflict_w && !dup && wgroup2 != fz_host_prefill_group(&a) && m_has_work(&ma)) {
    /* Results do not depend on how compress plans are grouped into blocks, nor on block order. */
    fz_bufs two = fz_bufs_clone(&before, plane_bytes, out_bytes, cache_bytes);
    c128_prefill_args a2 = a;
    a2.state = two.st.kv, a2.state_layout.score_plane = two.st.sc, a2.output = two.output;
    if (K.entry) a2.entry.cache = two.cache; /* the same workspace: zero again */
    fz_set_prefill_group(&a2, wgroup2);
    c128_host_options o2 = {opt.o.check_races, !opt.o.reverse_blocks, NULL, 0, 0};
    const c128_status st2 = I->prefill_host(&a2, &o2);
    FZ_CHECK(2, st2 == C128_SUCCESS, "windows_per_block %d: %s", wgroup2, c128_status_string(st2));
    fz_check_workspace(&x, "windows_per_block (second launch)");
    FZ_CHECK(2, fz_bufs_equal(&two, &run, plane_bytes, out_bytes, cache_bytes),
             "windows_per_block %d (blocks %s) changes the result of windows_per_block %d", wgroup2,
             o2.reverse_blocks ? "reversed" : "forward", wgroup);
    fz_bufs_free(&two);
  }

  const m_args mclean = FZ_PREFILL_M_ARGS(clean);
  const c128_status want_clean = m_validate(&mclean);
  if (want_clean == C128_SUCCESS) { /* the library's own reason codes agree with the model */
    const m_kern Kc = m_kern_of(&mclean);
    for (int64_t k = 0; k < NC; ++k) {
      const m_compress m = m_compress_plan(&Kc, k, N, cp[k]);
      const fz_lib_compress w = fz_lib_compress_reason(&clean, k);
      const int cls = fz_reason_class(w.reason);
      FZ_CHECK(2, cls == m.reason, "compress plan %lld: library reason %d (%s), the model says %s", (long long)k,
               w.reason, fz_lib_reason_text(w.reason), m.reason == M_RUN ? "run" : "skip");
      /* the kernel of any layout names the window by its logical row, which on a sharded state of
         today's layout (an output index) is the model's physical row through the shared layout */
      const int64_t row0 = w.layout && !Kc.S.layout ? m_row(&Kc.S, w.state_row0, 0, NULL) : w.state_row0;
      if (cls == M_RUN)
        FZ_CHECK(2,
                 w.out_row == m.out && w.buffer_len == m.buffer_len && w.input_row0 == m.input_row0 &&
                     (w.buffer_len == 0 || row0 == m.state_row0) &&
                     (!Kc.entry || w.position == (int64_t)cp[k].seq_len - 128),
                 "compress plan %lld: library window (out %lld, rows %lld/%lld) differs from the model's (%lld, "
                 "%lld/%lld)",
                 (long long)k, (long long)w.out_row, (long long)row0, (long long)w.input_row0, (long long)m.out,
                 (long long)m.state_row0, (long long)m.input_row0);
    }
    for (int64_t k = 0; k < NW; ++k) {
      const m_write m = m_write_plan(&Kc, N, wp[k]);
      int64_t src = -1, dkv = -1, dsc = -1;
      const int reason = fz_lib_write_reason(&clean, k, &src, &dkv, &dsc);
      const int cls = fz_reason_class(reason);
      FZ_CHECK(2, cls == m.reason, "write plan %lld: library reason %d (%s), the model says %s", (long long)k, reason,
               fz_lib_reason_text(reason), m.reason == M_RUN ? "run" : "skip");
      if (cls == M_RUN)
        FZ_CHECK(2, src == m.src_row && dkv == m.dkv && (dkv < 0 || dsc == m.dsc),
                 "write plan %lld: library rows (%lld -> %lld/%lld), the model's (%lld -> %lld/%lld)", (long long)k,
                 (long long)src, (long long)dkv, (long long)dsc, (long long)m.src_row, (long long)m.dkv,
                 (long long)m.dsc);
    }
  }

  { /* the plan checker over the same plans (tensor pointers are not its business) */
    char *msg = msg_size ? (char *)fz_alloc(msg_size) : NULL;
    c128_plan_report rep = {12345, C128_PLAN_DECODE, msg, msg_size};
    const c128_status cst = c128_check_prefill_plans(&clean, &rep);
    if (want_clean != C128_SUCCESS) {
      FZ_CHECK(5, cst == want_clean && rep.index == -1, "checker: %s (index %lld), the launch's validation gives %s",
               c128_status_string(cst), (long long)rep.index, c128_status_string(want_clean));
    } else {
      int *off_c = (int *)fz_alloc((size_t)NC * sizeof(int) + 1),
          *off_w = (int *)fz_alloc((size_t)NW * sizeof(int) + 1);
      m_check_prefill(&mclean, cp, NC, wp, NW, off_c, off_w);
      fz_check_report(cst, &rep, msg, msg_size, off_c, NC, off_w, NW, C128_PLAN_COMPRESS, C128_PLAN_WRITE);
      free(off_c), free(off_w);
    }
    free(msg);
  }

  free(mc), free(mw), free(wr), free(outs), free(winner);
  free(run.st.kv), free(run.output), fz_bufs_free(&before);
  free(input), free(ape), free(cp), free(wp);
  fz_free_ext(&x);
}

/* >>mode 0: decode ------------------------------------------------------------------------------ */
static c128_decode_plan rd_decode_plan(fz_reader *r, int64_t span) {
  c128_decode_plan p;
  const int kind = rd_u8(r);
  if (kind % 4 == 0) {
    rd_bytes(r, &p, sizeof p);
    return p;
  }
  p.seq_len = kind % 16 == 1 ? 0u : (uint32_t)rd_u16(r) + 1;
  const int32_t page = rd_page(r, span);
  p.write_loc = page < 0 ? -1 : page * 128 + rd_slot(r);
  p.read_page_1 = kind & 0x80 ? page : rd_page(r, span);
  p.read_page_0 = rd_page(r, span);
  return p;
}

/* fz_corrupt_prefill's numbers where the two structs share a field: kept apart because the
   structs differ, and a corruption's number is part of the corpus format. */
static void fz_corrupt_decode(c128_decode_args *a, int corrupt) {
  switch (corrupt) {
  case 1:
    a->state = NULL;
    break;
  case 2:
    a->input = NULL;
    break;
  case 3:
    a->ape = NULL;
    break;
  case 4:
    a->output = NULL;
    break;
  case 5:
    a->plans = NULL;
    break;
  case 6:
    a->state = (char *)a->state + 2;
    break;
  case 7:
    a->input = (const char *)a->input + 2;
    break;
  case 8:
    a->output = (char *)a->output + 1;
    break;
  case 9:
    a->ape = a->ape + 1;
    break;
  case 10:
    a->plans = (const c128_decode_plan *)((const char *)a->plans + 8);
    break;
  case 11:
    a->head_dim = 192;
    break;
  case 12:
    a->state_dtype = (c128_dtype)7;
    break;
  case 13:
    a->state_pages = -1;
    break;
  case 14:
    a->output_rows = -1;
    break;
  case 15:
    a->batch = -1;
    break;
  case 16:
    a->state_pages = INT64_MAX / 4;
    break;
  case 17:
    a->output_rows = a->batch - 1;
    break;
  case 18:
    a->batch = INT32_MAX;
    break;
  default:
    break;
  }
}

static void fz_mode_decode(fz_reader *r) {
  const fz_instance *I = &fz_instances[rd_below(r, FZ_NUM_INSTANCES)];
  const int D = I->head_dim;
  const uint8_t flags = rd_u8(r);
  const int64_t P = rd_below(r, 5), B = rd_below(r, 9);
  const int osel = rd_u8(r);
  const int64_t O = osel < 224 ? B + osel % 3 : osel % (B + 1);
  const c128_shared_layout lay = rd_layout(r);
  const int corrupt = rd_corruption(r);
  fz_rng g = {rd_u64(r)};
  int style = rd_below(r, 3);
  /* requests_per_block: mostly automatic, else 1..max, now and then out of range */
  const int gsel = rd_u8(r);
  const int32_t group = gsel < 128    ? 0
                        : gsel < 248  ? 1 + gsel % FZ_MAX_GROUP
                        : gsel == 248 ? -1
                                      : FZ_MAX_GROUP + 1 + gsel % 4;
  const int64_t span = fz_page_span(P, lay);
  c128_decode_plan *plans = (c128_decode_plan *)fz_alloc((size_t)B * sizeof *plans);
  for (int64_t b = 0; b < B; ++b) plans[b] = rd_decode_plan(r, span);
  /* read after the run in older versions of this mode: the same order */
  const int32_t group2 = 1 + rd_below(r, FZ_MAX_GROUP);
  const size_t msg_size = (size_t)rd_below(r, 3) * 40;
  fz_ext x;
  rd_ext(r, &x); /* state layout, output index, cache entries: zero for older inputs */
  fz_set_context("mode 0 (decode kernel) %s pages %lld batch %lld output_rows %lld layout {%d, %d, %d} corruption "
                 "%d flags 0x%02x style %d requests_per_block %d",
                 I->name, (long long)P, (long long)B, (long long)O, lay.rank, lay.size, lay.pages_per_rank, corrupt,
                 flags, style, group);
  fz_build_ext(&x, D, fz_es(I->buf), P, span, B, O, -1);
  fz_build_workspace(&x, D, B); /* a job a request */
  fz_ext_context(&x);

  const int64_t SP = x.blocks, rows = x.rows;
  const int split = x.sl.score_plane != NULL;
  const size_t plane_bytes = (size_t)rows * (split ? D : 2 * D) * fz_es(I->buf);
  const size_t out_bytes = (size_t)O * D * fz_es(I->out), cache_bytes = (size_t)x.cache_bytes;
  fz_bufs run;
  memset(&run, 0, sizeof run);
  /* at least the plans' bytes: corruption 21 hands the state to the plan checker as the plans */
  run.st.kv = fz_alloc(plane_bytes > (size_t)B * 16 ? plane_bytes : (size_t)B * 16);
  run.st.sc = x.score_plane, run.st.split = split, run.st.D = D;
  run.st.dt = I->buf;
  void *input = fz_alloc((size_t)B * 2 * D * fz_es(I->in));
  run.output = fz_alloc(out_bytes);
  run.cache = x.cache;
  float *ape = fz_make_ape(&g, D);
  fz_fill_planes(&g, &run.st, rows, style);
  fz_fill_rows(&g, input, B, D, I->in, style);
  memset(run.output, 0x5A, out_bytes);
  fz_bufs before = fz_bufs_clone(&run, plane_bytes, out_bytes, cache_bytes);

  c128_decode_args a;
  memset(&a, 0, sizeof a);
  a.head_dim = D, a.state_dtype = I->buf, a.input_dtype = I->in, a.output_dtype = I->out;
  a.state = run.st.kv, a.state_pages = SP, a.input = input, a.ape = ape, a.output = run.output, a.output_rows = O;
  a.plans = plans, a.batch = B, a.layout = lay;
  fz_set_group(&a, group);
  fz_apply_ext(&x, &a.state_layout, &a.output_index, &a.entry);
  const c128_decode_args clean = a;
  const int typed = (flags >> 5) & 1;
#define FZ_DECODE_M_ARGS(v)                                                                                          \
  {                                                                                                                  \
    0, (v).head_dim, (int32_t)(v).state_dtype, (int32_t)(v).input_dtype, (int32_t)(v).output_dtype, (v).state_pages, \
        (v).batch, (v).output_rows, (v).batch, 0, (v).layout, (v).requests_per_block, (v).plans, NULL,               \
        &(v).state_layout, (v).output_index, &(v).entry                                                              \
  }
#define FZ_DECODE_TENSORS(v) \
  { (v).state, (v).input, (v).ape, (v).output }
  const int compact_clean = !x.isel && !(x.esel && x.en.kind != C128_OUTPUT_POOLED);
  if (!(corrupt == 17 && !compact_clean && B - 1 > O)) fz_corrupt_decode(&a, corrupt); /* 17: no rows past O */
  {
    const c128_decode_args b = a;
    const void *pl = a.plans;
    if (corrupt >= 19) {
      fz_alias(corrupt, &a.state, &a.input, &a.ape, &a.output, &pl);
      a.plans = (const c128_decode_plan *)pl;
    }
    const c128_decode_args c = a;
    const fz_ptrs t = {&a.state, &a.input, &a.ape, &a.output, &pl};
    fz_corrupt_ext(x.xc, &a.state_layout, &a.output_index, &a.entry, &t);
    if (!fz_ext_fits(x.xc, &a.state_layout, a.output_index, B, plane_bytes, out_bytes, (uint64_t)B * 16)) a = c;
    for (int pass = 0; pass < 2; ++pass) {
      const m_args ma = FZ_DECODE_M_ARGS(a);
      const m_tensors_of tt = FZ_DECODE_TENSORS(a);
      const int aliasing = pass == 0 ? x.xc >= 11 && x.xc <= 19 : corrupt >= 19;
      if (aliasing && m_launch_status(&ma, I, typed, &tt) == C128_SUCCESS) a = pass == 0 ? c : b;
    }
  }
  { /* the workspace's corruption (after the others): a placement kept where the launch must refuse it */
    const c128_decode_args c = a;
    const void *pl = a.plans;
    const fz_ptrs t = {&a.state, &a.input, &a.ape, &a.output, &pl};
    if (fz_corrupt_workspace(&x, D, &a.entry, &a.state_layout, a.output_index, &t,
                             (uint64_t)B * 2 * D * fz_es(I->in))) {
      const m_args mw = FZ_DECODE_M_ARGS(a);
      const m_tensors_of tw = FZ_DECODE_TENSORS(a);
      if (m_launch_status(&mw, I, typed, &tw) == C128_SUCCESS) a = c;
    }
  }
  const m_args ma = FZ_DECODE_M_ARGS(a);
  const m_tensors_of mt = FZ_DECODE_TENSORS(a);
  const c128_status want_args = m_launch_status(&ma, I, typed, &mt);
  const int accepted = want_args == C128_SUCCESS;
  fz_add_context(" -> model %s", c128_status_string(want_args));
  if (a.batch != B && m_validate(&ma) == C128_SUCCESS) { /* a batch past the plans that the arguments allow */
    fz_add_context(" (batch %lld past the arrays: not run)", (long long)a.batch);
    free(plans), free(input), free(ape), free(run.st.kv), free(run.output), fz_bufs_free(&before), fz_free_ext(&x);
    return;
  }

  /* The model of the launch that runs. A block takes G consecutive requests (one split, or with
     whole windows every split: `items` a request) and persists their rows in step 0, before the
     barrier that publishes its windows, so a window of the block reads its block's writes after
     a barrier: a write races with a read only when the two requests are in different blocks, and
     two writes of one row race unless one thread does both (warp w persists items w and w + 16
     of its block: requests i and i + 16 of one split, or i and i + 16 / items of whole windows). */
  const m_kern K = m_kern_of(&ma);
  int items = 1;
  const int64_t G = accepted && B > 0 ? fz_jobs_per_block(fz_host_group(&a), D, K.entry, &items) : 1;
  m_decode *md = (m_decode *)fz_alloc((size_t)B * sizeof *md + 1);
  fz_wr *wr = (fz_wr *)fz_alloc((size_t)B * sizeof *wr + 1);
  int64_t *wr_plan = (int64_t *)fz_alloc((size_t)B * sizeof(int64_t) + 1);
  int64_t *outs = (int64_t *)fz_alloc((size_t)B * sizeof(int64_t) + 1);
  int *window_written = (int *)fz_alloc((size_t)B * sizeof(int) + 1);
  int nwr = 0, conflict = 0, any_written = 0, dup = 0;
  fz_options opt = fz_make_options(flags);
  const int64_t T = accepted ? K.targets : 0;
  int64_t *winner = (int64_t *)fz_alloc((size_t)(T > 0 ? T : 1) * sizeof(int64_t));
  for (int64_t t = 0; t < T; ++t) winner[t] = -1;
  if (accepted) {
    for (int64_t b = 0; b < B; ++b) {
      md[b] = m_decode_plan(&K, b, B, plans[b]);
      window_written[b] = 0;
      outs[b] = md[b].reason == M_RUN && md[b].boundary ? md[b].out : -1;
      if (md[b].reason != M_RUN || md[b].wkv < 0) continue;
      for (int j = 0; j < nwr; ++j) {
        const int64_t a_ = wr_plan[j];
        const int same_row = wr[j].kv == md[b].wkv || (split && wr[j].sc == md[b].wsc);
        conflict |= same_row && (a_ / G != b / G || ((a_ % G - b % G) * items) % 16 != 0);
      }
      wr[nwr].src = b, wr[nwr].kv = md[b].wkv, wr[nwr].sc = split ? md[b].wsc : md[b].wkv, wr[nwr].slot = md[b].slot;
      wr_plan[nwr++] = b;
    }
    for (int64_t b = 0; b < B; ++b) { /* a window whose rows a plan of the launch writes */
      if (md[b].reason != M_RUN || !md[b].boundary) continue;
      for (int j = 0; j < 127; ++j) {
        const int64_t rk = m_window_row(&K, md[b].row0, j, 0), rs = split ? m_window_row(&K, md[b].row0, j, 1) : -2;
        for (int w = 0; w < nwr; ++w) {
          if (wr[w].kv != rk && (!split || wr[w].sc != rs)) continue;
          window_written[b] = any_written = 1;
          conflict |= wr_plan[w] / G != b / G;
        }
      }
    }
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < b && outs[b] >= 0; ++j) conflict |= outs[j] == outs[b] && j / G != b / G;
    fz_winners(outs, B, G, opt.o.reverse_blocks, winner, T, &dup);
  }
  const c128_status want = !accepted                                ? want_args
                           : opt.o.check_races && B > 0 && conflict ? C128_ERROR_RACE_DETECTED
                                                                    : C128_SUCCESS;

  fz_add_context(", want %s", c128_status_string(want));
  const c128_status st = typed ? I->decode_host(&a, opt.ptr) : c128_decode_host(&a, opt.ptr);
  FZ_CHECK(2, st == want, "status %s, the model %s (conflict %d, race checker %d; %s)", c128_status_string(st),
           c128_status_string(want), conflict, opt.o.check_races, opt.msg && opt.msg[0] ? opt.msg : "no message");
  fz_check_message(&opt, st);
  {
    c128_plan_report rep0 = {0, C128_PLAN_DECODE, NULL, 0};
    fz_check_equals_launch(c128_check_decode_plans(&a, &rep0), st,
                           fz_typed_mismatch(typed, I, a.head_dim, a.state_dtype, a.input_dtype, a.output_dtype));
  }

  fz_check_workspace(&x, "decode");
  if (!accepted) {
    FZ_CHECK(2, fz_bufs_equal(&run, &before, plane_bytes, out_bytes, cache_bytes),
             "a call refused with %s changed the state, the output or the cache", c128_status_string(st));
  } else {
    fz_check_planes(I, &run.st, &before.st, rows, input, ape, K.S.biased, wr, nwr, "decode");
    if (!K.entry) {
      for (int64_t row = 0; row < O; ++row) {
        const int64_t w = row < T ? winner[row] : -1;
        const size_t rb = (size_t)D * fz_es(I->out);
        if (w < 0) {
          FZ_CHECK(2, memcmp((char *)run.output + row * rb, (char *)before.output + row * rb, rb) == 0,
                   "output row %lld changed, but no runnable boundary step goes there", (long long)row);
          continue;
        }
        /* rows 0..126 from the state before the launch, row 127 the input row itself */
        const float *ape_w = fz_window_rows(I, &K, &before.st, md[w].row0, 127, input, w - 127, ape);
        char what[64];
        snprintf(what, sizeof what, "decode plan %lld", (long long)w);
        fz_check_output(I, run.output, row, ape_w, !window_written[w], style == 2, what);
      }
    } else {
      FZ_CHECK(2, memcmp(run.output, before.output, out_bytes) == 0, "a launch of cache entries changed the output");
      fz_bufs comp = fz_bufs_clone(&before, plane_bytes, 0, 0);
      free(comp.output);
      comp.output = fz_alloc((size_t)B * D * fz_es(I->out) + 1);
      c128_decode_args b = a;
      b.state = comp.st.kv, b.state_layout.score_plane = comp.st.sc;
      b.output = comp.output, b.output_rows = B, b.output_index = NULL;
      memset(&b.entry, 0, sizeof b.entry);
      float *no_ape = fz_twin_ape(&b.ape, D);
      c128_host_options o2 = {0, opt.o.reverse_blocks, NULL, 0, 0};
      const c128_status st2 = I->decode_host(&b, &o2);
      free(no_ape);
      FZ_CHECK(2, st2 == C128_SUCCESS, "the same launch with pooled rows: %s", c128_status_string(st2));
      float *ys = fz_pooled_rows(I, comp.output, B);
      int64_t *pos = (int64_t *)fz_alloc((size_t)B * sizeof(int64_t) + 1);
      for (int64_t k = 0; k < B; ++k) pos[k] = (int64_t)plans[k].seq_len - 128;
      fz_check_cache(I, &a.entry, run.cache, before.cache, x.cache_bytes, winner, T, ys, pos, window_written, "decode");
      free(ys), free(pos), fz_bufs_free(&comp);
    }
  }

  if (accepted && B > 0 && !conflict && !any_written && !dup && group2 != fz_host_group(&a)) {
    /* Results do not depend on how requests are grouped into blocks, nor on block order. */
    fz_bufs two = fz_bufs_clone(&before, plane_bytes, out_bytes, cache_bytes);
    c128_decode_args a2 = a;
    a2.state = two.st.kv, a2.state_layout.score_plane = two.st.sc, a2.output = two.output;
    if (K.entry) a2.entry.cache = two.cache; /* the same workspace: zero again */
    fz_set_group(&a2, group2);
    c128_host_options o2 = {opt.o.check_races, !opt.o.reverse_blocks, NULL, 0, 0};
    const c128_status st2 = I->decode_host(&a2, &o2);
    FZ_CHECK(2, st2 == C128_SUCCESS, "requests_per_block %d: %s", group2, c128_status_string(st2));
    fz_check_workspace(&x, "requests_per_block (second launch)");
    FZ_CHECK(2, fz_bufs_equal(&two, &run, plane_bytes, out_bytes, cache_bytes),
             "requests_per_block %d (blocks %s) changes the result of requests_per_block %d (%lld per block)", group2,
             o2.reverse_blocks ? "reversed" : "forward", group, (long long)G);
    fz_bufs_free(&two);
  }

  const m_args mclean = FZ_DECODE_M_ARGS(clean);
  const c128_status want_clean = m_validate(&mclean);
  if (want_clean == C128_SUCCESS) {
    const m_kern Kc = m_kern_of(&mclean);
    for (int64_t b = 0; b < B; ++b) {
      const m_decode m = m_decode_plan(&Kc, b, B, plans[b]);
      const fz_lib_decode job = fz_lib_decode_reason(&clean, b);
      const int cls = fz_reason_class(job.reason);
      FZ_CHECK(2, cls == m.reason, "decode plan %lld: library reason %d (%s), the model says %s", (long long)b,
               job.reason, fz_lib_reason_text(job.reason), m.reason == M_RUN ? "run" : "skip");
      if (cls != M_RUN) continue;
      FZ_CHECK(2, job.write_kv == m.wkv && (m.wkv < 0 || job.write_score == m.wsc) && job.boundary == m.boundary,
               "decode plan %lld: library write rows %lld/%lld, the model's %lld/%lld", (long long)b,
               (long long)job.write_kv, (long long)job.write_score, (long long)m.wkv, (long long)m.wsc);
      /* the window's logical row in the kernel of any layout: physical through the shared layout (mode 1) */
      const int64_t row0 = job.layout && !Kc.S.layout ? m_row(&Kc.S, job.read_row0, 0, NULL) : job.read_row0;
      if (job.boundary)
        FZ_CHECK(2,
                 row0 == m.row0 && job.out_row == m.out && job.buffer_len == 127 &&
                     (!Kc.entry || job.position == (int64_t)plans[b].seq_len - 128),
                 "decode plan %lld: library window (row %lld, out %lld) differs from the model's (%lld, %lld)",
                 (long long)b, (long long)row0, (long long)job.out_row, (long long)m.row0, (long long)m.out);
    }
  }

  {
    char *msg = msg_size ? (char *)fz_alloc(msg_size) : NULL;
    c128_plan_report rep = {12345, C128_PLAN_WRITE, msg, msg_size};
    const c128_status cst = c128_check_decode_plans(&clean, &rep);
    if (want_clean != C128_SUCCESS) {
      FZ_CHECK(5, cst == want_clean && rep.index == -1, "checker: %s (index %lld), the launch's validation gives %s",
               c128_status_string(cst), (long long)rep.index, c128_status_string(want_clean));
    } else {
      int *off = (int *)fz_alloc((size_t)B * sizeof(int) + 1);
      m_check_decode(&mclean, plans, B, off);
      fz_check_report(cst, &rep, msg, msg_size, off, B, NULL, 0, C128_PLAN_DECODE, C128_PLAN_DECODE);
      free(off);
    }
    free(msg);
  }

  free(md), free(wr), free(wr_plan), free(outs), free(window_written), free(winner);
  free(run.st.kv), free(run.output), fz_bufs_free(&before);
  free(input), free(ape), free(plans);
  fz_free_ext(&x);
}
