"""The plan of the run a user has configured, from their own Hugging Face objects.

`options_from_hf` maps a model (or its config), `TrainingArguments` (or TRL's `SFTConfig`,
or any object with the same attribute names), a peft `LoraConfig` and the launcher's
world size to the options of `gckpt.plan`, the configured setting, and a warning naming
every field that changes training memory in a way the plan does not model.
`plan_for` plans a sweep around that setting and selects the configured entry.

Only attributes are read (duck typing): nothing here imports torch, transformers or peft
at import time; peft is imported lazily only to resolve `target_modules=None`, the C
extension only to find a Hub id's config.json. Every rule
below was read in transformers 5.24.0 (training_args.py, trainer.py, trainer_optimizer.py,
modeling_utils.py), peft 0.21.2, trl 1.16.0 and torch 2.15.0 (torch/utils/checkpoint.py);
docs/python-hf.md has the field-by-field table.
"""
from __future__ import annotations

import atexit
import dataclasses
import json
import os
import tempfile
import types

from ._plan import PlanError, data_dir   # standard library only: the C extension is imported by plan()


NOT_MODELLED = "hf_not_modelled"   # a field that changes training memory; the plan does not model it
IGNORED = "hf_ignored"             # a field set that has no effect in this configuration
ASSUMED = "hf_assumed"             # something the mapping had to assume

# TrainingArguments.optim values gckpt-plan accepts as they are (planner/cli_names.c)
_OPTIMIZERS = ("adamw_torch_fused", "adamw_torch", "adamw_bnb_8bit", "adamw_8bit", "paged_adamw_8bit",
               "paged_adamw_32bit")
_ATTENTION = ("sdpa", "eager", "flash_attention_2")
_REENTRANT = ("reentrant checkpointing re-runs the whole layer before its backward; the plan is for non-reentrant "
              "checkpointing with early stop, which was up to 0.54 % off prepare_model_for_kbit_training's "
              "reentrant runs on the QLoRA fixtures (docs/peft.md, FINDINGS R-PEFT-1)")
_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "fp32": "fp32", "bf16": "bf16",
           "fp16": "fp16", "float": "fp32", "half": "fp16"}


class _Warnings(list):
    def add(self, code, message):
        self.append({"code": code, "message": message})


def _enum_value(v):
    """An Enum's value (OptimizerNames, PeftType, IntervalStrategy...), else v."""
    return getattr(v, "value", v)


def _dtype_name(d):
    """'float32' / 'bfloat16' / 'float16' from a torch.dtype, its name or None."""
    if d is None:
        return None
    s = str(_enum_value(d))
    s = s[len("torch."):] if s.startswith("torch.") else s
    return s


def _truthy(v):
    if isinstance(v, str):
        return v.strip().lower() in ("y", "yes", "t", "true", "on", "1")
    return bool(v)


def _field_default(obj, name):
    """The default of a dataclass field (TrainingArguments, SFTConfig, LoraConfig), else None."""
    if dataclasses.is_dataclass(obj):
        for f in dataclasses.fields(obj):
            if f.name == name:
                if f.default is not dataclasses.MISSING:
                    return f.default
                if f.default_factory is not dataclasses.MISSING:
                    return f.default_factory()
    return None


def _load_json(value, what):
    """A dict from a dict, a JSON string starting with '{', or a path to a JSON file."""
    if value is None or isinstance(value, dict):
        return value
    if isinstance(value, str):
        if value.lstrip().startswith("{"):
            try:
                return json.loads(value)
            except ValueError as e:
                raise PlanError(f"{what}: not JSON: {e}") from None
        try:
            with open(value, encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError) as e:
            raise PlanError(f"{what}: cannot read {value!r}: {e}") from None
    raise PlanError(f"{what}: expected a dict or a path to a JSON file, got {type(value).__name__}")


# ---------------------------------------------------------------------------- the model

@dataclasses.dataclass
class _Model:
    plan_model: object            # what gckpt.plan receives
    config: dict | None           # the config as read (None: a Hub id, read by gckpt.plan)
    model_type: str | None
    weights_dtype: str | None     # a loaded model's floating dtype; None for a config
    attention: str | None
    bnb: dict | None              # a bitsandbytes quantization_config as a dict
    peft_config: object | None    # a PeftModel's active adapter config
    own_ckpt: tuple | None = None  # checkpointing already enabled on a loaded model: (every_n, offload, reentrant)


def _config_dict(cfg):
    if isinstance(cfg, dict):
        return dict(cfg)
    if hasattr(cfg, "to_dict"):
        return cfg.to_dict()
    return dict(vars(cfg))


def _quant_dict(q):
    if q is None:
        return None
    return q if isinstance(q, dict) else (q.to_dict() if hasattr(q, "to_dict") else dict(vars(q)))


