// The library with the legacy (all-threads, butterfly) epilogue, exported as bench_legacy_*.
#define C128_EPILOGUE C128_EPILOGUE_LEGACY
#define BENCH_PREFIX bench_legacy
#include "bench_copy.cuh"
