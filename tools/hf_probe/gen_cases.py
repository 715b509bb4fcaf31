"""The generated fixture set (tests/data/hf-gen/): seeded random tiny configurations of
each family over the features that change memory, so that a held-out configuration
cannot surprise the planner.

Per family, a full grid of tied/untied x kv heads (1 / several / all; for gpt2 the
activation function instead) x precision (fp32, bf16, amp-bf16 with CUDA's autocast
lists) x attention (sdpa, eager) = 36 cases, shuffled, plus PER_FAMILY - 36 random
ones; each with random layers (odd counts included), widths, head_dim != hidden/heads,
biases (also the config keys a family ignores, which the planner must ignore too),
dropout 0 / 0.1, batch 1..3, a sequence length that is not a power of two, every_n
off / 1..L with offload or not, and gradient accumulation 1 or 2.

Deterministic: the same SEED gives the same cases (random.Random seeded per family).
"""
from __future__ import annotations

import itertools
import random

SEED = 20260
PER_FAMILY = 44
FAMILIES = ["llama", "mistral", "qwen2", "qwen3", "gpt2"]
PRECISIONS = ["fp32", "bf16", "amp-bf16-cudalists"]
ATTENTIONS = ["sdpa", "eager"]


def _seq(rng: random.Random) -> int:
    while True:
        s = rng.randint(33, 97)
        if s & (s - 1):
            return s


def _llama_like(rng: random.Random, fam: str, tied: bool, kv_mode: int, dropout: bool) -> dict:
    if kv_mode == 1:  # several: a proper divisor of heads
        heads = rng.choice([4, 6, 8])
        kv = rng.choice([d for d in range(2, heads) if heads % d == 0])
    else:
        heads = rng.choice([2, 3, 4, 6])
        kv = 1 if kv_mode == 0 else heads
    hd = rng.choice([12, 16, 24, 32])
    if rng.random() < 0.5:
        hidden = heads * hd
    else:  # head_dim != hidden / heads (transformers wants hidden divisible by heads)
        hidden = heads * rng.choice([k for k in (12, 16, 20, 24, 32) if k != hd])
    cfg = {
        "model_type": fam,
        "vocab_size": rng.randint(97, 509),
        "hidden_size": hidden,
        "intermediate_size": rng.randint(40, 320),
        "num_hidden_layers": rng.choice([1, 2, 3, 4, 5]),
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": hd,
        "max_position_embeddings": 128,
        "tie_word_embeddings": tied,
        "attention_dropout": 0.1 if dropout else 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
    }
    if fam == "qwen2" and hidden == heads * hd and rng.random() < 0.5:
        del cfg["head_dim"]  # Qwen2 configs usually leave it to hidden / heads
    # llama reads both bias flags, qwen3 attention_bias; mistral and qwen2 ignore them
    cfg["attention_bias"] = rng.random() < 0.5
    cfg["mlp_bias"] = rng.random() < 0.5
    return cfg


def _gpt2(rng: random.Random, tied: bool, act_mode: int, dropout: bool) -> dict:
    heads = rng.choice([2, 3, 4, 6])
    hd = rng.choice([12, 16, 24])
    p = [0.1 if dropout and rng.random() < 0.8 else 0.0 for _ in range(3)]
    if dropout and not any(p):
        p[0] = 0.1
    return {
        "model_type": "gpt2",
        "vocab_size": rng.randint(97, 509),
        "n_embd": heads * hd,
        "n_head": heads,
        "n_layer": rng.choice([1, 2, 3, 4, 5]),
        "n_positions": 128,
        "n_inner": None if rng.random() < 0.5 else rng.randint(64, 320),
        "activation_function": ["gelu_new", "gelu_pytorch_tanh", "gelu"][act_mode],
        "attn_pdrop": p[0],
        "resid_pdrop": p[1],
        "embd_pdrop": p[2],
        "tie_word_embeddings": tied,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }


def cases(seed: int = SEED, per_family: int = PER_FAMILY) -> list[dict]:
    out = []
    for fam in FAMILIES:
        rng = random.Random(f"{seed}-{fam}")
        grid = list(itertools.product([False, True], range(3), PRECISIONS, ATTENTIONS))
        rng.shuffle(grid)
        while len(grid) < per_family:
            grid.append((rng.random() < 0.5, rng.randrange(3), rng.choice(PRECISIONS), rng.choice(ATTENTIONS)))
        for i, (tied, mode, prec, attn) in enumerate(grid[:per_family]):
            dropout = rng.random() < 0.4
            cfg = _gpt2(rng, tied, mode, dropout) if fam == "gpt2" else _llama_like(rng, fam, tied, mode, dropout)
            L = cfg.get("num_hidden_layers", cfg.get("n_layer"))
            every_n = 0 if rng.random() < 0.25 else rng.randint(1, L)
            offload = every_n > 0 and rng.random() < 0.5
            b = rng.choice([1, 1, 2, 3])
            s = _seq(rng)
            ga = rng.choice([1, 2])
            ck = str(every_n) if every_n else "off"
            name = f"{fam}-{i:02d}-{prec}-{attn}-n{ck}-{'offload' if offload else 'plain'}-b{b}s{s}-ga{ga}"
            out.append(dict(name=name, family=fam, config=cfg, precision=prec, attention=attn,
                            every_n=every_n, offload=offload, b=b, s=s, grad_accum=ga))
    return out
