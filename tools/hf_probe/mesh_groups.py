"""Which global ranks form each process group of the device meshes gckpt plans on several nodes.

accelerate 1.15.0's ParallelismConfig.build_device_mesh (mesh order dp_replicate, dp_shard, cp,
sp, tp; joint dims dp, dp_shard_cp, dp_cp flattened) and transformers 5.24.0's
initialize_distributed_mesh (dense mesh (pp, dp_replicate, fsdp, tp)), built for every rank of
the world on PyTorch's fake process group (one process playing each rank in turn), each group
read back with dist.get_process_group_ranks. With G GPUs per node (ranks r // G on node r // G),
a group lies in one node iff its ranks do (FINDINGS R-TP-26).

    python3 tools/hf_probe/mesh_groups.py --out tests/data/mesh-groups/groups.json
"""
import argparse
import json

import accelerate
import torch
import torch.distributed as dist
from accelerate.parallelism_config import ParallelismConfig
from torch.distributed.device_mesh import init_device_mesh
from torch.testing._internal.distributed.fake_pg import FakeStore

# (world, dp_replicate, dp_shard, cp, tp): 8, 16 and 12 ranks (one node of 8, two of 8, two of 6)
CASES = [
    (8, 1, 4, 1, 2), (8, 2, 2, 1, 2), (8, 1, 4, 2, 1), (8, 1, 2, 2, 2), (8, 2, 2, 2, 1),
    (16, 1, 2, 1, 8), (16, 1, 4, 1, 4), (16, 2, 1, 1, 8), (16, 1, 2, 8, 1), (16, 1, 1, 16, 1),
    (16, 2, 4, 2, 1), (16, 1, 2, 2, 4),
    (12, 3, 4, 1, 1), (12, 1, 3, 1, 4),  # on nodes of 6: a group of 4 consecutive ranks straddles one
]


def groups_of(mesh, names):
    out = {}
    for n in names:
        try:
            g = mesh.get_group(n)
        except (KeyError, RuntimeError, ValueError):
            continue
        out[n] = sorted(dist.get_process_group_ranks(g))
    return out


def accelerate_mesh(rep, shard, cp, tp):
    pc = ParallelismConfig(dp_replicate_size=rep, dp_shard_size=shard, cp_size=cp, tp_size=tp)
    mesh = pc.build_device_mesh("cpu")
    return mesh, ["dp_replicate", "dp_shard", "cp", "tp", "dp_shard_cp", "dp", "dp_cp"]


def transformers_mesh(rep, shard, tp):
    mesh = init_device_mesh("cpu", (1, rep, shard, tp), mesh_dim_names=("pp", "dp_replicate", "fsdp", "tp"))
    return mesh, ["dp_replicate", "fsdp", "tp"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    cases = []
    for world, rep, shard, cp, tp in CASES:
        builders = []
        if not (rep > 1 and shard == 1 and tp * cp > 1):  # accelerate refuses it (pure data parallelism, R-TP-1)
            builders.append(("accelerate", lambda: accelerate_mesh(rep, shard, cp, tp)))
        if cp == 1:
            builders.append(("transformers", lambda: transformers_mesh(rep, shard, tp)))
        for name, build in builders:
            seen = {}
            for rank in range(world):
                dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
                mesh, dims = build()
                for d, ranks in groups_of(mesh, dims).items():
                    assert rank in ranks, (name, d, rank, ranks)
                    seen.setdefault(d, set()).add(tuple(ranks))
                dist.destroy_process_group()
            cases.append({"builder": name, "world": world,
                          "sizes": {"dp_replicate": rep, "dp_shard": shard, "cp": cp, "tp": tp},
                          "groups": {d: [list(g) for g in sorted(v)] for d, v in sorted(seen.items())}})
    doc = {"schema": "gckpt.mesh-groups/1", "torch": torch.__version__, "accelerate": accelerate.__version__,
           "process_group": "fake (FakeStore), one process playing each rank in turn", "cases": cases}
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
