#!/usr/bin/env python3
"""Render the fixtures in tests/data/hf/ as readable tables (TABLES.md):
first the planner's accuracy against every fixture (hand-written and the
generated set in tests/data/hf-gen/, issue 13's families in tests/data/hf-fam/ and tests/data/hf-moe/): the max / mean
error table that the
fixture test prints (build/tests/test_hf_fixtures; another binary with
GCKPT_HF_FIXTURE_TEST), and the generated configurations; then per family x
precision x attention, the tensors autograd saves in one decoder layer, the
head and the embedding, in op order and in symbolic shapes, plus per-layer
byte totals, checkpoint/offload and peak summaries.

Also checks that the symbolic form is the same for both measured shapes
(b2s32 and b1s48), which catches a wrong dimension.

Pure standard library; runs with any python3.
"""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.normpath(os.path.join(HERE, "..", "..", "tests", "data", "hf"))
GEN = os.path.normpath(os.path.join(HERE, "..", "..", "tests", "data", "hf-gen"))
FIXTURE_TEST = os.environ.get("GCKPT_HF_FIXTURE_TEST") or os.path.normpath(
    os.path.join(HERE, "..", "..", "build", "tests", "test_hf_fixtures"))

FAMILIES = ["llama", "mistral", "qwen2", "qwen3", "gpt2"]
PRECISIONS = ["fp32", "bf16", "amp-bf16", "amp-bf16-cudalists"]
ATTENTIONS = ["sdpa", "eager"]
DSIZE = {"float32": 4, "bfloat16": 2, "float16": 2, "int64": 8, "bool": 1, "int32": 4}


