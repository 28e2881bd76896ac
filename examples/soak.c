/* soak: examples/serve's serving simulation with injected faults.

   The workload is serve's: `live` requests on a speculative request ring (R = 256, pool row =
   slot), chunked prefill, decode and speculative verify steps with random acceptance and
   rollback, requests that leave and are replaced; every compressed window of a clean step is
   checked against the fp64 oracle over the request's committed tokens (ref/reference.h).

   In a given fraction of steps one fault is injected before a call:
   - plan bytes: fields of 1..3 random plans of the batch made invalid (a page outside the
     state, an input row past the batch, buffer_len > 127, a window starting before row 0, a
     negative write slot) or turned into sentinels / padding rows. The checker must name the
     first bad one; the launch must run and skip exactly those (a SPEC 6.5 model below says what
     runs): every state row outside the rows the remaining plans write is unchanged, every row
     they write is its input row, the outputs of skipped plans are untouched (poisoned before)
     and those of the others equal the clean run's, bit for bit;
   - requests: one request of the batch made bad (negative or huge lengths, extend past seq,
     a pool index outside the pool, too many drafts, another request's pool index); the host
     planner, or the device planner, must refuse it with the status a model predicts (or accept
     it where the model says the batch is fine), writing nothing (the device planner: sentinels
     and zero counts). The device planner's refusals are timed (GPU: CUDA events around the
     call; CPU: the host path's wall time);
   - sizes: one size field of the launch (num_compress, num_write, batch, input_rows,
     output_rows, state_pages, head_dim, dtype, layout, group) at 0, -1, INT32_MAX, INT64_MAX or
     just past its limit: the status the launch's rules give, the same from the plan checker;
     a call that is accepted runs what the model says and nothing else;
   - aliasing: a written tensor placed over another argument: C128_ERROR_ALIASED, nothing written.
   After a faulty step the state is restored from a snapshot and the step runs clean, so the
   simulation never carries a fault forward. A watchdog (SIGALRM) fails the run if one step takes
   longer than a limit: nothing may hang.

   soak [--cpu | --gpu] [--seconds S] [--corrupt FRACTION] [--seed N]
   --gpu: the CUDA kernels (head_dim 512, 32 requests; exit 77 without a GPU), buffers moved
   with cudaMemcpy; --cpu: the host runner (head_dim 128, 8 requests). Defaults: the GPU when
   present, 60 s, 0.25. Prints a summary; exit status 0 iff every check held. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../ref/reference.h"
#include "c128.cuh"

enum { W = C128_WINDOW, RING = 256, MAX_DRAFTS = RING - W + 2, MAX_LIVE = 32, MAX_ROWS = MAX_LIVE * MAX_DRAFTS };
enum { PREFILL, DECODE, VERIFY, KINDS };
enum { F_NONE, F_PLANS, F_REQUESTS, F_DEVICE_REQUESTS, F_SIZES, F_ALIAS, FAULTS };
static const char *const fault_name[FAULTS] = {
    "none", "plan bytes", "requests (host planner)", "requests (device planner)", "sizes", "aliasing"};

#define CUDA(call)                                                                                 \
  do {                                                                                             \
    const cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess) {                                                                       \
      fprintf(stderr, "soak: %s failed: %s (line %d)\n", #call, cudaGetErrorString(e_), __LINE__); \
      exit(2);                                                                                     \
    }                                                                                              \
  } while (0)

/* ---- the run's state ------------------------------------------------------------------------ */
static uint64_t rng_state;       /* splitmix64 and make_row as in serve.c: each example stands alone */
static uint64_t next_u64(void) { /* splitmix64 */
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static int uniform(int lo, int hi) { return lo + (int)(next_u64() % (uint64_t)(hi - lo + 1)); }
static double unit(void) { return (double)(next_u64() >> 11) * 0x1.0p-53; }
static void make_row(float *row, int head_dim) {
  for (int c = 0; c < 2 * head_dim; ++c) {
    const float u = ((float)(next_u64() >> 40) + 0.5f) / (float)(1 << 24) - 0.5f;
    row[c] = (c < head_dim ? 2.0f : 8.0f) * u;
  }
}
static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct request {
  int64_t len;
  int prompt_left;
  int64_t target;
  float *window;
} request;

typedef struct sim {
  int D, live, gpu;
  double corrupt_fraction;
  c128_ring ring;
  request req[MAX_LIVE];
  size_t state_bytes, out_bytes, row_bytes;
  /* host data */
  float *ape, *input, *h_out, *h_out_faulty, *h_state, *h_snap;
  c128_compress_plan *compress, *compress2;
  c128_write_plan *write, *write2;
  c128_decode_plan decode[MAX_LIVE], decode2[MAX_LIVE];
  /* where the kernels run: device memory with --gpu, the host buffers' twins otherwise */
  void *state, *snap, *in, *out, *plans_a, *plans_b;
  float *ape_k;
  /* device planner: requests, workspace, status, counts, plan outputs (device or host) */
  c128_request *k_requests;
  void *k_ws;
  int32_t *k_status;
  int64_t *k_counts;
  c128_compress_plan *k_compress;
  c128_write_plan *k_write;
  c128_decode_plan *k_decode;
  cudaEvent_t ev[2];
  /* results */
  int64_t steps, windows, emitted_rows, committed, finished;
  int64_t steps_of[KINDS], faults[FAULTS], refusals[32], accepted_faults, skipped_plans, checker_named;
  int64_t device_planned, mismatches;
  double max_rel, max_abs;
  double *refusal_ms;
  int64_t refusal_n, refusal_cap;
} sim;

static sim S;
static int64_t step_now;
static unsigned watchdog_s;

__attribute__((format(printf, 1, 2))) static void fail(const char *fmt, ...) {
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  fprintf(stderr, "soak: MISMATCH at step %lld: %s\n", (long long)step_now, what);
  if (++S.mismatches >= 20) {
    fprintf(stderr, "soak: too many mismatches, stopping\n");
    exit(1);
  }
}
#define EXPECT(cond, ...)           \
  do {                              \
    if (!(cond)) fail(__VA_ARGS__); \
  } while (0)

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "soak: WATCHDOG: a step exceeded its time limit (a hang?)\n";
  if (write(2, msg, sizeof msg - 1) < 0) {
  }
  _exit(3);
}

