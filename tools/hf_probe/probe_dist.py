#!/usr/bin/env python3
"""Per-rank ground truth for Hugging Face training on several ranks with activation
(gradient) checkpointing: DDP, FSDP2 (fully_shard) and DeepSpeed ZeRO 1/2/3, run for
real on CPU. Memory fixtures: one process per measured rank on PyTorch's fake process group
(it plays rank R of N alone; collectives return outputs of the right size, unfilled); the
`-gloo` twins: every rank as an OS process over gloo (sync_gloo.py), real numerics, but the
allocator misses some frees made on gloo's threads (FINDINGS R-PROBE-5).

Each rank builds its model, optimizer and wrapper with the HF Trainer's own code:
`Trainer._prepare_for_training` (TrainingArguments -> accelerate -> DDP / fully_shard /
deepspeed.initialize, the optimizer the Trainer creates: adamw_torch_fused). accelerate
refuses FSDP and DeepSpeed on a CPU (its state only turns them on for GPU-like devices),
so after the Trainer has built its Accelerator the probe sets the state's
distributed_type (and plugin) to what a GPU run gets; everything after that is the
Trainer's and accelerate's code. HSDP (`--set hsdp`: TrainingArguments(parallelism_config=
ParallelismConfig(dp_replicate_size, dp_shard_size)), FINDINGS R-DIST-27): accelerate's
ParallelismConfig._validate_accelerator, which refuses MULTI_CPU, runs its checks on what a GPU
run's Accelerator shows it (gpu_validation); each collective records its process group. The training loop is the Trainer's inner loop
(`accelerator.no_sync` for every micro-step but the last except under DeepSpeed, the
loss divided by the accumulation, DeepSpeed's `engine.backward(loss, scale_wrt_gas=False)`
then `engine.step()` at the boundary, `optimizer.step()`, `model.zero_grad()`).

Measured per rank with probe.py's two passes (run_case(spec, setup_fn)):
  * the storage tracker (a TorchDispatchMode): what autograd saves per region, what
    offload copies, and every c10d collective (op, dtype, bytes, step, micro-step,
    phase, region);
  * the allocator (torch.profiler, allocs.py), one recording from before the model is
    built to the end of the last step, live bytes counted from zero: DDP's buckets and
    the wrappers' flat buffers are in it although no Python reference reaches them.

One JSON per rank: tests/data/hf-dist/<case>-r<rank>.json, schema gckpt.hf-fixture/1
plus `parallel` (mode, world, rank, what the Trainer/accelerate/DeepSpeed configured),
`collectives` and `persistent`. dist_rules.py checks every fixture against closed forms.

Usage:
  probe_dist.py --list [--set full]
  probe_dist.py --all [--set full] [--out DIR]
  probe_dist.py --filter 'fsdp2-llama-*-w2' --case zero3-qwen3-bf16-n1-plain-w4
  probe_dist.py --set hsdp --all --out tests/data/hf-hsdp
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import functools
import gc
import json
import os
import socket
import sys
import tempfile
import time
import traceback
import types
import warnings

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe  # noqa: E402
import family_cases  # noqa: E402
import moe_cases  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(probe.ROOT, "tests", "data", "hf-dist")
MODES = ["ddp", "fsdp2", "zero1", "zero2", "zero3"]
FAMILIES = ["llama", "qwen3"]
CKPT = [(0, False), (1, False), (1, True), (2, False), (2, True)]
B, S, GRAD_ACCUM, STEPS, LR = 2, 32, 2, 2, 1e-3
# a wider llama (48 MB of fp32 weights) for DDP's bucket layout (first bucket 1 MiB, 25 MiB after)
WIDE = dict(model_type="llama", vocab_size=211, hidden_size=512, intermediate_size=1408, num_hidden_layers=4,
            num_attention_heads=8, num_key_value_heads=4, head_dim=64, max_position_embeddings=128,
            rms_norm_eps=1e-6, attention_dropout=0.0, bos_token_id=1, eos_token_id=2, pad_token_id=0)
# issue 13's tiny families with what changes a rank's bytes: gemma3_text's two rotary tables
# (local and global), gpt_neox's partial rotary (0.25) and biases, olmo2's full-width q/k
# norms, qwen3_moe's experts (3-D parameters) and router
OTHER_FAMILIES = {k: family_cases.VARIANTS[k] for k in ("gemma3_text", "gpt_neox", "olmo2")}
OTHER_FAMILIES["qwen3_moe"] = moe_cases.VARIANTS["qwen3_moe"]
# the tie (gemma3_text ties its head to the embedding by default; FSDP2 and ZeRO-3 planned it
# off by up to 2.7 %): the same model untied, and the tiny llama tied, FSDP2 / ZeRO-3, every_n 1;
# ZeRO-1/2 on the tied llama and gemma3_text
# issue 21 item 3: fp32 ZeRO-1/2 on a llama whose flat buffers split unevenly across ranks (vocab,
# hidden and intermediate chosen so that a rank's partition boundary falls inside a layer's
# attention weights), grad_accum 1 and 2
UNEVEN = dict(model_type="llama", vocab_size=503, hidden_size=72, intermediate_size=200, num_hidden_layers=3,
              num_attention_heads=6, num_key_value_heads=2, head_dim=12, max_position_embeddings=128,
              rms_norm_eps=1e-6, attention_dropout=0.0, bos_token_id=1, eos_token_id=2, pad_token_id=0)
TIE_VARIANTS = {"gemma3u": dict(family_cases.VARIANTS["gemma3_text"], tie_word_embeddings=False),
                "llamat": dict(probe.make_config("llama", "sdpa").to_dict(), tie_word_embeddings=True)}
# every DeepSpeed value the user leaves to the Trainer ("auto"), as HF's documented configs do
DS_AUTO = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
           "train_batch_size": "auto", "gradient_clipping": "auto", "bf16": {"enabled": "auto"}}


# --------------------------------------------------------------------------
# cases
# --------------------------------------------------------------------------
def precision_of(mode, bf16):
    """The activation recipe TrainingArguments(bf16=...) gives in that mode: DDP runs
    accelerate's autocast over fp32 weights, FSDP2's MixedPrecisionPolicy and DeepSpeed's
    bf16 run the forward on bf16 weights without autocast."""
    if not bf16:
        return "fp32"
    return "amp-bf16" if mode in ("ddp", "tp") else "bf16"


def case_name(mode, family, precision, every_n, offload, world, variant=""):
    ck = "off" if every_n == 0 else str(every_n)
    return (f"{mode}-{family}-{precision}-n{ck}-{'offload' if offload else 'plain'}-w{world}"
            + (f"-{variant}" if variant else ""))


def make_spec(mode, family, every_n, offload, world, bf16=True, variant="", config=None, gloo=False,
              grad_accum=GRAD_ACCUM, dp_replicate=0):
    """gloo: all ranks as processes over gloo (a twin of the fake-group case: real numerics and
    collectives; its allocator figures may miss frees, FINDINGS R-PROBE-5). Otherwise one process
    per measured rank on the fake process group: rank 0 and the last rank (ZeRO-3: rank 0 only:
    each forward checks by a broadcast from rank 0 that every rank traced as many submodules,
    which the fake broadcast fails on every other rank)."""
    prec = precision_of(mode, bf16)
    fake_ranks = None if gloo else ((0,) if mode == "zero3" else (0, world - 1))
    return dict(name=case_name(mode, family, prec, every_n, offload, world, variant + ("-gloo" if gloo else "")
                               if variant else ("gloo" if gloo else "")),
                mode=mode, family=family, fake_ranks=fake_ranks,
                precision=prec, bf16=bf16, attention="sdpa", every_n=every_n, offload=offload, b=B, s=S,
                grad_accum=grad_accum, world=world, variant=variant, config=config, foreach=False,
                record_setup=True, dp_replicate=dp_replicate)


def hsdp_spec(family, every_n, offload, replicate, shard, bf16=True, grad_accum=GRAD_ACCUM, gloo=False):
    """FSDP2 over accelerate's 2-D mesh (ParallelismConfig(dp_replicate_size, dp_shard_size)):
    `hsdp-...-w<world>-r<R>s<S>[-ga<n>]`; fake ranks 0 and the last (one per replicate group)."""
    world = replicate * shard
    ga = f"-ga{grad_accum}" if grad_accum != GRAD_ACCUM else ""
    sp = make_spec("fsdp2", family, every_n, offload, world, bf16=bf16, variant=f"r{replicate}s{shard}{ga}",
                   grad_accum=grad_accum, dp_replicate=replicate, gloo=gloo)
    sp["name"] = "hsdp" + sp["name"][len("fsdp2"):]
    return sp


def hsdp_cases():
    """HSDP (accelerate's ParallelismConfig, FINDINGS R-DIST-27): 2x2 over every checkpoint setting,
    bf16 and fp32, grad_accum 1 and 2; the degenerate 1x4 mesh (FSDP2 over 4 ranks); 2x4 and 4x2
    (tests/data/hf-hsdp: `--set hsdp`)."""
    out = []
    for n, off in CKPT:
        for bf16 in (True, False):
            for ga in (1, 2):
                if off and not bf16:
                    continue
                out.append(hsdp_spec("llama", n, off, 2, 2, bf16=bf16, grad_accum=ga))
    out.append(hsdp_spec("llama", 1, False, 1, 4))
    out.append(hsdp_spec("llama", 1, False, 2, 4))
    out.append(hsdp_spec("llama", 1, False, 4, 2))
    out.append(hsdp_spec("llama", 1, False, 2, 2, gloo=True))  # every rank a process over gloo: real reductions
    return out


def tp_spec(family, every_n, offload, tp, shard=1, bf16=True, gloo=False, grad_accum=GRAD_ACCUM, replicate=1,
            pure=False):
    """Tensor parallelism as transformers sets it up (FINDINGS R-TP-1): every rank loads the model with
    `from_pretrained(dir, distributed_config=DistributedConfig(tp_size=T, fsdp_size=S))` (tp_plan "auto": the
    model's base_model_tp_plan), the Trainer builds accelerate's ParallelismConfig(tp_size=T, dp_shard_size=S)
    from the model. `tp-<family>-<precision>-n<k>-<offload>-w<world>-t<T>[r<R>][s<S>]`; bf16=True is the Trainer's
    autocast over fp32 weights (no wrapper casts them). replicate R > 1: DistributedConfig(dp_replicate_size=R) too,
    transformers' HSDP mesh (pp, dp_replicate, fsdp, tp) with FSDP2 over (dp_replicate, fsdp) (FINDINGS R-TP-11);
    the Trainer then gives accelerate ParallelismConfig(tp_size=T, dp_shard_size=R x S).
    pure=True: pure bf16 (`tp-<family>-bf16-...`): from_pretrained(..., dtype=torch.bfloat16) with the Trainer's
    bf16=False (no autocast: the single-process "bf16" recipe; FINDINGS R-TP-22)."""
    world = tp * shard * replicate
    ga = f"-ga{grad_accum}" if grad_accum != GRAD_ACCUM else ""
    kv4 = family == "llama" and tp == 4
    sp = make_spec("tp", family, every_n, offload, world, bf16=bf16,
                   variant=f"t{tp}" + (f"r{replicate}" if replicate > 1 else "") + (f"s{shard}" if shard > 1 else "")
                   + ("-kv4" if kv4 else "") + ga, gloo=gloo,
                   grad_accum=grad_accum, config=dict(KV4) if kv4 else None)
    sp.update(tp=tp, dp_shard=shard, tp_replicate=replicate)
    if pure:
        sp.update(name=sp["name"].replace("-amp-bf16-", "-bf16-", 1), precision="bf16", bf16=False, load_dtype="bfloat16")
    return sp


# TP 4 needs the key/value heads divisible by 4 (the tiny llama's 2 are not: the attention's view of a k_proj
# shard of half a head fails in the forward, FINDINGS R-TP-2): the same llama with 4 key/value heads (MHA)
KV4 = dict(probe.make_config("llama", "sdpa").to_dict(), num_key_value_heads=4)


def tp_cases():
    """TP 2 and 4 (tiny llama) over every checkpoint setting, fp32 and bf16 autocast; qwen3 (its per-head norms'
    gradient all-reduce) at TP 2; TP 2 x FSDP 2 (transformers' own fully_shard over the fsdp dim); gloo twins."""
    out = []
    for tp in (2, 4):
        for n, off in CKPT:
            for bf16 in (True, False):
                if off and not bf16:
                    continue
                out.append(tp_spec("llama", n, off, tp, bf16=bf16))
    for n, off in ((0, False), (1, False)):
        out.append(tp_spec("qwen3", n, off, 2))
        out.append(tp_spec("llama", n, off, 2, shard=2))
        out.append(tp_spec("llama", n, off, 2, shard=2, bf16=False))
    out.append(tp_spec("llama", 1, False, 2, grad_accum=1))
    out.append(tp_spec("llama", 1, False, 2, gloo=True))
    out.append(tp_spec("llama", 1, False, 4, gloo=True))
    out.append(tp_spec("llama", 1, False, 2, shard=2, gloo=True))
    # DDP x TP through transformers (DistributedConfig(tp_size=2, dp_replicate_size=2): FSDP2 over a (2, 1) mesh)
    for n, off in ((0, False), (1, False)):
        out.append(tp_spec("llama", n, off, 2, replicate=2))
        out.append(tp_spec("llama", n, off, 2, replicate=2, bf16=False))
    out.append(tp_spec("llama", 1, False, 2, replicate=2, grad_accum=1))
    out.append(tp_spec("llama", 1, False, 2, replicate=2, gloo=True))
    # HSDP x TP (DistributedConfig(tp_size=2, fsdp_size=2, dp_replicate_size=2): 8 ranks)
    out.append(tp_spec("llama", 1, False, 2, shard=2, replicate=2))
    out.append(tp_spec("llama", 0, False, 2, shard=2, replicate=2, bf16=False))
    out.extend(tp_bf16_cases())
    out.extend(tp_sgd_cases())
    return out


def tp_bf16_cases():
    """Pure bf16 under TP (FINDINGS R-TP-22): T 2 and 4, every_n off and 1, offload, the gloo twin at T 2."""
    out = [tp_spec("llama", n, off, tp, pure=True) for tp in (2, 4) for n, off in CKPT[:3]]
    out.append(tp_spec("llama", 1, False, 2, gloo=True, pure=True))
    out.extend(tp_bf16_fsdp_cases())
    return out


def tp_sgd_cases():
    """SGD (momentum 0.9) under TP 2, fp32, every_n off and 1 (FINDINGS R-TP-23)."""
    out = []
    for n in (0, 1):
        sp = tp_spec("llama", n, False, 2, bf16=False)
        sp.update(name=sp["name"] + "-sgd", optimizer="sgd")
        out.append(sp)
    return out


def tp_bf16_fsdp_cases():
    """TP 2 x FSDP 2 and TP 2 x DDP 2 (dp_replicate) under pure bf16, every_n off and 1 (FINDINGS R-TP-24,
    R-TP-30: FSDP2 without a MixedPrecisionPolicy keeps and sends the bf16 shards; tests/data/hf-tp)."""
    return [tp_spec("llama", n, False, 2, pure=True, **kw) for kw in (dict(shard=2), dict(replicate=2))
            for n in (0, 1)]


def cp_spec(every_n, offload, cp, shard=1, bf16=True, gloo=False, replicate=1):
    """Context parallelism as accelerate sets it up on a GPU (FINDINGS R-CP-1): TrainingArguments(fsdp (version 2),
    parallelism_config=ParallelismConfig(dp_shard_size=S, cp_size=C)): FSDP2 over the flattened dp_shard_cp mesh
    (C x S ranks), each CP group's C ranks one batch, each a different piece of the sequence (the Trainer's
    _prepare_context_parallel_inputs and accelerate's context_parallel() around every micro-step), torch's ring
    attention with the per-block CUDA SDPA kernel stood in by the CPU flash kernel (cp_ring_rerun.install_cpu_ring,
    R-CP-5). replicate R > 1: ParallelismConfig(dp_replicate_size=R, ...) too, HSDP with CP: FSDP2 over accelerate's
    (dp_replicate, dp_shard_cp) mesh (FINDINGS R-CP-17). `cp-llama-<precision>-n<k>-<offload>-w<world>-c<C>[s<S>][r<R>]`;
    fake ranks 0 and the last."""
    world = cp * shard * replicate
    sp = make_spec("fsdp2", "llama", every_n, offload, world, bf16=bf16,
                   variant=f"c{cp}" + (f"s{shard}" if shard > 1 else "") + (f"r{replicate}" if replicate > 1 else ""),
                   gloo=gloo, dp_replicate=replicate if replicate > 1 else 0)
    sp["name"] = "cp" + sp["name"][len("fsdp2"):]
    sp.update(cp=cp, dp_shard=shard)
    return sp


# attention wider than the model (16 heads of 64 over hidden 64): the ring's buffers outweigh the MLP's, so the
# step's peak falls inside a ring attention call (FINDINGS R-CP-11)
WIDE_ATTN = dict(probe.make_config("llama", "sdpa").to_dict(), num_attention_heads=16, num_key_value_heads=16,
                 head_dim=64)


def cp_cases():
    """CP 2 alone (FSDP2 over its 2 ranks), CP 2 x dp_shard 2, CP 4, CP 2 x dp_shard 2 x dp_replicate 2; every_n
    off and 1; bf16 and fp32; the wide-attention llama at CP 2; on 16 ranks CP 4 x 2 x 2 and CP 2 x 2 x 4
    (tests/data/hf-cp-fsdp: `--set cp`)."""
    out = []
    for n in (0, 1):
        for bf16 in (True, False):
            out.append(cp_spec(n, False, 2, bf16=bf16))
            out.append(cp_spec(n, False, 2, shard=2, bf16=bf16))
            wide = cp_spec(n, False, 2, bf16=bf16)
            wide.update(config=dict(WIDE_ATTN), name=wide["name"].replace("cp-llama", "cp-llamawide"))
            out.append(wide)
        out.append(cp_spec(n, False, 4))
        for bf16 in (True, False):  # HSDP with CP: dp_replicate 2 x dp_shard 2 x cp 2 (R-CP-17)
            out.append(cp_spec(n, False, 2, shard=2, replicate=2, bf16=bf16))
    # 16 ranks: cp 4 under HSDP, and 4 replicas
    out.append(cp_spec(1, False, 4, shard=2, replicate=2))
    out.append(cp_spec(0, False, 2, shard=2, replicate=4, bf16=False))
    return out


def all_cases(which="default"):
    """tp: tp_cases(). hsdp: hsdp_cases(). default: every mode x family x checkpoint setting at world 2, at world 4 every mode for
    llama with every_n off / 1 / 2+offload, world 8 for FSDP2 and ZeRO-2/3, fp32 and the
    variants at world 2, and the gloo twins. full: every family and setting at worlds 2 and 4."""
    if which == "hsdp":
        return hsdp_cases()
    if which == "tp":
        return tp_cases()
    if which == "tp-bf16-fsdp":
        return tp_bf16_fsdp_cases()
    if which == "cp":
        return cp_cases()
    out = []
    for mode in MODES:
        for fam in FAMILIES:
            for n, off in CKPT:
                for w in (2, 4):
                    if which == "full" or w == 2 or (fam == "llama" and (n, off) in ((0, False), (1, False), (2, True))):
                        out.append(make_spec(mode, fam, n, off, w))
    for mode in ("fsdp2", "zero2", "zero3"):
        for n, off in ((0, False), (1, False), (2, True)):
            out.append(make_spec(mode, "llama", n, off, 8))
    # variants (llama, world 2)
    for n, off in ((0, False), (1, False)):
        for mode in MODES:
            out.append(make_spec(mode, "llama", n, off, 2, bf16=False))       # fp32: no autocast / mixed precision
        out.append(make_spec("ddp", "llama", n, off, 2, variant="wide", config=WIDE))  # several DDP buckets
        out.append(make_spec("fsdp2", "llama", n, off, 2, variant="nrf"))       # reshard_after_forward False
        out.append(make_spec("zero2", "llama", n, off, 2, variant="overlap"))   # overlap_comm: two ipg buckets
        out.append(make_spec("zero3", "llama", n, off, 2, variant="tight"))     # gathered weights released at once
    # every mode over gloo, all ranks as processes
    for mode in MODES:
        out.append(make_spec(mode, "llama", 1, False, 2, gloo=True))
    # families other than llama / qwen3 (their buffers and layouts per rank): issue 13's tiny
    # configurations, DDP / FSDP2 / ZeRO-3 at world 2
    for fam, cfg in OTHER_FAMILIES.items():
        for mode in ("ddp", "fsdp2", "zero3"):
            for n, off in ((0, False), (1, False)):
                out.append(make_spec(mode, fam, n, off, 2, config=dict(cfg)))
    for fam, cfg in TIE_VARIANTS.items():
        for mode in ("fsdp2", "zero3"):
            out.append(make_spec(mode, fam, 1, False, 2, config=dict(cfg)))
    # ZeRO-1/2 with a tied head (planned as the untied rules): the tied llama and gemma3_text
    for fam, cfg in (("llamat", TIE_VARIANTS["llamat"]), ("gemma3_text", OTHER_FAMILIES["gemma3_text"])):
        for mode in ("zero1", "zero2"):
            out.append(make_spec(mode, fam, 1, False, 2, config=dict(cfg)))
    # fp32 ZeRO-1/2 per rank (issue 21): the uneven llama, every_n 1 / off, grad_accum 1 and 2
    for mode in ("zero1", "zero2"):
        for n in (1, 0):
            for ga in (1, 2):
                out.append(make_spec(mode, "llamau", n, False, 2, bf16=False, variant=f"ga{ga}", config=dict(UNEVEN),
                                     grad_accum=ga))
    # grad_accum 3 and 4 (every mode, tiny llama, world 2): the micro-steps between the first and
    # the synchronising one (FINDINGS R-DIST-26): what each mode communicates there and keeps
    for mode in MODES:
        for n in (1, 0):
            for ga in (3, 4):
                out.append(make_spec(mode, "llama", n, False, 2, variant=f"ga{ga}", grad_accum=ga))
    return out


# --------------------------------------------------------------------------
# the Trainer's configuration of each mode
# --------------------------------------------------------------------------
def ds_config(spec):
    """What a user writes: the stage and "auto" for everything the Trainer can fill in."""
    zero = {"stage": int(spec["mode"][-1]), "reduce_bucket_size": "auto"}
    if zero["stage"] == 3:
        zero.update(stage3_prefetch_bucket_size="auto", stage3_param_persistence_threshold="auto")
    if spec["variant"] == "overlap":
        zero["overlap_comm"] = True
    if spec["variant"] == "tight":
        zero.update(stage3_max_live_parameters=0, stage3_max_reuse_distance=0, stage3_prefetch_bucket_size=0)
    cfg = dict(copy.deepcopy(DS_AUTO), zero_optimization=zero)
    if not spec["bf16"]:
        cfg.pop("bf16")
    return cfg


def training_args(spec, out_dir):
    import transformers

    kw = dict(output_dir=out_dir, use_cpu=True, bf16=spec["bf16"], per_device_train_batch_size=spec["b"],
              gradient_accumulation_steps=spec["grad_accum"], max_steps=STEPS, learning_rate=LR,
              # clipping off, as in the single-process fixtures (the Trainer's default is 1.0)
              max_grad_norm=0.0, report_to=[], save_strategy="no", logging_strategy="no",
              gradient_checkpointing=bool(spec["every_n"]),
              gradient_checkpointing_kwargs=({"every_n_layers": spec["every_n"], "offload": spec["offload"]}
                                             if spec["every_n"] else None))
    if spec["mode"] == "fsdp2":
        kw.update(fsdp=True, fsdp_config={"version": 2, "reshard_after_forward": spec["variant"] != "nrf"})
        if spec.get("cpu_offload"):  # CPUOffloadPolicy through the Trainer (fsdp_offload_peft.py, R-DISTPEFT-12)
            kw["fsdp_config"]["cpu_offload"] = True
        if spec.get("cp"):  # CP: FSDP2 over dp_shard_cp (accelerate requires it on a GPU, FINDINGS R-CP-1)
            from accelerate import ParallelismConfig

            kw.update(parallelism_config=ParallelismConfig(dp_replicate_size=spec.get("dp_replicate") or 1,
                                                           dp_shard_size=spec["dp_shard"], cp_size=spec["cp"]))
        elif spec.get("dp_replicate"):  # HSDP: TrainingArguments(parallelism_config=...) (accelerate >= 1.10)
            from accelerate import ParallelismConfig

            kw.update(parallelism_config=ParallelismConfig(dp_replicate_size=spec["dp_replicate"],
                                                           dp_shard_size=spec["world"] // spec["dp_replicate"]))
    elif spec["mode"].startswith("zero"):
        kw.update(deepspeed=ds_config(spec))
    shown = {k: v for k, v in kw.items() if k not in ("output_dir",)}
    if "parallelism_config" in shown:
        pc = shown["parallelism_config"]
        shown["parallelism_config"] = {k: getattr(pc, k) for k in ("dp_replicate_size", "dp_shard_size", "tp_size",
                                                                   "cp_size")}
    return transformers.TrainingArguments(**kw), shown


def fake_pg_allreduce_hook(state, bucket):
    """DDP's default communication (all-reduce of the bucket, divided by the world size, both in
    place on the bucket) for the fake process group, whose futures carry no value (the reducer
    asserts on that). Same tensors, same bytes."""
    buf = bucket.buffer()
    dist.all_reduce(buf)
    buf.div_(dist.get_world_size())
    fut = torch.futures.Future()
    fut.set_result(buf)
    return fut


def force_distributed_type(tr, args, mode):
    """accelerate turns FSDP and DeepSpeed on only for GPU-like devices; set its state to what
    a GPU run gets (Accelerator.__init__ / AcceleratorState: the plugin, its mixed precision
    from the state, and for DeepSpeed mixed_precision "no" and no native amp)."""
    from accelerate.utils import DistributedType

    st = tr.accelerator.state
    if mode == "fsdp2":
        from accelerate.utils import FullyShardedDataParallelPlugin

        plugin = FullyShardedDataParallelPlugin(**args.fsdp_plugin_args)
        if st.mixed_precision != "no":  # AcceleratorState.__init__ does the same
            plugin.set_mixed_precision(st.mixed_precision)
        st.fsdp_plugin = plugin
        st.distributed_type = DistributedType.FSDP
        tr.is_fsdp_enabled = True
    elif mode.startswith("zero"):
        plugin = args.deepspeed_plugin
        plugin.set_mixed_precision(st.mixed_precision)
        plugin.select(_from_accelerator_state=True)
        st.deepspeed_plugins = plugin
        st.distributed_type = DistributedType.DEEPSPEED
        st._mixed_precision = "no"
        tr.accelerator.native_amp = False
        tr.is_deepspeed_enabled = True


ENV0 = None  # the rank's environment before any case (TrainingArguments sets ACCELERATE_* variables)


def reset_globals():
    """Each case starts from the rank's pristine state: environment, accelerate's singletons,
    transformers' DeepSpeed config reference."""
    os.environ.clear()
    os.environ.update(ENV0)
    from accelerate.state import AcceleratorState, GradientState
    from transformers.integrations.deepspeed import unset_hf_deepspeed_config

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    unset_hf_deepspeed_config()
    gc.collect()


# --------------------------------------------------------------------------
# setup_fn for probe.run_case
# --------------------------------------------------------------------------
LAST = {}  # what the last setup built (for the fixture's parallel section)
TRACKER = {}  # the storage pass's DistProbe (its collectives)


def local(t):
    from torch.distributed.tensor import DTensor

    return t._local_tensor if isinstance(t, DTensor) else t


TP_DIRS = {}  # (family, config) -> the tiny model saved once per process, for from_pretrained


def build_model(spec):
    """The model each rank builds before the Trainer (fp32, the probe's tiny config or spec["config"]).
    TP: the same model saved and loaded back with from_pretrained(distributed_config=DistributedConfig(...)),
    which shards it at load (transformers' DistributedMixin.maybe_distribute_model)."""
    if spec["mode"] != "tp":
        return probe.make_model(dict(spec, config=spec["config"]))
    import transformers
    from transformers.distributed import DistributedConfig

    key = (spec["family"], json.dumps(spec["config"], sort_keys=True))
    if key not in TP_DIRS:
        d = tempfile.mkdtemp(prefix="gckpt-tp-")
        # written by hand: save_pretrained writes on the distributed rank 0 only (should_save_on_this_rank)
        from safetensors.torch import save_file

        m = probe.make_model(dict(spec, config=spec["config"]))
        m.config.save_pretrained(d)
        save_file({k: v.contiguous() for k, v in m.state_dict().items()}, os.path.join(d, "model.safetensors"))
        del m
        TP_DIRS[key] = d
        gc.collect()
    cfg = DistributedConfig(tp_size=spec["tp"], fsdp_size=spec["dp_shard"], dp_replicate_size=spec.get("tp_replicate", 1))
    model = transformers.AutoModelForCausalLM.from_pretrained(TP_DIRS[key], distributed_config=cfg,
                                                              attn_implementation=spec["attention"],
                                                              dtype=getattr(torch, spec.get("load_dtype", "float32")))
    model.config.use_cache = False  # as probe.make_model (the Trainer's use_cache False)
    # FINDINGS R-TP-3: the loader takes each rank's slice of the checkpoint tensor and moves it with
    # `.to(device)`: on a GPU a copy of the slice alone; on the CPU a no-op, leaving a view into the mmapped
    # file (outside the allocator, and a row slice's storage is the whole tensor). Copy each local tensor as the
    # move to the GPU does, so the allocator sees what a GPU rank holds.
    from torch.distributed.tensor import DTensor

    with torch.no_grad():
        for p in model.parameters():
            if isinstance(p, DTensor):
                p._local_tensor = p._local_tensor.clone()
            else:
                p.data = p.data.clone()
        for b in model.buffers():
            b.data = b.data.clone()
    return model


# what setup_dist builds the model with; probe_dist_peft.py sets its own (a PeftModel) in each rank
MODEL_BUILDER = build_model


def gpu_validation(fsdp=True):
    """accelerate's ParallelismConfig._validate_accelerator refuses MULTI_CPU (its allowed types
    are FSDP2, Multi{GPU-like device} and DeepSpeed); run it on what a GPU run's Accelerator shows
    it (distributed_type FSDP, fsdp version 2), its checks otherwise its own."""
    from accelerate.parallelism_config import ParallelismConfig
    from accelerate.utils import DistributedType

    orig = getattr(ParallelismConfig._validate_accelerator, "__wrapped__", ParallelismConfig._validate_accelerator)

    @functools.wraps(orig)
    def validate(self, accelerator):
        seen = types.SimpleNamespace(multi_device=True, num_processes=accelerator.num_processes, is_fsdp2=fsdp,
                                     distributed_type=DistributedType.FSDP if fsdp else DistributedType.MULTI_GPU,
                                     is_main_process=accelerator.is_main_process)
        return orig(self, seen)

    ParallelismConfig._validate_accelerator = validate


def cp_step(c, tr, wrapped, hf, outer):
    """Each micro-step as Trainer.training_step runs it under CP: _prepare_context_parallel_inputs on the batch
    (shift_labels and position_ids made on the whole sequence, the buffers split in place by context_parallel),
    forward and backward inside the context. The probe hands the forward input_ids = labels = ids; the context is
    entered there (the ids are known) and left with the micro-step."""
    from transformers import Trainer

    live = {}

    def forward(input_ids=None, labels=None):
        inputs = {"input_ids": input_ids, "labels": labels.clone()}
        ctx, inputs = Trainer._prepare_context_parallel_inputs(tr, wrapped, inputs)
        cm = ctx()
        cm.__enter__()
        live["cm"] = cm
        return wrapped(**inputs)

    @contextlib.contextmanager
    def micro(m):
        with outer(m):
            try:
                yield
            finally:
                cm = live.pop("cm", None)
                if cm is not None:
                    cm.__exit__(None, None, None)

    c.forward_model = forward
    c.micro_context = micro


def setup_dist(spec):
    import transformers

    reset_globals()
    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    rank, world = dist.get_rank(), dist.get_world_size()
    model = MODEL_BUILDER(spec)  # fp32; probe's tiny config or spec["config"] (probe_dist_peft: a PeftModel)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    n_tensors = len(list(model.parameters()))
    if spec["every_n"]:  # what Trainer.train() does with gradient_checkpointing_kwargs before preparing
        model.gradient_checkpointing_enable(every_n_layers=spec["every_n"], offload=spec["offload"])
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # a PeftModel's HF model
    layers = probe.layers_of(base, spec["family"])
    ckpt_layers = [i for i, l in enumerate(layers) if getattr(l, "gradient_checkpointing", False)]
    tmp = tempfile.mkdtemp(prefix="gckpt-dist-")
    args, args_kw = training_args(spec, tmp)
    if spec.get("cp"):
        import cp_ring_rerun  # the per-block CPU flash kernel in torch's ring (R-CP-5)

        if not getattr(cp_ring_rerun, "_installed", False):
            cp_ring_rerun.install_cpu_ring()
            cp_ring_rerun._installed = True
    if spec.get("dp_replicate") or spec["mode"] == "tp" or spec.get("cp"):
        # TP: the Trainer hands accelerate ParallelismConfig(tp_size, dp_shard_size) and no FSDP plugin (the model
        # is sharded already), so a GPU run's Accelerator is MULTI_GPU
        gpu_validation(fsdp=spec["mode"] != "tp")
    # optimizer "sgd": the one gckpt's snippet passes (torch.optim.SGD, momentum 0.9; FINDINGS R-TP-23)
    opts = ((torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9), None) if spec.get("optimizer") == "sgd"
            else (None, None))
    tr = transformers.Trainer(model=model, args=args, optimizers=opts)
    force_distributed_type(tr, args, spec["mode"])
    wrapped, _ = tr._prepare_for_training(STEPS, None, None)
    if spec["mode"] == "ddp" and spec["fake_ranks"]:
        wrapped.register_comm_hook(None, fake_pg_allreduce_hook)
    acc = tr.accelerator
    ds = spec["mode"].startswith("zero")
    hf = wrapped.module if hasattr(wrapped, "module") else wrapped  # DDP / DeepSpeedEngine hold the HF model

    c = types.SimpleNamespace()
    c.family, c.precision, c.attention = spec["family"], spec["precision"], spec["attention"]
    c.every_n, c.offload, c.b, c.s, c.grad_accum = spec["every_n"], spec["offload"], spec["b"], spec["s"], spec["grad_accum"]
    c.warmup, c.steps, c.virtual_states = "step", STEPS, 0
    c.model, c.forward_model, c.opt = hf, wrapped, tr.optimizer
    c.layers, c.ckpt_layers, c.nlayers = layers, ckpt_layers, len(layers)
    c.params = list(hf.parameters())
    c.amp = c.cuda_lists = False  # DDP: accelerate's own autocast wrapper runs inside the forward
    c.param_info = {"count": n_params, "tensors": n_tensors, "bytes": n_params * (2 if spec.get("load_dtype") == "bfloat16" else 4),
                    "dtype_at_load": spec.get("load_dtype", "float32")}
    # each data-parallel rank draws its own micro-batches; the ranks of a TP group (the mesh's innermost dim) share one
    # (CP: the ranks of a CP group, the mesh's cp dim inside dp_shard, likewise: process_index // (tp x cp))
    gen = torch.Generator().manual_seed(1234 + rank // (spec.get("tp", 1) * spec.get("cp", 1)))
    c.next_ids = lambda: torch.randint(3, hf.config.vocab_size, (c.b, c.s), generator=gen)
    micro = {"n": 0}

    def micro_context(m):
        # Trainer._run_epoch: sync_gradients set per micro-step; no_sync except the last (not under DeepSpeed)
        last = m == c.grad_accum
        micro["last"] = last
        acc.gradient_state._set_sync_gradients(last)
        if spec["mode"] == "fsdp2":
            # a later AcceleratorState() (inside prepare) copies PartialState's MULTI_CPU back; a GPU
            # run has FSDP here, so that no_sync takes its FSDP2 branch (set_requires_gradient_sync)
            from accelerate.utils import DistributedType

            acc.state.distributed_type = DistributedType.FSDP
        if ds or last:
            return contextlib.nullcontext()
        if spec["mode"] == "tp" and spec["dp_shard"] * spec.get("tp_replicate", 1) > 1:  # transformers' own FSDP2
            return tr._defer_fsdp_gradient_reduction()
        return acc.no_sync(model=wrapped)

    c.micro_context = micro_context
    if spec.get("cp"):
        cp_step(c, tr, wrapped, hf, micro_context)
    if ds:
        def run_backward(loss):
            # accelerate's DeepSpeedEngineWrapper.backward, with the engine.step() it makes at the
            # boundary moved to optimizer_step (nothing runs between them in the Trainer)
            wrapped.set_gradient_accumulation_boundary(is_boundary=micro["last"])
            wrapped.backward(loss, scale_wrt_gas=False)

        c.run_backward = run_backward
        c.optimizer_step = wrapped.step
    else:
        c.optimizer_step = tr.optimizer.step  # accelerate's AcceleratedOptimizer
    c.zero_grad = wrapped.zero_grad  # the Trainer's model.zero_grad()
    c.state_tensors = functools.partial(state_tensors, c)
    c.probe_class = functools.partial(DistProbe, hf, world)
    LAST.clear()
    LAST.update(tr=tr, wrapped=wrapped, hf=hf, args_kw=args_kw, c=c)
    return c


def opt_states(c):
    """The torch optimizer's state tensors (under DeepSpeed: the optimizer it wraps)."""
    o = c.opt.optimizer if hasattr(c.opt, "optimizer") else c.opt  # accelerate's wrappers
    o = getattr(o, "optimizer", o)  # DeepSpeed's ZeRO optimizers wrap the torch one
    return [v for s_ in o.state.values() for v in s_.values() if isinstance(v, torch.Tensor)]


def state_tensors(c):
    """probe.state_tensors for a wrapped model: local shards of DTensors."""
    ps = [local(p) for p in c.model.parameters()]
    return ps, [local(p.grad) for p in c.model.parameters() if p.grad is not None], list(c.model.buffers()), [
        local(t) for t in opt_states(c)]


class LiveParams:
    """probe.Probe.params for wrappers that swap parameter storages (FSDP2's unsharded
    parameters, ZeRO-3's gathered ones): a storage is a parameter while a parameter of
    the model uses it."""

    def __init__(self, model):
        self.model = model

    def _now(self):
        out = {}
        for n, p in self.model.named_parameters():
            st = probe._storage(local(p))
            if st is not None:
                out.setdefault(st._cdata, n)
        return out

    def get(self, key, default=None):
        return self._now().get(key, default)

    def __contains__(self, key):
        return key in self._now()

    def __getitem__(self, key):
        return self._now()[key]

    def __setitem__(self, key, value):
        pass


def tensor_bytes(x):
    if isinstance(x, torch.Tensor):
        x = local(x)
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(tensor_bytes(y) for y in x)
    return 0


def first_dtype(x):
    if isinstance(x, torch.Tensor):
        return str(x.dtype).replace("torch.", "")
    if isinstance(x, (list, tuple)):
        for y in x:
            d = first_dtype(y)
            if d:
                return d
    return None


# c10d op -> (kind, which argument holds the full-size buffer)
COLLECTIVES = {
    "allreduce_": ("all_reduce", 0), "allreduce_coalesced_": ("all_reduce", 0), "broadcast_": ("broadcast", 0),
    "_allgather_base_": ("all_gather", 0), "allgather_": ("all_gather", 0),
    "allgather_into_tensor_coalesced_": ("all_gather", 0), "allgather_coalesced_": ("all_gather", 0),
    "_reduce_scatter_base_": ("reduce_scatter", 1), "reduce_scatter_": ("reduce_scatter", 1),
    "reduce_scatter_tensor_coalesced_": ("reduce_scatter", 1), "reduce_": ("reduce", 0),
    "all_reduce": ("all_reduce", 0), "all_reduce_": ("all_reduce", 0),
    "all_gather_into_tensor": ("all_gather", "x_world"), "reduce_scatter_tensor": ("reduce_scatter", 0),
}
# _wrap_tensor_autograd: DTensor's functional collectives wrap their output for autograd (no communication)
SKIP = {"barrier", "monitored_barrier_", "wait_tensor", "send", "recv_", "_wrap_tensor_autograd"}


def bus_factor(kind, n):
    """Per-rank ring traffic / buffer bytes (nccl-tests' busBw convention)."""
    return {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n, "reduce_scatter": (n - 1) / n}.get(kind, 1.0)


def group_of(args):
    """(size, global ranks) of the process group a c10d op runs on (its ProcessGroup argument;
    a functional op's group name), None when none is found."""
    from torch.distributed import distributed_c10d as c10d

    for a in args:
        pg = None
        if isinstance(a, dist.ProcessGroup):
            pg = a
        elif isinstance(a, torch.ScriptObject):  # the dispatcher's boxed ProcessGroup (or a ReduceOp)
            try:
                pg = dist.ProcessGroup.unbox(a)
            except Exception:  # noqa: BLE001 - not a process group
                pg = None
        elif isinstance(a, str):
            try:
                pg = c10d._resolve_process_group(a)
            except Exception:  # noqa: BLE001 - not a group name
                pg = None
        if pg is not None:
            try:
                ranks = dist.get_process_group_ranks(pg)
            except Exception:  # noqa: BLE001 - the default group of a fake world
                ranks = list(range(pg.size()))
            return pg.size(), ranks
    return None


class DistProbe(probe.Probe):
    """The storage tracker, with the wrapper's live parameters and every collective."""

    def __init__(self, model, world):
        super().__init__()
        self.params = LiveParams(model)
        self.world = world
        self.step = 0
        self.collectives = []
        TRACKER["probe"] = self

    def event(self, name):
        if name == "step.start":
            self.step += 1
        super().event(name)

    def pack(self, t):
        """A DTensor autograd saves (TP's sharded weights and its DTensor activations) counts as the rank's local
        tensor: its shape, storage and bytes; the handle keeps the DTensor for the backward."""
        from torch.distributed.tensor import DTensor

        if isinstance(t, DTensor):
            h = super().pack(t._local_tensor)
            if h.meta is not None:
                h.meta["dtensor"] = {"shape": list(t.shape), "placements": [str(x) for x in t.placements]}
            return probe.SavedHandle(t.detach(), h.meta)
        return super().pack(t)

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        if func.namespace in ("c10d", "_c10d_functional") and func.overloadpacket.__name__ not in SKIP:
            name = func.overloadpacket.__name__
            kind, arg = COLLECTIVES.get(name, (name, 0))
            group = group_of(args)
            size = group[0] if group else self.world
            full = tensor_bytes(args[0]) * size if arg == "x_world" else tensor_bytes(args[arg])
            self.collectives.append({
                "step": self.step, "micro": self.micro, "phase": self.phase, "region": self.region,
                "op": f"{func.namespace}.{name}", "kind": kind, "dtype": first_dtype(args[0]), "bytes": full,
                "bus_bytes": round(full * bus_factor(kind, size)),
                "group_size": size, "group_ranks": group[1] if group else None})
        return super().__torch_dispatch__(func, types_, args, kwargs)


# --------------------------------------------------------------------------
# what the wrappers built (fixture "parallel" / "persistent")
# --------------------------------------------------------------------------
def wrapper_tensors(obj, out, depth=0, seen=None):
    """Every tensor reachable from a DeepSpeed optimizer's attributes (depth-limited)."""
    seen = set() if seen is None else seen
    if id(obj) in seen or depth > 6:
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        out.append(obj)
        return
    if isinstance(obj, dict):
        items = list(obj.values())
    elif isinstance(obj, (list, tuple, set)):
        items = list(obj)
    elif isinstance(obj, torch.nn.Module) or not type(obj).__module__.startswith("deepspeed"):
        return
    else:
        items = list(getattr(obj, "__dict__", {}).values())
    for v in items:
        wrapper_tensors(v, out, depth + 1, seen)


def storage_bytes(tensors):
    """data pointer -> bytes of each storage (by pointer: DeepSpeed's flat buffers and the
    parameters viewing them can be distinct storage objects over the same memory)."""
    seen = {}
    for t in tensors:
        st = probe._storage(local(t))
        if st is not None and st.nbytes():
            seen[st.data_ptr()] = max(seen.get(st.data_ptr(), 0), st.nbytes())
    return seen


def persistent_breakdown(c, wrapped, mode, live_end):
    """Bytes reachable from Python at the end of the run, by kind, each storage once; the
    rest of the allocator's live bytes is `unreached` (DDP's buckets)."""
    kinds = {}
    claimed = set()
    ps, gr, bu, st = state_tensors(c)
    groups = [("parameters", ps), ("grads", gr), ("buffers", bu), ("optimizer_states", st)]
    if mode.startswith("zero"):
        extra = []
        wrapper_tensors(wrapped.optimizer, extra)
        for p in c.model.parameters():
            if hasattr(p, "ds_tensor"):
                extra.append(p.ds_tensor)
        groups.append(("deepspeed", extra))
    if mode == "fsdp2" or (mode == "tp" and any(hasattr(m, "_get_fsdp_state") for m in c.model.modules())):
        extra = []
        for m in c.model.modules():
            if hasattr(m, "_get_fsdp_state"):
                for g in m._get_fsdp_state()._fsdp_param_groups:
                    for fp in g.fsdp_params:
                        for a in ("_sharded_param_data", "_unsharded_param"):
                            t = getattr(fp, a, None)
                            if isinstance(t, torch.Tensor):
                                extra.append(t)
                mesh = m._get_fsdp_state()._fsdp_param_groups
        groups.append(("fsdp", extra))
    for kind, ts in groups:
        b = {k: v for k, v in storage_bytes(ts).items() if k not in claimed}
        claimed.update(b)
        kinds[kind] = sum(b.values())
    kinds["unreached"] = live_end - sum(kinds.values())
    return kinds


def parallel_info(spec, c, wrapped, tr, args_kw):
    mode = spec["mode"]
    info = {"mode": mode, "world_size": dist.get_world_size(), "rank": dist.get_rank(),
            **({"process_group": "fake", "processes": "one process playing this rank alone (FakeStore)"}
               if spec["fake_ranks"] else
               {"process_group": "gloo", "processes": "one per rank (torch.multiprocessing spawn), sync_gloo.py"}),
            "variant": spec["variant"] or None,
            "trainer_args": {k: v for k, v in args_kw.items() if k not in ("report_to",)},
            "built_by": "Trainer._prepare_for_training (transformers), accelerate's prepare"}
    if mode == "ddp":
        from accelerate.utils import DistributedDataParallelKwargs

        handler = tr.accelerator.ddp_handler
        log = wrapped._get_ddp_logging_data()
        info["ddp"] = {
            "kwargs_passed": handler.to_kwargs() if handler else {},
            "find_unused_parameters": wrapped.find_unused_parameters,
            "gradient_as_bucket_view": wrapped.gradient_as_bucket_view,
            "static_graph": wrapped.static_graph, "broadcast_buffers": wrapped.broadcast_buffers,
            "bucket_bytes_cap": wrapped._bucket_config.bucket_bytes_cap,
            "first_bucket_bytes_cap": wrapped._bucket_config.first_bucket_bytes_cap,
            "bucket_sizes_at_construction": [int(x) for x in str(log.get("bucket_sizes", "")).split(", ") if x],
            "bucket_sizes_after_rebuild": [int(x) for x in str(log.get("rebuilt_bucket_sizes", "")).split(", ")
                                           if x],
            "rebuilt_per_bucket_param_indices": str(log.get("rebuilt_per_bucket_param_indices", "")),
            "can_set_static_graph": bool(log.get("can_set_static_graph", 0)),
            "accelerate_defaults": DistributedDataParallelKwargs().__dict__ if False else None,
            "autocast": "accelerate prepare_model: forward = convert_outputs_to_fp32(autocast(cpu, bf16)(forward))"
                        if spec["bf16"] else None,
        }
        info["ddp"].pop("accelerate_defaults")
    elif mode == "fsdp2":
        from torch.distributed.fsdp import FSDPModule

        plugin = tr.accelerator.state.fsdp_plugin
        units = []
        names = {m: n for n, m in c.model.named_modules()}
        for m in c.model.modules():
            if not isinstance(m, FSDPModule):
                continue
            st = m._get_fsdp_state()
            for g in st._fsdp_param_groups:
                units.append({
                    "modules": [names.get(mm, "?") for mm in g.modules] if hasattr(g, "modules") else [names.get(m)],
                    "reshard_after_forward": bool(g.post_forward_mesh_info is not None),
                    "params": [{"shape": list(fp._orig_size), "local_rows": int(local(fp.sharded_param).shape[0]),
                                "padded_local_numel": int(fp._sharded_param_data.numel())}
                               for fp in g.fsdp_params],
                })
        mp_ = plugin.mixed_precision_policy
        mesh = tr.accelerator.torch_device_mesh
        pc = tr.accelerator.parallelism_config
        if spec.get("dp_replicate"):
            fm = mesh[tuple(pc.fsdp_dim_names)]
            info["mesh"] = {
                "accelerate_mesh": {"dim_names": list(mesh.mesh_dim_names), "shape": list(mesh.mesh.shape),
                                    "ranks": mesh.mesh.tolist()},
                "fsdp_dim_names": list(pc.fsdp_dim_names),
                "fsdp_mesh_shape": list(fm.mesh.shape),
                "shard_group_ranks": dist.get_process_group_ranks(fm.get_group(fm.ndim - 1)),
                "replicate_group_ranks": dist.get_process_group_ranks(fm.get_group(0)) if fm.ndim == 2 else None,
                "mesh_info": sorted({type(g.mesh_info).__name__ for m in c.model.modules()
                                     if hasattr(m, "_get_fsdp_state") for g in m._get_fsdp_state()._fsdp_param_groups}),
            }
        info["fsdp2"] = {
            "reshard_after_forward": plugin.reshard_after_forward,
            "mp_policy": {k: (str(getattr(mp_, k)).replace("torch.", "") if getattr(mp_, k, None) is not None else None)
                          for k in ("param_dtype", "reduce_dtype", "output_dtype", "cast_forward_inputs")}
            if mp_ is not None else None,
            "offload_policy": type(plugin.cpu_offload).__name__ if plugin.cpu_offload is not None else None,
            "units": units,
        }
    elif mode == "tp":
        info["tp"] = tp_info(spec, c, tr)
    else:
        eng = wrapped
        ds_cfg = tr.accelerator.state.deepspeed_plugin.deepspeed_config
        zc = eng.zero_optimization() and eng._config.zero_config
        info["deepspeed"] = {
            "ds_config_written": ds_config(spec),
            # as plain JSON: DeepSpeed's steps_per_print is float("inf") -> "Infinity" (a string)
            "ds_config_resolved": json.loads(json.dumps(ds_cfg, default=str), parse_constant=str),
            "optimizer": type(eng.optimizer).__name__,
            "wrapped_optimizer": type(getattr(eng.optimizer, "optimizer", None)).__name__,
            "zero": {k: (v if isinstance(v, (int, float, bool, str)) or v is None else str(v))
                     for k, v in zc.model_dump().items()} if zc else None,
            "dtype": str(eng.get_data_types()[0]).replace("torch.", "") if hasattr(eng, "get_data_types") else None,
        }
    return info


def tp_info(spec, c, tr):
    """What transformers' tp_plan did to each parameter on this rank (placements over the TP mesh, local shape),
    the mesh, accelerate's ParallelismConfig as the Trainer built it, the FSDP2 units over the fsdp dim."""
    from torch.distributed.tensor import DTensor

    hf = c.model
    params = []
    for n, p in hf.named_parameters():
        d = {"name": n, "shape": list(p.shape), "dtype": str(p.dtype).replace("torch.", "")}
        if isinstance(p, DTensor):
            d.update(placements=[str(x) for x in p.placements], mesh_dims=list(p.device_mesh.mesh_dim_names or ()),
                     local_shape=list(p._local_tensor.shape))
        else:
            d.update(placements=None, local_shape=list(p.shape))
        params.append(d)
    pc = tr.accelerator.parallelism_config
    mesh = hf._device_mesh
    units = []
    for m in hf.modules():
        if hasattr(m, "_get_fsdp_state"):
            for g in m._get_fsdp_state()._fsdp_param_groups:
                units.append({"params": [list(fp._orig_size) for fp in g.fsdp_params],
                              "reshard_after_forward": bool(g.post_forward_mesh_info is not None)})
    dcfg = hf.config.distributed_config
    return {
        "loaded_with": f"from_pretrained(dir, distributed_config=DistributedConfig(tp_size={spec['tp']}, "
                       f"fsdp_size={spec['dp_shard']}" + (f", dp_replicate_size={spec['tp_replicate']}"
                                                           if spec.get("tp_replicate", 1) > 1 else "") + "))",
        "distributed_config": {k: getattr(dcfg, k) for k in ("tp_size", "fsdp_size", "dp_replicate_size", "pp_size",
                                                              "ep_size", "fsdp_mixed_precision", "fsdp_cpu_offload",
                                                              "enable_sequence_parallel")},
        "tp_plan": dict(hf.tp_plan),
        "is_distributed_loading_by_transformers": bool(getattr(hf, "is_distributed_loading_by_transformers", False)),
        "device_mesh": {"dim_names": list(mesh.mesh_dim_names), "shape": list(mesh.mesh.shape),
                        "ranks": mesh.mesh.tolist()} if mesh is not None else None,
        "accelerate_parallelism_config": {k: getattr(pc, k) for k in ("dp_replicate_size", "dp_shard_size", "tp_size",
                                                                      "cp_size")} if pc is not None else None,
        "params": params,
        "fsdp_units": units,
    }


def collectives_summary(log, world):
    """Per step: kind x dtype x phase -> calls, bytes, bus bytes."""
    out = {}
    for r in log:
        if r["step"] < 1:
            continue
        key = f"{r['kind']}/{r['dtype']}/{r['phase']}"
        if r.get("group_size", world) != world:  # a subgroup (HSDP's shard / replicate groups)
            key += f"/group{r['group_size']}"
        d = out.setdefault(str(r["step"]), {}).setdefault(key, {"calls": 0, "bytes": 0, "bus_bytes": 0})
        d["calls"] += 1
        d["bytes"] += r["bytes"]
        d["bus_bytes"] += r["bus_bytes"]
    return out


def run_one(spec):
    rank = dist.get_rank()
    fx = probe.run_case(spec, setup_dist)  # storage pass, then allocator pass (each builds its own Trainer)
    c, wrapped, tr = LAST["c"], LAST["wrapped"], LAST["tr"]
    sgd = spec.get("optimizer") == "sgd"
    fx["setting"].update(optimizer="sgd" if sgd else "adamw",
                         optimizer_impl="torch.optim.SGD(momentum=0.9), passed to the Trainer" if sgd else
                         "the Trainer's adamw_torch_fused (torch.optim.AdamW, "
                         "fused=True)" + (", wrapped by DeepSpeed's ZeRO optimizer" if spec["mode"].startswith("zero")
                                          else ""), micro_batch_per_rank=spec["b"],
                         global_batch=spec["b"] * spec["grad_accum"] * dist.get_world_size())
    if fx["setting"].get("model_class") is None:
        fx["setting"]["model_class"] = type(c.model).__name__
    fx["parallel"] = parallel_info(spec, c, wrapped, tr, LAST["args_kw"])
    import accelerate

    fx["versions"]["accelerate"] = accelerate.__version__
    if "deepspeed" in sys.modules:
        fx["versions"]["deepspeed"] = sys.modules["deepspeed"].__version__
    log = TRACKER.pop("probe").collectives
    fx["collectives"] = {
        "source": "storage pass (TorchDispatchMode on the c10d ops); bytes: all-reduce/broadcast buffer, "
                  "all-gather output, reduce-scatter input; bus_bytes = bytes x 2(N-1)/N (all-reduce), (N-1)/N "
                  "(all-gather, reduce-scatter)",
        "per_step": collectives_summary(log, dist.get_world_size()),
        "step2_calls": [{k: r[k] for k in ("micro", "phase", "region", "op", "dtype", "bytes", "group_size",
                                           "group_ranks") if k in r} for r in log if r["step"] == STEPS],
    }
    live_end = fx["steps"][-1]["live_at_end_bytes"]
    fx["persistent"] = {
        "step2_start_bytes": fx["steps"][-1]["live_at_start_bytes"],
        "end_bytes": live_end,
        "reachable_at_end": persistent_breakdown(c, wrapped, spec["mode"], live_end),
    }
    if FIXTURE_EXTRA is not None:
        FIXTURE_EXTRA(fx, spec, c)
    LAST.clear()
    return fx


# probe_dist_peft.py: adds the adapters' and quantization's fields to each rank's fixture
FIXTURE_EXTRA = None


# --------------------------------------------------------------------------
# processes
# --------------------------------------------------------------------------
def rank_main(index, world, port, specs, out_dir, deepspeed_needed, fake_ranks=None):
    """One rank. fake_ranks: this process plays rank fake_ranks[index] of `world` alone, on
    PyTorch's fake process group (collectives return at once with outputs of the right
    size, unfilled: the memory is a real rank's, the numbers are not)."""
    global ENV0
    rank = fake_ranks[index] if fake_ranks else index
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world), OMP_NUM_THREADS="1",
                      DS_ACCELERATOR="cpu")
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    if fake_ranks:
        from torch.testing._internal.distributed.fake_pg import FakeStore

        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    else:
        import sync_gloo  # gloo, each collective released on this thread (see sync_gloo.py)

        sync_gloo.register()
        dist.init_process_group("syncgloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=180))
    if deepspeed_needed:
        import deepspeed  # noqa: F401  (DS_ACCELERATOR=cpu: its CPU accelerator over gloo)

        with contextlib.redirect_stdout(sys.stderr):
            deepspeed.init_distributed(dist_backend="gloo")  # JIT-builds deepspeed_shm_comm_op once
    import transformers  # noqa: F401

    ENV0 = dict(os.environ)
    failures = 0
    for spec in specs:
        t0 = time.time()
        try:
            fx = run_one(spec)
            path = os.path.join(out_dir, f"{spec['name']}-r{rank}.json")
            with open(path + ".tmp", "w") as f:
                f.write(probe.dumps_fixture(fx))
            os.replace(path + ".tmp", path)
            msg = f"ok   {spec['name']} r{rank} ({time.time() - t0:.1f}s)"
        except Exception:  # noqa: BLE001
            failures += 1
            msg = f"FAIL {spec['name']} r{rank}\n{traceback.format_exc()}"
        print(msg, flush=True)
        dist.barrier()
    dist.destroy_process_group()
    if failures:
        sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_batches(specs, out_dir, target=None):
    """One process group per world size and mode (a mode's globals cannot leak into the next).
    target: the rank's entry point (default rank_main; probe_dist_peft.py passes its own)."""
    target = target or rank_main
    batches = {}
    for sp in specs:
        batches.setdefault((sp["world"], sp["mode"], tuple(sp["fake_ranks"] or ())), []).append(sp)
    t0, bad = time.time(), 0
    for (world, mode, fake), sps in sorted(batches.items()):
        try:
            ranks = list(fake) if fake else None
            mp.spawn(target, args=(world, free_port(), sps, out_dir, mode.startswith("zero"), ranks),
                     nprocs=len(ranks) if fake else world)
        except Exception as e:  # noqa: BLE001 - a rank failed: its message is above
            print(f"FAIL batch world {world} {mode}: {e}", flush=True)
            bad += 1
    print(f"{len(specs)} cases ({sum(len(sp['fake_ranks'] or range(sp['world'])) for sp in specs)} per-rank fixtures), {bad} failed batches, "
          f"{time.time() - t0:.0f}s", flush=True)
    return 1 if bad else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", choices=["default", "full", "hsdp", "tp", "tp-bf16-fsdp", "cp"], default="default",
                    help="default: all modes at world 2, a subset at world 4; full: every case at both; "
                         "hsdp: FSDP2 over accelerate's 2-D mesh (tests/data/hf-hsdp); tp: tensor parallelism, "
                         "transformers' tp_plan (tests/data/hf-tp); tp-bf16-fsdp: TP x FSDP under pure bf16 (FINDINGS R-TP-24, "
                         "not fixtures); cp: context parallelism over FSDP2 (tests/data/hf-cp-fsdp)")
    ap.add_argument("--out", default=OUT)
    probe.add_selection_args(ap)
    a = ap.parse_args(argv)
    cases = all_cases(a.set)
    sel = probe.selection(ap, a, cases)
    if sel is None:
        return 0
    if any(sp["mode"].startswith("zero") for sp in sel):
        try:
            import deepspeed  # noqa: F401
        except ImportError:
            raise SystemExit("DeepSpeed cases need the optional stack: tools/hf_probe/setup-deepspeed.sh")
    os.makedirs(a.out, exist_ok=True)
    return run_batches(sel, a.out)


if __name__ == "__main__":
    sys.exit(main())
