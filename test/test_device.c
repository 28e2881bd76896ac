/* The device planner against the host planner (byte for byte, error batches included), CUDA
   graphs of whole steps (device planner + kernels) against eager runs, and PDL chains against
   the same chains without PDL (SPEC 6.4). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static void *dev_alloc(size_t bytes) {
  void *p = NULL;
  CUDA_OK(cudaMalloc(&p, bytes ? bytes : 16));
  return p;
}
static void *dev_from(const void *host, size_t bytes) {
  void *p = dev_alloc(bytes);
  CUDA_OK(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice));
  return p;
}
static void host_from(void *host, const void *dev, size_t bytes) {
  CUDA_OK(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
}

/* ---- random batches ------------------------------------------------------------------------ */
enum { POOL = 16, MAX_REQ = 24, TABLE_STRIDE = 2 };

typedef struct batch {
  c128_ring ring;
  int32_t table[POOL * TABLE_STRIDE];
  c128_request req[MAX_REQ];
  int64_t n;
  int32_t verify;
} batch;

/* Legacy ring, speculative R = 256 ring, or a shuffled page table; sometimes one bad request. */
static void random_batch(rng *r, batch *b, int decode) {
  memset(b, 0, sizeof *b);
  const int layout = (int)rng_below(r, 3);
  b->ring.ring_tokens = layout == 0 ? 128 : 256;
  b->ring.speculative = layout == 1 || (layout == 2 && rng_below(r, 2));
  b->ring.state_pages = layout == 0 ? POOL : 2 * POOL + 8;
  if (layout == 2) { /* pages 0..39 shuffled; rows are pool indices */
    int32_t pages[2 * POOL + 8];
    for (int i = 0; i < 2 * POOL + 8; ++i) pages[i] = i;
    for (int i = 2 * POOL + 7; i > 0; --i) {
      const int j = (int)rng_below(r, i + 1);
      const int32_t t = pages[i];
      pages[i] = pages[j], pages[j] = t;
    }
    memcpy(b->table, pages, sizeof b->table);
    b->ring.page_table = b->table;
    b->ring.page_table_stride = TABLE_STRIDE;
    b->ring.num_pool = POOL;
  }
  int32_t pool[POOL];
  for (int i = 0; i < POOL; ++i) pool[i] = i;
  for (int i = POOL - 1; i > 0; --i) {
    const int j = (int)rng_below(r, i + 1);
    const int32_t t = pool[i];
    pool[i] = pool[j], pool[j] = t;
  }
  b->n = 1 + rng_below(r, POOL - 1);
  b->verify = !decode && b->ring.speculative && rng_below(r, 3) == 0;
  for (int64_t i = 0; i < b->n; ++i) {
    c128_request *q = &b->req[i];
    q->pool_index = pool[i];
    if (decode) q->seq_len = (int32_t)rng_below(r, 700), q->extend_len = 1;
    else if (b->verify)
      q->extend_len = (int32_t)(1 + rng_below(r, 130)), q->seq_len = q->extend_len + (int32_t)rng_below(r, 600);
    else
      q->extend_len = (int32_t)(1 + rng_below(r, rng_below(r, 4) ? 300 : 1100)),
      q->seq_len = q->extend_len + (int32_t)rng_below(r, 700);
  }
  if (rng_below(r, 4) != 0) return;
  c128_request *q = &b->req[rng_below(r, b->n)];
  switch (rng_below(r, 7)) {
  case 0:
    q->extend_len = q->seq_len + 1;
    break;
  case 1:
    q->extend_len = 0;
    break;
  case 2:
    q->pool_index = rng_below(r, 2) ? -1 : (layout == 2 ? POOL : (int32_t)b->ring.state_pages);
    break;
  case 3:
    q->seq_len = -5;
    break;
  case 4:
    if (layout == 2) b->table[q->pool_index * TABLE_STRIDE + rng_below(r, 2)] = rng_below(r, 2) ? -1 : 1000;
    break;
  case 5:
    b->verify = 1, q->extend_len = 131 + (int32_t)rng_below(r, 3), q->seq_len = q->extend_len + 7;
    break;
  default:
    b->req[0].extend_len = 40000, b->req[0].seq_len = 40000, q->extend_len = 30000, q->seq_len = 30500;
    break;
  }
}

