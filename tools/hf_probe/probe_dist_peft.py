#!/usr/bin/env python3
"""Per-rank ground truth for LoRA / QLoRA on several ranks (issue 25 item 1): DDP, FSDP2
(fully_shard), HSDP (FSDP2 over accelerate's dp_replicate x dp_shard mesh, the `hsdp-*` cases)
and DeepSpeed ZeRO 1/2/3 under the HF Trainer, run for real on CPU with
probe_dist.py's machinery (the fake process group, one process per measured rank; the same
two passes, the same fixture schema gckpt.hf-fixture/1 + `parallel`, `collectives`,
`persistent`), the model built the way a PEFT user builds it:

  LoRA   model (fp32; `lb16`: .to(bf16), as from_pretrained(dtype=bf16) loads it)
         -> get_peft_model(LoraConfig(r=8, alpha=16, dropout 0.05, targets))
  QLoRA  from_pretrained(quantization_config=BitsAndBytesConfig(nf4, double quant, bf16 compute,
         bnb_4bit_quant_storage=S), dtype=bf16) -> prepare_model_for_kbit_training
         -> get_peft_model(...)

then model.gradient_checkpointing_enable(every_n_layers, offload) and the Trainer's
_prepare_for_training, which for FSDP runs transformers' update_fsdp_plugin_peft (peft's
fsdp_auto_wrap_policy; for QLoRA with a floating quant storage the MixedPrecisionPolicy in that
dtype) before accelerate's fsdp2_prepare_model.

Each fixture adds probe_peft.py's fields: method, lora, trainable_params, trainable,
param_dtypes, param_kinds (and quant for QLoRA), each as the rank holds it after the wrapper
(`param_kinds_after_wrap`: local shard bytes per kind).

Usage:
  probe_dist_peft.py --list
  probe_dist_peft.py --all                       # tests/data/hf-dist-peft
  probe_dist_peft.py --filter 'ddp-llama-*'
  probe_dist_peft.py --filter 'hsdp-*'           # 9 cases, 18 per-rank fixtures (ranks 0 and 3)
  probe_dist_peft.py --filter '*-fp32-*'         # fp32 LoRA under FSDP2 / HSDP: 7 cases, 14 fixtures (R-DISTPEFT-24)
  probe_dist_peft.py --tp --all                  # LoRA q,v under TP 2: tests/data/hf-tp-peft (FINDINGS R-TP-12)
  probe_dist_peft.py --cp --all                  # LoRA (and full fine-tuning with activation offload) under CP x FSDP2:
                                                 # tests/data/hf-cp-peft (FINDINGS R-CP-23..)
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
logging.getLogger("bitsandbytes").setLevel(logging.ERROR)

import torch  # noqa: E402

import probe  # noqa: E402
import probe_dist  # noqa: E402
import probe_peft  # noqa: E402

OUT = os.path.join(probe.ROOT, "tests", "data", "hf-dist-peft")
OUT_TP = os.path.join(probe.ROOT, "tests", "data", "hf-tp-peft")
OUT_CP = os.path.join(probe.ROOT, "tests", "data", "hf-cp-peft")
R, ALPHA, DROPOUT = 8, 16, 0.05
TARGETS = {"all": "all-linear", "qv": ["q_proj", "v_proj"],
           "col": ["q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"]}  # col: every colwise layer under TP
CKPT = [(0, False), (1, False), (2, False)]


def make_spec(mode, family, targets, every_n, world, method="lora", load="fp32", storage=None, offload=False,
              gloo=False, replicate=0, grad_accum=probe_dist.GRAD_ACCUM, bf16=True):
    """variant: lora-<targets>[-lb16] or qlora-nf4dq-s<storage>-<targets>; gloo: every rank as a
    process over gloo (real collectives and numerics; probe_dist.py's -gloo twins). replicate:
    HSDP (mode fsdp2 over accelerate's replicate x shard mesh, FINDINGS R-DIST-27), named
    `hsdp-...-w<world>-r<R>s<S>-<variant>[-ga<n>]`. bf16: the Trainer's bf16 (False: fp32, no mixed precision,
    `<mode>-<family>-fp32-...`)."""
    if method == "lora":
        var = f"lora-{targets}" + ("-lb16" if load == "bf16" else "")
    else:
        var = f"qlora-nf4dq-s{storage}-{targets}"
    if replicate:
        var = f"r{replicate}s{world // replicate}-{var}"
    if grad_accum != probe_dist.GRAD_ACCUM:
        var += f"-ga{grad_accum}"
    sp = probe_dist.make_spec(mode, family, every_n, offload, world, bf16=bf16, variant=var, gloo=gloo,
                              grad_accum=grad_accum, dp_replicate=replicate)
    if replicate:
        sp["name"] = "hsdp" + sp["name"][len(mode):]
    sp.update(method=method, targets=targets, r=R, alpha=ALPHA, dropout=DROPOUT, load=load,
              quant="nf4" if method == "qlora" else None, double_quant=True if method == "qlora" else None,
              compute_dtype="bf16" if method == "qlora" else None, storage=storage, load_dtype="bf16",
              modules_to_save=[], shape=None)
    return sp


def all_cases():
    out = []
    # LoRA on the fp32 model (the hf-dist fixtures' recipe: bf16=True): every mode, llama and
    # qwen3, all-linear and q,v, every_n off / 1 / 2
    for mode in probe_dist.MODES:
        for fam in ("llama", "qwen3"):
            for tg in ("all", "qv"):
                for n, off in CKPT:
                    if fam == "qwen3" and tg == "qv" and n == 2:
                        continue
                    out.append(make_spec(mode, fam, tg, n, 2, offload=off))
    # world 4: every mode, llama all-linear, every_n 1
    for mode in probe_dist.MODES:
        out.append(make_spec(mode, "llama", "all", 1, 4))
    # offload with every_n 2
    for mode in ("ddp", "fsdp2", "zero3"):
        out.append(make_spec(mode, "llama", "all", 2, 2, offload=True))
    # LoRA on a bf16-loaded model (frozen base bf16, adapters fp32): what FSDP2 upcasts, DeepSpeed casts
    for mode in probe_dist.MODES:
        out.append(make_spec(mode, "llama", "all", 1, 2, load="bf16"))
    # QLoRA: nf4 + double quant, storage uint8 (the default) and bf16 (the FSDP recipe)
    for mode in probe_dist.MODES:
        for st in ("uint8", "bf16"):
            out.append(make_spec(mode, "llama", "all", 1, 2, method="qlora", storage=st))
    # over gloo (real collectives): LoRA under DDP and FSDP2, FSDP2 + QLoRA with bf16 storage
    out += [make_spec("ddp", "llama", "all", 1, 2, gloo=True), make_spec("fsdp2", "llama", "all", 1, 2, gloo=True),
            make_spec("fsdp2", "llama", "all", 1, 2, method="qlora", storage="bf16", gloo=True)]
    # HSDP (2 x 2 mesh, world 4, fake ranks 0 and 3: one per replicate group): LoRA q,v and
    # all-linear over every_n off / 1 / 2, grad_accum 1 and 2; QLoRA with uint8 and bf16 storage
    for tg, n in (("all", 0), ("all", 1), ("all", 2), ("qv", 1)):
        out.append(make_spec("fsdp2", "llama", tg, n, 4, replicate=2))
    out.append(make_spec("fsdp2", "llama", "all", 1, 4, replicate=2, grad_accum=1))
    for st in ("uint8", "bf16"):
        out.append(make_spec("fsdp2", "llama", "all", 1, 4, method="qlora", storage=st, replicate=2))
    out.append(make_spec("fsdp2", "llama", "all", 1, 4, method="qlora", storage="bf16", replicate=2, grad_accum=1))
    # fp32 LoRA (the Trainer's bf16=False: no MixedPrecisionPolicy) under FSDP2, q,v and all-linear, every_n off /
    # 1 / 2, world 2; HSDP 2 x 2 all-linear every_n 1 (FINDINGS R-DISTPEFT-24)
    for tg in ("all", "qv"):
        for n, off in CKPT:
            out.append(make_spec("fsdp2", "llama", tg, n, 2, offload=off, bf16=False))
    out.append(make_spec("fsdp2", "llama", "all", 1, 4, replicate=2, bf16=False))
    return out


def tp_spec(targets, every_n, offload=False, bf16=True, gloo=False):
    """LoRA on transformers' TP 2 (FINDINGS R-TP-12): the tp_plan model of probe_dist.tp_spec (loaded with
    DistributedConfig(tp_size=2)), then get_peft_model. `tp-llama-<precision>-n<k>-<offload>-w2-t2-lora-<targets>`."""
    sp = probe_dist.tp_spec("llama", every_n, offload, 2, bf16=bf16, gloo=gloo)
    sp["name"] += f"-lora-{targets}"
    sp.update(method="lora", targets=targets, r=R, alpha=ALPHA, dropout=DROPOUT, load="fp32", quant=None,
              double_quant=None, compute_dtype=None, storage=None, load_dtype="bf16", modules_to_save=[], shape=None)
    return sp


def tp_cases():
    """q,v, and every colwise layer: peft's adapters of a colwise layer run under TP; a rowwise one's (o_proj, down_proj, all-linear)
    fail in the first forward (FINDINGS R-TP-13, tp_peft_check.py)."""
    out = [tp_spec("qv", n, off, bf16=bf16) for n, off in CKPT[:2] for bf16 in (True, False)]
    out.append(tp_spec("qv", 1, True))
    out.append(tp_spec("qv", 1, False, gloo=True))
    out.append(tp_spec("col", 1, False))  # every colwise layer (q, k, v, gate, up)
    return out


def cp_spec(targets, every_n, offload=False, cp=2, shard=1, bf16=True, method="lora", dropout=DROPOUT,
            storage=None, replicate=1):
    """LoRA on CP x FSDP2 (probe_dist.cp_spec: ParallelismConfig(dp_shard_size=S, cp_size=C) with the FSDP2
    plugin, the Trainer's _prepare_context_parallel_inputs per micro-step, R-CP-5's stand-in kernel), the PeftModel
    built as for the FSDP2 cases. `cp-llama-<precision>-n<k>-<offload>-w<world>-c<C>[s<S>]-lora-<targets>`;
    method "full": no adapters (probe_dist's own model), for CP with activation offload. replicate R > 1: HSDP with CP
    (probe_dist.cp_spec's ParallelismConfig(dp_replicate_size=R, ...), FINDINGS R-CP-17), `...-c<C>s<S>r<R>-...`."""
    sp = probe_dist.cp_spec(every_n, offload, cp, shard=shard, bf16=bf16, replicate=replicate)
    if method == "full":
        return sp
    if method == "qlora":  # nf4, double quantization, bf16 compute, the given storage (make_spec's QLoRA)
        sp["name"] += f"-qlora-nf4dq-s{storage}-{targets}"
        sp.update(method="qlora", targets=targets, r=R, alpha=ALPHA, dropout=dropout, load="fp32", quant="nf4",
                  double_quant=True, compute_dtype="bf16", storage=storage, load_dtype="bf16", modules_to_save=[],
                  shape=None)
        return sp
    sp["name"] += f"-lora-{targets}" + ("" if dropout == DROPOUT else f"-d{dropout:g}")
    sp.update(method="lora", targets=targets, r=R, alpha=ALPHA, dropout=dropout, load="fp32", quant=None,
              double_quant=None, compute_dtype=None, storage=None, load_dtype="bf16", modules_to_save=[], shape=None)
    return sp


def cp_cases():
    """CP 2 with LoRA q,v and all-linear, every_n off and 1, bf16 and fp32; CP 2 x dp_shard 2 and CP 4 (all-linear,
    every_n 1); activation offload (every_n 1 + offload) with LoRA and with full fine-tuning; all-linear with
    lora_dropout 0."""
    out = [cp_spec(tg, n, bf16=bf16) for tg in ("qv", "all") for n in (0, 1) for bf16 in (True, False)]
    out.append(cp_spec("all", 1, shard=2))
    out.append(cp_spec("all", 1, cp=4))  # three partial-merge ranks
    out += [cp_spec("all", 1, offload=True, bf16=bf16) for bf16 in (True, False)]
    out += [cp_spec(None, 1, offload=True, bf16=bf16, method="full") for bf16 in (True, False)]
    # lora_dropout 0: o_proj's adapter saves the attention output itself (the partial-merge copy kept, R-CP-23)
    out.append(cp_spec("all", 0, dropout=0.0))
    # QLoRA (nf4 + double quantization) with bf16 and uint8 storage, every_n 1
    out += [cp_spec("all", 1, method="qlora", storage=st) for st in ("bf16", "uint8")]
    # CP x HSDP (dp_replicate 2 x dp_shard 2 x cp 2, 8 ranks; R-CP-27): LoRA q,v and all-linear, every_n off and 1
    # (bf16: fp32 LoRA under HSDP is refused by peft_ok); activation offload with LoRA and full fine-tuning
    # (bf16 and fp32); QLoRA with bf16 storage
    out += [cp_spec(tg, n, shard=2, replicate=2) for tg in ("qv", "all") for n in (0, 1)]
    out.append(cp_spec("all", 1, offload=True, shard=2, replicate=2))
    out += [cp_spec(None, 1, offload=True, bf16=bf16, method="full", shard=2, replicate=2) for bf16 in (True, False)]
    out.append(cp_spec("all", 1, method="qlora", storage="bf16", shard=2, replicate=2))
    return out


# --------------------------------------------------------------------------
# the model each rank builds (probe_dist.MODEL_BUILDER)
# --------------------------------------------------------------------------
INFO = {}


def peft_spec(spec):
    """The spec probe_peft's helpers read."""
    sp = dict(spec, attention="sdpa", targets="all-linear" if spec["targets"] == "all" else "attn", ckpt_api="hf")
    if sp.get("config") is None:  # probe's own tiny config (probe_peft reads a missing key so)
        sp.pop("config", None)
    return sp


def build_peft_model(spec):
    from peft import LoraConfig, get_peft_model

    if spec.get("method") is None:  # full fine-tuning (cp_cases' offload twins): probe_dist's model
        INFO.clear()
        return probe_dist.build_model(spec)

    sp = peft_spec(spec)
    if spec["mode"] == "tp":  # transformers shards it at load (probe_dist.build_model); peft hooks the adapters
        hf = probe_dist.build_model(spec)
    elif spec["method"] == "lora":
        hf = probe.make_model(dict(spec, config=spec["config"]))
        if spec["load"] == "bf16":
            hf = hf.to(torch.bfloat16)
    else:
        sp = dict(sp, storage=spec["storage"])
        hf = probe_peft.load_base(dict(sp, ckpt_api="hf"))
    hf.config.use_cache = False
    torch.manual_seed(0)  # the adapters' initialisation
    cfg = LoraConfig(r=R, lora_alpha=ALPHA, lora_dropout=spec.get("dropout", DROPOUT), target_modules=TARGETS[spec["targets"]],
                     bias="none", task_type="CAUSAL_LM")
    pm = get_peft_model(hf, cfg)
    before = {probe_peft.short(n): probe_peft.dt(p) for n, p in pm.named_parameters()}
    info = probe_peft.describe(pm, hf, dict(sp, targets="all-linear"), before)  # its targets field: set below
    info["lora"]["targets"] = TARGETS[spec["targets"]]
    INFO.clear()
    INFO.update(info)
    return pm


def param_kinds(model):
    """type:dtype:trainable -> count, bytes of the rank's local tensors (DTensor: its shard;
    ZeRO-3: the partition ds_tensor, a parameter's own data is empty between uses)."""
    kinds = {}
    for _, p in model.named_parameters():
        t = probe_dist.local(p)
        if hasattr(p, "ds_tensor"):
            t = p.ds_tensor
        key = f"{type(p).__name__}:{probe_peft.dt(t)}:{'trainable' if p.requires_grad else 'frozen'}"
        k = kinds.setdefault(key, {"tensors": 0, "local_numel": 0, "local_bytes": 0})
        k["tensors"] += 1
        k["local_numel"] += t.numel()
        k["local_bytes"] += t.numel() * t.element_size()
    return kinds


def fixture_extra(fx, spec, c):
    import bitsandbytes
    import peft

    if spec.get("method") is None:  # full fine-tuning: probe_dist's fixture as it is
        return

    info = dict(INFO)
    fx["versions"].update(peft=peft.__version__, bitsandbytes=bitsandbytes.__version__)
    fx["method"] = spec["method"]
    fx["config"].pop("_name_or_path", None)
    fx["lora"] = info["lora"]
    if info["quant"]:
        fx["quant"] = info["quant"]
    for k in ("trainable_params", "all_params_peft", "print_trainable_parameters", "trainable", "param_dtypes",
              "param_kinds"):
        fx[k] = info[k]
    fx["param_kinds_after_wrap"] = param_kinds(c.model)
    fx["setting"]["load_dtype"] = "bfloat16" if spec["load"] == "bf16" or spec["method"] == "qlora" else "float32"


def rank_main(index, world, port, specs, out_dir, deepspeed_needed, fake_ranks=None, extra=None):
    """probe_dist.rank_main with the PEFT model and fields (set in the spawned process); extra:
    a fixture_extra of a probe built on this one (it calls fixture_extra itself)."""
    probe_dist.MODEL_BUILDER = build_peft_model
    probe_dist.FIXTURE_EXTRA = extra or fixture_extra
    # the tiny checkpoints QLoRA loads, saved once by the parent (a rank's save_pretrained under
    # a distributed state writes no weights on ranks other than 0)
    probe_peft._CKPT_ROOT = os.environ.get("GCKPT_DPEFT_CKPTS") or tempfile.mkdtemp(prefix=f"gckpt-dpeft-r{index}-")
    probe_dist.rank_main(index, world, port, specs, out_dir, deepspeed_needed, fake_ranks)


def run_offload_cases(sel, out, target, field):
    """The offload probes' parent (fsdp_offload_peft.py, zero_offload_peft.py): QLoRA's tiny
    checkpoints saved once, the cases run by target (a rank entry passing its fixture_extra to
    rank_main), then each rank's persistent bytes and fixture field printed. Returns run_batches'."""
    os.makedirs(out, exist_ok=True)
    probe_peft._CKPT_ROOT = os.environ["GCKPT_DPEFT_CKPTS"] = tempfile.mkdtemp(prefix="gckpt-dpeft-")
    try:
        for sp in {probe_peft.model_key(peft_spec(c)): c for c in sel if c.get("method") == "qlora"}.values():
            probe_peft.saved_tiny_model(peft_spec(sp))
        rc = probe_dist.run_batches(sel, out, target=target)
    finally:
        shutil.rmtree(probe_peft._CKPT_ROOT, ignore_errors=True)
    for c in sel:
        for r in c["fake_ranks"]:
            path = os.path.join(out, f"{c['name']}-r{r}.json")
            if os.path.exists(path):
                with open(path) as f:
                    fx = json.load(f)
                print(c["name"], f"r{r}", "persistent", fx["persistent"]["step2_start_bytes"],
                      json.dumps(fx[field], sort_keys=True))
    return rc


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help=f"default {OUT}; with --tp {OUT_TP}; with --cp {OUT_CP}")
    ap.add_argument("--tp", action="store_true", help="the LoRA-under-TP cases (tp_cases) instead")
    ap.add_argument("--cp", action="store_true", help="the LoRA-under-CP cases (cp_cases) instead")
    probe.add_selection_args(ap)
    a = ap.parse_args(argv)
    cases = tp_cases() if a.tp else cp_cases() if a.cp else all_cases()
    a.out = a.out or (OUT_TP if a.tp else OUT_CP if a.cp else OUT)
    if len({c["name"] for c in cases}) != len(cases):
        raise SystemExit("duplicate case names")
    sel = probe.selection(ap, a, cases)
    if sel is None:
        return 0
    os.makedirs(a.out, exist_ok=True)
    probe_peft._CKPT_ROOT = os.environ["GCKPT_DPEFT_CKPTS"] = tempfile.mkdtemp(prefix="gckpt-dpeft-")
    try:
        for sp in {probe_peft.model_key(peft_spec(c)): c for c in sel if c.get("method") == "qlora"}.values():
            probe_peft.saved_tiny_model(peft_spec(sp))
        return probe_dist.run_batches(sel, a.out, target=rank_main)
    finally:
        shutil.rmtree(probe_peft._CKPT_ROOT, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
