/* Shared pieces of the fuzz target: the input reader, data generation, exactly sized buffers,
   the failure report, and SPEC 5 / 6.5 written out again (the model the properties compare
   against). Part of the one translation unit fuzz_c128.cu; not a header of its own. */

/* >>reader: the fuzz input as a stream of fields; past its end every field reads 0 ----------- */
typedef struct fz_reader {
  const uint8_t *p;
  size_t n, i;
} fz_reader;

static uint8_t rd_u8(fz_reader *r) { return r->i < r->n ? r->p[r->i++] : 0; }
static uint16_t rd_u16(fz_reader *r) {
  const uint16_t lo = rd_u8(r);
  return (uint16_t)(lo | (uint16_t)(rd_u8(r) << 8));
}
static uint32_t rd_u32(fz_reader *r) {
  const uint32_t lo = rd_u16(r);
  return lo | ((uint32_t)rd_u16(r) << 16);
}
static uint64_t rd_u64(fz_reader *r) {
  const uint64_t lo = rd_u32(r);
  return lo | ((uint64_t)rd_u32(r) << 32);
}
static int rd_below(fz_reader *r, int n) { return n <= 1 ? 0 : (int)(rd_u8(r) % (unsigned)n); } /* n <= 256 */
static int rd_below16(fz_reader *r, int n) { return n <= 1 ? 0 : (int)(rd_u16(r) % (unsigned)n); }
static void rd_bytes(fz_reader *r, void *dst, size_t n) {
  for (size_t k = 0; k < n; ++k) ((uint8_t *)dst)[k] = rd_u8(r);
}