static int64_t rows_of(const batch *b) {
  int64_t rows = 0;
  for (int64_t i = 0; i < b->n; ++i) rows += b->req[i].extend_len > 0 ? b->req[i].extend_len : 0;
  return rows < 1 ? 1 : (rows > C128_MAX_PREFILL_ROWS ? C128_MAX_PREFILL_ROWS : rows);
}

/* The device planner (on `be`) over b plus one absent request, against the host planner over b. */
static void compare_prefill_planners(backend be, rng *r, const batch *b) {
  const int64_t rows = rows_of(b), cap = rows - rng_below(r, rows < 3 ? rows : 3); /* sometimes too small */
  c128_compress_plan *hc = malloc((size_t)rows * sizeof *hc), *dc = malloc((size_t)rows * sizeof *dc);
  c128_write_plan *hw = malloc((size_t)rows * sizeof *hw), *dw = malloc((size_t)rows * sizeof *dw);
  c128_prefill_plans hp = {hc, hw, cap, 1, 0, 0};
  const c128_status want = c128_plan_prefill(&b->ring, b->req, b->n, b->verify, &hp);

  c128_request req[MAX_REQ + 1];
  const int64_t gap = rng_below(r, b->n + 1);
  memcpy(req, b->req, (size_t)gap * sizeof *req);
  req[gap] = (c128_request){(int32_t)rng_below(r, 100), 0, 0};
  memcpy(req + gap + 1, b->req + gap, (size_t)(b->n - gap) * sizeof *req);
  const int64_t n = b->n + 1;
  size_t ws_bytes = c128_plan_workspace_size(n);
  int64_t counts[2] = {-1, -1};
  int32_t status = -1;
  c128_device_plan_args a = {0};
  a.ring = b->ring, a.num_requests = n, a.verify = b->verify, a.capacity = cap;
  memset(dc, 0xAB, (size_t)cap * sizeof *dc), memset(dw, 0xAB, (size_t)cap * sizeof *dw);
  if (be == BACKEND_CPU) {
    a.requests = req, a.compress = dc, a.write = dw, a.counts = counts, a.status = &status;
    a.workspace = malloc(ws_bytes);
    cr_assert_eq(c128_plan_prefill_device_host(&a), C128_SUCCESS);
    free(a.workspace);
  } else {
    if (b->ring.page_table) a.ring.page_table = dev_from(b->table, sizeof b->table);
    a.requests = dev_from(req, (size_t)n * sizeof *req);
    a.compress = dev_from(dc, (size_t)cap * sizeof *dc), a.write = dev_from(dw, (size_t)cap * sizeof *dw);
    a.counts = dev_alloc(sizeof counts), a.status = dev_alloc(sizeof status), a.workspace = dev_alloc(ws_bytes);
    cr_assert_eq(c128_plan_prefill_device(&a, 0), C128_SUCCESS);
    CUDA_OK(cudaDeviceSynchronize());
    host_from(dc, a.compress, (size_t)cap * sizeof *dc), host_from(dw, a.write, (size_t)cap * sizeof *dw);
    host_from(counts, a.counts, sizeof counts), host_from(&status, a.status, sizeof status);
    cudaFree((void *)a.ring.page_table), cudaFree((void *)a.requests), cudaFree(a.compress), cudaFree(a.write);
    cudaFree(a.counts), cudaFree(a.status), cudaFree(a.workspace);
  }
  cr_assert_eq(status, (int32_t)want, "device planner status %d, host %s (seed %llu)", status, c128_status_string(want),
               (unsigned long long)r->seed);
  if (want != C128_SUCCESS) { /* no partial output: every slot a sentinel */
    const c128_compress_plan nc = C128_INVALID_COMPRESS_PLAN;
    const c128_write_plan nw = C128_INVALID_WRITE_PLAN;
    for (int64_t k = 0; k < cap; ++k) hc[k] = nc, hw[k] = nw;
    hp.num_compress = hp.num_write = 0;
  }
  cr_assert(counts[0] == hp.num_compress && counts[1] == hp.num_write, "counts %lld %lld vs %lld %lld",
            (long long)counts[0], (long long)counts[1], (long long)hp.num_compress, (long long)hp.num_write);
  cr_assert(memcmp(hc, dc, (size_t)cap * sizeof *hc) == 0, "compress plans differ (seed %llu)",
            (unsigned long long)r->seed);
  cr_assert(memcmp(hw, dw, (size_t)cap * sizeof *hw) == 0, "write plans differ (seed %llu)",
            (unsigned long long)r->seed);
  free(hc), free(dc), free(hw), free(dw);
}

