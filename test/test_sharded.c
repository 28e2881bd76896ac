/* Context-parallel state (SPEC 5, shared layout) with two ranks. The state is owner-sharded by
   page (owner = page mod 2); each rank sees one address range [own shard | other shard], made by
   mapping both shards into it (memfd + mmap on the CPU, CUDA virtual memory management on the
   GPU). One host thread per rank runs the same batches with its own rank; the outputs of both
   ranks and the union of the shards must equal a one-rank run bit for bit.

   What each rank synchronises, per batch: prefill = compress on every rank, barrier, writes on
   every rank, barrier (a batch's writes may land on slots any rank's compress still reads);
   decode = the decode kernel, barrier (the next batch reads rows the other rank wrote).

   The same with an output index (DESIGN 5.10: the window ending at input row r goes to output
   row output_index[r]), which the kernels of any layout serve: the ranks' rows, permuted by the
   index, and their shards must still equal the one-rank run without one, and the checker must
   accept every rank's batches. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cuda.h> /* types only: the driver entry points are fetched at run time (no libcuda in CI) */
#include <cudaTypedefs.h>

#include "harness.h"

enum { D = 512, RANKS = 2, PAGES_PER_RANK = 4, PAGES = RANKS * PAGES_PER_RANK, ROW = 2 * D };
enum { NUM_REQ = 4, DECODE_STEPS = 140, MAX_ROWS = 1024 };
#define PAGE_BYTES ((size_t)128 * ROW * sizeof(float)) /* 512 KiB: 4 pages = one 2 MiB granule */
#define SHARD_BYTES (PAGES_PER_RANK * PAGE_BYTES)

typedef enum where { ON_CPU, ON_ONE_GPU, ON_TWO_GPUS } where;

/* The batches every rank runs: plans from the host planner, random input rows. */
typedef struct batch {
  int decode;
  int64_t rows, num_compress, num_write;
  c128_compress_plan compress[MAX_ROWS];
  c128_write_plan write[MAX_ROWS];
  c128_decode_plan dplans[NUM_REQ];
  float *input;
} batch;

typedef struct run {
  where at;
  int nb;
  batch *batches;
  const float *ape;
  float *view[RANKS]; /* each rank's state range (host or device address) */
  float *out[RANKS];  /* host copies: every batch's output rows, [nb][MAX_ROWS][D] */
  int device[RANKS];
  pthread_barrier_t barrier;
  int failed[RANKS];
  int indexed;             /* with an output index: decode_index, prefill_index */
  const int64_t *index[2]; /* host copies: decode [NUM_REQ], prefill [MAX_ROWS] */
} run;

/* The output index of the indexed runs: request b's window to row NUM_REQ - 1 - b, the window
   that ends at input row r to row MAX_ROWS - 1 - r (a permutation of the output rows). */
static int64_t decode_index[NUM_REQ], prefill_index[MAX_ROWS];
static void make_indices(void) {
  for (int b = 0; b < NUM_REQ; ++b) decode_index[b] = NUM_REQ - 1 - b;
  for (int row = 0; row < MAX_ROWS; ++row) prefill_index[row] = MAX_ROWS - 1 - row;
}

static c128_status prefill_on(where at, c128_prefill_args *a) {
  return at == ON_CPU ? c128_prefill_host(a, NULL) : c128_prefill(a, 0);
}

/* The checker accepts a rank's batch (its plans, layout and index, from host memory). */
static int checked_decode(const c128_decode_args *launch, const c128_decode_plan *plans, const int64_t *index) {
  c128_decode_args a = *launch;
  a.plans = plans, a.output_index = launch->output_index ? index : NULL;
  c128_plan_report rep = {0, C128_PLAN_DECODE, NULL, 0};
  return c128_check_decode_plans(&a, &rep) == C128_SUCCESS;
}
static int checked_prefill(const c128_prefill_args *launch, const batch *b, const int64_t *index) {
  c128_prefill_args a = *launch;
  a.compress_plans = b->compress, a.write_plans = b->write, a.num_write = b->num_write;
  a.output_index = launch->output_index ? index : NULL;
  c128_plan_report rep = {0, C128_PLAN_DECODE, NULL, 0};
  return c128_check_prefill_plans(&a, &rep) == C128_SUCCESS;
}

/* One rank's thread (or the one-rank reference when size == 1). */
typedef struct rank_arg {
  run *r;
  int rank, size;
} rank_arg;

