#!/usr/bin/env python3
"""Plan Llama-3.1-8B, Llama-3.1-70B and Qwen3-30B-A3B at 8k, 32k and 128k tokens on 8, 16, 32
and 64 H100s over the layouts gckpt-plan plans, and print one Markdown table per model.

Python 3 standard library only.

Usage: python3 tools/parallel_plans.py [--plan build/gckpt-plan]
                                       [--update-doc docs/parallel.md | --check docs/parallel.md]

The GPUs are devices/h100-sxm-80gb.json, 8 to a node (--gpus 8 --nodes W / 8). Each cell is
gckpt-plan's own default sweep (every every_n_layers value, offload on and off, micro-batch
1, grad-accum 1, amp-bf16, AdamW) for one layout:
  * FSDP2 (--parallel fsdp) and ZeRO-3 (--parallel zero3) over the W GPUs;
  * tensor parallelism inside a node, T = 2, 4 and 8 dividing W: TP T x FSDP W / T
    (--tp T --dp-shard W / T), TP T x DDP W / T (--tp T --dp-replicate W / T), or TP alone
    when T = W (--tp T);
  * context parallelism inside a node, C = 2, 4 and 8 dividing W: CP C x FSDP W / C (--cp C
    --dp-shard W / C), or CP alone when C = W (--cp C): FSDP2 over all W GPUs, each rank at
    seq / C tokens; on several nodes also CP W alone, its ring across the nodes.
Over several nodes every group is timed at its placement's bandwidth (gckpt/core/mesh.h): a
TP or CP group of at most 8 stays inside a node, FSDP2's and the replicas' groups span them.
A RoPE model planned beyond its max_position_embeddings gets --allow-long-seq (the plan
records it; the table says so).

A table row is the recommended entry of a layout that fits (the fastest within the planner's
ratio band, the most headroom), or the smallest entry of one that fits nowhere: its every_n /
offload, the per-rank device peak, the step time, tokens/s per GPU, the exposed collective
time (time.collective_exposed_s), the global batch (sequences per optimizer step: micro-batch
x grad-accum x W, over T under TP and over C under CP, whose T or C ranks share one batch) and the plan's warnings
other than use_cache_on (the unverified parts). A layout gckpt-plan refuses is listed under
the table with its one-line reason, grouped by reason.

--update-doc FILE replaces what lies between "<!-- parallel_plans: begin -->" and
"<!-- parallel_plans: end -->" in FILE with the output; --check FILE exits 1 when that block
differs from a fresh run (the docs test), 0 when it is current.

Exit status: 0, 1 (a stale block under --check, or gckpt-plan failed other than by refusing
with exit 2), 2 (bad usage: no gckpt-plan, a FILE without the markers).
"""

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPU = "h100-sxm-80gb"
PER_NODE = 8
MODELS = [("llama-3.1-8b", "Llama-3.1-8B"), ("llama-3.1-70b", "Llama-3.1-70B"), ("qwen3-30b-a3b", "Qwen3-30B-A3B")]
SEQS = [8192, 32768, 131072]
WORLDS = [8, 16, 32, 64]
TPS = [2, 4, 8]
CPS = [2, 4, 8]
BLOCK = "parallel_plans"


def die(msg):
    print(f"parallel_plans: {msg}", file=sys.stderr)
    sys.exit(2)


def layouts(world):
    """(label, the ranks sharing one batch (T or C, else 1), gckpt-plan flags, the label without
    the data-parallel size: what a refusal lists) of every layout tried on world GPUs."""
    out = [("FSDP2", 1, ["--parallel", "fsdp"], "FSDP2"), ("ZeRO-3", 1, ["--parallel", "zero3"], "ZeRO-3")]
    for name, flag, sizes in (("TP", "--tp", TPS), ("CP", "--cp", CPS)):
        for n in sizes:
            if world % n:
                continue
            s = world // n
            if s == 1:
                out.append((f"{name} {n}", n, [flag, str(n)], f"{name} {n}"))
                continue
            out.append((f"{name} {n} x FSDP {s}", n, [flag, str(n), "--dp-shard", str(s)], f"{name} {n} x FSDP"))
            if name == "TP":  # CP with replicas is refused by accelerate's rules and not measured
                out.append((f"TP {n} x DDP {s}", n, ["--tp", str(n), "--dp-replicate", str(s)], f"TP {n} x DDP"))
    if world > PER_NODE:  # CP across the nodes: the ring at the inter-node bandwidth
        out.append((f"CP {world}", world, ["--cp", str(world)], f"CP {world}"))
    return out


def max_positions(model):
    with open(os.path.join(ROOT, "models", model + ".json")) as f:
        cfg = json.load(f)
    return cfg.get("max_position_embeddings") or cfg.get("n_positions") or 0


def k(seq):
    return f"{seq // 1024}k"


def plan(exe, args, tmpdir):
    """The plan's JSON, or the refusal's line (exit 2); RuntimeError on any other failure."""
    out = os.path.join(tmpdir, "plan.json")
    if os.path.exists(out):
        os.remove(out)
    r = subprocess.run([exe, "-q", "-o", out] + args, capture_output=True, text=True)
    if r.returncode == 2:
        return None, r.stderr.strip().removeprefix("gckpt-plan: ")
    if r.returncode != 0:
        raise RuntimeError(f"gckpt-plan {' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")
    with open(out) as f:
        return json.load(f), None


