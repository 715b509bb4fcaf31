"""cut-cross-entropy's own Python code run on the CPU under the storage tracker (the method of
probe.py, python/gckpt/tracker.py): every buffer its wrappers make, keep and hand on.

cut-cross-entropy 25.1.1, linear_cross_entropy(e, c, targets, shift=True) with the defaults
(impl "cce", reduction "mean", filter_eps "high"): cce.py (LinearCrossEntropyFunction),
utils.py (_build_flat_valids), cce_lse_forward.py, indexed_dot.py, cce_backward.py. Its
Triton kernels do not run here (no GPU; the triton that torch's wheel brings imports, so the
package does): each kernel launch is replaced by PyTorch ops that write the kernel's
outputs into the buffers the wrapper passed it. The tracker's
reading is taken as each launch begins, before the PyTorch ops allocate anything, so what
is compared is what CCE's Python code made. torch.compile'd sort_logit_avg runs eagerly
(argsort then .to(int32)); what inductor allocates for it is not measured.

Install the package without its dependencies (setup.sh does; triton comes with torch):
  pip install --no-deps -r tools/hf_probe/requirements-loss.txt
Writes tests/data/fused-loss/cce-rerun.json (read by tests/test_fused_loss.c):
  python3 tools/hf_probe/cce_rerun.py [--out FILE]
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

SCHEMA = "gckpt.cce-rerun/1"
CCE_VERSION = "25.1.1"
CASES = [  # (batch, seq, hidden, vocab)
    (1, 96, 64, 211),
    (2, 50, 48, 1000),
    (1, 257, 128, 4099),
    (3, 40, 32, 500),
]


class Readings:
    mode = None
    base = 0
    at = {}


def _reading(name):
    Readings.mode.poll()
    Readings.at[name] = Readings.mode.bytes - Readings.base
    Readings.at[name + ":peak_since_last"] = Readings.mode.peak - Readings.base
    Readings.mode.peak = Readings.mode.bytes


class _Launch:
    """kernel[grid](*args, **kw): a reading, then the PyTorch ops in its place."""

    def __init__(self, name, fn):
        self.name, self.fn = name, fn

    def __getitem__(self, grid):
        def launch(*a, **k):
            _reading(self.name)
            with torch.no_grad():
                self.fn(*a, **k)
        return launch


def _rows(e, valids):
    return e.index_select(0, valids.long()).float()


def _lse_kernel(e, c, lse, logit_avg, locks, valids, softcap, *rest, **k):
    logits = _rows(e, valids) @ c.float().t()
    lse.copy_(torch.logsumexp(logits, dim=1))
    if logit_avg is not None:
        logit_avg.copy_(torch.softmax(logits, dim=1).mean(0))


def _dot_kernel(e, c, inds, valids, out, *rest, SHIFT=False, **k):
    v = valids.long()
    tgt = inds[v + 1] if SHIFT else inds[v]
    out.copy_(-(_rows(e, valids) * c.float()[tgt]).sum(1))


def _bwd_kernel(e, c, lse, do, grad_scale, valids, vocab_ordering, softcap, targets, de, de_locks, dc, dc_locks,
                *rest, SHIFT=False, REQUIRES_GRAD=True, **k):
    v = valids.long()
    tgt = targets[v + 1] if SHIFT else targets[v]
    x = _rows(e, valids)
    d = torch.exp(x @ c.float().t() - lse[:, None])
    d[torch.arange(d.shape[0]), tgt] -= 1.0
    d *= do.float() * grad_scale
    de.index_add_(0, v, (d @ c.float()).to(de.dtype))
    if REQUIRES_GRAD:
        dc.add_((d.t() @ x).to(dc.dtype))


def run_case(lce, B, S, H, V):
    torch.manual_seed(0)
    e = (torch.randn(B, S, H) * 0.5).to(torch.bfloat16).requires_grad_(True)
    c = torch.nn.Parameter((torch.randn(V, H) * 0.05).to(torch.bfloat16))
    targets = torch.randint(0, V, (B, S))
    mode = _mode_class()()
    for t in (e, c, targets):
        mode.track(t, resident=True)
    Readings.mode, Readings.base, Readings.at = mode, mode.bytes, {}
    with mode:
        mode.peak = mode.bytes
        loss = lce(e, c, targets, shift=True)
        _reading("after_forward")
        (loss / 3.0).backward()  # a num_items_in_batch division: grad_out != 1
        _reading("after_backward")
    # the check against the eager loss on the same values
    er = e.detach().float().requires_grad_(True)
    cr = c.detach().float().requires_grad_(True)
    ref = torch.nn.functional.cross_entropy((er[:, :-1] @ cr.t()).reshape(-1, V), targets[:, 1:].reshape(-1)) / 3.0
    ref.backward()
    ok = (torch.allclose(loss.float() / 3.0, ref, rtol=2e-2, atol=2e-2)
          and torch.allclose(e.grad.float(), er.grad, rtol=5e-2, atol=5e-3)
          and torch.allclose(c.grad.float(), cr.grad, rtol=5e-2, atol=5e-3))
    a = Readings.at
    return {
        "batch": B, "seq": S, "hidden": H, "vocab": V, "valid_rows": B * (S - 1),
        # the forward up to the lse kernel: _build_flat_valids' peak, then what is live at
        # the launch (valids, lse, locks, logit_avg)
        "peak_before_lse": a["lse:peak_since_last"],
        "live_at_lse": a["lse"],
        # at the indexed dot: the lse pass's outputs, valids and the fp32 neg_dot
        "live_at_dot": a["dot"],
        # kept: e and c are the caller's; lse, valids, logit_avg and the scalar loss
        "kept_after_forward": a["after_forward"],
        # the backward up to its kernel: vocab_ordering (eager argsort), de, dc, the locks
        "peak_before_backward_kernel": a["bwd:peak_since_last"],
        "live_at_backward_kernel": a["bwd"],
        # e.grad and c.grad: de and dc themselves
        "grads_after_backward": a["after_backward"],
        "grad_is_de_dc": bool(Readings.grad_ptrs == (e.grad.untyped_storage().data_ptr(),
                                                     c.grad.untyped_storage().data_ptr())),
        "matches_eager_cross_entropy": bool(ok),
    }


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "fused-loss", "cce-rerun.json"))
    a = ap.parse_args(argv)
    version = importlib.metadata.version("cut-cross-entropy")
    if version != CCE_VERSION:
        raise SystemExit(f"cce_rerun.py: cut-cross-entropy {version} installed, the rules are read in {CCE_VERSION}")
    import cut_cross_entropy.cce as cce
    import cut_cross_entropy.cce_backward as cb
    import cut_cross_entropy.cce_lse_forward as lf
    import cut_cross_entropy.indexed_dot as idot

    lf._cce_lse_forward_kernel = _Launch("lse", _lse_kernel)
    idot._indexed_neg_dot_forward_kernel = _Launch("dot", _dot_kernel)
    cb._cce_backward_kernel = _Launch("bwd", _bwd_kernel)
    cce.sort_logit_avg = lambda logit_avg: torch.argsort(logit_avg).to(torch.int32)  # eager, not compiled
    real_bwd = cb.cce_backward_kernel

    def bwd(*args, **kw):
        de, dc = real_bwd(*args, **kw)
        Readings.grad_ptrs = (de.untyped_storage().data_ptr(), dc.untyped_storage().data_ptr())
        return de, dc
    cce.cce_backward_kernel = bwd

    from cut_cross_entropy import linear_cross_entropy  # the public entry, its defaults

    cases = [run_case(linear_cross_entropy, *c) for c in CASES]
    doc = {"schema": SCHEMA, "cut_cross_entropy": version, "torch": torch.__version__.split("+")[0],
           "command": "python3 tools/hf_probe/cce_rerun.py", "cases": cases}
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    for c in cases:
        print(c)
    return 0 if all(c["matches_eager_cross_entropy"] and c["grad_is_de_dc"] for c in cases) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
