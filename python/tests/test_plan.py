"""gckpt.plan against gckpt-plan: the same request gives the same JSON plan (every shipped
model x three settings), or the same one-line refusal; Plan's accessors; bad options.

Run: PYTHONPATH=build/python GCKPT_PLAN=build/gckpt-plan python3 -m unittest discover -s python/tests
(CTest's python_package does; tests/ci/python_package.sh runs it against pip install ./python)."""

import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import gckpt

ROOT = Path(__file__).resolve().parents[2]
CLI = os.environ.get("GCKPT_PLAN", str(ROOT / "build" / "gckpt-plan"))
MODELS = sorted(p.stem for p in (ROOT / "models").glob("*.json"))

# (gpu, seq, options) four ways a user plans: the defaults; LoRA with a sweep of batches
# and checkpointing; four GPUs under ZeRO-3 with a budget; pure bf16 with 8-bit AdamW and
# gradient accumulation. Each shipped model plans at least three of them (GPT-2's 1,024
# positions refuse the first's 2,048 tokens, the mixture-of-experts models the second's
# all-linear LoRA): the refusals are compared too.
SETTINGS = [
    ("a100-80gb", 2048, {}),
    ("h100-sxm-80gb", 1024, {"method": "lora", "lora_rank": 8, "micro_batch": [1, 2], "every_n": [0, 1, 2],
                             "offload": "on", "grad_accum": 4}),
    ("rtx-4090", 512, {"gpus": 4, "parallel": "zero3", "budget": "20GiB", "margin": "2%"}),
    ("l40s", 1024, {"precision": "bf16", "optimizer": "adamw-8bit", "every_n": [0, 2], "offload": "both",
                    "micro_batch": [1, 4], "grad_accum": 2}),
]


def cli_args(model, gpu, seq, opts):
    args = ["--model", model, "--gpu", gpu, "--seq", str(seq)]
    for k, v in opts.items():
        if isinstance(v, list):
            v = ",".join("off" if x == 0 and k == "every_n" else str(x) for x in v)
        args += ["--" + k.replace("_", "-"), str(v)]
    return args


def run_cli(args):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "plan.json")
        r = subprocess.run([CLI, *args, "-q", "-o", out], capture_output=True, text=True)
        if r.returncode != 0:
            return None, r.stderr.strip().removeprefix("gckpt-plan: ")
        with open(out) as f:
            return json.load(f), None


@unittest.skipUnless(os.access(CLI, os.X_OK), f"no gckpt-plan at {CLI} (set GCKPT_PLAN)")
class SameAsCli(unittest.TestCase):
    def test_every_model_three_settings(self):
        self.assertGreaterEqual(len(MODELS), 20)
        planned = refused = 0
        per_model = {m: 0 for m in MODELS}
        for model in MODELS:
            for gpu, seq, opts in SETTINGS:
                with self.subTest(model=model, gpu=gpu, opts=opts):
                    want, err = run_cli(cli_args(model, gpu, seq, opts))
                    if err is not None:
                        with self.assertRaises(gckpt.PlanError) as cm:
                            gckpt.plan(model, gpu=gpu, seq=seq, **opts)
                        self.assertEqual(str(cm.exception), err)
                        refused += 1
                        continue
                    p = gckpt.plan(model, gpu=gpu, seq=seq, **opts)
                    self.assertEqual(p.json, want)  # every number, byte for byte once parsed
                    rec = want["recommended"]
                    if rec is None:
                        self.assertIsNone(p.recommended)
                    else:
                        self.assertEqual(p.recommended["memory"]["device_peak_bytes"],
                                         want["entries"][rec]["memory"]["device_peak_bytes"])
                    planned += 1
                    per_model[model] += 1
        # every shipped model compared at three settings at least: a refusal compares no numbers
        self.assertEqual({m: n for m, n in per_model.items() if n < 3}, {})
        print(f"\n{planned} plans equal to gckpt-plan's ({len(MODELS)} models, each at >= 3 settings), "
              f"{refused} refusals equal", file=sys.stderr)

    def test_snippet_is_the_cli_s(self):
        r = subprocess.run([CLI, "--model", "llama-3.2-1b", "--gpu", "a100-40gb", "--seq", "2048"],
                           capture_output=True, text=True, check=True)
        p = gckpt.plan("llama-3.2-1b", gpu="a100-40gb", seq=2048)
        self.assertIn(p.snippet(), r.stdout)
        self.assertEqual(p.text(), r.stdout)

    def test_config_dict_and_folder(self):
        cfg = json.loads((ROOT / "models" / "qwen2.5-0.5b.json").read_text())
        want, _ = run_cli(["--model", str(ROOT / "models" / "qwen2.5-0.5b.json"), "--seq", "1024"])
        p = gckpt.plan(cfg, seq=1024)
        # the same plan but for the model's name, which a dict does not have
        got = json.loads(json.dumps(p.json))
        got["inputs"]["model"]["name"] = want["inputs"]["model"]["name"]
        self.assertEqual(got, want)
        with tempfile.TemporaryDirectory() as tmp:
            Path(tmp, "config.json").write_text(json.dumps(cfg))
            q = gckpt.plan(tmp, seq=1024)
            self.assertEqual(q.entries, want["entries"])
        self.assertIn("per_device_train_batch_size=1", p.snippet())


