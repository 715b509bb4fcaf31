#!/usr/bin/env python3
"""What DeepSpeed ZeRO-3's parameter coordinator does in one probe_dist.py / probe_dist_peft.py
case on one rank (the fake process group, as the fixtures are measured): every hook that
fetches (module, forward / backward, inside a recompute or not), every all-gather it starts
(the module's own parameters or a prefetch of the recorded queue) and every release, in order,
one line each. How FINDINGS R-DISTPEFT-20 read the prefetch's queue.

  .venv/bin/python trace_z3_fetch.py CASE RANK [OUT]  e.g. zero3-llama-bf16-n1-plain-w2-lora-all 0

Lines: `reset` (the root's pre-forward: reset_step, one per forward), `hook fwd|rcp|bwd MODULE
step=ID complete=0|1`, `gather fetch|prefetch NAME NUMEL`, `release NAME NUMEL`, `leftovers`
(release_backward_leftovers at a backward's end). The listing covers every step of the run
(step 2 is the last two forwards under gradient accumulation 2).
"""
from __future__ import annotations

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import probe_dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

LOG = []


def patch_coordinator():
    import torch
    from deepspeed.runtime.zero import partitioned_param_coordinator as ppc
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus
    from deepspeed.utils import debug

    C = ppc.PartitionedParameterCoordinator
    state = {"in_hook": False, "own": set()}

    def pname(p):
        return debug.param_names._names.get(id(p), f"ds{p.ds_id}")

    fetch0, gather0 = C.fetch_sub_module, C._PartitionedParameterCoordinator__all_gather_params_
    release0, reset0 = C._PartitionedParameterCoordinator__release_param, C.reset_step
    left0 = C.release_backward_leftovers

    def fetch(self, m, forward):
        rc = forward and torch._C._current_graph_task_id() != -1
        kind = "rcp" if rc else ("fwd" if forward else "bwd")
        step = getattr(self, "_PartitionedParameterCoordinator__step_id")
        LOG.append(f"hook {kind} {debug.module_names._names.get(id(m), '?') or '<root>'} "
                   f"({type(m).__name__}) step={step} complete={int(self.is_complete_trace())}")
        state["own"] = set(ppc.iter_params(m, recurse=ppc.z3_leaf_module(m)))
        try:
            return fetch0(self, m, forward)
        finally:
            state["own"] = set()

    def gather(self, params, forward, quantize=False):
        todo = [p for p in params if p.ds_status == ZeroParamStatus.NOT_AVAILABLE]
        kind = "fetch" if todo and all(p in state["own"] for p in todo) else "prefetch"
        for p in sorted(todo, key=lambda p: p.ds_id):
            LOG.append(f"gather {kind} {pname(p)} {p.ds_numel}")
        return gather0(self, params, forward, quantize)

    def release(self, param, free_data=True):
        if param.ds_status == ZeroParamStatus.AVAILABLE and not param.ds_active_sub_modules:
            LOG.append(f"release {pname(param)} {param.ds_numel}")
        return release0(self, param, free_data)

    def reset(self):
        LOG.append("reset")
        return reset0(self)

    def leftovers(self):
        LOG.append("leftovers")
        return left0(self)

    C.fetch_sub_module = fetch
    C._PartitionedParameterCoordinator__all_gather_params_ = gather
    C._PartitionedParameterCoordinator__release_param = release
    C.reset_step = reset
    C.release_backward_leftovers = leftovers


def rank_main(index, world, port, specs, out_dir, deepspeed_needed, ranks, listing):
    patch_coordinator()
    if "method" in specs[0]:  # a probe_dist_peft.py case: its model and fields
        import probe_dist_peft
        import probe_peft

        probe_dist.MODEL_BUILDER = probe_dist_peft.build_peft_model
        probe_dist.FIXTURE_EXTRA = probe_dist_peft.fixture_extra
        probe_peft._CKPT_ROOT = tempfile.mkdtemp(prefix="gckpt-trace-")
    try:
        probe_dist.rank_main(index, world, port, specs, out_dir, deepspeed_needed, ranks)
    except SystemExit:
        pass
    with open(listing, "w") if listing != "-" else os.fdopen(os.dup(1), "w") as f:
        f.write("\n".join(LOG) + "\n")


def main(argv):
    if len(argv) not in (2, 3):
        raise SystemExit(__doc__)
    name, rank = argv[0], int(argv[1])
    import probe_dist_peft

    specs = [c for c in probe_dist.all_cases("full") + probe_dist.all_cases("default") + probe_dist_peft.all_cases()
             if c["name"] == name]
    if not specs or not specs[0]["mode"].startswith("zero3"):
        raise SystemExit(f"trace_z3_fetch.py: no ZeRO-3 case {name!r} (probe_dist.py --list)")
    spec = specs[0]
    if not 0 <= rank < spec["world"]:
        raise SystemExit(f"trace_z3_fetch.py: rank {rank} of a world of {spec['world']}")
    listing = os.path.abspath(argv[2]) if len(argv) == 3 else "-"
    with tempfile.TemporaryDirectory() as out_dir:
        mp.spawn(rank_main, args=(spec["world"], probe_dist.free_port(), [spec], out_dir, True, [rank], listing),
                 nprocs=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
