#!/usr/bin/env bash
# GPU validation of gckpt on an H100/H200-class machine, inside a time budget (default 8
# minutes): build with CUDA, run the GPU tests, calibrate this GPU, plan Llama-3.1-8B and
# Qwen2.5-7B at seq 2048 and 4096 (pure bf16 + adamw-8bit so that they fit), run a spread
# of entries (checkpointing off, every_n_layers 1, 2 and 4, offload off and on) with
# gckpt-run --backend cuda, then one QLoRA entry of Llama-3.1-8B if time is left, and print
# predicted vs measured memory and time.
#
# usage: tests/gpu/validate.sh [BUILD_DIR]      (environment: BUDGET=seconds, OUT=dir, JOBS=n)
# exit: 0 every run entry passed, 1 some entry failed or was cut by the budget, 2 setup failed
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${1:-${BUILD:-$ROOT/build-gpu}}
OUT=${OUT:-$BUILD/validate}
BUDGET=${BUDGET:-480}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 4)}
START=$(date +%s)

elapsed() { echo $(( $(date +%s) - START )); }
left() { echo $(( BUDGET - $(elapsed) )); }
# seconds for a timeout: what is left, at least 1 (timeout 0 would mean none)
tl() { local l; l=$(left); [ "$l" -ge 1 ] && echo "$l" || echo 1; }
say() { printf '[%4ss] %s\n' "$(elapsed)" "$*"; }
die() { say "FAILED: $*"; exit 2; }

mkdir -p "$OUT" || die "cannot create $OUT"
command -v nvidia-smi >/dev/null 2>&1 || die "nvidia-smi not found: this script needs an NVIDIA GPU"
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
[ -n "$GPU_NAME" ] || die "no GPU reported by nvidia-smi"
say "GPU: $GPU_NAME; budget ${BUDGET}s; build in $BUILD"

# 1. build with the CUDA backend (sm_90 unless CUDAARCHS says otherwise)
ARCH=${CUDAARCHS:-90}
say "configuring (CUDA architectures $ARCH)"
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$ARCH" >"$OUT/cmake.log" 2>&1 \
    || { tail -n 20 "$OUT/cmake.log"; die "cmake configure"; }
grep -q "CUDA backend enabled" "$OUT/cmake.log" || die "nvcc was not found: the CUDA backend is not built (see $OUT/cmake.log)"
say "building with $JOBS jobs"
cmake --build "$BUILD" -j "$JOBS" >"$OUT/build.log" 2>&1 || { tail -n 30 "$OUT/build.log"; die "build"; }
RUN="$BUILD/gckpt-run"
PLAN="$BUILD/gckpt-plan"
if [ ! -x "$RUN" ] || [ ! -x "$PLAN" ]; then die "gckpt-run or gckpt-plan missing in $BUILD"; fi

# 2. the GPU tests (and the host tests they compare with); test_cuda_tp and test_cuda_cp (tensor and
#    context parallelism under mpirun) run with two GPUs and MPI, and are skipped otherwise
say "GPU tests"
if (cd "$BUILD" && timeout "$(tl)" ctest --output-on-failure -R 'test_cuda_backend|test_cuda_tp|test_cuda_cp|test_exec_host' >"$OUT/ctest.log" 2>&1); then
    grep -E "tests passed|Skipped|Failed" "$OUT/ctest.log" | sed 's/^/    /'
    if grep -q "test_cuda_backend.*Skipped" "$OUT/ctest.log"; then die "the GPU test was skipped: no usable GPU"; fi
else
    tail -n 40 "$OUT/ctest.log"
    die "GPU tests"
fi

# 3. calibrate: keep the shipped profile's peaks, measure the efficiencies
case "$GPU_NAME" in
    *H200*) BASE=h200 ;;
    *H100*PCIe*) BASE=h100-pcie-80gb ;;
    *H100*) BASE=h100-sxm-80gb ;;
    *A100*80GB*) BASE=a100-80gb ;;
    *A100*) BASE=a100-40gb ;;
    *) BASE= ;;
esac
PROFILE="$OUT/local.json"
say "calibrating${BASE:+ against devices/$BASE.json}"
if ! timeout "$(tl)" "$RUN" --calibrate ${BASE:+--gpu "$BASE"} --model llama-3.1-8b -o "$PROFILE" 2>"$OUT/calibrate.log"; then
    cat "$OUT/calibrate.log"
    [ -n "$BASE" ] || die "calibration failed and there is no shipped profile for $GPU_NAME"
    say "calibration failed; planning with devices/$BASE.json"
    PROFILE=$BASE
else
    sed 's/^/    /' "$OUT/calibrate.log"
fi

# 4. plan and run. Entries of --every-n off,1,2,4 --offload both, in the planner's order:
#    0 off, 1 n1, 2 n1+offload, 3 n2, 4 n2+offload, 5 n4, 6 n4+offload.
#    seq 2048 runs off, n1, n2+offload, n4; seq 4096 runs off, n1+offload, n2, n4+offload.
entries_for() { if [ "$1" = 2048 ]; then echo 0,1,4,5; else echo 0,2,3,6; fi; }

