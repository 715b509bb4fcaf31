#!/usr/bin/env python3
"""Fit the GPU profiles' code-base time parameters to the published measurements in
bench/published/step_time.csv, with cross-validation (a developer tool; gckpt-plan reads
only the fitted numbers in devices/*.json).

Python 3 standard library only.

Usage: python3 tools/step_time_fit.py [--plan build/gckpt-plan] [--csv FILE] [--folds 5]
                                      [--write] [--json FILE] [--markdown]
                                      [--update-doc docs/step-time.md]

The time model (include/gckpt/core/device.h, core/ctx.c): every op takes
  max(GEMM FLOPs / (peak x matmul_efficiency x matmul_factor),
      fused-attention FLOPs / (peak x matmul_efficiency x attention_factor x seq / (seq + attention_seq_half)),
      bytes / (HBM x hbm_efficiency x hbm_factor)) + op_overhead_s
and every optimizer step adds step_overhead_s. A profile's "code_bases" object holds these six
numbers for each code base: "hf" (Hugging Face modules, eager) and "fused" (own fused modules:
llm-foundry, torchtitan, IBM FMS, KempnerForge). The CSV's code_base_class hf-eager is hf,
custom-eager and custom-compiled are fused.

What is fitted, and on which points:
  * per GPU class (the chip: A100 = a100-40gb + a100-80gb, H100 = h100-sxm-80gb + h200, the same
    peaks and matmul_efficiency within a class): the fused code base's matmul_factor and
    attention_factor;
  * shared by the classes (software, not the chip): the fused code base's attention_seq_half,
    hbm_factor, op_overhead_s, step_overhead_s;
  * the hf code base (a second stage, on the hf points only, the fused parameters fixed): its
    GEMM rate as a ratio to the fused code base's per-class factor (hf.r_mf, shared by the
    classes, as nearly all hf points are on A100), its own hbm_factor and step_overhead_s
    (the Trainer's per-step work); its attention rate is the fused one's (hf.r_af fixed at 1:
    the points do not agree on it, see PARAMS), and so are attention_seq_half and
    op_overhead_s (a kernel launch from eager PyTorch either way: a free hf value goes to 0,
    the bound, fitting the short LoRA steps of one source, and leaves the full fine-tuning
    ones of the same runs further off). The fused stage gives the hf points no weight
    and the hf stage moves no fused parameter, so each code base's parameters come from its
    own points.
The loss is the mean |log(predicted step / published step)| (robust to the few points no
setting explains), each point weighted by 1 / sqrt(points of its source among its code base's).
Bounds keep the fit physical: the hf code base's GEMMs no faster than the fused one's (the same
cuBLAS), its memory-bound ops no faster than the bytes the recipe traces (HF's op-by-op modules
are what the recipe follows), every fused rate at most 1.15 x the profile's. gckpt-plan is run at a reference parameter set for every point and at a
small step of each parameter, which gives each point's step time as a function of the
parameters (exact for the launch and step overheads, first order in the others); the fit
minimises the loss over that function (Nelder-Mead), then the points are planned again at the
fitted parameters (a second round), and every figure printed is gckpt-plan's own at the
parameters it names.

Cross-validation: the points are split into --folds folds by a hash of their id; each fold's
points are predicted (by gckpt-plan) from parameters fitted on the other folds only; the
held-out errors are reported overall, per GPU class, per code base and per source, and so is
a leave-one-source-out split. The p10 and p90 of the held-out ratio published / predicted
step time, per code base (over every point when the code base has fewer than 20), are the
profile's "step_ratio_p10" / "step_ratio_p90" (the range gckpt-plan gives each entry's step
time).

--write puts the fitted parameters into devices/<profile>.json ("code_bases", with a "fit"
object: script, date, data file and its sha256, the points used, the held-out errors).

Exit status: 0, 2 on unreadable input, 1 when gckpt-plan fails on a point.
"""

import argparse
import datetime
import hashlib
import json
import math
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import step_time_check as stc  # noqa: E402

