#!/usr/bin/env python3
"""Plans large models on many H100s and prints, per model x sequence x GPUs x mode, what the
plan recommends: the setting, the busiest rank's device peak, step time, tokens/s per GPU and
the collectives' exposed time (or the smallest footprint when nothing fits).

  python3 bench/parallel_table.py --plan build/gckpt-plan [--models a,b] [--seqs 8192,...]

Standard library only; a developer's report, it asserts nothing. Modes: fsdp (FSDP2 over
every GPU), zero3, and HSDP (dp_replicate = nodes x dp_shard = GPUs per node) with several
nodes. Every plan sweeps every_n off,1,2,4 x offload off/on x micro-batch 1.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

GIB = 1 << 30


def plan(exe, model, seq, gpn, nodes, mode, out):
    cmd = [exe, "--model", model, "--gpu", "h100-sxm-80gb", "--seq", str(seq), "--gpus", str(gpn),
           "--nodes", str(nodes), "--every-n", "off,1,2,4", "--offload", "both", "-q", "-o", out]
    if mode == "hsdp":
        cmd += ["--dp-replicate", str(nodes), "--dp-shard", str(gpn)]
    else:
        cmd += ["--parallel", mode]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return None, (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]
    with open(out) as f:
        return json.load(f), None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plan", default="build/gckpt-plan")
    ap.add_argument("--models", default="llama-3.1-8b,llama-3.1-70b,qwen3-30b-a3b")
    ap.add_argument("--seqs", default="8192,32768,131072")
    ap.add_argument("--gpus", default="8x1,8x2,8x8", help="GPUSxNODES list")
    a = ap.parse_args()
    print("| model | seq | GPUs | mode | fits | setting | peak GiB | step s | tok/s/GPU | exposed comm s |")
    print("|---|---:|---:|---|---|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "p.json")
        for model in a.models.split(","):
            for seq in map(int, a.seqs.split(",")):
                for g in a.gpus.split(","):
                    gpn, nodes = map(int, g.split("x"))
                    for mode in ("fsdp", "zero3") + (("hsdp",) if nodes > 1 else ()):
                        p, err = plan(a.plan, model, seq, gpn, nodes, mode, out)
                        head = f"| {model} | {seq} | {gpn * nodes} | {mode} |"
                        if p is None:
                            print(f"{head} refused | {err[:80]} | | | | |")
                            continue
                        es = p["entries"]
                        rec = p.get("recommended")
                        fit = rec is not None and rec >= 0
                        e = es[rec] if fit else min(es, key=lambda x: x["memory"]["device_peak_bytes"])
                        t = e["time"]
                        n = "off" if e["every_n_layers"] == 0 else e["every_n_layers"]
                        sett = f"every_n {n}, offload {'on' if e['offload'] else 'off'}"
                        print(f"{head} {'yes' if fit else 'no (smallest)'} | {sett} | "
                              f"{e['memory']['device_peak_bytes'] / GIB:.2f} | {t['step_s']:.3f} | "
                              f"{t['tokens_per_s']:.0f} | {t.get('collective_exposed_s', 0):.3f} |")
                        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
