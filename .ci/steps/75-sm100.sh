#!/usr/bin/env bash
# sm_100: CI builds every instance for sm_90 only (.ci/run), so this step compiles three instances
# of head_dim 512 (f32 and bf16 states, a mixed one) for sm_100 in the default, exact and legacy
# builds, with the library's flags: a spill or local memory fails it, as in the sm_90 build.
source "$(dirname "$0")/common.bash"
cat >"$scratch/three.cu" <<'CU'
#define C128_IMPLEMENTATION
#define C128_INSTANCES(X) C128_ROW(X, 512, f32, f32, f32) C128_ROW(X, 512, bf16, bf16, bf16) C128_ROW(X, 512, bf16, f32, bf16)
#include "c128.cuh"
CU
flags=(-std=c++17 -O3 -gencode arch=compute_100,code=sm_100 -Werror=all-warnings
  -Xptxas=-warn-spills,-warn-lmem-usage -Xcompiler=-ffp-contract=off -I"$PWD" -c "$scratch/three.cu")
for mode in "" -DC128_MATH=C128_MATH_EXACT -DC128_EPILOGUE=C128_EPILOGUE_LEGACY; do
  q nvcc "${flags[@]}" $mode -o "$scratch/three.o"
done
ok
