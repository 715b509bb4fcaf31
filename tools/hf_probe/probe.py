#!/usr/bin/env python3
"""Ground-truth memory probe for Hugging Face Transformers training with
activation (gradient) checkpointing, run on CPU.

For every case it runs real training steps (AdamW, gradient accumulation)
and writes one JSON fixture (schema gckpt.hf-fixture/1) with:
  * every tensor autograd saves in the forward pass, per region
    (embedding / layer.<i> / head), de-duplicated by storage;
  * what a checkpointed layer retains, and what offload copies to host;
  * the live tensor bytes over each step (all storages: params, grads,
    optimizer states, activations, logits, loss, temporaries), its peak and
    where it happens, a coarse timeline, and the optimizer's transient bytes.

Usage:
  probe.py --list                      # list the hand-written cases (tests/data/hf)
  probe.py --all [--jobs 2]            # write every hand-written fixture
  probe.py --set gen --all --jobs 2    # the generated set (tests/data/hf-gen, gen_cases.py)
  probe.py --filter 'llama-bf16-*'     # fnmatch on case names
  probe.py --case llama-fp32-sdpa-n1-plain-b2s32 --stdout
  # any config.json and setting, measured and compared with gckpt's plan:
  probe.py --config path/to/config.json --precision bf16 --attention sdpa \
           --every-n 2 --offload --batch 1 --seq 128
"""
from __future__ import annotations

import argparse
import contextlib
import fnmatch
import gc
import itertools
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import warnings

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import transformers
import transformers.modeling_utils as hf_modeling_utils

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import allocs  # noqa: E402
import family_cases  # noqa: E402
import moe_cases  # noqa: E402
import vlm_cases  # noqa: E402
import gen_cases  # noqa: E402

SCHEMA = "gckpt.hf-fixture/1"
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
DEFAULT_OUT = os.path.join(ROOT, "tests", "data", "hf")
GEN_OUT = os.path.join(ROOT, "tests", "data", "hf-gen")
FAM_OUT = os.path.join(ROOT, "tests", "data", "hf-fam")
MOE_OUT = os.path.join(ROOT, "tests", "data", "hf-moe")
VLM_OUT = os.path.join(ROOT, "tests", "data", "hf-vlm")
VLM_TOWERS_OUT = os.path.join(ROOT, "tests", "data", "hf-vlm-towers")
DSV3_OUT = os.path.join(ROOT, "tests", "data", "hf-dsv3")

FAMILIES = ["llama", "mistral", "qwen2", "qwen3", "gpt2"]
PRECISIONS = ["fp32", "bf16", "amp-bf16", "amp-bf16-cudalists"]
ATTENTIONS = ["sdpa", "eager"]
CKPT = [(0, False), (1, False), (1, True), (2, False), (2, True), (3, False), (3, True)]
SHAPES = [(2, 32), (1, 48)]
GRAD_ACCUM = 2
STEPS = 2
VOCAB = 211
DROPOUT_KEYS = ("attention_dropout", "attn_pdrop", "resid_pdrop", "embd_pdrop")


# --------------------------------------------------------------------------
# tiny models
# --------------------------------------------------------------------------
def make_config(family: str, attention: str):
    common_llama = dict(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=176,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=128,
        rms_norm_eps=1e-6,
        attention_dropout=0.0,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    if family == "llama":
        cfg = transformers.LlamaConfig(**common_llama)
    elif family == "mistral":
        cfg = transformers.MistralConfig(**common_llama)
    elif family == "qwen2":
        kw = dict(common_llama)
        kw.pop("head_dim")  # Qwen2 derives head_dim = hidden / heads = 16
        cfg = transformers.Qwen2Config(**kw)
    elif family == "qwen3":
        kw = dict(common_llama)
        kw["head_dim"] = 24  # heads * head_dim = 96 != hidden 64
        cfg = transformers.Qwen3Config(**kw)
    elif family == "gpt2":
        cfg = transformers.GPT2Config(
            vocab_size=VOCAB,
            n_embd=48,
            n_head=3,
            n_layer=4,
            n_positions=64,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            bos_token_id=1,
            eos_token_id=2,
        )
    else:
        raise ValueError(family)
    cfg._attn_implementation = attention
    return cfg


MODEL_CLASSES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "gpt2": "GPT2LMHeadModel",
    # issue 13's dense families (family_cases.py, tests/data/hf-fam)
    "gemma": "GemmaForCausalLM",
    "gemma2": "Gemma2ForCausalLM",
    "gemma3_text": "Gemma3ForCausalLM",
    "phi3": "Phi3ForCausalLM",
    "gpt_neox": "GPTNeoXForCausalLM",
    "olmo2": "Olmo2ForCausalLM",
    "granite": "GraniteForCausalLM",
    "smollm3": "SmolLM3ForCausalLM",
    "glm4": "Glm4ForCausalLM",
    # issue 13's mixture-of-experts families (moe_cases.py, tests/data/hf-moe)
    "mixtral": "MixtralForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "olmoe": "OlmoeForCausalLM",
    "gpt_oss": "GptOssForCausalLM",
    "deepseek_v3": "DeepseekV3ForCausalLM",
}

# Per-expert token counts of every router call while a pass runs (record_routing):
# (layer, counts, inside a checkpoint's recompute)
ROUTING: list | None = None
EXPERTS_IMPL = None  # model.config._experts_implementation as transformers resolved it


def record_routing(model, family):
    """Forward hooks on the MoE routers (<Family>TopKRouter / TopkRouter returns logits, scores,
    indices): the tokens each expert receives, per call."""
    global EXPERTS_IMPL
    EXPERTS_IMPL = getattr(model.config, "_experts_implementation", None)
    for i, layer in enumerate(layers_of(model, family)):
        for mod in layer.modules():
            if type(mod).__name__.lower().endswith("topkrouter"):  # DeepseekV3TopkRouter
                def hook(m, args, out, i=i):
                    if ROUTING is not None:
                        counts = torch.bincount(out[2].reshape(-1), minlength=m.num_experts).tolist()
                        ROUTING.append((i, counts, torch._C._current_autograd_node() is not None))
                mod.register_forward_hook(hook)


def config_from_dict(d: dict, attention: str):
    """A transformers config from a config.json dict (any of the five model types)."""
    d = dict(d)
    mt = d.pop("model_type", None)
    if mt not in MODEL_CLASSES:
        raise SystemExit(f"model_type {mt!r} is not one of {', '.join(MODEL_CLASSES)}")
    for k in ("architectures", "transformers_version", "torch_dtype", "dtype", "_name_or_path"):
        d.pop(k, None)
    cfg = transformers.AutoConfig.for_model(mt, **d)
    cfg._attn_implementation = attention
    return cfg


def make_model(spec: dict):
    family, attention = spec["family"], spec["attention"]
    cfg = config_from_dict(spec["config"], attention) if spec.get("config") else make_config(family, attention)
    cls = getattr(transformers, MODEL_CLASSES[cfg.model_type])
    torch.manual_seed(0)
    model = cls(cfg)
    model.config._attn_implementation = attention
    # What the HF Trainer does (TrainingArguments.use_cache defaults to False).
    # With use_cache=True and no checkpointing, every layer would build a
    # DynamicCache and torch.cat([empty, k]) copies of k and v.
    model.config.use_cache = False
    record_routing(model, cfg.model_type)
    return model


def layers_of(model, family):
    if family == "gpt_neox":
        return model.gpt_neox.layers
    return model.transformer.h if family == "gpt2" else model.model.layers


