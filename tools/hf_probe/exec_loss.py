#!/usr/bin/env python3
"""gckpt-run's numerics next to transformers' own: the weights, batch, loss and gradients of
one host step that gckpt-exec-dump wrote are loaded into the Hugging Face model of the same
config.json (fp32, eager attention, CPU), which runs its own forward (model(input_ids,
labels=input_ids): its loss shifts the labels as the executor's batch already is) and
backward. Prints both losses, their difference and the largest gradient difference.

  build/gckpt-exec-dump CONFIG.json [--seq N] [--micro-batch N] -o step.json
  .venv/bin/python exec_loss.py CONFIG.json step.json [FIXTURE.json]

FIXTURE.json (optional) receives transformers' loss and each parameter's gradient norm, in
the dump's order (tests/executor/data/hf-*.json: test_exec_host compares gckpt-run's step
of the same seed with them). Exit 1 when a parameter of either side has no counterpart or
a shape differs.
"""
from __future__ import annotations

import json
import sys

import torch
from transformers import AutoConfig, AutoModelForCausalLM
from transformers.pytorch_utils import Conv1D


def hf_name(p: dict, params: dict, prefix: str) -> str:
    """the parameter name in transformers of a gckpt-exec-dump entry: the base model's
    (base_model_prefix: model, transformer for gpt2, gpt_neox) layers (`h` in gpt2) or its
    own parameters; a head outside it (lm_head, gpt_neox's embed_out) by its own name"""
    if p["section"] == "layer":
        blocks = "h" if f"{prefix}.h.0.{p['name']}" in params else "layers"
        return f"{prefix}.{blocks}.{p['layer']}.{p['name']}"
    return p["name"] if p["name"] in params else f"{prefix}.{p['name']}"


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        raise SystemExit(__doc__)
    with open(argv[0]) as f:
        cfg = json.load(f)
    with open(argv[1]) as f:
        dump = json.load(f)
    config = AutoConfig.for_model(**cfg)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).train()
    params = dict(model.named_parameters())
    prefix = model.base_model_prefix
    ours = {hf_name(p, params, prefix): p for p in dump["params"]}
    missing = sorted(set(params) ^ set(ours))
    if missing:
        print("parameters without a counterpart:", ", ".join(missing))
        return 1
    # gpt2's Conv1D holds its weight as [in, out]; gckpt-run's linears are [out, in]
    conv = {f"{n}.weight" for n, mod in model.named_modules() if isinstance(mod, Conv1D)}

    def as_hf(name: str, flat: list) -> torch.Tensor:
        t = params[name]
        v = torch.tensor(flat, dtype=torch.float32)
        return v.view(t.shape[::-1]).t() if name in conv else v.view(t.shape)

    with torch.no_grad():
        for name, t in params.items():
            if len(ours[name]["data"]) != t.numel():
                print(f"{name}: {len(ours[name]['data'])} elements, transformers has {tuple(t.shape)}")
                return 1
            t.copy_(as_hf(name, ours[name]["data"]))
    b, s = dump["micro_batch"], dump["seq"]
    ids = torch.tensor(dump["input_ids"], dtype=torch.long).view(b, s)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    worst, where, big = 0.0, "", 0.0
    for name, t in params.items():
        g = as_hf(name, ours[name]["grad"])
        d = (g - t.grad).abs().max().item()
        big = max(big, t.grad.abs().max().item())
        if d > worst:
            worst, where = d, name
    loss = out.loss.item()
    if len(argv) == 3:
        fixture = {"config": argv[0].rsplit("/", 1)[-1], "micro_batch": b, "seq": s, "precision": "fp32",
                   "attention": "eager", "transformers": __import__("transformers").__version__,
                   "torch": torch.__version__, "loss": loss,
                   "params": [{"name": n, "numel": params[n].numel(), "grad_norm": params[n].grad.double().norm().item()}
                              for n in (hf_name(p, params, prefix) for p in dump["params"])]}
        with open(argv[2], "w") as f:
            json.dump(fixture, f, indent=1)
            f.write("\n")
    print(f"{cfg.get('model_type')} mb {b}, seq {s}, fp32, eager, same weights and batch: loss gckpt-run "
          f"{dump['loss']:.9f} transformers {loss:.9f} (difference {dump['loss'] - loss:+.3e}); largest gradient "
          f"difference {worst:.3g} ({where}), largest gradient {big:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
