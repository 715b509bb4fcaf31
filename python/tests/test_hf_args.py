"""gckpt.hf_args: TrainingArguments / SFTConfig / LoraConfig / BitsAndBytesConfig / DeepSpeed /
FSDP objects, written as their libraries' docs write them, mapped to gckpt.plan's options.

The mapping tests need no C extension: the HF ones run where transformers, peft (and trl)
import (the probe venv, tools/hf_probe/.venv), the duck-typed ones anywhere. The end-to-end
tests (plan_for) are skipped only when gckpt._native cannot be imported.
Run: PYTHONPATH=build/python tools/hf_probe/.venv/bin/python -m unittest discover -s python/tests -p 'test_hf_args.py'
"""
import importlib.util
import json
import os
import sys
import types
import unittest
import warnings
from unittest import mock

try:   # PYTHONPATH=build/python (the package in place, with its extension) or an installed copy
    import gckpt  # noqa: F401
except ImportError:   # else the sources: the mapping needs no extension
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

from gckpt.hf_args import PlanError, options_from_hf  # noqa: E402


def _have(mod):
    try:
        return importlib.util.find_spec(mod) is not None
    except (ImportError, ValueError):
        return False


HAVE_HF = _have("transformers") and _have("peft") and _have("torch")
HAVE_TRL = HAVE_HF and _have("trl")
# TrainingArguments(deepspeed=...) checks that deepspeed is installed (transformers'
# dep_version_check); tools/hf_probe/setup-deepspeed.sh adds it to the probe venv
HAVE_DS = HAVE_HF and _have("deepspeed")
NO_DS = "deepspeed not importable (bash tools/hf_probe/setup-deepspeed.sh)"


def _native():
    try:
        import gckpt._native  # noqa: F401
        return True
    except ImportError:
        return False


HAVE_NATIVE = _native()

LLAMA = {  # a small llama config.json as a dict (the same keys as a Hub config)
    "model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1024, "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "dtype": "bfloat16",
}


ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir))


def quiet_block():
    c = warnings.catch_warnings()
    c.__enter__()
    warnings.simplefilter("ignore")

    class _Exit:
        def __enter__(self):
            return self

        def __exit__(self, *a):
            c.__exit__(*a)
    return _Exit()


def codes(m):
    return [w["code"] for w in m["warnings"]]


def messages(m):
    return "\n".join(w["message"] for w in m["warnings"])


def quiet():
    """TrainingArguments warns about the deprecated gradient_checkpointing names: not under test."""
    c = warnings.catch_warnings()
    c.__enter__()
    warnings.simplefilter("ignore")
    return c


