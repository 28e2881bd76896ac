/* serve: a serving simulation over the planner and the kernels, in plain C.

   An engine keeps `live` requests in flight on a speculative request ring (R = 256: every request
   owns two state pages, pool row = its slot). Each step is one batch of one kind:
   - prefill: requests still reading their prompt get a chunk of it (chunked prefill, a token
     budget per step, chunks that start anywhere in a window);
   - decode: one new token for every generating request;
   - verify: speculative decoding; each generating request brings n_draft rows (the root token
     and its drafts: mostly a few, sometimes up to 130, the most R = 256 can persist), the
     engine accepts the first `a` of them and rolls back the rest. Windows that end in the
     rejected part were compressed from drafts: their outputs are dropped, and the window is
     compressed again when its tokens are committed.
   A request that reached its length leaves; a new one takes its pool row (the state's rows
   stay stale, nothing is cleared). Every compressed window is checked against an fp64 oracle
   computed from the request's committed tokens only, which the engine keeps for the open
   window (128 rows per request).

   Runs the CUDA kernels when a GPU is present (head_dim 512, the production shape, 32 requests,
   3000 steps, with the kernels' time per step), the host runner otherwise or with --cpu (16
   requests and 1000 steps, to stay quick). --gpu insists on a GPU (exit 77 = skipped without one);
   --steps N overrides the step count. All tensors are f32 (instance h<D>_f32_f32_f32), so a row
   read back from the state equals the row that went in, and the oracle needs no rounding model.
   Exit status 0 iff every window matched (relative L2 <= 1e-5, max abs <= 1e-4). */
#define _POSIX_C_SOURCE 199309L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../ref/reference.h"
#include "c128.cuh"

enum { W = C128_WINDOW, RING = 256, MAX_DRAFTS = RING - W + 2, MAX_LIVE = 32, MAX_ROWS = MAX_LIVE * MAX_DRAFTS };
enum { PREFILL, DECODE, VERIFY, KINDS };
static const char *const kind_name[KINDS] = {"prefill", "decode", "verify"};

/* Every example is one file a user may copy alone, so each spells out its own exit-on-error
   CHECK (c128_status) and CUDA (cudaError_t) macros rather than sharing a header. */
#define CHECK(call)                                                       \
  do {                                                                    \
    const c128_status st_ = (call);                                       \
    if (st_ != C128_SUCCESS) {                                            \
      fprintf(stderr, "%s failed: %s\n", #call, c128_status_string(st_)); \
      exit(1);                                                            \
    }                                                                     \
  } while (0)
#define CUDA(call)                                                       \
  do {                                                                   \
    const cudaError_t e_ = (call);                                       \
    if (e_ != cudaSuccess) {                                             \
      fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(e_)); \
      exit(1);                                                           \
    }                                                                    \
  } while (0)

/* ---- the workload ------------------------------------------------------------------------- */

