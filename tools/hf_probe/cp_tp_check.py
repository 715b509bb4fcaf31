#!/usr/bin/env python3
"""Context parallelism with transformers' tensor parallelism (FINDINGS R-CP-19): does the Trainer's path
build it? One process plays rank 0 of 4 on PyTorch's fake process group (the ranks' collectives are not
needed: every attempt below stops before the first step, or runs it on rank 0's shapes). Each case
loads the tiny llama with from_pretrained(distributed_config=DistributedConfig(...)) (transformers' only
tensor-parallel loader, which shards at load), then builds the Trainer with TrainingArguments(
parallelism_config=ParallelismConfig(cp_size=2)) (FSDP2 as accelerate requires on a GPU, R-CP-1; its GPU
checks shown a GPU run's state as probe_dist.py does), and records where it stops: the exception, its
message and the library frame that raised it (file:line under site-packages). A case that gets past
preparation runs one micro-step inside the Trainer's CP context and records that too.

  .venv/bin/python cp_tp_check.py            # prints one JSON object per case (seconds)
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import traceback
import warnings

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe  # noqa: E402
import probe_dist  # noqa: E402

WORLD = 4
CASES = [
    # TP over 2 ranks, CP over the other 2: DistributedConfig has no cp dimension
    dict(name="tp2-cp2", dist=dict(tp_size=2), cp=2),
    # the dense mesh filled with FSDP (fsdp 2 x tp 2 = 4 ranks), cp 2 on top
    dict(name="tp2-fsdp2-cp2", dist=dict(tp_size=2, fsdp_size=2), cp=2),
    # the tp_plan over every rank ("auto": tp_size = world), cp 2 on top
    dict(name="tpauto-cp2", dist=dict(tp_plan="auto"), cp=2),
    # the only sizes whose counts agree: pp_size 2 fills the world beside tp 2 and leaves dp_size 1, so the
    # Trainer's ParallelismConfig is tp 2 x cp 2 = 4 (pipeline stages stand where the cp ranks would be)
    dict(name="tp2-pp2-cp2", dist=dict(tp_size=2, pp_size=2), cp=2),
]


def site_frame(tb):
    """The innermost frame under site-packages: the library line that raised."""
    where = None
    for fr in traceback.extract_tb(tb):
        if "site-packages" in fr.filename:
            rel = fr.filename.split("site-packages/", 1)[1]
            where = f"{rel}:{fr.lineno} ({fr.name})"
    return where


def run_case(case, ckpt):
    import transformers
    from accelerate import ParallelismConfig
    from transformers.distributed import DistributedConfig

    probe_dist.ENV0 = probe_dist.ENV0 or dict(os.environ)
    probe_dist.reset_globals()
    out = dict(name=case["name"], distributed_config=case["dist"], parallelism_config=dict(cp_size=case["cp"]),
               world_size=WORLD, stage="from_pretrained")
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            ckpt, distributed_config=DistributedConfig(**case["dist"]), attn_implementation="sdpa")
        out["tp_size"] = getattr(model, "tp_size", None)
        out["stage"] = "Trainer"
        args = transformers.TrainingArguments(
            output_dir=tempfile.mkdtemp(prefix="gckpt-cptp-"), use_cpu=True, per_device_train_batch_size=2,
            max_steps=1, report_to=[], save_strategy="no", logging_strategy="no", fsdp=True,
            fsdp_config={"version": 2}, parallelism_config=ParallelismConfig(cp_size=case["cp"]))
        probe_dist.gpu_validation(fsdp=True)
        tr = transformers.Trainer(model=model, args=args)
        pc = tr.accelerator.parallelism_config
        out["accelerate_parallelism_config"] = {k: getattr(pc, k) for k in
                                                ("dp_replicate_size", "dp_shard_size", "tp_size", "cp_size")}
        out["stage"] = "prepare"
        probe_dist.force_distributed_type(tr, args, "fsdp2")
        wrapped, _ = tr._prepare_for_training(1, None, None)
        out["stage"] = "step"
        ids = torch.randint(3, model.config.vocab_size, (2, 32))
        ctx, inputs = transformers.Trainer._prepare_context_parallel_inputs(tr, wrapped, {"input_ids": ids,
                                                                                          "labels": ids.clone()})
        with ctx():
            wrapped(**inputs).loss.backward()
        out["stage"] = "ran"
    except Exception as e:  # noqa: BLE001 - the point: where it stops
        out.update(error=type(e).__name__, message=str(e).splitlines()[0][:400], raised_at=site_frame(e.__traceback__))
    return out


def main():
    from safetensors.torch import save_file
    from torch.testing._internal.distributed.fake_pg import FakeStore

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29591", RANK="0", WORLD_SIZE=str(WORLD), LOCAL_RANK="0",
                      LOCAL_WORLD_SIZE=str(WORLD), OMP_NUM_THREADS="1")
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=WORLD)
    import transformers

    transformers.logging.set_verbosity_error()
    ckpt = tempfile.mkdtemp(prefix="gckpt-cptp-ckpt-")
    m = probe.make_model(dict(family="llama", attention="sdpa", config=None))
    m.config.save_pretrained(ckpt)
    save_file({k: v.contiguous() for k, v in m.state_dict().items()}, os.path.join(ckpt, "model.safetensors"))
    import accelerate

    versions = dict(torch=torch.__version__, transformers=transformers.__version__, accelerate=accelerate.__version__)
    for case in CASES:
        print(json.dumps(dict(run_case(case, ckpt), versions=versions)), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
