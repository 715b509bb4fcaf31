"""gckpt.TrainerCallback against real Trainer runs on the CPU.

Three families the probe's fixtures cover (tests/data/hf: llama, qwen3, gpt2, their tiny
configurations, fp32, SDPA, micro-batch 2 x seq 32, grad_accum 2, AdamW fused) x two
checkpointing settings (off, every_n_layers=1): a Trainer run of 3 optimizer steps with
the callback and a plan for the exact-bytes CPU profile (cpu-exact, --target cpu). The
measured peak of steps 2 and 3 (the plan's steady state) must be within the fixtures'
tolerance (0.1 % for fp32, tests/hf_compare.c), the report valid against
reports/schema/report.schema.json, the Trainer's logs must carry the gckpt/ keys. A plan
for another setting gives one warning per difference and the run goes on.

Needs torch and transformers (tools/hf_probe/.venv) and a plan: gckpt.plan when the
package has it, else the gckpt-plan CLI ($GCKPT_PLAN, or build/gckpt-plan:
cmake -S . -B build -DCMAKE_CUDA_COMPILER= && cmake --build build --target gckpt-plan).
Set GCKPT_CALLBACK_VERBOSE=1 to print each run's figures.
"""
from __future__ import annotations

import importlib.util
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest
import warnings
from contextlib import redirect_stderr, redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
if importlib.util.find_spec("gckpt") is None:
    sys.path.insert(0, os.path.join(ROOT, "python"))

import schema_check  # noqa: E402

HAVE_TORCH = all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))
PLAN_EXE = os.environ.get("GCKPT_PLAN") or os.path.join(ROOT, "build", "gckpt-plan")
CPU_EXACT = os.path.join(ROOT, "tests", "data", "devices", "cpu-exact.json")
SCHEMA = os.path.join(ROOT, "reports", "schema", "report.schema.json")
FAMILIES = ("llama", "qwen3", "gpt2")
SEQ, MB, GA, STEPS = 32, 2, 2, 3
TOLERANCE = 0.001  # the probe fixtures' tolerance for fp32 (tests/hf_compare.c, hf_tolerance)
VERBOSE = os.environ.get("GCKPT_CALLBACK_VERBOSE") == "1"


def fixture(family, every_n):
    name = f"{family}-fp32-sdpa-{'n%d' % every_n if every_n else 'noff'}-plain-b{MB}s{SEQ}.json"
    with open(os.path.join(ROOT, "tests", "data", "hf", name)) as f:
        return json.load(f)


def package_plan():
    """gckpt.plan when the package has it (the lead's _plan.py), else None."""
    try:
        import gckpt
        return getattr(gckpt, "plan", None) if callable(getattr(gckpt, "plan", None)) else None
    except ImportError:
        return None


def have_planner():
    return package_plan() is not None or os.access(PLAN_EXE, os.X_OK)


def make_plan(config_path, out, every_n, micro_batch=MB, grad_accum=GA, seq=SEQ, gpu=CPU_EXACT, gpus=1):
    """A gckpt.plan/2 file for the CPU target and the exact-bytes profile (gpus > 1: DDP)."""
    plan = package_plan()
    ddp = {"gpus": gpus, "parallel": "ddp"} if gpus > 1 else {}
    if plan is not None:
        plan(config_path, gpu=gpu, target="cpu", seq=seq, precision="fp32", optimizer="adamw",
             attention="sdpa", micro_batch=micro_batch, grad_accum=grad_accum, every_n=every_n or "off",
             offload="off", **ddp).to_json(out)
        return out
    subprocess.run([PLAN_EXE, "--model", config_path, "--gpu", gpu, "--target", "cpu", "--seq", str(seq),
                    "--precision", "fp32", "--optimizer", "adamw", "--attention", "sdpa", "--micro-batch",
                    str(micro_batch), "--grad-accum", str(grad_accum), "--every-n", str(every_n or "off"),
                    "--offload", "off", "-q", "-o", out] + [f"--{k}={v}" for k, v in ddp.items()],
                   check=True, capture_output=True)
    return out