@unittest.skipUnless(HAVE_HF, "transformers / peft / torch not importable (tools/hf_probe/.venv has them)")
class HFDocExamples(unittest.TestCase):
    """Each case is a docs example, as written there (output_dir and use_cpu=True added: on a
    machine without a GPU TrainingArguments refuses bf16=True otherwise, 'Your setup doesn't
    support bf16/gpu. You need to assign use_cpu...')."""

    def setUp(self):
        self._w = quiet()
        self._env = mock.patch.dict(os.environ, {}, clear=False)
        self._env.start()
        for k in ("WORLD_SIZE", "LOCAL_WORLD_SIZE"):
            os.environ.pop(k, None)

    def tearDown(self):
        self._env.stop()
        self._w.__exit__(None, None, None)

    def ta(self, **kw):
        from transformers import TrainingArguments
        kw.setdefault("output_dir", "/tmp/gckpt-test-hf-args")
        kw.setdefault("use_cpu", True)
        return TrainingArguments(**kw)

    def llama_model(self, dtype, attn="sdpa", quant=None):
        """A tiny llama on the meta device, loaded as from_pretrained would (dtype, attention)."""
        import torch
        from transformers import AutoModelForCausalLM, LlamaConfig
        cfg = LlamaConfig(**{k: v for k, v in LLAMA.items() if k not in ("model_type", "dtype")})
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation=attn)
        if quant is not None:   # from_pretrained(quantization_config=...) records it on the config
            model.config.quantization_config = quant
        return model

    # 1. transformers docs/source/en/perf_train_gpu_one.md, "Gradient Checkpointing":
    #    TrainingArguments(per_device_train_batch_size=1, gradient_accumulation_steps=4,
    #                      gradient_checkpointing=True, **default_args)
    def test_perf_gpu_one_gradient_checkpointing(self):
        args = self.ta(per_device_train_batch_size=1, gradient_accumulation_steps=4, gradient_checkpointing=True)
        m = options_from_hf(LLAMA, args)
        self.assertEqual(m["options"], {"precision": "fp32", "optimizer": "adamw_torch_fused"})
        self.assertEqual(m["selected"], {"every_n_layers": 1, "offload": False, "micro_batch": 1, "grad_accum": 4})
        self.assertIs(m["model"]["model_type"], "llama")

    # 2. the same page, "FP16": TrainingArguments(per_device_train_batch_size=4, fp16=True, **default_args)
    #    and "BF16": TrainingArguments(bf16=True, **default_args) (per_device_train_batch_size default 8)
    def test_perf_gpu_one_mixed_precision(self):
        m = options_from_hf(LLAMA, self.ta(per_device_train_batch_size=4, fp16=True))
        self.assertEqual(m["options"]["precision"], "amp-fp16")
        self.assertEqual(m["selected"], {"every_n_layers": 0, "offload": False, "micro_batch": 4, "grad_accum": 1})
        m = options_from_hf(LLAMA, self.ta(bf16=True))
        self.assertEqual(m["options"]["precision"], "amp-bf16")
        self.assertEqual(m["selected"]["micro_batch"], 8)
        # the config says bfloat16: from_pretrained would load bf16 unless dtype=torch.float32
        self.assertIn("hf_assumed", codes(m))
        self.assertIn("dtype=torch.float32", messages(m))

    # 3. the same page, "Adafactor": TrainingArguments(per_device_train_batch_size=4, optim="adafactor")
    def test_perf_gpu_one_adafactor_refused(self):
        with self.assertRaises(PlanError) as e:
            options_from_hf(LLAMA, self.ta(per_device_train_batch_size=4, optim="adafactor"))
        self.assertIn("TrainingArguments.optim='adafactor'", str(e.exception))
        self.assertIsInstance(e.exception, ValueError)

    # 4. the same page, "8-bit Adam" (optim="adamw_bnb_8bit") with the docs' torch.compile section
    #    (torch_compile=True): the optimizer maps, torch.compile is named in a warning
    def test_perf_gpu_one_8bit_adam_and_compile(self):
        m = options_from_hf(LLAMA, self.ta(per_device_train_batch_size=4, optim="adamw_bnb_8bit", bf16=True,
                                           torch_compile=True))
        self.assertEqual(m["options"]["optimizer"], "adamw_bnb_8bit")
        self.assertIn("TrainingArguments.torch_compile=True", messages(m))
        self.assertEqual(messages(m).count("torch_compile"), 1)   # torch_compile_backend is not warned twice

    # 5. peft docs/source/developer_guides/quantization.md: Mistral-7B, BitsAndBytesConfig(load_in_4bit=True,
    #    bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.bfloat16),
    #    LoraConfig(r=16, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
    #    lora_dropout=0.05, bias="none", task_type="CAUSAL_LM"); with TrainingArguments(bf16=True,
    #    gradient_checkpointing=True, optim="paged_adamw_8bit") as QLoRA runs are written
    def test_peft_quantization_guide_qlora(self):
        import torch
        from peft import LoraConfig
        from transformers import BitsAndBytesConfig
        bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                 bnb_4bit_compute_dtype=torch.bfloat16)
        lora = LoraConfig(r=16, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                          lora_dropout=0.05, bias="none", task_type="CAUSAL_LM")
        model = self.llama_model(torch.bfloat16, quant=bnb)
        args = self.ta(bf16=True, per_device_train_batch_size=2, gradient_accumulation_steps=8,
                       gradient_checkpointing=True, optim="paged_adamw_8bit")
        m = options_from_hf(model, args, peft_config=lora)
        self.assertEqual(m["options"], {
            "method": "qlora", "lora_rank": 16, "lora_alpha": 8, "lora_dropout": 0.05,
            "lora_targets": ["k_proj", "o_proj", "q_proj", "v_proj"], "quant": "nf4", "double_quant": True,
            "compute_dtype": "bf16", "attention": "sdpa", "precision": "amp-bf16", "optimizer": "paged_adamw_8bit"})
        # (LoraConfig keeps target_modules as a set: sorted here)
        self.assertEqual(m["selected"], {"every_n_layers": 1, "offload": False, "micro_batch": 2, "grad_accum": 8})
        self.assertNotIn("quantization_config", m["model"])   # planned through method qlora
        # without the adapters a 4-bit model does not train
        with self.assertRaises(PlanError) as e:
            options_from_hf(model, args)
        self.assertIn("no peft_config", str(e.exception))

    # 6. the same guide's LoftQ example's LoraConfig with init_lora_weights="gaussian" (loftq needs scipy,
    #    not in the venv; either is initialisation only, no warning);
    #    BitsAndBytesConfig(load_in_8bit=True) from transformers' bitsandbytes guide; BitsAndBytesConfig's
    #    own defaults (fp4, no double quantization, fp32 compute) are read, not peft's docs' values
    def test_int8_and_bnb_defaults(self):
        import torch
        from peft import LoraConfig
        from transformers import BitsAndBytesConfig
        lora = LoraConfig(init_lora_weights="gaussian", r=16, lora_alpha=8,
                          target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], lora_dropout=0.05, bias="none",
                          task_type="CAUSAL_LM")
        m = options_from_hf(self.llama_model(torch.float32, quant=BitsAndBytesConfig(load_in_8bit=True)),
                            self.ta(), peft_config=lora)
        self.assertEqual((m["options"]["method"], m["options"]["quant"]), ("qlora", "int8"))
        self.assertNotIn("double_quant", m["options"])
        self.assertEqual(m["options"]["precision"], "fp32")
        self.assertEqual(codes(m), ["hf_assumed"])   # use_cpu only
        m = options_from_hf(self.llama_model(torch.float32, quant=BitsAndBytesConfig(load_in_4bit=True)),
                            self.ta(), peft_config=lora)
        self.assertEqual((m["options"]["quant"], m["options"]["double_quant"], m["options"]["compute_dtype"]),
                         ("fp4", False, "fp32"))

    # 7. peft README "Quickstart" (Qwen2.5-3B-Instruct): LoraConfig(task_type=TaskType.CAUSAL_LM,
    #    inference_mode=False, r=8, lora_alpha=32, lora_dropout=0.1): target_modules None -> peft's
    #    default for the model type (peft/utils/constants.py), on a model loaded in bf16 trained
    #    without amp = the planner's pure bf16
    def test_peft_readme_default_targets(self):
        import torch
        from peft import LoraConfig, TaskType
        lora = LoraConfig(task_type=TaskType.CAUSAL_LM, inference_mode=False, r=8, lora_alpha=32, lora_dropout=0.1)
        m = options_from_hf(self.llama_model(torch.bfloat16), self.ta(per_device_train_batch_size=1), peft_config=lora)
        self.assertEqual(m["options"]["lora_targets"], ["q_proj", "v_proj"])
        self.assertEqual(m["options"]["precision"], "bf16")
        self.assertEqual((m["options"]["method"], m["options"]["lora_rank"], m["options"]["lora_alpha"],
                          m["options"]["lora_dropout"]), ("lora", 8, 32, 0.1))
        self.assertIn("peft_config.target_modules=None", messages(m))
        # and trained with bf16=True (autocast over bf16 weights): planned as pure bf16, warned
        m = options_from_hf(self.llama_model(torch.bfloat16), self.ta(bf16=True), peft_config=lora)
        self.assertEqual(m["options"]["precision"], "bf16")
        self.assertIn("TrainingArguments.bf16=True on a model loaded in bfloat16", messages(m))

    # 8. the modelled checkpointing kwargs (TrainingArguments docstring, transformers 5.24:
    #    activation_checkpointing_kwargs every_n_layers / offload) and the common
    #    gradient_checkpointing_kwargs={"use_reentrant": False} (TRL docs/source/reducing_memory_usage.md)
    def test_checkpointing_kwargs(self):
        m = options_from_hf(LLAMA, self.ta(bf16=True, activation_checkpointing=True,
                                           activation_checkpointing_kwargs={"every_n_layers": 2, "offload": True}))
        self.assertEqual(m["selected"], {"every_n_layers": 2, "offload": True, "micro_batch": 8, "grad_accum": 1})
        m = options_from_hf(LLAMA, self.ta(gradient_checkpointing=True,
                                           gradient_checkpointing_kwargs={"use_reentrant": False}))
        self.assertEqual(m["selected"]["every_n_layers"], 1)
        self.assertNotIn("use_reentrant", messages(m))
        m = options_from_hf(LLAMA, self.ta(gradient_checkpointing=True,
                                           gradient_checkpointing_kwargs={"use_reentrant": True}))
        self.assertIn("use_reentrant=True", messages(m))
        # other keys without use_reentrant: torch 2.15 then defaults to reentrant (checkpoint.py)
        m = options_from_hf(LLAMA, self.ta(gradient_checkpointing=True,
                                           gradient_checkpointing_kwargs={"preserve_rng_state": False}))
        self.assertIn("torch 2.15's default", messages(m))
        # every_n without checkpointing: the Trainer ignores it
        m = options_from_hf(LLAMA, self.ta(gradient_checkpointing=False,
                                           gradient_checkpointing_kwargs={"every_n_layers": 2}))
        self.assertEqual(m["selected"]["every_n_layers"], 0)
        self.assertIn("hf_ignored", codes(m))

    # 9. transformers docs/source/en/deepspeed.md, "ZeRO-3" config (as written there), on 8 GPUs
    #    of one node (torchrun sets WORLD_SIZE / LOCAL_WORLD_SIZE)
    @unittest.skipUnless(HAVE_DS, NO_DS)
    def test_deepspeed_zero3_docs_config(self):
        ds = {"zero_optimization": {
            "stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": True},
            "offload_param": {"device": "cpu", "pin_memory": True}, "overlap_comm": True,
            "contiguous_gradients": True, "sub_group_size": 1e9, "reduce_bucket_size": "auto",
            "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto",
            "stage3_max_live_parameters": 1e9, "stage3_max_reuse_distance": 1e9,
            "stage3_gather_16bit_weights_on_model_save": True}}
        args = self.ta(bf16=True, deepspeed=ds, gradient_checkpointing=True)
        # set after TrainingArguments, which would start torch.distributed from them
        os.environ.update(WORLD_SIZE="8", LOCAL_WORLD_SIZE="8")
        m = options_from_hf(LLAMA, args)
        self.assertEqual(m["options"]["parallel"], "zero3")
        self.assertEqual((m["options"]["gpus"], m["options"]["nodes"]), (8, 1))
        self.assertEqual(m["options"]["deepspeed"], ds)
        # an explicit micro-batch that disagrees with the arguments: the Trainer refuses it
        ds2 = dict(ds, train_micro_batch_size_per_gpu=4)
        os.environ.pop("WORLD_SIZE")
        args = self.ta(bf16=True, deepspeed=ds2, per_device_train_batch_size=2)
        with self.assertRaises(PlanError) as e:
            options_from_hf(LLAMA, args, world_size=8)
        self.assertIn("train_micro_batch_size_per_gpu=4", str(e.exception))

    # 10. DeepSpeed ZeRO-2 as a file with an optimizer section (transformers deepspeed.md passes a path:
    #     TrainingArguments(..., deepspeed="path/to/deepspeed_config.json")); two nodes of 4
    @unittest.skipUnless(HAVE_DS, NO_DS)
    def test_deepspeed_path_with_optimizer_two_nodes(self):
        import json
        import tempfile
        cfg = {"bf16": {"enabled": "auto"}, "optimizer": {"type": "AdamW", "params": {"lr": "auto"}},
               "zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": "auto",
               "gradient_accumulation_steps": "auto"}
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(cfg, f)
        self.addCleanup(os.unlink, f.name)
        args = self.ta(bf16=True, deepspeed=f.name, optim="adamw_torch")
        os.environ.update(WORLD_SIZE="8", LOCAL_WORLD_SIZE="4")
        m = options_from_hf(LLAMA, args)
        self.assertEqual(m["options"]["deepspeed"], f.name)
        self.assertEqual((m["options"]["parallel"], m["options"]["gpus"], m["options"]["nodes"]), ("zero2", 4, 2))
        self.assertNotIn("optimizer", m["options"])
        self.assertIn("TrainingArguments.optim='adamw_torch'", messages(m))

    # 11. FSDP: TrainingArguments docstring (5.24) fsdp=True, fsdp_config {"version": 2, "cpu_offload": True};
    #     the legacy string most scripts still pass, fsdp="full_shard auto_wrap" with
    #     fsdp_config={"transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"]} (transformers' older
    #     trainer docs); "shard_grad_op" refused; world size from the argument
    def test_fsdp(self):
        m = options_from_hf(LLAMA, self.ta(bf16=True, fsdp=True, fsdp_config={"version": 2, "cpu_offload": True}),
                            world_size=4)
        self.assertEqual((m["options"]["parallel"], m["options"]["fsdp_offload"], m["options"]["gpus"]),
                         ("fsdp", True, 4))
        m = options_from_hf(LLAMA, self.ta(bf16=True, fsdp="full_shard auto_wrap",
                                           fsdp_config={"transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"]}),
                            world_size=2)
        self.assertEqual((m["options"]["parallel"], m["options"]["fsdp_offload"]), ("fsdp", False))
        self.assertNotIn("hf_not_modelled", codes(m))
        with self.assertRaises(PlanError) as e:
            options_from_hf(LLAMA, self.ta(fsdp="shard_grad_op"), world_size=2)
        self.assertIn("reshard_after_forward=False", str(e.exception))
        # one process: the planner plans FSDP / ZeRO on several GPUs
        with self.assertRaises(PlanError) as e:
            options_from_hf(LLAMA, self.ta(fsdp=True))
        self.assertIn("TrainingArguments.fsdp with one process", str(e.exception))
        # accelerate's name for the offload is not what the Trainer reads
        m = options_from_hf(LLAMA, self.ta(fsdp=True, fsdp_config={"offload_params": True}), world_size=2)
        self.assertFalse(m["options"]["fsdp_offload"])
        self.assertIn("fsdp_config.offload_params", messages(m))

    # 12. several ranks without DeepSpeed or FSDP: DDP (torchrun --nproc_per_node 2)
    def test_ddp_default(self):
        args = self.ta(bf16=True)
        os.environ.update(WORLD_SIZE="2", LOCAL_WORLD_SIZE="2")
        m = options_from_hf(LLAMA, args)
        self.assertEqual((m["options"]["parallel"], m["options"]["gpus"], m["options"]["nodes"]), ("ddp", 2, 1))
        os.environ.pop("LOCAL_WORLD_SIZE")
        m = options_from_hf(LLAMA, args)
        self.assertIn("WORLD_SIZE=2 without LOCAL_WORLD_SIZE", messages(m))

    # 13. fields that change memory and are not planned: each named in a warning
    def test_unmodelled_fields_named(self):
        args = self.ta(bf16=True, use_liger_kernel=True, label_smoothing_factor=0.1, neftune_noise_alpha=5,
                       eval_strategy="steps", eval_steps=50, per_device_eval_batch_size=4, auto_find_batch_size=True,
                       use_cache=True)
        m = options_from_hf(LLAMA, args)
        text = messages(m)
        for field in ("label_smoothing_factor=0.1", "neftune_noise_alpha=5",
                      "eval_strategy='steps'", "auto_find_batch_size=True", "use_cache=True"):
            self.assertIn("TrainingArguments." + field, text)
        # Liger's kernels are planned (--loss liger; the plan's liger_loss_unverified names what is not)
        self.assertNotIn("use_liger_kernel", text)
        self.assertEqual(m["options"]["loss"], "liger")
        # use_liger_kernel=False (the default) is not warned
        m = options_from_hf(LLAMA, self.ta(bf16=True, use_liger_kernel=False))
        self.assertNotIn("liger", messages(m))
        # neither tf32 nor the logging / saving fields are memory
        m = options_from_hf(LLAMA, self.ta(bf16=True, tf32=False, logging_steps=10, save_steps=100,
                                           learning_rate=2e-4, weight_decay=0.01, report_to="none"))
        self.assertEqual(codes(m), ["hf_assumed", "hf_assumed"])   # use_cpu, the config's bf16 dtype

    # use_liger_kernel=True: --loss liger, liger_kernel_config's parts passed as --liger-kernels (the
    # kernels on; absent when all are) as apply_liger_kernel_to_<type> takes them
    def test_liger_kernel(self):
        m = options_from_hf(LLAMA, self.ta(bf16=True, use_liger_kernel=True))
        self.assertEqual(m["options"]["loss"], "liger")
        self.assertNotIn("liger_kernels", m["options"])
        self.assertNotIn("liger", messages(m).lower())
        m = options_from_hf(LLAMA, self.ta(bf16=True, use_liger_kernel=True,
                                           liger_kernel_config={"rms_norm": False, "rope": False}))
        self.assertEqual((m["options"]["loss"], m["options"]["liger_kernels"]),
                         ("liger", "swiglu,fused_linear_cross_entropy"))
        m = options_from_hf(LLAMA, self.ta(bf16=True, use_liger_kernel=True,
                                           liger_kernel_config={"rms_norm": False, "swiglu": False, "rope": False}))
        self.assertEqual(m["options"]["liger_kernels"], "fused_linear_cross_entropy")
        self.assertNotIn("swiglu", messages(m))
        # the fused loss off: transformers' loss with Liger's layer kernels
        m = options_from_hf(LLAMA, self.ta(bf16=True, use_liger_kernel=True,
                                           liger_kernel_config={"fused_linear_cross_entropy": False}))
        self.assertEqual((m["options"]["loss"], m["options"]["liger_kernels"]), ("liger", "rope,rms_norm,swiglu"))
        m = options_from_hf(LLAMA, self.ta(bf16=True, use_liger_kernel=True, liger_kernel_config={
            "fused_linear_cross_entropy": False, "cross_entropy": True}))
        self.assertIn("cross_entropy=True", messages(m))
        m = options_from_hf(LLAMA, self.ta(bf16=True, use_liger_kernel=True, liger_kernel_config={
            "fused_linear_cross_entropy": False, "rms_norm": False, "swiglu": False, "rope": False}))
        self.assertNotIn("loss", m["options"])
        with self.assertRaises(PlanError):
            options_from_hf(LLAMA, self.ta(bf16=True, use_liger_kernel=True, liger_kernel_config={"layer_norm": True}))
        # geglu: a keyword of apply_liger_kernel_to_gemma / gemma2 / gemma3_text (liger-kernel 0.8.5)
        m = options_from_hf(LLAMA, self.ta(bf16=True, use_liger_kernel=True, liger_kernel_config={"geglu": False}))
        self.assertEqual(m["options"]["loss"], "liger")
        self.assertNotIn("geglu", messages(m))
        m = options_from_hf(LLAMA, self.ta(bf16=True, use_liger_kernel=False))
        self.assertNotIn("loss", m["options"])

    # TrainingArguments.to_dict() (a run's saved training_args.json read back) maps as the object does
    def test_to_dict_round_trip(self):
        args = self.ta(bf16=True, per_device_train_batch_size=2, gradient_accumulation_steps=8, optim="adamw_torch",
                       gradient_checkpointing=True, gradient_checkpointing_kwargs={"every_n_layers": 4},
                       neftune_noise_alpha=5)
        a, b = options_from_hf(LLAMA, args), options_from_hf(LLAMA, args.to_dict())
        self.assertEqual((a["options"], a["selected"], a["warnings"]), (b["options"], b["selected"], b["warnings"]))

    # 14. peft fields that change the adapters: DoRA refused, bias and rank_pattern warned,
    #     a regex target refused, rslora silent (scaling is one float: peft/tuners/lora/layer.py)
    def test_peft_fields(self):
        from peft import LoraConfig
        with self.assertRaises(PlanError) as e:
            options_from_hf(LLAMA, self.ta(), peft_config=LoraConfig(r=16, use_dora=True, target_modules="all-linear"))
        self.assertIn("use_dora", str(e.exception))
        with self.assertRaises(PlanError) as e:
            options_from_hf(LLAMA, self.ta(), peft_config=LoraConfig(target_modules=r".*\.(q|v)_proj"))
        self.assertIn("regular expression", str(e.exception))
        m = options_from_hf(LLAMA, self.ta(), peft_config=LoraConfig(
            r=16, target_modules="all-linear", use_rslora=True, bias="all", rank_pattern={"q_proj": 8},
            modules_to_save=["lm_head"]))
        self.assertEqual(m["options"]["modules_to_save"], ["lm_head"])
        text = messages(m)
        self.assertIn("peft_config.bias='all'", text)
        self.assertIn("peft_config.rank_pattern", text)
        self.assertNotIn("rslora", text)
        from peft import IA3Config
        with self.assertRaises(PlanError) as e:
            options_from_hf(LLAMA, self.ta(), peft_config=IA3Config(target_modules=["k_proj"]))
        self.assertIn("peft_type=IA3", str(e.exception))

    # 15. an SGD run: HF's optim="sgd" has momentum 0 unless optim_args says otherwise
    #     (trainer_optimizer._get_sgd); gckpt plans momentum 0.9
    def test_sgd(self):
        with self.assertRaises(PlanError):
            options_from_hf(LLAMA, self.ta(optim="sgd"))
        m = options_from_hf(LLAMA, self.ta(optim="sgd", optim_args="momentum=0.9"))
        self.assertEqual(m["options"]["optimizer"], "sgd")

    # 16. the attention the model was loaded with, and a model whose own checkpointing is on
    #     (prepare_model_for_kbit_training's default) while the arguments say nothing
    def test_model_attention_and_own_checkpointing(self):
        import torch
        m = options_from_hf(self.llama_model(torch.float32, attn="eager"), self.ta(bf16=True))
        self.assertEqual((m["options"]["attention"], m["options"]["precision"]), ("eager", "amp-bf16"))
        model = self.llama_model(torch.float32)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
        m = options_from_hf(model, self.ta(bf16=True))
        self.assertEqual(m["selected"]["every_n_layers"], 1)
        self.assertIn("checkpointing enabled on the model", messages(m))


