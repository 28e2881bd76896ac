/* Hostile input and hardware checks: the non-finite policy, plans of random bytes
   that must never reach outside the buffers (canaries on every side), batches issued from
   several host threads on several streams at once, and bitwise determinism. */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* ---- non-finite input ---------------------------------------------------------------------- */
enum { ND = 128, NROW = 2 * ND };

/* Window k of the batch gets one kind of non-finite input in some channels. */
typedef enum nonfinite {
  NAN_SCORE,
  POS_INF_SCORE,
  ALL_NEG_INF,
  SOME_NEG_INF,
  WARP_NEG_INF,
  INF_KV,
  NAN_KV,
  KINDS
} nonfinite;

static void plant(float *rows, nonfinite kind, rng *r) { /* rows = one window, 128 x NROW */
  for (int c = 0; c < ND; c += 3) {
    const int j = (int)rng_below(r, 128);
    switch (kind) {
    case NAN_SCORE:
      rows[j * NROW + ND + c] = NAN;
      break;
    case POS_INF_SCORE:
      rows[j * NROW + ND + c] = INFINITY;
      break;
    case ALL_NEG_INF:
      for (int i = 0; i < 128; ++i) rows[i * NROW + ND + c] = -INFINITY;
      break;
    case SOME_NEG_INF:
      for (int i = 0; i < 128; i += 2) rows[i * NROW + ND + c] = -INFINITY;
      break;
    case WARP_NEG_INF: /* every row of one warp: that warp's partial must contribute 0, not NaN */
      for (int i = 16; i < 24; ++i) rows[i * NROW + ND + c] = -INFINITY;
      break;
    case INF_KV:
      rows[j * NROW + c] = rng_below(r, 2) ? INFINITY : -INFINITY;
      break;
    default:
      rows[j * NROW + c] = NAN;
      break;
    }
  }
}

static int same_or_both_nan(float a, float b) { return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0; }

static void nonfinite_case(backend be) {
  require_backend(be);
  rng r = rng_fresh();
  float *input = malloc(KINDS * 128 * NROW * sizeof(float)), *ape = ape_make(ND, &r);
  float *state = malloc(128 * NROW * sizeof(float)), *out = malloc(KINDS * ND * sizeof(float));
  rows_fill(input, KINDS * 128, ND, C128_F32, &r, 1.0f);
  rows_fill(state, 128, ND, C128_F32, &r, 1.0f);
  for (int k = 0; k < KINDS; ++k) plant(input + (size_t)k * 128 * NROW, (nonfinite)k, &r);
  poison(out, KINDS * ND * sizeof(float));
  c128_compress_plan cp[KINDS];
  for (int k = 0; k < KINDS; ++k) cp[k] = (c128_compress_plan){128, (uint16_t)(k * 128 + 127), 0, 0, 0};
  c128_prefill_args a = {0};
  a.head_dim = ND, a.state = state, a.state_pages = 1, a.input = input, a.input_rows = KINDS * 128, a.ape = ape;
  a.output = out, a.output_rows = KINDS, a.compress_plans = cp, a.num_compress = KINDS;
  const instance_entry e = *instance(C128_INSTANCE_h128_f32_f32_f32);
  cr_assert_eq(run_prefill(&e, be, &a, 0), C128_SUCCESS);
  double ref[ND];
  for (int k = 0; k < KINDS; ++k) {
    const float *rows[128];
    for (int j = 0; j < 128; ++j) rows[j] = input + ((size_t)k * 128 + j) * NROW;
    ref_window(ND, rows, ape, ref);
    int nans = 0;
    for (int c = 0; c < ND; ++c) nans += isnan(ref[c]) != 0;
    if (k == SOME_NEG_INF || k == WARP_NEG_INF || k == INF_KV)
      cr_assert_eq(nans, 0, "kind %d: -inf scores only zero weights; an infinite kv gives +-inf", k);
    else cr_assert_gt(nans, 0, "kind %d must produce NaN channels", k);
    check_output_row(out, (size_t)k, C128_F32, ref, ND, "non-finite window", r.seed);
  }
  if (be == BACKEND_GPU) { /* the host runner gives the same values (within the fast build's bound); NaN
                              where it has NaN, whatever the bit pattern */
    float *cpu = malloc(KINDS * ND * sizeof(float));
    poison(cpu, KINDS * ND * sizeof(float));
    a.output = cpu;
    cr_assert_eq(run_prefill(&e, BACKEND_CPU, &a, 0), C128_SUCCESS);
    c128_build_info b;
    cr_assert_eq(c128_build_info_get(&b), C128_SUCCESS);
    if (b.math == C128_MATH_EXACT)
      for (int i = 0; i < KINDS * ND; ++i)
        cr_assert(same_or_both_nan(out[i], cpu[i]), "element %d: GPU %g, CPU %g", i, out[i], cpu[i]);
    else /* the planted infinities are kv values only in INF_KV, where they propagate exactly */
      check_gpu_output(out, cpu, KINDS, C128_F32, ND, max_abs_kv(input, KINDS * 128, ND, C128_F32),
                       "non-finite windows", r.seed);
    free(cpu);
  }
  free(input), free(ape), free(state), free(out);
}

