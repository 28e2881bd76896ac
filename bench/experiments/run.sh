#!/usr/bin/env bash
# The diagnosis experiments of BENCHMARKS.md ("Experiments"): builds patched copies of c128.cuh
# (bench/experiments/patch.py; c128.cuh itself is not touched) into the benchmark in place of the
# legacy copy, so that "two_warp" is the unpatched library and "legacy" the patched one, timed
# A B A B in one run. Run from the repository root after bench/run.sh (it links that build's
# objects):   bench/experiments/run.sh OUTDIR
# patch.py asserts on the exact text it replaces: it fails loudly once c128.cuh has moved on.
set -u
cd "$(dirname "$0")/../.."
out=${1:-bench-results}
mkdir -p "$out"
build=${BENCH_BUILD:-/tmp/c128-bench-build}
obj=$build/bench/c128_bench.p
flags="-gencode arch=compute_${BENCH_ARCH:-90},code=sm_${BENCH_ARCH:-90} -std=c++17 -O3 -Xcompiler=-ffp-contract=off"
variants=${BENCH_VARIANTS:-hwexp shfl bf16cs halfgroup}
for v in $variants; do # build every variant at once, then time them one by one
  d=/tmp/c128-experiment-${v//,/_}
  mkdir -p "$d"
  python3 bench/experiments/patch.py c128.cuh "$d/c128.cuh" "$v" || continue
  printf '#define C128_EPILOGUE C128_EPILOGUE_TWO_WARP\n#define BENCH_PREFIX bench_legacy\n#include "bench_copy.cuh"\n' \
    >"$d/patched.cu"
  (nvcc -I"$d" -Ibench -I. $flags -c "$d/patched.cu" -o "$d/patched.o" &&
    nvcc $flags -o "$d/bench" "$obj/bench.c.o" "$obj/bench_kernels.cu.o" \
      "$build/bench/libbench_two_warp.a.p/bench_two_warp.cu.o" "$d/patched.o" -lm) &
done
wait
for v in $variants; do
  d=/tmp/c128-experiment-${v//,/_}
  [ -x "$d/bench" ] || { echo "$v: no build"; continue; }
  timeout 300 "$d/bench" --csv "$out/experiment_${v//,/_}.csv" --commit "experiment:$v" ${BENCH_FILTER:+--filter "$BENCH_FILTER"} >"$d/log" 2>&1
  echo "$v: exit $?"
  grep -i "verify" "$d/log"
done
ls "$out"/experiment_*.csv >/dev/null 2>&1 && python3 bench/experiments/compare.py "$out"/experiment_*.csv
