#!/usr/bin/env bash
# Python: the package as a user gets it, in a fresh virtual environment. `pip wheel .` and
# `pip install .` (meson-python builds libc128.so with nvcc in pip's isolated build environment;
# one architecture, sm_90, to keep CI short; the two share a build directory, so the second
# compiles nothing), the wheel holds the package alone; then pytest from the repository root
# against the installed package (the CPU tests; the GPU tests skip without a device) and
# examples/python/serve.py on the host runner. Then the uninstalled ways: a Meson build with
# -Dshared_library=true whose `meson test` runs serve.py against the build directory's libc128.so
# (C128_LIBRARY; its pytest suite, python_cpu, is the one just run against the installed package,
# so it is not run twice), and whose `meson install` gives C users libc128.so and c128.pc: a C
# program built with nothing but `pkg-config --cflags --libs c128` runs.
source "$(dirname "$0")/common.bash"
repo=$PWD
if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then # Debian splits venv out of python3
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-venv >/dev/null
fi
venv=$scratch/venv
q python3 -m venv "$venv"
py=$venv/bin/python
q "$py" -m pip install -q --upgrade pip # repeated --config-settings keys need pip >= 23.1
# No PyTorch here: PyPI's Linux x86-64 torch wheel is the CUDA build, which needs some 3 GB of NVIDIA
# libraries to import (5.4 GB of venv, over a minute and a half to install), so python/tests/test_torch.py
# skips; the engine adapters' tests (SGLang's planners, vLLM, TensorRT-LLM) run on NumPy arrays.
q "$py" -m pip install -q numpy pytest

# 1. pip wheel . and pip install . (isolated builds: nothing but meson-python comes from PyPI).
settings=(-Csetup-args=-Dgpu_arch=90 -Csetup-args=-Dgpu_ptx= "-Cbuild-dir=$scratch/mesonpy")
q "$py" -m pip wheel -q --no-deps -w "$scratch/wheel" "${settings[@]}" .
wheel=$(ls "$scratch"/wheel/c128-*.whl)
extra=$("$py" -c 'import sys, zipfile; print(" ".join(n for n in zipfile.ZipFile(sys.argv[1]).namelist()
    if not n.startswith(("c128/", "c128-"))))' "$wheel")
[ -z "$extra" ] || fail "the wheel holds more than the package: $extra"
q "$py" -m pip install -q "$wheel" # the wheel just built: a second build from source took minutes
where=$(cd "$scratch" && "$py" -c 'import c128; print(c128.library_path())')
[[ $where == "$venv/"* ]] || fail "import c128 loads $where, not the installed package"
(cd "$repo" && env -u C128_LIBRARY -u PYTHONPATH "$py" -m pytest -q) >"$scratch/pytest.log" 2>&1 ||
  { cat "$scratch/pytest.log" >&2; fail "pytest against the installed package"; }
grep -q " passed" "$scratch/pytest.log" || fail "pytest ran no test: $(tail -3 "$scratch/pytest.log")"
q env -u C128_LIBRARY -u PYTHONPATH "$py" examples/python/serve.py --cpu --steps 300
grep -q '^all windows match' "$scratch/log" || fail "serve.py printed: $(tail -3 "$scratch/log")"

# 2. Meson: the uninstalled package's tests (meson test, suite cpu) and the C users' library.
export PATH=$venv/bin:$PATH # the python3 that has numpy and pytest
q meson setup "$scratch/build" --prefix="$scratch/prefix" -Dwerror=true -Dgpu_arch=90 -Dgpu_ptx= \
  -Dtests=disabled -Dexamples=false -Dshared_library=true
q meson compile -C "$scratch/build"
q meson test -C "$scratch/build" --suite cpu --print-errorlogs serve_py_cpu
q meson install -C "$scratch/build" --no-rebuild
pc=$(find "$scratch/prefix" -name c128.pc)
[ -n "$pc" ] || fail "meson install -Dshared_library=true installed no c128.pc"
export PKG_CONFIG_PATH=$(dirname "$pc")
[[ $(pkg-config --libs c128) == *-lc128* ]] || fail "pkg-config --libs c128 is '$(pkg-config --libs c128)'"
cat >"$scratch/app.c" <<'EOF'
/* libc128.so from C: list the instances, plan one decode step, run it on the host runner. */
#include <stdio.h>
#include "c128.cuh"
int main(void) {
  enum { D = 128 };
  static float state[2][128][2 * D], input[1][2 * D], ape[128][D], output[1][D];
  c128_ring ring = {0};
  ring.state_pages = 2;
  c128_request req = {1, 128, 1}; /* pool row 1, its 128th token: a window completes */
  c128_decode_plan plan;
  for (int j = 0; j < 128; ++j)
    for (int c = 0; c < 2 * D; ++c) state[1][j][c] = (float)((j * 7 + c) % 13) / 13.0f;
  for (int c = 0; c < 2 * D; ++c) input[0][c] = 0.5f;
  c128_status s = c128_plan_decode(&ring, &req, 1, &plan);
  c128_decode_args a = {0};
  a.head_dim = D, a.state_dtype = a.input_dtype = a.output_dtype = C128_F32;
  a.state = state, a.state_pages = 2, a.input = input, a.ape = &ape[0][0], a.output = output;
  a.output_rows = a.batch = 1, a.plans = &plan;
  if (s == C128_SUCCESS) s = c128_decode_host(&a, NULL);
  printf("%d instances, decode: %s, out[0] %.4f\n", c128_instance_count(), c128_status_string(s), output[0][0]);
  return s == C128_SUCCESS && output[0][0] == output[0][0] ? 0 : 1;
}
EOF
cuda_include=$(dirname "$(command -v nvcc)")/../include
# shellcheck disable=SC2046 # pkg-config output is a list of flags
q gcc -std=c11 -Wall -Wextra -Werror -I"$cuda_include" "$scratch/app.c" $(pkg-config --cflags --libs c128) \
  -Wl,-rpath,"$(pkg-config --variable=libdir c128)" -o "$scratch/app"
q "$scratch/app"
grep -q 'decode: C128_SUCCESS' "$scratch/log" || fail "the C program printed: $(cat "$scratch/log")"
echo "python: ok, $(grep -o '[0-9]* passed[^=]*' "$scratch/pytest.log" | head -1 | sed 's/ *$//')"