static void compare_decode_planners(backend be, rng *r, const batch *b) {
  c128_decode_plan hd[MAX_REQ], dd[MAX_REQ];
  memset(hd, 0xCD, sizeof hd), memset(dd, 0xAB, sizeof dd);
  const c128_status want = c128_plan_decode(&b->ring, b->req, b->n, hd);
  int32_t status = -1;
  c128_device_plan_args a = {0};
  a.ring = b->ring, a.num_requests = b->n;
  const size_t ws_bytes = c128_plan_workspace_size(b->n);
  if (be == BACKEND_CPU) {
    a.requests = b->req, a.decode = dd, a.status = &status, a.workspace = malloc(ws_bytes);
    cr_assert_eq(c128_plan_decode_device_host(&a), C128_SUCCESS);
    free(a.workspace);
  } else {
    if (b->ring.page_table) a.ring.page_table = dev_from(b->table, sizeof b->table);
    a.requests = dev_from(b->req, sizeof b->req), a.decode = dev_from(dd, sizeof dd);
    a.status = dev_alloc(sizeof status), a.workspace = dev_alloc(ws_bytes);
    cr_assert_eq(c128_plan_decode_device(&a, 0), C128_SUCCESS);
    CUDA_OK(cudaDeviceSynchronize());
    host_from(dd, a.decode, sizeof dd), host_from(&status, a.status, sizeof status);
    cudaFree((void *)a.ring.page_table), cudaFree((void *)a.requests), cudaFree(a.decode), cudaFree(a.status);
    cudaFree(a.workspace);
  }
  cr_assert_eq(status, (int32_t)want, "(seed %llu)", (unsigned long long)r->seed);
  if (want != C128_SUCCESS)
    for (int64_t k = 0; k < b->n; ++k) hd[k] = (c128_decode_plan){0, -1, -1, -1};
  cr_assert(memcmp(hd, dd, (size_t)b->n * sizeof *hd) == 0, "decode plans differ (seed %llu)",
            (unsigned long long)r->seed);
}

static void planners_agree(backend be) {
  require_backend(be);
  rng r = rng_fresh();
  const int batches = be == BACKEND_CPU ? 400 : 150;
  int errors = 0;
  for (int i = 0; i < batches; ++i) {
    batch b;
    random_batch(&r, &b, 0);
    compare_prefill_planners(be, &r, &b);
    c128_prefill_plans probe = {NULL, NULL, 0, 0, 0, 0};
    errors += c128_plan_prefill(&b.ring, b.req, b.n, b.verify, &probe) != C128_ERROR_CAPACITY_TOO_SMALL;
    random_batch(&r, &b, 1);
    compare_decode_planners(be, &r, &b);
  }
  /* About 22 % are refused (150 batches: 19 to 41 in 40 runs; a bound of 20 failed once on the
     H200): the bound, 5 %, is five standard deviations below the mean. */
  cr_assert_gt(errors, batches / 20, "the random batches must include refused ones: %d of %d (seed %llu)", errors,
               batches, (unsigned long long)r.seed);
}

Test(cpu, device_planner_matches_host_planner) { planners_agree(BACKEND_CPU); }
Test(gpu, device_planner_matches_host_planner) { planners_agree(BACKEND_GPU); }

/* ---- whole steps in CUDA graphs, and PDL chains ------------------------------------------ */
enum { GD = 512, GB = 8, GPAGES = 2 * GB, GROW = 2 * GD, STEPS = 300, CAP = 512 };

typedef struct gpu_run {
  float *state, *input, *out, *ape;
} gpu_run;

