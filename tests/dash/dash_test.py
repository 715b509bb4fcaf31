#!/usr/bin/env python3
"""The dashboard (gckpt-dash, gckpt-plan --html; issue 24), checked in a real browser.

usage: dash_test.py --build DIR --source DIR cli|browser|screenshots OUTDIR|bench

  cli          refusals without a browser: a plan or report that fails its checks, a
               report of another plan: one line naming the file, exit 2, no page written
               (an existing page untouched); the page's data block escaped;
               gckpt.TrainerCallback's reports accepted, refused when of another plan,
               read by gckpt-plan --calibrate-from
  browser      headless Chromium (Debian's chromium) on the generated pages, --dump-dom
               after the script ran: points = entries, the recommended one marked, each
               point's setting (its tooltip: dash_devtools), the reports' measured
               values on the rows of their entries, no script error, no CSP violation, no
               address to fetch; hostile names (</script>, <img onerror>, quotes, bidi
               overrides, invalid UTF-8, huge numbers, missing optional fields): nothing
               runs, the page renders without horizontal overflow; a control page that
               does fetch() records the violation (the check can fail); served by a
               local static web server that logs requests, the page is the only one; a
               plan for 2 GPUs and its mpirun run (each rank's row); screenshots of the
               sweep and of a selected entry; gckpt.TrainerCallback's reports
               (tests/data/dash): the entry row, every step's measured peak against the
               plan's line (step 1 not judged), the warnings, each rank's file. Exit 77
               (skipped) without chromium.
  screenshots  the docs' screenshots into OUTDIR: the sweep and the recommended entry of
               llama-3.2-3b at 4096 tokens on the H100 profile (gckpt-plan --model
               llama-3.2-3b --seq 4096 --micro-batch 1,2,4,8 --every-n off,1,2,4,7), and
               the callback report tests/data/dash/callback-warn.jsonl
  bench        (not a test) the page's size and Chromium's time to open a plan of about
               10,000 entries: the load event's time after the navigation started, through
               the DevTools protocol (tests/dash/cdp.py), five opens; the load average; the
               wall times of --dump-dom and --screenshot (with Chromium's start)

Standard library only. The page's script records errors and CSP violations into data-*
attributes of <body> (planner/dash/dash.js), which the dumped DOM carries.
"""
import argparse
import html.parser
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

SKIP = 77
FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL: " + what, flush=True)
    return cond


def run(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=kw.pop("timeout", 300), **kw)


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


def browser(path, extra, window="1200,1000", hash_=""):
    url = "file://" + os.path.abspath(path) + hash_
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
           "--disable-extensions", "--disable-background-networking", "--window-size=" + window] + extra + [url]
    return run(cmd, timeout=120)


CONSOLE = {}


def dump_dom(path, hash_="", window="1200,1000"):
    """The DOM after the script ran; Chromium's console messages (its log on stderr: script
    errors, and the engine's own, such as an SVG attribute it cannot parse) kept in
    CONSOLE[path + hash_]."""
    r = browser(path, ["--dump-dom", "--virtual-time-budget=2000", "--enable-logging=stderr", "--v=0"], window, hash_)
    CONSOLE[path + hash_] = [l for l in r.stderr.decode("utf-8", "replace").splitlines() if ":CONSOLE" in l]
    return r.stdout.decode("utf-8", "replace")


class Node:
    def __init__(self, tag, attrs, parent):
        self.tag, self.attrs, self.parent, self.children, self.text = tag, dict(attrs), parent, [], ""

    def all_text(self):
        return self.text + "".join(c.all_text() + c.tail for c in self.children)

    tail = ""


class Tree(html.parser.HTMLParser):
    """The dumped DOM as nodes (enough for the checks: tags, attributes, text)."""
    VOID = {"meta", "input", "br", "img", "link", "hr", "col", "area", "base", "source", "wbr"}

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", [], None)
        self.cur = self.root
        self.nodes = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        n = Node(tag, attrs, self.cur)
        self.cur.children.append(n)
        self.nodes.append(n)
        if tag not in self.VOID:
            self.cur = n

    def handle_startendtag(self, tag, attrs):
        n = Node(tag, attrs, self.cur)
        self.cur.children.append(n)
        self.nodes.append(n)

    def handle_endtag(self, tag):
        c = self.cur
        while c is not self.root and c.tag != tag:
            c = c.parent
        if c is not self.root:
            self.cur = c.parent

    def handle_data(self, data):
        if self.cur.children:
            self.cur.children[-1].tail += data
        else:
            self.cur.text += data

    def find(self, tag=None, **attrs):
        out = []
        for n in self.nodes:
            if tag and n.tag != tag:
                continue
            if all(n.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items()):
                out.append(n)
        return out

    def body(self):
        b = self.find("body")
        return b[0].attrs if b else {}


# ---- fixtures ------------------------------------------------------------------------------

class Fx:
    def __init__(self, build, source, tmp):
        self.build, self.source, self.tmp = build, source, tmp
        self.plan_exe = os.path.join(build, "gckpt-plan")
        self.run_exe = os.path.join(build, "gckpt-run")
        self.dash_exe = os.path.join(build, "gckpt-dash")
        self.env = dict(os.environ, GCKPT_DATA_DIR=source, OPENBLAS_NUM_THREADS="1")

    def p(self, name):
        return os.path.join(self.tmp, name)

    def plan(self, name, *args):
        r = run([self.plan_exe, "-q", "-o", self.p(name)] + list(args), env=self.env)
        if r.returncode != 0:
            sys.exit("gckpt-plan failed: " + r.stderr.decode())
        return self.p(name)

    def tiny_plan(self, name="tiny.json", *extra):
        d = self.source
        return self.plan(name, "--model", d + "/tests/executor/data/tiny-llama.json", "--gpu",
                         d + "/tests/data/devices/cpu-exact.json", "--target", "cuda", "--seq", "32",
                         "--micro-batch", "1,2", "--every-n", "off,1,2", *extra)

    def report(self, plan, name, *sel, date=None):
        out = self.p(name)
        r = run([self.run_exe, "--plan", plan, "--backend", "host", "-q", "--steps", "2", "-o", out] + list(sel or ["--all"]),
                env=self.env)
        if r.returncode != 0:
            sys.exit("gckpt-run failed: " + r.stderr.decode())
        if date:
            os.utime(out, (date, date))
        return out

    def dash(self, out, *inputs):
        return run([self.dash_exe, "-o", self.p(out)] + list(inputs), env=self.env)


def load(path):
    with open(path, "rb") as f:
        return json.loads(f.read().decode("utf-8", "replace"))