/* ---- buffers where the kernels run -------------------------------------------------------- */
static void put(void *dst, const void *src, size_t n) {
  if (!n) return;
  if (S.gpu) CUDA(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice));
  else memmove(dst, src, n);
}
static void get(void *dst, const void *src, size_t n) {
  if (!n) return;
  if (S.gpu) CUDA(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost));
  else memmove(dst, src, n);
}
static void copy(void *dst, const void *src, size_t n) {
  if (!n) return;
  if (S.gpu) CUDA(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToDevice));
  else memmove(dst, src, n);
}
static void fill(void *dst, int byte, size_t n) {
  if (S.gpu) CUDA(cudaMemset(dst, byte, n));
  else memset(dst, byte, n);
}
static void *alloc_k(size_t n) {
  void *p = NULL;
  if (S.gpu) CUDA(cudaMalloc(&p, n ? n : 16));
  else p = aligned_alloc(64, (n + 63) / 64 * 64 + 64);
  if (!p) {
    fprintf(stderr, "soak: out of memory\n");
    exit(2);
  }
  return p;
}
static void *alloc_h(size_t n) {
  void *p = aligned_alloc(64, (n + 63) / 64 * 64 + 64);
  if (!p) {
    fprintf(stderr, "soak: out of memory\n");
    exit(2);
  }
  return p;
}
static c128_status run_decode(const c128_decode_args *a) {
  if (!S.gpu) return c128_decode_host(a, NULL);
  const c128_status st = c128_decode(a, 0);
  CUDA(cudaDeviceSynchronize());
  CUDA(cudaGetLastError());
  return st;
}
static c128_status run_prefill(const c128_prefill_args *a) {
  if (!S.gpu) return c128_prefill_host(a, NULL);
  const c128_status st = c128_prefill(a, 0);
  CUDA(cudaDeviceSynchronize());
  CUDA(cudaGetLastError());
  return st;
}

/* ---- SPEC 6.5, written out again: which plans run, what they write ------------------------ */
typedef struct sizes {
  int64_t pages, input_rows, output_rows;
} sizes;
static int page_ok(const sizes *z, int64_t page) { return page >= 0 && page < z->pages; }
/* 1: runs; 0: padding / sentinel; -1: skipped as bad. */
static int decode_runs(const sizes *z, int64_t b, c128_decode_plan p) {
  if (p.seq_len == 0 || p.write_loc < 0) return 0;
  if (b >= z->input_rows || !page_ok(z, p.write_loc / W)) return -1;
  if (p.write_loc % W == W - 1 && (!page_ok(z, p.read_page_1) || b >= z->output_rows)) return -1;
  return 1;
}
static int compress_runs(const sizes *z, int64_t k, c128_compress_plan p) {
  if (p.seq_len == C128_INVALID_ID) return 0;
  if (p.buffer_len > W - 1 || k >= z->output_rows || p.ragged_id >= z->input_rows) return -1;
  if ((int64_t)p.ragged_id - (W - 1) + p.buffer_len < 0) return -1;
  if (p.buffer_len > 0 && !page_ok(z, p.read_page_1)) return -1;
  return 1;
}
static int write_runs(const sizes *z, c128_write_plan p) {
  if (p.ragged_id == C128_INVALID_ID) return 0;
  if (p.ragged_id >= z->input_rows || p.write_loc < 0 || !page_ok(z, p.write_loc / W)) return -1;
  return 1;
}

/* After a launch: the state differs from the snapshot exactly in the rows the running plans write
   (each its input row), outputs of plans that did not run are still poison. `rows[i]` -> `src[i]`. */
static void check_effects(const float *state, const float *snap, const int64_t *rows, const int64_t *src, int64_t n,
                          const float *out, int64_t out_rows, const unsigned char *out_written, const char *what) {
  const int64_t R = (int64_t)S.state_bytes / (int64_t)S.row_bytes;
  const size_t rf = S.row_bytes / sizeof(float);
  unsigned char *mark = calloc((size_t)R, 1);
  for (int64_t i = 0; i < n; ++i) {
    if (rows[i] < 0 || rows[i] >= R) {
      fail("%s: the model wrote row %lld outside the state", what, (long long)rows[i]);
      continue;
    }
    mark[rows[i]] = 1;
    EXPECT(memcmp(state + (size_t)rows[i] * rf, S.input + (size_t)src[i] * rf, S.row_bytes) == 0,
           "%s: state row %lld is not input row %lld", what, (long long)rows[i], (long long)src[i]);
  }
  int64_t stray = 0;
  for (int64_t r = 0; r < R; ++r)
    if (!mark[r] && memcmp(state + (size_t)r * rf, snap + (size_t)r * rf, S.row_bytes) != 0) ++stray;
  EXPECT(stray == 0, "%s: %lld state rows changed that no running plan writes", what, (long long)stray);
  free(mark);
  const size_t of = (size_t)S.D;
  uint32_t poison_word;
  memset(&poison_word, 0xFF, 4);
  for (int64_t r = 0; r < out_rows; ++r) {
    if (out_written && out_written[r]) continue;
    int touched = 0;
    for (size_t c = 0; c < of && !touched; ++c) touched = memcmp(&out[(size_t)r * of + c], &poison_word, 4) != 0;
    EXPECT(!touched, "%s: output row %lld written, but its plan did not run", what, (long long)r);
  }
}

/* ---- checking windows (serve's) -------------------------------------------------------------- */
static void check_window(const request *q, const float *out) {
  const int D = S.D;
  const float *rows[W];
  double ref[1024], max_abs;
  for (int j = 0; j < W; ++j) rows[j] = q->window + (size_t)j * 2 * (size_t)D;
  ref_window(D, rows, S.ape, ref);
  const double rel = ref_rel_l2(D, out, ref, &max_abs);
  if (!(rel <= S.max_rel)) S.max_rel = rel;
  if (!(max_abs <= S.max_abs)) S.max_abs = max_abs;
  EXPECT(rel <= REF_TOL_REL_L2 && max_abs <= REF_TOL_MAX_ABS,
         "window: relative L2 %.3g, max abs %.3g against the fp64 oracle", rel, max_abs);
  S.windows++;
}
static void commit(int i, int64_t base, int count, const int64_t *ends, int64_t nends) {
  request *q = &S.req[i];
  const int D = S.D;
  for (int j = 0; j < count; ++j, ++q->len) {
    memcpy(q->window + (size_t)(q->len % W) * 2 * (size_t)D, S.input + (size_t)(base + j) * 2 * (size_t)D,
           2 * (size_t)D * sizeof(float));
    if (q->len % W != W - 1) continue;
    int64_t k = -1;
    for (int64_t e = 0; e < nends; e += 2)
      if (ends[e] == q->len) k = ends[e + 1];
    if (k < 0) {
      fail("request on pool row %d: window ending at %lld was not compressed", i, (long long)q->len);
      continue;
    }
    check_window(q, S.h_out + (size_t)k * (size_t)D);
  }
  S.committed += count;
}
static void new_request(int i) {
  request *q = &S.req[i];
  q->len = 0;
  q->prompt_left = uniform(1, uniform(0, 3) ? 600 : 2000);
  q->target = q->prompt_left + uniform(1, 500);
}

