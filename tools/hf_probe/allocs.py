"""Live bytes of a training step from the CPU allocator, as torch's own profiler reports
every allocation and free (torch.profiler, profile_memory=True).

Why a second measurement next to the probe's TorchDispatchMode storage tracker: a
Python dispatch mode changes what it measures. Every tensor an op returns gets a Python
object while it passes through the mode, which holds a reference the autograd engine
counts, and in torch 2.15 the engine's InputBuffer accumulates a second gradient
contribution in place only when it holds the last reference (can_accumulate_inplace).
Under any dispatch mode (also PyTorch's MemTracker) every such sum becomes a new
buffer: e.g. a tied embedding under AMP shows three [vocab, hidden] fp32 buffers where a
plain run has two (FINDINGS.md R-PROBE-2). The profiler hooks the C++ allocator and
leaves reference counts alone.

Classification of the allocations:
  * host: made inside a "gckpt::host" range (offload's pinned copies, checkpoint's CPU
    RNG state): host memory on a GPU machine;
  * kernel scratch: allocated and freed inside the same aten op with no computing op
    nested around the allocation (e.g. CPU flash attention's per-thread buffers); on a
    GPU these are registers / shared memory. Reported, not counted as live bytes;
  * everything else: device bytes.
Phases and regions come from record_function ranges the probe opens (micro-steps,
forward / backward, the loss, layer boundaries); a backward node gets the region of the
forward op with the same sequence number.
"""
from __future__ import annotations

import bisect
import json
import os
import tempfile

from torch.profiler import ProfilerActivity, profile, record_function

PREFIX = "gckpt::"
# ops that only allocate: an allocation inside one belongs to the op around it
ALLOC_ONLY = {"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::zeros", "aten::zeros_like",
              "aten::new_empty", "aten::new_empty_strided", "aten::new_zeros", "aten::resize_", "aten::fill_",
              "aten::zero_", "aten::full", "aten::new_full", "aten::ones", "aten::ones_like"}


def host():
    """Allocations inside are host memory on a GPU machine."""
    return record_function(PREFIX + "host")


def mark(name: str):
    """A zero-length marker at this point of the timeline."""
    with record_function(PREFIX + "mark::" + name):
        pass


def span(name: str):
    return record_function(PREFIX + "span::" + name)


def recorder():
    return profile(activities=[ProfilerActivity.CPU], profile_memory=True)


def trace_events(prof):
    fd, path = tempfile.mkstemp(suffix=".json", prefix="gckpt-prof-")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            tr = json.load(f)
    finally:
        os.unlink(path)
    return tr["traceEvents"] if isinstance(tr, dict) else tr


class Mem:
    __slots__ = ("ts", "nbytes", "addr", "compute", "aten", "node", "kind")

    def __init__(self, ts, nbytes, addr):
        self.ts, self.nbytes, self.addr = ts, nbytes, addr
        self.compute = self.aten = self.node = None
        self.kind = "device"


def _attach_ops(ops, mems):
    """For each memory event, the innermost computing op, aten op and autograd node
    around it (one sweep; ops of a thread nest)."""
    ops = sorted(ops, key=lambda o: (o["ts"], -o["dur"]))
    stack, j = [], 0
    for m in mems:
        while j < len(ops) and ops[j]["ts"] <= m.ts:
            o = ops[j]
            while stack and stack[-1]["ts"] + stack[-1]["dur"] < o["ts"]:
                stack.pop()
            stack.append(o)
            j += 1
        while stack and stack[-1]["ts"] + stack[-1]["dur"] < m.ts:
            stack.pop()
        for o in reversed(stack):
            n = o["name"]
            if m.compute is None and n not in ALLOC_ONLY:
                m.compute = o
            if m.aten is None and n.startswith("aten::") and n not in ALLOC_ONLY:
                m.aten = o
            if m.node is None and n.startswith("autograd::engine::evaluate_function"):
                m.node = o
            if m.compute is not None and m.aten is not None and m.node is not None:
                break