Test(cpu, nonfinite_policy) { nonfinite_case(BACKEND_CPU); }
Test(gpu, nonfinite_policy) { nonfinite_case(BACKEND_GPU); }

/* ---- plans of random bytes on the GPU --------------------------------------------------------- */
enum { HD = 256, HROW = 2 * HD, HPAGES = 5, HROWS = 200, HOUT = 60 };

static void random_plans(rng *r, c128_decode_plan *d, c128_compress_plan *c, c128_write_plan *w) {
  for (int i = 0; i < HROWS; ++i) {
    d[i] = (c128_decode_plan){(uint32_t)rng_edgy(r, 600), rng_edgy(r, HPAGES * 128), rng_edgy(r, HPAGES),
                              rng_edgy(r, HPAGES)};
    if (rng_below(r, 3) == 0)
      d[i].write_loc = d[i].write_loc / 128 * 128 + 127; /* boundaries are the interesting case */
    c[i] = (c128_compress_plan){rng_below(r, 8) ? (uint32_t)rng_edgy(r, 600) : C128_INVALID_ID,
                                (uint16_t)rng_edgy(r, HROWS), (uint16_t)rng_edgy(r, 128), rng_edgy(r, HPAGES),
                                rng_edgy(r, HPAGES)};
    w[i] =
        (c128_write_plan){rng_below(r, 8) ? (uint32_t)rng_edgy(r, HROWS) : C128_INVALID_ID, rng_edgy(r, HPAGES * 128)};
  }
}

/* Random plans may race: two writes to one slot, or a decode write into a page another decode
   block compresses. The GPU then picks an arbitrary winner, so only race-free plans can be
   compared with the host runner: drop every plan that shares a slot or page with an earlier one. */
static void drop_races(c128_decode_plan *d, c128_write_plan *w) {
  for (int i = 0; i < HROWS; ++i)
    for (int j = 0; j < i; ++j) {
      if (w[j].write_loc == w[i].write_loc) w[i].write_loc = -1;
      const int32_t pi = d[i].write_loc / 128, pj = d[j].write_loc / 128;
      if (pi == pj || pi == d[j].read_page_1 || d[i].read_page_1 == pj || d[i].read_page_1 == d[j].read_page_1)
        d[i].seq_len = 0;
    }
}

/* The buffer's contents into host, canaries checked; the buffer is freed. */
static void guarded_take(dev_guarded *g, void *host, uint64_t seed) {
  memcpy(host, dev_guarded_fetch(g, "random plan bytes", seed), g->bytes);
  dev_guarded_free(g);
}

