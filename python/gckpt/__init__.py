"""gckpt: plan gradient checkpointing for Hugging Face training before you run it.

    import gckpt
    p = gckpt.plan("llama-3.2-1b", gpu="a100-40gb", seq=2048)
    p.recommended["memory"]["device_peak_bytes"], p.training_arguments(), print(p.snippet())

The numbers come from the C planner (the same code as gckpt-plan, in gckpt._native)."""

from ._calibrate import Calibration, calibrate
from .callback import PlanMismatchWarning, TrainerCallback
from ._plan import Plan, PlanError, data_dir, plan
from .hf_args import options_from_hf, plan_for

__version__ = "0.1.0"

__all__ = [
    "Calibration", "Plan", "PlanError", "PlanMismatchWarning", "TrainerCallback", "calibrate", "data_dir",
    "options_from_hf", "plan", "plan_for",
    "__version__",
]
