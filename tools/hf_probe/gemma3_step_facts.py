"""Gemma 3 (multimodal) step facts (transformers 5.24, torch 2.15, CPU), on the tiny config
of vlm_cases.py's gemma3 fixtures, checked by running the model (FINDINGS R-VLM-13,
R-VLM-14):

  * the masks Gemma3Model.forward hands the text model with token_type_ids: one bool
    [b, 1, s, s] tensor per layer type (full and sliding), materialised at any sequence
    length, and without token_type_ids what create_masks_for_generate gives instead;
  * SigLIP's attention-pooling head (vision_use_head) runs, but its output, the tower's
    pooler_output, is replaced by the projector's: it is freed inside get_image_features;
  * image_outputs keeps last_hidden_state (post_layernorm's output) with the model's outputs;
  * text_config.use_cache (True) fills a DynamicCache in a training forward when only the
    top-level config.use_cache is off, and not under gradient checkpointing;
  * the class AutoModelForImageTextToText builds, and what model.model.vision_tower is.

Usage: .venv/bin/python gemma3_step_facts.py   (make -C tools/hf_probe gemma3-facts)
"""
from __future__ import annotations

import gc
import weakref

import torch
import transformers

import vlm_cases


def main() -> None:
    model = vlm_cases.build_model("gemma3", "sdpa")
    model.train()
    gen = torch.Generator().manual_seed(0)
    ids, labels, px = vlm_cases.make_batch("gemma3", gen)

    seen = {}

    def text_pre_hook(_mod, args, kwargs):
        masks = kwargs.get("attention_mask")
        seen["masks"] = {k: (tuple(v.shape), str(v.dtype)) if torch.is_tensor(v) else repr(v)
                         for k, v in masks.items()} if isinstance(masks, dict) else repr(masks)
        seen["use_cache"] = kwargs.get("use_cache")

    model.model.language_model.register_forward_pre_hook(text_pre_hook, with_kwargs=True)
    head_ref = {}

    def head_hook(_mod, _inp, out):
        head_ref["out"] = weakref.ref(out)

    if getattr(model.model.vision_tower, "head", None) is not None:
        model.model.vision_tower.head.register_forward_hook(head_hook)

    freed_in_features = {}
    orig = model.model.get_image_features

    def features(*a, **k):
        out = orig(*a, **k)
        gc.collect()
        r = head_ref.get("out")
        freed_in_features["head_output_alive"] = None if r is None else r() is not None
        return out

    model.model.get_image_features = features
    out = model(input_ids=ids, labels=labels, **px)
    print("masks with token_type_ids:", seen["masks"])
    print("use_cache passed to the text model:", seen["use_cache"])
    print("pooling head output alive after get_image_features:", freed_in_features.get("head_output_alive"))
    io = out.image_outputs
    print("image_outputs.last_hidden_state:", tuple(io.last_hidden_state.shape), io.last_hidden_state.dtype,
          "pooler_output:", tuple(io.pooler_output.shape), io.pooler_output.dtype)
    print("cache in a training forward (top-level use_cache False):", type(out.cache).__name__)
    del out

    px2 = {k: v for k, v in px.items() if k != "token_type_ids"}
    model(input_ids=ids, labels=labels, **px2)
    print("masks without token_type_ids:", seen["masks"])

    model.gradient_checkpointing_enable({"use_reentrant": False})
    out = model(input_ids=ids, labels=labels, **px)
    print("cache under gradient checkpointing:", type(out.cache).__name__)

    d = dict(vlm_cases.VARIANTS["gemma3"])
    cfg = transformers.AutoConfig.for_model(d.pop("model_type"), **d)
    auto = transformers.AutoModelForImageTextToText.from_config(cfg)
    # a window longer than the sequence: the masks are materialised all the same
    d = dict(vlm_cases.VARIANTS["gemma3"])
    d["text_config"] = dict(d["text_config"], sliding_window=64)
    cfg = transformers.AutoConfig.for_model(d.pop("model_type"), **d)
    cfg._attn_implementation = "sdpa"
    wide = transformers.Gemma3ForConditionalGeneration(cfg)
    wide.model.language_model.register_forward_pre_hook(text_pre_hook, with_kwargs=True)
    wide(input_ids=ids, labels=labels, **px)
    print("masks with token_type_ids, sliding_window 64 > seq", ids.shape[1], ":", seen["masks"])

    print("AutoModelForImageTextToText:", type(auto).__name__, "vision_tower:",
          type(auto.model.vision_tower).__name__,
          "all parameters require grad:", all(p.requires_grad for p in auto.parameters()))


if __name__ == "__main__":
    main()