ROOT = stc.ROOT
CLASS_OF = {"a100-40gb": "A100", "a100-80gb": "A100", "h100-sxm-80gb": "H100", "h200": "H100"}
CLASSES = ["A100", "H100"]
KEYS = ["matmul_factor", "attention_factor", "attention_seq_half", "hbm_factor", "op_overhead_s", "step_overhead_s"]
RANGE_MIN_POINTS = 20  # a code base with fewer held-out points takes the range of all of them
NEUTRAL = dict(zip(KEYS, [1.0, 1.0, 0.0, 1.0, 0.0, 0.0]))

# The fitted vector: name, start, lower, upper (the search runs on a scaled copy).
PARAMS = ([(f"fused.mf.{c}", 1.0, 0.2, 1.15) for c in CLASSES] +
          [(f"fused.af.{c}", 0.5, 0.05, 1.15) for c in CLASSES] +
          [("fused.seq_half", 512.0, 0.0, 16384.0), ("fused.hf", 1.0, 0.25, 4.0),
           ("fused.ovh", 2e-6, 0.0, 1e-4), ("fused.step", 0.05, 0.0, 10.0),
           # hf: fitted in a second stage on the hf points (the docstring). hf.r_af stays 1 (fused's
           # attention rate: the same flash kernels; fms-acceleration's flash-attention-2 runs at
           # 4096 want about 1; the loop that wanted 0.36 ran SDPA with a padding mask, its rows
           # are excluded: docs/step-time.md)
           ("hf.r_mf", 1.0, 0.3, 1.0), ("hf.r_af", 1.0, 1.0, 1.0), ("hf.hf", 1.0, 0.1, 1.0),
           ("hf.step", 0.05, 0.0, 10.0)])
PNAMES = [p[0] for p in PARAMS]
CODE_BASES = ("fused", "hf")  # fitted in this order: hf's rates are ratios to fused's


def code_base(r):
    return stc.code_base_of(r)


def params_for(theta, cls, cb):
    """The six numbers of code base cb on GPU class cls from the fitted vector."""
    t = dict(zip(PNAMES, theta))
    mf, af = t[f"fused.mf.{cls}"], t[f"fused.af.{cls}"]
    if cb == "fused":
        return {"matmul_factor": mf, "attention_factor": af, "attention_seq_half": t["fused.seq_half"],
                "hbm_factor": t["fused.hf"], "op_overhead_s": t["fused.ovh"], "step_overhead_s": t["fused.step"]}
    return {"matmul_factor": mf * t["hf.r_mf"], "attention_factor": af * t["hf.r_af"],
            "attention_seq_half": t["fused.seq_half"], "hbm_factor": t["hf.hf"], "op_overhead_s": t["fused.ovh"],
            "step_overhead_s": t["hf.step"]}


def load_profile(name):
    path = os.path.join(ROOT, "devices", name + ".json")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        stc.die(f"{path}: cannot read: {e}")


def device_file(tmpdir, gpu, cb, p, tag):
    """A copy of profile gpu whose code base cb has parameters p (the other one neutral)."""
    d = load_profile(gpu)
    d.pop("calibration", None)
    d["code_bases"] = {"hf": dict(NEUTRAL), "fused": dict(NEUTRAL)}
    d["code_bases"][cb] = {k: p[k] for k in KEYS}
    path = os.path.join(tmpdir, f"dev-{gpu}-{cb}-{tag}.json")
    with open(path, "w") as f:
        json.dump(d, f)
    return path


def tokens_per_step(r):
    return int(r["micro_batch"]) * int(r["seq"]) * int(r["grad_accum"])


def published_step(r):
    return tokens_per_step(r) / float(r["tokens_per_s_gpu"])


def step_of(plan, r, tmpdir, dev):
    doc, cmd = stc.plan_doc(plan, r, tmpdir, dev)
    e = stc.row_entry(doc, r)
    if e is None:
        raise RuntimeError(f"{' '.join(cmd)}: no matching entry")
    return e["time"]["step_s"]


# The finite steps: 1/mf, 1/af, 1/hf by 2 %, the overheads by a fixed amount.
STEPS = {"mf": 1.02, "af": 1.02, "hf": 1.02, "ovh": 1e-6, "step": 0.01}


