"""The issue-13 fixture set (tests/data/hf-fam/): tiny configurations of the dense
families added after the first five, each with the features that change memory switched
on: Gemma's (1 + w) RMSNorm, sqrt(h) embedding scale and GELU-tanh; Gemma 2's pre/post
norms, attention and final logit soft-capping and alternating sliding / full layers;
Gemma 3's layer_types, local / global rope and q/k norms; Phi-3's fused qkv_proj /
gate_up_proj and a sliding window shorter than the sequence; Phi-4-mini's partial
rotary (0.75) with a tied head; GPT-NeoX's parallel residual, partial rotary (0.25)
and packed qkv with biases, and its sequential block (gpt_neoxseq: use_parallel_residual
False); OLMo 2's post-norms and full-width q/k norms; Granite's multipliers; SmolLM3's
NoPE layers (no rotary embedding on every no_rope_layer_interval-th layer); GLM-4's
four norms per layer, q/k/v biases, gate_up_proj and interleaved partial rotary (0.5); Mistral
v0.1's sliding window (every layer); Gemma 3 with a window longer than the sequences
(gemma3w: SDPA needs no mask there).

Qwen2 / Qwen3 with use_sliding_window and max_window_layers 2 / 1 (their upper layers
slide: two layer types).

Grid per variant: fp32 / bf16 / amp-bf16 (CUDA's autocast lists, emulated) x sdpa /
eager x every_n off / 1 / 1+offload / 2 / 2+offload / 3 / 3+offload (3 on 4 layers:
layers 0 and 3), shapes b2s32 (all) and b1s48 (off and 1), gradient accumulation 2. Gemma 2 with sdpa is not a case: transformers
refuses it at model construction (Gemma2PreTrainedModel._supports_sdpa = False,
FINDINGS R-FAM-7 to R-FAM-14). Plus the second held-out check's cases with gradient accumulation 1 (ga1_cases).
"""
from __future__ import annotations

VOCAB = 211
W = 8  # sliding window, shorter than every measured sequence
COMMON = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
              head_dim=16, max_position_embeddings=128, attention_dropout=0.0, bos_token_id=1, eos_token_id=2,
              pad_token_id=0)
NO_HD = {k: v for k, v in COMMON.items() if k != "head_dim"}
ALT = ["sliding_attention", "full_attention"] * 2

VARIANTS: dict[str, dict] = {
    "gemma": dict(model_type="gemma", intermediate_size=96, **COMMON),
    "gemma2": dict(model_type="gemma2", intermediate_size=96, sliding_window=W, query_pre_attn_scalar=24,
                   attn_logit_softcapping=50.0, final_logit_softcapping=30.0, **COMMON),
    "gemma3_text": dict(model_type="gemma3_text", intermediate_size=96, sliding_window=W, layer_types=ALT,
                        query_pre_attn_scalar=24, **COMMON),
    # Gemma 3 with a window longer than the sequences (the 1B under 512 tokens): SDPA unmasked everywhere
    "gemma3w": dict(model_type="gemma3_text", intermediate_size=96, sliding_window=64, layer_types=ALT,
                    query_pre_attn_scalar=24, **COMMON),
    "phi3": dict(model_type="phi3", intermediate_size=96, sliding_window=W, tie_word_embeddings=False, **NO_HD),
    "phi3p": dict(model_type="phi3", intermediate_size=96, partial_rotary_factor=0.75, tie_word_embeddings=True,
                  sliding_window=4096, **NO_HD),
    "gpt_neox": dict(model_type="gpt_neox", intermediate_size=256, rotary_pct=0.25, use_parallel_residual=True,
                     hidden_act="gelu", **{k: v for k, v in NO_HD.items() if k != "num_key_value_heads"}),
    # the sequential block (use_parallel_residual False): attention's residual sum feeds the MLP's norm
    "gpt_neoxseq": dict(model_type="gpt_neox", intermediate_size=256, rotary_pct=0.25, use_parallel_residual=False,
                        hidden_act="gelu", **{k: v for k, v in NO_HD.items() if k != "num_key_value_heads"}),
    "olmo2": dict(model_type="olmo2", intermediate_size=96, **COMMON),
    "granite": dict(model_type="granite", intermediate_size=96, embedding_multiplier=12.0, residual_multiplier=0.28,
                    attention_multiplier=0.0078125, logits_scaling=10.0, **COMMON),
    # SmolLM3: NoPE layers (no_rope_layers derived from no_rope_layer_interval 2: layers 1 and 3
    # skip the rotary embedding) with q/k/v/o biases and a tied head
    "smollm3": dict(model_type="smollm3", intermediate_size=96, no_rope_layer_interval=2, attention_bias=True,
                    **COMMON),
    # GLM-4 (0414): Glm4Config's defaults for what changes memory: partial rotary 0.5
    # (interleaved pairs), q/k/v biases without an o bias, an untied head
    "glm4": dict(model_type="glm4", intermediate_size=96, **COMMON),
    "mistralsw": dict(model_type="mistral", intermediate_size=96, sliding_window=W, **COMMON),
    # Qwen2 / Qwen3 whose layers from max_window_layers on slide (two block types under SDPA
    # at seq >= window: masked sliding layers, causal full ones)
    "qwen2sw": dict(model_type="qwen2", intermediate_size=96, use_sliding_window=True, sliding_window=W,
                    max_window_layers=2, **NO_HD),
    "qwen3sw": dict(model_type="qwen3", intermediate_size=96, use_sliding_window=True, sliding_window=W,
                    max_window_layers=1, **COMMON),
}
# transformers refuses sdpa at model construction (_supports_sdpa = False): soft-capping, sinks
REFUSES_SDPA = ("gemma2", "gpt_oss")
PRECISIONS = ["fp32", "bf16", "amp-bf16-cudalists"]
ATTENTIONS = ["sdpa", "eager"]
CKPT = [(0, False), (1, False), (1, True), (2, False), (2, True)]
# every_n 3 on 4 layers checkpoints layers 0 and 3: a pattern that is not periodic in the
# layers (and, with two layer types, mixes them differently from every_n 2)
CKPT3 = [(3, False), (3, True)]
SHAPES = [(2, 32), (1, 48)]


