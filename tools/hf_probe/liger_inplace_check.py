"""Whether Liger's RMSNorm and RoPE backwards hand on their input gradients in the incoming
gradient's storage (FINDINGS R-LOSS-6, R-LOSS-7), read from tensor hooks around Liger's own
autograd Functions (liger-kernel 0.8.5; the Triton launches replaced by in-place PyTorch ops as
in liger_layers_rerun.py). RMSNorm: in_place=True (the default) and False; RoPE: q and k from a
projection's view(...).transpose(1, 2), their gradients from SDPA's backward as in
transformers' attention. tests/test_fused_loss.c (liger_norm_rope_in_place) checks that the
planner hands each op's output gradient buffer on as its input's.

  python3 tools/hf_probe/liger_inplace_check.py [--out FILE]
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
import liger_layers_rerun as L  # noqa: E402


def ptr(t):
    return t.untyped_storage().data_ptr()


def note(seen, key):
    """a tensor hook recording the gradient's storage (returns None: the gradient unchanged)"""
    def hook(g):
        seen.setdefault(key, ptr(g))
    return hook


def rms_case(in_place, dtype):
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction
    torch.manual_seed(0)
    x = torch.randn(2, 24, 64, dtype=dtype, requires_grad=True)
    w = torch.ones(64, dtype=dtype, requires_grad=True)
    xa = x * 1  # an activation, as the residual stream
    y = LigerRMSNormFunction.apply(xa, w, 1e-6, 0.0, "llama", in_place)
    seen = {}
    y.register_hook(note(seen, "dy"))
    xa.register_hook(note(seen, "dx"))
    (y * torch.randn_like(y)).sum().backward()
    return seen["dx"] == seen["dy"]


def repeat_kv(x, n):
    """transformers' repeat_kv: expand and reshape (a copy)"""
    b, kv, s, d = x.shape
    return x[:, :, None].expand(b, kv, n, s, d).reshape(b, kv * n, s, d)


def rope_case(dtype, attention):
    from liger_kernel.transformers.rope import liger_rotary_pos_emb
    torch.manual_seed(0)
    b, s, h, kv, d = 2, 24, 4, 2, 16
    x = torch.randn(b, s, 64, dtype=dtype, requires_grad=True)
    qp = torch.nn.functional.linear(x, torch.randn(h * d, 64, dtype=dtype))
    kp = torch.nn.functional.linear(x, torch.randn(kv * d, 64, dtype=dtype))
    v = torch.randn(b, h, s, d, dtype=dtype)
    q, k = qp.view(b, s, h, d).transpose(1, 2), kp.view(b, s, kv, d).transpose(1, 2)
    pos = torch.arange(s, dtype=torch.float32)
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    emb = torch.cat([pos[:, None] * inv[None], pos[:, None] * inv[None]], -1)[None]
    cos, sin = emb.cos().to(dtype), emb.sin().to(dtype)
    qr, kr = liger_rotary_pos_emb(q, k, cos, sin)
    same = {"q_rotated_in_its_storage": ptr(qr) == ptr(qp), "k_rotated_in_its_storage": ptr(kr) == ptr(kp)}
    seen = {}
    qr.register_hook(note(seen, "dqr"))
    kr.register_hook(note(seen, "dkr"))
    qp.register_hook(note(seen, "dqp"))
    kp.register_hook(note(seen, "dkp"))
    if attention == "sdpa":  # no mask: transformers passes enable_gqa=True
        o = torch.nn.functional.scaled_dot_product_attention(qr, kr, v, is_causal=True, enable_gqa=True)
    elif attention == "sdpa_masked":  # a mask (sliding window): k and v repeated to every head
        mask = torch.ones(s, s, dtype=torch.bool).tril()
        o = torch.nn.functional.scaled_dot_product_attention(qr, repeat_kv(kr, h // kv), v, attn_mask=mask)
    else:  # eager: matmuls on the repeated k
        sc = torch.matmul(qr, repeat_kv(kr, h // kv).transpose(2, 3)) / d ** 0.5
        o = torch.matmul(torch.softmax(sc.float(), -1).to(dtype), v)
    o.sum().backward()
    same["dq_in_incoming_storage"] = seen["dqp"] == seen["dqr"]
    same["dk_in_incoming_storage"] = seen["dkp"] == seen["dkr"]
    return same


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "fused-loss", "liger-norm-rope.json"))
    args = ap.parse_args(argv)
    version = importlib.metadata.version("liger-kernel")
    if version != L.LIGER_VERSION:
        raise SystemExit(f"liger_inplace_check.py: liger-kernel {version} installed, the rules are read in {L.LIGER_VERSION}")
    L.patch("llama")
    doc = {"schema": "gckpt.liger-norm-rope/1", "liger_kernel": version, "torch": torch.__version__.split("+")[0],
           "command": "python3 tools/hf_probe/liger_inplace_check.py", "rms_norm": {}, "rope": {}}
    for dt in (torch.float32, torch.bfloat16):
        n = str(dt).split(".")[1]
        doc["rms_norm"][n] = {"in_place_true_dx_in_dy_storage": rms_case(True, dt),
                              "in_place_false_dx_in_dy_storage": rms_case(False, dt)}
        doc["rope"][n] = {a: rope_case(dt, a) for a in ("sdpa", "sdpa_masked", "eager")}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
