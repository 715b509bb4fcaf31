"""What PyTorch's CPU kernels allocate for a mixed-dtype elementwise op (bf16 with fp32),
as LoRA and QLoRA run them: the base layer's bf16 output plus the adapter's fp32 output,
a norm's fp32 weight times a bf16 activation, and the backward's grad * other.

TensorIterator (aten/src/ATen/TensorIterator.cpp, compute_types) on the CPU copies every
input whose dtype is not the common dtype (`op.tensor().to(common_dtype_)`, the input's
own shape) and, for an output of another dtype (an in-place or out= op), computes into a
temporary of the common dtype and copies back; on CUDA the kernel casts on the fly and
allocates neither. This script measures the CPU side with torch.profiler
(profile_memory=True): every allocation made while the op runs, besides its result.

    tools/hf_probe/.venv/bin/python tools/hf_probe/mixed_dtype_copies.py
"""
from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import allocs  # noqa: E402  (the probe's allocator reader: the trace's [memory] events)

T, H = 64, 48  # tokens, features (the fixtures' tiny sizes)


def allocations(fn):
    """Bytes of every CPU allocation made inside fn, in order (frees are negative)."""
    with allocs.recorder() as prof:
        out = fn()
    ev = [e for e in allocs.trace_events(prof)
          if e.get("ph") == "i" and e.get("name") == "[memory]" and e["args"].get("Device Type", 0) == 0]
    return out, [e["args"]["Bytes"] for e in sorted(ev, key=lambda e: e["ts"])]


def case(name, fn, result_bytes):
    out, seq = allocations(fn)
    temps = [b for b in seq if b > 0]
    if result_bytes in temps:
        temps.remove(result_bytes)  # the op's own result
    print(f"{name:58s} result {result_bytes:6d} B, temporaries {temps or 'none'}")
    return temps


def main():
    torch.manual_seed(0)
    bf = torch.randn(T, H).bfloat16()
    f32 = torch.randn(T, H)
    w32 = torch.randn(H)
    s32 = torch.tensor(2.0)
    print(f"torch {torch.__version__}, CPU, [T, H] = [{T}, {H}]")
    case("bf16 [T,H] + fp32 [T,H] (peft: result + lora_out)", lambda: bf + f32, T * H * 4)
    case("fp32 [T,H] + bf16 [T,H]", lambda: f32 + bf, T * H * 4)
    case("bf16 [T,H] * fp32 [H] (broadcast weight)", lambda: bf * w32, T * H * 4)
    case("bf16 [T,H] * fp32 0-dim tensor", lambda: bf * s32, T * H * 2)
    case("bf16 [T,H] + bf16 [T,H] (same dtype)", lambda: bf + bf, T * H * 2)
    case("fp32 [T,H] + fp32 [T,H] (same dtype)", lambda: f32 + f32, T * H * 4)
    x = bf.clone()
    case("bf16 [T,H].add_(fp32 [T,H]) (in place, bf16 output)", lambda: x.add_(f32), 0)
    y = f32.clone()
    case("fp32 [T,H].add_(bf16 [T,H]) (in place, fp32 output)", lambda: y.add_(bf), 0)


if __name__ == "__main__":
    main()
