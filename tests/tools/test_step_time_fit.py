#!/usr/bin/env python3
"""tools/step_time_fit.py's two-stage fit against a closed form: synthetic points whose step
time is exactly the time model's (GEMM / mf + attention / af + bytes / hbm + ops x op_overhead
+ step_overhead, the terms the fit's linearization carries) at known parameters. The fit
must recover the hf code base's parameters from the hf points, the fused ones from the
fused points, and neither stage may move the other code base's parameters.

usage: test_step_time_fit.py --source SOURCE_DIR"""
import argparse
import random
import sys
import unittest

F = None  # tools/step_time_fit, imported from --source


def model_step(terms, p, seq):
    """The time model at parameters p for one point's per-term work."""
    g, a, h, n = terms
    return (g / p["matmul_factor"] + a * (1 + p["attention_seq_half"] / seq) / p["attention_factor"]
            + h / p["hbm_factor"] + n * p["op_overhead_s"] + p["step_overhead_s"])


def synthetic(true, start, seed=7):
    """rows and their exact linearization at start: 3 fused and 2 hf sources on A100 and
    H100, work terms drawn so that GEMM, attention, memory, launch and per-step costs vary
    independently."""
    rng = random.Random(seed)
    rows, lin = [], {}
    sources = [("f1", "custom-eager", 12), ("f2", "custom-eager", 8), ("f3", "custom-compiled", 6),
               ("h1", "hf-eager", 10), ("h2", "hf-eager", 8)]
    for src, cls_name, n in sources:
        for i in range(n):
            gpu = ("a100-80gb", "h100-sxm-80gb")[i % 2]
            seq = rng.choice([256, 1024, 4096, 8192])
            terms = (rng.uniform(0.2, 2.0), rng.uniform(0.0, 1.0) * seq / 8192, rng.uniform(0.05, 0.5),
                     rng.uniform(1e3, 3e4))
            r = {"id": f"{src}-{i}", "source": src, "gpu_profile": gpu, "code_base_class": cls_name,
                 "seq": str(seq), "micro_batch": "1", "grad_accum": "1"}
            cls, cb = F.CLASS_OF[gpu], F.code_base(r)
            t_true = model_step(terms, F.params_for(true, cls, cb), seq)
            r["tokens_per_s_gpu"] = repr(seq / t_true)
            p0 = F.params_for(start, cls, cb)
            g, a, h, nops = terms
            lin[r["id"]] = {"t": model_step(terms, p0, seq), "p": p0, "mf": g,
                            "af": a * (1 + p0["attention_seq_half"] / seq), "hf": h, "ovh": nops, "step": 1.0}
            rows.append(r)
    return rows, lin


def vector(**named):
    """The fitted vector with the named parameters set, the others at their start values."""
    v = [p[1] for p in F.PARAMS]
    for k, x in named.items():
        v[F.PNAMES.index(k.replace("__", "."))] = x
    return v


class TwoStages(unittest.TestCase):
    TRUE = dict(fused__mf__A100=0.8, fused__mf__H100=0.7, fused__af__A100=0.4, fused__af__H100=0.25,
                fused__seq_half=0.0, fused__hf=2.0, fused__ovh=5e-6, fused__step=0.08,
                hf__r_mf=0.9, hf__r_af=1.0, hf__hf=0.6, hf__step=0.03)

    def setUp(self):
        self.true = vector(**self.TRUE)
        self.start = [p[1] for p in F.PARAMS]
        self.rows, self.lin = synthetic(self.true, self.start)

    def test_recovers_both_code_bases(self):
        theta = F.fit(self.rows, self.lin, self.start)
        for name in ("hf.r_mf", "hf.hf", "hf.step", "fused.mf.A100", "fused.af.H100", "fused.step"):
            i = F.PNAMES.index(name)
            self.assertAlmostEqual(theta[i], self.true[i], delta=0.05 * abs(self.true[i]) + 1e-3, msg=name)
        worst = max(abs(F.surrogate(self.lin, r, theta) / F.published_step(r) - 1) for r in self.rows)
        self.assertLess(worst, 0.01)

    def test_hf_points_do_not_move_fused_parameters(self):
        theta = F.fit(self.rows, self.lin, self.start)
        slower = [dict(r, tokens_per_s_gpu=repr(float(r["tokens_per_s_gpu"]) / 1.5))
                  if F.code_base(r) == "hf" else r for r in self.rows]
        theta2 = F.fit(slower, self.lin, self.start)
        for name, a, b in zip(F.PNAMES, theta, theta2):
            if name.startswith("fused."):
                self.assertEqual(a, b, msg=name)
        self.assertGreater(theta2[F.PNAMES.index("hf.step")], theta[F.PNAMES.index("hf.step")])

    def test_weights_per_code_base(self):
        w = F.weights(self.rows, "hf")
        for r in self.rows:
            want = (1 / (10 ** 0.5) if r["source"] == "h1" else 1 / (8 ** 0.5)) if F.code_base(r) == "hf" else 0.0
            self.assertAlmostEqual(w[r["id"]], want, msg=r["id"])


def main():
    global F
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    args, rest = ap.parse_known_args()
    sys.path.insert(0, f"{args.source}/tools")
    import step_time_fit
    F = step_time_fit
    unittest.main(argv=[sys.argv[0]] + rest)


if __name__ == "__main__":
    main()
