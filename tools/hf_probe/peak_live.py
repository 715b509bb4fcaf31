#!/usr/bin/env python3
"""What is live at the measured peak of one peft case: every device allocation still
alive at the step's peak (size and where it was made), then the allocator events around
the peak (* marks it). The numbers are the fixture's: the case runs as probe_peft.py runs
it, and the listing is taken from the same allocator timeline at the index of the peak.

  peak_live.py CASE        e.g. llama-qlora-int8-fp32-all-d0.05-sdpa-n3-plain-b2s32

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


def _listing_peak(self, t0, t1):
    res = _peak(self, t0, t1)
    lo, hi = bisect.bisect_left(self.ts, t0), bisect.bisect_right(self.ts, t1)
    if hi <= lo:
        return res
    bi = max(range(lo, hi), key=lambda i: self.cur[i])
    live = {}
    for i in range(lo, bi + 1):
        m = self.mems[i]
        if m.kind != "device":
            continue
        if m.nbytes > 0:
            live[m.addr] = i
        else:
            live.pop(m.addr, None)
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
    if len(argv) != 1:
        sys.exit(__doc__)
    allocs.Timeline.peak = _listing_peak
    import probe_peft

    with open(os.devnull, "w") as devnull:
        sys.stdout = devnull
        try:
            return probe_peft.main(["--stdout", "--case", argv[0]])
        finally:
            sys.stdout = OUT


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
