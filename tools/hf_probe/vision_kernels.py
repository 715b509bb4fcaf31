#!/usr/bin/env python3
"""The host backend's ViT embedding kernels (executor/host_vision.c) next to transformers'
own CLIPVisionEmbeddings (FINDINGS R-EXEC-5): a tiny llava config's vision tower embeds two
images whose pixels, weights and upstream gradients are drawn from gckpt's counter-based
generator (executor's exec_rng.h gckpt_rng_uniform, ported below bit for bit), fp32 on the
CPU. The loss is sum(embeddings * G) + sum(embeddings[:, 1:] * G_sel) (the CLS dropped as
llava's "default" strategy selects): the fixture holds the embeddings, the selection and the
gradients of the patch weight, the class embedding, the position table and the pixels, which
tests/executor/test_host_vision.c compares with its kernels' (patch conv, class-token cat,
the position add, rows_of) at a relative 1e-6.

  .venv/bin/python vision_kernels.py ../../tests/executor/data/tiny-llava-p4.json \
      ../../tests/executor/data/hf-vision-kernels.json
"""
from __future__ import annotations

import json
import sys

import torch
import transformers
from transformers.models.clip.modeling_clip import CLIPVisionEmbeddings

M64 = (1 << 64) - 1
IMAGES = 2
# the generator's keys of each drawn tensor (the C test uses the same), and their scales
KEYS = dict(pixels=11, weight=12, cls=13, pos=14, g_emb=15, g_sel=16)
SCALE = dict(pixels=1.0, weight=0.5, cls=0.5, pos=0.5, g_emb=1.0, g_sel=1.0)


def mix64(x: int) -> int:
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & M64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & M64
    x ^= x >> 31
    return x


def uniform(key: int, n: int, scale: float) -> torch.Tensor:
    """gckpt_rng_uniform(key, i, scale) for i < n: exact in fp32 (24-bit draws, power-of-two scales)"""
    vals = []
    for i in range(n):
        r = mix64(key ^ mix64((i + 0x9E3779B97F4A7C15) & M64))
        u = (r >> 40) / 16777216.0
        vals.append((2.0 * u - 1.0) * scale)
    return torch.tensor(vals, dtype=torch.float64).to(torch.float32)


def draw(name: str, shape) -> torch.Tensor:
    n = 1
    for s in shape:
        n *= s
    return uniform(KEYS[name], n, SCALE[name]).view(*shape)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        raise SystemExit(__doc__)
    with open(argv[0]) as f:
        cfg = json.load(f)
    config = transformers.AutoConfig.for_model(**cfg).vision_config
    D, C, P, H = config.hidden_size, config.num_channels, config.patch_size, config.image_size
    N = (H // P) ** 2
    emb = CLIPVisionEmbeddings(config).to(torch.float32)
    with torch.no_grad():
        emb.patch_embedding.weight.copy_(draw("weight", (D, C, P, P)))
        emb.class_embedding.copy_(draw("cls", (D,)))
        emb.position_embedding.weight.copy_(draw("pos", (N + 1, D)))
    pixels = draw("pixels", (IMAGES, C, H, H)).requires_grad_(True)
    out = emb(pixels)
    sel = out[:, 1:]
    loss = (out * draw("g_emb", tuple(out.shape))).sum() + (sel * draw("g_sel", tuple(sel.shape))).sum()
    loss.backward()

    def flat(t: torch.Tensor) -> list:
        return [float(v) for v in t.detach().reshape(-1).tolist()]

    fixture = {
        "note": "tools/hf_probe/vision_kernels.py: CLIPVisionEmbeddings, fp32, CPU",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "config": argv[0].rsplit("/", 1)[-1],
        "images": IMAGES,
        "keys": KEYS,
        "scales": SCALE,
        "embeddings": flat(out),
        "selected": flat(sel),
        "grad": {
            "patch_weight": flat(emb.patch_embedding.weight.grad),
            "class_embedding": flat(emb.class_embedding.grad),
            "position_embedding": flat(emb.position_embedding.weight.grad),
            "pixel_values": flat(pixels.grad),
        },
    }
    with open(argv[1], "w") as f:
        json.dump(fixture, f, indent=1)
        f.write("\n")
    print(f"embeddings {tuple(out.shape)}, loss {loss.item():.9g}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