def linearize(plan, rows, theta, tmpdir):
    """Per row: its step time at theta and the derivatives the surrogate needs."""
    out = {}
    for i, r in enumerate(rows):
        cls, cb = CLASS_OF[r["gpu_profile"]], code_base(r)
        p0 = params_for(theta, cls, cb)
        def run(p, tag):
            return step_of(plan, r, tmpdir, device_file(tmpdir, r["gpu_profile"], cb, p, f"{r['id']}-{tag}"))
        t0 = run(p0, "0")
        d = {"t": t0, "p": p0}
        for k, key in (("mf", "matmul_factor"), ("af", "attention_factor"), ("hf", "hbm_factor")):
            p = dict(p0)
            p[key] = p0[key] / STEPS[k]  # 1/x grows by the step
            d[k] = (run(p, k) - t0) / ((STEPS[k] - 1) / p0[key])
        for k, key in (("ovh", "op_overhead_s"), ("step", "step_overhead_s")):
            p = dict(p0)
            p[key] = p0[key] + STEPS[k]
            d[k] = (run(p, k) - t0) / STEPS[k]
        out[r["id"]] = d
        if (i + 1) % 50 == 0:
            print(f"  linearized {i + 1}/{len(rows)}", file=sys.stderr)
    return out


def surrogate(lin, r, theta):
    """The row's step time at theta from its linearization."""
    d = lin[r["id"]]
    p0, p = d["p"], params_for(theta, CLASS_OF[r["gpu_profile"]], code_base(r))
    S = float(r["seq"])
    # the attention term: d["af"] = dt/d(1/af) at p0's seq_half; its seq_half dependence is exact
    ba = d["af"] / (1 + p0["attention_seq_half"] / S)
    t = d["t"]
    t += d["mf"] * (1 / p["matmul_factor"] - 1 / p0["matmul_factor"])
    t += ba * ((1 + p["attention_seq_half"] / S) / p["attention_factor"] -
               (1 + p0["attention_seq_half"] / S) / p0["attention_factor"])
    t += d["hf"] * (1 / p["hbm_factor"] - 1 / p0["hbm_factor"])
    t += d["ovh"] * (p["op_overhead_s"] - p0["op_overhead_s"])
    t += d["step"] * (p["step_overhead_s"] - p0["step_overhead_s"])
    return max(t, 1e-9)


def weights(rows, cb):
    """The stage of code base cb: each of its points weighs 1 / sqrt(points of its source):
    llm-foundry's 209 rows are one code base on one cluster, and would otherwise decide every
    shared parameter alone. The other code base's points weigh nothing."""
    n = {}
    for r in rows:
        n[r["source"]] = n.get(r["source"], 0) + 1
    return {r["id"]: 1 / math.sqrt(n[r["source"]]) if code_base(r) == cb else 0.0 for r in rows}


def loss(theta, rows, lin, w):
    rows = [r for r in rows if w[r["id"]] > 0]
    return (sum(w[r["id"]] * abs(math.log(surrogate(lin, r, theta) / published_step(r))) for r in rows) /
            sum(w[r["id"]] for r in rows))


def clip(theta):
    return [min(max(v, lo), hi) for v, (_, _, lo, hi) in zip(theta, PARAMS)]


def nelder_mead(f, x0, scale, iters=4000, tol=1e-7):
    """Minimise f from x0 (simplex edges: scale), standard coefficients."""
    n = len(x0)
    pts = [list(x0)] + [[x0[j] + (scale[j] if j == i else 0) for j in range(n)] for i in range(n)]
    vals = [f(p) for p in pts]
    for _ in range(iters):
        order = sorted(range(n + 1), key=lambda i: vals[i])
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        if abs(vals[-1] - vals[0]) < tol:
            break
        c = [sum(p[j] for p in pts[:-1]) / n for j in range(n)]
        xr = [c[j] + (c[j] - pts[-1][j]) for j in range(n)]
        fr = f(xr)
        if fr < vals[0]:
            xe = [c[j] + 2 * (c[j] - pts[-1][j]) for j in range(n)]
            fe = f(xe)
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = [c[j] + 0.5 * (pts[-1][j] - c[j]) for j in range(n)]
            fc = f(xc)
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:
                for i in range(1, n + 1):
                    pts[i] = [pts[0][j] + 0.5 * (pts[i][j] - pts[0][j]) for j in range(n)]
                    vals[i] = f(pts[i])
    i = min(range(n + 1), key=lambda i: vals[i])
    return pts[i], vals[i]


