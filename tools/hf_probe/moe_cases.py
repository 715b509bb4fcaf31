"""The mixture-of-experts fixture set (tests/data/hf-moe/): tiny configurations of the
MoE families transformers 5.24 trains with its default experts implementation
(grouped_mm): Mixtral (router softmax in fp32, top-k renormalised, fp32 routing weights),
Qwen3-MoE (norm_topk_prob, head_dim != hidden / heads, q/k norms over head_dim) and
OLMoE (q_norm over hidden, k_norm over kv x head_dim, no renormalisation) and gpt-oss
(attention sinks, alternating sliding / full layers with a window shorter than the
sequence, biased q/k/v/o, a router with bias, top-k then softmax, experts with biases and
the clamped SwiGLU); 4 experts, top-2 each. Every fixture records the tokens each
expert received in every forward (moe_routing).

Grid per variant: fp32 / bf16 / amp-bf16 (CUDA's autocast lists, emulated) x sdpa /
eager x every_n off / 1 / 1+offload / 2 / 2+offload / 3 / 3+offload, shapes b2s32 (all) and b1s48 (off
and 1), gradient accumulation 2; and the `+aux` variant (output_router_logits=True: the
load-balancing loss added to the loss) with sdpa, every_n off and 1, b2s32. gpt-oss is
measured with eager only: transformers refuses sdpa for it at model construction
(GptOssPreTrainedModel._supports_sdpa = False, FINDINGS R-ATTN-10).
"""
from __future__ import annotations

from family_cases import ALT, ATTENTIONS, CKPT, CKPT3, COMMON, PRECISIONS, REFUSES_SDPA, SHAPES, W

VARIANTS: dict[str, dict] = {
    "mixtral": dict(model_type="mixtral", intermediate_size=48, num_local_experts=4, num_experts_per_tok=2,
                    **{k: v for k, v in COMMON.items() if k != "head_dim"}),
    "qwen3_moe": dict(model_type="qwen3_moe", intermediate_size=96, moe_intermediate_size=32, num_experts=4,
                      num_experts_per_tok=2, norm_topk_prob=True, **{**COMMON, "head_dim": 24}),
    "olmoe": dict(model_type="olmoe", intermediate_size=32, num_experts=4, num_experts_per_tok=2,
                  **{k: v for k, v in COMMON.items() if k != "head_dim"}),
    # the default rope is yarn (factor 32 over 4096 positions): rope tables of the same shape
    "gpt_oss": dict(model_type="gpt_oss", intermediate_size=32, num_local_experts=4, num_experts_per_tok=2,
                    sliding_window=W, layer_types=ALT, rope_parameters={"rope_type": "default", "rope_theta": 150000.0},
                    **COMMON),
}

# Issue 26's DeepSeek-V3 (tests/data/hf-dsv3, probe.py --set dsv3; not planned yet: kept
# apart from hf-moe, whose every fixture the planner is tested against)
DSV3_VARIANTS: dict[str, dict] = {
    # DeepSeek-V3: multi-head latent attention (q_lora_rank with q_a_layernorm, kv_lora_rank
    # with kv_a_layernorm, a decoupled rotary part qk_rope_head_dim, v_head_dim != the qk
    # head dim), layer 0 dense (first_k_dense_replace 1), 8 routed experts in 4 groups
    # (topk_group 2, top-2), one shared expert, routed_scaling_factor, norm_topk_prob
    "deepseek_v3": dict(model_type="deepseek_v3", intermediate_size=96, moe_intermediate_size=16,
                        n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2, n_group=4, topk_group=2,
                        first_k_dense_replace=1, q_lora_rank=24, kv_lora_rank=16, qk_nope_head_dim=12,
                        qk_rope_head_dim=8, v_head_dim=16, routed_scaling_factor=2.5, norm_topk_prob=True,
                        **{**{k: v for k, v in COMMON.items() if k != "head_dim"}, "num_key_value_heads": 4}),
}


def cases(variants: dict[str, dict] | None = None) -> list[dict]:
    out = []
    for var, cfg in (VARIANTS if variants is None else variants).items():
        for prec in PRECISIONS:
            for attn in ATTENTIONS:
                if attn == "sdpa" and cfg["model_type"] in REFUSES_SDPA:
                    continue
                for n, off in CKPT + CKPT3:
                    for b, s in (SHAPES if not off and n < 2 else SHAPES[:1]):
                        name = f"{var}-{prec}-{attn}-n{n or 'off'}-{'offload' if off else 'plain'}-b{b}s{s}"
                        out.append(dict(name=name, family=cfg["model_type"], config=dict(cfg), precision=prec,
                                        attention=attn, every_n=n, offload=off, b=b, s=s))
            attn = "eager" if cfg["model_type"] in REFUSES_SDPA else "sdpa"
            for n in (0, 1):
                name = f"{var}+aux-{prec}-{attn}-n{n or 'off'}-plain-b2s32"
                out.append(dict(name=name, family=cfg["model_type"], config={**cfg, "output_router_logits": True},
                                precision=prec, attention=attn, every_n=n, offload=False, b=2, s=32))
    return out


def dsv3_cases() -> list[dict]:
    """The same grid over DSV3_VARIANTS."""
    return cases(DSV3_VARIANTS)