static uint64_t rng_state = 0x243F6A8885A308D3ull;
static uint64_t next_u64(void) { /* splitmix64 */
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static int uniform(int lo, int hi) { return lo + (int)(next_u64() % (uint64_t)(hi - lo + 1)); }
/* A token's kv | score row: kv in (-1, 1), scores in (-4, 4); never zero. */
static void make_row(float *row, int head_dim) {
  for (int c = 0; c < 2 * head_dim; ++c) {
    const float u = ((float)(next_u64() >> 40) + 0.5f) / (float)(1 << 24) - 0.5f;
    row[c] = (c < head_dim ? 2.0f : 8.0f) * u;
  }
}

typedef struct request {
  int64_t len;     /* committed tokens */
  int prompt_left; /* prompt tokens not yet prefilled */
  int64_t target;  /* leaves once len reaches it */
  float *window;   /* [128][2D]: committed rows of the open window, slot = position mod 128 */
} request;

typedef struct sim {
  int head_dim, live, use_gpu;
  c128_ring ring;
  request req[MAX_LIVE];
  float *ape, *input, *output, *state;
  void *d_state, *d_input, *d_output, *d_plans_a, *d_plans_b;
  float *d_ape;
  c128_compress_plan *compress;
  c128_write_plan *write;
  c128_decode_plan decode[MAX_LIVE];
  /* results */
  int64_t emitted, discarded, committed, finished, rows_total;
  int64_t steps_of[KINDS], rows_of[KINDS];
  double kernel_ms[KINDS], planner_ms, max_rel, max_abs;
} sim;

static void new_request(sim *s, int i) {
  request *q = &s->req[i];
  q->len = 0;
  q->prompt_left = uniform(1, uniform(0, 3) ? 600 : 2000);
  q->target = q->prompt_left + uniform(1, 500);
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* ---- checking ---------------------------------------------------------------------------- */

/* Window rows come from the request's committed history; out is the kernel's vector. */
static void check_window(sim *s, const request *q, const float *out) {
  const int D = s->head_dim;
  const float *rows[W];
  double *ref = malloc((size_t)D * sizeof *ref), max_abs;
  for (int j = 0; j < W; ++j) rows[j] = q->window + (size_t)j * 2 * (size_t)D;
  ref_window(D, rows, s->ape, ref);
  const double rel = ref_rel_l2(D, out, ref, &max_abs);
  if (!(rel <= s->max_rel)) s->max_rel = rel;
  if (!(max_abs <= s->max_abs)) s->max_abs = max_abs;
  s->emitted++;
  free(ref);
}

/* Commits `count` rows of request i, which sit at input rows base.. ; a completed window is
   checked against output row out_row(window end), or -1 if the batch had no such output. */
static void commit(sim *s, int i, int64_t base, int count, const int64_t *out_row_of_end, int64_t ends) {
  request *q = &s->req[i];
  const int D = s->head_dim;
  for (int j = 0; j < count; ++j, ++q->len) {
    memcpy(q->window + (size_t)(q->len % W) * 2 * (size_t)D, s->input + (size_t)(base + j) * 2 * (size_t)D,
           2 * (size_t)D * sizeof(float));
    if (q->len % W != W - 1) continue;
    int64_t k = -1;
    for (int64_t e = 0; e < ends; e += 2)
      if (out_row_of_end[e] == q->len) k = out_row_of_end[e + 1];
    if (k < 0) {
      fprintf(stderr, "request on pool row %d: window ending at %lld was not compressed\n", i, (long long)q->len);
      exit(1);
    }
    check_window(s, q, s->output + (size_t)k * (size_t)D);
  }
  s->committed += count;
}

/* ---- one step ------------------------------------------------------------------------------ */

static void *upload(sim *s, void *dst, const void *src, size_t bytes) {
  if (!s->use_gpu) return (void *)src;
  CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  return dst;
}

static void step(sim *s, cudaEvent_t ev[2]) {
  const int D = s->head_dim;
  int kind = DECODE, order[MAX_LIVE], n = 0;
  for (int i = 0; i < s->live; ++i) order[i] = i;
  for (int i = s->live - 1; i > 0; --i) { /* batch position != pool row */
    const int j = uniform(0, i), t = order[i];
    order[i] = order[j], order[j] = t;
  }
  /* Prefill once a quarter of the requests wait for it, or every fourth step if any does (or
     when nobody can generate); otherwise decode or verify, half and half. */
  int waiting = 0;
  for (int i = 0; i < s->live; ++i) waiting += s->req[i].prompt_left > 0;
  if (waiting == s->live || 4 * waiting >= s->live ||
      (waiting && (s->steps_of[DECODE] + s->steps_of[VERIFY] + s->steps_of[PREFILL]) % 4 == 0))
    kind = PREFILL;
  else if (uniform(0, 1)) kind = VERIFY;

  c128_request batch[MAX_LIVE];
  int member[MAX_LIVE], accept[MAX_LIVE];
  int64_t rows = 0, budget = 4096;
  for (int k = 0; k < s->live; ++k) {
    const int i = order[k];
    request *q = &s->req[i];
    int extend;
    if (kind == PREFILL) {
      if (q->prompt_left == 0 || budget == 0) continue;
      extend = uniform(1, q->prompt_left < 1024 ? q->prompt_left : 1024);
      if (extend > budget) extend = (int)budget;
      q->prompt_left -= extend;
      accept[n] = extend;
    } else if (q->prompt_left > 0) {
      continue; /* still reading its prompt */
    } else if (kind == VERIFY) {
      extend = uniform(1, uniform(0, 3) ? 6 : MAX_DRAFTS);
      accept[n] = uniform(0, 3) == 0 ? extend : uniform(1, extend);
    } else {
      extend = accept[n] = 1;
    }
    batch[n].pool_index = i;
    batch[n].seq_len = (int32_t)(q->len + extend);
    batch[n].extend_len = extend;
    member[n++] = i;
    for (int r = 0; r < extend; ++r) make_row(s->input + (size_t)(rows + r) * 2 * (size_t)D, D);
    rows += extend;
    budget -= extend;
  }

  /* plan */
  const double t0 = now_ms();
  c128_prefill_plans plans = {0};
  if (kind == DECODE) {
    CHECK(c128_plan_decode(&s->ring, batch, n, s->decode));
  } else {
    plans.compress = s->compress, plans.write = s->write, plans.capacity = rows;
    CHECK(c128_plan_prefill(&s->ring, batch, n, kind == VERIFY, &plans));
  }
  s->planner_ms += now_ms() - t0;

  /* run */
  const size_t row_bytes = 2 * (size_t)D * sizeof(float);
  c128_prefill_args a = {0};
  c128_decode_args d = {0};
  a.head_dim = d.head_dim = D;
  a.state_dtype = a.input_dtype = a.output_dtype = C128_F32;
  d.state_dtype = d.input_dtype = d.output_dtype = C128_F32;
  a.state = d.state = s->use_gpu ? s->d_state : (void *)s->state;
  a.state_pages = d.state_pages = s->ring.state_pages;
  a.ape = d.ape = s->use_gpu ? s->d_ape : s->ape;
  a.output = d.output = s->use_gpu ? s->d_output : (void *)s->output;
  a.input = d.input = upload(s, s->d_input, s->input, (size_t)rows * row_bytes);
  int64_t out_rows;
  c128_status st;
  if (kind == DECODE) {
    d.output_rows = d.batch = n;
    d.plans = upload(s, s->d_plans_a, s->decode, (size_t)n * sizeof s->decode[0]);
    out_rows = n;
  } else {
    a.input_rows = rows;
    a.output_rows = plans.num_compress > 0 ? plans.num_compress : 1;
    a.compress_plans = upload(s, s->d_plans_a, s->compress, (size_t)plans.num_compress * sizeof *s->compress);
    a.num_compress = plans.num_compress;
    a.write_plans = upload(s, s->d_plans_b, s->write, (size_t)plans.num_write * sizeof *s->write);
    a.num_write = plans.num_write;
    out_rows = plans.num_compress;
  }
  if (s->use_gpu) {
    CUDA(cudaEventRecord(ev[0], 0));
    st = kind == DECODE ? c128_decode(&d, 0) : c128_prefill(&a, 0);
    CUDA(cudaEventRecord(ev[1], 0));
    CUDA(cudaEventSynchronize(ev[1]));
    float ms = 0.0f;
    CUDA(cudaEventElapsedTime(&ms, ev[0], ev[1]));
    s->kernel_ms[kind] += ms;
    CUDA(cudaMemcpy(s->output, s->d_output, (size_t)out_rows * (size_t)D * sizeof(float), cudaMemcpyDeviceToHost));
  } else {
    const double t1 = now_ms();
    st = kind == DECODE ? c128_decode_host(&d, NULL) : c128_prefill_host(&a, NULL);
    s->kernel_ms[kind] += now_ms() - t1;
  }
  CHECK(st);
  s->steps_of[kind]++;
  s->rows_of[kind] += rows;
  s->rows_total += rows;

  /* commit what the engine accepted; check every window that completed */
  int64_t base = 0, k = 0;
  int64_t ends[2 * (MAX_ROWS / W + MAX_LIVE)];
  for (int m = 0; m < n; ++m) {
    const int i = member[m];
    const int64_t prefix = s->req[i].len;
    int64_t count = 0;
    if (kind == DECODE) {
      if ((prefix + 1) % W == 0) ends[count++] = prefix, ends[count++] = m; /* decode row m */
    } else {
      for (; k < plans.num_compress && s->compress[k].ragged_id < base + batch[m].extend_len; ++k) {
        const int64_t end = (int64_t)s->compress[k].seq_len - 1;
        if (end >= prefix + accept[m]) s->discarded++; /* computed on rejected drafts */
        ends[count++] = end, ends[count++] = k;
      }
    }
    commit(s, i, base, accept[m], ends, count);
    base += batch[m].extend_len;
    if (s->req[i].prompt_left == 0 && s->req[i].len >= s->req[i].target) {
      s->finished++;
      new_request(s, i); /* same pool row, stale state rows */
    }
  }
}

int main(int argc, char **argv) {
  int force_cpu = 0, need_gpu = 0, steps = -1, gpus = 0;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--cpu")) force_cpu = 1;
    else if (!strcmp(argv[i], "--gpu")) need_gpu = 1;
    else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--cpu | --gpu] [--steps N]\n", argv[0]);
      return 2;
    }
  }
  const int have_gpu = cudaGetDeviceCount(&gpus) == cudaSuccess && gpus > 0;
  if (need_gpu && !have_gpu) {
    printf("serve --gpu: no CUDA device present, skipped\n");
    return 77;
  }
  static sim s;
  s.use_gpu = have_gpu && !force_cpu;
  s.head_dim = 512;
  s.live = s.use_gpu ? 32 : 16;
  if (steps < 0) steps = s.use_gpu ? 3000 : 1000;
  const int D = s.head_dim;
  s.ring.ring_tokens = RING;
  s.ring.speculative = 1;
  s.ring.state_pages = (int64_t)s.live * (RING / W);

  const size_t state_elems = (size_t)s.ring.state_pages * W * 2 * (size_t)D;
  s.state = malloc(state_elems * sizeof(float));
  s.input = malloc((size_t)MAX_ROWS * 2 * (size_t)D * sizeof(float));
  s.output = malloc((size_t)MAX_ROWS * (size_t)D * sizeof(float));
  s.ape = malloc((size_t)W * (size_t)D * sizeof(float));
  s.compress = malloc((size_t)MAX_ROWS * sizeof *s.compress);
  s.write = malloc((size_t)MAX_ROWS * sizeof *s.write);
  if (!s.state || !s.input || !s.output || !s.ape || !s.compress || !s.write) return 1;
  for (size_t i = 0; i < state_elems; ++i) s.state[i] = NAN; /* an unwritten row read shows up as NaN */
  for (int i = 0; i < W * D; ++i) s.ape[i] = 0.25f * sinf(0.37f * (float)i);
  for (int i = 0; i < s.live; ++i) {
    s.req[i].window = malloc((size_t)W * 2 * (size_t)D * sizeof(float));
    if (!s.req[i].window) return 1;
    new_request(&s, i);
  }
  cudaEvent_t ev[2] = {0, 0};
  if (s.use_gpu) {
    CUDA(cudaMalloc(&s.d_state, state_elems * sizeof(float)));
    CUDA(cudaMalloc(&s.d_input, (size_t)MAX_ROWS * 2 * (size_t)D * sizeof(float)));
    CUDA(cudaMalloc(&s.d_output, (size_t)MAX_ROWS * (size_t)D * sizeof(float)));
    CUDA(cudaMalloc(&s.d_plans_a, (size_t)MAX_ROWS * sizeof *s.compress));
    CUDA(cudaMalloc(&s.d_plans_b, (size_t)MAX_ROWS * sizeof *s.write));
    CUDA(cudaMalloc((void **)&s.d_ape, (size_t)W * (size_t)D * sizeof(float)));
    CUDA(cudaMemcpy(s.d_state, s.state, state_elems * sizeof(float), cudaMemcpyHostToDevice));
    CUDA(cudaMemcpy(s.d_ape, s.ape, (size_t)W * (size_t)D * sizeof(float), cudaMemcpyHostToDevice));
    CUDA(cudaEventCreate(&ev[0]));
    CUDA(cudaEventCreate(&ev[1]));
  }

  printf("path: %s, instance h%d_f32_f32_f32, request ring R = %d with speculation, %d requests in flight\n",
         s.use_gpu ? "GPU (CUDA kernels)" : "CPU (host runner)", D, RING, s.live);
  const double start = now_ms();
  for (int t = 0; t < steps; ++t) step(&s, ev);
  const double wall = now_ms() - start;

  printf("%d steps: %lld prefill, %lld decode, %lld verify; %lld rows, %lld tokens committed, %lld requests done\n",
         steps, (long long)s.steps_of[PREFILL], (long long)s.steps_of[DECODE], (long long)s.steps_of[VERIFY],
         (long long)s.rows_total, (long long)s.committed, (long long)s.finished);
  printf("windows: %lld emitted and checked against the fp64 oracle, %lld dropped (rejected drafts)\n",
         (long long)s.emitted, (long long)s.discarded);
  printf("max error: relative L2 %.2e, abs %.2e\n", s.max_rel, s.max_abs);
  for (int k = 0; k < KINDS; ++k)
    if (s.steps_of[k])
      printf("%-7s %s per step: %8.1f us (%.1f rows per step)\n", kind_name[k],
             s.use_gpu ? "kernels (CUDA events)" : "host runner", 1e3 * s.kernel_ms[k] / (double)s.steps_of[k],
             (double)s.rows_of[k] / (double)s.steps_of[k]);
  printf("planner (host) per step: %.1f us; whole run %.2f s (data, oracle and copies included)\n",
         1e3 * s.planner_ms / steps, wall * 1e-3);
  const int ok = s.emitted > 0 && s.max_rel <= REF_TOL_REL_L2 && s.max_abs <= REF_TOL_MAX_ABS;
  printf("%s\n", ok ? "all windows match the fp64 reference" : "MISMATCH against the reference");

  if (s.use_gpu) {
    cudaFree(s.d_state), cudaFree(s.d_input), cudaFree(s.d_output), cudaFree(s.d_plans_a), cudaFree(s.d_plans_b);
    cudaFree(s.d_ape), cudaEventDestroy(ev[0]), cudaEventDestroy(ev[1]);
  }
  for (int i = 0; i < s.live; ++i) free(s.req[i].window);
  free(s.state), free(s.input), free(s.output), free(s.ape), free(s.compress), free(s.write);
  return ok ? 0 : 1;
}