def json_config(model) -> dict:
    out = {}
    for k, v in model.config.to_dict().items():
        try:
            json.dumps(v)
        except (TypeError, ValueError):
            continue
        out[k] = v
    return out


# --------------------------------------------------------------------------
# probe
# --------------------------------------------------------------------------
def _storage(t: torch.Tensor):
    try:
        return t.untyped_storage()
    except Exception:  # noqa: BLE001 - tensors without storage
        return None


def node_to_op(name: str | None) -> str | None:
    if not name:
        return None
    base = re.sub(r"Backward\d*$", "", name)
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", base).lower()
    return "aten." + snake


_entry_serial = itertools.count()


class Entry:
    __slots__ = ("ref", "nbytes", "kind", "producer", "module", "region", "serial")

    def __init__(self, ref, nbytes, kind, producer, module, region):
        # serial: a StorageImpl freed during the recording can be reallocated at the same
        # address (_cdata); the saved-tensor view keys storages by (address, serial) so that
        # a later storage is never taken for the freed one (FINDINGS R-MOE-9)
        self.serial = next(_entry_serial)
        self.ref = ref
        self.nbytes = nbytes
        self.kind = kind
        self.producer = producer
        self.module = module
        self.region = region


class SavedHandle:
    """What our pack hook returns: keeps the (detached) tensor alive exactly as
    long as autograd keeps the saved variable, and points at its metadata."""

    __slots__ = ("tensor", "meta")

    def __init__(self, tensor, meta):
        self.tensor = tensor
        self.meta = meta


