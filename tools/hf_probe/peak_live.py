#!/usr/bin/env python3
"""What is live at the measured peak of one peft case: every device allocation still
alive at the step's peak (size and where it was made), then the allocator events around
the peak (* marks it). The numbers are the fixture's: the case runs as probe_peft.py runs
it, and the listing is taken from the same allocator timeline at the index of the peak.

  peak_live.py CASE        e.g. llama-qlora-int8-fp32-all-d0.05-sdpa-n3-plain-b2s32
  peak_live.py --after-forward CASE
                           also what the window allocated and still holds when micro-step 1's
                           forward ends (its sum: after_forward_bytes_micro[0] less the start)

A CASE of probe_vlm_peft.py (llava-lora-..., llava-qlora-...) runs as that probe runs it.

Each measured window (a step, then its optimizer step) prints a block; the fixture's
steps[1].live_peak_bytes is the second step's. Allocations made before the window
(parameters, quantization statistics, optimizer states) are counted in the peak but not
listed.
"""
from __future__ import annotations

import bisect
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import allocs  # noqa: E402

_peak = allocs.Timeline.peak
OUT = sys.stdout  # the fixture JSON probe_peft writes goes to /dev/null instead
AFTER_FORWARD = False


def _after_forward(self, t0, t1):
    """The window's allocations alive at its fwd_end::micro1 mark."""
    t = next((t for t, n in self.marks if n == "fwd_end::micro1" and t0 <= t <= t1), None)
    if t is None:
        return
    live = self.live_allocations(bisect.bisect_left(self.ts, t0), bisect.bisect_right(self.ts, t))
    total = sum(self.mems[i].nbytes for i in live.values())
    print(f"=== after micro-step 1's forward: {total} B allocated in the window and live", file=OUT)
    for i in sorted(live.values()):
        print(f"  {self.mems[i].nbytes:>10} {self.where(i)[0]}", file=OUT)


def _listing_peak(self, t0, t1):
    res = _peak(self, t0, t1)
    if AFTER_FORWARD:
        _after_forward(self, t0, t1)
    lo, hi = bisect.bisect_left(self.ts, t0), bisect.bisect_right(self.ts, t1)
    if hi <= lo:
        return res
    bi = max(range(lo, hi), key=lambda i: self.cur[i])
    live = self.live_allocations(lo, bi + 1)
    print(f"=== peak {self.cur[bi]} B at {self.where(bi)[0]}", file=OUT)
    for i in sorted(live.values()):
        print(f"  {self.mems[i].nbytes:>10} {self.where(i)[0]}", file=OUT)
    print("  --- events around the peak (bytes, kind, live after)", file=OUT)
    for i in range(max(lo, bi - 30), min(hi, bi + 8)):
        m = self.mems[i]
        if m.kind in ("device", "scratch"):
            mark = "*" if i == bi else " "
            print(f"  {mark} {m.nbytes:>10} {m.kind:<7} {self.cur[i]:>10} {self.where(i)[0]}", file=OUT)
    return res


def main(argv):
    global AFTER_FORWARD
    if argv[:1] == ["--after-forward"]:
        AFTER_FORWARD, argv = True, argv[1:]
    if len(argv) != 1:
        sys.exit(__doc__)
    allocs.Timeline.peak = _listing_peak
    import probe_vlm_peft

    vlm = any(c["name"] == argv[0] for c in probe_vlm_peft.all_cases())
    if vlm:
        run = probe_vlm_peft.main
    else:
        import probe_peft
        run = probe_peft.main

    with open(os.devnull, "w") as devnull:
        sys.stdout = devnull
        try:
            return run(["--stdout", "--case", argv[0]])
        finally:
            sys.stdout = OUT


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
