"""The vision-language fixture set (tests/data/hf-vlm/, probe.py --set vlm; measured, not
planned yet): tiny configurations of the VLM families transformers 5.24 trains as
<Family>ForConditionalGeneration, built with from_config, fed random pixels in the shapes
their processors produce and a sequence whose image placeholders the model replaces by
the projected image features (FINDINGS R-VLM-*).

  llava        CLIP vision tower (3 blocks, vision_feature_layer -2, the CLS token dropped:
               (56/14)^2 = 16 tokens per 56x56 image), a two-layer GELU projector, Llama text
  llava_next   the same tower over anyres tiles: a 40x60 image is the 28x28 base tile plus
               the 2x2 tiles of the 56x56 pinpoint, 14 tokens once unpadded (with newlines)
  qwen2_5_vl   Qwen2.5-VL's ViT (3 blocks, windowed attention but block 2 full, 2D rotary,
               Conv3d patches of 2x14x14 over a doubled frame), the 2x2 patch merger,
               Qwen2 text with M-RoPE: a 56x84 image is a 4x6 patch grid, 6 tokens
  qwen3_vl     Qwen3-VL's ViT (learned position embedding interpolated to the grid, deepstack
               mergers feeding text layers), Qwen3 text with interleaved M-RoPE
  gemma3       SigLIP vision tower, average-pooled to mm_tokens_per_image tokens, RMS-normed
               projector, Gemma 3 text with sliding / full layers (bidirectional attention
               inside an image through token_type_ids)
  mllama       Llama 3.2 Vision: tiled vision encoder (3 local + 2 gated global layers, not
               GradientCheckpointingLayer), a 28x56 image as 2 tiles, one <|image|> token,
               text layer 1 a cross-attention layer over the tiles' features

Three vision blocks before four text layers: every_n_layers counts both towers in
model.modules() order (R-VLM-1), so every_n 2 checkpoints vision blocks 0 and 2 and text
layers 1 and 3, every_n 3 vision block 0 and text layers 0 and 3 (mllama: no vision
block counts, text layers 0 and 2, and 0 and 3).

Grid per variant: fp32 / bf16 / amp-bf16 (CUDA's autocast lists, emulated), sdpa, every_n
off / 1 / 1+offload / 2 / 2+offload / 3 / 3+offload, the vision tower trained or frozen
(requires_grad False on the vision encoder; the projector trains), b2 with one image per
sample, gradient accumulation 2; and llava, qwen2_5_vl and mllama with two images per sample
(sequence 48: the placeholder runs one after the other; mllama's <|image|> tokens at 2 and 6,
each image's cross-attention rows from its token to the next one's) at every_n off / 1 / 2 /
2+offload, the vision tower trained.
"""
from __future__ import annotations

import argparse
import collections

import torch
import transformers
from transformers.modeling_layers import GradientCheckpointingLayer

VOCAB = 211
IMG, VSTART, VEND, VIDEO = VOCAB - 1, VOCAB - 2, VOCAB - 3, VOCAB - 4  # special ids, out of the text range
TEXT = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=96, max_position_embeddings=256, attention_dropout=0.0, bos_token_id=1,
            eos_token_id=2, pad_token_id=0)
SEQ = 32  # text + image tokens per sample (one image)
SEQ_MULTI = 48  # with two images per sample (MULTI_IMAGE)
# two images per sample: the placeholder runs one after the other, the vision tower over
# both (Qwen: one grid row per image, their patches concatenated)
MULTI_IMAGE = ("llava", "qwen2_5_vl", "mllama")
CKPT_MULTI = [(0, False), (1, False), (2, False), (2, True)]


def seq_len(images: int) -> int:
    return SEQ if images == 1 else SEQ_MULTI

