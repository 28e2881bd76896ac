#!/usr/bin/env bash
# Runs the GPU tests that exercise every kernel and launch path under each compute-sanitizer
# tool and prints one verdict line per tool, taken from the sanitizer's exit code.
# Usage: test/sanitize.sh BUILD_DIR [TOOL...]   (default tools: memcheck racecheck initcheck synccheck)
set -u
build=${1:?build dir}
shift
tools=${*:-memcheck racecheck initcheck synccheck}
# Kernel tests of the production instances, hostile plans, non-finite input, device planner,
# the attack tests' GPU parts (refused planner calls, aliasing, shared layouts), graphs, PDL
# chains, several streams, every decode group with PDL.
# FILTERS (space-separated Criterion patterns) overrides the list.
read -r -a filters <<< "${FILTERS:-gpu/h512_f32_f32_f32_* gpu/h512_bf16_f32_f32_* gpu/h128_bf16_bf16_bf16_* gpu/random_plan_bytes* gpu/nonfinite* gpu/device_planner* gpu/attack_gpu* gpu/graph_* gpu/pdl_* gpu/threads_and_streams* gpu/decode_every_group*}"
status=0
for tool in $tools; do
  for f in "${filters[@]}"; do
    C128_SANITIZER=$tool compute-sanitizer --tool "$tool" --error-exitcode 86 --target-processes all --print-limit 10 \
      "$build/test/c128_tests" --filter="$f" -j4 > "${LOGDIR:-.}/sanitize-$tool.log" 2>&1
    rc=$?
    summary=$(grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" "${LOGDIR:-.}/sanitize-$tool.log" | sort | uniq -c | tr '\n' ' ')
    synth=$(grep -h "Synthesis" "${LOGDIR:-.}/sanitize-$tool.log" | tail -1)
    # Exit 77: no test of the filter ran (all skipped, e.g. no device; test/main.c), nothing judged.
    [ $rc -eq 77 ] && summary="skipped, no test ran; $summary"
    echo "$tool $f: exit $rc; $summary; ${synth#*Synthesis: }"
    [ $rc -eq 0 ] || [ $rc -eq 77 ] || { status=1; tail -30 "${LOGDIR:-.}/sanitize-$tool.log"; }
  done
done
exit $status
