#!/usr/bin/env python3
"""Ground truth for PEFT LoRA and QLoRA training with activation checkpointing, on CPU.

The same two measurements as probe.py (whose passes this module runs): the storage
tracker records what autograd saves per layer and what offload copies; torch's allocator
reports (allocs.py) give the live bytes. What this file adds is the model a LoRA / QLoRA
user trains, built the way they build it:

  LoRA   model (fp32, or .to(bf16)) -> get_peft_model(LoraConfig(...))
         -> model.gradient_checkpointing_enable(every_n_layers=n, offload=b)
  QLoRA  from_pretrained(..., quantization_config=BitsAndBytesConfig(...), dtype=bf16)
         -> prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
         -> get_peft_model(...) -> model.gradient_checkpointing_enable(every_n_layers=n, offload=b)
         (ckpt_api "prepare": prepare_model_for_kbit_training's own checkpointing call,
         every layer, no offload; its use_reentrant outcome is measured)

and the optimizer over the trainable parameters only (the Trainer's grouping):
adamw_torch_fused (default), adamw_bnb_8bit, paged_adamw_8bit, paged_adamw_32bit.
Precisions: fp32, bf16 (model.to(bf16)), amp-bf16 (CPU autocast, the Trainer's bf16=True)
and amp-bf16-cudalists (plus CUDA's autocast op lists, and torch.is_autocast_enabled()
answering as it does under CUDA autocast; see FINDINGS.md R-CPU-3 C2).

Before the measured steps every case runs one no-grad forward of 1x8 tokens: bitsandbytes
changes parameters in its first forward (a 4-bit layer casts its bias to the compute dtype
for good; Linear8bitLt moves CB/SCB into its state), and the fixtures describe the model as
it trains. The quantization statistics (QuantState tensors, SCB) are neither parameters nor
buffers; they are counted as resident bytes from the step start.

Fixtures: gckpt.hf-fixture/1 plus the optional fields method, lora, quant,
trainable_params, trainable, param_dtypes (see FINDINGS.md R-PROBE-3).

Usage:
  probe_peft.py --list
  probe_peft.py --all --jobs 2                 # tests/data/hf-peft
  probe_peft.py --filter 'llama-qlora-*' --jobs 2
  probe_peft.py --case llama-lora-fp32-all-d0.05-sdpa-n2-offload-b2s32 --stdout
"""
from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import logging
import os
import shutil
import sys
import tempfile
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# bitsandbytes logs "Failed to load CPU gemm_4bit_forward from kernels-community" at import
# on AVX512-BF16 CPUs without the optional `kernels` package (inference path only)
logging.getLogger("bitsandbytes").setLevel(logging.ERROR)

import torch  # noqa: E402
import transformers  # noqa: E402

transformers.utils.logging.disable_progress_bar()

import family_cases  # noqa: E402
import moe_cases  # noqa: E402
import probe  # noqa: E402

OUT = os.path.join(probe.ROOT, "tests", "data", "hf-peft")
FAMILIES = ("llama", "qwen2", "gpt2")
# issue 13's dense families with adapters: family_cases.py's tiny configurations (sliding
# windows shorter than the sequence, soft-capping, multipliers, fused projections);
# gemma2 refuses SDPA
FAM_VARIANTS = ("gemma", "gemma2", "gemma3_text", "olmo2", "granite", "phi3", "gpt_neox", "smollm3", "glm4")
# the mixture-of-experts families (moe_cases.py's tiny configurations) with attention-only
# adapters: all-linear there also wraps the router and the fused expert parameters
# (ParamWrapper; FINDINGS R-PEFT-28), which the planner refuses
MOE_VARIANTS = tuple(moe_cases.VARIANTS)
# DeepSeek-V3 (moe_cases.DSV3_VARIANTS): peft 0.21.2 names no default targets for it; its
# nn.Linear modules are the MLA projections, the dense layers' and the shared experts' MLPs;
# peft's v4-to-v5 conversion maps the MLP names (and all-linear's) to the routed experts'
# fused parameters and the router (ParamWrapper), so the attention projections are the
# modelled targets (FINDINGS R-PEFT-29)
DSV3_VARIANTS = tuple(moe_cases.DSV3_VARIANTS)
MLA_ATTN = ["q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"]
LLAMA_ATTN = ["q_proj", "k_proj", "v_proj", "o_proj"]
# "attn" targets as a user writes them; GPT-2's "c_proj" matches by suffix, so it also
# takes mlp.c_proj (peft's suffix rule, recorded in lora.targets_resolved)
ATTN_TARGETS = {"llama": LLAMA_ATTN, "qwen2": LLAMA_ATTN, "gpt2": ["c_attn", "c_proj"],
                **{v: LLAMA_ATTN for v in FAM_VARIANTS + MOE_VARIANTS}, "phi3": ["qkv_proj", "o_proj"],
                "gpt_neox": ["query_key_value", "dense"], "deepseek_v3": MLA_ATTN,
                # q_lora_rank None: q_proj instead of q_a_proj / q_b_proj
                "deepseek_v3+qproj": ["q_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"]}
