/* Decode with every group size (requests_per_block 1 .. C128_MAX_DECODE_GROUP, then the
   automatic 0), PDL on and off, over batches that mix boundary, off-boundary, padding and
   hostile plans (random bytes among them), each run as a chain of two dependent launches: the
   second step's windows read rows the first step wrote, and the second step overwrites rows the
   first step's windows read. Every GPU run must equal the host runner's result over the same data
   and plans (the state bit for bit; the outputs bit for bit in a C128_MATH_EXACT build, within
   C128_FAST_BOUND otherwise) and the first GPU run bit for bit; only the rows the plans name may
   change (poisoned outputs, canaries around every device buffer). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum { STEPS = 2, EXTRA_OUT = 3, WIN = REF_WINDOW, LAST = REF_WINDOW - 1 };

/* What request b's plans are. Valid and hostile plans that name a page use pages no other
   request touches, so no two requests store one row and no window reads a row that another
   request stores: the launch is race-free whatever the grouping, hence deterministic. */
typedef enum plan_kind {
  KIND_BOUNDARY,  /* slot 127 of its page: persists and folds the page's window (step 1: slot 126) */
  KIND_OFF,       /* another slot of its page (slot 0: step 1 folded the page's previous window) */
  KIND_FOREIGN,   /* a boundary that folds another page, the one its step 1 writes */
  KIND_BAD_READ,  /* a boundary whose read_page_1 lies outside the state (step 1: a valid slot 126) */
  KIND_BAD_WRITE, /* write_loc's page at or past state_pages */
  KIND_PAD_SEQ0,  /* seq_len 0, the other fields naming rows other requests store */
  KIND_PAD_NEG,   /* write_loc < 0 */
  KIND_RANDOM,    /* random bytes; padding instead when they would touch another request's page */
  KIND_COUNT
} plan_kind;

/* DESIGN 6.5 for decode plan b of an unsharded state, output_rows >= batch: the state row it
   stores, or -1 when the kernel skips it; *folds: whether it also folds a window. */
static int64_t stored_row(c128_decode_plan p, int64_t pages, int *folds) {
  *folds = 0;
  if (p.seq_len == 0 || p.write_loc < 0 || p.write_loc / WIN >= pages) return -1;
  if (p.write_loc % WIN == LAST) {
    if (p.read_page_1 < 0 || p.read_page_1 >= pages) return -1;
    *folds = 1;
  }
  return p.write_loc;
}

typedef struct page_pool {
  int32_t *owner; /* request touching the page, or -1 */
  int32_t *order; /* pages in random order; next ones are free */
  int64_t pages, next;
} page_pool;

static int32_t take_page(page_pool *pp, int64_t b) {
  cr_assert_lt(pp->next, pp->pages, "page pool exhausted");
  const int32_t p = pp->order[pp->next++];
  pp->owner[p] = (int32_t)b;
  return p;
}

/* Touches the pages of a plan that runs for request b, or returns 0 when one of them is another's. */
static int claim(page_pool *pp, c128_decode_plan p, int64_t b) {
  int folds;
  const int64_t row = stored_row(p, pp->pages, &folds);
  if (row < 0) return 1;
  const int32_t w = (int32_t)(row / WIN), rd = folds ? p.read_page_1 : w;
  if ((pp->owner[w] >= 0 && pp->owner[w] != b) || (pp->owner[rd] >= 0 && pp->owner[rd] != b)) return 0;
  pp->owner[w] = pp->owner[rd] = (int32_t)b;
  return 1;
}

