#!/usr/bin/env bash
# README's C snippets compile as C11 and as C++11 against c128.cuh's declarations: a snippet
# that starts with a preprocessor line is a file of its own; any other is the body of a function
# whose free names (the tensors and arrays a reader brings) are declared by the prelude below.
# The implementation snippet (C128_IMPLEMENTATION) is compiled by nvcc.
source "$(dirname "$0")/common.bash"
cuda_include=$(dirname "$(command -v nvcc)")/../include
python3 - README.md "$scratch" <<'PY' || fail "could not extract README's C snippets"
import re, sys
text, out = open(sys.argv[1]).read(), sys.argv[2]
blocks = re.findall(r"```c\n(.*?)```", text, re.S)
prelude = """#include "c128.cuh"
static void snippet(void *state, const void *rows, const float *ape, void *out, c128_compress_plan *cplans,
                    c128_write_plan *wplans, const c128_compress_plan *d_cplans, const c128_write_plan *d_wplans,
                    c128_decode_plan *dplans, int64_t pages, int64_t batch, cudaStream_t stream,
                    c128_decode_args decode_args, c128_device_plan_args device_plan_args,
                    c128_prefill_args args_with_host_plans) {
"""
for i, b in enumerate(blocks):
    src = b if b.lstrip().startswith("#") else prelude + b + "}\n"
    open(f"{out}/readme_{i}.c", "w").write(src)

PY
n=$(ls "$scratch"/readme_*.c | wc -l)
[ "$n" -ge 3 ] || fail "expected at least 3 C snippets in README.md, found $n"
for f in "$scratch"/readme_*.c; do
  if grep -q C128_IMPLEMENTATION "$f"; then
    # The snippet, not the table, is what is checked: test/bare_rows.h's four rows (unless it has its own).
    rows=(-include test/bare_rows.h)
    ! grep -q C128_INSTANCES "$f" || rows=()
    q nvcc -std=c++17 -gencode arch=compute_90,code=sm_90 -I. "${rows[@]}" -x cu -c "$f" -o "$f.o"
    continue
  fi
  for lang in c c++; do
    std=c11 extra=""
    # C's {0} idiom zero-initialises a struct; C++ accepts it too, with a -Wextra note per field.
    [ $lang = c ] || std=c++11 extra=-Wno-missing-field-initializers
    q gcc -x $lang -std=$std -Wall -Wextra -Werror $extra -Wno-unused-parameter -Wno-unused-function \
      -Wno-unused-variable -Wno-unused-but-set-variable -I. -I"$cuda_include" -c "$f" -o "$f.$lang.o"
  done
done
ok