/* ---- the request model (SPEC 5): the status a planner gives a batch ------------------------- */
/* Written again from SPEC 5 (as fuzz/planner.h does): the soak checks the planners against it. */
static int64_t first_write(int64_t seq) { /* speculative ring: pad R - 126 */
  const int64_t pad = RING - W + 2, boundary = seq / W * W;
  return boundary < seq - pad ? boundary : seq - pad;
}
/* The ring chunks (pages pool * 2 + chunk) request q writes: bit c. */
static int written_chunks(c128_request q, int decode) {
  if (decode) return q.seq_len > 0 ? 1 << (int)(((int64_t)q.seq_len - 1) % RING / W) : 0;
  if ((q.seq_len == 0 && q.extend_len == 0) || q.extend_len > q.seq_len || q.extend_len < 0) return 0;
  const int64_t prefix = (int64_t)q.seq_len - q.extend_len, fw0 = first_write(q.seq_len),
                fw = fw0 > prefix ? fw0 : prefix;
  int bits = 0;
  for (int64_t p = fw; p < q.seq_len; ++p) bits |= 1 << (int)(p % RING / W);
  return bits;
}
static c128_status predict_plan(const c128_request *q, int64_t n, int decode, int verify, int64_t capacity) {
  const int64_t pools = S.ring.state_pages / (RING / W);
  int64_t rows = 0, nc = 0, nw = 0;
  for (int64_t k = 0; k < n; ++k) {
    const c128_request x = q[k];
    if (decode) {
      if (x.seq_len < 0) return C128_ERROR_NEGATIVE_SIZE;
      if (x.seq_len == 0) continue;
      if (x.pool_index < 0 || x.pool_index >= pools) return C128_ERROR_POOL_INDEX_OUT_OF_RANGE;
      continue;
    }
    if (x.seq_len == 0 && x.extend_len == 0) continue;
    if (x.seq_len < 0 || x.extend_len < 0) return C128_ERROR_NEGATIVE_SIZE;
    if (x.extend_len == 0) return C128_ERROR_EMPTY_EXTEND;
    if (x.extend_len > x.seq_len) return C128_ERROR_EXTEND_EXCEEDS_SEQ;
    if (x.extend_len > C128_MAX_PREFILL_ROWS) return C128_ERROR_TOO_MANY_ROWS;
    if (verify && x.extend_len > MAX_DRAFTS) return C128_ERROR_TOO_MANY_DRAFTS;
    if (rows + x.extend_len > C128_MAX_PREFILL_ROWS) return C128_ERROR_TOO_MANY_ROWS;
    if (x.pool_index < 0 || x.pool_index >= pools) return C128_ERROR_POOL_INDEX_OUT_OF_RANGE;
    const int64_t prefix = (int64_t)x.seq_len - x.extend_len, fw0 = first_write(x.seq_len);
    nc += x.seq_len / W - prefix / W, nw += x.seq_len - (fw0 > prefix ? fw0 : prefix), rows += x.extend_len;
  }
  if (!decode && (nc > capacity || nw > capacity)) return C128_ERROR_CAPACITY_TOO_SMALL;
  for (int64_t a = 0; a < n; ++a)
    for (int64_t b = a + 1; b < n; ++b)
      if (q[a].pool_index == q[b].pool_index && (written_chunks(q[a], decode) & written_chunks(q[b], decode)))
        return C128_ERROR_PAGE_SHARED;
  return C128_SUCCESS;
}

/* One bad request in a copy of the batch, and the status the planner must give it. */
static c128_status corrupt_requests(c128_request *q, int64_t n, int decode, int verify, int64_t capacity,
                                    const char **what) {
  const int64_t k = (int64_t)(next_u64() % (uint64_t)n);
  const int64_t pools = S.ring.state_pages / (RING / W);
  switch (uniform(0, decode ? 3 : 8)) {
  case 0:
    q[k].seq_len = -1 - uniform(0, 1000), *what = "negative seq_len";
    break;
  case 1:
    q[k].pool_index = uniform(0, 1) ? -1 - uniform(0, 5) : INT32_MIN, *what = "negative pool index";
    break;
  case 2:
    q[k].pool_index = (int32_t)pools + uniform(0, 3), *what = "pool index past the pool";
    break;
  case 3:
    if (n >= 2) q[k].pool_index = q[(k + 1 + (int64_t)(next_u64() % (uint64_t)(n - 1))) % n].pool_index;
    *what = "another request's pool index";
    break;
  case 4:
    q[k].extend_len = -1 - uniform(0, 100), *what = "negative extend_len";
    break;
  case 5:
    q[k].extend_len = q[k].seq_len + 1 + uniform(0, 3), *what = "extend_len past seq_len";
    break;
  case 6:
    q[k].extend_len = q[k].seq_len = uniform(0, 1) ? INT32_MAX : C128_MAX_PREFILL_ROWS + uniform(1, 1000),
    *what = "huge extend";
    break;
  case 7:
    q[k].extend_len = 0, *what = "extend_len 0";
    break;
  default:
    if (verify)
      q[k].extend_len = MAX_DRAFTS + uniform(1, 100), q[k].seq_len += q[k].extend_len, *what = "too many drafts";
    else q[k].seq_len = q[k].extend_len = 0, *what = "absent request";
    break;
  }
  return predict_plan(q, n, decode, verify, capacity);
}

/* The device planner over `q` on the run's backend: its status (returned or in *status), the
   call's time, and whether it wrote only sentinels and zero counts on a refusal. */
static c128_status device_plan(const c128_request *q, int64_t n, int decode, int verify, int64_t capacity, double *ms,
                               int64_t counts_out[2]) {
  put(S.k_requests, q, (size_t)n * sizeof *q);
  c128_device_plan_args a;
  memset(&a, 0, sizeof a);
  a.ring = S.ring, a.requests = S.k_requests, a.num_requests = n, a.verify = verify;
  a.compress = S.k_compress, a.write = S.k_write, a.capacity = decode ? 0 : capacity, a.decode = S.k_decode;
  a.counts = S.k_counts, a.status = S.k_status, a.workspace = S.k_ws;
  c128_status ret;
  if (S.gpu) {
    CUDA(cudaEventRecord(S.ev[0], 0));
    ret = decode ? c128_plan_decode_device(&a, 0) : c128_plan_prefill_device(&a, 0);
    CUDA(cudaEventRecord(S.ev[1], 0));
    CUDA(cudaEventSynchronize(S.ev[1]));
    float f = 0.0f;
    CUDA(cudaEventElapsedTime(&f, S.ev[0], S.ev[1]));
    *ms = f;
  } else {
    const double t = now_s();
    ret = decode ? c128_plan_decode_device_host(&a) : c128_plan_prefill_device_host(&a);
    *ms = 1e3 * (now_s() - t);
  }
  int32_t status;
  get(&status, S.k_status, sizeof status);
  get(counts_out, S.k_counts, 2 * sizeof(int64_t));
  if (ret != C128_SUCCESS)
    EXPECT(status == (int32_t)ret, "device planner returned %s, *status %d", c128_status_string(ret), status);
  return ret != C128_SUCCESS ? ret : (c128_status)status;
}

