"""How transformers 5.24 loads a pre-quantized MXFP4 gpt_oss checkpoint for training on
this machine (FINDINGS R-QUANT-17): a tiny GptOss model saved in the Hub checkpoint's layout
(experts as uint8 *_blocks / *_scales, everything else bf16, quantization_config
{"quant_method": "mxfp4"}), loaded with from_pretrained as the Trainer user does, with the
config's dtype set or (as in openai/gpt-oss-20b's config.json) absent, and dtype "auto" /
float32 / bfloat16: prints whether the model stays quantized, the dtype of the experts'
and the norms' parameters, that backward runs and that the Trainer's
validate_quantization_for_training accepts it.

usage: .venv/bin/python mxfp4_load.py  (CPU; writes only to a temporary directory)
"""
import json
import os
import tempfile
import warnings

import torch
from safetensors.torch import load_file, save_file

import transformers
from transformers import AutoModelForCausalLM, GptOssConfig, GptOssForCausalLM, Mxfp4Config
from transformers.trainer_utils import validate_quantization_for_training

warnings.filterwarnings("ignore")
E, H, I = 4, 64, 64


def checkpoint(config_dtype):
    cfg = GptOssConfig(vocab_size=101, hidden_size=H, intermediate_size=I, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=16, num_local_experts=E, num_experts_per_tok=2,
                       sliding_window=8)
    torch.manual_seed(0)
    d = tempfile.mkdtemp()
    GptOssForCausalLM(cfg).save_pretrained(d)
    out = {}
    for k, v in load_file(os.path.join(d, "model.safetensors")).items():
        if k.endswith("experts.gate_up_proj") or k.endswith("experts.down_proj"):
            rows, cols = (2 * I, H) if k.endswith("gate_up_proj") else (H, I)  # [E, out, in / 32, 16] packed e2m1
            out[k + "_blocks"] = torch.randint(0, 256, (E, rows, cols // 32, 16), dtype=torch.uint8)
            out[k + "_scales"] = torch.full((E, rows, cols // 32), 127, dtype=torch.uint8)
        else:
            out[k] = v.to(torch.bfloat16)
    save_file(out, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    c = json.load(open(os.path.join(d, "config.json")))
    c["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    c.pop("torch_dtype", None)
    c.pop("dtype", None)
    if config_dtype:
        c["dtype"] = config_dtype
    json.dump(c, open(os.path.join(d, "config.json"), "w"))
    return d


def main():
    print("transformers", transformers.__version__, "torch", torch.__version__,
          "cuda" if torch.cuda.is_available() else "cpu")
    for config_dtype in ("bfloat16", None):
        d = checkpoint(config_dtype)
        for kw in ({}, {"dtype": torch.float32}, {"dtype": torch.bfloat16},
                   {"dtype": torch.float32, "quantization_config": Mxfp4Config(dequantize=True)}):
            m = AutoModelForCausalLM.from_pretrained(d, **kw)
            ex = m.model.layers[0].mlp.experts
            dts = sorted({f"{n.split('.')[-1]}:{str(p.dtype)[6:]}" for n, p in m.named_parameters()
                          if "layers.0." in n and ("experts" in n or "norm" in n)})
            loss = m(input_ids=torch.randint(0, 100, (1, 8)), labels=torch.randint(0, 100, (1, 8))).loss
            loss.backward()
            validate_quantization_for_training(m)
            args = ", ".join(f"{k}={'Mxfp4Config(dequantize=True)' if k == 'quantization_config' else v}"
                             for k, v in kw.items())
            print(f"config dtype {config_dtype}, from_pretrained({args}): experts {type(ex).__name__}, "
                  f"is_quantized {getattr(m, 'is_quantized', False)}, quantization_config kept "
                  f"{hasattr(m.config, 'quantization_config')}, {' '.join(dts)}; backward ok, "
                  f"validate_quantization_for_training ok")


if __name__ == "__main__":
    main()
