"""Llama 3.2 Vision (mllama) step facts (transformers 5.24, torch 2.15, CPU), on the tiny config
of vlm_cases.py's mllama fixtures, checked by running the model (FINDINGS R-VLM-30..33):

  * the GradientCheckpointingLayer modules in model.modules() order (none in the vision
    encoder) and the indices every_n_layers 2 checkpoints;
  * the rows the vision encoders see: [b * images, max_num_tiles * pad8(patches + 1), D], and
    the aspect-ratio attention mask every local and global layer's SDPA reads (one tensor,
    its dtype: the model's, under autocast the bf16 of the matmul that builds it);
  * the projector's input (the final state and the intermediate ones concatenated, padding
    patches dropped) and cross_attention_states' shape;
  * the cross-attention layers' masks: cross_attention_mask [b, 1, s, images * tiles *
    (patches + 1)] and full_text_row_masked_out_mask [b, 1, s, 1], in the model's dtype;
  * the order the backward runs the text layers, the text embedding, the projector and the
    vision encoder in;
  * the bytes autograd saves do not depend on the image's size (every max_num_tiles tile runs,
    padding tiles too), and a second image per sample doubles the cross-attention keys;
  * the processor's tiling (get_optimal_tiled_canvas, run alone: numpy only) for a few image
    sizes at Llama-3.2-11B-Vision's tile 560 and max_image_tiles 4.

Usage: .venv/bin/python mllama_facts.py   (make -C tools/hf_probe mllama-facts)
"""
from __future__ import annotations

import torch
from transformers.models.mllama import modeling_mllama as mm

import vlm_cases


def shape(t):
    return (tuple(t.shape), str(t.dtype).replace("torch.", "")) if torch.is_tensor(t) else repr(t)


def run(precision: str) -> None:
    model = vlm_cases.build_model("mllama", "sdpa")
    if precision == "bf16":
        model.to(torch.bfloat16)
    model.train()
    gen = torch.Generator().manual_seed(0)
    ids, labels, px = vlm_cases.make_batch("mllama", gen)
    if precision == "bf16":
        px["pixel_values"] = px["pixel_values"].bfloat16()
    seen: dict = {}
    vm = model.model.vision_model

    def enc_hook(name):
        def hook(_m, args, kwargs):
            x = args[0] if args else kwargs["hidden_states"]
            seen.setdefault(name, {"hidden_states": shape(x), "attention_mask": shape(kwargs.get("attention_mask"))})
            seen.setdefault("mask_ids", []).append(id(kwargs.get("attention_mask")))
        return hook

    vm.transformer.register_forward_pre_hook(enc_hook("transformer"), with_kwargs=True)
    vm.global_transformer.register_forward_pre_hook(enc_hook("global_transformer"), with_kwargs=True)
    def proj_hook(_m, args):
        seen.setdefault("projector_in", shape(args[0]))

    model.model.multi_modal_projector.register_forward_pre_hook(proj_hook)

    def cross_hook(_m, args, kwargs):
        seen["cross_attention_states"] = shape(kwargs["cross_attention_states"])
        seen["cross_attention_mask"] = shape(kwargs["cross_attention_mask"])
        seen["full_text_row_masked_out_mask"] = shape(kwargs["full_text_row_masked_out_mask"])
        m = kwargs["full_text_row_masked_out_mask"]
        seen["rows_masked_out"] = int((m == 0).sum())

    for layer in model.model.language_model.layers:
        if isinstance(layer, mm.MllamaCrossAttentionDecoderLayer):
            layer.register_forward_pre_hook(cross_hook, with_kwargs=True)
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if precision == "amp-bf16" else torch.enable_grad()
    with ctx:
        model(input_ids=ids, labels=labels, **px)
    print(f"--- {precision}")
    for k, v in seen.items():
        if k == "mask_ids":
            print(f"  encoders read one mask tensor: {len(set(v)) == 1}")
        else:
            print(f"  {k}: {v}")