def row(d, world, share):
    """The table's cells of a plan: its recommended entry, or its smallest."""
    fits = d["recommended"] is not None and d["recommended"] >= 0
    e = d["entries"][d["recommended"] if fits else d["smallest"]]
    en = "off" if not e["every_n_layers"] else str(e["every_n_layers"])
    entry = f"{en} / {'on' if e['offload'] else 'off'}" if e["every_n_layers"] else "off / -"
    tm = e["time"]
    gb = e["micro_batch"] * e["grad_accum"] * world // share
    warns = sorted({w["code"] for w in d["warnings"]} - {"use_cache_on"})
    return [
        "yes" if fits else "**no**",
        entry,
        f"{e['memory']['device_peak_bytes'] / 2**30:.2f}",
        f"{tm['step_s']:.3f}",
        f"{tm['tokens_per_s']:.0f}",
        f"{tm.get('collective_exposed_s', 0):.3f}",
        str(gb),
        ", ".join(f"`{w}`" for w in warns) or "-",
    ]


def joined(items):
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def report(exe):
    if not os.access(exe, os.X_OK):
        die(f"{exe}: not an executable gckpt-plan (build it: cmake --build build --target gckpt-plan)")
    print(f"Generated by `python3 tools/parallel_plans.py --update-doc docs/parallel.md` (gckpt-plan's "
          f"default sweep on `{GPU}`, {PER_NODE} GPUs a node; each row the recommended entry, or the "
          "smallest where nothing fits; entry = every_n_layers / offload; peak = the rank's device peak; "
          "comm = the exposed collective time; batch = sequences per optimizer step).")
    with tempfile.TemporaryDirectory() as tmpdir:
        for model, title in MODELS:
            maxpos = max_positions(model)
            rows, refused = [], {}
            for seq in SEQS:
                for world in WORLDS:
                    gpus = ["--gpus", str(min(world, PER_NODE)), "--nodes", str(max(1, world // PER_NODE))]
                    long_seq = ["--allow-long-seq"] if maxpos and seq > maxpos else []
                    for label, share, flags, generic in layouts(world):
                        d, why = plan(exe, ["--model", model, "--gpu", GPU, "--seq", str(seq)] + long_seq + gpus + flags,
                                      tmpdir)
                        if d is None:
                            refused.setdefault(why, []).append((generic, world, seq))
                            continue
                        rows.append([k(seq), str(world), label] + row(d, world, share))
            print(f"\n#### {title}\n")
            if maxpos and max(SEQS) > maxpos:
                print(f"max_position_embeddings is {maxpos}: the longer sequences are planned with `--allow-long-seq`.\n")
            print("| tokens | GPUs | layout | fits | entry | peak GiB | step s | tok/s/GPU | comm s | batch | warnings |")
            print("| --- | ---: | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |")
            for r in rows:
                print("| " + " | ".join(r) + " |")
            if refused:
                print("\nRefused by gckpt-plan (exit 2, its line):\n")
            for why, cells in refused.items():
                lays = list(dict.fromkeys(c[0] for c in cells))
                worlds = list(dict.fromkeys(c[1] for c in cells))
                seqs = list(dict.fromkeys(c[2] for c in cells))
                if len(lays) * len(worlds) * len(seqs) == len(set(cells)):
                    where = f"{joined(lays)} on {joined([str(w) for w in worlds])} GPUs at {joined([k(s) for s in seqs])}"
                else:
                    where = "; ".join(f"{c[0]} on {c[1]} GPUs at {k(c[2])}" for c in cells)
                print(f"- {where}: \"{why}\"")
    return 0


def read_block(path):
    begin, end = f"<!-- {BLOCK}: begin -->", f"<!-- {BLOCK}: end -->"
    try:
        with open(path) as f:
            doc = f.read()
    except OSError as e:
        die(f"{path}: cannot read: {e.strerror}")
    if doc.count(begin) != 1 or doc.count(end) != 1 or doc.index(begin) > doc.index(end):
        die(f"{path}: needs exactly one '{begin}' line before one '{end}' line")
    head, rest = doc.split(begin, 1)
    body, tail = rest.split(end, 1)
    return head + begin, body, end + tail


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plan", default=os.path.join(ROOT, "build", "gckpt-plan"))
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--update-doc", metavar="FILE", help=f"regenerate the {BLOCK} block of FILE")
    g.add_argument("--check", metavar="FILE", help=f"exit 1 when the {BLOCK} block of FILE is stale")
    args = ap.parse_args()
    path = args.update_doc or args.check
    if not path:
        return report(args.plan)
    read_block(path)  # refuse before the run
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        report(args.plan)
    fresh = "\n\n" + buf.getvalue().strip("\n") + "\n\n"
    head, body, tail = read_block(path)  # again: the file may have changed while the plans ran
    if args.check:
        if body == fresh:
            return 0
        old, new = body.splitlines(), fresh.splitlines()
        for i, (a, b) in enumerate(zip(old, new)):
            if a != b:
                print(f"{path}: the {BLOCK} block is stale (first difference, block line {i}):\n  shown: {a}\n"
                      f"  fresh: {b}\nregenerate: python3 tools/parallel_plans.py --update-doc {path}")
                return 1
        print(f"{path}: the {BLOCK} block is stale ({len(old)} lines shown, {len(new)} fresh); regenerate: "
              f"python3 tools/parallel_plans.py --update-doc {path}")
        return 1
    with open(path, "w") as f:
        f.write(head + fresh + tail)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RuntimeError as e:
        print(f"parallel_plans: {e}", file=sys.stderr)
        sys.exit(1)
