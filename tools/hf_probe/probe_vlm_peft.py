#!/usr/bin/env python3
"""Ground truth for LoRA / QLoRA on a vision-language model (tiny llava of vlm_cases.py; LoRA and
QLoRA on the text model of its tiny gemma3 too), on CPU.

The model a VLM SFT user trains (TRL's VLM SFT with peft), built as they build it:

  LoRA   LlavaForConditionalGeneration (fp32, or .to(bf16)) -> get_peft_model(LoraConfig(...))
         -> model.gradient_checkpointing_enable(every_n_layers=n, offload=b)
  QLoRA  from_pretrained(..., quantization_config=BitsAndBytesConfig(nf4, double quant,
         bf16 compute), dtype=bf16): bitsandbytes quantizes every nn.Linear but lm_head,
         the vision tower's and the projector's included (FINDINGS R-VLM-41)
         -> prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
         -> get_peft_model(...) -> model.gradient_checkpointing_enable(...)

Targets (FINDINGS R-VLM-40):
  textattn   the regex r"model\\.language_model.*\\.(q_proj|k_proj|v_proj|o_proj)": the text
             model's attention projections only
  attn       the list ["q_proj", "k_proj", "v_proj", "o_proj"] as users write it: peft's
             suffix match also wraps the CLIP tower's q_proj / k_proj / v_proj (its output
             projection is out_proj)
  all        "all-linear": every nn.Linear but lm_head, the tower's and projector's too

Everything but the adapters is frozen (get_peft_model), the vision tower included; the
optimizer is torch.optim.AdamW(fused=True) over the trainable parameters. Each case runs
probe.py's two passes (storage tracker, allocator) over vlm_cases.py's batches (b2, one
56x56 image of 16 placeholders per sample, sequence 32, gradient accumulation 2).

Fixtures (tests/data/hf-vlm-peft/): the hf-vlm fixture's fields (towers, images,
checkpointed_layer_names, setting.variant / vision_tower) plus probe_peft.py's (method,
lora, quant, trainable_params, trainable, param_dtypes, ...).

Usage:
  probe_vlm_peft.py --list
  probe_vlm_peft.py --all --jobs 2
  probe_vlm_peft.py --case llava-lora-fp32-textattn-d0.05-sdpa-n2-offload-b2s32 --stdout
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import sys
import tempfile
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
logging.getLogger("bitsandbytes").setLevel(logging.ERROR)

import torch  # noqa: E402
import transformers  # noqa: E402

transformers.utils.logging.disable_progress_bar()

import probe  # noqa: E402
import probe_peft  # noqa: E402
import vlm_cases  # noqa: E402

OUT = os.path.join(probe.ROOT, "tests", "data", "hf-vlm-peft")
VARIANTS = ("llava", "gemma3")
TARGETS = {"textattn": r"model\.language_model.*\.(q_proj|k_proj|v_proj|o_proj)",
           "attn": ["q_proj", "k_proj", "v_proj", "o_proj"], "all": "all-linear"}
CKPT = [(0, False), (1, False), (1, True), (2, False), (2, True)]
_CKPT_ROOT = None


def spec(var, method, precision, targets, every_n, offload, dropout=0.05):
    sp = dict(variant=var, family=vlm_cases.VARIANTS[var]["model_type"], attention="sdpa", method=method,
              precision=precision, targets=targets, target_modules=TARGETS[targets], dropout=dropout,
              r=probe_peft.R, alpha=probe_peft.ALPHA, quant="nf4" if method == "qlora" else None,
              double_quant=True if method == "qlora" else None,
              compute_dtype="bf16" if method == "qlora" else None, storage="uint8", load_dtype="bf16",
              every_n=every_n, offload=offload, b=vlm_cases.B, s=vlm_cases.SEQ, ckpt_api="hf",
              optimizer="adamw_torch_fused", modules_to_save=[], grad_accum=probe.GRAD_ACCUM, warmup="step",
              foreach=True, vision="frozen")
    m = "lora" if method == "lora" else "qlora-nf4dq"
    sp["name"] = (f"{var}-{m}-{precision}-{targets}-d{dropout:g}-sdpa-n{every_n or 'off'}-"
                  f"{'offload' if offload else 'plain'}-b{sp['b']}s{sp['s']}")
    return sp


def all_cases():
    out = []
    # Gemma 3: LoRA and QLoRA with the adapters on the text model (the regex) only
    for prec in ("fp32", "bf16", "amp-bf16-cudalists"):
        out += [spec("gemma3", "lora", prec, "textattn", n, off) for n, off in CKPT]
    out += [spec("gemma3", "qlora", "amp-bf16-cudalists", "textattn", n, off) for n, off in CKPT]
    for var in ("llava",):
        for prec in ("fp32", "bf16", "amp-bf16-cudalists"):
            for tg in ("textattn", "all"):
                out += [spec(var, "lora", prec, tg, n, off) for n, off in CKPT]
        out += [spec(var, "lora", "fp32", "attn", n, off) for n, off in ((0, False), (1, False), (2, True))]
        for tg in ("textattn", "all"):
            out += [spec(var, "qlora", "amp-bf16-cudalists", tg, n, off) for n, off in CKPT]
    return out


def saved_model(var):
    d = os.path.join(_CKPT_ROOT, var)
    if not os.path.exists(os.path.join(d, "config.json")):
        tmp = tempfile.mkdtemp(dir=_CKPT_ROOT)
        vlm_cases.build_model(var, "sdpa").save_pretrained(tmp)
        try:
            os.rename(tmp, d)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    return d


def load_base(sp):
    var = sp["variant"]
    if sp["method"] == "lora":
        model = vlm_cases.build_model(var, sp["attention"])
        return model.to(torch.bfloat16) if sp["precision"] == "bf16" else model
    from peft import prepare_model_for_kbit_training

    cls = getattr(transformers, vlm_cases.MODEL_CLASSES[var])
    model = cls.from_pretrained(saved_model(var), quantization_config=probe_peft.bnb_config(sp),
                                dtype=torch.bfloat16, device_map="cpu", attn_implementation=sp["attention"])
    model.config.use_cache = False
    prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    return model


def setup(sp):
    """vlm_cases.vlm_setup with the model a LoRA / QLoRA user builds."""
    from peft import LoraConfig, get_peft_model

    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    var = sp["variant"]
    hf = load_base(sp)
    hf.config.use_cache = False
    torch.manual_seed(0)  # the adapters' initialisation
    pm = get_peft_model(hf, LoraConfig(r=sp["r"], lora_alpha=sp["alpha"], lora_dropout=sp["dropout"],
                                       target_modules=sp["target_modules"], bias="none", task_type="CAUSAL_LM"))
    if sp["every_n"]:
        pm.gradient_checkpointing_enable(every_n_layers=sp["every_n"], offload=sp["offload"])
    pm.train()
    c = argparse.Namespace()
    c.family, c.precision, c.attention = sp["family"], sp["precision"], sp["attention"]
    c.every_n, c.offload, c.b, c.s = sp["every_n"], sp["offload"], sp["b"], sp["s"]
    c.grad_accum, c.warmup = sp["grad_accum"], sp["warmup"]
    c.amp = sp["precision"].startswith("amp-bf16")
    c.cuda_lists = sp["precision"] == "amp-bf16-cudalists"
    named = vlm_cases.gc_layers(hf)
    c.layer_names = [n for n, _ in named]
    c.layers = [m for _, m in named]
    c.ckpt_layers = [i for i, m in enumerate(c.layers) if m.gradient_checkpointing]
    c.nlayers = len(c.layers)
    c.towers = vlm_cases.towers(var, named)
    input_rg = {}

    def layer_in(i):
        def hook(mod, args, kwargs):
            hs = args[0] if args else kwargs.get("hidden_states")
            input_rg[i] = bool(getattr(hs, "requires_grad", False))
        return hook

    for i, layer in enumerate(c.layers):
        layer.register_forward_pre_hook(layer_in(i), with_kwargs=True)
    # bitsandbytes' first-forward changes, before measuring (probe_peft.py's warm-up, with an image)
    before = {probe_peft.short(n): probe_peft.dt(p) for n, p in pm.named_parameters()}
    ids, labels, px = vlm_cases.make_batch(var, torch.Generator().manual_seed(7))
    if sp["precision"] == "bf16":
        px["pixel_values"] = px["pixel_values"].to(torch.bfloat16)
    with torch.no_grad(), (torch.autocast("cpu", dtype=torch.bfloat16) if c.amp else contextlib.nullcontext()):
        pm(input_ids=ids[:1], **{k: t[:1] for k, t in px.items()})
    info = probe_peft.describe(pm, hf, sp, before)
    info["layer_input_requires_grad"] = input_rg
    info["input_require_grads_hooked"] = sorted(
        probe_peft.short(n) for n, m in hf.named_modules() if any(
            getattr(h, "__name__", "") == "make_inputs_require_grads" for h in m._forward_hooks.values()))
    probe_peft._INFO.append(info)
    c.model = pm
    c.params = list(pm.parameters())
    c.opt = torch.optim.AdamW([p for p in c.params if p.requires_grad], lr=1e-3, fused=True)
    c.steps = probe.STEPS
    uniq = {p.untyped_storage()._cdata: p.untyped_storage().nbytes() for p in c.params}
    tr = [p for p in c.params if p.requires_grad]
    c.param_info = {"count": sum(p.numel() for p in c.params), "bytes": sum(uniq.values()), "tensors": len(c.params),
                    "trainable_count": sum(p.numel() for p in tr),
                    "trainable_bytes": sum(p.untyped_storage().nbytes() for p in tr)}
    gen = torch.Generator().manual_seed(1234)
    queue = []

    def next_ids():
        ids, labels, px = vlm_cases.make_batch(var, gen)
        if sp["precision"] == "bf16":
            px["pixel_values"] = px["pixel_values"].to(torch.bfloat16)
        queue.append((labels, px))
        return ids

    def forward_model(input_ids, labels):
        c.batch = queue.pop(0)  # alive until the backward ends, as the Trainer's inputs dict
        return pm(input_ids=input_ids, labels=c.batch[0], **c.batch[1])

    def run_backward(loss):
        if c.cuda_lists:
            torch.autograd.graph._engine_run_backward(
                (loss,), (torch.ones_like(loss),), False, False, (), allow_unreachable=True, accumulate_grad=True)
        else:
            loss.backward()
        c.batch = None

    c.batch = None
    c.next_ids, c.forward_model, c.run_backward = next_ids, forward_model, run_backward
    c.virtual_states = 0
    c.resident = [t for _, _, t in probe_peft.quant_tensors(hf)] if sp["method"] == "qlora" else []
    seen["c"] = c
    return c


seen: dict = {}


def run_case(sp):
    fx = probe_peft.run_case(sp, setup)
    c, var = seen["c"], sp["variant"]
    _, _, px = vlm_cases.make_batch(var, torch.Generator().manual_seed(0))
    info = probe_peft._INFO[0]
    fx["setting"]["variant"] = var
    fx["setting"]["vision_tower"] = "frozen (get_peft_model)"
    fx["setting"]["targets_name"] = sp["targets"]
    # lora.targets: the module names the adapters go on (the text model's for the regex),
    # lora.target_modules: what LoraConfig was given
    fx["lora"]["target_modules"] = sp["target_modules"]
    if sp["targets"] == "textattn":
        fx["lora"]["targets"] = TARGETS["attn"]
        fx["lora"]["targets_scope"] = "text model (model.language_model)"
    fx["setting"]["input_require_grads_hooked"] = info["input_require_grads_hooked"]
    fx["checkpointed_layer_names"] = [c.layer_names[i] for i in c.ckpt_layers]
    fx["towers"] = c.towers
    n = vlm_cases.image_tokens(var)
    fx["images"] = {"per_sample": 1, "size_hw": list(vlm_cases.IMAGE_SIZE[var]), "tokens_per_image": n,
                    "text_tokens_per_sample": vlm_cases.SEQ - n,
                    "inputs": {k: {"shape": list(v.shape), "dtype": str(v.dtype).replace("torch.", "")}
                               for k, v in px.items()}}
    return fx


def main(argv=None):
    global _CKPT_ROOT
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=OUT)
    probe.add_selection_args(ap)
    a = ap.parse_args(argv)
    cases = all_cases()
    if len({c["name"] for c in cases}) != len(cases):
        raise SystemExit("duplicate case names")
    sel = probe.selection(ap, a, cases)
    if sel is None:
        return 0
    _CKPT_ROOT = tempfile.mkdtemp(prefix="gckpt-vlm-peft-")
    try:
        for var in {c["variant"] for c in sel if c["method"] == "qlora"}:
            saved_model(var)
        if a.stdout:
            torch.set_num_threads(1)
            for c in sel:
                sys.stdout.write(probe.dumps_fixture(run_case(c)))
            return 0
        os.makedirs(a.out, exist_ok=True)
        return probe.write_cases([(c, a.out, run_case) for c in sel], a.jobs)
    finally:
        shutil.rmtree(_CKPT_ROOT, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
