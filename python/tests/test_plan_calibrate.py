"""gckpt.calibrate against gckpt-plan --calibrate-from: the same profile for the same
reports (the recorded GPT-2 host run in tests/data/calibration), the same refusals."""

import json
import os
import subprocess
import tempfile
import unittest
from pathlib import Path

import gckpt

ROOT = Path(__file__).resolve().parents[2]
CLI = os.environ.get("GCKPT_PLAN", str(ROOT / "build" / "gckpt-plan"))
REPORT = ROOT / "tests" / "data" / "calibration" / "gr.jsonl"
BASE = ROOT / "tests" / "data" / "devices" / "cpu-exact.json"


@unittest.skipUnless(os.access(CLI, os.X_OK), f"no gckpt-plan at {CLI} (set GCKPT_PLAN)")
class SameAsCli(unittest.TestCase):
    def setUp(self):
        self._epoch = os.environ.get("SOURCE_DATE_EPOCH")
        os.environ["SOURCE_DATE_EPOCH"] = "1700000000"  # the profile's date, for both

    def tearDown(self):
        if self._epoch is None:
            del os.environ["SOURCE_DATE_EPOCH"]
        else:
            os.environ["SOURCE_DATE_EPOCH"] = self._epoch

    def test_profile_equals_the_cli_s(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "cal.json")
            subprocess.run([CLI, "--calibrate-from", str(REPORT), "--gpu", str(BASE), "-q", "-o", out],
                           check=True, capture_output=True)
            want = json.loads(Path(out).read_text())
            c = gckpt.calibrate(REPORT, gpu=BASE)
            self.assertEqual(c.profile, want)
            self.assertTrue(c.profile["calibration"]["knobs"])
            self.assertIn("matmul_efficiency", c.text)
            saved = c.save(os.path.join(tmp, "mine.json"))
            # the saved profile plans
            p = gckpt.plan("gpt2", gpu=saved, seq=128, precision="fp32", every_n=[0])
            self.assertEqual(p.inputs["device"]["matmul_efficiency"], want["matmul_efficiency"])

    def test_refusals(self):
        with self.assertRaisesRegex(gckpt.PlanError, "cannot open"):
            gckpt.calibrate(["/nonexistent/run.jsonl"])
        with tempfile.TemporaryDirectory() as tmp:
            bad = Path(tmp, "plan.json")
            bad.write_text("{}")
            with self.assertRaises(gckpt.PlanError) as cm:
                gckpt.calibrate([bad])
            self.assertNotIn("\n", str(cm.exception))
        with self.assertRaises(gckpt.PlanError):
            gckpt.calibrate([])


if __name__ == "__main__":
    unittest.main()