def _read_model(obj, args, w, revision=None):
    """What the model (a name, a path, a dict, a config or a loaded model) says."""
    weights_dtype = attention = peft_cfg = None
    if isinstance(obj, (str, os.PathLike)):
        path = os.fspath(obj)
        if os.path.isdir(path) and os.path.isfile(os.path.join(path, "config.json")):
            path = os.path.join(path, "config.json")
        shipped = os.path.join(data_dir(), "models", path + ".json")
        if not os.path.isfile(path) and not os.path.isfile(shipped):
            hub = _hub_config(path, revision)
            if hub is None:   # neither a Hub id nor readable here: gckpt.plan says why
                return _Model(obj, None, None, None, None, None, None)
            path = hub
        cfg = _load_json(path if os.path.isfile(path) else shipped, "model")
        cfg_obj = cfg
    elif isinstance(obj, dict) or (hasattr(obj, "to_dict") and not hasattr(obj, "config")):
        cfg_obj = obj
        cfg = _config_dict(obj)
    elif hasattr(obj, "config"):     # a model: PreTrainedModel, PeftModel, anything with .config
        cfg_obj = obj.config
        cfg = _config_dict(cfg_obj)
        weights_dtype = _dtype_name(getattr(obj, "dtype", None)) or _dtype_name(cfg.get("dtype"))
        pc = getattr(obj, "peft_config", None)
        if isinstance(pc, dict) and pc:
            active = getattr(obj, "active_adapter", None)
            active = active if isinstance(active, str) and active in pc else next(iter(pc))
            peft_cfg = pc[active]
    else:
        raise PlanError(f"model: expected a name, a path, a dict, a config or a model, got {type(obj).__name__}")

    attention = getattr(cfg_obj, "_attn_implementation", None) if not isinstance(cfg_obj, dict) else None
    attention = attention or cfg.get("_attn_implementation") or cfg.get("attn_implementation")
    init = getattr(args, "model_init_kwargs", None) or {}   # SFTConfig: how SFTTrainer loads a model id
    if isinstance(init, dict) and weights_dtype is None and not hasattr(obj, "config"):
        if init.get("dtype", init.get("torch_dtype")) not in (None, "auto"):
            weights_dtype = _dtype_name(init.get("dtype", init.get("torch_dtype")))
        attention = init.get("attn_implementation") or attention
        if init.get("quantization_config") is not None and cfg.get("quantization_config") is None:
            cfg["quantization_config"] = _quant_dict(init["quantization_config"])

    q = cfg.get("quantization_config")
    if q is None and not isinstance(cfg_obj, dict):
        q = getattr(cfg_obj, "quantization_config", None)
    qd = _quant_dict(q)
    bnb = None
    if qd is not None and str(_enum_value(qd.get("quant_method", ""))).lower() == "bitsandbytes":
        bnb = qd
        cfg.pop("quantization_config", None)   # planned through method qlora, not the config
    own = _model_checkpointing(obj) if hasattr(obj, "config") and hasattr(obj, "modules") else None
    # a shipped name keeps its name in the plan; anything else goes as the config read here
    plan_model = obj if isinstance(obj, (str, os.PathLike)) and bnb is None else cfg
    return _Model(plan_model, cfg, cfg.get("model_type"), weights_dtype, attention, bnb, peft_cfg, own)


def _hub_config(ref, revision=None):
    """The cached config.json of a Hub id (downloaded into the Hugging Face cache when it is
    not there, by the C planner's resolver: the code gckpt-plan --model ORG/NAME runs), or
    None when ref is not a Hub id or the C extension is not built (gckpt.plan then resolves
    or refuses it). A Hub id that does not resolve raises its one-line PlanError."""
    try:
        from ._plan import _call
        req = {"op": "resolve", "model": ref}
        if revision is not None:
            req["revision"] = revision
        answer = _call(req)
    except ImportError:
        return None
    return answer["path"] if answer.get("hub") else None


def _model_checkpointing(model):
    """(every_n, offload, reentrant) of checkpointing already enabled on a loaded model
    (prepare_model_for_kbit_training's default, or the user's own call), else None.

    _set_gradient_checkpointing (modeling_utils.py) sets `gradient_checkpointing` on the
    decoder layers, i % every_n == 0, and `_gradient_checkpointing_func`, a partial of
    `checkpoint` (or of the save_on_cpu wrapper `checkpoint_func` when offloading) with the
    kwargs; the model adds use_reentrant=False only when it gets no kwargs."""
    try:
        if not getattr(model, "is_activation_checkpointing", False) is True:
            return None
        from transformers.modeling_layers import GradientCheckpointingLayer
    except Exception:
        return None
    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    flags = [bool(getattr(m, "gradient_checkpointing", False)) for m in layers]
    if not any(flags):
        return None
    on = [i for i, f in enumerate(flags) if f]
    every_n = on[1] - on[0] if len(on) > 1 else len(flags)
    func = getattr(layers[on[0]], "_gradient_checkpointing_func", None)
    kw = getattr(func, "keywords", None) or {}
    inner = getattr(func, "func", func)
    offload = getattr(inner, "__name__", "") == "checkpoint_func"
    reentrant = kw.get("use_reentrant", True) is not False
    return every_n, offload, reentrant


# ----------------------------------------------------------------------------- peft

_LORA_NO_MEMORY = {  # LoraConfig fields read and found without effect on training memory
    "task_type", "peft_type", "auto_mapping", "peft_version", "base_model_name_or_path", "revision",
    "fan_in_fan_out",       # how peft reads GPT-2's Conv1D weight; set by peft itself
    "use_rslora",           # scaling = alpha / sqrt(r) instead of alpha / r: one Python float (lora/layer.py)
    "alpha_pattern",        # per-module alpha: a Python float each
    "init_lora_weights",    # initialisation only
    "loftq_config", "eva_config", "corda_config", "lora_ga_config",   # initialisation only
    "runtime_config",       # ephemeral_gpu_offload: DoRA's inference path only
    "megatron_core",        # used only with megatron_config
    "qalora_group_size",    # used only with use_qalora
}
_LORA_MAPPED = {"r", "lora_alpha", "lora_dropout", "target_modules", "modules_to_save", "bias", "use_dora",
                "inference_mode", "target_parameters"}


def _is_unset(v, default):
    if v is None or v is False:
        return True
    if isinstance(v, (dict, list, tuple, set, str)) and not v:
        return True
    try:
        return v == default
    except Exception:  # pragma: no cover
        return False