def _have_transformers():
    import importlib.util
    return all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))


@unittest.skipUnless(_have_transformers(), "needs torch and transformers (tools/hf_probe/.venv)")
class TransformersObjects(unittest.TestCase):
    def test_config_and_meta_model_plan_as_the_name(self):
        """A PretrainedConfig and a model on the meta device (nothing allocated) plan as the
        shipped config.json they were made from."""
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM
        d = json.loads((ROOT / "models" / "qwen2.5-0.5b.json").read_text())
        cfg = AutoConfig.for_model(d["model_type"], **{k: v for k, v in d.items() if k not in (
            "model_type", "transformers_version", "architectures")})
        want = gckpt.plan("qwen2.5-0.5b", seq=1024, every_n=[0, 2]).entries
        self.assertEqual(gckpt.plan(cfg, seq=1024, every_n=[0, 2]).entries, want)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(cfg)
        self.assertTrue(all(p.device.type == "meta" for p in model.parameters()))
        self.assertEqual(gckpt.plan(model, seq=1024, every_n=[0, 2]).entries, want)


class PlanObject(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.p = gckpt.plan("llama-3.2-1b", gpu="a100-40gb", seq=2048, micro_batch=[1, 2], every_n=[0, 1, 4])

    def test_accessors(self):
        p = self.p
        self.assertEqual(len(p.entries), 2 * (1 + 2 * 2))  # off, 1 and 4 with and without offload, x2 batches
        self.assertTrue(all(e["pareto"] for e in p.frontier))
        self.assertIs(p.recommended, p.entries[p.json["recommended"]])
        e = p.find(every_n_layers=4, offload=True, micro_batch=2)
        self.assertEqual((e["every_n_layers"], e["offload"], e["micro_batch"]), (4, True, 2))
        self.assertIsNone(p.find(every_n_layers=3))

    def test_training_arguments(self):
        e = self.p.find(every_n_layers=4, offload=True, micro_batch=2)
        self.assertEqual(self.p.training_arguments(e), {
            "per_device_train_batch_size": 2, "gradient_accumulation_steps": 1, "bf16": True,
            "optim": "adamw_torch_fused", "gradient_checkpointing": True,
            "gradient_checkpointing_kwargs": {"every_n_layers": 4, "offload": True}})
        s = self.p.snippet(e)
        self.assertIn('gradient_checkpointing_kwargs={"every_n_layers": 4, "offload": True}', s)
        self.assertIn("per_device_train_batch_size=2", s)

    def test_to_json_and_load(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "plan.json")
            self.p.to_json(path)
            q = gckpt.Plan.load(path)
            self.assertEqual(q.json, self.p.json)
            self.assertEqual(q.training_arguments(), self.p.training_arguments())
            with self.assertRaises(gckpt.PlanError):
                q.snippet()  # read from a file: no request to re-plan
            Path(tmp, "bad.json").write_text("{")
            with self.assertRaisesRegex(gckpt.PlanError, "malformed JSON"):
                gckpt.Plan.load(os.path.join(tmp, "bad.json"))


class BadOptions(unittest.TestCase):
    def test_refusals_are_the_cli_s_lines(self):
        cases = [
            (dict(seq=0), "--seq: '0' is not an integer in [1, 16777216]"),
            (dict(lora_rank=8), "--lora-rank needs --method lora or qlora"),
            (dict(precision="fp8"), "--precision: unknown 'fp8'"),
            (dict(gpus=2), "2 GPUs: choose --parallel"),
            (dict(gpus=2, parallel=["ddp", "fsdp"]), "plan one mode at a time"),
            (dict(every_n="x"), "--every-n: 'x'"),
            (dict(wat=1), "unknown option 'wat'"),
            (dict(allow_long_seq="yes"), "allow_long_seq: True or False"),
        ]
        for opts, msg in cases:
            with self.subTest(opts=opts):
                with self.assertRaises(gckpt.PlanError) as cm:
                    gckpt.plan("llama-3.2-1b", **opts)
                self.assertIn(msg, str(cm.exception))
                self.assertNotIn("\n", str(cm.exception))

    def test_bad_model_and_gpu(self):
        with self.assertRaisesRegex(gckpt.PlanError, "no-such-model"):
            gckpt.plan("no-such-model")
        with self.assertRaisesRegex(gckpt.PlanError, "no-such-gpu"):
            gckpt.plan("llama-3.2-1b", gpu="no-such-gpu")
        with self.assertRaises(gckpt.PlanError):
            gckpt.plan(object())

    def test_deepspeed_dict_is_the_file_s_plan(self):
        ds = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
              "bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto"}}
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "ds.json")
            Path(path).write_text(json.dumps(ds))
            want = gckpt.plan("llama-3.2-1b", seq=1024, gpus=4, deepspeed=path)
        got = gckpt.plan("llama-3.2-1b", seq=1024, gpus=4, deepspeed=ds)
        self.assertEqual(got.entries, want.entries)
        self.assertEqual(got.inputs["layout"]["parallel"], "zero3")

    def test_cpu_exact_profile_is_shipped(self):
        p = gckpt.plan("qwen2.5-0.5b", gpu="cpu-exact", seq=128, precision="fp32")
        self.assertEqual(p.inputs["target"], "cpu")


if __name__ == "__main__":
    unittest.main()
