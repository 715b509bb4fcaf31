#!/usr/bin/env python3
"""Run the Trainer lines gckpt-plan prints, for one step, on CPU.

For a tiny Llama (tests/data/trainer/tiny-llama.json, saved in bf16 as published
checkpoints are, so that dtype="auto" would load bf16) and each case below, this asks
gckpt-plan for its recommendation, takes the printed lines from `import torch` to
`trainer = Trainer(...)`, fills in only the `...` placeholders (the checkpoint path; the
output directory, use_cpu=True, max_steps=1 and logging/saving off; a dataset) and
executes them. It records what the Trainer really built: the model's dtype, which
layers were checkpointed, and every optimizer state tensor per parameter (dtype, elements);
for the LoRA / QLoRA cases (--peft-out) also every parameter with its dtype, elements and
whether it trains.
tests/test_trainer_fixtures.c compares these with the plan.

    make -C tools/hf_probe trainer-fixtures     (after building gckpt-plan)
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import torch
import transformers
from transformers import AutoModelForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = os.path.join(HERE, "..", "..", "tests", "data", "trainer", "tiny-llama.json")
SEQ = 32

# name, gckpt-plan arguments, CPU adaptations (said in the fixture)
CASES = [
    ("amp-bf16-adamw-n2", ["--precision", "amp-bf16", "--optimizer", "adamw", "--every-n", "2"], []),
    ("bf16-adamw-n1", ["--precision", "bf16", "--optimizer", "adamw", "--every-n", "1"], []),
    ("fp32-adamw-foreach-off", ["--precision", "fp32", "--optimizer", "adamw-foreach", "--every-n", "off"], []),
    ("amp-bf16-adamw-8bit-n3", ["--precision", "amp-bf16", "--optimizer", "adamw-8bit", "--every-n", "3"], []),
    ("amp-bf16-sgd-n2", ["--precision", "amp-bf16", "--optimizer", "sgd", "--every-n", "2"], []),
]
# LoRA / QLoRA (issue 12): the printed peft lines (LoraConfig, get_peft_model; QLoRA's
# BitsAndBytesConfig and prepare_model_for_kbit_training) run the same way; the fixtures
# also record every parameter (name, layer, dtype, elements, trainable).
PEFT_CASES = [
    ("lora-bf16-adamw-n2", ["--method", "lora", "--lora-rank", "8", "--precision", "bf16", "--optimizer", "adamw",
                            "--every-n", "2"], []),
    ("qlora-nf4-amp-bf16-n1-mts", ["--method", "qlora", "--lora-rank", "8", "--modules-to-save", "lm_head",
                                   "--precision", "amp-bf16", "--optimizer", "adamw", "--every-n", "1"], []),
    ("qlora-int8-amp-bf16-n3-qv", ["--method", "qlora", "--quant", "int8", "--lora-rank", "8",
                                   "--lora-targets", "q_proj,v_proj", "--precision", "amp-bf16", "--optimizer", "adamw",
                                   "--every-n", "3"], []),
]
# the later families with their own module names (FINDINGS R-PEFT-21): Phi-3's fused
# projections by name, GPT-NeoX's QLoRA with its input embedding (embed_in) copied; the
# tiny configurations of the executor's tests (the fixture records which: "model")
FAMILY_PEFT_CASES = [
    ("phi3-lora-bf16-n2-qkv-o", "tests/executor/data/tiny-phi3.json",
     ["--method", "lora", "--lora-rank", "8", "--lora-targets", "qkv_proj,o_proj", "--precision", "bf16",
      "--optimizer", "adamw", "--every-n", "2"], []),
    ("gpt_neox-qlora-nf4-amp-bf16-n1-mts", "tests/executor/data/tiny-gpt-neox.json",
     ["--method", "qlora", "--lora-rank", "8", "--modules-to-save", "embed_in", "--precision", "amp-bf16",
      "--optimizer", "adamw", "--every-n", "1"], []),
]
# adamw_torch_fused on CPU: torch's fused AdamW has a CPU kernel, so nothing is adapted.


def plain_name(name):
    """A peft parameter's name as the base model names it: base_model.model. and the
    adapter name .default go, a wrapped linear's base_layer / original_module is the linear."""
    if name.startswith("base_model.model."):
        name = name[len("base_model.model."):]
    for part in (".default.", ".base_layer.", ".original_module."):
        name = name.replace(part, ".")
    return name


def snippet_of(stdout):
    lines = stdout.splitlines()
    start = lines.index("import torch")
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("trainer = Trainer("))
    return "\n".join(lines[start:end + 1]) + "\n"


def fill(snippet, ckpt, out_dir):
    code = snippet.replace("from_pretrained(...,", "from_pretrained(CKPT,", 1)
    code = code.replace("TrainingArguments(\n    ...,\n",
                        "TrainingArguments(\n    output_dir=OUT, use_cpu=True, max_steps=1, report_to=\"none\",\n"
                        "    save_strategy=\"no\", logging_strategy=\"no\", learning_rate=1e-3,\n", 1)
    code = re.sub(r", \.\.\.\)\n$", ", train_dataset=DATASET)\n", code)
    assert "..." not in code, code
    return code


