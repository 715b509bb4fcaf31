#!/usr/bin/env python3
"""docs_examples: run the command examples of the docs and compare their output.

usage: docs_examples.py --build DIR [--source DIR] [--slow] [--list] [--update] [-v] FILE|GLOB...

THE CONVENTION (what makes a block an example, and how it is compared)

  Example   A fenced code block (``` or ~~~; info string `console` recommended, any
            accepted) whose first non-blank line starts with "$ ". Every line that
            starts with "$ " is a command; a command whose line ends with a backslash
            continues on the next line. The other lines, up to the next command, are
            that command's expected standard output. A fenced block that does not start
            with "$ " is not an example (a file, a snippet, output without its command).
  Where     Each page's examples run in order, like a reader following the page, in one
            scratch folder that is a fresh copy of the repository (the files `git
            ls-files` lists in --source, else every file but build*/, .git and .venv;
            hard links where the file system allows, so an example must not rewrite a
            repository file in place: replacing it is fine, rewriting it fails the
            example): files one example writes are there for the next example of the
            same page.
            `build` in that copy is a link to --build, so ./build/gckpt-plan is the
            binary under test, and --build is first on PATH (plain `gckpt-run` works);
            GCKPT_DATA_DIR is the copy (models/, devices/ are the copy's). Commands run
            with bash, LC_ALL=C, TZ=UTC, OPENBLAS_CORETYPE=Haswell where the CPU has
            AVX2 and FMA (the host backend's losses depend on the BLAS kernel), stdin
            /dev/null, and a time limit (--timeout, default 120 s each).
  Compared  Standard output, line by line, trailing spaces and trailing blank lines
            ignored, after the masks below; a command that writes nothing to standard
            output is compared with its standard error instead (an error example). The
            exit status is not compared (an error's message is output like any other).
            A failure says whether the shown text is the real output cut without a
            "..." marker (only lines missing) or differs (stale), with the diff.
  Cut       A line that is exactly "..." in the expected output stands for zero or more
            lines of the real output (shown output deliberately cut). Nothing else is
            a wildcard.
  Markers   HTML comments (invisible on GitHub) on the lines just above the opening
            fence (blank lines between are allowed) set options for that block:
            <!-- example: slow -->          too slow for CI's fast run: run only with --slow
                                            (ctest -L docs-slow)
            <!-- example: skip REASON -->   never run (needs a GPU, a network, ...);
                                            listed with REASON
            <!-- example: requires PATH --> run only when PATH (relative to --source,
                                            e.g. tools/hf_probe/.venv) exists, linked
                                            into the copy; else listed as skipped
            <!-- example: stderr -->        compare stdout and stderr together (as a
                                            terminal shows them)
            <!-- example: file NAME -->     (on a block that is not an example) write the
                                            block's text as NAME in the page's scratch
                                            folder, for the examples after it
            <!-- mask: column NAME -->      host-specific or measured figures in a table:
                                            on every line after a line that contains NAME
                                            (a header, e.g. "meas s" or "tok/s") up to a
                                            blank line, each whitespace-separated field
                                            that overlaps NAME's character columns is
                                            replaced, with the blanks around it, by " * "
                                            (a figure's width moves aligned columns)
            <!-- mask: regex PATTERN -->    every match of the Python regular expression
                                            PATTERN (or, when it has groups, each group)
                                            is replaced by "*"
            Masks apply to the expected and the real output alike, so the page keeps
            showing the real figures of the run it was written from.
  Usage summaries are examples like the others: `$ ./build/gckpt-plan --help` and its
  output (cut with "..." where the page shows part of it).

--update  rewrites the shown output of every failing command with the real output (so a
          page's figures come from a run, not from memory); a shown output cut by one
          "..." keeps its cut: as many real lines before and after it as were shown. One
          cut by several "...", or a command that shows none, is left for a hand edit. Masks do not apply to what is written: the page shows the
          real figures of this run. Pages are replaced whole (a new file renamed).

Exit status: 0 every example run passed, 1 an example failed, 2 bad usage.
Standard library only (Python 3.8+); reads fences with mdlint.py's parser.
"""
import difflib
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mdlint  # noqa: E402  (the one fence parser)

MARKER = re.compile(r"^\s*<!--\s*(example|mask):\s*(.*?)\s*-->\s*$")


