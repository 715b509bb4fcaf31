#!/usr/bin/env python3
"""Persistent bytes per rank of LoRA / QLoRA under DDP, FSDP2 and DeepSpeed ZeRO 1/2/3 (FINDINGS
R-DISTPEFT-*), as closed forms recomputed from each fixture's config, setting and parallel
layout, compared with the allocator's live bytes at step 2's start and end
(tests/data/hf-dist-peft, probe_dist_peft.py). The full fine-tuning forms are dist_rules.py's
(R-DIST-6..9); what changes with adapters:

  * the parameter list: every targeted linear's weight becomes base_layer.weight (frozen) and
    gains lora_A.default.weight [r, in] and lora_B.default.weight [out, r] (trainable, fp32);
  * DDP: buckets, AdamW and steps over the trainable parameters only; the Trainer passes
    find_unused_parameters=True for a PeftModel (not a PreTrainedModel) even with
    checkpointing, so the reducer's two int32 maps are always there (per trainable tensor);
  * FSDP2: every parameter is sharded (frozen too, in its own dtype), AdamW on the trainable
    local shards only;
  * ZeRO-1/2: the frozen parameters stay whole in the model dtype; only the trainable ones
    are in the flat groups (one group: every adapter gets weight decay);
  * ZeRO-3: every parameter is partitioned (frozen too) and the small ones kept whole; fp32
    master, AdamW and gradient partitions over the trainable partitions only.

  python3 dist_peft_rules.py [--table] [FIXTURE.json ...]   (default: tests/data/hf-dist-peft)

Plain Python 3, no torch.
"""
from __future__ import annotations

import glob
import json
import os
import sys

import dist_rules as dr
from peft_rules import dims

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DIR = os.path.join(HERE, "..", "..", "tests", "data", "hf-dist-peft")
LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def targets(fx):
    t = fx["lora"]["targets"]
    return set(LINEARS) if t == "all-linear" else {x for x in LINEARS if x.rsplit(".", 1)[1] in t}


def peft_params(fx):
    """(name, shape, trainable) in named_parameters order: dist_rules.params with every
    targeted linear replaced by base_layer + lora_A + lora_B."""
    r = fx["lora"]["r"]
    tg = targets(fx)
    out = []
    for name, sh in dr.params(fx):
        mod = name[:-len(".weight")]
        if mod.split(".", 3)[-1] in tg:
            out += [(mod + ".base_layer.weight", sh, False), (mod + ".lora_A.default.weight", (r, sh[1]), True),
                    (mod + ".lora_B.default.weight", (sh[0], r), True)]
        else:
            out.append((name, sh, False))
    return out


FSDP_UNIT_BYTES = 4  # per rank of the mesh, per FSDP unit holding parameters (dist_rules' 24 N = 6 units)


def fsdp_units(fx):
    """Units holding parameters: one per decoder layer, the input embedding, the tail [lm_head],
    and the root, which keeps the final norm: accelerate's _find_final_norm looks among the
    children of getattr(model, model.base_model_prefix), which on a PeftModel is the
    ...ForCausalLM (children model, lm_head), so it finds no norm (R-DISTPEFT-3)."""
    return dims(fx["config"], fx["setting"]["family"])["L"] + 3


def frozen_bytes_per_elem(fx):
    """The frozen base's dtype on the rank: DeepSpeed bf16 casts every parameter; DDP and
    FSDP2 keep the loaded dtype (accelerate upcasts only trainable parameters)."""
    mode = fx["parallel"]["mode"]
    if mode.startswith("zero"):
        return dr.model_bytes(fx)
    return 2 if fx["setting"].get("load_dtype") == "bfloat16" else 4


def quantized(fx, name):
    """QLoRA: a targeted linear's base weight is a Params4bit (bitsandbytes replaces every
    nn.Linear but lm_head; the targets here are all-linear)."""
    return fx["method"] == "qlora" and name.endswith(".base_layer.weight")


def packed_shape(fx, shape):
    """A Params4bit's stored shape: [ceil(n/2) bytes / storage size, 1] (R-QUANT-4)."""
    storage = fx["quant"]["storage"]
    return (dr.cdiv(dr.cdiv(dr.numel(shape), 2), 2 if storage == "bf16" else 1), 1)


