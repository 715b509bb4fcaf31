#!/usr/bin/env bash
# Runs gckpt-plan end to end under valgrind memcheck: the default plan with -o and
# --plot, a sweep with lists and the plan on stdout, bad inputs (exit 2) and --help.
# Each run must have zero memcheck errors and zero definite or indirect leaks.
# Builds in build-valgrind/. Bounded: about a minute, each run killed after 120 s.
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v valgrind >/dev/null || { echo "valgrind.sh: valgrind is not installed (Debian: apt-get install valgrind)" >&2; exit 2; }
cmake -S . -B build-valgrind -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
timeout 200 cmake --build build-valgrind -j2 --target gckpt-plan >/dev/null
exe=$PWD/build-valgrind/gckpt-plan
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export GCKPT_DATA_DIR=$PWD
printf '{"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,' >"$tmp/truncated.json"

fail=0
n=0
# check EXPECTED_EXIT NAME ARGS...
check() {
  local want=$1 name=$2
  shift 2
  n=$((n + 1))
  local log="$tmp/$name.vg" rc=0
  (cd "$tmp" && timeout 120 valgrind --tool=memcheck --error-exitcode=1 --leak-check=full \
      --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect \
      --track-origins=yes --log-file="$log" "$exe" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err") || rc=$?
  local errors leaks
  errors=$(grep -o 'ERROR SUMMARY: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || echo '?')
  leaks=$(grep -E 'definitely lost:|indirectly lost:' "$log" | grep -o 'lost: [0-9,]*' | tr -d , |
    awk '{s += $2} END {print s + 0}' || true) # no such lines: "All heap blocks were freed"
  if [ "$rc" != "$want" ] || [ "$errors" != 0 ] || [ "$leaks" != 0 ]; then
    echo "FAIL $name: exit $rc (expected $want), $errors errors, $leaks bytes leaked (gckpt-plan $*)"
    sed -n '/== Command/,$p' "$log" | head -60
    head -5 "$tmp/$name.err"
    fail=1
  else
    echo "ok   $name: exit $rc, 0 errors, 0 bytes leaked"
  fi
}

check 0 default-plan -o plan.json --plot plan.png
[ -s "$tmp/plan.json" ] && [ -s "$tmp/plan.png.gp" ] || { echo "FAIL default-plan: plan.json or plan.png.gp missing"; fail=1; }
check 0 sweep-stdout --model gpt2 --seq 1024 --every-n off,1,2,4 --micro-batch 1,2,4 --global-batch 8 --table all -o -
check 0 quiet-svg --model qwen2.5-0.5b --precision bf16 --optimizer adamw-8bit --attention eager -q -o q.json --plot q.svg
check 2 unknown-model --model no-such-model -o bad.json
check 2 truncated-config --model ./truncated.json -o bad.json
check 2 bad-option --seq 0
check 2 unwritable-output --model gpt2 -q -o /nonexistent-dir/plan.json
[ ! -e "$tmp/bad.json" ] || { echo "FAIL: an output file was written by a failed run"; fail=1; }
check 0 help --help
[ $fail = 0 ] && echo "valgrind.sh: $n runs of gckpt-plan, 0 memcheck errors, 0 leaks"
exit $fail
