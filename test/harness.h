/* Test harness: random tensors in either dtype, a CPU or GPU backend over host buffers, and the
   checks of SPEC 8. Every case draws fresh random data; the seed is printed on failure. */
#ifndef C128_TEST_HARNESS_H
#define C128_TEST_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "../c128.cuh"
#include "../ref/reference.h"

typedef struct rng {
  uint64_t state;
  uint64_t seed;
} rng;

rng rng_fresh(void); /* seeded from the clock and a counter, or from $C128_SEED when set */
uint64_t rng_u64(rng *r);
double rng_uniform(rng *r);              /* [0, 1) */
int64_t rng_below(rng *r, int64_t n);    /* [0, n); 0 when n <= 0 */
int32_t rng_edgy(rng *r, int64_t limit); /* near the edges of [0, limit), or anything at all */
float rng_randn(rng *r);

size_t dtype_size(c128_dtype dtype);
float elem_get(const void *base, size_t i, c128_dtype dtype);
void elem_set(void *base, size_t i, c128_dtype dtype, float value); /* rounds to nearest even */

/* Rows of kv | score: kv ~ N(0, 1), score ~ N(0, score_scale^2); never zeros. */
void *rows_alloc(size_t rows, int head_dim, c128_dtype dtype);
void rows_fill(void *base, size_t rows, int head_dim, c128_dtype dtype, rng *r, float score_scale);
float *ape_make(int head_dim, rng *r);
void poison(void *base, size_t bytes); /* NaN in f32 and bf16 */
void *clone_bytes(const void *src, size_t bytes);
/* Host runner options: the race checker on, blocks reversed or not, the message into msg. */
c128_host_options cpu_options(int reverse, char *msg, size_t size);
/* A CUDA call that must succeed (in a Criterion test). */
#define CUDA_OK(call)                                                           \
  do {                                                                          \
    cudaError_t err_ = (call);                                                  \
    cr_assert_eq(err_, cudaSuccess, "%s: %s", #call, cudaGetErrorString(err_)); \
  } while (0)
/* A device buffer with canary bytes on both sides and a pinned host mirror of the whole:
   dev_guarded_fetch copies it back and fails the test when a kernel wrote outside the buffer. */
typedef struct dev_guarded {
  char *dev, *host;
  size_t bytes;
} dev_guarded;
dev_guarded dev_guarded_make(const void *contents, size_t bytes); /* contents NULL: left as canary bytes */
void *dev_guarded_inside(const dev_guarded *g);
const char *dev_guarded_fetch(dev_guarded *g, const char *what, uint64_t seed); /* the contents, canaries checked */
void dev_guarded_free(dev_guarded *g);
/* Row `row` of a kv|score tensor widened to f32 (2 * head_dim floats). */
void row_widen(const void *base, size_t row, int head_dim, c128_dtype dtype, float *dst);
/* An input row as the state stores it: converted to the state dtype (bits kept when equal). */
void row_to_state(const void *input, size_t in_row, c128_dtype in_dtype, void *dst, c128_dtype buf_dtype, int head_dim);

/* One instance as the library describes it (name, dtypes, sizes, typed entry points). */
typedef c128_instance_info instance_entry;
const instance_entry *instance(c128_instance_id id);

typedef enum backend { BACKEND_CPU, BACKEND_GPU } backend;

int gpu_present(void);
/* The compute-sanitizer tool the tests run under (C128_SANITIZER, set by the meson test setups
   and test/sanitize.sh), or NULL: instrumented kernels are slow, so GPU-time bounds do not hold. */
const char *sanitizer_tool(void);
/* Skips the running test when the backend is the GPU and none is present. */
void require_backend(backend be);

/* Run on the backend over host buffers. The CPU backend checks for races (blocks reversed when
   `reverse`); the GPU backend copies in, runs on a stream, copies state and output back. The
   state layout's score plane and block tables and the output index travel with them (sized by
   state_pages, block_rows, table_rows x table_stride, batch or input_rows), and the score plane
   comes back too; so do cache entries' gamma, RoPE table (rope_positions rows) and cache
   (cache_pages x page_bytes), and the cache comes back. */
c128_status run_decode(const instance_entry *e, backend be, const c128_decode_args *host_args, int reverse);
c128_status run_prefill(const instance_entry *e, backend be, const c128_prefill_args *host_args, int reverse);

/* A device buffer that persists across calls (the scenarios keep the state on the GPU between
   batches); an upload grows it as needed. */
typedef struct device_buffer {
  void *ptr;
  size_t bytes;
} device_buffer;
void *device_upload(device_buffer *b, const void *host, size_t bytes);
void device_download(const device_buffer *b, void *host, size_t bytes);
void device_release(device_buffer *b);

/* SPEC 8 tolerance of one output row against the oracle. */
void check_output_row(const void *out, size_t row, c128_dtype out_dtype, const double *ref, int head_dim,
                      const char *what, uint64_t seed);
/* GPU output against the host runner's: bit for bit in a C128_MATH_EXACT build, within
   C128_FAST_BOUND * (1 + max_kv) (+ one bf16 rounding step) in a C128_MATH_FAST build; NaN
   where the other is NaN. max_kv bounds |kv| over every window of the call. */
void check_gpu_output(const void *gpu, const void *cpu, size_t rows, c128_dtype out_dtype, int head_dim, double max_kv,
                      const char *what, uint64_t seed);
/* Largest |kv| (first half of each row) over `rows` rows. */
double max_abs_kv(const void *base, size_t rows, int head_dim, c128_dtype dtype);
/* Row-by-row bit comparison; `what` names the tensor in the failure message. */
void check_rows_equal(const void *got, const void *want, size_t rows, size_t row_bytes, const char *what,
                      uint64_t seed);

#endif