def _peft_options(pc, model, w):
    """LoraConfig -> method lora options; raises PlanError for what LoRA plans cannot be."""
    ptype = str(_enum_value(getattr(pc, "peft_type", "LORA") or "LORA")).upper()
    if ptype != "LORA":
        raise PlanError(f"peft_config.peft_type={ptype}: only LoRA (LoraConfig) is planned")
    if _truthy(getattr(pc, "use_dora", False)):
        raise PlanError("peft_config.use_dora=True: DoRA (its magnitude vector and the weight norm computed "
                        "from the whole weight in every forward) is not planned")
    if _truthy(getattr(pc, "inference_mode", False)):
        raise PlanError("peft_config.inference_mode=True: the adapters are frozen, nothing would train")
    opts = {"lora_rank": int(pc.r), "lora_alpha": pc.lora_alpha, "lora_dropout": float(pc.lora_dropout)}
    if getattr(pc, "target_parameters", None):
        raise PlanError("peft_config.target_parameters: adapters on bare parameters (peft's ParamWrapper, e.g. "
                        "fused experts) are not planned")
    tm = getattr(pc, "target_modules", None)
    if tm is None:
        try:
            from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as mapping
        except ImportError:
            mapping = None
        if mapping is None or model.model_type is None or model.model_type not in mapping:
            raise PlanError("peft_config.target_modules=None: peft picks its default modules per model_type "
                            f"({model.model_type or 'unknown model_type'}); name them (e.g. \"all-linear\")")
        tm = list(mapping[model.model_type])
        w.add(ASSUMED, f"peft_config.target_modules=None: peft's default for model_type "
                       f"{model.model_type!r}, {','.join(tm)}")
    if isinstance(tm, str):
        if tm.lower() != "all-linear":
            raise PlanError(f"peft_config.target_modules={tm!r}: a string is a regular expression peft "
                            "full-matches against module paths, which gckpt does not evaluate; pass a list "
                            "of module names or \"all-linear\"")
        opts["lora_targets"] = "all-linear"
    else:
        opts["lora_targets"] = sorted(tm) if isinstance(tm, (set, frozenset)) else list(tm)
    mts = getattr(pc, "modules_to_save", None)
    if mts:
        opts["modules_to_save"] = list(mts)
    bias = str(getattr(pc, "bias", "none"))
    if bias != "none":
        w.add(NOT_MODELLED, f"peft_config.bias={bias!r}: trainable biases (with their gradients and AdamW "
                            "states) are not planned; the plan counts bias='none'")
    task = str(_enum_value(getattr(pc, "task_type", None) or "CAUSAL_LM"))
    if task != "CAUSAL_LM":
        w.add(NOT_MODELLED, f"peft_config.task_type={task!r}: gckpt plans causal language models "
                            "(CAUSAL_LM); other tasks add their own head")
    fields = [f.name for f in dataclasses.fields(pc)] if dataclasses.is_dataclass(pc) else list(vars(pc))
    for name in fields:
        if name in _LORA_MAPPED or name in _LORA_NO_MEMORY or name.startswith("_"):
            continue
        v = getattr(pc, name, None)
        if not _is_unset(v, _field_default(pc, name)):
            w.add(NOT_MODELLED, f"peft_config.{name}={v!r}: changes which adapters exist or their shapes "
                                "(or is not reviewed); the plan ignores it")
    return opts


def _bnb_options(q, w):
    """A bitsandbytes quantization_config -> method qlora's options."""
    four = _truthy(q.get("load_in_4bit", q.get("_load_in_4bit", False)))
    eight = _truthy(q.get("load_in_8bit", q.get("_load_in_8bit", False)))
    if not four and not eight:
        return None
    opts = {"method": "qlora"}
    if eight:
        opts["quant"] = "int8"
        if _truthy(q.get("llm_int8_has_fp16_weight", False)):
            raise PlanError("quantization_config.llm_int8_has_fp16_weight=True: int8 layers that keep fp16 "
                            "weights are not planned")
        thr = q.get("llm_int8_threshold", 6.0)
        if thr is not None and float(thr) != 6.0:
            w.add(NOT_MODELLED, f"quantization_config.llm_int8_threshold={thr}: int8's outlier columns are "
                                "data-dependent and not planned")
    else:
        qt = str(q.get("bnb_4bit_quant_type", "fp4")).lower()
        if qt not in ("nf4", "fp4"):
            raise PlanError(f"quantization_config.bnb_4bit_quant_type={qt!r}: nf4 or fp4 is planned")
        opts["quant"] = qt
        opts["double_quant"] = _truthy(q.get("bnb_4bit_use_double_quant", False))
        cd = _DTYPES.get(_dtype_name(q.get("bnb_4bit_compute_dtype")) or "float32")
        if cd is None:
            raise PlanError(f"quantization_config.bnb_4bit_compute_dtype={q.get('bnb_4bit_compute_dtype')!r}: "
                            "bf16, fp16 or fp32 is planned")
        opts["compute_dtype"] = cd
        # bnb_4bit_quant_storage: the packed bytes are the same, viewed as another dtype (no memory change)
    if q.get("llm_int8_skip_modules"):
        w.add(NOT_MODELLED, f"quantization_config.llm_int8_skip_modules={q['llm_int8_skip_modules']!r}: "
                            "modules kept unquantized are planned quantized")
    if _truthy(q.get("llm_int8_enable_fp32_cpu_offload", False)):
        w.add(NOT_MODELLED, "quantization_config.llm_int8_enable_fp32_cpu_offload=True: modules placed on the "
                            "CPU by device_map are planned on the GPU")
    return opts


# ---------------------------------------------------------------- TrainingArguments

