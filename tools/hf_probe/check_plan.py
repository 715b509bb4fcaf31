"""Check gckpt-plan against your own CPU run of a real Hugging Face model.

Given a config.json, this runs one real transformers training setting on the CPU with the
probe (probe.py --config: real gradient_checkpointing_enable(every_n_layers, offload), an
optimizer step first so that step 2 is the steady state, live bytes from torch's own
allocator through torch.profiler), plans the same setting with
`gckpt-plan --target cpu --gpu tests/data/devices/cpu-exact.json` (PyTorch's CPU kernels,
exact byte accounting: no rounding, no context), and prints measured next to planned:

    tools/hf_probe/.venv/bin/python tools/hf_probe/check_plan.py --config path/to/config.json \\
        --precision bf16 --every-n 2 --offload --batch 2 --seq 64

Exit status 0 when every figure agrees (the peak and the bytes after the forward within
0.1 %, 0.5 % in pure bf16, as tests/test_hf_fixtures allows; the offloaded bytes and the
host peak exactly), 1 when one does not, 2 on bad usage. Keep the measured fixture with
--keep FILE (gckpt-hf-compare FILE then shows saved tensors layer by layer).

Figures compared (the plan's entry / the probe's steady-state step):
  memory.peak_bytes           / live_peak_bytes      what would be on a GPU at the peak
  memory.after_forward_bytes  / after_forward_bytes  live after micro-step 1's forward
  memory.host_pinned_bytes    / offload_bytes        offload's copies (host memory)
  host_pinned + host_rng_state_bytes / host_peak_bytes  host peak: offload + the RNG states
                                                        torch.utils.checkpoint keeps
On a CPU all of it is the same RAM: the run's own peak is at most peak + host peak.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))


def plan_args(a, plan_path):
    args = [a.gckpt_plan, "--model", a.config, "--gpu", a.device, "--target", "cpu",
            "--precision", a.precision, "--attention", a.attention, "--seq", str(a.seq),
            "--micro-batch", str(a.batch), "--grad-accum", str(a.grad_accum),
            "--every-n", a.every_n, "--offload", "on" if a.offload else "off", "-q", "-o", plan_path]
    return args


def probe_args(a, fixture_path):
    args = [sys.executable, os.path.join(HERE, "probe.py"), "--config", a.config, "--precision", a.precision,
            "--autocast-lists", "cpu", "--attention", a.attention, "--every-n", a.every_n, "--batch", str(a.batch),
            "--seq", str(a.seq), "--grad-accum", str(a.grad_accum), "--no-compare", "-o", fixture_path]
    if a.offload:
        args.append("--offload")
    if a.dropout is not None:
        args += ["--dropout", str(a.dropout)]
    return args


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True, help="a config.json, or a name in models/")
    ap.add_argument("--precision", choices=["fp32", "bf16", "amp-bf16"], default="amp-bf16")
    ap.add_argument("--attention", choices=["sdpa", "eager"], default="sdpa")
    ap.add_argument("--every-n", default="1", help="off or N (every_n_layers)")
    ap.add_argument("--offload", action="store_true")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--grad-accum", type=int, default=1)
    ap.add_argument("--dropout", type=float, default=None, help="override every dropout probability of the config")
    ap.add_argument("--gckpt-plan", default=os.path.join(ROOT, "build", "gckpt-plan"))
    ap.add_argument("--device", default=os.path.join(ROOT, "tests", "data", "devices", "cpu-exact.json"))
    ap.add_argument("--keep", help="keep the probe's fixture in this file")
    a = ap.parse_args(argv)
    if not os.access(a.gckpt_plan, os.X_OK):
        print(f"check_plan: {a.gckpt_plan} is not an executable gckpt-plan (build it, or pass --gckpt-plan)",
              file=sys.stderr)
        return 2
    config = a.config
    if not os.path.exists(config) and os.path.exists(os.path.join(ROOT, "models", config + ".json")):
        a.config = os.path.join(ROOT, "models", config + ".json")

    tmp = tempfile.mkdtemp(prefix="gckpt-check-")
    try:
        fixture = a.keep or os.path.join(tmp, "fixture.json")
        plan = os.path.join(tmp, "plan.json")
        p = subprocess.run(plan_args(a, plan), capture_output=True, text=True)
        if p.returncode != 0:
            sys.stderr.write(p.stderr)
            return 2
        p = subprocess.run(probe_args(a, fixture), stdout=subprocess.PIPE, text=True)
        # the probe's line names the fixture file, a temporary unless --keep
        sys.stdout.write(p.stdout if a.keep else p.stdout.replace(f", fixture {fixture}", ""))
        if p.returncode != 0:
            return 2
        with open(plan) as f:
            entry = json.load(f)["entries"][0]["memory"]
        with open(fixture) as f:
            fx = json.load(f)
        step = fx["steps"][-1]
        tol = 0.005 if a.precision == "bf16" else 0.001
        rows = [
            ("live peak (steady-state step)", step["live_peak_bytes"], entry["peak_bytes"], tol),
            ("live bytes after the forward", step["after_forward_bytes"], entry["after_forward_bytes"], tol),
            ("offloaded to host", fx["offload_bytes"], entry["host_pinned_bytes"], 0),
            ("host peak (offload + RNG states)", step["host_peak_bytes"],
             entry["host_pinned_bytes"] + entry["host_rng_state_bytes"], 0),
        ]
        ok = True
        print(f"\n{os.path.basename(a.config)}: {a.precision}, {a.attention}, every_n {a.every_n}, "
              f"offload {'on' if a.offload else 'off'}, batch {a.batch} x seq {a.seq}, grad_accum {a.grad_accum}")
        print(f"  {'':34s} {'measured':>12s} {'planned':>12s} {'error':>9s}")
        for name, meas, planned, t in rows:
            err = (planned - meas) / meas if meas else (0.0 if planned == meas else float("inf"))
            good = abs(err) <= t if t else planned == meas
            ok &= good
            shown = "exact" if planned == meas else f"{err * 100:+.3f}%"
            print(f"  {name:34s} {meas:12.0f} {planned:12d} {shown:>9s}{'' if good else '  FAIL'}")
        print(f"  peak measured at {step['peak_where']}")
        print("  " + ("PASS" if ok else "FAIL") + f" (peak and after-forward within {tol * 100:.1f}%, host bytes exact)")
        return 0 if ok else 1
    finally:
        for name in ("plan.json", "fixture.json"):
            try:
                os.unlink(os.path.join(tmp, name))
            except OSError:
                pass
        os.rmdir(tmp)


if __name__ == "__main__":
    sys.exit(main())
