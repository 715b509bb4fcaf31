#!/usr/bin/env python3
"""The error of a RATIO of two planned step times on one setup, measured on the published
points of bench/published/step_time.csv (a developer tool; gckpt-plan reads only the band it
stores in devices/*.json).

Python 3 standard library only.

Usage: python3 tools/step_time_pairs.py [--plan build/gckpt-plan] [--csv FILE] [--json FILE]
                                        [--write]

Why: a plan's recommendation compares entries of ONE plan (one model, GPU, code base, setup).
Their step times share most of their absolute error (the code base's rates, the cluster), so
the spread that says whether two entries can swap places is the error of their ratio, not
step_ratio_p10 / p90 (the absolute error across setups).

What: every pair of published points from the same source and setup (model, GPU profile,
GPUs per node, nodes, parallel mode, precision, extra arguments, code base) that differ in the
setting (every_n, micro-batch, seq, grad_accum). For each, q = (published tokens/s a / b) /
(planned tokens/s a / b), taken both ways round (q and 1 / q: a pair has no order), so the
band is symmetric: p10 = 1 / p90. Each point is planned once with the profiles as shipped
(their fitted code-base parameters; nothing is refitted here). Pairs weigh equally within a
source and each source by 1 / sqrt(its pairs), as the fit weighs points.

The published table has almost no pair that differs only in what a plan varies (every_n,
micro-batch at one seq): most pairs change the micro-batch and the seq together (the same
tokens per micro-batch) or the seq alone. A seq change moves the attention share of the
step, which the model fits least well; so the band from these pairs is wider than the error of
two entries of one plan, a cautious tie rule. The script prints the band per kind of pair.

--write stores "ratio_p10" / "ratio_p90" in every fitted profile's code_bases.hf and
code_bases.fused: the p10 / p90 of q over that code base's own pairs when it has at least
MIN_PAIRS of them from at least MIN_SOURCES sources, else over every pair; and "ratio_from" in
code_bases.fit (script, date, data sha256, pairs, which pairs each code base's band is from).

Exit status: 0, 2 on unreadable input, 1 when gckpt-plan fails on a point.
"""

import argparse
import collections
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
SETUP = ["source", "model", "gpu_profile", "gpus_per_node", "nodes", "parallel_arg", "precision_arg",
         "extra_args", "code_base_class"]
SETTING = ["every_n", "micro_batch", "seq", "grad_accum"]
MIN_PAIRS, MIN_SOURCES = 30, 2  # a code base gets a band of its own from this many pairs


