#!/usr/bin/env python3
"""Run gckpt-plan's --checkpoint-towers snippet with the Trainer, one step, on CPU (FINDINGS
R-VLM-71).

For the tiny LLaVA of vlm_cases.py (saved in fp32) and --checkpoint-towers text / vision at
every_n 2, this takes the printed lines from `import torch` to `trainer = Trainer(...)`,
fills in only the `...` placeholders (trainer_check.py's fill: the checkpoint, output_dir,
use_cpu=True, max_steps=1, no logging/saving, a dataset) and runs trainer.train(). It
records which GradientCheckpointingLayers (module order, by tower) are checkpointed after
the step, against the plan JSON's, and, as the control, the same snippet with the
TrainingArguments' gradient_checkpointing=False turned True (plus every_n_layers 2): the
Trainer's own call then redoes every_n over both towers. Writes tests/data/vlm-trainer-towers.json.

    .venv/bin/python vlm_trainer_towers.py --plan ../../build-nc/gckpt-plan
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
import transformers
from transformers.modeling_layers import GradientCheckpointingLayer

import trainer_check
import vlm_cases

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "..", "tests", "data", "vlm-trainer-towers.json")


class Batches(torch.utils.data.Dataset):
    """llava samples as vlm_cases.make_batch builds them, one per item."""

    def __init__(self, n=4):
        g = torch.Generator().manual_seed(0)
        self.items = []
        while len(self.items) < n:
            ids, labels, px = vlm_cases.make_batch("llava", g)
            for b in range(ids.shape[0]):
                self.items.append({"input_ids": ids[b], "labels": labels[b], "pixel_values": px["pixel_values"][b]})

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def flags(model):
    tower = vlm_cases.VISION["llava"][0].split(".")[-1]
    out = {"vision": [], "text": []}
    idx = {"vision": 0, "text": 0}
    for name, m in model.named_modules():
        if isinstance(m, GradientCheckpointingLayer):
            t = "vision" if tower in name.split(".") else "text"
            if m.gradient_checkpointing:
                out[t].append(idx[t])
            idx[t] += 1
    return out


def run(plan_exe, cfg_path, ckpt, choice, control):
    with tempfile.TemporaryDirectory() as d:
        plan_json = os.path.join(d, "plan.json")
        cmd = [plan_exe, "--model", cfg_path, "--gpu", "h100-sxm-80gb", "--seq", str(vlm_cases.SEQ), "--precision",
               "fp32", "--every-n", "2", "--offload", "off", "--micro-batch", "2", "--checkpoint-towers", choice,
               "-o", plan_json]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        entry = json.load(open(plan_json))["entries"][0]
        snippet = trainer_check.snippet_of(out)
        if control:  # what the Trainer does when its own checkpointing is on
            assert "    gradient_checkpointing=False,\n" in snippet
            snippet = snippet.replace("    gradient_checkpointing=False,\n",
                                      "    gradient_checkpointing=True,\n"
                                      "    gradient_checkpointing_kwargs={\"every_n_layers\": 2},\n")
        env = {"CKPT": ckpt, "OUT": d, "DATASET": Batches()}
        exec(compile(trainer_check.fill(snippet, ckpt, d), choice, "exec"), env)  # noqa: S102
        before = flags(env["model"])
        env["trainer"].train()
        after = flags(env["trainer"].model)
    planned = {"vision": entry["vision_checkpointed_layers"], "text": entry["checkpointed_layers"]}
    return {"checkpoint_towers": choice, "trainer_gradient_checkpointing": control, "planned": planned,
            "before_train": before, "after_train": after, "snippet": None if control else snippet}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--plan", default=os.path.join(HERE, "..", "..", "build-nc", "gckpt-plan"))
    ap.add_argument("-o", default=OUT)
    a = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as d:
        model = vlm_cases.build_model("llava", "sdpa")
        model.save_pretrained(d)
        cfg_path = os.path.join(d, "config.json")
        cases = [run(a.plan, cfg_path, d, c, ctl) for c in ("text", "vision") for ctl in (False, True)]
    doc = {"schema": "gckpt.vlm-trainer-towers/1",
           "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
           "model": "vlm_cases.py llava (3 CLIP blocks, 4 Llama layers), fp32, saved and loaded by the snippet",
           "cases": cases}
    with open(a.o, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    for c in cases:
        print(c["checkpoint_towers"], "Trainer gc" if c["trainer_gradient_checkpointing"] else "per-layer",
              "planned", c["planned"], "after train", c["after_train"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
