"""The JSON Schema subset the repository's schemas use, checked in Python (the same
keywords as tests/schema_check.c, plus pattern): $ref to #/$defs/NAME, type, const,
enum, minimum, maximum, required, properties, additionalProperties false, items,
minItems. jsonschema is not a dependency of the package or of its tests."""
from __future__ import annotations

import json
import re

_TYPES = {
    "object": lambda d: isinstance(d, dict),
    "array": lambda d: isinstance(d, list),
    "string": lambda d: isinstance(d, str),
    "boolean": lambda d: isinstance(d, bool),
    "null": lambda d: d is None,
    "number": lambda d: isinstance(d, (int, float)) and not isinstance(d, bool),
    "integer": lambda d: (isinstance(d, int) and not isinstance(d, bool)) or (isinstance(d, float) and d.is_integer()),
}


def errors(schema, doc, root=None, path="$"):
    """Every way doc breaks schema, as 'path: what' lines."""
    root = root if root is not None else schema
    out = []
    ref = schema.get("$ref")
    if ref:
        name = ref.rsplit("/", 1)[-1]
        if name not in root.get("$defs", {}):
            return [f"{path}: the schema has no $defs/{name}"]
        return errors(root["$defs"][name], doc, root, path)
    t = schema.get("type")
    if t is not None:
        ts = t if isinstance(t, list) else [t]
        if not any(_TYPES[x](doc) for x in ts):
            return [f"{path}: {json.dumps(doc)[:60]} is not {t}"]
    if "const" in schema and doc != schema["const"]:
        out.append(f"{path}: {doc!r} is not {schema['const']!r}")
    if "enum" in schema and doc not in schema["enum"]:
        out.append(f"{path}: {doc!r} is not one of {schema['enum']}")
    if _TYPES["number"](doc):
        if "minimum" in schema and doc < schema["minimum"]:
            out.append(f"{path}: {doc} < {schema['minimum']}")
        if "maximum" in schema and doc > schema["maximum"]:
            out.append(f"{path}: {doc} > {schema['maximum']}")
    if isinstance(doc, str) and "pattern" in schema and not re.search(schema["pattern"], doc):
        out.append(f"{path}: {doc!r} does not match {schema['pattern']}")
    if isinstance(doc, dict):
        for k in schema.get("required", []):
            if k not in doc:
                out.append(f"{path}: '{k}' is missing")
        props = schema.get("properties", {})
        for k, v in doc.items():
            if k in props:
                out += errors(props[k], v, root, f"{path}.{k}")
            elif schema.get("additionalProperties") is False:
                out.append(f"{path}: '{k}' is not allowed")
    if isinstance(doc, list):
        if "minItems" in schema and len(doc) < schema["minItems"]:
            out.append(f"{path}: fewer than {schema['minItems']} items")
        if "items" in schema:
            for i, v in enumerate(doc):
                out += errors(schema["items"], v, root, f"{path}[{i}]")
    return out


RECORD_DEFS = {"header": "header_record", "entry": "entry", "summary": "summary", "step": "step_record",
               "warning": "warning_record"}


def report_errors(schema, lines):
    """A gckpt.report/2 JSON Lines report: every record against its $defs entry, then the
    document the records make (as executor/report_file.c reads it back)."""
    out = []
    records = [json.loads(line) for line in lines if line.strip()]
    if not records or records[0].get("record") != "header":
        return ["the first record is not the header"]
    for i, r in enumerate(records):
        name = RECORD_DEFS.get(r.get("record"))
        if name is None:
            out.append(f"line {i + 1}: record {r.get('record')!r} unknown")
            continue
        out += [f"line {i + 1}: {e}" for e in errors({"$ref": f"#/$defs/{name}"}, r, schema)]
    doc = {k: v for k, v in records[0].items() if k not in ("record", "selected")}
    doc["entries"] = [r for r in records if r.get("record") == "entry"]
    doc["steps"] = [r for r in records if r.get("record") == "step"]
    doc["warnings"] = [r for r in records if r.get("record") == "warning"]
    summ = [r for r in records if r.get("record") == "summary"]
    if summ:
        doc["summary"] = summ[-1]
    out += [f"document: {e}" for e in errors(schema, doc)]
    return out