class Example:
    def __init__(self, page, line, text_lines, opts, indent=0):
        self.page, self.line, self.opts, self.indent = page, line, opts, indent
        self.commands = []  # [(command, [expected lines], [their page line numbers])]
        cmd = None
        cont = False
        for k, ln in enumerate(text_lines):
            if cont:
                cmd[0] += "\n" + ln
                cont = ln.endswith("\\")
            elif ln.startswith("$ "):
                cmd = [ln[2:], [], []]
                self.commands.append(cmd)
                cont = ln.endswith("\\")
            elif cmd is not None:
                cmd[1].append(ln)
                cmd[2].append(line + 1 + k)

    def opt(self, kind, key):
        return [v for k, v in self.opts if k == kind and (v.split(None, 1) + [""])[0] == key]

    def name(self):
        first = self.commands[0][0].split("\n")[0]
        return "%s:%d: $ %s" % (self.page, self.line, first[:90])


def blocks(path):
    """(first line number, [lines], opts, is_example) of every fenced block of a page."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    rows, _ = mdlint.fenced_lines(lines)
    bodies = {}  # opening line index -> the block's lines
    for i, line, fence in rows:
        if fence is not None:
            bodies.setdefault(fence[0], []).append(line)
    out = sorted(bodies.items())
    # markers: comment lines just above the opening fence (blank lines allowed)
    result = []
    for start, body in out:
        opts, k = [], start - 1
        while k >= 0 and (not lines[k].strip() or MARKER.match(lines[k])):
            m = MARKER.match(lines[k])
            if m:
                opts.insert(0, (m.group(1), m.group(2)))
            k -= 1
        # a fence indented inside a list item: its lines lose up to that indentation
        # (CommonMark), and so does what --update writes back
        indent = len(lines[start]) - len(lines[start].lstrip(" "))
        body = [b[min(indent, len(b) - len(b.lstrip(" "))):] for b in body]
        first = next((b for b in body if b.strip()), "")
        result.append((start + 1, body, opts, first.startswith("$ "), indent))
    return result


def copy_repo(source, dest):
    try:
        files = subprocess.run(["git", "-C", source, "ls-files", "-z"], check=True, capture_output=True).stdout
        names = [n for n in files.decode().split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        names = []
        for top, dirs, fs in os.walk(source):
            rel = os.path.relpath(top, source)
            dirs[:] = [d for d in dirs if not (rel == "." and d.startswith("build")) and d not in (".git", ".venv")]
            names += [os.path.normpath(os.path.join(rel, f)) for f in fs]
    linked = {}
    for n in names:
        src = os.path.join(source, n)
        if not os.path.isfile(src) or os.path.islink(src):
            continue
        d = os.path.join(dest, n)
        os.makedirs(os.path.dirname(d), exist_ok=True)
        try:
            os.link(src, d)
            st = os.stat(d)
            linked[n] = (st.st_size, st.st_mtime_ns)
        except OSError:
            shutil.copy2(src, d)
    return linked


def changed_in_place(dest, linked):
    """The hard-linked files an example rewrote in place (their source changed too)."""
    bad = []
    for n, was in linked.items():
        try:
            st = os.stat(os.path.join(dest, n))
        except OSError:
            continue  # removed or replaced: the source is intact
        if st.st_nlink > 1 and (st.st_size, st.st_mtime_ns) != was:
            bad.append(n)
    return bad


def mask_lines(lines, masks):
    out = list(lines)
    for kind, arg in masks:
        if kind == "regex":
            rx = re.compile(arg)

            def repl(m, rx=rx):
                if not rx.groups:
                    return "*"
                s, base = m.group(0), m.start(0)
                for g in range(rx.groups, 0, -1):
                    if m.start(g) >= 0:
                        s = s[:m.start(g) - base] + "*" + s[m.end(g) - base:]
                return s
            out = [rx.sub(repl, ln) for ln in out]
        elif kind == "column":
            span = None
            for i, ln in enumerate(out):
                if span is not None and not ln.strip():
                    span = None
                    continue
                if span is None:
                    c = ln.find(arg)
                    if c >= 0:
                        span = (c, c + len(arg))
                    continue
                fields = []
                for m in re.finditer(r"\S+", ln):
                    hit = m.start() < span[1] and m.end() > span[0]
                    fields.append((m.start(), m.end(), hit))
                s = ln
                for a, b, hit in reversed(fields):
                    if hit:  # with the blanks around it: the figure's width moves them
                        a2, b2 = len(s[:a].rstrip()), len(s) - len(s[b:].lstrip())
                        s = s[:a2] + " * " + s[b2:]
                out[i] = s
    return out


def matches(expected, actual):
    """expected (with "..." lines standing for any run of lines) against actual."""
    memo = {}

    def go(i, j):
        if (i, j) in memo:
            return memo[(i, j)]
        if i == len(expected):
            r = j == len(actual)
        elif expected[i] == "...":
            r = any(go(i + 1, k) for k in range(j, len(actual) + 1))
        else:
            r = j < len(actual) and expected[i] == actual[j] and go(i + 1, j + 1)
        memo[(i, j)] = r
        return r
    return go(0, 0)


def why(exp, act, where):
    """In words: the shown lines are all in the real output, in order (a cut without its
    "..." marker: the page lines after which one is missing), or some differ (stale: the
    page lines)."""
    keep = [k for k, ln in enumerate(exp) if ln != "..."]
    shown = [exp[k] for k in keep]
    sm = difflib.SequenceMatcher(None, shown, act, autojunk=False)
    ops = [o for o in sm.get_opcodes() if o[0] != "equal"]
    if all(o[0] == "insert" for o in ops):
        at = []
        for o in ops:  # lines left out before shown[o[1]]: covered when a "..." is there
            k = keep[o[1]] if o[1] < len(keep) else len(exp)
            if k == 0 or exp[k - 1] != "...":
                at.append(str(where[k - 1]) if k > 0 else "the command")
        return "cut without '...': the real output has more lines after page line(s) %s" % ", ".join(at)
    bad = [str(where[keep[j]]) for o in ops if o[0] in ("replace", "delete") for j in range(o[1], o[2])]
    return "differs: page line(s) %s not in the real output" % ", ".join(bad[:12])


def norm(lines):
    out = [ln.rstrip() for ln in lines]
    while out and not out[-1]:
        out.pop()
    return out


def blas_pin():
    """OpenBLAS picks its kernels by CPU (an AMD Zen 4 gets Cooperlake's, a Zen 3 Haswell's),
    and their summation order moves the host backend's losses and gradient checksums in the
    last bits (amp-bf16 rounds them into the shown digits). The pages show Haswell's: pinned
    wherever the CPU has what that kernel needs (AVX2, FMA); elsewhere left to OpenBLAS."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return {}
    return {"OPENBLAS_CORETYPE": "Haswell"} if {"avx2", "fma"} <= set(flags) else {}