@unittest.skipUnless(HAVE_TRL, "trl not importable (pip install trl==1.16.0 into tools/hf_probe/.venv)")
class TRLDocExamples(unittest.TestCase):
    def setUp(self):
        self._w = quiet()

    def tearDown(self):
        self._w.__exit__(None, None, None)

    # 17. TRL docs/source/lora_without_regret.md, "Supervised Fine-Tuning (SFT)":
    #     peft_config = LoraConfig(r=256, lora_alpha=16, target_modules="all-linear"),
    #     SFTConfig(learning_rate=2e-4, per_device_train_batch_size=1, gradient_accumulation_steps=4,
    #     num_train_epochs=1, report_to=["trackio"]) (report_to "none" here: trackio is not installed)
    def test_lora_without_regret_sft(self):
        from peft import LoraConfig
        from trl import SFTConfig
        args = SFTConfig(output_dir="/tmp/gckpt-test-hf-args", use_cpu=True, learning_rate=2e-4,
                         per_device_train_batch_size=1, gradient_accumulation_steps=4, num_train_epochs=1,
                         report_to="none")
        m = options_from_hf(dict(LLAMA, model_type="qwen2"), args,
                            peft_config=LoraConfig(r=256, lora_alpha=16, target_modules="all-linear"))
        # SFTConfig's own defaults: gradient_checkpointing=True, bf16=True
        self.assertEqual(m["selected"], {"every_n_layers": 1, "offload": False, "micro_batch": 1, "grad_accum": 4})
        self.assertEqual((m["options"]["method"], m["options"]["lora_rank"], m["options"]["lora_alpha"],
                          m["options"]["lora_targets"], m["options"]["precision"]),
                         ("lora", 256, 16, "all-linear", "amp-bf16"))
        self.assertIn("fused LM head", messages(m))
        # the tile the head allocates (kernels/chunked_logprob.py: TOKEN_CHUNK_SIZE 4096, chunk_size 32768),
        # measured by test_callback's SFTTrainer run; no direction claimed
        self.assertIn("min(tokens, 4096) x 32768", messages(m))
        self.assertNotIn("overestimate", messages(m))

    # 18. TRL SFTConfig with packing and TRL's own activation offloading (docs/source/reducing_memory_usage.md)
    def test_sft_packing_offloading(self):
        from trl import SFTConfig
        args = SFTConfig(output_dir="/tmp/gckpt-test-hf-args", use_cpu=True, packing=True, activation_offloading=True,
                         max_length=1024, report_to="none")
        m = options_from_hf(LLAMA, args)
        text = messages(m)
        self.assertIn("TrainingArguments.packing=True", text)
        self.assertIn("TrainingArguments.activation_offloading=True", text)

    # another TRL trainer's config (DPO here): its trainer is not a causal-LM Trainer step
    def test_other_trl_config(self):
        from trl import DPOConfig
        args = DPOConfig(output_dir="/tmp/gckpt-test-hf-args", use_cpu=True, report_to="none")
        m = options_from_hf(LLAMA, args)
        self.assertIn("TRL DPOConfig", messages(m))
        self.assertNotIn("fused LM head", messages(m))