def _checkpointing(args, w):
    """(every_n_layers, offload) the Trainer applies: 0 = off (trainer.py, 'Activate activation checkpointing')."""
    on = getattr(args, "activation_checkpointing", None)
    if on is None:
        on = getattr(args, "gradient_checkpointing", None)
    kw = getattr(args, "activation_checkpointing_kwargs", None)
    if kw is None:
        kw = getattr(args, "gradient_checkpointing_kwargs", None)
    raw = dict(_load_json(kw, "TrainingArguments.gradient_checkpointing_kwargs") or {})
    kw = dict(raw)
    every_n = kw.pop("every_n_layers", 1)
    offload = _truthy(kw.pop("offload", False))
    if not on:
        if "every_n_layers" in raw or "offload" in raw:
            w.add(IGNORED, "TrainingArguments.gradient_checkpointing_kwargs: every_n_layers / offload are set "
                           "but gradient_checkpointing is False, so the Trainer checkpoints nothing")
        return 0, False
    try:
        every_n = int(every_n)
    except (TypeError, ValueError):
        raise PlanError(f"TrainingArguments.gradient_checkpointing_kwargs.every_n_layers={every_n!r}: "
                        "expected an integer >= 1") from None
    if every_n < 1:
        raise PlanError(f"TrainingArguments.gradient_checkpointing_kwargs.every_n_layers={every_n}: "
                        "expected an integer >= 1")
    # What is left goes to torch.utils.checkpoint.checkpoint; the model adds use_reentrant=False only
    # when nothing is left (modeling_utils._activation_checkpointing_enable), and torch 2.15 defaults
    # use_reentrant to True when it is not passed (checkpoint.py, _checkpoint_impl).
    if kw:
        explicit = "use_reentrant" in kw
        if _truthy(kw.pop("use_reentrant", True)):
            w.add(NOT_MODELLED, "TrainingArguments.gradient_checkpointing_kwargs: use_reentrant=True"
                  + ("" if explicit else " (torch 2.15's default when other keys are passed without it)")
                  + ": " + _REENTRANT)
        if "early_stop" in kw and not _truthy(kw.pop("early_stop")):
            w.add(NOT_MODELLED, "TrainingArguments.gradient_checkpointing_kwargs: early_stop=False keeps every "
                                "recomputed tensor to the layer's end; the plan stops the recompute early")
        if "context_fn" in kw:
            kw.pop("context_fn")
            w.add(NOT_MODELLED, "TrainingArguments.gradient_checkpointing_kwargs: context_fn (selective "
                                "checkpointing) is not planned")
        if "selective" in kw:   # TRL's SFTTrainer: selective activation checkpointing
            if _truthy(kw.pop("selective")):
                w.add(NOT_MODELLED, "TrainingArguments.gradient_checkpointing_kwargs: selective=True (TRL's "
                                    "selective activation checkpointing) is not planned")
        for k in ("preserve_rng_state", "determinism_check", "debug"):  # no tensor the planner counts
            kw.pop(k, None)
        for k in kw:
            w.add(NOT_MODELLED, f"TrainingArguments.gradient_checkpointing_kwargs: {k}={kw[k]!r} is passed to "
                                "torch.utils.checkpoint.checkpoint and not planned")
    return every_n, offload


def _precision(args, model, method, w):
    bf16, fp16 = _truthy(getattr(args, "bf16", False)), _truthy(getattr(args, "fp16", False))
    if bf16 and fp16:
        raise PlanError("TrainingArguments: bf16=True and fp16=True together")
    amp = "bf16" if bf16 else "fp16" if fp16 else None
    if method == "qlora":   # prepare_model_for_kbit_training casts what is not quantized to fp32
        return {"bf16": "amp-bf16", "fp16": "amp-fp16", None: "fp32"}[amp]
    wd = model.weights_dtype
    if wd is None:          # a config: the weights dtype is how the user will load it
        cfg_dtype = _dtype_name(model.config.get("dtype", model.config.get("torch_dtype"))) \
            if model.config else None
        if cfg_dtype not in (None, "float32"):
            w.add(ASSUMED, f"model dtype: planned with fp32 weights loaded as from_pretrained(..., "
                           f"dtype=torch.float32); transformers 5 loads the checkpoint's dtype ({cfg_dtype}) "
                           "unless told: pass the loaded model to plan its own dtype")
        wd = "float32"
    if wd == "float32":
        return {"bf16": "amp-bf16", "fp16": "amp-fp16", None: "fp32"}[amp]
    if wd == "bfloat16":
        if amp == "fp16":
            raise PlanError("TrainingArguments.fp16=True on a model loaded in bfloat16 is not planned")
        if amp == "bf16":
            w.add(NOT_MODELLED, "TrainingArguments.bf16=True on a model loaded in bfloat16: autocast over bf16 "
                                "weights is planned as pure bf16 (precision bf16); the fp32 outputs of "
                                "autocast's fp32 ops are not counted (unverified)")
        return "bf16"
    raise PlanError(f"model dtype {wd}: fp32 or bfloat16 weights are planned")


def _optimizer(args, deepspeed, w):
    optim = str(_enum_value(getattr(args, "optim", "adamw_torch_fused")))
    optim_args = getattr(args, "optim_args", None)
    if deepspeed is not None and "optimizer" in deepspeed:
        if optim != "adamw_torch_fused":
            w.add(IGNORED, f"TrainingArguments.optim={optim!r}: the DeepSpeed config's optimizer section "
                           "replaces it (planned as AdamW)")
        return None
    if optim == "sgd":      # trainer_optimizer._get_sgd: momentum from optim_args, else torch's 0
        parsed = dict(kv.split("=", 1) for kv in (optim_args or "").replace(" ", "").split(",") if "=" in kv)
        try:
            momentum = float(parsed.get("momentum", 0.0))
        except ValueError:
            momentum = None
        if momentum != 0.9:
            raise PlanError(f"TrainingArguments.optim='sgd' with optim_args={optim_args!r}: momentum "
                            f"{parsed.get('momentum', 0)}; gckpt plans SGD with momentum 0.9 "
                            "(optim_args=\"momentum=0.9\")")
        return "sgd"
    if optim not in _OPTIMIZERS:
        raise PlanError(f"TrainingArguments.optim={optim!r} is not planned; planned: "
                        + ", ".join(_OPTIMIZERS) + ", sgd (with optim_args=\"momentum=0.9\")")
    if optim_args:
        w.add(IGNORED, f"TrainingArguments.optim_args={optim_args!r}: {optim} does not read optim_args "
                       "(trainer_optimizer.py)")
    return optim


_FSDP_KNOWN = {"version", "cpu_offload", "reshard_after_forward", "auto_wrap_policy",
               "transformer_layer_cls_to_wrap", "min_num_params", "xla", "xla_fsdp_v2", "xla_fsdp_grad_ckpt",
               "xla_fsdp_settings", "activation_checkpointing", "cpu_ram_efficient_loading", "state_dict_type",
               "sync_module_states", "use_orig_params", "forward_prefetch", "backward_prefetch",
               "limit_all_gathers"}


