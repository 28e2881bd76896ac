#!/usr/bin/env bash
# One device call of a tuning round (session notes, not part of the harness): build tests and
# benchmark, GPU suite, the benchmark, the patched variants of bench/experiments, and ncu on
# four cases; everything lands in $OUT. Usage (device): COMMIT=sha bash bench/experiments/device_round.sh
T0=$(date +%s)
B=/tmp/bs$RANDOM
meson setup $B -Dgpu_arch=90 -Dwerror=true -Dbench=true >/dev/null && meson compile -C $B > /tmp/build.log 2>&1 || { tail -50 /tmp/build.log; exit 1; }
echo "build $(( $(date +%s)-T0 )) s"
$B/test/c128_tests --filter='gpu/*' -j4 > /tmp/gpu.log 2>&1; tail -1 /tmp/gpu.log; grep -E 'FAIL|rash' /tmp/gpu.log | head -20
echo "tests $(( $(date +%s)-T0 )) s"
timeout 200 $B/bench/c128_bench --csv $OUT/bench_c128.csv --commit "$COMMIT" > $OUT/bench.log 2>&1; echo "bench rc $?"
echo "bench $(( $(date +%s)-T0 )) s"
[ "${SKIP_EXP:-0}" = 1 ] || BENCH_BUILD=$B timeout 300 bash bench/experiments/run.sh $OUT > $OUT/experiments.log 2>&1
echo "experiments $(( $(date +%s)-T0 )) s"
for spec in ${NCU_SPECS:-decode_boundary:128:f32 decode_boundary:128:bf16 prefill_1req:32768:f32 prefill_1req:32768:bf16}; do
  echo "######## $spec"
  timeout 120 ncu --clock-control none --launch-skip 2 --launch-count 1 -k 'regex:c128__(decode|compress)_kernel' \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats \
    --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum,lts__t_sectors_srcunit_tex_lookup_hit.sum,lts__t_sectors_srcunit_tex_lookup_miss.sum \
    $B/bench/c128_bench --profile "$spec"
done > $OUT/ncu.txt 2>&1
echo "ncu $(( $(date +%s)-T0 )) s"; grep -m3 -i 'error\|warn' $OUT/ncu.txt