def wpct(pairs, q):
    """Weighted nearest-rank percentile of [(value, weight)]."""
    v = sorted(pairs)
    total = sum(w for _, w in v)
    acc = 0.0
    for x, w in v:
        acc += w
        if acc >= q / 100 * total - 1e-12:
            return x
    return v[-1][0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plan", default=os.path.join(ROOT, "build", "gckpt-plan"))
    ap.add_argument("--csv", default=os.path.join(ROOT, "bench", "published", "step_time.csv"))
    ap.add_argument("--json", metavar="FILE", help="write every pair as JSON")
    ap.add_argument("--write", action="store_true", help="store ratio_p10 / ratio_p90 in devices/*.json")
    args = ap.parse_args()
    if not os.access(args.plan, os.X_OK):
        stc.die(f"{args.plan}: not an executable gckpt-plan")
    rows = [r for r in stc.read_rows(args.csv) if not r["exclude"]]
    with open(args.csv, "rb") as f:
        csv_sha = hashlib.sha256(f.read()).hexdigest()
    groups = collections.defaultdict(list)
    for r in rows:
        groups[tuple(r[k] for k in SETUP)].append(r)
    groups = {k: v for k, v in groups.items() if len(v) > 1}
    planned = {}
    try:
        with tempfile.TemporaryDirectory() as tmpdir:
            for v in groups.values():
                for r in v:
                    planned[r["id"]] = stc.plan_row(args.plan, r, tmpdir)[0]
    except RuntimeError as e:
        print(e, file=sys.stderr)
        return 1
    pairs = []
    for v in groups.values():
        for i in range(len(v)):
            for j in range(i + 1, len(v)):
                a, b = v[i], v[j]
                kind = "+".join(k for k in SETTING if a[k] != b[k]) or "same setting"
                q = (float(a["tokens_per_s_gpu"]) / float(b["tokens_per_s_gpu"])) / (planned[a["id"]] / planned[b["id"]])
                pairs.append({"a": a["id"], "b": b["id"], "source": a["source"], "kind": kind,
                              "code_base": stc.code_base_of(a), "q": q})
    n_src = collections.Counter(p["source"] for p in pairs)

    def band(sel):
        vals = []
        for p in sel:
            w = 1 / math.sqrt(n_src[p["source"]])
            vals += [(p["q"], w), (1 / p["q"], w)]
        return wpct(vals, 10), wpct(vals, 50), wpct(vals, 90)

    print(f"{len(pairs)} pairs of published points on one setup, from {len(n_src)} sources; "
          f"q = published ratio / planned ratio of tokens/s, both ways round")
    print(f"{'pairs':<32} {'n':>5} {'p10':>7} {'p50':>7} {'p90':>7}")
    kinds = sorted({p["kind"] for p in pairs})
    for name, sel in ([("all", pairs)] + [(f"kind {k}", [p for p in pairs if p["kind"] == k]) for k in kinds] +
                      [(f"source {s}", [p for p in pairs if p["source"] == s]) for s in sorted(n_src)] +
                      [(f"code base {c}", [p for p in pairs if p["code_base"] == c]) for c in ("hf", "fused")]):
        if sel:
            lo, mid, hi = band(sel)
            print(f"{name:<32} {len(sel):>5} {lo:7.3f} {mid:7.3f} {hi:7.3f}")
    lo, _, hi = band(pairs)
    # each code base's band: its own pairs when there are enough of them, else every pair
    cb_band, cb_from = {}, {}
    for cb in ("hf", "fused"):
        sel = [p for p in pairs if p["code_base"] == cb]
        if len(sel) >= MIN_PAIRS and len({p["source"] for p in sel}) >= MIN_SOURCES:
            b = band(sel)
            cb_band[cb] = (b[0], b[2])
            cb_from[cb] = f"its own {len(sel)} pairs from {len({p['source'] for p in sel})} sources"
        else:
            cb_band[cb] = (lo, hi)
            cb_from[cb] = f"all {len(pairs)} pairs (it has {len(sel)} of its own)"
        print(f"band of {cb}: {cb_band[cb][0]:.3f}-{cb_band[cb][1]:.3f} from {cb_from[cb]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"pairs": pairs, "ratio_p10": lo, "ratio_p90": hi}, f, indent=1)
    if args.write:
        today = datetime.date.today().isoformat()
        for name in sorted(os.listdir(os.path.join(ROOT, "devices"))):
            path = os.path.join(ROOT, "devices", name)
            if not name.endswith(".json"):
                continue
            with open(path) as f:
                d = json.load(f)
            cbs = d.get("code_bases")
            if not isinstance(cbs, dict):
                continue
            for cb in ("hf", "fused"):
                if cb in cbs:
                    cbs[cb]["ratio_p10"], cbs[cb]["ratio_p90"] = (round(v, 3) for v in cb_band[cb])
            cbs.setdefault("fit", {})["ratio_from"] = {
                "script": "tools/step_time_pairs.py", "date": today, "data": os.path.relpath(args.csv, ROOT),
                "data_sha256": csv_sha, "pairs": len(pairs), "sources": len(n_src),
                "kinds": {k: sum(p["kind"] == k for p in pairs) for k in kinds},
                "band_from": cb_from,
                "note": ("p10 / p90 of (published ratio / planned ratio) of tokens/s over pairs of published points on "
                         "one setup, both ways round, the profiles' fitted parameters as shipped (not refitted); "
                         "most pairs change the seq, so the band is wider than two entries of one plan need")}
            with open(path, "w") as f:
                json.dump(d, f, indent=2, ensure_ascii=False)
                f.write("\n")
            print(f"wrote {os.path.relpath(path, ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