MODULES_TO_SAVE = {"llama": ["lm_head", "embed_tokens"], "qwen2": ["lm_head", "embed_tokens"], "gpt2": ["lm_head"],
                   **{v: ["lm_head", "embed_tokens"] for v in FAM_VARIANTS}, "gpt_neox": ["lm_head", "embed_in"]}
OPTIMIZERS = ("adamw_torch_fused", "adamw_bnb_8bit", "paged_adamw_8bit", "paged_adamw_32bit")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "uint8": torch.uint8}
R, ALPHA = 8, 16
WARMUP_TOKENS = (1, 8)

# models of their own shape (spec's shape=): issue 21's int8 QLoRA cases, in the shape of the
# held-out check's (a qwen2 with tied embeddings and one kv head, a llama) but not its sizes
SHAPED = {
    "h80kv1tied": dict(model_type="qwen2", vocab_size=probe.VOCAB, hidden_size=80, intermediate_size=208,
                       num_hidden_layers=5, num_attention_heads=5, num_key_value_heads=1,
                       max_position_embeddings=128, rms_norm_eps=1e-6, attention_dropout=0.0,
                       tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=0),
    "h96kv2": dict(model_type="llama", vocab_size=probe.VOCAB, hidden_size=96, intermediate_size=256,
                   num_hidden_layers=5, num_attention_heads=4, num_key_value_heads=2, head_dim=24,
                   max_position_embeddings=128, rms_norm_eps=1e-6, attention_dropout=0.0,
                   bos_token_id=1, eos_token_id=2, pad_token_id=0),
}

# the tiny models saved once per run, for from_pretrained(quantization_config=...)
_CKPT_ROOT = None
# what setup_peft learnt about the model of the case being measured (one per pass)
_INFO: list[dict] = []


# --------------------------------------------------------------------------
# the cases
# --------------------------------------------------------------------------
def spec(family, method, precision, targets="all-linear", dropout=0.05, quant=None, double_quant=True,
         storage="uint8", every_n=0, offload=False, b=2, s=32, ckpt_api="hf", optimizer="adamw_torch_fused",
         modules_to_save=(), aux=False, seq=False, grad_accum=probe.GRAD_ACCUM, r=R, shape=None, qproj=False):
    """shape: a name of SHAPED (a model of its own instead of the family's tiny one)."""
    fam_cfg = (family_cases.VARIANTS.get(family) if family in FAM_VARIANTS else
               moe_cases.DSV3_VARIANTS.get(family) if family in DSV3_VARIANTS else moe_cases.VARIANTS.get(family))
    if shape:
        fam_cfg = SHAPED[shape]
    attention = "eager" if family in family_cases.REFUSES_SDPA else "sdpa"
    sp = dict(family=family, attention=attention, method=method, precision=precision, targets=targets,
              dropout=dropout, r=r, alpha=ALPHA, quant=quant, double_quant=double_quant if quant != "int8" else None,
              compute_dtype="bf16" if quant in ("nf4", "fp4") else None, storage=storage, load_dtype="bf16",
              every_n=every_n, offload=offload, b=b, s=s, ckpt_api=ckpt_api, optimizer=optimizer,
              modules_to_save=list(modules_to_save), grad_accum=grad_accum, warmup="step",
              foreach=optimizer == "adamw_torch_fused")
    if shape:
        sp["shape"] = shape
    if fam_cfg:
        sp["config"] = dict(fam_cfg)
    if aux:  # the load-balancing loss added to the loss (moe_cases.py's +aux)
        sp["config"]["output_router_logits"] = True
    if seq:  # GPT-NeoX's sequential block (family_cases.py's gpt_neoxseq)
        sp["config"] = dict(family_cases.VARIANTS["gpt_neoxseq"])
    if qproj:  # DeepSeek-V3 without the query bottleneck, rotary not interleaved
        sp["config"].update(q_lora_rank=None, rope_interleave=False)
    sp["name"] = case_name(sp)
    return sp


def attn_targets(sp):
    """The attention projections a user lists (the q_proj variant's own list)."""
    qp = sp["family"] + "+qproj"
    return ATTN_TARGETS[qp if qp in variant(sp) else sp["family"]]


def variant(sp):
    """the family and what its config switches on: +aux (the load-balancing loss), +seq
    (use_parallel_residual False)"""
    cfg = sp.get("config", {})
    return (sp["family"] + ("+aux" if cfg.get("output_router_logits") else "")
            + ("+seq" if cfg.get("use_parallel_residual") is False else "")
            + ("+qproj" if "q_lora_rank" in cfg and cfg["q_lora_rank"] is None else ""))


