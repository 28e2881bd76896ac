/* A serving simulator over the host planner and the kernels (SPEC 5, 8, 9; DESIGN 5.9-5.11).

   It keeps, per request, the committed token history (kv | score rows in the input dtype, drawn
   fresh for every case), plans every batch with c128_plan_prefill / c128_plan_decode, runs it on
   a backend (the host runner with its race checker, or the GPU with the state kept on the
   device across batches) and checks after every batch:
   - the plans, byte for byte, against SPEC 5 written out again in scenario.c (spec_plan_*),
     with a block table in its logical form (the request ring with R = 2^row_shift, and every
     block a plan reads or writes allocated);
   - every compressed window whose tokens are all committed against the fp64 oracle over the
     request's committed tokens, with the state's rounding modelled as SPEC 8 says (and a biased
     state's rows read as stored, score + ape rounded once, with no ape added again); windows of
     a verify batch that end at or after prefix + accepted are discarded (computed on rejected
     drafts) and must be emitted again later; every window of a request is checked exactly once,
     in order, in the output row its output_index names;
   - the plan checker accepts every planned batch (and names, as the first offending plan, a
     window that the batch's output_index sends outside the output on purpose);
   - output rows that no valid plan names are untouched;
   - exactly the physical rows (of each plane) that the write plans / decode write_locs name
     through the block tables changed, each bit-equal to its input row as the state stores it;
     every other row of every plane is unchanged;
   - the ring invariant, in physical rows: every committed position of every live request's open
     window is in its row with its committed value; with write_all, so is every committed
     position the ring can still hold (the last R, less those that rejected drafts overwrote,
     less evicted blocks).
   Failures go through Criterion asserts and name the seed. */
#ifndef C128_TEST_SCENARIO_H
#define C128_TEST_SCENARIO_H

#include <stdint.h>

#include "harness.h"

typedef enum scen_layout {
  SCEN_LEGACY,     /* R = 128, page = pool index */
  SCEN_RING,       /* request ring: page = pool index * R / 128 + (pos mod R) / 128 */
  SCEN_PAGE_TABLE, /* shuffled pages from a pool, a page table with a spare column */
  /* c128_state_layout's block table (DESIGN 5.9): plans name logical rows pool row << row_shift |
     pos mod R (R = 2^row_shift), the table maps column (pos mod R) / B of a pool row to a physical
     block, allocated at random from a pool when a position first needs it and freed when the
     request closes (or when evicted) */
  SCEN_BLOCK_TABLE,
} scen_layout;

/* How the state is stored (c128_state_layout) and what the engine does with its blocks; zero is
   SGLang's layout. Any of it combines with any scen_layout, except the table fields. */
typedef struct scen_storage {
  int block_rows;   /* B: 8..256 rows per block (0 = 128); without a table, plans name physical rows */
  int row_shift;    /* SCEN_BLOCK_TABLE: log2 R, >= 7 */
  int table_stride; /* SCEN_BLOCK_TABLE: columns per table row; 0 = R / B */
  int two_planes;   /* kv and scores in two tensors [blocks, B, D] (score_plane) */
  int score_table;  /* two planes and a table: the score plane has a table (and blocks) of its own */
  int biased;       /* stored scores hold score + ape[pos mod 128] (score_biased) */
  int null_block;   /* block 0 is the null block (vLLM): never allocated; missing entries name it */
  int evict;        /* after every batch, each block wholly below a request's open window is evicted
                       (its entry becomes missing, the block goes back to the pool) with odds 1/2 */
  int write_all;    /* c128_ring.write_all: every new token the ring can hold is persisted */
  int output_index; /* windows go to output rows through a random output_index drawn per batch */
} scen_storage;

typedef struct scen_config {
  const instance_entry *entry;
  backend be;
  scen_layout layout;
  int ring_tokens;   /* R (SCEN_LEGACY: 128; SCEN_BLOCK_TABLE: 0 or 2^row_shift, c128_ring.ring_tokens) */
  int speculative;   /* the ring's speculative flag */
  int num_pool;      /* pool rows = live requests at most */
  float score_scale; /* scores ~ N(0, scale^2): 1 = randn, 60 = stress the max subtraction */
  int reverse;       /* CPU: run the blocks of every other launch last to first */
  int pad_plans;     /* pad plan arrays to capacity = input rows and launch the capacity */
  int keep_outputs;  /* record every checked window (widened to f32): scen_window */
  int cross_check;   /* GPU: also run each batch on the host runner; bits must agree */
  uint64_t seed;     /* 0 = rng_fresh().seed: fresh, or $C128_SEED when set, so a named seed replays */
  int random_groups; /* requests_per_block / windows_per_block drawn per batch: 0 (automatic) or 1..32 */
  scen_storage storage;
} scen_config;

typedef struct scenario scenario;

typedef struct scen_item {
  int req;    /* request id from scen_open */
  int extend; /* new rows (verify: drafts, root included) */
  int accept; /* verify only: how many of them the engine commits, 1..extend */
} scen_item;

typedef struct scen_stats {
  int64_t batches, rows, windows_checked, windows_discarded, writes;
  int64_t blocks_taken, blocks_evicted; /* block tables: allocations, and evictions below open windows */
  double max_rel_l2, max_abs;           /* worst window against the oracle */
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
   plan arrays and counts are untouched. Nothing runs. Blocks are allocated for the new positions
   first, as for a batch that runs, except those that scen_evict withholds. */
void scen_extend_refused(scenario *s, const scen_item *items, int n, int verify, c128_status want);
/* The same for a decode step. */
void scen_decode_refused(scenario *s, const int *reqs, int n, c128_status want);
/* SCEN_BLOCK_TABLE: evicts the blocks that hold positions first .. first + count - 1 of request
   `req` from the tables in `tables` (bit 0: the kv (or only) table, bit 1: the score plane's own)
   whatever they hold, as an engine that freed them too early would, and keeps those entries
   missing (a position not yet reached gets no block); returns how many blocks went. From then on
   the request may only appear in refused batches (or be closed); the ring invariant skips its
   missing rows. */
int scen_evict(scenario *s, int req, int64_t first, int64_t count, int tables);
/* Positions a request may reach: the block table's reach for a table without wrap (stride * B
   < R), else INT64_MAX. */
int64_t scen_max_len(const scenario *s);

scen_stats scen_get_stats(const scenario *s);
/* Window `window` of request `req` as checked (keep_outputs), or NULL. */
const float *scen_window(const scenario *s, int req, int64_t window);
/* Plane `plane` of the state (0: kv | score rows or the kv plane, 1: the score plane, NULL with
   one plane) as the last batch left it (host copy), and its size in bytes. */
const void *scen_state(const scenario *s, int plane, size_t *bytes);

/* SPEC 5 written out again, independently of the library. */
c128_status spec_page(const c128_ring *ring, int32_t pool_index, int64_t pos, int32_t *page);
c128_status spec_plan_prefill(const c128_ring *ring, const c128_request *reqs, int64_t n, int32_t verify,
                              int64_t capacity, c128_compress_plan *compress, int64_t *num_compress,
                              c128_write_plan *write, int64_t *num_write);
c128_status spec_plan_decode(const c128_ring *ring, const c128_request *reqs, int64_t n, c128_decode_plan *plans);

#endif
