#!/usr/bin/env python3
"""The vision-language models' accuracy table of docs/accuracy.md, from test_vlm_step's output.

tests/test_vlm_step plans every VLM fixture's setting (tests/data/hf-vlm, hf-vlm-peft,
hf-vlm-towers) and prints one line per fixture: the measured and planned live peak and
the live bytes after the forward. This groups those lines per family (and method) x
precision into the markdown table between the markers

    <!-- vlm-accuracy:begin -->  ...  <!-- vlm-accuracy:end -->

  tools/vlm_accuracy.py --test BUILD/tests/test_vlm_step --update docs/accuracy.md
  tools/vlm_accuracy.py --test BUILD/tests/test_vlm_step --check docs/accuracy.md   (exit 1 if stale)
"""
import argparse
import re
import subprocess
import sys

BEGIN, END = "<!-- vlm-accuracy:begin -->", "<!-- vlm-accuracy:end -->"
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


def table(output):
    body = rows(output)
    if not body:
        raise SystemExit("vlm_accuracy: no fixture lines in the test's output")
    head = ["| family | precision | fixtures | max / mean peak error | max after-forward error | "
            "worst x bound | worst setting |",
            "|---|---|---|---|---|---|---|"]
    return "\n".join(head + body) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--test", required=True, help="the built tests/test_vlm_step")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--update", metavar="PAGE")
    g.add_argument("--check", metavar="PAGE")
    a = ap.parse_args()
    run = subprocess.run([a.test], capture_output=True, text=True)
    if run.returncode != 0:
        sys.stderr.write(run.stdout[-4000:] + run.stderr[-2000:])
        raise SystemExit(f"vlm_accuracy: {a.test} failed (exit {run.returncode})")
    new = table(run.stdout)
    page = a.update or a.check
    text = open(page, encoding="utf-8").read()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"vlm_accuracy: {page}: the markers {BEGIN} / {END} are missing")
    i, j = text.index(BEGIN) + len(BEGIN), text.index(END)
    if text[i:j].strip() == new.strip():
        print(f"vlm_accuracy: {page}: the table is current")
        return 0
    if a.check:
        print(f"vlm_accuracy: {page}: the table differs from test_vlm_step's figures; "
              f"run tools/vlm_accuracy.py --test {a.test} --update {page}")
        return 1
    with open(page, "w", encoding="utf-8") as f:
        f.write(text[:i] + "\n" + new + text[j:])
    print(f"vlm_accuracy: {page}: table updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
