#!/usr/bin/env bash
# Copy-vendored: only c128.cuh, copied into an empty directory next to a small program
# (examples/subproject/app.cu, impl.cu), built with bare nvcc (no Meson, no include path beyond
# the CUDA Toolkit's) in both modes, and run (the host runner where there is no GPU):
#   C128_STATIC          one translation unit holds everything as static functions;
#   C128_IMPLEMENTATION  impl.cu holds the implementation, app.cu only the declarations, linked.
# One instance and sm_90 only, to keep CI short; user-level -Wall -Wextra must stay quiet.
source "$(dirname "$0")/common.bash"
cp c128.cuh examples/subproject/app.cu examples/subproject/impl.cu "$scratch"
cd "$scratch"
flags=(-O2 -gencode arch=compute_90,code=sm_90 -Werror all-warnings -Xcompiler=-Wall,-Wextra)
q nvcc "${flags[@]}" -DC128_STATIC app.cu -o app_static
q nvcc "${flags[@]}" -c impl.cu -o impl.o
q nvcc "${flags[@]}" -c app.cu -o app.o
q nvcc -gencode arch=compute_90,code=sm_90 app.o impl.o -o app_two
[[ $(nm app.o) != *" T c128_"* ]] || fail "app.o defines c128_ functions although it includes only the declarations"
[[ $(nm app_static) != *" T c128_"* ]] || fail "C128_STATIC exported c128_ functions"
[[ $(nm impl.o) == *" T c128_decode"* ]] || fail "impl.o does not define c128_decode"
q ./app_static
grep -q 'C128_STATIC, .*: ok$' log || fail "app_static printed: $(cat log)"
q ./app_two
grep -q 'another translation unit, .*: ok$' log || fail "app_two printed: $(cat log)"
ok
