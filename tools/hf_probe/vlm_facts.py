"""Vision-language model facts (transformers 5.24, CPU, the meta device): the parameter
count of each real configuration under tests/data/configs/ as transformers instantiates
its <Family>ForConditionalGeneration, split by where the parameters live (the vision
tower, the projector, the text model, the output head; tied weights counted once, as
model.parameters() yields them), and the GradientCheckpointingLayer modules of each tower
in model.modules() order (what every_n_layers counts, FINDINGS R-VLM-1); and the same
split from closed forms (closed_form: the formulas a planner would use, over the
configuration as transformers resolves it, defaults filled), which must equal it part by
part.

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
sys.path.insert(0, os.path.join(ROOT, "tools"))
from param_count import count_llama_like  # noqa: E402
CONFIGS = os.path.join(ROOT, "tests", "data", "configs")
OUT = os.path.join(ROOT, "tests", "data", "vlm-counts.json")

# file -> (class, the vision tower's module, the projector's modules)
MODELS = {
    "qwen2.5-vl-7b.json": ("Qwen2_5_VLForConditionalGeneration", "model.visual", ("model.visual.merger",)),
    "qwen3-vl-4b.json": ("Qwen3VLForConditionalGeneration", "model.visual",
                         ("model.visual.merger", "model.visual.deepstack_merger_list")),
    "gemma-3-4b.json": ("Gemma3ForConditionalGeneration", "model.vision_tower", ("model.multi_modal_projector",)),
    "llama-3.2-11b-vision.json": ("MllamaForConditionalGeneration", "model.vision_model",
                                  ("model.multi_modal_projector",)),
    "llava-1.5-7b.json": ("LlavaForConditionalGeneration", "model.vision_tower", ("model.multi_modal_projector",)),
}


def resolve(path: str):
    d = json.load(open(path))
    for k in ("architectures", "transformers_version", "torch_dtype", "dtype", "_name_or_path"):
        d.pop(k, None)
    return transformers.AutoConfig.for_model(d.pop("model_type"), **d)


def build(path: str, cls: str):
    conf = resolve(path)
    with torch.device("meta"):
        return getattr(transformers, cls)(conf)


def vit_layer(D: int, I: int, attn_bias: bool = True) -> int:
    """A pre-norm ViT block with LayerNorms: q, k, v, o (biases unless mllama's), two
    LayerNorms, fc1 and fc2 with biases."""
    return 4 * D * D + (4 * D if attn_bias else 0) + 4 * D + (D * I + I) + (I * D + D)


def text_model(t: dict, mt: str) -> tuple[int, int]:
    """(the text model without its head, the head) by param_count's closed form."""
    c = {**t, "model_type": mt, "tie_word_embeddings": False}
    head = t["vocab_size"] * t["hidden_size"]
    return count_llama_like(c) - head, head


def closed_form(name: str) -> dict:
    """The parameters by part from formulas over the resolved configuration."""
    conf = resolve(os.path.join(CONFIGS, name))
    v, t = conf.vision_config.to_dict(), conf.text_config.to_dict()
    mt = conf.model_type
    D, H = v["hidden_size"], t["hidden_size"]
    if mt == "llava":  # CLIP: class token, patch conv (no bias), positions, pre / post LayerNorm
        p, C, n = v["patch_size"], v["num_channels"], (v["image_size"] // v["patch_size"]) ** 2 + 1
        vision = D + C * p * p * D + n * D + 2 * D + v["num_hidden_layers"] * vit_layer(D, v["intermediate_size"]) + 2 * D
        feats = 1 if isinstance(conf.vision_feature_layer, int) else len(conf.vision_feature_layer)
        bias = conf.multimodal_projector_bias
        projector = D * feats * H + (H if bias else 0) + H * H + (H if bias else 0)
        text, head = text_model(t, "llama")
    elif mt == "gemma3":  # SigLIP: patch conv with bias, positions, post LayerNorm, no head
        p, C, n = v["patch_size"], v["num_channels"], (v["image_size"] // v["patch_size"]) ** 2
        vision = C * p * p * D + D + n * D + v["num_hidden_layers"] * vit_layer(D, v["intermediate_size"]) + 2 * D
        projector = D * H + D  # mm_input_projection_weight, mm_soft_emb_norm
        text, head = text_model(t, "gemma3_text")
        head = 0 if conf.tie_word_embeddings else head
    elif mt == "qwen2_5_vl":  # Conv3d patches (no bias), RMSNorm blocks, fused qkv, SwiGLU with biases
        p, C, tp, I = v["patch_size"], v["in_channels"], v["temporal_patch_size"], v["intermediate_size"]
        block = 2 * D + (D * 3 * D + 3 * D) + (D * D + D) + 2 * (D * I + I) + (I * D + D)
        vision = C * tp * p * p * D + v["depth"] * block
        m = D * v["spatial_merge_size"] ** 2
        projector = D + (m * m + m) + (m * v["out_hidden_size"] + v["out_hidden_size"])  # ln_q, mlp
        text, head = text_model(t, "qwen2")
    elif mt == "qwen3_vl":  # Conv3d patches with a bias, learned positions, LayerNorm blocks, GELU MLP
        p, C, tp, I = v["patch_size"], v["in_channels"], v["temporal_patch_size"], v["intermediate_size"]
        block = 4 * D + (D * 3 * D + 3 * D) + (D * D + D) + (D * I + I) + (I * D + D)
        vision = C * tp * p * p * D + D + v["num_position_embeddings"] * D + v["depth"] * block
        m, o = D * v["spatial_merge_size"] ** 2, v["out_hidden_size"]
        mlp = (m * m + m) + (m * o + o)
        projector = 2 * D + mlp + len(v["deepstack_visual_indexes"]) * (2 * m + mlp)  # merger, deepstack mergers
        text, head = text_model(t, "qwen3")
        head = 0 if conf.tie_word_embeddings else head
    elif mt == "mllama":  # tiles: gated positions per tile and aspect ratio; local + gated global layers
        p, C, I = v["patch_size"], v["num_channels"], v["intermediate_size"]
        n, tiles, ar = (v["image_size"] // p) ** 2 + 1, v["max_num_tiles"], len(v["supported_aspect_ratios"]) + 1
        vision = (C * p * p * D + D  # patch conv, class_embedding
                  + n * D + 1 + ar * tiles * n * D  # gated_positional_embedding: embedding, gate, tile_embedding
                  + 2 * (ar * tiles * D + 1)  # pre / post tile positional embeddings and gates
                  + 4 * D  # layernorm_pre, layernorm_post
                  + v["num_hidden_layers"] * vit_layer(D, I, attn_bias=False)
                  + v["num_global_layers"] * (vit_layer(D, I, attn_bias=False) + 2))  # gate_attn, gate_ffn
        projector = v["vision_output_dim"] * H + H
        nh, kv = t["num_attention_heads"], t["num_key_value_heads"]
        hd = H // nh
        attn = 2 * H * nh * hd + 2 * H * kv * hd
        layer = attn + 3 * H * t["intermediate_size"] + 2 * H
        cross = len(t["cross_attention_layers"])
        text = ((t["vocab_size"] + 8) * H + (t["num_hidden_layers"] - cross) * layer
                + cross * (layer + 2 * hd + 2) + H)  # cross layers: q_norm, k_norm, two gates
        head = t["vocab_size"] * H
    else:
        raise ValueError(mt)
    return {"vision_tower": vision, "projector": projector, "text_model": text, "lm_head": head}


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
    closed = closed_form(name)
    return {"class": cls, "model_type": model.config.model_type,
            "parameters": sum(p.numel() for p in model.parameters()), "by_part": parts,
            "closed_form_equal": closed == parts, **({} if closed == parts else {"closed_form": closed}),
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
              f"{f['checkpointing_layers']['vision']} vision + {f['checkpointing_layers']['text']} text; closed form "
              + ("equal" if f["closed_form_equal"] else f"DIFFERS {f['closed_form']}"))
    if "--write" in sys.argv[1:]:
        with open(OUT, "w") as fh:
            json.dump(got, fh, indent=1)
            fh.write("\n")
        print(f"wrote {os.path.relpath(OUT, ROOT)}")
        return 0
    want = json.load(open(OUT))
    same = want["models"] == got["models"] and all(f["closed_form_equal"] for f in got["models"].values())
    print("tests/data/vlm-counts.json: " + ("equal" if same else "DIFFERS (vlm_facts.py --write after checking why)"))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
