#!/usr/bin/env python3
"""Plan every published throughput measurement in bench/published/step_time.csv with
gckpt-plan and print predicted vs published tokens/s per GPU.

Python 3 standard library only.

Usage: python3 tools/step_time_check.py [--plan build/gckpt-plan] [--csv FILE]
                                        [--markdown] [--summary-only]
                                        [--update-doc docs/step-time.md]

--update-doc FILE replaces what lies between the lines
"<!-- step_time_check: begin -->" and "<!-- step_time_check: end -->" in FILE with the
Markdown output (summary first, then every point), so the docs table is regenerated
by this script and never edited by hand.

For each row that is not excluded in the CSV (its `exclude` column says why: FP8,
tensor / pipeline / context parallelism, ...) the script
  * checks that devices/<gpu_profile>.json exists (a GPU without a profile is
    excluded, with the GPU's name),
  * writes the model config to a temporary file when `model_arg` is a .json file
    (GPT-2-shaped configs get n_positions = seq: learned position tables grow with
    the sequence, as in the source's parameter counts), and passes --allow-long-seq
    to a RoPE model planned beyond max_position_embeddings,
  * runs gckpt-plan for exactly the published setting (one every_n value, offload
    off, one micro-batch, the accumulation, GPUs / nodes / parallel mode, precision
    and the row's extra_args such as --method lora ...),
  * reads entries[].time.tokens_per_s (per GPU) of the matching entry.

Error % = (predicted - published) / published * 100. The summary gives the median
and the 90th percentile (nearest rank) of |error|, and the median signed error, per GPU
profile, code-base class, source, sequence length, GPU x sequence, model size, method
(full / LoRA), number of GPUs, and over all points.

Exit status: 0 after printing (whatever the errors are), 2 when the CSV or a model
config cannot be read (one line naming the file and field), 1 when gckpt-plan
fails on a row that is not excluded.
"""

import argparse
import contextlib
import csv
import io
import json
import math
import os
import subprocess
import sys
import tempfile

REQUIRED = ["id", "source", "model", "model_arg", "gpu", "gpu_profile", "gpus_per_node",
            "nodes", "parallel_arg", "seq", "micro_batch", "grad_accum", "every_n",
            "precision_arg", "extra_args", "code_base_class", "tokens_per_s_gpu", "exclude"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def die(msg):
    print(msg, file=sys.stderr)
    sys.exit(2)


def read_rows(path):
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
            if missing:
                die(f"{path}: missing column '{missing[0]}'")
            rows = list(reader)
    except OSError as e:
        die(f"{path}: cannot read: {e.strerror}")
    for r in rows:
        if r["exclude"]:
            continue
        for field in ("seq", "micro_batch", "grad_accum", "gpus_per_node", "nodes"):
            if not r[field].isdigit() or int(r[field]) < 1:
                die(f"{path}: row {r['id']}: field '{field}' is not a positive integer: {r[field]!r}")
        try:
            if float(r["tokens_per_s_gpu"]) <= 0:
                raise ValueError
        except ValueError:
            die(f"{path}: row {r['id']}: field 'tokens_per_s_gpu' is not a positive number")
    return rows


def model_args(r, tmpdir):
    """--model argument(s) for a row: a shipped name, or a temporary copy of its config."""
    seq = int(r["seq"])
    arg = r["model_arg"]
    shipped = not arg.endswith(".json")
    path = os.path.join(ROOT, "models", arg + ".json") if shipped else os.path.join(ROOT, arg)
    try:
        with open(path) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        die(f"{path}: row {r['id']}: field 'model_arg': cannot read the config: {e}")
    long_seq = ["--allow-long-seq"] if cfg.get("max_position_embeddings", seq) < seq else []
    if shipped:
        return ["--model", arg] + long_seq
    if cfg.get("model_type") == "gpt2":
        # Learned position table: the published models grow it with the sequence.
        cfg["n_positions"] = max(cfg.get("n_positions", 0), seq)
        cfg["n_ctx"] = max(cfg.get("n_ctx", 0), seq)
    out = os.path.join(tmpdir, f"{r['id']}.json")
    with open(out, "w") as f:
        json.dump(cfg, f)
    return ["--model", out] + long_seq


def code_base_of(r):
    """gckpt-plan --code-base for a row: hf for Hugging Face modules, fused for the others."""
    return "hf" if r["code_base_class"] == "hf-eager" else "fused"


def plan_doc(plan, r, tmpdir, gpu=None):
    """The JSON plan of one row's setting (gpu: a profile path instead of the row's), or
    raises RuntimeError."""
    out = os.path.join(tmpdir, f"{r['id']}.plan.json")
    every_n = "off" if r["every_n"] in ("off", "0") else r["every_n"]
    cmd = [plan] + model_args(r, tmpdir) + [
        "--gpu", gpu or r["gpu_profile"], "--code-base", code_base_of(r),
        "--seq", r["seq"], "--micro-batch", r["micro_batch"],
        "--grad-accum", r["grad_accum"], "--every-n", every_n, "--offload", "off",
        "--precision", r["precision_arg"], "-q", "-o", out]
    gpus, nodes = int(r["gpus_per_node"]), int(r["nodes"])
    if gpus * nodes > 1:
        cmd += ["--gpus", str(gpus), "--nodes", str(nodes), "--parallel", r["parallel_arg"]]
    cmd += r["extra_args"].split()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()}")
    with open(out) as f:
        return json.load(f), cmd