def report_entries(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip() and json.loads(l).get("record") == "entry"]


# ---- cli -----------------------------------------------------------------------------------

def refused(fx, r, name, page, why):
    err = r.stderr.decode("utf-8", "replace")
    check(r.returncode == 2, "%s: exit %d, expected 2 (%s)" % (why, r.returncode, err.strip()))
    check(err.count("\n") == 1 and err.startswith("gckpt-dash: ") and name in err,
          "%s: one line naming %s, got %r" % (why, name, err))
    check(not os.path.exists(fx.p(page)), "%s: a page was written" % why)


def test_cli(fx):
    plan = fx.tiny_plan()
    rep = fx.report(plan, "r.jsonl", "--entry", "0,3")
    r = fx.dash("ok.html", plan, rep)
    check(r.returncode == 0 and r.stderr == b"" and r.stdout == b"", "good inputs: exit %d %r" % (r.returncode, r.stderr))
    # a plan that fails its checks: malformed, a field out of its range, not a plan
    bad = fx.p("bad-plan.json")
    with open(plan) as f:
        text = f.read()
    for i, (label, t) in enumerate([("malformed", text[: len(text) // 2]),
                                    ("a micro-batch that is a string", re.sub(r'"micro_batch":\s*1,', '"micro_batch": "1",', text, count=1)),
                                    ("another schema", text.replace('"gckpt.plan/2"', '"gckpt.plan/9"', 1)),
                                    # numbers JSON has no word for, and one beyond a double
                                    ("a NaN", re.sub(r'"step_s":\s*[0-9.e+-]+', '"step_s": NaN', text, count=1)),
                                    ("an Infinity", re.sub(r'"tokens_per_s":\s*[0-9.e+-]+', '"tokens_per_s": Infinity', text, count=1)),
                                    ("1e999", re.sub(r'"tokens_per_s":\s*[0-9.e+-]+', '"tokens_per_s": 1e999', text, count=1)),
                                    ("a huge peak", re.sub(r'"peak_bytes":\s*[0-9]+', '"peak_bytes": 1e300', text, count=1))]):
        with open(bad, "w") as f:
            f.write(t)
        check(t != text, "plan: %s: the case changed nothing" % label)
        r = fx.dash("p%d.html" % i, bad)
        refused(fx, r, "bad-plan.json", "p%d.html" % i, "plan: " + label)
        check(b"got a number" not in r.stderr, "plan: %s: %r" % (label, r.stderr))
    # reports that fail their checks
    lines = open(rep).read().splitlines(True)
    cases = [("garbage", "not json\n"), ("no header", "".join(lines[1:])),
             ("an entry without its memory", lines[0] + json.dumps(dict(json.loads(lines[1]), memory=None)) + "\n"),
             ("an index beyond the plan", lines[0] + json.dumps(dict(json.loads(lines[1]), index=99)) + "\n")]
    # reports of another plan: the model, the device, the sequence, a setting, a prediction
    h = json.loads(lines[0])
    e = json.loads(lines[1])
    for label, hh, ee in [("another model", dict(h, plan=dict(h["plan"], model="gpt2")), e),
                          ("another device", dict(h, plan=dict(h["plan"], device="NVIDIA H100 SXM5 80GB")), e),
                          ("another sequence", dict(h, plan=dict(h["plan"], seq=64)), e),
                          ("another setting", h, dict(e, every_n_layers=7)),
                          ("another prediction", h, dict(e, memory=dict(e["memory"], peak_bytes=dict(e["memory"]["peak_bytes"], predicted=1))))]:
        cases.append((label, json.dumps(hh) + "\n" + json.dumps(ee) + "\n"))
    # a whole real run of another plan (micro-batch 4: other predictions)
    other = fx.tiny_plan("other.json", "--grad-accum", "2")
    other_rep = fx.report(other, "other.jsonl", "--entry", "0")
    for i, (label, t) in enumerate(cases + [("a real report of another plan", open(other_rep).read())]):
        path = fx.p("bad-report-%d.jsonl" % i)
        with open(path, "w") as f:
            f.write(t)
        refused(fx, fx.dash("r%d.html" % i, plan, rep, path), "bad-report-%d.jsonl" % i, "r%d.html" % i, "report: " + label)
    test_cli_callback(fx)
    test_cli_planned_only(fx)
    # an existing page is left as it was by a refusal
    with open(fx.p("keep.html"), "w") as f:
        f.write("old\n")
    r = fx.dash("keep.html", plan, other_rep)
    check(r.returncode == 2 and open(fx.p("keep.html")).read() == "old\n", "a refusal replaced the existing page")
    r = fx.dash("keep.html", bad)  # a plan that fails its checks (the last case above)
    check(r.returncode == 2 and open(fx.p("keep.html")).read() == "old\n", "a refused plan replaced the existing page")
    # the page may not replace an input
    r = fx.dash("tiny.json", plan)
    check(r.returncode == 2 and load(plan).get("schema") == "gckpt.plan/2", "-o naming the plan was not refused")
    # gckpt-plan --html writes the page beside the plan, or alone; refuses stdout
    d = fx.source
    args = ["--model", d + "/tests/executor/data/tiny-llama.json", "--gpu", d + "/tests/data/devices/cpu-exact.json", "--seq", "32", "-q"]
    r = run([fx.plan_exe, "--html", fx.p("plan.html"), "-o", fx.p("plan.json")] + args, env=fx.env)
    check(r.returncode == 0 and os.path.getsize(fx.p("plan.html")) > 10000, "gckpt-plan --html: %r" % r.stderr)
    # the same page as gckpt-dash writes for that plan: the same data (but the plan's file name)
    # and the same page around it (but the nonce)
    r = fx.dash("plan-dash.html", fx.p("plan.json"))
    pages = [open(fx.p(n), encoding="utf-8").read() for n in ("plan.html", "plan-dash.html")]
    blocks = [json.loads(re.search(r'<script type="application/json" id="gckpt-data">(.*?)</script>', x, re.S).group(1)) for x in pages]
    for b in blocks:
        b.pop("plan_file", None)
    check(r.returncode == 0 and blocks[0] == blocks[1], "gckpt-plan --html and gckpt-dash: the data differ")
    shells = [re.sub(r"nonce-?=?\"?[0-9a-f]+", "N", re.sub(r'(id="gckpt-data">).*?(</script>)', r"\1\2", x, flags=re.S)) for x in pages]
    check(shells[0] == shells[1], "gckpt-plan --html and gckpt-dash: the pages differ around the data")
    r = run([fx.plan_exe, "--html", "-"] + args, env=fx.env)
    check(r.returncode == 2 and b"--html" in r.stderr, "gckpt-plan --html -: %r" % r.stderr)
    # the script puts data into the page as text only
    js = open(os.path.join(fx.source, "planner/dash/dash.js"), encoding="utf-8").read()
    for bad_api in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "Function("):
        check(bad_api not in js, "planner/dash/dash.js uses " + bad_api)
    # the data block: no string can end it
    hostile = hostile_plan(fx, plan)
    r = fx.dash("hostile.html", hostile)
    check(r.returncode == 0, "hostile plan refused: %r" % r.stderr)
    page = open(fx.p("hostile.html"), "rb").read().decode("utf-8")  # valid UTF-8, or this raises
    block = re.search(r'<script type="application/json" id="gckpt-data">(.*?)</script>', page, re.S)
    check(block is not None, "no data block")
    if block:
        b = block.group(1)
        check(not re.search("[<>&\u2028\u2029]", b), "the data block holds <, >, & or a line separator")
        check("\u202e" not in page and "\ufffd" not in b, "a bidi override or an invalid byte reached the page")
        check(json.loads(b)["plan"]["inputs"]["model"]["name"].startswith("</script>"), "the hostile name is not the data's")
    check(page.count("<script") == 2, "the page has other scripts than its data and its own")


def test_cli_planned_only(fx):
    """Plans gckpt-plan makes and gckpt-run does not execute (a VLM but LLaVA) or executes over
    MPI only (context parallelism, TP x FSDP): the reader accepts them, so the page is drawn, their sections in its data; a field
    of theirs that contradicts the plan is refused, one line naming the file and the field."""
    d = fx.source
    tiny = d + "/tests/executor/data/tiny-llama.json"
    base = ["--seq", "32", "--micro-batch", "1,2", "--every-n", "off,1,2"]  # the shipped H100 profile: its bus times CP and TP
    plans = [("gemma3", fx.plan("vlm.json", "--model", d + "/tests/data/configs/gemma-3-4b.json", "--seq", "1024",
                                "--micro-batch", "1", "--every-n", "off,1,4"),
              "vision", ("entries", 1, "vision_checkpointed_layers"), [0, 2], "entries[1].vision_checkpointed_layers"),
             ("--cp 2", fx.plan("cp.json", "--model", tiny, "--cp", "2", "--gpus", "2", *base),
              "context_parallel", ("inputs", "context_parallel", "local_seq"), 5, "inputs.context_parallel.local_seq"),
             ("--tp 2 --dp-shard 2", fx.plan("tpfsdp.json", "--model", tiny, "--tp", "2", "--dp-shard", "2", "--gpus", "4", *base),
              "tensor_parallel", ("inputs", "tensor_parallel", "world_size"), 8, "inputs.tensor_parallel.world_size")]
    for i, (label, plan, section, path, bad_value, field) in enumerate(plans):
        p = load(plan)
        check(section in p["inputs"], "%s: the plan has no inputs.%s" % (label, section))
        r = run([fx.run_exe, "--plan", plan, "--backend", "host", "-q", "-o", fx.p("run%d.jsonl" % i)], env=fx.env)
        # TP x FSDP and CP are executed, over MPI: one process alone is sent to mpirun
        says = (b"mpirun -np 4 gckpt-run" if label.startswith("--tp") else b"mpirun -np 2 gckpt-run" if label == "--cp 2"
                else b" is planned")
        check(r.returncode == 2 and says in r.stderr, "%s: gckpt-run did not refuse it: %r" % (label, r.stderr))
        r = fx.dash("planned%d.html" % i, plan)
        check(r.returncode == 0 and r.stderr == b"", "%s: exit %d %r" % (label, r.returncode, r.stderr))
        if r.returncode == 0:
            page = open(fx.p("planned%d.html" % i), encoding="utf-8").read()
            block = json.loads(re.search(r'<script type="application/json" id="gckpt-data">(.*?)</script>', page, re.S).group(1))
            check(block["plan"]["inputs"].get(section) == p["inputs"][section], "%s: the page's data lacks inputs.%s" % (label, section))
        # one field corrupted: refused, naming the file and the field, no page
        q = p
        for k in path[:-1]:
            q = q[k]
        q[path[-1]] = bad_value
        bad = fx.p("bad-planned%d.json" % i)
        with open(bad, "w") as f:
            json.dump(p, f)
        r = fx.dash("bad-planned%d.html" % i, bad)
        refused(fx, r, "bad-planned%d.json" % i, "bad-planned%d.html" % i, "%s with a bad %s" % (label, field))
        check(("'%s" % field).encode() in r.stderr, "%s: the field %s is not named: %r" % (label, field, r.stderr))
    # the calibration re-evaluates a report's plan entries as gckpt-run's settings (no CP, vision
    # tower or TP x FSDP in them): a callback report of such a plan is refused, naming why
    recs = records(cb(fx, "callback.jsonl"))
    for i, (label, plan) in enumerate((x[0], x[1]) for x in plans):
        recs[0]["plan"] = dict(recs[0]["plan"], file=os.path.basename(plan), device=load(plan)["inputs"]["device"]["name"])
        rep = fx.p("cal-planned%d.jsonl" % i)
        with open(rep, "w") as f:
            f.write("".join(json.dumps(x) + "\n" for x in recs))
        r = run([fx.plan_exe, "--calibrate-from", rep, "-o", fx.p("cal-planned%d.json" % i)], env=fx.env)
        err = r.stderr.decode("utf-8", "replace")
        says = (" is not re-evaluated by the calibration" if label.startswith("--tp") or label == "--cp 2"
                else "field 'inputs.vision': a vision-language model's plan is not calibrated" if label == "gemma3"
                else " is planned")
        check(r.returncode == 2 and "cal-planned%d.jsonl: its plan.file: " % i in err and says in err
              and not os.path.exists(fx.p("cal-planned%d.json" % i)), "%s: --calibrate-from its report: %r" % (label, err))


CALLBACK_DIR = "tests/data/dash"  # real gckpt.TrainerCallback reports (its README says how they were made)


def cb(fx, name):
    return os.path.join(fx.source, CALLBACK_DIR, name)


def records(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def callback_like_plan(fx, name, *extra):
    """A plan of the callback fixtures' model, device and options, with extra options."""
    d = fx.source
    args = {"--seq": "32", "--grad-accum": "2", "--every-n": "off,1,2"}
    for k, v in zip(extra[::2], extra[1::2]):
        args[k] = v
    return fx.plan(name, "--model", d + "/tests/data/trainer/tiny-llama.json", "--gpu", d + "/tests/data/devices/cpu-exact.json",
                   "--target", "cpu", "--precision", "fp32", "--optimizer", "adamw", "--attention", "sdpa",
                   "--micro-batch", "2", "--offload", "off", *[x for kv in args.items() for x in kv])


def test_cli_callback(fx):
    """gckpt.TrainerCallback's reports: read next to gckpt-run's, each rank's file as given;
    one of another plan refused like gckpt-run's; gckpt-plan --calibrate-from reads them."""
    plan, ddp = cb(fx, "callback-plan.json"), cb(fx, "callback-ddp-plan.json")
    r = fx.dash("cb.html", plan, cb(fx, "callback.jsonl"), cb(fx, "callback-warn.jsonl"))
    check(r.returncode == 0 and r.stderr == b"", "callback reports: exit %d %r" % (r.returncode, r.stderr))
    r = fx.dash("cb-ddp.html", ddp, cb(fx, "callback-ddp.jsonl"), cb(fx, "callback-ddp.rank1.jsonl"))
    check(r.returncode == 0 and r.stderr == b"", "callback reports of two ranks: exit %d %r" % (r.returncode, r.stderr))
    # the same plan made again here is the fixtures' plan (the check compares predictions)
    again = callback_like_plan(fx, "cb-again.json")
    r = fx.dash("cb-again.html", again, cb(fx, "callback.jsonl"))
    check(r.returncode == 0, "a callback report against its plan made again: %r" % r.stderr)
    # a callback report of another plan: another sequence (the header), another accumulation
    # (the entries' predictions), another plan's rank file
    for i, (label, other, rep) in enumerate([
            ("another sequence", callback_like_plan(fx, "cb-seq64.json", "--seq", "64"), "callback.jsonl"),
            ("another grad-accum", callback_like_plan(fx, "cb-ga1.json", "--grad-accum", "1"), "callback.jsonl"),
            ("a rank of another plan's run", plan, "callback-ddp.rank1.jsonl")]):
        r = fx.dash("cbx%d.html" % i, other, cb(fx, rep))
        refused(fx, r, rep, "cbx%d.html" % i, "callback report: " + label)
        check(b"a report of another plan" in r.stderr, "callback report, %s: %r" % (label, r.stderr))
    # a killed run (no entry or summary record): its steps are checked as its entries are
    lines = open(cb(fx, "callback.jsonl")).read().splitlines(True)
    killed = [l for l in lines if json.loads(l)["record"] in ("header", "step")]
    with open(fx.p("killed.jsonl"), "w") as f:
        f.write("".join(killed))
    r = fx.dash("killed.html", plan, fx.p("killed.jsonl"))
    check(r.returncode == 0, "a killed callback run: %r" % r.stderr)
    s1 = json.loads(killed[2])
    s1["memory"]["peak_bytes"]["predicted"] += 1
    with open(fx.p("killed-other.jsonl"), "w") as f:
        f.write("".join(killed[:2]) + json.dumps(s1) + "\n" + "".join(killed[3:]))
    r = fx.dash("killed-other.html", plan, fx.p("killed-other.jsonl"))
    refused(fx, r, "killed-other.jsonl", "killed-other.html", "a killed callback run of another prediction")
    check(b"steps[1].memory.peak_bytes.predicted" in r.stderr, "the step's field is not named: %r" % r.stderr)
    # the calibration reads the same reports (its plan.file lies next to them)
    r = run([fx.plan_exe, "--calibrate-from", cb(fx, "callback.jsonl"), cb(fx, "callback-ddp.rank1.jsonl"), "-o", fx.p("cal.json")],
            env=fx.env)
    check(r.returncode == 0, "gckpt-plan --calibrate-from callback reports: %r" % r.stderr)
    if r.returncode == 0:
        frm = load(fx.p("cal.json"))["calibration"]["from"]
        check([x["generator"].split()[0] for x in frm] == ["gckpt-python"] * 2, "calibration sources %r" % frm)


def with_device(path, day):
    """The report as a CUDA run writes it: each entry's device peak measured (the host backend
    measures none), 4 KiB per entry index above the prediction, judged within 1 %."""
    st = os.stat(path)
    recs = records(path)
    for r in recs:
        if r.get("record") == "entry":
            d = r["memory"]["device_peak_bytes"]
            d["measured"] = d["predicted"] + 4096 * (r["index"] + 1)
            d["relative_error"] = (d["measured"] - d["predicted"]) / d["predicted"]
            d["pass"] = abs(d["relative_error"]) <= 0.01
    with open(path, "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in recs))
    os.utime(path, (st.st_atime, st.st_mtime))


def hostile_plan(fx, plan, name="hostile.json"):
    """The plan with hostile strings in every name and message the page shows, a huge but
    valid number, and optional fields left out."""
    with open(plan, "rb") as f:
        raw = f.read()
    p = json.loads(raw)
    evil = '</script><script>document.body.setAttribute("data-pwned","script")</script>'
    img = "<img src=x onerror=\"document.body.setAttribute('data-pwned','img')\">"
    p["inputs"]["model"]["name"] = evil[:60] + "\u202e'\"&amp;"
    p["inputs"]["device"]["name"] = img + "\u2028x"
    p["warnings"] = [{"code": "padding_not_modelled", "message": img + evil + "\u202egnp.exe " + "A" * 400}]
    p["inputs"]["training_arguments"]["optim"] = evil
    for e in p["entries"]:
        e.pop("training_arguments", None)  # optional fields left out
        e.pop("timeline", None)
        e["memory"]["peak_where"] = img + "\u2066" + evil
    text = json.dumps(p, ensure_ascii=False).encode("utf-8")
    # invalid UTF-8 inside a string the page shows
    text = text.replace(b'"code": "padding_not_modelled", "message": "', b'"code": "padding_not_modelled", "message": "\xff\xfe\xc3(', 1)
    out = fx.p(name)
    with open(out, "wb") as f:
        f.write(text)
    return out


# ---- browser -------------------------------------------------------------------------------

def check_page_clean(t, label, page=None):
    if page is not None:
        check(not CONSOLE.get(page), "%s: console messages: %s" % (label, CONSOLE.get(page)))
    b = t.body()
    check(b.get("data-state") == "ready", "%s: the script did not finish (data-state %r)" % (label, b.get("data-state")))
    check("data-errors" not in b, "%s: script errors: %s" % (label, "".join(n.all_text() for n in t.find(id="diagnostics"))))
    check("data-csp-violations" not in b, "%s: CSP violations: %s" % (label, "".join(n.all_text() for n in t.find(id="diagnostics"))))
    check("data-pwned" not in b, "%s: injected code ran (%s)" % (label, b.get("data-pwned")))
    check(b.get("data-overflow-x") == "false", "%s: the page overflows horizontally" % label)
    for n in t.nodes:  # nothing to fetch: no address in any src / href / xlink:href
        for k, v in n.attrs.items():
            if k in ("src", "href", "xlink:href", "action", "poster", "srcset") and v is not None:
                check(False, "%s: <%s %s=%r>" % (label, n.tag, k, v))


def test_browser(fx, shots):
    plan = fx.tiny_plan()
    p = load(plan)
    day = 86400
    r1 = fx.report(plan, "r1.jsonl", "--all", date=time.time() - 2 * day)
    r2 = fx.report(plan, "r2.jsonl", "--entry", "0,3,5", date=time.time() - day)
    with_device(r2, day)
    r = fx.dash("page.html", plan, r1, r2)
    check(r.returncode == 0, "gckpt-dash: %r" % r.stderr)
    t = Tree(dump_dom(fx.p("page.html")))
    check_page_clean(t, "page", fx.p("page.html"))
    pts = [n for n in t.find("path") if "pt" in n.attrs.get("class", "").split()]
    check(len(pts) == len(p["entries"]), "points %d, entries %d" % (len(pts), len(p["entries"])))
    check(t.find("svg", id="sweep")[0].attrs.get("data-points") == str(len(p["entries"])), "data-points")
    recs = [n.attrs["data-index"] for n in pts if n.attrs.get("data-recommended") == "true"]
    check(recs == [str(p["recommended"])], "recommended marked on %s, plan says %s" % (recs, p["recommended"]))
    check(t.body().get("data-selected") == str(p["recommended"]), "the recommended entry is not the one selected at start")
    for n in pts:
        e = p["entries"][int(n.attrs["data-index"])]
        # the tooltip and the accessible name are made on hover or focus: dash_devtools checks
        # them against the plan's numbers; here, the point's own facts
        check(n.attrs.get("data-offload") == ("-" if not e["every_n_layers"] else "on" if e["offload"] else "off")
              and n.attrs.get("data-micro-batch") == str(e["micro_batch"]), "entry %d: offload, micro-batch" % e["index"])
        check(n.attrs.get("data-every-n") == (str(e["every_n_layers"]) if e["every_n_layers"] else "off"), "entry %d: every_n" % e["index"])
    # the reports' measured values on the rows of their entries
    for k, rep in enumerate([r1, r2]):
        tables = t.find("table", data_report=str(k))
        check(len(tables) == 1, "report %d: no table" % k)
        if not tables:
            continue
        rows = {}

        def walk(n):
            for c in n.children:
                if c.tag == "tr" and "data-entry" in c.attrs and "data-rank" not in c.attrs:
                    rows[int(c.attrs["data-entry"])] = c
                walk(c)
        walk(tables[0])
        ents = report_entries(rep)
        check(sorted(rows) == sorted(e["index"] for e in ents), "report %d: rows %s" % (k, sorted(rows)))
        for e in ents:
            row = rows.get(e["index"])
            if row is None:
                continue
            meas = e["memory"]["peak_bytes"]["measured"]
            check(row.attrs.get("data-measured-alloc") == str(meas), "report %d entry %d: measured alloc %r, report %r" % (k, e["index"], row.attrs.get("data-measured-alloc"), meas))
            cells = [c for c in row.children if c.tag == "td"]
            check(cells and cells[0].all_text() == str(e["index"]), "report %d: the row's entry cell" % k)
            ma = [c for c in cells if "meas-alloc" in c.attrs.get("class", "")]
            check(ma and ma[0].attrs.get("title") == "%d bytes" % meas, "report %d entry %d: the measured cell" % (k, e["index"]))
            md = e["memory"]["device_peak_bytes"]
            check(row.attrs.get("data-measured-device") == ("" if md["measured"] is None else str(md["measured"])),
                  "report %d entry %d: measured device %r, report %r" % (k, e["index"], row.attrs.get("data-measured-device"), md["measured"]))
            mdc = [c for c in cells if "meas-device" in c.attrs.get("class", "")]
            check(mdc and mdc[0].attrs.get("title") == (None if md["measured"] is None else "%d bytes" % md["measured"]),
                  "report %d entry %d: the measured device cell" % (k, e["index"]))
            pa = [c.all_text() for c in cells]
            for col, v, what in ((3, e["memory"]["peak_bytes"]["predicted"], "predicted alloc"), (7, md["predicted"], "predicted device")):
                check(len(cells) > col and cells[col].attrs.get("title") == "%d bytes" % v, "report %d entry %d: %s" % (k, e["index"], what))
            for col, v, what in ((6, e["memory"]["peak_bytes"]["pass"], "alloc"), (10, md["pass"], "device"), (15, e["pass"], "entry")):
                check(len(pa) > col and pa[col] == {True: "pass", False: "FAIL", None: "-"}[v],
                      "report %d entry %d: the %s pass cell %r, the report's %r" % (k, e["index"], what, pa[col:col + 1], v))
            step = e["time"]["measured_step_s"]
            check(row.attrs.get("data-measured-step") and abs(float(row.attrs["data-measured-step"]) - step) <= 1e-12 * step,
                  "report %d entry %d: measured step" % (k, e["index"]))
    check(len(t.find("svg", id="trend-svg")) == 1, "two reports: no trend")
    # the trend: per entry, one point per report that has it, in the reports' date order
    # (r1 two days ago, r2 one day ago), at the report's allocated-peak error
    if t.find("svg", id="trend-svg"):
        dots = [n for n in kids(t.find("svg", id="trend-svg")[0], "circle")]
        for e in p["entries"]:
            want = [(rep, x["memory"]["peak_bytes"]["relative_error"]) for rep in (r1, r2) for x in report_entries(rep) if x["index"] == e["index"]]
            got = sorted([n for n in dots if n.attrs.get("data-entry") == str(e["index"])], key=lambda n: float(n.attrs["cx"]))
            titles = [n.children[0].all_text() if n.children else "" for n in got]
            check([os.path.basename(r) for r, _ in want] == [re.search(r"(r\d\.jsonl)", x).group(1) if re.search(r"(r\d\.jsonl)", x) else x for x in titles],
                  "trend: entry %d's points %s, the reports by date %s" % (e["index"], titles, [r for r, _ in want]))
    # the selected entry: the timeline of the recommended one, the TrainingArguments merged
    t2 = Tree(dump_dom(fx.p("page.html"), "#tab=entry"))
    check_page_clean(t2, "entry view", fx.p("page.html") + "#tab=entry")
    check(t2.body().get("data-tab") == "entry", "#tab=entry did not open the entry")
    check(len(t2.find(id="timeline-svg")) == 1 and len(t2.find(id="peak-marker")) == 1, "no timeline with its peak marker")
    code = t2.find(id="code")[0].all_text()
    snippet = run([fx.plan_exe, "--model", fx.source + "/tests/executor/data/tiny-llama.json", "--gpu",
                   fx.source + "/tests/data/devices/cpu-exact.json", "--target", "cuda", "--seq", "32", "--micro-batch", "1,2",
                   "--every-n", "off,1,2"], env=fx.env).stdout.decode()
    block = re.search(r"^args = TrainingArguments\(\n.*?^\)\n", snippet, re.S | re.M)
    check(block is not None and code == block.group(0), "the page's TrainingArguments %r differ from gckpt-plan's %r" % (code, block and block.group(0)))
    # hostile content: nothing runs, the page renders
    hp = hostile_plan(fx, plan)
    evil_dir = fx.p('dir <img src=x onerror="document.body.setAttribute(\'data-pwned\',1)">')
    os.makedirs(evil_dir, exist_ok=True)
    evil_rep = os.path.join(evil_dir, "r<script>\u202e\"'.jsonl")
    lines = open(fx.report(hp, "hostile-run.jsonl", "--entry", "0,3"), encoding="utf-8").read().rstrip("\n").split("\n")
    e0 = json.loads(lines[1])
    e0["message"] = "<script>document.body.setAttribute('data-pwned','msg')</script>\u202e" + "B" * 300
    e0["time"]["relative_error"] = 1e308
    e0["time"]["measured_step_s"] = 1.7e300
    with open(evil_rep, "w", encoding="utf-8") as f:
        f.write("\n".join([lines[0], json.dumps(e0)] + lines[2:]) + "\n")
    r = fx.dash("hostile.html", hp, evil_rep)
    check(r.returncode == 0, "hostile inputs refused: %r" % r.stderr)
    for view in ("", "#tab=entry", "#tab=measured"):
        th = Tree(dump_dom(fx.p("hostile.html"), view))
        check_page_clean(th, "hostile page " + (view or "sweep"), fx.p("hostile.html") + view)
        h1 = th.find(id="title")
        check(h1 and h1[0].all_text().startswith("</script><script>"), "the hostile name is not shown as text: %r" % (h1 and h1[0].all_text()))
        check(len([n for n in th.nodes if n.tag in ("img", "script") and n.attrs.get("type") != "application/json"]) == 1,
              "hostile page: an injected element is in the DOM")
    test_browser_callback(fx)
    # several GPUs: the plan's layout, each rank of a run under mpirun (when OpenMPI is here)
    zp = fx.plan("zero3.json", "--model", fx.source + "/tests/executor/data/tiny-llama.json", "--seq", "32",
                 "--every-n", "off,2", "--gpus", "2", "--parallel", "zero3")
    mpirun = shutil.which("mpirun")
    zr = []
    if mpirun:
        # under tests/ci/sanitize.sh no leak check in the ranks: OpenMPI unloads its plugins in
        # MPI_Finalize, so what they keep until exit is reported without a module to suppress
        # it by (as test_run_mpi); every other ASan / UBSan check stays on
        asan = os.environ.get("ASAN_OPTIONS")
        env = dict(fx.env, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", GCKPT_COLLECTIVE_TIMEOUT="60",
                   **({"ASAN_OPTIONS": asan + ":detect_leaks=0"} if asan else {}))
        r = run([mpirun, "-np", "2", "--oversubscribe", fx.run_exe, "--plan", zp, "--all", "--backend", "host", "-q",
                 "--steps", "2", "-o", fx.p("zero3.jsonl")], env=env)
        check(r.returncode == 0, "mpirun -np 2 gckpt-run: %r" % r.stderr[-500:])
        zr = [fx.p("zero3.jsonl")] if r.returncode == 0 else []
    else:
        print("no mpirun: the per-rank rows are not checked")
    r = fx.dash("zero3.html", zp, *zr)
    check(r.returncode == 0, "gckpt-dash zero3: %r" % r.stderr)
    for view in ("", "#tab=entry") + (("#tab=measured",) if zr else ()):
        tz = Tree(dump_dom(fx.p("zero3.html"), view))
        check_page_clean(tz, "zero3 " + (view or "sweep"), fx.p("zero3.html") + view)
        if view == "":
            check(len(tz.find("input", data_filter="parallel", data_value="zero3")) == 1, "zero3: no parallel-mode filter")
        if view == "#tab=entry":
            check(len(tz.find("dl", id="rank-facts")) == 1, "zero3: no layout facts")
            if zr:
                check(len(tz.find("table", **{"class": "ranks-table"})) == 1, "zero3: no per-rank table in the entry")
        if view == "#tab=measured":
            for e in report_entries(zr[0]):
                for x in e["ranks"]:
                    rows = tz.find("tr", data_entry=str(e["index"]), data_rank=str(x["rank"]))
                    check(len(rows) == 1, "zero3: entry %d rank %d has no row" % (e["index"], x["rank"]))
    # from a plain static web server: the page is the only request
    served = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=fx.tmp, **kw)

        def log_message(self, fmt, *args):
            served.append(self.path)

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = "http://127.0.0.1:%d/page.html" % srv.server_address[1]
        r = run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
                 "--disable-background-networking", "--enable-logging=stderr", "--v=0", "--dump-dom", url], timeout=120)
        ts = Tree(r.stdout.decode("utf-8", "replace"))
        check_page_clean(ts, "served page")
        console = [l for l in r.stderr.decode("utf-8", "replace").splitlines() if ":CONSOLE" in l]
        check(not console, "served page: console messages: %s" % console)
        # the browser may ask for /favicon.ico on its own; the page asks for nothing
        check([q for q in served if q != "/favicon.ico"] == ["/page.html"], "served page: requests %s" % served)
    finally:
        srv.shutdown()
        srv.server_close()
    # the control: a page whose own script fetches records the violation (the check can fail)
    page = open(fx.p("page.html"), encoding="utf-8").read()
    nonce = re.search(r"nonce-([0-9a-f]+)", page).group(1)
    ctl = page.replace("</body>", '<script nonce="%s">fetch("http://127.0.0.1:9/x").catch(function(){});'
                       'var i=new Image();i.src="http://127.0.0.1:9/y";</script></body>' % nonce)
    with open(fx.p("control.html"), "w", encoding="utf-8") as f:
        f.write(ctl)
    tc = Tree(dump_dom(fx.p("control.html")))
    check(int(tc.body().get("data-csp-violations", "0")) >= 2, "the control's fetch and image were not reported as CSP violations")
    check(any("Content Security Policy" in l for l in CONSOLE[fx.p("control.html")]), "the control's violations are not in Chromium's console log")
    # screenshots of the sweep and of a selected entry
    for name, view, win in (("sweep", "", "1200,1000"), ("entry", "#tab=entry", "1200,1600")):
        out = os.path.join(shots, "dash-test-%s.png" % name)
        if os.path.exists(out):
            os.unlink(out)
        browser(fx.p("page.html"), ["--screenshot=" + out], win, view)
        ok = os.path.exists(out) and open(out, "rb").read(8) == b"\x89PNG\r\n\x1a\n" and os.path.getsize(out) > 20000
        check(ok, "screenshot %s" % out)