VARIANTS: dict[str, dict] = {
    "llava": dict(
        model_type="llava", image_token_id=IMG, vision_feature_layer=-2, vision_feature_select_strategy="default",
        projector_hidden_act="gelu", tie_word_embeddings=False,
        vision_config=dict(model_type="clip_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                           num_attention_heads=4, image_size=56, patch_size=14, projection_dim=32,
                           attention_dropout=0.0),
        text_config=dict(model_type="llama", head_dim=16, **TEXT)),
    # anyres: a 28x28 base tile plus the tiles of the best of the pinpoints (H x W)
    "llava_next": dict(
        model_type="llava_next", image_token_id=IMG, vision_feature_layer=-2,
        vision_feature_select_strategy="default", projector_hidden_act="gelu", tie_word_embeddings=False,
        image_grid_pinpoints=[[28, 56], [56, 28], [56, 56]],
        vision_config=dict(model_type="clip_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                           num_attention_heads=4, image_size=28, patch_size=14, projection_dim=32,
                           attention_dropout=0.0),
        text_config=dict(model_type="llama", head_dim=16, **TEXT)),
    "qwen2_5_vl": dict(
        model_type="qwen2_5_vl", image_token_id=IMG, video_token_id=VIDEO, vision_start_token_id=VSTART,
        vision_end_token_id=VEND, tie_word_embeddings=False,
        vision_config=dict(depth=3, hidden_size=32, intermediate_size=64, num_heads=4, out_hidden_size=64,
                           patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=56,
                           fullatt_block_indexes=[2]),
        text_config=dict(rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [2, 3, 3]},
                         **TEXT)),
    "qwen3_vl": dict(
        model_type="qwen3_vl", image_token_id=IMG, video_token_id=VIDEO, vision_start_token_id=VSTART,
        vision_end_token_id=VEND, tie_word_embeddings=False,
        vision_config=dict(depth=3, hidden_size=32, intermediate_size=64, num_heads=4, out_hidden_size=64,
                           patch_size=16, spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=16,
                           deepstack_visual_indexes=[0, 1]),
        text_config=dict(head_dim=16, rope_parameters={"rope_type": "default", "rope_theta": 5e6,
                                                       "mrope_section": [2, 3, 3], "mrope_interleaved": True},
                         **TEXT)),
    "gemma3": dict(
        model_type="gemma3", image_token_id=IMG, boi_token_index=VSTART, eoi_token_index=VEND, mm_tokens_per_image=4,
        vision_config=dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                           num_attention_heads=4, image_size=56, patch_size=14, attention_dropout=0.0),
        text_config=dict(model_type="gemma3_text", head_dim=16, sliding_window=8, query_pre_attn_scalar=16,
                         layer_types=["sliding_attention", "full_attention"] * 2, **TEXT)),
    # Llama 3.2 Vision: tiles of 28x28 (up to 2), 3 local + 2 gated global vision layers
    # (not GradientCheckpointingLayer: never checkpointed), features of layers 1 and 2
    # concatenated, text layer 1 a gated cross-attention layer over the image's tiles;
    # one <|image|> token per image in the text
    "mllama": dict(
        model_type="mllama", image_token_index=IMG,
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_global_layers=2,
                           attention_heads=4, image_size=28, patch_size=14, max_num_tiles=2,
                           intermediate_layers_indices=[1, 2], vision_output_dim=96,
                           supported_aspect_ratios=[[1, 1], [1, 2], [2, 1]]),
        text_config=dict(model_type="mllama_text_model", cross_attention_layers=[1], rope_theta=500000.0,
                         **{k: v for k, v in TEXT.items() if k != "attention_dropout"})),
}
# (H, W) of the one image per sample, as its processor would deliver it
IMAGE_SIZE = {"llava": (56, 56), "llava_next": (40, 60), "mllama": (28, 56), "qwen2_5_vl": (56, 84), "qwen3_vl": (64, 96), "gemma3": (56, 56)}
MODEL_CLASSES = {"llava": "LlavaForConditionalGeneration", "llava_next": "LlavaNextForConditionalGeneration",
                 "mllama": "MllamaForConditionalGeneration", "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration",
                 "qwen3_vl": "Qwen3VLForConditionalGeneration", "gemma3": "Gemma3ForConditionalGeneration"}