def load(name):
    path = os.path.join(DATA, name + ".json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def feature_symbols(cfg, family):
    if family == "gpt2":
        h = cfg["n_embd"]
        nh = cfg["n_head"]
        inner = cfg.get("n_inner") or 4 * h
        return {h: "h", 3 * h: "3h", inner: "4h", cfg["vocab_size"]: "V", h // nh: "hd", nh: "nh",
                cfg["n_positions"]: "n_pos", 1: "1"}
    h = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    kv = cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or h // nh
    m = {1: "1", kv: "kv", nh: "nh", hd: "hd", kv * hd: "kv*hd", nh * hd: "nh*hd",
         cfg["intermediate_size"]: "i", cfg["vocab_size"]: "V", h: "h"}
    return m


def sym_shape(shape, b, s, fmap, is_param):
    """Position-aware symbolisation."""
    if is_param:
        return "[" + ",".join(fmap.get(d, str(d)) for d in shape) + "]"
    n = len(shape)
    out = []
    if n == 0:
        return "[]"
    if n == 1:
        d = shape[0]
        if d == b * s:
            return "[b*s]"
        return "[" + fmap.get(d, str(d)) + "]"
    if n == 2:
        d0, d1 = shape
        if d0 == b * s and b > 1:
            out.append("b*s")
        elif d0 == b and d1 == s:
            return "[b,s]"
        elif d0 == 1 and d1 == s:
            return "[1,s]"
        elif d0 == b * s:
            out.append("b*s")
        else:
            out.append(fmap.get(d0, str(d0)))
        out.append(fmap.get(d1, str(d1)))
        return "[" + ",".join(out) + "]"
    if n == 3:
        d0, d1, d2 = shape
        if d0 == b and d1 == s:
            return f"[b,s,{fmap.get(d2, str(d2))}]"
        # [b*heads, s, hd] bmm operands or [b, heads, s] lse
        if d0 == b and d2 == s:
            return f"[b,{fmap.get(d1, str(d1))},s]"
        if d0 % b == 0 and fmap.get(d0 // b) in ("nh", "kv"):
            rest = [("s" if x == s else fmap.get(x, str(x))) for x in (d1, d2)]
            return f"[b*{fmap[d0 // b]},{rest[0]},{rest[1]}]"
        return "[" + ",".join(fmap.get(x, str(x)) for x in shape) + "]"
    if n == 4:
        d0, d1, d2, d3 = shape
        a = "b" if d0 == b else ("1" if d0 == 1 else fmap.get(d0, str(d0)))
        c = fmap.get(d1, str(d1)) if d1 != s else "s"
        e = "s" if d2 == s else fmap.get(d2, str(d2))
        f = "s" if (d3 == s and d3 not in fmap) else fmap.get(d3, str(d3))
        if d2 == s and d3 == s:
            f = "s"
        return f"[{a},{c},{e},{f}]"
    return str(shape)


def short_module(m):
    if not m:
        return "-"
    parts = m.split(".")
    # layers.1.self_attn.q_proj -> self_attn.q_proj ; h.1.attn.c_attn -> attn.c_attn
    if len(parts) > 2 and parts[0] in ("layers", "h") and parts[1].isdigit():
        return ".".join(parts[2:]) or "(layer)"
    if len(parts) == 2 and parts[0] in ("layers", "h"):
        return "(layer)"
    return m


def note_of(t):
    bits = []
    if t.get("cast_of_param"):
        bits.append("autocast copy of weight")
    pb = t.get("produced_by")
    if pb and not t["param"]:
        bits.append("made by " + pb)
    if len(t.get("saved_by", [])) > 1:
        bits.append("also saved by " + ", ".join(sorted(set(x for x in t["saved_by"][1:] if x))))
    if t.get("view_bytes") is not None:
        bits.append(f"view of a larger storage ({t['view_bytes']} B viewed)")
    if t.get("also_saved_in"):
        bits.append("also saved in " + ",".join(sorted(set(t["also_saved_in"]))))
    return "; ".join(bits)


def table(tensors, b, s, fmap):
    rows = ["| # | module | saved by (node) | shape | dtype | bytes | param | note |",
            "|---|---|---|---|---|---|---|---|"]
    for k, t in enumerate(tensors):
        rows.append("| {} | {} | {} | {} | {} | {} | {} | {} |".format(
            k + 1, short_module(t["module"]), t["node"] or t["op"],
            sym_shape(t["shape"], b, s, fmap, t["param"] or bool(t.get("cast_of_param"))),
            t["dtype"], t["bytes"], "param" if t["param"] else "", note_of(t)))
    return "\n".join(rows)


def signature(tensors, b, s, fmap):
    return [(t["node"], sym_shape(t["shape"], b, s, fmap, t["param"] or bool(t.get("cast_of_param"))), t["dtype"], t["param"])
            for t in tensors]


def accuracy():
    """The fixture test's error table (its markdown lines and summary), or a note."""
    if not os.access(FIXTURE_TEST, os.X_OK):
        return [f"(not available: build the project so that {os.path.relpath(FIXTURE_TEST, HERE)} exists)"]
    r = subprocess.run([FIXTURE_TEST], capture_output=True, text=True)
    lines = [l for l in r.stdout.splitlines() if l.startswith("|")]
    summary = [l for l in r.stdout.splitlines() if "fixtures compared" in l]
    verdict = "every fixture passes" if r.returncode == 0 else f"FAILING fixtures (exit {r.returncode})"
    return lines + [""] + summary + [f"({verdict} at the tolerances: live peak and after-forward 0.1 % for "
                                     "fp32 and amp, 0.5 % for bf16; parameters, saved and offloaded bytes exact)"]


def generated():
    """One row per generated configuration: the features gen_cases.py drew."""
    rows = ["| case | layers | hidden | heads / kv | head_dim | vocab | tied | dropout | measured peak |",
            "|---|---|---|---|---|---|---|---|---|"]
    for path in sorted(glob.glob(os.path.join(GEN, "*.json"))):
        with open(path) as f:
            fx = json.load(f)
        c, st = fx["config"], fx["setting"]
        if st["family"] == "gpt2":
            L, h, nh, kv = c["n_layer"], c["n_embd"], c["n_head"], c["n_head"]
            hd = h // nh
            drop = max(c.get("attn_pdrop") or 0, c.get("resid_pdrop") or 0, c.get("embd_pdrop") or 0)
        else:
            L, h, nh, kv = c["num_hidden_layers"], c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
            hd = c.get("head_dim") or h // nh
            drop = c.get("attention_dropout") or 0
        rows.append(f"| {os.path.basename(path)[:-5]} | {L} | {h} | {nh} / {kv} | {hd} | {c['vocab_size']} | "
                    f"{'yes' if st.get('tie_word_embeddings') else 'no'} | {drop:g} | {fx['steps'][-1]['live_peak_bytes']} |")
    return rows


def main():
    out = []
    problems = []
    out.append("# Planner accuracy and saved-tensor tables (generated by summarize.py from tests/data/hf, "
               "tests/data/hf-gen, tests/data/hf-fam, tests/data/hf-moe and tests/data/hf-dsv3)\n")
    out.append("## Planner vs measured, every fixture\n")
    out.append("Errors (planned - measured) / measured of the steady-state live peak and of the live bytes after "
               "micro-step 1's forward, per family x precision x attention, over the hand-written fixtures "
               "(tests/data/hf), the generated ones (tests/data/hf-gen) and the later families (tests/data/hf-fam, "
               "family_cases.py: gemma, gemma2, gemma3_text, phi3 incl. the Phi-4-mini variant, gpt_neox (its "
               "sequential block in the gpt_neox+seq rows), olmo2, "
               "granite, and Mistral v0.1's window in the mistral rows) and its mixture-of-experts families "
               "(tests/data/hf-moe, moe_cases.py: mixtral, qwen3_moe, olmoe; tests/data/hf-dsv3, moe_cases.py "
               "dsv3_cases: deepseek_v3); from `build/tests/test_hf_fixtures`.\n")
    out.extend(accuracy())
    out.append("\n## The generated configurations (gen_cases.py)\n")
    out.append("Names: family-index-precision-attention-every_n-offload-b<batch>s<seq>-ga<accumulation>.\n")
    out.extend(generated())
    out.append("\n## Saved tensors per family x precision x attention (tests/data/hf)\n")
    out.append("Symbols: b micro-batch, s sequence, h hidden, nh heads, kv kv-heads, hd head_dim, i intermediate, "
               "V vocab (gpt2: 3h = c_attn width, 4h = mlp width). `param` rows are parameters (not counted in "
               "bytes). One non-first, non-checkpointed decoder layer is shown (layer 1 of the every_n=off case); "
               "layer 0 additionally holds the rotary cos/sin (llama-family) because they are shared by all layers "
               "and counted where first saved. Shapes shown for b=2, s=32; the same symbolic list was checked "
               "against b=1, s=48.\n")
    for fam in FAMILIES:
        for prec in PRECISIONS:
            for attn in ATTENTIONS:
                base = f"{fam}-{prec}-{attn}"
                fx = load(f"{base}-noff-plain-b2s32")
                fx2 = load(f"{base}-noff-plain-b1s48")
                if fx is None:
                    continue
                fmap = feature_symbols(fx["config"], fam)
                b, s = fx["setting"]["micro_batch"], fx["setting"]["seq"]
                L = fx["saved"]["layers"]
                out.append(f"\n## {fam} / {prec} / {attn}\n")
                out.append(f"Per-layer saved bytes (b2s32): {[l['bytes'] for l in L]}; "
                           f"head {fx['saved']['head']['bytes']}; embedding {fx['saved']['embedding']['bytes']}.")
                if fx2:
                    L2 = fx2["saved"]["layers"]
                    out.append(f" (b1s48: {[l['bytes'] for l in L2]}; head {fx2['saved']['head']['bytes']}; "
                               f"embedding {fx2['saved']['embedding']['bytes']}.)")
                    for part, a, c in (("layer1", L[1]["tensors"], L2[1]["tensors"]),
                                       ("head", fx["saved"]["head"]["tensors"], fx2["saved"]["head"]["tensors"])):
                        if signature(a, b, s, fmap) != signature(c, fx2["setting"]["micro_batch"], fx2["setting"]["seq"], fmap):
                            if fam == "gpt2" and attn == "eager" and part == "layer1":
                                # by design: matmul folds q / k / v into copies when b > 1 (saved by
                                # BmmBackward0); when b = 1 they stay views of c_attn's output
                                out.append(" (Layer lists differ between the shapes by design: with b > 1 matmul's "
                                           "batch folding copies q, k and v, which BmmBackward0 saves; with b = 1 "
                                           "they stay views of c_attn's output, saved once.)")
                                continue
                            problems.append(f"{base} {part}: symbolic forms differ between b2s32 and b1s48")
                out.append("\n\n**Decoder layer 1**\n")
                out.append(table(L[1]["tensors"], b, s, fmap))
                extra = [t for t in L[0]["tensors"] if (t["node"], tuple(t["shape"])) not in {(u["node"], tuple(u["shape"])) for u in L[1]["tensors"]}]
                if extra:
                    out.append("\n\nOnly in layer 0 (shared tensors, counted once):\n")
                    out.append(table(extra, b, s, fmap))
                out.append("\n\n**Head (final norm, lm_head, loss)**\n")
                out.append(table(fx["saved"]["head"]["tensors"], b, s, fmap))
                out.append("\n\n**Embedding**\n")
                out.append(table(fx["saved"]["embedding"]["tensors"], b, s, fmap))
                # checkpointing summary
                rows = ["\n\n**Checkpointing / offload (b2s32)**\n",
                        "| case | ckpt layers | saved bytes per layer | retained per layer | offload bytes | peak step2 | peak where | after fwd | opt transient (loop / foreach) |",
                        "|---|---|---|---|---|---|---|---|---|"]
                for n in ("off", "1", "2", "3"):
                    for mode in (("plain",) if n == "off" else ("plain", "offload")):
                        f = load(f"{base}-n{n}-{mode}-b2s32")
                        if f is None:
                            continue
                        st = f["steps"][1]
                        rows.append("| n{} {} | {} | {} | {} | {} | {} | {} | {} | {} / {} |".format(
                            n, mode, f["checkpointed_layers"], [l["bytes"] for l in f["saved"]["layers"]],
                            [l["retained_bytes"] for l in f["saved"]["layers"]], f["offload_bytes"],
                            st["live_peak_bytes"], st["peak_where"], st["after_forward_bytes"],
                            st["optimizer_transient_bytes"], f["optimizer_foreach_step"]["transient_bytes"]))
                out.append("\n".join(rows))
                out.append("\n")
    if problems:
        out.append("\n## Consistency problems\n")
        out.extend("- " + p for p in problems)
    text = "\n".join(out) + "\n"
    dest = os.path.join(HERE, "TABLES.md")
    with open(dest, "w") as f:
        f.write(text)
    print(f"wrote {dest}; {len(problems)} consistency problems")
    for p in problems:
        print("  " + p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
