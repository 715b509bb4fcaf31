#!/usr/bin/env bash
# Plans of every shipped model x GPU x precision (and a set of options around them),
# written by one build and compared byte for byte with another's, apart from the
# generator's version string. For refactorings that must not change a number.
#
#   tools/compare_plans.sh gen BUILD_DIR OUT_DIR   # write the plans of BUILD_DIR/gckpt-plan
#   tools/compare_plans.sh cmp OLD_DIR NEW_DIR     # exit 0 when every file is equal
#
# Each case writes the JSON plan (-o), the full table on stdout (--table all) and, for a
# few, the plot's gnuplot script and data files (not the image).
# For a change that moves step times but must not move memory (a refit, a code base):
#   tools/compare_plans_memory.py OLD_DIR NEW_DIR   # the memory facts only (see its header)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)

gen() {
    local build=$1 out=$2 plan
    plan=$(cd "$build" && pwd)/gckpt-plan
    [ -x "$plan" ] || { echo "compare_plans.sh: no gckpt-plan in $build" >&2; exit 2; }
    mkdir -p "$out"
    out=$(cd "$out" && pwd)
    local models devices n=0
    models=$(cd "$here/models" && ls ./*.json | sed 's|^\./||; s|\.json$||')
    devices=$(cd "$here/devices" && ls ./*.json | sed 's|^\./||; s|\.json$||')
    run() { # name, options...
        local name=$1; shift
        (cd "$out" && GCKPT_DATA_DIR="$here" "$plan" "$@" --table all -o "$name.json" > "$name.txt" 2> "$name.err") || true
        n=$((n + 1))
    }
    for m in $models; do
        for d in $devices; do
            for p in fp32 bf16 amp-bf16 amp-fp16; do
                run "$m.$d.$p" --model "$m" --gpu "$d" --precision "$p"
            done
        done
        for p in fp32 bf16 amp-bf16 amp-fp16; do
            for o in adamw adamw-foreach sgd adamw-8bit; do
                run "$m.opt-$o.$p" --model "$m" --precision "$p" --optimizer "$o" --grad-accum 2
            done
            run "$m.eager.$p" --model "$m" --precision "$p" --attention eager --micro-batch 1,2
            run "$m.mb124.$p" --model "$m" --precision "$p" --micro-batch 1,2,4
        done
        run "$m.global8" --model "$m" --gpu a100-40gb --global-batch 8 --micro-batch 1,2,4,8 --optimizer adamw-8bit
        run "$m.seq1024-ga3" --model "$m" --seq 1024 --grad-accum 3 --micro-batch 2 --every-n off,1,2,5 --offload on
        run "$m.budget" --model "$m" --gpu rtx-4090 --precision bf16 --budget 20GiB --margin 0
    done
    # PEFT: LoRA (targets, rank, modules_to_save) and QLoRA (nf4 / fp4 / int8) on every model
    # (MoE and GPT-2 refusals are part of what is compared)
    for m in $models; do
        run "$m.lora" --model "$m" --method lora --micro-batch 1,2
        run "$m.lora-qv" --model "$m" --method lora --lora-rank 64 --lora-targets q_proj,v_proj \
            --modules-to-save lm_head --precision bf16
        for q in nf4 fp4 int8; do
            run "$m.qlora-$q" --model "$m" --method qlora --quant "$q" --grad-accum 2 --micro-batch 1,2
        done
        run "$m.cpu" --model "$m" --gpu "$here/tests/data/devices/cpu-exact.json" --seq 256 --precision fp32
    done
    # several GPUs: every mode x 2, 4, 8, 16 GPUs (16 as two nodes of 8)
    # DeepSpeed's CPU offload of both, as the Trainer takes it; named relative to OUT_DIR (the
    # plans record the name) and not *.json (not a plan)
    local ds_offload=zero3-offload.ds_config
    printf '%s\n' '{"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},' \
        '"offload_param": {"device": "cpu"}}, "optimizer": {"type": "AdamW", "params": {"lr": "auto"}},' \
        '"bf16": {"enabled": "auto"}, "train_micro_batch_size_per_gpu": "auto"}' > "$out/$ds_offload"
    for m in $models; do
        for g in 2 4 8 16; do
            if [ "$g" -eq 16 ]; then lay=(--gpus 8 --nodes 2); else lay=(--gpus "$g"); fi
            for mode in ddp fsdp zero1 zero2 zero3; do
                run "$m.$mode-$g" --model "$m" "${lay[@]}" --parallel "$mode" --seq 2048 --micro-batch 1,2 \
                    --every-n off,1,2
                run "$m.$mode-$g-fp32" --model "$m" "${lay[@]}" --parallel "$mode" --seq 1024 --precision fp32 \
                    --every-n off,1
            done
        done
        # every mode under gradient accumulation (which micro-step communicates, FSDP2's
        # reduce-scatter), LoRA / QLoRA per rank, FSDP2's CPU offload, ZeRO-3's from a ds_config
        for mode in ddp fsdp zero1 zero2 zero3; do
            run "$m.$mode-4-ga3" --model "$m" --gpus 4 --parallel "$mode" --seq 1024 --micro-batch 1,2 \
                --every-n off,1,2 --grad-accum 3
            run "$m.$mode-4-lora" --model "$m" --gpus 4 --parallel "$mode" --method lora --seq 1024 \
                --micro-batch 1,2 --grad-accum 2
            run "$m.$mode-4-qlora-nf4" --model "$m" --gpus 4 --parallel "$mode" --method qlora --quant nf4 \
                --seq 1024 --micro-batch 1,2
        done
        run "$m.fsdp-offload-4" --model "$m" --gpus 4 --parallel fsdp --fsdp-offload on --seq 1024 \
            --micro-batch 1,2 --every-n off,1 --grad-accum 2
        run "$m.zero3-offload-4" --model "$m" --gpus 4 --parallel zero3 --deepspeed "$ds_offload" --seq 1024 \
            --micro-batch 1,2 --every-n off,1 --grad-accum 2
        # the modes compared in one table (no JSON plan for a list of modes)
        (cd "$out" && GCKPT_DATA_DIR="$here" "$plan" --model "$m" --gpus 4 --parallel ddp,fsdp,zero1,zero2,zero3 \
            --seq 2048 > "$m.compare4.txt" 2> "$m.compare4.err") || true
        n=$((n + 1))
    done
    for m in gpt2 llama-3.2-1b qwen3-8b; do
        (cd "$out" && GCKPT_DATA_DIR="$here" "$plan" --model "$m" --micro-batch 1,2 -q \
            --plot "$m.plot.svg" -o "$m.plot.json" > /dev/null 2>&1) || true
        rm -f "$out/$m.plot.svg"
        n=$((n + 1))
    done
    echo "compare_plans.sh: $n cases written to $out"
}

normalise() { # the generator's version is allowed to differ
    sed -E 's/("version":[[:space:]]*)"[^"]*"/\1"-"/' "$1"
}

cmp_dirs() {
    local old=$1 new=$2 diff=0 same=0
    for f in "$old"/*; do
        local b; b=$(basename "$f")
        if [ ! -e "$new/$b" ]; then echo "missing in $new: $b"; diff=$((diff + 1)); continue; fi
        if cmp -s <(normalise "$f") <(normalise "$new/$b"); then same=$((same + 1))
        else echo "differs: $b"; diff=$((diff + 1)); fi
    done
    for f in "$new"/*; do
        [ -e "$old/$(basename "$f")" ] || { echo "only in $new: $(basename "$f")"; diff=$((diff + 1)); }
    done
    echo "compare_plans.sh: $same files equal, $diff different"
    [ "$diff" -eq 0 ]
}

case "${1:-}" in
    gen) [ $# -eq 3 ] || { echo "usage: $0 gen BUILD_DIR OUT_DIR" >&2; exit 2; }; gen "$2" "$3" ;;
    cmp) [ $# -eq 3 ] || { echo "usage: $0 cmp OLD_DIR NEW_DIR" >&2; exit 2; }; cmp_dirs "$2" "$3" ;;
    *) echo "usage: $0 gen BUILD_DIR OUT_DIR | cmp OLD_DIR NEW_DIR" >&2; exit 2 ;;
esac