static void *rank_main(void *p) {
  const rank_arg *ra = p;
  run *r = ra->r;
  const int rank = ra->rank, gpu = r->at != ON_CPU;
  float *input = NULL, *out = NULL, *ape = (float *)r->ape;
  void *plans = NULL;
  int64_t *index[2] = {(int64_t *)r->index[0], (int64_t *)r->index[1]};
  if (gpu && r->indexed) {
    cudaSetDevice(r->device[rank]);
    cudaMalloc((void **)&index[0], NUM_REQ * sizeof(int64_t));
    cudaMalloc((void **)&index[1], MAX_ROWS * sizeof(int64_t));
    cudaMemcpy(index[0], r->index[0], NUM_REQ * sizeof(int64_t), cudaMemcpyHostToDevice);
    cudaMemcpy(index[1], r->index[1], MAX_ROWS * sizeof(int64_t), cudaMemcpyHostToDevice);
  }
  if (gpu) {
    cudaSetDevice(r->device[rank]);
    cudaMalloc((void **)&input, MAX_ROWS * ROW * sizeof(float));
    cudaMalloc((void **)&out, MAX_ROWS * D * sizeof(float));
    cudaMalloc((void **)&ape, 128 * D * sizeof(float));
    cudaMalloc(&plans, MAX_ROWS * (sizeof(c128_compress_plan) + sizeof(c128_write_plan)));
    cudaMemcpy(ape, r->ape, 128 * D * sizeof(float), cudaMemcpyHostToDevice);
  }
  for (int t = 0; t < r->nb; ++t) {
    const batch *b = &r->batches[t];
    float *o = r->out[rank] + (size_t)t * MAX_ROWS * D;
    const float *in = b->input;
    const void *cp = b->compress, *wp = b->write, *dp = b->dplans;
    float *dst = o;
    if (gpu) {
      cudaMemcpy(input, b->input, (size_t)b->rows * ROW * sizeof(float), cudaMemcpyHostToDevice);
      cudaMemcpy(out, o, MAX_ROWS * D * sizeof(float), cudaMemcpyHostToDevice);
      cudaMemcpy(plans, b->decode ? (const void *)b->dplans : (const void *)b->compress,
                 b->decode ? sizeof b->dplans : sizeof b->compress, cudaMemcpyHostToDevice);
      if (!b->decode) cudaMemcpy((char *)plans + sizeof b->compress, b->write, sizeof b->write, cudaMemcpyHostToDevice);
      in = input, dst = out, cp = plans, dp = plans, wp = (char *)plans + sizeof b->compress;
    }
    c128_shared_layout layout = {rank, ra->size, PAGES_PER_RANK};
    c128_status st;
    if (b->decode) {
      c128_decode_args a = {0};
      a.head_dim = D, a.state = r->view[rank], a.state_pages = PAGES, a.input = in, a.ape = ape;
      a.output = dst, a.output_rows = NUM_REQ, a.plans = dp, a.batch = NUM_REQ, a.layout = layout;
      if (r->indexed) a.output_index = index[0];
      st = r->at == ON_CPU ? c128_decode_host(&a, NULL) : c128_decode(&a, 0);
      r->failed[rank] |= !checked_decode(&a, b->dplans, r->index[0]);
      if (gpu) cudaDeviceSynchronize();
      r->failed[rank] |= st != C128_SUCCESS;
      pthread_barrier_wait(&r->barrier);
    } else {
      c128_prefill_args a = {0};
      a.head_dim = D, a.state = r->view[rank], a.state_pages = PAGES, a.input = in, a.input_rows = b->rows;
      a.ape = ape, a.output = dst, a.output_rows = MAX_ROWS, a.layout = layout;
      a.compress_plans = cp, a.num_compress = b->num_compress;
      if (r->indexed) a.output_index = index[1];
      r->failed[rank] |= !checked_prefill(&a, b, r->index[1]);
      st = prefill_on(r->at, &a);
      if (gpu) cudaDeviceSynchronize();
      pthread_barrier_wait(&r->barrier); /* every rank's compress has read the pre-batch state */
      a.num_compress = 0, a.write_plans = wp, a.num_write = b->num_write;
      st = st != C128_SUCCESS ? st : prefill_on(r->at, &a);
      if (gpu) cudaDeviceSynchronize();
      r->failed[rank] |= st != C128_SUCCESS;
      pthread_barrier_wait(&r->barrier);
    }
    if (gpu) cudaMemcpy(o, out, MAX_ROWS * D * sizeof(float), cudaMemcpyDeviceToHost);
  }
  if (gpu) cudaFree(input), cudaFree(out), cudaFree(ape), cudaFree(plans);
  if (gpu && r->indexed) cudaFree(index[0]), cudaFree(index[1]);
  return NULL;
}

