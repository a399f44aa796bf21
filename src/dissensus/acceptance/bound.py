"""Threshold selection with a finite-sample guarantee: fixed-sequence testing + Clopper–Pearson.

The procedure of *Trust or Escalate* (Jung et al., ICLR 2025), following the
Learn-then-Test framework (Angelopoulos et al., 2021). Given calibration scores
``s_i`` (higher = more confident) and whether the committed answer was right, choose
the lowest threshold ``t`` such that accepting every case with ``s >= t`` has
precision ``>= target`` with probability ``>= 1 - delta`` over the draw of the
calibration cases, assuming the future cases are exchangeable with them.

Candidate thresholds are a fixed grid on [0, 1] (``k / grid``; ``grid=None``: the
distinct calibration scores), tested from the most confident down (fixed-sequence testing, so no multiplicity correction is needed). At
each threshold the null "error rate among accepted > 1 - target" is rejected when the
exact binomial (Clopper–Pearson) upper confidence bound at level ``delta`` on that
error rate is ``<= 1 - target``. The sequence stops at the first threshold that fails;
the selected threshold is the last one that passed.

Choices where the paper is silent:

* The grid is fixed before the data are seen (as in Learn-then-Test), 201 points by
  default; a step adds several cases at once, so one early error among the first few
  dozen accepted cases does not end the sequence as it would on a case-by-case sequence.

* Thresholds accepting fewer than ``min_accepted`` cases are *not tested* (skipped,
  neither passing nor stopping the sequence): a bound on five cases is meaningless and
  would stop the sequence at once. Nor are thresholds accepting fewer cases than
  :func:`fewest_tested` — the fewest with which an error rate of *half* the allowed one
  passes the bound (77 at target 0.95 and delta 0.1, 38 at 0.9). A test on fewer
  cases has almost no power: one confidently wrong answer among the first few dozen
  (agents agreeing on the same wrong answer score highest) fails it and ends the
  sequence, although the threshold below, with ten times the cases, would pass. Both
  rules depend on the number of cases a threshold accepts, never on the labels, so the
  sequence is still fixed before the labels are looked at and the guarantee is
  unchanged; what they change is how often something passes. The selected threshold
  therefore always accepts at least that many calibration cases.
* With strata, each stratum runs its own fixed sequence (a stratum whose accepted count
  is still below ``min_accepted`` does not veto); the common threshold is the most
  conservative of the per-stratum ones, so it lies in every stratum's passing set.
  When a stratum passes no threshold at all, nothing passes.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np
from pydantic import BaseModel, ConfigDict

from dissensus.errors import ConfigError, InputError

__all__ = [
    "DEFAULT_GRID",
    "StratumFigures",
    "ThresholdChoice",
    "clopper_pearson_upper",
    "fewest_tested",
    "select_threshold",
]


DEFAULT_GRID = 200
"""Candidate thresholds are ``k / DEFAULT_GRID`` for ``k`` from ``DEFAULT_GRID`` down to 0."""


@lru_cache(maxsize=64)
def fewest_tested(target: float, delta: float) -> int:
    """Fewest accepted cases a tested threshold needs: the first ``n`` at which
    ``floor(n * (1 - target) / 2)`` errors pass the Clopper–Pearson bound."""
    allowed = 1.0 - target
    n = 1
    while clopper_pearson_upper(int(n * allowed / 2), n, delta) > allowed:
        n += 1
    return n


def clopper_pearson_upper(errors: int, n: int, delta: float) -> float:
    """One-sided exact upper confidence bound (level ``1 - delta``) on a binomial rate."""
    if n <= 0:
        return 1.0
    if errors >= n:
        return 1.0
    from scipy.stats import beta  # on first use: scipy.stats takes seconds to import

    return float(beta.ppf(1.0 - delta, errors + 1, n - errors))


class StratumFigures(BaseModel):
    """Calibration figures of one stratum at the selected threshold."""

    model_config = ConfigDict(frozen=True)

    stratum: str
    n: int
    """Calibration cases in the stratum."""
    accepted: int
    """Cases accepted at the selected threshold."""
    correct: int
    """Accepted cases whose committed answer was right."""
    error_upper: float
    """Clopper–Pearson upper bound on the error rate among accepted."""
    threshold: float | None
    """This stratum's own fixed-sequence threshold (``None``: none passed)."""


