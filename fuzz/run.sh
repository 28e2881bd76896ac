#!/usr/bin/env bash
# Builds and runs the c128 fuzz target (libFuzzer + AddressSanitizer + UndefinedBehaviorSanitizer
# over the CPU path). Run from anywhere; outputs go to build-fuzz/ at the repository root.
#
#   fuzz/run.sh build                  build build-fuzz/c128_fuzz and c128_fuzz_legacy (the legacy
#                                      epilogue, C128_EPILOGUE_LEGACY) with nvcc -ccbin clang++-14
#   fuzz/run.sh fuzz [SECONDS] [JOBS] [ARGS...]
#                                      JOBS processes (every other one on the legacy epilogue)
#                                      fuzz from fuzz/corpus (+ what earlier runs found, kept in
#                                      build-fuzz/corpus); crashes go to build-fuzz/artifacts/;
#                                      prints "executions: N" at the end
#   fuzz/run.sh repro [FILE...]        run each input once (reproduce mode; no mutation), by default
#                                      the corpus and the reproducers of fixed bugs (crashes/*.bin);
#                                      C128_FUZZ_VERBOSE=1 prints what each decodes to
#   fuzz/run.sh corpus                 regenerate fuzz/corpus with fuzz/make_corpus.py
#   fuzz/run.sh coverage [SECONDS]     source-based coverage of c128.cuh over the corpus (and a
#                                      short run first when SECONDS is given)
#   fuzz/run.sh merge                  minimise build-fuzz/corpus into fuzz/corpus.min/
#
# Environment: CLANG (default clang-14), CLANGXX (clang++-14), NVCC (nvcc), FUZZ_ARCH (90).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
out=${FUZZ_OUT:-$root/build-fuzz} # FUZZ_OUT: another build directory
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
NVCC=${NVCC:-nvcc}
CLANG=${CLANG:-clang-14}
CLANGXX=${CLANGXX:-clang++-14}
ARCH=${FUZZ_ARCH:-90}
cudalib=$(dirname "$(command -v "$NVCC")")/../lib64
export ASAN_OPTIONS=${ASAN_OPTIONS:-protect_shadow_gap=0:detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# build NAME EXTRA_FLAGS...: compile fuzz_c128.cu (nvcc, clang host compiler) and reference.c.
build() {
  local name=$1
  shift
  # nvcc splits -Xcompiler arguments at commas: one sanitizer per flag
  local san=(-fsanitize=fuzzer-no-link -fsanitize=address -fsanitize=undefined -fno-sanitize-recover=undefined)
  local xc=() keep=() cc=() ld=()
  for f in "${san[@]}" -ffp-contract=off "$@"; do
    if [ "$f" = -Xkeep ]; then keep=(-keep -keep-dir "$out/keep"); else xc+=(-Xcompiler "$f"); fi
  done
  for f in "$@"; do
    [ "$f" = -Xkeep ] && continue
    cc+=("$f")
    [[ $f == -f* ]] && ld+=("$f")
  done
  mkdir -p "$out"
  # The kernels never run here (the CPU path is what is fuzzed): PTX only, no ptxas pass.
  "$NVCC" -ccbin "$CLANGXX" -std=c++17 -gencode "arch=compute_$ARCH,code=compute_$ARCH" -g -O1 "${keep[@]}" "${xc[@]}" \
    -c "$here/fuzz_c128.cu" -o "$out/$name.o"
  "$CLANG" -std=c11 -g -O1 "${san[@]}" "${cc[@]}" -c "$root/ref/reference.c" -o "$out/$name-reference.o"
  "$CLANGXX" -fsanitize=fuzzer,address,undefined "${ld[@]}" "$out/$name.o" "$out/$name-reference.o" \
    -L"$cudalib" -lcudart_static -ldl -lrt -lpthread -o "$out/$name"
}

libfuzzer_args=(-max_len=4096 -timeout=20 -rss_limit_mb=2560 -print_final_stats=1)

cmd=${1:-}
shift || true
case "$cmd" in
build)
  build c128_fuzz
  build c128_fuzz_legacy -DC128_EPILOGUE=C128_EPILOGUE_LEGACY
  echo "built $out/c128_fuzz and $out/c128_fuzz_legacy (legacy epilogue)"
  ;;
