"""The probe's tiny llama with use_liger_kernel's layer kernels (LigerRMSNorm, liger_rotary_pos_emb,
LigerSwiGLUMLP), measured on the CPU with the probe's own method (probe.run_case: the storage
tracker's pass and the allocator's pass) and written as hf fixtures the planner is compared with
(tests/test_hf_fixtures.c, tests/data/hf-liger).

liger-kernel 0.8.5's apply_liger_kernel_to_llama(rope=True, rms_norm=True, swiglu=True,
fused_linear_cross_entropy=False, cross_entropy=False) patches transformers' modeling_llama before
the model is built, so every norm is LigerRMSNorm (LigerRMSNormFunction, casting 'llama',
in_place=True), apply_rotary_pos_emb is liger_rotary_pos_emb (LigerRopeFunction) and the MLP is
LigerSwiGLUMLP (LigerSiLUMulFunction); the loss is transformers' own (what
liger_kernel_config={"fused_linear_cross_entropy": False} runs). Liger's Python code runs as it is;
only its Triton kernel launches are replaced by PyTorch ops that write what each kernel writes into
the buffers the wrapper passed (RMSNorm: Y and RSTD, then dX into dY's storage and the fp32 _dW
partial sums; RoPE: q and k rotated in place, forward and backward; SwiGLU: c, then da into a and db
into b). The replacements work one row at a time, so their own temporaries (a row of fp32) stay
below the fixtures' tolerance; the Triton kernels themselves are not run (unverified).

The fixture's setting carries "liger_kernels" (the kernels on); tests/hf_compare.c plans it as
--loss liger --liger-kernels rope,rms_norm,swiglu.

  python3 tools/hf_probe/liger_layers_rerun.py [--out DIR] [--case NAME ...]
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
sys.path.insert(0, HERE)

LIGER_VERSION = "0.8.5"
KERNELS = ["rope", "rms_norm", "swiglu"]
CASES = ["llama-bf16-sdpa-n1-plain-b2s32", "llama-bf16-sdpa-noff-plain-b1s48", "llama-fp32-sdpa-n1-plain-b1s48",
         "llama-amp-bf16-cudalists-sdpa-n1-plain-b2s32", "llama-bf16-sdpa-n2-plain-b1s48",
         "qwen3-bf16-sdpa-n1-plain-b2s32", "qwen3-bf16-sdpa-noff-plain-b1s48"]
# the hand cases' peak is the loss's: a small vocabulary and a wide MLP put it in a layer's
# backward, where the in-place gradients (RMSNorm's dX into dY, RoPE's) show
WIDE = {"vocab_size": 32, "intermediate_size": 512}
# phi3: gckpt plans its LigerRMSNorm only (its LigerPhi3SwiGLUMLP and partial rotary are not), so
# its fixtures run with rms_norm alone (liger_kernel_config {"rope": False, "swiglu": False, ...})
FAMILY_CASES = {"phi3-bf16-sdpa-noff-plain-b1s48": ["rms_norm"], "phi3-bf16-sdpa-n1-plain-b2s32": ["rms_norm"]}
WIDE_CASES = ["llama-bf16-sdpa-n1-plain-b2s32", "llama-bf16-sdpa-noff-plain-b2s32", "qwen3-fp32-sdpa-n1-plain-b1s48"]


class _Launch:
    def __init__(self, fn):
        self.fn = fn

    def __getitem__(self, grid):
        def launch(*a, **k):
            with torch.no_grad():
                self.fn(*a, **k)
        return launch


def _rms_rows(Y, X, W, RSTD, n_rows, eps, offset, casting_mode):
    """_rms_norm_forward_kernel, casting 'llama' (0) / 'gemma' (1) / 'none' (2), row by row."""
    for i in range(n_rows):
        x = X[i]
        if casting_mode == 2:
            r = torch.rsqrt((x * x).mean() + eps)
            Y[i].copy_(x * r * (W + offset))
        else:
            xf = x.float()
            r = torch.rsqrt((xf * xf).mean() + eps)
            if casting_mode == 0:
                Y[i].copy_((xf * r).to(x.dtype) * (W + offset))
            else:
                Y[i].copy_((xf * r * (W.float() + offset)).to(x.dtype))
        RSTD[i] = r


def _rms_fwd(Y, Ys, X, Xs, W, Ws, RSTD, RSTDs, n_cols, eps, offset, casting_mode, **k):
    _rms_rows(Y, X, W, RSTD, X.shape[0], eps, offset, casting_mode)


def _rms_fwd_block(Y, Ys, X, Xs, W, Ws, RSTD, RSTDs, n_rows, n_cols, eps, offset, casting_mode, **k):
    _rms_rows(Y, X, W, RSTD, n_rows, eps, offset, casting_mode)


def _rms_bwd_rows(dY, dX, X, W, RSTD, dW, n_rows, offset, casting_mode, compute_dw):
    if compute_dw:
        dW.zero_()
    for i in range(n_rows):
        x, r = X[i].float(), RSTD[i].float()
        m = dY[i].float() * (W.float() + offset)
        dx = r * m - (r ** 3 / x.numel()) * (m * x).sum() * x
        if compute_dw:
            if casting_mode == 0:
                dW[0] += dY[i].float() * (x * r).to(X.dtype).float()
            else:
                dW[0] += dY[i].float() * (x * r)
        dX[i].copy_(dx.to(dX.dtype))


def _rms_bwd(dY, dYs, dX, dXs, X, Xs, Xdt, W, Ws, RSTD, RSTDs, dW, dWs, n_rows, n_cols, offset, rows_per_program,
             casting_mode, **k):
    _rms_bwd_rows(dY, dX, X, W, RSTD, dW, n_rows, offset, casting_mode, k.get("COMPUTE_DW", True))


def _rms_bwd_block(dY, dYs, dX, dXs, X, Xs, Xdt, W, Ws, RSTD, RSTDs, dW, dWs, n_rows, n_cols, offset, casting_mode, **k):
    _rms_bwd_rows(dY, dX, X, W, RSTD, dW, n_rows, offset, casting_mode, k.get("COMPUTE_DW", True))


def _rope(q, qs, k, ks, cos, cs, sin, ss, sl, bs, cos_bs, n_qh, n_kh, hd, pq, pk, phd, prd, rd, BLOCK_SIZE=None,
          BACKWARD_PASS=False):
    """_triton_rope on q, k as (b, s, heads, hd), in place, one (b, s) row at a time."""
    h = rd // 2
    for b in range(bs):
        for s in range(sl):
            c, sn = cos[b % cos_bs, s, :h], sin[b % cos_bs, s, :h]
            if BACKWARD_PASS:
                sn = -sn
            for x in (q[b, s], k[b, s]):
                x1, x2 = x[:, :h].float(), x[:, h:rd].float()
                y1, y2 = x1 * c - x2 * sn, x2 * c + x1 * sn
                x[:, :h].copy_(y1)
                x[:, h:rd].copy_(y2)


def _swiglu_fwd(a, b, c, stride, gate_multiplier, *rest, **k):
    for i in range(a.shape[0]):
        af = a[i].float() * gate_multiplier
        c[i].copy_((af * torch.sigmoid(af)).to(b.dtype) * b[i])


def _swiglu_bwd(dc, a, b, stride, gate_multiplier, *rest, **k):
    for i in range(a.shape[0]):
        af = a[i].float() * gate_multiplier
        sig = torch.sigmoid(af)
        silu = af * sig
        db = dc[i].float() * silu
        da = dc[i].float() * b[i].float() * (silu * (1 - sig) + sig) * gate_multiplier
        a[i].copy_(da.to(a.dtype))
        b[i].copy_(db.to(b.dtype))


def patch(family, kernels=KERNELS):
    import liger_kernel.ops.rms_norm as rn
    import liger_kernel.ops.rope as rp
    import liger_kernel.ops.swiglu as sw
    import liger_kernel.transformers.monkey_patch as mp

    rn._rms_norm_forward_kernel = _Launch(_rms_fwd)
    rn._block_rms_norm_forward_kernel = _Launch(_rms_fwd_block)
    rn._rms_norm_backward_kernel = _Launch(_rms_bwd)
    rn._block_rms_norm_backward_kernel = _Launch(_rms_bwd_block)
    rp._triton_rope = _Launch(_rope)
    sw._swiglu_forward_kernel = _Launch(_swiglu_fwd)
    sw._swiglu_backward_kernel = _Launch(_swiglu_bwd)
    # swiglu_forward / backward take a 2-D view of a and b; the replacement reads rows of it
    on = {k: k in kernels for k in KERNELS}
    getattr(mp, f"apply_liger_kernel_to_{family}")(cross_entropy=False, fused_linear_cross_entropy=False, **on)


def grads_match(spec):
    """One forward / backward of the patched model against transformers' own (a fresh process
    would be cleaner; here the eager reference is the same model with the patch undone)."""
    import probe
    import transformers.models.llama.modeling_llama as ml
    from liger_kernel.transformers.rope import liger_rotary_pos_emb
    c = probe.setup(spec)
    ids = torch.randint(3, c.model.config.vocab_size, (c.b, c.s), generator=torch.Generator().manual_seed(5))
    loss = probe.forward_loss(c, ids)
    loss.backward()
    g = {n: p.grad.float().clone() for n, p in c.model.named_parameters()}
    return g, loss.item(), ml.apply_rotary_pos_emb is liger_rotary_pos_emb


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "hf-liger"))
    ap.add_argument("--case", action="append", default=[])
    ap.add_argument("--check-grads", action="store_true", help="compare the gradients with transformers' ops")
    ap.add_argument("--families", action="store_true", help="only the family cases (phi3)")
    args = ap.parse_args(argv)
    version = importlib.metadata.version("liger-kernel")
    if version != LIGER_VERSION:
        raise SystemExit(f"liger_layers_rerun.py: liger-kernel {version} installed, the rules are read in {LIGER_VERSION}")
    import probe
    specs = {s["name"]: s for s in probe.hand_cases()}
    names = args.case or CASES
    if args.check_grads:
        import copy
        spec = dict(specs["llama-fp32-sdpa-noff-plain-b1s48"])
        ref, lref, _ = grads_match(copy.deepcopy(spec))
        patch("llama")
        got, lgot, patched = grads_match(copy.deepcopy(spec))
        worst = max((ref[n] - got[n]).abs().max().item() / max(1e-6, ref[n].abs().max().item()) for n in ref)
        print(f"patched {patched}; loss {lref:.6f} vs {lgot:.6f}; worst relative gradient difference {worst:.2e}")
        return 0 if patched and worst < 1e-3 else 1
    os.makedirs(args.out, exist_ok=True)
    import family_cases
    fam = {s["name"]: s for s in family_cases.cases()}
    todo = [] if args.families else [(n, specs[n]) for n in names]
    kernels_of = {}
    if not args.case:
        for n, ks in FAMILY_CASES.items():
            todo.append((n, fam[n]))
            kernels_of[n] = ks
    if not args.case and not args.families:
        for n in WIDE_CASES:
            spec = dict(specs[n])
            cfg = probe.make_config(spec["family"], spec["attention"]).to_dict()
            cfg.update(WIDE)
            spec["config"] = cfg
            spec["name"] = n.replace(spec["family"], spec["family"] + "-v32-i512", 1)
            todo.append((spec["name"], spec))
    for name, spec in todo:
        ks = kernels_of.get(name, KERNELS)
        patch(spec["family"], ks)
        fx = probe.run_case(spec)
        fx["setting"]["liger_kernels"] = ks
        fx["liger"] = {"liger_kernel": version, "command": "python3 tools/hf_probe/liger_layers_rerun.py",
                       "replaced": "the Triton launches (rms_norm, rope, swiglu), row by row in PyTorch"}
        with open(os.path.join(args.out, name + ".json"), "w") as f:
            f.write(probe.dumps_fixture(fx))
        print("wrote", name, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
