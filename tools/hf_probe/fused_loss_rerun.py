"""Liger's fused linear cross-entropy re-run with PyTorch ops on the CPU, at its chunking,
under the storage tracker gckpt's CPU step tracker uses (python/gckpt/tracker.py, the
method of probe.py): what the algorithm allocates, keeps and hands on.

liger-kernel 0.8.5, ops/fused_linear_cross_entropy.py, fused_linear_cross_entropy_forward
with reduction "sum" / "mean" (the gradients made in the forward) and _can_use_mm_out true
(grad mode is off in an autograd.Function's forward, no autocast, operands of one dtype:
the CUDA path of a bf16 or fp32 model). Triton does not run here: the cross-entropy kernel,
which writes the logits' gradient into the logits chunk in place from registers, is
replaced by in-place PyTorch ops on the chunk; their per-row statistics ([rows] tensors)
are the re-run's own and are not part of what is compared (the tracker's reading is taken
at the points named below, where none of them is live).

Writes tests/data/fused-loss/liger-rerun.json (read by tests/test_fused_loss.c):
  python3 tools/hf_probe/fused_loss_rerun.py [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
from gckpt.tracker import _mode_class  # noqa: E402

SCHEMA = "gckpt.fused-loss-rerun/1"
LIGER_VERSION = "0.8.5"
CASES = [  # (BT, H, V, dtype)
    (96, 64, 211, "bf16"),
    (100, 48, 1000, "bf16"),
    (64, 32, 500, "fp32"),
    (257, 64, 4099, "bf16"),
    (96, 64, 211, "amp-bf16"),
    (100, 48, 1000, "amp-bf16"),
    (8, 64, 100, "amp-bf16"),
]


def next_power_of_2(x: int) -> int:
    p = 1
    while p < x:
        p <<= 1
    return p


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class Readings:
    mode = None
    before_loop = None  # live bytes once the forward's buffers exist (before the first chunk)
    at_logits = None    # amp: live bytes once the first chunk's logits exist
    chunk = None


def ce_grad_in_place(logits, target, n_non_ignore, loss_slice):
    """What liger_cross_entropy_kernel does to one chunk: the loss per row into loss_slice,
    the logits replaced by their gradient (softmax - one_hot) / n, in place."""
    rows = torch.arange(logits.shape[0])
    x_y = logits[rows, target].float()
    m = logits.max(dim=1, keepdim=True).values
    logits.sub_(m)
    logits.exp_()
    s = logits.float().sum(dim=1)
    loss_slice.copy_((torch.log(s) + m.squeeze(1).float() - x_y) / n_non_ignore)
    logits.div_(s.to(logits.dtype).unsqueeze(1))
    logits[rows, target] -= 1
    logits.div_(n_non_ignore)


class LigerRerun(torch.autograd.Function):
    @staticmethod
    def forward(ctx, _input, weight, target):
        BT, H = _input.shape
        V = weight.shape[0]
        inc_factor = cdiv(V, 1 * H)
        chunk_size = min(next_power_of_2(cdiv(BT, inc_factor)), BT)
        num_chunks = cdiv(BT, chunk_size)
        Readings.chunk = chunk_size
        grad_input = torch.zeros_like(_input)
        grad_weight = torch.zeros_like(weight)
        loss_1d = torch.zeros(BT, dtype=torch.float32)
        target_mask = target != -100
        total_n_non_ignore = target_mask.sum().item()
        amp = torch.is_autocast_enabled("cpu")
        # _can_use_mm_out: false under autocast with an fp32 input (not the autocast dtype)
        logits_storage = None if amp else torch.empty((chunk_size, V), dtype=_input.dtype)
        Readings.mode.poll()
        Readings.before_loop = Readings.mode.bytes
        for chunk_id in range(num_chunks):
            start_idx = chunk_id * chunk_size
            end_idx = min((chunk_id + 1) * chunk_size, BT)
            _input_chunk = _input[start_idx:end_idx]
            if amp:
                # autocast: bf16, on casts of the chunk and of weight.t() (a view made with grad
                # mode off: not cached, cast again by every chunk); the second chunk's GEMM also
                # sees the cached cast of weight that chunk 0's input-gradient GEMM made
                last = chunk_id == min(1, num_chunks - 1)
                if last:
                    Readings.mode.poll()
                    Readings.mode.peak = Readings.mode.bytes
                logits_chunk = _input_chunk @ weight.t()
                if last:
                    Readings.at_logits = Readings.mode.peak
            else:
                logits_chunk = logits_storage[: end_idx - start_idx]
                torch.mm(_input_chunk, weight.t(), out=logits_chunk)
            ce_grad_in_place(logits_chunk, target[start_idx:end_idx], total_n_non_ignore, loss_1d[start_idx:end_idx])
            if amp:
                grad_input[start_idx:end_idx] = logits_chunk @ weight
                # the CUDA path's addmm(out_dtype=fp32) into the fp32 accumulator: emulated in
                # fp32 here (the CPU has no out_dtype addmm); not part of the comparison
                grad_weight.addmm_(logits_chunk.t().float(), _input_chunk)
            else:
                torch.mm(logits_chunk, weight, out=grad_input[start_idx:end_idx])
                torch.addmm(grad_weight, logits_chunk.t(), _input_chunk, out=grad_weight)
            del logits_chunk, _input_chunk
        del logits_storage
        loss = torch.sum(loss_1d)
        ctx.save_for_backward(grad_input.detach(), grad_weight.detach())
        LigerRerun.last_kept = (grad_input.untyped_storage().data_ptr(), grad_weight.untyped_storage().data_ptr())
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        grad_input, grad_weight = ctx.saved_tensors
        if not torch.equal(grad_output, torch.tensor(1.0)):
            grad_input.mul_(grad_output)  # element_mul_kernel: in place
            grad_weight.mul_(grad_output)
        return grad_input, grad_weight, None


def run_case(BT, H, V, dt):
    amp = dt == "amp-bf16"
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32, "amp-bf16": torch.float32}[dt]
    torch.manual_seed(0)
    x = torch.randn(BT, H, dtype=dtype, requires_grad=True)
    w = torch.nn.Parameter(torch.randn(V, H, dtype=dtype) * 0.05)
    target = torch.randint(0, V, (BT,))
    mode = _mode_class()()
    for t in (x, w, target):
        mode.track(t, resident=True)
    base = mode.bytes
    Readings.mode = mode
    Readings.at_logits = None
    with mode:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            loss = LigerRerun.apply(x, w, target)
            mode.poll()
            in_autocast = mode.bytes  # amp: the weight's cached cast is still alive here
        mode.poll()
        after_forward = mode.bytes
        (loss / 3.0).backward()  # a num_items_in_batch division: grad_output != 1
        mode.poll()
        after_backward = mode.bytes
    kept = LigerRerun.last_kept
    # the check against the eager loss: the re-run computes Liger's loss and gradients
    xr = x.detach().float().requires_grad_(True)
    wr = w.detach().float().requires_grad_(True)
    ref = torch.nn.functional.cross_entropy(xr @ wr.t(), target, reduction="sum") / BT / 3.0
    ref.backward()
    ok = (torch.allclose(loss.float() / 3.0, ref, rtol=2e-2, atol=2e-2)
          and torch.allclose(x.grad.float(), xr.grad, rtol=5e-2, atol=5e-3)
          and torch.allclose(w.grad.float(), wr.grad, rtol=5e-2, atol=5e-3))
    return {
        "bt": BT, "hidden": H, "vocab": V, "dtype": dt,
        "chunk_rows": Readings.chunk,
        # amp: the peak of the second chunk's logits GEMM (the only one's with one chunk): grads,
        # loss_1d, target_mask, the weight's cached bf16 cast, its transposed view's cast, the
        # chunk's cast and the bf16 logits chunk
        "live_at_logits_gemm": None if Readings.at_logits is None else Readings.at_logits - base,
        # amp: what autocast's exit frees (the weight's cached cast)
        "freed_at_autocast_exit": in_autocast - after_forward,
        # grad_input + grad_weight + loss_1d + target_mask + logits_storage
        "made_before_loop": Readings.before_loop - base,
        # the kept gradients and the scalar loss
        "kept_after_forward": after_forward - base,
        # the gradients handed on as .grad (no new buffer: the kept ones) and the loss
        "grads_after_backward": after_backward - base,
        "grad_is_kept_buffer": (x.grad.untyped_storage().data_ptr(), w.grad.untyped_storage().data_ptr()) == kept,
        "matches_eager_cross_entropy": bool(ok),
    }


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "fused-loss", "liger-rerun.json"))
    a = ap.parse_args(argv)
    cases = [run_case(*c) for c in CASES]
    doc = {"schema": SCHEMA, "liger_kernel": LIGER_VERSION, "torch": torch.__version__.split("+")[0],
           "command": "python3 tools/hf_probe/fused_loss_rerun.py", "cases": cases}
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    for c in cases:
        print(c)
    return 0 if all(c["matches_eager_cross_entropy"] for c in cases) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