class Timeline:
    """Device live bytes after every allocation event of a recorded window."""

    def __init__(self, events, baseline: int):
        ops_by_tid, mems_by_tid = {}, {}
        spans, marks = [], []
        for e in events:
            ph, name = e.get("ph"), e.get("name", "")
            if ph == "X" and e.get("cat") == "user_annotation" and name.startswith(PREFIX):
                rest = name[len(PREFIX):]
                if rest.startswith("span::"):
                    spans.append((e["ts"], e["ts"] + e["dur"], rest[6:]))
                elif rest.startswith("mark::"):
                    marks.append((e["ts"], rest[6:]))
                elif rest == "host":
                    spans.append((e["ts"], e["ts"] + e["dur"], "host"))
            elif ph == "X" and e.get("cat") == "cpu_op":
                ops_by_tid.setdefault(e.get("tid"), []).append(e)
            elif ph == "i" and name == "[memory]" and e["args"].get("Device Type", 0) == 0:
                mems_by_tid.setdefault(e.get("tid"), []).append(Mem(e["ts"], e["args"]["Bytes"], e["args"]["Addr"]))
        mems = []
        for tid, ms in mems_by_tid.items():
            ms.sort(key=lambda m: m.ts)
            _attach_ops(ops_by_tid.get(tid, []), ms)
            mems += ms
        mems.sort(key=lambda m: m.ts)
        host_spans = sorted((s, t) for s, t, n in spans if n == "host")
        host_starts = [s for s, _ in host_spans]

        def in_host(ts):
            i = bisect.bisect_right(host_starts, ts) - 1
            return i >= 0 and host_spans[i][1] >= ts

        live = {}
        for m in mems:
            if m.nbytes > 0:
                m.kind = "host" if in_host(m.ts) else "device"
                live[m.addr] = m
                continue
            a = live.pop(m.addr, None)
            if a is None:
                # allocated before the window (the profiler's reporter remembers sizes
                # across sessions, e.g. an earlier case's garbage): not ours
                m.kind = "outside"
                continue
            if a.kind == "device" and a.compute is not None and a.compute["name"].startswith("aten::") \
                    and m.compute is a.compute:
                a.kind = "scratch"  # freed inside the op that allocated it
            m.kind = a.kind
        self.mems = mems
        self.baseline = baseline
        cur, scratch, host_b = baseline, 0, 0
        self.cur, self.host, self.scratch = [], [], []
        self.scratch_peak = 0
        for m in mems:
            if m.kind == "device":
                cur += m.nbytes
            elif m.kind == "outside":
                pass
            elif m.kind == "scratch":
                scratch += m.nbytes
                self.scratch_peak = max(self.scratch_peak, scratch)
            else:
                host_b += m.nbytes
            self.cur.append(cur)
            self.host.append(host_b)
            self.scratch.append(scratch)
        self.ts = [m.ts for m in mems]
        self.spans = sorted(s for s in spans if s[2] != "host")
        self.marks = sorted(marks)
        self.region_marks = [(t, n[len("region::"):]) for t, n in self.marks if n.startswith("region::")]
        self.rm_ts = [t for t, _ in self.region_marks]
        self.recompute_marks = [(t, n[len("recompute::"):]) for t, n in self.marks if n.startswith("recompute::")]
        # micro-step -> times of its loss marks (one per step when a recording spans several)
        self.loss_marks = {}
        for t, n in self.marks:
            if n.startswith("loss::"):
                self.loss_marks.setdefault(n[len("loss::"):], []).append(t)
        # forward ops' sequence numbers -> region, for the backward nodes they create
        self.seq_region = {}
        fwd = [(s, e) for s, e, n in self.spans if n.endswith("/forward")]
        for ops in ops_by_tid.values():
            for o in ops:
                seq = o.get("args", {}).get("Sequence number")
                if seq is None or o["name"].startswith("autograd::") or seq in self.seq_region:
                    continue
                if any(s <= o["ts"] <= e for s, e in fwd):
                    self.seq_region[seq] = self._fwd_region(o["ts"])

    def _fwd_region(self, ts):
        i = bisect.bisect_right(self.rm_ts, ts) - 1
        return self.region_marks[i][1] if i >= 0 else "-"

    def phase(self, ts):
        micro, phase, start = 0, "idle", 0
        for s, e, name in self.spans:
            if s > ts:
                break
            if e < ts:
                continue
            if name.startswith("micro"):
                m, _, ph = name.partition("/")
                micro, phase, start = int(m[5:]), ph, s
            else:
                phase = name
        if phase == "forward" and any(start <= t <= ts for t in self.loss_marks.get(f"micro{micro}", ())):
            phase = "loss"
        return micro, phase

    def where(self, i):
        m = self.mems[i]
        micro, phase = self.phase(m.ts)
        op = m.aten["name"].replace("::", ".") if m.aten else (m.compute["name"] if m.compute else "-")
        region, rc = "-", ""
        if phase in ("forward", "loss"):
            region = self._fwd_region(m.ts)
        elif phase == "backward":
            if m.node is not None:
                region = self.seq_region.get(m.node.get("args", {}).get("Sequence number"), "-")
                node_end = m.node["ts"] + m.node["dur"]
                for t, layer in self.recompute_marks:
                    if m.node["ts"] <= t <= m.ts <= node_end:
                        region, rc = layer, "(recompute)"
            else:
                region = "head"  # the loss's seed gradient
        return f"micro{micro}/{phase}/{region}{rc}/-/{op}", phase

    def live_at(self, ts):
        """Device bytes after every event up to ts."""
        i = bisect.bisect_right(self.ts, ts) - 1
        return self.cur[i] if i >= 0 else self.baseline

    def peak(self, t0, t1):
        """(bytes, where, phase) of the device peak within [t0, t1]."""
        lo, hi = bisect.bisect_left(self.ts, t0), bisect.bisect_right(self.ts, t1)
        best, bi = self.live_at(t0), None
        for i in range(lo, hi):
            if self.cur[i] > best:
                best, bi = self.cur[i], i
        if bi is None:
            return best, None, None
        w, ph = self.where(bi)
        return best, w, ph

    def region_peaks(self, t0, t1, floor):
        """{"phase/region": the most live bytes while that region runs} over [t0, t1], for
        the events at or above floor (the regions that come near the peak; a recompute
        counts to its layer's backward)."""
        lo, hi = bisect.bisect_left(self.ts, t0), bisect.bisect_right(self.ts, t1)
        out = {}
        for i in range(lo, hi):
            if self.cur[i] < floor:
                continue
            w, _ = self.where(i)
            _, ph, region, _, _ = w.split("/", 4)
            key = f"{ph}/{region.replace('(recompute)', '')}"
            out[key] = max(out.get(key, 0), self.cur[i])
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def live_allocations(self, lo, hi):
        """{address: event index} of the device allocations made by events [lo, hi) and not
        freed by then (peak_live.py, alloc_live.py)."""
        live = {}
        for i in range(lo, hi):
            m = self.mems[i]
            if m.kind != "device":
                continue
            if m.nbytes > 0:
                live[m.addr] = i
            else:
                live.pop(m.addr, None)
        return live

    def index_range(self, t0, t1):
        """Indices of the events within [t0, t1]."""
        return bisect.bisect_left(self.ts, t0), bisect.bisect_right(self.ts, t1)

    def scratch_peak_in(self, t0, t1):
        """The most kernel scratch bytes alive at once within [t0, t1]."""
        lo, hi = self.index_range(t0, t1)
        return max(self.scratch[lo:hi] + [0])

    def host_peak(self, t0, t1):
        lo, hi = bisect.bisect_left(self.ts, t0), bisect.bisect_right(self.ts, t1)
        return max([self.host[i] for i in range(lo, hi)] + [0])

    def span(self, name):
        for s, e, n in self.spans:
            if n == name:
                return s, e
        return None
