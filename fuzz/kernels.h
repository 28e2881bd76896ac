/* Modes 0 and 1: arbitrary plan bytes, counts and sizes through the host runner (decode, and
   prefill = compress + write). Part of fuzz_c128.cu.

   Properties (numbers as in fuzz/README.md):
   1  no crash, no out-of-bounds access, no undefined behaviour (the sanitizers);
   2  what changed is what runnable plans allow: every changed state row is the write row of a
      plan whose reason is RUN (model of SPEC 6.5 and the library's own reason code, which must
      agree), each element equal to the input row of one such plan converted to the state
      dtype; every changed output row is the output row of a RUN plan, and every RUN plan's
      output row was written, matching the fp64 oracle over the rows the plan names (unless
      another plan of the launch writes those rows); with the race checker on, a race is
      reported exactly when two runnable plans conflict; a rejected call changes nothing;
   5  the plan checker agrees: SUCCESS exactly when no plan is offending, else it names an
      offending plan (the first that a kernel would skip, if any). */

static double fz_ref[FZ_MAX_D], fz_scale[FZ_MAX_D];
static float fz_rows[128][2 * FZ_MAX_D], fz_abs_rows[128][2 * FZ_MAX_D];
static const float *fz_row_ptr[128], *fz_abs_row_ptr[128];

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

/* The header's aliasing rule over the extents a launch's sizes give: the tensors it writes
   (state, output) overlap nothing else of the call. `out_rows`: the output rows it writes (decode:
   batch, prefill: num_compress); `in_rows`: the input rows it reads. */