def case_name(sp):
    if sp["method"] == "lora":
        m = "lora"
    else:
        m = "qlora-" + sp["quant"] + ("dq" if sp["double_quant"] else "")
        if sp["storage"] != "uint8":
            m += "-s" + sp["storage"]
    ck = f"n{sp['every_n'] or 'off'}-{'offload' if sp['offload'] else 'plain'}"
    if sp["ckpt_api"] != "hf":
        ck += "-" + sp["ckpt_api"]
    extra = ""
    if sp["grad_accum"] != probe.GRAD_ACCUM:
        extra += f"-ga{sp['grad_accum']}"
    if sp.get("shape"):
        extra += f"-{sp['shape']}-r{sp['r']}"
    if sp["modules_to_save"]:
        extra += "-mts_" + "+".join(sp["modules_to_save"])
    if sp["optimizer"] != "adamw_torch_fused":
        extra += "-" + sp["optimizer"]
    fam = variant(sp)
    return (f"{fam}-{m}-{sp['precision']}-{'all' if sp['targets'] == 'all-linear' else 'attn'}"
            f"-d{sp['dropout']:g}-{sp['attention']}-{ck}-b{sp['b']}s{sp['s']}{extra}")


# every_n x offload x shape: all of them for the main configuration of each method; for the
# others off, every layer with offload (b1s48) and n=3 (checkpointed and plain layers)
CKPT_ALL = [(n, off, b, s) for (n, off), (b, s) in itertools.product(probe.CKPT, probe.SHAPES)]
CKPT_FEW = [(0, False, 2, 32), (1, True, 1, 48), (3, False, 2, 32)]


