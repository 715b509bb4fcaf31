#!/usr/bin/env python3
"""torch.mean of fp32 vectors on the CPU with one thread: the summation order that
bitsandbytes' double quantization inherits (offset = absmax.mean()). The C quantizer
(executor/quant4.c gckpt_torch_mean_f32) must give the same bits.

  mean_fixture.py [--out tests/data/quant/torch_mean.json]

The vectors are x[i] = ((i * 7919) % 65521) * 2**-20, exact in fp32, so only their lengths
are stored. With more than one thread torch splits reductions of over 32,768 elements
between threads and the last bit can change (measured here), hence set_num_threads(1),
as quant_fixture.py does.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys

import numpy as np
import torch

from quant_fixture import write_json

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "..", "tests", "data", "quant", "torch_mean.json")
LENGTHS = [1, 5, 7, 8, 15, 33, 100, 260, 1000, 4097, 20000, 131073, 300001]


def vector(n: int) -> torch.Tensor:
    i = np.arange(n, dtype=np.int64)
    return torch.from_numpy(((i * 7919) % 65521).astype(np.float32) * np.float32(2.0 ** -20))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=OUT)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    cases = []
    for n in LENGTHS:
        x = vector(n)
        mean = x.mean()
        naive = np.float32(0)
        for v in x.numpy():  # left to right in fp32, for contrast
            naive = np.float32(naive + v)
        naive = np.float32(naive / np.float32(n))
        cases.append({"n": n, "mean_f32": mean.numpy().astype("<f4").tobytes().hex(),
                      "left_to_right_equal": bool(naive == mean.numpy())})
    fx = {"schema": "gckpt.torch-mean-fixture/1",
          "versions": {"torch": torch.__version__, "python": platform.python_version()},
          "cpu_capability": torch.backends.cpu.get_cpu_capability(), "threads": 1,
          "vector": "x[i] = ((i * 7919) % 65521) * 2**-20 (fp32, exact)",
          "encoding": "mean_f32: hex of the little-endian fp32", "cases": cases}
    write_json(a.out, fx)
    print(f"{a.out}: {len(cases)} cases, {sum(not c['left_to_right_equal'] for c in cases)} differ from a left-to-right sum")
    return 0


if __name__ == "__main__":
    sys.exit(main())
