/* A serving simulator over the host planner and the kernels (SPEC 5, 8, 9).

   It keeps, per request, the committed token history (kv | score rows in the input dtype, drawn
   fresh for every case), plans every batch with c128_plan_prefill / c128_plan_decode, runs it on
   a backend (the host runner with its race checker, or the GPU with the state kept on the
   device across batches) and checks after every batch:
   - the plans, byte for byte, against SPEC 5 written out again in scenario.c (spec_plan_*);
   - every compressed window whose tokens are all committed against the fp64 oracle over the
     request's committed tokens, with the state's rounding modelled as SPEC 8 says; windows of a
     verify batch that end at or after prefix + accepted are discarded (computed on rejected
     drafts) and must be emitted again later; every window of a request is checked exactly once,
     in order;
   - output rows that no valid plan names are untouched;
   - exactly the rows named by write plans / decode write_locs changed, each bit-equal to its
     input row converted to the state dtype; every other state row is unchanged;
   - the ring invariant: every committed position of every live request's open window is in its
     slot with its committed value.
   Failures go through Criterion asserts and name the seed. */
#ifndef C128_TEST_SCENARIO_H
#define C128_TEST_SCENARIO_H

#include <stdint.h>

#include "harness.h"

typedef enum scen_layout {
  SCEN_LEGACY,     /* R = 128, page = pool index */
  SCEN_RING,       /* request ring: page = pool index * R / 128 + (pos mod R) / 128 */
  SCEN_PAGE_TABLE, /* shuffled pages from a pool, a page table with a spare column */
} scen_layout;

typedef struct scen_config {
  const instance_entry *entry;
  backend be;
  scen_layout layout;
  int ring_tokens;   /* R (SCEN_LEGACY: 128) */
  int speculative;   /* the ring's speculative flag */
  int num_pool;      /* pool rows = live requests at most */
  float score_scale; /* scores ~ N(0, scale^2): 1 = randn, 60 = stress the max subtraction */
  int reverse;       /* CPU: run the blocks of every other launch last to first */
  int pad_plans;     /* pad plan arrays to capacity = input rows and launch the capacity */
  int keep_outputs;  /* record every checked window (widened to f32): scen_window */
  int cross_check;   /* GPU: also run each batch on the host runner; bits must agree */
  uint64_t seed;     /* 0 = rng_fresh().seed: fresh, or $C128_SEED when set, so a named seed replays */
} scen_config;

typedef struct scenario scenario;

typedef struct scen_item {
  int req;    /* request id from scen_open */
  int extend; /* new rows (verify: drafts, root included) */
  int accept; /* verify only: how many of them the engine commits, 1..extend */
} scen_item;

typedef struct scen_stats {
  int64_t batches, rows, windows_checked, windows_discarded, writes;
  double max_rel_l2, max_abs; /* worst window against the oracle */
} scen_stats;

scenario *scen_create(const scen_config *config);
/* Checks that every request still open had each of its complete windows checked, then frees. */
void scen_destroy(scenario *s);
uint64_t scen_seed(const scenario *s);

/* A new request with no tokens on pool row `pool_index` (which must be free); returns its id. */
int scen_open(scenario *s, int pool_index);
/* The request finished: its windows must all have been checked; its pool row becomes free. */
void scen_close(scenario *s, int req);
int64_t scen_len(const scenario *s, int req);
int scen_num_requests(const scenario *s); /* ids handed out so far */
int scen_pool_index(const scenario *s, int req);

/* One prefill / extend (verify = 0: every row is committed) or verify batch, in item order. */
void scen_extend(scenario *s, const scen_item *items, int n, int verify);
/* One decode step; req -1 is a padding row (seq_len 0). */
void scen_decode(scenario *s, const int *reqs, int n);
/* Plans a batch that the planner must refuse with `want` (and SPEC 5 with it); checks that the
   plan arrays and counts are untouched. Nothing runs. */
void scen_extend_refused(scenario *s, const scen_item *items, int n, int verify, c128_status want);

scen_stats scen_get_stats(const scenario *s);
/* Window `window` of request `req` as checked (keep_outputs), or NULL. */
const float *scen_window(const scenario *s, int req, int64_t window);
/* The whole state as the last batch left it (host copy), and its size in bytes. */
const void *scen_state(const scenario *s, size_t *bytes);

/* SPEC 5 written out again, independently of the library. */
c128_status spec_page(const c128_ring *ring, int32_t pool_index, int64_t pos, int32_t *page);
c128_status spec_plan_prefill(const c128_ring *ring, const c128_request *reqs, int64_t n, int32_t verify,
                              int64_t capacity, c128_compress_plan *compress, int64_t *num_compress,
                              c128_write_plan *write, int64_t *num_write);
c128_status spec_plan_decode(const c128_ring *ring, const c128_request *reqs, int64_t n, c128_decode_plan *plans);

#endif