static void record_refusal(c128_status st) { S.refusals[(unsigned)st % 32]++; }
static void record_time(double ms) {
  if (S.refusal_n == S.refusal_cap) {
    S.refusal_cap = S.refusal_cap ? 2 * S.refusal_cap : 1024;
    S.refusal_ms = realloc(S.refusal_ms, (size_t)S.refusal_cap * sizeof *S.refusal_ms);
  }
  S.refusal_ms[S.refusal_n++] = ms;
}

/* ---- faults in the launch ---------------------------------------------------------------------- */
/* Makes plan `k` of a kind bad (the kernel must skip it) or a sentinel; 1 when bad. */
static int spoil_compress(c128_compress_plan *p, const sizes *z) {
  switch (uniform(0, 5)) {
  case 0:
    p->ragged_id = (uint16_t)(z->input_rows + uniform(0, 65535 - (int)z->input_rows));
    return 1;
  case 1:
    p->buffer_len = (uint16_t)uniform(128, 65535);
    return 1;
  case 2:
    p->ragged_id = (uint16_t)uniform(0, 126), p->buffer_len = 0;
    return 1; /* the window starts before row 0 */
  case 3:
    p->buffer_len = (uint16_t)uniform(1, 127),
    p->read_page_1 = uniform(0, 1) ? -1 - uniform(0, 9) : (int32_t)z->pages + uniform(0, 99);
    if ((int64_t)p->ragged_id - (W - 1) + p->buffer_len < 0) p->ragged_id = (uint16_t)(W - 1 - p->buffer_len);
    return 1;
  case 4:
    p->read_page_1 = INT32_MIN, p->buffer_len = 127, p->ragged_id = 0;
    return 1;
  default: {
    const c128_compress_plan no = C128_INVALID_COMPRESS_PLAN;
    *p = no;
    return 0;
  }
  }
}
static int spoil_write(c128_write_plan *p, const sizes *z) {
  switch (uniform(0, 4)) {
  case 0:
    p->ragged_id = (uint32_t)z->input_rows + (uint32_t)uniform(0, 1000000);
    return 1;
  case 1:
    p->write_loc = -1 - uniform(0, 1000);
    return 1;
  case 2:
    p->write_loc = (int32_t)(z->pages * W) + uniform(0, 10000);
    return 1;
  case 3:
    p->write_loc = INT32_MIN;
    return 1;
  default: {
    const c128_write_plan no = C128_INVALID_WRITE_PLAN;
    *p = no;
    return 0;
  }
  }
}
static int spoil_decode(c128_decode_plan *p, const sizes *z) {
  switch (uniform(0, 3)) {
  case 0:
    p->write_loc = (int32_t)(z->pages * W) + uniform(0, 10000);
    return 1;
  case 1: /* a boundary reading outside the state */
    p->write_loc = p->write_loc / W * W + W - 1,
    p->read_page_1 = uniform(0, 1) ? -1 : (int32_t)z->pages + uniform(0, 9);
    return 1;
  case 2:
    p->write_loc = -1 - uniform(0, 1000);
    return 0; /* a padding row */
  default:
    p->seq_len = 0;
    return 0;
  }
}

typedef struct launch {
  int decode;
  c128_decode_args d;
  c128_prefill_args p;
  const c128_decode_plan *dplans; /* host copies of the plans the launch reads */
  const c128_compress_plan *cplans;
  const c128_write_plan *wplans;
} launch;

/* Runs a launch with a fault, checks its status, its effects, and the checker; restores the state. */
static void faulty_launch(launch *l, c128_status want, const char *what, int bad_kind, int64_t bad_first,
                          int64_t skipped) {
  copy(S.snap, S.state, S.state_bytes);
  fill(S.out, 0xFF, S.out_bytes);
  const c128_status st = l->decode ? run_decode(&l->d) : run_prefill(&l->p);
  EXPECT(st == want, "%s: launch %s, expected %s", what, c128_status_string(st), c128_status_string(want));
  /* the checker over the same arguments and the host copies of the plans */
  c128_plan_report rep = {0, C128_PLAN_DECODE, NULL, 0};
  c128_status cst;
  if (l->decode) {
    c128_decode_args c = l->d;
    c.plans = l->dplans;
    cst = c128_check_decode_plans(&c, &rep);
  } else {
    c128_prefill_args c = l->p;
    c.compress_plans = l->cplans, c.write_plans = l->wplans;
    cst = c128_check_prefill_plans(&c, &rep);
  }
  if (cst != C128_SUCCESS && cst != C128_ERROR_INVALID_PLAN)
    EXPECT(cst == st, "%s: checker %s, launch %s", what, c128_status_string(cst), c128_status_string(st));
  else
    EXPECT(st == C128_SUCCESS || st == C128_ERROR_ALIASED, "%s: the checker accepts the arguments, the launch gives %s",
           what, c128_status_string(st));
  if (bad_kind >= 0) {
    EXPECT(cst == C128_ERROR_INVALID_PLAN && (int)rep.kind == bad_kind && rep.index == bad_first,
           "%s: checker %s names %d/%lld, the first bad plan is %d/%lld", what, c128_status_string(cst), (int)rep.kind,
           (long long)rep.index, bad_kind, (long long)bad_first);
    S.checker_named += cst == C128_ERROR_INVALID_PLAN;
  }
  if (st != C128_SUCCESS) record_refusal(st);
  else S.accepted_faults++;
  /* effects: what the plans that run under these sizes write, nothing else */
  get(S.h_state, S.state, S.state_bytes);
  get(S.h_snap, S.snap, S.state_bytes);
  get(S.h_out_faulty, S.out, S.out_bytes);
  const int64_t n = st != C128_SUCCESS ? 0 : l->decode ? l->d.batch : l->p.num_write; /* accepted: within limits */
  int64_t *rows = malloc((size_t)(n > 0 ? n : 1) * sizeof *rows), *src = malloc((size_t)(n > 0 ? n : 1) * sizeof *src);
  const int64_t out_rows = (int64_t)(S.out_bytes / ((size_t)S.D * sizeof(float)));
  unsigned char *written = calloc((size_t)out_rows + 1, 1);
  int64_t m = 0;
  if (st == C128_SUCCESS) {
    if (l->decode) {
      const sizes z = {l->d.state_pages, l->d.batch, l->d.output_rows};
      for (int64_t b = 0; b < l->d.batch; ++b)
        if (decode_runs(&z, b, l->dplans[b]) == 1) {
          rows[m] = l->dplans[b].write_loc, src[m++] = b;
          if (l->dplans[b].write_loc % W == W - 1) written[b] = 1;
        }
    } else {
      const sizes z = {l->p.state_pages, l->p.input_rows, l->p.output_rows};
      for (int64_t k = 0; k < l->p.num_compress; ++k)
        if (k < out_rows && compress_runs(&z, k, l->cplans[k]) == 1) written[k] = 1;
      for (int64_t k = 0; k < l->p.num_write; ++k)
        if (write_runs(&z, l->wplans[k]) == 1) rows[m] = l->wplans[k].write_loc, src[m++] = l->wplans[k].ragged_id;
    }
  }
  check_effects(S.h_state, S.h_snap, rows, src, m, S.h_out_faulty, out_rows, written, what);
  S.skipped_plans += skipped;
  free(rows), free(src), free(written);
  copy(S.state, S.snap, S.state_bytes); /* as before the fault */
}

