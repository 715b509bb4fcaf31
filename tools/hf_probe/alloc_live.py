#!/usr/bin/env python3
"""What the allocator holds at one point of a distributed probe case's step 2: one fake-group rank
of a probe_dist.py or probe_dist_peft.py case run in this process (the same setup, the same
torch.profiler recording, allocs.py), then every device allocation made in step 2 and still live at
the point, with where it was made (micro-step / phase / region / op), summed per region; or the
allocations and frees around the step's peak. For finding what a plan holds that torch does not, or
the reverse: compare with the plan's events (gckpt-hf-compare --events, or the walk's).

  alloc_live.py --tp-peft tp-llama-amp-bf16-noff-plain-w2-t2-lora-qv --rank 0 --at fwd_end::micro1
  alloc_live.py --tp-peft tp-llama-fp32-noff-plain-w2-t2-lora-qv --rank 1 --at peak
  alloc_live.py --dist tp-llama-fp32-noff-plain-w2-t2 --rank 1 --at peak

--at: a mark of allocs.py's recording (fwd_end::microN, bwd_end::microN) or `peak` (the events
around the step's device peak). The fixture it also writes goes to a temporary folder, removed after (--out: kept there).
Used for FINDINGS R-TP-15. One case takes about 30 s on one core.
"""
from __future__ import annotations

import argparse
import bisect
import collections
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import probe  # noqa: E402
import probe_dist  # noqa: E402


def report(tl, step, at, around):
    t0 = next(t for t, n in tl.marks if n == f"start::step{step}")
    t_end = next(t for t, n in tl.marks if n == "end" and t >= t0)
    lo, hi = tl.index_range(t0, t_end)
    if at == "peak":
        pk = max(range(lo, hi), key=lambda i: tl.cur[i])
        print(f"step {step} peak {tl.cur[pk]} B at {tl.where(pk)[0]}; the events around it "
              "(index, bytes (+ allocation, - free), kind, live after, where):")
        for i in range(max(lo, pk - around), min(hi, pk + around)):
            m = tl.mems[i]
            print(f"  {i} {m.nbytes:+d} {m.kind} {tl.cur[i]} {tl.where(i)[0]}")
        return
    ts = next((t for t, n in tl.marks if n == at and t0 <= t <= t_end), None)
    if ts is None:
        raise SystemExit(f"no mark {at!r} in step {step}")
    live = tl.live_allocations(0, bisect.bisect_right(tl.ts, ts))  # tl.ts is sorted
    per = collections.Counter()
    print(f"step {step} at {at}: {tl.live_at(ts)} B live; made in step {step} and still live:")
    for i in sorted(live.values()):
        if i < lo:
            continue
        w = tl.where(i)[0]
        per[w.split("/")[2]] += tl.mems[i].nbytes
        print(f"  {i} {tl.mems[i].nbytes} {w}")
    print("per region:", dict(per), "total", sum(per.values()))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--tp-peft", metavar="CASE", help="a probe_dist_peft.py --tp case")
    g.add_argument("--dist", metavar="CASE", help="a probe_dist.py case (any --set)")
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--at", default="fwd_end::micro1")
    ap.add_argument("--step", type=int, default=2)
    ap.add_argument("--around", type=int, default=30, help="with --at peak: events each side")
    ap.add_argument("--out", default=None, help="where the case's fixture goes (default: a temporary folder)")
    a = ap.parse_args(argv)
    if a.tp_peft:
        import probe_dist_peft

        cases, name, entry = probe_dist_peft.tp_cases(), a.tp_peft, probe_dist_peft.rank_main
    else:
        cases = [c for s in ("default", "full", "hsdp", "tp", "cp") for c in probe_dist.all_cases(s)]
        name, entry = a.dist, probe_dist.rank_main
    spec = next((c for c in cases if c["name"] == name), None)
    if spec is None:
        raise SystemExit(f"no case {name!r}")
    if not spec.get("fake_ranks"):
        raise SystemExit(f"{name}: a gloo twin (every rank a process); pick its fake-group case")
    if a.rank not in spec["fake_ranks"]:
        raise SystemExit(f"{name}: measured ranks {list(spec['fake_ranks'])}, not {a.rank}")
    figures = probe._alloc_figures

    def hooked(tl, c, sp, step, baseline):
        if step == a.step:
            report(tl, step, a.at, a.around)
        return figures(tl, c, sp, step, baseline)

    probe._alloc_figures = hooked
    with tempfile.TemporaryDirectory(prefix="gckpt-alloc-live-") as tmp:
        entry(0, spec["world"], probe_dist.free_port(), [spec], a.out or tmp, False, [a.rank])
    return 0


if __name__ == "__main__":
    sys.exit(main())