class DuckTyped(unittest.TestCase):
    """Plain namespaces with the TrainingArguments attribute names: no library needed."""

    def args(self, **kw):
        base = dict(per_device_train_batch_size=2, gradient_accumulation_steps=3, bf16=True, fp16=False,
                    optim="adamw_torch_fused", optim_args=None, gradient_checkpointing=True,
                    gradient_checkpointing_kwargs='{"every_n_layers": 3, "offload": true}', deepspeed=None,
                    fsdp=None, fsdp_config=None)
        base.update(kw)
        return types.SimpleNamespace(**base)

    ENV = {"WORLD_SIZE": "1", "GCKPT_DATA_DIR": ROOT}   # the shipped models of this checkout

    def test_namespace(self):
        with mock.patch.dict(os.environ, self.ENV):
            m = options_from_hf("llama-3.2-1b", self.args())
        self.assertEqual(m["model"], "llama-3.2-1b")   # a shipped name stays a name
        self.assertEqual(m["options"], {"precision": "amp-bf16", "optimizer": "adamw_torch_fused"})
        self.assertEqual(m["selected"], {"every_n_layers": 3, "offload": True, "micro_batch": 2, "grad_accum": 3})
        # its config is read: the checkpoint is bf16, the plan's weights fp32
        self.assertEqual(codes(m), ["hf_assumed"])
        self.assertIn("checkpoint's dtype (bfloat16)", messages(m))

    @unittest.skipUnless(HAVE_HF, "peft not importable")
    def test_shipped_name_default_targets(self):
        lora = types.SimpleNamespace(peft_type="LORA", r=8, lora_alpha=16, lora_dropout=0.0, target_modules=None,
                                     modules_to_save=None, bias="none", task_type="CAUSAL_LM")
        with mock.patch.dict(os.environ, self.ENV):
            m = options_from_hf("gpt2", self.args(), peft_config=lora)
        self.assertEqual(m["options"]["lora_targets"], ["c_attn"])   # peft's default for gpt2

    def test_unknown_field_named(self):
        with mock.patch.dict(os.environ, self.ENV):
            m = options_from_hf(os.path.join(ROOT, "models", "qwen2.5-0.5b.json"),
                                self.args(some_new_memory_knob=True))
        self.assertEqual(codes(m), ["hf_assumed", "hf_not_modelled"])
        self.assertIn("TrainingArguments.some_new_memory_knob=True", messages(m))

    def test_config_file_with_bnb(self):
        import json
        import tempfile
        cfg = dict(LLAMA, quantization_config={"quant_method": "bitsandbytes", "load_in_4bit": True,
                                               "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True,
                                               "bnb_4bit_compute_dtype": "bfloat16"})
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump(cfg, f)
            lora = types.SimpleNamespace(peft_type="LORA", r=8, lora_alpha=16, lora_dropout=0.0,
                                         target_modules=["q_proj"], modules_to_save=None, bias="none",
                                         task_type="CAUSAL_LM", use_dora=False, inference_mode=False)
            with mock.patch.dict(os.environ, {"WORLD_SIZE": "1"}):
                m = options_from_hf(d, self.args(), peft_config=lora)
        self.assertEqual((m["options"]["method"], m["options"]["quant"], m["options"]["double_quant"],
                          m["options"]["compute_dtype"]), ("qlora", "nf4", True, "bf16"))
        self.assertNotIn("quantization_config", m["model"])

    def test_bad_values(self):
        with mock.patch.dict(os.environ, {"WORLD_SIZE": "1"}):
            with self.assertRaises(PlanError) as e:
                options_from_hf("llama-3.2-1b", self.args(gradient_checkpointing_kwargs={"every_n_layers": 0}))
            self.assertIn("every_n_layers=0", str(e.exception))
            with self.assertRaises(PlanError):
                options_from_hf("llama-3.2-1b", self.args(fp16=True))