Test(gpu, random_plan_bytes_stay_inside_the_buffers) {
  require_backend(BACKEND_GPU);
  rng r = rng_fresh();
  const size_t state_bytes = HPAGES * 128 * HROW * sizeof(float), out_bytes = HOUT * HD * sizeof(float);
  float *state = malloc(state_bytes), *input = malloc(HROWS * HROW * sizeof(float)), *ape = ape_make(HD, &r);
  float *out = malloc(out_bytes), *gpu_state = malloc(state_bytes), *gpu_out = malloc(out_bytes);
  static c128_decode_plan d[HROWS];
  static c128_compress_plan c[HROWS];
  static c128_write_plan w[HROWS];
  for (int round = 0; round < 24; ++round) {
    rows_fill(state, HPAGES * 128, HD, C128_F32, &r, 1.0f);
    rows_fill(input, HROWS, HD, C128_F32, &r, 1.0f);
    poison(out, out_bytes);
    random_plans(&r, d, c, w);
    const int comparable = round % 4 != 3; /* every fourth round keeps its races: canaries only */
    if (comparable) drop_races(d, w);
    c128_shared_layout layout = {0, 0, 0};
    if (rng_below(&r, 3) == 0)
      layout = (c128_shared_layout){(int32_t)rng_below(&r, 2), 2, (int32_t)(1 + rng_below(&r, 3))};
    const int decode = round % 2;
    dev_guarded gs = dev_guarded_make(state, state_bytes), go = dev_guarded_make(out, out_bytes);
    dev_guarded gi = dev_guarded_make(input, HROWS * HROW * sizeof(float)),
                ga = dev_guarded_make(ape, 128 * HD * sizeof(float));
    dev_guarded gd = dev_guarded_make(d, sizeof d), gc = dev_guarded_make(c, sizeof c),
                gw = dev_guarded_make(w, sizeof w);
    c128_status st;
    if (decode) {
      c128_decode_args a = {0};
      a.head_dim = HD, a.state = dev_guarded_inside(&gs), a.state_pages = HPAGES, a.input = dev_guarded_inside(&gi);
      a.ape = (const float *)dev_guarded_inside(&ga), a.output = dev_guarded_inside(&go), a.output_rows = HOUT;
      a.plans = (const c128_decode_plan *)dev_guarded_inside(&gd), a.batch = HOUT, a.layout = layout;
      st = c128_decode(&a, 0);
      cr_assert_eq(st, C128_SUCCESS);
      a.state = state, a.input = input, a.ape = ape, a.output = out, a.plans = d;
      cr_assert_eq(c128_decode_host(&a, NULL), C128_SUCCESS);
    } else {
      c128_prefill_args a = {0};
      a.head_dim = HD, a.state = dev_guarded_inside(&gs), a.state_pages = HPAGES, a.input = dev_guarded_inside(&gi);
      a.input_rows = HROWS, a.ape = (const float *)dev_guarded_inside(&ga), a.output = dev_guarded_inside(&go);
      a.output_rows = HOUT, a.compress_plans = (const c128_compress_plan *)dev_guarded_inside(&gc),
      a.num_compress = HOUT;
      a.write_plans = (const c128_write_plan *)dev_guarded_inside(&gw), a.num_write = HROWS, a.layout = layout;
      st = c128_prefill(&a, 0);
      cr_assert_eq(st, C128_SUCCESS);
      a.state = state, a.input = input, a.ape = ape, a.output = out, a.compress_plans = c, a.write_plans = w;
      cr_assert_eq(c128_prefill_host(&a, NULL), C128_SUCCESS);
    }
    CUDA_OK(cudaDeviceSynchronize());
    guarded_take(&gs, gpu_state, r.seed), guarded_take(&go, gpu_out, r.seed);
    char scratch[sizeof c];
    guarded_take(&gi, input, r.seed), guarded_take(&ga, ape, r.seed), guarded_take(&gd, scratch, r.seed),
        guarded_take(&gc, scratch, r.seed);
    guarded_take(&gw, scratch, r.seed);
    /* The device skipped exactly what the host runner skipped (same code, same bits). */
    if (!comparable) continue;
    cr_assert(memcmp(gpu_state, state, state_bytes) == 0, "round %d: GPU and host state differ", round);
    char what[48];
    snprintf(what, sizeof what, "round %d: GPU vs host outputs", round);
    const double kv = fmax(max_abs_kv(state, HPAGES * 128, HD, C128_F32), max_abs_kv(input, HROWS, HD, C128_F32));
    check_gpu_output(gpu_out, out, HOUT, C128_F32, HD, kv, what, r.seed);
  }
  free(state), free(input), free(ape), free(out), free(gpu_state), free(gpu_out);
}

/* ---- several host threads, several streams -------------------------------------------------- */
enum { THREADS = 4, TSTEPS = 64, TB = 16, TPAGES = TB };

typedef struct worker {
  const float *ape_dev, *state0;
  float *state_dev, *out_dev, *in_dev;
  const float *inputs;           /* host [TSTEPS][TB][HROW] */
  const c128_decode_plan *plans; /* host [TSTEPS][TB] */
  c128_decode_plan *plans_dev;
  float *final_state, *outs; /* host results */
  int use_streams, pdl;
  c128_status status;
} worker;