/* >>rng: splitmix64, seeded from the input, for tensor data ---------------------------------- */
typedef struct fz_rng {
  uint64_t s;
} fz_rng;
static uint64_t rng_next(fz_rng *g) {
  uint64_t z = (g->s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double rng_unit(fz_rng *g) { return (double)(rng_next(g) >> 11) * 0x1.0p-53; }
static float rng_randn(fz_rng *g) {
  double u = rng_unit(g);
  while (u <= 0.0) u = rng_unit(g);
  const float v = (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * rng_unit(g)));
  return v != 0.0f ? v : 0.25f;
}

/* >>failure: print what broke and abort, so that libFuzzer keeps the input ------------------- */
static char fz_context[2048]; /* what the current input is doing, for the report */

static void fz_set_context(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(fz_context, sizeof fz_context, fmt, ap);
  va_end(ap);
}
__attribute__((format(printf, 1, 2))) static void fz_add_context(const char *fmt, ...) {
  const size_t n = strlen(fz_context);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(fz_context + n, sizeof fz_context - n, fmt, ap);
  va_end(ap);
}

__attribute__((noreturn, format(printf, 2, 3))) static void fz_fail(int property, const char *fmt, ...) {
  fprintf(stderr, "\n==c128-fuzz== PROPERTY %d VIOLATED\n==c128-fuzz== case: %s\n==c128-fuzz== ", property, fz_context);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
  fflush(stderr);
  abort();
}
#define FZ_CHECK(property, cond, ...)            \
  do {                                           \
    if (!(cond)) fz_fail(property, __VA_ARGS__); \
  } while (0)

/* >>buffers: exactly the bytes asked for, so that AddressSanitizer sees one past the end ----- */
static void *fz_alloc(size_t bytes) {
  void *p = NULL;
  if (posix_memalign(&p, 16, bytes) != 0 || !p) {
    fprintf(stderr, "c128-fuzz: out of memory (%zu bytes)\n", bytes);
    abort();
  }
  return p;
}
static void *fz_clone(const void *src, size_t bytes) {
  void *p = fz_alloc(bytes);
  if (bytes) memcpy(p, src, bytes);
  return p;
}

/* >>dtypes: the library's storage formats, written out again --------------------------------- */
static size_t fz_es(c128_dtype dt) { return c128_dtype_size(dt); }
static uint32_t fz_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float fz_float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
/* Round to nearest even; a NaN stays a NaN (its payload is not a property). */
static uint16_t fz_bf16(float f) {
  const uint32_t u = fz_bits(f);
  if (f != f) return (uint16_t)((u >> 16) | 0x40u);
  const uint32_t lsb = (u >> 16) & 1u;
  return (uint16_t)((u + 0x7FFFu + lsb) >> 16);
}
static float fz_round_to(c128_dtype dt, float f) { return dt == C128_BF16 ? fz_float((uint32_t)fz_bf16(f) << 16) : f; }
static float fz_get(const void *base, int64_t i, c128_dtype dt) {
  if (dt == C128_BF16) {
    uint16_t h;
    memcpy(&h, (const char *)base + 2 * i, 2);
    return fz_float((uint32_t)h << 16);
  }
  float f;
  memcpy(&f, (const char *)base + 4 * i, 4);
  return f;
}
static void fz_set(void *base, int64_t i, c128_dtype dt, float v) {
  if (dt == C128_BF16) {
    const uint16_t h = fz_bf16(v);
    memcpy((char *)base + 2 * i, &h, 2);
  } else {
    memcpy((char *)base + 4 * i, &v, 4);
  }
}
/* Element i of an input row as the state stores it: bits kept when the dtypes agree. */
static int fz_state_elem_ok(const void *state, int64_t si, c128_dtype buf, const void *input, int64_t ii,
                            c128_dtype in) {
  if (buf == in)
    return memcmp((const char *)state + si * fz_es(buf), (const char *)input + ii * fz_es(in), fz_es(in)) == 0;
  const float x = fz_get(input, ii, in), got = fz_get(state, si, buf);
  if (x != x) return got != got;
  return fz_bits(got) == fz_bits(fz_round_to(buf, x));
}

/* >>data: kv ~ N(0, 1), scores ~ N(0, scale^2); style 2 sprinkles -inf / +inf / NaN scores and
   NaN kv values (the library's non-finite policy), never an infinite kv. ---------------------- */
/* A NaN with a random sign and payload (quiet or signalling): bf16 rounding must keep it NaN. */
static float fz_nan(fz_rng *g) {
  const uint64_t x = rng_next(g);
  uint32_t mant = (uint32_t)(x & 0x7FFFFFu);
  if (x & (1ull << 40)) mant |= 0x7FFF00u; /* payloads that round up across the exponent */
  return fz_float(0x7F800000u | (mant ? mant : 1u) | (x & (1ull << 41) ? 0x80000000u : 0u));
}
static float fz_value(fz_rng *g, int is_score, int style) {
  if (style == 2 && rng_next(g) % 23 == 0) {
    if (!is_score) return fz_nan(g);
    const int k = (int)(rng_next(g) % 4);
    return k == 0 ? fz_nan(g) : k == 1 ? INFINITY : -INFINITY;
  }
  const float x = rng_randn(g);
  return is_score && style == 1 ? 60.0f * x : x;
}
static void fz_fill_rows(fz_rng *g, void *base, int64_t rows, int D, c128_dtype dt, int style) {
  for (int64_t r = 0; r < rows; ++r) {
    /* style 2: now and then a row whose scores are all -inf (a channel of weight 0 everywhere) */
    const int dead = style == 2 && rng_next(g) % 17 == 0;
    for (int c = 0; c < 2 * D; ++c)
      fz_set(base, r * 2 * D + c, dt, dead && c >= D ? -INFINITY : fz_value(g, c >= D, style));
  }
}
static float *fz_make_ape(fz_rng *g, int D) {
  float *ape = (float *)fz_alloc((size_t)128 * D * sizeof(float));
  for (int i = 0; i < 128 * D; ++i) ape[i] = 0.5f * rng_randn(g);
  return ape;
}

/* [a, a + an) and [b, b + bn) overlap; empty ranges and NULL overlap nothing. */
static int fz_overlaps(const void *a, uint64_t an, const void *b, uint64_t bn) {
  if (!a || !b || !an || !bn) return 0;
  const uint64_t x = (uint64_t)(uintptr_t)a, y = (uint64_t)(uintptr_t)b;
  return x < y ? y - x < an : x - y < bn;
}
static int fz_misaligned(const void *p, size_t a) { return (uintptr_t)p % a != 0; }

/* >>tolerance of DESIGN 8: ref_check_row (ref/reference.h), the tests' check too ------------- */
static int fz_compare_row(const void *out, int64_t row, c128_dtype dt, const double *ref, const double *scale, int D,
                          char *why, size_t why_size) {
  return ref_check_row(D, (const char *)out + (size_t)row * (size_t)D * fz_es(dt), dt == C128_BF16, ref, scale, why,
                       why_size);
}

/* >>instances compiled into the target ------------------------------------------------------- */
typedef struct fz_instance {
  const char *name;
  int head_dim;
  c128_dtype buf, in, out;
  c128_status (*decode_host)(const c128_decode_args *, const c128_host_options *);
  c128_status (*prefill_host)(const c128_prefill_args *, const c128_host_options *);
} fz_instance;
// clang-format off
#define FZ_INSTANCE_ROW(name, D, state, input, output)                                                \
  {#name, D, C128__DTYPE_##state, C128__DTYPE_##input, C128__DTYPE_##output, c128_decode_host_##name, \
   c128_prefill_host_##name},
// clang-format on
static const fz_instance fz_instances[] = {C128_INSTANCES(FZ_INSTANCE_ROW)};
#undef FZ_INSTANCE_ROW
enum { FZ_NUM_INSTANCES = (int)(sizeof fz_instances / sizeof fz_instances[0]) };
/* The widest head_dim of the table: the modes' fixed buffers are sized from it. */
#define FZ_HEAD_DIM_OF(name, D, state, input, output) D,
constexpr int fz_head_dims[] = {C128_INSTANCES(FZ_HEAD_DIM_OF)};
#undef FZ_HEAD_DIM_OF
constexpr int fz_widest_head_dim() {
  int widest = 0;
  for (const int d : fz_head_dims) widest = d > widest ? d : widest;
  return widest;
}
enum { FZ_MAX_D = fz_widest_head_dim() };
static_assert(FZ_MAX_D > 0 && FZ_MAX_D <= 1024, "the fuzz buffers are static: keep the table's head_dims small");

/* >>model: SPEC 6.5 and DESIGN 5.9-5.10, 11.4 (which plans run, and what they touch) -------- */
enum { M_RUN, M_PAD, M_SKIP };

typedef struct fz_layout {
  int64_t state_pages; /* physical pages of the view */
  int32_t rank, size, ppr;
} fz_layout;

static int fz_layout_valid(c128_shared_layout l) {
  const int64_t size = l.size == 0 ? 1 : l.size;
  return size >= 1 && l.rank >= 0 && l.rank < size && l.pages_per_rank >= 0;
}
static fz_layout fz_layout_of(int64_t state_pages, c128_shared_layout l) {
  fz_layout m = {state_pages, l.rank, l.size == 0 ? 1 : l.size, l.pages_per_rank};
  return m;
}
/* Physical page of a logical page, or -1 (SPEC 5 and 6.5). */
static int64_t m_phys(const fz_layout *L, int64_t logical) {
  if (L->size == 1) return logical >= 0 && logical < L->state_pages ? logical : -1;
  if (logical < 0 || logical >= (int64_t)L->size * L->ppr) return -1;
  const int64_t owner = logical % L->size;
  const int64_t phys = ((owner - L->rank + L->size) % L->size) * L->ppr + logical / L->size;
  return phys < L->state_pages ? phys : -1;
}
static int m_owned(const fz_layout *L, int64_t logical) { return L->size == 1 || logical % L->size == L->rank; }

/* log2 of a power of two in [1, 2^62], else -1. */
static int m_log2(int64_t v) {
  if (v <= 0 || (v & (v - 1))) return -1;
  int k = 0;
  while (((int64_t)1 << k) != v) ++k;
  return k;
}

/* The state as the kernels see it (DESIGN 5.9): today's pages of 128 rows through the shared
   layout, or blocks of B rows, one or two planes, biased scores, and block tables through which
   plans name logical rows (table row << row_shift | position). Plane 0 holds kv, plane 1 the
   scores (the same rows as plane 0 unless the scores have a table of their own). */
typedef struct m_state {
  int layout; /* a state layout other than today's */
  fz_layout L;
  int64_t B;
  int shift; /* log2 B */
  int split, biased;
  const int32_t *table, *score_table; /* score_table NULL: the scores go through `table` */
  int64_t table_rows, stride;
  int rs;
} m_state;

static m_state m_state_of(int64_t state_pages, c128_shared_layout lay, const c128_state_layout *sl) {
  m_state S;
  memset(&S, 0, sizeof S);
  S.L = fz_layout_of(state_pages, lay);
  S.B = 128, S.shift = 7;
  if (!sl) return S;
  const int32_t rows = sl->block_rows ? sl->block_rows : 128;
  S.layout = rows != 128 || sl->score_biased || sl->score_plane || sl->block_table || sl->score_block_table;
  S.B = rows, S.shift = m_log2(rows);
  S.split = sl->score_plane != NULL, S.biased = sl->score_biased != 0;
  S.table = sl->block_table, S.score_table = sl->score_block_table;
  S.table_rows = sl->table_rows, S.stride = sl->table_stride, S.rs = sl->row_shift;
  return S;
}

/* Physical row in plane `plane` of logical row `logical`, or -1; *owned: this rank stores it. */
static int64_t m_row(const m_state *S, int64_t logical, int plane, int *owned) {
  if (owned) *owned = 1;
  if (logical < 0) return -1;
  if (!S->layout) {
    const int64_t page = logical / 128, phys = m_phys(&S->L, page);
    if (phys < 0) return -1;
    if (owned) *owned = m_owned(&S->L, page);
    return phys * 128 + logical % 128;
  }
  if (!S->table) return logical < S->L.state_pages * S->B ? logical : -1;
  const int32_t *tab = plane && S->score_table ? S->score_table : S->table;
  const int64_t row = logical >> S->rs, at = logical & (((int64_t)1 << S->rs) - 1), column = at / S->B;
  if (row >= S->table_rows || column >= S->stride) return -1;
  const int64_t block = tab[row * S->stride + column];
  if (block < 0 || block >= S->L.state_pages) return -1;
  return block * S->B + at % S->B;
}
/* A window of `count` rows at logical row row0 lies in the state (both planes). Today's layout:
   its page translates (rows of one physical page). */
static int m_window_in_state(const m_state *S, int64_t row0, int count) {
  if (!S->layout) return m_row(S, row0, 0, NULL) >= 0;
  for (int j = 0; j < count; ++j)
    if (m_row(S, row0 + j, 0, NULL) < 0 || m_row(S, row0 + j, 1, NULL) < 0) return 0;
  return 1;
}
/* Where a window goes (DESIGN 5.10, 11.2): output row or cache entry. */
typedef struct m_kern {
  m_state S;
  const int64_t *index; /* NULL: the plan's own row */
  int entry;            /* cache entries */
  int64_t targets;      /* output rows, or the cache's entries */
  int64_t rope;         /* RoPE positions (cache entries) */
} m_kern;
static int64_t m_target(const m_kern *K, int64_t r, int64_t own) {
  const int64_t at = K->index ? K->index[r] : own;
  return at >= 0 && at < K->targets ? at : -1;
}
static int m_position_ok(const m_kern *K, uint32_t seq_len) {
  const int64_t pos = (int64_t)seq_len - 128;
  return !K->entry || (pos >= 0 && pos < K->rope);
}

typedef struct m_decode {
  int reason, boundary;
  int64_t wkv, wsc; /* physical rows written in planes 0 and 1, -1 = none (another rank owns the slot) */
  int64_t vrow;     /* physical row of the slot in this view, owned or not (the checker's) */
  int32_t slot;     /* write_loc mod 128: the ape row of a biased score */
  int64_t row0;     /* boundary: row of window row 0 (logical in a state layout, else physical) */
  int64_t out;      /* output row or cache entry */
} m_decode;
static m_decode m_decode_plan(const m_kern *K, int64_t b, int64_t input_rows, c128_decode_plan p) {
  m_decode m = {M_SKIP, 0, -1, -1, -1, 0, -1, -1};
  const m_state *S = &K->S;
  if (p.seq_len == 0 || p.write_loc < 0) return m.reason = M_PAD, m;
  if (b >= input_rows) return m;
  int owned = 1;
  const int64_t kv = m_row(S, p.write_loc, 0, &owned), sc = m_row(S, p.write_loc, 1, NULL);
  if (kv < 0 || sc < 0) return m;
  m.vrow = kv, m.slot = p.write_loc % 128;
  m.wkv = owned ? kv : -1, m.wsc = owned ? sc : -1;
  m.boundary = p.write_loc % 128 == 127;
  if (m.boundary) {
    if (p.read_page_1 < 0 || !m_window_in_state(S, (int64_t)p.read_page_1 * 128, 127)) return m;
    m.row0 = S->layout ? (int64_t)p.read_page_1 * 128 : m_row(S, (int64_t)p.read_page_1 * 128, 0, NULL);
    if ((m.out = m_target(K, b, b)) < 0 || !m_position_ok(K, p.seq_len)) return m;
  }
  m.reason = M_RUN;
  return m;
}
/* Physical row of window row j in plane `plane` (rows 0 .. buffer_len - 1 of a running window). */
static int64_t m_window_row(const m_kern *K, int64_t row0, int j, int plane) {
  return K->S.layout ? m_row(&K->S, row0 + j, plane, NULL) : row0 + j;
}

typedef struct m_compress {
  int reason;
  int64_t state_row0, input_row0; /* state_row0 logical in a state layout, else physical */
  int buffer_len;
  int64_t out;
} m_compress;
static m_compress m_compress_plan(const m_kern *K, int64_t k, int64_t input_rows, c128_compress_plan p) {
  m_compress m = {M_SKIP, -1, -1, 0, -1};
  const m_state *S = &K->S;
  if (p.seq_len == 0xFFFFFFFFu) return m.reason = M_PAD, m;
  if (p.buffer_len > 127 || p.ragged_id >= input_rows) return m;
  if ((int64_t)p.ragged_id - 127 + p.buffer_len < 0) return m;
  if (p.buffer_len > 0) {
    const int64_t row0 = (int64_t)p.read_page_1 * 128;
    if (p.read_page_1 < 0 || !m_window_in_state(S, row0, p.buffer_len)) return m;
    m.state_row0 = S->layout ? row0 : m_row(S, row0, 0, NULL);
  }
  if ((m.out = m_target(K, p.ragged_id, k)) < 0 || !m_position_ok(K, p.seq_len)) return m;
  m.input_row0 = (int64_t)p.ragged_id - 127;
  m.buffer_len = p.buffer_len;
  m.reason = M_RUN;
  return m;
}

typedef struct m_write {
  int reason;
  int64_t src_row, dkv, dsc; /* dkv/dsc -1: another rank owns the slot */
  int64_t vrow;              /* the slot's row in this view (the checker's) */
  int32_t slot;
} m_write;
static m_write m_write_plan(const m_kern *K, int64_t input_rows, c128_write_plan p) {
  m_write m = {M_SKIP, -1, -1, -1, -1, 0};
  if (p.ragged_id == 0xFFFFFFFFu) return m.reason = M_PAD, m;
  if (p.ragged_id >= input_rows || p.write_loc < 0) return m;
  int owned = 1;
  const int64_t kv = m_row(&K->S, p.write_loc, 0, &owned), sc = m_row(&K->S, p.write_loc, 1, NULL);
  if (kv < 0 || sc < 0) return m;
  m.src_row = p.ragged_id, m.vrow = kv, m.slot = p.write_loc % 128;
  m.dkv = owned ? kv : -1, m.dsc = owned ? sc : -1;
  m.reason = M_RUN;
  return m;
}

/* >>model: DESIGN 11.1-11.2 (a cache entry from the window's pooled vector y) ------------------ */
static float m_bf16f(float x) { return fz_round_to(C128_BF16, x); }
/* The e4m3 (FN) code nearest |x| (ties to the even code), finite x saturating at 448. */
static double m_e4m3_value(unsigned code) {
  const unsigned e = (code >> 3) & 15u, m = code & 7u;
  if (e == 15u && m == 7u) return NAN;
  const double v = e ? (8.0 + m) * ldexp(1.0, (int)e - 10) : m * ldexp(1.0, -9);
  return code & 0x80u ? -v : v;
}
static unsigned m_e4m3(float x) {
  if (x != x) return 0x7Fu;
  const unsigned sign = signbit(x) ? 0x80u : 0u;
  const double a = fabs((double)x);
  unsigned best = 0;
  for (unsigned c = 1; c <= 0x7Eu; ++c) { /* codes ascend with their values */
    const double v = m_e4m3_value(c), w = m_e4m3_value(best);
    if (fabs(v - a) < fabs(w - a) || (fabs(v - a) == fabs(w - a) && (c & 1u) == 0)) best = c;
  }
  return sign | best;
}
/* E = ceil(log2(max(amax, 1e-4) / 448)), the quotient rounded to f32 first. */
static int m_scale_exponent(float amax) {
  const float q = (amax > 1e-4f ? amax : 1e-4f) / 448.0f;
  int e;
  const float m = frexpf(q, &e); /* q = m 2^e, m in [0.5, 1) */
  return m == 0.5f ? e - 1 : e;
}
typedef struct m_entry_ctx {
  int D, fp8;
  int64_t P, page_bytes;
  const float *gamma, *rope;
  float eps;
} m_entry_ctx;
static int64_t m_entry_bytes(int D, int fp8) { return fp8 ? D + 64 + D / 64 : 2 * D; }
/* The byte ranges of entry t: [off[0], off[0] + len[0]) and (FP8) its scale bytes. */
static int m_entry_ranges(const m_entry_ctx *E, int64_t t, int64_t off[2], int64_t len[2]) {
  const int64_t page = t / E->P, slot = t % E->P, base = page * E->page_bytes;
  if (!E->fp8) {
    off[0] = base + 2 * E->D * slot, len[0] = 2 * E->D;
    return 1;
  }
  off[0] = base + (E->D + 64) * slot, len[0] = E->D + 64;
  off[1] = base + (E->D + 64) * E->P + (E->D / 64) * slot, len[1] = E->D / 64;
  return 2;
}
/* Entry bytes (the entry, then the FP8 scale bytes) of the window whose pooled vector is y, at
   RoPE position `pos`; nan[i] marks a byte pair (bf16) that must only be a NaN. */
static void m_entry(const m_entry_ctx *E, const float *y, int64_t pos, uint8_t *entry, uint8_t *scales,
                    uint8_t *nan_pair) {
  const int D = E->D;
  float b[FZ_MAX_D], z[FZ_MAX_D], lane[32], next[32];
  for (int c = 0; c < D; ++c) b[c] = m_bf16f(y[c]);
  for (int l = 0; l < 32; ++l) {
    lane[l] = 0.0f;
    for (int c = l; c < D; c += 32) lane[l] = lane[l] + b[c] * b[c];
  }
  for (int o = 16; o > 0; o >>= 1) {
    for (int l = 0; l < 32; ++l) next[l] = lane[l] + lane[l ^ o];
    memcpy(lane, next, sizeof lane);
  }
  const float r = 1.0f / sqrtf(lane[0] / (float)D + E->eps);
  for (int c = 0; c < D; ++c) z[c] = m_bf16f(E->gamma[c] * (b[c] * r));
  const int64_t ebytes = E->fp8 ? D + 64 : 2 * D;
  memset(nan_pair, 0, (size_t)ebytes / 2);
  for (int w = 0; w < D / 64 - 1; ++w) {
    float amax = 0.0f;
    for (int c = 64 * w; c < 64 * w + 64; ++c) {
      const float a = fabsf(z[c]);
      amax = amax != amax ? amax : a != a ? a : a > amax ? a : amax;
    }
    const int finite = amax <= 3.402823466e38f, Ex = finite ? m_scale_exponent(amax) : 0;
    for (int c = 64 * w; c < 64 * w + 64; ++c) {
      const unsigned q = finite ? m_e4m3(z[c] * ldexpf(1.0f, -Ex)) : 0x7Fu;
      if (E->fp8) {
        entry[c] = (uint8_t)q;
      } else {
        const uint16_t h = fz_bf16((float)(m_e4m3_value(q) * ldexp(1.0, Ex)));
        memcpy(entry + 2 * c, &h, 2);
        if (!finite) nan_pair[c] = 1;
      }
    }
    if (E->fp8) scales[w] = finite ? (uint8_t)(Ex + 127) : 0xFFu;
  }
  const float *cs = E->rope + pos * 64;
  for (int i = 0; i < 32; ++i) {
    const float zr = z[D - 64 + 2 * i], zi = z[D - 63 + 2 * i], c = cs[2 * i], s = cs[2 * i + 1];
    const float re = zr * c - zi * s, im = zr * s + zi * c;
    const uint16_t hr = fz_bf16(re), hi = fz_bf16(im);
    const int64_t at = E->fp8 ? D - 64 + 4 * i : 2 * (D - 64 + 2 * i);
    memcpy(entry + at, &hr, 2), memcpy(entry + at + 2, &hi, 2);
    nan_pair[at / 2] = re != re, nan_pair[at / 2 + 1] = im != im;
  }
  if (E->fp8) scales[D / 64 - 1] = 0; /* the pad byte */
}

/* >>model: SPEC 5 and DESIGN 5.11 (the planner) ------------------------------------------------ */
typedef struct m_ring {
  int64_t R;
  int spec;
  const int32_t *pt;
  int64_t stride, num_pool, state_pages;
  int write_all;
  /* a block table in ring.state_layout: logical pages rid * R / 128 + chunk, blocks checked */
  int tabled, shift;
  int64_t B;
  const int32_t *bt, *st; /* the block table and the score plane's (NULL: none) */
  int64_t table_rows, table_stride;
  int has_null;
  int32_t null_block;
  int64_t rope;
} m_ring;
static m_ring m_ring_of(const c128_ring *r) {
  m_ring m;
  memset(&m, 0, sizeof m);
  const c128_state_layout *l = &r->state_layout;
  m.tabled = l->block_table != NULL;
  m.R = m.tabled         ? (l->row_shift >= 7 && l->row_shift <= 30 ? (int64_t)1 << l->row_shift : 128)
        : r->ring_tokens ? r->ring_tokens
                         : 128;
  m.spec = r->speculative, m.pt = r->page_table, m.stride = r->page_table_stride, m.num_pool = r->num_pool;
  m.state_pages = r->state_pages, m.write_all = r->write_all;
  m.B = l->block_rows ? l->block_rows : 128, m.shift = m_log2(m.B);
  m.bt = l->block_table, m.st = l->score_block_table, m.table_rows = l->table_rows, m.table_stride = l->table_stride;
  m.has_null = r->has_null_block, m.null_block = r->null_block, m.rope = r->rope_positions;
  return m;
}
/* page(rid, pos), or the status the planner gives when a plan would use a bad one. */
static c128_status m_page(const m_ring *r, int64_t rid, int64_t pos, int64_t *page) {
  const int64_t k = (pos % r->R) / 128;
  if (rid < 0 || (r->pt && rid >= r->num_pool)) return C128_ERROR_POOL_INDEX_OUT_OF_RANGE;
  if (r->tabled) {
    if (rid >= r->table_rows) return C128_ERROR_POOL_INDEX_OUT_OF_RANGE;
    *page = rid * (r->R / 128) + k;
  } else if (r->pt) {
    const int64_t pg = r->pt[rid * r->stride + k];
    if (pg < 0 || pg >= r->state_pages) return C128_ERROR_PAGE_OUT_OF_RANGE;
    *page = pg;
  } else {
    *page = rid * (r->R / 128) + k;
    if (*page >= r->state_pages) return C128_ERROR_POOL_INDEX_OUT_OF_RANGE;
  }
  return C128_SUCCESS;
}
/* With a block table: every block holding positions pos .. pos + count - 1 of request rid is
   allocated in every plane's table (DESIGN 5.11): its column exists and its entry lies in
   [0, state_pages) (PAGE_OUT_OF_RANGE) and is neither negative nor the null block
   (BLOCK_MISSING); blocks in position order, the kv table's entry before the score table's. */
static c128_status m_blocks(const m_ring *r, int64_t rid, int64_t pos, int64_t count) {
  if (!r->tabled) return C128_SUCCESS;
  for (int64_t at = pos; at < pos + count; at = (at / r->B + 1) * r->B) {
    const int64_t column = (at % r->R) / r->B;
    if (column >= r->table_stride) return C128_ERROR_PAGE_OUT_OF_RANGE;
    for (int plane = 0; plane < 1 + (r->st != NULL); ++plane) {
      const int32_t block = (plane ? r->st : r->bt)[rid * r->table_stride + column];
      if (block < 0 || (r->has_null && block == r->null_block)) return C128_ERROR_BLOCK_MISSING;
      if (block >= r->state_pages) return C128_ERROR_PAGE_OUT_OF_RANGE;
    }
  }
  return C128_SUCCESS;
}
static int64_t m_pad(const m_ring *r) { return r->spec ? r->R - 128 + 2 : 0; }
static int64_t m_first_write(const m_ring *r, int64_t seq) {
  if (r->write_all) return seq - r->R; /* the last R tokens (DESIGN 5.11) */
  const int64_t boundary = seq / 128 * 128, tail = seq - m_pad(r);
  return boundary < tail ? boundary : tail;
}