# the vision encoder (frozen in the "frozen" cases) and what of it still trains (the projector)
VISION = {"llava": ("model.vision_tower", ()), "llava_next": ("model.vision_tower", ()),
          "mllama": ("model.vision_model", ()), "qwen2_5_vl": ("model.visual", ("model.visual.merger",)),
          "qwen3_vl": ("model.visual", ("model.visual.merger", "model.visual.deepstack_merger_list")),
          "gemma3": ("model.vision_tower", ())}
PRECISIONS = ["fp32", "bf16", "amp-bf16-cudalists"]
CKPT = [(0, False), (1, False), (1, True), (2, False), (2, True), (3, False), (3, True)]
B = 2


def image_tokens(var: str) -> int:
    """Placeholder tokens per image, by the processors' rules (R-VLM-4..7)."""
    cfg, (h, w) = VARIANTS[var], IMAGE_SIZE[var]
    v = cfg["vision_config"]
    if var == "llava":  # (image_size / patch)^2, the CLS token dropped
        return (v["image_size"] // v["patch_size"]) ** 2
    if var == "llava_next":
        return llava_next_tokens(h, w)
    if var == "mllama":  # one <|image|> token; the tiles reach the text through cross-attention
        return 1
    if var in ("qwen2_5_vl", "qwen3_vl"):  # the patch grid merged 2x2 (sizes already multiples of patch x merge)
        return (h // v["patch_size"]) * (w // v["patch_size"]) // v["spatial_merge_size"] ** 2
    if var == "gemma3":
        return cfg["mm_tokens_per_image"]
    raise ValueError(var)


def llava_next_tile_grid(h: int, w: int) -> tuple[int, int]:
    """The pinpoint the processor resizes an h x w image to, in tiles (rows, columns)."""
    from transformers.image_processing_utils import select_best_resolution  # noqa: PLC0415

    cfg = VARIANTS["llava_next"]
    bh, bw = select_best_resolution((h, w), cfg["image_grid_pinpoints"])
    t = cfg["vision_config"]["image_size"]
    return bh // t, bw // t


def llava_next_tokens(h: int, w: int) -> int:
    """LlavaNextProcessor._get_number_of_features, CLS dropped (strategy default): the base
    tile's patches, the tiles' patch grid cropped back to the image's aspect ratio
    (unpadded) and one newline per remaining row."""
    v = VARIANTS["llava_next"]["vision_config"]
    ph = pw = v["image_size"] // v["patch_size"]
    sh, sw = llava_next_tile_grid(h, w)
    ch, cw = ph * sh, pw * sw
    if w / h > cw / ch:
        ch -= ((ch - int(round(h * (cw / w), 7))) // 2) * 2
    else:
        cw -= ((cw - int(round(w * (ch / h), 7))) // 2) * 2
    return ch * cw + ch + ph * pw


def make_batch(var: str, gen: torch.Generator, images: int = 1):
    """input_ids (b, seq) with `images` images' placeholders per sample, labels (placeholders
    and markers -100, as the collators do) and the pixel inputs of the model's forward."""
    cfg, (h, w) = VARIANTS[var], IMAGE_SIZE[var]
    v = cfg["vision_config"]
    n = image_tokens(var)
    assert images == 1 or var in MULTI_IMAGE
    ids = torch.randint(3, VIDEO, (B, seq_len(images)), generator=gen)
    for k in range(images):
        at = 1 + k * (n + 3)
        if var in ("qwen2_5_vl", "qwen3_vl", "gemma3"):
            ids[:, at], ids[:, at + 1:at + 1 + n], ids[:, at + 1 + n] = VSTART, IMG, VEND
        else:
            ids[:, at + 1:at + 1 + n] = IMG
    labels = ids.masked_fill(ids >= VIDEO, -100)
    if var == "llava_next":  # the base tile and the pinpoint's tiles, each image_size square
        t = v["image_size"]
        sh, sw = llava_next_tile_grid(h, w)
        px = {"pixel_values": torch.randn(B, 1 + sh * sw, 3, t, t, generator=gen),
              "image_sizes": torch.tensor([[h, w]] * B)}
    elif var == "mllama" and images == 1:  # one image of h/t x w/t tiles (aspect ratio id: its index + 1), padded to max_num_tiles
        t, mt = v["image_size"], v["max_num_tiles"]
        ar = [h // t, w // t]
        nt = ar[0] * ar[1]
        px = {"pixel_values": torch.randn(B, 1, mt, 3, t, t, generator=gen),
              "aspect_ratio_ids": torch.tensor([[v["supported_aspect_ratios"].index(ar) + 1]] * B),
              "aspect_ratio_mask": torch.tensor([[[1] * nt + [0] * (mt - nt)]] * B),
              # every token from the <|image|> one on attends to the image's tiles (the processor's rule)
              "cross_attention_mask": torch.tensor([[[[1] * nt + [0] * (mt - nt)]] * (SEQ - 2) for _ in range(B)])}
        px["cross_attention_mask"] = torch.cat([torch.zeros(B, 2, 1, mt, dtype=torch.long),
                                                px["cross_attention_mask"]], 1)
    elif var == "mllama":  # several images: each attends from its <|image|> token to the next one's
        # (get_cross_attention_token_mask; the last to the end), [b, seq, images, max_num_tiles]
        t, mt = v["image_size"], v["max_num_tiles"]
        ar = [h // t, w // t]
        nt = ar[0] * ar[1]
        starts = [1 + k * (n + 3) + 1 for k in range(images)] + [seq_len(images)]
        cam = torch.zeros(B, seq_len(images), images, mt, dtype=torch.long)
        for k in range(images):
            cam[:, starts[k]:starts[k + 1], k, :nt] = 1
        px = {"pixel_values": torch.randn(B, images, mt, 3, t, t, generator=gen),
              "aspect_ratio_ids": torch.tensor([[v["supported_aspect_ratios"].index(ar) + 1] * images] * B),
              "aspect_ratio_mask": torch.tensor([[[1] * nt + [0] * (mt - nt)] * images] * B),
              "cross_attention_mask": cam}
    elif var == "llava" or var == "gemma3":
        px = {"pixel_values": torch.randn(B * images, 3, h, w, generator=gen)}
        if var == "gemma3":
            px["token_type_ids"] = (ids == IMG).long()  # the processor's mm_token_type_ids, renamed
    else:
        p, t = v["patch_size"], v["temporal_patch_size"]
        gh, gw = h // p, w // p
        # mm_token_type_ids (1 on image placeholders): what the processor returns and M-RoPE's
        # position ids need (without it Qwen2.5-VL falls back to 1-D positions, Qwen3-VL refuses)
        px = {"pixel_values": torch.randn(B * images * gh * gw, 3 * t * p * p, generator=gen),
              "image_grid_thw": torch.tensor([[1, gh, gw]] * (B * images)), "mm_token_type_ids": (ids == IMG).int()}
    return ids, labels, px


def build_model(var: str, attention: str):
    d = dict(VARIANTS[var])
    mt = d.pop("model_type")
    cfg = transformers.AutoConfig.for_model(mt, **d)
    cfg._attn_implementation = attention
    torch.manual_seed(0)
    model = getattr(transformers, MODEL_CLASSES[var])(cfg)
    model.config.use_cache = False
    return model


def gc_layers(model):
    """The GradientCheckpointingLayer modules in model.modules() order (what
    _set_gradient_checkpointing counts), with their qualified names."""
    names = {m: n for n, m in model.named_modules()}
    return [(names[m], m) for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]


def towers(var: str, layers) -> dict:
    """Each tower's global indices (module order) and its checkpointed ones (tower-local)."""
    vis = VISION[var][0] + "."
    out = {"vision": [], "text": []}
    for i, (name, _) in enumerate(layers):
        out["vision" if name.startswith(vis) else "text"].append(i)
    res = {}
    for t, idx in out.items():
        res[t] = {"layers": len(idx), "first_index": idx[0] if idx else None,
                  "classes": sorted({type(layers[i][1]).__name__ for i in idx}),
                  "checkpointed": [k for k, i in enumerate(idx) if layers[i][1].gradient_checkpointing]}
    return res


def per_layer_code(var: str, choice: str, every_n: int, offload: bool) -> list[str]:
    """gckpt-plan's per-layer checkpointing code for --checkpoint-towers text | vision
    (planner/plan_vlm.c prints these lines; FINDINGS R-VLM-70..72): checkpointing enabled
    on the model (its hooks, use_cache off, the one checkpoint function with offload on
    every module), then each GradientCheckpointingLayer's flag, every_n counted from the
    chosen tower's own layer 0, the other tower's layers plain. The Trainer's
    gradient_checkpointing stays False (it would re-run every_n over both towers)."""
    tower = VISION[var][0].split(".")[-1]
    lines = [f'model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={{"use_reentrant": False}}, '
             f'offload={offload})',
             "layers = [(name, m) for name, m in model.named_modules() if isinstance(m, GradientCheckpointingLayer)]",
             f'vision = [m for name, m in layers if "{tower}" in name.split(".")]',
             f'text = [m for name, m in layers if "{tower}" not in name.split(".")]']
    for t in ("vision", "text"):
        lines += [f"for i, m in enumerate({t}):",
                  f"    m.gradient_checkpointing = {f'i % {every_n} == 0' if t == choice else 'False'}"]
    return lines


def vlm_setup(spec: dict):
    """probe.setup for a VLM: every checkpointing layer of both towers is a region
    (c.layers), the forward gets the sample's pixels, the optimizer the trainable
    parameters (the Trainer's)."""
    import probe  # noqa: PLC0415 - probe imports this module

    c = argparse.Namespace()
    var = spec["variant"]
    c.family, c.precision, c.attention = spec["family"], spec["precision"], spec["attention"]
    images = spec.get("images", 1)
    c.every_n, c.offload, c.b, c.s = spec["every_n"], spec["offload"], B, seq_len(images)
    c.grad_accum = spec.get("grad_accum", probe.GRAD_ACCUM)
    c.warmup = "step"
    model = build_model(var, c.attention)
    if c.precision == "bf16":
        model = model.to(torch.bfloat16)
    model.train()
    enc, keep = VISION[var]
    if spec["vision"] == "frozen":
        for n, p in model.named_parameters():
            if n.startswith(enc + ".") and not any(n.startswith(k + ".") for k in keep):
                p.requires_grad_(False)
    towers_choice = spec.get("checkpoint_towers", "all")
    if c.every_n and towers_choice != "all":  # the code gckpt-plan prints, run as printed
        exec("\n".join(per_layer_code(var, towers_choice, c.every_n, c.offload)),  # noqa: S102
             {"model": model, "GradientCheckpointingLayer": GradientCheckpointingLayer})
    elif c.every_n:
        model.gradient_checkpointing_enable(every_n_layers=c.every_n, offload=c.offload)
    c.model = model
    named = gc_layers(model)
    c.layer_names = [n for n, _ in named]
    c.layers = [m for _, m in named]
    c.ckpt_layers = [i for i, m in enumerate(c.layers) if m.gradient_checkpointing]
    c.nlayers = len(c.layers)
    c.towers = towers(var, named)
    c.params = list(model.parameters())
    c.opt = torch.optim.AdamW([p for p in c.params if p.requires_grad], lr=1e-3, fused=True)
    c.amp = c.precision.startswith("amp-bf16")
    c.cuda_lists = c.precision == "amp-bf16-cudalists"
    c.steps = probe.STEPS
    uniq = {}
    for p in c.params:
        uniq[p.untyped_storage()._cdata] = p.untyped_storage().nbytes()
    c.param_info = {"count": sum(p.numel() for p in c.params), "bytes": sum(uniq.values()), "tensors": len(c.params),
                    "trainable": sum(p.numel() for p in c.params if p.requires_grad)}
    gen = torch.Generator().manual_seed(1234)
    queue = collections.deque()
    c.batch = None

    def next_ids():
        ids, labels, px = make_batch(var, gen, images)
        if c.precision == "bf16":
            px["pixel_values"] = px["pixel_values"].to(torch.bfloat16)
        queue.append((labels, px))
        return ids

    def forward_model(input_ids, labels):
        c.batch = queue.popleft()  # alive until the backward ends, as the Trainer's inputs dict
        return model(input_ids=input_ids, labels=c.batch[0], **c.batch[1])

    def run_backward(loss):
        if c.cuda_lists:
            torch.autograd.graph._engine_run_backward(
                (loss,), (torch.ones_like(loss),), False, False, (), allow_unreachable=True, accumulate_grad=True)
        else:
            loss.backward()
        c.batch = None

    c.next_ids, c.forward_model, c.run_backward = next_ids, forward_model, run_backward
    c.virtual_states = 0
    return c


def run_vlm_case(spec: dict) -> dict:
    """probe.run_case with vlm_setup; the fixture adds the towers, the image inputs and
    the vision tower's state."""
    import probe  # noqa: PLC0415

    seen = {}

    def setup(s):
        c = vlm_setup(s)
        seen["c"] = c
        return c

    fx = probe.run_case(spec, setup)
    c, var = seen["c"], spec["variant"]
    images = spec.get("images", 1)
    ids, _, px = make_batch(var, torch.Generator().manual_seed(0), images)
    fx["setting"]["variant"] = var
    fx["setting"]["vision_tower"] = spec["vision"]
    if spec.get("checkpoint_towers", "all") != "all":
        fx["setting"]["checkpoint_towers"] = spec["checkpoint_towers"]
        fx["setting"]["per_layer_code"] = per_layer_code(var, spec["checkpoint_towers"], spec["every_n"],
                                                         spec["offload"])
    fx["checkpointed_layer_names"] = [c.layer_names[i] for i in c.ckpt_layers]
    fx["towers"] = c.towers
    fx["images"] = {"per_sample": images, "size_hw": list(IMAGE_SIZE[var]), "tokens_per_image": image_tokens(var),
                    "text_tokens_per_sample": seq_len(images) - images * image_tokens(var),
                    "inputs": {k: {"shape": list(v.shape), "dtype": str(v.dtype).replace("torch.", "")}
                               for k, v in px.items()}}
    return fx


def cases() -> list[dict]:
    out = []
    for var, cfg in VARIANTS.items():
        for prec in PRECISIONS:
            for n, off in CKPT:
                for vis in ("trained", "frozen"):
                    name = f"{var}-{prec}-sdpa-n{n or 'off'}-{'offload' if off else 'plain'}-vis{vis}-b{B}s{SEQ}"
                    out.append(dict(name=name, variant=var, family=cfg["model_type"], precision=prec,
                                    attention="sdpa", every_n=n, offload=off, vision=vis, b=B, s=SEQ))
    for var in MULTI_IMAGE:
        for prec in PRECISIONS:
            for n, off in CKPT_MULTI:
                name = f"{var}-{prec}-sdpa-n{n or 'off'}-{'offload' if off else 'plain'}-vistrained-b{B}s{SEQ_MULTI}-i2"
                out.append(dict(name=name, variant=var, family=VARIANTS[var]["model_type"], precision=prec,
                                attention="sdpa", every_n=n, offload=off, vision="trained", b=B, s=SEQ_MULTI,
                                images=2))
    return out


# --checkpoint-towers text | vision (tests/data/hf-vlm-towers): llava, the tower trained (and
# frozen in four), the per-layer code gckpt-plan prints run as printed (per_layer_code)
TOWER_CKPT = [(1, False), (2, False), (2, True), (3, False)]


def tower_cases() -> list[dict]:
    out = []
    grid = [(p, n, off, "trained") for p in ("fp32", "amp-bf16-cudalists") for n, off in TOWER_CKPT]
    grid += [("fp32", 1, False, "frozen"), ("fp32", 2, True, "frozen")]  # the frozen tower, hooked, its blocks plain
    for prec, n, off, vis in grid:
        for choice in ("text", "vision"):
            name = f"llava-{prec}-sdpa-n{n}-{'offload' if off else 'plain'}-vis{vis}-b{B}s{SEQ}-ckpt{choice}"
            out.append(dict(name=name, variant="llava", family="llava", precision=prec, attention="sdpa",
                            every_n=n, offload=off, vision=vis, b=B, s=SEQ, checkpoint_towers=choice))
    return out