/* plans[0 .. batch) for step 1, plans[batch .. 2 batch) for step 2. */
static void make_plans(rng *r, int64_t batch, int64_t pages, c128_decode_plan *plans) {
  page_pool pp = {malloc((size_t)pages * sizeof(int32_t)), malloc((size_t)pages * sizeof(int32_t)), pages, 0};
  plan_kind *kind = malloc((size_t)batch * sizeof *kind);
  cr_assert(pp.owner && pp.order && kind);
  for (int64_t i = 0; i < pages; ++i) pp.owner[i] = -1, pp.order[i] = (int32_t)i;
  for (int64_t i = pages - 1; i > 0; --i) {
    const int64_t j = rng_below(r, i + 1);
    const int32_t t = pp.order[i];
    pp.order[i] = pp.order[j], pp.order[j] = t;
  }
  /* Every kind at least once where the batch has room, the rest drawn (about a third at a
     boundary), then shuffled; B = 1 is a boundary. */
  static const plan_kind draw[20] = {KIND_BOUNDARY, KIND_BOUNDARY, KIND_BOUNDARY, KIND_BOUNDARY,  KIND_BOUNDARY,
                                     KIND_OFF,      KIND_OFF,      KIND_OFF,      KIND_OFF,       KIND_OFF,
                                     KIND_FOREIGN,  KIND_BAD_READ, KIND_BAD_READ, KIND_BAD_WRITE, KIND_BAD_WRITE,
                                     KIND_PAD_SEQ0, KIND_PAD_NEG,  KIND_RANDOM,   KIND_RANDOM,    KIND_RANDOM};
  for (int64_t b = 0; b < batch; ++b) kind[b] = b < KIND_COUNT ? (plan_kind)b : draw[rng_below(r, 20)];
  for (int64_t i = batch - 1; i > 0; --i) {
    const int64_t j = rng_below(r, i + 1);
    const plan_kind t = kind[i];
    kind[i] = kind[j], kind[j] = t;
  }
  c128_decode_plan *s1 = plans, *s2 = plans + batch;
  for (int pass = 0; pass < 2; ++pass) /* random plans last: they must keep off every other page */
    for (int64_t b = 0; b < batch; ++b) {
      if ((kind[b] == KIND_RANDOM) != (pass == 1)) continue;
      const uint32_t n = (uint32_t)(1 + rng_below(r, 8)); /* the window the new token belongs to */
      int32_t p = -1, q = -1;
      switch (kind[b]) {
      case KIND_BOUNDARY:
        p = take_page(&pp, b);
        s1[b] = (c128_decode_plan){WIN * (n + 1) - 1, p * WIN + LAST - 1, p, p};
        s2[b] = (c128_decode_plan){WIN * (n + 1), p * WIN + LAST, p, p};
        break;
      case KIND_OFF: {
        p = take_page(&pp, b);
        const int32_t slot = rng_below(r, 3) == 0 ? 0 : (int32_t)(1 + rng_below(r, LAST - 1)); /* 0 or 1 .. 126 */
        s1[b] = slot ? (c128_decode_plan){WIN * n + (uint32_t)slot, p * WIN + slot - 1, p, p}
                     : (c128_decode_plan){WIN * n, p * WIN + LAST, p, p};
        s2[b] = (c128_decode_plan){WIN * n + (uint32_t)slot + 1, p * WIN + slot, p, p};
        break;
      }
      case KIND_FOREIGN:
        p = take_page(&pp, b), q = take_page(&pp, b);
        s1[b] = (c128_decode_plan){WIN * n + 5, q * WIN + (int32_t)rng_below(r, LAST), q, q};
        s2[b] = (c128_decode_plan){WIN * (n + 1), p * WIN + LAST, p, q};
        break;
      case KIND_BAD_READ: {
        p = take_page(&pp, b);
        const int32_t bad[6] = {-1,        (int32_t)pages, (int32_t)(pages + rng_below(r, 1000)),
                                INT32_MAX, INT32_MIN,      (int32_t)(-1 - rng_below(r, 1000))};
        s1[b] = (c128_decode_plan){WIN * (n + 1) - 1, p * WIN + LAST - 1, p, p};
        s2[b] = (c128_decode_plan){WIN * (n + 1), p * WIN + LAST, p, bad[rng_below(r, 6)]};
        break;
      }
      case KIND_BAD_WRITE: {
        const int32_t bad[4] = {(int32_t)(pages * WIN + rng_below(r, WIN)),
                                (int32_t)((pages + rng_below(r, 1000)) * WIN + LAST), INT32_MAX,
                                (int32_t)(INT32_MAX - rng_below(r, WIN))};
        s2[b] =
            (c128_decode_plan){WIN * (n + 1), bad[rng_below(r, 4)], rng_edgy(r, pages), (int32_t)rng_below(r, pages)};
        s1[b] = s2[b];
        break;
      }
      case KIND_PAD_SEQ0:
        s2[b] =
            (c128_decode_plan){0, (int32_t)(rng_below(r, pages) * WIN + (rng_below(r, 2) ? LAST : rng_below(r, WIN))),
                               rng_edgy(r, pages), (int32_t)rng_below(r, pages)};
        s1[b] = s2[b];
        break;
      case KIND_PAD_NEG: {
        const int32_t neg[3] = {-1, INT32_MIN, (int32_t)(-1 - rng_below(r, pages * WIN))};
        s2[b] = (c128_decode_plan){rng_below(r, 2) ? (uint32_t)(1 + rng_below(r, 1000)) : (uint32_t)rng_u64(r) | 1u,
                                   neg[rng_below(r, 3)], rng_edgy(r, pages), rng_edgy(r, pages)};
        s1[b] = s2[b];
        break;
      }
      default: /* KIND_RANDOM */
        s2[b] = (c128_decode_plan){(uint32_t)rng_edgy(r, 600), rng_edgy(r, pages * WIN), rng_edgy(r, pages),
                                   rng_edgy(r, pages)};
        if (rng_below(r, 3) == 0 && s2[b].write_loc >= 0) s2[b].write_loc = s2[b].write_loc / WIN * WIN + LAST;
        if (!claim(&pp, s2[b], b)) s2[b].seq_len = 0; /* it would race: now padding, its other bytes kept */
        s1[b] = s2[b];
        break;
      }
    }
  free(pp.owner), free(pp.order), free(kind);
}

