"""Hub model ids from Python: gckpt.plan and gckpt.plan_for against the stand-in Hub of
tests/hub/fake_hub.py on 127.0.0.1 (the C planner resolves the id: the same code as
gckpt-plan --model ORG/NAME, tested there by tests/hub/test_hub.py). A download lands in
the Hugging Face cache and plans again with the network unreachable; a refusal is a
PlanError of one line and leaves the cache empty; plan_for reads the Hub config it plans
(model_type, dtype, quantization) as it reads a local one.

Run: PYTHONPATH=build/python python3 -m unittest discover -s python/tests -p 'test_plan_hub.py'"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import types
import unittest
from pathlib import Path
from unittest import mock

import gckpt

ROOT = Path(__file__).resolve().parents[2]
FAKE_HUB = ROOT / "tests" / "hub" / "fake_hub.py"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _native():
    try:
        import gckpt._native  # noqa: F401
        return True
    except ImportError:
        return False


def closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return "http://127.0.0.1:%d" % port


@unittest.skipUnless(_native(), "gckpt._native (the C planner extension) not importable")
@unittest.skipUnless(FAKE_HUB.exists(), f"no {FAKE_HUB}")
class HubFromPython(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.hub = subprocess.Popen([sys.executable, str(FAKE_HUB)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   text=True)
        line = cls.hub.stdout.readline()  # blocks until the server listens
        if not line.startswith("fake-hub port "):
            raise RuntimeError("fake hub did not start: %r" % line)
        cls.url = "http://127.0.0.1:%d" % int(line.split()[-1])

    @classmethod
    def tearDownClass(cls):
        cls.hub.stdin.close()
        cls.hub.wait(timeout=30)
        cls.hub.stdout.close()

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gckpt-pyhub-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        keep = {k: v for k, v in os.environ.items()
                if not k.startswith(("HF_", "HUGGINGFACE_", "TRANSFORMERS_OFFLINE", "XDG_CACHE_HOME"))}
        env = mock.patch.dict(os.environ, dict(keep, HOME=self.dir, HF_HOME=os.path.join(self.dir, "hf"),
                                               HF_ENDPOINT=self.url, WORLD_SIZE="1"), clear=True)
        env.start()
        self.addCleanup(env.stop)
        self.cache = os.path.join(self.dir, "hf", "hub")

    def cache_files(self):
        out = []
        for root, _, files in os.walk(os.path.join(self.dir, "hf")):
            out += [os.path.relpath(os.path.join(root, f), self.cache) for f in files]
        return sorted(out)

    def test_plan_downloads_then_plans_offline(self):
        p = gckpt.plan("ok/tiny", seq=128, every_n=1)
        self.assertEqual(p.inputs["model"]["hub"], {"id": "ok/tiny", "revision": "main", "commit": COMMIT})
        self.assertEqual(self.cache_files(), ["models--ok--tiny/refs/main",
                                              f"models--ok--tiny/snapshots/{COMMIT}/config.json"])
        # the network unreachable (and offline): the cached config, the same plan
        with mock.patch.dict(os.environ, {"HF_ENDPOINT": closed_port(), "HF_HUB_OFFLINE": "1"}):
            q = gckpt.plan("ok/tiny", seq=128, every_n=1)
        self.assertEqual(q.json, p.json)
        self.assertIn('from_pretrained("ok/tiny"', q.snippet())
        with mock.patch.dict(os.environ, {"HF_ENDPOINT": closed_port()}):
            self.assertEqual(gckpt.plan("ok/tiny", seq=128, every_n=1).entries, p.entries)
        r = gckpt.plan("ok/tiny", revision="v1.0", seq=128, every_n=1)
        self.assertEqual(r.inputs["model"]["hub"]["revision"], "v1.0")

    def test_refusals_are_one_line_and_store_nothing(self):
        cases = [("missing/tiny", {}, "not found on the Hub (HTTP 404"),
                 ("private/tiny", {}, "set HF_TOKEN"),
                 ("malformed/tiny", {}, "is not valid JSON"),
                 ("drop/tiny", {}, "was dropped"),
                 ("ok/tiny", {"HF_HUB_OFFLINE": "1"}, "is not in the Hugging Face cache")]
        for model, env, needle in cases:
            with self.subTest(model=model, env=env):
                with mock.patch.dict(os.environ, env), self.assertRaises(gckpt.PlanError) as cm:
                    gckpt.plan(model, seq=128, every_n=1)
                self.assertIn(needle, str(cm.exception))
                self.assertNotIn("\n", str(cm.exception))
                self.assertEqual(self.cache_files(), [])
                with mock.patch.dict(os.environ, env), self.assertRaises(gckpt.PlanError) as cm:
                    gckpt.plan_for(model, types.SimpleNamespace(per_device_train_batch_size=1), seq=128)
                self.assertIn(needle, str(cm.exception))
                self.assertEqual(self.cache_files(), [])

    def test_plan_for_reads_the_hub_config(self):
        """plan_for on a Hub id reads the downloaded config as a local one: peft's default
        targets for its model_type (gpt2: c_attn), and the plan keeps the Hub id."""
        lora = types.SimpleNamespace(peft_type="LORA", r=8, lora_alpha=16, lora_dropout=0.0, target_modules=None,
                                     modules_to_save=None, bias="none", task_type="CAUSAL_LM")
        args = types.SimpleNamespace(per_device_train_batch_size=2, gradient_accumulation_steps=2, bf16=True,
                                     gradient_checkpointing=True)
        try:
            import peft  # noqa: F401 - target_modules=None is peft's table
        except ImportError:
            lora.target_modules = ["c_attn"]
        p = gckpt.plan_for("ok/tiny", args, seq=128, peft_config=lora)
        self.assertEqual(p.inputs["model"]["hub"], {"id": "ok/tiny", "revision": "main", "commit": COMMIT})
        self.assertEqual(p.inputs["lora"]["targets"], "c_attn")
        s = p.selected
        self.assertEqual((s["every_n_layers"], s["offload"], s["micro_batch"], s["grad_accum"]), (1, False, 2, 2))
        # and offline, from the cache
        with mock.patch.dict(os.environ, {"HF_ENDPOINT": closed_port(), "HF_HUB_OFFLINE": "1"}):
            q = gckpt.plan_for("ok/tiny", args, seq=128, peft_config=lora)
        self.assertEqual(q.selected, s)
        # a revision reaches the resolver and the plan, as gckpt.plan(revision=) does
        r = gckpt.plan_for("ok/tiny", args, seq=128, peft_config=lora, revision="v1.0")
        self.assertEqual(r.inputs["model"]["hub"]["revision"], "v1.0")
        self.assertEqual(r.selected, s)


if __name__ == "__main__":
    unittest.main()
