#!/usr/bin/env python3
"""gckpt-run's LLaVA or LLaVA-NeXT step next to transformers' own (FINDINGS R-EXEC-5,
R-EXEC-7): the weights, batch (input_ids, labels, pixel_values), loss and gradients of one host
step that gckpt-exec-dump-vlm wrote are loaded into LlavaForConditionalGeneration (or
LlavaNextForConditionalGeneration) of the same config.json (fp32, SDPA, CPU), which runs its
own forward and backward. LLaVA-NeXT's batch is its image processor's shapes: pixel_values
[images, tiles, C, H, W] (the dump's pixels in that order: image-major, the base tile first)
and image_sizes, the dump's image_size for every image. Prints both losses
and, per parameter, the largest gradient difference relative to the largest gradient
element; exits 1 when a dumped parameter has no counterpart, a shape differs, or a relative
difference exceeds --tol (default 1e-5).

  build/gckpt-exec-dump-vlm CONFIG.json [--every-n N] [--offload] [--frozen] -o step.json
  .venv/bin/python exec_vlm.py CONFIG.json step.json [FIXTURE.json] [--tol X]

A step dumped with --precision amp-bf16 runs under CPU autocast with CUDA's fp32 op lists
emulated (probe.py's CudaAutocastLists): bf16 roundings in another order, a looser --tol.

FIXTURE.json (optional) receives transformers' loss and each dumped parameter's gradient
norm in the dump's order (tests/executor/data/hf-tiny-llava*.json: test_exec_vlm compares
gckpt-run's step of the same seed with them). The layers after vision_feature_layer and
post_layernorm keep transformers' initialisation: they reach no loss (R-VLM-9).
"""
from __future__ import annotations

import contextlib
import json
import sys

import torch
import transformers


def hf_name(p: dict, vision: bool) -> str:
    n = p["name"]
    if vision:
        if n == "image_newline":  # LlavaNextModel's own parameter
            return "model.image_newline"
        if p["section"] == "layer":
            return f"model.vision_tower.encoder.layers.{p['layer']}.{n}"
        return f"model.{n}" if n.startswith("multi_modal_projector.") else f"model.vision_tower.{n}"
    if p["section"] == "layer":
        return f"model.language_model.layers.{p['layer']}.{n}"
    return n if n == "lm_head.weight" else f"model.language_model.{n}"


def main(argv: list[str]) -> int:
    tol = 1e-5
    if "--tol" in argv:
        i = argv.index("--tol")
        tol = float(argv[i + 1])
        argv = argv[:i] + argv[i + 2:]
    if len(argv) not in (2, 3):
        raise SystemExit(__doc__)
    with open(argv[0]) as f:
        cfg = json.load(f)
    with open(argv[1]) as f:
        dump = json.load(f)
    config = transformers.AutoConfig.for_model(**cfg)
    config._attn_implementation = "sdpa"
    config.text_config._attn_implementation = "sdpa"
    config.vision_config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    next_ = cfg["model_type"] == "llava_next"
    cls = transformers.LlavaNextForConditionalGeneration if next_ else transformers.LlavaForConditionalGeneration
    model = cls(config).to(torch.float32).train()
    model.config.use_cache = False
    params = dict(model.named_parameters())
    ours = [(hf_name(p, False), p) for p in dump["text_params"]] + [(hf_name(p, True), p) for p in dump["vision_params"]]
    bad = [n for n, _ in ours if n not in params]
    if bad:
        print("parameters without a counterpart:", ", ".join(bad))
        return 1
    with torch.no_grad():
        for n, p in ours:
            t = params[n]
            v = torch.tensor(p["data"], dtype=torch.float32)
            if v.numel() != t.numel():
                print(f"{n}: {v.numel()} elements, transformers' {tuple(t.shape)}")
                return 1
            t.copy_(v.view(t.shape))
    if not dump["tower_trained"]:
        model.model.vision_tower.requires_grad_(False)
    B, S = int(dump["micro_batch"]), int(dump["seq"])
    ids = torch.tensor(dump["input_ids"], dtype=torch.long).view(B, S)
    img = config.image_token_id
    labels = ids.masked_fill(ids == img, -100)  # the executor's labels are these, shifted
    vc = config.vision_config
    px = torch.tensor(dump["pixel_values"], dtype=torch.float32).view(-1, vc.num_channels, vc.image_size, vc.image_size)
    extra = {}
    if next_:
        tiles = int(dump["tiles"])
        px = px.view(-1, tiles, vc.num_channels, vc.image_size, vc.image_size)
        extra["image_sizes"] = torch.tensor([dump["image_size"]] * px.shape[0], dtype=torch.long)
    if dump.get("every_n"):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    # amp-bf16: CPU autocast with CUDA's fp32 lists emulated (probe.py's CudaAutocastLists), as the
    # executor runs the CUDA recipe; bf16 rounding differs in order: compare with --tol 1e-2
    amp = dump.get("precision") == "amp-bf16"
    ctx = contextlib.ExitStack()
    if amp:
        from probe import CudaAutocastLists
        ctx.enter_context(torch.autocast("cpu", dtype=torch.bfloat16))
        ctx.enter_context(CudaAutocastLists())
    with ctx:
        out = model(input_ids=ids, pixel_values=px, labels=labels, **extra)
        out.loss.backward()
    print(f"loss: gckpt-run {dump['loss']:.9g}  transformers {out.loss.item():.9g}  "
          f"relative difference {abs(dump['loss'] - out.loss.item()) / abs(out.loss.item()):.3g}")
    worst, where, fixture, rows = 0.0, "", [], []
    # a key projection's bias gets no gradient (softmax is invariant to a constant per query):
    # both sides hold rounding noise there, compared absolutely
    def zero_bias(n: str, scale: float) -> bool:
        return n.endswith("k_proj.bias") and scale < 1e-6
    for n, p in ours:
        g = params[n].grad
        if "grad" not in p:
            if g is not None and g.abs().max() > 0:
                print(f"{n}: transformers has a gradient, gckpt-run none")
                return 1
            continue
        if g is None:
            print(f"{n}: gckpt-run has a gradient, transformers none")
            return 1
        mine = torch.tensor(p["grad"], dtype=torch.float32).view(g.shape)
        scale = g.abs().max().item()
        rel = (mine - g).abs().max().item() / (scale if scale > 0 else 1.0)
        rows.append((rel, n, scale))
        if rel > worst and not zero_bias(n, scale):
            worst, where = rel, n
        fixture.append({"name": n, "numel": g.numel(), "grad_norm": g.norm().item()})
    for rel, n, scale in sorted(rows, reverse=True)[:6]:
        print(f"  {rel:.3g}  {n}  (max |grad| {scale:.3g})")
    print(f"gradients: {len(fixture)} tensors, worst relative difference {worst:.3g} ({where})")
    if len(argv) == 3:
        with open(argv[2], "w") as f:
            json.dump({"transformers": transformers.__version__, "torch": torch.__version__,
                       "note": f"tools/hf_probe/exec_vlm.py: {cls.__name__}, fp32, SDPA, CPU",
                       "loss": out.loss.item(), "params": fixture}, f, indent=1)
            f.write("\n")
    return 0 if worst <= tol and abs(dump["loss"] - out.loss.item()) <= tol * abs(out.loss.item()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
