#!/usr/bin/env python3
"""docs/accuracy.md's two accuracy tables, from the tests that compare the planner with the fixtures.

- Text models, between <!-- text-accuracy:begin --> and <!-- text-accuracy:end -->:
  tests/test_hf_fixtures prints one row per family x precision x attention (fixtures, max and
  mean peak error, max and mean after-forward error); the table merges the attentions
  (cases summed, the maxima, the means weighted by cases).
- Vision-language models, between <!-- vlm-accuracy:begin --> and <!-- vlm-accuracy:end -->:
  tests/test_vlm_step plans every VLM fixture's setting (tests/data/hf-vlm, hf-vlm-peft,
  hf-vlm-towers) and prints one line per fixture; grouped per family (and method) x precision
  with the worst fixture's setting.

  tools/accuracy_tables.py --build BUILD --update docs/accuracy.md
  tools/accuracy_tables.py --build BUILD --check docs/accuracy.md   (exit 1 if stale)
"""
import argparse
import os
import re
import subprocess
import sys

LINE = re.compile(r"^(?P<file>\S+\.json)\s+peak measured\s+(?P<meas>\d+) planned\s+(?P<plan>\d+)\s+"
                  r"(?P<err>[-+]?[\d.]+)% ok\s+\(after forward\s+(?P<fwd>[-+]?[\d.]+)%")
PRECISIONS = ("amp-bf16", "bf16", "fp32")  # longest first: "amp-bf16" contains "bf16"
BOUND = {"fp32": 0.1, "amp-bf16": 0.1, "bf16": 0.5}


def classify(name):
    """(family label, precision, setting) of a fixture's file name."""
    stem = name[:-5]
    for p in PRECISIONS:
        m = re.search(r"-(?:nf4dq-)?" + re.escape(p) + r"(?:-cudalists)?-", stem)
        if m:
            break
    else:
        raise ValueError(f"{name}: no precision in the name")
    family = stem[:m.start()]
    setting = stem[m.end():]
    if "-ckpttext" in stem or "-ckptvision" in stem:
        family += " (--checkpoint-towers)"
    return family, p, setting


def rows(output):
    groups = {}
    order = []
    for line in output.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        fam, prec, setting = classify(m["file"])
        key = (fam, prec)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append((abs(float(m["err"])), abs(float(m["fwd"])), setting))
    fams = []
    for fam, _ in order:
        if fam not in fams:
            fams.append(fam)
    out = []
    for fam in fams:
        for prec in ("fp32", "bf16", "amp-bf16"):
            g = groups.get((fam, prec))
            if not g:
                continue
            worst = max(g)
            mean = sum(e for e, _, _ in g) / len(g)
            fwd = max(f for _, f, _ in g)
            out.append(f"| {fam} | {prec} | {len(g)} | {worst[0]:.3f} % / {mean:.3f} % | {fwd:.3f} % | "
                       f"{worst[0] / BOUND[prec]:.2f} | `{worst[2]}` |")
    return out


def vlm_table(output):
    body = rows(output)
    if not body:
        raise SystemExit("accuracy_tables: no fixture lines in test_vlm_step's output")
    head = ["| family | precision | fixtures | max / mean peak error | max after-forward error | "
            "worst x bound | worst setting |",
            "|---|---|---|---|---|---|---|"]
    return "\n".join(head + body) + "\n"


TEXT_ROW = re.compile(r"^\| (?P<fam>\w+) \| (?P<prec>[\w-]+) \| (?P<attn>[\w+]+) \| (?P<n>\d+) \| "
                      r"(?P<pmax>[\d.]+) % \| (?P<pmean>[\d.]+) % \| (?P<fmax>[\d.]+) % \| (?P<fmean>[\d.]+) % \|$")
PREC_LABEL = {"fp32": "fp32", "bf16": "bf16", "amp-bf16": "amp-bf16 (CPU lists)",
              "amp-bf16-cudalists": "amp-bf16 (CUDA lists)"}


def text_table(output):
    groups, order = {}, []
    for line in output.splitlines():
        m = TEXT_ROW.match(line)
        if not m:
            continue
        fam = m["fam"] + (" +aux" if m["attn"].endswith("+aux") else "")
        key = (fam, m["prec"])
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append((int(m["n"]), float(m["pmax"]), float(m["pmean"]), float(m["fmax"]), float(m["fmean"])))
    if not groups:
        raise SystemExit("accuracy_tables: no table rows in test_hf_fixtures' output")
    rank = {"fp32": 0, "bf16": 1, "amp-bf16": 2, "amp-bf16-cudalists": 3}
    out = ["| family | precision | cases | max / mean peak error | max / mean after-forward error |",
           "|---|---|---|---|---|"]
    for fam, prec in sorted(order, key=lambda k: (k[0], rank.get(k[1], 9))):
        g = groups[(fam, prec)]
        n = sum(r[0] for r in g)
        pm = sum(r[0] * r[2] for r in g) / n
        fm = sum(r[0] * r[4] for r in g) / n
        out.append(f"| {fam} | {PREC_LABEL.get(prec, prec)} | {n} | {max(r[1] for r in g):.3f} % / {pm:.3f} % | "
                   f"{max(r[3] for r in g):.3f} % / {fm:.3f} % |")
    return "\n".join(out) + "\n"


def run_test(exe):
    run = subprocess.run([exe], capture_output=True, text=True)
    if run.returncode != 0:
        sys.stderr.write(run.stdout[-4000:] + run.stderr[-2000:])
        raise SystemExit(f"accuracy_tables: {exe} failed (exit {run.returncode})")
    return run.stdout


def splice(text, name, new, page):
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    if begin not in text or end not in text:
        raise SystemExit(f"accuracy_tables: {page}: the markers {begin} / {end} are missing")
    i, j = text.index(begin) + len(begin), text.index(end)
    return text[:i] + "\n" + new + text[j:]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True, help="the build directory (its tests/test_hf_fixtures and tests/test_vlm_step)")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--update", metavar="PAGE")
    g.add_argument("--check", metavar="PAGE")
    a = ap.parse_args()
    tests = os.path.join(a.build, "tests")
    page = a.update or a.check
    text = open(page, encoding="utf-8").read()
    new = splice(text, "text-accuracy", text_table(run_test(os.path.join(tests, "test_hf_fixtures"))), page)
    new = splice(new, "vlm-accuracy", vlm_table(run_test(os.path.join(tests, "test_vlm_step"))), page)
    if new == text:
        print(f"accuracy_tables: {page}: the tables are current")
        return 0
    if a.check:
        print(f"accuracy_tables: {page}: the tables differ from the tests' figures; "
              f"run tools/accuracy_tables.py --build {a.build} --update {page}")
        return 1
    with open(page, "w", encoding="utf-8") as f:
        f.write(new)
    print(f"accuracy_tables: {page}: tables updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
