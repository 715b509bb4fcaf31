"""One rank of test_callback's torchrun test: the tiny Llama of the fixtures, every_n_layers=1,
with gckpt.TrainerCallback(PLAN, report=REPORT).

    torchrun --nproc_per_node 2 callback_ddp_run.py FAMILY PLAN REPORT TMPDIR
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import test_callback  # noqa: E402
from gckpt.callback import TrainerCallback  # noqa: E402

family, plan, report, tmp = sys.argv[1:5]
config = test_callback.fixture(family, 1)["config"]
test_callback.run_trainer(config, tmp, TrainerCallback(plan, report=report), every_n=1)