def _fsdp(args, w):
    """(on, cpu_offload, activation_checkpointing) from fsdp / fsdp_config (training_args._process_fsdp_args)."""
    fsdp = getattr(args, "fsdp", None)
    if not fsdp or fsdp in ("", "false", "False"):
        return False, False, False
    cfg = dict(_load_json(getattr(args, "fsdp_config", None), "TrainingArguments.fsdp_config") or {})
    cfg = {(k[5:] if k.startswith("fsdp_") else k): v for k, v in cfg.items()}
    if isinstance(fsdp, (str, list, tuple)) and fsdp not in (True, "true", "True"):
        items = fsdp.split() if isinstance(fsdp, str) else [str(_enum_value(i)) for i in fsdp]
        for item in items:
            if item == "full_shard":
                cfg.setdefault("reshard_after_forward", True)
            elif item == "shard_grad_op":
                cfg.setdefault("reshard_after_forward", False)
            elif item == "offload":
                cfg.setdefault("cpu_offload", True)
            elif item == "auto_wrap":
                pass
            else:
                raise PlanError(f"TrainingArguments.fsdp={fsdp!r}: {item!r} is not planned (FSDP2's "
                                "full_shard, offload and auto_wrap are)")
    if int(cfg.get("version", 2)) != 2:
        raise PlanError(f"TrainingArguments.fsdp_config.version={cfg['version']}: FSDP1 is not planned, "
                        "FSDP2 (version 2, the default) is")
    if not _truthy(cfg.get("reshard_after_forward", True)):
        raise PlanError("TrainingArguments.fsdp_config.reshard_after_forward=False (shard_grad_op): keeping "
                        "parameters gathered between forward and backward is not planned")
    if _truthy(cfg.get("xla", False)):
        raise PlanError("TrainingArguments.fsdp_config.xla=True: XLA FSDP is not planned")
    policy = str(cfg.get("auto_wrap_policy", "TRANSFORMER_BASED_WRAP"))
    if policy != "TRANSFORMER_BASED_WRAP":
        raise PlanError(f"TrainingArguments.fsdp_config.auto_wrap_policy={policy!r}: the plan shards one unit "
                        "per decoder layer (TRANSFORMER_BASED_WRAP, the default)")
    if cfg.get("offload_params") is not None:
        w.add(IGNORED, "TrainingArguments.fsdp_config.offload_params: accelerate's config name; the Trainer "
                       "reads cpu_offload (training_args.py, _process_fsdp_args)")
    for k in cfg:
        if k not in _FSDP_KNOWN and k != "offload_params":
            w.add(NOT_MODELLED, f"TrainingArguments.fsdp_config.{k}={cfg[k]!r}: not reviewed; the plan ignores it")
    return True, _truthy(cfg.get("cpu_offload", False)), _truthy(cfg.get("activation_checkpointing", False))


def _deepspeed(args, w):
    ds = getattr(args, "deepspeed", None)
    if ds is None or ds == "":
        return None, None
    d = _load_json(ds, "TrainingArguments.deepspeed")
    # The Trainer fills "auto" from the arguments and refuses a value that disagrees
    # (integrations/deepspeed.py, HfTrainerDeepSpeedConfig.fill_match).
    for key, arg in (("train_micro_batch_size_per_gpu", "per_device_train_batch_size"),
                     ("gradient_accumulation_steps", "gradient_accumulation_steps")):
        v = d.get(key)
        if v not in (None, "auto") and int(v) != int(getattr(args, arg, 1)):
            raise PlanError(f"TrainingArguments.deepspeed: {key}={v} disagrees with TrainingArguments.{arg}="
                            f"{getattr(args, arg, 1)} (the Trainer refuses the mismatch)")
    return ds, d


# Fields of TrainingArguments (transformers 5.24.0) read and found without effect on a
# training step's device memory, or read elsewhere in this module. Any other field set away
# from its default gets a warning naming it (docs/python-hf.md has the reasons).
_TA_MAPPED = {"per_device_train_batch_size", "gradient_accumulation_steps", "bf16", "fp16", "optim", "optim_args",
              "activation_checkpointing", "activation_checkpointing_kwargs", "gradient_checkpointing",
              "gradient_checkpointing_kwargs", "deepspeed", "fsdp", "fsdp_config", "use_cpu", "model_init_kwargs",
              "use_liger_kernel", "liger_kernel_config"}
