#!/usr/bin/env bash
# Static checks of the host C code (ref/*.c, test/*.c, examples/*.c and the headers they include, the
# declarations of c128.cuh among them): cppcheck, then clang-tidy over ./build's
# compile_commands.json. Any finding fails the step. What is switched off, and why:
#
# cppcheck
#   missingIncludeSystem   system and CUDA headers are not given to cppcheck (only ours are).
#   -U C128_IMPLEMENTATION, -U C128_STATIC, -U __CUDACC__, -U __cplusplus
#                          the implementation is CUDA C++ compiled by nvcc, not host C; cppcheck
#                          would otherwise also try every #ifdef configuration of c128.cuh.
#   invalidPointerCast     the tests view byte buffers (guarded allocations, mmap'd shards) as
#                          float or plan arrays; the allocators align them.
#   uninitvar in test/test_scenarios.c
#                          open_requests() fills rows[0, num_pool) and reads rows[0, n), n <= num_pool
#                          (asserted); cppcheck does not see the bound through cr_assert.
#   uninitdata in test/test_hostile.c
#                          cudaMemcpy(run ? got : first, ...) fills the malloc'd host buffers; cppcheck
#                          reads the conditional destination as a use of uninitialised memory.
# clang-tidy: bugprone-*, clang-analyzer-*, performance-*, portability-*, except
#   bugprone-easily-swappable-parameters
#                          flags every (int, int) signature: the C API's style, not a bug.
#   bugprone-implicit-widening-of-multiplication-result
#                          flags int products of small compile-time shapes (128 * D * sizeof ...)
#                          throughout; sizes that can grow are computed in size_t / int64_t.
#   bugprone-macro-parentheses
#                          the X-macro rows pass names and token fragments, which cannot be
#                          parenthesised (&entry##_x).
#   bugprone-suspicious-memory-comparison
#                          the tests compare float buffers with memcmp on purpose: bit patterns
#                          (NaN poison, host == GPU bit for bit) are what they check.
#   performance-no-int-to-ptr
#                          the error tests build bogus and misaligned pointers from integers.
#   clang-analyzer-optin.portability.UnixAPI
#                          an opt-in check that malloc(0) may return NULL elsewhere; its one hit,
#                          test_device.c's pdl_chain() with steps == 0, has no caller (60 or 300).
#   clang-analyzer-security.insecureAPI.DeprecatedOrUnsafeBufferHandling
#                          asks for C11 Annex K memcpy_s / memset_s, which glibc does not have.
#   bugprone-reserved-identifier allows the feature-test macros (_POSIX_C_SOURCE, _GNU_SOURCE, ...):
#                          the program is the one that defines them.
source "$(dirname "$0")/common.bash"
build=${C128_BUILD_DIR:-build}
[ -f "$build/compile_commands.json" ] || fail "$build/compile_commands.json is missing: run .ci/setup first"
need cppcheck cppcheck
need clang-tidy clang-tidy
files=(ref/*.c test/*.c examples/*.c)

q cppcheck --enable=warning,style,performance,portability --std=c11 --language=c --error-exitcode=1 -q \
  --inline-suppr --suppress=missingIncludeSystem -I. \
  --suppress=invalidPointerCast --suppress=uninitvar:test/test_scenarios.c --suppress=uninitdata:test/test_hostile.c \
  -UC128_IMPLEMENTATION -UC128_STATIC -U__CUDACC__ -U__cplusplus \
  --template='{file}:{line}: {severity}/{id}: {message}' "${files[@]}"

checks=(
  '-*' 'bugprone-*' 'clang-analyzer-*' 'performance-*' 'portability-*'
  -bugprone-easily-swappable-parameters
  -bugprone-implicit-widening-of-multiplication-result
  -bugprone-macro-parentheses
  -bugprone-suspicious-memory-comparison
  -performance-no-int-to-ptr
  -clang-analyzer-optin.portability.UnixAPI
  -clang-analyzer-security.insecureAPI.DeprecatedOrUnsafeBufferHandling
)
config="{CheckOptions: [{key: bugprone-reserved-identifier.AllowedIdentifiers, value: '_POSIX_C_SOURCE;_GNU_SOURCE;_DEFAULT_SOURCE;_XOPEN_SOURCE'}]}"
# One clang-tidy process per file: clang-tidy 14's analyzer caches function identities across the
# translation units of one process, so in a multi-file run it stops recognising va_start in later
# files and reports every va_list as uninitialised (clang-analyzer-valist.Uninitialized).
tidy() {
  clang-tidy -p "$build" --quiet --warnings-as-errors='*' --header-filter='.*/((ref|test)/[^/]*\.h|c128\.cuh)$' \
    --checks="$(IFS=,; echo "${checks[*]}")" --config="$config" "$1" >"$scratch/tidy.$2" 2>&1 ||
    echo "$1" >"$scratch/tidy.$2.failed"
}
for i in "${!files[@]}"; do
  tidy "${files[$i]}" "$i" &
  (($(jobs -rp | wc -l) < $(nproc))) || wait -n
done
wait
failed=0
for i in "${!files[@]}"; do
  [ -f "$scratch/tidy.$i.failed" ] || continue
  echo "$step: FAILED: clang-tidy ${files[$i]}" >&2
  grep -v 'warnings generated' "$scratch/tidy.$i" >&2
  failed=1
done
((failed == 0)) || exit 1
ok