/* ---- one step -------------------------------------------------------------------------------- */
static void step(void) {
  const int D = S.D;
  int kind = DECODE, order[MAX_LIVE] = {0}, n = 0;
  for (int i = 0; i < S.live; ++i) order[i] = i;
  for (int i = S.live - 1; i > 0; --i) {
    const int j = uniform(0, i), t = order[i];
    order[i] = order[j], order[j] = t;
  }
  int waiting = 0;
  for (int i = 0; i < S.live; ++i) waiting += S.req[i].prompt_left > 0;
  if (waiting == S.live || 4 * waiting >= S.live || (waiting && S.steps % 4 == 0)) kind = PREFILL;
  else if (uniform(0, 1)) kind = VERIFY;
  c128_request batch[MAX_LIVE];
  int member[MAX_LIVE], accept[MAX_LIVE];
  int64_t rows = 0, budget = S.gpu ? 4096 : 1024;
  for (int k = 0; k < S.live; ++k) {
    const int i = order[k];
    request *q = &S.req[i];
    int extend;
    if (kind == PREFILL) {
      if (q->prompt_left == 0 || budget == 0) continue;
      extend = uniform(1, q->prompt_left < 1024 ? q->prompt_left : 1024);
      if (extend > budget) extend = (int)budget;
      accept[n] = extend;
    } else if (q->prompt_left > 0) {
      continue;
    } else if (kind == VERIFY) {
      extend = uniform(1, uniform(0, 3) ? 6 : MAX_DRAFTS);
      accept[n] = uniform(0, 3) == 0 ? extend : uniform(1, extend);
    } else {
      extend = accept[n] = 1;
    }
    batch[n].pool_index = i, batch[n].seq_len = (int32_t)(q->len + extend), batch[n].extend_len = extend;
    member[n++] = i;
    for (int r = 0; r < extend; ++r) make_row(S.input + (size_t)(rows + r) * 2 * (size_t)D, D);
    rows += extend, budget -= extend;
  }
  if (n == 0) return;
  const int decode = kind == DECODE, verify = kind == VERIFY;
  const int fault = unit() < S.corrupt_fraction ? uniform(F_PLANS, FAULTS - 1) : F_NONE;
  S.faults[fault]++;

  /* faults in the requests: a planner call on a spoiled copy */
  if (fault == F_REQUESTS || fault == F_DEVICE_REQUESTS) {
    c128_request bad[MAX_LIVE];
    memcpy(bad, batch, sizeof batch);
    const char *what = "";
    const c128_status want = corrupt_requests(bad, n, decode, verify, rows, &what);
    c128_status st;
    if (fault == F_REQUESTS) {
      memset(S.compress2, 0xCD, (size_t)MAX_ROWS * sizeof *S.compress2);
      memset(S.write2, 0xCD, (size_t)MAX_ROWS * sizeof *S.write2);
      memset(S.decode2, 0xCD, sizeof S.decode2);
      c128_prefill_plans p = {S.compress2, S.write2, rows, 0, -7, -7};
      st = decode ? c128_plan_decode(&S.ring, bad, n, S.decode2) : c128_plan_prefill(&S.ring, bad, n, verify, &p);
      if (st != C128_SUCCESS) {
        int untouched = p.num_compress == -7 && p.num_write == -7;
        for (size_t k = 0; k < (size_t)MAX_ROWS * sizeof *S.compress2 && untouched; ++k)
          untouched = ((unsigned char *)S.compress2)[k] == 0xCD && ((unsigned char *)S.write2)[k / 2] == 0xCD;
        for (size_t k = 0; k < sizeof S.decode2 && untouched; ++k) untouched = ((unsigned char *)S.decode2)[k] == 0xCD;
        EXPECT(untouched, "host planner refused (%s) but wrote", c128_status_string(st));
      }
    } else {
      double ms = 0.0;
      int64_t counts[2];
      st = device_plan(bad, n, decode, verify, rows, &ms, counts);
      if (st != C128_SUCCESS) {
        record_time(ms);
        EXPECT(decode || (counts[0] == 0 && counts[1] == 0), "device planner refused with counts %lld/%lld",
               (long long)counts[0], (long long)counts[1]);
        if (decode) {
          get(S.decode2, S.k_decode, (size_t)n * sizeof *S.decode2);
          for (int b = 0; b < n; ++b)
            EXPECT(S.decode2[b].seq_len == 0 && S.decode2[b].write_loc == -1,
                   "refused device decode plan %d is not padding", b);
        } else {
          get(S.compress2, S.k_compress, (size_t)rows * sizeof *S.compress2);
          get(S.write2, S.k_write, (size_t)rows * sizeof *S.write2);
          for (int64_t k = 0; k < rows; ++k)
            EXPECT(S.compress2[k].seq_len == C128_INVALID_ID && S.write2[k].ragged_id == C128_INVALID_ID,
                   "refused device plan slot %lld is not a sentinel", (long long)k);
        }
      }
    }
    EXPECT(st == want, "%s planner, %s: %s, the model expects %s", fault == F_REQUESTS ? "host" : "device", what,
           c128_status_string(st), c128_status_string(want));
    if (st != C128_SUCCESS) record_refusal(st);
    else S.accepted_faults++;
  }

  /* plan the batch: the host planner, or in a quarter of the steps the device planner (whose
     bytes and status must be the host planner's) */
  c128_prefill_plans plans = {0};
  c128_status st;
  if (decode) st = c128_plan_decode(&S.ring, batch, n, S.decode);
  else {
    plans.compress = S.compress, plans.write = S.write, plans.capacity = rows, plans.pad_to_capacity = 1;
    st = c128_plan_prefill(&S.ring, batch, n, verify, &plans);
  }
  EXPECT(st == C128_SUCCESS, "planner: %s on a clean batch", c128_status_string(st));
  if (st != C128_SUCCESS) return;
  const int64_t nc = decode ? 0 : plans.num_compress, nw = decode ? 0 : plans.num_write;
  const int on_device_plans = uniform(0, 3) == 0;
  if (on_device_plans) {
    double ms;
    int64_t counts[2];
    const c128_status ds = device_plan(batch, n, decode, verify, rows, &ms, counts);
    EXPECT(ds == C128_SUCCESS, "device planner: %s on a clean batch", c128_status_string(ds));
    if (decode) {
      get(S.decode2, S.k_decode, (size_t)n * sizeof *S.decode2);
      EXPECT(memcmp(S.decode2, S.decode, (size_t)n * sizeof *S.decode) == 0,
             "device decode plans differ from the host's");
    } else {
      get(S.compress2, S.k_compress, (size_t)rows * sizeof *S.compress2);
      get(S.write2, S.k_write, (size_t)rows * sizeof *S.write2);
      EXPECT(counts[0] == nc && counts[1] == nw &&
                 memcmp(S.compress2, S.compress, (size_t)rows * sizeof *S.compress) == 0 &&
                 memcmp(S.write2, S.write, (size_t)rows * sizeof *S.write) == 0,
             "device prefill plans differ from the host's");
    }
    S.device_planned++;
  }

  /* the clean launch's arguments */
  put(S.in, S.input, (size_t)rows * S.row_bytes);
  launch l;
  memset(&l, 0, sizeof l);
  l.decode = decode;
  c128_decode_args *d = &l.d;
  c128_prefill_args *a = &l.p;
  d->head_dim = a->head_dim = D;
  d->state = a->state = S.state, d->state_pages = a->state_pages = S.ring.state_pages;
  d->input = a->input = S.in, d->ape = a->ape = S.ape_k, d->output = a->output = S.out;
  if (decode) {
    d->batch = d->output_rows = n;
    d->plans = on_device_plans ? S.k_decode : S.plans_a;
    if (!on_device_plans) put(S.plans_a, S.decode, (size_t)n * sizeof *S.decode);
  } else {
    a->input_rows = rows, a->output_rows = rows;
    a->compress_plans = on_device_plans ? S.k_compress : S.plans_a, a->num_compress = rows; /* padded */
    a->write_plans = on_device_plans ? S.k_write : S.plans_b, a->num_write = rows;
    if (!on_device_plans) {
      put(S.plans_a, S.compress, (size_t)rows * sizeof *S.compress);
      put(S.plans_b, S.write, (size_t)rows * sizeof *S.write);
    }
  }
  l.dplans = S.decode, l.cplans = S.compress, l.wplans = S.write;

  if (fault == F_PLANS) { /* spoil 1..3 plans (a copy on the launch's side) */
    memcpy(S.decode2, S.decode, sizeof S.decode);
    memcpy(S.compress2, S.compress, (size_t)rows * sizeof *S.compress);
    memcpy(S.write2, S.write, (size_t)rows * sizeof *S.write);
    const sizes z = {S.ring.state_pages, decode ? n : rows, decode ? n : rows};
    int bad_kind;
    int64_t bad_first, skipped;
    const int count = uniform(1, 3);
    for (int c = 0; c < count; ++c) {
      if (decode) {
        const int64_t k = (int64_t)(next_u64() % (uint64_t)n);
        if (S.decode2[k].seq_len) spoil_decode(&S.decode2[k], &z);
      } else if (nc > 0 && (nw == 0 || uniform(0, 1))) {
        const int64_t k = (int64_t)(next_u64() % (uint64_t)nc);
        if (S.compress2[k].seq_len != C128_INVALID_ID) spoil_compress(&S.compress2[k], &z);
      } else if (nw > 0) {
        const int64_t k = (int64_t)(next_u64() % (uint64_t)nw);
        if (S.write2[k].ragged_id != C128_INVALID_ID) spoil_write(&S.write2[k], &z);
      }
    }
    /* the first bad plan (compress before write) and the plans the spoiling stopped, by the model */
    bad_kind = -1, bad_first = 0, skipped = 0;
    for (int64_t k = 0; decode && k < n; ++k) {
      const int now = decode_runs(&z, k, S.decode2[k]);
      if (now == -1 && bad_kind < 0) bad_kind = C128_PLAN_DECODE, bad_first = k;
      skipped += now != 1 && decode_runs(&z, k, S.decode[k]) == 1;
    }
    for (int64_t k = 0; !decode && k < rows; ++k) {
      const int now = compress_runs(&z, k, S.compress2[k]);
      if (now == -1 && bad_kind < 0) bad_kind = C128_PLAN_COMPRESS, bad_first = k;
      skipped += now != 1 && compress_runs(&z, k, S.compress[k]) == 1;
    }
    for (int64_t k = 0; !decode && k < rows; ++k) {
      const int now = write_runs(&z, S.write2[k]);
      if (now == -1 && bad_kind < 0) bad_kind = C128_PLAN_WRITE, bad_first = k;
      skipped += now != 1 && write_runs(&z, S.write[k]) == 1;
    }
    launch f = l;
    f.dplans = S.decode2, f.cplans = S.compress2, f.wplans = S.write2;
    if (decode) put(S.plans_a, S.decode2, (size_t)n * sizeof *S.decode2), f.d.plans = S.plans_a;
    else {
      put(S.plans_a, S.compress2, (size_t)rows * sizeof *S.compress2), f.p.compress_plans = S.plans_a;
      put(S.plans_b, S.write2, (size_t)rows * sizeof *S.write2), f.p.write_plans = S.plans_b;
    }
    faulty_launch(&f, C128_SUCCESS, "spoiled plans", bad_kind, bad_first, skipped);
    if (decode)
      put(S.plans_a, S.decode, (size_t)n * sizeof *S.decode), l.d.plans = on_device_plans ? S.k_decode : S.plans_a;
    else if (!on_device_plans) {
      put(S.plans_a, S.compress, (size_t)rows * sizeof *S.compress);
      put(S.plans_b, S.write, (size_t)rows * sizeof *S.write);
    }
  } else if (fault == F_SIZES) {
    launch f = l;
    c128_status want = C128_SUCCESS;
    const char *what = "";
    const int64_t state_limit = INT64_MAX / ((int64_t)C128_PAGE_ELEMS(D) * 4), batch_limit = INT32_MAX / (D / 64);
    const int64_t edges[] = {-1, INT32_MAX, INT64_MAX, INT32_MIN, INT64_MIN};
    const int64_t e = edges[uniform(0, 4)];
    switch (uniform(0, decode ? 7 : 10)) {
    case 0:
      f.d.head_dim = f.p.head_dim = uniform(0, 1) ? D + 64 * uniform(1, 3) * (uniform(0, 1) ? 5 : 1) + 1 : -D,
      want = C128_ERROR_UNSUPPORTED_INSTANCE, what = "head_dim";
      break;
    case 1: {
      const int32_t v = uniform(0, 1) ? 7 : (int32_t)next_u64();
      memcpy(decode ? &f.d.output_dtype : &f.p.state_dtype, &v, 4);
      want = v == C128_F32 || v == C128_BF16 ? C128_SUCCESS : C128_ERROR_UNSUPPORTED_INSTANCE, what = "dtype";
      if (want == C128_SUCCESS) memcpy(decode ? &f.d.output_dtype : &f.p.state_dtype, &(int32_t){C128_F32}, 4);
      break;
    }
    case 2:
      f.d.state_pages = f.p.state_pages = uniform(0, 1) ? state_limit + uniform(1, 9) : e < 0 ? e : INT64_MAX;
      want = f.d.state_pages < 0 ? C128_ERROR_NEGATIVE_SIZE : C128_ERROR_STATE_TOO_LARGE, what = "state_pages";
      break;
    case 3:
      f.d.state_pages = f.p.state_pages = 0, what = "state_pages 0";
      break; /* every plan on the state skipped */
    case 4:
      f.d.layout.size = f.p.layout.size = uniform(0, 1) ? -1 : INT32_MIN, want = C128_ERROR_INVALID_LAYOUT,
      what = "layout.size";
      break;
    case 5:
      f.d.layout.rank = f.p.layout.rank = uniform(1, 3), want = C128_ERROR_INVALID_LAYOUT, what = "layout.rank";
      break;
    case 6: {
      const int32_t v = uniform(0, 1) ? C128_MAX_DECODE_GROUP + uniform(1, 5) : (int32_t)e; /* as stored */
      f.d.requests_per_block = f.p.windows_per_block = v;
      want = v < 0 || v > C128_MAX_DECODE_GROUP ? C128_ERROR_INVALID_GROUP : C128_SUCCESS, what = "group";
      break;
    }
    case 7:
      if (decode) {
        const int sel = uniform(0, 4);
        f.d.batch = sel == 0 ? -1 : sel == 1 ? batch_limit + 1 : sel == 2 ? INT64_MAX : sel == 3 ? 0 : batch_limit;
        f.d.output_rows = sel == 4 ? n : f.d.output_rows;
        want = sel == 0               ? C128_ERROR_NEGATIVE_SIZE
               : sel == 1 || sel == 2 ? C128_ERROR_TOO_MANY_PLANS
               : sel == 3             ? C128_SUCCESS
                                      : C128_ERROR_OUTPUT_TOO_SMALL;
        what = "batch";
      } else {
        const int sel = uniform(0, 3);
        f.p.num_compress = sel == 0 ? -1 : sel == 1 ? C128_MAX_PREFILL_ROWS + 1 : sel == 2 ? INT64_MAX : 0;
        want = sel == 0 ? C128_ERROR_NEGATIVE_SIZE : sel < 3 ? C128_ERROR_TOO_MANY_PLANS : C128_SUCCESS;
        what = "num_compress";
      }
      break;
    case 8: {
      const int sel = uniform(0, 3);
      f.p.num_write = sel == 0 ? -1 : sel == 1 ? C128_MAX_PREFILL_ROWS + 1 : sel == 2 ? INT32_MAX : 0;
      want = sel == 0 ? C128_ERROR_NEGATIVE_SIZE : sel < 3 ? C128_ERROR_TOO_MANY_PLANS : C128_SUCCESS;
      what = "num_write";
      break;
    }
    case 9: {
      const int sel = uniform(0, 3);
      f.p.input_rows = sel == 0 ? -1 : sel == 1 ? C128_MAX_PREFILL_ROWS + 1 : sel == 2 ? INT64_MAX : 0;
      want = sel == 0 ? C128_ERROR_NEGATIVE_SIZE : sel < 3 ? C128_ERROR_TOO_MANY_ROWS : C128_SUCCESS;
      what = "input_rows";
      break;
    }
    default: {
      const int sel = uniform(0, 2);
      f.p.output_rows = sel == 0 ? -1 : sel == 1 ? f.p.num_compress - 1 : INT64_MAX;
      want = sel == 0                           ? C128_ERROR_NEGATIVE_SIZE
             : sel == 1 && f.p.num_compress > 0 ? C128_ERROR_OUTPUT_TOO_SMALL
                                                : C128_SUCCESS;
      what = "output_rows";
      break;
    }
    }
    faulty_launch(&f, want, what, -1, 0, 0);
  } else if (fault == F_ALIAS) {
    launch f = l;
    const char *what = "";
    switch (uniform(0, 3)) {
    case 0:
      f.d.output = f.p.output = S.state, what = "output over the state";
      break;
    case 1:
      f.d.input = f.p.input = (const char *)S.state + S.state_bytes / 2, what = "input inside the state";
      break;
    case 2:
      if (decode) f.d.plans = (const c128_decode_plan *)S.state;
      else f.p.write_plans = (const c128_write_plan *)((char *)S.state + 64 * S.row_bytes);
      what = "plans inside the state";
      break;
    default:
      f.d.output = f.p.output = S.in, what = "output over the input";
      break;
    }
    faulty_launch(&f, C128_ERROR_ALIASED, what, -1, 0, 0);
  }

  /* the clean launch, then the commit and the windows' check */
  fill(S.out, 0xFF, S.out_bytes);
  st = decode ? run_decode(d) : run_prefill(a);
  EXPECT(st == C128_SUCCESS, "clean launch: %s", c128_status_string(st));
  const int64_t out_rows = decode ? n : nc;
  get(S.h_out, S.out, (size_t)(out_rows > 0 ? out_rows : 0) * (size_t)D * sizeof(float));
  if (fault == F_PLANS) { /* the spoiled launch's running plans gave the clean outputs, bit for bit */
    const sizes z = {S.ring.state_pages, decode ? n : rows, decode ? n : rows};
    for (int64_t k = 0; k < out_rows; ++k) {
      const int runs = decode ? decode_runs(&z, k, S.decode2[k]) == 1 && S.decode2[k].write_loc % W == W - 1
                              : compress_runs(&z, k, S.compress2[k]) == 1;
      if (runs)
        EXPECT(memcmp(S.h_out_faulty + (size_t)k * (size_t)D, S.h_out + (size_t)k * (size_t)D,
                      (size_t)D * sizeof(float)) == 0,
               "spoiled plans: output row %lld of a plan that ran differs from the clean run", (long long)k);
    }
  }
  S.steps_of[kind]++;
  int64_t base = 0, k = 0;
  static int64_t ends[2 * (MAX_ROWS / W + MAX_LIVE) + 8];
  for (int m = 0; m < n; ++m) {
    const int i = member[m];
    const int64_t prefix = S.req[i].len;
    int64_t count = 0;
    if (decode) {
      if ((prefix + 1) % W == 0) ends[count++] = prefix, ends[count++] = m;
    } else {
      for (; k < nc && S.compress[k].ragged_id < base + batch[m].extend_len; ++k)
        ends[count++] = (int64_t)S.compress[k].seq_len - 1, ends[count++] = k;
    }
    if (kind == PREFILL) S.req[i].prompt_left -= batch[m].extend_len;
    commit(i, base, accept[m], ends, count);
    base += batch[m].extend_len;
    if (S.req[i].prompt_left == 0 && S.req[i].len >= S.req[i].target) S.finished++, new_request(i);
  }
  S.emitted_rows += rows;
}