def run_page(page, examples, files, args, report, updates):
    # in the build folder: on the source's file system as a rule, so hard links work
    scratch = tempfile.mkdtemp(prefix="docs-examples-", dir=os.path.abspath(args.build))
    try:
        linked = copy_repo(args.source, scratch)
        os.symlink(os.path.abspath(args.build), os.path.join(scratch, "build"))
        env = dict(os.environ, LC_ALL="C", TZ="UTC", GCKPT_DATA_DIR=scratch,
                   PATH=os.path.abspath(args.build) + os.pathsep + os.environ.get("PATH", ""))
        env.update(blas_pin())
        for item in sorted(examples + files, key=lambda e: e[0]):
            if item[1] == "file":
                with open(os.path.join(scratch, item[2]), "w") as f:
                    f.write("\n".join(item[3]) + "\n")
                continue
            ex = item[2]
            if ex.opt("example", "skip"):
                report("SKIP", ex, ex.opt("example", "skip")[0][4:].strip() or "marked skip")
                continue
            if ex.opt("example", "slow") and not args.slow:
                report("SLOW", ex, "marked slow: run with --slow (ctest -L docs-slow)")
                continue
            missing = [r.split(None, 1)[1] for r in ex.opt("example", "requires")
                       if not os.path.exists(os.path.join(args.source, r.split(None, 1)[1]))]
            if missing:
                report("SKIP", ex, "requires %s (not here)" % ", ".join(missing))
                continue
            for r in ex.opt("example", "requires"):
                rel = r.split(None, 1)[1]
                dst = os.path.join(scratch, rel)
                if not os.path.lexists(dst):
                    os.makedirs(os.path.dirname(dst), exist_ok=True)
                    os.symlink(os.path.join(os.path.abspath(args.source), rel), dst)
            masks = [tuple(v.split(None, 1)) for k, v in ex.opts if k == "mask"]
            merged = bool(ex.opt("example", "stderr"))
            failure, t0 = None, time.time()
            for cmd, expected, where in ex.commands:
                try:
                    p = subprocess.run(["bash", "-c", cmd], cwd=scratch, env=env, stdin=subprocess.DEVNULL,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT if merged else subprocess.PIPE,
                                       timeout=args.timeout)
                    out, err = p.stdout.decode(errors="replace"), (p.stderr or b"").decode(errors="replace")
                except subprocess.TimeoutExpired:
                    failure = "$ %s\n  did not finish in %d s" % (cmd, args.timeout)
                    break
                if not out.strip() and err.strip():
                    out, err = err, ""
                exp = mask_lines(norm(expected), masks)
                act = mask_lines(norm(out.split("\n")), masks)
                if not matches(exp, act):
                    new = updated(norm(expected), norm(out.split("\n"))) if args.update and where else None
                    if new is not None:
                        updates.append((where[0], where[-1], [(" " * ex.indent + ln) if ln else ln for ln in new]))
                    diff = "\n".join(list(difflib.unified_diff(exp, act, "shown", "real", lineterm="", n=1))[:40])
                    failure = "$ %s\n  %s\n%s%s" % (cmd, why(exp, act, where), diff,
                                                    ("\n  stderr: " + err.strip()[:600]) if err.strip() else "")
                    break
            touched = changed_in_place(scratch, linked)
            if touched and not failure:
                failure = "rewrote %s in place: the copy's files are hard links to the source's (write a new file)" % (
                    ", ".join(touched[:5]))
            for n in touched:
                linked.pop(n)
            if failure:
                report("FAIL", ex, failure)
            else:
                report("PASS", ex, "%.1f s" % (time.time() - t0))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def updated(expected, actual):
    """What --update writes for a failing command: the real output; with one "..." line,
    as many real lines before and after it as the page showed (a head, a tail, or both);
    None with more cuts (a hand edit)."""
    cuts = [k for k, ln in enumerate(expected) if ln == "..."]
    if not cuts:
        return actual
    if len(cuts) > 1:
        return None
    head, tail = cuts[0], len(expected) - cuts[0] - 1
    if head + tail >= len(actual):
        return actual
    return actual[:head] + ["..."] + (actual[len(actual) - tail:] if tail else [])


