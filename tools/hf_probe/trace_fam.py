#!/usr/bin/env python3
"""The allocator's events of one single-process case of family_cases.py (tests/data/hf-fam),
listed as trace_dist.py lists a rank's: the twin to set beside a probe_dist case's listing
(same model, shape and checkpointing; one process, probe.py's own loop, no Trainer, no
wrapper). PRECISION replaces the case's (e.g. amp-bf16: CPU autocast, what accelerate's DDP
runs, where the fixtures emulate CUDA's lists). How FINDINGS R-DIST-22 found gemma3_text's
24.6 KB outside PyTorch.

  .venv/bin/python trace_fam.py CASE [PRECISION [OUT]]
  e.g. trace_fam.py gemma3_text-amp-bf16-cudalists-sdpa-noff-plain-b2s32 amp-bf16

The fixture the run writes is not kept (tests/data/hf-fam is left alone).
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import allocs  # noqa: E402
import family_cases  # noqa: E402
import probe  # noqa: E402
import trace_dist  # noqa: E402


def main(argv):
    if len(argv) not in (1, 2, 3):
        raise SystemExit(__doc__)
    specs = [c for c in family_cases.cases() if c["name"] == argv[0]]
    if not specs:
        raise SystemExit(f"trace_fam.py: no case {argv[0]!r} in family_cases.py")
    spec = dict(specs[0], **({"precision": argv[1]} if len(argv) > 1 else {}))
    allocs.Timeline = trace_dist.RecordedTimeline
    probe.run_case(spec)
    if not trace_dist.TIMELINES:
        raise SystemExit("trace_fam.py: no allocator window was recorded")
    trace_dist.write_listing(trace_dist.TIMELINES[-1], os.path.abspath(argv[2]) if len(argv) == 3 else "-")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
