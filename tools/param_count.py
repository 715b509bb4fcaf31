#!/usr/bin/env python3
"""Compute total parameter counts from the Hugging Face config.json files in
models/ and check them against the published figures in models/README.md.

Python 3 standard library only.

Usage: python3 tools/param_count.py [MODELS_DIR]

Prints one row per models/*.json file and exits 1 if any computed count
differs from the "Published params" column of the README table, if a README
row names a file that does not exist, or if a config has no README row.

Counting rules (what transformers' model.num_parameters() reports; tied
weights are counted once):

  llama / mistral / qwen2 / qwen3 (decoder-only, SwiGLU, RMSNorm):
    embed_tokens              V*h
    per layer:
      q_proj                  h*(nh*hd)       (+ nh*hd bias if attention bias)
      k_proj, v_proj          h*(kv*hd) each  (+ kv*hd bias each if bias)
      o_proj                  (nh*hd)*h       (+ h bias only if attention_bias
                                               on llama; never for qwen2)
      gate, up, down          3*h*I           (+ 2*I + h if mlp_bias)
      input/post-attn norms   2*h
      q_norm, k_norm (qwen3)  2*hd
    final norm                h
    lm_head                   V*h unless tie_word_embeddings
  Qwen2 always has q/k/v biases (hard-coded in modeling_qwen2.py, not a
  config key); Llama/Qwen3 follow "attention_bias" (default false).
  head_dim defaults to hidden_size // num_attention_heads when absent.

  gemma / gemma2 / gemma3_text (tied by default, head_dim default 256):
    as llama without biases unless attention_bias; gemma2/3 have four norms
    per layer (4h); gemma3_text adds q_norm, k_norm (2*hd)
  phi3: fused qkv_proj h*(nh*hd + 2*kv*hd) and gate_up_proj h*2I: the same
    count as llama; olmo2: llama + q_norm nh*hd + k_norm kv*hd per layer
  gpt_neox: embed_in V*h, per layer 2 LayerNorms (4h), query_key_value
    h*3h + 3h, dense h*h + h (biases: attention_bias, default true),
    dense_h_to_4h h*I + I, dense_4h_to_h I*h + h; final LayerNorm 2h;
    lm_head V*h unless tied (default untied)

  mixtral / qwen3_moe / olmoe (mixture of experts): the llama attention
    (qwen3_moe: + q_norm, k_norm 2*hd; olmoe: + q_norm h and k_norm
    (h/nh)*kv), 2 norms, and in place of the MLP a router E*h (no bias) and
    E experts of 3*h*Im (gate_up_proj [E, 2Im, h], down_proj [E, h, Im]);
    Im = intermediate_size (mixtral, olmoe) or moe_intermediate_size
    (qwen3_moe); E = num_local_experts (mixtral) / num_experts

  deepseek_v3 / deepseek_v2 (count_deepseek; not in models/ while the planner
    refuses them): MLA per layer q_a_proj h*qr + q_a_layernorm qr + q_b_proj
    qr*nh*(nope+rope) (or q_proj h*nh*(nope+rope) without q_lora_rank),
    kv_a_proj_with_mqa h*(kvr+rope) + kv_a_layernorm kvr + kv_b_proj
    kvr*nh*(nope+v) + o_proj nh*v*h; the first first_k_dense_replace layers a
    SwiGLU MLP 3*h*I, the others router E*h + experts 3*E*h*Im + shared experts
    3*h*Im*n_shared; e_score_correction_bias is a buffer
  gpt_oss: q/k/v/o with biases (attention_bias, default true), a sink per
    head (nh), router E*h + E (bias), E experts with biases
    E*(h*2I + 2I + I*h + h), 2 norms; head_dim 64 and 8 kv heads by
    default (GptOssConfig); untied; the count of the dequantized model
    (the MXFP4 checkpoint stores the experts as packed blocks and scales)

  gpt2:
    wte V*h, wpe n_positions*h
    per layer: ln_1, ln_2 (2h each), c_attn h*3h+3h, attn.c_proj h*h+h,
               c_fc h*I+I, mlp.c_proj I*h+h   with I = n_inner or 4h
    ln_f 2h; lm_head tied to wte (always, for GPT2LMHeadModel)
"""

import json
import os
import re
import sys

LLAMA_LIKE = {"llama", "mistral", "qwen2", "qwen3"}