/* One case: an instance, a batch, its inputs and both steps' plans. */
typedef struct chain_case {
  const c128_instance_info *f;
  int64_t batch, pages, out_rows; /* out_rows per step: batch + EXTRA_OUT, the extra ones never written */
  size_t state_row, input_row, out_row, state_bytes, out_bytes;
  void *state0, *input; /* input: STEPS * batch rows, step s reads rows s * batch .. */
  float *ape;
  c128_decode_plan *plans; /* STEPS * batch */
} chain_case;

static c128_decode_args step_args(const chain_case *c, int step, void *state, const void *input, const float *ape,
                                  void *out, const c128_decode_plan *plans, int32_t group, int pdl) {
  c128_decode_args a = {0};
  a.head_dim = c->f->head_dim;
  a.state_dtype = c->f->state_dtype, a.input_dtype = c->f->input_dtype, a.output_dtype = c->f->output_dtype;
  a.state = state, a.state_pages = c->pages;
  a.input = (const char *)input + (size_t)step * (size_t)c->batch * c->input_row;
  a.ape = ape;
  a.output = (char *)out + (size_t)step * (size_t)c->out_rows * c->out_row, a.output_rows = c->out_rows;
  a.plans = plans + (size_t)step * (size_t)c->batch, a.batch = c->batch;
  a.pdl = pdl, a.requests_per_block = group;
  return a;
}

/* Only the output rows of folded windows may differ from the poison. */
static void check_untouched(const chain_case *c, const char *out, const unsigned char *folded, const char *poisoned,
                            const char *what, uint64_t seed) {
  for (int64_t row = 0; row < STEPS * c->out_rows; ++row)
    if (!folded[row])
      cr_assert(memcmp(out + (size_t)row * c->out_row, poisoned, c->out_row) == 0,
                "%s: output row %lld of step %lld was written, its plan folds no window (seed %llu)", what,
                (long long)(row % c->out_rows), (long long)(row / c->out_rows + 1), (unsigned long long)seed);
}

/* One instance and batch size: every group size, PDL off and on, on the GPU. The CPU backend runs
   only the host runner's side (groups 1, 32 and automatic, the race checker on, the model of the
   skip rules and the oracle). */