@unittest.skipUnless(HAVE_NATIVE, "gckpt._native (the C planner extension) not importable")
class PlanFor(unittest.TestCase):
    """End to end: the selected entry is the configured setting of a real plan."""

    def test_selected_is_configured(self):
        from gckpt.hf_args import plan_for
        args = types.SimpleNamespace(per_device_train_batch_size=2, gradient_accumulation_steps=4, bf16=True,
                                     fp16=False, optim="adamw_torch_fused", gradient_checkpointing=True,
                                     gradient_checkpointing_kwargs={"every_n_layers": 2, "offload": True},
                                     neftune_noise_alpha=5)
        with mock.patch.dict(os.environ, {"WORLD_SIZE": "1"}):
            p = plan_for("llama-3.2-1b", args, seq=1024, gpu="h100-sxm-80gb")
        s = p.selected
        self.assertIsNotNone(s)
        self.assertEqual((s["every_n_layers"], s["offload"], s["micro_batch"], s["grad_accum"]), (2, True, 2, 4))
        self.assertTrue(any("neftune_noise_alpha" in w["message"] for w in p.warnings))
        # the sweep: every every_n, both offloads, micro-batches at the same global batch of 8
        self.assertEqual({e["micro_batch"] * e["grad_accum"] for e in p.entries}, {8})
        self.assertTrue({1, 2, 4} <= {e["micro_batch"] for e in p.entries})
        self.assertIn(0, {e["every_n_layers"] for e in p.entries})

    # use_liger_kernel: the plan's loss is Liger's; a model_type liger has no kernels for is
    # planned with transformers' loss, as the Trainer leaves it unpatched
    def test_liger(self):
        from gckpt.hf_args import plan_for
        args = types.SimpleNamespace(per_device_train_batch_size=1, gradient_accumulation_steps=1, bf16=True,
                                     fp16=False, optim="adamw_torch_fused", gradient_checkpointing=True,
                                     use_liger_kernel=True)
        with mock.patch.dict(os.environ, {"WORLD_SIZE": "1"}):
            p = plan_for("llama-3.2-1b", args, seq=1024, gpu="h100-sxm-80gb")
            self.assertTrue(any(w["code"] == "liger_loss_unverified" for w in p.warnings))
            g = plan_for("gpt2", args, seq=1024, gpu="h100-sxm-80gb")
        self.assertFalse(any(w["code"] == "liger_loss_unverified" for w in g.warnings))
        self.assertTrue(any("apply_liger_kernel_to_" in w["message"] for w in g.warnings))
        # granite: patched, but apply_liger_kernel_to_granite's fused_linear_cross_entropy is off
        # (Liger's cross_entropy on the full logits): transformers' loss is planned
        granite = {"model_type": "granite", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                   "intermediate_size": 90, "vocab_size": 50, "logits_scaling": 8.0}
        with mock.patch.dict(os.environ, {"WORLD_SIZE": "1"}):
            r = plan_for(granite, args, seq=256, gpu="h100-sxm-80gb")
        self.assertFalse(any(w["code"] == "liger_loss_unverified" for w in r.warnings))
        self.assertTrue(any("NotImplementedError" in w["message"] for w in r.warnings))

    def shipped(self, name):
        import gckpt
        with open(os.path.join(gckpt.data_dir(), "models", name + ".json")) as f:
            return json.load(f)

    def cli_entry(self, argv, every_n, offload, mb, ga):
        """The entry of gckpt-plan's own JSON plan for the same request (an independent path)."""
        import subprocess
        import tempfile
        cli = os.environ.get("GCKPT_PLAN", os.path.join(ROOT, "build", "gckpt-plan"))
        if not os.path.exists(cli):
            self.skipTest("gckpt-plan not built (GCKPT_PLAN)")
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "plan.json")
            subprocess.run([cli] + argv + ["-q", "-o", out], check=True)
            with open(out) as f:
                entries = json.load(f)["entries"]
        return next(e for e in entries if (e["every_n_layers"], e["offload"], e["micro_batch"], e["grad_accum"])
                    == (every_n, offload, mb, ga))

    # docs/python-hf.md's QLoRA example: the selected entry is the one gckpt-plan gives for the
    # command the doc prints
    @unittest.skipUnless(HAVE_TRL, "trl not importable")
    def test_docs_qlora_example_equals_cli(self):
        import torch
        from peft import LoraConfig
        from transformers import BitsAndBytesConfig
        from trl import SFTConfig
        from gckpt.hf_args import plan_for
        config = self.shipped("llama-3.1-8b")
        config["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.bfloat16).to_dict()
        lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules="all-linear", bias="none",
                          task_type="CAUSAL_LM")
        with quiet_block():
            args = SFTConfig(output_dir="/tmp/gckpt-test-hf-args", per_device_train_batch_size=1,
                             gradient_accumulation_steps=8, optim="paged_adamw_8bit", max_length=4096, use_cpu=True,
                             report_to="none")
        with mock.patch.dict(os.environ, {"WORLD_SIZE": "1"}):
            p = plan_for(config, args, seq=4096, peft_config=lora, gpu="rtx-4090")
        cli = self.cli_entry(["--model", os.path.join(ROOT, "models", "llama-3.1-8b.json"), "--gpu", "rtx-4090",
                              "--seq", "4096", "--method", "qlora", "--lora-rank", "16", "--lora-alpha", "32",
                              "--lora-dropout", "0.05", "--lora-targets", "all-linear", "--quant", "nf4",
                              "--double-quant", "on", "--compute-dtype", "bf16", "--precision", "amp-bf16",
                              "--optimizer", "paged_adamw_8bit", "--every-n", "all", "--offload", "both",
                              "--micro-batch", "1,2", "--global-batch", "8"], 1, False, 1, 8)
        self.assertEqual(p.selected["memory"], cli["memory"])
        self.assertEqual(p.selected["time"], cli["time"])
        self.assertEqual(p.inputs["method"], "qlora")
        self.assertTrue(any("fused LM head" in w["message"] for w in p.warnings))

    # peft's quantization guide (Mistral-7B, test 5's objects) end to end, on an RTX 4090
    @unittest.skipUnless(HAVE_HF, "transformers / peft / torch not importable")
    def test_peft_guide_qlora_end_to_end(self):
        import torch
        from peft import LoraConfig
        from transformers import BitsAndBytesConfig, TrainingArguments
        from gckpt.hf_args import plan_for
        config = self.shipped("mistral-7b-v0.3")
        config["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.bfloat16).to_dict()
        lora = LoraConfig(r=16, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                          lora_dropout=0.05, bias="none", task_type="CAUSAL_LM")
        with quiet_block():
            args = TrainingArguments(output_dir="/tmp/gckpt-test-hf-args", use_cpu=True, bf16=True,
                                     per_device_train_batch_size=2, gradient_accumulation_steps=8,
                                     gradient_checkpointing=True, optim="paged_adamw_8bit")
        with mock.patch.dict(os.environ, {"WORLD_SIZE": "1"}):
            p = plan_for(config, args, seq=2048, peft_config=lora, gpu="rtx-4090")
        s = p.selected
        self.assertEqual((s["every_n_layers"], s["offload"], s["micro_batch"], s["grad_accum"]), (1, False, 2, 8))
        self.assertEqual(p.inputs["method"], "qlora")
        self.assertEqual(p.inputs["lora"], {"rank": 16, "alpha": 8, "dropout": 0.05,
                                            "targets": "q_proj,k_proj,v_proj,o_proj", "modules_to_save": ""})
        self.assertEqual(p.inputs["quant"], {"type": "nf4", "double_quant": True, "compute_dtype": "bf16",
                                             "storage": "uint8"})

    # several GPUs: the ZeRO-3 and FSDP runs of tests 9 and 11, planned per rank
    def test_parallel_end_to_end(self):
        from gckpt.hf_args import plan_for
        args = types.SimpleNamespace(per_device_train_batch_size=1, gradient_accumulation_steps=2, bf16=True,
                                     gradient_checkpointing=True,
                                     deepspeed={"bf16": {"enabled": "auto"}, "zero_optimization": {
                                         "stage": 3, "overlap_comm": True, "reduce_bucket_size": "auto",
                                         "stage3_prefetch_bucket_size": "auto",
                                         "stage3_param_persistence_threshold": "auto"}})
        p = plan_for("llama-3.1-8b", args, seq=4096, world_size=8)
        self.assertEqual((p.selected["every_n_layers"], p.selected["micro_batch"], p.selected["grad_accum"]), (1, 1, 2))
        args = types.SimpleNamespace(per_device_train_batch_size=1, gradient_accumulation_steps=1, bf16=True,
                                     gradient_checkpointing=True, fsdp=True, fsdp_config={"cpu_offload": True})
        p = plan_for("llama-3.1-8b", args, seq=4096, world_size=8)
        self.assertIsNotNone(p.selected)
        # the docs' ZeRO-3 config offloads the optimizer without an optimizer section: the planner refuses it
        args = types.SimpleNamespace(per_device_train_batch_size=1, gradient_accumulation_steps=1, bf16=True,
                                     deepspeed={"zero_optimization": {"stage": 3, "offload_optimizer": {
                                         "device": "cpu", "pin_memory": True}}})
        with self.assertRaises(PlanError) as e:
            plan_for("llama-3.1-8b", args, seq=4096, world_size=8)
        self.assertIn("'optimizer'", str(e.exception))

    # both directions: the TrainingArguments gckpt prints for an entry (Plan.training_arguments,
    # the planner's writer) read back by plan_for select that entry, with the same figures
    def test_training_arguments_round_trip(self):
        import gckpt
        from gckpt.hf_args import plan_for
        qlora_cfg = dict(self.shipped("llama-3.2-1b"), quantization_config={
            "quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
            "bnb_4bit_use_double_quant": True, "bnb_4bit_compute_dtype": "bfloat16"})
        lora = types.SimpleNamespace(peft_type="LORA", r=16, lora_alpha=32, lora_dropout=0.05,
                                     target_modules="all-linear", modules_to_save=None, bias="none",
                                     task_type="CAUSAL_LM")
        cases = [  # (gckpt.plan's request, what plan_for receives)
            ({}, {}),
            ({"precision": "fp32", "optimizer": "adamw-8bit"}, {}),
            ({"method": "qlora"}, {"model": qlora_cfg, "peft_config": lora}),
            ({"gpus": 8, "parallel": "fsdp", "fsdp_offload": True}, {"world_size": 8}),
            ({"gpus": 8, "parallel": "zero3"}, {"world_size": 8}),
        ]
        for request, given in cases:
            p = gckpt.plan("llama-3.2-1b", seq=1024, every_n=[0, 2], micro_batch=[1, 2], **request)
            for e in (p.entries[0], p.entries[-1]):
                with self.subTest(request=request, entry=e["index"]):
                    args = p.training_arguments(e)
                    with mock.patch.dict(os.environ, {"WORLD_SIZE": "1"}):
                        q = plan_for(given.get("model", "llama-3.2-1b"), args, seq=1024,
                                     peft_config=given.get("peft_config"), world_size=given.get("world_size"))
                    self.assertEqual({k: q.selected[k] for k in ("every_n_layers", "offload", "micro_batch",
                                                                 "grad_accum", "memory", "time")},
                                     {k: e[k] for k in ("every_n_layers", "offload", "micro_batch", "grad_accum",
                                                        "memory", "time")})

    def test_every_n_beyond_layers(self):
        from gckpt.hf_args import plan_for
        args = types.SimpleNamespace(per_device_train_batch_size=1, gradient_accumulation_steps=1, bf16=True,
                                     gradient_checkpointing=True, gradient_checkpointing_kwargs={"every_n_layers": 99})
        with mock.patch.dict(os.environ, {"WORLD_SIZE": "1"}):
            p = plan_for(dict(LLAMA, dtype="float32"), args, seq=256)
        self.assertEqual(p.selected["every_n_layers"], LLAMA["num_hidden_layers"])



@unittest.skipUnless(HAVE_NATIVE and HAVE_TRL and HAVE_DS, "needs gckpt._native, transformers, peft, trl and deepspeed "
                     "(tools/hf_probe/.venv with setup-deepspeed.sh)")
class DocsCombinationsEndToEnd(unittest.TestCase):
    """Real TrainingArguments / SFTConfig / LoraConfig / BitsAndBytesConfig / DeepSpeed / FSDP
    combinations, written as the transformers, TRL and peft docs write them (output_dir and
    use_cpu=True added: TrainingArguments refuses bf16 on a machine without a GPU otherwise):
    plan_for's selected entry is the entry gckpt-plan gives for the command line translated
    by hand from the same example (one setting: its every_n_layers, offload, micro-batch and
    accumulation), the same memory and time figures. The hand translation is this test's,
    not hf_args's: a mapping rule that drifts shows up as a different entry or number."""

    SEQ = 2048

    def setUp(self):
        self._w = quiet()
        self._env = mock.patch.dict(os.environ, {}, clear=False)
        self._env.start()
        for k in ("WORLD_SIZE", "LOCAL_WORLD_SIZE"):
            os.environ.pop(k, None)
        self.tmp = __import__("tempfile").mkdtemp(prefix="gckpt-docs-e2e-")
        self.addCleanup(__import__("shutil").rmtree, self.tmp, True)

    def tearDown(self):
        self._env.stop()
        self._w.__exit__(None, None, None)

    def ta(self, **kw):
        from transformers import TrainingArguments
        return TrainingArguments(output_dir=os.path.join(self.tmp, "out"), use_cpu=True, **kw)

    def sft(self, **kw):
        from trl import SFTConfig
        return SFTConfig(output_dir=os.path.join(self.tmp, "out"), use_cpu=True, report_to="none", **kw)

    def shipped(self, name):
        with open(os.path.join(ROOT, "models", name + ".json")) as f:
            return json.load(f)

    def meta_model(self, name, dtype):
        """A shipped config loaded as from_pretrained(..., dtype=dtype) would, on the meta device."""
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM
        d = self.shipped(name)
        cfg = AutoConfig.for_model(d["model_type"], **{k: v for k, v in d.items()
                                                       if k not in ("model_type", "transformers_version",
                                                                    "architectures", "torch_dtype", "dtype")})
        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation="sdpa")

    def ds_file(self, ds):
        path = os.path.join(self.tmp, "ds_config.json")
        with open(path, "w") as f:
            json.dump(ds, f)
        return path

    def cli_entry(self, argv):
        import subprocess
        cli = os.environ.get("GCKPT_PLAN", os.path.join(ROOT, "build", "gckpt-plan"))
        if not os.access(cli, os.X_OK):
            self.skipTest("gckpt-plan not built (GCKPT_PLAN)")
        out = os.path.join(self.tmp, "cli.json")
        r = subprocess.run([cli, "--seq", str(self.SEQ), *argv, "-q", "-o", out], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out) as f:
            entries = json.load(f)["entries"]
        self.assertEqual(len(entries), 1, argv)
        return entries[0]

    def check(self, model, args, argv, setting, peft_config=None, world_size=None, env=None, gpu="h100-sxm-80gb"):
        """plan_for's selected entry equals gckpt-plan's single entry for argv (+ the setting)."""
        from gckpt.hf_args import plan_for
        every_n, offload, mb, ga = setting
        os.environ.update(env or {})   # after the arguments: TrainingArguments reads WORLD_SIZE
        p = plan_for(model, args, seq=self.SEQ, peft_config=peft_config, gpu=gpu, world_size=world_size)
        for k in (env or {}):
            os.environ.pop(k)
        s = p.selected
        self.assertIsNotNone(s, [w["message"] for w in p.warnings])
        self.assertEqual((s["every_n_layers"], s["offload"], s["micro_batch"], s["grad_accum"]), setting)
        cli = self.cli_entry(argv + ["--gpu", gpu, "--every-n", str(every_n or "off"), "--offload",
                                     "on" if offload else "off", "--micro-batch", str(mb), "--grad-accum", str(ga)])
        self.assertEqual(s["memory"], cli["memory"])
        self.assertEqual(s["time"], cli["time"])
        return p

    # 1. transformers docs/source/en/perf_train_gpu_one.md, "Gradient checkpointing"
    def test_01_perf_gpu_one_gradient_checkpointing(self):
        args = self.ta(per_device_train_batch_size=1, gradient_accumulation_steps=4, gradient_checkpointing=True)
        self.check("llama-3.2-1b", args, ["--model", "llama-3.2-1b", "--precision", "fp32",
                                          "--optimizer", "adamw"], (1, False, 1, 4))

    # 2. the same page, "Mixed precision: bf16": TrainingArguments(bf16=True) (batch size default 8)
    def test_02_perf_gpu_one_bf16(self):
        self.check("llama-3.2-1b", self.ta(bf16=True), ["--model", "llama-3.2-1b", "--precision", "amp-bf16"],
                   (0, False, 8, 1))

    # 3. the same page, "fp16": TrainingArguments(per_device_train_batch_size=4, fp16=True), on a
    #    model loaded in fp32 (a loaded model: its dtype is read, no assumption)
    def test_03_perf_gpu_one_fp16_loaded_model(self):
        import torch
        self.check(self.meta_model("qwen2.5-0.5b", torch.float32), self.ta(per_device_train_batch_size=4, fp16=True),
                   ["--model", os.path.join(ROOT, "models", "qwen2.5-0.5b.json"), "--precision", "amp-fp16"],
                   (0, False, 4, 1))

    # 4. the same page, "8-bit Adam": optim="adamw_bnb_8bit", with gradient checkpointing and bf16
    def test_04_perf_gpu_one_8bit_adam(self):
        args = self.ta(per_device_train_batch_size=4, optim="adamw_bnb_8bit", bf16=True, gradient_checkpointing=True)
        self.check("llama-3.2-3b", args, ["--model", "llama-3.2-3b", "--precision", "amp-bf16",
                                          "--optimizer", "adamw-8bit"], (1, False, 4, 1))

    # 5. transformers' gradient checkpointing guide (every_n_layers / offload through the
    #    Trainer's gradient_checkpointing_kwargs, TrainingArguments docstring 5.24)
    def test_05_every_n_layers_offload(self):
        args = self.ta(bf16=True, per_device_train_batch_size=2, gradient_accumulation_steps=8,
                       gradient_checkpointing=True, gradient_checkpointing_kwargs={"every_n_layers": 4, "offload": True})
        self.check("llama-3.1-8b", args, ["--model", "llama-3.1-8b", "--precision", "amp-bf16"], (4, True, 2, 8))

    # 6. peft docs/source/developer_guides/quantization.md: Mistral-7B QLoRA (nf4, double
    #    quantization, bf16 compute; LoraConfig r=16, alpha 8, q/k/v/o, dropout 0.05)
    def test_06_peft_quantization_guide_qlora(self):
        import torch
        from peft import LoraConfig
        from transformers import BitsAndBytesConfig
        config = self.shipped("mistral-7b-v0.3")
        config["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.bfloat16).to_dict()
        lora = LoraConfig(r=16, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                          lora_dropout=0.05, bias="none", task_type="CAUSAL_LM")
        args = self.ta(bf16=True, per_device_train_batch_size=2, gradient_accumulation_steps=8,
                       gradient_checkpointing=True, optim="paged_adamw_8bit")
        self.check(config, args, ["--model", os.path.join(ROOT, "models", "mistral-7b-v0.3.json"), "--method", "qlora",
                                  "--quant", "nf4", "--double-quant", "on", "--compute-dtype", "bf16", "--lora-rank",
                                  "16", "--lora-alpha", "8", "--lora-dropout", "0.05", "--lora-targets",
                                  "q_proj,k_proj,v_proj,o_proj", "--precision", "amp-bf16", "--optimizer",
                                  "paged-adamw-8bit"], (1, False, 2, 8), peft_config=lora, gpu="rtx-4090")

    # 7. transformers docs/source/en/quantization/bitsandbytes.md: BitsAndBytesConfig(load_in_8bit=True),
    #    trained through the peft guide's LoraConfig, fp32 (prepare_model_for_kbit_training's casts)
    def test_07_bitsandbytes_8bit_lora(self):
        import torch
        from peft import LoraConfig
        from transformers import BitsAndBytesConfig
        model = self.meta_model("llama-3.2-1b", torch.float32)
        model.config.quantization_config = BitsAndBytesConfig(load_in_8bit=True)
        lora = LoraConfig(r=16, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                          lora_dropout=0.05, bias="none", task_type="CAUSAL_LM")
        args = self.ta(per_device_train_batch_size=1, gradient_accumulation_steps=4, gradient_checkpointing=True)
        self.check(model, args, ["--model", os.path.join(ROOT, "models", "llama-3.2-1b.json"), "--method", "qlora",
                                 "--quant", "int8", "--lora-rank", "16", "--lora-alpha", "8", "--lora-dropout", "0.05",
                                 "--lora-targets", "q_proj,k_proj,v_proj,o_proj", "--precision", "fp32"],
                   (1, False, 1, 4), peft_config=lora, gpu="rtx-4090")

    # 8. peft README, "Quickstart": LoraConfig(task_type=TaskType.CAUSAL_LM, inference_mode=False,
    #    r=8, lora_alpha=32, lora_dropout=0.1) on a Qwen2.5 loaded in bf16 (peft's default
    #    targets for qwen2, q_proj and v_proj), trained without autocast: pure bf16
    def test_08_peft_readme_quickstart(self):
        import torch
        from peft import LoraConfig, TaskType
        lora = LoraConfig(task_type=TaskType.CAUSAL_LM, inference_mode=False, r=8, lora_alpha=32, lora_dropout=0.1)
        args = self.ta(per_device_train_batch_size=4, gradient_checkpointing=True)
        self.check(self.meta_model("qwen2.5-0.5b", torch.bfloat16), args,
                   ["--model", os.path.join(ROOT, "models", "qwen2.5-0.5b.json"), "--method", "lora", "--lora-rank",
                    "8", "--lora-alpha", "32", "--lora-dropout", "0.1", "--lora-targets", "q_proj,v_proj",
                    "--precision", "bf16"], (1, False, 4, 1), peft_config=lora)

    # 9. TRL docs/source/lora_without_regret.md, "Supervised Fine-Tuning (SFT)": LoraConfig(r=256,
    #    lora_alpha=16, target_modules="all-linear"), SFTConfig(learning_rate=2e-4,
    #    per_device_train_batch_size=1, gradient_accumulation_steps=4, num_train_epochs=1)
    #    (SFTConfig's defaults: gradient_checkpointing=True, bf16=True)
    def test_09_trl_lora_without_regret(self):
        from peft import LoraConfig
        args = self.sft(learning_rate=2e-4, per_device_train_batch_size=1, gradient_accumulation_steps=4,
                        num_train_epochs=1)
        self.check("qwen3-8b", args, ["--model", "qwen3-8b", "--method", "lora", "--lora-rank", "256",
                                      "--lora-alpha", "16", "--lora-dropout", "0", "--lora-targets", "all-linear",
                                      "--precision", "amp-bf16"], (1, False, 1, 4),
                   peft_config=LoraConfig(r=256, lora_alpha=16, target_modules="all-linear"))

    # 10. TRL docs/source/sft_trainer.md / reducing_memory_usage.md: SFTConfig(max_length=...,
    #     gradient_checkpointing_kwargs={"use_reentrant": False}) with fp32 off (bf16=False) and
    #     a larger batch
    def test_10_trl_sft_use_reentrant_false(self):
        args = self.sft(max_length=self.SEQ, per_device_train_batch_size=2, gradient_accumulation_steps=2,
                        gradient_checkpointing_kwargs={"use_reentrant": False}, optim="adamw_torch")
        self.check("qwen2.5-0.5b", args, ["--model", "qwen2.5-0.5b", "--precision", "amp-bf16",
                                          "--optimizer", "adamw-foreach"], (1, False, 2, 2))

    # 11. transformers docs/source/en/deepspeed.md, the ZeRO-2 config, as a file, launched with
    #     torchrun --nproc_per_node 4 (WORLD_SIZE, LOCAL_WORLD_SIZE). As the page writes it the
    #     planner refuses it by name: offload_optimizer without an optimizer section (DeepSpeed
    #     refuses the Trainer's torch AdamW there), then round_robin_gradients; without those
    #     two it is planned
    def test_11_deepspeed_zero2_file_torchrun(self):
        from gckpt.hf_args import plan_for
        ds = {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True},
                                    "allgather_partitions": True, "allgather_bucket_size": 5e8,
                                    "overlap_comm": True, "reduce_scatter": True, "reduce_bucket_size": 5e8,
                                    "contiguous_gradients": True, "round_robin_gradients": True},
              "bf16": {"enabled": "auto"}, "train_micro_batch_size_per_gpu": "auto",
              "gradient_accumulation_steps": "auto"}
        args = self.ta(bf16=True, deepspeed=self.ds_file(ds), per_device_train_batch_size=2,
                       gradient_checkpointing=True)
        with self.assertRaises(PlanError) as e:
            plan_for("llama-3.1-8b", args, seq=self.SEQ, world_size=4)
        self.assertIn("ds_config.json: field 'optimizer' is missing: with offload_optimizer", str(e.exception))
        ds["optimizer"] = {"type": "AdamW", "params": {"lr": "auto"}}
        args = self.ta(bf16=True, deepspeed=self.ds_file(ds), per_device_train_batch_size=2,
                       gradient_checkpointing=True)
        with self.assertRaises(PlanError) as e:
            plan_for("llama-3.1-8b", args, seq=self.SEQ, world_size=4)
        self.assertIn("field 'zero_optimization.round_robin_gradients' is not planned", str(e.exception))
        del ds["optimizer"]
        for k in ("offload_optimizer", "round_robin_gradients"):
            del ds["zero_optimization"][k]
        path = self.ds_file(ds)
        args = self.ta(bf16=True, deepspeed=path, per_device_train_batch_size=2, gradient_checkpointing=True)
        self.check("llama-3.1-8b", args, ["--model", "llama-3.1-8b", "--precision", "amp-bf16", "--gpus", "4",
                                          "--parallel", "zero2", "--deepspeed", path], (1, False, 2, 1),
                   env={"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4"})

    # 12. the same page, ZeRO-3 with "auto" (its offload_param / offload_optimizer left out: an
    #     optimizer offload without an optimizer section is refused, PlanFor.test_parallel_end_to_end),
    #     a dict, on two nodes of 4 GPUs
    def test_12_deepspeed_zero3_dict_two_nodes(self):
        ds = {"bf16": {"enabled": "auto"}, "zero_optimization": {
            "stage": 3, "overlap_comm": True, "contiguous_gradients": True, "sub_group_size": 1e9,
            "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
            "stage3_param_persistence_threshold": "auto", "stage3_max_live_parameters": 1e9,
            "stage3_max_reuse_distance": 1e9, "stage3_gather_16bit_weights_on_model_save": True},
              "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto"}
        args = self.ta(bf16=True, deepspeed=ds, per_device_train_batch_size=1, gradient_accumulation_steps=4,
                       gradient_checkpointing=True)
        self.check("llama-3.1-70b", args, ["--model", "llama-3.1-70b", "--precision", "amp-bf16", "--gpus", "4",
                                           "--nodes", "2", "--parallel", "zero3", "--deepspeed", self.ds_file(ds)],
                   (1, False, 1, 4), env={"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"})

    # 13. transformers docs/source/en/fsdp.md: fsdp="full_shard auto_wrap" with
    #     fsdp_config={"transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"]}, world_size=8
    def test_13_fsdp_full_shard(self):
        args = self.ta(bf16=True, fsdp="full_shard auto_wrap", per_device_train_batch_size=2,
                       fsdp_config={"transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"]},
                       gradient_checkpointing=True, gradient_checkpointing_kwargs={"every_n_layers": 2})
        self.check("llama-3.1-8b", args, ["--model", "llama-3.1-8b", "--precision", "amp-bf16", "--gpus", "8",
                                          "--parallel", "fsdp", "--fsdp-offload", "off"], (2, False, 2, 1),
                   world_size=8)

    # 14. TrainingArguments' docstring (5.24): fsdp=True, fsdp_config={"version": 2, "cpu_offload": True}
    def test_14_fsdp2_cpu_offload(self):
        args = self.ta(bf16=True, fsdp=True, fsdp_config={"version": 2, "cpu_offload": True},
                       per_device_train_batch_size=1, gradient_accumulation_steps=2, gradient_checkpointing=True)
        self.check("llama-3.1-8b", args, ["--model", "llama-3.1-8b", "--precision", "amp-bf16", "--gpus", "4",
                                          "--parallel", "fsdp", "--fsdp-offload", "on"], (1, False, 1, 2),
                   world_size=4)

    # 15. DDP: the transformers Trainer docs' `torchrun --nproc_per_node 2 train.py` (WORLD_SIZE=2)
    def test_15_ddp_torchrun(self):
        args = self.ta(bf16=True, per_device_train_batch_size=4, gradient_checkpointing=True, optim="adamw_torch_fused")
        self.check("llama-3.2-1b", args, ["--model", "llama-3.2-1b", "--precision", "amp-bf16", "--gpus", "2",
                                          "--parallel", "ddp"], (1, False, 4, 1),
                   env={"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"})


if __name__ == "__main__":
    unittest.main()