static void run_ranks(run *r, int size) {
  pthread_t th[RANKS];
  rank_arg ra[RANKS];
  pthread_barrier_init(&r->barrier, NULL, (unsigned)size);
  for (int k = 0; k < size; ++k) {
    ra[k] = (rank_arg){r, k, size};
    pthread_create(&th[k], NULL, rank_main, &ra[k]);
  }
  for (int k = 0; k < size; ++k) pthread_join(th[k], NULL);
  pthread_barrier_destroy(&r->barrier);
  for (int k = 0; k < size; ++k) cr_assert_eq(r->failed[k], 0, "rank %d: a call failed", k);
}

/* A prefill of mixed lengths, decode steps across boundaries, then an extend. */
static batch *make_batches(rng *g, int *nb) {
  c128_ring ring = {0};
  ring.state_pages = PAGES;
  c128_request req[NUM_REQ] = {{5, 300, 300}, {2, 130, 130}, {7, 50, 50}, {0, 400, 400}};
  *nb = 2 + DECODE_STEPS;
  batch *bs = calloc((size_t)*nb, sizeof *bs);
  for (int t = 0; t < *nb; ++t) {
    batch *b = &bs[t];
    b->decode = t > 0 && t <= DECODE_STEPS;
    if (b->decode) {
      for (int i = 0; i < NUM_REQ; ++i) req[i].seq_len++, req[i].extend_len = 1;
      cr_assert_eq(c128_plan_decode(&ring, req, NUM_REQ, b->dplans), C128_SUCCESS);
      b->rows = NUM_REQ;
    } else {
      if (t > 0)
        for (int i = 0; i < NUM_REQ; ++i) req[i].extend_len = 60 + 37 * i, req[i].seq_len += req[i].extend_len;
      c128_prefill_plans p = {b->compress, b->write, MAX_ROWS, 0, 0, 0};
      cr_assert_eq(c128_plan_prefill(&ring, req, NUM_REQ, 0, &p), C128_SUCCESS);
      b->num_compress = p.num_compress, b->num_write = p.num_write;
      for (int i = 0; i < NUM_REQ; ++i) b->rows += req[i].extend_len;
    }
    b->input = malloc((size_t)b->rows * ROW * sizeof(float));
    rows_fill(b->input, (size_t)b->rows, D, C128_F32, g, 1.0f);
  }
  return bs;
}

/* Shards backed by one memfd; each view maps [own | other]. */
static void cpu_views(float *view[RANKS], const float *state0) {
  const int fd = memfd_create("c128-shards", 0);
  cr_assert_geq(fd, 0);
  cr_assert_eq(ftruncate(fd, (off_t)(RANKS * SHARD_BYTES)), 0);
  for (int rank = 0; rank < RANKS; ++rank) {
    char *va = mmap(NULL, RANKS * SHARD_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(va, MAP_FAILED);
    for (int k = 0; k < RANKS; ++k) /* slot k of rank's view holds the shard of rank (rank + k) % 2 */
      cr_assert_neq(mmap(va + k * SHARD_BYTES, SHARD_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
                         (off_t)(((rank + k) % RANKS) * SHARD_BYTES)),
                    MAP_FAILED);
    view[rank] = (float *)va;
  }
  close(fd);
  for (int p = 0; p < PAGES; ++p) /* logical page p -> shard p % 2, index p / 2 (rank 0's view) */
    memcpy((char *)view[0] + ((p % RANKS) * PAGES_PER_RANK + p / RANKS) * PAGE_BYTES,
           (const char *)state0 + p * PAGE_BYTES, PAGE_BYTES);
}

/* Driver VMM entry points, looked up through the runtime so the tests need no -lcuda. */
static struct {
  PFN_cuMemGetAllocationGranularity_v10020 granularity;
  PFN_cuMemCreate_v10020 create;
  PFN_cuMemAddressReserve_v10020 reserve;
  PFN_cuMemMap_v10020 map;
  PFN_cuMemSetAccess_v10020 set_access;
} vmm;

static void *driver_entry(const char *name) {
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult found;
  cr_assert_eq(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found), cudaSuccess, "%s", name);
  cr_assert_eq(found, cudaDriverEntryPointSuccess, "%s not found", name);
  return fn;
}

