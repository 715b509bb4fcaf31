#!/usr/bin/env python3
"""tools/compare_plans_memory.py on real plans of gckpt-plan, edited by hand: what it must
ignore (times, the warnings' text, the generator's version, the device's code bases) exits 0;
every memory fact it must see (a peak, a breakdown part, fits, an entry, a refusal, a
warning's code) is reported on its line and exits 1.

usage: test_compare_plans_memory.py --plan BUILD/gckpt-plan --source SOURCE_DIR"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

PLAN = SOURCE = None


def tool(*args):
    r = subprocess.run([sys.executable, os.path.join(SOURCE, "tools", "compare_plans_memory.py"), *args],
                       capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


class CompareMemory(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="cmpmem-")
        cls.old = os.path.join(cls.tmp, "old")
        os.mkdir(cls.old)
        env = dict(os.environ, GCKPT_DATA_DIR=SOURCE)
        cases = {  # name: options (the last one is refused: GPT-2 has no q_proj)
            "a": ["--model", "llama-3.2-1b", "--micro-batch", "1,2", "--every-n", "off,1,2"],
            "b": ["--model", "qwen3-8b", "--gpus", "2", "--parallel", "fsdp", "--every-n", "off,1"],
            "r": ["--model", "gpt2", "--method", "lora", "--lora-targets", "q_proj"],
        }
        for name, opts in cases.items():
            with open(os.path.join(cls.old, name + ".txt"), "w") as out, \
                    open(os.path.join(cls.old, name + ".err"), "w") as err:
                subprocess.run([PLAN, *opts, "--table", "all", "-o", name + ".json"], cwd=cls.old, env=env,
                               stdout=out, stderr=err)
        assert os.path.exists(os.path.join(cls.old, "a.json")) and os.path.exists(os.path.join(cls.old, "b.json"))
        assert not os.path.exists(os.path.join(cls.old, "r.json")), "case r was meant to be refused"

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def copy(self, edit=None, name="a"):
        """A copy of the old directory with plan NAME edited by EDIT(plan)."""
        new = tempfile.mkdtemp(dir=self.tmp)
        shutil.rmtree(new)
        shutil.copytree(self.old, new)
        if edit:
            p = os.path.join(new, name + ".json")
            with open(p) as f:
                plan = json.load(f)
            edit(plan)
            with open(p, "w") as f:
                json.dump(plan, f)
        return new

    def test_same_directory(self):
        rc, out = tool(self.old, self.old)
        self.assertEqual(rc, 0, out)
        self.assertIn("planned in both: 2; planned in both with a memory difference: 0", out)
        self.assertIn("1  refused in both, same text", out)

    def test_time_and_text_ignored(self):
        def edit(p):
            p["generator"]["version"] = "9.9.9"
            p["inputs"]["code_base"] = "hf"
            p["inputs"]["device"]["code_bases"] = {"fused": {"matmul_factor": 0.5}}
            p["inputs"]["device"]["peak_tflops"]["bf16"] *= 2  # a rate: counted apart
            for e in p["entries"]:
                e["time"]["step_s"] *= 3
                e["pareto"] = not e["pareto"]
            for w in p["warnings"]:
                w["message"] = "reworded"
        rc, out = tool(self.old, self.copy(edit))
        self.assertEqual(rc, 0, out)
        self.assertIn("with different time inputs (device rates, ignored): 1", out)

    def test_memory_facts_reported(self):
        seen = {}

        def edit(p):
            e = p["entries"][1]
            seen["key"] = "[every_n={},offload={},mb={},ga={}]".format(
                e["every_n_layers"], "on" if e["offload"] else "off", e["micro_batch"], e["grad_accum"])
            e["memory"]["peak_bytes"] += 4096
            e["memory"]["breakdown"]["activations"] += 4096
            e["fits"] = not e["fits"]
            p["warnings"].append({"code": "made_up_code", "message": "x"})
        rc, out = tool("--detail", self.old, self.copy(edit))
        self.assertEqual(rc, 1, out)
        k = seen["key"]
        self.assertIn(f"a {k} memory.peak_bytes: ", out)
        self.assertIn(f"a {k} memory.breakdown.activations: ", out)
        self.assertIn(f"a {k} fits: ", out)
        self.assertIn("a warning code new: <absent> -> made_up_code", out)

    def test_entries_matched_by_setting(self):
        # the same entries in another order are equal; a dropped entry is reported by its setting
        rc, out = tool(self.old, self.copy(lambda p: p["entries"].reverse()))
        self.assertNotIn("memory.", out)
        rc, out = tool(self.old, self.copy(lambda p: p["entries"].pop(0)))
        self.assertEqual(rc, 1, out)
        self.assertIn("entry removed", out)

    def test_refused_and_planned(self):
        new = self.copy()
        os.remove(os.path.join(new, "b.json"))
        shutil.copy(os.path.join(self.old, "a.json"), os.path.join(new, "r.json"))
        rc, out = tool(self.old, new)
        self.assertEqual(rc, 1, out)
        self.assertIn("1  newly refused (planned before)\n          b", out)
        self.assertIn("1  newly planned (refused before)\n          r   [", out)

    def test_recommended_change(self):
        def edit(p):
            p["recommended"] = (p["recommended"] + 1) % len(p["entries"])
        rc, out = tool(self.old, self.copy(edit))
        self.assertEqual(rc, 0, out)  # a recommendation is chosen by time: not a memory difference
        self.assertIn("1  plans whose recommended entry changed", out)
        self.assertIn("1    old recommended setting exists, same memory", out)

    def test_bad_directory(self):
        rc, out = tool(self.old, os.path.join(self.tmp, "nope"))
        self.assertEqual(rc, 2, out)
        self.assertIn("nope: not a directory", out)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--plan", required=True)
    ap.add_argument("--source", required=True)
    a, rest = ap.parse_known_args()
    PLAN, SOURCE = os.path.abspath(a.plan), os.path.abspath(a.source)
    unittest.main(argv=[sys.argv[0], *rest])
