/* Bug 3 reproducer (see bug3-legacy-nan-race.md): with the legacy epilogue, a window holding
   two NaNs with different payloads in one channel makes the host runner's race checker report
   a write-after-write race between lanes of one half-warp, on a single valid compress plan.
   Build and run from the repository root:
     nvcc -std=c++17 -o /tmp/bug3 fuzz/crashes/bug3_legacy_nan_race.cu && /tmp/bug3
   Exit status 1 while the bug is present. */
#define C128_STATIC
#define C128_EPILOGUE C128_EPILOGUE_LEGACY
#define C128_INSTANCES(X) C128_ROW(X, 128, f32, f32, f32)
#include "../../c128.cuh"

#include <stdio.h>
#include <string.h>

enum { D = 128, ROW = 2 * D };

static float nan_with_payload(uint32_t payload) {
  const uint32_t bits = 0x7FC00000u | payload;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

int main(void) {
  static float state[128 * ROW], input[128 * ROW], ape[128 * D], out[D];
  for (int i = 0; i < 128 * ROW; ++i) input[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
  for (int i = 0; i < 128 * D; ++i) ape[i] = 0.0f;
  input[0 * ROW + 0] = nan_with_payload(1);  /* window row 0 (warp 0), channel 0 kv */
  input[64 * ROW + 0] = nan_with_payload(2); /* window row 64 (warp 8), channel 0 kv */
  const c128_compress_plan plan = {128, 127, 0, 0, 0};

  c128_prefill_args a;
  memset(&a, 0, sizeof a);
  a.head_dim = D, a.state_dtype = C128_F32, a.input_dtype = C128_F32, a.output_dtype = C128_F32;
  a.state = state, a.state_pages = 1, a.input = input, a.input_rows = 128, a.ape = ape;
  a.output = out, a.output_rows = 1, a.compress_plans = &plan, a.num_compress = 1;
  char msg[200] = "";
  c128_host_options o = {1, 0, msg, sizeof msg};
  const c128_status st = c128_prefill_host(&a, &o);
  uint32_t bits;
  memcpy(&bits, &out[0], sizeof bits);
  printf("host runner: %s\nrace checker: %s\nhost output channel 0 bits: 0x%08x\n", c128_status_string(st),
         msg[0] ? msg : "-", bits);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0) { /* the same plan on the GPU */
    c128_prefill_args d = a;
    void *ds, *di, *da, *dout, *dp;
    cudaMalloc(&ds, sizeof state), cudaMalloc(&di, sizeof input), cudaMalloc(&da, sizeof ape);
    cudaMalloc(&dout, sizeof out), cudaMalloc(&dp, sizeof plan);
    cudaMemcpy(di, input, sizeof input, cudaMemcpyHostToDevice);
    cudaMemcpy(da, ape, sizeof ape, cudaMemcpyHostToDevice);
    cudaMemcpy(dp, &plan, sizeof plan, cudaMemcpyHostToDevice);
    d.state = ds, d.input = di, d.ape = (const float *)da, d.output = dout;
    d.compress_plans = (const c128_compress_plan *)dp;
    const c128_status gst = c128_prefill(&d, 0);
    float gout[D];
    cudaMemcpy(gout, dout, sizeof gout, cudaMemcpyDeviceToHost);
    memcpy(&bits, &gout[0], sizeof bits);
    printf("GPU: %s, output channel 0 bits: 0x%08x\n", c128_status_string(gst), bits);
  }
  return st == C128_ERROR_RACE_DETECTED;
}
