/* The host plan checker: each condition is reported with the offending plan's index, kind and
   a message, and plans from the planner pass. */
#include <criterion/criterion.h>
#include <string.h>

#include "harness.h"

enum { D = 256, PAGES = 4, ROWS = 300 };

static c128_prefill_args prefill_sizes(void) {
  c128_prefill_args a = {0};
  a.head_dim = D, a.state_pages = PAGES, a.input_rows = ROWS, a.output_rows = 8;
  return a;
}

/* A valid batch from the planner: one request of 300 tokens on pool row 1. */
static void planned(c128_compress_plan *cp, c128_write_plan *wp, int64_t *nc, int64_t *nw) {
  c128_ring ring = {0};
  ring.state_pages = PAGES;
  const c128_request req = {1, 300, 300};
  c128_prefill_plans plans = {0};
  plans.compress = cp, plans.write = wp, plans.capacity = ROWS;
  cr_assert_eq(c128_plan_prefill(&ring, &req, 1, 0, &plans), C128_SUCCESS);
  *nc = plans.num_compress, *nw = plans.num_write;
}

static void expect_report(c128_status st, const c128_plan_report *r, c128_plan_kind kind, int64_t index,
                          const char *text) {
  cr_assert_eq(st, C128_ERROR_INVALID_PLAN, "%s", c128_status_string(st));
  cr_assert_eq(r->kind, kind);
  cr_assert_eq(r->index, index);
  cr_assert(strstr(r->message, text) != NULL, "message '%s' lacks '%s'", r->message, text);
}

Test(cpu, checker_accepts_planned_batches) {
  static c128_compress_plan cp[ROWS];
  static c128_write_plan wp[ROWS];
  int64_t nc, nw;
  planned(cp, wp, &nc, &nw);
  c128_prefill_args a = prefill_sizes();
  a.compress_plans = cp, a.num_compress = nc, a.write_plans = wp, a.num_write = nw;
  char msg[200] = "";
  c128_plan_report r = {0, 0, msg, sizeof msg};
  cr_assert_eq(c128_check_prefill_plans(&a, &r), C128_SUCCESS, "%s", msg);
  cr_assert_eq(r.index, -1);
}

