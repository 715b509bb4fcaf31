#!/usr/bin/env python3
"""Does a LoRA / QLoRA model wrapped for several ranks compute what one process computes?
(R-DISTPEFT-7: FSDP2 shards a bf16-stored Params4bit and bitsandbytes re-wraps the gathered
tensor; the memory fixtures run on the fake process group, whose gathers are unfilled.)

Two ranks over gloo, each builds the case's model and wrapper with probe_dist.setup_dist (the
Trainer's _prepare_for_training) and runs one forward on the same token ids; the reference is
the same PEFT model built in the same process, unwrapped, under CPU autocast bf16 (DDP, as
accelerate runs it) or with its fp32 parameters cast to bf16 (FSDP2's MixedPrecisionPolicy). At
initialisation lora_B is zero, so both are the base model's loss (train mode, no grad: the
adapters' dropout acts on a zero branch; eval mode would make bitsandbytes repack 4-bit
weights for its CPU kernel). Printed per rank: the
relative L2 error of the wrapped model's logits against the reference's, next to the error one
zeroed weight (layer 0's q_proj) makes.

  .venv/bin/python dist_peft_numerics.py [CASE ...]   (default: the -gloo cases' non-gloo twins)
"""
from __future__ import annotations

import contextlib
import datetime
import os
import sys
import tempfile
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import probe_dist  # noqa: E402
import probe_dist_peft  # noqa: E402
import probe_peft  # noqa: E402

DEFAULT = ["ddp-llama-amp-bf16-n1-plain-w2-lora-all", "fsdp2-llama-bf16-n1-plain-w2-lora-all",
           "fsdp2-llama-bf16-n1-plain-w2-qlora-nf4dq-sbf16-all", "fsdp2-llama-bf16-n1-plain-w2-qlora-nf4dq-suint8-all",
           "ddp-llama-amp-bf16-n1-plain-w2-qlora-nf4dq-sbf16-all", "zero3-llama-bf16-n1-plain-w2-lora-all",
           "zero3-llama-bf16-n1-plain-w2-qlora-nf4dq-suint8-all", "zero3-llama-bf16-n1-plain-w2-qlora-nf4dq-sbf16-all",
           "zero2-llama-bf16-n1-plain-w2-qlora-nf4dq-suint8-all"]


def rank_main(rank, world, port, specs, ckpts, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world), OMP_NUM_THREADS="1", DS_ACCELERATOR="cpu")
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=300))
    if any(sp["mode"].startswith("zero") for sp in specs):
        import deepspeed

        with contextlib.redirect_stdout(sys.stderr):
            deepspeed.init_distributed(dist_backend="gloo")
    probe_dist.ENV0 = dict(os.environ)
    probe_dist.MODEL_BUILDER = probe_dist_peft.build_peft_model
    probe_peft._CKPT_ROOT = ckpts
    ids = torch.randint(3, 211, (2, 32), generator=torch.Generator().manual_seed(7))
    lines = []
    for spec in specs:
        probe_dist.reset_globals()  # no DeepSpeed config of the previous case (zero.Init at load)
        ref_model = probe_dist_peft.build_peft_model(spec)
        ref_model.train()  # eval + no grad would repack 4-bit weights for bitsandbytes' CPU kernel
        fsdp = spec["mode"] != "ddp"
        if fsdp:  # FSDP2's MixedPrecisionPolicy, DeepSpeed's bf16: fp32 parameters cast to bf16, buffers kept, no autocast
            for p in ref_model.parameters():
                if p.dtype == torch.float32:
                    p.data = p.data.to(torch.bfloat16)
        with torch.no_grad(), (contextlib.nullcontext() if fsdp else torch.autocast("cpu", dtype=torch.bfloat16)):
            ref = ref_model(input_ids=ids).logits.float()
            # the same model with the quantized / frozen weights of layer 0's q_proj zeroed: how far
            # a wrong weight moves the logits (the scale the error below is read against)
            w = ref_model.get_base_model().model.layers[0].self_attn.q_proj.base_layer.weight
            saved = w.data.clone()
            w.data.zero_()
            wrong = ref_model(input_ids=ids).logits.float()
            w.data.copy_(saved)
        del ref_model
        c = probe_dist.setup_dist(spec)
        with torch.no_grad():
            got = c.forward_model(input_ids=ids).logits.float()

        def rel(a):
            return float((a - ref).norm() / ref.norm())

        lines.append(f"{spec['name']} r{rank}: logits rel. L2 error {rel(got):.2e} "
                     f"(one weight zeroed: {rel(wrong):.2e})")
        probe_dist.LAST.clear()
        dist.barrier()
    with open(f"{out}.r{rank}", "w") as f:
        f.write("\n".join(lines) + "\n")
    dist.destroy_process_group()


def main(argv):
    names = argv or DEFAULT
    by = {c["name"]: c for c in probe_dist_peft.all_cases()}
    specs = [dict(by[n], fake_ranks=None) for n in names]
    ckpts = tempfile.mkdtemp(prefix="gckpt-dpeft-num-")
    probe_peft._CKPT_ROOT = ckpts
    for sp in specs:
        if sp["method"] == "qlora":
            probe_peft.saved_tiny_model(probe_dist_peft.peft_spec(sp))
    out = os.path.join(ckpts, "result")
    mp.spawn(rank_main, args=(2, probe_dist.free_port(), specs, ckpts, out), nprocs=2)
    for r in range(2):
        with open(f"{out}.r{r}") as f:
            sys.stdout.write(f.read())
    return 0


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main(sys.argv[1:]))
