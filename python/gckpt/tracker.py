"""Peak memory of one optimizer step, measured the way gckpt's plan counts it.

With CUDA: torch.cuda's allocator statistics (max_memory_allocated, max_memory_reserved)
and cudaMemGetInfo, reset after every step.

Without CUDA: the exact live bytes of every storage tensors use, counted by a
TorchDispatchMode (the method of tools/hf_probe/probe.py's storage tracker): every
tensor an aten op takes or returns is tracked by its storage until that storage is
freed; the tensors that live across steps (parameters, gradients, buffers, optimizer
states) are tracked when the step begins. What it cannot see: memory that is not a
tensor storage (kernel scratch, the allocator's caching). A Python dispatch mode also
changes what it measures a little: the autograd engine accumulates a gradient in place
only when it holds the last reference, which the mode's Python objects take away
(tools/hf_probe/allocs.py, FINDINGS R-PROBE-2); for fp32 the probe's fixtures measure
the storage tracker at most ~0.05 % above the allocator (tests/data/hf-fam).

torch is imported inside the functions: `import gckpt` needs the standard library only.
"""
from __future__ import annotations

import time


def _storage(t):
    try:
        return t.untyped_storage()
    except Exception:  # noqa: BLE001 - tensors without a storage (sparse, nested, functional)
        return None


def _tensors(obj):
    """The tensors of a nested structure of lists, tuples and dicts."""
    import torch

    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            yield from _tensors(x)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from _tensors(x)


_MODE_CLASS = None


def _mode_class():
    """The TorchDispatchMode subclass, built on first use (torch imported lazily)."""
    global _MODE_CLASS
    if _MODE_CLASS is not None:
        return _MODE_CLASS
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten
    import torch

    expired = torch.UntypedStorage._expired

    class LiveBytes(TorchDispatchMode):
        """Live bytes of every storage an op touches, and their peak."""

        def __init__(self):
            super().__init__()
            self.live = {}  # storage key -> (weak reference, bytes): polled after every op
            self.resident = set()  # keys of what lives through the step (never polled)
            self.bytes = 0
            self.peak = 0

        def track(self, t, resident=False):
            if not isinstance(t, torch.Tensor) or t.device.type == "meta":
                return
            st = _storage(t)
            if st is None:
                return
            key = st._cdata
            if key in self.live or key in self.resident:
                return
            n = st.nbytes()
            if resident:
                self.resident.add(key)
            else:
                self.live[key] = (StorageWeakRef(st), n)
            self.bytes += n

        def poll(self):
            dead = [k for k, (ref, _) in self.live.items() if expired(ref.cdata)]
            for k in dead:
                self.bytes -= self.live.pop(k)[1]

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            self.poll()
            for t in tree_flatten((args, kwargs))[0]:
                if isinstance(t, torch.Tensor):
                    self.track(t)
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor):
                    self.track(t)
            if self.bytes > self.peak:
                self.peak = self.bytes
            return out

    _MODE_CLASS = LiveBytes
    return LiveBytes


def resident_tensors(model, optimizer):
    """What lives through a step: parameters, buffers and optimizer states (gradients
    are None between the Trainer's steps: its zero_grad sets them to None)."""
    out = list(model.parameters())
    out += list(model.buffers())
    inner = getattr(optimizer, "optimizer", optimizer)  # accelerate's AcceleratedOptimizer wraps it
    if inner is not None:
        for st in inner.state.values():
            out += list(_tensors(st))
    return out


class CpuStepTracker:
    """Exact live bytes of one step on the CPU (see the module's docstring)."""

    kind = "cpu"

    def __init__(self):
        self.mode = None
        self.entered = False
        self.t0 = None

    def begin(self, model, optimizer):
        self.close()
        self.mode = _mode_class()()
        for t in resident_tensors(model, optimizer):
            self.mode.track(t, resident=True)
        for p in model.parameters():  # gradients kept from before the step (not the Trainer's way)
            if p.grad is not None:
                self.mode.track(p.grad)
        self.mode.peak = self.mode.bytes
        self.mode.__enter__()
        self.entered = True
        self.t0 = time.perf_counter()

    def end(self):
        """The step's figures: peak_bytes, reserved_bytes, device_used_bytes, step_s."""
        if self.mode is None:
            return None
        dt = time.perf_counter() - self.t0
        self.close()
        mode, self.mode = self.mode, None
        mode.poll()
        return {"peak_bytes": mode.peak, "reserved_bytes": None, "device_used_bytes": None,
                "device_total_bytes": None, "step_s": dt}

    def close(self):
        """Leave the dispatch mode (idempotent: also after an exception in the step)."""
        if self.entered:
            self.entered = False
            self.mode.__exit__(None, None, None)


class CudaStepTracker:
    """torch.cuda's peak statistics of one step, reset before it (per process: per rank)."""

    kind = "cuda"

    def __init__(self, device=None):
        import torch

        self.torch = torch
        self.device = torch.cuda.current_device() if device is None else device
        self.t0 = None
        self.used_peak = 0

    def begin(self, model=None, optimizer=None):
        cuda = self.torch.cuda
        cuda.synchronize(self.device)
        cuda.reset_peak_memory_stats(self.device)
        self.t0 = time.perf_counter()

    def end(self):
        cuda = self.torch.cuda
        cuda.synchronize(self.device)
        dt = time.perf_counter() - self.t0
        free, total = cuda.mem_get_info(self.device)
        reserved_peak = int(cuda.max_memory_reserved(self.device))
        # what the process holds besides PyTorch's cache (context, cuBLAS, NCCL) is
        # used - reserved now; the device peak is that plus the cache's peak
        other = int(total - free) - int(cuda.memory_reserved(self.device))
        return {"peak_bytes": int(cuda.max_memory_allocated(self.device)), "reserved_bytes": reserved_peak,
                "device_used_bytes": reserved_peak + max(other, 0), "device_total_bytes": int(total), "step_s": dt}

    def close(self):
        pass


def step_tracker():
    """CudaStepTracker when torch sees a CUDA device, else CpuStepTracker."""
    import torch

    return CudaStepTracker() if torch.cuda.is_available() else CpuStepTracker()
