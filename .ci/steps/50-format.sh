#!/usr/bin/env bash
# Formatting: c128.cuh and every C, CUDA and header file under examples/, ref/, test/, bench/ and fuzz/ is as .clang-format
# (clang-format 14, Debian bookworm) writes it. Fix with: clang-format -i FILE...
source "$(dirname "$0")/common.bash"
need clang-format clang-format
mapfile -t files < <(ls c128.cuh; find examples ref test bench fuzz -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \
  -o -name '*.cpp' -o -name '*.hpp' \) 2>/dev/null | sort)
[ ${#files[@]} -gt 0 ] || fail "no files to check"
if ! clang-format --dry-run -Werror "${files[@]}" >"$scratch/log" 2>&1; then
  head -40 "$scratch/log" >&2
  echo "Places to change, per file:" >&2
  grep -o '^[^: ]*:[0-9]*:[0-9]*: error' "$scratch/log" | cut -d: -f1 | uniq -c | awk '{ printf "  %s %d\n", $2, $1 }' >&2
  fail "not formatted as .clang-format says: clang-format -i the files listed above"
fi
ok
