"""gckpt.plan() and Plan: the C planner's JSON plan (schema gckpt.plan/2) as Python objects.

Every number comes from the C planner through its JSON API (gckpt._native.call); the
options are gckpt-plan's, checked by the same code, so a plan here is the CLI's plan."""

from __future__ import annotations

import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Any, Iterable

_HERE = Path(__file__).absolute().parent  # not resolved: the build tree links the sources
_DATA = _HERE / "data"
_LOCK = threading.Lock()  # the C planner's data folder is process-wide


class PlanError(ValueError):
    """A request the planner refused: the message is gckpt-plan's one line."""


def data_dir() -> str:
    """The folder holding models/ and devices/: GCKPT_DATA_DIR, else the package's copy."""
    return os.environ.get("GCKPT_DATA_DIR") or str(_DATA)


def _call(request: dict) -> dict:
    from . import _native  # the extension; import errors say the package is not built

    request = dict(request, data_dir=data_dir())
    with _LOCK:
        answer = json.loads(_native.call(json.dumps(request)))
    if not answer.get("ok"):
        raise PlanError(answer.get("error", "the planner refused the request"))
    return answer


# --- options -----------------------------------------------------------------------

def _on_off(v: Any) -> str:
    if isinstance(v, bool):
        return "on" if v else "off"
    return str(v)


def _listed(v: Any) -> str:
    if isinstance(v, (list, tuple, set, frozenset)):
        return ",".join(str(x) for x in v)
    return str(v)


def _every(v: Any) -> str:
    if v is None or v is False:
        return "off"
    if isinstance(v, (list, tuple)):
        return ",".join("off" if x in (0, None, False, "off") else str(int(x)) for x in v)
    return "off" if v == 0 else str(v)


def _offload(v: Any) -> str:
    if isinstance(v, bool):
        return "on" if v else "off"
    return str(v)


def _budget(v: Any) -> str:
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v}B"
    return str(v)


# how a Python value is spelled on gckpt-plan's command line, per option
_SPELL = {
    "lora_targets": _listed, "modules_to_save": _listed, "micro_batch": _listed, "parallel": _listed,
    "double_quant": _on_off, "fsdp_offload": _on_off, "every_n": _every, "offload": _offload,
    "budget": _budget,
}


def _options_known() -> dict:
    return {o["name"].replace("-", "_"): o["has_arg"] for o in _call({"op": "options"})["options"]}


_KNOWN: dict | None = None


def _args(model_ref: str | None, gpu: str | None, seq: int | None, options: dict) -> list:
    global _KNOWN
    if _KNOWN is None:
        _KNOWN = _options_known()
    args = []
    if model_ref is not None:
        args.append(["model", model_ref])
    if gpu is not None:
        args.append(["gpu", _gpu_ref(gpu)])
    if seq is not None:
        args.append(["seq", str(int(seq))])
    for key, value in options.items():
        if key in ("model", "gpu", "seq"):
            raise PlanError(f"{key}: pass it as plan()'s own argument")
        if key not in _KNOWN:
            raise PlanError(f"unknown option '{key}' (options: {', '.join(sorted(_KNOWN))})")
        if value is None:
            continue
        name = key.replace("_", "-")
        if not _KNOWN[key]:  # a flag: True sets it
            if not isinstance(value, bool):
                raise PlanError(f"{key}: True or False")
            if value:
                args.append([name, None])
            continue
        if isinstance(value, bool) and key not in _SPELL:
            raise PlanError(f"{key}: {value!r} is not a value of --{name}")
        args.append([name, _SPELL.get(key, str)(value)])
    return args


def _gpu_ref(gpu: Any) -> str:
    if isinstance(gpu, os.PathLike):
        return os.fspath(gpu)
    if gpu == "cpu-exact":
        return str(_DATA / "cpu-exact.json") if (_DATA / "cpu-exact.json").exists() else gpu
    return str(gpu)


# --- models ------------------------------------------------------------------------

