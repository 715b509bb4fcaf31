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
# mixtral, qwen3_moe: apply_liger_kernel_to_<type>'s swiglu swaps the routed experts' class for
# LigerExperts (LigerFusedMoEFunction); the tiny MoE configurations of moe_cases.py (4 experts, top-2)
MOE_CASES = [f"{f}-{c}" for f in ("mixtral", "qwen3_moe")
             for c in ("bf16-sdpa-n1-plain-b2s32", "bf16-sdpa-noff-plain-b1s48", "fp32-sdpa-n1-offload-b2s32",
                       "amp-bf16-cudalists-sdpa-n1-plain-b2s32", "amp-bf16-cudalists-sdpa-noff-plain-b2s32")]
# RMSNorm variants, patched on the built model as the Trainer does (instance_setup): olmo2 (the
# final norm in_place=True, the post norms in_place=False, q_norm / k_norm left transformers'),
# gemma (offset 1, casting 'gemma', in_place=True), gemma2 and gemma3_text (the same, in_place=False;
# gemma3_text's q_norm / k_norm too); with
# liger_rotary_pos_emb, and olmo2's LigerSwiGLUMLP (the Gemmas' GEGLU is not planned: geglu off)
INSTANCE_CASES = {"olmo2-bf16-sdpa-noff-plain-b1s48": KERNELS, "olmo2-bf16-sdpa-n1-plain-b2s32": KERNELS,
                  "olmo2-fp32-sdpa-n1-plain-b1s48": KERNELS,
                  "gemma-bf16-sdpa-noff-plain-b1s48": ["rope", "rms_norm"],
                  "gemma2-bf16-eager-noff-plain-b1s48": ["rope", "rms_norm"],
                  "gemma2-amp-bf16-cudalists-eager-n1-plain-b2s32": ["rope", "rms_norm"],
                  "gemma3_text-bf16-sdpa-noff-plain-b1s48": ["rope", "rms_norm"]}
# ... under attention-only LoRA (probe_peft.py's cases): the frozen experts' weight gradients,
# which the fused MoE's backward makes anyway (the -v32 ones with a vocabulary of 32, whose peak is
# that backward's)
MOE_LORA_CASES = ["mixtral-lora-bf16-attn-d0.05-sdpa-noff-plain-b2s32",
                  "qwen3_moe-lora-amp-bf16-cudalists-attn-d0.05-sdpa-n1-plain-b2s32",
                  "mixtral-v32-lora-bf16-attn-d0.05-sdpa-noff-plain-b2s32",
                  "qwen3_moe-v32-lora-fp32-attn-d0.05-sdpa-n1-plain-b2s32"]
# the MoE cases with a vocabulary of 32, where the peak leaves the loss / optimizer for a layer's backward
MOE_WIDE_CASES = [f"{f}-{c}" for f in ("mixtral", "qwen3_moe")
                  for c in ("bf16-sdpa-noff-plain-b2s32", "fp32-sdpa-n1-plain-b2s32")]
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


class _LaunchF32(_Launch):
    """A launch whose stand-in runs its products outside autocast (the Triton kernel's are fp32
    accumulations of the stored dtypes; autocast would add bf16 copies of the operands)."""

    def __getitem__(self, grid):
        def launch(*a, **k):
            with torch.no_grad(), torch.autocast("cpu", enabled=False):
                self.fn(*a, **k)
        return launch


def _ints(t):
    return [int(v) for v in t.tolist()]


# LigerFusedMoEFunction (ops/fused_moe.py): the routing metadata's three kernels, the grouped
# GEMMs forward and backward, the token gather-sum. Each writes what the Triton kernel writes into
# the buffers the wrapper allocated; products are matrix-vector per sorted row (or per weight row),
# so the stand-ins' own temporaries are a row.
def _moe_hist(topk, partial, T, E, n_tiles, TOKENS_PER_TILE, K_POW2, K, E_POW2, **k):
    flat = _ints(topk.reshape(-1))
    for tile in range(n_tiles):
        counts = [0] * E
        for e in flat[tile * TOKENS_PER_TILE * K:(tile + 1) * TOKENS_PER_TILE * K]:
            counts[e] += 1
        for e in range(E):
            partial[e, tile] = counts[e]


