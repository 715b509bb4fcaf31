#!/usr/bin/env python3
"""FSDP2's CPUOffloadPolicy with LoRA / QLoRA under the Trainer, run on the CPU (FINDINGS
R-DISTPEFT-12). The hf-dist-peft cases (probe_dist_peft.py: tiny llama, all-linear r 8,
Trainer bf16=True, grad_accum 2, fake process group, ranks 0 and 1 of 2) with
TrainingArguments(fsdp_config={"version": 2, "cpu_offload": True}): the Trainer, accelerate
and fully_shard run as they would on a GPU (accelerate's FullyShardedDataParallelPlugin turns
cpu_offload into CPUOffloadPolicy(pin_memory=True)).

What a CPU run can and cannot see. The host is the device here: `.cpu()` and the H2D `.to(device)`
return the same tensor, so the allocator's peak and persistent bytes are those of the run without
offload, and nothing says what would sit in host memory on a GPU. `Tensor.pin_memory()` needs a
CUDA driver, so it is replaced by the identity (the page-locking is the only thing it adds on a
CPU). What is recorded from FSDP2's own objects instead:
  * which parameters FSDP manages with offload_to_cpu (frozen ones too), in which dtype and with
    how many padded local elements (`_sharded_param_data`: what would be pinned on the host);
  * every H2D copy FSDP would make: each call of FSDPParam.all_gather_inputs in the SHARDED state
    with offload_to_cpu (`_sharded_param_data.to(device)`), its bytes, per step and per trainable /
    frozen / dtype;
  * every D2H copy: the parameters foreach_reduce is handed (the ones with a gradient) with offload,
    the bytes of their unpadded sharded gradient in the sharded parameter's dtype, per step;
  * after the run: which sharded parameters have a .grad, and the optimizer's parameters and
    states (elements, dtype).
Not seen: pinned memory, the copies' time and streams, the CPU optimizer step's time, CUDA.
Steps are counted by an optimizer step hook over the whole run: probe.run_case's storage pass is
steps 1-2, its allocator pass steps 3-4 (each pass builds its own Trainer).

Usage: fsdp_offload_peft.py [--out DIR] [--filter GLOB]  (7 cases, 2 fake ranks each, ~7 min on 2 cores;
the hsdp-* ones over accelerate's 2 x 2 mesh, ranks 0 and 3)
"""
from __future__ import annotations

import argparse
import fnmatch
import os
import sys
import tempfile

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

import probe_dist
import probe_dist_peft

OUT = os.path.join(tempfile.gettempdir(), "gckpt-fsdp-offload-peft")
REC = {"step": 1, "h2d": [], "d2h": []}


def dt(t):
    return str(t.dtype).replace("torch.", "")


def cases():
    out = []
    for method, storage in (("lora", None), ("qlora", "bf16"), ("qlora", "uint8")):
        sp = probe_dist_peft.make_spec("fsdp2", "llama", "all", 1, 2, method=method, storage=storage)
        sp["cpu_offload"] = True
        sp["name"] = sp["name"].replace("-plain-", "-plain-cpuoff-")
        out.append(sp)
    # LoRA in fp32 (the Trainer's bf16=False, R-DISTPEFT-24): no MixedPrecisionPolicy, every shard fp32
    sp = probe_dist_peft.make_spec("fsdp2", "llama", "all", 1, 2, bf16=False)
    sp["cpu_offload"] = True
    sp["name"] = sp["name"].replace("-plain-", "-plain-cpuoff-")
    out.append(sp)
    # HSDP: accelerate's 2 x 2 mesh (R-DISTPEFT-11's cases), fake ranks 0 and 3 (R-DISTPEFT-17)
    for method, storage in (("lora", None), ("qlora", "bf16"), ("qlora", "uint8")):
        sp = probe_dist_peft.make_spec("fsdp2", "llama", "all", 1, 4, method=method, storage=storage, replicate=2)
        sp["cpu_offload"] = True
        sp["name"] = sp["name"].replace("-plain-", "-plain-cpuoff-")
        out.append(sp)
    return out


def install_recorders():
    """Identity pin_memory (no CUDA driver here) and the copy recorders on FSDP2's own code."""
    from torch.distributed.fsdp._fully_shard import _fsdp_param, _fsdp_param_group
    from torch.distributed.fsdp._fully_shard._fsdp_param import ShardedState

    torch.Tensor.pin_memory = lambda self, *a, **k: self  # page-locking only, on a CPU
    orig_inputs = _fsdp_param.FSDPParam.all_gather_inputs.fget

    def all_gather_inputs(self):
        if self.offload_to_cpu and self.sharded_state == ShardedState.SHARDED:
            d = self._sharded_param_data
            REC["h2d"].append({"step": REC["step"], "trainable": bool(self.sharded_param.requires_grad),
                               "dtype": dt(d), "bytes": d.numel() * d.element_size()})
        return orig_inputs(self)

    _fsdp_param.FSDPParam.all_gather_inputs = property(all_gather_inputs)
    orig_reduce = _fsdp_param_group.foreach_reduce

    def foreach_reduce(fsdp_params, unsharded_grads, *a, **k):
        for fp in fsdp_params:
            if fp.offload_to_cpu:
                REC["d2h"].append({"step": REC["step"], "trainable": bool(fp.sharded_param.requires_grad),
                                   "dtype": dt(fp.sharded_param), "bytes": fp.sharded_size.numel()
                                   * fp.sharded_param.element_size()})
        return orig_reduce(fsdp_params, unsharded_grads, *a, **k)

    _fsdp_param_group.foreach_reduce = foreach_reduce
    register_optimizer_step_post_hook(lambda opt, args, kw: REC.__setitem__("step",
                                                                                                 REC["step"] + 1))