GEMMA = {"gemma", "gemma2", "gemma3_text"}
# transformers 5.24 defaults of the issue-13 families for keys a config may omit
DEFAULT_KV = {"gemma": 16, "gemma2": 4, "gemma3_text": 4}


def count_llama_like(c):
    mt = c["model_type"]
    h = c["hidden_size"]
    V = c["vocab_size"]
    L = c["num_hidden_layers"]
    I = c["intermediate_size"]
    nh = c["num_attention_heads"]
    kv = c.get("num_key_value_heads") or DEFAULT_KV.get(mt, nh)
    hd = c.get("head_dim") or (256 if mt in GEMMA else h // nh)

    qkv_bias = mt == "qwen2" or bool(c.get("attention_bias", False))
    o_bias = mt != "qwen2" and bool(c.get("attention_bias", False))
    mlp_bias = bool(c.get("mlp_bias", False))

    attn = h * (nh * hd) + 2 * h * (kv * hd) + (nh * hd) * h
    if qkv_bias:
        attn += nh * hd + 2 * kv * hd
    if o_bias:
        attn += h
    mlp = 3 * h * I
    if mlp_bias:
        mlp += 2 * I + h
    norms = 2 * h
    if mt in ("qwen3", "qwen3_moe", "gemma3_text"):
        norms += 2 * hd  # q_norm, k_norm (RMSNorm over head_dim)
    if mt in ("gemma2", "gemma3_text"):
        norms += 2 * h  # pre_feedforward_layernorm, post_feedforward_layernorm
    if mt == "olmo2":
        norms += nh * hd + kv * hd  # q_norm, k_norm over the projections
    if mt == "olmoe":
        norms += h + (h // nh) * kv  # q_norm over hidden, k_norm over (h / nh) * kv
    per_layer = attn + mlp + norms

    total = V * h + L * per_layer + h
    if not c.get("tie_word_embeddings", mt in GEMMA):
        total += V * h
    return total


MOE = {"mixtral", "qwen3_moe", "olmoe"}


def count_moe(c):
    """The llama-built count without an MLP, plus each layer's router and experts."""
    mt = c["model_type"]
    h = c["hidden_size"]
    E = c["num_local_experts"] if mt == "mixtral" else c["num_experts"]
    Im = c["moe_intermediate_size"] if mt == "qwen3_moe" else c["intermediate_size"]
    if c.get("mlp_only_layers") or c.get("decoder_sparse_step", 1) != 1:
        raise ValueError("dense layers mixed in are not counted")
    return count_llama_like({**c, "intermediate_size": 0}) + c["num_hidden_layers"] * (E * h + E * 3 * h * Im)


def count_gpt_oss(c):
    h = c["hidden_size"]
    nh = c["num_attention_heads"]
    kv = c.get("num_key_value_heads", 8)
    hd = c.get("head_dim", 64)
    I = c.get("intermediate_size", 2880)
    E = c.get("num_local_experts", 128)
    V = c.get("vocab_size", 201088)
    bias = c.get("attention_bias", True)
    attn = 2 * h * nh * hd + 2 * h * kv * hd + ((nh + 2 * kv) * hd + h if bias else 0) + nh
    experts = E * h + E + E * (h * 2 * I + 2 * I + I * h + h)
    total = V * h + c["num_hidden_layers"] * (attn + experts + 2 * h) + h
    if not c.get("tie_word_embeddings", False):
        total += V * h
    return total


def count_gpt_neox(c):
    h = c["hidden_size"]
    V = c["vocab_size"]
    L = c["num_hidden_layers"]
    I = c["intermediate_size"]
    bias = c.get("attention_bias", True)
    per_layer = 4 * h + 3 * h * h + h * h + (4 * h if bias else 0) + 2 * h * I + I + h
    total = V * h + L * per_layer + 2 * h
    if not c.get("tie_word_embeddings", False):
        total += V * h
    return total


def count_gpt2(c):
    h = c["n_embd"]
    V = c["vocab_size"]
    L = c["n_layer"]
    P = c["n_positions"]
    I = c.get("n_inner") or 4 * h
    per_layer = (
        2 * h  # ln_1
        + h * 3 * h + 3 * h  # attn.c_attn
        + h * h + h  # attn.c_proj
        + 2 * h  # ln_2
        + h * I + I  # mlp.c_fc
        + I * h + h  # mlp.c_proj
    )
    return V * h + P * h + L * per_layer + 2 * h  # lm_head tied to wte


def count_deepseek(c):
    """deepseek_v3 / deepseek_v2 (transformers 5.24): multi-head latent attention, the
    first first_k_dense_replace layers dense, the rest routed + shared experts. The
    router's e_score_correction_bias (v3) is a buffer, not a parameter; the MTP layer
    (num_nextn_predict_layers) is not instantiated."""
    h, L, V = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    nh = c["num_attention_heads"]
    qr, kvr = c.get("q_lora_rank"), c["kv_lora_rank"]
    nope, rope, vd = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    bias = bool(c.get("attention_bias", False))
    qk = nope + rope
    if qr is None:
        attn = h * nh * qk  # q_proj
    else:
        attn = h * qr + (qr if bias else 0) + qr + qr * nh * qk  # q_a_proj, q_a_layernorm, q_b_proj
    attn += h * (kvr + rope) + ((kvr + rope) if bias else 0) + kvr  # kv_a_proj_with_mqa, kv_a_layernorm
    attn += kvr * nh * (nope + vd)  # kv_b_proj
    attn += nh * vd * h + (h if bias else 0)  # o_proj
    E, Im, S = c["n_routed_experts"], c["moe_intermediate_size"], c["n_shared_experts"]
    dense = 3 * h * c["intermediate_size"]
    moe = E * h + 3 * E * h * Im + 3 * h * Im * S  # router, experts, shared experts
    k = min(c["first_k_dense_replace"], L)
    layers = L * (attn + 2 * h) + k * dense + (L - k) * moe
    head = 0 if c.get("tie_word_embeddings", False) else V * h
    return V * h + layers + h + head


def count_params(c):
    mt = c.get("model_type")
    if mt in ("deepseek_v3", "deepseek_v2"):
        return count_deepseek(c)
    if mt == "gpt2":
        return count_gpt2(c)
    if mt == "gpt_neox":
        return count_gpt_neox(c)
    if mt in MOE:
        return count_moe(c)
    if mt == "gpt_oss":
        return count_gpt_oss(c)
    if mt in GEMMA or mt in ("phi3", "olmo2", "granite"):
        return count_llama_like(c)
    if mt in LLAMA_LIKE:
        # tie_word_embeddings default is True in PretrainedConfig; every
        # config here states it explicitly except gpt2, so be strict.
        if "tie_word_embeddings" not in c:
            raise ValueError("config lacks tie_word_embeddings")
        return count_llama_like(c)
    raise ValueError("unsupported model_type %r" % mt)


ROW = re.compile(r"^\|\s*`?([A-Za-z0-9._-]+\.json)`?\s*\|(.*)\|\s*$")


def published_from_readme(path):
    """Map config file name -> published count from the README table.

    The table row starts with the file name; the published count is the
    first cell that is a comma-grouped (or plain) integer of 6+ digits."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = ROW.match(line.strip())
            if not m:
                continue
            cells = [x.strip() for x in m.group(2).split("|")]
            for cell in cells:
                digits = cell.replace(",", "")
                if re.fullmatch(r"\d{6,}", digits):
                    out[m.group(1)] = int(digits)
                    break
    return out


def main(argv):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    models = argv[1] if len(argv) > 1 else os.path.join(root, "models")
    readme = os.path.join(models, "README.md")
    published = published_from_readme(readme)

    files = sorted(f for f in os.listdir(models) if f.endswith(".json"))
    bad = 0
    print("%-22s %-8s %16s %16s  %s" % ("config", "type", "computed",
                                         "published", "status"))
    for name in files:
        with open(os.path.join(models, name), encoding="utf-8") as f:
            cfg = json.load(f)
        try:
            n = count_params(cfg)
        except (KeyError, ValueError) as e:
            print("%-22s %-8s %16s %16s  ERROR %s" % (
                name, cfg.get("model_type", "?"), "-", "-", e))
            bad += 1
            continue
        pub = published.get(name)
        if pub is None:
            status = "NO README ROW"
            bad += 1
        elif pub == n:
            status = "ok"
        else:
            status = "MISMATCH (%+d)" % (n - pub)
            bad += 1
        print("%-22s %-8s %16s %16s  %s" % (
            name, cfg["model_type"], format(n, ","),
            format(pub, ",") if pub is not None else "-", status))
    for name in sorted(set(published) - set(files)):
        print("%-22s README row has no config file" % name)
        bad += 1
    if bad:
        print("%d problem(s)" % bad)
        return 1
    print("all %d configs match the published counts" % len(files))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
