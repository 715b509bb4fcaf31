#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, -DGCKPT_FUZZ=ON) in build-fuzz/ and runs each
# for SECONDS (default 30) on its committed corpus and crash regressions.
#
#   tests/fuzz/run.sh [SECONDS] [NAME...]      NAME: model device plan cli plan_read (default: all)
#
# Inputs that find new coverage go to build-fuzz/fuzz-work/NAME/, never into the
# committed corpus. A crash, leak, sanitizer report, timeout (10 s) or allocation over
# 2 GB is saved under build-fuzz/fuzz-artifacts/NAME/ and fails the script; commit it
# under tests/fuzz/regressions/NAME/ with the fix. GCKPT_FUZZ_NO_BUILD=1 skips the build.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-30}
[ $# -gt 0 ] && shift
names=("$@")
[ ${#names[@]} -eq 0 ] && names=(model device plan cli plan_read api)

if [ -z "${GCKPT_FUZZ_NO_BUILD:-}" ]; then
  cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DGCKPT_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build build-fuzz -j2 --target fuzz >/dev/null
fi

status=0
report=()
for n in "${names[@]}"; do
  # absolute paths: fuzz_cli works in a scratch directory of its own
  exe=$PWD/build-fuzz/tests/fuzz/fuzz_$n
  work=$PWD/build-fuzz/fuzz-work/$n
  art=$PWD/build-fuzz/fuzz-artifacts/$n
  log=$PWD/build-fuzz/fuzz-$n.log
  mkdir -p "$work" "$art"
  dirs=("$work" "$PWD/tests/fuzz/corpus/$n")
  [ -d "tests/fuzz/regressions/$n" ] && dirs+=("$PWD/tests/fuzz/regressions/$n")
  echo "fuzz_$n: ${secs} s on ${dirs[*]}"
  rc=0
  "$exe" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$art/" "${dirs[@]}" >"$log" 2>&1 || rc=$?
  st() { grep -o "stat::$1: *[0-9]*" "$log" | grep -o '[0-9]*$' || echo "?"; }
  result=ok
  if [ $rc -ne 0 ]; then
    result="FAILED (exit $rc, see $log)"
    status=1
    grep -E '^(==[0-9]+==ERROR|SUMMARY|fuzz check failed|.*runtime error)' "$log" | head -5 || true
    ls "$art" | sed 's/^/  artifact: /' || true
  fi
  report+=("$(printf '%-12s %6s s %12s execs %8s exec/s %6s new units %6s MB peak  %s' "fuzz_$n" "$secs" \
    "$(st number_of_executed_units)" "$(st average_exec_per_sec)" "$(st new_units_added)" \
    "$(st peak_rss_mb)" "$result")")
done
printf '%s\n' "${report[@]}"
exit $status
