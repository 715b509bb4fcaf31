#!/usr/bin/env python3
"""mdlint: the checks a Markdown page needs to render whole on GitHub.

usage: mdlint.py [--root DIR] FILE|GLOB...

Each FILE or GLOB (expanded by this script, relative to --root, default the current
directory, so that a test sees the files present when it runs) is read as CommonMark
the way GitHub renders it, and these are reported as FILE:LINE: message:

  fences    a code fence (``` or ~~~, 3 or more, any indent, an info string allowed;
            a backtick fence's info string holds no backtick) is closed by a line of
            the same character, at least as long, with nothing else on it; a fence
            never closed is an error, and so is a line inside a fenced block opened
            without an info string that looks like a Markdown heading of level 2 or
            more ("## Title"): on a page whose fences pair up wrongly (one missing),
            a closing fence opens a block and the prose after it shows as code.
            A single "# " inside a fence is a code comment and is not flagged; a
            second level-1 heading outside fences is (a code comment shown as a
            heading: the page has one title).
  anchors   every link to "#x" names a heading of the page, and "file.md#x" a heading
            of that file, by GitHub's slug rule: the heading's rendered text (inline
            code, emphasis and link syntax removed) lower-cased, every character that
            is not a letter, digit, mark, connector (_), hyphen or space dropped,
            spaces turned into hyphens; a repeated slug gets -1, -2, ... . <a id="x">
            and <a name="x"> count as anchors too. Headings inside fences do not.
  links     every relative link target ([t](path), ![a](path), [r]: path) outside
            fences and inline code exists (relative to the page's folder).

Exit status: 0 clean, 1 a finding, 2 bad usage (a FILE that does not exist).
Standard library only (Python 3.8+).
"""
import glob
import os
import re
import sys
import unicodedata
import urllib.parse

FENCE_OPEN = re.compile(r"^( *)(`{3,}|~{3,})(.*)$")
ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
HTML_ANCHOR = re.compile(r"""<a\s[^>]*?(?:id|name)\s*=\s*["']([^"']+)["']""", re.I)
INLINE_LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*(<[^>]*>|[^\s)]+)(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)")
REF_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def fenced_lines(lines):
    """Yields (index, line, fence) for every line: fence is None outside a fenced block,
    else (opening line index, char, length, info). Opening and closing lines are
    reported with fence None. Returns through a list of problems in .problems."""
    out, problems = [], []
    fence = None
    for i, line in enumerate(lines):
        if fence is None:
            m = FENCE_OPEN.match(line)
            if m and not (m.group(2)[0] == "`" and "`" in m.group(3)):
                fence = (i, m.group(2)[0], len(m.group(2)), m.group(3).strip())
                out.append((i, line, None))
                continue
            out.append((i, line, None))
        else:
            s = line.strip()
            if s and set(s) == {fence[1]} and len(s) >= fence[2]:
                fence = None
                out.append((i, line, None))
                continue
            out.append((i, line, fence))
    if fence is not None:
        problems.append((fence[0], "code fence %s opened here is never closed (%d fence lines in the file: "
                         "one is missing or extra)" % (fence[1] * fence[2], count_fences(lines))))
    return out, problems


def count_fences(lines):
    n = 0
    for line in lines:
        m = FENCE_OPEN.match(line)
        if m:
            n += 1
    return n


def inline_text(s):
    """The rendered text of a heading's inline Markdown (what GitHub slugs)."""
    s = re.sub(r"!\[([^\]]*)\]\([^)]*\)", r"\1", s)
    s = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", s)
    s = re.sub(r"\[([^\]]*)\]\[[^\]]*\]", r"\1", s)
    s = re.sub(r"<[^>]+>", "", s)
    s = s.replace("`", "")
    s = re.sub(r"(\*\*|__|\*)", "", s)
    return s.strip()


def slug(text):
    out = []
    for ch in inline_text(text).lower():
        cat = unicodedata.category(ch)
        if cat[0] in "LNM" or cat == "Pc" or ch in "- ":
            out.append(ch)
    return "".join(out).replace(" ", "-")


def strip_code_spans(line):
    return re.sub(r"(`+)(?:(?!\1).)+?\1", "", line)


