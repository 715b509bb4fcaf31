#!/usr/bin/env python3
"""The SDPA work of torch 2.15's ring attention per rank (FINDINGS R-CP-12): every per-block kernel
call that _templated_ring_attention and _templated_ring_attention_backward make on each rank of
a CP group, with its query and key lengths and its causal flag, on the CPU over gloo.

The ring functions are torch's own, called as its _sdpa_handler calls them (and as
cp_ring_rerun.py's stand-in does, FINDINGS R-CP-5): with the CPU flash kernel per block where a
GPU calls the CUDA flash / efficient / cuDNN one, wrapped to record each call. The load balance
is what context_parallel() sets: on (head-tail) when the sequence is a multiple of 2C, off
(contiguous) otherwise (R-CP-4). The content of q, k and v does not change which calls are made.

Writes tests/data/hf-cp-work/<case>-r<rank>.json (schema gckpt.hf-cp-work/1):
  python3 tools/hf_probe/cp_ring_work.py [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
OUT = os.path.join(ROOT, "tests", "data", "hf-cp-work")
SCHEMA = "gckpt.hf-cp-work/1"
# (name, sequence, C): balanced when S % 2C == 0
CASES = [("w2-s32", 32, 2), ("w2-s34", 34, 2), ("w4-s32", 32, 4), ("w4-s36", 36, 4)]
HEADS, DIM = 2, 8


def run_case(rank, world, case, out_dir):
    from torch.distributed.tensor.experimental._context_parallel import _attention as A
    name, s, _ = case
    balanced = s % (2 * world) == 0
    old = A._cp_options.enable_load_balance
    A._cp_options.enable_load_balance = balanced  # what context_parallel() sets (load_balancer is not None)
    group = dist.group.WORLD
    local = s // world
    calls = []
    aten = torch.ops.aten

    def recorded(op, phase):
        def inner(*a, **k):
            q, kk = (k["query"], k["key"]) if "query" in k else (a[0], a[1]) if phase == "forward" else (a[1], a[2])
            calls.append(dict(phase=phase, q_len=int(q.shape[2]), k_len=int(kk.shape[2]),
                              is_causal=bool(k.get("is_causal", False))))
            return op(*a, **k)
        return inner

    fwd = recorded(aten._scaled_dot_product_flash_attention_for_cpu.default, "forward")
    bwd = recorded(aten._scaled_dot_product_flash_attention_for_cpu_backward.default, "backward")
    torch.manual_seed(rank)
    q, k, v = (torch.randn(1, HEADS, local, DIM) for _ in range(3))
    try:
        out, lse, *_ = A._templated_ring_attention(group, 2, fwd, query=q, key=k, value=v, is_causal=True,
                                                   dropout_p=0.0, scale=None)
        A._templated_ring_attention_backward(group, 2, bwd, grad_out=torch.ones_like(out), grad_out_name="grad_out",
                                             query=q, key=k, value=v, out=out, logsumexp=lse, is_causal=True,
                                             dropout_p=0.0, scale=None)
    finally:
        A._cp_options.enable_load_balance = old
    # one unit: the local causal SDPA over s / C tokens (L^2 / 2 score elements)
    units = {ph: sum(c["q_len"] * c["k_len"] * (0.5 if c["is_causal"] else 1.0) for c in calls if c["phase"] == ph)
             / (local * local / 2.0) for ph in ("forward", "backward")}
    doc = dict(schema=SCHEMA, case=name, rank=rank, world=world, seq=s, local_seq=local, load_balanced=balanced,
               heads=HEADS, head_dim=DIM, torch=torch.__version__, kernel_calls=calls, units=units)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"{name}-r{rank}.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def rank_main(rank, world, port, cases, out_dir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        for c in cases:
            run_case(rank, world, c, out_dir)
            dist.barrier()
    except Exception:
        traceback.print_exc()
        raise
    finally:
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=OUT)
    a = ap.parse_args(argv)
    for world in sorted({c[2] for c in CASES}):
        mp.spawn(rank_main, args=(world, free_port(), [c for c in CASES if c[2] == world], a.out), nprocs=world)


if __name__ == "__main__":
    main()
