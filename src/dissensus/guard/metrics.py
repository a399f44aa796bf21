"""Calibration metrics of the guard's stratified report (``docs/guard.md``).

Choices this module makes:

* ``ece`` is the binned expected calibration error with ``bins`` equal-width bins over
  ``[0, 1]`` (default 10); a confidence of exactly 1 falls in the last bin.
* ``gap`` is ``|mean confidence - accuracy|``, the correlated-hallucination study's "calibration error" column
  (0.88 confidence at 0.61 accuracy gives 0.27).
* An empty stratum reports ``cases = 0`` and ``None`` for every figure, never 0.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict

__all__ = ["CalibrationFigures", "ece", "figures"]


class CalibrationFigures(BaseModel):
    """Accuracy and calibration of one aggregator on one stratum."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cases: int
    """Cases in the stratum."""
    accuracy: float | None = None
    """Share of cases whose decided answer equals the gold answer."""
    mean_confidence: float | None = None
    """Mean stated confidence in the decided answer."""
    ece: float | None = None
    """Binned expected calibration error (10 equal-width bins)."""
    gap: float | None = None
    """``|mean confidence - accuracy|``."""


def ece(confidence: NDArray[np.float64], correct: NDArray[np.bool_], bins: int = 10) -> float:
    """Binned expected calibration error."""
    conf = np.asarray(confidence, dtype=np.float64)
    hit = np.asarray(correct, dtype=np.float64)
    if conf.size == 0:
        return 0.0
    index = np.minimum((conf * bins).astype(np.int64), bins - 1)
    total = 0.0
    for b in range(bins):
        sel = index == b
        if sel.any():
            total += float(sel.sum()) * abs(float(conf[sel].mean()) - float(hit[sel].mean()))
    return total / float(conf.size)


def figures(
    confidence: NDArray[np.float64], correct: NDArray[np.bool_], bins: int = 10
) -> CalibrationFigures:
    """Accuracy, mean confidence, ECE and gap of one aggregator on one set of cases."""
    n = int(np.asarray(correct).size)
    if n == 0:
        return CalibrationFigures(cases=0)
    acc = float(np.mean(correct))
    conf = float(np.mean(confidence))
    return CalibrationFigures(
        cases=n,
        accuracy=acc,
        mean_confidence=conf,
        ece=ece(confidence, correct, bins),
        gap=abs(conf - acc),
    )