def persistent_closed(fx):
    """Bytes live at a step's start on this rank. QLoRA: the quantization statistics (absmax,
    code books; R-QUANT-4..8, resident, never sharded) are the fixture's own
    quant.stats_bytes_unique_storages; the packed weights as bitsandbytes stores them."""
    mode, N, r, _ = dr.layout(fx)
    mesh = fx["parallel"].get("mesh")
    if mesh:  # HSDP (R-DIST-27, R-DISTPEFT-11): FSDP2 over the rank's dp_shard group, one mesh of 4 x world bytes
        world, sg = N, mesh["shard_group_ranks"]
        N, r = len(sg), sg.index(r)
    ps = peft_params(fx)
    q = [(n, packed_shape(fx, s)) for n, s, t in ps if quantized(fx, n)]
    tr = [(n, s) for n, s, t in ps if t]
    fr = [(n, s) for n, s, t in ps if not t and not quantized(fx, n)]
    qsize = 2 if fx["method"] == "qlora" and fx["quant"]["storage"] == "bf16" else 1
    stats = fx["quant"]["stats_bytes_unique_storages"] if fx["method"] == "qlora" else 0
    n_T = len(tr)
    T = sum(dr.numel(s) for _, s in tr)
    F = sum(dr.numel(s) for _, s in fr)
    Qb = sum(dr.numel(s) for _, s in q) * qsize  # packed bytes, whole
    # QLoRA: prepare_model_for_kbit_training made the non-quantized parameters fp32
    sf = 4 if fx["method"] == "qlora" else frozen_bytes_per_elem(fx)
    # the rotary buffers: fp32, or bf16 when the probe cast the model with .to(bf16) (lb16)
    lb16 = fx["method"] == "lora" and fx["setting"].get("load_dtype") == "bfloat16"
    buf = dr.buffers(fx) // (2 if lb16 else 1)
    if mode == "ddp":
        # frozen base + fp32 adapters + one bucket copy of the adapters' gradients + AdamW on them
        # + a step per adapter tensor + find_unused_parameters' two int32 maps per adapter tensor
        return F * sf + Qb + stats + 4 * T + 4 * T + 8 * T + dr.ADAMW_STEP * n_T + 2 * 4 * n_T + buf
    if mode == "fsdp2":
        # a uint8 Params4bit is ignored (whole on every rank); a bf16 one is sharded (R-DISTPEFT-7)
        qb = (sum(dr.fsdp_padded(s, N) for _, s in q) * qsize) if qsize == 2 else Qb
        return (sf * sum(dr.fsdp_padded(s, N) for _, s in fr) + qb + stats
                + 4 * sum(dr.fsdp_padded(s, N) for _, s in tr)
                + 8 * sum(dr.fsdp_local(s, N, r) for _, s in tr) + dr.ADAMW_STEP * n_T + buf
                + (FSDP_UNIT_BYTES * world if mesh else FSDP_UNIT_BYTES * N * fsdp_units(fx)))
    s = dr.model_bytes(fx)
    if mode in ("zero1", "zero2"):
        A = dr.cdiv(T, 2 * N) * 2 * N  # one group: every adapter decays
        return F * s + Qb + stats + A * s + 3 * 4 * (A // N) + dr.ADAMW_STEP + 4 + buf
    Qt = sum(dr.cdiv(dr.numel(sh), N) for _, sh in tr)
    Qf = sum(dr.cdiv(dr.numel(sh), N) for _, sh in fr)
    whole = sum(dr.numel(sh) for _, sh, _t in ps if dr.zero3_persistent(fx, sh) and not quantized(fx, _))
    # QLoRA: a Params4bit is partitioned like any parameter, by its stored numel and in its
    # storage dtype, and kept whole under the persistence threshold (R-DISTPEFT-8)
    Qq = sum(dr.cdiv(dr.numel(sh), N) for _, sh in q) * qsize
    whole_q = sum(dr.numel(sh) for _, sh in q if dr.zero3_persistent(fx, sh)) * qsize
    rbs = fx["parallel"]["deepspeed"]["ds_config_resolved"]["zero_optimization"]["reduce_bucket_size"]
    return ((Qf + Qt) * s + whole * s + 3 * 4 * Qt + Qt * s + rbs * s + dr.ADAMW_STEP + dr.ZERO3_SCALARS + buf
            + Qq + whole_q + stats)


def load(paths):
    return [(os.path.basename(p), json.load(open(p))) for p in paths]


def main(argv):
    table = "--table" in argv
    paths = [a for a in argv if not a.startswith("--")] or sorted(glob.glob(os.path.join(DEFAULT_DIR, "*.json")))
    bad = 0
    rows, gloo = [], []
    for name, fx in load(paths):
        st = fx["steps"][-1]
        meas_s, meas_e = st["live_at_start_bytes"], st["live_at_end_bytes"]
        want = persistent_closed(fx)
        if fx["parallel"].get("process_group") == "gloo":
            # real collectives: the allocator misses frees made on gloo's threads (R-PROBE-5)
            gloo.append((name, meas_s, meas_e, want))
            continue
        ok = want == meas_s == meas_e
        bad += not ok
        rows.append((name, meas_s, meas_e, want))
    for name, s_, e_, w in rows:
        if table or not (w == s_ == e_):
            print(f"{name:60s} start {s_:>10d} end {e_:>10d} closed {w:>10} diff {s_ - w:+d}")
    for name, s_, e_, w in gloo:
        print(f"{name:60s} start {s_:>10d} end {e_:>10d} closed {w:>10} (gloo, not counted)")
    n = len(rows)
    print(f"{n - bad}/{n} fake-process-group fixtures equal their closed form at step 2's start and end; "
          f"{sum(1 for g in gloo if g[1] == g[2] == g[3])}/{len(gloo)} gloo twins do")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