class ThresholdChoice(BaseModel):
    """Outcome of :func:`select_threshold`."""

    model_config = ConfigDict(frozen=True)

    threshold: float | None
    """Accept when ``score >= threshold``; ``None`` when no threshold passed."""
    reason: str
    accepted: int
    correct: int
    error_upper: float
    strata: list[StratumFigures]


def _candidates(scores: np.ndarray, grid: int | None) -> list[float]:
    if grid is None:
        return sorted({float(x) for x in scores}, reverse=True)
    return [k / grid for k in range(grid, -1, -1)]


def _sequence(
    scores: np.ndarray,
    correct: np.ndarray,
    target: float,
    delta: float,
    min_accepted: int,
    grid: int | None,
) -> float | None:
    """The last threshold that passes the fixed sequence (``None`` if none passes)."""
    chosen: float | None = None
    fewest = max(min_accepted, fewest_tested(target, delta))
    for t in _candidates(scores, grid):
        mask = scores >= t
        accepted = int(mask.sum())
        if accepted < fewest:
            continue
        errors = accepted - int(correct[mask].sum())
        if clopper_pearson_upper(errors, accepted, delta) > 1.0 - target:
            break
        chosen = t
    return chosen


def _figures(
    scores: np.ndarray, correct: np.ndarray, t: float | None, delta: float
) -> tuple[int, int, float]:
    if t is None:
        return 0, 0, 1.0
    mask = scores >= t
    acc = int(mask.sum())
    right = int(correct[mask].sum())
    return acc, right, clopper_pearson_upper(acc - right, acc, delta)


def select_threshold(
    scores: Sequence[float],
    correct: Sequence[bool],
    *,
    target: float,
    delta: float,
    min_accepted: int,
    strata: Sequence[str] | None = None,
    grid: int | None = DEFAULT_GRID,
) -> ThresholdChoice:
    """Fixed-sequence threshold for precision ``>= target`` at level ``delta`` (see module docstring)."""
    if not 0.0 < target < 1.0 or not 0.0 < delta < 1.0:
        raise ConfigError("target and delta must lie in (0, 1)")
    sc = np.asarray(scores, dtype=float)
    ok = np.asarray(correct, dtype=bool)
    if sc.shape != ok.shape:
        raise InputError("scores and correct differ in length")
    labels = [str(x) for x in strata] if strata is not None else ["all"] * len(sc)
    names = sorted(set(labels))
    lab = np.asarray(labels, dtype=object)
    per: dict[str, float | None] = {}
    for name in names:
        m = lab == name
        per[name] = _sequence(sc[m], ok[m], target, delta, min_accepted, grid)
    failed = [k for k, v in per.items() if v is None]
    threshold: float | None = None
    if not failed and names:
        threshold = max(v for v in per.values() if v is not None)
    acc, right, upper = _figures(sc, ok, threshold, delta)
    if threshold is not None and acc < min_accepted:
        threshold = None
        acc, right, upper = 0, 0, 1.0
        failed = ["all"]
    figures = []
    for name in names:
        m = lab == name
        a, r, u = _figures(sc[m], ok[m], threshold, delta)
        figures.append(
            StratumFigures(
                stratum=name,
                n=int(m.sum()),
                accepted=a,
                correct=r,
                error_upper=u,
                threshold=per[name],
            )
        )
    if threshold is None:
        if not names:
            reason = "no calibration cases"
        else:
            where = ", ".join(failed) if strata is not None else "the calibration set"
            reason = (
                f"no threshold reaches precision >= {target:g} at level delta={delta:g} "
                f"with >= {min_accepted} accepted cases in {where}"
            )
    else:
        reason = (
            f"accept score >= {threshold:.4f}: {right}/{acc} right on calibration, "
            f"error upper bound {upper:.3f} <= {1 - target:.3f}"
        )
    return ThresholdChoice(
        threshold=threshold,
        reason=reason,
        accepted=acc,
        correct=right,
        error_upper=upper,
        strata=figures,
    )
