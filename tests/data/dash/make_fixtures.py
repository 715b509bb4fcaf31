"""Writes the callback reports of tests/data/dash (tests/dash/dash_test.py reads them): real
CPU Trainer runs of the tiny Llama (tests/data/trainer/tiny-llama.json) with
gckpt.TrainerCallback, against plans for the exact-bytes CPU profile. Run from this folder,
after building the package in place (cmake -S . -B build -DCMAKE_CUDA_COMPILER= &&
cmake --build build -j2):

    cd tests/data/dash
    PYTHONPATH=../../../build/python DS_ACCELERATOR=cpu ../../../tools/hf_probe/.venv/bin/python make_fixtures.py

  callback-plan.json           every_n off,1,2, micro-batch 2 x grad_accum 2, seq 32, fp32, fused AdamW
  callback.jsonl               every_n_layers=1, fused AdamW, 4 steps: the plan's run (entry 1)
  callback-warn.jsonl          every_n_layers=1 with optim="adamw_torch" (foreach): one
                               PlanMismatchWarning (optimizer), 4 steps
  callback-ddp-plan.json       the same for 2 ranks (DDP), every_n 1
  callback-ddp.jsonl, callback-ddp.rank1.jsonl
                               torchrun --nproc_per_node 2 (DDP over gloo): one report per rank

Under torchrun (RANK set) the script is one rank of the DDP run.
"""
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
CONFIG = "../trainer/tiny-llama.json"
PLAN_EXE = os.environ.get("GCKPT_PLAN") or os.path.join(ROOT, "build", "gckpt-plan")
STEPS = 4


def train(plan, report, optim="adamw_torch_fused"):
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, Trainer, TrainingArguments

    import gckpt

    transformers.logging.set_verbosity_error()
    cfg = json.load(open(CONFIG))
    config = AutoConfig.for_model(**{k: v for k, v in cfg.items() if k != "architectures"})
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=torch.float32)
    ids = torch.randint(3, config.vocab_size, (STEPS * 2 * 2 * 2, 32), generator=torch.Generator().manual_seed(0))
    data = [{"input_ids": x, "labels": x.clone()} for x in ids]
    args = TrainingArguments(
        output_dir=os.path.join(os.environ.get("TMPDIR", "/tmp"), "gckpt-dash-fixture-out"), use_cpu=True,
        max_steps=STEPS, logging_steps=1, report_to="none", save_strategy="no", disable_tqdm=True,
        per_device_train_batch_size=2, gradient_accumulation_steps=2, optim=optim,
        gradient_checkpointing=True, gradient_checkpointing_kwargs={"every_n_layers": 1, "offload": False})
    Trainer(model=model, args=args, train_dataset=data,
            callbacks=[gckpt.TrainerCallback(plan, report=report)]).train()


def plan(out, every_n, *extra):
    subprocess.run([PLAN_EXE, "--model", CONFIG, "--gpu", "../devices/cpu-exact.json", "--target", "cpu", "--seq", "32",
                    "--precision", "fp32", "--optimizer", "adamw", "--attention", "sdpa", "--micro-batch", "2",
                    "--grad-accum", "2", "--every-n", every_n, "--offload", "off", "-q", "-o", out] + list(extra),
                   check=True)


def main():
    os.chdir(HERE)
    if "RANK" in os.environ:  # one rank of the DDP run
        train("callback-ddp-plan.json", "callback-ddp.jsonl")
        return
    plan("callback-plan.json", "off,1,2")
    train("callback-plan.json", "callback.jsonl")
    train("callback-plan.json", "callback-warn.jsonl", optim="adamw_torch")
    # a plan for 2 ranks times its collectives with a bus bandwidth (timing only)
    dev = json.load(open("../devices/cpu-exact.json"))
    for k in ("intra_node_bus_bytes_per_s", "inter_node_bus_bytes_per_s"):
        dev[k] = 10_000_000_000
        dev["sources"][k] = "estimate: a test value, timing only"
    bus = os.path.join(os.environ.get("TMPDIR", "/tmp"), "gckpt-cpu-exact-bus.json")
    json.dump(dev, open(bus, "w"))
    subprocess.run([PLAN_EXE, "--model", CONFIG, "--gpu", bus, "--target", "cpu", "--seq", "32", "--precision", "fp32",
                    "--optimizer", "adamw", "--attention", "sdpa", "--micro-batch", "2", "--grad-accum", "2",
                    "--every-n", "1", "--offload", "off", "--gpus", "2", "--parallel", "ddp", "-q", "-o",
                    "callback-ddp-plan.json"], check=True)
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    subprocess.run([torchrun, "--nproc_per_node", "2", os.path.abspath(__file__)], check=True)
    shutil.rmtree(os.path.join(os.environ.get("TMPDIR", "/tmp"), "gckpt-dash-fixture-out"), ignore_errors=True)


if __name__ == "__main__":
    main()
