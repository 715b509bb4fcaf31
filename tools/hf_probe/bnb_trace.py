#!/usr/bin/env python3
"""Allocation trace of one quantized linear with its LoRA adapter (bitsandbytes' CPU path),
forward and backward, from torch's allocator reports (allocs.py, the probe's method): where
the dequantized weight appears, in which dtype, and when it goes.

  bnb_trace.py [--in 256] [--out 512] [--tokens 128] [--json FILE]

Scenarios: 4-bit nf4 with / without double quantization (compute bf16, weights loaded in
bf16), compute fp32, under CPU autocast bf16, the base layer alone, and Linear8bitLt. The
input is fp32 and requires grad, as after prepare_model_for_kbit_training. Each row is one
allocation (+) or free (-) with the op that made it and the live bytes after it; bytes that
existed before (input, packed weight, statistics, adapters) are not counted.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
logging.getLogger("bitsandbytes").setLevel(logging.ERROR)

import torch  # noqa: E402

import allocs  # noqa: E402


def build(kind, fin, fout, dq=True, compute=torch.bfloat16, lora=True, dropout=0.0):
    import bitsandbytes as bnb
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    w = (torch.randn(fout, fin) * 0.02).to(torch.bfloat16)
    if kind == "4bit":
        lin = bnb.nn.Linear4bit(fin, fout, bias=False, compute_dtype=compute, compress_statistics=dq, quant_type="nf4")
        lin.weight = bnb.nn.Params4bit(w, requires_grad=False, compress_statistics=dq, quant_type="nf4", module=lin)
    else:
        lin = bnb.nn.Linear8bitLt(fin, fout, bias=False, has_fp16_weights=False)
        lin.weight = bnb.nn.Int8Params(w, requires_grad=False, has_fp16_weights=False)
    lin = lin.to("cpu")  # quantizes

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = lin

        def forward(self, x):
            return self.proj(x)

    m = M()
    # what from_pretrained(quantization_config=...) sets: peft then wraps the layer in its
    # bitsandbytes LoRA class (peft/tuners/lora/bnb.py), as in a QLoRA model
    m.is_loaded_in_4bit, m.is_loaded_in_8bit = kind == "4bit", kind == "int8"
    if lora:
        m = get_peft_model(m, LoraConfig(r=8, lora_alpha=16, lora_dropout=dropout, target_modules=["proj"]))
    m.train()
    return m


def trace(m, tokens, fin, amp):
    x = torch.randn(tokens, fin, requires_grad=True)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
        m(x)  # bitsandbytes' first-forward state changes, outside the trace
    with allocs.recorder() as prof:
        with allocs.span("micro1/forward"), torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            y = m(x)
        with allocs.span("micro1/backward"):
            y.backward(torch.ones_like(y))
            del y
    tl = allocs.Timeline(allocs.trace_events(prof), 0)
    rows = []
    for i, mem in enumerate(tl.mems):
        if mem.kind not in ("device", "scratch"):
            continue
        where, phase = tl.where(i)
        op = where.rsplit("/", 1)[-1]
        rows.append({"phase": phase, "op": op, "bytes": mem.nbytes, "live": tl.cur[i],
                     **({"scratch": True} if mem.kind == "scratch" else {})})
    return rows


def summary(rows):
    out = {}
    for ph in ("forward", "backward"):
        r = [x for x in rows if x["phase"] == ph]
        if r:
            top = max(r, key=lambda x: x["live"])
            out[ph] = {"peak_over_start": top["live"] - (r[0]["live"] - r[0]["bytes"]), "at": top["op"]}
    return out


SCENARIOS = [
    ("nf4 dq, compute bf16, LoRA, no autocast", dict(kind="4bit", dq=True), False),
    ("nf4 no dq, compute bf16, LoRA, no autocast", dict(kind="4bit", dq=False), False),
    ("nf4 dq, compute bf16, LoRA, CPU autocast bf16", dict(kind="4bit", dq=True), True),
    ("nf4 dq, compute fp32 (weights loaded bf16), LoRA", dict(kind="4bit", dq=True, compute=torch.float32), False),
    ("nf4 dq, compute bf16, base layer only", dict(kind="4bit", dq=True, lora=False), False),
    ("int8 Linear8bitLt, LoRA, no autocast", dict(kind="int8"), False),
    ("int8 Linear8bitLt, LoRA, CPU autocast bf16", dict(kind="int8"), True),
]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--in", dest="fin", type=int, default=256)
    ap.add_argument("--out", dest="fout", type=int, default=512)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--json", help="write every scenario's rows here")
    a = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    res = {}
    for title, kw, amp in SCENARIOS:
        m = build(fin=a.fin, fout=a.fout, **kw)
        rows = trace(m, a.tokens, a.fin, amp)
        layer = m.base_model.model.proj if kw.get("lora", True) else m.proj
        res[title] = {"layer": f"{type(layer).__module__}.{type(layer).__name__}", "rows": rows,
                      "summary": summary(rows)}
        print(f"== {title}  (in {a.fin}, out {a.fout}, {a.tokens} tokens; {res[title]['layer']})")
        for r in rows:
            print(f"  {r['phase']:9s} {r['op']:42s} {r['bytes']:+10d} live {r['live']:9d}"
                  + ("  (kernel scratch)" if r.get("scratch") else ""))
        print("  summary:", json.dumps(res[title]["summary"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"in": a.fin, "out": a.fout, "tokens": a.tokens, "scenarios": res}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