def fit(rows, lin, start):
    """The fitted vector (clipped to the bounds) from start: the fused parameters on the fused
    points, then the hf ones on the hf points with the fused ones fixed. A code base without
    points in rows keeps its start values."""
    theta = list(start)
    for cb in CODE_BASES:
        if any(code_base(r) == cb for r in rows):
            theta = fit_stage(rows, lin, theta, cb)
    return theta


def fit_stage(rows, lin, start, cb):
    """start with code base cb's free parameters (lower < upper) fitted to its points."""
    free = [i for i, (name, _, lo, hi) in enumerate(PARAMS) if hi > lo and name.startswith(cb + ".")]
    w = weights(rows, cb)

    def full(sub):
        x = list(start)
        for i, v in zip(free, sub):
            x[i] = v
        return clip(x)
    f = lambda sub: loss(full(sub), rows, lin, w)  # noqa: E731
    scale = [0.1 * (PARAMS[i][3] - PARAMS[i][2]) for i in free]
    sub, v = [clip(start)[i] for i in free], None
    for _ in range(3):  # restarts: Nelder-Mead stalls in a dozen dimensions
        sub, v2 = nelder_mead(f, [full(sub)[i] for i in free], scale)
        if v is not None and abs(v - v2) < 1e-6:
            break
        v = v2
        scale = [s * 0.3 for s in scale]
    return full(sub)


def plan_all(plan, rows, theta_of_row, tmpdir):
    """gckpt-plan's step time per row id at the parameters theta_of_row(row) gives."""
    out = {}
    for r in rows:
        th = theta_of_row(r)
        cls, cb = CLASS_OF[r["gpu_profile"]], code_base(r)
        dev = device_file(tmpdir, r["gpu_profile"], cb, params_for(th, cls, cb), f"{r['id']}-eval")
        out[r["id"]] = step_of(plan, r, tmpdir, dev)
    return out


def fold_of(r, k):
    return int(hashlib.sha256(r["id"].encode()).hexdigest(), 16) % k


def errs(rows, steps):
    """Signed error % of tokens/s per row id: (predicted - published) / published."""
    return {r["id"]: (published_step(r) / steps[r["id"]] - 1) * 100 for r in rows}


def pct(v, q):
    return stc.pctl(v, q) if v else float("nan")


