"""DeepSeek-V3 / V2 facts for issue 26 (transformers 5.24, CPU): the parameter count of
tests/data/configs/deepseek-v3.json (DeepSeek-V3's architecture; not in models/ while the
planner refuses deepseek_v3: every shipped model is planned by the tests) and of a DeepSeek-V2-Lite config as transformers instantiates them
on the meta device (sum(p.numel()), the router's e_score_correction_bias is a buffer),
against the closed form tools/param_count.py uses; and, from a fixture of
tests/data/hf-dsv3, the tensors autograd saves in one dense and one MoE layer, by module.

Usage: .venv/bin/python dsv3_facts.py [FIXTURE.json]
"""
from __future__ import annotations

import json
import os
import sys
from collections import defaultdict

import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tools"))
from param_count import count_params  # noqa: E402

# DeepSeek-V2-Lite (deepseek-ai/DeepSeek-V2-Lite) architecture keys: 27 layers (the first
# dense), no q compression, 64 routed + 2 shared experts of 1408, top-6
V2_LITE = {"model_type": "deepseek_v2", "hidden_size": 2048, "num_hidden_layers": 27, "intermediate_size": 10944,
           "num_attention_heads": 16, "num_key_value_heads": 16, "q_lora_rank": None, "kv_lora_rank": 512,
           "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "n_routed_experts": 64,
           "n_shared_experts": 2, "moe_intermediate_size": 1408, "first_k_dense_replace": 1,
           "num_experts_per_tok": 6, "n_group": 1, "topk_group": 1, "topk_method": "greedy", "vocab_size": 102400,
           "tie_word_embeddings": False, "max_position_embeddings": 163840, "rms_norm_eps": 1e-6}


def meta_count(cfg: dict) -> int:
    d = {k: v for k, v in cfg.items() if k not in ("architectures", "transformers_version", "torch_dtype")}
    conf = transformers.AutoConfig.for_model(d.pop("model_type"), **d)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(conf)
    return sum(p.numel() for p in model.parameters())


def saved_by_module(path: str) -> None:
    fx = json.load(open(path))
    s = fx["setting"]
    print(f"\n{os.path.basename(path)}: saved tensors per layer (module: bytes, count)")
    for lay in fx["saved"]["layers"][:2]:
        by = defaultdict(lambda: [0, 0])
        for t in lay["tensors"]:
            if t.get("param"):
                continue
            mod = (t.get("module") or "?").split(".", 2)[-1]
            key = f"{mod} {t['node']} {t['dtype']}{t['shape']}"
            by[key][0] += t["bytes"]
            by[key][1] += 1
        kind = "dense" if lay["index"] == 0 else "moe"
        print(f"  layer {lay['index']} ({kind}): {lay['bytes']} bytes saved (non-parameter tensors listed), "
              f"b{s['micro_batch']} s{s['seq']}")
        for key, (b, n) in by.items():
            print(f"    {key:90s} {b:8d} x{n}")


def main() -> int:
    v3 = json.load(open(os.path.join(ROOT, "tests", "data", "configs", "deepseek-v3.json")))
    ok = True
    for name, cfg in (("tests/data/configs/deepseek-v3.json", v3), ("DeepSeek-V2-Lite", V2_LITE)):
        meta, closed = meta_count(cfg), count_params(cfg)
        ok &= meta == closed
        print(f"{name}: transformers {transformers.__version__} meta {meta:,}  closed form {closed:,}  "
              f"{'equal' if meta == closed else 'DIFFER'}")
    for p in sys.argv[1:]:
        saved_by_module(p)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
