#!/usr/bin/env python3
"""The API facts behind FINDINGS.md's PEFT / QUANT rules that are not memory: defaults, what
prepare_model_for_kbit_training and the checkpointing calls really set, how every_n_layers
and offload must be passed, what the Trainer does with them under bf16, bitsandbytes'
CPU fallbacks. Each fact is run, not read, on the tiny llama of probe.py (CPU). Prints JSON.

  peft_facts.py [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
logging.getLogger("bitsandbytes").setLevel(logging.ERROR)

import torch  # noqa: E402
import transformers  # noqa: E402

import probe  # noqa: E402
import probe_peft  # noqa: E402

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()


def qlora_model(**prepare_kw):
    from peft import prepare_model_for_kbit_training

    sp = probe_peft.spec("llama", "qlora", "amp-bf16", quant="nf4")
    m = transformers.LlamaForCausalLM.from_pretrained(
        probe_peft.saved_tiny_model(sp), quantization_config=probe_peft.bnb_config(sp),
        dtype=torch.bfloat16, device_map="cpu")
    m.config.use_cache = False
    before = sorted({(type(p).__name__, probe_peft.dt(p), p.requires_grad) for p in m.parameters()})
    if prepare_kw is not None:
        prepare_model_for_kbit_training(m, **prepare_kw)
    return m, before


def ckpt_state(hf):
    layers = probe.layers_of(hf, "llama")
    f = layers[0]._gradient_checkpointing_func if hasattr(layers[0], "_gradient_checkpointing_func") else None
    return {"checkpointed": [bool(getattr(l, "gradient_checkpointing", False)) for l in layers],
            "checkpoint_kwargs": dict(getattr(f, "keywords", {}) or {}) if f is not None else None,
            "checkpoint_function": getattr(getattr(f, "func", None), "__name__", None),
            "input_require_grads_hooks": len(hf.get_input_embeddings()._forward_hooks)}


def one_step(pm, amp=True):
    pm.train()  # from_pretrained returns the model in eval mode, where nothing is checkpointed
    ids = torch.randint(3, 200, (2, 16))
    msgs = []
    try:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
                loss = pm(input_ids=ids, labels=ids).loss
            loss.backward()
            msgs = sorted({str(x.message)[:96] for x in w if "use_reentrant" in str(x.message)})
        return {"ran": True, "checkpoint_warnings": msgs}
    except Exception as e:  # noqa: BLE001 - the failure is the fact
        return {"ran": False, "error": f"{type(e).__name__}: {e}"}


def op_counts(fn, names):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    counts = {e.key: e.count for e in prof.key_averages()}
    return {n: counts.get(n, 0) for n in names}


def gemm_counts():
    """A frozen linear's backward computes the input gradient only; a trainable one also the
    weight gradient (the FLOP structure behind the step time)."""
    out = {}
    for frozen in (True, False):
        lin = torch.nn.Linear(256, 512, bias=False)
        lin.weight.requires_grad_(not frozen)
        x = torch.randn(128, 256, requires_grad=True)
        y = lin(x)
        out["frozen weight" if frozen else "trainable weight"] = op_counts(
            lambda: y.backward(torch.ones_like(y)), ["aten::mm", "aten::addmm"])
    return out


def bnb_op_counts(pm):
    """gemm_4bit runs once per 4-bit linear per forward (and recompute); dequantize_4bit is what
    MatMul4Bit's backward calls, once per 4-bit linear whose input needs a gradient."""
    pm.train()
    ids = torch.randint(3, 200, (2, 16))

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = pm(input_ids=ids, labels=ids).loss
        loss.backward()

    return op_counts(step, ["bitsandbytes::gemm_4bit", "bitsandbytes::dequantize_4bit"])


def lora(m, **kw):
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    return get_peft_model(m, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.05, target_modules="all-linear",
                                        task_type="CAUSAL_LM", **kw))


