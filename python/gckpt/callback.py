"""gckpt.TrainerCallback: checks a Hugging Face Trainer run against its gckpt plan.

    trainer = Trainer(model=model, args=args, train_dataset=ds,
                      callbacks=[gckpt.TrainerCallback(plan)])

At train begin it compares the live run with the plan's entry (every_n_layers and offload
read back from the layers, micro-batch, accumulation, precision, optimizer, world size,
model) and warns once per difference; the run goes on. Every optimizer step it measures
the step's peak (tracker.py) and appends a record to a gckpt report (the schema of
gckpt-run's, reports/schema/report.schema.json: JSON Lines, backend "hf-trainer"); the
Trainer's logs get the predicted and measured peaks (keys "gckpt/...").

transformers is imported when the first callback is made: `import gckpt` needs only the
standard library.
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
import warnings

from . import tracker as _tracker

REPORT_SCHEMA = "gckpt.report/2"
GENERATOR = "gckpt-python"
BACKEND = "hf-trainer"
# gckpt-run's default tolerance for a GPU plan; an exact-bytes CPU plan is held to the
# probe fixtures' tolerance (tests/hf_compare.c, hf_tolerance)
GPU_TOLERANCE = 0.02
EXACT_TOLERANCE = 0.001
EXACT_TOLERANCE_BF16 = 0.005


class PlanMismatchWarning(UserWarning):
    """The live Trainer run differs from the plan entry it is compared with."""


# ---------------------------------------------------------------------------------------
# the plan
# ---------------------------------------------------------------------------------------
def _plan_json(plan):
    """(the gckpt.plan/2 dict, the entry the Plan selected or None, where it came from)."""
    if isinstance(plan, (str, os.PathLike)):
        path = os.fspath(plan)
        try:
            with open(path) as f:
                d = json.load(f)
        except (OSError, ValueError) as e:
            raise ValueError(f"{path}: cannot read the plan: {e}") from None
        return _checked(d, path), None, path
    if isinstance(plan, dict):
        return _checked(plan, "plan"), None, "<dict>"
    if hasattr(plan, "json") and hasattr(plan, "entries"):  # gckpt.Plan
        return _checked(plan.json, "plan"), getattr(plan, "selected", None), getattr(plan, "path", None) or "<Plan>"
    raise TypeError(f"plan: expected a gckpt.Plan, a gckpt.plan/2 dict or a path, not {type(plan).__name__}")


def _checked(d, where):
    if not isinstance(d, dict) or not str(d.get("schema", "")).startswith("gckpt.plan/"):
        raise ValueError(f"{where}: field 'schema' is not a gckpt plan's (gckpt.plan/2)")
    if not isinstance(d.get("entries"), list) or not d["entries"]:
        raise ValueError(f"{where}: field 'entries' is missing or empty")
    if not isinstance(d.get("inputs"), dict):
        raise ValueError(f"{where}: field 'inputs' is missing")
    return d


def default_tolerance(plan_json):
    """The relative tolerance of the memory checks for a plan."""
    inputs = plan_json.get("inputs", {})
    if inputs.get("device", {}).get("kind") == "cpu":
        return EXACT_TOLERANCE_BF16 if inputs.get("precision") == "bf16" else EXACT_TOLERANCE
    return GPU_TOLERANCE


def _data_dirs():
    """Where shipped device profiles may be: $GCKPT_DATA_DIR, the package, the repository."""
    here = os.path.dirname(os.path.abspath(__file__))
    dirs = []
    if os.environ.get("GCKPT_DATA_DIR"):
        dirs.append(os.path.join(os.environ["GCKPT_DATA_DIR"], "devices"))
    dirs += [os.path.join(here, "data", "devices"), os.path.join(here, "devices"),
             os.path.join(here, "..", "..", "devices")]
    return [d for d in dirs if os.path.isdir(d)]


def _words(s):
    return set("".join(c if c.isalnum() else " " for c in s.lower()).split()) - {"nvidia", "geforce"}


def match_profile(device_name, memory_bytes, profiles):
    """The profile name (file stem) for a GPU: profiles {stem: (name, memory_bytes)}; a
    profile matches when its model word (h100, a100, l40s, 4090, ...) is in the device's
    name and its form factor (pcie / sxm) does not contradict it; among those the nearest
    in memory. None when nothing matches. Unverified on a GPU: torch's device names
    ("NVIDIA H100 80GB HBM3") are matched by these rules, not by a measured list."""
    dev = _words(device_name)
    best = None
    for stem, (name, mem) in profiles.items():
        words = _words(name)
        models = {w for w in words if any(ch.isdigit() for ch in w) and any(ch.isalpha() for ch in w)
                  or w.isdigit() and len(w) == 4}
        models -= {w for w in words if w.endswith("gb")}
        if not models or not models & dev:
            continue
        if "pcie" in words and "pcie" not in dev or "pcie" in dev and "pcie" not in words:
            continue
        d = abs((mem or 0) - (memory_bytes or 0))
        if best is None or d < best[0]:
            best = (d, stem)
    return best[1] if best else None


def default_gpu():
    """The gpu profile to plan with: the CUDA device's matching shipped profile, or
    "cpu-exact" without CUDA; None when a GPU matches no profile (the planner's default)."""
    import torch

    if not torch.cuda.is_available():
        return "cpu-exact"
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    profiles = {}
    for d in _data_dirs():
        for fn in sorted(os.listdir(d)):
            if fn.endswith(".json"):
                try:
                    with open(os.path.join(d, fn)) as f:
                        p = json.load(f)
                    profiles.setdefault(fn[:-5], (p.get("name", ""), p.get("memory_bytes")))
                except (OSError, ValueError):
                    continue
    return match_profile(props.name, props.total_memory, profiles)


def planning_gpu(gpu):
    """The profile the callback plans with when it has no plan: gpu when given, else
    default_gpu(); a CUDA device that matches no shipped profile is said in a warning
    (the planner's default profile is used then), never silently."""
    if gpu is not None:
        return gpu
    found = default_gpu()
    if found is None:
        warnings.warn("gckpt: the CUDA device matches no shipped GPU profile: planned with gckpt-plan's default "
                      "profile (h100-sxm-80gb); pass TrainerCallback(gpu=NAME or PATH), e.g. a profile "
                      "calibrated with gckpt.calibrate", UserWarning, stacklevel=3)
    return found


# ---------------------------------------------------------------------------------------
# the live run
# ---------------------------------------------------------------------------------------
def checkpointing_of(model):
    """(layers, checkpointed layer indices, offload) as transformers marks them: every
    GradientCheckpointingLayer in module order, its `gradient_checkpointing` flag (set by
    activation_checkpointing_enable(every_n_layers=n) on layer i when i % n == 0), and
    offload when the checkpoint function is the partial over transformers' own
    `checkpoint_func` that wraps torch.utils.checkpoint in save_on_cpu (transformers
    5.24, modeling_utils.py _activation_checkpointing_enable)."""
    import torch.utils.checkpoint

    try:
        from transformers.modeling_layers import GradientCheckpointingLayer
    except ImportError:  # pragma: no cover - older transformers
        GradientCheckpointingLayer = None
    layers = [m for m in model.modules()
              if (isinstance(m, GradientCheckpointingLayer) if GradientCheckpointingLayer else False)]
    ckpt = [i for i, m in enumerate(layers) if getattr(m, "gradient_checkpointing", False)]
    offload = False
    if ckpt:
        fn = getattr(layers[ckpt[0]], "_gradient_checkpointing_func", None)
        fn = getattr(fn, "func", fn)  # functools.partial(checkpoint_func, **kwargs)
        code = getattr(fn, "__code__", None)
        offload = fn is not torch.utils.checkpoint.checkpoint and code is not None and "save_on_cpu" in code.co_names
    return len(layers), ckpt, offload


def every_n_of(nlayers, ckpt):
    """every_n_layers that checkpoints exactly these layers (0: none), or None."""
    if not ckpt:
        return 0
    for n in range(1, nlayers + 1):
        if ckpt == list(range(0, nlayers, n)):
            return n
    return None


def precision_of(model, args):
    """The plan's precision name for the live run: autocast from the arguments, the
    parameters' dtype for pure bf16."""
    if getattr(args, "fp16", False):
        return "amp-fp16"
    by = {}
    for p in model.parameters():
        if p.is_floating_point():
            by[p.dtype] = by.get(p.dtype, 0) + p.numel()
    dtype = max(by, key=by.get) if by else None
    name = str(dtype).replace("torch.", "") if dtype is not None else "?"
    if getattr(args, "bf16", False):
        return "amp-bf16" if name == "float32" else "bf16" if name == "bfloat16" else f"amp-bf16 over {name}"
    return {"float32": "fp32", "bfloat16": "bf16"}.get(name, name)


def optimizer_of(optimizer):
    """The plan's optimizer name for the live optimizer (its class, fused or not), or the
    class's name when the planner has none for it."""
    inner = getattr(optimizer, "optimizer", optimizer)  # accelerate's AcceleratedOptimizer
    if inner is None:
        return None
    cls = type(inner)
    mod, name = cls.__module__, cls.__name__
    if mod.startswith("torch.optim") and name == "AdamW":
        return "adamw" if inner.defaults.get("fused") else "adamw-foreach"
    if mod.startswith("torch.optim") and name == "SGD":
        return "sgd"
    if mod.startswith("bitsandbytes"):
        return {"AdamW8bit": "adamw-8bit", "PagedAdamW8bit": "paged-adamw-8bit",
                "PagedAdamW32bit": "paged-adamw-32bit", "PagedAdamW": "paged-adamw-32bit"}.get(name, f"{mod}.{name}")
    return f"{mod}.{name}"


def _config_of(model):
    cfg = getattr(model, "config", None)
    if cfg is None and hasattr(model, "get_base_model"):
        cfg = getattr(model.get_base_model(), "config", None)
    return cfg


def live_setting(model, args, optimizer):
    nlayers, ckpt, offload = checkpointing_of(model)
    cfg = _config_of(model)
    return {
        "nlayers": nlayers,
        "checkpointed_layers": ckpt,
        "every_n_layers": every_n_of(nlayers, ckpt),
        "offload": offload,
        "micro_batch": int(args.per_device_train_batch_size),
        "grad_accum": int(args.gradient_accumulation_steps),
        "precision": precision_of(model, args),
        "optimizer": optimizer_of(optimizer),
        "world_size": int(getattr(args, "world_size", 1) or 1),
        "model_type": getattr(cfg, "model_type", None),
    }


def choose_entry(plan_json, selected, live):
    """(entry, matched): the Plan's selected entry, else the one with the live
    every_n_layers, offload, micro-batch and accumulation, else the recommended one (or
    the first)."""
    entries = plan_json["entries"]
    if selected is not None:
        return selected, True
    for e in entries:
        if (e.get("every_n_layers") == live["every_n_layers"] and bool(e.get("offload")) == live["offload"]
                and e.get("micro_batch") == live["micro_batch"] and e.get("grad_accum") == live["grad_accum"]):
            return e, True
    rec = plan_json.get("recommended")
    return (entries[rec] if isinstance(rec, int) else entries[0]), False


def differences(plan_json, entry, live):
    """[(code, planned, live, message)]: one per way the live run is not the planned one."""
    inputs = plan_json.get("inputs", {})
    out = []

    def diff(code, planned, now, what):
        if planned is not None and now != planned:
            out.append((code, planned, now, f"{what}: the plan has {planned!r}, the run {now!r}"))

    model = inputs.get("model", {})
    diff("model", model.get("model_type"), live["model_type"], "model type")
    if model.get("layers") is not None and live["nlayers"] and live["nlayers"] != model.get("layers"):
        out.append(("model", model.get("layers"), live["nlayers"],
                    f"layers: the plan has {model.get('layers')}, the model {live['nlayers']}"))
    n_live = live["every_n_layers"]
    if n_live is None:
        out.append(("checkpointed_layers", json.dumps(entry.get("checkpointed_layers")),
                    json.dumps(live["checkpointed_layers"]),
                    f"checkpointed layers: the plan has {entry.get('checkpointed_layers')}, the run "
                    f"{live['checkpointed_layers']} (no every_n_layers gives them)"))
    else:
        diff("every_n_layers", entry.get("every_n_layers"), n_live,
             "every_n_layers (0: no checkpointing; read back from the layers' gradient_checkpointing flags)")
    if live["checkpointed_layers"] or entry.get("every_n_layers"):
        diff("offload", entry.get("offload"), live["offload"], "offload of the checkpointed layers' inputs")
    diff("micro_batch", entry.get("micro_batch"), live["micro_batch"], "micro-batch (per_device_train_batch_size)")
    diff("grad_accum", entry.get("grad_accum"), live["grad_accum"], "gradient_accumulation_steps")
    diff("precision", inputs.get("precision"), live["precision"], "precision")
    if live["optimizer"] is not None:
        diff("optimizer", inputs.get("optimizer"), live["optimizer"], "optimizer")
    diff("world_size", (inputs.get("layout") or {}).get("world_size", 1), live["world_size"], "world size")
    return out


# ---------------------------------------------------------------------------------------
# the report
# ---------------------------------------------------------------------------------------
def report_path(path, rank):
    """Rank 0 writes PATH, rank r NAME.rankR.EXT."""
    if not rank:
        return path
    stem, ext = os.path.splitext(path)
    return f"{stem}.rank{rank}{ext}"


def check(predicted, measured, tol):
    """A check object of the report: measured against predicted within tol."""
    if predicted is None:
        predicted = 0
    if measured is None:
        return {"predicted": int(predicted), "measured": None, "relative_error": None, "pass": None}
    err = (measured - predicted) / predicted if predicted else None
    return {"predicted": int(predicted), "measured": int(measured), "relative_error": err,
            "pass": err is not None and abs(err) <= tol}


def _device_record(kind):
    import torch

    if kind == "cuda":
        i = torch.cuda.current_device()
        p = torch.cuda.get_device_properties(i)
        return {"kind": "gpu", "name": p.name, "memory_bytes": int(p.total_memory), "driver_version": None,
                "runtime_version": torch.version.cuda, "arch": f"{p.major}.{p.minor}"}
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        mem = None
    return {"kind": "cpu", "name": name, "memory_bytes": mem, "driver_version": None,
            "runtime_version": f"torch {torch.__version__}", "arch": str(os.cpu_count())}


def _version():
    pkg = sys.modules.get(__package__)
    return str(getattr(pkg, "__version__", "0"))


def _parallel(plan_json, args):
    layout = plan_json.get("inputs", {}).get("layout") or {}
    if layout.get("parallel") in ("ddp", "fsdp", "zero1", "zero2", "zero3"):
        return layout["parallel"]
    return "fsdp" if getattr(args, "fsdp", None) else "ddp"


class _Callback:
    """The callback's behaviour; TrainerCallback below joins it with transformers'."""

    def __init__(self, plan=None, *, report="gckpt-report.jsonl", gpu=None, seq=None, tolerance=None):
        self.plan_arg = plan
        self.plan_json = self.selected = self.plan_file = None
        if plan is not None:
            self.plan_json, self.selected, self.plan_file = _plan_json(plan)
        self.report = os.fspath(report) if report is not None else None
        self.gpu, self.seq, self.tolerance_arg = gpu, seq, tolerance
        self.tolerance = tolerance
        self.entry = None
        self.steps = []  # step records of this rank
        self.warnings = []  # (code, message)
        self.last = None  # the last step's record
        self.loss = self.grad_norm = None
        self.rank = 0
        self._file = None
        self._pending = []  # records written once the header is
        self._tracker = None
        self._hook = None
        self._live_seq = None
        self._t_begin = None
        self._args = self._model = self._optimizer = None

    # -- the plan and the checks -------------------------------------------------------
    def _settle(self, args, state, model, optimizer):
        """Plan (when not given), choose the entry, check the live run, write the header."""
        if self.plan_json is None:
            from . import hf_args

            seq = self.seq or self._live_seq
            plan = hf_args.plan_for(model, args, seq=seq, gpu=planning_gpu(self.gpu))
            self.plan_json, self.selected, self.plan_file = _plan_json(plan)
        if self.tolerance is None:
            self.tolerance = default_tolerance(self.plan_json)
        live = live_setting(model, args, optimizer)
        self.entry, matched = choose_entry(self.plan_json, self.selected, live)
        found = [] if matched else [(
            "no_entry", None, None,
            f"no plan entry has the run's every_n_layers {live['every_n_layers']}, offload {live['offload']}, "
            f"micro-batch {live['micro_batch']} and grad_accum {live['grad_accum']}: compared with entry "
            f"{self.entry.get('index')}")]
        self._write(self._header(args, state))
        for code, planned, now, message in found + differences(self.plan_json, self.entry, live):
            self._warn(code, planned, now, message)
        self._check_seq()
        for rec in self._pending:
            self._write(rec)
        self._pending = []

    def _check_seq(self):
        planned = self.plan_json.get("inputs", {}).get("seq") if self.plan_json else None
        if self._live_seq is not None and planned is not None and self._live_seq != planned and \
                not any(code == "seq" for code, _ in self.warnings):
            self._warn("seq", planned, self._live_seq,
                       f"sequence length: the plan has {planned}, the first batch {self._live_seq}")

    def _warn(self, code, planned, now, message):
        self.warnings.append((code, message))
        warnings.warn(f"gckpt: {message}", PlanMismatchWarning, stacklevel=3)
        self._write({"record": "warning", "rank": self.rank, "code": code, "message": message,
                     "planned": planned, "live": now})

    # -- records --------------------------------------------------------------------------
    def _header(self, args, state):
        p, inputs = self.plan_json, self.plan_json["inputs"]
        kind = self._tracker.kind if self._tracker else "cpu"
        h = {
            "schema": REPORT_SCHEMA, "record": "header", "rank": self.rank,
            "generator": {"name": GENERATOR, "version": _version()},
            "plan": {"file": self.plan_file or "<Plan>", "generator_version": str(p.get("generator", {}).get("version", "")),
                     "model": str(inputs["model"].get("name", "")), "model_type": inputs["model"].get("model_type"),
                     "device": str(inputs["device"].get("name", "")), "seq": inputs.get("seq"),
                     "precision": inputs.get("precision"), "optimizer": inputs.get("optimizer"),
                     "attention": inputs.get("attention")},
            "backend": BACKEND, "device": _device_record(kind),
            "options": {"steps": max(int(state.max_steps or 0) - 1, 1), "warmup": 1, "tolerance": self.tolerance,
                        "time_tolerance": None, "force": False, "seed": int(getattr(args, "seed", 0) or 0),
                        "memory_limit_bytes": None},
            "selected": 1,
        }
        ws = int(getattr(args, "world_size", 1) or 1)
        if ws >= 2:
            h["ranks"] = {"world_size": ws, "parallel": _parallel(p, args)}
        return h

    def _write(self, rec):
        if self.report is None:
            return
        if self.plan_json is None or (self._file is None and rec.get("record") != "header"):
            self._pending.append(rec)
            return
        if self._file is None:
            self._file = open(report_path(self.report, self.rank), "w")
        self._file.write(json.dumps(rec, separators=(", ", ": ")) + "\n")
        self._file.flush()

    def _step_record(self, step, m):
        mem = self.entry["memory"] if self.entry else {}
        judged = step >= 2  # the plan's steady state: step 2 onwards
        pred_s = float(self.entry["time"]["step_s"]) if self.entry else 0.0
        peak = check(mem.get("peak_bytes"), m["peak_bytes"], self.tolerance or 0)
        dev = check(mem.get("device_peak_bytes"), m["device_used_bytes"], self.tolerance or 0)
        passed = None
        if judged:
            passed = all(c["pass"] for c in (peak, dev) if c["pass"] is not None)
        else:  # step 1 creates the optimizer states: measured and shown, not judged
            peak["pass"] = dev["pass"] = None
        return {"record": "step", "rank": self.rank, "step": step, "entry": int(self.entry["index"]) if self.entry else 0,
                "judged": judged, "pass": passed,
                "memory": {"peak_bytes": peak, "device_peak_bytes": dev, "reserved_peak_bytes": m["reserved_bytes"]},
                "time": {"predicted_step_s": pred_s, "measured_step_s": m["step_s"],
                         "relative_error": (m["step_s"] - pred_s) / pred_s if pred_s else None}}

    # -- Trainer events -----------------------------------------------------------------
    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        self.close()
        self.steps, self.warnings, self.last, self.entry = [], [], None, None
        if self.plan_arg is None:
            self.plan_json = self.selected = None
        self.tolerance = self.tolerance_arg
        self._run_first()
        self.rank = int(getattr(args, "process_index", 0) or 0)
        self._args, self._model, self._optimizer = args, model, optimizer
        self._tracker = _tracker.step_tracker()
        self._t_begin = time.perf_counter()
        if model is not None:
            self._hook = model.register_forward_pre_hook(self._first_batch, with_kwargs=True)
        if self.plan_json is not None or self.seq is not None:
            self._settle(args, state, model, optimizer)

    def _first_batch(self, module, args, kwargs):
        x = kwargs.get("input_ids")
        if x is None:
            x = kwargs.get("inputs_embeds")
            x = x[..., 0] if x is not None else None
        if x is None and args:
            x = args[0]
        if getattr(x, "dim", None) and x.dim() >= 1:
            self._live_seq = int(x.shape[-1])
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if self.entry is not None:
            self._check_seq()

    def on_step_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        if self._tracker is not None:
            self._tracker.begin(model, optimizer)

    def on_step_end(self, args, state, control, model=None, optimizer=None, **kwargs):
        if self._tracker is None:
            return
        m = self._tracker.end()
        if m is None:
            return
        if self.entry is None:  # planned after the first step: its batch gave seq
            self._settle(args, state, model, optimizer)
        rec = self._step_record(int(state.global_step), m)
        self.steps.append(rec)
        self.last = rec
        self._write(rec)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is None:
            return
        if "loss" in logs:
            self.loss = _number(logs["loss"])
        if "grad_norm" in logs:
            self.grad_norm = _number(logs["grad_norm"])
        if self.last is None:
            return
        mem, keys = self.last["memory"], {}
        keys["gckpt/predicted_peak_bytes"] = mem["peak_bytes"]["predicted"]
        keys["gckpt/measured_peak_bytes"] = mem["peak_bytes"]["measured"]
        if mem["device_peak_bytes"]["measured"] is not None:
            keys["gckpt/predicted_device_peak_bytes"] = mem["device_peak_bytes"]["predicted"]
            keys["gckpt/measured_device_peak_bytes"] = mem["device_peak_bytes"]["measured"]
        keys["gckpt/step_s"] = self.last["time"]["measured_step_s"]
        logs.update(keys)
        # Trainer.log put a copy of these logs into state.log_history before this event
        # (trainer_state.json); it gets the keys too
        hist = getattr(state, "log_history", None)
        if hist and hist[-1].get("step") == state.global_step and all(hist[-1].get(k) == v for k, v in logs.items()
                                                                      if k not in keys):
            hist[-1].update(keys)

    def close(self):
        """Stop measuring: on the CPU the tracker's dispatch mode stays entered from a step's
        begin to its end, so after an exception inside a step (no on_step_end, no
        on_train_end) call this; the next train begin does it too."""
        if self._tracker is not None:
            self._tracker.close()
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if self._file is not None:
            self._file.close()
            self._file = None

    def on_train_end(self, args, state, control, **kwargs):
        if self._tracker is not None:
            self._tracker.close()
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if self.entry is None:
            return
        entry = self._entry_record()
        self._write(entry)
        p = entry["pass"]
        self._write({"record": "summary", "rank": self.rank, "selected": 1, "run": 1,
                     "passed": int(p is True), "failed": int(p is False), "ok": 1, "oom": 0, "skipped": 0,
                     "error": 0, "interrupted": 0, "skipped_host_memory": 0, "not_started": 0,
                     "complete": True, "signal": None, "ended": True})
        if self._file is not None:
            self._file.close()
            self._file = None

    def _entry_record(self):
        e, tol = self.entry, self.tolerance
        judged = [s for s in self.steps if s["judged"]]

        def worst(key):
            vals = [s["memory"][key]["measured"] for s in judged if s["memory"][key]["measured"] is not None]
            return max(vals) if vals else None

        mem = e["memory"]
        peak = check(mem.get("peak_bytes"), worst("peak_bytes"), tol)
        dev = check(mem.get("device_peak_bytes"), worst("device_peak_bytes"), tol)
        pinned = check(mem.get("host_pinned_bytes", 0), None, tol)
        steps_s = [s["time"]["measured_step_s"] for s in judged]
        pred_s = float(e["time"]["step_s"])
        med = statistics.median(steps_s) if steps_s else None
        checks = [c["pass"] for c in (peak, dev) if c["pass"] is not None]
        passed = all(checks) if checks else None
        msg = None if judged else "no optimizer step after the first: nothing compared (the plan is for step 2 onwards)"
        if passed is False:
            msg = f"measured peak outside the tolerance {tol:g} of the plan's"
        return {"record": "entry", "rank": self.rank, "index": int(e["index"]), "every_n_layers": int(e["every_n_layers"]),
                "offload": bool(e["offload"]), "micro_batch": int(e["micro_batch"]), "grad_accum": int(e["grad_accum"]),
                "fits_predicted": bool(e.get("fits", True)), "status": "ok", "pass": passed, "message": msg,
                "memory": {"peak_bytes": peak, "device_peak_bytes": dev, "host_pinned_bytes": pinned,
                           "schedule_peak_bytes": None, "device_over_baseline_bytes": None, "context_bytes": None},
                "time": {"predicted_step_s": pred_s, "measured_step_s": med,
                         "relative_error": (med - pred_s) / pred_s if med is not None and pred_s else None,
                         "judged": False, "pass": None, "steps_s": steps_s},
                "numerics": {"loss": self.loss, "grad_checksum": None, "grad_norm": self.grad_norm},
                "wall_s": time.perf_counter() - self._t_begin if self._t_begin else 0.0}

    def _run_first(self):
        """Move this callback to the front of the Trainer's callbacks, so that the reporting
        callbacks (W&B, TensorBoard, MLflow, the progress bar) see the keys on_log adds.
        The handler is the caller of this event (CallbackHandler.call_event); moving the
        running callback from index k to 0 leaves the items after k where the handler's
        loop finds them."""
        f = sys._getframe(1)
        while f is not None:
            h = f.f_locals.get("self")
            cbs = getattr(h, "callbacks", None)
            if isinstance(cbs, list) and any(c is self for c in cbs):
                if cbs[0] is not self:
                    cbs.remove(self)
                    cbs.insert(0, self)
                return
            f = f.f_back


def _number(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


_CLASS = None


def _callback_class():
    global _CLASS
    if _CLASS is None:
        import transformers

        _CLASS = type("TrainerCallback", (_Callback, transformers.TrainerCallback),
                      {"__module__": __name__, "__doc__": TrainerCallback.__doc__})
    return _CLASS


class _Lazy(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, _Callback)

    def __subclasscheck__(cls, sub):
        return isinstance(sub, type) and issubclass(sub, _Callback)


class TrainerCallback(metaclass=_Lazy):
    """A transformers.TrainerCallback that checks a Trainer run against its gckpt plan.

    TrainerCallback(plan=None, *, report="gckpt-report.jsonl", gpu=None, seq=None, tolerance=None)

    plan: a gckpt.Plan, a gckpt.plan/2 dict or a path to a JSON plan; None plans at train
    begin with gckpt.plan_for(model, args, seq=seq, gpu=gpu) (gpu: the CUDA device's
    matching shipped profile, or "cpu-exact" without CUDA; seq: the first batch's length,
    the plan then made after the first step). The entry compared with: the Plan's
    selected one, else the one with the run's every_n_layers, offload, micro-batch and
    accumulation. report: the JSON Lines report (rank r > 0 writes NAME.rankR.EXT; None:
    no file). tolerance: relative, of the memory checks (default: 0.001 for an exact-bytes
    CPU plan, 0.005 for pure bf16 there, 0.02 for a GPU plan).

    The object made is an instance of a subclass of transformers.TrainerCallback built
    when the first one is made (transformers is imported then)."""

    def __new__(cls, *args, **kwargs):
        return _callback_class()(*args, **kwargs)