_TA_NO_MEMORY = {
    "output_dir", "num_train_epochs", "max_steps", "learning_rate", "lr_scheduler_type", "lr_scheduler_kwargs",
    "warmup_steps", "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon", "max_grad_norm",
    "average_tokens_across_devices", "tf32", "logging_strategy", "logging_steps", "logging_first_step",
    "log_on_each_node", "logging_nan_inf_filter", "include_num_input_tokens_seen", "log_level",
    "log_level_replica", "disable_tqdm", "report_to", "run_name", "project", "trackio_space_id",
    "trackio_bucket_id", "trackio_static_space_id", "save_strategy", "save_steps", "save_on_each_node",
    "save_total_limit", "save_only_model", "enable_jit_checkpoint", "push_to_hub", "hub_token",
    "hub_private_repo", "hub_model_id", "hub_strategy", "hub_always_push", "hub_revision",
    "load_best_model_at_end", "metric_for_best_model", "greater_is_better", "ignore_data_skip",
    "restore_callback_states_from_checkpoint", "seed", "data_seed",
    "dataloader_drop_last", "dataloader_num_workers", "dataloader_pin_memory", "dataloader_persistent_workers",
    "dataloader_prefetch_factor", "dataloader_multiprocessing_context", "dataloader_in_order",
    "remove_unused_columns", "label_names", "length_column_name", "ddp_bucket_cap_mb",
    "ddp_broadcast_buffers", "ddp_backend", "ddp_timeout", "skip_memory_metrics", "do_train",
    "do_predict", "resume_from_checkpoint", "local_rank", "torch_empty_cache_steps",
    "torch_compile_backend", "torch_compile_mode",   # either sets torch_compile, which is warned about
    # evaluation only: checked together in _evaluation
    "eval_strategy", "eval_steps", "eval_delay", "per_device_eval_batch_size", "prediction_loss_only",
    "eval_on_start", "eval_do_concat_batches", "eval_use_gather_object", "eval_accumulation_steps",
    "include_for_metrics", "batch_eval_metrics", "bf16_full_eval", "fp16_full_eval", "do_eval",
    # TRL SFTConfig: data preparation and loss bookkeeping
    "trust_remote_code", "chat_template_path", "dataset_text_field", "dataset_kwargs", "dataset_num_proc",
    "eos_token", "truncation_mode", "shuffle_dataset", "pad_to_multiple_of", "eval_packing",
    "completion_only_loss", "assistant_only_loss", "pad_token", "max_length", "packing_strategy",
}
_TA_NOT_MODELLED = {  # field -> why (a warning when set away from its default)
    "torch_compile": "torch.compile fuses ops and changes which tensors are saved; the plan is for eager mode",
    "label_smoothing_factor": "the Trainer's LabelSmoother takes a log_softmax of the whole logits, "
                              "a [batch, seq, vocab] tensor the plan does not count",
    "neftune_noise_alpha": "NEFTune adds a noise tensor to the embeddings' output in every forward",
    "auto_find_batch_size": "the Trainer halves per_device_train_batch_size after an out-of-memory error; "
                            "the plan is for the configured batch size",
    "use_cache": "the Trainer sets model.config.use_cache from it: without checkpointing the forward keeps a "
                 "key/value cache the plan does not count",
    "optim_target_modules": "GaLore / APOLLO projections are not planned",
    "parallelism_config": "tensor, context or sequence parallelism are not planned",
    "accelerator_config": "split_batches / dispatch_batches change how a batch reaches each rank",
    "train_sampling_strategy": "group_by_length and similar samplers change the sequence lengths of a batch",
    "ddp_find_unused_parameters": "the plan follows the Trainer's own choice (find_unused_parameters when "
                                  "checkpointing is off, which clones the fp32 logits)",
    "ddp_static_graph": "DDP's static graph changes when buckets are reduced",
    "full_determinism": "torch.use_deterministic_algorithms(True) and CUBLAS_WORKSPACE_CONFIG=:16:8 "
                        "(trainer_utils.enable_full_determinism) pick other kernels and workspaces",
    "debug": "underflow_overflow's hooks take abs().max() of every module's output, a temporary per output",
    # TRL SFTConfig
    "activation_offloading": "TRL's activation offloading moves every saved activation to the CPU",
    "padding_free": "padding-free batches are one flattened sequence",
    "packing": "packed sequences: the plan is for micro_batch sequences of seq tokens each",
    "loss_type": "TRL's dft loss keeps other tensors of the logits",
    "router_aux_loss_coef": "TRL sets the load-balancing loss from it",
}


def _review_fields(args, w, checkpointing_on, parallel):
    if dataclasses.is_dataclass(args):
        names = [f.name for f in dataclasses.fields(args)]
    else:
        names = [n for n in vars(args) if not n.startswith("_")]
    for name in names:
        if name in _TA_MAPPED or name in _TA_NO_MEMORY:
            continue
        v = getattr(args, name, None)
        default = _field_default(args, name)
        if name == "ddp_find_unused_parameters":
            if v is None or parallel != "ddp" or bool(v) == (not checkpointing_on):
                continue
        elif name == "accelerator_config":
            cfg = _config_dict(v) if v is not None else {}
            if not any(_truthy(cfg.get(k)) for k in ("split_batches", "dispatch_batches")):
                continue
        elif name == "use_cache" and (not v or checkpointing_on):
            continue       # with checkpointing the model turns the cache off in training
        elif name == "loss_type" and str(v) == "nll":
            continue
        elif name == "train_sampling_strategy" and str(v) in ("random", "sequential"):
            continue
        elif v is None or v is False or v == default or (not v and not default):
            continue   # a plain namespace or dict has no defaults: a falsy value is unset
        why = _TA_NOT_MODELLED.get(name, "not reviewed by gckpt; the plan ignores it")
        w.add(NOT_MODELLED, f"TrainingArguments.{name}={v!r}: {why}")


# apply_liger_kernel_to_<model_type>'s keywords (liger-kernel 0.8.5), which
# TrainingArguments.liger_kernel_config passes (transformers 5.24 integrations/liger.py)
# (the Gemmas' functions take geglu where the others take swiglu; liger drops a keyword the
# type's function does not take)
_LIGER_PARTS = ("rope", "cross_entropy", "fused_linear_cross_entropy", "rms_norm", "swiglu", "geglu")


def _liger(args, w):
    """use_liger_kernel=True: the Trainer calls liger's apply_liger_kernel_to_<model_type> with
    liger_kernel_config's keywords (defaults: fused linear cross-entropy, RMSNorm, SwiGLU and
    RoPE on). Planned under --loss liger (docs/fused-loss.md), the kernels on passed as
    --liger-kernels: the fused linear cross-entropy, SwiGLU on a dense MLP, RMSNorm and RoPE on the
    types whose apply function gckpt plans them for (the liger_loss_unverified warning names the
    others). Returns (loss option, liger_kernels option), each None when not set."""
    if not _truthy(getattr(args, "use_liger_kernel", False)):
        cfg = getattr(args, "liger_kernel_config", None)
        if cfg:
            w.add(IGNORED, "TrainingArguments.liger_kernel_config without use_liger_kernel=True: not applied")
        return None, None
    cfg = dict(getattr(args, "liger_kernel_config", None) or {})
    unknown = sorted(set(cfg) - set(_LIGER_PARTS))
    if unknown:
        raise PlanError(f"TrainingArguments.liger_kernel_config: unknown key {unknown[0]!r} (liger-kernel 0.8.5 "
                        f"takes {', '.join(_LIGER_PARTS)})")
    part = {k: _truthy(cfg.get(k, k != "cross_entropy")) for k in _LIGER_PARTS}
    if part["cross_entropy"] and part["fused_linear_cross_entropy"]:
        raise PlanError("TrainingArguments.liger_kernel_config: cross_entropy and fused_linear_cross_entropy "
                        "both True (liger refuses this)")
    if part["geglu"] and "geglu" in cfg:
        w.add(NOT_MODELLED, "TrainingArguments.use_liger_kernel=True: Liger's geglu kernel replaces the Gemma MLP's "
                            "ops; the layers are planned with transformers' own ops there (docs/fused-loss.md)")
    if part["cross_entropy"]:
        w.add(NOT_MODELLED, "TrainingArguments.liger_kernel_config cross_entropy=True: Liger's cross-entropy on the "
                            "full logits is planned as transformers' loss")
    kernels = [k for k in ("rope", "rms_norm", "swiglu", "fused_linear_cross_entropy") if part[k]]
    if not kernels:
        return None, None
    return "liger", (None if len(kernels) == 4 else ",".join(kernels))


