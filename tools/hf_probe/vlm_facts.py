"""Vision-language model facts (transformers 5.24, CPU, the meta device): the parameter
count of each real configuration under tests/data/configs/ as transformers instantiates
its <Family>ForConditionalGeneration, split by where the parameters live (the vision
tower, the projector, the text model, the output head; tied weights counted once, as
model.parameters() yields them), and the GradientCheckpointingLayer modules of each tower
in model.modules() order (what every_n_layers counts, FINDINGS R-VLM-1).

The configurations (no Hub cache on this machine; the files as quoted in stored public
sources, keys verbatim):
  qwen2.5-vl-7b.json         Qwen/Qwen2.5-VL-7B-Instruct's config.json (old flat format: the
                             text keys at the top level)
  gemma-3-4b.json            google/gemma-3-4b-it's config.json (two sources agree; the text
                             model's other keys are Gemma3TextConfig's defaults)
  llama-3.2-11b-vision.json  meta-llama/Llama-3.2-11B-Vision's architecture keys (text and
                             vision sections; generation-only keys left out)
  llava-1.5-7b.json          llava-hf/llava-1.5-7b-hf's config.json (text_config names only
                             what differs from LlamaConfig's defaults: vicuna-7b's shape)

Usage: .venv/bin/python vlm_facts.py            # print, and check tests/data/vlm-counts.json
       .venv/bin/python vlm_facts.py --write    # (re)write tests/data/vlm-counts.json
"""
from __future__ import annotations

import json
import os
import sys

import torch
import transformers
from transformers.modeling_layers import GradientCheckpointingLayer

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
CONFIGS = os.path.join(ROOT, "tests", "data", "configs")
OUT = os.path.join(ROOT, "tests", "data", "vlm-counts.json")

# file -> (class, the vision tower's module, the projector's modules)
MODELS = {
    "qwen2.5-vl-7b.json": ("Qwen2_5_VLForConditionalGeneration", "model.visual", ("model.visual.merger",)),
    "gemma-3-4b.json": ("Gemma3ForConditionalGeneration", "model.vision_tower", ("model.multi_modal_projector",)),
    "llama-3.2-11b-vision.json": ("MllamaForConditionalGeneration", "model.vision_model",
                                  ("model.multi_modal_projector",)),
    "llava-1.5-7b.json": ("LlavaForConditionalGeneration", "model.vision_tower", ("model.multi_modal_projector",)),
}


def build(path: str, cls: str):
    d = json.load(open(path))
    for k in ("architectures", "transformers_version", "torch_dtype", "dtype", "_name_or_path"):
        d.pop(k, None)
    conf = transformers.AutoConfig.for_model(d.pop("model_type"), **d)
    with torch.device("meta"):
        return getattr(transformers, cls)(conf)


def facts(name: str) -> dict:
    cls, vision, projector = MODELS[name]
    model = build(os.path.join(CONFIGS, name), cls)
    parts = {"vision_tower": 0, "projector": 0, "text_model": 0, "lm_head": 0}
    for n, p in model.named_parameters():  # tied parameters once (under their first name)
        if any(n.startswith(q + ".") for q in projector):
            parts["projector"] += p.numel()
        elif n.startswith(vision + "."):
            parts["vision_tower"] += p.numel()
        elif n.startswith("lm_head."):
            parts["lm_head"] += p.numel()
        else:
            parts["text_model"] += p.numel()
    names = {m: n for n, m in model.named_modules()}
    gc = [names[m] for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    vis = [n for n in gc if n.startswith(vision + ".")]
    txt = [n for n in gc if not n.startswith(vision + ".")]
    assert gc == vis + txt, "the towers interleave in module order"
    return {"class": cls, "model_type": model.config.model_type,
            "parameters": sum(p.numel() for p in model.parameters()), "by_part": parts,
            "tied_word_embeddings": model.lm_head.weight is model.get_input_embeddings().weight,
            "checkpointing_layers": {"vision": len(vis), "text": len(txt),
                                     "vision_classes": sorted({type(model.get_submodule(n)).__name__ for n in vis}),
                                     "text_classes": sorted({type(model.get_submodule(n)).__name__ for n in txt})}}


def main() -> int:
    got = {"transformers": transformers.__version__, "torch": torch.__version__,
           "models": {name: facts(name) for name in MODELS}}
    for name, f in got["models"].items():
        p = f["by_part"]
        print(f"{name:28s} {f['parameters']:>15,}  vision {p['vision_tower']:>13,}  projector {p['projector']:>11,}  "
              f"text {p['text_model']:>15,}  lm_head {p['lm_head']:>13,}  checkpointing layers "
              f"{f['checkpointing_layers']['vision']} vision + {f['checkpointing_layers']['text']} text")
    if "--write" in sys.argv[1:]:
        with open(OUT, "w") as fh:
            json.dump(got, fh, indent=1)
            fh.write("\n")
        print(f"wrote {os.path.relpath(OUT, ROOT)}")
        return 0
    want = json.load(open(OUT))
    same = want["models"] == got["models"]
    print("tests/data/vlm-counts.json: " + ("equal" if same else "DIFFERS (vlm_facts.py --write after checking why)"))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