def row_entry(doc, r):
    """The entry of doc at the row's every_n, offload off and micro-batch, or None."""
    want_n = 0 if r["every_n"] in ("off", "0") else int(r["every_n"])
    for e in doc["entries"]:
        if (e["every_n_layers"] == want_n and not e["offload"]
                and e["micro_batch"] == int(r["micro_batch"])):
            return e
    return None


def plan_row(plan, r, tmpdir, gpu=None):
    """(predicted tokens/s per GPU, fits, model parameters) for one row, or raises RuntimeError."""
    doc, cmd = plan_doc(plan, r, tmpdir, gpu)
    e = row_entry(doc, r)
    if e is not None:
        return e["time"]["tokens_per_s"], e["fits"], doc["inputs"]["model"]["parameters"]
    want_n = 0 if r["every_n"] in ("off", "0") else int(r["every_n"])
    raise RuntimeError(f"{' '.join(cmd)}: no entry with every_n {want_n}, offload off, "
                       f"micro-batch {r['micro_batch']}")


def pctl(values, q):
    """Nearest-rank percentile of a non-empty list."""
    v = sorted(values)
    return v[max(0, math.ceil(q / 100 * len(v)) - 1)]


def summary(results, key):
    """(group, points, median |error|, p90 |error|, median signed error) per group."""
    groups = {}
    for res in results:
        if res["err"] is not None:
            groups.setdefault(key(res), []).append(res["err"])
    rows = []
    for k in sorted(groups):
        errs = groups[k]
        mags = [abs(e) for e in errs]
        rows.append((k, len(errs), pctl(mags, 50), pctl(mags, 90), pctl(errs, 50)))
    return rows


def seq_class(res):
    seq = int(res["row"]["seq"])
    return "a: seq <= 2048" if seq <= 2048 else ("b: seq 4096-8192" if seq <= 8192 else "c: seq >= 16384")


def size_class(res):
    p = res["params"]
    return "a: < 1B parameters" if p < 1e9 else ("b: 1B-10B" if p < 1e10 else "c: > 10B")


def method_class(res):
    extra = res["row"]["extra_args"]
    return "lora" if "--method lora" in extra else ("qlora" if "--method qlora" in extra else "full")


def nodes_class(res):
    r = res["row"]
    n = int(r["gpus_per_node"]) * int(r["nodes"])
    return "1 GPU" if n == 1 else ("1 node" if int(r["nodes"]) == 1 else "several nodes")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plan", default=os.path.join(ROOT, "build", "gckpt-plan"))
    ap.add_argument("--csv", default=os.path.join(ROOT, "bench", "published", "step_time.csv"))
    ap.add_argument("--markdown", action="store_true", help="print Markdown tables (docs/step-time.md)")
    ap.add_argument("--summary-only", action="store_true")
    ap.add_argument("--update-doc", metavar="FILE", help="regenerate the marked block of FILE (implies --markdown)")
    args = ap.parse_args()
    if args.update_doc:
        args.markdown = True
        return update_block(args.update_doc, "step_time_check", lambda: report(args))
    return report(args)


def update_block(path, name, produce):
    """Replace what lies between "<!-- NAME: begin -->" and "<!-- NAME: end -->" in path with
    what produce() prints; produce's return value."""
    begin, end = f"<!-- {name}: begin -->", f"<!-- {name}: end -->"

    def read():
        try:
            with open(path) as f:
                doc = f.read()
        except OSError as e:
            die(f"{path}: cannot read: {e.strerror}")
        if doc.count(begin) != 1 or doc.count(end) != 1 or doc.index(begin) > doc.index(end):
            die(f"{path}: needs exactly one '{begin}' line before one '{end}' line")
        return doc
    read()  # refuse before a long run
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = produce()
    doc = read()  # again: the file may have been edited while produce ran
    head, rest = doc.split(begin, 1)
    tail = rest.split(end, 1)[1]
    with open(path, "w") as f:
        f.write(head + begin + "\n\n" + buf.getvalue().rstrip("\n") + "\n\n" + end + tail)
    return rc