def sums(rows):
    out = {}
    for r in rows:
        k = f"step{r['step']}:{'trainable' if r['trainable'] else 'frozen'}:{r['dtype']}"
        e = out.setdefault(k, {"copies": 0, "bytes": 0})
        e["copies"] += 1
        e["bytes"] += r["bytes"]
    return out


def fixture_extra(fx, spec, c):
    """probe_dist_peft's fields plus what CPUOffloadPolicy would place on the host and copy."""
    from torch.distributed.fsdp import FSDPModule

    probe_dist_peft.fixture_extra(fx, spec, c)
    shards = {}
    for m in c.model.modules():
        if not isinstance(m, FSDPModule):
            continue
        for g in m._get_fsdp_state()._fsdp_param_groups:
            for fp in g.fsdp_params:
                k = f"{'trainable' if fp.sharded_param.requires_grad else 'frozen'}:{dt(fp._sharded_param_data)}"
                e = shards.setdefault(k, {"params": 0, "offload_to_cpu": 0, "pin_memory": 0, "padded_local_numel": 0,
                                          "padded_local_bytes": 0, "with_grad": 0, "grad_local_bytes": 0})
                e["params"] += 1
                e["offload_to_cpu"] += bool(fp.offload_to_cpu)
                e["pin_memory"] += bool(fp.pin_memory)
                e["padded_local_numel"] += fp._sharded_param_data.numel()
                e["padded_local_bytes"] += fp._sharded_param_data.numel() * fp._sharded_param_data.element_size()
                gr = fp.sharded_param.grad
                if gr is not None:
                    lg = probe_dist.local(gr)
                    e["with_grad"] += 1
                    e["grad_local_bytes"] += lg.numel() * lg.element_size()
    # a parameter FSDP does not manage (a uint8 Params4bit in ignored_params)
    managed = {id(fp.sharded_param) for m in c.model.modules() if isinstance(m, FSDPModule)
               for g in m._get_fsdp_state()._fsdp_param_groups for fp in g.fsdp_params}
    unmanaged = {}
    for _, p in c.model.named_parameters():
        if id(p) in managed:
            continue
        k = f"{type(p).__name__}:{dt(p)}:{'trainable' if p.requires_grad else 'frozen'}"
        e = unmanaged.setdefault(k, {"params": 0, "bytes": 0})
        e["params"] += 1
        e["bytes"] += p.numel() * p.element_size()
    opt = probe_dist.LAST["tr"].optimizer
    opt_params = [p for g in opt.param_groups for p in g["params"]]
    states = {}
    for p in opt_params:
        for name, t in opt.state.get(p, {}).items():
            if torch.is_tensor(t):
                lt = probe_dist.local(t)
                e = states.setdefault(f"{name}:{dt(lt)}", {"tensors": 0, "local_bytes": 0})
                e["tensors"] += 1
                e["local_bytes"] += lt.numel() * lt.element_size()
    fx["cpu_offload"] = {
        "seen_on_cpu": "host = device: the allocator's figures equal a run without offload; pin_memory replaced by "
                       "the identity (no CUDA driver); the copies below are FSDP's calls that would copy, not copies",
        "offload_policy": fx["parallel"]["fsdp2"]["offload_policy"],
        "sharded_params": shards,
        "not_managed_by_fsdp": unmanaged,
        "optimizer": {"params": len(opt_params), "all_trainable": all(p.requires_grad for p in opt_params),
                      "local_numel": sum(probe_dist.local(p).numel() for p in opt_params), "states": states},
        "h2d_per_step": sums(REC["h2d"]),
        "d2h_per_step": sums(REC["d2h"]),
    }
    REC.update(step=1, h2d=[], d2h=[])




def rank_entry(index, world, port, specs, out_dir, deepspeed_needed, fake_ranks=None):
    install_recorders()
    probe_dist_peft.rank_main(index, world, port, specs, out_dir, deepspeed_needed, fake_ranks, extra=fixture_extra)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--filter", default="*")
    a = ap.parse_args(argv)
    sel = [c for c in cases() if fnmatch.fnmatch(c["name"], a.filter)]
    return probe_dist_peft.run_offload_cases(sel, a.out, rank_entry, "cpu_offload")


if __name__ == "__main__":
    sys.exit(main())
