#define _POSIX_C_SOURCE 200809L /* clock_gettime under -std=c11 */
#include "harness.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

rng rng_fresh(void) {
  static uint64_t counter;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  rng r;
  r.seed = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ (++counter * 0x9E3779B97F4A7C15ull);
  const char *env = getenv("C128_SEED"); /* a failure names its seed; C128_SEED=<seed> replays it */
  if (env && *env) r.seed = strtoull(env, NULL, 0);
  r.state = r.seed;
  return r;
}

uint64_t rng_u64(rng *r) { /* splitmix64 */
  uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double rng_uniform(rng *r) { return (double)(rng_u64(r) >> 11) * 0x1.0p-53; }

int64_t rng_below(rng *r, int64_t n) { return n <= 0 ? 0 : (int64_t)(rng_u64(r) % (uint64_t)n); }

/* Plan fields drawn where the bounds checks live: any 32-bit value, just around `limit`, just
   around 0, or in range. */
int32_t rng_edgy(rng *r, int64_t limit) {
  switch (rng_below(r, 4)) {
  case 0:
    return (int32_t)rng_u64(r);
  case 1:
    return (int32_t)(limit - 3 + rng_below(r, 6));
  case 2:
    return (int32_t)(rng_below(r, 5) - 2);
  default:
    return (int32_t)rng_below(r, limit > 0 ? limit : 1);
  }
}

float rng_randn(rng *r) {
  double u = rng_uniform(r);
  while (u <= 0.0) u = rng_uniform(r);
  float v = (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * rng_uniform(r)));
  return v != 0.0f ? v : 0.5f; /* never a zero */
}

size_t dtype_size(c128_dtype dtype) { return c128_dtype_size(dtype); }

const instance_entry *instance(c128_instance_id id) {
  static instance_entry table[C128_INSTANCE_COUNT];
  cr_assert(id >= 0 && id < C128_INSTANCE_COUNT);
  if (!table[id].name) cr_assert_eq(c128_instance_info_get((int)id, &table[id]), C128_SUCCESS);
  return &table[id];
}

float elem_get(const void *base, size_t i, c128_dtype dtype) {
  if (dtype == C128_BF16) return c128_bf16_to_float(((const uint16_t *)base)[i]);
  return ((const float *)base)[i];
}

void elem_set(void *base, size_t i, c128_dtype dtype, float value) {
  if (dtype == C128_BF16) ((uint16_t *)base)[i] = c128_bf16_from_float(value);
  else ((float *)base)[i] = value;
}

void *rows_alloc(size_t rows, int head_dim, c128_dtype dtype) {
  void *p = malloc(rows * 2 * (size_t)head_dim * dtype_size(dtype) + 16);
  cr_assert_not_null(p);
  return p;
}

void rows_fill(void *base, size_t rows, int head_dim, c128_dtype dtype, rng *r, float score_scale) {
  for (size_t row = 0; row < rows; ++row)
    for (int c = 0; c < 2 * head_dim; ++c)
      elem_set(base, row * 2 * (size_t)head_dim + (size_t)c, dtype,
               c < head_dim ? rng_randn(r) : score_scale * rng_randn(r));
}

float *ape_make(int head_dim, rng *r) {
  float *ape = malloc(REF_APE_ROWS * (size_t)head_dim * sizeof(float));
  cr_assert_not_null(ape);
  for (size_t i = 0; i < REF_APE_ROWS * (size_t)head_dim; ++i) ape[i] = 0.5f * rng_randn(r);
  return ape;
}

void poison(void *base, size_t bytes) { memset(base, 0xFF, bytes); }

void *clone_bytes(const void *src, size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  cr_assert_not_null(p);
  memcpy(p, src, bytes);
  return p;
}

void row_widen(const void *base, size_t row, int head_dim, c128_dtype dtype, float *dst) {
  for (int c = 0; c < 2 * head_dim; ++c) dst[c] = elem_get(base, row * 2 * (size_t)head_dim + (size_t)c, dtype);
}

