"""Liger's SwiGLU (LigerSiLUMulFunction, what use_liger_kernel=True puts in LlamaMLP's place)
against transformers' act_fn(gate) * up, both on the CPU under the storage tracker (the method
of probe.py, python/gckpt/tracker.py): what each keeps for the backward and what its
backward allocates.

liger-kernel 0.8.5's own Python code runs (ops/swiglu.py: LigerSiLUMulFunction,
swiglu_forward, swiglu_backward; it imports with the triton torch's wheel brings); its two
Triton kernel launches are replaced by PyTorch ops that write what the kernel writes into the
buffers the wrapper passed (the forward c; the backward da into a and db into b, in place).
The tracker's reading is taken as each launch begins, before those ops allocate anything.

The planner's Liger SwiGLU (GCKPT_P_SWIGLU under --loss liger, FINDINGS R-LOSS-5) is tested
against these readings (tests/test_fused_loss.c liger_swiglu_cpu_rerun).

Install the package without its dependencies (setup.sh does; triton comes with torch):
  pip install --no-deps -r tools/hf_probe/requirements-loss.txt
Writes tests/data/fused-loss/liger-swiglu.json:
  python3 tools/hf_probe/liger_swiglu_rerun.py [--out FILE]
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
from gckpt.tracker import _mode_class  # noqa: E402

LIGER_VERSION = "0.8.5"
CASES = [(2, 48, 160), (1, 100, 352)]  # (batch, seq, intermediate), bf16


class Readings:
    mode = None
    base = 0
    at = {}


def _reading(name):
    Readings.mode.poll()
    Readings.at[name] = Readings.mode.bytes - Readings.base


class _Launch:
    def __init__(self, name, fn):
        self.name, self.fn = name, fn

    def __getitem__(self, grid):
        def launch(*a, **k):
            _reading(self.name)
            with torch.no_grad():
                self.fn(*a, **k)
        return launch


def _fwd(a, b, c, stride, gate_multiplier, *rest, **k):
    af = a.float() * gate_multiplier
    c.copy_((af * torch.sigmoid(af)).to(b.dtype) * b)


def _bwd(dc, a, b, stride, gate_multiplier, *rest, **k):
    af = a.float() * gate_multiplier
    sig = torch.sigmoid(af)
    silu = af * sig
    db = dc.float() * silu
    da = dc.float() * b.float() * (silu * (1 - sig) + sig) * gate_multiplier
    a.copy_(da.to(a.dtype))
    b.copy_(db.to(b.dtype))


def measure(fn, B, S, I, liger):
    """Bytes above the inputs: after the forward (the output and what is kept), and the peak
    of the backward up to the moment both input gradients exist (Liger: the live bytes as its
    kernel launches; after it nothing is allocated, the gradients are the inputs' storage)."""
    torch.manual_seed(0)
    a = torch.randn(B, S, I, dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn(B, S, I, dtype=torch.bfloat16, requires_grad=True)
    mode = _mode_class()()
    ga, gb = a * 1, b * 1  # the gate and up projections' outputs (activations, not leaves)
    for t in (a, b, ga, gb):
        mode.track(t, resident=True)
    Readings.mode, Readings.base, Readings.at = mode, mode.bytes, {}
    seen = {}

    def hook(name, src_ptr):
        def h(g):
            mode.poll()
            seen[name] = (mode.peak - Readings.base, g.untyped_storage().data_ptr() == src_ptr)
        return h
    ga.register_hook(hook("a", ga.untyped_storage().data_ptr()))
    gb.register_hook(hook("b", gb.untyped_storage().data_ptr()))
    with mode:
        c = fn(ga, gb)
        mode.poll()
        kept = mode.bytes - Readings.base
        dc = torch.ones_like(c)
        mode.poll()
        mode.peak = mode.bytes
        c.backward(dc)
    peak = Readings.at["bwd"] if liger else max(seen["a"][0], seen["b"][0])
    return {"kept_with_output": kept, "backward_peak_with_dc": peak,
            "input_grads_in_input_storage": seen["a"][1] and seen["b"][1],
            "grad_a": a.grad.float().sum().item(), "grad_b": b.grad.float().sum().item()}


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "fused-loss", "liger-swiglu.json"))
    args = ap.parse_args(argv)
    version = importlib.metadata.version("liger-kernel")
    if version != LIGER_VERSION:
        raise SystemExit(f"liger_swiglu_rerun.py: liger-kernel {version} installed, the rules are read in {LIGER_VERSION}")
    import liger_kernel.ops.swiglu as sw

    sw._swiglu_forward_kernel = _Launch("fwd", _fwd)
    sw._swiglu_backward_kernel = _Launch("bwd", _bwd)
    eager = lambda g, u: torch.nn.functional.silu(g) * u  # LlamaMLP: act_fn(gate_proj(x)) * up_proj(x)
    liger = lambda g, u: sw.LigerSiLUMulFunction.apply(g, u)
    cases = []
    for B, S, I in CASES:
        e, lg = measure(eager, B, S, I, False), measure(liger, B, S, I, True)
        row = B * S * I * 2  # one bf16 [b, s, I] tensor
        cases.append({"batch": B, "seq": S, "intermediate": I, "bf16_tensor_bytes": row,
                      "eager": {k: v for k, v in e.items() if not k.startswith("grad")},
                      "liger": {k: v for k, v in lg.items() if not k.startswith("grad")},
                      "same_gradients": abs(e["grad_a"] - lg["grad_a"]) <= 1e-2 * max(1.0, abs(e["grad_a"]))
                      and abs(e["grad_b"] - lg["grad_b"]) <= 1e-2 * max(1.0, abs(e["grad_b"]))})
    doc = {"schema": "gckpt.liger-swiglu/1", "liger_kernel": version, "torch": torch.__version__.split("+")[0],
           "command": "python3 tools/hf_probe/liger_swiglu_rerun.py", "cases": cases}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    for c in cases:
        print(c)
    return 0 if all(c["same_gradients"] for c in cases) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