def all_cases():
    out = []
    for fam in FAMILIES:
        main = [dict(method="lora", precision="fp32"),
                dict(method="qlora", precision="amp-bf16", quant="nf4")]
        few = [dict(method="lora", precision="fp32", dropout=0.0),
               dict(method="lora", precision="fp32", targets="attn", dropout=0.0),
               dict(method="lora", precision="fp32", targets="attn"),
               dict(method="lora", precision="bf16", dropout=0.0),
               dict(method="lora", precision="bf16"),
               dict(method="lora", precision="amp-bf16", dropout=0.0),
               dict(method="lora", precision="amp-bf16"),
               dict(method="qlora", precision="amp-bf16", quant="nf4", dropout=0.0),
               dict(method="qlora", precision="amp-bf16", quant="nf4", double_quant=False),
               dict(method="qlora", precision="amp-bf16", quant="nf4", targets="attn"),
               dict(method="qlora", precision="amp-bf16", quant="int8"),
               dict(method="qlora", precision="fp32", quant="nf4"),
               dict(method="qlora", precision="fp32", quant="int8"),
               dict(method="qlora", precision="amp-bf16-cudalists", quant="nf4")]
        for kw in main:
            out += [spec(fam, every_n=n, offload=off, b=b, s=s, **kw) for n, off, b, s in CKPT_ALL]
        for kw in few:
            out += [spec(fam, every_n=n, offload=off, b=b, s=s, **kw) for n, off, b, s in CKPT_FEW]
        q = dict(method="qlora", precision="amp-bf16", quant="nf4", every_n=1)
        out += [
            spec(fam, ckpt_api="prepare", **q),  # prepare_model_for_kbit_training's own call
            spec(fam, **dict(q, quant="fp4")),
            spec(fam, optimizer="adamw_bnb_8bit", modules_to_save=["lm_head"], **q),
            spec(fam, optimizer="paged_adamw_8bit", modules_to_save=["lm_head"], **q),
            spec(fam, optimizer="paged_adamw_32bit", **q),
            spec(fam, "lora", "fp32", every_n=2, offload=True, modules_to_save=MODULES_TO_SAVE[fam]),
        ]
        if fam == "llama":
            out.append(spec(fam, storage="bf16", **q))
    # issue 13's families: the main configurations over off / 1 / 3 x offload, the others
    # where they differ (dropout 0, bf16, autocast, fp32 QLoRA, attention targets, copies)
    ckpt13 = [(0, False), (1, False), (1, True), (3, False), (3, True)]
    for fam in FAM_VARIANTS:
        for kw in (dict(method="lora", precision="fp32"), dict(method="qlora", precision="amp-bf16", quant="nf4")):
            out += [spec(fam, every_n=n, offload=off, **kw) for n, off in ckpt13]
        out += [spec(fam, "lora", "fp32", dropout=0.0, every_n=1),
                spec(fam, "lora", "bf16"), spec(fam, "lora", "bf16", every_n=1),
                spec(fam, "lora", "amp-bf16", every_n=1),
                spec(fam, "lora", "fp32", targets="attn", every_n=3),
                spec(fam, "qlora", "fp32", quant="nf4", every_n=1),
                spec(fam, "qlora", "amp-bf16", quant="nf4", dropout=0.0, every_n=1, offload=True),
                spec(fam, "lora", "fp32", every_n=2, offload=True, modules_to_save=MODULES_TO_SAVE[fam])]
    # the MoE families, attention-only LoRA: fp32 over off / 1 / 3 x offload, dropout 0,
    # bf16, autocast (CUDA's lists, as hf-moe), the load-balancing loss (mixtral)
    for fam in MOE_VARIANTS:
        a = dict(method="lora", targets="attn")
        out += [spec(fam, precision="fp32", every_n=n, offload=off, **a) for n, off in ckpt13]
        out += [spec(fam, precision="fp32", dropout=0.0, every_n=1, **a),
                spec(fam, precision="bf16", **a), spec(fam, precision="bf16", every_n=1, **a),
                spec(fam, precision="bf16", dropout=0.0, every_n=3, offload=True, **a),
                spec(fam, precision="amp-bf16-cudalists", **a),
                spec(fam, precision="amp-bf16-cudalists", every_n=1, **a),
                spec(fam, precision="amp-bf16-cudalists", dropout=0.0, every_n=3, offload=True, **a)]
        # QLoRA: bitsandbytes quantizes q/k/v/o only; the experts and the router stay, fp32
        # (gpt_oss: its checkpoint is MXFP4, a bitsandbytes load of it is not measured)
        if fam == "gpt_oss":
            continue
        q = dict(method="qlora", quant="nf4", targets="attn")
        out += [spec(fam, precision="amp-bf16", every_n=n, offload=off, **q) for n, off in ckpt13 if n != 3 or off]
        out += [spec(fam, precision="fp32", every_n=1, **q),
                spec(fam, precision="amp-bf16", dropout=0.0, every_n=3, **q)]
    # issue 21: gradient accumulation 1, where layer 0's backward is the peak (the other layer
    # type's mask and rotary pair than layer 0's are gone there)
    out += [spec("gemma2", "lora", p, every_n=1, grad_accum=1) for p in ("fp32", "amp-bf16-cudalists")]
    out += [spec("gemma3_text", "lora", "fp32", every_n=1, grad_accum=1)]
    out += [spec("mixtral", "lora", "fp32", targets="attn", every_n=n, aux=True) for n in (0, 1)]
    # GPT-NeoX's sequential block: LoRA fp32 over off / 1 / 1+offload / 2+offload, autocast,
    # QLoRA with and without offload
    out += [spec("gpt_neox", "lora", "fp32", every_n=n, offload=off, seq=True)
            for n, off in ((0, False), (1, False), (1, True), (2, True))]
    out += [spec("gpt_neox", "lora", "amp-bf16", every_n=1, seq=True)]
    out += [spec("gpt_neox", "qlora", "amp-bf16", quant="nf4", every_n=1, offload=off, seq=True) for off in (False, True)]
    out += [spec("mixtral", "lora", "amp-bf16-cudalists", targets="attn", every_n=1, aux=True)]
    # issue 21: int8 QLoRA without accumulation, where the backward makes the gradients as it
    # goes and every layer's ctx.A is still alive at the end (FINDINGS R-QUANT-16), on SHAPED models
    # (every_n off / 1 / 2 x offload; the accumulation-2 row and prepare's reentrant call once)
    ckpt21 = [(0, False), (1, False), (1, True), (2, False), (2, True)]
    for fam, shape, precision, r in (("qwen2", "h80kv1tied", "fp32", 32), ("llama", "h96kv2", "amp-bf16", 16)):
        q = dict(method="qlora", quant="int8", precision=precision, shape=shape, r=r)
        out += [spec(fam, every_n=n, offload=off, grad_accum=1, **q) for n, off in ckpt21]
    q = dict(method="qlora", quant="int8", precision="amp-bf16", shape="h96kv2", r=16)
    out += [spec("llama", every_n=2, offload=True, **q), spec("llama", every_n=1, ckpt_api="prepare", grad_accum=1, **q)]
    # DeepSeek-V3, adapters on the MLA projections (the MoE families' grid); QLoRA quantizes
    # the MLA projections, the dense layers' and the shared experts' MLPs (every nn.Linear),
    # the routed experts and the router stay fp32; the q_proj variant and the
    # load-balancing loss's logits once each
    for fam in DSV3_VARIANTS:
        a = dict(method="lora", targets="attn")
        out += [spec(fam, precision="fp32", every_n=n, offload=off, **a) for n, off in ckpt13]
        out += [spec(fam, precision="fp32", dropout=0.0, every_n=1, **a),
                spec(fam, precision="bf16", **a), spec(fam, precision="bf16", every_n=1, **a),
                spec(fam, precision="bf16", dropout=0.0, every_n=3, offload=True, **a),
                spec(fam, precision="amp-bf16-cudalists", **a),
                spec(fam, precision="amp-bf16-cudalists", every_n=1, **a),
                spec(fam, precision="amp-bf16-cudalists", dropout=0.0, every_n=3, offload=True, **a)]
        out += [spec(fam, precision="fp32", every_n=n, qproj=True, **a) for n in (0, 1)]
        out += [spec(fam, precision="amp-bf16-cudalists", every_n=1, qproj=True, **a)]
        out += [spec(fam, precision="fp32", every_n=1, aux=True, **a)]
        q = dict(method="qlora", quant="nf4", targets="attn")
        out += [spec(fam, precision="amp-bf16", every_n=n, offload=off, **q) for n, off in ckpt13 if n != 3 or off]
        out += [spec(fam, precision="fp32", every_n=1, **q),
                spec(fam, precision="amp-bf16", dropout=0.0, every_n=3, **q),
                spec(fam, precision="amp-bf16", every_n=1, qproj=True, **q)]
    return out