class Probe(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.live: dict[int, Entry] = {}
        self.dev = 0
        self.host = 0
        self.params: dict[int, str] = {}  # storage key -> param name
        self.cast_of: dict[int, str] = {}  # storage key -> param name it is a cast copy of
        self.phase = "idle"
        self.micro = 0
        self.region = "-"
        self.module_stack: list[str] = []
        self.last_op = None
        self.in_hook = 0
        self.in_offload_pack = 0
        self.peak = 0
        self.peak_where = None
        self.peak_phase = None
        self.window_max = 0
        self.timeline: list[dict] = []
        self.record_saved = False
        self.saved: list[dict] = []
        self.offload_records: list[dict] = []
        self.record_offload = False
        self.layer_live_before: dict[int, int] = {}
        self.layer_retained: dict[int, int] = {}
        self.record_retained = False
        self.r512 = 0  # live bytes with every storage rounded up to 512 B
        self.tracing = False  # record live bytes after every aten op (trace)
        self.trace: list[list] = []
        self.peak_r512 = 0

    # -- storage bookkeeping ------------------------------------------------
    def _key(self, st):
        return st._cdata

    def track(self, t: torch.Tensor, producer=None, kind=None):
        if not isinstance(t, torch.Tensor) or t.device.type == "meta":
            return None
        st = _storage(t)
        if st is None:
            return None
        key = st._cdata
        e = self.live.get(key)
        if e is not None:
            return e
        from torch.multiprocessing.reductions import StorageWeakRef

        n = st.nbytes()
        if kind is None:
            kind = "host" if self.in_offload_pack else "device"
        e = Entry(StorageWeakRef(st), n, kind, producer, self.module_stack[-1] if self.module_stack else None, self.region)
        self.live[key] = e
        if kind == "device":
            self.dev += n
            self.r512 += (n + 511) // 512 * 512
        else:
            self.host += n
        return e

    def poll(self):
        expired = torch.UntypedStorage._expired
        dead = [k for k, e in self.live.items() if expired(e.ref.cdata)]
        for k in dead:
            e = self.live.pop(k)
            if e.kind == "device":
                self.dev -= e.nbytes
                self.r512 -= (e.nbytes + 511) // 512 * 512
            else:
                self.host -= e.nbytes
            self.cast_of.pop(k, None)

    def where(self):
        mod = self.module_stack[-1] if self.module_stack else "-"
        rc = "(recompute)" if (self.phase == "backward" and self.module_stack) else ""
        return f"micro{self.micro}/{self.phase}/{self.region}{rc}/{mod}/{self.last_op}"

    def check_peak(self):
        if self.dev > self.window_max:
            self.window_max = self.dev
        if self.dev > self.peak:
            self.peak = self.dev
            self.peak_phase = self.phase
            self.peak_where = self.where()
        if self.r512 > self.peak_r512:
            self.peak_r512 = self.r512

    def event(self, name):
        self.poll()
        self.check_peak()
        self.timeline.append(
            {"event": name, "live_bytes": self.dev, "host_bytes": self.host, "max_since_prev": self.window_max}
        )
        self.window_max = self.dev

    def reset_peak(self):
        self.poll()
        self.peak = self.dev
        self.peak_phase = self.phase
        self.peak_where = self.where()
        self.peak_r512 = self.r512
        self.window_max = self.dev

    # -- dispatch -----------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        opname = f"aten.{func.overloadpacket.__name__}"
        if not self.in_hook:
            self.last_op = opname
        self.poll()
        flat_in, _ = tree_flatten((args, kwargs))
        for t in flat_in:
            if isinstance(t, torch.Tensor):
                self.track(t, producer="(pre-existing)")
        flat_out, _ = tree_flatten(out)
        for t in flat_out:
            if isinstance(t, torch.Tensor):
                self.track(t, producer=opname)
        # autocast weight-cast copies: _to_copy of a parameter
        if func.overloadpacket in (torch.ops.aten._to_copy, torch.ops.aten.to) and args and isinstance(args[0], torch.Tensor):
            src = _storage(args[0])
            if src is not None and src._cdata in self.params and isinstance(out, torch.Tensor):
                dst = _storage(out)
                if dst is not None and dst._cdata != src._cdata:
                    self.cast_of[dst._cdata] = self.params[src._cdata]
        self.check_peak()
        if self.tracing:
            outb = [t.untyped_storage().nbytes() for t in flat_out if isinstance(t, torch.Tensor) and t.device.type != "meta"]
            self.trace.append([self.where(), self.dev, outb])
        return out

    # -- saved tensors hooks (outermost; checkpoint's own hooks win inside
    #    non-reentrant checkpointed layers) ---------------------------------
    def pack(self, t):
        self.in_hook += 1
        try:
            st = _storage(t)
            key = st._cdata if st is not None else None
            e = self.live.get(key) if key is not None else None
            if e is None and st is not None:
                e = self.track(t, producer="(untracked)")
            meta = None
            if self.record_saved:
                op_hint = self.last_op
                f = sys._getframe(1)
                while f is not None:
                    if f.f_code.co_name == "save_inputs" and "checkpoint" in f.f_code.co_filename:
                        op_hint = "checkpoint.save_inputs"
                        break
                    f = f.f_back
                meta = {
                    "seq": len(self.saved),
                    "region": self.region,
                    "module": self.module_stack[-1] if self.module_stack else ("loss" if self.phase == "loss" else None),
                    "last_op": op_hint,
                    "shape": list(t.shape),
                    "stride": list(t.stride()),
                    "dtype": str(t.dtype).replace("torch.", ""),
                    "storage_key": (key, e.serial) if e is not None else key,
                    "bytes": st.nbytes() if st is not None else 0,
                    "view_bytes": t.numel() * t.element_size(),
                    "param": self.params.get(key),
                    "cast_of_param": self.cast_of.get(key),
                    "produced_by": e.producer if e else None,
                    "produced_in": (e.region + "/" + (e.module or "-")) if e else None,
                    "nodes": [],
                }
                self.saved.append(meta)
            return SavedHandle(t.detach(), meta)
        finally:
            self.in_hook -= 1

    def unpack(self, h):
        if h.meta is not None:
            node = torch._C._current_autograd_node()
            h.meta["nodes"].append(node.name() if node is not None else None)
        return h.tensor


PROBE: Probe | None = None


class CudaAutocastLists(torch.overrides.TorchFunctionMode):
    """Emulates, on CPU, the ops that CUDA autocast runs in fp32 but CPU
    autocast leaves in bf16 (precision "amp-bf16-cudalists").

    CUDA autocast (aten/src/ATen/autocast_mode.cpp) has an fp32 policy for
    pow, rsqrt, exp, log, reciprocal, layer_norm, group_norm, nll_loss,
    cross_entropy, ... (inputs cast to fp32: a copy) and an
    fp32_set_opt_dtype policy for softmax, log_softmax, sum, cumsum, prod
    (computed with dtype=float32, no input copy). CPU autocast has neither
    for these ops. Active only while CPU autocast is enabled, so it also
    covers the checkpoint recompute (which re-enters autocast).
    """

    F = torch.nn.functional
    FP32_CAST = {
        torch.pow, torch.Tensor.pow, torch.Tensor.__pow__, torch.Tensor.__rpow__,
        torch.rsqrt, torch.Tensor.rsqrt, torch.exp, torch.Tensor.exp, torch.log, torch.Tensor.log,
        torch.reciprocal, torch.Tensor.reciprocal, torch.layer_norm, F.layer_norm, F.group_norm,
        F.nll_loss, F.cross_entropy, F.softplus, F.mse_loss,
    }
    FP32_OPT_DTYPE = {
        torch.softmax, torch.Tensor.softmax, F.softmax, torch.log_softmax, torch.Tensor.log_softmax,
        F.log_softmax, torch.sum, torch.Tensor.sum, torch.cumsum, torch.Tensor.cumsum,
    }

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if torch.is_autocast_enabled("cpu"):
            low = (torch.bfloat16, torch.float16)
            if func in self.FP32_CAST:
                def cast(x):
                    if isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype in low:
                        return x.float()
                    return x
                args = tuple(cast(a) for a in args)
                kwargs = {k: cast(v) for k, v in kwargs.items()}
            elif func in self.FP32_OPT_DTYPE and kwargs.get("dtype") is None:
                x = args[0] if args else kwargs.get("input")
                if isinstance(x, torch.Tensor) and x.dtype in low:
                    kwargs["dtype"] = torch.float32
        return func(*args, **kwargs)


class ProbeSaveOnCpu(torch.autograd.graph.saved_tensors_hooks):
    """Stand-in for torch.autograd.graph.save_on_cpu as transformers uses it.

    On a machine without CUDA, torch.empty(pin_memory=True) raises, so the
    real class (with device_type="cpu", torch.cpu.is_available() is True)
    cannot run here.  This does the same thing - a fresh contiguous host
    tensor of the saved view's size, copy_ into it - but accounts the copy as
    host memory, and on unpack makes a fresh "device" copy (clone), which is
    what `tensor.to("cuda")` allocates on a GPU machine.
    """

    def __init__(self, pin_memory: bool = False, device_type: str = "cuda") -> None:
        probe = PROBE

        def pack_to_cpu(tensor):
            probe.in_offload_pack += 1
            probe.in_hook += 1
            try:
                packed = torch.empty(tensor.size(), dtype=tensor.dtype, layout=tensor.layout)
                packed.copy_(tensor)
            finally:
                probe.in_offload_pack -= 1
                probe.in_hook -= 1
            if probe.record_offload:
                probe.offload_records.append(
                    {
                        "region": probe.region,
                        "shape": list(tensor.shape),
                        "dtype": str(tensor.dtype).replace("torch.", ""),
                        "bytes": packed.numel() * packed.element_size(),
                    }
                )
            return (tensor.device, packed)

        def unpack_from_cpu(packed):
            device, tensor = packed
            probe.in_hook += 1
            try:
                return tensor.clone()  # emulates the host->device copy
            finally:
                probe.in_hook -= 1

        super().__init__(pack_to_cpu, unpack_from_cpu)


# --------------------------------------------------------------------------
# one case
# --------------------------------------------------------------------------
def case_name(family, precision, attention, n, offload, b, s):
    ck = "off" if n == 0 else str(n)
    return f"{family}-{precision}-{attention}-n{ck}-{'offload' if offload else 'plain'}-b{b}s{s}"


def all_cases():
    out = []
    for fam in FAMILIES:
        for prec in PRECISIONS:
            for attn in ATTENTIONS:
                for n, off in CKPT:
                    for b, s in SHAPES:
                        out.append((fam, prec, attn, n, off, b, s))
    return out


def unique_bytes(tensors):
    seen = {}
    for t in tensors:
        if isinstance(t, torch.Tensor):
            st = t.untyped_storage()
            seen[st._cdata] = st.nbytes()
    return sum(seen.values())


def state_tensors(model, opt):
    params = list(model.parameters())
    grads = [p.grad for p in params if p.grad is not None]
    bufs = list(model.buffers())
    states = [v for stt in opt.state.values() for v in stt.values() if isinstance(v, torch.Tensor)]
    return params, grads, bufs, states


def track_state(probe, model, opt, extra=(), c=None):
    """extra: resident tensors that are none of the four kinds (bitsandbytes' quantization
    statistics, probe_peft.py). c.state_tensors(): a case's own four lists (a wrapper's
    local shards, probe_dist.py)."""
    f = getattr(c, "state_tensors", None)
    params, grads, bufs, states = f() if f else state_tensors(model, opt)
    for t in extra:
        probe.track(t, producer="resident", kind="device")
    for t in params:
        probe.track(t, producer="parameter", kind="device")
    for t in grads:
        probe.track(t, producer="grad", kind="device")
    for t in bufs:
        probe.track(t, producer="buffer", kind="device")
    for t in states:
        probe.track(t, producer="optimizer_state", kind="device")


def foreach_optimizer_probe(model, opt, probe, extra=()):
    """Transient bytes of one AdamW(foreach=True) step - the CUDA default -
    from the steady state reached by `opt` (states present, grads set), over the
    parameters that train (all of them in full fine-tuning)."""
    params = [p for p in model.parameters() if p.requires_grad]
    gen = torch.Generator().manual_seed(99)
    for p in params:
        p.grad = (torch.randn(p.shape, generator=gen) * 1e-3).to(p.dtype)
    opt2 = torch.optim.AdamW(params, lr=1e-3, foreach=True)
    opt2.load_state_dict(opt.state_dict())
    for g in opt2.param_groups:  # load_state_dict restored the first optimizer's flags
        g["foreach"] = True
        g["fused"] = False
    with probe:
        probe.phase = "optimizer"
        probe.region = "-"
        probe.micro = 0
        probe.last_op = None
        track_state(probe, model, opt2, extra)
        probe.reset_peak()
        before = probe.dev
        opt2.step()
        probe.poll()
        res = {"transient_bytes": probe.peak - before, "peak_where": probe.peak_where, "before_bytes": before}
    model.zero_grad(set_to_none=True)
    del opt2
    return res


def setup(spec: dict):
    """The model, optimizer and settings of a case, as both measurements start."""
    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    c = argparse.Namespace()
    c.family, c.precision, c.attention = spec["family"], spec["precision"], spec["attention"]
    c.every_n, c.offload, c.b, c.s = spec["every_n"], spec["offload"], spec["b"], spec["s"]
    c.grad_accum = spec.get("grad_accum", GRAD_ACCUM)
    c.warmup = spec.get("warmup", "step")
    model = make_model(spec)
    if c.precision == "bf16":
        model = model.to(torch.bfloat16)
    model.train()
    if c.every_n:
        model.gradient_checkpointing_enable(every_n_layers=c.every_n, offload=c.offload)
    c.model = model
    c.layers = layers_of(model, c.family)
    c.ckpt_layers = [i for i, l in enumerate(c.layers) if getattr(l, "gradient_checkpointing", False)]
    c.nlayers = len(c.layers)
    c.params = list(model.parameters())
    c.opt = torch.optim.AdamW(c.params, lr=1e-3, fused=True)  # what the planner models (HF: adamw_torch_fused)
    c.amp = c.precision.startswith("amp-bf16")
    c.cuda_lists = c.precision == "amp-bf16-cudalists"
    c.steps = STEPS if c.warmup == "step" else 1
    uniq = {}
    for p in c.params:
        uniq[p.untyped_storage()._cdata] = p.untyped_storage().nbytes()
    c.param_info = {"count": sum(p.numel() for p in c.params), "bytes": sum(uniq.values()), "tensors": len(c.params)}
    gen = torch.Generator().manual_seed(1234)
    vocab = model.config.vocab_size
    c.next_ids = lambda: torch.randint(3, vocab, (c.b, c.s), generator=gen)
    c.virtual_states = 0
    if c.warmup == "states":
        # the steady state without a first forward/backward: AdamW creates its states
        # (exp_avg, exp_avg_sq, step) in its first step, whatever the gradients are
        for p in c.params:
            p.grad = torch.zeros_like(p)
        c.opt.step()
        model.zero_grad(set_to_none=True)
    elif c.warmup == "virtual":
        # too big for this machine's RAM: AdamW's states (exp_avg and exp_avg_sq in the
        # parameter dtype, one fp32 step scalar per parameter) counted, not allocated
        c.virtual_states = 2 * c.param_info["bytes"] + 4 * len(c.params)
    return c


def forward_loss(c, ids):
    model = getattr(c, "forward_model", None) or c.model  # a wrapper (DDP, DeepSpeed's engine) runs the forward
    if c.amp:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return model(input_ids=ids, labels=ids).loss / c.grad_accum
    return model(input_ids=ids, labels=ids).loss / c.grad_accum


# A case may bring its own training-loop operations (probe_dist.py: the Trainer's no_sync,
# DeepSpeed's engine.backward / engine.step); these are the single-process defaults.
def micro_context(c, micro):
    """Around one micro-step's forward and backward."""
    f = getattr(c, "micro_context", None)
    return f(micro) if f else contextlib.nullcontext()


def optimizer_step(c):
    f = getattr(c, "optimizer_step", None)
    return f() if f else c.opt.step()


def zero_grad(c):
    f = getattr(c, "zero_grad", None)
    return f() if f else c.model.zero_grad(set_to_none=True)


def backward(c, loss):
    if getattr(c, "run_backward", None):
        c.run_backward(loss)
    elif c.cuda_lists:
        # loss.backward() would be handled by the function mode, which runs it with the
        # mode popped; the engine entry keeps the mode on for the checkpoint recompute.
        torch.autograd.graph._engine_run_backward(
            (loss,), (torch.ones_like(loss),), False, False, (),
            allow_unreachable=True, accumulate_grad=True)
    else:
        loss.backward()


def run_case(spec: dict, setup_fn=None):
    """One measured case: the storage tracker's pass (saved tensors, offload, a timeline)
    and the allocator's pass (live bytes, allocs.py), merged into one fixture.
    setup_fn(spec) builds the model and optimizer (default: setup; probe_peft.py passes its
    own); what it returns may list `resident` tensors that stay alive but are neither
    parameters, gradients, buffers nor optimizer states."""
    global ROUTING
    ROUTING = []
    fx = run_storage_pass(spec, setup_fn)
    routing, ROUTING = ROUTING, []
    alloc_steps = run_alloc_pass(spec, setup_fn)
    alloc_routing, ROUTING = ROUTING, None
    for st, al in zip(fx["steps"], alloc_steps):
        st["storage_tracker"] = {k: st[k] for k in STORAGE_KEYS if k in st}
        st.update(al)
    if routing:
        fx["moe_routing"] = routing_summary(routing, alloc_routing, fx)
    return fx


def routing_summary(routing, alloc_routing, fx):
    """The tokens each expert received per MoE layer in every forward (step, micro-step),
    whether each checkpoint recompute routed as its forward did, and whether the
    allocator's pass routed as the storage pass (the planner is given the latter's)."""
    fwd = [(i, c) for i, c, rec in routing if not rec]
    layers = sorted({i for i, _ in fwd})
    ga = fx["setting"]["grad_accum"]
    forwards = []
    for k in range(len(fwd) // len(layers)):
        chunk = fwd[k * len(layers):(k + 1) * len(layers)]
        forwards.append({"step": k // ga + 1, "micro": k % ga + 1,
                         "tokens_per_expert": {f"layer.{i}": c for i, c in chunk}})
    by_layer: dict = {}
    for i, c in fwd:
        by_layer.setdefault(i, []).append(c)
    recomputed = [(i, c) for i, c, rec in routing if rec]
    return {"experts_implementation": EXPERTS_IMPL,
            "forwards": forwards, "recompute_calls": len(recomputed),
            "recompute_routing_identical": all(c in by_layer.get(i, []) for i, c in recomputed),
            "allocation_pass_identical": [(i, c) for i, c, r in alloc_routing if not r] == fwd}


# what the allocator's pass measures; the storage tracker's values are kept beside them
STORAGE_KEYS = ("live_peak_bytes", "live_peak_bytes_round512", "peak_phase", "peak_where", "after_forward_bytes",
                "after_forward_bytes_micro", "after_backward_bytes_micro", "optimizer_peak_bytes",
                "optimizer_peak_where", "optimizer_transient_bytes", "optimizer_after_bytes", "live_at_end_bytes",
                "host_peak_bytes")


class AllocSaveOnCpu(torch.autograd.graph.saved_tensors_hooks):
    """ProbeSaveOnCpu for the allocator's pass: the packed copy is host memory."""

    def __init__(self, pin_memory: bool = False, device_type: str = "cuda") -> None:
        def pack_to_cpu(tensor):
            with allocs.host():
                packed = torch.empty(tensor.size(), dtype=tensor.dtype, layout=tensor.layout)
                packed.copy_(tensor)
            return (tensor.device, packed)

        def unpack_from_cpu(packed):
            return packed[1].clone()  # the host-to-device copy

        super().__init__(pack_to_cpu, unpack_from_cpu)


def run_alloc_pass(spec: dict, setup_fn=None):
    """Live bytes of every step from the CPU allocator (allocs.py): no dispatch mode, no
    saved-tensor hooks, only record_function markers.
    spec["record_setup"]: one recording from before setup_fn to the last step, live bytes
    counted from zero (for wrappers that hold memory no Python reference reaches, e.g. DDP's
    buckets, or free in a step what an earlier one allocated); otherwise one recording per
    step over a baseline of the state tensors."""
    whole = bool(spec.get("record_setup"))
    outer = contextlib.ExitStack()
    prof_all = outer.enter_context(allocs.recorder()) if whole else None
    try:
        c = (setup_fn or setup)(spec)
        out = _alloc_steps(c, spec, prof_all)
    finally:
        outer.close()
    if whole:
        tl = allocs.Timeline(allocs.trace_events(prof_all), 0)
        out = [_alloc_figures(tl, c, spec, step, 0) for step in range(1, c.steps + 1)]
    return out


def _alloc_steps(c, spec, prof_all):
    """Runs the steps; with prof_all (one recording) returns nothing measured yet."""
    resident = list(getattr(c, "resident", ()))
    model, opt, L = c.model, c.opt, c.nlayers
    handles = []
    state = {"phase": "idle", "micro": 0}

    def layer_pre(i):
        def hook(mod, args, kwargs):
            if state["phase"] == "forward":
                allocs.mark(f"region::layer.{i}")
        return hook

    def recompute_pre(i):
        # a checkpoint re-runs the layer's wrapped forward: its submodules' hooks fire
        def hook(mod, args):
            if state["phase"] == "backward":
                allocs.mark(f"recompute::layer.{i}")
        return hook

    def last_post(mod, args, kwargs, out):
        if state["phase"] == "forward":
            allocs.mark("region::head")

    def lm_post(mod, args, out):
        if state["phase"] == "forward":
            allocs.mark(f"loss::micro{state['micro']}")

    for i, l in enumerate(c.layers):
        handles.append(l.register_forward_pre_hook(layer_pre(i), with_kwargs=True))
        for sub in l.children():
            handles.append(sub.register_forward_pre_hook(recompute_pre(i)))
    handles.append(c.layers[L - 1].register_forward_hook(last_post, with_kwargs=True))
    handles.append(model.lm_head.register_forward_hook(lm_post))
    # the CPU RNG state a checkpoint keeps is host memory on a GPU machine
    real_get, real_set = torch.get_rng_state, torch.set_rng_state

    def get_rng_state():
        with allocs.host():
            return real_get()

    def set_rng_state(st):
        with allocs.host():
            return real_set(st)

    torch.get_rng_state, torch.set_rng_state = get_rng_state, set_rng_state
    hf_modeling_utils.save_on_cpu = AllocSaveOnCpu
    out = []
    try:
        for step in range(1, c.steps + 1):
            baseline = None
            if not prof_all:
                pa, gr, bu, stt = state_tensors(model, opt)
                baseline = unique_bytes(pa + gr + bu + stt + resident) + c.virtual_states
            with (contextlib.nullcontext(prof_all) if prof_all else allocs.recorder()) as prof:
                allocs.mark(f"start::step{step}")
                for micro in range(1, c.grad_accum + 1):
                    ids = c.next_ids()
                    with micro_context(c, micro):
                        state.update(phase="forward", micro=micro)
                        emu = CudaAutocastLists() if c.cuda_lists else contextlib.nullcontext()
                        with allocs.span(f"micro{micro}/forward"), emu:
                            allocs.mark("region::embedding")
                            loss = forward_loss(c, ids)
                        allocs.mark(f"fwd_end::micro{micro}")
                        state["phase"] = "backward"
                        emu = CudaAutocastLists() if c.cuda_lists else contextlib.nullcontext()
                        with allocs.span(f"micro{micro}/backward"), emu:
                            backward(c, loss)
                            del loss
                        allocs.mark(f"bwd_end::micro{micro}")
                    del ids
                state["phase"] = "optimizer"
                with allocs.span("optimizer"):
                    if not c.virtual_states:
                        optimizer_step(c)
                state["phase"] = "zero_grad"
                with allocs.span("zero_grad"):
                    zero_grad(c)
                allocs.mark("end")
            if not prof_all:
                out.append(_alloc_figures(allocs.Timeline(allocs.trace_events(prof), baseline), c, spec, step,
                                          baseline))
    finally:
        torch.get_rng_state, torch.set_rng_state = real_get, real_set
        hf_modeling_utils.save_on_cpu = torch.autograd.graph.save_on_cpu
        for h in handles:
            h.remove()
    return out


def _alloc_figures(tl, c, spec, step, baseline):
    """One step's figures from a timeline: the step's own recording, or the window between
    its start mark and its end mark in one whole-run recording."""
    t0 = next(t for t, n in tl.marks if n == f"start::step{step}")
    t_end = next(t for t, n in tl.marks if n == "end" and t >= t0)
    marks = dict((n, t) for t, n in tl.marks if t0 <= t <= t_end)
    t_opt = next((s, e) for s, e, n in tl.spans if n == "optimizer" and s >= t0)
    peak, where, phase = tl.peak(t0, t_opt[0])
    opt_peak, opt_where, _ = tl.peak(t_opt[0], t_opt[1])
    before_opt = tl.live_at(t_opt[0])
    after_fwd = [tl.live_at(marks[f"fwd_end::micro{m}"]) for m in range(1, c.grad_accum + 1)]
    after_bwd = [tl.live_at(marks[f"bwd_end::micro{m}"]) for m in range(1, c.grad_accum + 1)]
    if opt_peak > peak:
        peak, where, phase = opt_peak, opt_where, "optimizer"
    out = {
        "live_bytes_source": "allocator (torch.profiler, profile_memory)",
        "live_at_start_bytes": tl.live_at(t0) if spec.get("record_setup") else baseline,
        "live_peak_bytes": peak,
        "peak_phase": phase or "idle",
        "peak_where": where or "-",
        # regions within 2% of the peak: a planned peak location counts as right
        # where the measured bytes come within tolerance (near ties)
        "region_peaks": tl.region_peaks(t0, t_opt[1], peak * 0.98),
        "after_forward_bytes": after_fwd[0],
        "after_forward_bytes_micro": after_fwd,
        "after_backward_bytes_micro": after_bwd,
        "optimizer_before_bytes": before_opt,
        "optimizer_peak_bytes": opt_peak,
        "optimizer_peak_where": opt_where,
        "optimizer_transient_bytes": opt_peak - before_opt,
        "optimizer_after_bytes": tl.live_at(t_opt[1]),
        "live_at_end_bytes": tl.live_at(t_end),
        "host_peak_bytes": tl.host_peak(t0, t_end),
        "kernel_scratch_peak_bytes": tl.scratch_peak_in(t0, t_end),
    }
    if spec.get("trace"):
        # every allocation and free of the step: where, bytes, kind, device bytes after it
        lo, hi = tl.index_range(t0, t_end)
        out["alloc_trace"] = [[tl.where(i)[0], tl.mems[i].nbytes, tl.mems[i].kind, tl.cur[i]] for i in range(lo, hi)]
    return out


def run_storage_pass(spec: dict, setup_fn=None):
    """One measured case. spec: family, precision, attention, every_n, offload, b, s and
    optionally config (a config.json dict; default: the tiny model of the family),
    grad_accum (2), warmup ("step": a real first step; "states": the optimizer states
    made by one step on zero gradients, without a forward; "virtual": the states are
    not allocated, their bytes are counted as a constant), foreach (the extra foreach
    AdamW step, default True), trace (record live bytes after every aten op)."""
    global PROBE
    cs = (setup_fn or setup)(spec)
    resident = list(getattr(cs, "resident", ()))
    family, precision, attention = cs.family, cs.precision, cs.attention
    every_n, offload, b, s = cs.every_n, cs.offload, cs.b, cs.s
    grad_accum, warmup, steps = cs.grad_accum, cs.warmup, cs.steps
    model, layers, ckpt_layers, nlayers = cs.model, cs.layers, cs.ckpt_layers, cs.nlayers
    params, opt, amp, cuda_lists = cs.params, cs.opt, cs.amp, cs.cuda_lists
    param_info = cs.param_info

    probe = (getattr(cs, "probe_class", None) or Probe)()  # probe_dist.py: collectives, wrappers' parameters
    probe.tracing = bool(spec.get("trace"))
    PROBE = probe
    hf_modeling_utils.save_on_cpu = ProbeSaveOnCpu

    # param storages
    for name, p in model.named_parameters():
        st = _storage(p)  # None for a DTensor (FSDP2's sharded parameters)
        if st is not None:
            probe.params[st._cdata] = name

    # module-name stack hooks
    names = {m: n for n, m in model.named_modules()}
    handles = []

    def short(n):
        for pre in ("model.", "transformer."):
            if n.startswith(pre):
                return n[len(pre):]
        return n

    def pre_hook(mod, args):
        probe.module_stack.append(short(names[mod]))

    def post_hook(mod, args, out):
        if probe.module_stack:
            probe.module_stack.pop()

    for n_, m in model.named_modules():
        if n_ == "":
            continue
        handles.append(m.register_forward_pre_hook(pre_hook))
        handles.append(m.register_forward_hook(post_hook))

    # region hooks on layers (outside the checkpoint: transformers wraps forward)
    def first_tensor(x):
        if isinstance(x, torch.Tensor):
            return x
        if isinstance(x, (tuple, list)):
            for y in x:
                t = first_tensor(y)
                if t is not None:
                    return t
        if hasattr(x, "to_tuple"):
            return first_tensor(x.to_tuple())
        return None

    def make_layer_hooks(i):
        def lpre(mod, args, kwargs):
            if probe.phase not in ("forward",):
                return
            probe.region = f"layer.{i}"
            probe.event(f"micro{probe.micro}.forward.layer.{i}.start")
            probe.layer_live_before[i] = probe.dev
            hs = args[0] if args else kwargs.get("hidden_states")
            if isinstance(hs, torch.Tensor) and hs.requires_grad:
                m = probe.micro

                def on_grad(g, i=i, m=m):
                    probe.module_stack.clear()
                    probe.region = f"layer.{i - 1}" if i > 0 else "embedding"
                    probe.event(f"micro{m}.backward.layer.{i}.end")
                    return None

                hs.register_hook(on_grad)

        def lpost(mod, args, kwargs, out):
            if probe.phase not in ("forward",):
                return
            t = first_tensor(out)
            probe.poll()
            out_bytes = 0
            if t is not None:
                st = _storage(t)
                if st is not None and probe.live.get(st._cdata) is not None:
                    e = probe.live[st._cdata]
                    if e.region == f"layer.{i}":
                        out_bytes = e.nbytes
            if probe.record_retained:
                probe.layer_retained[i] = probe.dev - probe.layer_live_before[i] - out_bytes
            probe.event(f"micro{probe.micro}.forward.layer.{i}.end")
            probe.region = "head" if i == nlayers - 1 else f"layer.{i}"
            if t is not None and t.requires_grad:
                m = probe.micro

                def on_grad(g, i=i, m=m):
                    probe.module_stack.clear()
                    probe.region = f"layer.{i}"
                    probe.event(f"micro{m}.backward.layer.{i}.start")
                    return None

                t.register_hook(on_grad)

        return lpre, lpost

    for i, l in enumerate(layers):
        a, c = make_layer_hooks(i)
        handles.append(l.register_forward_pre_hook(a, with_kwargs=True))
        handles.append(l.register_forward_hook(c, with_kwargs=True))

    # head: final norm + lm_head + loss. The loss phase starts after lm_head.
    lm_head = model.lm_head

    def lm_post(mod, args, out):
        if probe.phase == "forward":
            probe.event(f"micro{probe.micro}.forward.logits")
            probe.phase = "loss"

    handles.append(lm_head.register_forward_hook(lm_post))

    inputs = [cs.next_ids() for _ in range(steps * grad_accum)]
    virtual_states = cs.virtual_states
    probe.dev += virtual_states

    steps_out = []
    saved_meta = None
    offload_meta = None
    retained = None
    for step in range(1, steps + 1):
        probe.timeline = []
        probe.trace = []
        probe.phase = "idle"
        probe.micro = 0
        probe.region = "-"
        track_state(probe, model, opt, resident, cs)
        probe.reset_peak()
        probe.event("step.start")
        after_forward = []
        after_backward = []
        for micro in range(1, grad_accum + 1):
            ids = inputs[(step - 1) * grad_accum + micro - 1]
            record = step == steps and micro == 1
            probe.record_saved = record
            probe.record_offload = record
            probe.record_retained = record
            if record:
                probe.saved = []
                probe.offload_records = []
                probe.layer_retained = {}
            probe.micro = micro
            probe.phase = "forward"
            probe.region = "embedding"
            probe.module_stack.clear()
            probe.event(f"micro{micro}.forward.start")
            with micro_context(cs, micro):
                emu = CudaAutocastLists() if cuda_lists else contextlib.nullcontext()
                with torch.autograd.graph.saved_tensors_hooks(probe.pack, probe.unpack), emu:
                    with probe:
                        loss = forward_loss(cs, ids)
                probe.record_saved = False
                probe.record_offload = False
                probe.record_retained = False
                probe.module_stack.clear()
                emu = CudaAutocastLists() if cuda_lists else contextlib.nullcontext()
                with probe, emu:
                    probe.event(f"micro{micro}.forward.end")
                    after_forward.append(probe.dev)
                    probe.phase = "backward"
                    probe.region = "head"
                    backward(cs, loss)
                    del loss
                    probe.module_stack.clear()
                    probe.region = "-"
                    probe.event(f"micro{micro}.backward.end")
                    after_backward.append(probe.dev)
            if record:
                saved_meta = probe.saved
                offload_meta = probe.offload_records
                retained = dict(probe.layer_retained)
        with probe:
            probe.phase = "optimizer"
            probe.region = "-"
            probe.last_op = None
            track_state(probe, model, opt, resident, cs)
            probe.event("optimizer.start")
            before_opt = probe.dev
            peak_before_opt, where_before, phase_before, r512_before = (
                probe.peak, probe.peak_where, probe.peak_phase, probe.peak_r512)
            probe.peak = probe.dev
            if not virtual_states:
                optimizer_step(cs)
            probe.poll()
            opt_peak = probe.peak
            opt_where = probe.peak_where
            probe.event("optimizer.end")
            after_opt = probe.dev
            # merge optimizer window into the step peak
            if peak_before_opt >= opt_peak:
                probe.peak, probe.peak_where, probe.peak_phase = peak_before_opt, where_before, phase_before
            probe.peak_r512 = max(probe.peak_r512, r512_before)
            probe.phase = "zero_grad"
            zero_grad(cs)
            probe.event("zero_grad.end")
        pa, gr, bu, stt = (cs.state_tensors if getattr(cs, "state_tensors", None) else
                           lambda: state_tensors(model, opt))()
        steps_out.append(
            {
                "step": step,
                "live_at_start_bytes": probe.timeline[0]["live_bytes"],
                "live_peak_bytes": probe.peak,
                "live_peak_bytes_round512": probe.peak_r512,
                "peak_phase": probe.peak_phase,
                "peak_where": probe.peak_where,
                "after_forward_bytes": after_forward[0],
                "after_forward_bytes_micro": after_forward,
                "after_backward_bytes_micro": after_backward,
                "optimizer_before_bytes": before_opt,
                "optimizer_peak_bytes": opt_peak,
                "optimizer_peak_where": opt_where,
                "optimizer_transient_bytes": opt_peak - before_opt,
                "optimizer_after_bytes": after_opt,
                "live_at_end_bytes": probe.dev,
                "optimizer_state_bytes": virtual_states or unique_bytes(stt),
                **({"optimizer_states_virtual": True} if virtual_states else {}),
                "buffer_bytes": unique_bytes(bu),
                "host_peak_bytes": max(ev["host_bytes"] for ev in probe.timeline),
                "timeline": probe.timeline,
            }
        )
        if probe.tracing:
            steps_out[-1]["trace"] = probe.trace

    for h in handles:
        h.remove()
    opt_foreach = foreach_optimizer_probe(model, opt, probe, resident) if spec.get("foreach", True) and not virtual_states else None
    hf_modeling_utils.save_on_cpu = torch.autograd.graph.save_on_cpu

    # ---- assemble saved-tensor view -------------------------------------
    def region_index(r):
        if r == "embedding":
            return ("embedding", None)
        if r.startswith("layer."):
            return ("layer", int(r.split(".")[1]))
        return ("head", None)

    seen_keys = {}
    groups = {"embedding": [], "head": []}
    layer_groups = {i: [] for i in range(nlayers)}
    for m in saved_meta:
        key = m["storage_key"]
        nodes = [n for n in m["nodes"] if n]
        node = nodes[0] if nodes else None
        if m["last_op"] == "checkpoint.save_inputs":
            # saved by torch.utils.checkpoint's frame (its inputs), unpacked
            # when the recompute starts, under whatever node triggered it
            node = "CheckpointFrame.save_inputs"
        if key in seen_keys:
            first = seen_keys[key]
            first["saved_by"].append(node or m["last_op"])
            if first["_region"] != m["region"]:
                first.setdefault("also_saved_in", []).append(m["region"])
            continue
        ent = {
            "op": (node_to_op(node) if node and not node.startswith("Checkpoint") else m["last_op"]),
            "node": node,
            "last_op": m["last_op"],
            "module": m["module"],
            "shape": m["shape"],
            "dtype": m["dtype"],
            "bytes": m["bytes"],
            "param": m["param"] is not None,
            "param_name": m["param"],
            "cast_of_param": m["cast_of_param"],
            "produced_by": m["produced_by"],
            "produced_in": m["produced_in"],
            "saved_by": [node or m["last_op"]],
            "_region": m["region"],
        }
        if m["view_bytes"] != m["bytes"]:
            ent["view_bytes"] = m["view_bytes"]
            ent["stride"] = m["stride"]
        seen_keys[key] = ent
        kind, idx = region_index(m["region"])
        if kind == "layer":
            layer_groups[idx].append(ent)
        else:
            groups[kind].append(ent)
    for ent in seen_keys.values():
        ent.pop("_region", None)

    def summarize(tensors):
        return sum(t["bytes"] for t in tensors if not t["param"])

    saved = {
        "embedding": {"bytes": summarize(groups["embedding"]), "tensors": groups["embedding"]},
        "layers": [
            {
                "index": i,
                "checkpointed": i in ckpt_layers,
                "bytes": summarize(layer_groups[i]),
                "retained_bytes": retained.get(i) if retained else None,
                "tensors": layer_groups[i],
            }
            for i in range(nlayers)
        ],
        "head": {"bytes": summarize(groups["head"]), "tensors": groups["head"]},
    }
    saved["total_bytes"] = saved["embedding"]["bytes"] + saved["head"]["bytes"] + sum(
        l["bytes"] for l in saved["layers"])

    fixture = {
        "schema": SCHEMA,
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "python": platform.python_version(),
        },
        "device": "cpu",
        "config": json_config(model),
        "setting": {
            "family": family,
            "model_class": type(model).__name__,
            "every_n_layers": every_n,
            "offload": offload,
            "precision": precision,
            "attention": attention,
            "micro_batch": b,
            "seq": s,
            "grad_accum": grad_accum,
            "optimizer": "adamw",
            "optimizer_impl": "torch.optim.AdamW(fused=True) (HF's adamw_torch_fused; also on CPU)",
            "autocast_lists": ("cuda (emulated on cpu)" if cuda_lists else ("cpu" if amp else None)),
            "use_cache": False,
            "tie_word_embeddings": bool(getattr(model.config, "tie_word_embeddings", False)),
            "dropout": max([float(getattr(model.config, k, 0.0) or 0.0) for k in DROPOUT_KEYS]),
            "labels": "input_ids",
            "loss_scale": 1.0 / grad_accum,
            "measured_step_for_saved": steps,
            **({"warmup": warmup} if warmup != "step" else {}),
        },
        "checkpointed_layers": ckpt_layers,
        "parameters": param_info,
        "saved": saved,
        "optimizer_foreach_step": opt_foreach,
        "offload_bytes": sum(r["bytes"] for r in offload_meta or []),
        "offload": offload_meta or [],
        "steps": steps_out,
    }
    PROBE = None
    return fixture


def dumps_fixture(fx) -> str:
    """Indented JSON, but each tensor / timeline / offload record on one line."""
    placeholders = {}

    def squash(obj, path=()):
        if isinstance(obj, dict):
            leafy = all(not isinstance(v, (dict, list)) or (isinstance(v, list) and all(not isinstance(x, (dict, list)) for x in v)) for v in obj.values())
            if leafy and path and path[-1] in ("tensors", "timeline", "offload"):
                key = f"@@{len(placeholders)}@@"
                placeholders[key] = json.dumps(obj, separators=(", ", ": "))
                return key
            return {k: squash(v, path + (k,)) for k, v in obj.items()}
        if isinstance(obj, list):
            if all(not isinstance(x, (dict, list)) for x in obj):
                key = f"@@{len(placeholders)}@@"
                placeholders[key] = json.dumps(obj)
                return key
            return [squash(v, path) for v in obj]
        return obj

    text = json.dumps(squash(fx), indent=1)
    for k, v in placeholders.items():
        text = text.replace(json.dumps(k), v, 1)
    return text + "\n"


def write_case(spec, out_dir, run=None):
    """run: what measures the case (default run_case; probe_peft.py passes its own)."""
    name = spec["name"]
    t0 = time.time()
    fx = (run or run_case)(spec)
    path = os.path.join(out_dir, name + ".json")
    with open(path, "w") as f:
        f.write(dumps_fixture(fx))
    return name, time.time() - t0


def _worker(item):
    spec, out_dir, *run = item
    torch.set_num_threads(1)
    try:
        return write_case(spec, out_dir, *run)
    except Exception:  # noqa: BLE001
        return spec["name"], "ERROR\n" + traceback.format_exc()


def add_selection_args(ap):
    """The options select_cases and write_cases read."""
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--filter", action="append", default=[])
    ap.add_argument("--case", action="append", default=[])
    ap.add_argument("--stdout", action="store_true")
    ap.add_argument("--jobs", type=int, default=1)


def select_cases(cases, all_, filters, names):
    """The cases --all, --filter (fnmatch) and --case pick, in that order, once each."""
    by_name = {c["name"]: c for c in cases}
    sel = list(cases) if all_ else []
    for pat in filters:
        sel += [c for n, c in by_name.items() if fnmatch.fnmatch(n, pat) and c not in sel]
    for n in names:
        if n not in by_name:
            raise SystemExit(f"no case {n!r} (see --list)")
        sel.append(by_name[n])
    return sel


def selection(ap, a, cases, how="--all, --filter or --case"):
    """The cases the command line picks; None after printing the names for --list
    (the picked ones, else all). No pick is a usage error naming `how`."""
    sel = select_cases(cases, a.all, a.filter, a.case)
    if a.list:
        for c in (sel or cases):
            print(c["name"])
        return None
    if not sel:
        ap.error(f"nothing selected (use {how})")
    return sel


def write_cases(items, jobs):
    """Measure (spec, out_dir[, run]) items, `jobs` at a time; prints a line per case."""
    failures = 0
    t0 = time.time()
    if jobs > 1:
        import multiprocessing as mp

        with mp.get_context("fork").Pool(jobs, maxtasksperchild=20) as pool:
            for name, dt in pool.imap_unordered(_worker, items):
                failures += _report(name, dt)
    else:
        for it in items:
            failures += _report(*_worker(it))
    print(f"{len(items) - failures} written, {failures} failed, {time.time() - t0:.0f}s", flush=True)
    return 1 if failures else 0


def _report(name, dt):
    if isinstance(dt, str):
        print(f"FAIL {name}\n{dt}", flush=True)
        return 1
    print(f"ok   {name} ({dt:.1f}s)", flush=True)
    return 0


def hand_cases():
    return [dict(name=case_name(*c), family=c[0], precision=c[1], attention=c[2], every_n=c[3], offload=c[4],
                 b=c[5], s=c[6]) for c in all_cases()]


def find_compare_tool(given):
    if given:
        return given
    for cand in (os.path.join(ROOT, "build", "gckpt-hf-compare"), shutil.which("gckpt-hf-compare")):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


def config_spec(a):
    """The case --config and its options describe."""
    path = a.config
    if not os.path.exists(path) and os.path.exists(os.path.join(ROOT, "models", path + ".json")):
        path = os.path.join(ROOT, "models", path + ".json")
    try:
        with open(path) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        raise SystemExit(f"{path}: {e}")
    mt = cfg.get("model_type")
    if mt not in MODEL_CLASSES:
        raise SystemExit(f"{path}: field 'model_type' = {mt!r} is not one of {', '.join(MODEL_CLASSES)}")
    if mt in family_cases.REFUSES_SDPA and a.attention == "sdpa":
        raise SystemExit(f"{path}: transformers refuses sdpa for {mt} (attention soft-capping or sinks): use --attention eager")
    if a.dropout is not None:
        for k in DROPOUT_KEYS:
            if k in cfg or (mt == "gpt2") == (k != "attention_dropout"):
                cfg[k] = a.dropout
    every_n = 0 if a.every_n == "off" else int(a.every_n)
    if a.offload and not every_n:
        raise SystemExit("--offload needs --every-n N")
    # amp: CUDA's autocast op lists, emulated (what the planner's CUDA target models), unless
    # --autocast-lists cpu (a plain CPU run: gckpt-plan --target cpu)
    prec = "amp-bf16-cudalists" if a.precision == "amp-bf16" and a.autocast_lists == "cuda" else a.precision
    stem = os.path.splitext(os.path.basename(path))[0]
    name = (f"{stem}-{prec}-{a.attention}-n{every_n or 'off'}-{'offload' if a.offload else 'plain'}"
            f"-b{a.batch}s{a.seq}-ga{a.grad_accum}")
    return dict(name=name, family=mt, config=cfg, precision=prec, attention=a.attention, every_n=every_n,
                offload=a.offload, b=a.batch, s=a.seq, grad_accum=a.grad_accum, warmup=a.warmup,
                foreach=False, trace=a.trace)


def run_config(a):
    spec = config_spec(a)
    tool = None if a.no_compare else find_compare_tool(a.compare_tool)
    if not a.no_compare and not tool:
        raise SystemExit("gckpt-hf-compare not found: build gckpt (cmake --build build) or pass --compare-tool")
    t0 = time.time()
    fx = run_case(spec)
    out = a.o or os.path.join(tempfile.mkdtemp(prefix="gckpt-probe-"), spec["name"] + ".json")
    with open(out, "w") as f:
        f.write(dumps_fixture(fx))
    print(f"measured {spec['name']} in {time.time() - t0:.0f} s" + (f", fixture {out}" if a.o else ""), flush=True)
    rc = 0
    if tool:
        rc = subprocess.call([tool, out])
    if not a.o:
        shutil.rmtree(os.path.dirname(out), ignore_errors=True)
    return rc


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", choices=["hand", "gen", "families", "moe", "dsv3", "vlm", "vlm-towers"], default="hand",
                    help="fixture set: the hand-written one (tests/data/hf), the generated one (tests/data/hf-gen) "
                         "issue 13's dense families (tests/data/hf-fam, family_cases.py) or its mixture-of-experts "
                         "families (tests/data/hf-moe, moe_cases.py), or issue 26's DeepSeek-V3 (tests/data/hf-dsv3, "
                         "moe_cases.dsv3_cases; not planned yet), or the vision-language models (tests/data/hf-vlm, "
                         "vlm_cases.py; not planned yet), or llava's per-tower checkpointing (tests/data/hf-vlm-towers, "
                         "vlm_cases.tower_cases)")
    ap.add_argument("--out", default=None)
    add_selection_args(ap)
    g = ap.add_argument_group("one configuration (--config), compared with gckpt's plan")
    g.add_argument("--config", help="a config.json, or a name in models/ (e.g. qwen2.5-0.5b)")
    g.add_argument("--precision", choices=["fp32", "bf16", "amp-bf16"], default="amp-bf16",
                   help="amp-bf16 runs CPU autocast with CUDA's op lists emulated (default; --autocast-lists)")
    g.add_argument("--autocast-lists", choices=["cuda", "cpu"], default="cuda",
                   help="amp-bf16: CUDA's op lists emulated (what gckpt-plan --target cuda plans; default) or "
                        "the CPU's own, as a plain CPU run has them (gckpt-plan --target cpu)")
    g.add_argument("--attention", choices=ATTENTIONS, default="sdpa")
    g.add_argument("--every-n", default="off", help="off or N (every_n_layers)")
    g.add_argument("--offload", action="store_true")
    g.add_argument("--batch", type=int, default=1)
    g.add_argument("--seq", type=int, default=128)
    g.add_argument("--grad-accum", type=int, default=1)
    g.add_argument("--dropout", type=float, default=None, help="override every dropout probability of the config")
    g.add_argument("--warmup", choices=["states", "step", "virtual"], default="states",
                   help="how the steady state is reached: AdamW states from a step on zero gradients (default), "
                        "a real first step, or states counted but not allocated (models too big for the RAM)")
    g.add_argument("--trace", action="store_true", help="record live bytes after every aten op in the fixture")
    g.add_argument("-o", help="keep the fixture in this file")
    g.add_argument("--no-compare", action="store_true", help="measure only")
    g.add_argument("--compare-tool", help="path of gckpt-hf-compare (default: build/gckpt-hf-compare)")
    a = ap.parse_args(argv)

    if a.config:
        torch.set_num_threads(max(1, a.jobs))
        return run_config(a)
    cases = {"hand": hand_cases, "gen": gen_cases.cases, "families": family_cases.cases,
             "moe": moe_cases.cases, "dsv3": moe_cases.dsv3_cases, "vlm": vlm_cases.cases,
             "vlm-towers": vlm_cases.tower_cases}[a.set]()
    out_dir = a.out or {"hand": DEFAULT_OUT, "gen": GEN_OUT, "families": FAM_OUT, "moe": MOE_OUT,
                       "dsv3": DSV3_OUT, "vlm": VLM_OUT, "vlm-towers": VLM_TOWERS_OUT}[a.set]
    sel = selection(ap, a, cases, "--all, --filter, --case or --config")
    if sel is None:
        return 0
    run = vlm_cases.run_vlm_case if a.set in ("vlm", "vlm-towers") else run_case
    if a.stdout:
        torch.set_num_threads(1)
        for c in sel:
            json.dump(run(c), sys.stdout, indent=1)
            sys.stdout.write("\n")
        return 0
    os.makedirs(out_dir, exist_ok=True)
    return write_cases([(c, out_dir, run) for c in sel], a.jobs)


if __name__ == "__main__":
    sys.exit(main())