def table(rows, columns, md):
    """Median / p90 |error| and median signed error per group, one column set per run."""
    groups = [("all", lambda r: True), ("code base hf", lambda r: code_base(r) == "hf"),
              ("code base fused", lambda r: code_base(r) == "fused")]
    groups += [(f"GPU class {c}", (lambda c: lambda r: CLASS_OF[r["gpu_profile"]] == c)(c)) for c in CLASSES]
    for c in CLASSES:
        for cb in ("hf", "fused"):
            groups.append((f"{c}, {cb}", (lambda c, cb: lambda r: CLASS_OF[r["gpu_profile"]] == c
                                          and code_base(r) == cb)(c, cb)))
    for s in sorted({r["source"] for r in rows}):
        groups.append((f"source {s}", (lambda s: lambda r: r["source"] == s)(s)))
    for lo, hi, name in ((0, 2048, "seq <= 2048"), (2049, 8192, "seq 4096-8192"), (8193, 1 << 40, "seq >= 16384")):
        groups.append((name, (lambda lo, hi: lambda r: lo <= int(r["seq"]) <= hi)(lo, hi)))
    head = ["points"] + [f"{name}: median / p90 abs, median signed %" for name, _ in columns]
    lines = []
    sep = " | " if md else "  "
    if md:
        lines.append("| group | " + " | ".join(head) + " |")
        lines.append("| --- | ---: | " + " | ".join("---:" for _ in columns) + " |")
    else:
        lines.append("group" + sep + sep.join(head))
    for gname, pred in groups:
        sel = [r for r in rows if pred(r)]
        if not sel:
            continue
        cells = [str(len(sel))]
        for _, e in columns:
            v = [e[r["id"]] for r in sel]
            cells.append(f"{pct([abs(x) for x in v], 50):.1f} / {pct([abs(x) for x in v], 90):.1f}, "
                         f"{pct(v, 50):+.1f}")
        lines.append(("| " + gname + " | " + " | ".join(cells) + " |") if md else gname + sep + sep.join(cells))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plan", default=os.path.join(ROOT, "build", "gckpt-plan"))
    ap.add_argument("--csv", default=os.path.join(ROOT, "bench", "published", "step_time.csv"))
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--write", action="store_true", help="store the fit in devices/*.json")
    ap.add_argument("--json", metavar="FILE", help="write the fit and every error as JSON")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--update-doc", metavar="FILE",
                    help='regenerate the "<!-- step_time_fit: begin/end -->" block of FILE (implies --markdown)')
    args = ap.parse_args()
    if args.update_doc:
        args.markdown = True
        return stc.update_block(args.update_doc, "step_time_fit", lambda: run(args))
    return run(args)


def run(args):
    if not os.access(args.plan, os.X_OK):
        stc.die(f"{args.plan}: not an executable gckpt-plan (build it: cmake --build build --target gckpt-plan)")
    rows = [r for r in stc.read_rows(args.csv) if not r["exclude"] and r["gpu_profile"] in CLASS_OF]
    with open(args.csv, "rb") as f:
        csv_sha = hashlib.sha256(f.read()).hexdigest()
    start = [p[1] for p in PARAMS]
    try:
        with tempfile.TemporaryDirectory() as tmpdir:
            # before: the profiles as datasheet rooflines (every code base neutral)
            neutral = {}
            for r in rows:
                d = load_profile(r["gpu_profile"])
                d.pop("code_bases", None)
                d.pop("calibration", None)
                path = os.path.join(tmpdir, f"neutral-{r['gpu_profile']}.json")
                with open(path, "w") as f:
                    json.dump(d, f)
                neutral[r["id"]] = step_of(args.plan, r, tmpdir, path)
            print("linearizing at the start values", file=sys.stderr)
            lin = linearize(args.plan, rows, start, tmpdir)
            theta = fit(rows, lin, start)
            print("linearizing at the first fit", file=sys.stderr)
            lin = linearize(args.plan, rows, theta, tmpdir)
            theta = fit(rows, lin, theta)
            fitted = plan_all(args.plan, rows, lambda r: theta, tmpdir)
            # k-fold: each fold from the others (the linearization at the full fit, a point only)
            fold_theta = {}
            for k in range(args.folds):
                train = [r for r in rows if fold_of(r, args.folds) != k]
                fold_theta[k] = fit(train, lin, theta)
                print(f"fold {k + 1}/{args.folds} fitted", file=sys.stderr)
            held = plan_all(args.plan, rows, lambda r: fold_theta[fold_of(r, args.folds)], tmpdir)
            # leave one source out
            src_theta = {}
            for s in sorted({r["source"] for r in rows}):
                src_theta[s] = fit([r for r in rows if r["source"] != s], lin, theta)
            loso = plan_all(args.plan, rows, lambda r: src_theta[r["source"]], tmpdir)
    except RuntimeError as e:
        print(e, file=sys.stderr)
        return 1

    e_before, e_fit, e_held, e_loso = errs(rows, neutral), errs(rows, fitted), errs(rows, held), errs(rows, loso)
    # the range: a code base's own held-out ratios when it has RANGE_MIN_POINTS, else every point's
    every = [published_step(r) / held[r["id"]] for r in rows]
    rng, rng_from = {}, {}
    for cb in ("hf", "fused"):
        v = [published_step(r) / held[r["id"]] for r in rows if code_base(r) == cb]
        if len(v) < RANGE_MIN_POINTS:
            v, rng_from[cb] = every, f"all {len(every)} held-out points ({cb} has only {len(v)})"
        else:
            rng_from[cb] = f"the {len(v)} held-out {cb} points"
        rng[cb] = (pct(v, 10), pct(v, 90))
    md = args.markdown
    print(f"{len(rows)} points fitted ({sum(code_base(r) == 'hf' for r in rows)} hf, "
          f"{sum(code_base(r) == 'fused' for r in rows)} fused); error % of tokens/s, "
          f"(predicted - published) / published")
    print()
    print(table(rows, [("before", e_before), ("fitted (in-sample)", e_fit),
                       (f"held out ({args.folds}-fold)", e_held), ("held out (leave one source out)", e_loso)], md))
    print()
    head = "| parameter | fitted | start | bounds |\n| --- | ---: | ---: | --- |" if md else "parameter  fitted  start  bounds"
    print(head)
    for (name, st, lo, hi), v in zip(PARAMS, theta):
        print(f"| {name} | {v:.4g} | {st:.4g} | {lo:g} .. {hi:g} |" if md else f"{name}  {v:.4g}  {st:.4g}  {lo:g}..{hi:g}")
    print()
    for cb in ("hf", "fused"):
        print(f"step-time range, code base {cb}: published / predicted step time p10 {rng[cb][0]:.3f}, "
              f"p90 {rng[cb][1]:.3f}, over {rng_from[cb]}")

    summary = {}
    for name, e in (("before", e_before), ("fitted", e_fit), ("held_out_kfold", e_held), ("held_out_loso", e_loso)):
        summary[name] = {}
        for gname, sel in (("all", rows), ("hf", [r for r in rows if code_base(r) == "hf"]),
                           ("fused", [r for r in rows if code_base(r) == "fused"])):
            v = [e[r["id"]] for r in sel]
            summary[name][gname] = {"points": len(v), "median_abs_pct": round(pct([abs(x) for x in v], 50), 1),
                                    "p90_abs_pct": round(pct([abs(x) for x in v], 90), 1)}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"theta": dict(zip(PNAMES, theta)), "summary": summary, "range": rng,
                       "errors": {"before": e_before, "fitted": e_fit, "held_out_kfold": e_held,
                                  "held_out_loso": e_loso}}, f, indent=1)
    if args.write:
        write_profiles(rows, theta, rng, rng_from, summary, csv_sha, args)
    return 0


def write_profiles(rows, theta, rng, rng_from, summary, csv_sha, args):
    """devices/<profile>.json gets "code_bases" (and a "sources" line) for every fitted GPU."""
    today = datetime.date.today().isoformat()
    for gpu, cls in CLASS_OF.items():
        path = os.path.join(ROOT, "devices", gpu + ".json")
        d = load_profile(gpu)
        cbs, old = {}, d.get("code_bases") or {}
        for cb in ("hf", "fused"):
            p = {k: float(f"{v:.4g}") for k, v in params_for(theta, cls, cb).items()}
            p["step_ratio_p10"] = round(rng[cb][0], 3)
            p["step_ratio_p90"] = round(rng[cb][1], 3)
            for k in ("ratio_p10", "ratio_p90"):  # tools/step_time_pairs.py's band, kept (rerun it after a refit)
                if k in old.get(cb, {}):
                    p[k] = old[cb][k]
            cbs[cb] = p
        used = [r for r in rows if CLASS_OF[r["gpu_profile"]] == cls]
        cbs["fit"] = {
            "script": "tools/step_time_fit.py", "date": today,
            "data": os.path.relpath(args.csv, ROOT), "data_sha256": csv_sha,
            "points": {"class": cls, "profiles": sorted({r["gpu_profile"] for r in used}),
                       "hf": sum(code_base(r) == "hf" for r in used),
                       "fused": sum(code_base(r) == "fused" for r in used),
                       "shared_fit_points": len(rows)},
            "held_out": {"folds": args.folds, **{g: summary["held_out_kfold"][g] for g in ("all", "hf", "fused")}},
            "held_out_leave_one_source_out": {g: summary["held_out_loso"][g] for g in ("all", "hf", "fused")},
            "step_ratio_from": rng_from,
            "note": ("fused matmul/attention factors fitted per GPU class; attention_seq_half, hbm_factor and the "
                     "overheads shared by the classes; hf fitted after fused on the hf points only: matmul factor as "
                     "a ratio to fused's per-class one (shared by the classes), its own hbm_factor and "
                     "step_overhead_s; fused's attention factor, attention_seq_half and op_overhead_s (held, not "
                     "fitted: docs/step-time.md)")}
        if "ratio_from" in old.get("fit", {}):
            cbs["fit"]["ratio_from"] = old["fit"]["ratio_from"]
        d["code_bases"] = cbs
        d.setdefault("sources", {})["code_bases"] = (
            f"fitted {today} by tools/step_time_fit.py to {len(used)} published points of GPU class {cls} "
            f"(bench/published/step_time.csv, sha256 {csv_sha[:12]}...); see code_bases.fit")
        with open(path, "w") as f:
            json.dump(d, f, indent=2, ensure_ascii=False)
            f.write("\n")
        print(f"wrote {os.path.relpath(path, ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