# --------------------------------------------------------------------------
# the model, as a user builds it
# --------------------------------------------------------------------------
def model_key(sp):
    """The saved model a case loads: its family's tiny one (per variant), or a SHAPED one."""
    return f"{variant(sp)}-{sp['attention']}" + (f"-{sp['shape']}" if sp.get("shape") else "")


def saved_tiny_model(sp):
    """The tiny model of probe.py / family_cases.py (seed 0) saved once, for from_pretrained."""
    global _CKPT_ROOT
    if _CKPT_ROOT is None:
        _CKPT_ROOT = tempfile.mkdtemp(prefix="gckpt-peft-")
    d = os.path.join(_CKPT_ROOT, model_key(sp))
    if not os.path.exists(os.path.join(d, "config.json")):
        tmp = tempfile.mkdtemp(dir=_CKPT_ROOT)
        probe.make_model({k: sp[k] for k in ("family", "attention", "config") if k in sp}).save_pretrained(tmp)
        try:
            os.rename(tmp, d)
        except OSError:  # another worker saved it first
            shutil.rmtree(tmp, ignore_errors=True)
    return d


def bnb_config(sp):
    if sp["quant"] == "int8":
        return transformers.BitsAndBytesConfig(load_in_8bit=True)
    # every field passed: the defaults are fp4, no double quant, fp32 compute (FINDINGS R-QUANT-2)
    return transformers.BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type=sp["quant"], bnb_4bit_use_double_quant=sp["double_quant"],
        bnb_4bit_compute_dtype=DTYPES[sp["compute_dtype"]], bnb_4bit_quant_storage=DTYPES[sp["storage"]])


def load_base(sp):
    if sp["method"] == "lora":
        model = probe.make_model(sp)
        if sp["precision"] == "bf16":
            model = model.to(torch.bfloat16)
        return model
    from peft import prepare_model_for_kbit_training

    cls = getattr(transformers, probe.MODEL_CLASSES[sp["family"]])
    model = cls.from_pretrained(saved_tiny_model(sp), quantization_config=bnb_config(sp),
                                dtype=DTYPES[sp["load_dtype"]], device_map="cpu", attn_implementation=sp["attention"])
    model.config.use_cache = False
    probe.record_routing(model, model.config.model_type)  # the MoE routers' counts (probe.make_model's)
    prepare_model_for_kbit_training(model, use_gradient_checkpointing=sp["ckpt_api"] == "prepare" and bool(sp["every_n"]))
    return model


def lora_config(sp):
    from peft import LoraConfig

    return LoraConfig(r=sp["r"], lora_alpha=sp["alpha"], lora_dropout=sp["dropout"],
                      target_modules="all-linear" if sp["targets"] == "all-linear" else attn_targets(sp),
                      modules_to_save=sp["modules_to_save"] or None, bias="none", task_type="CAUSAL_LM")


def make_optimizer(name, params):
    if name == "adamw_torch_fused":
        return torch.optim.AdamW(params, lr=1e-3, fused=True)
    import bitsandbytes as bnb

    # transformers' _get_bitsandbytes_optimizer: 8 bits if "8bit" in the name, paged if "paged"
    return bnb.optim.AdamW(params, lr=1e-3, optim_bits=8 if "8bit" in name else 32, is_paged="paged" in name)


def short(name):
    """A module / parameter name without peft's and the model's prefixes."""
    for pre in ("base_model.model.", "model.", "transformer."):
        if name.startswith(pre):
            name = name[len(pre):]
    return name


def dt(t):
    return str(t.dtype).replace("torch.", "")


def quant_tensors(model):
    """(module name, kind, tensor) of the resident quantization state: neither parameters
    nor buffers."""
    import bitsandbytes as bnb

    out = []
    for name, m in model.named_modules():
        if isinstance(m, bnb.nn.Linear4bit):
            qs = m.weight.quant_state
            out += [(name, "absmax", qs.absmax), (name, "code", qs.code)]
            if qs.nested:
                out += [(name, "offset", qs.offset), (name, "state2.absmax", qs.state2.absmax),
                        (name, "state2.code", qs.state2.code)]
        elif isinstance(m, bnb.nn.Linear8bitLt):
            out.append((name, "SCB", m.state.SCB))
    return out


