#!/usr/bin/env python3
"""The allocator's events of one probe_dist.py case on one rank (the fake process group, as
the fixtures are measured): every device allocation and free of the last window the probe
recorded (the whole run, both optimizer steps: the micro-step labels start again after the
first step's zero_grad), one line each: index, bytes (+ allocated, - freed), live bytes
after it, and where (micro-step / phase / region / op). How FINDINGS R-DIST-24 read the tied
wrappers' buffers.

  .venv/bin/python trace_dist.py CASE RANK [OUT]   e.g. fsdp2-llamat-bf16-n1-plain-w2 0

CASE is a name `probe_dist.py --list` prints; the listing goes to OUT (default stdout). The
fixture the run writes goes to a temporary folder (tests/data/hf-dist is left alone).
"""
from __future__ import annotations

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import allocs  # noqa: E402
import probe_dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

TIMELINES = []


class RecordedTimeline(allocs.Timeline):
    """A Timeline that keeps itself for the listing (the probe builds one per window)."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        TIMELINES.append(self)


def rank_main(index, world, port, specs, out_dir, deepspeed_needed, ranks, listing):
    allocs.Timeline = RecordedTimeline  # in the spawned process
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
    if not TIMELINES:
        raise SystemExit("trace_dist.py: no allocator window was recorded")
    write_listing(TIMELINES[-1], listing)


def write_listing(tl, listing):
    """tl's device events, one line each, to the file listing ("-": stdout)."""
    with open(listing, "w") if listing != "-" else os.fdopen(os.dup(1), "w") as f:
        for i, m in enumerate(tl.mems):
            if m.kind == "device":
                f.write(f"{i:6d} {m.nbytes:+10d} {tl.cur[i]:10d} {tl.where(i)[0]}\n")


def main(argv):
    if len(argv) not in (2, 3):
        raise SystemExit(__doc__)
    name, rank = argv[0], int(argv[1])
    import probe_dist_peft

    specs = [c for c in probe_dist.all_cases("full") + probe_dist.all_cases("default") + probe_dist_peft.all_cases()
             if c["name"] == name]
    if not specs:
        raise SystemExit(f"trace_dist.py: no case {name!r} (probe_dist.py --list)")
    spec = specs[0]
    if not 0 <= rank < spec["world"]:
        raise SystemExit(f"trace_dist.py: rank {rank} of a world of {spec['world']}")
    listing = os.path.abspath(argv[2]) if len(argv) == 3 else "-"
    with tempfile.TemporaryDirectory() as out_dir:
        mp.spawn(rank_main, args=(spec["world"], probe_dist.free_port(), [spec], out_dir,
                                  spec["mode"].startswith("zero"), [rank], listing), nprocs=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