def update_page(path, updates):
    """Replace page lines first..last (1-based) of each update with its lines, bottom up."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for first, last, new in sorted(updates, reverse=True):
        lines[first - 1:last] = new
    tmp = path + ".update.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    os.replace(tmp, path)


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description="Run the docs' command examples (see the top of this file).")
    ap.add_argument("--build", required=True, help="the build folder (./build in examples)")
    ap.add_argument("--source", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--slow", action="store_true", help="run only the examples marked slow")
    ap.add_argument("--list", action="store_true", help="list the examples, run nothing")
    ap.add_argument("--timeout", type=int, default=120)
    ap.add_argument("-v", action="store_true", help="print passing examples too")
    ap.add_argument("--update", action="store_true",
                    help="rewrite failing shown outputs (without a '...' line) with the real output")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args(argv[1:])
    if not os.path.isdir(args.build):
        print("docs_examples: --build %s: no such folder" % args.build, file=sys.stderr)
        return 2
    paths = []
    for a in args.files:  # relative to --source (a page elsewhere: an absolute path)
        if any(c in a for c in "*?["):
            paths += sorted(glob.glob(os.path.join(args.source, a)))
        elif os.path.isfile(os.path.join(args.source, a)):
            paths.append(os.path.join(args.source, a))
        else:
            print("docs_examples: %s: no such file" % a, file=sys.stderr)
            return 2
    counts = {}

    def report(status, ex, why):
        counts[status] = counts.get(status, 0) + 1
        if status == "FAIL" or args.v or args.list:
            print("%s %s" % (status, ex.name()))
            if status != "PASS" or args.v:
                print("     " + why.replace("\n", "\n     "))
        sys.stdout.flush()

    for path in paths:
        rel = os.path.relpath(path, args.source)
        examples, files = [], []
        for line, body, opts, is_example, indent in blocks(path):
            if is_example:
                ex = Example(rel, line, body, opts, indent)
                if args.slow and not ex.opt("example", "slow"):
                    continue
                examples.append((line, "example", ex))
            else:
                name = [v.split(None, 1)[1] for k, v in opts if k == "example" and v.startswith("file ")]
                if name:
                    files.append((line, "file", name[0], body))
        if args.list:
            for _, _, ex in examples:
                report("LIST", ex, " ".join("%s: %s" % o for o in ex.opts) or "-")
            continue
        if examples:
            updates = []
            run_page(rel, examples, files, args, report, updates)
            if updates:
                update_page(path, updates)
                print("docs_examples: %s: %d shown output(s) rewritten from the run" % (rel, len(updates)))
    print("docs_examples: %s" % (", ".join("%d %s" % (n, s.lower()) for s, n in sorted(counts.items())) or "no examples"),
          file=sys.stderr)
    return 1 if counts.get("FAIL") else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