def report(args):
    """Plan every row and print the tables; the exit status."""
    if not os.access(args.plan, os.X_OK):
        die(f"{args.plan}: not an executable gckpt-plan (build it: cmake --build build --target gckpt-plan)")
    rows = read_rows(args.csv)

    results, failed = [], 0
    with tempfile.TemporaryDirectory() as tmpdir:
        for r in rows:
            res = {"row": r, "pred": None, "err": None, "fits": None, "params": None, "why": r["exclude"]}
            if not res["why"] and not os.path.exists(os.path.join(ROOT, "devices", r["gpu_profile"] + ".json")):
                res["why"] = f"no device profile for {r['gpu']}"
            if not res["why"]:
                try:
                    res["pred"], res["fits"], res["params"] = plan_row(args.plan, r, tmpdir)
                except RuntimeError as e:
                    print(f"{r['id']}: {e}", file=sys.stderr)
                    res["why"] = "gckpt-plan failed"
                    failed += 1
            if res["pred"] is not None:
                pub = float(r["tokens_per_s_gpu"])
                res["err"] = (res["pred"] - pub) / pub * 100
            results.append(res)

    md = args.markdown
    def line(cells):
        print(("| " + " | ".join(cells) + " |") if md else "  ".join(cells))

    summaries(results, line, md)
    if not args.summary_only:
        print()
        head = ["id", "model", "GPU", "GPUs", "parallel", "seq", "mb x ga", "ckpt", "code base",
                "published tok/s/GPU", "predicted", "error %", "excluded / note"]
        line(head)
        if md:
            line(["---"] * 5 + ["---:"] * 2 + ["---"] * 2 + ["---:"] * 3 + ["---"])
        for res in results:
            r = res["row"]
            ngpu = int(r["gpus_per_node"] or 0) * int(r["nodes"] or 0) if r["gpus_per_node"].isdigit() and r["nodes"].isdigit() else r["gpus_per_node"]
            note = res["why"] or ("" if res["fits"] else "plan: does not fit")
            line([r["id"], r["model"], r["gpu_profile"] or r["gpu"], str(ngpu), r["parallel_arg"] or "-",
                  r["seq"], f"{r['micro_batch']} x {r['grad_accum']}", r["every_n"] or "-",
                  r["code_base_class"], f"{float(r['tokens_per_s_gpu']):.0f}",
                  "-" if res["pred"] is None else f"{res['pred']:.0f}",
                  "-" if res["err"] is None else f"{res['err']:+.1f}", note])
    return 1 if failed else 0


def summaries(results, line, md):
    """The summary tables: error per group, then the exclusion reasons."""
    n_in = sum(1 for res in results if res["err"] is not None)
    print(f"{len(results)} points, {n_in} planned, {len(results) - n_in} excluded")
    print()
    for title, key in (("GPU profile", lambda res: res["row"]["gpu_profile"]),
                       ("code-base class", lambda res: res["row"]["code_base_class"]),
                       ("source", lambda res: res["row"]["source"]),
                       ("sequence length", seq_class),
                       ("GPU profile x sequence", lambda res: res["row"]["gpu_profile"] + ", " + seq_class(res)),
                       ("model size", size_class),
                       ("method", method_class),
                       ("GPUs", nodes_class),
                       ("all points", lambda res: "all")):
        line([title, "points", "median abs error %", "p90 abs error %", "median error % (signed)"])
        if md:
            line(["---", "---:", "---:", "---:", "---:"])
        for k, n, med, p90, sgn in summary(results, key):
            line([k, str(n), f"{med:.1f}", f"{p90:.1f}", f"{sgn:+.1f}"])
        print()
    reasons = {}
    for res in results:
        if res["err"] is None:
            reasons[res["why"]] = reasons.get(res["why"], 0) + 1
    line(["excluded because", "points"])
    if md:
        line(["---", "---:"])
    for why in sorted(reasons, key=lambda w: (-reasons[w], w)):
        line([why, str(reasons[why])])


if __name__ == "__main__":
    sys.exit(main())