def run_trainer(config, tmp, callback, every_n=0, micro_batch=MB, optim="adamw_torch_fused", extra=()):
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

    transformers.logging.set_verbosity_error()
    cfg = transformers.AutoConfig.for_model(
        config["model_type"], **{k: v for k, v in config.items()
                                 if k not in ("model_type", "transformers_version", "architectures")})
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", dtype=torch.float32)

    class Tokens(torch.utils.data.Dataset):
        def __init__(self):
            g = torch.Generator().manual_seed(0)
            self.ids = torch.randint(3, cfg.vocab_size, (STEPS * micro_batch * GA, SEQ), generator=g)

        def __len__(self):
            return len(self.ids)

        def __getitem__(self, i):
            return {"input_ids": self.ids[i], "labels": self.ids[i].clone()}

    ckpt = ({"gradient_checkpointing": True,
             "gradient_checkpointing_kwargs": {"every_n_layers": every_n, "offload": False}} if every_n else {})
    args = TrainingArguments(output_dir=os.path.join(tmp, "out"), use_cpu=True, max_steps=STEPS, report_to="none",
                             save_strategy="no", logging_steps=1, disable_tqdm=True, learning_rate=1e-3,
                             per_device_train_batch_size=micro_batch, gradient_accumulation_steps=GA, optim=optim,
                             **ckpt)
    trainer = Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=list(extra) + [callback])
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        trainer.train()
    return trainer


def read_report(path):
    with open(path) as f:
        lines = f.read().splitlines()
    return lines, [json.loads(x) for x in lines]