STATUS=0
REPORTS=()
# plan_and_run TAG MODEL SEQ ENTRIES NEED_S PLAN_OPTIONS...: plan, check the 7 entries,
# run the selected ones on the GPU when at least NEED_S seconds are left
plan_and_run() {
    local TAG=$1 MODEL=$2 SEQ=$3 SEL=$4 NEED=$5
    shift 5
    local P="$OUT/plan-$TAG.json" R="$OUT/report-$TAG.jsonl" N RC
    if [ "$(left)" -lt "$NEED" ]; then
        say "$TAG: skipped, the time budget is spent"
        STATUS=1
        return
    fi
    if ! "$PLAN" --model "$MODEL" --gpu "$PROFILE" --seq "$SEQ" "$@" \
        --every-n off,1,2,4 --offload both -q -o "$P" 2>"$OUT/plan-$TAG.log"; then
        cat "$OUT/plan-$TAG.log"
        die "gckpt-plan for $TAG"
    fi
    N=$(grep -c '"every_n_layers":' "$P")
    if [ "$N" -ne 8 ]; then # the inputs' list plus 7 entries
        die "$TAG: the plan has an unexpected number of entries ($((N - 1)))"
    fi
    say "$TAG: running entries $SEL ($(left)s left)"
    timeout --signal=INT --kill-after=20 "$(tl)" "$RUN" --plan "$P" --entry "$SEL" --backend cuda \
        --steps 2 --warmup 1 -o "$R" >"$OUT/run-$TAG.txt" 2>"$OUT/run-$TAG.log"
    RC=$?
    sed 's/^/    /' "$OUT/run-$TAG.txt"
    case $RC in
        0) ;;
        1) say "$TAG: some entries failed their checks"; STATUS=1 ;;
        124|130|137) say "$TAG: cut by the time budget"; STATUS=1 ;;
        *) cat "$OUT/run-$TAG.log"; say "$TAG: gckpt-run exited $RC"; STATUS=1 ;;
    esac
    [ -f "$R" ] && REPORTS+=("$R")
}

for MODEL in llama-3.1-8b qwen2.5-7b; do
    for SEQ in 2048 4096; do
        plan_and_run "$MODEL-s$SEQ" "$MODEL" "$SEQ" "$(entries_for "$SEQ")" 30 --precision bf16 --optimizer adamw-8bit
    done
done
# QLoRA (nf4, double quantization, bf16 compute; amp-bf16): one entry, every_n 2 without
# offload. Its setup quantizes the 7.0 billion linear weights on the host first (about a
# minute, executor/README.md), so it runs only with 150 s left.
plan_and_run "llama-3.1-8b-qlora-s4096" llama-3.1-8b 4096 3 150 --method qlora --precision amp-bf16

# 5. one table over every report
if [ "${#REPORTS[@]}" -gt 0 ] && command -v python3 >/dev/null 2>&1; then
    python3 - "${REPORTS[@]}" <<'PY'
import json, sys
G = 2.0 ** 30
def g(v): return "-" if v is None else "%.2f" % (v / G)
def pct(v): return "-" if v is None else "%+.1f%%" % (100 * v)
def s(v): return "-" if v is None else "%.3f" % v
print()
print("%-13s %5s %5s %7s %7s %-7s %9s %9s %7s %9s %9s %7s %8s %8s %7s %s" % (
    "model", "seq", "entry", "every_n", "offload", "status", "pred GiB", "meas GiB", "err",
    "pred dev", "meas dev", "err", "pred s", "meas s", "err", "pass"))
def load(path):
    """a report (JSON Lines): the header, the entry records, the summary if the run ended"""
    r = {"entries": []}
    for line in open(path):
        if not line.endswith("\n"):
            break  # a write cut short
        rec = json.loads(line)
        if rec["record"] == "header":
            r.update(rec)
        elif rec["record"] == "entry":
            r["entries"].append(rec)
        else:
            r["summary"] = rec
    return r
for path in sys.argv[1:]:
    r = load(path)
    for e in r["entries"]:
        m, t = e["memory"], e["time"]
        print("%-13s %5d %5d %7s %7s %-7s %9s %9s %7s %9s %9s %7s %8s %8s %7s %s" % (
            r["plan"]["model"][:13], r["plan"]["seq"], e["index"], e["every_n_layers"] or "off",
            "on" if e["offload"] else "off", e["status"],
            g(m["peak_bytes"]["predicted"]), g(m["peak_bytes"]["measured"]), pct(m["peak_bytes"]["relative_error"]),
            g(m["device_peak_bytes"]["predicted"]), g(m["device_peak_bytes"]["measured"]),
            pct(m["device_peak_bytes"]["relative_error"]),
            s(t["predicted_step_s"]), s(t["measured_step_s"]), pct(t["relative_error"]),
            {True: "yes", False: "NO", None: "-"}[e["pass"]]))
PY
fi
say "done: reports in $OUT (exit $STATUS)"
exit $STATUS