class Page:
    def __init__(self, path):
        self.path = path
        with open(path, encoding="utf-8") as f:
            self.lines = f.read().split("\n")
        self.rows, self.problems = fenced_lines(self.lines)
        self.anchors = set()
        self.headings = []  # (line index, text)
        self.h1 = []  # (line index, "#" marks) of the ATX headings
        seen = {}
        prev_para = None
        for i, line, fence in self.rows:
            if fence is not None:
                m = ATX.match(line)
                if m and len(m.group(1)) >= 2 and m.group(2) and not fence[3]:
                    self.problems.append((i, "line looks like a heading (%s) but is inside the fenced block opened "
                                          "at line %d: a fence before it is missing or extra" % (line.strip()[:60], fence[0] + 1)))
                prev_para = None
                continue
            m = ATX.match(line)
            text = None
            if m and not FENCE_OPEN.match(line):
                text = m.group(2) or ""
            elif SETEXT.match(line) and prev_para is not None and "|" not in prev_para:
                text = prev_para.strip()
            if text is not None and m and len(m.group(1)) == 1 and any(len(h) == 1 for _, h in self.h1):
                self.problems.append((i, "a second level-1 heading (%s): a code comment outside its fence? (the "
                                      "first is at line %d)" % (line.strip()[:60], self.h1[0][0] + 1)))
            if text is not None and m:
                self.h1.append((i, m.group(1)))
            if text is not None:
                s = slug(text)
                n = seen.get(s, 0)
                seen[s] = n + 1
                self.anchors.add(s if n == 0 else "%s-%d" % (s, n))
                self.headings.append((i, text))
                prev_para = None
            else:
                prev_para = line if line.strip() and not FENCE_OPEN.match(line) else None
            for a in HTML_ANCHOR.findall(line):
                self.anchors.add(a)

    def links(self):
        """(line index, target) of every link outside fences and code spans."""
        for i, line, fence in self.rows:
            if fence is not None or FENCE_OPEN.match(line):
                continue
            text = strip_code_spans(line)
            for m in INLINE_LINK.finditer(text):
                yield i, m.group(2).strip("<>")
            # a reference definition cannot interrupt a paragraph
            m = REF_DEF.match(text)
            if m and (i == 0 or not self.lines[i - 1].strip() or REF_DEF.match(self.lines[i - 1])):
                yield i, m.group(1).strip("<>")


def lint(paths):
    pages = {}

    def page(p):
        p = os.path.normpath(p)
        if p not in pages:
            pages[p] = Page(p)
        return pages[p]

    findings = []
    for p in paths:
        pg = page(p)
        for i, msg in pg.problems:
            findings.append((p, i + 1, msg))
        for i, target in pg.links():
            if SCHEME.match(target) or target.startswith("//"):
                continue
            path, _, frag = target.partition("#")
            path = urllib.parse.unquote(path)
            frag = urllib.parse.unquote(frag)
            if path:
                full = os.path.normpath(os.path.join(os.path.dirname(p), path))
                if not os.path.exists(full):
                    findings.append((p, i + 1, "link to %s: no such file" % target))
                    continue
                if frag and full.endswith(".md") and os.path.isfile(full):
                    if frag not in page(full).anchors:
                        findings.append((p, i + 1, "link to %s: %s has no heading with anchor #%s" % (target, path, frag)))
            elif frag and frag not in pg.anchors:
                findings.append((p, i + 1, "link to #%s: no heading of this page has that anchor" % frag))
    return findings


def main(argv):
    root = "."
    args = argv[1:]
    if len(args) >= 2 and args[0] == "--root":
        root, args = args[1], args[2:]
    if not args or any(a.startswith("-") for a in args):
        sys.stderr.write(__doc__.split("\n\n")[1] + "\n")
        return 2
    paths = []
    for a in args:
        if any(c in a for c in "*?["):
            paths += sorted(glob.glob(os.path.join(root, a)))
        elif os.path.isfile(os.path.join(root, a)):
            paths.append(os.path.join(root, a))
        else:
            sys.stderr.write("mdlint: %s: no such file\n" % os.path.join(root, a))
            return 2
    findings = lint(paths)
    order = {p: k for k, p in enumerate(paths)}
    findings.sort(key=lambda f: (order.get(f[0], len(order)), f[1]))
    for f, line, msg in findings:
        print("%s:%d: %s" % (os.path.relpath(f, root), line, msg))
    print("mdlint: %d file(s), %d finding(s)" % (len(paths), len(findings)), file=sys.stderr)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
