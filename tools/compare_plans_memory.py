#!/usr/bin/env python3
"""Compare two directories written by `tools/compare_plans.sh gen` on the MEMORY facts only.

    tools/compare_plans_memory.py [--examples N] [--detail] [--jsonl FILE] OLD_DIR NEW_DIR

(tests/tools/test_compare_plans_memory.py, ctest -R compare_plans_memory, checks it on edited plans.)

For a change that moves the step time (a refit, a new code base) `compare_plans.sh cmp`
reports every file as different; this tool says whether any memory fact moved.

Per case (a name NAME with NAME.json / NAME.err / NAME.txt in the directory):
  - planned in one directory, refused in the other: a JSON plan (-o) is written only when
    gckpt-plan plans, so "refused" means "no NAME.json" (the .err's first line is shown).
    Both refused: the refusal's text is compared and counted apart (not a memory fact).
    Cases without any JSON (the --parallel list table NAME.compare4): refused = empty .txt.
  - both planned: entries are matched by their setting (every_n_layers, offload,
    micro_batch, grad_accum; the parallel mode is the plan's, inputs.layout); an entry in
    one plan only is a difference. Per matched entry: every field of `memory` (peak_bytes,
    device_peak_bytes, breakdown, host bytes, peak location), fits, headroom_bytes,
    checkpointed_layers, trainable_params, global_batch, training_arguments, and, where both
    entries carry a timeline, its highest allocated_bytes (its points are buckets of time,
    and only the recommended entry has one). Ignored: `time`, `pareto`
    (memory vs time), `index`, the timeline's points.
  - the plan's inputs, without inputs.device.code_bases / calibration, inputs.code_base and
    the device's and layout's rates (peak_tflops, *_efficiency, *_bytes_per_s: time only,
    counted apart as "time inputs"); `smallest` (by its entry's setting); the warnings'
    CODES (a code that appears or disappears; the messages' text is ignored); the
    generator's version is ignored. The tables (NAME.txt) and the plot's .gp / .dat files
    are not compared (their columns mix times with bytes).
  - `recommended` depends on time: reported apart -- how many plans' recommended entry
    changed, and for those whether the old recommended setting still exists in the new
    plan with the same memory facts.

Cases are grouped by their signature (the set of fields that differ, with list indices and
breakdown parts kept), one example each. Exit status: 0 when no memory fact differs and no
case changed between planned and refused, 1 otherwise, 2 on bad usage.
"""
import argparse
import collections
import json
import os
import sys

ENTRY_IGNORED = {"time", "pareto", "index"}
DEVICE_TIME = {"peak_tflops", "matmul_efficiency", "hbm_bytes_per_s", "hbm_efficiency",
               "h2d_bytes_per_s", "d2h_bytes_per_s", "intra_node_bus_bytes_per_s",
               "inter_node_bus_bytes_per_s"}
DEVICE_IGNORED = {"code_bases", "calibration"}


def flatten(o, prefix, out):
    if isinstance(o, dict):
        for k, v in o.items():
            flatten(v, f"{prefix}.{k}" if prefix else k, out)
    elif isinstance(o, list):
        for i, v in enumerate(o):
            flatten(v, f"{prefix}[{i}]", out)
        if not o:
            out[prefix] = []
    else:
        out[prefix] = o
    return out


def diff_flat(a, b):
    """[(path, old, new)] for every leaf that differs or exists on one side only."""
    fa, fb = flatten(a, "", {}), flatten(b, "", {})
    return [(k, fa.get(k, "<absent>"), fb.get(k, "<absent>"))
            for k in sorted(set(fa) | set(fb)) if fa.get(k, "<absent>") != fb.get(k, "<absent>")]


def entry_key(e):
    return (e.get("every_n_layers"), e.get("offload"), e.get("micro_batch"), e.get("grad_accum"))


def key_str(k):
    n, off, mb, ga = k
    return f"every_n={n},offload={'on' if off else 'off'},mb={mb},ga={ga}"


def entry_memory(e):
    """The memory facts of one entry (what is compared)."""
    return {k: v for k, v in e.items() if k not in ENTRY_IGNORED and k != "timeline"}


def timeline_diff(a, b):
    """[(path, old, new)]: the timeline is sampled in buckets of TIME (each keeps its highest
    point) and written for the recommended entry only, so its points move with the step time:
    compared is its highest allocated_bytes (the entry's peak: no bucket loses it), when both
    have one; its phases are not (a short phase, the loss, can vanish into a bucket)."""
    ta, tb = a.get("timeline"), b.get("timeline")
    if not ta or not tb:
        return []
    out = []
    ma, mb = max(ta.get("allocated_bytes") or [0]), max(tb.get("allocated_bytes") or [0])
    if ma != mb:
        out.append(("timeline.max_allocated_bytes", ma, mb))
    return out