@unittest.skipUnless(HAVE_TORCH, "needs torch and transformers (tools/hf_probe/.venv)")
@unittest.skipUnless(have_planner(), f"needs gckpt.plan or the gckpt-plan CLI ({PLAN_EXE})")
class TrainerRuns(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from transformers import TrainerCallback as HFCallback

        with open(SCHEMA) as f:
            cls.schema = json.load(f)

        class Seen(HFCallback):
            def __init__(self):
                self.keys = []

            def on_log(self, args, state, control, logs=None, **kw):
                self.keys.append(sorted(k for k in (logs or {}) if k.startswith("gckpt/")))

        cls.Seen = Seen

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def config_file(self, family):
        config = fixture(family, 1)["config"]
        path = os.path.join(self.tmp.name, f"{family}.json")
        with open(path, "w") as f:
            json.dump(config, f)
        return config, path

    def assert_valid(self, lines):
        errs = schema_check.report_errors(self.schema, lines)
        self.assertEqual(errs, [], "\n".join(errs[:20]))

    def test_families_within_fixture_tolerance(self):
        from gckpt.callback import PlanMismatchWarning, TrainerCallback

        for family in FAMILIES:
            for every_n in (0, 1):
                with self.subTest(family=family, every_n=every_n):
                    config, cfg_path = self.config_file(family)
                    plan = make_plan(cfg_path, os.path.join(self.tmp.name, f"{family}-{every_n}.json"), every_n)
                    report = os.path.join(self.tmp.name, f"{family}-{every_n}.jsonl")
                    cb = TrainerCallback(plan, report=report)
                    seen = self.Seen()
                    with warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always")
                        trainer = run_trainer(config, self.tmp.name, cb, every_n, extra=[seen])
                    mism = [str(w.message) for w in caught if issubclass(w.category, PlanMismatchWarning)]
                    self.assertEqual(mism, [])
                    lines, recs = read_report(report)
                    self.assert_valid(lines)
                    kinds = [r["record"] for r in recs]
                    self.assertEqual(kinds, ["header"] + ["step"] * STEPS + ["entry", "summary"])
                    steps = [r for r in recs if r["record"] == "step"]
                    self.assertEqual([s["judged"] for s in steps], [False] + [True] * (STEPS - 1))
                    self.assertEqual((steps[0]["pass"], steps[0]["memory"]["peak_bytes"]["pass"]), (None, None))
                    entry = recs[-2]
                    self.assertEqual((entry["every_n_layers"], entry["offload"]), (every_n, False))
                    pk = entry["memory"]["peak_bytes"]
                    fx = fixture(family, every_n)["steps"][1]["live_peak_bytes"]
                    if VERBOSE:
                        print(f"\n{family} every_n {every_n or 'off'}: predicted {pk['predicted']} measured "
                              f"{pk['measured']} ({pk['relative_error'] * 100:+.3f} %); steps "
                              f"{[s['memory']['peak_bytes']['measured'] for s in steps]}; probe fixture {fx}")
                    self.assertLessEqual(abs(pk["relative_error"]), TOLERANCE)
                    self.assertTrue(entry["pass"])
                    for s in steps[1:]:
                        self.assertTrue(s["pass"])
                        self.assertLessEqual(abs(s["memory"]["peak_bytes"]["relative_error"]), TOLERANCE)
                    self.assertEqual(recs[-1]["passed"], 1)
                    # the Trainer's logs, and a reporting callback listed before this one
                    logged = [h for h in trainer.state.log_history if "gckpt/measured_peak_bytes" in h]
                    self.assertEqual(len(logged), STEPS + 1)  # every step's log and the train summary
                    self.assertEqual(logged[-2]["gckpt/predicted_peak_bytes"], pk["predicted"])
                    self.assertEqual(logged[-2]["gckpt/measured_peak_bytes"], steps[-1]["memory"]["peak_bytes"]["measured"])
                    self.assertEqual(seen.keys, [["gckpt/measured_peak_bytes", "gckpt/predicted_peak_bytes",
                                                  "gckpt/step_s"]] * (STEPS + 1))

    def test_mismatched_plan_warns_and_runs_on(self):
        from gckpt.callback import PlanMismatchWarning, TrainerCallback

        config, cfg_path = self.config_file("llama")
        plan = make_plan(cfg_path, os.path.join(self.tmp.name, "plan.json"), 2)  # every_n 2, micro-batch 2
        report = os.path.join(self.tmp.name, "r.jsonl")
        cb = TrainerCallback(plan, report=report)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer = run_trainer(config, self.tmp.name, cb, every_n=0, micro_batch=1, optim="adamw_torch")
        self.assertEqual(trainer.state.global_step, STEPS)  # the run went on
        got = sorted(str(w.message) for w in caught if issubclass(w.category, PlanMismatchWarning))
        lines, recs = read_report(report)
        self.assert_valid(lines)
        codes = sorted(r["code"] for r in recs if r["record"] == "warning")
        self.assertEqual(codes, ["every_n_layers", "micro_batch", "no_entry", "optimizer"])
        self.assertEqual(len(got), 4)
        opt = next(r for r in recs if r.get("code") == "optimizer")
        self.assertEqual((opt["planned"], opt["live"]), ("adamw", "adamw-foreach"))
        n = next(r for r in recs if r.get("code") == "every_n_layers")
        self.assertEqual((n["planned"], n["live"]), (2, 0))
        self.assertEqual(recs[-1]["record"], "summary")

    def test_plans_at_the_first_batch_without_a_plan(self):
        """plan=None: gckpt.plan_for (hf_args) is asked with the first batch's length and, without
        CUDA, the cpu-exact profile; here a stand-in plan_for that records what it is asked and
        plans the model's config for the live every_n_layers with make_plan (the real one:
        test_plans_itself_with_plan_for)."""
        import types
        from unittest import mock

        import gckpt
        from gckpt.callback import PlanMismatchWarning, TrainerCallback

        config, _ = self.config_file("qwen3")
        asked = []

        def plan_for(model, args, seq=None, gpu=None):
            asked.append((seq, gpu, args.per_device_train_batch_size))
            path = os.path.join(self.tmp.name, "live-config.json")
            with open(path, "w") as f:
                json.dump(model.config.to_dict(), f)
            with open(make_plan(path, os.path.join(self.tmp.name, "live.json"), 1, seq=seq)) as f:
                return json.load(f)

        fake = types.ModuleType("gckpt.hf_args")
        fake.plan_for = plan_for
        report = os.path.join(self.tmp.name, "r.jsonl")
        # sys.modules gets only this key back: patch.dict(sys.modules) would also drop every
        # module imported meanwhile (datasets, imported twice, then fails)
        real = sys.modules.get("gckpt.hf_args")
        sys.modules["gckpt.hf_args"] = fake
        try:
            with mock.patch.object(gckpt, "hf_args", fake, create=True), warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                run_trainer(config, self.tmp.name, TrainerCallback(report=report), every_n=1)
        finally:
            if real is None:
                sys.modules.pop("gckpt.hf_args", None)
            else:
                sys.modules["gckpt.hf_args"] = real
        self.assertEqual(asked, [(SEQ, "cpu-exact", MB)])
        self.assertEqual([str(w.message) for w in caught if issubclass(w.category, PlanMismatchWarning)], [])
        lines, recs = read_report(report)
        self.assert_valid(lines)
        self.assertEqual([r["record"] for r in recs], ["header"] + ["step"] * STEPS + ["entry", "summary"])
        self.assertEqual(recs[0]["plan"]["seq"], SEQ)
        self.assertTrue(recs[-2]["pass"])

    def test_plans_itself_with_plan_for(self):
        """plan=None with the real gckpt.plan_for: the Trainer's own arguments and model, the
        first batch's length, cpu-exact (no CUDA here); the plan's selected entry is the
        configured setting and the run is within the fixture tolerance of it, the same
        prediction as the explicit plan of test_families_within_fixture_tolerance."""
        try:
            from gckpt import plan_for  # noqa: F401 - the real one, needing the C extension
            import gckpt._native  # noqa: F401
        except ImportError:
            self.skipTest("gckpt.plan_for needs the C extension (PYTHONPATH=build/python or pip install ./python)")
        from gckpt.callback import PlanMismatchWarning, TrainerCallback

        config, cfg_path = self.config_file("qwen3")
        report = os.path.join(self.tmp.name, "self.jsonl")
        cb = TrainerCallback(report=report)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run_trainer(config, self.tmp.name, cb, every_n=1)
        self.assertEqual([str(w.message) for w in caught if issubclass(w.category, PlanMismatchWarning)], [])
        lines, recs = read_report(report)
        self.assert_valid(lines)
        self.assertEqual([r["record"] for r in recs], ["header"] + ["step"] * STEPS + ["entry", "summary"])
        self.assertEqual((recs[0]["plan"]["seq"], recs[0]["plan"]["precision"], recs[0]["plan"]["optimizer"]),
                         (SEQ, "fp32", "adamw"))
        entry = recs[-2]
        self.assertEqual((entry["every_n_layers"], entry["offload"], entry["micro_batch"], entry["grad_accum"]),
                         (1, False, MB, GA))
        with open(make_plan(cfg_path, os.path.join(self.tmp.name, "explicit.json"), 1)) as f:
            explicit = json.load(f)
        want = next(e for e in explicit["entries"] if e["every_n_layers"] == 1)
        self.assertEqual(entry["memory"]["peak_bytes"]["predicted"], want["memory"]["peak_bytes"])
        self.assertLessEqual(abs(entry["memory"]["peak_bytes"]["relative_error"]), TOLERANCE)
        self.assertTrue(entry["pass"])

    def test_report_calibrates_a_profile_later_plans_use(self):
        """The loop closed: a callback report (its plan a file) -> gckpt.calibrate -> a profile
        whose plan predicts the step the calibration says it predicts after the fit."""
        try:
            import gckpt
            import gckpt._native  # noqa: F401
        except ImportError:
            self.skipTest("gckpt.calibrate needs the C extension")
        from gckpt.callback import TrainerCallback

        config, cfg_path = self.config_file("llama")
        plan = make_plan(cfg_path, os.path.join(self.tmp.name, "plan.json"), 1)
        report = os.path.join(self.tmp.name, "r.jsonl")
        run_trainer(config, self.tmp.name, TrainerCallback(plan, report=report), every_n=1)
        cal = gckpt.calibrate([report])
        self.assertEqual(cal.profile["calibration"]["measured_on"]["backend"], "hf-trainer")
        self.assertEqual(len(cal.profile["calibration"]["runs"]), 1)
        fitted = [k for k, v in cal.profile["calibration"]["knobs"].items() if v["fitted"]]
        self.assertTrue(fitted, cal.text)
        saved = cal.save(os.path.join(self.tmp.name, "calibrated.json"))
        later = gckpt.plan(cfg_path, gpu=saved, target="cpu", seq=SEQ, precision="fp32", optimizer="adamw",
                           attention="sdpa", micro_batch=MB, grad_accum=GA, every_n=1, offload="off")
        for k in fitted:
            self.assertEqual(later.inputs["device"][k], cal.profile[k])
        self.assertAlmostEqual(later.entries[0]["time"]["step_s"],
                               cal.profile["calibration"]["runs"][0]["predicted_after_s"], delta=1e-9)
        with open(plan) as f:
            before = json.load(f)["entries"][0]["time"]["step_s"]
        self.assertNotAlmostEqual(later.entries[0]["time"]["step_s"], before, delta=1e-9)

    def test_close_after_an_exception_in_a_step(self):
        """A step that raises leaves the CPU tracker's dispatch mode entered (no on_step_end);
        close() leaves it."""
        from torch.utils._python_dispatch import _get_current_dispatch_mode
        from transformers import TrainerCallback as HFCallback
        from gckpt.callback import TrainerCallback

        config, cfg_path = self.config_file("llama")
        plan = make_plan(cfg_path, os.path.join(self.tmp.name, "plan.json"), 0)
        cb = TrainerCallback(plan, report=os.path.join(self.tmp.name, "r.jsonl"))

        class Boom(HFCallback):
            def on_step_begin(self, args, state, control, model=None, **kw):
                if state.global_step == 1:
                    model.register_forward_pre_hook(lambda *a: (_ for _ in ()).throw(RuntimeError("boom")))

        with self.assertRaisesRegex(RuntimeError, "boom"):
            run_trainer(config, self.tmp.name, cb, extra=[Boom()])
        self.assertIsNotNone(_get_current_dispatch_mode())
        cb.close()
        self.assertIsNone(_get_current_dispatch_mode())

    def test_torchrun_two_ranks(self):
        """torchrun --nproc_per_node 2 (DDP over gloo on the CPU): one report per rank, each
        with its rank and the world size, the plan's world size matched (no warning)."""
        torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
        if not os.access(torchrun, os.X_OK):
            self.skipTest("no torchrun next to this python")
        config, cfg_path = self.config_file("llama")
        # the exact-bytes profile with a bus bandwidth, which a plan for several GPUs needs
        # to time its collectives (timing only: memory is what is compared here)
        with open(CPU_EXACT) as f:
            dev = json.load(f)
        for k in ("intra_node_bus_bytes_per_s", "inter_node_bus_bytes_per_s"):
            dev[k] = 10_000_000_000
            dev["sources"][k] = "estimate: a test value, timing only"
        gpu = os.path.join(self.tmp.name, "cpu-exact-bus.json")
        with open(gpu, "w") as f:
            json.dump(dev, f)
        plan = make_plan(cfg_path, os.path.join(self.tmp.name, "ddp.json"), 1, gpu=gpu, gpus=2)
        report = os.path.join(self.tmp.name, "ddp.jsonl")
        where = os.path.dirname(os.path.dirname(importlib.util.find_spec("gckpt").origin))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (where, os.environ.get("PYTHONPATH")) if p))
        out = subprocess.run([torchrun, "--nproc_per_node", "2", os.path.join(HERE, "callback_ddp_run.py"),
                              "llama", plan, report, self.tmp.name], env=env, capture_output=True, text=True,
                             timeout=600)
        self.assertEqual(out.returncode, 0, out.stderr[-3000:])
        for rank, path in ((0, report), (1, os.path.join(self.tmp.name, "ddp.rank1.jsonl"))):
            lines, recs = read_report(path)
            self.assert_valid(lines)
            self.assertEqual({r["rank"] for r in recs}, {rank})
            self.assertEqual(recs[0]["ranks"], {"world_size": 2, "parallel": "ddp"})
            self.assertEqual([r["record"] for r in recs], ["header"] + ["step"] * STEPS + ["entry", "summary"])
            pk = recs[-2]["memory"]["peak_bytes"]
            if VERBOSE:
                print(f"\nDDP rank {rank} llama every_n 1: predicted {pk['predicted']} steps "
                      f"{[r['memory']['peak_bytes']['measured'] for r in recs if r['record'] == 'step']}")

    def test_trl_sft_trainer(self):
        """Under TRL's SFTTrainer (a Trainer subclass) with a pre-tokenized dataset."""
        if importlib.util.find_spec("trl") is None:
            self.skipTest("trl is not installed")
        import datasets
        import torch
        import transformers
        from tokenizers import Tokenizer, models
        from trl import SFTConfig, SFTTrainer
        from gckpt.callback import PlanMismatchWarning, TrainerCallback

        transformers.logging.set_verbosity_error()
        config, cfg_path = self.config_file("llama")
        vocab = {f"t{i}": i for i in range(config["vocab_size"])}
        tok = transformers.PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="t0")),
                                                   pad_token="t0", eos_token="t1")
        cfg = transformers.AutoConfig.for_model("llama", **{k: v for k, v in config.items()
                                                           if k not in ("model_type", "transformers_version", "architectures")})
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", dtype=torch.float32)
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(3, cfg.vocab_size, (STEPS * MB * GA, SEQ), generator=g).tolist()
        ds = datasets.Dataset.from_dict({"input_ids": ids})
        plan = make_plan(cfg_path, os.path.join(self.tmp.name, "plan.json"), 1)
        report = os.path.join(self.tmp.name, "trl.jsonl")
        args = SFTConfig(output_dir=os.path.join(self.tmp.name, "out"), use_cpu=True, max_steps=STEPS, report_to="none",
                         save_strategy="no", logging_steps=1, disable_tqdm=True, learning_rate=1e-3,
                         per_device_train_batch_size=MB, gradient_accumulation_steps=GA, optim="adamw_torch_fused",
                         gradient_checkpointing=True, gradient_checkpointing_kwargs={"every_n_layers": 1, "offload": False},
                         max_length=SEQ, packing=False, bf16=False)  # SFTConfig's default is bf16=True
        trainer = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tok,
                             callbacks=[TrainerCallback(plan, report=report)])
        with warnings.catch_warnings(record=True) as caught, redirect_stdout(io.StringIO()), \
                redirect_stderr(io.StringIO()):
            warnings.simplefilter("always")
            trainer.train()
        lines, recs = read_report(report)
        self.assert_valid(lines)
        mism = [str(w.message) for w in caught if issubclass(w.category, PlanMismatchWarning)]
        entry = recs[-2]
        if VERBOSE:
            pk = entry["memory"]["peak_bytes"]
            print(f"\nTRL SFTTrainer llama every_n 1: predicted {pk['predicted']} measured {pk['measured']} "
                  f"({pk['relative_error'] * 100:+.3f} %); warnings {mism}")
        self.assertEqual(mism, [])
        self.assertEqual([r["record"] for r in recs], ["header"] + ["step"] * STEPS + ["entry", "summary"])
        self.assertIsNotNone(entry["memory"]["peak_bytes"]["measured"])
        # What the plan does not model (hf_args' SFTConfig warning): SFTTrainer's fused LM head
        # (trl 1.16, kernels/chunked_logprob.py) projects every shifted position on the CPU
        # (no Triton) into an fp32 tile of min(N, 4096) x 32768 columns, wider than this
        # 211-word vocabulary: the measured excess is that tile and some fp32 gradient buffers.
        pk = entry["memory"]["peak_bytes"]
        tile = min(MB * (SEQ - 1), 4096) * 32768 * 4
        self.assertGreaterEqual(pk["measured"] - pk["predicted"], tile)
        self.assertLessEqual(pk["measured"] - pk["predicted"], tile * 1.02)