def _evaluation(args, w):
    strategy = str(_enum_value(getattr(args, "eval_strategy", "no") or "no"))
    if strategy != "no" or _truthy(getattr(args, "do_eval", False)):
        w.add(NOT_MODELLED, f"TrainingArguments.eval_strategy={strategy!r}: the plan is for training steps; "
                            f"evaluation (per_device_eval_batch_size={getattr(args, 'per_device_eval_batch_size', '?')}, "
                            f"eval_accumulation_steps={getattr(args, 'eval_accumulation_steps', None)}: without it "
                            "the predictions stay on the device) is not planned")


def _is_trl_sft(args):
    return type(args).__name__ == "SFTConfig" or all(
        hasattr(args, k) for k in ("dataset_text_field", "packing", "completion_only_loss"))


def _world(world_size, w):
    """(gpus per node, nodes) from the argument or the launcher's WORLD_SIZE / LOCAL_WORLD_SIZE."""
    env = os.environ
    if world_size is None and env.get("WORLD_SIZE"):
        world_size = int(env["WORLD_SIZE"])
        src = "WORLD_SIZE"
    else:
        src = "world_size"
    world = int(world_size or 1)
    if world < 1:
        raise PlanError(f"{src}={world}: expected >= 1")
    local = env.get("LOCAL_WORLD_SIZE")
    if local and world % int(local) == 0 and int(local) >= 1:
        return int(local), world // int(local)
    if world > 1 and src == "WORLD_SIZE":
        w.add(ASSUMED, f"WORLD_SIZE={world} without LOCAL_WORLD_SIZE: planned as {world} GPUs on one node")
    return world, 1


# --------------------------------------------------------------------------- entry points

def options_from_hf(model_or_config, args, *, peft_config=None, world_size=None, revision=None):
    """The plan request of the configured run: {"model", "options", "selected", "warnings"}.

    `model` is what gckpt.plan receives (a config dict when one could be read, without a
    bitsandbytes quantization_config, which becomes method qlora); `options` are gckpt.plan's
    keyword arguments (docs/python-hf.md); `selected` is the configured setting
    {every_n_layers (0 = off), offload, micro_batch, grad_accum}; `warnings` name every field
    that changes training memory and is not planned ({"code", "message"}).
    Raises PlanError (a ValueError) naming the field for what cannot be planned.
    """
    if isinstance(args, dict):   # TrainingArguments.to_dict(), a JSON or YAML of them
        args = types.SimpleNamespace(**args)
    w = _Warnings()
    model = _read_model(model_or_config, args, w, revision)
    opts = {}
    if revision is not None and isinstance(model.plan_model, (str, os.PathLike)):
        # a Hub id's branch, tag or commit (gckpt-plan --revision); a config read here is already that revision's
        opts["revision"] = revision

    peft = peft_config if peft_config is not None else model.peft_config
    bnb_opts = _bnb_options(model.bnb, w) if model.bnb else None
    if bnb_opts and peft is None:
        raise PlanError(f"model: loaded with bitsandbytes ({bnb_opts['quant']}) and no peft_config: a quantized "
                        "model is trained through adapters (pass the LoraConfig)")
    method = "full"
    if peft is not None:
        method = "qlora" if bnb_opts else "lora"
        opts["method"] = method
        opts.update(_peft_options(peft, model, w))
        if bnb_opts:
            opts.update(bnb_opts)

    if model.attention is not None:
        att = str(model.attention)
        if att not in _ATTENTION:
            raise PlanError(f"model attn_implementation={att!r}: planned: {', '.join(_ATTENTION)}")
        opts["attention"] = att

    opts["precision"] = _precision(args, model, method, w)

    ds_value, ds = _deepspeed(args, w)
    optimizer = _optimizer(args, ds, w)
    if optimizer is not None:
        opts["optimizer"] = optimizer

    every_n, offload = _checkpointing(args, w)
    if not every_n and model.own_ckpt:   # the Trainer enables its own only when asked; it disables nothing
        every_n, offload, reentrant = model.own_ckpt
        w.add(ASSUMED, f"model: checkpointing enabled on the model (every_n_layers={every_n}, offload={offload}"
                       f"{', reentrant' if reentrant else ''}) while TrainingArguments.gradient_checkpointing is "
                       "False: the Trainer keeps it (prepare_model_for_kbit_training enables reentrant "
                       "checkpointing by default); planned as that setting")
        if reentrant:
            w.add(NOT_MODELLED, "model: use_reentrant=True: " + _REENTRANT)
    fsdp_on, fsdp_offload, fsdp_ac = _fsdp(args, w)
    if fsdp_ac:
        if every_n:
            raise PlanError("TrainingArguments: fsdp_config.activation_checkpointing and gradient_checkpointing "
                            "both True (the Trainer refuses this)")
        every_n, offload = 1, False
        w.add(ASSUMED, "TrainingArguments.fsdp_config.activation_checkpointing=True: accelerate's checkpoint "
                       "wrapper on every decoder layer, planned as every_n_layers=1 without offload (unverified)")
    if fsdp_on and ds is not None:
        raise PlanError("TrainingArguments: fsdp and deepspeed both set")

    gpus, nodes = _world(world_size, w)
    if gpus * nodes == 1 and (ds is not None or fsdp_on):
        field = "deepspeed" if ds is not None else "fsdp"
        raise PlanError(f"TrainingArguments.{field} with one process: DeepSpeed and FSDP are planned on several "
                        "GPUs; pass world_size= (torchrun and accelerate launch set WORLD_SIZE)")
    parallel = None
    if gpus * nodes > 1:
        opts["gpus"], opts["nodes"] = gpus, nodes
        if ds is not None:
            stage = (ds.get("zero_optimization") or {}).get("stage", 0)
            parallel = f"zero{stage}" if str(stage) in ("1", "2", "3") else None
        else:
            parallel = "fsdp" if fsdp_on else "ddp"
        if parallel:
            opts["parallel"] = parallel
    if ds is not None:
        opts["deepspeed"] = ds_value if isinstance(ds_value, str) else ds
    if fsdp_on:
        opts["fsdp_offload"] = fsdp_offload

    mb = int(getattr(args, "per_device_train_batch_size", 8))
    ga = int(getattr(args, "gradient_accumulation_steps", 1))
    if mb < 1 or ga < 1:
        raise PlanError(f"TrainingArguments: per_device_train_batch_size={mb}, gradient_accumulation_steps={ga}: "
                        "expected >= 1")

    if _truthy(getattr(args, "use_cpu", False)):
        w.add(ASSUMED, "TrainingArguments.use_cpu=True: the run is on the CPU; the plan is for the gpu= "
                       "profile (gpu=\"cpu-exact\" plans PyTorch's CPU kernels)")
    if type(args).__module__.startswith("trl") and not _is_trl_sft(args):
        w.add(NOT_MODELLED, f"TRL {type(args).__name__}: its trainer (generation, a reference or reward model, "
                            "its own losses) is not planned; the plan is one causal-LM Trainer step")
    if _is_trl_sft(args):
        w.add(NOT_MODELLED, "TRL SFTConfig: SFTTrainer (trl 1.16) adds a fused LM head that computes the "
                            "log-probabilities without the [batch, seq, vocab] logits, in tiles of min(tokens, 4096) "
                            "x 32768 vocabulary columns in the compute dtype, with fp32 gradient buffers for the "
                            "hidden states and, when it trains, the head's weight (trainer/utils.py add_fused_lm_head, "
                            "kernels/chunked_logprob.py); the plan counts the Trainer's full fp32 logits and their "
                            "gradient instead, which is more or less than the tiles depending on the vocabulary "
                            "(a 211-word tiny Llama measured 3.1x the plan's peak)")
        if method == "qlora":
            w.add(NOT_MODELLED, "TRL SFTConfig with a quantized model: SFTTrainer (trl 1.16) casts the trainable "
                                "adapters to bf16 and does not call prepare_model_for_kbit_training, so the "
                                "parameters that are not quantized keep the loaded dtype (sft_trainer.py); the plan "
                                "counts fp32 adapters and prepare's fp32 casts")
    loss, kernels = _liger(args, w)
    if loss:
        opts["loss"] = loss
    if kernels:
        opts["liger_kernels"] = kernels
    _evaluation(args, w)
    _review_fields(args, w, every_n > 0, parallel)

    selected = {"every_n_layers": every_n, "offload": bool(offload) if every_n else False,
                "micro_batch": mb, "grad_accum": ga}
    return {"model": model.plan_model, "options": opts, "selected": selected, "warnings": list(w)}


