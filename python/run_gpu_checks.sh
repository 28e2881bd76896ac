#!/usr/bin/env bash
# The Python binding's GPU checks, one command, on a machine with a CUDA GPU:
#   python/run_gpu_checks.sh
# Builds libc128.so twice with Meson (no meson-python, no install): the default fast-math build and
# a C128_MATH_EXACT build (-Dcuda_args=-DC128_MATH=C128_MATH_EXACT, the mode in which the GPU must
# equal the host runner bit for bit), then against each runs the GPU tests (pytest -m gpu: PyTorch,
# CuPy and JAX tensors, streams, CUDA graphs, allocations, the SGLang drop-in, torch.ops.c128's opcheck
# and a torch.compile(fullgraph=True) step captured in a CUDA graph; each prints what it checked), then
# examples/python/serve.py on PyTorch tensors and bench/python_overhead.py (the operators too).
# Needs nvcc, meson, ninja and a python3 with numpy, pytest and torch (CuPy and JAX optional: their
# tests skip without them). GPU_ARCH (default 90) picks the architecture, BUILD_ROOT (default
# build-python) the build directories. Exit status: 0 iff every step passed.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
meson=(meson)
command -v meson >/dev/null || meson=(python3 -m mesonbuild.mesonmain)
arch=${GPU_ARCH:-90}
root=${BUILD_ROOT:-build-python}
status=0
for mode in fast exact; do
  dir=$root/$mode
  args=("-Dgpu_arch=$arch" -Dgpu_ptx= -Dtests=disabled -Dexamples=false -Dpython=enabled)
  [ "$mode" = fast ] || args+=("-Dcuda_args=-DC128_MATH=C128_MATH_EXACT")
  [ -f "$dir/build.ninja" ] || "${meson[@]}" setup "$dir" "${args[@]}" >/dev/null
  ninja -C "$dir" python/libc128.so >/dev/null
done
export PYTHONPATH=$PWD/python
for mode in fast exact; do
  echo "== GPU tests, $mode-math libc128.so"
  C128_LIBRARY=$root/$mode/python/libc128.so python3 -m pytest -m gpu -rs -q python/tests || status=1
done
echo "== examples/python/serve.py --gpu"
C128_LIBRARY=$root/fast/python/libc128.so python3 examples/python/serve.py --gpu || status=1
echo "== bench/python_overhead.py"
C128_LIBRARY=$root/fast/python/libc128.so python3 bench/python_overhead.py || status=1
[ $status = 0 ] && echo "python GPU checks: ok" || echo "python GPU checks: FAILED"
exit $status
