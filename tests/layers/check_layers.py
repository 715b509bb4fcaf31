#!/usr/bin/env python3
"""Dependencies point one way (docs/architecture.md, "Layout"): check the includes of
every library's sources and headers, and the libraries CMake links, against one table;
util/ and core/ define no JSON writer (they write no output format).

  check_layers.py --source DIR [--links FILE]

--source: the repository (its util/ core/ formats/ planner/ executor/ folders and
include/gckpt/<folder>/ headers are read). --links: the file CMake writes at generate time
(tests/layers/CMakeLists.txt): per target its LINK_LIBRARIES and its
INTERFACE_INCLUDE_DIRECTORIES. Every violation is one line "file:line: ..." or
"target: ..."; exit 1 when there is one, 0 otherwise. Tests, tools and python/ may see
everything and are not checked."""

import argparse
import os
import re
import sys

# What each folder may include and link, besides itself: the one table of the layers.
LAYERS = {
    "util": set(),
    "core": {"util"},
    "formats": {"core", "util"},
    "planner": {"formats", "core", "util"},
    "executor": {"formats", "core", "util"},
}
# Each library (and program) target and the folder it belongs to.
TARGETS = {
    "gckpt_util": "util",
    "gckpt_core": "core",
    "gckpt_formats": "formats",
    "gckpt_hub": "planner",
    "gckpt_planner": "planner",
    "gckpt_exec": "executor",
    "gckpt_cuda": "executor",
    "gckpt-plan": "planner",
    "gckpt-dash": "planner",
    "gckpt-run": "executor",
}
# Known exceptions, each with its reason; one that is no longer needed is an error too, so
# that the list only shrinks.
EXCEPTIONS = {}

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]')
# Core reads its inputs and writes no output format: a writer is formats/' or a program's.
# Writers are named *_json here (gckpt_plan_to_json, gckpt_report_entry_json, ...), readers
# *_parse, *_read, *_load: no function of util/ or core/ ends in _json.
WRITER = re.compile(r"^[A-Za-z][^;{}()]*?\b(\w+_json)\s*\(")
NO_OUTPUT = {"util", "core"}
SOURCES = (".c", ".h", ".cu", ".cuh")


def folder_files(src, folder):
    """The sources of folder and its public headers, as paths relative to src."""
    for top in (folder, os.path.join("include", "gckpt", folder)):
        for root, dirs, files in os.walk(os.path.join(src, top)):
            dirs.sort()
            for name in sorted(files):
                if name.endswith(SOURCES):
                    yield os.path.relpath(os.path.join(root, name), src)


def check_includes(src, used):
    errors = []
    for folder, allowed in LAYERS.items():
        for rel in folder_files(src, folder):
            with open(os.path.join(src, rel), encoding="utf-8", errors="replace") as f:
                for lineno, line in enumerate(f, 1):
                    w = WRITER.match(line) if folder in NO_OUTPUT else None
                    if w:
                        errors.append(f"{rel}:{lineno}: {w.group(1)}: a JSON writer; {folder}/ writes no output "
                                      "format (writers both programs share are in formats/)")
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    inc = m.group(1)
                    if ".." in inc.split("/"):
                        errors.append(f"{rel}:{lineno}: includes {inc}: a path out of its folder")
                        continue
                    parts = inc.split("/")
                    if len(parts) < 3 or parts[0] != "gckpt":
                        continue  # the system's, or the folder's own private header
                    other = parts[1]
                    if other == folder or other in allowed:
                        continue
                    if (rel, inc) in EXCEPTIONS:
                        used.add((rel, inc))
                        continue
                    may = ", ".join(sorted(allowed | {folder}))
                    errors.append(f"{rel}:{lineno}: includes {inc}: {folder}/ may include gckpt/{{{may}}}/ only")
    return errors


def read_links(path):
    """{target: {"LINK": [...], "IFACE_INC": [...]}} from the generated file."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            target, kind, values = line.split("|", 2)
            out.setdefault(target, {})[kind] = [v for v in values.split(";") if v]
    return out


def check_links(src, links, used):
    errors = []
    for target, props in sorted(links.items()):
        folder = TARGETS.get(target)
        if folder is None:
            errors.append(f"{target}: not in check_layers.py's TARGETS")
            continue
        allowed = LAYERS[folder] | {folder}
        for lib in props.get("LINK", []):
            other = TARGETS.get(lib)
            if other is None or other in allowed:
                continue  # a system library, or a lower layer
            if (target, lib) in EXCEPTIONS:
                used.add((target, lib))
                continue
            errors.append(f"{target}: links {lib} ({other}/): {folder}/ may link {', '.join(sorted(allowed))} only")
        # a library exports include/ only: its own folder's headers stay private
        own = os.path.realpath(os.path.join(src, "include"))
        for d in props.get("IFACE_INC", []):
            real = os.path.realpath(os.path.join(src, d))  # CMake's are absolute
            if real.startswith(os.path.realpath(src) + os.sep) and real != own:
                errors.append(f"{target}: exports include directory {os.path.relpath(real, src)}: "
                              "only include/ is public (tests name a private folder themselves)")
    return errors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--links")
    a = ap.parse_args()
    used = set()
    errors = check_includes(a.source, used)
    if a.links:
        errors += check_links(a.source, read_links(a.links), used)
    for key, why in EXCEPTIONS.items():
        is_link = key[0] in TARGETS
        if key not in used and (a.links or not is_link):
            errors.append(f"{key[0]}: the exception for {key[1]} is no longer needed ({why}): remove it")
    for e in errors:
        print(e)
    print(f"check_layers: {len(errors)} violation(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
