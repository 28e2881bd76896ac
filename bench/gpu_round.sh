#!/usr/bin/env bash
# One round of GPU work, from the repository root, on a machine with an NVIDIA GPU: the gpu suite
# of every build mode (the default, exact and legacy Criterion executables, and the examples with
# --gpu), then the benchmark's cache-entry cases against the pooled launch (automatic groups, and
# a fixed group that gives whole windows to the batches and prefills whose automatic group does
# not). Every log and CSV lands in OUTDIR.
#
#     bench/gpu_round.sh OUTDIR [--quick] [--no-bench] [--no-suite] [--prebuilt DIR]
#     bench/gpu_round.sh --pack DIR    # build here (no GPU needed), copy what a round runs into DIR
#
# --quick: the benchmark's quick mode (3 samples a round) on the sizes below. --pack and
# --prebuilt split a round between a build machine and a GPU machine of the same system: the
# executables (and libcudart, which they load) go to DIR, and a round with --prebuilt DIR runs
# them from there without building. Environment:
#   C128_GPU_BUILD    build directory (default /tmp/c128-gpu-round): configured once
#                     (-Dgpu_arch=90 -Dgpu_ptx= -Dbench=true), rebuilt when the sources change
#   C128_ENTRY_GROUP  the fixed group of the second benchmark run (default 8: whole windows at
#                     head_dim 512); 0 skips that run
#   BENCH_COMMIT      recorded commit (default: git rev-parse --short HEAD)
# Exit status: 0 when every suite passed and every benchmark run completed, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${C128_GPU_BUILD:-/tmp/c128-gpu-round}
group=${C128_ENTRY_GROUP:-8}
commit=${BENCH_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
suites=(test/c128_tests test/c128_tests_exact test/c128_tests_legacy)
examples=(quickstart plain_c pdl_chain serve soak fp8_cache)
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*"; }

compile() {
  if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" -Dgpu_arch=90 -Dgpu_ptx= -Dbench=true >"$1" 2>&1 || { tail -40 "$1"; exit 1; }
  fi
  meson compile -C "$build" >>"$1" 2>&1 || { tail -60 "$1"; exit 1; }
}

if [ "${1:-}" = --pack ]; then
  dir=${2:?usage: bench/gpu_round.sh --pack DIR}
  mkdir -p "$dir"
  compile "$dir/build.log"
  for e in "${suites[@]}" bench/c128_bench; do cp "$build/$e" "$dir/"; done
  for e in "${examples[@]}"; do cp "$build/examples/$e" "$dir/"; done
  cudart=$(ldd "$dir/c128_tests" | awk '/libcudart/ { print $3 }')
  [ -n "$cudart" ] && cp -L "$cudart" "$dir/"
  echo "$commit" >"$dir/commit"
  stamp "packed into $dir ($(du -sh "$dir" | cut -f1)); run: bench/gpu_round.sh OUTDIR --prebuilt $dir"
  exit 0
fi

out=${1:?usage: bench/gpu_round.sh OUTDIR [--quick] [--no-bench] [--no-suite] [--prebuilt DIR]}
shift
quick=() suite=1 bench=1 prebuilt=""
while [ $# -gt 0 ]; do
  case $1 in
  --quick) quick=(--quick) ;;
  --no-bench) bench=0 ;;
  --no-suite) suite=0 ;;
  --prebuilt) prebuilt=$(cd "${2:?--prebuilt DIR}" && pwd) && shift ;;
  *) echo "unknown option $1" >&2 && exit 2 ;;
  esac
  shift
done
mkdir -p "$out"
status=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$out/gpu.txt" 2>&1 || echo "no GPU found" >"$out/gpu.txt"
if [ -n "$prebuilt" ]; then
  export LD_LIBRARY_PATH=$prebuilt${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  commit=$(cat "$prebuilt/commit" 2>/dev/null || echo "$commit")
  bench_exe=$prebuilt/c128_bench
  stamp "GPU: $(head -1 "$out/gpu.txt"); prebuilt $prebuilt, commit $commit"
else
  bench_exe=$build/bench/c128_bench
  stamp "GPU: $(head -1 "$out/gpu.txt"); commit $commit"
  compile "$out/build.log"
  stamp "built in $build"
fi

if [ "$suite" = 1 ]; then
  if [ -n "$prebuilt" ]; then # what `meson test --suite gpu` runs, side by side: they only check results
    pids=()
    for e in "${suites[@]}"; do
      name=$(basename "$e")
      "$prebuilt/$name" --filter='gpu/*' -j4 >"$out/$name.log" 2>&1 &
      pids+=($!)
    done
    for e in "${examples[@]}"; do
      case $e in
      soak) args=(--gpu --seconds 60) ;;
      quickstart | plain_c | pdl_chain) args=() ;;
      *) args=(--gpu) ;;
      esac
      "$prebuilt/$e" "${args[@]}" >"$out/example_$e.log" 2>&1
      rc=$?
      echo "example $e: exit $rc"
      [ $rc = 0 ] || status=1
    done
    for i in "${!pids[@]}"; do
      wait "${pids[$i]}" || status=1
      name=$(basename "${suites[$i]}")
      echo "$name: $(grep -h "Synthesis" "$out/$name.log")"
      grep -h "^\[FAIL\]" "$out/$name.log" | head -10
    done
  else
    meson test -C "$build" --suite gpu --num-processes 4 >"$out/gpu_suite.log" 2>&1 || status=1
    cp "$build/meson-logs/testlog.txt" "$out/gpu_testlog.txt" 2>/dev/null
    grep -E "^ *[0-9]+/[0-9]+ " "$out/gpu_suite.log"
    grep -h "Synthesis" "$out/gpu_testlog.txt" 2>/dev/null
    grep -h "^\[FAIL\]" "$out/gpu_testlog.txt" 2>/dev/null | head -20
  fi
  stamp "gpu suite: $([ $status = 0 ] && echo passed || echo FAILED)"
fi

if [ "$bench" = 1 ]; then
  # Alone on the GPU, one run after the other.
  sizes=1,8,32,64,128,256,1024,8192,32768,131072
  cases='entry_decode_boundary|entry_prefill_1req|entry_prefill_extend'
  "$bench_exe" "${quick[@]}" --pdl 2 --commit "$commit" --filter "$cases" --sizes "$sizes" \
    --csv "$out/entry_auto.csv" >"$out/entry_auto.log" 2>&1 || status=1
  grep "^entry_" "$out/entry_auto.log"
  stamp "entry cases, automatic groups"
  if [ "$group" != 0 ]; then
    "$bench_exe" "${quick[@]}" --pdl 2 --commit "$commit" --entry-group "$group" --filter "$cases" \
      --sizes 8,32,64,128,8192 --csv "$out/entry_group$group.csv" >"$out/entry_group$group.log" 2>&1 || status=1
    grep "^entry_" "$out/entry_group$group.log"
    stamp "entry cases, group $group"
  fi
fi
exit $status
