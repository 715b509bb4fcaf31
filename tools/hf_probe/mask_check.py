#!/usr/bin/env python3
"""What an attention_mask changes in the measured peaks (FINDINGS R-TRAINER-3, R-ATTN-11).

The fixtures call model(input_ids=ids, labels=ids). The Trainer calls model(**inputs), and a
dataset tokenized with a tokenizer (or a padding collator) also brings `attention_mask`. For
each named probe case this measures the live peak of each step three times: without an
attention_mask, with an all-ones mask (an unpadded batch, as collators pass it), and with
the last 4 tokens of the first row masked (a padded batch); it prints the peaks and the
differences. Both masks are built inside the measured region, like the ids' own use.

usage: .venv/bin/python mask_check.py CASE [CASE ...]   (case names: probe.py --list --set families|moe)
"""
import argparse
import os
import sys
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import family_cases  # noqa: E402
import moe_cases  # noqa: E402
import probe  # noqa: E402

warnings.filterwarnings("ignore")


def with_mask(pad):
    """probe.forward_loss with an attention_mask: all ones, or the first row's last `pad` tokens 0."""
    def forward_loss(c, ids):
        model = getattr(c, "forward_model", None) or c.model
        mask = torch.ones_like(ids)
        if pad:
            mask[0, -pad:] = 0
        if c.amp:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return model(input_ids=ids, attention_mask=mask, labels=ids).loss / c.grad_accum
        return model(input_ids=ids, attention_mask=mask, labels=ids).loss / c.grad_accum
    return forward_loss


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="+")
    a = ap.parse_args()
    known = {c["name"]: c for c in probe.hand_cases() + family_cases.cases() + moe_cases.cases()}
    torch.set_num_threads(1)
    variants = [("none", probe.forward_loss), ("ones", with_mask(0)), ("padded", with_mask(4))]
    print("case step: peak without a mask (where) | all-ones mask - without | padded - without")
    for name in a.cases:
        if name not in known:
            sys.exit(f"mask_check.py: unknown case {name!r}")
        peaks = []
        for _, f in variants:
            probe.forward_loss = f
            peaks.append([(s["live_peak_bytes"], s["peak_where"]) for s in probe.run_case(known[name])["steps"]])
        probe.forward_loss = variants[0][1]
        for step, (none, ones, padded) in enumerate(zip(*peaks), 1):
            print(f"{name} {step}: {none[0]} ({none[1]}) | {ones[0] - none[0]:+d} | {padded[0] - none[0]:+d}")


if __name__ == "__main__":
    main()
