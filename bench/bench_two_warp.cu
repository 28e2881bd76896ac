// The library with the default two-warp epilogue, exported as bench_two_warp_*, and the separate
// cache-entry epilogue (bench_entry_epilogue), which reuses this copy's entry arithmetic.
#define C128_EPILOGUE C128_EPILOGUE_TWO_WARP
#define BENCH_PREFIX bench_two_warp
#include "bench_copy.cuh"
#include "bench_epilogue.cuh"