def _moe_prefix(freq, freq_offs, tile_off, E, partial_sum_ptr, n_tiles, TK, BLOCK_M, BLOCK_N, BLOCK_M_TOKEN, **k):
    f = _ints(freq)
    a = b = 0
    for e in range(E):
        freq_offs[e], tile_off[e] = a, b
        a += f[e]
        b += -(-f[e] // BLOCK_M_TOKEN)
    freq_offs[E], tile_off[E] = TK, b


def _moe_scatter(s_scatter, s_rev, x_gather, tile_row_start, tile_expert, topk, T, partial, n_tiles, expert_offs,
                 expert_tile_offset, K_POW2, K, TOKENS_PER_BLOCK, BLOCK_M_TOKEN, **k):
    flat, starts, toff = _ints(topk.reshape(-1)), _ints(expert_offs), _ints(expert_tile_offset)
    pos = list(starts)
    for i, e in enumerate(flat):
        p = pos[e]
        pos[e] += 1
        s_scatter[p], s_rev[i], x_gather[p] = i, p, i // K
    for e in range(len(starts)):
        for j in range(-(-(pos[e] - starts[e]) // BLOCK_M_TOKEN)):
            tile_row_start[toff[e] + j], tile_expert[toff[e] + j] = starts[e] + j * BLOCK_M_TOKEN, e


def _moe_rows(expert_start):
    st = _ints(expert_start)
    for e in range(len(st) - 1):
        for r in range(st[e], st[e + 1]):
            yield e, r


def _moe_up(x, w1, x_gather, expert_start, trs, te, pre, post, H_dim, I_dim, **k):
    xg = _ints(x_gather)
    for e, r in _moe_rows(expert_start):
        acc = torch.mv(w1[e], x[xg[r]]).float()
        pre[r].copy_(acc)
        g, u = acc[:I_dim], acc[I_dim:]
        post[r].copy_(g * torch.sigmoid(g) * u)


def _moe_down(post, w2, expert_start, trs, te, Y, H_dim, I_dim, **k):
    for e, r in _moe_rows(expert_start):
        Y[r].copy_(torch.mv(w2[e], post[r]))


def _moe_gather_sum(Y, w, s_rev, out, H_dim, K_dim, *a, w_is_None=False, **k):
    sr = _ints(s_rev)
    for t in range(out.shape[0]):
        acc = torch.zeros(H_dim, dtype=torch.float32)
        for j in range(K_dim):
            y = Y[sr[t * K_dim + j]].float()
            acc += y if w_is_None else y * w[t * K_dim + j].float()
        out[t].copy_(acc)


def _moe_bwd_down(dO, x_gather, s_scatter, topk_w, w2, pre, expert_start, trs, te, d_pre, wact, dS, H_dim, I_dim,
                  **k):
    xg, ss = _ints(x_gather), _ints(s_scatter)
    for e, r in _moe_rows(expert_start):
        acc = torch.mv(w2[e].t(), dO[xg[r]]).float()
        g, u = pre[r, :I_dim].float(), pre[r, I_dim:].float()
        sg = torch.sigmoid(g)
        y1 = g * sg * u
        wt = topk_w[ss[r]].float()
        wact[r].copy_(wt * y1)
        dS[ss[r]] += (acc * y1).sum()
        acc = acc * wt
        d_pre[r, :I_dim].copy_(acc * (g * sg * (1.0 - sg) + sg) * u)
        d_pre[r, I_dim:].copy_(acc * g * sg)


def _moe_dw2(wact, dO, x_gather, expert_start, dW2, H_dim, I_dim, **k):
    st = _ints(expert_start)
    for e in range(len(st) - 1):
        if st[e + 1] == st[e]:
            continue
        idx = x_gather[st[e]:st[e + 1]]  # int32: index_select takes it (no int64 copy)
        for h in range(H_dim):
            dW2[e, h].copy_(torch.mv(wact[st[e]:st[e + 1]].t(), dO[:, h].index_select(0, idx)))


def _moe_dx_expanded(d_pre, w1, expert_start, trs, te, dxe, H_dim, I_dim, **k):
    for e, r in _moe_rows(expert_start):
        dxe[r].copy_(torch.mv(w1[e].t(), d_pre[r]))


def _moe_dw1(x, d_pre, x_gather, expert_start, dW1, H_dim, I_dim, **k):
    st = _ints(expert_start)
    for e in range(len(st) - 1):
        if st[e + 1] == st[e]:
            continue
        idx = x_gather[st[e]:st[e + 1]]  # int32: index_select takes it (no int64 copy)
        for h in range(H_dim):
            dW1[e, :, h].copy_(torch.mv(d_pre[st[e]:st[e + 1]].t(), x[:, h].index_select(0, idx)))


def patch_moe():
    """LigerExperts' LigerFusedMoEFunction with its Triton launches replaced (ops/fused_moe.py
    imports them by name)."""
    import liger_kernel.ops.fused_moe as fm
    for name, fn in {"_moe_router_histogram_kernel": _moe_hist, "_moe_router_prefix_sum_kernel": _moe_prefix,
                     "_moe_router_scatter_kernel": _moe_scatter, "_fused_up_proj_swiglu_kernel": _moe_up,
                     "_fused_down_proj_kernel": _moe_down, "_token_gather_weighted_sum_kernel": _moe_gather_sum,
                     "_moe_bwd_down_proj_kernel": _moe_bwd_down, "_moe_bwd_dW2_kernel": _moe_dw2,
                     "_moe_bwd_dX_expanded_kernel": _moe_dx_expanded, "_moe_bwd_dW1_kernel": _moe_dw1}.items():
        setattr(fm, name, _LaunchF32(fn))


def patch(family, kernels=KERNELS):
    """The kernels stood in for, then apply_liger_kernel_to_<family> before the model is built (its
    class swaps: for the types measured so, the same modules and forwards as the instance path)."""
    patch_kernels()
    import liger_kernel.transformers.monkey_patch as mp
    on = {k: k in kernels for k in KERNELS}
    getattr(mp, f"apply_liger_kernel_to_{family}")(cross_entropy=False, fused_linear_cross_entropy=False, **on)


def patch_kernels():
    import liger_kernel.ops.rms_norm as rn
    import liger_kernel.ops.rope as rp
    import liger_kernel.ops.swiglu as sw

    rn._rms_norm_forward_kernel = _Launch(_rms_fwd)
    rn._block_rms_norm_forward_kernel = _Launch(_rms_fwd_block)
    rn._rms_norm_backward_kernel = _Launch(_rms_bwd)
    rn._block_rms_norm_backward_kernel = _Launch(_rms_bwd_block)
    rp._triton_rope = _Launch(_rope)
    sw._swiglu_forward_kernel = _Launch(_swiglu_fwd)
    sw._swiglu_backward_kernel = _Launch(_swiglu_bwd)
    patch_moe()
    # swiglu_forward / backward take a 2-D view of a and b; the replacement reads rows of it


def instance_setup(kernels):
    """probe.setup, then use_liger_kernel=True's own path: transformers' apply_liger_kernel calls
    _apply_liger_kernel_to_instance(model=...), so apply_liger_kernel_to_<type>(model=...) patches the
    built modules (_patch_rms_norm_module with the type's offset / casting / in_place, the MLP's
    forward) and swaps module-level functions (apply_rotary_pos_emb); its class swaps reach no built
    module, and are undone here so that the next pass builds transformers' classes again (olmo2's
    q_norm / k_norm stay Olmo2RMSNorm, as under the Trainer)."""
    import importlib
    import inspect

    import liger_kernel.transformers.monkey_patch as mp
    import probe

    def setup(spec):
        c = probe.setup(spec)
        fam = spec["family"]
        pkg = {"gemma3_text": "gemma3"}.get(fam, fam)
        mod = importlib.import_module(f"transformers.models.{pkg}.modeling_{pkg}")
        classes = {k: v for k, v in vars(mod).items() if inspect.isclass(v)}
        fn = getattr(mp, f"apply_liger_kernel_to_{fam}")
        names = inspect.signature(fn).parameters
        kw = {k: (k in kernels) for k in ("rope", "rms_norm", "swiglu", "geglu") if k in names}
        fn(model=c.model, cross_entropy=False, fused_linear_cross_entropy=False, **kw)
        for k, v in classes.items():
            setattr(mod, k, v)
        return c
    return setup


def grads_match(spec):
    """One forward / backward of the patched model against transformers' own (a fresh process
    would be cleaner; here the eager reference is the same model with the patch undone)."""
    import importlib

    import probe
    from liger_kernel.transformers.rope import liger_rotary_pos_emb
    fam = spec["family"]
    ml = importlib.import_module(f"transformers.models.{fam}.modeling_{fam}")
    c = probe.setup(spec)
    ids = torch.randint(3, c.model.config.vocab_size, (c.b, c.s), generator=torch.Generator().manual_seed(5))
    loss = probe.forward_loss(c, ids)
    loss.backward()
    g = {n: p.grad.float().clone() for n, p in c.model.named_parameters()}
    experts = {type(m).__name__ for m in c.model.modules() if type(m).__name__.endswith("Experts")}
    return g, loss.item(), ml.apply_rotary_pos_emb is liger_rotary_pos_emb and experts <= {"LigerExperts"}


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "hf-liger"))
    ap.add_argument("--case", action="append", default=[])
    ap.add_argument("--check-grads", action="store_true", help="compare the gradients with transformers' ops")
    ap.add_argument("--check-family", default="llama", choices=["llama", "mixtral", "qwen3_moe"])
    ap.add_argument("--moe-lora", action="store_true", help="only the MoE LoRA cases")
    ap.add_argument("--variants", action="store_true", help="only the RMSNorm variant cases (olmo2, gemma, gemma2)")
    ap.add_argument("--moe", action="store_true", help="only the MoE cases (mixtral, qwen3_moe; with --case: those named)")
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
        import moe_cases
        moe = {s["name"]: s for s in moe_cases.cases()}
        fam_name = args.check_family
        spec = dict(specs["llama-fp32-sdpa-noff-plain-b1s48"] if fam_name == "llama"
                    else moe[f"{fam_name}-fp32-sdpa-noff-plain-b1s48"])
        ref, lref, _ = grads_match(copy.deepcopy(spec))
        patch(spec["family"])
        got, lgot, patched = grads_match(copy.deepcopy(spec))
        worst = max((ref[n] - got[n]).abs().max().item() / max(1e-6, ref[n].abs().max().item()) for n in ref)
        print(f"{fam_name}: patched {patched}; loss {lref:.6f} vs {lgot:.6f}; worst relative gradient difference {worst:.2e}")
        return 0 if patched and worst < 1e-3 else 1
    os.makedirs(args.out, exist_ok=True)
    import family_cases
    fam = {s["name"]: s for s in family_cases.cases()}
    todo = [] if args.families or args.moe or args.moe_lora or args.variants else [(n, specs[n]) for n in names]
    kernels_of = {}
    runner = {}
    if args.variants:
        import family_cases
        fam_specs = {s["name"]: s for s in family_cases.cases()}
        for n, ks in INSTANCE_CASES.items():
            if not args.case or n in args.case:
                todo.append((n, fam_specs[n]))
                kernels_of[n] = ks
                runner[n] = lambda sp, ks=ks: probe.run_case(sp, instance_setup(ks))
    elif args.moe_lora:
        import probe_peft
        peft_specs = {s["name"]: s for s in probe_peft.all_cases()}
        for n in MOE_LORA_CASES:
            spec = dict(peft_specs[n.replace("-v32", "")])
            if "-v32" in n:
                spec["config"] = {**spec["config"], "vocab_size": 32}
                spec["name"] = n
            if not args.case or n in args.case:
                todo.append((n, spec))
                runner[n] = probe_peft.run_case
    elif args.moe:
        import moe_cases
        moe = {s["name"]: s for s in moe_cases.cases()}
        for n in MOE_CASES + MOE_WIDE_CASES:
            spec = dict(moe[n])
            if n in MOE_WIDE_CASES:
                spec["config"] = {**spec["config"], "vocab_size": 32}
                spec["name"] = n.replace(spec["family"], spec["family"] + "-v32", 1)
            if not args.case or spec["name"] in args.case:
                todo.append((spec["name"], spec))
    elif not args.case:
        for n, ks in FAMILY_CASES.items():
            todo.append((n, fam[n]))
            kernels_of[n] = ks
    if not args.case and not args.families and not args.moe and not args.moe_lora and not args.variants:
        for n in WIDE_CASES:
            spec = dict(specs[n])
            cfg = probe.make_config(spec["family"], spec["attention"]).to_dict()
            cfg.update(WIDE)
            spec["config"] = cfg
            spec["name"] = n.replace(spec["family"], spec["family"] + "-v32-i512", 1)
            todo.append((spec["name"], spec))
    for name, spec in todo:
        ks = kernels_of.get(name, KERNELS)
        if name in INSTANCE_CASES:
            patch_kernels()
        else:
            patch(spec["family"], ks)
        fx = runner.get(name, probe.run_case)(spec)
        fx["setting"]["liger_kernels"] = ks
        fx["liger"] = {"liger_kernel": version, "command": "python3 tools/hf_probe/liger_layers_rerun.py",
                       "replaced": "the Triton launches (rms_norm, rope, swiglu, the fused MoE's), row by row in PyTorch"}
        with open(os.path.join(args.out, name + ".json"), "w") as f:
            f.write(probe.dumps_fixture(fx))
        print("wrote", name, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
