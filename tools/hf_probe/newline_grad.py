#!/usr/bin/env python3
"""LLaVA-NeXT's image_newline in a training step (FINDINGS R-VLM-80): when its .grad is made
and how long it lives, measured on transformers' own LlavaNextForConditionalGeneration (tiny
config, CPU). Each parameter's post-accumulate-grad hook records the order in which .grad is
written in the first backward; the newline's .grad storage is followed over two micro-steps
(grad_accum 2) and through zero_grad. The batch: two 40x60 images, pixel_values
[images, tiles, 3, 28, 28] with the tile count of transformers' image_size_to_num_patches (the
count LlavaNextModel.get_image_features keeps of each image's tiles; LlavaNextImageProcessor
itself needs torchvision and PIL, which the venv lacks: its output is not run here).

  .venv/bin/python newline_grad.py CONFIG.json
"""
from __future__ import annotations

import contextlib
import json
import sys

import torch
import transformers
from transformers.models.llava_next.modeling_llava_next import image_size_to_num_patches


def main(argv: list[str]) -> int:
    with open(argv[0]) as f:
        cfg = json.load(f)
    config = transformers.AutoConfig.for_model(**cfg)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = transformers.LlavaNextForConditionalGeneration(config).train()
    vc = config.vision_config
    tiles = image_size_to_num_patches((40, 60), config.image_grid_pinpoints, vc.image_size)
    px = torch.rand(2, tiles, vc.num_channels, vc.image_size, vc.image_size) * 2 - 1
    sizes = torch.tensor([[40, 60], [40, 60]])
    print(f"batch: pixel_values {tuple(px.shape)} {px.dtype}, image_sizes {sizes.tolist()}")
    ntok = model.model.get_image_features(px, sizes).pooler_output
    ntok = [t.shape[0] for t in ntok] if isinstance(ntok, (list, tuple)) else None
    print(f"packed rows per image: {ntok}")
    order = []
    for n, p in model.named_parameters():
        p.register_post_accumulate_grad_hook(lambda p, n=n: order.append(n))
    S, n = 32, ntok[0]
    ids = torch.randint(3, config.text_config.vocab_size - 1, (2, S))
    ids[:, 2:2 + n] = config.image_token_id
    labels = ids.masked_fill(ids == config.image_token_id, -100)
    nl = model.model.image_newline
    for prec in ("fp32", "amp-bf16"):
        ctx = torch.autocast("cpu", dtype=torch.bfloat16) if prec == "amp-bf16" else contextlib.nullcontext()
        order.clear()
        ptrs = []
        for micro in range(2):
            with ctx:
                out = model(input_ids=ids, pixel_values=px, image_sizes=sizes, labels=labels)
            out.loss.backward()
            ptrs.append((nl.grad.data_ptr(), nl.grad.dtype, tuple(nl.grad.shape)))
        first = order[: len(order) // 2]
        i = first.index("model.image_newline")
        proj = [k for k, x in enumerate(first) if x.startswith("model.multi_modal_projector.")]
        emb = first.index("model.language_model.embed_tokens.weight")
        text = [k for k, x in enumerate(first) if x.startswith("model.language_model.layers.")]
        print(f"{prec}: .grad written {len(first)} times in the first backward; image_newline's at {i}, "
              f"after every text layer's ({max(text)}), before the projector's ({min(proj)}..{max(proj)}) "
              f"and embed_tokens' ({emb}): {max(text) < i < min(proj) and i < emb}")
        print(f"{prec}: image_newline.grad after micro-steps 1 and 2: {ptrs[0][1]} {ptrs[0][2]}, "
              f"same storage: {ptrs[0][0] == ptrs[1][0]}")
        model.zero_grad(set_to_none=True)
        print(f"{prec}: after zero_grad(set_to_none=True): {nl.grad}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
