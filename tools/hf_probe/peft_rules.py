#!/usr/bin/env python3
"""The LoRA / QLoRA rules of FINDINGS.md (R-PEFT-*, R-QUANT-*) as executable closed forms, checked
against the measured fixtures (tests/data/hf-peft). A specification for the C planner: every
number below is recomputed from the fixture's config and setting only, never read from its
measurements, then compared with them.

Checked per fixture:
  * trainable parameters (= peft's print_trainable_parameters) and peft's "all params";
  * every parameter's dtype as it trains;
  * per quantized weight: packed bytes and each statistics tensor (bitsandbytes storage);
  * resident bytes at the start of step 2 (parameters, quantization statistics, buffers,
    optimizer states) and the optimizer states alone;
  * saved bytes of every decoder layer, the head and the embedding; what a checkpointed
    layer keeps besides its saved input (retained bytes); offloaded bytes.

  python3 peft_rules.py [FIXTURE.json ...]     (default: every fixture in tests/data/hf-peft)

Issue 13's dense families (gemma, gemma2, gemma3_text, phi3, gpt_neox, olmo2, granite:
FINDINGS R-PEFT-21 to R-PEFT-26) are checked for every rule above the activations (counts, dtypes, quantized
bytes, optimizer states, resident bytes); what their layers save and the live bytes are
checked against the C planner by test_hf_peft, not restated here. So are the
mixture-of-experts families (mixtral, qwen3_moe, olmoe, gpt_oss) with attention adapters
(FINDINGS R-PEFT-27): their router and fused expert parameters frozen next to the adapters,
and DeepSeek-V3 with adapters on its MLA projections (R-PEFT-29): dense first layers,
shared experts (nn.Linear, quantized by QLoRA), the router's correction bias a buffer.

Plain Python 3, no torch: the rules must not depend on running the libraries.
"""
from __future__ import annotations

import glob
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DIR = os.path.join(HERE, "..", "..", "tests", "data", "hf-peft")
SIZE = {"float32": 4, "bfloat16": 2, "float16": 2, "uint8": 1, "int8": 1}
BLOCK, NESTED_BLOCK = 64, 256          # bitsandbytes 4-bit blocksize, nested (double-quant) blocksize
MIN_8BIT_SIZE, PAGED_MIN = 4096, 1e5   # bitsandbytes Optimizer2State / get_state_buffer
ACTIVATION_FAMILIES = ("llama", "qwen2", "gpt2")  # the families whose saved / live bytes are restated below
MOE_FAMILIES = ("mixtral", "qwen3_moe", "olmoe", "gpt_oss")
DSV3 = "deepseek_v3"  # MLA, dense first layers, shared experts (FINDINGS R-PEFT-29)


def dsv3_dense(cfg, li):
    """Whether DeepSeek-V3's layer li has the dense MLP (first_k_dense_replace)."""
    return li < cfg.get("first_k_dense_replace", 3)


# --------------------------------------------------------------------------
# the model's linears and parameters
# --------------------------------------------------------------------------
def dims(cfg, family):
    if family == "gpt2":
        h = cfg["n_embd"]
        return dict(h=h, nh=cfg["n_head"], kv=cfg["n_head"], hd=h // cfg["n_head"], i=cfg.get("n_inner") or 4 * h,
                    V=cfg["vocab_size"], L=cfg["n_layer"], P=cfg["n_positions"])
    h, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    # gpt_neox has no key/value heads of its own (MHA); DeepSeek-V3's rotary covers qk_rope_head_dim
    return dict(h=h, nh=nh, kv=cfg.get("num_key_value_heads") or nh,
                hd=cfg.get("qk_rope_head_dim") or cfg.get("head_dim") or h // nh,
                i=cfg["intermediate_size"], V=cfg["vocab_size"], L=cfg["num_hidden_layers"],
                qr=cfg.get("q_lora_rank"), kvr=cfg.get("kv_lora_rank"))