static void every_group(const instance_entry *e, backend be, int64_t batch, float score_scale, rng *r) {
  chain_case c;
  memset(&c, 0, sizeof c);
  c.f = e;
  const int D = c.f->head_dim;
  c.batch = batch, c.pages = batch + batch / 4 + 8, c.out_rows = batch + EXTRA_OUT;
  c.state_row = (size_t)c.f->row_elems * dtype_size(c.f->state_dtype);
  c.input_row = (size_t)c.f->row_elems * dtype_size(c.f->input_dtype);
  c.out_row = (size_t)D * dtype_size(c.f->output_dtype);
  c.state_bytes = (size_t)c.pages * WIN * c.state_row, c.out_bytes = (size_t)(STEPS * c.out_rows) * c.out_row;
  const size_t state_rows = (size_t)c.pages * WIN, input_rows = (size_t)(STEPS * batch);
  if (be == BACKEND_GPU) CUDA_OK(cudaMallocHost(&c.state0, c.state_bytes)); /* pinned: uploaded for every run */
  else c.state0 = malloc(c.state_bytes);
  cr_assert_not_null(c.state0);
  c.input = rows_alloc(input_rows, D, c.f->input_dtype);
  rows_fill(c.state0, state_rows, D, c.f->state_dtype, r, score_scale);
  rows_fill(c.input, input_rows, D, c.f->input_dtype, r, score_scale);
  c.ape = ape_make(D, r);
  c.plans = malloc(input_rows * sizeof *c.plans);
  cr_assert_not_null(c.plans);
  make_plans(r, batch, c.pages, c.plans);
  const uint64_t seed = r->seed;

  /* What the two steps must do: the state after each (from DESIGN 6.5's skip rules), and the
     oracle of every window folded, over the state as the step finds it. */
  char *want = clone_bytes(c.state0, c.state_bytes), *before = malloc(c.state_bytes);
  unsigned char *folded = calloc((size_t)(STEPS * c.out_rows), 1);
  double *ref = malloc((size_t)(STEPS * c.out_rows) * (size_t)D * sizeof(double));
  float *scratch = malloc((size_t)WIN * 2 * (size_t)D * sizeof(float));
  char *poisoned = malloc(c.out_bytes);
  cr_assert(before && folded && ref && scratch && poisoned);
  poison(poisoned, c.out_bytes);
  int64_t stores = 0, windows = 0, skipped = 0;
  for (int s = 0; s < STEPS; ++s) {
    memcpy(before, want, c.state_bytes);
    for (int64_t b = 0; b < batch; ++b) {
      int folds;
      const c128_decode_plan p = c.plans[(size_t)s * (size_t)batch + (size_t)b];
      const int64_t row = stored_row(p, c.pages, &folds);
      if (row < 0) {
        ++skipped;
        continue;
      }
      const size_t in_row = (size_t)(s * batch + b);
      row_to_state(c.input, in_row, c.f->input_dtype, want + (size_t)row * c.state_row, c.f->state_dtype, D);
      ++stores;
      if (!folds) continue;
      const float *rows[REF_WINDOW];
      for (int j = 0; j < WIN; ++j) {
        float *dst = scratch + (size_t)j * 2 * (size_t)D;
        if (j < LAST) row_widen(before, (size_t)p.read_page_1 * WIN + (size_t)j, D, c.f->state_dtype, dst);
        else row_widen(c.input, in_row, D, c.f->input_dtype, dst);
        rows[j] = dst;
      }
      const int64_t out_row = s * c.out_rows + b;
      ref_window(D, rows, c.ape, ref + (size_t)out_row * (size_t)D);
      folded[out_row] = 1, ++windows;
    }
  }
  cr_log_info("%s B = %lld: %lld windows, %lld rows stored, %lld plans skipped over %d steps (seed %llu)", c.f->name,
              (long long)batch, (long long)windows, (long long)stores, (long long)skipped, STEPS,
              (unsigned long long)seed);
  cr_assert(windows > 0 && stores > windows, "the batch must fold windows and store rows (seed %llu)",
            (unsigned long long)seed);
  const double kv =
      fmax(max_abs_kv(c.state0, state_rows, D, c.f->state_dtype), max_abs_kv(c.input, input_rows, D, c.f->input_dtype));

  const int gpu = be == BACKEND_GPU;
  dev_guarded g_state = {0}, g_out = {0}, g_in = {0}, g_ape = {0}, g_plans = {0};
  cudaStream_t stream = 0;
  if (gpu) {
    g_state = dev_guarded_make(NULL, c.state_bytes), g_out = dev_guarded_make(NULL, c.out_bytes);
    g_in = dev_guarded_make(c.input, input_rows * c.input_row);
    g_ape = dev_guarded_make(c.ape, (size_t)REF_APE_ROWS * (size_t)D * sizeof(float));
    g_plans = dev_guarded_make(c.plans, input_rows * sizeof *c.plans);
    CUDA_OK(cudaStreamCreate(&stream));
  }
  char *host_state = malloc(c.state_bytes), *host_out = malloc(c.out_bytes);
  char *first_state = malloc(c.state_bytes), *first_out = malloc(c.out_bytes);
  char *gpu_first_state = malloc(c.state_bytes), *gpu_first_out = malloc(c.out_bytes);
  cr_assert(host_state && host_out && first_state && first_out && gpu_first_state && gpu_first_out);
  char what[160], msg[256];

  /* The host runner over the same inputs, race checker on: one request per block, blocks forward
     (every request a block of its own, so any row two requests share is a race it reports), then
     groups of 32 reversed and the automatic group. Its result does not depend on the group (bit
     for bit, checked here and by cpu/decode_groups_agree): it is the reference of every GPU run.
     One run per group would cost most of the test's time (the legacy build's host runner replays
     the butterflies) and check only the host runner again. */
  static const int32_t host_groups[] = {1, C128_MAX_DECODE_GROUP, 0};
  for (size_t h = 0; h < sizeof host_groups / sizeof host_groups[0]; ++h) {
    char *hs = h ? host_state : first_state, *ho = h ? host_out : first_out;
    memcpy(hs, c.state0, c.state_bytes), memcpy(ho, poisoned, c.out_bytes);
    for (int s = 0; s < STEPS; ++s) {
      const c128_host_options o = cpu_options(h == 1, msg, sizeof msg);
      const c128_decode_args a = step_args(&c, s, hs, c.input, c.ape, ho, c.plans, host_groups[h], 0);
      const c128_status st = c128_decode_host(&a, &o);
      cr_assert_eq(st, C128_SUCCESS, "%s B %lld group %d step %d, host runner: %s %s (seed %llu)", c.f->name,
                   (long long)batch, host_groups[h], s + 1, c128_status_string(st), msg, (unsigned long long)seed);
    }
    snprintf(what, sizeof what, "%s B %lld group %d, host runner", c.f->name, (long long)batch, host_groups[h]);
    if (h == 0) { /* exactly what the plans say, and the windows within the oracle's tolerance */
      check_rows_equal(hs, want, state_rows, c.state_row, what, seed);
      check_untouched(&c, ho, folded, poisoned, what, seed);
      for (int64_t row = 0; row < STEPS * c.out_rows; ++row)
        if (folded[row]) check_output_row(ho, (size_t)row, c.f->output_dtype, ref + row * D, D, what, seed);
    } else {
      check_rows_equal(hs, first_state, state_rows, c.state_row, what, seed);
      check_rows_equal(ho, first_out, (size_t)(STEPS * c.out_rows), c.out_row, what, seed);
    }
  }

  for (int32_t gi = 0; gpu && gi <= C128_MAX_DECODE_GROUP; ++gi) {
    const int32_t group = gi < C128_MAX_DECODE_GROUP ? gi + 1 : 0; /* 1 .. 32, then automatic */
    for (int pdl = 0; pdl <= C128_PDL_PLANS_READY; ++pdl) {
      /* Both steps back to back on one stream, nothing between them: with PDL step 2 may start
         while step 1 runs, and must wait for it before reading or storing the state (the plans
         were uploaded before either began, as C128_PDL_PLANS_READY asks). */
      CUDA_OK(cudaMemcpyAsync(dev_guarded_inside(&g_state), c.state0, c.state_bytes, cudaMemcpyHostToDevice, stream));
      CUDA_OK(cudaMemsetAsync(dev_guarded_inside(&g_out), 0xFF, c.out_bytes, stream));
      for (int s = 0; s < STEPS; ++s) {
        const c128_decode_args a =
            step_args(&c, s, dev_guarded_inside(&g_state), dev_guarded_inside(&g_in), dev_guarded_inside(&g_ape),
                      dev_guarded_inside(&g_out), dev_guarded_inside(&g_plans), group, pdl);
        const c128_status st = c128_decode(&a, stream);
        cr_assert_eq(st, C128_SUCCESS, "%s B %lld group %d pdl %d step %d: %s (seed %llu)", c.f->name, (long long)batch,
                     group, pdl, s + 1, c128_status_string(st), (unsigned long long)seed);
      }
      CUDA_OK(cudaStreamSynchronize(stream));
      CUDA_OK(cudaGetLastError());
      snprintf(what, sizeof what, "%s B %lld group %d pdl %d, GPU vs host runner", c.f->name, (long long)batch, group,
               pdl);
      const char *gs = dev_guarded_fetch(&g_state, what, seed), *go = dev_guarded_fetch(&g_out, what, seed);
      check_rows_equal(gs, first_state, state_rows, c.state_row, what, seed);
      check_gpu_output(go, first_out, (size_t)(STEPS * c.out_rows), c.f->output_dtype, D, kv, what, seed);
      check_untouched(&c, go, folded, poisoned, what, seed);
      snprintf(what, sizeof what, "%s B %lld group %d pdl %d, GPU vs group 1 pdl 0", c.f->name, (long long)batch, group,
               pdl);
      if (gi == 0 && pdl == 0) {
        memcpy(gpu_first_state, gs, c.state_bytes), memcpy(gpu_first_out, go, c.out_bytes);
      } else {
        check_rows_equal(gs, gpu_first_state, state_rows, c.state_row, what, seed);
        check_rows_equal(go, gpu_first_out, (size_t)(STEPS * c.out_rows), c.out_row, what, seed);
      }
    }
  }
  if (gpu) { /* the read-only buffers: unchanged, canaries included */
    snprintf(what, sizeof what, "%s B %lld, read-only buffers", c.f->name, (long long)batch);
    cr_assert(memcmp(dev_guarded_fetch(&g_in, what, seed), c.input, input_rows * c.input_row) == 0,
              "%s: input (seed %llu)", what, (unsigned long long)seed);
    cr_assert(memcmp(dev_guarded_fetch(&g_ape, what, seed), c.ape, (size_t)REF_APE_ROWS * (size_t)D * sizeof(float)) ==
                  0,
              "%s: ape (seed %llu)", what, (unsigned long long)seed);
    cr_assert(memcmp(dev_guarded_fetch(&g_plans, what, seed), c.plans, input_rows * sizeof *c.plans) == 0,
              "%s: plans (seed %llu)", what, (unsigned long long)seed);
    CUDA_OK(cudaStreamDestroy(stream));
    dev_guarded_free(&g_state), dev_guarded_free(&g_out), dev_guarded_free(&g_in), dev_guarded_free(&g_ape),
        dev_guarded_free(&g_plans);
    cudaFreeHost(c.state0);
  } else {
    free(c.state0);
  }
  free(c.input), free(c.ape), free(c.plans);
  free(want), free(before), free(folded), free(ref), free(scratch), free(poisoned);
  free(host_state), free(host_out), free(first_state), free(first_out), free(gpu_first_state), free(gpu_first_out);
}

/* f32 throughout; a bf16 state beside f32 input and bf16 output; DeepSeek-V4's bf16-state instance.
   B = 1 (every group larger than the batch), 37 and 100 (a partial last group for most sizes). */
static void every_case(backend be) {
  rng r = rng_fresh();
  static const int64_t batches[] = {1, 37, 100};
  static const float scales[] = {1.0f, 60.0f, 8.0f};
  const instance_entry *instances[] = {instance(C128_INSTANCE_h128_f32_f32_f32),
                                       instance(C128_INSTANCE_h256_bf16_f32_bf16),
                                       instance(C128_INSTANCE_h512_bf16_f32_f32)};
  for (size_t i = 0; i < sizeof instances / sizeof instances[0]; ++i)
    for (size_t k = 0; k < sizeof batches / sizeof batches[0]; ++k)
      every_group(instances[i], be, batches[k], scales[k], &r);
}

Test(gpu, decode_every_group_pdl_hostile_plans) {
  require_backend(BACKEND_GPU);
  every_case(BACKEND_GPU);
}

/* The host runner's half of the test above, where CI runs: the model of the skip rules, the
   oracle, and one result whatever the group and block order. */
Test(cpu, decode_every_group_hostile_plans_host) { every_case(BACKEND_CPU); }
