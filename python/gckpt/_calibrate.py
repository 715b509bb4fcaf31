"""gckpt.calibrate(): a device profile fitted to the step times real runs measured.

The C planner does the fit (planner/calibrate.c, gckpt-plan --calibrate-from); this wraps
its JSON API. docs/calibration.md says which knobs are fitted and when."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from typing import Iterable

from ._plan import _call, _gpu_ref


@dataclass
class Calibration:
    """The calibrated profile (a gckpt device profile dict with its "calibration" object)
    and the summary gckpt-plan prints (knobs before and after, each run's error)."""

    profile: dict
    text: str

    def save(self, path: str | os.PathLike) -> str:
        """Write the profile (atomically) for gckpt.plan(..., gpu=path) / gckpt-plan --gpu."""
        path = os.fspath(path)
        fd, tmp = tempfile.mkstemp(prefix=".gckpt-", dir=os.path.dirname(os.path.abspath(path)))
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(json.dumps(self.profile, indent=2) + "\n")
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        return path

    def __str__(self) -> str:
        return self.text


def calibrate(reports: Iterable[str | os.PathLike] | str | os.PathLike, gpu: str | os.PathLike | None = None) -> Calibration:
    """Fit the profile's efficiencies to the step times in reports (gckpt-run's, or
    gckpt.TrainerCallback's JSON Lines); gpu: the base profile (default: the plans')."""
    if isinstance(reports, (str, os.PathLike)):
        reports = [reports]
    paths = [os.fspath(r) for r in reports]
    req = {"op": "calibrate", "reports": paths}
    if gpu is not None:
        req["gpu"] = _gpu_ref(gpu)
    answer = _call(req)
    return Calibration(answer["profile"], answer["text"])
