#!/usr/bin/env python3
"""LLaVA-NeXT's pack_image_features as a row map (FINDINGS R-VLM-37): transformers' own
LlavaNextModel.pack_image_features (5.24, modeling_llava_next.py) on features whose value is
their row (tile t, patch p: t * patches + p, the default strategy's rows after the class
token is dropped) and a newline vector of -1, for small configs and image sizes. Each packed
row is then the tower row it copies, or -1 for the newline: what gckpt_anyres_pack
(core/vision.c) must give (tests/test_vision.c anyres_pack). With a second path, the values
and gradients too (fp32, torch's autograd): two images of one size per case, random
features, newline and upstream gradient G, loss sum(cat(packed) * G); the packed rows and
the gradients of the features and the newline, for executor/host_anyres.c
(tests/executor/test_host_vision.c anyres_pack_matches_transformers).

  .venv/bin/python anyres_pack.py ../../tests/data/anyres-pack.json \
      ../../tests/executor/data/hf-anyres-pack.json
"""
from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import torch
from transformers.models.llava_next.modeling_llava_next import (
    LlavaNextModel, get_anyres_image_grid_shape, image_size_to_num_patches)

CASES = [  # image_size, patch, pinpoints, [(h, w), ...]
    (28, 14, [[28, 56], [56, 28], [56, 56]], [(40, 60), (28, 28), (60, 40), (100, 10), (10, 100), (57, 31)]),
    (56, 14, [[56, 112], [112, 56], [112, 112], [168, 56], [56, 168]],
     [(40, 60), (60, 40), (100, 300), (300, 100), (33, 101), (200, 200), (7, 9)]),
]


def main(out: str) -> None:
    cases = []
    for image_size, patch, pins, sizes in CASES:
        cfg = SimpleNamespace(vision_config=SimpleNamespace(image_size=image_size, patch_size=patch),
                              image_grid_pinpoints=pins)
        model = SimpleNamespace(config=cfg)
        per = (image_size // patch) ** 2
        for h, w in sizes:
            tiles = image_size_to_num_patches((h, w), pins, image_size)
            feat = torch.arange(tiles * per, dtype=torch.float64).view(tiles, per, 1)
            packed, lens = LlavaNextModel.pack_image_features(model, [feat], torch.tensor([[h, w]]), "default",
                                                               image_newline=torch.tensor([-1.0], dtype=torch.float64))
            rows = [int(x) for x in packed[0][:, 0].tolist()]
            assert len(rows) == int(lens[0])
            cases.append({"image_size": image_size, "patch_size": patch, "image_grid_pinpoints": pins,
                          "h": h, "w": w, "tiles": tiles,
                          "grid": list(get_anyres_image_grid_shape((h, w), pins, image_size)), "rows": rows})
    with open(out, "w") as f:
        json.dump({"source": "transformers " + __import__("transformers").__version__ +
                   " LlavaNextModel.pack_image_features (tools/hf_probe/anyres_pack.py)", "cases": cases}, f)
        f.write("\n")


def grads(out: str) -> None:
    image_size, patch, pins, W = 28, 14, [[28, 56], [56, 28], [56, 56]], 6
    cfg = SimpleNamespace(vision_config=SimpleNamespace(image_size=image_size, patch_size=patch),
                          image_grid_pinpoints=pins)
    model = SimpleNamespace(config=cfg)
    per = (image_size // patch) ** 2
    torch.manual_seed(0)
    cases = []
    for h, w in [(40, 60), (60, 40), (100, 10)]:
        tiles = image_size_to_num_patches((h, w), pins, image_size)
        feat = torch.randn(2, tiles, per, W, dtype=torch.float32, requires_grad=True)
        newline = torch.randn(W, dtype=torch.float32, requires_grad=True)
        packed, _ = LlavaNextModel.pack_image_features(model, [feat[0], feat[1]], torch.tensor([[h, w], [h, w]]),
                                                       "default", image_newline=newline)
        packed = torch.cat(packed, 0)
        g = torch.randn_like(packed)
        (packed * g).sum().backward()
        flat = lambda t: [float(x) for x in t.detach().reshape(-1).tolist()]
        cases.append({"image_size": image_size, "patch_size": patch, "image_grid_pinpoints": pins, "h": h, "w": w,
                      "images": 2, "tiles": tiles, "width": W, "feat": flat(feat), "newline": flat(newline),
                      "g": flat(g), "packed": flat(packed), "feat_grad": flat(feat.grad),
                      "newline_grad": flat(newline.grad)})
    with open(out, "w") as f:
        json.dump({"source": "transformers " + __import__("transformers").__version__ +
                   " LlavaNextModel.pack_image_features, fp32 autograd (tools/hf_probe/anyres_pack.py)",
                   "cases": cases}, f)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
    if len(sys.argv) > 2:
        grads(sys.argv[2])
