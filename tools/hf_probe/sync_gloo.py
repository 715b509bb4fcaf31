"""A gloo process group whose collectives have been released by gloo's worker thread when
they return, so that every tensor a collective used is freed on the calling thread.

Why: the allocator measurement (allocs.py, torch.profiler) sees only allocations and
frees made on the thread that profiles. gloo runs each collective on a worker thread
that keeps its reference to the work (and so to the work's tensors) a moment after the
caller's wait() returns (ProcessGroupGloo::runLoop drops it after execute()). When the
caller drops its own reference first - e.g. DDP's broadcast of the flattened parameters
at construction, inside C++ - the last reference goes on the worker thread and the
free is never reported: the timeline would keep those bytes live forever (measured:
847 680 B of a 3.4 MB tiny-llama DDP rank in one run out of two).

SyncGloo forwards every collective to a real gloo process group with one worker
thread, waits for it, then runs a gloo barrier: the worker takes work in order, so
when the barrier has completed it has dropped the collective's work. No tensor is
allocated or copied on the way; what the collective computes is gloo's. Each call is
also reported to `on_collective` (the probe's collective log).
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch._C._distributed_c10d as c10d

on_collective = None  # callable(kind, op, tensors_full, dtype) set by the probe


def _bytes(x):
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_bytes(y) for y in x)
    return 0


def _dtype(x):
    if isinstance(x, torch.Tensor):
        return str(x.dtype).replace("torch.", "")
    if isinstance(x, (list, tuple)):
        for y in x:
            d = _dtype(y)
            if d:
                return d
    return None


class SyncGloo(dist.ProcessGroup):
    def __init__(self, store, rank, size, timeout):
        super().__init__(rank, size)
        opts = dist.ProcessGroupGloo._Options()
        opts._timeout = timeout
        opts._devices = [dist.ProcessGroupGloo.create_default_device()]
        opts._threads = 1
        self.inner = dist.ProcessGroupGloo(store, rank, size, opts)
        self._size = size

    def size(self):
        return self._size

    def getBackendName(self):
        return "syncgloo"

    def _done(self, work, kind, op, full):
        work.wait()
        self.inner.barrier().wait()
        if on_collective is not None and kind:
            on_collective(kind, op, _bytes(full), _dtype(full))
        return work

    # --- collectives (bytes reported: all-reduce / broadcast buffer, all-gather output,
    #     reduce-scatter input) ---------------------------------------------------------
    def allreduce(self, tensors, opts=c10d.AllreduceOptions()):
        return self._done(self.inner.allreduce(tensors, opts), "all_reduce", "allreduce", tensors)

    def allreduce_coalesced(self, tensors, opts=c10d.AllreduceCoalescedOptions()):
        return self._done(self.inner.allreduce_coalesced(tensors, opts), "all_reduce", "allreduce_coalesced", tensors)

    def broadcast(self, tensors, opts=c10d.BroadcastOptions()):
        return self._done(self.inner.broadcast(tensors, opts), "broadcast", "broadcast", tensors)

    def reduce(self, tensors, opts=c10d.ReduceOptions()):
        return self._done(self.inner.reduce(tensors, opts), "reduce", "reduce", tensors)

    def allgather(self, outputs, inputs, opts=c10d.AllgatherOptions()):
        return self._done(self.inner.allgather(outputs, inputs, opts), "all_gather", "allgather", outputs)

    def _allgather_base(self, output, input, opts=c10d.AllgatherOptions()):
        return self._done(self.inner._allgather_base(output, input, opts), "all_gather", "_allgather_base", output)

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=c10d.AllgatherOptions()):
        return self._done(self.inner.allgather_into_tensor_coalesced(outputs, inputs, opts), "all_gather",
                          "allgather_into_tensor_coalesced", outputs)

    def allgather_coalesced(self, outputs, inputs, opts=c10d.AllgatherOptions()):
        return self._done(self.inner.allgather_coalesced(outputs, inputs, opts), "all_gather",
                          "allgather_coalesced", outputs)

    def reduce_scatter(self, output, inputs, opts=c10d.ReduceScatterOptions()):
        return self._done(self.inner.reduce_scatter(output, inputs, opts), "reduce_scatter", "reduce_scatter", inputs)

    def _reduce_scatter_base(self, output, input, opts=c10d.ReduceScatterOptions()):
        return self._done(self.inner._reduce_scatter_base(output, input, opts), "reduce_scatter",
                          "_reduce_scatter_base", input)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=c10d.ReduceScatterOptions()):
        return self._done(self.inner.reduce_scatter_tensor_coalesced(outputs, inputs, opts), "reduce_scatter",
                          "reduce_scatter_tensor_coalesced", inputs)

    def gather(self, outputs, inputs, opts=c10d.GatherOptions()):
        return self._done(self.inner.gather(outputs, inputs, opts), "gather", "gather", inputs)

    def scatter(self, outputs, inputs, opts=c10d.ScatterOptions()):
        return self._done(self.inner.scatter(outputs, inputs, opts), "scatter", "scatter", outputs)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=c10d.AllToAllOptions()):
        return self._done(self.inner.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts),
                          "all_to_all", "alltoall_base", input)

    def barrier(self, opts=c10d.BarrierOptions()):
        w = self.inner.barrier(opts)
        w.wait()
        return w


def _create(store, rank, size, timeout):
    return SyncGloo(store, rank, size, timeout)


def register():
    if "SYNCGLOO" not in dist.Backend._plugins:
        dist.Backend.register_backend("syncgloo", _create, devices=["cpu"])