@unittest.skipUnless(HAVE_TORCH, "needs torch and transformers (tools/hf_probe/.venv)")
class LiveSetting(unittest.TestCase):
    def test_checkpointing_read_back(self):
        """every_n_layers and offload as transformers 5.24 marks the layers."""
        import transformers
        from gckpt.callback import checkpointing_of, every_n_of

        transformers.logging.set_verbosity_error()
        cfg = transformers.LlamaConfig(num_hidden_layers=5, hidden_size=16, num_attention_heads=2,
                                       num_key_value_heads=1, intermediate_size=24, vocab_size=32)
        model = transformers.AutoModelForCausalLM.from_config(cfg)
        self.assertEqual(checkpointing_of(model), (5, [], False))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False},
                                                every_n_layers=2, offload=True)
        n, ckpt, off = checkpointing_of(model)
        self.assertEqual((n, ckpt, off, every_n_of(n, ckpt)), (5, [0, 2, 4], True, 2))
        model.activation_checkpointing_enable(every_n_layers=3, offload=False)
        n, ckpt, off = checkpointing_of(model)
        self.assertEqual((ckpt, off, every_n_of(n, ckpt)), ([0, 3], False, 3))
        self.assertIsNone(every_n_of(5, [1, 2]))


class Pure(unittest.TestCase):
    def test_import_needs_only_the_standard_library(self):
        code = ("import sys, gckpt.callback, gckpt.tracker; "
                "bad = [m for m in ('torch', 'transformers') if m in sys.modules]; "
                "assert not bad, bad; print(gckpt.callback.TrainerCallback.__name__)")
        # the gckpt these tests import (the checkout's, build/python or an installed one)
        where = os.path.dirname(os.path.dirname(importlib.util.find_spec("gckpt").origin))
        env = dict(os.environ, PYTHONPATH=where)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)

    def test_match_profile(self):
        """torch's names for these GPUs (unverified here: no GPU) against the shipped profiles."""
        from gckpt.callback import match_profile

        profiles = {}
        for fn in os.listdir(os.path.join(ROOT, "devices")):
            if fn.endswith(".json"):
                with open(os.path.join(ROOT, "devices", fn)) as f:
                    p = json.load(f)
                profiles[fn[:-5]] = (p["name"], p["memory_bytes"])
        gib = 1 << 30
        cases = [("NVIDIA H100 80GB HBM3", 79.1 * gib, "h100-sxm-80gb"), ("NVIDIA H100 PCIe", 79.1 * gib, "h100-pcie-80gb"),
                 ("NVIDIA H200", 139.8 * gib, "h200"), ("NVIDIA A100-SXM4-40GB", 39.4 * gib, "a100-40gb"),
                 ("NVIDIA A100-SXM4-80GB", 79.1 * gib, "a100-80gb"), ("NVIDIA L40S", 44.4 * gib, "l40s"),
                 ("NVIDIA GeForce RTX 4090", 23.6 * gib, "rtx-4090"), ("Tesla T4", 14.6 * gib, None)]
        for name, mem, want in cases:
            self.assertEqual(match_profile(name, int(mem), profiles), want, name)

    def test_plan_object_selected_entry(self):
        """A gckpt.Plan's selected entry is the one compared with, whatever the live setting."""
        try:
            from gckpt import Plan
        except ImportError:
            self.skipTest("gckpt.Plan is not in this package")
        from gckpt.callback import _plan_json, choose_entry

        entries = [{"index": i, "every_n_layers": n, "offload": False, "micro_batch": 2, "grad_accum": 2}
                   for i, n in enumerate((0, 1, 2))]
        p = Plan({"schema": "gckpt.plan/2", "inputs": {}, "entries": entries, "recommended": 0})
        live = {"every_n_layers": 1, "offload": False, "micro_batch": 2, "grad_accum": 2}
        self.assertEqual(choose_entry(*_plan_json(p)[:2], live), (entries[1], True))  # the live one
        p.selected = entries[2]
        self.assertEqual(choose_entry(*_plan_json(p)[:2], live), (entries[2], True))
        live["micro_batch"] = 1
        self.assertEqual(choose_entry(_plan_json(p)[0], None, live), (entries[0], False))  # the recommended

    def test_one_warning_per_difference(self):
        """differences(): every field of the live run that is not the planned one, once each
        (model type and layers, checkpointed layers, offload, batch, accumulation, precision,
        optimizer, world size); none for the planned run."""
        from gckpt.callback import differences

        plan = {"inputs": {"model": {"model_type": "llama", "layers": 4}, "precision": "amp-bf16",
                           "optimizer": "adamw", "layout": {"world_size": 8}}}
        entry = {"every_n_layers": 2, "offload": True, "micro_batch": 2, "grad_accum": 4,
                 "checkpointed_layers": [0, 2]}
        same = {"model_type": "llama", "nlayers": 4, "every_n_layers": 2, "checkpointed_layers": [0, 2],
                "offload": True, "micro_batch": 2, "grad_accum": 4, "precision": "amp-bf16", "optimizer": "adamw",
                "world_size": 8}
        self.assertEqual(differences(plan, entry, same), [])
        other = {"model_type": "qwen3", "nlayers": 6, "every_n_layers": 1, "checkpointed_layers": [0, 1, 2, 3, 4, 5],
                 "offload": False, "micro_batch": 1, "grad_accum": 8, "precision": "fp32", "optimizer": "adamw-8bit",
                 "world_size": 2}
        found = differences(plan, entry, other)
        self.assertEqual([c for c, *_ in found], ["model", "model", "every_n_layers", "offload", "micro_batch",
                                                  "grad_accum", "precision", "optimizer", "world_size"])
        self.assertEqual([(p, l) for c, p, l, _ in found if c == "world_size"], [(8, 2)])
        # layers no every_n_layers gives: named as the checkpointed layers
        odd = dict(same, every_n_layers=None, checkpointed_layers=[1, 2])
        self.assertEqual([c for c, *_ in differences(plan, entry, odd)], ["checkpointed_layers"])

    def test_cuda_tracker_resets_and_reads_the_statistics(self):
        """CudaStepTracker against a stand-in torch.cuda (no GPU here): the peak statistics are
        reset when a step begins; at its end max_memory_allocated is the peak, the reserved
        peak plus what mem_get_info shows outside PyTorch's cache the device peak."""
        import types
        from gckpt.tracker import CudaStepTracker

        calls = []
        gib = 1 << 30
        cuda = types.SimpleNamespace(
            synchronize=lambda d: calls.append(("synchronize", d)),
            reset_peak_memory_stats=lambda d: calls.append(("reset", d)),
            mem_get_info=lambda d: (70 * gib, 80 * gib),
            max_memory_allocated=lambda d: 7 * gib, max_memory_reserved=lambda d: 9 * gib,
            memory_reserved=lambda d: 8 * gib)
        t = CudaStepTracker.__new__(CudaStepTracker)
        t.torch, t.device, t.t0, t.used_peak = types.SimpleNamespace(cuda=cuda), 3, None, 0
        t.begin()
        self.assertEqual(calls, [("synchronize", 3), ("reset", 3)])
        m = t.end()
        self.assertEqual(calls[-1], ("synchronize", 3))
        # used 10 GiB now, 8 of them PyTorch's cache: 2 GiB outside it, on top of the 9 GiB reserved peak
        self.assertEqual((m["peak_bytes"], m["reserved_bytes"], m["device_used_bytes"], m["device_total_bytes"]),
                         (7 * gib, 9 * gib, 11 * gib, 80 * gib))
        self.assertGreaterEqual(m["step_s"], 0)

    def test_planning_gpu_says_when_no_profile_matches(self):
        from unittest import mock

        import gckpt.callback as cb

        with mock.patch.object(cb, "default_gpu", return_value=None), warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            self.assertIsNone(cb.planning_gpu(None))
        self.assertEqual(len(w), 1)
        self.assertIn("matches no shipped GPU profile", str(w[0].message))
        with mock.patch.object(cb, "default_gpu", return_value="h200"), warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            self.assertEqual(cb.planning_gpu(None), "h200")
            self.assertEqual(cb.planning_gpu("l40s"), "l40s")
        self.assertEqual(w, [])

    def test_bad_plan(self):
        from gckpt.callback import _plan_json

        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            f.write('{"schema": "gckpt.report/2"}')
        self.addCleanup(os.unlink, f.name)
        with self.assertRaisesRegex(ValueError, "field 'schema'"):
            _plan_json(f.name)


if __name__ == "__main__":
    unittest.main()