def kids(n, tag):
    out = []
    for c in n.children:
        if c.tag == tag:
            out.append(c)
        out += kids(c, tag)
    return out


def check_callback_report(t, k, path, plan, label):
    """Report k of page t is callback report path: its entry row's measured values, its step
    chart's points (step 1 not judged) against the plan's line, its warnings' texts."""
    recs = records(path)
    steps = [r for r in recs if r["record"] == "step"]
    ents = [r for r in recs if r["record"] == "entry"]
    warns = [r for r in recs if r["record"] == "warning"]
    tables = t.find("table", data_report=str(k), **{"class": "measured-table"})
    check(len(tables) == 1, "%s: no table" % label)
    for e in ents:
        rows = [n for n in (kids(tables[0], "tr") if tables else []) if n.attrs.get("data-entry") == str(e["index"])]
        check(len(rows) == 1 and rows[0].attrs.get("data-measured-alloc") == str(e["memory"]["peak_bytes"]["measured"]),
              "%s: entry %d's measured allocated peak" % (label, e["index"]))
        if rows:
            ms = rows[0].attrs.get("data-measured-step")
            check(ms and abs(float(ms) - e["time"]["measured_step_s"]) <= 1e-12 * e["time"]["measured_step_s"],
                  "%s: entry %d's measured step" % (label, e["index"]))
    for idx in sorted({s["entry"] for s in steps}):
        svgs = t.find("svg", data_report=str(k), data_entry=str(idx), **{"class": "steps-svg"})
        check(len(svgs) == 1, "%s: entry %d has no step chart" % (label, idx))
        if not svgs:
            continue
        pts = [n for n in kids(svgs[0], "path") if "step-pt" in n.attrs.get("class", "").split()
               and n.attrs.get("data-series") == "allocated"]
        got = [(int(n.attrs["data-step"]), int(n.attrs["data-measured"]), n.attrs["data-judged"] == "true") for n in pts]
        want = [(s["step"], s["memory"]["peak_bytes"]["measured"], s["judged"]) for s in steps if s["entry"] == idx]
        check(got == want, "%s: step chart points %s, the report's steps %s" % (label, got, want))
        for n in pts:
            nj = "not-judged" in n.attrs.get("class", "").split()
            check(nj == (n.attrs["data-judged"] == "false"), "%s: step %s marked judged wrongly" % (label, n.attrs["data-step"]))
        check(any(n.attrs["data-step"] == "1" and n.attrs["data-judged"] == "false" for n in pts), "%s: step 1 is not marked not judged" % label)
        lines = [n for n in kids(svgs[0], "line") if "pred-line" in n.attrs.get("class", "") and n.attrs.get("data-series") == "allocated"]
        pred = plan["entries"][idx]["memory"]["peak_bytes"]
        check(len(lines) == 1 and lines[0].attrs.get("data-predicted") == str(pred), "%s: the predicted line is not the plan's %d" % (label, pred))
        rows = t.find("table", data_report=str(k), data_entry=str(idx), **{"class": "steps-table"})
        check(rows and [n.attrs.get("data-step") for n in kids(rows[0], "tr") if "data-step" in n.attrs] == [str(s["step"]) for s in steps if s["entry"] == idx],
              "%s: the steps table" % label)
    uls = t.find("ul", data_report=str(k), **{"class": "report-warnings"})
    got = [li.all_text() for li in kids(uls[0], "li")] if uls else []
    check(got == ["PlanMismatchWarning [%s]: %s" % (w["code"], w["message"]) for w in warns],
          "%s: warnings shown %r, the report's %r" % (label, got, [w["message"] for w in warns]))