static void *worker_main(void *p) {
  worker *w = p;
  cudaStream_t s = 0;
  if (w->use_streams) cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaMemcpyAsync(w->state_dev, w->state0, TPAGES * 128 * HROW * sizeof(float), cudaMemcpyHostToDevice, s);
  cudaMemcpyAsync(w->in_dev, w->inputs, (size_t)TSTEPS * TB * HROW * sizeof(float), cudaMemcpyHostToDevice, s);
  cudaMemcpyAsync(w->plans_dev, w->plans, (size_t)TSTEPS * TB * sizeof(c128_decode_plan), cudaMemcpyHostToDevice, s);
  w->status = C128_SUCCESS;
  for (int t = 0; t < TSTEPS && w->status == C128_SUCCESS; ++t) {
    c128_decode_args a = {0};
    a.head_dim = HD, a.state = w->state_dev, a.state_pages = TPAGES, a.input = w->in_dev + (size_t)t * TB * HROW;
    a.ape = w->ape_dev, a.output = w->out_dev + (size_t)t * TB * HD, a.output_rows = TB;
    a.plans = w->plans_dev + (size_t)t * TB, a.batch = TB, a.pdl = w->pdl;
    w->status = c128_decode(&a, s);
  }
  cudaMemcpyAsync(w->final_state, w->state_dev, TPAGES * 128 * HROW * sizeof(float), cudaMemcpyDeviceToHost, s);
  cudaMemcpyAsync(w->outs, w->out_dev, (size_t)TSTEPS * TB * HD * sizeof(float), cudaMemcpyDeviceToHost, s);
  cudaStreamSynchronize(s);
  if (w->use_streams) cudaStreamDestroy(s);
  return NULL;
}

static void run_workers(worker *w, int parallel) {
  pthread_t th[THREADS];
  for (int k = 0; k < THREADS; ++k) {
    w[k].use_streams = parallel;
    if (parallel) pthread_create(&th[k], NULL, worker_main, &w[k]);
    else worker_main(&w[k]);
  }
  if (parallel)
    for (int k = 0; k < THREADS; ++k) pthread_join(th[k], NULL);
  for (int k = 0; k < THREADS; ++k) cr_assert_eq(w[k].status, C128_SUCCESS, "%s", c128_status_string(w[k].status));
}

Test(gpu, threads_and_streams_are_independent) {
  require_backend(BACKEND_GPU);
  rng r = rng_fresh();
  float *ape = ape_make(HD, &r), *ape_dev;
  CUDA_OK(cudaMalloc((void **)&ape_dev, 128 * HD * sizeof(float)));
  CUDA_OK(cudaMemcpy(ape_dev, ape, 128 * HD * sizeof(float), cudaMemcpyHostToDevice));
  worker w[THREADS], ref[THREADS];
  c128_ring ring = {0};
  ring.state_pages = TPAGES;
  const size_t sb = TPAGES * 128 * HROW * sizeof(float), ob = (size_t)TSTEPS * TB * HD * sizeof(float);
  for (int k = 0; k < THREADS; ++k) {
    memset(&w[k], 0, sizeof w[k]);
    float *state0 = malloc(sb), *inputs = malloc((size_t)TSTEPS * TB * HROW * sizeof(float));
    c128_decode_plan *plans = malloc((size_t)TSTEPS * TB * sizeof *plans);
    rows_fill(state0, TPAGES * 128, HD, C128_F32, &r, 1.0f);
    rows_fill(inputs, (size_t)TSTEPS * TB, HD, C128_F32, &r, 1.0f);
    c128_request req[TB];
    for (int b = 0; b < TB; ++b) req[b] = (c128_request){(int32_t)b, (int32_t)(100 + rng_below(&r, 60)), 1};
    for (int t = 0; t < TSTEPS; ++t) {
      for (int b = 0; b < TB; ++b) req[b].seq_len++;
      cr_assert_eq(c128_plan_decode(&ring, req, TB, plans + (size_t)t * TB), C128_SUCCESS);
    }
    w[k].ape_dev = ape_dev, w[k].state0 = state0, w[k].inputs = inputs, w[k].plans = plans, w[k].pdl = k % 2;
    CUDA_OK(cudaMalloc((void **)&w[k].state_dev, sb));
    CUDA_OK(cudaMalloc((void **)&w[k].out_dev, ob));
    CUDA_OK(cudaMemset(w[k].out_dev, 0xFF, ob));
    CUDA_OK(cudaMalloc((void **)&w[k].in_dev, (size_t)TSTEPS * TB * HROW * sizeof(float)));
    CUDA_OK(cudaMalloc((void **)&w[k].plans_dev, (size_t)TSTEPS * TB * sizeof *plans));
    CUDA_OK(cudaMallocHost((void **)&w[k].final_state, sb));
    CUDA_OK(cudaMallocHost((void **)&w[k].outs, ob));
    ref[k] = w[k];
    CUDA_OK(cudaMallocHost((void **)&ref[k].final_state, sb));
    CUDA_OK(cudaMallocHost((void **)&ref[k].outs, ob));
  }
  run_workers(ref, 0); /* one after another on the default stream */
  for (int k = 0; k < THREADS; ++k) CUDA_OK(cudaMemset(w[k].out_dev, 0xFF, ob));
  run_workers(w, 1); /* four threads, four streams, at once */
  for (int k = 0; k < THREADS; ++k) {
    cr_assert(memcmp(w[k].final_state, ref[k].final_state, sb) == 0, "worker %d: state differs", k);
    cr_assert(memcmp(w[k].outs, ref[k].outs, ob) == 0, "worker %d: outputs differ", k);
    cr_assert(memcmp(w[k].final_state, w[k].state0, sb) != 0, "worker %d wrote nothing", k);
    cudaFree(w[k].state_dev), cudaFree(w[k].out_dev), cudaFree(w[k].in_dev), cudaFree(w[k].plans_dev);
    cudaFreeHost(w[k].final_state), cudaFreeHost(w[k].outs), cudaFreeHost(ref[k].final_state),
        cudaFreeHost(ref[k].outs);
    free((void *)w[k].state0), free((void *)w[k].inputs), free((void *)w[k].plans);
  }
  cudaFree(ape_dev), free(ape);
}