fuzz)
  secs=${1:-60}
  jobs=${2:-1}
  shift 2 || shift $# || true
  [ -x "$out/c128_fuzz" ] || build c128_fuzz
  [ "$jobs" -lt 2 ] || [ -x "$out/c128_fuzz_legacy" ] || build c128_fuzz_legacy -DC128_EPILOGUE=C128_EPILOGUE_LEGACY
  mkdir -p "$out/corpus" "$out/artifacts" "$out/logs"
  pids=()
  for ((j = 0; j < jobs; ++j)); do
    bin=$out/c128_fuzz
    [ $((j % 2)) = 0 ] || bin=$out/c128_fuzz_legacy # every other job: the legacy epilogue
    "$bin" "${libfuzzer_args[@]}" -max_total_time="$secs" -artifact_prefix="$out/artifacts/" \
      -seed=$((RANDOM * 32768 + RANDOM + j)) "$@" "$out/corpus" "$here/corpus" >"$out/logs/job$j.log" 2>&1 &
    pids+=($!)
  done
  status=0
  for p in "${pids[@]}"; do wait "$p" || status=1; done
  total=0
  for ((j = 0; j < jobs; ++j)); do
    n=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/logs/job$j.log" | tail -1)
    total=$((total + ${n:-0}))
    if grep -q -e '==c128-fuzz== PROPERTY' -e 'ERROR: AddressSanitizer' -e 'runtime error:' -e 'ERROR: libFuzzer' \
      "$out/logs/job$j.log"; then
      status=1
      echo "--- job $j: $out/logs/job$j.log" >&2
      grep -B2 -A40 -m1 -e '==c128-fuzz== PROPERTY' -e 'ERROR: AddressSanitizer' -e 'runtime error:' \
        -e 'ERROR: libFuzzer' "$out/logs/job$j.log" >&2 || true
    fi
  done
  echo "executions: $total"
  exit $status
  ;;
repro)
  [ -x "$out/c128_fuzz" ] || build c128_fuzz
  [ $# -gt 0 ] || set -- "$here"/corpus/* "$here"/crashes/*.bin # the reproducers: the bugs stay fixed
  "$out/c128_fuzz" "${libfuzzer_args[@]}" "$@"
  if [ -x "$out/c128_fuzz_legacy" ]; then "$out/c128_fuzz_legacy" "${libfuzzer_args[@]}" "$@"; fi
  ;;
corpus)
  python3 "$here/make_corpus.py" "$here/corpus"
  ;;
coverage)
  # -keep: nvcc's preprocessed host file stays, so that coverage_map.py can map its lines back.
  rm -rf "$out/keep" && mkdir -p "$out/keep"
  build c128_fuzz_cov -fprofile-instr-generate -fcoverage-mapping -Xkeep
  rm -f "$out"/cov-*.profraw
  mkdir -p "$out/corpus"
  if [ -n "${1:-}" ]; then
    LLVM_PROFILE_FILE="$out/cov-run.profraw" "$out/c128_fuzz_cov" "${libfuzzer_args[@]}" -max_total_time="$1" \
      "$out/corpus" "$here/corpus" >/dev/null 2>&1 || true
  fi
  LLVM_PROFILE_FILE="$out/cov-corpus.profraw" "$out/c128_fuzz_cov" "${libfuzzer_args[@]}" -runs=0 \
    "$here/corpus" "$out/corpus" >/dev/null 2>&1
  llvm-profdata-14 merge -sparse "$out"/cov-*.profraw -o "$out/cov.profdata"
  llvm-cov-14 export -format=lcov "$out/c128_fuzz_cov" -instr-profile="$out/cov.profdata" >"$out/cov.lcov"
  (cd "$here" && python3 coverage_map.py "$out/cov.lcov" "$out/keep/fuzz_c128.cudafe1.cpp")
  ;;
merge)
  [ -x "$out/c128_fuzz" ] || build c128_fuzz
  rm -rf "$here/corpus.min" && mkdir -p "$here/corpus.min"
  "$out/c128_fuzz" "${libfuzzer_args[@]}" -merge=1 "$here/corpus.min" "$here/corpus" "$out/corpus"
  ;;
*)
  sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
  ;;
esac