def facts():
    from peft import LoraConfig
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as TM

    out = {}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out["torch.is_autocast_enabled() under CPU autocast"] = {
            "no argument (asks about CUDA)": torch.is_autocast_enabled(), "'cpu'": torch.is_autocast_enabled("cpu")}
    b = transformers.BitsAndBytesConfig(load_in_4bit=True)
    out["BitsAndBytesConfig(load_in_4bit=True) defaults"] = {
        "bnb_4bit_quant_type": b.bnb_4bit_quant_type, "bnb_4bit_use_double_quant": b.bnb_4bit_use_double_quant,
        "bnb_4bit_compute_dtype": str(b.bnb_4bit_compute_dtype), "bnb_4bit_quant_storage": str(b.bnb_4bit_quant_storage),
        "llm_int8_threshold": b.llm_int8_threshold}
    c = LoraConfig()
    out["LoraConfig() defaults"] = {"r": c.r, "lora_alpha": c.lora_alpha, "lora_dropout": c.lora_dropout,
                                    "bias": c.bias, "target_modules": c.target_modules, "use_rslora": c.use_rslora,
                                    "use_dora": c.use_dora, "modules_to_save": c.modules_to_save}
    out["default target_modules (target_modules=None)"] = {k: TM[k] for k in ("llama", "qwen2", "gpt2")}

    m, before = qlora_model()
    out["prepare_model_for_kbit_training(model) (defaults)"] = {
        "training mode after from_pretrained and prepare": m.training,
        "parameters as loaded (class, dtype, requires_grad)": before,
        "parameters after": sorted({(type(p).__name__, probe_peft.dt(p), p.requires_grad) for p in m.parameters()}),
        **ckpt_state(m), "first step": one_step(lora(m))}

    m, _ = qlora_model(gradient_checkpointing_kwargs={"every_n_layers": 2})
    out["prepare(..., gradient_checkpointing_kwargs={'every_n_layers': 2})"] = {**ckpt_state(m), "first step": one_step(lora(m))}

    m, _ = qlora_model(gradient_checkpointing_kwargs={"use_reentrant": False, "every_n_layers": 2})
    out["prepare(..., gradient_checkpointing_kwargs={'use_reentrant': False, 'every_n_layers': 2})"] = {
        **ckpt_state(m), "first step": one_step(lora(m))}

    m, _ = qlora_model(use_gradient_checkpointing=False)
    pm = lora(m)
    pm.gradient_checkpointing_enable(every_n_layers=2, offload=True)
    out["prepare(model, use_gradient_checkpointing=False); get_peft_model; "
        "model.gradient_checkpointing_enable(every_n_layers=2, offload=True)"] = {**ckpt_state(m)}

    m, _ = qlora_model()  # prepare's reentrant every-layer setting first; the Trainer's call replaces it
    pm = lora(m)
    seen = {}

    def probe_autocast(mod, args, kwargs):
        seen["autocast_cpu"] = torch.is_autocast_enabled("cpu")
        seen["autocast_dtype"] = str(torch.get_autocast_dtype("cpu"))

    probe.layers_of(m, "llama")[0].register_forward_pre_hook(probe_autocast, with_kwargs=True)

    class Tokens(torch.utils.data.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            ids = torch.randint(3, 200, (16,), generator=torch.Generator().manual_seed(i))
            return {"input_ids": ids, "labels": ids.clone()}

    with tempfile.TemporaryDirectory() as d:
        args = transformers.TrainingArguments(
            output_dir=d, use_cpu=True, max_steps=1, per_device_train_batch_size=2, bf16=True, report_to="none",
            save_strategy="no", logging_strategy="no", optim="paged_adamw_8bit", gradient_checkpointing=True,
            gradient_checkpointing_kwargs={"every_n_layers": 2, "offload": True})
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            tr = transformers.Trainer(model=pm, args=args, train_dataset=Tokens())
            tr.train()
            paged = sorted({str(x.message) for x in w if "Paged" in str(x.message)})
        states = [v for s in tr.optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
        out["Trainer(bf16=True, gradient_checkpointing=True, gradient_checkpointing_kwargs={'every_n_layers': 2, "
            "'offload': True}, optim='paged_adamw_8bit') on the prepared QLoRA model"] = {
            **ckpt_state(m), "inside the forward": seen, "optimizer": type(tr.optimizer.optimizer).__module__ + "." +
            type(tr.optimizer.optimizer).__name__, "paged warnings": paged,
            "any state tensor paged": any(getattr(t, "is_paged", False) for t in states),
            "parameters with optimizer state": len(tr.optimizer.state),
            "trainable parameters": sum(p.requires_grad for p in pm.parameters()),
            "parameters": sum(1 for _ in pm.parameters())}

    out["GEMMs in a backward (torch.profiler op counts)"] = gemm_counts()
    for n in (0, 1, 2):
        m, _ = qlora_model(use_gradient_checkpointing=False)
        pm = lora(m)
        if n:
            pm.gradient_checkpointing_enable(every_n_layers=n)
        out[f"bitsandbytes ops in one micro-step, QLoRA nf4 all-linear, every_n {n or 'off'}"] = bnb_op_counts(pm)

    m, _ = qlora_model(use_gradient_checkpointing=False)
    q = m.model.layers[0].self_attn.q_proj
    shape = list(q.weight.shape)
    m.eval()
    try:
        with torch.no_grad():
            m(input_ids=torch.randint(3, 200, (1, 8)))
        err = None
    except Exception as e:  # noqa: BLE001 - the failure is the fact
        err = f"{type(e).__name__}: {e}"
    out["Linear4bit in eval mode without grad, on this CPU"] = {
        "avx512_bf16": bool(q.support_avx512bf16_for_cpu), "q_proj weight shape before": shape,
        "q_proj weight shape after": list(q.weight.shape),
        "q_proj packing_format_for_cpu": bool(getattr(q.weight.quant_state, "packing_format_for_cpu", False)),
        "forward": err or "ran"}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    try:
        res = facts()
    finally:
        import shutil

        if probe_peft._CKPT_ROOT:
            shutil.rmtree(probe_peft._CKPT_ROOT, ignore_errors=True)
    text = json.dumps(res, indent=1, default=str)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