def test_browser_callback(fx):
    """gckpt.TrainerCallback's reports on the page: the entry row, every step against the
    plan's line, the warnings; each rank's file as its own report; hostile warning text."""
    plan = cb(fx, "callback-plan.json")
    reps = [cb(fx, "callback.jsonl"), cb(fx, "callback-warn.jsonl")]
    r = fx.dash("cb-page.html", plan, *reps)
    check(r.returncode == 0, "gckpt-dash callback: %r" % r.stderr)
    t = Tree(dump_dom(fx.p("cb-page.html"), "#tab=measured"))
    check_page_clean(t, "callback page", fx.p("cb-page.html") + "#tab=measured")
    for k, rep in enumerate(reps):
        check_callback_report(t, k, rep, load(plan), "callback report %d" % k)
    # two ranks under torchrun: each file as given, its rank from its records; the trend is
    # over rank 0's reports (one here: none)
    ddp = cb(fx, "callback-ddp-plan.json")
    reps = [cb(fx, "callback-ddp.jsonl"), cb(fx, "callback-ddp.rank1.jsonl")]
    r = fx.dash("cb-ddp.html", ddp, *reps)
    check(r.returncode == 0, "gckpt-dash callback ddp: %r" % r.stderr)
    t = Tree(dump_dom(fx.p("cb-ddp.html"), "#tab=measured"))
    check_page_clean(t, "callback ddp page", fx.p("cb-ddp.html") + "#tab=measured")
    heads = [n.all_text() for n in t.find("h3") if n.all_text().startswith("Report ")]
    check(len(heads) == 2 and heads[0].endswith("rank 0 of 2") and heads[1].endswith("rank 1 of 2"), "rank headings %r" % heads)
    for k, rep in enumerate(reps):
        check_callback_report(t, k, rep, load(ddp), "ddp rank %d" % k)
    check(not t.find("svg", id="trend-svg"), "two ranks of one run drawn as a trend")
    # a hostile warning text is text
    lines = open(cb(fx, "callback-warn.jsonl"), encoding="utf-8").read().splitlines()
    w = json.loads(lines[1])
    w["message"] = "<script>document.body.setAttribute('data-pwned','warning')</script><img src=x onerror=\"document.body.setAttribute('data-pwned','img')\">\u202e"
    lines[1] = json.dumps(w)
    with open(fx.p("evil-warn.jsonl"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    r = fx.dash("cb-evil.html", plan, fx.p("evil-warn.jsonl"))
    check(r.returncode == 0, "hostile warning refused: %r" % r.stderr)
    t = Tree(dump_dom(fx.p("cb-evil.html"), "#tab=measured"))
    check_page_clean(t, "hostile warning", fx.p("cb-evil.html") + "#tab=measured")
    li = [n.all_text() for n in t.find("li", data_code="optimizer")]
    check(li and li[0].startswith("PlanMismatchWarning [optimizer]: <script>"), "the hostile warning is not shown as text: %r" % li)


def screenshots(fx, outdir):
    plan = fx.plan("llama.json", "--model", "llama-3.2-3b", "--seq", "4096", "--micro-batch", "1,2,4,8",
                   "--every-n", "off,1,2,4,7")
    r = run([fx.dash_exe, "-o", "llama.html", "llama.json"], env=fx.env, cwd=fx.tmp)  # the names the page shows
    if r.returncode != 0:
        sys.exit(r.stderr.decode())
    os.makedirs(outdir, exist_ok=True)
    for name, view, win in (("dashboard-sweep", "", "1100,980"), ("dashboard-entry", "#tab=entry", "1100,1500")):
        out = os.path.join(outdir, name + ".png")
        browser(fx.p("llama.html"), ["--screenshot=" + out], win, view)
        print(out)
    # a gckpt.TrainerCallback report (tests/data/dash): its warning, its entry, every step
    # the page shows a report's date, its file's modification time: a copy dated when the
    # fixture was committed, so that the image does not change with the checkout's time
    cbdir = os.path.join(fx.tmp, "callback")
    os.makedirs(cbdir)
    for n in ("callback-plan.json", "callback-warn.jsonl"):
        shutil.copy(os.path.join(fx.source, CALLBACK_DIR, n), os.path.join(cbdir, n))
    g = run(["git", "-C", fx.source, "log", "-1", "--format=%ct", "--", CALLBACK_DIR + "/callback-warn.jsonl"])
    if g.returncode == 0 and g.stdout.strip():
        t = int(g.stdout)
        os.utime(os.path.join(cbdir, "callback-warn.jsonl"), (t, t))
    r = run([fx.dash_exe, "-o", fx.p("callback.html"), "callback-plan.json", "callback-warn.jsonl"], env=fx.env, cwd=cbdir)
    if r.returncode != 0:
        sys.exit(r.stderr.decode())
    out = os.path.join(outdir, "dashboard-callback.png")
    browser(fx.p("callback.html"), ["--screenshot=" + out], "1100,900", "#tab=measured")
    print(out)


def bench(fx):
    mbs = ",".join(str(i) for i in range(1, 63))
    t0 = time.time()
    plan = fx.plan("big.json", "--model", "llama-3.1-70b", "--seq", "1024", "--micro-batch", mbs)
    t1 = time.time()
    n = len(load(plan)["entries"])
    r = fx.dash("big.html", plan)
    t2 = time.time()
    if r.returncode != 0:
        sys.exit(r.stderr.decode())
    print("plan: %d entries, %.1f MB JSON (gckpt-plan %.1f s); page %d bytes (gckpt-dash %.2f s)" %
          (n, os.path.getsize(plan) / 1e6, t1 - t0, os.path.getsize(fx.p("big.html")), t2 - t1))
    if not chromium():
        print("no chromium: the open time is not measured")
        return
    import cdp  # tests/dash/cdp.py, beside this file
    url = "file://" + fx.p("big.html")
    # Chromium's own clock through the DevTools protocol: the navigation's timing entry
    # (loadEventEnd: the load event done, the page's script ran before it), the wall time from
    # Page.navigate to Page.loadEventFired, the page's script time, the first paint
    print("load average (1, 5, 15 min) before: %.2f %.2f %.2f on %d CPUs" % (os.getloadavg() + (os.cpu_count(),)))
    with cdp.Chrome(chromium()) as c:
        for k in range(5):
            t = time.time()
            c.navigate(url)
            wall = time.time() - t
            painted = c.eval("new Promise(function(ok){(function wait(){var v=document.body.getAttribute('data-painted-ms');"
                             "if(v)ok(v);else requestAnimationFrame(wait);})();})")
            nav = c.eval("(function(){var n=performance.getEntriesByType('navigation')[0],p=performance.getEntriesByName('first-contentful-paint')[0];"
                         "return [n.responseEnd,n.domContentLoadedEventEnd,n.loadEventEnd,p?p.startTime:null,"
                         "document.body.getAttribute('data-script-ms'),document.getElementById('sweep').getAttribute('data-points'),"
                         "document.body.getAttribute('data-errors')];})()")
            print("open %d: load event done %.0f ms after the navigation started (file read %.0f ms, DOMContentLoaded %.0f ms, "
                  "the page's script %s ms, first contentful paint %s, the chart painted %s ms); Page.navigate to "
                  "Page.loadEventFired %.0f ms wall; points %s, script errors %s" % (
                      k + 1, nav[2], nav[0], nav[1], nav[4], "%.0f ms" % nav[3] if nav[3] else "n/a", painted,
                      wall * 1000, nav[5], nav[6] or 0))
    print("load average (1, 5, 15 min) after: %.2f %.2f %.2f" % os.getloadavg())
    t = time.time()
    dom = dump_dom(fx.p("big.html"))
    print("chromium --headless --dump-dom: %.2f s wall (Chromium's start, load, script, %.0f MB of DOM out)" % (time.time() - t, len(dom) / 1e6))
    t = time.time()
    browser(fx.p("big.html"), ["--screenshot=" + fx.p("big.png")])
    print("chromium --headless --screenshot: %.2f s wall (Chromium's start, load, script, paint, PNG out)" % (time.time() - t))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("what", choices=["cli", "browser", "screenshots", "bench"])
    ap.add_argument("outdir", nargs="?")
    a = ap.parse_args()
    if a.what in ("browser", "screenshots") and not chromium():
        print("chromium not found (apt-get install chromium; tools/install-deps.sh): skipped")
        return SKIP
    with tempfile.TemporaryDirectory(prefix="gckpt-dash-") as tmp:
        fx = Fx(os.path.abspath(a.build), os.path.abspath(a.source), tmp)
        if a.what == "cli":
            test_cli(fx)
        elif a.what == "browser":
            test_browser(fx, a.outdir or a.build)
        elif a.what == "screenshots":
            screenshots(fx, a.outdir or ".")
        else:
            bench(fx)
    if FAILS:
        print("%d check(s) failed" % len(FAILS))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