Test(cpu, checker_reports_each_compress_condition) {
  static c128_compress_plan cp[ROWS];
  static c128_write_plan wp[ROWS];
  int64_t nc, nw;
  planned(cp, wp, &nc, &nw);
  struct {
    int field;
    uint32_t value;
    const char *text;
  } cases[] = {{0, 130, "not a multiple of 128"}, {1, ROWS + 1, "input row"}, {1, 5, "before input row 0"},
               {2, 128, "buffer_len > 127"},      {3, PAGES, "read_page_1"},  {3, (uint32_t)-3, "read_page_1"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    c128_compress_plan bad[2] = {cp[0], cp[1]};
    if (cases[i].field == 0) bad[1].seq_len = cases[i].value;
    if (cases[i].field == 1) bad[1].ragged_id = (uint16_t)cases[i].value, bad[1].buffer_len = 0;
    if (cases[i].field == 2) bad[1].buffer_len = (uint16_t)cases[i].value;
    if (cases[i].field == 3) bad[1].buffer_len = 3, bad[1].read_page_1 = (int32_t)cases[i].value;
    c128_prefill_args a = prefill_sizes();
    a.compress_plans = bad, a.num_compress = 2;
    char msg[200] = "";
    c128_plan_report r = {0, 0, msg, sizeof msg};
    expect_report(c128_check_prefill_plans(&a, &r), &r, C128_PLAN_COMPRESS, 1, cases[i].text);
  }
  /* Too few output rows is an argument error, as the launch has it (a valid count of output rows
     leaves no plan an output row to miss). */
  c128_prefill_args a = prefill_sizes();
  a.compress_plans = cp, a.num_compress = 2, a.output_rows = 1;
  c128_plan_report r = {0};
  cr_assert_eq(c128_check_prefill_plans(&a, &r), C128_ERROR_OUTPUT_TOO_SMALL);
  cr_assert_eq(r.index, -1);
}

Test(cpu, checker_reports_each_write_condition) {
  static c128_compress_plan cp[ROWS];
  static c128_write_plan wp[ROWS];
  int64_t nc, nw;
  planned(cp, wp, &nc, &nw);
  cr_assert_geq(nw, 4);
  const c128_write_plan bad[] = {{ROWS, 3}, {0, -1}, {0, PAGES * 128}, {wp[2].ragged_id + 1, wp[2].write_loc}};
  const char *text[] = {"input row", "write slot", "write slot", "writes state row"};
  for (int i = 0; i < 4; ++i) {
    c128_write_plan w[4] = {wp[0], wp[1], wp[2], wp[3]};
    w[3] = bad[i];
    c128_prefill_args a = prefill_sizes();
    a.write_plans = w, a.num_write = 4;
    char msg[200] = "";
    c128_plan_report r = {0, 0, msg, sizeof msg};
    expect_report(c128_check_prefill_plans(&a, &r), &r, C128_PLAN_WRITE, 3, text[i]);
  }
}

Test(cpu, checker_reports_decode_conditions) {
  const c128_decode_plan good[3] = {{128, 127, 0, 0}, {0, -1, -1, -1}, {300, 2 * 128 + 43, 1, 2}};
  const c128_decode_plan bad[] = {
      {256, 3 * 128 + 127, 3, 2}, {256, 127, 0, 0}, {5, PAGES * 128 + 4, 0, 0}, {256, 2 * 128 + 127, 2, PAGES + 2}};
  const char *text[] = {"not row 127 of read page", "writes state row", "write slot", "read_page_1"};
  c128_decode_args a = {0};
  a.head_dim = D, a.state_pages = PAGES, a.output_rows = 4, a.batch = 4;
  for (int i = 0; i < 4; ++i) {
    c128_decode_plan p[4] = {good[0], good[1], good[2], bad[i]};
    a.plans = p;
    char msg[200] = "";
    c128_plan_report r = {0, 0, msg, sizeof msg};
    expect_report(c128_check_decode_plans(&a, &r), &r, C128_PLAN_DECODE, 3, text[i]);
  }
  c128_decode_plan p[3] = {good[0], good[1], good[2]};
  a.plans = p, a.batch = 3;
  char msg[200] = "";
  c128_plan_report r = {0, 0, msg, sizeof msg};
  cr_assert_eq(c128_check_decode_plans(&a, &r), C128_SUCCESS);
  a.output_rows = 2; /* fewer output rows than requests: the launch's argument error */
  cr_assert_eq(c128_check_decode_plans(&a, &r), C128_ERROR_OUTPUT_TOO_SMALL);
  cr_assert_eq(r.index, -1);
}

Test(cpu, error_invalid_plan) {
  const c128_write_plan w[2] = {{0, 7}, {1, 7}};
  c128_prefill_args a = prefill_sizes();
  a.write_plans = w, a.num_write = 2;
  c128_plan_report r = {0};
  cr_assert_eq(c128_check_prefill_plans(&a, &r), C128_ERROR_INVALID_PLAN);
  cr_assert_eq(r.index, 1);
}

/* Found by the fuzzer: a huge head_dim overflowed the checker's size arithmetic (and divided by
   zero at 2^24); any int32 in an enum field must be refused, not be undefined behaviour. */
Test(cpu, checker_refuses_huge_head_dim_and_stray_enums) {
  c128_decode_args d = {0};
  c128_plan_report r = {0};
  d.head_dim = 1 << 24;
  cr_assert_eq(c128_check_decode_plans(&d, &r), C128_ERROR_UNSUPPORTED_INSTANCE);
  c128_prefill_args p = prefill_sizes();
  p.head_dim = 1 << 23;
  cr_assert_eq(c128_check_prefill_plans(&p, &r), C128_ERROR_UNSUPPORTED_INSTANCE);
  const int32_t stray[] = {-1, 7, 15, 0x7FFFFFFF, (int32_t)0x80000000};
  for (size_t i = 0; i < sizeof stray / sizeof stray[0]; ++i) {
    c128_decode_args a = {0};
    a.head_dim = 512;
    memcpy(&a.output_dtype, &stray[i], sizeof stray[i]);
    cr_assert_eq(c128_decode_host(&a, NULL), C128_ERROR_UNSUPPORTED_INSTANCE, "dtype %d", stray[i]);
  }
  const int32_t stray_status[] = {-1, C128_ERROR_WORKSPACE_TOO_SMALL + 1, 999, 0x7FFFFFFF, (int32_t)0x80000000};
  for (size_t i = 0; i < sizeof stray_status / sizeof stray_status[0]; ++i) {
    c128_status s;
    memcpy(&s, &stray_status[i], sizeof s);
    cr_assert_str_eq(c128_status_string(s), "unknown c128_status");
  }
}

/* A decode batch whose result depends on block order: one plan's window reads rows another plan
   writes in the same launch. The checker refuses the later plan of the pair, in either order and
   through the shared layout's page translation; the host runner's race checker flags the same
   batch when the two requests run in different blocks, and the output differs between forward
   and reverse block order. */
static c128_status run_decode_cpu(c128_decode_args a, const c128_decode_plan *p, void *state, void *out, int reverse,
                                  char *msg, size_t size) {
  a.plans = p, a.state = state, a.output = out;
  const c128_host_options o = cpu_options(reverse, msg, size);
  return c128_decode_host(&a, &o);
}

Test(cpu, checker_refuses_a_window_another_plan_writes) {
  rng r = rng_fresh();
  const size_t state_rows = PAGES * 128, out_bytes = 2 * (size_t)D * sizeof(float);
  void *state = rows_alloc(state_rows, D, C128_F32), *input = rows_alloc(2, D, C128_F32);
  rows_fill(state, state_rows, D, C128_F32, &r, 1.0f);
  rows_fill(input, 2, D, C128_F32, &r, 1.0f);
  float *ape = ape_make(D, &r);
  c128_decode_args a = {0};
  a.head_dim = D, a.state_dtype = a.input_dtype = a.output_dtype = C128_F32;
  a.state_pages = PAGES, a.input = input, a.ape = ape, a.output_rows = 2, a.batch = 2, a.requests_per_block = 1;
  /* plan 0 at a boundary reads rows 0..126 of page 0; plan 1 writes page 0 slot 5 */
  const c128_decode_plan reads_first[2] = {{128, 127, 0, 0}, {6, 5, 0, 0}};
  const c128_decode_plan writes_first[2] = {{6, 5, 0, 0}, {128, 127, 0, 0}};
  const char *text[2] = {"which plan 0 reads in its window",
                         "its window reads state row 0 .. 126; plan 0 writes row 5"};
  for (int order = 0; order < 2; ++order) {
    const c128_decode_plan *p = order ? writes_first : reads_first;
    char msg[200] = "";
    c128_plan_report rep = {0, 0, msg, sizeof msg};
    a.plans = p;
    expect_report(c128_check_decode_plans(&a, &rep), &rep, C128_PLAN_DECODE, 1, text[order]);
    void *out[2];
    for (int reverse = 0; reverse < 2; ++reverse) {
      void *st = clone_bytes(state, state_rows * 2 * D * sizeof(float));
      out[reverse] = malloc(out_bytes);
      poison(out[reverse], out_bytes);
      char race[256];
      cr_assert_eq(run_decode_cpu(a, p, st, out[reverse], reverse, race, sizeof race), C128_ERROR_RACE_DETECTED,
                   "order %d reverse %d", order, reverse);
      c128_decode_args u = a; /* again without the race checker: the block order shows in the output */
      u.plans = p, u.state = memcpy(st, state, state_rows * 2 * D * sizeof(float)), u.output = out[reverse];
      c128_host_options o = {0};
      o.reverse_blocks = reverse;
      cr_assert_eq(c128_decode_host(&u, &o), C128_SUCCESS);
      free(st);
    }
    const int window = order ? 1 : 0;
    cr_assert(memcmp((char *)out[0] + window * D * sizeof(float), (char *)out[1] + window * D * sizeof(float),
                     D * sizeof(float)) != 0,
              "the window's output should depend on block order (seed %llu)", (unsigned long long)r.seed);
    free(out[0]), free(out[1]);
  }
  /* The same plans in logical pages of a state sharded over two ranks: the checker translates. */
  for (int rank = 0; rank < 2; ++rank) {
    c128_decode_args s = a;
    s.layout.rank = rank, s.layout.size = 2, s.layout.pages_per_rank = PAGES / 2;
    s.plans = reads_first;
    char msg[200] = "";
    c128_plan_report rep = {0, 0, msg, sizeof msg};
    expect_report(c128_check_decode_plans(&s, &rep), &rep, C128_PLAN_DECODE, 1, text[0]);
  }
  free(state), free(input), free(ape);
}

/* Random decode batches of one request a block over few pages: the checker refuses a batch
   exactly when the host runner's race checker finds a race between its blocks (a row written
   twice, or written and read by two windows' blocks), and names the first plan that meets an
   earlier one. */
Test(cpu, checker_agrees_with_the_race_checker) {
  rng r = rng_fresh();
  enum { BATCH = 6, TRIALS = 120, SMALL_PAGES = 6 }; /* about 60 % of the batches conflict */
  const size_t state_rows = SMALL_PAGES * 128, state_bytes = state_rows * 2 * D * sizeof(float);
  void *state = rows_alloc(state_rows, D, C128_F32), *input = rows_alloc(BATCH, D, C128_F32);
  rows_fill(state, state_rows, D, C128_F32, &r, 1.0f);
  rows_fill(input, BATCH, D, C128_F32, &r, 1.0f);
  float *ape = ape_make(D, &r);
  void *st = malloc(state_bytes), *out = malloc(BATCH * D * sizeof(float));
  int refused = 0;
  for (int trial = 0; trial < TRIALS; ++trial) {
    c128_decode_plan p[BATCH];
    for (int b = 0; b < BATCH; ++b) {
      const int32_t page = (int32_t)rng_below(&r, SMALL_PAGES), kind = (int32_t)rng_below(&r, 8);
      if (kind == 0) p[b] = (c128_decode_plan){0, -1, -1, -1};                         /* padding */
      else if (kind < 3) p[b] = (c128_decode_plan){128, page * 128 + 127, page, page}; /* a boundary */
      else {
        const int32_t slot = rng_below(&r, 4) ? (int32_t)rng_below(&r, 127) : 126;
        p[b] = (c128_decode_plan){(uint32_t)slot + 1, page * 128 + slot, page, page};
      }
    }
    c128_decode_args a = {0};
    a.head_dim = D, a.state_dtype = a.input_dtype = a.output_dtype = C128_F32;
    a.state_pages = SMALL_PAGES, a.input = input, a.ape = ape, a.output_rows = BATCH, a.batch = BATCH;
    a.requests_per_block = 1, a.plans = p;
    char msg[200] = "";
    c128_plan_report rep = {0, 0, msg, sizeof msg};
    const c128_status cst = c128_check_decode_plans(&a, &rep);
    cr_assert(cst == C128_SUCCESS || cst == C128_ERROR_INVALID_PLAN, "%s", c128_status_string(cst));
    /* the first plan that conflicts with an earlier one, by the rules written out here */
    int64_t want = -1;
    for (int k = 0; k < BATCH && want < 0; ++k)
      for (int j = 0; j < k && want < 0 && p[k].seq_len; ++j) {
        if (!p[j].seq_len) continue;
        const int jw = p[j].write_loc, kw = p[k].write_loc;
        const int j_reads_k = jw % 128 == 127 && kw / 128 == jw / 128 && kw % 128 < 127;
        const int k_reads_j = kw % 128 == 127 && jw / 128 == kw / 128 && jw % 128 < 127;
        if (jw == kw || j_reads_k || k_reads_j) want = k;
      }
    cr_assert_eq(rep.index, want, "trial %d: checker %s names plan %lld (%s), expected %lld (seed %llu)", trial,
                 c128_status_string(cst), (long long)rep.index, msg, (long long)want, (unsigned long long)r.seed);
    for (int reverse = 0; reverse < 2; ++reverse) {
      memcpy(st, state, state_bytes);
      char race[256];
      const c128_status hst = run_decode_cpu(a, p, st, out, reverse, race, sizeof race);
      cr_assert_eq(hst, want >= 0 ? C128_ERROR_RACE_DETECTED : C128_SUCCESS,
                   "trial %d reverse %d: host runner %s (%s), checker %s (seed %llu)", trial, reverse,
                   c128_status_string(hst), race, c128_status_string(cst), (unsigned long long)r.seed);
    }
    refused += want >= 0;
  }
  cr_assert(refused > TRIALS / 10 && refused < TRIALS - TRIALS / 10, "%d of %d batches conflict: draw more evenly",
            refused, TRIALS);
  free(state), free(input), free(ape), free(st), free(out);
}