def inputs_split(inputs):
    """(memory inputs, time inputs) of a plan's inputs."""
    mem, tim = {}, {}
    for k, v in inputs.items():
        if k == "code_base":
            continue
        if k == "device":
            for dk, dv in v.items():
                if dk in DEVICE_IGNORED:
                    continue
                (tim if dk in DEVICE_TIME else mem).setdefault("device", {})[dk] = dv
        elif k == "layout":
            for lk, lv in v.items():
                (tim if lk == "bus_bytes_per_s" else mem).setdefault("layout", {})[lk] = lv
        else:
            mem[k] = v
    return mem, tim


def keyed_entries(plan):
    out, seen = {}, collections.Counter()
    for e in plan.get("entries", []):
        k = entry_key(e)
        seen[k] += 1
        if seen[k] > 1:  # the same setting twice: keep both, told apart by their order
            k = k + (seen[k],)
        out[k] = e
    return out


def index_key(plan, field):
    i = plan.get(field)
    if i is None:
        return None
    es = plan.get("entries", [])
    return entry_key(es[i]) if 0 <= i < len(es) else ("bad index", i)


def first_line(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.strip():
                    return line.strip()
    except FileNotFoundError:
        pass
    return ""


def read_text(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return None


def compare_plan(name, old, new, rec):
    """Append the memory differences of two plans of one case to rec; return recommended info."""
    mo, to = inputs_split(old.get("inputs", {}))
    mn, tn = inputs_split(new.get("inputs", {}))
    for p, a, b in diff_flat(mo, mn):
        rec.append({"case": name, "kind": "inputs", "path": "inputs." + p, "old": a, "new": b})
    time_inputs = bool(diff_flat(to, tn))
    for field in ("schema", "steady_state"):
        if old.get(field) != new.get(field):
            rec.append({"case": name, "kind": "plan", "path": field, "old": old.get(field), "new": new.get(field)})
    eo, en = keyed_entries(old), keyed_entries(new)
    for k in eo.keys() - en.keys():
        rec.append({"case": name, "kind": "entry", "path": "entry removed", "entry": key_str(k[:4]),
                    "old": eo[k]["memory"]["peak_bytes"], "new": "<absent>"})
    for k in en.keys() - eo.keys():
        rec.append({"case": name, "kind": "entry", "path": "entry added", "entry": key_str(k[:4]),
                    "old": "<absent>", "new": en[k]["memory"]["peak_bytes"]})
    for k in sorted(eo.keys() & en.keys(), key=str):
        for p, a, b in diff_flat(entry_memory(eo[k]), entry_memory(en[k])) + timeline_diff(eo[k], en[k]):
            rec.append({"case": name, "kind": "entry", "path": p, "entry": key_str(k[:4]), "old": a, "new": b})
    so, sn = index_key(old, "smallest"), index_key(new, "smallest")
    if so != sn:
        rec.append({"case": name, "kind": "plan", "path": "smallest",
                    "old": key_str(so) if so and len(so) == 4 else so, "new": key_str(sn) if sn and len(sn) == 4 else sn})
    wo = collections.Counter(w.get("code") for w in old.get("warnings", []))
    wn = collections.Counter(w.get("code") for w in new.get("warnings", []))
    for c in sorted((wo - wn).keys()):
        rec.append({"case": name, "kind": "warning", "path": "warning code gone", "old": c, "new": "<absent>"})
    for c in sorted((wn - wo).keys()):
        rec.append({"case": name, "kind": "warning", "path": "warning code new", "old": "<absent>", "new": c})
    ro, rn = index_key(old, "recommended"), index_key(new, "recommended")
    reco = None
    if ro != rn:
        still = None
        if ro is not None:
            e_new = en.get(ro)
            if e_new is None:
                still = "old recommended setting gone"
            elif diff_flat(entry_memory(eo[ro]), entry_memory(e_new)) or timeline_diff(eo[ro], e_new):
                still = ("old recommended setting exists, memory differs, fits "
                         + ("the same" if eo[ro].get("fits") == e_new.get("fits") else "changed"))
            else:
                still = "old recommended setting exists, same memory"
        else:
            still = "nothing was recommended"
        reco = {"case": name, "old": key_str(ro) if ro and len(ro) == 4 else ro,
                "new": key_str(rn) if rn and len(rn) == 4 else rn, "old_entry_in_new": still}
    return reco, time_inputs


def stems(d):
    out = set()
    for f in os.listdir(d):
        for ext in (".json", ".err", ".txt"):
            if f.endswith(ext):
                out.add(f[: -len(ext)])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 usage="%(prog)s [--examples N] [--detail] [--jsonl FILE] OLD_DIR NEW_DIR")
    ap.add_argument("old", metavar="OLD_DIR")
    ap.add_argument("new", metavar="NEW_DIR")
    ap.add_argument("--examples", type=int, default=1, metavar="N", help="examples shown per group (default 1)")
    ap.add_argument("--detail", action="store_true", help="print every difference, one a line")
    ap.add_argument("--jsonl", metavar="FILE", help="write every difference as one JSON object a line")
    a = ap.parse_args()
    for d in (a.old, a.new):
        if not os.path.isdir(d):
            print(f"compare_plans_memory.py: {d}: not a directory", file=sys.stderr)
            return 2

    rec, recos, status = [], [], collections.defaultdict(list)
    n_cases = n_planned = n_time_inputs = 0
    s_old, s_new = stems(a.old), stems(a.new)
    for name in sorted(s_old | s_new):
        n_cases += 1
        jo, jn = (os.path.join(d, name + ".json") for d in (a.old, a.new))
        eo, en = (os.path.join(d, name + ".err") for d in (a.old, a.new))
        has_o, has_n = os.path.exists(jo), os.path.exists(jn)
        if name not in s_old or name not in s_new:
            status["case only in " + ("new" if name not in s_old else "old")].append((name, ""))
            continue
        if not has_o and not has_n:
            to_, tn_ = (read_text(os.path.join(d, name + ".txt")) for d in (a.old, a.new))
            if to_ or tn_:  # a case without a JSON plan (a table of several modes)
                if bool(to_) != bool(tn_):
                    status["table case: planned <-> refused"].append((name, first_line(eo) or first_line(en)))
                continue
            if read_text(eo) != read_text(en):
                status["refused in both, refusal text changed"].append((name, first_line(en)))
            else:
                status["refused in both, same text"].append((name, ""))
            continue
        if has_o != has_n:
            if has_n:
                status["newly planned (refused before)"].append((name, first_line(eo)))
            else:
                status["newly refused (planned before)"].append((name, first_line(en)))
            continue
        n_planned += 1
        with open(jo) as f:
            old = json.load(f)
        with open(jn) as f:
            new = json.load(f)
        reco, ti = compare_plan(name, old, new, rec)
        n_time_inputs += ti
        if reco:
            recos.append(reco)

    if a.jsonl:
        with open(a.jsonl, "w") as f:
            for r in rec:
                f.write(json.dumps(r) + "\n")
    by_case = collections.defaultdict(list)
    for r in rec:
        by_case[r["case"]].append(r)
    groups = collections.defaultdict(list)
    for c, rs in by_case.items():
        groups[tuple(sorted({r["path"] for r in rs}))].append(c)

    print(f"cases: {n_cases}; planned in both: {n_planned}; "
          f"planned in both with a memory difference: {len(by_case)}; "
          f"with different time inputs (device rates, ignored): {n_time_inputs}")
    print("\n== planned / refused ==")
    for k in sorted(status):
        v = status[k]
        print(f"{len(v):6d}  {k}")
        if "same text" in k:
            continue
        for name, line in v[: (len(v) if "newly" in k or "only" in k or "table" in k else a.examples)]:
            print(f"          {name}" + (f"   [{line}]" if line else ""))
    print("\n== memory differences, cases grouped by the fields that differ ==")
    for sig, cases in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        print(f"{len(cases):6d}  {', '.join(sig)}")
        for c in cases[: a.examples]:
            for r in by_case[c][:6]:
                ent = f" [{r['entry']}]" if r.get("entry") else ""
                print(f"          {c}{ent} {r['path']}: {r['old']} -> {r['new']}")
            if len(by_case[c]) > 6:
                print(f"          ... {len(by_case[c]) - 6} more in this case")
    if a.detail:
        print("\n== every difference ==")
        for r in rec:
            ent = f" [{r['entry']}]" if r.get("entry") else ""
            print(f"{r['case']}{ent} {r['path']}: {r['old']} -> {r['new']}")
    print("\n== recommended entry (chosen by time) ==")
    print(f"{len(recos):6d}  plans whose recommended entry changed")
    for k, v in sorted(collections.Counter(r["old_entry_in_new"] for r in recos).items()):
        print(f"{v:6d}    {k}")
    for r in recos[: a.examples]:
        print(f"          {r['case']}: {r['old']} -> {r['new']} ({r['old_entry_in_new']})")
    changed = bool(by_case) or any("newly" in k or "only" in k or "table" in k for k in status)
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