class Tokens(torch.utils.data.Dataset):
    def __init__(self, vocab, n=8):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, SEQ), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i].clone()}


def run_case(plan_exe, name, args, adapt, ckpt, vocab, config=CONFIG):
    cmd = [plan_exe, "--model", config, "--gpu", "h100-sxm-80gb", "--seq", str(SEQ), "--offload", "off"] + args
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    snippet = snippet_of(out)
    with tempfile.TemporaryDirectory() as out_dir:
        env = {"CKPT": ckpt, "OUT": out_dir, "DATASET": Tokens(vocab)}
        exec(compile(fill(snippet, ckpt, out_dir), name, "exec"), env)
        trainer = env["trainer"]
        trainer.train()
    model, opt = trainer.model, trainer.optimizer
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    blocks = (getattr(base, "gpt_neox", None) or base.model).layers
    layers = [i for i, l in enumerate(blocks) if getattr(l, "gradient_checkpointing", False)]
    inner = getattr(opt, "optimizer", opt)  # accelerate wraps it
    states = {}
    params = []
    for pname, p in model.named_parameters():
        st = inner.state.get(p, {})
        if p.requires_grad or not hasattr(model, "get_base_model"):
            states[plain_name(pname)] = {k: {"dtype": str(v.dtype).replace("torch.", ""), "numel": v.numel()}
                                         for k, v in sorted(st.items()) if torch.is_tensor(v)}
        params.append({"name": plain_name(pname), "dtype": str(p.dtype).replace("torch.", ""), "numel": p.numel(),
                       "trainable": p.requires_grad})
    fx_peft = {"parameters": params} if hasattr(model, "get_base_model") else {}
    return fx_peft | {
        "case": name,
        "gckpt_plan_args": ["--seq", str(SEQ), "--offload", "off"] + args,
        "snippet": snippet,
        "cpu_adaptations": adapt or ["none: only the ... placeholders were filled (checkpoint, output_dir, use_cpu=True, "
                                     "max_steps=1, no logging/saving, train_dataset)"],
        "model_dtype": str(model.dtype).replace("torch.", ""),
        "param_dtypes": sorted({str(p.dtype).replace("torch.", "") for p in model.parameters()}),
        "checkpointed_layers": layers,
        "optimizer_class": f"{type(inner).__module__}.{type(inner).__name__}",
        "optimizer_states": states,
        "stack": {"torch": torch.__version__, "transformers": transformers.__version__,
                  "bitsandbytes": __import__("bitsandbytes").__version__},
    }


def save_tiny(path, ckpt):
    """A tiny model of the config at path (repository-relative), saved in bf16 as published
    checkpoints are; returns its vocabulary size."""
    with open(os.path.join(HERE, "..", "..", path)) as f:
        raw = json.load(f)
    mt = raw.pop("model_type")
    raw.setdefault("pad_token_id", 0)  # Phi3Config's default 32000 is outside a tiny vocabulary
    cfg = transformers.AutoConfig.for_model(mt, **{k: v for k, v in raw.items() if k != "architectures"})
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16).save_pretrained(ckpt)
    return raw["vocab_size"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--plan", required=True, help="the gckpt-plan binary")
    ap.add_argument("--out", required=True)
    ap.add_argument("--peft-out", required=True, help="where the LoRA / QLoRA cases go")
    ap.add_argument("--filter", default="")
    a = ap.parse_args()
    os.environ.setdefault("GCKPT_DATA_DIR", os.path.join(HERE, "..", ".."))
    torch.manual_seed(0)
    with open(CONFIG) as f:
        raw = json.load(f)
    cfg = transformers.LlamaConfig(**{k: v for k, v in raw.items() if k not in ("architectures", "model_type")})
    with tempfile.TemporaryDirectory() as ckpt:
        AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16).save_pretrained(ckpt)
        for name, args, adapt in CASES + PEFT_CASES:
            if a.filter and a.filter not in name:
                continue
            fx = run_case(a.plan, name, args, adapt, ckpt, raw["vocab_size"])
            out = a.out if (name, args, adapt) in CASES else a.peft_out
            with open(os.path.join(out, name + ".json"), "w") as f:
                json.dump(fx, f, indent=1)
                f.write("\n")
            print(name, fx["model_dtype"], fx["checkpointed_layers"], fx["optimizer_class"], file=sys.stderr)
    for name, model, args, adapt in FAMILY_PEFT_CASES:
        if a.filter and a.filter not in name:
            continue
        with tempfile.TemporaryDirectory() as ckpt:
            vocab = save_tiny(model, ckpt)
            fx = {"model": model} | run_case(a.plan, name, args, adapt, ckpt, vocab,
                                             os.path.join(HERE, "..", "..", model))
        with open(os.path.join(a.peft_out, name + ".json"), "w") as f:
            json.dump(fx, f, indent=1)
            f.write("\n")
        print(name, fx["model_dtype"], fx["checkpointed_layers"], fx["optimizer_class"], file=sys.stderr)


if __name__ == "__main__":
    main()