def batch(h: int, w: int, images: int, gen: torch.Generator):
    """The tiny mllama's inputs with `images` h x w images per sample (each image_size-tiled:
    h / t x w / t real tiles, padded to max_num_tiles), their <|image|> tokens at 2, 3, ...
    (consecutive: every later token attends to all of them, the processor's rule)."""
    v = vlm_cases.VARIANTS["mllama"]["vision_config"]
    t, mt, b, s = v["image_size"], v["max_num_tiles"], vlm_cases.B, vlm_cases.SEQ
    ar = [h // t, w // t]
    nt = ar[0] * ar[1]
    ids = torch.randint(3, vlm_cases.VIDEO, (b, s), generator=gen)
    ids[:, 2:2 + images] = vlm_cases.IMG
    labels = ids.masked_fill(ids >= vlm_cases.VIDEO, -100)
    tiles = [1] * nt + [0] * (mt - nt)
    cam = torch.zeros(b, s, images, mt, dtype=torch.long)
    cam[:, 2:, :, :] = torch.tensor(tiles)
    px = {"pixel_values": torch.randn(b, images, mt, 3, t, t, generator=gen),
          "aspect_ratio_ids": torch.tensor([[v["supported_aspect_ratios"].index(ar) + 1] * images] * b),
          "aspect_ratio_mask": torch.tensor([[tiles] * images] * b), "cross_attention_mask": cam}
    return ids, labels, px


def saved_total(h: int, w: int, images: int) -> tuple[int, tuple]:
    """Bytes autograd saves in one fp32 forward (distinct storages), and the cross-attention
    layer's cross_attention_states shape."""
    model = vlm_cases.build_model("mllama", "sdpa")
    model.train()
    ids, labels, px = batch(h, w, images, torch.Generator().manual_seed(0))
    seen: dict = {}
    shapes: dict = {}

    def pack(x):
        if x.requires_grad and x.is_leaf:  # a parameter
            return x
        key = x.untyped_storage().data_ptr()
        seen[key] = max(seen.get(key, 0), x.untyped_storage().nbytes())
        return x

    def cross_hook(_m, args, kwargs):
        shapes["cross_attention_states"] = tuple(kwargs["cross_attention_states"].shape)

    for layer in model.model.language_model.layers:
        if isinstance(layer, mm.MllamaCrossAttentionDecoderLayer):
            layer.register_forward_pre_hook(cross_hook, with_kwargs=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        model(input_ids=ids, labels=labels, **px)
    return sum(seen.values()), shapes["cross_attention_states"]


def backward_order() -> list[str]:
    """The order the modules' backward runs in one fp32 step (full backward hooks; fired
    when the gradients of a module's inputs are computed)."""
    model = vlm_cases.build_model("mllama", "sdpa")
    model.train()
    ids, labels, px = vlm_cases.make_batch("mllama", torch.Generator().manual_seed(0))
    order: list[str] = []
    mods = {"language_model.embed_tokens": model.model.language_model.embed_tokens,
            "multi_modal_projector": model.model.multi_modal_projector,
            "vision_model.global_transformer.layers.1": model.model.vision_model.global_transformer.layers[-1],
            "vision_model.transformer.layers.0": model.model.vision_model.transformer.layers[0],
            "vision_model.patch_embedding": model.model.vision_model.patch_embedding}
    for i, layer in enumerate(model.model.language_model.layers):
        mods[f"language_model.layers.{i}"] = layer
    for name, mod in mods.items():
        mod.register_full_backward_hook(lambda _m, _gi, _go, name=name: order.append(name))
    model(input_ids=ids, labels=labels, **px).loss.backward()
    return order


def installed_functions():
    import ast  # noqa: PLC0415
    import functools  # noqa: PLC0415
    import importlib.util  # noqa: PLC0415
    import pathlib  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415

    spec = importlib.util.find_spec("transformers.models.mllama")
    src = (pathlib.Path(spec.submodule_search_locations[0]) / "image_processing_mllama.py").read_text()
    names = {"get_all_supported_aspect_ratios", "get_optimal_tiled_canvas"}
    body = [n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef) and n.name in names]
    env = {"np": np, "lru_cache": functools.lru_cache}
    exec(compile(ast.Module(body=body, type_ignores=[]), "image_processing_mllama.py", "exec"), env)  # noqa: S102
    return env["get_optimal_tiled_canvas"]


def main() -> None:
    model = vlm_cases.build_model("mllama", "sdpa")
    layers = vlm_cases.gc_layers(model)
    print("GradientCheckpointingLayer modules:", [(n, type(m).__name__) for n, m in layers])
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    print("vision encoder layers' gradient_checkpointing attribute:",
          [getattr(m, "gradient_checkpointing", None) for m in model.model.vision_model.transformer.layers])
    model.gradient_checkpointing_disable()
    v = model.config.vision_config
    print(f"tiny: image_size {v.image_size} patch {v.patch_size} max_num_tiles {v.max_num_tiles} "
          f"num_patches {(v.image_size // v.patch_size) ** 2 + 1}")
    for p in ("fp32", "bf16", "amp-bf16"):
        run(p)
    print("  backward order:", " > ".join(backward_order()))
    # the image's size changes no saved byte (all max_num_tiles tiles run); a second image per
    # sample doubles the cross-attention keys
    for hw, n in [((28, 56), 1), ((28, 28), 1), ((56, 28), 1), ((28, 56), 2)]:
        total, cross = saved_total(hw[0], hw[1], n)
        print(f"  fp32, {n} image(s) of {hw[0]} x {hw[1]} per sample: {total} bytes saved, "
              f"cross_attention_states {cross}")
    # the processor's canvas choice: its two functions taken from the installed file (the
    # module imports torchvision, not installed here; they need numpy only)
    get_optimal_tiled_canvas = installed_functions()
    for hw in [(560, 560), (480, 640), (640, 480), (1080, 1920), (100, 100), (300, 2000), (2000, 300)]:
        c = get_optimal_tiled_canvas(hw[0], hw[1], 4, 560)
        print(f"  {hw[0]} x {hw[1]} -> canvas {int(c[0])} x {int(c[1])}: {int(c[0]) // 560 * (int(c[1]) // 560)} "
              f"of 4 tiles real")


if __name__ == "__main__":
    main()
