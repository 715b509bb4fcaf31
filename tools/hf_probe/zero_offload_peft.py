#!/usr/bin/env python3
"""DeepSpeed ZeRO-1 / 2 / 3 CPU offload with LoRA / QLoRA under the Trainer, run on the CPU (FINDINGS
R-DISTPEFT-15, -16, -18, -19). The hf-dist-peft cases (probe_dist_peft.py: tiny llama, all-linear r 8,
Trainer bf16=True, every_n 1, grad_accum 2, fake process group, ZeRO-1/2 ranks 0 and 1 of 2, ZeRO-3
rank 0; QLoRA nf4 with uint8 or bf16 storage) with the
ds_config's `offload_optimizer: {device: cpu}` (ZeRO-1, -2, -3) and `offload_param: {device: cpu}`
(ZeRO-3) and an `optimizer` section (AdamW, "auto" parameters: without it DeepSpeed refuses a
client optimizer under offload, R-OFFLOAD-7), so the engine builds DeepSpeedCPUAdam (its C++ op is
JIT-built with g++ on first use, ~10 minutes on 2 cores, cached in ~/.cache/torch_extensions).

What a CPU run can and cannot see. DS_ACCELERATOR=cpu: the device is the host, so the allocator's
figures count host and device buffers together, and the CPU accelerator's pin_memory is the
identity. What is recorded from DeepSpeed's own objects instead:
  * every call of get_accelerator().pin_memory (the buffers DeepSpeed pins on a GPU box): the
    caller, dtype, bytes, and which of them are still alive after the run (weak references), so
    the pinned host bytes a rank holds;
  * the optimizer's buffers after the run: ZeRO-1/2's fp32 master partitions, their .grad, the
    bit16 copies, the temp gradient buffers (host and device), the accumulators; ZeRO-3's fp32
    master sub-groups, the flat gradient partitions, the parameters' partitions (where they are:
    the pinned flat buffer of the trainable ones, or their own pinned partition) and the
    persistent ones; DeepSpeedCPUAdam's states;
  * the model's parameters, frozen and trainable: whole or partitioned, elements, dtype.
Not seen: page-locking, the copies (their bytes are read from the code, R-OFFLOAD-7/8), CUDA.

Usage: zero_offload_peft.py [--out DIR] [--filter GLOB]  (8 cases, 12 per-rank fixtures, ~9 min on 2 cores)
"""
from __future__ import annotations

import argparse
import collections
import fnmatch
import os
import sys
import tempfile
import weakref

import probe_dist
import probe_dist_peft

OUT = os.path.join(tempfile.gettempdir(), "gckpt-zero-offload-peft")
PINS = []  # (caller, dtype, bytes, weakref)


def dt(t):
    return str(t.dtype).replace("torch.", "")


def cases():
    out = []
    for mode, param, method, storage in (("zero1", False, "lora", None), ("zero2", False, "lora", None),
                                         ("zero3", False, "lora", None), ("zero3", True, "lora", None),
                                         ("zero1", False, "qlora", "uint8"), ("zero2", False, "qlora", "uint8"),
                                         ("zero3", True, "qlora", "uint8"), ("zero3", True, "qlora", "bf16")):
        sp = probe_dist_peft.make_spec(mode, "llama", "all", 1, 2, method=method, storage=storage)
        sp["ds_offload"] = {"optimizer": True, "param": param}
        sp["name"] = sp["name"].replace("-plain-", "-plain-offopt-" if not param else "-plain-offall-")
        # ZeRO-3 on rank 0 only, as probe_dist's ZeRO-3 cases (rank 1's forward fails on the fake group)
        out.append(sp)
    return out


def ds_config_offload(orig):
    def ds_config(spec):
        cfg = orig(spec)
        off = spec.get("ds_offload")
        if off:
            z = cfg["zero_optimization"]
            z["offload_optimizer"] = {"device": "cpu"}
            if off["param"]:
                z["offload_param"] = {"device": "cpu"}
            cfg["optimizer"] = {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                                             "weight_decay": "auto"}}
        return cfg

    return ds_config


def install_recorders():
    from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator

    orig = CPU_Accelerator.pin_memory

    def pin_memory(self, tensor, *a, **k):
        out = orig(self, tensor, *a, **k)
        f = sys._getframe(1)
        caller = f.f_code.co_name
        p = f.f_locals.get("param")
        if caller == "_partition_param" and p is not None:
            caller += ":trainable" if p.requires_grad else ":frozen"
        PINS.append((caller, dt(out), out.numel() * out.element_size(), weakref.ref(out)))
        return out

    CPU_Accelerator.pin_memory = pin_memory
    from deepspeed.runtime.engine import DeepSpeedEngine

    orig_init = DeepSpeedEngine.__init__

    def engine_init(self, *a, **k):  # each pass builds its own engine: count the last one's pins only
        PINS.clear()
        return orig_init(self, *a, **k)

    DeepSpeedEngine.__init__ = engine_init
    probe_dist.ds_config = ds_config_offload(probe_dist.ds_config)


def add(d, k, n):
    e = d.setdefault(k, {"tensors": 0, "bytes": 0})
    e["tensors"] += 1
    e["bytes"] += n


def nbytes(t):
    return t.numel() * t.element_size()


