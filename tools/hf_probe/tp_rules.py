#!/usr/bin/env python3
"""The per-rank rules of FINDINGS.md R-TP-* (tensor parallelism as transformers 5.24 sets it up:
from_pretrained(distributed_config=DistributedConfig(tp_size=T)), the model's tp_plan, the HF Trainer) as
closed forms, checked against the measured fixtures (tests/data/hf-tp, probe_dist.py --set tp). Every number
is recomputed from the fixture's config, setting and layout (tp, rank) only, then compared.

Checked per standalone-TP fixture (step 2, the steady state; the gloo twins: shapes and collectives only, their
allocator misses frees made on gloo's threads, FINDINGS R-PROBE-5):
  * each parameter's local shape (torch.chunk of the sharded dim: ceil(n / T) rows, the last ranks fewer);
  * persistent bytes at the step's start: the local shards, AdamW's two fp32 states on them and a 4 B step per
    tensor, the rotary buffers, the device meshes' int64 tensors;
  * the bytes at the optimizer step's start: + every local gradient, the embedding's whole [V, h] (Replicate);
  * collectives: calls and bytes of every kind x dtype x phase.

  python3 tp_rules.py [FIXTURE.json ...]   (default: every tp-* fixture in tests/data/hf-tp without a fsdp or dp_replicate dim)

Plain Python 3, no torch: the rules must not depend on running the libraries.
"""
from __future__ import annotations

import glob
import json
import os
import sys

from peft_rules import dims

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DIR = os.path.join(HERE, "..", "..", "tests", "data", "hf-tp")
ADAMW_STEP = 4


