#!/usr/bin/env bash
# Fuzzing of the CPU path (fuzz/README.md): the host runner, the plan checker, the host planner and
# the device planner's host path under AddressSanitizer + UndefinedBehaviorSanitizer, driven by
# libFuzzer (nvcc with clang++-14 as the host compiler). Builds the two targets (default and legacy
# epilogue), runs the committed corpus once in reproduce mode, then fuzzes for $FUZZ_SECONDS
# (default 60) with two jobs. A finding fails the step; its input is in build-fuzz/artifacts/.
# Ends with "fuzz: ok, N executions".
source "$(dirname "$0")/common.bash"
need clang++-14 clang-14
ls /usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 ||
  need libclang_rt.fuzzer-x86_64.a libclang-rt-14-dev
q bash fuzz/run.sh build
q bash fuzz/run.sh repro
if ! bash fuzz/run.sh fuzz "${FUZZ_SECONDS:-60}" 2 >"$scratch/fuzz.log" 2>&1; then
  cat "$scratch/fuzz.log" >&2
  fail "the fuzzer found a problem (input under build-fuzz/artifacts/; replay: fuzz/run.sh repro FILE)"
fi
echo "fuzz: ok, $(sed -n 's/^executions: //p' "$scratch/fuzz.log") executions"