def layer_linears(family, d, cfg, li=0):
    """(name inside a layer, in, out, has bias), in forward order (DeepSeek-V3: of layer li)."""
    h, q, k, i = d["h"], d["nh"] * d["hd"], d["kv"] * d["hd"], d["i"]
    if family == DSV3:  # MLA's projections, then the dense MLP or the shared experts
        H, b = d["nh"], bool(cfg.get("attention_bias"))
        qr, kvr, rope = cfg.get("q_lora_rank"), cfg["kv_lora_rank"], cfg["qk_rope_head_dim"]
        qk, vd = cfg["qk_nope_head_dim"] + rope, cfg["v_head_dim"]
        out = ([("self_attn.q_a_proj", h, qr, b), ("self_attn.q_b_proj", qr, H * qk, False)] if qr else
               [("self_attn.q_proj", h, H * qk, False)])
        out += [("self_attn.kv_a_proj_with_mqa", h, kvr + rope, b),
                ("self_attn.kv_b_proj", kvr, H * (cfg["qk_nope_head_dim"] + vd), False),
                ("self_attn.o_proj", H * vd, h, b)]
        mlp, mi = (("mlp", i) if dsv3_dense(cfg, li) else
                   ("mlp.shared_experts", cfg["moe_intermediate_size"] * cfg.get("n_shared_experts", 1)))
        return out + [(mlp + ".gate_proj", h, mi, False), (mlp + ".up_proj", h, mi, False),
                      (mlp + ".down_proj", mi, h, False)]
    if family == "gpt2":
        return [("attn.c_attn", h, 3 * h, True), ("attn.c_proj", h, h, True),
                ("mlp.c_fc", h, i, True), ("mlp.c_proj", i, h, True)]
    if family == "phi3":  # fused projections: one linear (and one adapter) each
        return [("self_attn.qkv_proj", h, q + 2 * k, False), ("self_attn.o_proj", q, h, False),
                ("mlp.gate_up_proj", h, 2 * i, False), ("mlp.down_proj", i, h, False)]
    if family == "gpt_neox":  # packed per head, every linear biased
        return [("attention.query_key_value", h, 3 * h, True), ("attention.dense", h, h, True),
                ("mlp.dense_h_to_4h", h, i, True), ("mlp.dense_4h_to_h", i, h, True)]
    if family in MOE_FAMILIES:  # the MLP is the router and fused expert parameters (moe_params)
        b = bool(cfg.get("attention_bias"))
        return [("self_attn.q_proj", h, q, b), ("self_attn.k_proj", h, k, b), ("self_attn.v_proj", h, k, b),
                ("self_attn.o_proj", q, h, b)]
    qkv_bias = family == "qwen2" or bool(cfg.get("attention_bias"))
    return [("self_attn.q_proj", h, q, qkv_bias), ("self_attn.k_proj", h, k, qkv_bias),
            ("self_attn.v_proj", h, k, qkv_bias), ("self_attn.o_proj", q, h, bool(cfg.get("attention_bias"))),
            ("mlp.gate_proj", h, i, bool(cfg.get("mlp_bias"))), ("mlp.up_proj", h, i, bool(cfg.get("mlp_bias"))),
            ("mlp.down_proj", i, h, bool(cfg.get("mlp_bias")))]


def targeted(name, targets):
    """peft: "all-linear" = every nn.Linear / Conv1D but the output embedding; a list matches
    a module whose name ends with an entry at a '.' boundary (GPT-2's "c_proj" takes both)."""
    if targets == "all-linear":
        return True
    return any(name == t or name.endswith("." + t) for t in targets)


def layer_prefix(family, li):
    return f"h.{li}." if family == "gpt2" else f"gpt_neox.layers.{li}." if family == "gpt_neox" else f"layers.{li}."


def moe_params(family, d, cfg, li=0):
    """(name, numel) of a MoE layer's parameters that are no nn.Linear (transformers 5.24):
    the router, the experts' fused gate_up_proj / down_proj (gpt_oss: with biases), gpt_oss's
    attention sinks."""
    if family == DSV3:
        if dsv3_dense(cfg, li):
            return []
        h, E, mi = d["h"], cfg["n_routed_experts"], cfg["moe_intermediate_size"]
        return [("mlp.gate.weight", E * h), ("mlp.experts.gate_up_proj", E * 2 * mi * h),
                ("mlp.experts.down_proj", E * mi * h)]
    if family not in MOE_FAMILIES:
        return []
    h, E = d["h"], cfg.get("num_local_experts") or cfg.get("num_experts")
    i = cfg.get("moe_intermediate_size") or cfg["intermediate_size"]
    gpt_oss = family == "gpt_oss"
    router = "mlp.router" if gpt_oss else "mlp.gate"
    out = [(router + ".weight", E * h), ("mlp.experts.gate_up_proj", E * 2 * i * h), ("mlp.experts.down_proj", E * i * h)]
    if gpt_oss:
        out += [(router + ".bias", E), ("mlp.experts.gate_up_proj_bias", E * 2 * i),
                ("mlp.experts.down_proj_bias", E * h), ("self_attn.sinks", d["nh"])]
    return out