static int fz_tensors_alias(const fz_instance *I, const void *state, int64_t pages, const void *input, int64_t in_rows,
                            const float *ape, const void *output, int64_t out_rows, const void *p1, uint64_t p1_bytes,
                            const void *p2, uint64_t p2_bytes) {
  const int need_output = out_rows > 0; /* the launch checks ape and output only when it writes outputs */
  const uint64_t sb = (uint64_t)pages * 128 * 2 * I->head_dim * fz_es(I->buf);
  const uint64_t ob = need_output ? (uint64_t)out_rows * I->head_dim * fz_es(I->out) : 0;
  const uint64_t ib = (uint64_t)in_rows * 2 * I->head_dim * fz_es(I->in),
                 ab = need_output ? 128u * I->head_dim * 4u : 0;
  return fz_overlaps(state, sb, input, ib) || fz_overlaps(state, sb, ape, ab) || fz_overlaps(state, sb, output, ob) ||
         fz_overlaps(state, sb, p1, p1_bytes) || fz_overlaps(state, sb, p2, p2_bytes) ||
         fz_overlaps(output, ob, input, ib) || fz_overlaps(output, ob, ape, ab) ||
         fz_overlaps(output, ob, p1, p1_bytes) || fz_overlaps(output, ob, p2, p2_bytes);
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

/* The statuses the validation may give for these arguments: `always` ones regardless of the
   work, `work` ones only when there is work. A rejected call must change nothing. */
typedef struct fz_expect {
  uint32_t always, work;
  int has_work;
} fz_expect;
#define FZ_BIT(st) (1u << (int)(st))
static uint32_t fz_bit_of(c128_status st) { return (unsigned)st < 32u ? 1u << (unsigned)st : 0u; }

/* The compiled instance named by (head_dim, dtypes), or -1: the generic launch's lookup. */
static int fz_find_instance(int32_t D, int32_t sd, int32_t id, int32_t od) {
  for (int i = 0; i < FZ_NUM_INSTANCES; ++i)
    if (fz_instances[i].head_dim == D && (int32_t)fz_instances[i].buf == sd && (int32_t)fz_instances[i].in == id &&
        (int32_t)fz_instances[i].out == od)
      return i;
  return -1;
}

/* The arguments as the generic launch validates them, tensor pointers excepted, in its order
   (the header: "the checker accepts exactly what the generic launch accepts"). Written again on
   purpose: the fuzzer checks the library's validation against this model, not against itself. */
typedef struct m_args {
  int prefill;
  int32_t D, sd, id, od;
  int64_t pages, input_rows, output_rows, count1, count2; /* decode: count1 = batch */
  c128_shared_layout layout;
  int32_t group;
  const void *plans1, *plans2;
} m_args;
static c128_status m_validate(const m_args *a) {
  if (fz_find_instance(a->D, a->sd, a->id, a->od) < 0) return C128_ERROR_UNSUPPORTED_INSTANCE;
  if (a->pages < 0) return C128_ERROR_NEGATIVE_SIZE;
  if (a->pages > INT64_MAX / ((int64_t)128 * 2 * a->D * 4)) return C128_ERROR_STATE_TOO_LARGE;
  if (!fz_layout_valid(a->layout)) return C128_ERROR_INVALID_LAYOUT;
  if (!a->prefill) {
    if (a->count1 < 0 || a->output_rows < 0) return C128_ERROR_NEGATIVE_SIZE;
    if (a->count1 > INT32_MAX / (a->D / 64)) return C128_ERROR_TOO_MANY_PLANS;
    if (a->group < 0 || a->group > C128_MAX_DECODE_GROUP) return C128_ERROR_INVALID_GROUP;
    if (a->count1 == 0) return C128_SUCCESS;
    if (a->output_rows < a->count1) return C128_ERROR_OUTPUT_TOO_SMALL;
    if (!a->plans1) return C128_ERROR_NULL_POINTER;
    if (fz_misaligned(a->plans1, 16)) return C128_ERROR_MISALIGNED;
    return C128_SUCCESS;
  }
  if (a->input_rows < 0 || a->output_rows < 0 || a->count1 < 0 || a->count2 < 0) return C128_ERROR_NEGATIVE_SIZE;
  if (a->input_rows > C128_MAX_PREFILL_ROWS) return C128_ERROR_TOO_MANY_ROWS;
  if (a->count1 > C128_MAX_PREFILL_ROWS || a->count2 > C128_MAX_PREFILL_ROWS) return C128_ERROR_TOO_MANY_PLANS;
  if (a->group < 0 || a->group > C128_MAX_PREFILL_GROUP) return C128_ERROR_INVALID_GROUP;
  if (a->count1 == 0 && a->count2 == 0) return C128_SUCCESS;
  if (a->output_rows < a->count1) return C128_ERROR_OUTPUT_TOO_SMALL;
  if ((a->count1 && !a->plans1) || (a->count2 && !a->plans2)) return C128_ERROR_NULL_POINTER;
  if (fz_misaligned(a->plans1, 16) || fz_misaligned(a->plans2, 8)) return C128_ERROR_MISALIGNED;
  return C128_SUCCESS;
}
/* Does a call with these (valid) arguments have work, i.e. get past the no-work return? */
static int m_has_work(const m_args *a) { return a->prefill ? a->count1 > 0 || a->count2 > 0 : a->count1 > 0; }

static void fz_expect_common(fz_expect *e, const fz_instance *I, int typed, int32_t head_dim, c128_dtype sd,
                             c128_dtype id, c128_dtype od, int64_t state_pages, c128_shared_layout l) {
  if (head_dim != I->head_dim || sd != I->buf || id != I->in || od != I->out)
    e->always |= typed ? FZ_BIT(C128_ERROR_INSTANCE_MISMATCH) : FZ_BIT(C128_ERROR_UNSUPPORTED_INSTANCE);
  if (state_pages < 0) e->always |= FZ_BIT(C128_ERROR_NEGATIVE_SIZE);
  if (state_pages > INT64_MAX / ((int64_t)128 * 2 * I->head_dim * 4)) e->always |= FZ_BIT(C128_ERROR_STATE_TOO_LARGE);
  if (!fz_layout_valid(l)) e->always |= FZ_BIT(C128_ERROR_INVALID_LAYOUT);
}
static void fz_expect_pointers(fz_expect *e, const fz_instance *I, const void *state, const void *input,
                               const float *ape, const void *output, int need_output) {
  if (!state || !input || (need_output && (!ape || !output))) e->work |= FZ_BIT(C128_ERROR_NULL_POINTER);
  if (fz_misaligned(state, 2 * fz_es(I->buf)) || fz_misaligned(input, 2 * fz_es(I->in)) ||
      (need_output && (fz_misaligned(ape, 8) || fz_misaligned(output, fz_es(I->out)))))
    e->work |= FZ_BIT(C128_ERROR_MISALIGNED);
}
/* Checks a status against the expectation; 1 when the call was rejected. */
static int fz_check_status(const fz_expect *e, c128_status st, int race_expected, const char *race_msg) {
  const uint32_t bit = fz_bit_of(st);
  if (e->always) {
    FZ_CHECK(2, bit & (e->always | (e->has_work ? e->work : 0)),
             "status %s; expected one of the argument errors 0x%x (work errors 0x%x)", c128_status_string(st),
             e->always, e->work);
    return 1;
  }
  if (e->has_work && e->work) {
    FZ_CHECK(2, bit & e->work, "status %s; expected one of the argument errors 0x%x", c128_status_string(st), e->work);
    return 1;
  }
  if (!e->has_work) {
    FZ_CHECK(2, st == C128_SUCCESS || (bit & e->work), "status %s for a call with nothing to do",
             c128_status_string(st));
    return st != C128_SUCCESS;
  }
  const c128_status want = race_expected ? C128_ERROR_RACE_DETECTED : C128_SUCCESS;
  FZ_CHECK(2, st == want, "status %s, expected %s (%s); race checker: %s", c128_status_string(st),
           c128_status_string(want),
           race_expected ? "two runnable plans conflict, the race checker is on"
                         : "no two runnable plans conflict, or the race checker is off",
           race_msg && race_msg[0] ? race_msg : "(no message buffer)");
  return 0;
}

/* Checker = launch (property 5): the checker over the call's own arguments refuses them with
   the launch's status; when it accepts them, the launch failed, if at all, on a tensor pointer
   (NULL, misaligned, aliased: the checker does not look at tensors) or found a race. A typed
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
                 st == C128_ERROR_MISALIGNED || st == C128_ERROR_ALIASED,
             "checker %s (accepts the arguments), launch %s", c128_status_string(cst), c128_status_string(st));
  }
}
static int fz_typed_mismatch(int typed, const fz_instance *I, int32_t D, c128_dtype sd, c128_dtype id, c128_dtype od) {
  return typed && (D != I->head_dim || sd != I->buf || id != I->in || od != I->out);
}

/* >>checks after a run ------------------------------------------------------------------------ */
typedef struct fz_write_pair {
  int64_t dst, src;
} fz_write_pair;

/* Every changed state row has a runnable writer; every written row is, element by element, the
   converted input row of one of its writers. */
static void fz_check_state(const fz_instance *I, const void *state, const void *before, int64_t pages,
                           const void *input, const fz_write_pair *w, int nw, const char *what) {
  const int D = I->head_dim;
  const size_t row_bytes = (size_t)2 * D * fz_es(I->buf);
  for (int64_t row = 0; row < pages * 128; ++row) {
    const int changed =
        memcmp((const char *)state + row * row_bytes, (const char *)before + row * row_bytes, row_bytes);
    int writers = 0;
    for (int k = 0; k < nw; ++k) writers += w[k].dst == row;
    FZ_CHECK(2, !changed || writers, "state row %lld changed, but no runnable %s plan writes it", (long long)row, what);
    if (!writers) continue;
    for (int e = 0; e < 2 * D; ++e) {
      int ok = 0;
      for (int k = 0; k < nw && !ok; ++k)
        ok = w[k].dst == row && fz_state_elem_ok(state, row * 2 * D + e, I->buf, input, w[k].src * 2 * D + e, I->in);
      FZ_CHECK(2, ok, "state row %lld element %d (%g) is not the converted input of any runnable %s plan writing it",
               (long long)row, e, (double)fz_get(state, row * 2 * D + e, I->buf), what);
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
static void fz_widen_row(int j, const void *base, int64_t row, int D, c128_dtype dt) {
  for (int c = 0; c < 2 * D; ++c) fz_rows[j][c] = fz_get(base, row * 2 * D + c, dt);
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

/* Duplicate slots: off = 2 for every plan but the first of a slot (logical write_loc). */
static void fz_mark_duplicates(const int64_t *slot, const int *run, int64_t n, int *off) {
  for (int64_t k = 0; k < n; ++k)
    for (int64_t j = 0; j < k && run[k]; ++j)
      if (run[j] && slot[j] == slot[k] && !off[k]) off[k] = 2;
}

/* Decode plans whose new row and another plan's window meet: off = 2 for the later of the two
   (as for a second write of one slot): running plan k writes a row of an earlier running plan
   j's window (rows 0..126 of its read page), or j writes a row of k's window. Physical rows of
   the slot, owned by this rank or not: its owner writes it in the same batch. */
static int64_t fz_decode_write_row(const fz_layout *L, c128_decode_plan p) {
  return m_phys(L, p.write_loc / 128) * 128 + p.write_loc % 128;
}
static int fz_window_holds(const fz_layout *L, c128_decode_plan p, int64_t row) {
  if (p.write_loc % 128 != 127) return 0;
  const int64_t at = row - m_phys(L, p.read_page_1) * 128;
  return at >= 0 && at < 127;
}
static void fz_mark_window_conflicts(const fz_layout *L, const c128_decode_plan *plans, const int *run, int64_t n,
                                     int *off) {
  int64_t *live = (int64_t *)fz_alloc((size_t)n * sizeof(int64_t) + 1), m = 0;
  for (int64_t k = 0; k < n; ++k) {
    if (!run[k]) continue;
    for (int64_t i = 0; i < m && !off[k]; ++i) {
      const c128_decode_plan a = plans[live[i]], b = plans[k];
      if (fz_window_holds(L, a, fz_decode_write_row(L, b)) || fz_window_holds(L, b, fz_decode_write_row(L, a)))
        off[k] = 2;
    }
    live[m++] = k;
  }
  free(live);
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
  const int wgroup_valid = wgroup >= 0 && wgroup <= FZ_MAX_PREFILL_GROUP;
  fz_set_context("mode 1 (prefill kernels) %s pages %lld input_rows %lld compress %lld write %lld output_rows %lld "
                 "layout {%d, %d, %d} corruption %d flags 0x%02x style %d windows_per_block %d",
                 I->name, (long long)P, (long long)N, (long long)NC, (long long)NW, (long long)O, lay.rank, lay.size,
                 lay.pages_per_rank, corrupt, flags, style, wgroup);

  const size_t state_bytes = (size_t)P * 128 * 2 * D * fz_es(I->buf);
  const size_t out_bytes = (size_t)O * D * fz_es(I->out);
  void *state = fz_alloc(state_bytes);
  void *input = fz_alloc((size_t)N * 2 * D * fz_es(I->in));
  void *output = fz_alloc(out_bytes);
  float *ape = fz_make_ape(&g, D);
  fz_fill_rows(&g, state, P * 128, D, I->buf, style);
  fz_fill_rows(&g, input, N, D, I->in, style);
  memset(output, 0x5A, out_bytes);
  void *state0 = fz_clone(state, state_bytes), *output0 = fz_clone(output, out_bytes);

  c128_prefill_args a;
  memset(&a, 0, sizeof a);
  a.head_dim = D, a.state_dtype = I->buf, a.input_dtype = I->in, a.output_dtype = I->out;
  a.state = state, a.state_pages = P, a.input = input, a.input_rows = N, a.ape = ape;
  a.output = output, a.output_rows = O;
  a.compress_plans = cp, a.num_compress = NC, a.write_plans = wp, a.num_write = NW;
  a.layout = lay;
  fz_set_prefill_group(&a, wgroup);
  const c128_prefill_args clean = a;
  const int typed = (flags >> 5) & 1;
  fz_corrupt_prefill(&a, corrupt);
  int aliased = 0;
  if (corrupt >= 19) { /* only where the extents really overlap: else the call would run on them */
    c128_prefill_args b = a;
    const void *plans = b.compress_plans;
    fz_alias(corrupt, &b.state, &b.input, &b.ape, &b.output, &plans);
    b.compress_plans = (const c128_compress_plan *)plans;
    aliased =
        fz_tensors_alias(I, b.state, b.state_pages, b.input, b.input_rows, b.ape, b.output, b.num_compress,
                         b.compress_plans, (uint64_t)b.num_compress * 16, b.write_plans, (uint64_t)b.num_write * 8);
    if (aliased) a = b;
    fz_add_context(" aliased %d", aliased);
  }

  /* The model: which plans run, what they write, and whether two of them conflict. */
  const int valid_layout = fz_layout_valid(lay);
  const fz_layout L = fz_layout_of(P, lay);
  m_compress *mc = (m_compress *)fz_alloc((size_t)NC * sizeof *mc + 1);
  m_write *mw = (m_write *)fz_alloc((size_t)NW * sizeof *mw + 1);
  fz_write_pair *pairs = (fz_write_pair *)fz_alloc((size_t)NW * sizeof *pairs + 1);
  int npairs = 0, conflict = 0;
  for (int64_t k = 0; valid_layout && k < NC; ++k) mc[k] = m_compress_plan(&L, k, N, O, cp[k]);
  for (int64_t k = 0; valid_layout && k < NW; ++k) {
    mw[k] = m_write_plan(&L, N, wp[k]);
    if (mw[k].reason != M_RUN || mw[k].dst_row < 0) continue;
    for (int j = 0; j < npairs; ++j) conflict |= pairs[j].dst == mw[k].dst_row;
    pairs[npairs].dst = mw[k].dst_row, pairs[npairs].src = mw[k].src_row, ++npairs;
  }

  fz_expect e = {0, 0, a.num_compress > 0 || a.num_write > 0};
  fz_expect_common(&e, I, typed, a.head_dim, a.state_dtype, a.input_dtype, a.output_dtype, a.state_pages, a.layout);
  if (a.input_rows < 0 || a.output_rows < 0 || a.num_compress < 0 || a.num_write < 0)
    e.always |= FZ_BIT(C128_ERROR_NEGATIVE_SIZE);
  if (a.input_rows > 65536) e.always |= FZ_BIT(C128_ERROR_TOO_MANY_ROWS);
  if (a.num_compress > 65536 || a.num_write > 65536) e.always |= FZ_BIT(C128_ERROR_TOO_MANY_PLANS);
  if (!wgroup_valid) e.always |= FZ_BIT(C128_ERROR_INVALID_GROUP);
  if (a.output_rows < a.num_compress) e.work |= FZ_BIT(C128_ERROR_OUTPUT_TOO_SMALL);
  if ((a.num_compress > 0 && !a.compress_plans) || (a.num_write > 0 && !a.write_plans))
    e.work |= FZ_BIT(C128_ERROR_NULL_POINTER);
  if (fz_misaligned(a.compress_plans, 16) || fz_misaligned(a.write_plans, 8)) e.work |= FZ_BIT(C128_ERROR_MISALIGNED);
  fz_expect_pointers(&e, I, a.state, a.input, a.ape, a.output, a.num_compress > 0); /* outputs it writes */
  if (aliased) e.work |= FZ_BIT(C128_ERROR_ALIASED); /* a tensor error: only where there is work */

  fz_options opt = fz_make_options(flags);
  const c128_status st = typed ? I->prefill_host(&a, opt.ptr) : c128_prefill_host(&a, opt.ptr);
  const int rejected = fz_check_status(&e, st, opt.o.check_races && conflict, opt.msg);
  fz_check_message(&opt, st);
  {
    c128_plan_report rep0 = {0, C128_PLAN_DECODE, NULL, 0};
    fz_check_equals_launch(c128_check_prefill_plans(&a, &rep0), st,
                           fz_typed_mismatch(typed, I, a.head_dim, a.state_dtype, a.input_dtype, a.output_dtype));
  }

  if (rejected) {
    FZ_CHECK(2, memcmp(state, state0, state_bytes) == 0 && memcmp(output, output0, out_bytes) == 0,
             "a call rejected with %s changed the state or the output", c128_status_string(st));
  } else {
    fz_check_state(I, state, state0, P, input, pairs, npairs, "write");
    for (int64_t row = 0; row < O; ++row) {
      const int runs = row < NC && mc[row].reason == M_RUN;
      if (!runs) {
        FZ_CHECK(2,
                 memcmp((char *)output + row * D * fz_es(I->out), (char *)output0 + row * D * fz_es(I->out),
                        D * fz_es(I->out)) == 0,
                 "output row %lld changed, but compress plan %lld does not run", (long long)row, (long long)row);
        continue;
      }
      /* The compress launch runs before the write launch: windows read the state as it was. */
      for (int j = 0; j < 128; ++j) {
        if (j < mc[row].buffer_len) fz_widen_row(j, state0, mc[row].state_row0 + j, D, I->buf);
        else fz_widen_row(j, input, mc[row].input_row0 + j, D, I->in);
      }
      char what[64];
      snprintf(what, sizeof what, "compress plan %lld", (long long)row);
      fz_check_output(I, output, row, ape, 1, style == 2, what);
    }
  }

  const int32_t wgroup2 = 1 + rd_below(r, FZ_MAX_PREFILL_GROUP);
  if (!rejected && !conflict && wgroup2 != wgroup) {
    /* Results do not depend on how compress plans are grouped into blocks. */
    void *state2 = fz_clone(state0, state_bytes), *output2 = fz_clone(output0, out_bytes);
    c128_prefill_args a2 = clean;
    a2.state = state2, a2.output = output2;
    fz_set_prefill_group(&a2, wgroup2);
    c128_host_options o2 = {opt.o.check_races, !opt.o.reverse_blocks, NULL, 0};
    const c128_status st2 = I->prefill_host(&a2, &o2);
    FZ_CHECK(2, st2 == C128_SUCCESS, "windows_per_block %d: %s", wgroup2, c128_status_string(st2));
    FZ_CHECK(2, memcmp(state2, state, state_bytes) == 0 && memcmp(output2, output, out_bytes) == 0,
             "windows_per_block %d changes the result of windows_per_block %d", wgroup2, wgroup);
    free(state2), free(output2);
  }

  if (valid_layout) { /* the library's own reason codes agree with the model */
    for (int64_t k = 0; k < NC; ++k) {
      const fz_lib_compress w = fz_lib_compress_reason(&clean, k);
      const int cls = fz_reason_class(w.reason);
      FZ_CHECK(2, cls == mc[k].reason, "compress plan %lld: library reason %d (%s), SPEC 6.5 says %s", (long long)k,
               w.reason, fz_lib_reason_text(w.reason), mc[k].reason == M_RUN ? "run" : "skip");
      if (cls == M_RUN)
        FZ_CHECK(2,
                 w.out_row == k && w.buffer_len == mc[k].buffer_len && w.input_row0 == mc[k].input_row0 &&
                     (w.buffer_len == 0 || w.state_row0 == mc[k].state_row0),
                 "compress plan %lld: library window differs from SPEC 6.5", (long long)k);
    }
    for (int64_t k = 0; k < NW; ++k) {
      int64_t src = -1, dst = -1;
      const int reason = fz_lib_write_reason(&clean, k, &src, &dst);
      const int cls = fz_reason_class(reason);
      FZ_CHECK(2, cls == mw[k].reason, "write plan %lld: library reason %d (%s), SPEC 6.5 says %s", (long long)k,
               reason, fz_lib_reason_text(reason), mw[k].reason == M_RUN ? "run" : "skip");
      if (cls == M_RUN)
        FZ_CHECK(2, src == mw[k].src_row && dst == mw[k].dst_row,
                 "write plan %lld: library rows (%lld -> %lld), SPEC 6.5 (%lld -> %lld)", (long long)k, (long long)src,
                 (long long)dst, (long long)mw[k].src_row, (long long)mw[k].dst_row);
    }
  }

  { /* the plan checker over the same plans (tensor pointers are not its business) */
    const size_t msg_size = (size_t)rd_below(r, 3) * 40;
    char *msg = msg_size ? (char *)fz_alloc(msg_size) : NULL;
    c128_plan_report rep = {12345, C128_PLAN_DECODE, msg, msg_size};
    const c128_status cst = c128_check_prefill_plans(&clean, &rep);
    const m_args ma = {1, D, (int32_t)I->buf, (int32_t)I->in, (int32_t)I->out, P, N, O, NC, NW, lay, wgroup, cp, wp};
    const c128_status want = m_validate(&ma);
    if (want != C128_SUCCESS) {
      FZ_CHECK(5, cst == want && rep.index == -1, "checker: %s (index %lld), the launch's validation gives %s",
               c128_status_string(cst), (long long)rep.index, c128_status_string(want));
    } else {
      int *off_c = (int *)fz_alloc((size_t)NC * sizeof(int) + 1),
          *off_w = (int *)fz_alloc((size_t)NW * sizeof(int) + 1);
      int *run = (int *)fz_alloc((size_t)NW * sizeof(int) + 1);
      int64_t *slot = (int64_t *)fz_alloc((size_t)NW * sizeof(int64_t) + 1);
      for (int64_t k = 0; k < NC; ++k)
        off_c[k] = mc[k].reason == M_SKIP ? 1 : mc[k].reason == M_RUN && cp[k].seq_len % 128 != 0 ? 2 : 0;
      for (int64_t k = 0; k < NW; ++k)
        off_w[k] = mw[k].reason == M_SKIP, run[k] = mw[k].reason == M_RUN, slot[k] = wp[k].write_loc;
      fz_mark_duplicates(slot, run, NW, off_w);
      fz_check_report(cst, &rep, msg, msg_size, off_c, NC, off_w, NW, C128_PLAN_COMPRESS, C128_PLAN_WRITE);
      free(off_c), free(off_w), free(run), free(slot);
    }
    free(msg);
  }

  free(mc), free(mw), free(pairs);
  free(state), free(state0), free(input), free(output), free(output0), free(ape), free(cp), free(wp);
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
  fz_set_context("mode 0 (decode kernel) %s pages %lld batch %lld output_rows %lld layout {%d, %d, %d} corruption "
                 "%d flags 0x%02x style %d requests_per_block %d",
                 I->name, (long long)P, (long long)B, (long long)O, lay.rank, lay.size, lay.pages_per_rank, corrupt,
                 flags, style, group);

  const size_t state_bytes = (size_t)P * 128 * 2 * D * fz_es(I->buf);
  const size_t out_bytes = (size_t)O * D * fz_es(I->out);
  void *state = fz_alloc(state_bytes);
  void *input = fz_alloc((size_t)B * 2 * D * fz_es(I->in));
  void *output = fz_alloc(out_bytes);
  float *ape = fz_make_ape(&g, D);
  fz_fill_rows(&g, state, P * 128, D, I->buf, style);
  fz_fill_rows(&g, input, B, D, I->in, style);
  memset(output, 0x5A, out_bytes);
  void *state0 = fz_clone(state, state_bytes), *output0 = fz_clone(output, out_bytes);

  c128_decode_args a;
  memset(&a, 0, sizeof a);
  a.head_dim = D, a.state_dtype = I->buf, a.input_dtype = I->in, a.output_dtype = I->out;
  a.state = state, a.state_pages = P, a.input = input, a.ape = ape, a.output = output, a.output_rows = O;
  a.plans = plans, a.batch = B, a.layout = lay;
  const int group_valid = group >= 0 && group <= FZ_MAX_GROUP;
  fz_set_group(&a, group);
  const c128_decode_args clean = a;
  const int typed = (flags >> 5) & 1;
  fz_corrupt_decode(&a, corrupt);
  int aliased = 0;
  if (corrupt >= 19) {
    c128_decode_args b = a;
    const void *pl = b.plans;
    fz_alias(corrupt, &b.state, &b.input, &b.ape, &b.output, &pl);
    b.plans = (const c128_decode_plan *)pl;
    aliased = fz_tensors_alias(I, b.state, b.state_pages, b.input, b.batch, b.ape, b.output, b.batch, b.plans,
                               (uint64_t)b.batch * 16, NULL, 0);
    if (aliased) a = b;
    fz_add_context(" aliased %d", aliased);
  }
  const int64_t G = group_valid ? fz_host_group(&clean) : 1; /* requests per block */

  const int valid_layout = fz_layout_valid(lay);
  const fz_layout L = fz_layout_of(P, lay);
  m_decode *md = (m_decode *)fz_alloc((size_t)B * sizeof *md + 1);
  fz_write_pair *pairs = (fz_write_pair *)fz_alloc((size_t)B * sizeof *pairs + 1);
  int npairs = 0, conflict = 0;
  for (int64_t b = 0; valid_layout && b < B; ++b) {
    md[b] = m_decode_plan(&L, b, B, O, plans[b]);
    if (md[b].reason == M_RUN && md[b].write_row >= 0) {
      for (int j = 0; j < npairs; ++j) conflict |= pairs[j].dst == md[b].write_row;
      pairs[npairs].dst = md[b].write_row, pairs[npairs].src = b, ++npairs;
    }
  }
  /* A boundary window whose rows another plan of the launch writes: its value depends on the
     order. A block takes G consecutive requests (one split) and persists their rows before the
     barrier that publishes its list of windows, so every window of the block reads them after a
     barrier: the write races with the read only when the two requests are in different blocks. */
  int *window_written = (int *)fz_alloc((size_t)B * sizeof(int) + 1);
  int any_written = 0;
  for (int64_t b = 0; valid_layout && b < B; ++b) {
    window_written[b] = 0;
    if (md[b].reason != M_RUN || !md[b].boundary) continue;
    for (int j = 0; j < npairs; ++j) {
      const int64_t row = pairs[j].dst - md[b].read_row0, a_ = pairs[j].src;
      if (row < 0 || row >= 127) continue;
      window_written[b] = any_written = 1;
      conflict |= a_ / G != b / G;
    }
  }

  fz_expect e = {0, 0, a.batch > 0};
  fz_expect_common(&e, I, typed, a.head_dim, a.state_dtype, a.input_dtype, a.output_dtype, a.state_pages, a.layout);
  if (a.batch < 0 || a.output_rows < 0) e.always |= FZ_BIT(C128_ERROR_NEGATIVE_SIZE);
  if (a.batch > INT32_MAX / (D / 64)) e.always |= FZ_BIT(C128_ERROR_TOO_MANY_PLANS);
  if (!group_valid) e.always |= FZ_BIT(C128_ERROR_INVALID_GROUP);
  if (a.output_rows < a.batch) e.work |= FZ_BIT(C128_ERROR_OUTPUT_TOO_SMALL);
  if (!a.plans) e.work |= FZ_BIT(C128_ERROR_NULL_POINTER);
  if (fz_misaligned(a.plans, 16)) e.work |= FZ_BIT(C128_ERROR_MISALIGNED);
  fz_expect_pointers(&e, I, a.state, a.input, a.ape, a.output, 1);
  if (aliased) e.work |= FZ_BIT(C128_ERROR_ALIASED);
  if (a.batch != B) e.has_work = 1; /* a bigger batch than the buffers: must be refused */

  fz_options opt = fz_make_options(flags);
  const c128_status st = typed ? I->decode_host(&a, opt.ptr) : c128_decode_host(&a, opt.ptr);
  if (a.batch != B && !e.always && !e.work) fz_fail(2, "harness: corruption %d left no error to expect", corrupt);
  const int rejected = fz_check_status(&e, st, opt.o.check_races && conflict, opt.msg);
  fz_check_message(&opt, st);
  {
    c128_plan_report rep0 = {0, C128_PLAN_DECODE, NULL, 0};
    fz_check_equals_launch(c128_check_decode_plans(&a, &rep0), st,
                           fz_typed_mismatch(typed, I, a.head_dim, a.state_dtype, a.input_dtype, a.output_dtype));
  }

  if (rejected) {
    FZ_CHECK(2, memcmp(state, state0, state_bytes) == 0 && memcmp(output, output0, out_bytes) == 0,
             "a call rejected with %s changed the state or the output", c128_status_string(st));
  } else {
    fz_check_state(I, state, state0, P, input, pairs, npairs, "decode");
    for (int64_t row = 0; row < O; ++row) {
      const int writes = row < B && md[row].reason == M_RUN && md[row].boundary;
      if (!writes) {
        FZ_CHECK(2,
                 memcmp((char *)output + row * D * fz_es(I->out), (char *)output0 + row * D * fz_es(I->out),
                        D * fz_es(I->out)) == 0,
                 "output row %lld changed, but decode plan %lld is not a runnable boundary step", (long long)row,
                 (long long)row);
        continue;
      }
      for (int j = 0; j < 127; ++j) fz_widen_row(j, state0, md[row].read_row0 + j, D, I->buf);
      fz_widen_row(127, input, row, D, I->in);
      char what[64];
      snprintf(what, sizeof what, "decode plan %lld", (long long)row);
      fz_check_output(I, output, row, ape, !window_written[row], style == 2, what);
    }
  }

  const int32_t group2 = 1 + rd_below(r, FZ_MAX_GROUP);
  if (!rejected && !conflict && !any_written && group2 != G) {
    /* Results do not depend on how requests are grouped into blocks. */
    void *state2 = fz_clone(state0, state_bytes), *output2 = fz_clone(output0, out_bytes);
    c128_decode_args a2 = clean;
    a2.state = state2, a2.output = output2;
    fz_set_group(&a2, group2);
    c128_host_options o2 = {opt.o.check_races, !opt.o.reverse_blocks, NULL, 0};
    const c128_status st2 = I->decode_host(&a2, &o2);
    FZ_CHECK(2, st2 == C128_SUCCESS, "requests_per_block %d: %s", group2, c128_status_string(st2));
    FZ_CHECK(2, memcmp(state2, state, state_bytes) == 0 && memcmp(output2, output, out_bytes) == 0,
             "requests_per_block %d (blocks %s) changes the result of requests_per_block %d (%lld per block)", group2,
             o2.reverse_blocks ? "reversed" : "forward", group, (long long)G);
    free(state2), free(output2);
  }

  if (valid_layout) {
    for (int64_t b = 0; b < B; ++b) {
      const fz_lib_decode job = fz_lib_decode_reason(&clean, b);
      const int cls = fz_reason_class(job.reason);
      FZ_CHECK(2, cls == md[b].reason, "decode plan %lld: library reason %d (%s), SPEC 6.5 says %s", (long long)b,
               job.reason, fz_lib_reason_text(job.reason), md[b].reason == M_RUN ? "run" : "skip");
      if (cls != M_RUN) continue;
      FZ_CHECK(2, job.write_row == md[b].write_row && job.boundary == md[b].boundary,
               "decode plan %lld: library write row %lld, SPEC 6.5 %lld", (long long)b, (long long)job.write_row,
               (long long)md[b].write_row);
      if (job.boundary)
        FZ_CHECK(2, job.read_row0 == md[b].read_row0 && job.out_row == b && job.buffer_len == 127,
                 "decode plan %lld: library window differs from SPEC 6.2", (long long)b);
    }
  }

  {
    const size_t msg_size = (size_t)rd_below(r, 3) * 40;
    char *msg = msg_size ? (char *)fz_alloc(msg_size) : NULL;
    c128_plan_report rep = {12345, C128_PLAN_WRITE, msg, msg_size};
    const c128_status cst = c128_check_decode_plans(&clean, &rep);
    const m_args ma = {0, D, (int32_t)I->buf, (int32_t)I->in, (int32_t)I->out, P, B, O, B, 0, lay, group, plans, NULL};
    const c128_status want = m_validate(&ma);
    if (want != C128_SUCCESS) {
      FZ_CHECK(5, cst == want && rep.index == -1, "checker: %s (index %lld), the launch's validation gives %s",
               c128_status_string(cst), (long long)rep.index, c128_status_string(want));
    } else {
      int *off = (int *)fz_alloc((size_t)B * sizeof(int) + 1), *run = (int *)fz_alloc((size_t)B * sizeof(int) + 1);
      int64_t *slot = (int64_t *)fz_alloc((size_t)B * sizeof(int64_t) + 1);
      for (int64_t b = 0; b < B; ++b) {
        off[b] = md[b].reason == M_SKIP;
        if (md[b].reason == M_RUN && md[b].boundary && plans[b].read_page_1 != plans[b].write_loc / 128) off[b] = 2;
        run[b] = md[b].reason == M_RUN, slot[b] = plans[b].write_loc;
      }
      fz_mark_duplicates(slot, run, B, off);
      fz_mark_window_conflicts(&L, plans, run, B, off);
      fz_check_report(cst, &rep, msg, msg_size, off, B, NULL, 0, C128_PLAN_DECODE, C128_PLAN_DECODE);
      free(off), free(run), free(slot);
    }
    free(msg);
  }

  free(md), free(pairs), free(window_written);
  free(state), free(state0), free(input), free(output), free(output0), free(ape), free(plans);
}