def fixture_extra(fx, spec, c):
    """probe_dist_peft's fields plus what DeepSpeed's offload would place on the host."""
    import torch

    probe_dist_peft.fixture_extra(fx, spec, c)
    eng = probe_dist.LAST["tr"].model_wrapped
    zo = eng.optimizer
    pins_all, pins_live, seen = {}, {}, set()
    for caller, d, n, _ in PINS:
        add(pins_all, f"{caller}:{d}", n)
    for caller, d, n, ref in reversed(PINS):  # a storage under its last pin call (ZeRO-3 re-points ds_tensor)
        t = ref()
        if t is not None and t.untyped_storage().data_ptr() not in seen:
            seen.add(t.untyped_storage().data_ptr())
            add(pins_live, f"{caller}:{d}", t.untyped_storage().nbytes())
    inner = zo.optimizer
    states = {}
    for st in inner.state.values():  # ZeRO-3 swaps its sub-groups in and out of param_groups
        for name, t in st.items():
            if torch.is_tensor(t):
                add(states, f"{name}:{dt(t)}", nbytes(t))
    params = {}
    for _, p in c.model.named_parameters():
        k = ("trainable" if p.requires_grad else "frozen") + ":" + dt(p)
        e = params.setdefault(k, {"params": 0, "whole_numel": 0, "local_numel": 0, "persistent": 0,
                                  "persistent_numel": 0})
        e["params"] += 1
        if hasattr(p, "ds_tensor"):
            e["whole_numel"] += p.ds_numel
            e["local_numel"] += p.ds_tensor.numel()
            if getattr(p, "ds_persist", False):
                e["persistent"] += 1
                e["persistent_numel"] += p.ds_numel
        else:
            e["whole_numel"] += p.numel()
            e["local_numel"] += p.numel()
    bufs = {}
    if spec["mode"] == "zero3":
        for i, t in enumerate(zo.fp32_partitioned_groups_flat):
            add(bufs, f"fp32_partitioned_groups_flat:{dt(t)}", nbytes(t))
            if t.grad is not None:
                add(bufs, f"fp32_partitioned_groups_flat.grad:{dt(t.grad)}", nbytes(t.grad))
        for t in zo.fp16_partitioned_groups_flat:
            add(bufs, f"fp16_partitioned_groups_flat:{dt(t)}", nbytes(t))
        for t in getattr(zo, "param_groups_fp16_flat_cpu_memory", []):
            add(bufs, f"param_groups_fp16_flat_cpu_memory:{dt(t)}", nbytes(t))
        g = zo.grad_partitions_flat_buffer
        if g is not None:
            add(bufs, f"grad_partitions_flat_buffer:{dt(g)}", nbytes(g))
        extra = {"offload_optimizer": zo.offload_optimizer, "offload_param": zo.offload_param,
                 "sub_groups": len(zo.fp32_partitioned_groups_flat)}
    else:
        for t in zo.single_partition_of_fp32_groups:
            add(bufs, f"single_partition_of_fp32_groups:{dt(t)}", nbytes(t))
            if t.grad is not None:
                add(bufs, f"single_partition_of_fp32_groups.grad:{dt(t.grad)}", nbytes(t.grad))
        for t in getattr(zo, "param_buffer_of_bit16_for_cpu_offload_groups", []):
            add(bufs, f"param_buffer_of_bit16_for_cpu_offload_groups:{dt(t)}", nbytes(t))
        for name in ("temp_grad_buffer_for_cpu_offload", "temp_grad_buffer_for_gpu_offload"):
            t = getattr(zo, name, None)
            if t is not None:
                add(bufs, f"{name}:{dt(t)}", nbytes(t))
        for t in getattr(zo, "accumulated_grads_in_cpu", {}).values():
            add(bufs, f"accumulated_grads_in_cpu:{dt(t)}", nbytes(t))
        extra = {"cpu_offload": zo.cpu_offload, "partition_size": [int(x) for x in zo.partition_size],
                 "largest_param_numel": int(zo.temp_grad_buffer_for_cpu_offload.numel())
                 if getattr(zo, "temp_grad_buffer_for_cpu_offload", None) is not None else None,
                 "gradient_accumulation_dtype": str(getattr(zo, "gradient_accumulation_dtype", None))}
    fx["zero_offload"] = {
        "seen_on_cpu": "host = device (DS_ACCELERATOR=cpu): the allocator's figures count both; pin_memory is the "
                       "identity there, its calls are recorded (pinned = the live ones)",
        "optimizer_type": type(inner).__name__,
        "zero_optimizer_type": type(zo).__name__,
        "pinned_live": pins_live,
        "pin_calls": pins_all,
        "states": states,
        "buffers": bufs,
        "params": params,
        **extra,
    }
    PINS.clear()


def rank_entry(index, world, port, specs, out_dir, deepspeed_needed, fake_ranks=None):
    import deepspeed  # noqa: F401  (DS_ACCELERATOR=cpu is set below by rank_main too)

    install_recorders()
    probe_dist_peft.rank_main(index, world, port, specs, out_dir, deepspeed_needed, fake_ranks, extra=fixture_extra)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--filter", default="*")
    a = ap.parse_args(argv)
    os.environ["DS_ACCELERATOR"] = "cpu"
    sel = [c for c in cases() if fnmatch.fnmatch(c["name"], a.filter)]
    return probe_dist_peft.run_offload_cases(sel, a.out, rank_entry, "zero_offload")


if __name__ == "__main__":
    sys.exit(main())