def layer_norms(family, d):
    """(name, numel) of a layer's norm parameters (GPT-2's and GPT-NeoX's LayerNorms with biases)."""
    h, q, k = d["h"], d["nh"] * d["hd"], d["kv"] * d["hd"]
    if family == "gpt2":
        return [("ln_1.weight", h), ("ln_1.bias", h), ("ln_2.weight", h), ("ln_2.bias", h)]
    if family == "gpt_neox":
        return [(n + s, h) for n in ("input_layernorm", "post_attention_layernorm") for s in (".weight", ".bias")]
    if family == "olmo2":  # post-norms only; q/k norms over the whole projection
        return [("post_attention_layernorm.weight", h), ("post_feedforward_layernorm.weight", h),
                ("self_attn.q_norm.weight", q), ("self_attn.k_norm.weight", k)]
    out = [("input_layernorm.weight", h), ("post_attention_layernorm.weight", h)]
    if family in ("gemma2", "gemma3_text"):  # sandwich norms
        out += [("pre_feedforward_layernorm.weight", h), ("post_feedforward_layernorm.weight", h)]
    if family in ("qwen3", "gemma3_text", "qwen3_moe"):  # q/k norms per head
        out += [("self_attn.q_norm.weight", d["hd"]), ("self_attn.k_norm.weight", d["hd"])]
    if family == "olmoe":  # q/k norms over the projection
        out += [("self_attn.q_norm.weight", q), ("self_attn.k_norm.weight", k)]
    if family == DSV3:  # MLA's latent norms
        out += ([("self_attn.q_a_layernorm.weight", d["qr"])] if d["qr"] else []) + [
            ("self_attn.kv_a_layernorm.weight", d["kvr"])]
    return out


def base_params(family, d, cfg):
    """(name, numel) of every parameter of the model before peft, tied weights once."""
    h, V = d["h"], d["V"]
    out = ([("wte.weight", V * h), ("wpe.weight", d["P"] * h)] if family == "gpt2" else
           [("gpt_neox.embed_in.weight", V * h)] if family == "gpt_neox" else [("embed_tokens.weight", V * h)])
    for li in range(d["L"]):
        pre = layer_prefix(family, li)
        out += [(pre + n, numel) for n, numel in layer_norms(family, d) + moe_params(family, d, cfg, li)]
        for n, fin, fout, bias in layer_linears(family, d, cfg, li):
            out.append((pre + n + ".weight", fin * fout))
            if bias:
                out.append((pre + n + ".bias", fout))
    if family == "gpt2":
        out += [("ln_f.weight", h), ("ln_f.bias", h)]
    elif family == "gpt_neox":
        out += [("gpt_neox.final_layer_norm.weight", h), ("gpt_neox.final_layer_norm.bias", h)]
    else:
        out.append(("norm.weight", h))
    if not cfg.get("tie_word_embeddings"):
        out.append(("lm_head.weight", V * h))
    return out


def mts_numel(family, d, mts):
    return sum(d["V"] * d["h"] for m in mts if m in ("lm_head", "embed_tokens", "wte", "embed_in"))


def trainable_closed(fx):
    fam, cfg, lo = fx["setting"]["family"], fx["config"], fx["lora"]
    d = dims(cfg, fam)
    lora = sum(lo["r"] * (fin + fout) for li in range(d["L"])
               for n, fin, fout, _b in layer_linears(fam, d, cfg, li) if targeted(n, lo["targets"]))
    return lora + mts_numel(fam, d, lo["modules_to_save"])


def all_params_closed(fx):
    """peft's "all params": every named parameter once (a Params4bit counted as numel*2*itemsize,
    i.e. the unquantized count), the adapters, and for modules_to_save the original and the copy."""
    fam, cfg = fx["setting"]["family"], fx["config"]
    d = dims(cfg, fam)
    return sum(n for _, n in base_params(fam, d, cfg)) + trainable_closed(fx)


# --------------------------------------------------------------------------
# dtypes and bytes at rest
# --------------------------------------------------------------------------
def regime(fx):
    st, q, lo = fx["setting"], fx.get("quant"), fx["lora"]
    fam, prec = st["family"], st["precision"]
    d = dims(fx["config"], fam)
    amp = prec.startswith("amp-bf16")
    return dict(
        fam=fam, d=d, cfg=fx["config"], method=fx["method"], amp=amp, cudalists=prec == "amp-bf16-cudalists",
        # the dtype of every unquantized base parameter: bf16 for LoRA on model.to(bf16); fp32 for LoRA
        # fp32/amp and for QLoRA (prepare_model_for_kbit_training casts fp16/bf16 parameters to fp32)
        md=2 if (fx["method"] == "lora" and prec == "bf16") else 4,
        base="dense" if not q else ("int8" if q["type"] == "int8" else "4bit"),
        quant=q, T=st["micro_batch"] * st["seq"], b=st["micro_batch"], s=st["seq"], r=lo["r"],
        dropout=lo["dropout"] > 0, targets=lo["targets"], mts=lo["modules_to_save"],
        tied=bool(st["tie_word_embeddings"]),
    )