static gpu_run gpu_run_make(const float *state0, const float *ape, size_t input_rows, size_t out_rows) {
  gpu_run g;
  g.state = dev_from(state0, GPAGES * 128 * GROW * sizeof(float));
  g.input = dev_alloc(input_rows * GROW * sizeof(float));
  g.out = dev_alloc(out_rows * GD * sizeof(float));
  CUDA_OK(cudaMemset(g.out, 0xFF, out_rows * GD * sizeof(float)));
  g.ape = dev_from(ape, 128 * GD * sizeof(float));
  return g;
}

static void gpu_run_free(gpu_run *g) { cudaFree(g->state), cudaFree(g->input), cudaFree(g->out), cudaFree(g->ape); }

static void expect_same_device(const void *a, const void *b, size_t bytes, const char *what, int step) {
  char *x = malloc(bytes), *y = malloc(bytes);
  host_from(x, a, bytes), host_from(y, b, bytes);
  cr_assert(memcmp(x, y, bytes) == 0, "%s differs at step %d", what, step);
  free(x), free(y);
}

static c128_decode_args decode_args(const gpu_run *g, const c128_decode_plan *plans, int64_t batch, int pdl) {
  c128_decode_args d = {0};
  d.head_dim = GD;
  d.state = g->state, d.state_pages = GPAGES, d.input = g->input, d.ape = g->ape, d.output = g->out;
  d.output_rows = batch, d.plans = plans, d.batch = batch, d.pdl = pdl;
  return d;
}

