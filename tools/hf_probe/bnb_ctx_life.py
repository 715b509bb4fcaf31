#!/usr/bin/env python3
"""How long bitsandbytes' 8-bit matmul keeps its input (FINDINGS R-QUANT-16).

MatMul8bitFp (the CPU / XPU training path) keeps its input as `ctx.A`, MatMul8bitLt (what
CUDA runs) as `ctx.tensors = (CAt, subA, A)`: attributes of the autograd context, not saved
tensors, so neither saved-tensor hooks (checkpoint, save_on_cpu) nor the engine's
release_variables after the node's backward touch them; they live as long as the node.

A stack of LAYERS layers, each `y = Linear8bitLt(x * 1.0); x + y * y` (the product stands
for a norm's output: a tensor only the matmul keeps; y * y saves y, so that a non-reentrant
recompute runs the matmul again), plain, checkpointed non-reentrant (HF's default) or
reentrant (prepare_model_for_kbit_training's), each with the CPU class and with CUDA's class
(MatMul8bitLt's Python path on bitsandbytes' default CPU kernels: Linear8bitLt in eval mode
dispatches to it; threshold 6.0 with one outlier column, so subA is kept too). For every
matmul call, forward or recompute, it records when the tensors its context keeps die: at the
start of which layer's backward or of which matmul's backward, at the backward's end (loss
still referenced), or when the loss is deleted. Prints one line per call (--json: the same as JSON).

  bnb_ctx_life.py [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import warnings
import weakref

logging.getLogger("bitsandbytes").setLevel(logging.ERROR)

import torch  # noqa: E402
import torch.utils.checkpoint as tuc  # noqa: E402

LAYERS, H, T = 3, 32, 16


def layers():
    import bitsandbytes as bnb

    torch.manual_seed(0)
    out = []
    for _ in range(LAYERS):
        lin = bnb.nn.Linear8bitLt(H, H, bias=False, has_fp16_weights=False, threshold=6.0)
        lin.weight = bnb.nn.Int8Params((torch.randn(H, H) * 0.02).to(torch.bfloat16), requires_grad=False,
                                       has_fp16_weights=False)
        out.append(lin.to("cpu"))
    return out


def run(ckpt, cls):
    from bitsandbytes.autograd import _functions as bf

    lins = layers()
    for lin in lins:
        lin.train(cls == "MatMul8bitFp")  # eval: bnb.matmul dispatches to MatMul8bitLt
    kept = []  # [label, {kept tensor name: weakref}, died-at]
    where = {"now": "forward"}
    real = {name: getattr(bf, name).forward for name in ("MatMul8bitFp", "MatMul8bitLt")}
    real_bwd = {name: getattr(bf, name).backward for name in real}

    def spy_bwd(name):
        def bwd(ctx, *g):
            note(f"by layer {ctx.gckpt_layer}'s matmul backward")
            return real_bwd[name](ctx, *g)
        return staticmethod(bwd)

    def spy(name):
        def fwd(ctx, A, *rest, **kw):
            ctx.gckpt_layer = where["layer"]
            out = real[name](ctx, A, *rest, **kw)
            refs = {"A": weakref.ref(A)} if name == "MatMul8bitFp" else \
                {k: weakref.ref(t) for k, t in zip(("CAt", "subA", "A"), ctx.tensors) if t is not None}
            kept.append([f"layer {where['layer']} {where['now']}", refs, None])
            return out
        return staticmethod(fwd)

    def note(moment):
        for k in kept:
            if k[2] is None and all(r() is None for r in k[1].values()):
                k[2] = moment

    def layer_fn(i):
        def f(x):
            where["layer"] = i
            y = lins[i](x * 1.0)
            return x + y * y
        return f

    class Mark(torch.autograd.Function):  # the start of layer i's backward
        @staticmethod
        def forward(ctx, x, i):
            ctx.i = i
            return x.view_as(x)

        @staticmethod
        def backward(ctx, g):
            note(f"by layer {ctx.i - 1}'s backward" if ctx.i else "by the end of layer 0's backward")
            return g, None

    for name in real:
        setattr(getattr(bf, name), "forward", spy(name))
        setattr(getattr(bf, name), "backward", spy_bwd(name))
    try:
        x = torch.randn(T, H)
        x[:, 3] *= 40  # one outlier column (MatMul8bitLt's subA)
        x.requires_grad_(True)
        h = x
        for i in range(LAYERS):
            h = Mark.apply(h, i)
            if ckpt == "plain":
                h = layer_fn(i)(h)
            else:
                h = tuc.checkpoint(layer_fn(i), h, use_reentrant=ckpt == "reentrant")
        h = Mark.apply(h, LAYERS)
        loss = h.float().square().sum()
        del h
        note("by the forward's end")
        where["now"] = "recompute"
        loss.backward()
        note("by the backward's end (loss still referenced)")
        del loss
        note("when the loss is deleted")
    finally:
        for name, f in real.items():
            setattr(getattr(bf, name), "forward", staticmethod(f))
            setattr(getattr(bf, name), "backward", staticmethod(real_bwd[name]))
    return [{"call": k[0], "kept": sorted(k[1]), "freed": k[2] or "alive"} for k in kept]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="also write the result here")
    a = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    import bitsandbytes

    res = {"torch": torch.__version__, "bitsandbytes": bitsandbytes.__version__, "layers": LAYERS, "cases": {}}
    for cls in ("MatMul8bitFp", "MatMul8bitLt"):
        for ckpt in ("plain", "non-reentrant", "reentrant"):
            res["cases"][f"{cls} {ckpt}"] = run(ckpt, cls)
    for case, calls in res["cases"].items():
        for c in calls:
            print(f"{case:28s} {c['call']:20s} keeps {'+'.join(c['kept']) or '-':7s} freed {c['freed']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
