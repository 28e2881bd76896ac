#!/usr/bin/env bash
# One device call: GPU suite, bench/run.sh (C harness and PyTorch reference in one run), then the
# patched variants of bench/experiments; selected results land in $OUT.
# Usage (device, repository root): COMMIT=sha bash bench/experiments/device_final.sh
# SAN=1 adds a compute-sanitizer pass, SKIP_EXP=1 skips the variants, BUDGET=s bounds PyTorch;
# bench/run.sh's own switches (BENCH_NCU=1 for Nsight Compute profiles) pass through.
T0=$(date +%s)
B=/tmp/bt$RANDOM
meson setup $B -Dgpu_arch=90 -Dwerror=true >/dev/null && meson compile -C $B > /tmp/build.log 2>&1 || { tail -50 /tmp/build.log; exit 1; }
$B/test/c128_tests --filter='gpu/*' -j4 > /tmp/gpu.log 2>&1; tail -1 /tmp/gpu.log; grep -E 'FAIL|rash' /tmp/gpu.log | head -20
echo "tests $(( $(date +%s)-T0 )) s"
if [ "${SAN:-0}" = 1 ]; then
  LOGDIR=/tmp FILTERS="gpu/decode_groups_agree gpu/h512_f32_f32_f32_* gpu/h512_bf16_f32_f32_* gpu/h128_bf16_bf16_bf16_* gpu/random_plan_bytes* gpu/pdl_*" \
    timeout 300 bash test/sanitize.sh $B racecheck memcheck 2>&1 | grep -E '^(racecheck|memcheck)'
  echo "sanitizers $(( $(date +%s)-T0 )) s"
fi
R=/tmp/results$RANDOM BB=/tmp/bb$RANDOM
BENCH_COMMIT=$COMMIT BENCH_BUILD=$BB BENCH_TORCH_BUDGET_S=${BUDGET:-120} bash bench/run.sh $R > /tmp/run.log 2>&1
grep '^==' /tmp/run.log
cp $R/bench_c128.csv $R/bench_torch.csv $R/bench_report.md $R/bench_c128.log $OUT/ 2>/dev/null
cp $R/c128_bench.png $R/ncu.txt $OUT/ 2>/dev/null
echo "bench $(( $(date +%s)-T0 )) s"
if [ "${SKIP_EXP:-0}" != 1 ]; then
  BENCH_BUILD=$BB timeout 240 bash bench/experiments/run.sh $OUT > /tmp/experiments.log 2>&1
  grep -E 'exit|no build' /tmp/experiments.log
fi
echo "experiments $(( $(date +%s)-T0 )) s"