def describe_quant(hf, sp):
    """Per quantized weight: its packed bytes and each statistics tensor as bitsandbytes
    stores it (storage bytes)."""
    import bitsandbytes as bnb

    tensors = []
    for name, m in hf.named_modules():
        if isinstance(m, bnb.nn.Linear4bit):
            qs = m.weight.quant_state
            st = {"absmax": qs.absmax, "code": qs.code}
            if qs.nested:
                st.update({"offset": qs.offset, "state2.absmax": qs.state2.absmax, "state2.code": qs.state2.code})
            tensors.append({
                "name": short(name), "shape": list(qs.shape), "numel": int(torch.Size(qs.shape).numel()),
                "blocksize": qs.blocksize, "nested_blocksize": qs.state2.blocksize if qs.nested else None,
                "dequant_dtype": dt(qs), "weight": {"dtype": dt(m.weight), "shape": list(m.weight.shape),
                                                     "bytes": m.weight.untyped_storage().nbytes()},
                "stats": {k: {"dtype": dt(v), "shape": list(v.shape), "bytes": v.untyped_storage().nbytes()}
                          for k, v in st.items()},
                "stats_bytes": sum(v.untyped_storage().nbytes() for v in st.values()),
            })
        elif isinstance(m, bnb.nn.Linear8bitLt):
            tensors.append({
                "name": short(name), "shape": list(m.weight.shape), "numel": m.weight.numel(),
                "weight": {"dtype": dt(m.weight), "shape": list(m.weight.shape),
                           "bytes": m.weight.untyped_storage().nbytes()},
                "stats": {"SCB": {"dtype": dt(m.state.SCB), "shape": list(m.state.SCB.shape),
                                  "bytes": m.state.SCB.untyped_storage().nbytes()}},
                "stats_bytes": m.state.SCB.untyped_storage().nbytes(),
                "threshold": m.state.threshold, "cb_is_weight": m.state.CB.data_ptr() == m.weight.data_ptr(),
            })
    uniq = {t.untyped_storage()._cdata: t.untyped_storage().nbytes() for _, _, t in quant_tensors(hf)}
    return {
        "type": sp["quant"], "double_quant": sp["double_quant"], "compute_dtype": sp["compute_dtype"],
        "storage": sp["storage"] if sp["quant"] != "int8" else None, "load_dtype": sp["load_dtype"],
        "prepare_model_for_kbit_training": True,
        "weight_bytes": sum(t["weight"]["bytes"] for t in tensors),
        "stats_bytes": sum(t["stats_bytes"] for t in tensors),
        "stats_bytes_unique_storages": sum(uniq.values()),
        "tensors": tensors,
    }


def describe(pm, hf, sp, dtypes_before):
    """Everything about the model and adapters a plan has to reproduce."""
    from peft.tuners.lora import LoraLayer

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        pm.print_trainable_parameters()
    trainable, all_params = pm.get_nb_trainable_parameters()
    cfg = pm.peft_config["default"]
    layers = []
    for n_, m in pm.named_modules():
        if isinstance(m, LoraLayer):
            base = m.get_base_layer()
            layers.append({"name": short(n_), "base_class": type(base).__name__, "in": m.in_features,
                           "out": m.out_features, "r": m.r["default"], "scaling": m.scaling["default"],
                           "dropout_module": type(m.lora_dropout["default"]).__name__,
                           "fan_in_fan_out": bool(getattr(m, "fan_in_fan_out", False))})
    resolved = cfg.target_modules if isinstance(cfg.target_modules, str) else sorted(cfg.target_modules)
    kinds = {}
    for n_, p in pm.named_parameters():
        key = f"{type(p).__name__}:{dt(p)}:{'trainable' if p.requires_grad else 'frozen'}"
        k = kinds.setdefault(key, {"count": 0, "bytes": 0, "tensors": 0})
        k["count"] += p.numel()
        k["bytes"] += p.untyped_storage().nbytes()
        k["tensors"] += 1
    names = {short(n_): (type(p).__name__, dt(p), p.requires_grad) for n_, p in pm.named_parameters()}
    ck = None
    for m in hf.modules():
        f = getattr(m, "_gradient_checkpointing_func", None)
        if f is not None:
            ck = {k: v if isinstance(v, (bool, int, float, str)) else str(v) for k, v in (getattr(f, "keywords", {}) or {}).items()}
            break
    emb = hf.get_input_embeddings()
    return {
        "base_model_class": type(hf).__name__,
        "trainable_params": trainable,
        "all_params_peft": all_params,
        "print_trainable_parameters": buf.getvalue().strip(),
        "trainable": [[short(n_), list(p.shape), dt(p)] for n_, p in pm.named_parameters() if p.requires_grad],
        "param_dtypes": {n_: v[1] for n_, v in names.items()},
        "param_kinds": kinds,
        "param_dtype_changes_in_first_forward": {n_: [dtypes_before[n_], v[1]] for n_, v in names.items()
                                                 if dtypes_before.get(n_) not in (None, v[1])},
        "lora": {"r": sp["r"], "alpha": sp["alpha"], "dropout": sp["dropout"],
                 "targets": sp.get("target_modules") or (sp["targets"] if sp["targets"] == "all-linear" else attn_targets(sp)),
                 "targets_resolved": resolved, "modules_to_save": sp["modules_to_save"], "bias": cfg.bias,
                 "use_rslora": cfg.use_rslora, "scaling": sp["alpha"] / sp["r"],
                 "closed_form_trainable": sum(x["r"] * (x["in"] + x["out"]) for x in layers),
                 "layers": layers},
        "quant": describe_quant(hf, sp) if sp["method"] == "qlora" else None,
        "ckpt": {"api": sp["ckpt_api"], "checkpoint_kwargs": ck,
                 "input_require_grads_hooks": len(emb._forward_hooks)},
    }