/* ---- determinism ---------------------------------------------------------------------------- */
Test(gpu, runs_are_bitwise_deterministic) {
  require_backend(BACKEND_GPU);
  rng r = rng_fresh();
  enum { N = 4096, D = 512, ROWB = 2 * D };
  const size_t sb = 8 * 128 * ROWB * sizeof(float), ob = (N / 128) * D * sizeof(float);
  float *state = malloc(sb), *input = malloc((size_t)N * ROWB * sizeof(float)), *ape = ape_make(D, &r);
  rows_fill(state, 8 * 128, D, C128_F32, &r, 60.0f);
  rows_fill(input, N, D, C128_F32, &r, 60.0f);
  c128_ring ring = {0};
  ring.state_pages = 8;
  c128_request req[4] = {{3, 1000, 900}, {0, 1100, 1100}, {7, 1300, 1000}, {5, 1096, 1096}};
  static c128_compress_plan cp[N];
  static c128_write_plan wp[N];
  c128_prefill_plans plans = {cp, wp, N, 0, 0, 0};
  cr_assert_eq(c128_plan_prefill(&ring, req, 4, 0, &plans), C128_SUCCESS);
  float *d_state, *d_in, *d_ape, *d_out;
  void *d_cp, *d_wp;
  CUDA_OK(cudaMalloc((void **)&d_state, sb));
  CUDA_OK(cudaMalloc((void **)&d_out, ob));
  CUDA_OK(cudaMalloc((void **)&d_in, (size_t)N * ROWB * sizeof(float)));
  CUDA_OK(cudaMalloc((void **)&d_ape, 128 * D * 4));
  CUDA_OK(cudaMalloc(&d_cp, sizeof cp));
  CUDA_OK(cudaMalloc(&d_wp, sizeof wp));
  CUDA_OK(cudaMemcpy(d_in, input, (size_t)N * ROWB * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_ape, ape, 128 * D * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_cp, cp, sizeof cp, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_wp, wp, sizeof wp, cudaMemcpyHostToDevice));
  char *first_state = malloc(sb), *first_out = malloc(ob), *got_state = malloc(sb), *got_out = malloc(ob);
  for (int run = 0; run < 8; ++run) {
    CUDA_OK(cudaMemcpy(d_state, state, sb, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(d_out, 0xFF, ob));
    c128_prefill_args a = {0};
    a.head_dim = D, a.state = d_state, a.state_pages = 8, a.input = d_in, a.input_rows = 4096, a.ape = d_ape;
    a.output = d_out, a.output_rows = N / 128, a.compress_plans = d_cp, a.num_compress = plans.num_compress;
    a.write_plans = d_wp, a.num_write = plans.num_write, a.pdl = run % 2;
    cr_assert_eq(c128_prefill(&a, 0), C128_SUCCESS);
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(run ? got_state : first_state, d_state, sb, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(run ? got_out : first_out, d_out, ob, cudaMemcpyDeviceToHost));
    if (run) {
      cr_assert(memcmp(first_state, got_state, sb) == 0, "run %d: state differs", run);
      cr_assert(memcmp(first_out, got_out, ob) == 0, "run %d: outputs differ", run);
    }
  }
  cudaFree(d_state), cudaFree(d_out), cudaFree(d_in), cudaFree(d_ape), cudaFree(d_cp), cudaFree(d_wp);
  free(state), free(input), free(ape), free(first_state), free(first_out), free(got_state), free(got_out);
}
