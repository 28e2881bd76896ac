/* fp8_cache: decode steps that write DeepSeek-V4 cache entries, not pooled vectors.

   Four requests decode one token a step on a request ring (SGLang's layout). Whenever a request
   completes a window, the decode launch itself normalises the pooled vector (RMSNorm), rotates
   its last 64 channels (RoPE at the window's first position) and stores the entry in FlashMLA's
   sparse FP8 layout into a paged cache, at the slot the engine chose for it (out_loc): no second
   kernel, no pooled vector in memory. Each entry is then decoded and checked against the
   reference chain computed from the request's token history in double precision.

   A window's splits meet in a small workspace the caller zeroes once: each leaves its channels
   there and counts itself, and the last to arrive writes the entry and sets the workspace back to
   zero.

   Runs the CUDA kernels on a GPU, the host runner otherwise (or with --cpu); --gpu exits 77
   (skipped) without a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ref/reference.h"
#include "c128.cuh"

enum {
  HEAD_DIM = 512,
  ROW = 2 * HEAD_DIM,
  NUM_REQ = 4,
  STAGGER = 30,
  STEPS = 260 + 3 * STAGGER,
  ROPE = 64,
  PAIRS = ROPE / 2
};
enum { ENTRIES_PER_PAGE = 2, CACHE_PAGES = 8, MAX_POS = 1024 };
/* FlashMLA's page: P entries of 576 bytes, then P x 8 scale bytes, rounded up to 576. */
#define ENTRY_BYTES (HEAD_DIM + ROPE)
#define PAGE_BYTES (((ENTRY_BYTES + HEAD_DIM / 64) * ENTRIES_PER_PAGE + ENTRY_BYTES - 1) / ENTRY_BYTES * ENTRY_BYTES)

#define CHECK(call)                                                       \
  do {                                                                    \
    c128_status st_ = (call);                                             \
    if (st_ != C128_SUCCESS) {                                            \
      fprintf(stderr, "%s failed: %s\n", #call, c128_status_string(st_)); \
      exit(1);                                                            \
    }                                                                     \
  } while (0)
#define CUDA(call)                                                       \
  do {                                                                   \
    cudaError_t e_ = (call);                                             \
    if (e_ != cudaSuccess) {                                             \
      fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(e_)); \
      exit(1);                                                           \
    }                                                                    \
  } while (0)

/* A token's kv | score row, a function of (request, position) alone. */
static void make_token(int req, int pos, float *row) {
  uint64_t s = (uint64_t)req * 1000003u + (uint64_t)pos * 7919u + 1u;
  for (int c = 0; c < ROW; ++c) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const float u = (float)((s >> 40) + 1) / (float)(1 << 24);
    row[c] = (c < HEAD_DIM ? 2.0f : 8.0f) * (u - 0.5f);
  }
}

static double bf16(double x) { return c128_bf16_to_float(c128_bf16_from_float((float)x)); }

/* The value of an e4m3 code. */
static double e4m3(unsigned q) {
  const int e = (int)((q >> 3) & 15u), m = (int)(q & 7u);
  const double v = e ? (8 + m) * ldexp(1.0, e - 10) : m * ldexp(1.0, -9);
  return q & 0x80 ? -v : v;
}

/* The spacing of e4m3 values at |v| (v already divided by its block's scale). */
static double e4m3_step(double v) { return fabs(v) < ldexp(1.0, -6) ? ldexp(1.0, -9) : ldexp(1.0, ilogb(fabs(v)) - 3); }

/* Entry `loc` against the reference chain over the window's tokens: the largest error of an FP8
   value in e4m3 steps (at most half a step for the rounding, one more where the reference's z
   lands one bf16 ulp off), and of a RoPE value in bf16 ulps. */
static void check_entry(const unsigned char *cache, int64_t loc, int req, int window, const float *ape,
                        const float *gamma, const float *rope, double *fp8_err, double *rope_err) {
  static float rows[REF_WINDOW][ROW];
  const float *ptr[REF_WINDOW];
  double y[HEAD_DIM], z[HEAD_DIM], ss = 0.0;
  for (int j = 0; j < REF_WINDOW; ++j) make_token(req, window * REF_WINDOW + j, rows[j]), ptr[j] = rows[j];
  ref_window(HEAD_DIM, ptr, ape, y);
  for (int c = 0; c < HEAD_DIM; ++c) ss += bf16(y[c]) * bf16(y[c]);
  const double r = 1.0 / sqrt(ss / HEAD_DIM + 1e-6);
  for (int c = 0; c < HEAD_DIM; ++c) z[c] = bf16(gamma[c] * (bf16(y[c]) * r));
  const unsigned char *page = cache + (loc / ENTRIES_PER_PAGE) * PAGE_BYTES;
  const unsigned char *entry = page + ENTRY_BYTES * (loc % ENTRIES_PER_PAGE);
  const unsigned char *scales = page + ENTRY_BYTES * ENTRIES_PER_PAGE + HEAD_DIM / 64 * (loc % ENTRIES_PER_PAGE);
  for (int w = 0; w < (HEAD_DIM - ROPE) / 64; ++w) {
    const double scale = ldexp(1.0, scales[w] - 127); /* UE8M0 */
    for (int c = 64 * w; c < 64 * w + 64; ++c)
      *fp8_err = fmax(*fp8_err, fabs(e4m3(entry[c]) - z[c] / scale) / e4m3_step(z[c] / scale));
  }
  const float *cs = rope + (size_t)window * REF_WINDOW * ROPE; /* the window's first position */
  for (int i = 0; i < PAIRS; ++i) {
    const double zr = z[HEAD_DIM - ROPE + 2 * i], zi = z[HEAD_DIM - ROPE + 2 * i + 1];
    const double want[2] = {zr * cs[2 * i] - zi * cs[2 * i + 1], zr * cs[2 * i + 1] + zi * cs[2 * i]};
    for (int k = 0; k < 2; ++k) {
      uint16_t bits;
      memcpy(&bits, entry + HEAD_DIM - ROPE + 4 * i + 2 * k, 2);
      *rope_err = fmax(*rope_err, fabs(c128_bf16_to_float(bits) - want[k]) / ref_bf16_ulp(want[k]));
    }
  }
}