def setup_peft(sp):
    """probe.setup for a PEFT case: the same namespace, built the way a LoRA / QLoRA user
    builds the model."""
    from peft import get_peft_model

    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    c = argparse.Namespace()
    c.family, c.precision, c.attention = sp["family"], sp["precision"], sp["attention"]
    c.every_n, c.offload, c.b, c.s = sp["every_n"], sp["offload"], sp["b"], sp["s"]
    c.grad_accum, c.warmup = sp["grad_accum"], sp["warmup"]
    if sp["ckpt_api"] == "prepare" and (sp["every_n"] != 1 or sp["offload"] or sp["method"] != "qlora"):
        raise ValueError("ckpt_api 'prepare' is prepare_model_for_kbit_training's own call: qlora, every_n 1, no offload")
    hf = load_base(sp)
    hf.config.use_cache = False
    torch.manual_seed(0)  # the adapters' initialisation
    pm = get_peft_model(hf, lora_config(sp))
    if sp["every_n"] and sp["ckpt_api"] == "hf":
        pm.gradient_checkpointing_enable(every_n_layers=sp["every_n"], offload=sp["offload"])
    pm.train()
    c.amp = sp["precision"].startswith("amp-bf16")
    c.cuda_lists = sp["precision"] == "amp-bf16-cudalists"
    layers = probe.layers_of(hf, sp["family"])
    input_rg = {}

    def layer_in(i):
        def hook(mod, args, kwargs):
            hs = args[0] if args else kwargs.get("hidden_states")
            input_rg[i] = bool(getattr(hs, "requires_grad", False))
        return hook

    for i, l in enumerate(layers):
        l.register_forward_pre_hook(layer_in(i), with_kwargs=True)
    # bitsandbytes' first-forward changes (bias casts, Linear8bitLt state), before measuring
    before = {short(n_): dt(p) for n_, p in pm.named_parameters()}
    ids = torch.full(WARMUP_TOKENS, 5, dtype=torch.long)
    routed = len(probe.ROUTING) if probe.ROUTING is not None else 0
    with torch.no_grad(), (torch.autocast("cpu", dtype=torch.bfloat16) if c.amp else contextlib.nullcontext()), \
            (cuda_autocast_query() if c.cuda_lists else contextlib.nullcontext()):
        pm(input_ids=ids)
    if probe.ROUTING is not None:  # the MoE routers' counts of the measured steps only
        del probe.ROUTING[routed:]
    info = describe(pm, hf, sp, before)
    info["layer_input_requires_grad"] = input_rg
    _INFO.append(info)
    c.model = pm
    c.layers = layers
    c.ckpt_layers = [i for i, l in enumerate(layers) if getattr(l, "gradient_checkpointing", False)]
    c.nlayers = len(layers)
    c.params = list(pm.parameters())
    c.opt = make_optimizer(sp["optimizer"], [p for p in c.params if p.requires_grad])
    c.steps = probe.STEPS
    uniq = {p.untyped_storage()._cdata: p.untyped_storage().nbytes() for p in c.params}
    tr = [p for p in c.params if p.requires_grad]
    c.param_info = {"count": sum(p.numel() for p in c.params), "bytes": sum(uniq.values()), "tensors": len(c.params),
                    "trainable_count": sum(p.numel() for p in tr),
                    "trainable_bytes": sum(p.untyped_storage().nbytes() for p in tr)}
    gen = torch.Generator().manual_seed(1234)
    vocab = hf.config.vocab_size
    c.next_ids = lambda: torch.randint(3, vocab, (c.b, c.s), generator=gen)
    c.virtual_states = 0
    c.resident = [t for _, _, t in quant_tensors(hf)] if sp["method"] == "qlora" else []
    return c


@contextlib.contextmanager
def cuda_autocast_query():
    """torch.is_autocast_enabled() without a device asks about CUDA: False under CPU
    autocast, True under CUDA autocast. peft's bitsandbytes LoRA layers call it that way;
    for amp-bf16-cudalists it answers for the CPU autocast that stands in for CUDA's."""
    real = torch.is_autocast_enabled

    def query(*a, **k):
        return real(*a, **k) if (a or k) else real("cpu")

    torch.is_autocast_enabled = query
    try:
        yield
    finally:
        torch.is_autocast_enabled = real


