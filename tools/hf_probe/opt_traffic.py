"""Bytes the optimizer step moves per trainable element, counted op by op.

Runs torch.optim.AdamW (foreach, fused, single-tensor) and clip_grad_norm_ on a tiny model
on the CPU under a TorchDispatchMode that records every aten op with its tensor arguments:
an op reads each distinct tensor argument once and writes the arguments its schema marks
written; an out-of-place op reads
its tensor arguments and writes its outputs. Prints bytes read + written per parameter
element by op, for fp32 and bf16 parameters (states take the parameter's dtype).
Usage: python3 tools/hf_probe/opt_traffic.py
"""
import collections
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class Count(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        base = str(func.overloadpacket.__name__)
        # the schema says which arguments an op writes (alias_info.is_write: lerp_'s self,
        # _fused_adamw_'s params, exp_avgs, exp_avg_sqs); out-of-place ops write their outputs
        written = []
        for a, v in zip(func._schema.arguments, args):
            if a.alias_info is not None and a.alias_info.is_write:
                written += [t for t in tree_flatten(v)[0] if isinstance(t, torch.Tensor)]
        if base.startswith("_fused_adam") and kwargs.get("grad_scale") is None:
            # the CUDA kernel (FusedAdamKernel / fused_adam_utils.cuh) stores the gradient
            # back only when it unscales it (grad_scale given): the schema's (b!) is not a write
            written = [t for t in written if all(t is not g for g in args[1])]
        if not written:
            written = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        seen, rd = set(), 0
        for t in tree_flatten((args, kwargs))[0]:  # a tensor passed twice is read once
            if isinstance(t, torch.Tensor) and t.data_ptr() not in seen:
                seen.add(t.data_ptr())
                rd += t.numel() * t.element_size()
        wr = sum(t.numel() * t.element_size() for t in written)
        self.ops.append((base, rd, wr))
        return out


def model(dtype):
    torch.manual_seed(0)
    m = torch.nn.Sequential(*[torch.nn.Linear(256, 256, bias=False) for _ in range(4)]).to(dtype)
    for p in m.parameters():
        p.grad = torch.randn_like(p)
    return m


def run(label, dtype, step):
    m = model(dtype)
    n = sum(p.numel() for p in m.parameters())
    step(m)  # first step creates the states (lazy init); count the second
    for p in m.parameters():
        p.grad = torch.randn_like(p)
    with Count() as c:
        step(m)
    per = collections.OrderedDict()
    big = 0.0
    for base, rd, wr in c.ops:
        if rd + wr < n:  # scalar / step-counter ops: not parameter-sized
            continue
        per.setdefault(base, [0, 0])
        per[base][0] += rd
        per[base][1] += wr
        big += rd + wr
    print(f"{label} {dtype}: {big / n:.1f} bytes/element "
          f"({big / n / torch.empty((), dtype=dtype).element_size():.1f} passes)")
    for k, (rd, wr) in per.items():
        print(f"    {k:28s} read {rd / n:5.1f}  write {wr / n:5.1f}")


def adamw(**kw):
    state = {}

    def step(m):
        if "opt" not in state:
            state["opt"] = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.0, **kw)
        state["opt"].step()
    return step


def unscale(m):
    opt = torch.optim.SGD(m.parameters(), lr=0.0)
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(torch.ones(()))  # creates the scale, as scaler.scale(loss) does
    scaler.unscale_(opt)


def clip(m):
    torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0, foreach=True)


if __name__ == "__main__":
    print("torch", torch.__version__)
    for dt in (torch.float32, torch.bfloat16):
        run("adamw foreach", dt, adamw(foreach=True))
        run("adamw fused", dt, adamw(fused=True))
        run("adamw single-tensor", dt, adamw(foreach=False))
        run("clip_grad_norm_ foreach", dt, clip)
    run("GradScaler.unscale_ (fp32 grads)", torch.float32, unscale)
    from torch.optim.optimizer import _default_to_fused_or_foreach
    m = model(torch.float32)
    print("_default_to_fused_or_foreach on CPU params (fused, foreach):",
          _default_to_fused_or_foreach(list(m.parameters()), False, False))
