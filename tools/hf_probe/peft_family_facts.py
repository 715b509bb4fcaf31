#!/usr/bin/env python3
"""The peft / bitsandbytes facts behind FINDINGS.md R-PEFT-21 to R-PEFT-28 (the later families with
adapters), each run, not read, on the tiny configurations of family_cases.py and
moe_cases.py (CPU), and peft's trainable count of every shipped dense model of those
families built on the meta device. Prints JSON; --counts FILE writes the shipped models'
counts as the fixture tests/data/hf-peft/counts.json (test_hf_peft compares the planner's
trainable count with it).

  peft_family_facts.py [--json FILE] [--counts FILE]
  peft_family_facts.py --dsv3                  # DeepSeek-V3's targets (R-PEFT-29)
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import sys
import tempfile
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
warnings.filterwarnings("ignore")

import torch  # noqa: E402
import transformers  # noqa: E402

import family_cases  # noqa: E402
import moe_cases  # noqa: E402
import probe  # noqa: E402
import probe_peft  # noqa: E402

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

DENSE = ("gemma", "gemma2", "gemma3_text", "phi3", "phi3p", "gpt_neox", "olmo2", "granite")
# the shipped models of these families (models/*.json), as planned with --method lora defaults
SHIPPED = ("gemma-2-2b", "gemma-2-9b", "gemma-3-1b", "phi-3-mini-4k", "phi-4-mini", "pythia-1.4b", "olmo-2-7b")
SHIPPED_RANK = 16
# the shipped mixture-of-experts models, with the attention adapters the planner plans there
# (all-linear also wraps their router and experts, FINDINGS R-PEFT-28; gpt_oss's is these four)
SHIPPED_MOE = ("mixtral-8x7b", "qwen3-30b-a3b", "olmoe-1b-7b", "gpt-oss-20b")
ATTN = ["q_proj", "k_proj", "v_proj", "o_proj"]


def tiny(var, cfgs=family_cases.VARIANTS):
    cfg = cfgs[var]
    attn = "eager" if cfg["model_type"] in family_cases.REFUSES_SDPA else "sdpa"
    return probe.make_model(dict(family=cfg["model_type"], attention=attn, config=dict(cfg)))


def linears(m):
    return sorted({n.split(".")[-1] for n, mod in m.named_modules() if isinstance(mod, torch.nn.Linear)})


def adapters(pm):
    """{module name without the layer prefix: [in, out]} of every LoRA layer."""
    from peft.tuners.lora import LoraLayer

    out = {}
    for n, m in pm.named_modules():
        if isinstance(m, LoraLayer):
            parts = n.split(".")
            key = ".".join(parts[parts.index("layers") + 2:]) if "layers" in parts else n
            out[key] = [m.in_features, m.out_features]
    return out


def lora(m, targets="all-linear", **kw):
    from peft import LoraConfig, get_peft_model

    return get_peft_model(m, LoraConfig(r=8, lora_alpha=16, target_modules=targets, task_type="CAUSAL_LM", **kw))


def output_layer(m):
    return next(n for n, mod in m.named_modules() if mod is m.get_output_embeddings())


def dense_facts(var):
    m = tiny(var)
    head, emb = output_layer(m), next(n for n, mod in m.named_modules() if mod is m.get_input_embeddings())
    nl = linears(m)
    pm = lora(m)
    tr, allp = pm.get_nb_trainable_parameters()
    f = {"model_type": m.config.model_type, "nn.Linear modules": nl, "output layer": head, "input embedding": emb,
         "tied": bool(m.config.tie_word_embeddings),
         "all-linear adapters [in, out]": adapters(pm), "trainable r8": tr, "all params": allp}
    # a fused projection gets one adapter over the fused output: the adapter's out is the fused width
    # modules_to_save by the names a user writes (the output / input embedding's own name)
    mts = [head.split(".")[-1], emb.split(".")[-1]]
    pm2 = lora(tiny(var), modules_to_save=mts)
    f["modules_to_save names"] = mts
    f["modules_to_save trainable r8"] = pm2.get_nb_trainable_parameters()[0]
    return f


def load_4bit(cfg):
    """The tiny model of cfg as a QLoRA user loads it: nf4 with double quantization, bf16."""
    attn = "eager" if cfg["model_type"] in family_cases.REFUSES_SDPA else "sdpa"
    sp = dict(probe_peft.spec("llama", "qlora", "amp-bf16", quant="nf4"), family=cfg["model_type"], attention=attn,
              config=dict(cfg))
    cls = getattr(transformers, probe.MODEL_CLASSES[cfg["model_type"]])
    m = cls.from_pretrained(probe_peft.saved_tiny_model(sp), quantization_config=probe_peft.bnb_config(sp),
                            dtype=torch.bfloat16, device_map="cpu", attn_implementation=attn)
    m.config.use_cache = False
    return m


def param_kinds(m):
    """{class:dtype: the parameter names without layer indices and the model's prefix}"""
    out = {}
    for n, p in m.named_parameters():
        short = ".".join(x for x in n.split(".") if not x.isdigit()).split("model.")[-1]
        out.setdefault(f"{type(p).__name__}:{probe_peft.dt(p)}", set()).add(short)
    return {k: sorted(v) for k, v in out.items()}


def quantized(m):
    import bitsandbytes as bnb

    return sorted({n.split(".")[-1] for n, mod in m.named_modules() if isinstance(mod, bnb.nn.Linear4bit)})


def qlora_facts(var):
    """prepare_model_for_kbit_training's casts on the family: every parameter's dtype and
    class before and after, buffers, and what the first forward changes."""
    from peft import prepare_model_for_kbit_training

    m = load_4bit(family_cases.VARIANTS[var])
    before = param_kinds(m)
    prepare_model_for_kbit_training(m, use_gradient_checkpointing=False)
    after = param_kinds(m)
    bufs = {n: probe_peft.dt(b) for n, b in m.named_buffers()}
    pm = lora(m)
    pm.train()  # in eval mode bitsandbytes' CPU path repacks the weight (FINDINGS R-CPU-3 C8)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        pm(input_ids=torch.full((1, 8), 5, dtype=torch.long))
    import bitsandbytes as bnb

    biases = {n.split(".")[-1]: probe_peft.dt(mod.bias) for n, mod in m.named_modules()
              if isinstance(mod, bnb.nn.Linear4bit) and mod.bias is not None}
    return {"loaded (class:dtype -> parameters)": before, "after prepare": after, "buffers after prepare": bufs,
            "Linear4bit biases after the first forward (autocast bf16)": biases, "quantized": quantized(m)}


def moe_qlora_facts(var):
    """What BitsAndBytesConfig(load_in_4bit) and prepare_model_for_kbit_training do to a MoE
    model of transformers 5.24: which modules bitsandbytes replaces, each parameter's class
    and dtype after loading and after prepare (the experts' fused parameters, the router)."""
    from peft import prepare_model_for_kbit_training

    m = load_4bit(moe_cases.VARIANTS[var])
    before = param_kinds(m)
    prepare_model_for_kbit_training(m, use_gradient_checkpointing=False)
    return {"quantized (Linear4bit)": quantized(m), "loaded (class:dtype -> parameters)": before,
            "after prepare": param_kinds(m)}


def grouped_mm_saves():
    """What torch._grouped_mm's backward keeps (a saved-tensor hook), with a trainable and
    with a frozen weight: the experts' weight under full fine-tuning and under LoRA."""
    out = {}
    for trainable in (True, False):
        x = torch.randn(8, 16, requires_grad=True)
        w = torch.randn(2, 16, 12, requires_grad=trainable)
        saved = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
            torch._grouped_mm(x, w, offs=torch.tensor([3, 8], dtype=torch.int32))
        what = {id(x): "input [8, 16]", id(w): "weight [2, 16, 12]"}
        out["weight trainable" if trainable else "weight frozen"] = sorted(
            what.get(id(t), f"{probe_peft.dt(t)} {list(t.shape)}") for t in saved)
    return out


def moe_facts(var):
    """What all-linear and the experts' names reach in a MoE model of transformers 5.24."""
    m = tiny(var, moe_cases.VARIANTS)
    experts = {n.split(".")[-1]: type(mod).__name__ for n, mod in m.named_modules() if "experts" in n.split(".")[-1:]}
    eparams = sorted({n.split("experts.")[-1] for n, _ in m.named_parameters() if ".experts." in n})
    f = {"nn.Linear modules": linears(m), "experts modules": experts, "experts parameters": eparams}
    pm = lora(m)
    f["all-linear adapters"] = sorted(adapters(pm))
    f["all-linear adapter classes"] = sorted({f"{n.split('.')[-1]}: {type(mod).__name__}" for n, mod in pm.named_modules()
                                              if hasattr(mod, "lora_A") and "layers.0." in n})
    f["all-linear trainable (layer 0)"] = sorted(n.split("layers.0.")[-1] for n, p in pm.named_parameters()
                                                 if p.requires_grad and "layers.0." in n)
    try:
        lora(tiny(var, moe_cases.VARIANTS), targets=eparams[:1])
        f["target_modules=[experts parameter]"] = "accepted"
    except Exception as e:  # noqa: BLE001 - the error is the fact
        f["target_modules=[experts parameter]"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
    try:
        from peft import LoraConfig, get_peft_model

        pm = get_peft_model(tiny(var, moe_cases.VARIANTS),
                            LoraConfig(r=8, target_modules=[], target_parameters=["experts." + eparams[0]]))
        f["target_parameters=[experts.%s]" % eparams[0]] = {"trainable r8": pm.get_nb_trainable_parameters()[0]}
    except Exception as e:  # noqa: BLE001
        f["target_parameters=[experts.%s]" % eparams[0]] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
    return f


def dsv3_facts():
    """DeepSeek-V3 (FINDINGS R-PEFT-29): peft's default targets, what all-linear and the MLP
    names wrap on moe_cases' tiny deepseek_v3 (layer 0 dense, 1-3 MoE), a name no module
    has, and peft's trainable count of tests/data/configs/deepseek-v3.json on the meta device
    with the MLA projections at r 16."""
    from peft import LoraConfig, get_peft_model
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as defaults

    def tiny_dsv3(**over):
        cfg = {**moe_cases.DSV3_VARIANTS["deepseek_v3"], **over}
        return probe.make_model(dict(family="deepseek_v3", attention="sdpa", config=cfg))

    def wrapped(targets, **over):
        try:
            pm = lora(tiny_dsv3(**over), targets=targets)
        except Exception as e:  # noqa: BLE001 - the error is the fact
            return f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
        return {f"layer {i}": sorted(f"{n.split(f'layers.{i}.')[-1]}: {type(mod).__name__}" for n, mod in pm.named_modules()
                                     if hasattr(mod, "lora_A") and f"layers.{i}." in n) for i in (0, 1)}

    f = {"default target modules": defaults.get("deepseek_v3"), "nn.Linear modules": linears(tiny_dsv3()),
         "all-linear": wrapped("all-linear"), "gate_proj,up_proj,down_proj": wrapped(["gate_proj", "up_proj", "down_proj"]),
         "MLA projections": wrapped(probe_peft.MLA_ATTN),
         "q_proj with q_lora_rank 24": wrapped(["q_proj"]),
         "q_proj,o_proj with q_lora_rank 24": wrapped(["q_proj", "o_proj"])}
    with open(os.path.join(probe.ROOT, "tests", "data", "configs", "deepseek-v3.json")) as fh:
        d = json.load(fh)
    mt = d.pop("model_type")
    for k in ("architectures", "transformers_version", "torch_dtype", "dtype", "_name_or_path", "auto_map",
              "quantization_config"):
        d.pop(k, None)
    with torch.device("meta"):
        m = getattr(transformers, probe.MODEL_CLASSES[mt])(transformers.AutoConfig.for_model(mt, **d))
    pm = get_peft_model(m, LoraConfig(r=SHIPPED_RANK, lora_alpha=2 * SHIPPED_RANK, target_modules=probe_peft.MLA_ATTN,
                                      task_type="CAUSAL_LM"))
    tr, allp = pm.get_nb_trainable_parameters()
    f["deepseek-v3.json r 16 MLA projections (meta)"] = {"trainable_params": tr, "all_params": allp}
    return f


def shipped_counts():
    """peft's count (get_nb_trainable_parameters, what print_trainable_parameters prints) of
    every shipped model of the families, r 16 all-linear, built on the meta device."""
    from peft import LoraConfig, get_peft_model

    out = {}
    for name in SHIPPED + SHIPPED_MOE:
        targets = ATTN if name in SHIPPED_MOE else "all-linear"
        with open(os.path.join(probe.ROOT, "models", name + ".json")) as f:
            d = json.load(f)
        mt = d.pop("model_type")
        for k in ("architectures", "transformers_version", "torch_dtype", "dtype", "_name_or_path"):
            d.pop(k, None)
        cfg = transformers.AutoConfig.for_model(mt, **d)
        with torch.device("meta"):
            m = getattr(transformers, probe.MODEL_CLASSES[mt])(cfg)
        pm = get_peft_model(m, LoraConfig(r=SHIPPED_RANK, lora_alpha=2 * SHIPPED_RANK, target_modules=targets,
                                          task_type="CAUSAL_LM"))
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            pm.print_trainable_parameters()
        tr, allp = pm.get_nb_trainable_parameters()
        out[name] = {"model_type": mt, "rank": SHIPPED_RANK,
                     "targets": targets if isinstance(targets, str) else ",".join(targets), "trainable_params": tr,
                     "all_params": allp, "print_trainable_parameters": buf.getvalue().strip()}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json")
    ap.add_argument("--counts")
    ap.add_argument("--dsv3", action="store_true", help="only DeepSeek-V3's facts (R-PEFT-29)")
    a = ap.parse_args(argv)
    import bitsandbytes
    import peft

    if a.dsv3:
        print(json.dumps(dsv3_facts(), indent=1, sort_keys=True))
        return 0

    probe_peft._CKPT_ROOT = tempfile.mkdtemp(prefix="gckpt-peft-facts-")
    facts = {"versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                          "peft": peft.__version__, "bitsandbytes": bitsandbytes.__version__},
             "dense": {v: dense_facts(v) for v in DENSE},
             "qlora": {v: qlora_facts(v) for v in DENSE if v != "phi3p"},
             "moe": {v: moe_facts(v) for v in moe_cases.VARIANTS},
             "moe qlora (nf4, bf16 load)": {v: moe_qlora_facts(v) for v in moe_cases.VARIANTS},
             "grouped_mm saved tensors": grouped_mm_saves(),
             "shipped (r 16; MoE: q/k/v/o)": shipped_counts()}
    text = json.dumps(facts, indent=1, sort_keys=True)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    if a.counts:
        with open(a.counts, "w") as f:
            json.dump({"schema": "gckpt.peft-counts/1", "versions": facts["versions"],
                       "models": facts["shipped (r 16; MoE: q/k/v/o)"]}, f, indent=1, sort_keys=True)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