def cdiv(a, b):
    return -(-a // b)


def chunk(n, t, r):
    """torch.chunk / DTensor Shard: rank r's piece of n over t (ceil(n / t) each, the last ones fewer or none)."""
    c = cdiv(n, t)
    return max(0, min(c, n - r * c))


def tp_params(cfg, family):
    """(name, global shape, sharded dim or None) in named_parameters order: llama / qwen3's base_model_tp_plan,
    the embedding's embedding_rowwise (vocab, dim 0) and the head's colwise_gather_output (dim 0)."""
    d = dims(cfg, family)
    h, q, k, i, V = d["h"], d["nh"] * d["hd"], d["kv"] * d["hd"], d["i"], d["V"]
    out = [("model.embed_tokens.weight", (V, h), 0)]
    for li in range(d["L"]):
        p = f"model.layers.{li}."
        out += [(p + "self_attn.q_proj.weight", (q, h), 0), (p + "self_attn.k_proj.weight", (k, h), 0),
                (p + "self_attn.v_proj.weight", (k, h), 0), (p + "self_attn.o_proj.weight", (h, q), 1)]
        if family == "qwen3":
            out += [(p + "self_attn.q_norm.weight", (d["hd"],), None), (p + "self_attn.k_norm.weight", (d["hd"],), None)]
        out += [(p + "mlp.gate_proj.weight", (i, h), 0), (p + "mlp.up_proj.weight", (i, h), 0),
                (p + "mlp.down_proj.weight", (h, i), 1),
                (p + "input_layernorm.weight", (h,), None), (p + "post_attention_layernorm.weight", (h,), None)]
    out += [("model.norm.weight", (h,), None), ("lm_head.weight", (V, h), 0)]
    return out


def local_shape(shape, dim, t, r):
    if dim is None:
        return tuple(shape)
    s = list(shape)
    s[dim] = chunk(s[dim], t, r)
    return tuple(s)


def numel(shape):
    n = 1
    for x in shape:
        n *= x
    return n


def mesh_bytes(t):
    """Device-mesh tensors (torch's DeviceMesh holds its ranks as an int32 CPU tensor) still live: 3 x 4 T bytes
    (measured at T = 2 and 4; which three meshes they are is not resolved, R-TP-4)."""
    return 3 * 4 * t


def elem(fx):
    """The loaded dtype's bytes: bf16 under pure bf16 (from_pretrained(dtype=torch.bfloat16), R-TP-22), else fp32."""
    return 2 if fx["setting"]["precision"] == "bf16" else 4


def persistent(fx):
    """Bytes live at step 2's start (R-TP-4; R-TP-22: in the loaded dtype)."""
    cfg, fam = fx["config"], fx["setting"]["family"]
    t, r = fx["parallel"]["tp"]["distributed_config"]["tp_size"], fx["parallel"]["rank"] % \
        fx["parallel"]["tp"]["distributed_config"]["tp_size"]
    w = sum(elem(fx) * numel(local_shape(s, dim, t, r)) for _, s, dim in tp_params(cfg, fam))
    n_t = len(tp_params(cfg, fam))
    d = dims(cfg, fam)
    buffers = 2 * 4 * (d["hd"] // 2)  # rotary inv_freq and original_inv_freq, fp32 [head_dim / 2]
    if fx["setting"].get("optimizer") == "sgd":  # R-TP-23: one momentum buffer, a clone of the gradient (the
        # embedding's whole [V, h], Replicate like its gradient, R-TP-5); no step counter
        return {"weights": w, "states": step_grads(fx), "buffers": buffers, "mesh": mesh_bytes(t)}
    return {"weights": w, "states": 2 * w + ADAMW_STEP * n_t, "buffers": buffers, "mesh": mesh_bytes(t)}


def step_grads(fx):
    """Gradients held into the optimizer step (R-TP-5): every local shard's, the embedding's whole [V, h]."""
    cfg, fam = fx["config"], fx["setting"]["family"]
    t = fx["parallel"]["tp"]["distributed_config"]["tp_size"]
    r = fx["parallel"]["rank"] % t
    g = 0
    for name, s, dim in tp_params(cfg, fam):
        g += elem(fx) * numel(s if name == "model.embed_tokens.weight" else local_shape(s, dim, t, r))
    return g


def collectives(fx):
    """kind/dtype/phase -> (calls, bytes) for one step (R-TP-6)."""
    cfg, fam, st = fx["config"], fx["setting"]["family"], fx["setting"]
    t = fx["parallel"]["tp"]["distributed_config"]["tp_size"]
    d = dims(cfg, fam)
    h, V, L = d["h"], d["V"], d["L"]
    tokens = st["micro_batch"] * st["seq"]
    G = st["grad_accum"]
    cd = "float32" if st["precision"] == "fp32" else "bfloat16"
    ce = 2 if cd == "bfloat16" else 4
    # the residual stream's dtype (the embedding's output, the colwise inputs' gradients, the norms'): the
    # loaded one (fp32 under autocast; bf16 under pure bf16, R-TP-22)
    pd, pe = ("bfloat16", 2) if st["precision"] == "bf16" else ("float32", 4)
    ck = len(fx["checkpointed_layers"])
    out = {}

    def add(key, calls, nbytes):
        c, b = out.get(key, (0, 0))
        out[key] = (c + calls, b + nbytes)

    # forward, per micro-step: the embedding's partial lookup (fp32: no autocast), each layer's o_proj and
    # down_proj rowwise outputs (compute dtype), the head's colwise_gather_output all-gather (padded to T ceil(V/T))
    add(f"all_reduce/{pd}/forward", G, G * tokens * h * pe)
    add(f"all_reduce/{cd}/forward", 2 * L * G, 2 * L * G * tokens * h * ce)
    add(f"all_gather/{cd}/forward", G, G * tokens * t * cdiv(V, t) * ce)
    # backward, per micro-step: every colwise module's input gradient (q, k, v, gate, up in a layer, the head),
    # fp32 (the norm's output is fp32); the recompute of a checkpointed layer reruns o_proj's all-reduce only
    # (its down_proj output is not needed: the recompute stops early)
    n_col = 5 * L + 1
    add(f"all_reduce/{pd}/backward", n_col * G, n_col * G * tokens * h * pe)
    if ck:
        add(f"all_reduce/{cd}/backward", ck * G, ck * G * tokens * h * ce)
    # the synchronising micro-step: the Trainer's _sync_replicated_trainable_parameters hook all-reduces every
    # plain (not DTensor) trainable parameter's gradient: the norms (and qwen3's q_norm / k_norm)
    plain = [(n, s) for n, s, dim in tp_params(cfg, fam) if dim is None]
    add(f"all_reduce/{pd}/backward", len(plain), sum(pe * numel(s) for _, s in plain))
    if fam == "qwen3":  # replicated_with_grad_allreduce: q_norm / k_norm's gradient all-reduced every backward
        qk = [(n, s) for n, s in plain if "q_norm" in n or "k_norm" in n]
        add(f"all_reduce/{pd}/backward", len(qk) * G, G * sum(pe * numel(s) for _, s in qk))
    return out


def check(fx, name):
    bad = []
    tp = fx["parallel"]["tp"]
    t = tp["distributed_config"]["tp_size"]
    r = fx["parallel"]["rank"] % t
    want = {n: list(local_shape(s, dim, t, r)) for n, s, dim in tp_params(fx["config"], fx["setting"]["family"])}
    got = {p["name"]: p["local_shape"] for p in tp["params"]}
    if want != got:
        bad.append(f"local shapes: {[(k, got.get(k), v) for k, v in want.items() if got.get(k) != v][:4]}")
    p = persistent(fx)
    st = fx["steps"][-1]
    total = sum(p.values())
    gloo = fx["parallel"]["process_group"] == "gloo"  # its allocator misses frees on gloo's threads (R-PROBE-5)
    if gloo:
        pass
    elif st["live_at_start_bytes"] != total:
        bad.append(f"persistent {st['live_at_start_bytes']} != {total} {p}")
    g = step_grads(fx)
    if not gloo and st["optimizer_before_bytes"] != total + g:
        bad.append(f"optimizer_before {st['optimizer_before_bytes']} != {total + g} (grads {g})")
    want_c = collectives(fx)
    got_c = {k: (v["calls"], v["bytes"]) for k, v in fx["collectives"]["per_step"]["2"].items()}
    if want_c != got_c:
        keys = sorted(set(want_c) | set(got_c))
        bad.append("collectives: " + "; ".join(f"{k} {got_c.get(k)} != {want_c.get(k)}" for k in keys
                                               if got_c.get(k) != want_c.get(k)))
    return bad


def main(argv):
    files = argv or sorted(glob.glob(os.path.join(DEFAULT_DIR, "tp-*.json")))
    n = fails = 0
    for f in files:
        fx = json.load(open(f))
        dc = fx["parallel"]["tp"]["distributed_config"]
        if dc["fsdp_size"] * dc.get("dp_replicate_size", 1) > 1:  # FSDP2 over a data-parallel dim (R-TP-8, R-TP-11)
            continue
        n += 1
        bad = check(fx, os.path.basename(f))
        if bad:
            fails += 1
            print(f"FAIL {os.path.basename(f)}")
            for b in bad:
                print("   ", b)
    print(f"{n - fails}/{n} standalone-TP fixtures match R-TP-4..6")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