def _sweep(selected):
    """every_n all, offload both, a few micro-batches at the configured global batch."""
    mb, ga = selected["micro_batch"], selected["grad_accum"]
    g = mb * ga
    mbs = sorted({m for m in (1, mb // 2, mb, 2 * mb) if m >= 1 and g % m == 0})
    return {"every_n": "all", "offload": "both", "micro_batch": mbs, "global_batch": g}


def _ds_file(ds):
    """A DeepSpeed config dict as a file for the planner, which reads --deepspeed FILE. Kept to
    the process's end: the Plan re-plans from its request for snippet() and text()."""
    fd, path = tempfile.mkstemp(prefix="gckpt-ds-", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(ds, f)
    atexit.register(os.unlink, path)
    return path


def plan_for(model_or_config, args, *, seq, peft_config=None, gpu=None, world_size=None, revision=None):
    """gckpt.plan of the configured run, with plan.selected the configured entry.

    The sweep: every every_n_layers, offload on and off, micro-batches around the configured
    one at the same per-device global batch; the mapping's warnings are appended to
    plan.warnings.
    """
    from ._plan import plan

    m = options_from_hf(model_or_config, args, peft_config=peft_config, world_size=world_size, revision=revision)
    opts = dict(m["options"])
    opts.update(_sweep(m["selected"]))
    if isinstance(opts.get("deepspeed"), dict):
        opts["deepspeed"] = _ds_file(opts["deepspeed"])
    try:
        p = plan(m["model"], gpu=gpu, seq=seq, **opts)
    except PlanError as e:
        # use_liger_kernel on a model_type liger has no kernels for: the Trainer leaves it unpatched
        if opts.get("loss") != "liger" or "apply_liger_kernel_to_" not in str(e):
            raise
        del opts["loss"]
        opts.pop("liger_kernels", None)
        p = plan(m["model"], gpu=gpu, seq=seq, **opts)
        m["warnings"].append({"code": IGNORED, "message": "TrainingArguments.use_liger_kernel=True: " + str(e).split(
            "--loss liger: ", 1)[-1] + "; planned with transformers' loss"})
    sel = dict(m["selected"])
    n = sel["every_n_layers"]
    layers = max((e.get("every_n_layers") or 0 for e in p.entries), default=0)
    if layers and n > layers:   # HF checkpoints layer i when i % n == 0: only layer 0, as every_n = layers
        p.warnings.append({"code": ASSUMED, "message": f"every_n_layers={n} exceeds the model's {layers} layers: "
                           f"only layer 0 is checkpointed, the entry every_n_layers={layers}"})
        sel["every_n_layers"] = layers
    p.selected = p.find(**sel)
    if p.selected is None:
        p.warnings.append({"code": ASSUMED, "message": f"the configured setting {sel} is not an entry of the plan"})
    max_length = getattr(args, "max_length", None) if _is_trl_sft(args) else None
    if isinstance(max_length, int) and seq > max_length:
        p.warnings.append({"code": ASSUMED, "message": f"seq={seq} exceeds SFTConfig.max_length={max_length}: "
                           "SFTTrainer truncates (or packs) sequences to max_length tokens; plan seq=max_length"})
    p.warnings.extend(m["warnings"])
    return p
