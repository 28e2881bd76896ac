#!/usr/bin/env bash
# Reproduces BENCHMARKS.md on a machine with an NVIDIA GPU, from the repository root:
#
#     bench/run.sh [OUTDIR]
#
# Builds the benchmark (meson -Dbench=true), runs it, runs the PyTorch reference of the same
# cases, and prints the report (tables and target verdicts); everything lands in OUTDIR
# (default bench-results/). Environment:
#   BENCH_COMMIT          recorded commit (default: git rev-parse --short HEAD; the sha256 of
#                         c128.cuh is always appended, so uncommitted edits are visible)
#   BENCH_BUILD           build directory (default /tmp/c128-bench-build)
#   BENCH_ARCH            sm architecture (default 90)
#   BENCH_TORCH_BUDGET_S  stop starting PyTorch cases after this many seconds (default 200)
#   BENCH_NCU=1           also profile five cases with Nsight Compute (ncu --clock-control none)
#   BENCH_PLOT=0          skip bench/plot.py
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench-results}
mkdir -p "$out"
build=${BENCH_BUILD:-/tmp/c128-bench-build}
commit=${BENCH_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
header=$(sha256sum c128.cuh | cut -c1-12)
budget=${BENCH_TORCH_BUDGET_S:-200}
t0=$(date +%s)

if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" -Dgpu_arch="${BENCH_ARCH:-90}" -Dbench=true -Dtests=disabled -Dexamples=false \
    >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
fi
meson compile -C "$build" c128_bench >>"$out/build.log" 2>&1 || { tail -60 "$out/build.log"; exit 1; }
echo "== build: $(($(date +%s) - t0)) s"

timeout "${BENCH_C_TIMEOUT_S:-300}" "$build/bench/c128_bench" --csv "$out/bench_c128.csv" \
  --commit "$commit c128.cuh:$header" 2>&1 |
  tee "$out/bench_c128.log"
status=${PIPESTATUS[0]}
echo "== c128 benchmark: exit $status, $(($(date +%s) - t0)) s"
[ "$status" = 77 ] && exit 77

if [ "${BENCH_NCU:-0}" = 1 ] && command -v ncu >/dev/null; then
  # 3 launches per epilogue, two-warp first: skip 2, profile the 3rd (two-warp) and 4th (legacy).
  for spec in decode_boundary:128:f32 decode_boundary:128:bf16 prefill_1req:32768:f32 prefill_1req:32768:bf16 \
    decode_off:1024:f32; do
    echo "######## $spec"
    ncu --clock-control none --launch-skip 2 --launch-count 2 -k 'regex:c128__(decode|compress)_kernel' \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
      --section WarpStateStats --section SchedulerStats \
      --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
      "$build/bench/c128_bench" --profile "$spec"
  done >"$out/ncu.txt" 2>&1
  echo "== ncu: $(($(date +%s) - t0)) s"
fi

PYTHONUNBUFFERED=1 timeout $((budget + 150)) python3 bench/torch_ref.py --csv "$out/bench_torch.csv" \
  --budget-s "$budget" 2>&1 | tee "$out/bench_torch.log"
echo "== PyTorch reference: exit ${PIPESTATUS[0]}, $(($(date +%s) - t0)) s"

python3 bench/report.py --c "$out/bench_c128.csv" --torch "$out/bench_torch.csv" --md "$out/bench_report.md"
if [ "${BENCH_PLOT:-1}" != 0 ]; then
  python3 bench/plot.py --c "$out/bench_c128.csv" --torch "$out/bench_torch.csv" --png "$out/c128_bench.png" ||
    echo "(plot skipped: matplotlib missing?)"
fi
echo "== total: $(($(date +%s) - t0)) s"