def bias_dtype_in_training(p, name):
    """bitsandbytes casts a quantized layer's bias in its first forward, for good: Linear4bit to
    the compute dtype (`bias.data = bias.data.to(x.dtype)` after x.to(compute_dtype)),
    Linear8bitLt to its input's dtype (under autocast: bf16 where the input is a bf16
    activation - GPT-2's attn.c_proj after SDPA, mlp.c_proj after gelu)."""
    if p["base"] == "4bit":
        return SIZE[{"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[p["quant"]["compute_dtype"]]]
    if p["base"] == "int8" and p["amp"] and name.endswith(("attn.c_proj", "mlp.c_proj", "o_proj", "down_proj")):
        return 2
    return p["md"]


def quant_weight_bytes(p, n, out):
    """(packed bytes, statistics bytes) of one quantized weight as bitsandbytes stores it."""
    q = p["quant"]
    if q["type"] == "int8":
        return n, 4 * out                              # Int8Params int8 [out,in] + SCB fp32 [out]
    s = SIZE[{"uint8": "uint8", "bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[q["storage"]]]
    packed = (n + 1) // (2 * s) * s                    # [(n+1)//(2s), 1] of the storage dtype
    nb = -(-n // BLOCK)
    code = 16 * 4                                      # quant_state.code: the 16-entry table, a copy per weight
    if q["double_quant"]:
        # absmax uint8 [nb] + offset fp32 scalar + state2.absmax fp32 [ceil(nb/256)] + state2.code fp32 [256]
        return packed, nb + 4 + 4 * -(-nb // NESTED_BLOCK) + 256 * 4 + code
    return packed, 4 * nb + code


def params_closed(fx):
    """{name: (dtype bytes, storage bytes)} of every parameter as it trains, and the resident
    quantization statistics."""
    p = regime(fx)
    fam, d, cfg = p["fam"], p["d"], p["cfg"]
    out, stats = {}, 0
    lins = {layer_prefix(fam, li) + n: (fin, fout, bias) for li in range(d["L"])
            for n, fin, fout, bias in layer_linears(fam, d, cfg, li)}
    for name, n in base_params(fam, d, cfg):
        mod = name.rsplit(".", 1)[0]
        if mod in lins and p["base"] != "dense":
            fin, fout, _ = lins[mod]
            if name.endswith(".weight"):
                packed, st = quant_weight_bytes(p, n, fout)
                out[name] = ("q", packed)
                stats += st
            else:
                ds = bias_dtype_in_training(p, mod)
                out[name] = (ds, ds * n)
        else:
            out[name] = (p["md"], p["md"] * n)
    for mod, (fin, fout, _) in lins.items():
        if targeted(mod, p["targets"]):
            out[mod + ".lora_A"] = (4, 4 * p["r"] * fin)  # adapters fp32 (peft autocast_adapter_dtype)
            out[mod + ".lora_B"] = (4, 4 * p["r"] * fout)
    for m in p["mts"]:
        # the trainable copy has the original's dtype (modules_to_save deep-copies it)
        pre = "gpt_neox." if m == "embed_in" else ""
        out[pre + m + ".modules_to_save"] = (p["md"], p["md"] * d["V"] * d["h"])
    return out, stats


def buffers_closed(fx):
    """Rotary inv_freq and original_inv_freq [hd/2]: fp32, in bf16 after model.to(bf16) (LoRA bf16);
    from_pretrained(dtype=bf16) keeps them fp32 and prepare_model_for_kbit_training casts only parameters."""
    p = regime(fx)
    if p["fam"] == "gpt2":
        return 0
    # partial rotary (gpt_neox, phi3): inv_freq over rotary_dim = hd * partial_rotary_factor
    rd = int(p["d"]["hd"] * (p["cfg"].get("rope_parameters") or {}).get("partial_rotary_factor", 1.0))
    pairs = 2 if p["fam"] == "gemma3_text" else 1  # Gemma 3: a pair per layer type (full, sliding)
    out = 2 * pairs * p["md"] * (rd // 2)
    if p["fam"].startswith("gemma"):
        # the embedding's 0-d embed_scale buffer in the load dtype: fp32 for LoRA fp32 / amp, bf16 after
        # model.to(bf16) and after from_pretrained(dtype=bf16) (QLoRA: prepare casts parameters only)
        scale = 2 if p["method"] == "qlora" or p["md"] == 2 else 4
        # modules_to_save deep-copies the embedding module, its buffer with it
        out += scale * (2 if "embed_tokens" in p["mts"] else 1)
    if p["fam"] == DSV3:  # each MoE layer's router e_score_correction_bias [E], fp32 but after model.to(bf16)
        moe = sum(not dsv3_dense(p["cfg"], li) for li in range(p["d"]["L"]))
        out += moe * p["cfg"]["n_routed_experts"] * p["md"]
    return out


def optimizer_states_closed(fx):
    """Bytes of the optimizer's states after its first step (trainable parameters only)."""
    params, _ = params_closed(fx)
    tr = [(name, b // ds) for name, (ds, b) in params.items() if ".lora_" in name or name.endswith(".modules_to_save")]
    opt = fx["setting"]["optimizer"]
    if opt == "adamw_torch_fused":
        # exp_avg + exp_avg_sq in the parameter dtype (fp32 here), one fp32 step tensor each
        return sum(2 * 4 * n + 4 for _, n in tr)
    total, qmaps = 0, False
    for _, n in tr:
        if "8bit" in opt and n >= MIN_8BIT_SIZE:
            total += 2 * n + 2 * 4 * -(-n // 256)       # state1/state2 uint8, absmax1/absmax2 fp32 [ceil(n/256)]
            qmaps = True
        else:
            total += 2 * 4 * n                          # state1/state2 fp32 (below 4096 elements, or 32-bit)
    return total + (2 * 256 * 4 if qmaps else 0)        # qmap1/qmap2, one pair shared by the optimizer


def resident_closed(fx):
    params, stats = params_closed(fx)
    return sum(b for _, b in params.values()) + stats + buffers_closed(fx) + optimizer_states_closed(fx)


# --------------------------------------------------------------------------
# what autograd saves
# --------------------------------------------------------------------------
class Tn:
    """An activation: bytes, dtype size, whether it requires grad, identity."""
    _next = [0]

    def __init__(self, numel, ds, rg):
        Tn._next[0] += 1
        self.id, self.numel, self.ds, self.rg = Tn._next[0], numel, ds, rg

    @property
    def bytes(self):
        return self.numel * self.ds


class Layer:
    def __init__(self, p):
        self.p = p
        self.saved = {}          # id -> bytes, first saver counts (the probe de-duplicates by storage)
        self.kept = {}           # int8 ctx.A: not a saved tensor, kept until the graph goes (12.6)
        self.cached = 0          # autocast's cache of the adapters' bf16 weight casts

    def save(self, t):
        self.saved.setdefault(t.id, t.bytes)

    def cast(self, t, ds):
        return t if t.ds == ds else Tn(t.numel, ds, t.rg)


def linear(c, x, fin, fout, name):
    """A frozen base linear, plus its LoRA branch when targeted; returns the output."""
    p, T = c.p, c.p["T"]
    if p["base"] == "dense":
        if p["amp"]:
            if x.rg:
                c.save(Tn(fin * fout, 2, False))  # the frozen weight's bf16 copy (not cached: not a grad leaf)
            out = Tn(T * fout, 2, x.rg)
        else:
            out = Tn(T * fout, x.ds, x.rg)
    elif p["base"] == "4bit":
        out = Tn(T * fout, x.ds, x.rg)            # MatMul4Bit saves nothing; .to(input dtype) at the end
    else:
        if x.rg:
            c.kept.setdefault(x.id, x.bytes)      # MatMul8bitFp: ctx.A = input
        out = Tn(T * fout, 2 if p["amp"] else x.ds, x.rg)
    if not targeted(name, p["targets"]):
        return out
    r = p["r"]
    # peft lora.Linear always casts its input to the adapter dtype (fp32); the bitsandbytes
    # LoRA layers only when torch.is_autocast_enabled() (the CUDA question) is False
    convert = p["base"] == "dense" or not (p["amp"] and p["cudalists"])
    xa = c.cast(x, 4) if convert else x
    if p["dropout"]:
        if xa.rg:
            c.save(Tn(xa.numel, xa.ds, False))   # CPU dropout: the scaled mask in the input dtype
        dr = Tn(xa.numel, xa.ds, xa.rg)
    else:
        dr = xa
    if p["amp"]:
        c.save(c.cast(dr, 2))                    # lora_A's input, cast to bf16
        if dr.rg:
            c.save(Tn(r * fin, 2, False))        # lora_A's weight cast (cached)
        c.save(Tn(T * r, 2, True))               # lora_A's output, saved by lora_B
        c.save(Tn(r * fout, 2, False))           # lora_B's weight cast (cached)
        c.cached += 2 * r * (fin + fout)
        bo_ds = 2
    else:
        c.save(dr)
        c.save(Tn(T * r, 4, True))
        bo_ds = 4
    ds = out.ds if convert else max(out.ds, bo_ds)
    return Tn(T * fout, ds, True)


def rmsnorm(c, x, h):
    if x.rg:
        c.save(c.cast(x, 4))                     # x.to(fp32), saved by pow and mul
        c.save(Tn(c.p["T"], 4, False))           # rsqrt
    return Tn(c.p["T"] * h, c.p["md"], x.rg)


def layernorm(c, x, h):
    if x.rg:
        c.save(x)
        c.save(Tn(c.p["T"], x.ds, False))        # mean, rstd in the input dtype on CPU (fp32 on CUDA)
        c.save(Tn(c.p["T"], x.ds, False))
    return Tn(c.p["T"] * h, c.p["md"], x.rg)


def llama_layer(c, x, holds_rope):
    p, d, T = c.p, c.p["d"], c.p["T"]
    h, nh, hd, i = d["h"], d["nh"], d["hd"], d["i"]
    qw, kw = nh * hd, d["kv"] * hd
    lin = {n: (fin, fout) for n, fin, fout, _ in layer_linears(p["fam"], d, p["cfg"])}
    h1 = rmsnorm(c, x, h)
    q = linear(c, h1, *lin["self_attn.q_proj"], "self_attn.q_proj")
    k = linear(c, h1, *lin["self_attn.k_proj"], "self_attn.k_proj")
    v = linear(c, h1, *lin["self_attn.v_proj"], "self_attn.v_proj")
    rope_ds = p["md"]
    if holds_rope and (q.rg or k.rg):
        c.save(Tn(p["s"] * hd, rope_ds, False))  # cos, sin: saved by the first layer that keeps its tensors
        c.save(Tn(p["s"] * hd, rope_ds, False))
    qe, ke = Tn(T * qw, max(q.ds, rope_ds), q.rg), Tn(T * kw, max(k.ds, rope_ds), k.rg)
    if p["amp"]:
        qe, ke, v = c.cast(qe, 2), c.cast(ke, 2), c.cast(v, 2)
    if qe.rg or ke.rg or v.rg:
        for t in (ke, qe, v):
            c.save(t)
        c.save(Tn(T * nh, 4, False))             # logsumexp
    out = Tn(T * qw, qe.ds, True)
    c.save(out)
    o = linear(c, out, *lin["self_attn.o_proj"], "self_attn.o_proj")
    x2 = Tn(T * h, max(x.ds, o.ds), True)
    h2 = rmsnorm(c, x2, h)
    g = linear(c, h2, *lin["mlp.gate_proj"], "mlp.gate_proj")
    u = linear(c, h2, *lin["mlp.up_proj"], "mlp.up_proj")
    c.save(g)                                    # silu's input
    sl = Tn(T * i, g.ds, True)
    c.save(sl)                                   # the product saves both factors
    c.save(u)
    dn = linear(c, Tn(T * i, max(sl.ds, u.ds), True), *lin["mlp.down_proj"], "mlp.down_proj")
    return Tn(T * h, max(x2.ds, dn.ds), True)


def gpt2_layer(c, x):
    p, d, T = c.p, c.p["d"], c.p["T"]
    h, nh, i = d["h"], d["nh"], d["i"]
    l1 = layernorm(c, x, h)
    qkv = linear(c, l1, h, 3 * h, "attn.c_attn")
    if p["amp"]:
        qkv = c.cast(qkv, 2)                     # SDPA's q, k, v casts (views of one tensor otherwise)
    c.save(qkv)
    c.save(Tn(T * nh, 4, False))
    out = Tn(T * h, qkv.ds, True)
    c.save(out)
    a = linear(c, out, h, h, "attn.c_proj")
    x2 = Tn(T * h, max(x.ds, a.ds), True)
    fc = linear(c, layernorm(c, x2, h), h, i, "mlp.c_fc")
    if p["amp"] and p["cudalists"]:
        c.save(c.cast(fc, 4))                    # gelu_new's pow under CUDA's fp32 policy: an fp32 copy
        c.save(Tn(T * i, 4, True))               # tanh output, 1 + tanh (fp32)
        c.save(Tn(T * i, 4, True))
        c.save(Tn(T * i, fc.ds, True))           # 0.5 * x
        act = Tn(T * i, 4, True)
    else:
        c.save(fc)
        for _ in range(3):
            c.save(Tn(T * i, fc.ds, True))
        act = Tn(T * i, fc.ds, True)
    m = linear(c, act, i, h, "mlp.c_proj")
    return Tn(T * h, max(x2.ds, m.ds), True)


def head_bytes(p):
    c = Layer(p)
    d, T = p["d"], p["T"]
    x = Tn(T * d["h"], p["md"], True)
    hf = (layernorm if p["fam"] == "gpt2" else rmsnorm)(c, x, d["h"])
    if "lm_head" in p["mts"]:
        c.save(c.cast(hf, 2) if p["amp"] else hf)  # the trainable copy saves its input
        if p["amp"]:
            c.save(Tn(d["V"] * d["h"], 2, False))
    elif p["amp"]:
        c.save(Tn(d["V"] * d["h"], 2, False))      # the frozen lm_head's bf16 weight copy (never quantized)
    c.save(Tn(T * d["V"], 4, False))               # log_softmax output (fp32: the loss upcasts)
    c.save(Tn(T if p["b"] > 1 else p["s"] + 1, 8, False))  # shifted labels (b=1: a view of the padded row)
    c.save(Tn(1, 4, False))                        # total_weight
    return sum(c.saved.values())


def saved_closed(fx):
    p = regime(fx)
    st = fx["setting"]
    ck = set(fx["checkpointed_layers"])
    emb_trainable = any(m in ("embed_tokens", "wte") for m in p["mts"])
    # the layer-0 input requires grad when checkpointing is on (transformers' and peft's
    # enable_input_require_grads hook on the embedding) or the embedding trains
    x_rg = bool(ck) or emb_trainable
    T, h = p["T"], p["d"]["h"]
    layers, retained, kept, rope_done = [], [], [], False
    for li in range(p["d"]["L"]):
        x = Tn(T * h, p["md"], x_rg)
        c = Layer(p)
        if p["fam"] == "gpt2":
            gpt2_layer(c, x)
        else:
            llama_layer(c, x, li not in ck and not rope_done)
        # past the forward, outside the saved tensors: int8's ctx.A inputs (all of them in a
        # checkpointed layer, whose inner saves are dropped; those nothing saves otherwise in a
        # plain one), and the 8-byte double of each `tensor * python_float` that MulBackward0
        # keeps: a LoRA branch's `* scaling`, GPT-2's gelu_new (0.5, 0.044715, sqrt(2/pi)) - in
        # a checkpointed layer both unless the checkpoint is reentrant (its forward builds no
        # graph, so no node keeps them: bnb_ctx_life.py)
        scalars = 8 * sum(targeted(n, p["targets"]) for n, *_ in layer_linears(p["fam"], p["d"], p["cfg"]))
        scalars += 24 if p["fam"] == "gpt2" else 0
        if li in ck:
            layers.append(0 if st["offload"] else x.bytes)
            graph = 0 if st.get("use_reentrant") else sum(c.kept.values()) + scalars
            retained.append(c.cached + (0 if st.get("use_reentrant") else sum(c.kept.values())))
            kept.append(graph)
        else:
            rope_done = True
            layers.append(sum(c.saved.values()))
            retained.append(None)
            kept.append(sum(b for i, b in c.kept.items() if i not in c.saved) + scalars)
        x_rg = True
    offload = len(ck) * T * h * p["md"] if st["offload"] else 0
    return dict(layers=layers, retained=retained, head=head_bytes(p), embedding=8 * T if emb_trainable else 0,
                offload=offload, kept=kept)


def after_forward_closed(fx, sv):
    """Live bytes when the last micro-step's forward (and the loss) has returned: what was
    resident at the step start, the adapters' gradients of the earlier micro-steps, the input ids (which a
    trainable embedding saves: the same tensor), every saved tensor, what the layers keep outside
    them (above), the loss (its fp32 scalar and the 8-byte divisor of `/ grad_accum` that
    DivBackward keeps), and what checkpointing keeps alive besides the saved inputs (the same
    in full fine-tuning):
      * the layer kwargs a checkpoint's recompute closure holds: the int64 [s] index tensor,
        and (llama family) cos and sin when every layer is checkpointed (otherwise the first
        plain layer saves them);
      * the embedding output that enable_input_require_grads turned into a leaf: its
        AccumulateGrad node holds it until the backward. In the llama family it is the layer-0
        input (saved, unless layer 0 is checkpointed with offload); GPT-2 adds the position
        embedding first, so its token embedding output is an extra [T, h]."""
    p = regime(fx)
    params, _ = params_closed(fx)
    # the last micro-step's: the earlier ones' gradients exist (none without accumulation)
    grads = sum(b for name, (ds, b) in params.items() if ".lora_" in name or name.endswith(".modules_to_save")) \
        if fx["setting"]["grad_accum"] > 1 else 0
    T, s, h, md = p["T"], p["s"], p["d"]["h"], p["md"]
    ck = set(fx["checkpointed_layers"])
    extra = 0
    if ck:
        extra += 8 * s
        if p["fam"] != "gpt2" and len(ck) == p["d"]["L"]:
            extra += 2 * s * p["d"]["hd"] * md
        hooked = not any(m in ("embed_tokens", "wte") for m in p["mts"])
        if hooked and (p["fam"] == "gpt2" or (0 in ck and fx["setting"]["offload"])):
            extra += T * h * md
    return (resident_closed(fx) + grads + 8 * T + sum(sv["layers"]) + sv["head"] + sum(sv["kept"]) + 4 + 8
            + extra)


def head_backward_peak_closed(fx, after_forward):
    """The most live bytes in the head's backward: at log_softmax's backward, nll_loss's
    gradient [T, V] fp32 and log_softmax's [T, V] fp32 exist together; the shifted labels and
    the 8 bytes of loss scalars are gone (frozen lm_head; as in full fine-tuning)."""
    st = fx["setting"]
    b, s = st["micro_batch"], st["seq"]
    T, V = b * s, fx["config"]["vocab_size"]
    return after_forward + 2 * 4 * T * V - (8 * T if b > 1 else 8 * (s + 1)) - 8


# --------------------------------------------------------------------------
# comparison
# --------------------------------------------------------------------------
def check(fx):
    """[(what, planned, measured)] of every mismatch."""
    bad = []

    def eq(what, planned, measured):
        if planned != measured:
            bad.append((what, planned, measured))

    eq("trainable_params", trainable_closed(fx), fx["trainable_params"])
    eq("all_params_peft", all_params_closed(fx), fx["all_params_peft"])
    params, stats = params_closed(fx)
    pd = {}
    for name, dtype in fx["param_dtypes"].items():
        key = name.replace(".base_layer", "").replace(".default", "").replace(".original_module", "")
        key = key.replace(".lora_A.weight", ".lora_A").replace(".lora_B.weight", ".lora_B")
        key = key.replace(".modules_to_save.weight", ".modules_to_save")
        pd[key] = dtype
    planned_dt = {n: v[0] for n, v in params.items()}
    for n, ds in planned_dt.items():
        got = pd.get(n)
        if got is None:
            bad.append(("param " + n, "present", "missing"))
        elif ds != "q" and SIZE[got] != ds:
            bad.append(("param dtype " + n, ds, got))
    if fx.get("quant"):
        for t in fx["quant"]["tensors"]:
            packed, st = quant_weight_bytes(regime(fx), t["numel"], t["shape"][0])
            eq("packed " + t["name"], packed, t["weight"]["bytes"])
            eq("stats " + t["name"], st, t["stats_bytes"])
        eq("stats total", stats, fx["quant"]["stats_bytes_unique_storages"])
    s2 = fx["steps"][-1]
    eq("optimizer_state_bytes", optimizer_states_closed(fx), s2["optimizer_state_bytes"])
    eq("resident at step 2", resident_closed(fx), s2["live_at_start_bytes"])
    if fx["setting"]["family"] not in ACTIVATION_FAMILIES:
        return bad
    sv = saved_closed(fx)
    eq("layers", sv["layers"], [l["bytes"] for l in fx["saved"]["layers"]])
    eq("retained (checkpointed layers)", sv["retained"],
       [l["retained_bytes"] if l["checkpointed"] else None for l in fx["saved"]["layers"]])
    eq("head", sv["head"], fx["saved"]["head"]["bytes"])
    eq("embedding", sv["embedding"], fx["saved"]["embedding"]["bytes"])
    eq("offload", sv["offload"], fx["offload_bytes"])
    af = after_forward_closed(fx, sv)
    eq("live after the forward of the last micro-step (allocator)", af, s2["after_forward_bytes_micro"][-1])
    head = s2["region_peaks"].get("backward/head")
    if head is not None:
        eq("head backward of the last micro-step (allocator, where it comes within 2 % of the peak)",
           head_backward_peak_closed(fx, af), head)
    return bad


def print_mismatches(path, bad):
    """Prints a fixture's (what, rules, measured) differences; 1 if there were any."""
    if not bad:
        return 0
    print(f"MISMATCH {os.path.basename(path)}")
    for what, planned, measured in bad:
        print(f"   {what}: rules {planned}  measured {measured}")
    return 1


def main(argv):
    paths = argv or sorted(glob.glob(os.path.join(DEFAULT_DIR, "*.json")))
    if not paths:
        print(f"no fixtures in {DEFAULT_DIR}", file=sys.stderr)
        return 2
    nbad = nrest = 0
    for path in paths:
        try:
            with open(path) as f:
                fx = json.load(f)
        except (OSError, ValueError) as e:
            print(f"{path}: {e}", file=sys.stderr)
            return 2
        bad = check(fx)
        nbad += print_mismatches(path, bad)
        nrest += fx["setting"]["family"] not in ACTIVATION_FAMILIES
    print(f"{len(paths) - nbad}/{len(paths)} fixtures agree with the rules exactly (trainable and peft's all-params "
          f"count, parameter dtypes, quantized bytes per weight, optimizer states, resident bytes, saved bytes per "
          f"layer / head / embedding, retained bytes of checkpointed layers, offload bytes, allocator's live bytes after the forward and in the "
          f"head's backward; for the {nrest} of issue 13's and the MoE families the rules down to the resident bytes, their "
          f"activations against the planner in test_hf_peft)")
    return 1 if nbad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
