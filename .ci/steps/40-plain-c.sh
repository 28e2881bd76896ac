#!/usr/bin/env bash
# Plain C: the public header is valid C11 (and C++11) on its own under -Wall -Wextra -Wpedantic
# -Werror; and the two build lines written in examples/plain_c.c's opening comment (the link line
# the README gives: cudart and libstdc++) run as written, in a copy of the tree, and the program
# they build runs (host runner without a GPU). Meson builds and tests plain_c as well (suites cpu
# and gpu), but links it with nvcc; this step is the gcc link a C user does.
source "$(dirname "$0")/common.bash"
cuda_include=$(dirname "$(command -v nvcc)")/../include
for lang in c c++; do
  std=c11
  [ $lang = c ] || std=c++11
  q gcc -x $lang -std=$std -Wall -Wextra -Wpedantic -Werror -fsyntax-only -I"$cuda_include" c128.cuh
done

# The commands of the comment: the lines that start with nvcc or gcc, with their continuations.
mapfile -t lines < <(sed -n '1,/\*\//p' examples/plain_c.c | python3 -c '
import re, sys
text = re.sub(r"\\\n\s*", "", sys.stdin.read())
for line in text.splitlines():
    if re.match(r"\s*(nvcc|gcc) ", line):
        print(line.strip())')
[ ${#lines[@]} = 2 ] || fail "expected 2 build lines in examples/plain_c.c's comment, found ${#lines[@]}"
mkdir "$scratch/tree" "$scratch/tree/examples"
cp c128.cuh "$scratch/tree"
cp examples/c128_impl.cu examples/plain_c.c "$scratch/tree/examples"
cd "$scratch/tree"
for line in "${lines[@]}"; do
  q bash -c "$line"
done
q ./plain_c
grep -q ': ok$' "$scratch/log" || fail "plain_c printed: $(cat "$scratch/log")"
ok