Test(gpu, graph_decode_step_matches_eager) {
  require_backend(BACKEND_GPU);
  rng r = rng_fresh();
  float *state0 = malloc(GPAGES * 128 * GROW * sizeof(float)), *ape = ape_make(GD, &r);
  float *input = malloc(GB * GROW * sizeof(float));
  rows_fill(state0, GPAGES * 128, GD, C128_F32, &r, 1.0f);
  gpu_run graph = gpu_run_make(state0, ape, GB, GB), eager = gpu_run_make(state0, ape, GB, GB);
  c128_ring ring = {0};
  ring.state_pages = GPAGES;
  c128_request req[GB];
  for (int b = 0; b < GB; ++b) req[b] = (c128_request){(int32_t)(GPAGES - 1 - 2 * b), (int32_t)rng_below(&r, 400), 1};
  c128_request *d_req = dev_from(req, sizeof req);
  c128_decode_plan *d_plans = dev_alloc(sizeof(c128_decode_plan) * GB),
                   *e_plans = dev_alloc(sizeof(c128_decode_plan) * GB);
  int32_t *d_status = dev_alloc(sizeof(int32_t));
  void *ws = dev_alloc(c128_plan_workspace_size(GB));
  cudaStream_t s;
  CUDA_OK(cudaStreamCreate(&s));
  c128_device_plan_args pa = {0};
  pa.ring = ring, pa.requests = d_req, pa.num_requests = GB, pa.decode = d_plans, pa.status = d_status,
  pa.workspace = ws;
  const c128_decode_args gd = decode_args(&graph, d_plans, GB, 1), ed = decode_args(&eager, e_plans, GB, 0);
  cudaGraph_t g;
  cudaGraphExec_t exec;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  cr_assert_eq(c128_plan_decode_device(&pa, s), C128_SUCCESS);
  cr_assert_eq(c128_decode(&gd, s), C128_SUCCESS);
  CUDA_OK(cudaStreamEndCapture(s, &g));
  CUDA_OK(cudaGraphInstantiate(&exec, g, 0));
  for (int step = 0; step < STEPS; ++step) {
    for (int b = 0; b < GB; ++b) req[b].seq_len++;
    rows_fill(input, GB, GD, C128_F32, &r, 1.0f);
    CUDA_OK(cudaMemcpyAsync(d_req, req, sizeof req, cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaMemcpyAsync(graph.input, input, sizeof(float) * GB * GROW, cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaGraphLaunch(exec, s));
    c128_decode_plan plans[GB];
    cr_assert_eq(c128_plan_decode(&ring, req, GB, plans), C128_SUCCESS);
    CUDA_OK(cudaMemcpyAsync(e_plans, plans, sizeof plans, cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaMemcpyAsync(eager.input, input, sizeof(float) * GB * GROW, cudaMemcpyHostToDevice, s));
    cr_assert_eq(c128_decode(&ed, s), C128_SUCCESS);
    CUDA_OK(cudaStreamSynchronize(s));
    expect_same_device(graph.out, eager.out, GB * GD * sizeof(float), "graph decode output", step);
  }
  expect_same_device(graph.state, eager.state, GPAGES * 128 * GROW * sizeof(float), "graph decode state", STEPS);
  cudaGraphExecDestroy(exec), cudaGraphDestroy(g), cudaStreamDestroy(s);
  cudaFree(d_req), cudaFree(d_plans), cudaFree(e_plans), cudaFree(d_status), cudaFree(ws);
  gpu_run_free(&graph), gpu_run_free(&eager);
  free(state0), free(ape), free(input);
}

Test(gpu, graph_prefill_step_matches_eager) {
  require_backend(BACKEND_GPU);
  rng r = rng_fresh();
  enum { N = 3, PSTEPS = 40 };
  float *state0 = malloc(GPAGES * 128 * GROW * sizeof(float)), *ape = ape_make(GD, &r);
  float *input = malloc(CAP * GROW * sizeof(float));
  rows_fill(state0, GPAGES * 128, GD, C128_F32, &r, 1.0f);
  gpu_run graph = gpu_run_make(state0, ape, CAP, CAP), eager = gpu_run_make(state0, ape, CAP, CAP);
  c128_ring ring = {0};
  ring.ring_tokens = 256, ring.speculative = 1, ring.state_pages = GPAGES;
  c128_request req[N] = {{5, 0, 0}, {0, 0, 0}, {3, 0, 0}};
  c128_request *d_req = dev_from(req, sizeof req);
  c128_compress_plan *gc = dev_alloc(CAP * sizeof *gc), *ec = dev_alloc(CAP * sizeof *ec);
  c128_write_plan *gw = dev_alloc(CAP * sizeof *gw), *ew = dev_alloc(CAP * sizeof *ew);
  int64_t *counts = dev_alloc(2 * sizeof(int64_t));
  int32_t *status = dev_alloc(sizeof(int32_t));
  void *ws = dev_alloc(c128_plan_workspace_size(N));
  cudaStream_t s;
  CUDA_OK(cudaStreamCreate(&s));
  c128_device_plan_args pa = {0};
  pa.ring = ring, pa.requests = d_req, pa.num_requests = N, pa.compress = gc, pa.write = gw, pa.capacity = CAP;
  pa.counts = counts, pa.status = status, pa.workspace = ws, pa.pdl = 1;
  c128_prefill_args ga = {0};
  ga.head_dim = GD, ga.state = graph.state, ga.state_pages = GPAGES, ga.input = graph.input, ga.input_rows = CAP;
  ga.ape = graph.ape, ga.output = graph.out, ga.output_rows = CAP;
  ga.compress_plans = gc, ga.num_compress = CAP, ga.write_plans = gw, ga.num_write = CAP, ga.pdl = 1;
  c128_prefill_args ea = ga;
  ea.state = eager.state, ea.input = eager.input, ea.ape = eager.ape, ea.output = eager.out;
  ea.compress_plans = ec, ea.write_plans = ew, ea.pdl = 0;
  cudaGraph_t g;
  cudaGraphExec_t exec;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  cr_assert_eq(c128_plan_prefill_device(&pa, s), C128_SUCCESS);
  cr_assert_eq(c128_prefill(&ga, s), C128_SUCCESS);
  CUDA_OK(cudaStreamEndCapture(s, &g));
  CUDA_OK(cudaGraphInstantiate(&exec, g, 0));
  static c128_compress_plan hc[CAP];
  static c128_write_plan hw[CAP];
  for (int step = 0; step < PSTEPS; ++step) {
    int64_t rows = 0;
    for (int i = 0; i < N; ++i) {
      req[i].extend_len = (int32_t)(1 + rng_below(&r, 160));
      req[i].seq_len += req[i].extend_len;
      rows += req[i].extend_len;
    }
    rows_fill(input, (size_t)rows, GD, C128_F32, &r, 1.0f);
    CUDA_OK(cudaMemcpyAsync(d_req, req, sizeof req, cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaMemcpyAsync(graph.input, input, (size_t)rows * GROW * sizeof(float), cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaGraphLaunch(exec, s));
    c128_prefill_plans hp = {hc, hw, CAP, 1, 0, 0};
    cr_assert_eq(c128_plan_prefill(&ring, req, N, 0, &hp), C128_SUCCESS);
    CUDA_OK(cudaMemcpyAsync(ec, hc, sizeof hc, cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaMemcpyAsync(ew, hw, sizeof hw, cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaMemcpyAsync(eager.input, input, (size_t)rows * GROW * sizeof(float), cudaMemcpyHostToDevice, s));
    ea.num_compress = hp.num_compress, ea.num_write = hp.num_write;
    cr_assert_eq(c128_prefill(&ea, s), C128_SUCCESS);
    CUDA_OK(cudaStreamSynchronize(s));
    expect_same_device(graph.out, eager.out, (size_t)hp.num_compress * GD * sizeof(float), "graph prefill output",
                       step);
    expect_same_device(graph.state, eager.state, GPAGES * 128 * GROW * sizeof(float), "graph prefill state", step);
  }
  cudaGraphExecDestroy(exec), cudaGraphDestroy(g), cudaStreamDestroy(s);
  cudaFree(d_req), cudaFree(gc), cudaFree(ec), cudaFree(gw), cudaFree(ew), cudaFree(counts), cudaFree(status);
  cudaFree(ws), gpu_run_free(&graph), gpu_run_free(&eager), free(state0), free(ape), free(input);
}

/* Many dependent launches back to back, all inputs and plans uploaded first: decode steps (a
   boundary step reads rows the earlier steps wrote) or extend batches on R = 128 (a batch's
   writes land on slots its own compress reads, and the next compress reads them). With PDL the
   kernels overlap their prologues; the results must not change by a bit. */
static void pdl_chain(int prefill, int pdl, const float *state0, const float *ape, const float *input,
                      const void *plans, const int64_t *counts, int steps, float **out_state, float **out) {
  gpu_run g = gpu_run_make(state0, ape, (size_t)steps * CAP, (size_t)steps * CAP);
  CUDA_OK(cudaMemcpy(g.input, input, (size_t)steps * CAP * GROW * sizeof(float), cudaMemcpyHostToDevice));
  const size_t plan_bytes =
      (size_t)steps * CAP * (prefill ? sizeof(c128_compress_plan) + sizeof(c128_write_plan) : sizeof(c128_decode_plan));
  char *d_plans = dev_from(plans, plan_bytes);
  for (int t = 0; t < steps; ++t) {
    if (prefill) {
      c128_prefill_args a = {0};
      a.head_dim = GD, a.state = g.state, a.state_pages = GPAGES, a.ape = g.ape, a.pdl = pdl;
      a.input = g.input + (size_t)t * CAP * GROW, a.input_rows = CAP;
      a.output = g.out + (size_t)t * CAP * GD, a.output_rows = CAP;
      a.compress_plans = (const c128_compress_plan *)d_plans + (size_t)t * CAP, a.num_compress = counts[2 * t];
      a.write_plans =
          (const c128_write_plan *)(d_plans + (size_t)steps * CAP * sizeof(c128_compress_plan)) + (size_t)t * CAP;
      a.num_write = counts[2 * t + 1];
      cr_assert_eq(c128_prefill(&a, 0), C128_SUCCESS);
    } else {
      gpu_run step = g;
      step.input = g.input + (size_t)t * GB * GROW, step.out = g.out + (size_t)t * GB * GD;
      c128_decode_args d = decode_args(&step, (const c128_decode_plan *)d_plans + (size_t)t * GB, GB, pdl);
      d.requests_per_block = pdl ? 3 : 1; /* the two chains also differ in their decode grids */
      cr_assert_eq(c128_decode(&d, 0), C128_SUCCESS);
    }
  }
  CUDA_OK(cudaDeviceSynchronize());
  *out_state = malloc(GPAGES * 128 * GROW * sizeof(float));
  *out = malloc((size_t)steps * CAP * GD * sizeof(float));
  host_from(*out_state, g.state, GPAGES * 128 * GROW * sizeof(float));
  host_from(*out, g.out, (size_t)steps * CAP * GD * sizeof(float));
  cudaFree(d_plans), gpu_run_free(&g);
}

static void pdl_matches_plain(int prefill) {
  require_backend(BACKEND_GPU);
  rng r = rng_fresh();
  const int steps = prefill ? 60 : STEPS;
  float *state0 = malloc(GPAGES * 128 * GROW * sizeof(float)), *ape = ape_make(GD, &r);
  float *input = malloc((size_t)steps * CAP * GROW * sizeof(float));
  rows_fill(state0, GPAGES * 128, GD, C128_F32, &r, 1.0f);
  rows_fill(input, (size_t)steps * CAP, GD, C128_F32, &r, 1.0f);
  c128_ring ring = {0};
  ring.state_pages = GPAGES;
  char *plans = calloc((size_t)steps * CAP, sizeof(c128_compress_plan) + sizeof(c128_write_plan));
  int64_t *counts = calloc((size_t)steps * 2, sizeof(int64_t));
  c128_request req[GB];
  for (int b = 0; b < GB; ++b) req[b] = (c128_request){(int32_t)(2 * b + 1), (int32_t)rng_below(&r, 300), 1};
  for (int t = 0; t < steps; ++t) {
    if (prefill) { /* 3 requests; extends of 1..150 tokens, many windows straddle batches */
      for (int b = 0; b < 3; ++b)
        req[b].extend_len = (int32_t)(1 + rng_below(&r, 150)), req[b].seq_len += req[b].extend_len;
      c128_prefill_plans p = {(c128_compress_plan *)plans + (size_t)t * CAP,
                              (c128_write_plan *)(plans + (size_t)steps * CAP * sizeof(c128_compress_plan)) +
                                  (size_t)t * CAP,
                              CAP,
                              0,
                              0,
                              0};
      cr_assert_eq(c128_plan_prefill(&ring, req, 3, 0, &p), C128_SUCCESS);
      counts[2 * t] = p.num_compress, counts[2 * t + 1] = p.num_write;
    } else {
      for (int b = 0; b < GB; ++b) req[b].seq_len++;
      cr_assert_eq(c128_plan_decode(&ring, req, GB, (c128_decode_plan *)plans + (size_t)t * GB), C128_SUCCESS);
    }
  }
  float *state_a, *out_a, *state_b, *out_b, *state_c, *out_c;
  pdl_chain(prefill, C128_PDL_ON, state0, ape, input, plans, counts, steps, &state_a, &out_a);
  pdl_chain(prefill, 0, state0, ape, input, plans, counts, steps, &state_b, &out_b);
  /* every plan was uploaded before the chain began: the promise of C128_PDL_PLANS_READY holds */
  pdl_chain(prefill, C128_PDL_PLANS_READY, state0, ape, input, plans, counts, steps, &state_c, &out_c);
  cr_assert(memcmp(state_a, state_b, GPAGES * 128 * GROW * sizeof(float)) == 0, "state differs with PDL");
  cr_assert(memcmp(out_a, out_b, (size_t)steps * CAP * GD * sizeof(float)) == 0, "outputs differ with PDL");
  cr_assert(memcmp(state_c, state_b, GPAGES * 128 * GROW * sizeof(float)) == 0, "state differs with plans ready");
  cr_assert(memcmp(out_c, out_b, (size_t)steps * CAP * GD * sizeof(float)) == 0, "outputs differ with plans ready");
  cr_assert(memcmp(state_a, state0, GPAGES * 128 * GROW * sizeof(float)) != 0, "the chain must have written");
  free(state0), free(ape), free(input), free(plans), free(counts), free(state_a), free(out_a), free(state_b),
      free(out_b), free(state_c), free(out_c);
}

Test(gpu, pdl_decode_chain_matches_plain_launches) { pdl_matches_plain(0); }
Test(gpu, pdl_prefill_chain_matches_plain_launches) { pdl_matches_plain(1); }