# --------------------------------------------------------------------------
# one case
# --------------------------------------------------------------------------
def _short_tensor_names(t):
    for k in ("module", "param_name", "cast_of_param"):
        if t.get(k):
            t[k] = short(t[k])
    if t.get("produced_in"):
        region, _, mod = t["produced_in"].partition("/")
        t["produced_in"] = region + "/" + short(mod)


def _module_key(mod):
    """'layers.3.self_attn.q_proj.lora_A.default' -> 'self_attn.q_proj.lora_A'."""
    parts = (mod or "-").split(".")
    if len(parts) > 2 and parts[0] in ("layers", "h"):
        parts = parts[2:]
    return ".".join(p for p in parts if p != "default") or "-"


def run_case(sp, setup=None):
    """setup: setup_peft unless given (probe_vlm_peft.py passes its own, which appends to
    _INFO as setup_peft does)."""
    del _INFO[:]
    with cuda_autocast_query() if sp["precision"] == "amp-bf16-cudalists" else contextlib.nullcontext():
        fx = probe.run_case(sp, setup or setup_peft)
    info = _INFO[0]
    if len(_INFO) != 2 or _INFO[1] != info:
        raise RuntimeError("the two passes built different models")
    import bitsandbytes
    import peft

    fx["versions"].update(peft=peft.__version__, bitsandbytes=bitsandbytes.__version__)
    fx["config"].pop("_name_or_path", None)  # the temporary checkpoint from_pretrained read
    fx["case"] = sp["name"]
    st = fx["setting"]
    st["optimizer"] = sp["optimizer"]
    st["optimizer_impl"] = ("torch.optim.AdamW(fused=True) over the trainable parameters"
                            if sp["optimizer"] == "adamw_torch_fused" else
                            f"bitsandbytes.optim.AdamW(optim_bits={8 if '8bit' in sp['optimizer'] else 32}, "
                            f"is_paged={'paged' in sp['optimizer']}) over the trainable parameters"
                            + (" (on CPU paging falls back to plain tensors)" if "paged" in sp["optimizer"] else ""))
    if sp["precision"] == "amp-bf16-cudalists":
        st["autocast_query"] = "torch.is_autocast_enabled() answers for the CPU autocast (as under CUDA autocast)"
    ck = info["ckpt"]
    st["base_model_class"] = info["base_model_class"]
    st["ckpt_api"] = ck["api"]
    st["checkpoint_kwargs"] = ck["checkpoint_kwargs"]
    st["input_require_grads_hooks"] = ck["input_require_grads_hooks"]
    st["layer_input_requires_grad"] = [info["layer_input_requires_grad"].get(i) for i in range(len(fx["saved"]["layers"]))]
    # which checkpoint ran, as measured: the reentrant one saves the layer input through
    # CheckpointFunction's save_for_backward, the non-reentrant one from its frame (with
    # offload the input goes to save_on_cpu's hooks and neither shows: then the kwargs say)
    nodes = {n for l in fx["saved"]["layers"] if l["checkpointed"] for t in l["tensors"] for n in t["saved_by"]}
    if not fx["checkpointed_layers"]:
        st["use_reentrant"], st["use_reentrant_source"] = None, None
    elif "CheckpointFunctionBackward" in nodes:
        st["use_reentrant"], st["use_reentrant_source"] = True, "measured: CheckpointFunction saved the layer input"
    elif "CheckpointFrame.save_inputs" in nodes:
        st["use_reentrant"], st["use_reentrant_source"] = False, "measured: the checkpoint frame saved the layer input"
    else:
        st["use_reentrant"] = (ck["checkpoint_kwargs"] or {}).get("use_reentrant")
        st["use_reentrant_source"] = "checkpoint_kwargs (offload: the input goes to save_on_cpu's hooks)"
    for region in [fx["saved"]["embedding"], fx["saved"]["head"]] + fx["saved"]["layers"]:
        by_mod = {}
        for t in region["tensors"]:
            _short_tensor_names(t)
            if not t["param"]:
                k = _module_key(t["module"])
                by_mod[k] = by_mod.get(k, 0) + t["bytes"]
        region["bytes_by_module"] = by_mod
        region["adapter_bytes"] = sum(v for k, v in by_mod.items() if ".lora_" in k or "modules_to_save" in k)
    for s_ in fx["steps"]:
        s_["resident_extra_bytes"] = info["quant"]["stats_bytes_unique_storages"] if info["quant"] else 0
    out = {"schema": fx.pop("schema"), "case": fx.pop("case"), "method": sp["method"]}
    out.update(fx)
    out["lora"] = info["lora"]
    if info["quant"]:
        out["quant"] = info["quant"]
    for k in ("trainable_params", "all_params_peft", "print_trainable_parameters", "trainable", "param_dtypes",
              "param_kinds", "param_dtype_changes_in_first_forward"):
        out[k] = info[k]
    return out


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
    _CKPT_ROOT = tempfile.mkdtemp(prefix="gckpt-peft-")
    try:
        for c in {model_key(c): c for c in sel if c["method"] == "qlora"}.values():
            saved_tiny_model(c)
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