# Issue 21: gradient accumulation 1 (the grid above uses 2), where layer 0's backward is the
# step's peak; two layer types whose first full layer is not layer 1 (Gemma 3's pattern 3
# on 5 layers: sliding, sliding, full, sliding, sliding) and Gemma 2's alternation with
# other sizes. Before issue 21 the other type's mask and rotary pair than layer 0's were
# planned alive to the embedding's backward.
GA1_VARIANTS: dict[str, dict] = {
    "gemma3p3": dict(model_type="gemma3_text", vocab_size=173, hidden_size=48, num_hidden_layers=5,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=12, intermediate_size=80,
                     max_position_embeddings=128, sliding_window=8, sliding_window_pattern=3,
                     query_pre_attn_scalar=24, attention_dropout=0.0, bos_token_id=1, eos_token_id=2,
                     pad_token_id=0),
    "gemma2h48": dict(model_type="gemma2", vocab_size=173, hidden_size=48, num_hidden_layers=5,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=12, intermediate_size=80,
                      max_position_embeddings=128, sliding_window=8, query_pre_attn_scalar=24,
                      attn_logit_softcapping=50.0, final_logit_softcapping=30.0, attention_dropout=0.0,
                      bos_token_id=1, eos_token_id=2, pad_token_id=0),
}
GA1_CKPT = [(1, False), (1, True), (2, False)]
GA1_SHAPE = (2, 24)


def ga1_cases() -> list[dict]:
    out = []
    b, s = GA1_SHAPE
    for var, cfg in GA1_VARIANTS.items():
        for prec in PRECISIONS:
            for attn in ATTENTIONS:
                if attn == "sdpa" and cfg["model_type"] in REFUSES_SDPA:
                    continue
                for n, off in GA1_CKPT:
                    name = f"{var}-{prec}-{attn}-n{n}-{'offload' if off else 'plain'}-b{b}s{s}-ga1"
                    out.append(dict(name=name, family=cfg["model_type"], config=dict(cfg), precision=prec,
                                    attention=attn, every_n=n, offload=off, b=b, s=s, grad_accum=1))
    return out


def cases() -> list[dict]:
    out = ga1_cases()
    for var, cfg in VARIANTS.items():
        for prec in PRECISIONS:
            for attn in ATTENTIONS:
                if attn == "sdpa" and cfg["model_type"] in REFUSES_SDPA:
                    continue
                for n, off in CKPT + CKPT3:
                    for b, s in (SHAPES if not off and n < 2 else SHAPES[:1]):
                        name = f"{var}-{prec}-{attn}-n{n or 'off'}-{'offload' if off else 'plain'}-b{b}s{s}"
                        out.append(dict(name=name, family=cfg["model_type"], config=dict(cfg), precision=prec,
                                        attention=attn, every_n=n, offload=off, b=b, s=s))
    return out