def _config_dict(model: Any) -> dict | None:
    """The config.json content of a config, a model, or a dict; None for a name or path."""
    if isinstance(model, dict):
        return model
    if isinstance(model, (str, os.PathLike)):
        return None
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "to_dict"):
        model = config
    if hasattr(model, "to_dict"):
        d = model.to_dict()
        if hasattr(model, "_attn_implementation_internal") or hasattr(model, "_attn_implementation"):
            d.pop("_attn_implementation_internal", None)
        return d
    raise PlanError(f"model: {type(model).__name__} is not a name, a path, a config dict, a PretrainedConfig "
                    "or a model with .config")


def _model_ref(model: Any, tmp: str) -> str:
    cfg = _config_dict(model)
    if cfg is None:
        ref = os.fspath(model)
        if os.path.isdir(ref):
            ref = os.path.join(ref, "config.json")
        return ref
    name = str(cfg.get("_name_or_path") or cfg.get("model_type") or "model")
    stem = "".join(c if c.isalnum() or c in "-_." else "-" for c in name.rstrip("/").split("/")[-1]) or "model"
    path = os.path.join(tmp, stem + ".json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(cfg, f, default=str)
    return path


# --- the plan ----------------------------------------------------------------------

class Plan:
    """A gckpt.plan/2 JSON plan: its entries (dicts with the JSON plan's keys), the
    recommended entry, the frontier, the warnings; the TrainingArguments and code to paste."""

    def __init__(self, plan_json: dict, *, request: Any = None):
        if not isinstance(plan_json, dict) or not str(plan_json.get("schema", "")).startswith("gckpt.plan/"):
            raise PlanError("not a gckpt plan (its \"schema\" is not gckpt.plan/N)")
        self.json = plan_json
        self._request = request
        self.warnings = list(plan_json.get("warnings", []))
        self.selected: dict | None = None

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Plan":
        with open(path, encoding="utf-8") as f:
            try:
                d = json.load(f)
            except json.JSONDecodeError as e:
                raise PlanError(f"{os.fspath(path)}: malformed JSON ({e})") from None
        return cls(d)

    @property
    def inputs(self) -> dict:
        return self.json["inputs"]

    @property
    def entries(self) -> list:
        return self.json["entries"]

    @property
    def recommended(self) -> dict | None:
        i = self.json.get("recommended")
        return None if i is None else self.entries[i]

    @property
    def smallest(self) -> dict | None:
        i = self.json.get("smallest")
        return None if i is None else self.entries[i]

    @property
    def frontier(self) -> list:
        return [e for e in self.entries if e.get("pareto")]

    def find(self, every_n_layers: int | None = None, offload: bool | None = None,
             micro_batch: int | None = None, grad_accum: int | None = None) -> dict | None:
        """The entry with these settings (None: any); offload is ignored where checkpointing is off."""
        for e in self.entries:
            if every_n_layers is not None and e["every_n_layers"] != every_n_layers:
                continue
            if offload is not None and e["every_n_layers"] and e["offload"] != bool(offload):
                continue
            if micro_batch is not None and e["micro_batch"] != micro_batch:
                continue
            if grad_accum is not None and e["grad_accum"] != grad_accum:
                continue
            return e
        return None

    def _entry(self, entry: dict | int | None) -> dict:
        if entry is None:
            entry = self.recommended or self.smallest
        if isinstance(entry, int):
            entry = self.entries[entry]
        if not isinstance(entry, dict) or "index" not in entry:
            raise PlanError("entry: one of the plan's entries (a dict from .entries) or its index")
        return entry

    def training_arguments(self, entry: dict | int | None = None) -> dict:
        """The TrainingArguments keyword arguments of an entry (default: the recommended one)."""
        e = self._entry(entry)
        own = e.get("training_arguments")
        common = self.inputs.get("training_arguments")
        if own is None or common is None:
            raise PlanError("this plan has no training_arguments (written by an older gckpt-plan); re-plan it")
        first = {k: own[k] for k in ("per_device_train_batch_size", "gradient_accumulation_steps") if k in own}
        rest = {k: v for k, v in own.items() if k not in first}
        return {**first, **common, **rest}

    def snippet(self, entry: dict | int | None = None) -> str:
        """The code to paste for an entry, as gckpt-plan prints it (default: the recommended one)."""
        e = self._entry(entry)
        if self._request is None:
            raise PlanError("snippet() needs a plan made by gckpt.plan(); this one was read from a file "
                            "(gckpt-plan prints the recommended entry's snippet)")
        return self._request.call("snippet", entry=e["index"])["text"]

    def text(self) -> str:
        """What gckpt-plan prints: header, table of notable entries, recommendation."""
        if self._request is None:
            raise PlanError("text() needs a plan made by gckpt.plan()")
        return self._request.call("text")["text"]

    def to_json(self, path: str | os.PathLike | None = None) -> str:
        """The plan as gckpt-plan -o writes it; also written to path (atomically) when given."""
        d = dict(self.json, warnings=self.warnings)
        text = json.dumps(d, indent=2) + "\n"
        if path is not None:
            path = os.fspath(path)
            fd, tmp = tempfile.mkstemp(prefix=".gckpt-", dir=os.path.dirname(os.path.abspath(path)))
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(text)
                os.replace(tmp, path)
            except BaseException:
                try:
                    os.unlink(tmp)
                except FileNotFoundError:
                    pass
                raise
        return text

    def __repr__(self) -> str:
        r = self.recommended
        m = self.inputs["model"]["name"]
        d = self.inputs["device"].get("name", "?")
        if r is None:
            return f"<gckpt.Plan {m} on {d}: nothing fits, {len(self.entries)} entries>"
        return (f"<gckpt.Plan {m} on {d}: recommended every_n_layers={r['every_n_layers']} offload={r['offload']} "
                f"micro_batch={r['micro_batch']} grad_accum={r['grad_accum']}, "
                f"{r['memory']['device_peak_bytes'] / 2**30:.2f} GiB, {len(self.entries)} entries>")


class _Request:
    """What re-plans a plan (for its snippet and text): the options, and the model as a
    name or path, or as a config written to a temporary file for each call."""

    def __init__(self, model: Any, gpu: Any, seq: int | None, options: dict):
        self.config = None if model is None else _config_dict(model)
        self.model = model
        self.gpu, self.seq, self.options = gpu, seq, options

    def call(self, op: str, **extra: Any) -> dict:
        with tempfile.TemporaryDirectory(prefix="gckpt-") as tmp:
            ref = None if self.model is None else _model_ref(self.config if self.config is not None else self.model, tmp)
            options = self.options
            if isinstance(options.get("deepspeed"), dict):
                # a ds_config given as a dict: read as a file by the same reader as --deepspeed
                # (the snippet then names this temporary file: pass a path to keep it)
                path = os.path.join(tmp, "ds_config.json")
                with open(path, "w", encoding="utf-8") as f:
                    json.dump(options["deepspeed"], f)
                options = dict(options, deepspeed=path)
            return _call(dict(extra, op=op, args=_args(ref, self.gpu, self.seq, options)))


def plan(model: Any = None, gpu: Any = None, seq: int | None = None, **options: Any) -> Plan:
    """Plan a model on a GPU: every every_n_layers x offload x micro-batch setting, as gckpt-plan.

    model: a shipped name, a path to a config.json (or its folder), a Hub id, a config dict,
    a PretrainedConfig or a model; gpu: a profile name or path ("cpu-exact": the exact-bytes
    CPU profile); options: gckpt-plan's long options with '_' for '-' (precision, optimizer,
    method, lora_rank, every_n, offload, micro_batch, grad_accum, gpus, parallel, budget, ...)."""
    req = _Request(model, gpu, seq, options)
    return Plan(req.call("plan")["plan"], request=req)
