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

/* >>model: SPEC 6.5 (which plans run, and what they touch) ------------------------------------ */
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

typedef struct m_decode {
  int reason, boundary;
  int64_t write_row; /* physical state row, -1 = none (another rank owns the slot) */
  int64_t read_row0; /* boundary: physical row of window row 0 */
} m_decode;
static m_decode m_decode_plan(const fz_layout *L, int64_t b, int64_t input_rows, int64_t output_rows,
                              c128_decode_plan p) {
  m_decode m = {M_SKIP, 0, -1, -1};
  if (p.seq_len == 0 || p.write_loc < 0) return m.reason = M_PAD, m;
  if (b >= input_rows) return m;
  const int64_t wp = p.write_loc / 128, wphys = m_phys(L, wp);
  if (wphys < 0) return m;
  m.boundary = p.write_loc % 128 == 127;
  if (m.boundary) {
    const int64_t rphys = m_phys(L, p.read_page_1);
    if (rphys < 0 || b >= output_rows) return m;
    m.read_row0 = rphys * 128;
  }
  m.write_row = m_owned(L, wp) ? wphys * 128 + p.write_loc % 128 : -1;
  m.reason = M_RUN;
  return m;
}

typedef struct m_compress {
  int reason;
  int64_t state_row0, input_row0;
  int buffer_len;
} m_compress;
static m_compress m_compress_plan(const fz_layout *L, int64_t k, int64_t input_rows, int64_t output_rows,
                                  c128_compress_plan p) {
  m_compress m = {M_SKIP, -1, -1, 0};
  if (p.seq_len == 0xFFFFFFFFu) return m.reason = M_PAD, m;
  if (p.buffer_len > 127 || k >= output_rows || p.ragged_id >= input_rows) return m;
  if ((int64_t)p.ragged_id - 127 + p.buffer_len < 0) return m;
  if (p.buffer_len > 0) {
    const int64_t rphys = m_phys(L, p.read_page_1);
    if (rphys < 0) return m;
    m.state_row0 = rphys * 128;
  }
  m.input_row0 = (int64_t)p.ragged_id - 127;
  m.buffer_len = p.buffer_len;
  m.reason = M_RUN;
  return m;
}

typedef struct m_write {
  int reason;
  int64_t src_row, dst_row; /* dst -1: another rank owns the slot */
} m_write;
static m_write m_write_plan(const fz_layout *L, int64_t input_rows, c128_write_plan p) {
  m_write m = {M_SKIP, -1, -1};
  if (p.ragged_id == 0xFFFFFFFFu) return m.reason = M_PAD, m;
  if (p.ragged_id >= input_rows || p.write_loc < 0) return m;
  const int64_t page = p.write_loc / 128, phys = m_phys(L, page);
  if (phys < 0) return m;
  m.src_row = p.ragged_id;
  m.dst_row = m_owned(L, page) ? phys * 128 + p.write_loc % 128 : -1;
  m.reason = M_RUN;
  return m;
}

/* >>model: SPEC 5 (the planner) --------------------------------------------------------------- */
typedef struct m_ring {
  int64_t R;
  int spec;
  const int32_t *pt;
  int64_t stride, num_pool, state_pages;
} m_ring;
static m_ring m_ring_of(const c128_ring *r) {
  m_ring m = {r->ring_tokens ? r->ring_tokens : 128,
              r->speculative,
              r->page_table,
              r->page_table_stride,
              r->num_pool,
              r->state_pages};
  return m;
}
/* page(rid, pos), or the status the planner gives when a plan would use a bad one. */
static c128_status m_page(const m_ring *r, int64_t rid, int64_t pos, int64_t *page) {
  const int64_t k = (pos % r->R) / 128;
  if (rid < 0 || (r->pt && rid >= r->num_pool)) return C128_ERROR_POOL_INDEX_OUT_OF_RANGE;
  if (r->pt) {
    const int64_t pg = r->pt[rid * r->stride + k];
    if (pg < 0 || pg >= r->state_pages) return C128_ERROR_PAGE_OUT_OF_RANGE;
    *page = pg;
  } else {
    *page = rid * (r->R / 128) + k;
    if (*page >= r->state_pages) return C128_ERROR_POOL_INDEX_OUT_OF_RANGE;
  }
  return C128_SUCCESS;
}
static int64_t m_pad(const m_ring *r) { return r->spec ? r->R - 128 + 2 : 0; }
static int64_t m_first_write(const m_ring *r, int64_t seq) {
  const int64_t boundary = seq / 128 * 128, tail = seq - m_pad(r);
  return boundary < tail ? boundary : tail;
}