static int cmp_double(const void *x, const void *y) {
  const double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

int main(int argc, char **argv) {
  int force_cpu = 0, need_gpu = 0, gpus = 0;
  double seconds = 60.0;
  uint64_t seed = 0x243F6A8885A308D3ull;
  S.corrupt_fraction = 0.25;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--cpu")) force_cpu = 1;
    else if (!strcmp(argv[i], "--gpu")) need_gpu = 1;
    else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) seconds = atof(argv[++i]);
    else if (!strcmp(argv[i], "--corrupt") && i + 1 < argc) S.corrupt_fraction = atof(argv[++i]);
    else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 0);
    else {
      fprintf(stderr, "usage: %s [--cpu | --gpu] [--seconds S] [--corrupt FRACTION] [--seed N]\n", argv[0]);
      return 2;
    }
  }
  rng_state = seed;
  const int have_gpu = cudaGetDeviceCount(&gpus) == cudaSuccess && gpus > 0;
  if (need_gpu && !have_gpu) {
    printf("soak --gpu: no CUDA device present, skipped\n");
    return 77;
  }
  S.gpu = have_gpu && !force_cpu;
  S.D = S.gpu ? 512 : 128;
  S.live = S.gpu ? 32 : 8;
  watchdog_s = S.gpu ? 30 : 120;
  const int D = S.D;
  S.ring.ring_tokens = RING, S.ring.speculative = 1, S.ring.state_pages = (int64_t)S.live * (RING / W);
  S.row_bytes = 2 * (size_t)D * sizeof(float);
  S.state_bytes = (size_t)S.ring.state_pages * W * S.row_bytes;
  S.out_bytes = (size_t)MAX_ROWS * (size_t)D * sizeof(float);
  S.h_state = alloc_h(S.state_bytes), S.h_snap = alloc_h(S.state_bytes);
  S.input = alloc_h((size_t)MAX_ROWS * S.row_bytes);
  S.h_out = alloc_h(S.out_bytes), S.h_out_faulty = alloc_h(S.out_bytes);
  S.ape = alloc_h((size_t)W * (size_t)D * sizeof(float));
  S.compress = alloc_h((size_t)MAX_ROWS * sizeof *S.compress),
  S.compress2 = alloc_h((size_t)MAX_ROWS * sizeof *S.compress);
  S.write = alloc_h((size_t)MAX_ROWS * sizeof *S.write), S.write2 = alloc_h((size_t)MAX_ROWS * sizeof *S.write);
  for (size_t i = 0; i < S.state_bytes / sizeof(float); ++i) S.h_state[i] = NAN;
  for (int i = 0; i < W * D; ++i) S.ape[i] = 0.25f * sinf(0.37f * (float)i);
  for (int i = 0; i < S.live; ++i) {
    S.req[i].window = alloc_h((size_t)W * S.row_bytes);
    new_request(i);
  }
  S.state = alloc_k(S.state_bytes), S.snap = alloc_k(S.state_bytes);
  S.in = alloc_k((size_t)MAX_ROWS * S.row_bytes), S.out = alloc_k(S.out_bytes);
  S.plans_a = alloc_k((size_t)MAX_ROWS * sizeof(c128_compress_plan)),
  S.plans_b = alloc_k((size_t)MAX_ROWS * sizeof(c128_write_plan));
  S.ape_k = alloc_k((size_t)W * (size_t)D * sizeof(float));
  S.k_requests = alloc_k(MAX_LIVE * sizeof(c128_request)), S.k_ws = alloc_k(c128_plan_workspace_size(MAX_LIVE));
  S.k_status = alloc_k(sizeof(int32_t)), S.k_counts = alloc_k(2 * sizeof(int64_t));
  S.k_compress = alloc_k((size_t)MAX_ROWS * sizeof(c128_compress_plan)),
  S.k_write = alloc_k((size_t)MAX_ROWS * sizeof(c128_write_plan));
  S.k_decode = alloc_k(MAX_LIVE * sizeof(c128_decode_plan));
  put(S.state, S.h_state, S.state_bytes);
  put(S.ape_k, S.ape, (size_t)W * (size_t)D * sizeof(float));
  if (S.gpu) {
    CUDA(cudaEventCreate(&S.ev[0]));
    CUDA(cudaEventCreate(&S.ev[1]));
  }
  signal(SIGALRM, on_alarm);

  printf("soak: %s, instance h%d_f32_f32_f32, request ring R = %d with speculation, %d requests, %.0f s, "
         "faults in %.0f %% of steps, seed 0x%llx\n",
         S.gpu ? "GPU (CUDA kernels)" : "CPU (host runner)", D, RING, S.live, seconds, 100.0 * S.corrupt_fraction,
         (unsigned long long)seed);
  fflush(stdout);
  const double start = now_s();
  while (now_s() - start < seconds) {
    step_now = S.steps;
    alarm(watchdog_s);
    step();
    alarm(0);
    S.steps++;
  }
  const double wall = now_s() - start;

  int64_t faults = 0, refused = 0;
  for (int f = 1; f < FAULTS; ++f) faults += S.faults[f];
  for (int s = 0; s < 32; ++s) refused += S.refusals[s];
  printf("steps: %lld in %.1f s (%lld prefill, %lld decode, %lld verify); %lld rows, %lld tokens committed, %lld "
         "requests done\n",
         (long long)S.steps, wall, (long long)S.steps_of[PREFILL], (long long)S.steps_of[DECODE],
         (long long)S.steps_of[VERIFY], (long long)S.emitted_rows, (long long)S.committed, (long long)S.finished);
  printf("faults injected: %lld\n", (long long)faults);
  for (int f = 1; f < FAULTS; ++f) printf("  %-28s %lld\n", fault_name[f], (long long)S.faults[f]);
  printf("refusals by status: %lld (faults accepted as the model predicted: %lld)\n", (long long)refused,
         (long long)S.accepted_faults);
  for (int s = 0; s < 32; ++s)
    if (S.refusals[s]) printf("  %-70s %lld\n", c128_status_string((c128_status)s), (long long)S.refusals[s]);
  printf("plans spoiled and skipped by the kernels' guard: %lld (the checker named the first bad plan %lld times)\n",
         (long long)S.skipped_plans, (long long)S.checker_named);
  printf("batches planned on the %s by the device planner (bytes = host planner's): %lld\n", S.gpu ? "GPU" : "CPU",
         (long long)S.device_planned);
  printf("windows checked against the fp64 oracle: %lld; max error: relative L2 %.2e, abs %.2e\n", (long long)S.windows,
         S.max_rel, S.max_abs);
  if (S.refusal_n) {
    qsort(S.refusal_ms, (size_t)S.refusal_n, sizeof *S.refusal_ms, cmp_double);
    printf("device planner, refused calls: %lld, %s time median %.4f ms, max %.4f ms\n", (long long)S.refusal_n,
           S.gpu ? "GPU (CUDA events)" : "host path wall", S.refusal_ms[S.refusal_n / 2],
           S.refusal_ms[S.refusal_n - 1]);
  }
  const int ok = S.mismatches == 0 && S.windows > 0;
  printf("%s\n", ok          ? "soak: ok, every fault refused or skipped as expected, every window matched"
                 : S.windows ? "soak: MISMATCHES (above)"
                             : "soak: no window was checked");
  return ok ? 0 : 1;
}