void row_to_state(const void *input, size_t in_row, c128_dtype in_dtype, void *dst, c128_dtype buf_dtype,
                  int head_dim) {
  const size_t n = 2 * (size_t)head_dim;
  if (in_dtype == buf_dtype) {
    memcpy(dst, (const char *)input + in_row * n * dtype_size(in_dtype), n * dtype_size(in_dtype));
    return;
  }
  for (size_t c = 0; c < n; ++c) elem_set(dst, c, buf_dtype, elem_get(input, in_row * n + c, in_dtype));
}

int gpu_present(void) {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

const char *sanitizer_tool(void) {
  const char *tool = getenv("C128_SANITIZER");
  return tool && *tool ? tool : NULL;
}

void require_backend(backend be) {
  if (be == BACKEND_GPU && !gpu_present()) cr_skip_test("no CUDA device present: GPU test skipped");
}

enum { GUARD_BYTES = 4096, GUARD_CANARY = 0x5A };

dev_guarded dev_guarded_make(const void *contents, size_t bytes) {
  dev_guarded g = {NULL, NULL, bytes};
  CUDA_OK(cudaMalloc((void **)&g.dev, bytes + 2 * GUARD_BYTES));
  CUDA_OK(cudaMallocHost((void **)&g.host, bytes + 2 * GUARD_BYTES));
  CUDA_OK(cudaMemset(g.dev, GUARD_CANARY, bytes + 2 * GUARD_BYTES));
  if (contents) CUDA_OK(cudaMemcpy(g.dev + GUARD_BYTES, contents, bytes, cudaMemcpyHostToDevice));
  return g;
}

void *dev_guarded_inside(const dev_guarded *g) { return g->dev + GUARD_BYTES; }

const char *dev_guarded_fetch(dev_guarded *g, const char *what, uint64_t seed) {
  CUDA_OK(cudaMemcpy(g->host, g->dev, g->bytes + 2 * GUARD_BYTES, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < GUARD_BYTES; ++i)
    cr_assert(g->host[i] == GUARD_CANARY && g->host[GUARD_BYTES + g->bytes + i] == GUARD_CANARY,
              "%s: a kernel wrote outside the buffer (seed %llu)", what, (unsigned long long)seed);
  return g->host + GUARD_BYTES;
}

void dev_guarded_free(dev_guarded *g) { cudaFree(g->dev), cudaFreeHost(g->host); }

static void *to_device(const void *host, size_t bytes) {
  void *d = NULL;
  if (!host) return NULL;
  CUDA_OK(cudaMalloc(&d, bytes ? bytes : 16));
  CUDA_OK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
  return d;
}

static size_t row_bytes(const c128_instance_info *f, c128_dtype dtype) {
  return (size_t)f->row_elems * dtype_size(dtype);
}
static size_t out_bytes(const c128_instance_info *f, int64_t rows) {
  return (size_t)rows * (size_t)f->head_dim * dtype_size(f->output_dtype);
}

c128_host_options cpu_options(int reverse, char *msg, size_t size) {
  c128_host_options o = {0};
  o.check_races = 1;
  o.reverse_blocks = reverse;
  o.message = msg;
  o.message_size = size;
  msg[0] = 0;
  return o;
}

/* The GPU backend's device copies of one call: uploaded, run on, brought back, freed. */
typedef struct mirror {
  cudaStream_t stream;
  void *state, *output, *input, *ape, *plans[4]; /* decode; compress, write, write slots and positions */
  size_t state_bytes, output_bytes;
  c128_state_layout layout; /* the state layout with its score plane and block tables on the device */
  const int64_t *index;     /* output_index on the device */
} mirror;

/* Bytes of one plane of the state in layout l (the whole state when it is one plane). */
static size_t plane_bytes(const c128_instance_info *f, const c128_state_layout *l, int64_t pages) {
  const size_t rows = (size_t)pages * (size_t)(l->block_rows > 0 ? l->block_rows : REF_WINDOW);
  return rows * (size_t)(l->score_plane ? f->head_dim : f->row_elems) * dtype_size(f->state_dtype);
}

static mirror mirror_up(const c128_instance_info *f, const void *state, int64_t pages, const void *input,
                        int64_t input_rows, const float *ape, const void *output, int64_t output_rows,
                        const c128_state_layout *l, const int64_t *index, int64_t index_rows) {
  mirror m;
  memset(&m, 0, sizeof m);
  CUDA_OK(cudaStreamCreate(&m.stream));
  m.state_bytes = plane_bytes(f, l, pages); /* today's layout: pages of 128 rows of kv | score */
  m.output_bytes = out_bytes(f, output_rows);
  m.state = to_device(state, m.state_bytes);
  m.output = to_device(output, m.output_bytes);
  m.input = to_device(input, (size_t)input_rows * row_bytes(f, f->input_dtype));
  m.ape = to_device(ape, REF_APE_ROWS * (size_t)f->head_dim * sizeof(float));
  /* The layout's tensors travel too; a table of no entries keeps its pointer (never read). */
  m.layout = *l;
  m.layout.score_plane = to_device(l->score_plane, m.state_bytes);
  const size_t table =
      l->table_rows > 0 && l->table_stride > 0 ? (size_t)l->table_rows * (size_t)l->table_stride * sizeof(int32_t) : 0;
  if (table && l->block_table) m.layout.block_table = to_device(l->block_table, table);
  if (table && l->score_block_table)
    m.layout.score_block_table =
        l->score_block_table == l->block_table ? m.layout.block_table : to_device(l->score_block_table, table);
  m.index = index_rows > 0 ? to_device(index, (size_t)index_rows * sizeof(int64_t)) : index;
  return m;
}

/* Waits for the call, copies state (both planes) and output back to the host, frees everything. */
static c128_status mirror_down(mirror *m, c128_status st, void *state, void *output, const c128_state_layout *l,
                               const int64_t *index) {
  CUDA_OK(cudaStreamSynchronize(m->stream));
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaMemcpy(state, m->state, m->state_bytes, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(output, m->output, m->output_bytes, cudaMemcpyDeviceToHost));
  if (l->score_plane)
    CUDA_OK(cudaMemcpy(l->score_plane, m->layout.score_plane, m->state_bytes, cudaMemcpyDeviceToHost));
  void *all[] = {
      m->state, m->output, m->input, m->ape, m->plans[0], m->plans[1], m->plans[2], m->plans[3], m->layout.score_plane};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) cudaFree(all[i]);
  if (m->layout.block_table != l->block_table) cudaFree((void *)m->layout.block_table);
  if (m->layout.score_block_table != l->score_block_table && m->layout.score_block_table != m->layout.block_table)
    cudaFree((void *)m->layout.score_block_table);
  if (m->index != index) cudaFree((void *)m->index);
  CUDA_OK(cudaStreamDestroy(m->stream));
  return st;
}

/* Cache entries (DESIGN 11): gamma, the RoPE table, the cache and the workspace on the device
   (the cache's and workspace's bytes as the host has them), and both back to the host after the
   call (a test then sees the workspace the launch left). */
static c128_entry_args entry_up(const c128_instance_info *f, const c128_entry_args *h) {
  c128_entry_args d = *h;
  if (h->kind == C128_OUTPUT_POOLED) return d;
  d.norm_weight = to_device(h->norm_weight, (size_t)f->head_dim * sizeof(float));
  d.rope_table = to_device(h->rope_table, (size_t)(h->rope_positions > 0 ? h->rope_positions : 0) * 64 * sizeof(float));
  d.cache = to_device(h->cache, (size_t)(h->cache_pages > 0 ? h->cache_pages * h->page_bytes : 0));
  d.workspace = to_device(h->workspace, (size_t)(h->workspace_bytes > 0 ? h->workspace_bytes : 0));
  return d;
}
static void entry_down(const c128_entry_args *d, const c128_entry_args *h) {
  if (h->kind == C128_OUTPUT_POOLED) return;
  if (h->cache && h->cache_pages > 0)
    CUDA_OK(cudaMemcpy(h->cache, d->cache, (size_t)(h->cache_pages * h->page_bytes), cudaMemcpyDeviceToHost));
  if (h->workspace && h->workspace_bytes > 0)
    CUDA_OK(cudaMemcpy(h->workspace, d->workspace, (size_t)h->workspace_bytes, cudaMemcpyDeviceToHost));
  cudaFree((void *)d->norm_weight), cudaFree((void *)d->rope_table), cudaFree(d->cache), cudaFree(d->workspace);
}

c128_status run_decode(const instance_entry *e, backend be, const c128_decode_args *h, int reverse) {
  if (be == BACKEND_CPU) {
    char msg[256];
    const c128_host_options o = cpu_options(reverse, msg, sizeof msg);
    const c128_status st = e->decode_host(h, &o);
    cr_expect_neq(st, C128_ERROR_RACE_DETECTED, "%s", msg);
    return st;
  }
  mirror m = mirror_up(e, h->state, h->state_pages, h->input, h->batch, h->ape, h->output, h->output_rows,
                       &h->state_layout, h->output_index, h->output_index ? h->batch : 0);
  m.plans[0] = to_device(h->plans, (size_t)h->batch * sizeof(c128_decode_plan));
  c128_decode_args d = *h;
  d.state = m.state, d.output = m.output, d.input = m.input, d.ape = m.ape, d.plans = m.plans[0];
  d.state_layout = m.layout, d.output_index = m.index;
  d.entry = entry_up(e, &h->entry);
  const c128_status st =
      mirror_down(&m, e->decode(&d, m.stream), h->state, h->output, &h->state_layout, h->output_index);
  entry_down(&d.entry, &h->entry);
  return st;
}

/* run_decode for prefill: the args struct differs, and so do its plan arrays (two). */
c128_status run_prefill(const instance_entry *e, backend be, const c128_prefill_args *h, int reverse) {
  if (be == BACKEND_CPU) {
    char msg[256];
    const c128_host_options o = cpu_options(reverse, msg, sizeof msg);
    const c128_status st = e->prefill_host(h, &o);
    cr_expect_neq(st, C128_ERROR_RACE_DETECTED, "%s", msg);
    return st;
  }
  mirror m = mirror_up(e, h->state, h->state_pages, h->input, h->input_rows, h->ape, h->output, h->output_rows,
                       &h->state_layout, h->output_index, h->output_index ? h->input_rows : 0);
  m.plans[0] = to_device(h->compress_plans, (size_t)h->num_compress * sizeof(c128_compress_plan));
  m.plans[1] = to_device(h->write_plans, (size_t)h->num_write * sizeof(c128_write_plan));
  m.plans[2] = to_device(h->write_slots, (size_t)h->num_write * sizeof(int64_t));
  m.plans[3] = to_device(h->write_positions, (size_t)h->num_write * sizeof(int64_t));
  c128_prefill_args d = *h;
  d.state = m.state, d.output = m.output, d.input = m.input, d.ape = m.ape;
  d.compress_plans = m.plans[0], d.write_plans = m.plans[1];
  d.write_slots = (const int64_t *)m.plans[2], d.write_positions = (const int64_t *)m.plans[3];
  d.state_layout = m.layout, d.output_index = m.index;
  d.entry = entry_up(e, &h->entry);
  const c128_status st =
      mirror_down(&m, e->prefill(&d, m.stream), h->state, h->output, &h->state_layout, h->output_index);
  entry_down(&d.entry, &h->entry);
  return st;
}

void *device_upload(device_buffer *b, const void *host, size_t bytes) {
  if (bytes > b->bytes) {
    if (b->ptr) CUDA_OK(cudaFree(b->ptr));
    b->ptr = NULL;
    CUDA_OK(cudaMalloc(&b->ptr, bytes));
    b->bytes = bytes;
  }
  if (bytes) CUDA_OK(cudaMemcpy(b->ptr, host, bytes, cudaMemcpyHostToDevice));
  return b->ptr;
}

void device_download(const device_buffer *b, void *host, size_t bytes) {
  cr_assert(bytes <= b->bytes, "download of %zu bytes from a buffer of %zu", bytes, b->bytes);
  if (bytes) CUDA_OK(cudaMemcpy(host, b->ptr, bytes, cudaMemcpyDeviceToHost));
}

void device_release(device_buffer *b) {
  if (b->ptr) cudaFree(b->ptr);
  b->ptr = NULL;
  b->bytes = 0;
}

void check_output_row(const void *out, size_t row, c128_dtype out_dtype, const double *ref, int head_dim,
                      const char *what, uint64_t seed) {
  char why[256];
  const size_t es = dtype_size(out_dtype);
  const int bad = ref_check_row(head_dim, (const char *)out + row * (size_t)head_dim * es, out_dtype == C128_BF16, ref,
                                NULL, why, sizeof why);
  cr_assert(!bad, "%s: %s (seed %llu)", what, why, (unsigned long long)seed);
}

void check_rows_equal(const void *got, const void *want, size_t rows, size_t row_bytes_, const char *what,
                      uint64_t seed) {
  for (size_t r = 0; r < rows; ++r)
    cr_assert(memcmp((const char *)got + r * row_bytes_, (const char *)want + r * row_bytes_, row_bytes_) == 0,
              "%s row %zu differs from what was expected (seed %llu)", what, r, (unsigned long long)seed);
}

double max_abs_kv(const void *base, size_t rows, int head_dim, c128_dtype dtype) {
  double m = 0.0;
  for (size_t r = 0; r < rows; ++r)
    for (int c = 0; c < head_dim; ++c) {
      const double v = fabs((double)elem_get(base, r * 2 * (size_t)head_dim + (size_t)c, dtype));
      if (v > m) m = v;
    }
  return m;
}

void check_gpu_output(const void *gpu, const void *cpu, size_t rows, c128_dtype out_dtype, int head_dim, double max_kv,
                      const char *what, uint64_t seed) {
  c128_build_info b;
  cr_assert_eq(c128_build_info_get(&b), C128_SUCCESS);
  const size_t es = dtype_size(out_dtype);
  if (b.math == C128_MATH_EXACT) {
    check_rows_equal(gpu, cpu, rows, (size_t)head_dim * es, what, seed);
    return;
  }
  const double bound = C128_FAST_BOUND * (1.0 + max_kv);
  for (size_t i = 0; i < rows * (size_t)head_dim; ++i) {
    const double g = elem_get(gpu, i, out_dtype), h = elem_get(cpu, i, out_dtype);
    if (isnan(g) || isnan(h)) {
      cr_assert(isnan(g) && isnan(h), "%s: row %zu channel %zu: GPU %g, host %g (seed %llu)", what, i / head_dim,
                i % head_dim, g, h, (unsigned long long)seed);
      continue;
    }
    if (isinf(g) || isinf(h)) {
      cr_assert(g == h, "%s: row %zu channel %zu: GPU %g, host %g (seed %llu)", what, i / head_dim, i % head_dim, g, h,
                (unsigned long long)seed);
      continue;
    }
    const double allowed = bound + (out_dtype == C128_BF16 ? ref_bf16_ulp(h) : 0.0);
    cr_assert(fabs(g - h) <= allowed, "%s: row %zu channel %zu: GPU %.9g, host %.9g, |diff| %.3g > %.3g (seed %llu)",
              what, i / head_dim, i % head_dim, g, h, fabs(g - h), allowed, (unsigned long long)seed);
  }
}