#define CU_OK(call)                                           \
  do {                                                        \
    CUresult e_ = (call);                                     \
    cr_assert_eq(e_, CUDA_SUCCESS, "%s: %d", #call, (int)e_); \
  } while (0)

/* Shards allocated on the ranks' devices, each view mapping [own | other] with VMM. */
static void gpu_views(float *view[RANKS], const int device[RANKS], const float *state0) {
  CUmemGenericAllocationHandle shard[RANKS];
  vmm.granularity = (PFN_cuMemGetAllocationGranularity_v10020)driver_entry("cuMemGetAllocationGranularity");
  vmm.create = (PFN_cuMemCreate_v10020)driver_entry("cuMemCreate");
  vmm.reserve = (PFN_cuMemAddressReserve_v10020)driver_entry("cuMemAddressReserve");
  vmm.map = (PFN_cuMemMap_v10020)driver_entry("cuMemMap");
  vmm.set_access = (PFN_cuMemSetAccess_v10020)driver_entry("cuMemSetAccess");
  for (int k = 0; k < RANKS; ++k) {
    cudaSetDevice(device[k]);
    cudaFree(0); /* primary context */
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device[k];
    size_t granule = 0;
    CU_OK(vmm.granularity(&granule, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    cr_assert_eq(SHARD_BYTES % granule, 0, "shard of %zu bytes, granule %zu", SHARD_BYTES, granule);
    CU_OK(vmm.create(&shard[k], SHARD_BYTES, &prop, 0));
  }
  for (int rank = 0; rank < RANKS; ++rank) {
    cudaSetDevice(device[rank]);
    CUdeviceptr va;
    CU_OK(vmm.reserve(&va, RANKS * SHARD_BYTES, 0, 0, 0));
    for (int k = 0; k < RANKS; ++k) CU_OK(vmm.map(va + k * SHARD_BYTES, SHARD_BYTES, 0, shard[(rank + k) % RANKS], 0));
    CUmemAccessDesc access;
    memset(&access, 0, sizeof access);
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device[rank];
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CU_OK(vmm.set_access(va, RANKS * SHARD_BYTES, &access, 1));
    view[rank] = (float *)(uintptr_t)va;
  }
  cudaSetDevice(device[0]);
  for (int p = 0; p < PAGES; ++p)
    cr_assert_eq(cudaMemcpy((char *)view[0] + ((p % RANKS) * PAGES_PER_RANK + p / RANKS) * PAGE_BYTES,
                            (const char *)state0 + p * PAGE_BYTES, PAGE_BYTES, cudaMemcpyHostToDevice),
                 cudaSuccess);
}

/* What an indexed run's outputs must be: the one-rank run's rows (`ref`, no index) moved to the
   rows the index names, every other row as poisoned. */
static float *indexed_outputs(const run *ref) {
  const size_t row = D * sizeof(float), out_bytes = (size_t)ref->nb * MAX_ROWS * row;
  float *want = malloc(out_bytes);
  cr_assert_not_null(want);
  poison(want, out_bytes);
  for (int t = 0; t < ref->nb; ++t) {
    const batch *b = &ref->batches[t];
    const char *from = (const char *)(ref->out[0] + (size_t)t * MAX_ROWS * D);
    char *to = (char *)(want + (size_t)t * MAX_ROWS * D);
    if (b->decode)
      for (int i = 0; i < NUM_REQ; ++i) memcpy(to + decode_index[i] * row, from + i * row, row);
    else
      for (int64_t k = 0; k < b->num_compress; ++k)
        memcpy(to + prefill_index[b->compress[k].ragged_id] * row, from + k * row, row);
  }
  return want;
}

static void two_ranks(where at, int indexed) {
  int devices = 0;
  if (at != ON_CPU) require_backend(BACKEND_GPU);
  if (at == ON_TWO_GPUS) {
    int peer = 0;
    cudaGetDeviceCount(&devices);
    if (devices < 2) cr_skip_test("needs two GPUs (%d present)", devices);
    cudaDeviceCanAccessPeer(&peer, 0, 1);
    if (!peer) cr_skip_test("GPUs 0 and 1 cannot access each other's memory");
  }
  rng g = rng_fresh();
  float *state0 = malloc(PAGES * PAGE_BYTES), *ape = ape_make(D, &g);
  rows_fill(state0, PAGES * 128, D, C128_F32, &g, 1.0f);
  run ref, cp;
  memset(&ref, 0, sizeof ref);
  ref.batches = make_batches(&g, &ref.nb);
  ref.ape = ape;
  ref.at = at == ON_CPU ? ON_CPU : ON_ONE_GPU;
  cp = ref;
  for (int k = 0; k < RANKS; ++k) {
    const size_t out_bytes = (size_t)ref.nb * MAX_ROWS * D * sizeof(float);
    cp.out[k] = malloc(out_bytes), poison(cp.out[k], out_bytes);
    if (k == 0) ref.out[0] = malloc(out_bytes), poison(ref.out[0], out_bytes);
    cp.device[k] = at == ON_TWO_GPUS ? k : 0;
  }
  cp.at = at;
  make_indices();
  cp.indexed = indexed, cp.index[0] = decode_index, cp.index[1] = prefill_index;
  /* the one-rank reference on a plain state, without an index */
  if (at == ON_CPU) {
    ref.view[0] = clone_bytes(state0, PAGES * PAGE_BYTES);
    cpu_views(cp.view, state0);
  } else {
    cudaSetDevice(0);
    cr_assert_eq(cudaMalloc((void **)&ref.view[0], PAGES * PAGE_BYTES), cudaSuccess);
    cudaMemcpy(ref.view[0], state0, PAGES * PAGE_BYTES, cudaMemcpyHostToDevice);
    gpu_views(cp.view, cp.device, state0);
  }
  run_ranks(&ref, 1);
  run_ranks(&cp, RANKS);
  const size_t out_bytes = (size_t)ref.nb * MAX_ROWS * D * sizeof(float);
  float *want_out = indexed ? indexed_outputs(&ref) : ref.out[0];
  for (int k = 0; k < RANKS; ++k)
    cr_assert(memcmp(cp.out[k], want_out, out_bytes) == 0, "rank %d's outputs differ from the one-rank run%s", k,
              indexed ? " (rows moved by the index)" : "");
  if (indexed) free(want_out);
  float *want = malloc(PAGES * PAGE_BYTES), *got = malloc(PAGES * PAGE_BYTES);
  if (at == ON_CPU) memcpy(want, ref.view[0], PAGES * PAGE_BYTES), memcpy(got, cp.view[0], PAGES * PAGE_BYTES);
  else {
    cudaSetDevice(0);
    cudaMemcpy(want, ref.view[0], PAGES * PAGE_BYTES, cudaMemcpyDeviceToHost);
    cudaMemcpy(got, cp.view[0], PAGES * PAGE_BYTES, cudaMemcpyDeviceToHost);
  }
  cr_assert(memcmp(want, state0, PAGES * PAGE_BYTES) != 0, "the run must have written the state");
  for (int p = 0; p < PAGES; ++p)
    cr_assert(memcmp((char *)want + p * PAGE_BYTES,
                     (char *)got + ((p % RANKS) * PAGES_PER_RANK + p / RANKS) * PAGE_BYTES, PAGE_BYTES) == 0,
              "logical page %d: the shards differ from the one-rank state", p);
  for (int t = 0; t < ref.nb; ++t) free(ref.batches[t].input);
  free(ref.batches), free(state0), free(ape), free(want), free(got), free(ref.out[0]);
  for (int k = 0; k < RANKS; ++k) free(cp.out[k]);
}

Test(cpu, sharded_state_two_ranks) { two_ranks(ON_CPU, 0); }
Test(gpu, sharded_state_two_ranks_on_one_gpu) { two_ranks(ON_ONE_GPU, 0); }
Test(gpu, sharded_state_two_ranks_on_two_gpus) { two_ranks(ON_TWO_GPUS, 0); }
Test(cpu, sharded_state_two_ranks_with_output_index) { two_ranks(ON_CPU, 1); }
Test(gpu, sharded_state_two_ranks_with_output_index_on_one_gpu) { two_ranks(ON_ONE_GPU, 1); }
Test(gpu, sharded_state_two_ranks_with_output_index_on_two_gpus) { two_ranks(ON_TWO_GPUS, 1); }