int main(int argc, char **argv) {
  int gpus = 0;
  const int have_gpu = cudaGetDeviceCount(&gpus) == cudaSuccess && gpus > 0;
  const int cpu = argc > 1 && !strcmp(argv[1], "--cpu"), need_gpu = argc > 1 && !strcmp(argv[1], "--gpu");
  if (need_gpu && !have_gpu) {
    printf("fp8_cache --gpu: no CUDA device present, skipped\n");
    return 77;
  }
  const int use_gpu = have_gpu && !cpu;
  const int64_t pages = NUM_REQ; /* legacy ring: page = pool index */
  const size_t state_bytes = (size_t)pages * REF_WINDOW * ROW * sizeof(float);
  float *h_state = calloc(1, state_bytes), *h_input = malloc(NUM_REQ * (size_t)ROW * sizeof(float));
  float h_ape[REF_WINDOW * HEAD_DIM], gamma[HEAD_DIM], *rope = malloc((size_t)MAX_POS * ROPE * sizeof(float));
  unsigned char *h_cache = malloc((size_t)CACHE_PAGES * PAGE_BYTES);
  const int64_t ws_bytes = c128_entry_workspace_bytes(NUM_REQ, HEAD_DIM); /* a job a request */
  void *h_ws = aligned_alloc(16, (size_t)ws_bytes);
  memset(h_ws, 0, (size_t)ws_bytes); /* zero once: every launch leaves it so */
  for (int i = 0; i < REF_WINDOW * HEAD_DIM; ++i) h_ape[i] = 0.25f * sinf(0.37f * (float)i);
  for (int c = 0; c < HEAD_DIM; ++c)
    gamma[c] = (float)bf16(1.0 + 0.5 * cos(0.1 * c)); /* bf16 values, as checkpoints hold */
  for (int p = 0; p < MAX_POS; ++p)                   /* the layer's RoPE table */
    for (int i = 0; i < PAIRS; ++i) {
      const double angle = p * pow(160000.0, -2.0 * i / ROPE);
      rope[((size_t)p * PAIRS + i) * 2] = (float)cos(angle), rope[((size_t)p * PAIRS + i) * 2 + 1] = (float)sin(angle);
    }
  memset(h_cache, 0, (size_t)CACHE_PAGES * PAGE_BYTES);
  /* where each request's next entry goes: the engine's choice, here request i's k-th at 4k + 3 - i */
  int64_t out_loc[NUM_REQ];
  void *d_state = NULL, *d_input = NULL, *d_cache = NULL, *d_plans = NULL, *d_ape = NULL, *d_gamma = NULL;
  void *d_rope = NULL, *d_loc = NULL, *d_ws = NULL;
  if (use_gpu) {
    CUDA(cudaMalloc(&d_state, state_bytes));
    CUDA(cudaMalloc(&d_input, NUM_REQ * (size_t)ROW * sizeof(float)));
    CUDA(cudaMalloc(&d_cache, (size_t)CACHE_PAGES * PAGE_BYTES));
    CUDA(cudaMalloc(&d_plans, NUM_REQ * sizeof(c128_decode_plan)));
    CUDA(cudaMalloc(&d_ape, sizeof h_ape));
    CUDA(cudaMalloc(&d_gamma, sizeof gamma));
    CUDA(cudaMalloc(&d_rope, (size_t)MAX_POS * ROPE * sizeof(float)));
    CUDA(cudaMalloc(&d_loc, sizeof out_loc));
    CUDA(cudaMalloc(&d_ws, (size_t)ws_bytes));
    CUDA(cudaMemset(d_ws, 0, (size_t)ws_bytes));
    CUDA(cudaMemcpy(d_state, h_state, state_bytes, cudaMemcpyHostToDevice));
    CUDA(cudaMemcpy(d_cache, h_cache, (size_t)CACHE_PAGES * PAGE_BYTES, cudaMemcpyHostToDevice));
    CUDA(cudaMemcpy(d_ape, h_ape, sizeof h_ape, cudaMemcpyHostToDevice));
    CUDA(cudaMemcpy(d_gamma, gamma, sizeof gamma, cudaMemcpyHostToDevice));
    CUDA(cudaMemcpy(d_rope, rope, (size_t)MAX_POS * ROPE * sizeof(float), cudaMemcpyHostToDevice));
  }
  c128_ring ring = {0};
  ring.state_pages = pages;
  ring.rope_positions = MAX_POS; /* the planner refuses a window the table does not reach */
  c128_request req[NUM_REQ];
  int entries = 0;
  double fp8_err = 0.0, rope_err = 0.0;
  for (int step = 0; step < STEPS; ++step) {
    for (int i = 0; i < NUM_REQ; ++i) { /* request i starts at step STAGGER * i: a padding row before */
      req[i].pool_index = i, req[i].seq_len = step < STAGGER * i ? 0 : step - STAGGER * i + 1, req[i].extend_len = 1;
      if (req[i].seq_len) make_token(i, req[i].seq_len - 1, h_input + (size_t)i * ROW);
      out_loc[i] = 4 * (req[i].seq_len / REF_WINDOW) + 3 - i;
    }
    c128_decode_plan plans[NUM_REQ];
    CHECK(c128_plan_decode(&ring, req, NUM_REQ, plans));
    c128_decode_args d = {0};
    d.head_dim = HEAD_DIM;
    d.state_dtype = C128_F32, d.input_dtype = C128_F32, d.output_dtype = C128_F32;
    d.state = use_gpu ? d_state : h_state, d.state_pages = pages;
    d.input = h_input, d.batch = NUM_REQ;
    d.ape = h_ape;
    d.plans = plans;
    d.output_index = out_loc; /* request b's entry goes to out_loc[b]; no output tensor */
    d.entry.kind = C128_OUTPUT_DSV4_FP8;
    d.entry.norm_weight = gamma, d.entry.norm_eps = 1e-6f;
    d.entry.rope_table = rope, d.entry.rope_positions = MAX_POS;
    d.entry.cache = h_cache, d.entry.cache_pages = CACHE_PAGES;
    d.entry.entries_per_page = ENTRIES_PER_PAGE, d.entry.page_bytes = PAGE_BYTES;
    d.entry.workspace = use_gpu ? d_ws : h_ws, d.entry.workspace_bytes = ws_bytes;
    if (use_gpu) {
      CUDA(cudaMemcpy(d_input, h_input, NUM_REQ * (size_t)ROW * sizeof(float), cudaMemcpyHostToDevice));
      CUDA(cudaMemcpy(d_plans, plans, sizeof plans, cudaMemcpyHostToDevice));
      CUDA(cudaMemcpy(d_loc, out_loc, sizeof out_loc, cudaMemcpyHostToDevice));
      d.input = d_input, d.ape = d_ape, d.plans = d_plans, d.output_index = d_loc;
      d.entry.norm_weight = d_gamma, d.entry.rope_table = d_rope, d.entry.cache = d_cache;
      CHECK(c128_decode(&d, 0));
      CUDA(cudaMemcpy(h_cache, d_cache, (size_t)CACHE_PAGES * PAGE_BYTES, cudaMemcpyDeviceToHost));
    } else {
      CHECK(c128_decode_host(&d, NULL));
    }
    for (int i = 0; i < NUM_REQ; ++i)
      if (req[i].seq_len &&
          req[i].seq_len % REF_WINDOW == 0) { /* request i completed a window: its entry is in the cache */
        check_entry(h_cache, out_loc[i], i, req[i].seq_len / REF_WINDOW - 1, h_ape, gamma, rope, &fp8_err, &rope_err);
        ++entries;
      }
  }
  printf("path: %s\n", use_gpu ? "GPU (CUDA kernels)" : "CPU (host runner)");
  printf("decode: %d steps x %d requests -> %d FP8 cache entries, largest FP8 error %.2f e4m3 steps, "
         "largest RoPE error %.2f bf16 ulp\n",
         STEPS, NUM_REQ, entries, fp8_err, rope_err);
  if (use_gpu) CUDA(cudaMemcpy(h_ws, d_ws, (size_t)ws_bytes, cudaMemcpyDeviceToHost));
  int ws_clean = 1; /* every launch left the workspace as it found it */
  for (int64_t i = 0; i < ws_bytes; ++i) ws_clean &= ((const unsigned char *)h_ws)[i] == 0;
  printf("workspace after %d launches: %s\n", STEPS, ws_clean ? "all zero" : "NOT ZERO");
  const int ok = entries == 2 * NUM_REQ && fp8_err <= 1.5 && rope_err <= 1.5 && ws_clean;
  printf("%s\n", ok ? "every entry matches the reference chain" : "MISMATCH against the reference chain");
  if (use_gpu) {
    void *all[] = {d_state, d_input, d_cache, d_plans, d_ape, d_gamma, d_rope, d_loc, d_ws};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) cudaFree(all[i]);
  }
  free(h_state), free(h_input), free(rope), free(h_cache), free(h_ws);
  return ok ? 0 : 1;
}
