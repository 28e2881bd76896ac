/* c128 fuzz target: the CPU path of c128.cuh (host runner, plan checker, host planner, device
   planner's host path) under AddressSanitizer and UndefinedBehaviorSanitizer, driven by
   libFuzzer (or by the standalone main below). See fuzz/README.md.

   The first byte picks a mode; each mode decodes the rest of the input as a stream of fields
   (reading past the end gives zeros, so every input is valid):
     0  decode kernel: arbitrary decode plans, batch and sizes      (kernels.h)
     1  prefill kernels: arbitrary compress / write plans and sizes  (kernels.h)
     2  serving scenario: planner -> kernels -> oracle               (scenario.h)
     3  host planner vs device planner's host path                   (planner.h)
     4  plan checker on arbitrary arguments                          (checker.h)
   fuzz/make_corpus.py writes inputs in this format. */
#define C128_IMPLEMENTATION
/* A small instance table: the two production dtype sets, bf16 throughout, a mixed one, and the
   smallest and a wider head_dim (1 and 4 splits per compress event). */
// clang-format off
#define C128_INSTANCES(X)                                                                             \
  C128_ROW(X, 128, f32, f32, f32) C128_ROW(X, 128, bf16, bf16, bf16) C128_ROW(X, 128, bf16, f32, f32) \
  C128_ROW(X, 128, f32, bf16, bf16) C128_ROW(X, 64, bf16, f32, bf16) C128_ROW(X, 256, f32, f32, f32)
// clang-format on
#include "../c128.cuh"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "../ref/reference.h"
}

#include "common.h"

#include "internals.h"

#include "extras.h"

#include "kernels.h"

#include "scenario.h"

#include "planner.h"

#include "checker.h"

/* C128_FUZZ_VERBOSE=1: print what each input decoded to (reproduce mode, corpus checks). */
static int fz_verbose = -1;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (fz_verbose < 0) fz_verbose = getenv("C128_FUZZ_VERBOSE") && atoi(getenv("C128_FUZZ_VERBOSE")) > 0;
  fz_reader r = {data, size, 0};
  fz_context[0] = 0;
  switch (rd_below(&r, 5)) {
  case 0:
    fz_mode_decode(&r);
    break;
  case 1:
    fz_mode_prefill(&r);
    break;
  case 2:
    fz_mode_scenario(&r);
    break;
  case 3:
    fz_mode_planner(&r);
    break;
  default:
    fz_mode_checker(&r);
    break;
  }
  if (fz_verbose)
    fprintf(stderr, "c128-fuzz: ok: %s (%zu of %zu bytes used)\n", fz_context, r.i < r.n ? r.i : r.n, r.n);
  return 0;
}

#ifdef FZ_STANDALONE
/* Without libFuzzer: run each file named on the command line once (reproduce mode). */
int main(int argc, char **argv) {
  for (int i = 1; i < argc; ++i) {
    FILE *f = fopen(argv[i], "rb");
    if (!f) {
      perror(argv[i]);
      return 2;
    }
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0;
    for (int c; (c = fgetc(f)) != EOF;) {
      if (n == cap) buf = (uint8_t *)realloc(buf, cap = cap ? 2 * cap : 4096);
      buf[n++] = (uint8_t)c;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
  }
  printf("ran %d input(s)\n", argc - 1);
  return 0;
}
#endif
