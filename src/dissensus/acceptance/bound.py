"""Threshold selection with a finite-sample guarantee: fixed-sequence testing + Clopper–Pearson.

The procedure of *Trust or Escalate* (Jung et al., ICLR 2025), following the
Learn-then-Test framework (Angelopoulos et al., 2021). Given calibration scores
``s_i`` (higher = more confident) and whether the committed answer was right, choose
the lowest threshold ``t`` such that accepting every case with ``s >= t`` has
precision ``>= target`` with probability ``>= 1 - delta`` over the draw of the
calibration cases, assuming the future cases are exchangeable with them.

Candidate thresholds are tested from the most confident down (fixed-sequence testing,
so no multiplicity correction is needed). At each threshold the null "error rate among
accepted > 1 - target" is rejected when the exact binomial (Clopper–Pearson) upper
confidence bound at level ``delta`` on that error rate is ``<= 1 - target``. The
sequence stops at the first tested threshold that fails; the selected threshold is the
last one that passed.

Choices where the paper is silent:

* **Which thresholds, from where (label-free).** By default (:class:`CountGrid`) the
  thresholds are the calibration scores at which the number of accepted cases reaches
  ``2 x fewest_tested`` (see below; at most a fifth of the ``n`` cases, never fewer
  than ``fewest_tested``), then every ``n / 40`` more cases (``CountGrid.steps``), down
  to all ``n``. The sequence depends on the scores and the number of cases, never on whether
  an answer was right, so it is fixed before the labels are looked at and the
  guarantee is that of a fixed sequence. Why counts rather than a grid on [0, 1]: the
  first test is the one that decides everything (a failure ends the sequence), and a
  test on too few cases fails on one confidently wrong answer although the thresholds
  below, with many more cases, would pass; starting at twice the fewest useful count
  and stepping by a fortieth of the cases avoids those all-or-nothing failures, and
  works the same whether a score family's values are spread over [0, 1] (a model's
  probability) or sit on a few levels (a vote share). ``grid=K`` keeps the older
  ``k / K`` grid and ``grid=None`` tests every distinct score.
* Thresholds accepting fewer than ``min_accepted`` cases are *not tested* (skipped,
  neither passing nor stopping the sequence), nor are thresholds accepting fewer cases
  than :func:`fewest_tested` — the fewest with which an error rate of *half* the allowed
  one passes the bound (77 at target 0.95 and delta 0.1, 38 at 0.9). Both rules depend
  on the number of cases a threshold accepts, never on the labels.
* **Strata.** One fixed sequence for every stratum at once: a threshold is tested only
  when it accepts at least that fewest count in *every* stratum, and passes only when
  the bound holds in every stratum (an intersection-union test, valid at ``delta``
  for each stratum); the first tested threshold failing in any stratum ends the
  sequence. A stratum that did not test a threshold therefore never lets it pass.
  Each stratum's own sequence (``StratumFigures.threshold``) is reported beside it.
  When no threshold passes, the reason names the strata whose own sequence passed
  nothing, the first :data:`NAMED_AT_MOST` of them and how many more (a calibration
  with hundreds of strata must not print a line of hundreds of names). A stratum with
  fewer cases than a tested threshold must accept (``max(min_accepted,
  fewest_tested(target, delta))``) can never test one, so the stratified sequence
  would pass nothing whatever the scores: :func:`dissensus.acceptance.calibrate.calibrate`
  refuses such strata before it fits anything.
* **The guarantee in words.** Its figures are written rounded down, never up
  (:func:`floor_words`, six significant digits of the value as written, ``1 - delta``
  taken exactly by :func:`confidence`): a probability below 1 is never shown as 1, nor a
  share below 100% as 100.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import ROUND_FLOOR, Decimal
from functools import lru_cache

import numpy as np
from pydantic import BaseModel, ConfigDict

from dissensus.errors import ConfigError, InputError

__all__ = [
    "DEFAULT_GRID",
    "DEFAULT_SEQUENCE",
    "CountGrid",
    "Grid",
    "StratumFigures",
    "ThresholdChoice",
    "clopper_pearson_upper",
    "confidence",
    "fewest_tested",
    "floor_words",
    "named",
    "percent_words",
    "select_threshold",
    "target_words",
]


DEFAULT_GRID = 200
"""Candidate thresholds are ``k / DEFAULT_GRID`` for ``k`` from ``DEFAULT_GRID`` down to 0."""


@lru_cache(maxsize=64)
def fewest_tested(target: float, delta: float) -> int:
    """Fewest accepted cases a tested threshold needs: the first ``n`` at which
    ``floor(n * (1 - target) / 2)`` errors pass the Clopper–Pearson bound (found in a
    few dozen bounds, whatever the target: the library takes any target below 1). A
    target of 1 or more (or not a number) is an :class:`~dissensus.errors.InputError`
    naming it: no count of cases meets it, and the search would not end."""
    if not target < 1.0:  # nan fails too
        raise InputError(f"target is {target}: a precision target is below 1")
    allowed = 1.0 - target

    def errors(n: int) -> int:
        return int(n * allowed / 2)

    def passes(n: int) -> bool:
        return clopper_pearson_upper(errors(n), n, delta) <= allowed

    # The cases n that allow k errors form a block; within it the bound falls as n grows,
    # so the block's last n says whether any passes, and a bisection finds the first.
    # That is the first n a count from 1 finds, in a few dozen bounds where the count
    # took one per n (388,971 of them at target 0.99999, a minute).
    n = 1
    while True:
        k = errors(n)
        step = 1
        while errors(n + step) == k:
            step *= 2
        lo, hi = n + step // 2, n + step  # errors(lo) == k < errors(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if errors(mid) == k else (lo, mid)
        last = lo
        if not passes(last):
            n = last + 1
            continue
        lo, hi = n, last
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if passes(mid) else (mid + 1, hi)
        return lo


def _exact(value: float | Decimal) -> Decimal:
    """``value`` as the decimal it is written as (a float's shortest spelling: ``0.995``)."""
    return value if isinstance(value, Decimal) else Decimal(repr(float(value)))


def confidence(delta: float) -> Decimal:
    """``1 - delta``, exactly (``1 - 0.07`` is ``0.93``, where floats make it
    ``0.9299999999999999``)."""
    return Decimal(1) - _exact(delta)


def floor_words(value: float | Decimal, scale: int = 1) -> str:
    """``value * scale`` written with at most six significant digits, rounded *down*
    (``ROUND_FLOOR``), never up: ``0.9``, ``0.995``, ``0.999999`` for ``1 - 1e-7`` (six
    digits rounded to nearest said ``1``, a certainty no finite calibration gives). A
    value below ``scale`` is never written as ``scale``."""
    exact = _exact(value) * scale
    if exact == 0:
        return "0"
    step = Decimal(1).scaleb(exact.adjusted() - 5)  # the sixth significant digit
    shown = exact.quantize(step, rounding=ROUND_FLOOR).normalize()
    return format(shown, "f")


def target_words(target: float | Decimal) -> str:
    """A probability as a guarantee writes it (a target precision, a confidence ``1 -
    delta``: pass :func:`confidence`): two decimals (``0.90``, ``0.95``) when they show it
    exactly, else :func:`floor_words` (``0.975``, ``0.999``, ``0.996``; two decimals would
    say ``0.97`` and ``1.00``, a precision no answer can fall below, a certainty no bound
    gives; and a value is never rounded up, so ``1 - 1e-7`` is ``0.999999``, not ``1``)."""
    exact = _exact(target)
    two = exact.quantize(Decimal("0.01"), rounding=ROUND_FLOOR)
    return f"{two:f}" if two == exact else floor_words(exact)


def percent_words(share: float | Decimal) -> str:
    """``share`` in percent as a guarantee writes it: ``90``, ``99.5``, ``99.6``, rounded
    down (:func:`floor_words`: never to ``100``, which would promise every answer right,
    or certainty)."""
    return floor_words(share, 100)


def plain_guarantee(target: float, delta: float, calibration_n: int) -> str:
    """An acceptance file's guarantee in plain words, as every door writes it ("At least
    90 of every 100 automatic decisions should be right (95% confidence) while new cases
    resemble the 150 calibration cases"), its figures never rounded up (:func:`percent_words`)."""
    return (
        f"At least {percent_words(target)} of every 100 automatic decisions should be right "
        f"({percent_words(confidence(delta))}% confidence) while new cases resemble the "
        f"{calibration_n} calibration cases"
    )


def clopper_pearson_upper(errors: int, n: int, delta: float) -> float:
    """One-sided exact upper confidence bound (level ``1 - delta``) on a binomial rate.

    ``errors`` below 0 or ``delta`` outside (0, 1) (or not a number) is an
    :class:`~dissensus.errors.InputError` naming the argument: such a call answered
    ``nan``, which compares as neither above nor below a target."""
    if errors < 0:
        raise InputError(f"errors is {errors}: a count of errors is 0 or more")
    if not 0.0 < delta < 1.0:  # nan fails too
        raise InputError(f"delta is {delta}: a confidence level's delta is in (0, 1)")
    if n <= 0:
        return 1.0
    if errors >= n:
        return 1.0
    from scipy.stats import beta  # on first use: scipy.stats takes seconds to import

    return float(beta.ppf(1.0 - delta, errors + 1, n - errors))


class StratumFigures(BaseModel):
    """Calibration figures of one stratum at the selected threshold."""

    model_config = ConfigDict(frozen=True, strict=True)

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

    @property
    def cases(self) -> int:
        """Calibration cases the sequence ran on (every stratum's together)."""
        return sum(s.n for s in self.strata)


class CountGrid(BaseModel):
    """The label-free sequence: thresholds where the accepted count reaches fixed counts.

    The thresholds tested are the calibration scores at which the number of accepted
    cases first reaches ``first``, then every ``step`` more, down to every case, where
    ``first = max(fewest, min(start * fewest, start_share * n))`` (``fewest`` is
    :func:`fewest_tested`, never below ``min_accepted``) and ``step = ceil(n / steps)``
    for ``n`` calibration cases (all strata pooled).
    Only the scores and the case count enter, never a label.
    """

    model_config = ConfigDict(frozen=True)

    start: float = 2.0
    """The first tested threshold accepts up to this many times :func:`fewest_tested` cases..."""
    start_share: float = 0.2
    """...but no more than this share of the calibration cases (never below the fewest)."""
    steps: int = 40
    """About this many thresholds are tested from the first down to accepting every case."""

    def counts(self, n: int, fewest: int) -> list[int]:
        """Accepted counts at which a threshold is tested, increasing."""
        first = max(fewest, min(math.ceil(self.start * fewest), math.ceil(self.start_share * n)))
        if first > n:
            return []
        step = max(1, math.ceil(n / self.steps))
        return list(range(first, n + 1, step))


DEFAULT_SEQUENCE = CountGrid()
"""The default sequence of thresholds (see :class:`CountGrid`)."""

Grid = int | CountGrid | None
"""``k / grid`` points, a :class:`CountGrid`, or ``None``: every distinct calibration score."""


def _candidates(scores: np.ndarray, grid: Grid, fewest: int) -> list[float]:
    if grid is None:
        return sorted({float(x) for x in scores}, reverse=True)
    if isinstance(grid, int):
        return [k / grid for k in range(grid, -1, -1)]
    ordered = np.sort(scores)[::-1]
    picked = [float(ordered[c - 1]) for c in grid.counts(len(ordered), fewest)]
    return sorted(set(picked), reverse=True)


def _sequence(
    scores: np.ndarray,
    correct: np.ndarray,
    groups: list[np.ndarray],
    target: float,
    delta: float,
    min_accepted: int,
    grid: Grid,
) -> float | None:
    """The last threshold that passes the fixed sequence (``None`` if none passes).

    ``groups`` are the strata's masks: a threshold is *tested* only when every stratum
    accepts at least the fewest cases a test needs there, and *passes* only when the
    bound holds in every stratum; the first tested threshold that fails ends the sequence.
    """
    chosen: float | None = None
    fewest = max(min_accepted, fewest_tested(target, delta))
    for t in _candidates(scores, grid, fewest):
        accepted_mask = scores >= t
        tested = True
        passed = True
        for g in groups:
            mask = accepted_mask & g
            accepted = int(mask.sum())
            if accepted < fewest:
                tested = False
                break
            errors = accepted - int(correct[mask].sum())
            if clopper_pearson_upper(errors, accepted, delta) > 1.0 - target:
                passed = False
        if not tested:
            continue
        if not passed:
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


NAMED_AT_MOST = 5
"""A reason names at most this many strata, then how many more there are."""


def named(strata: Sequence[str], at_most: int = NAMED_AT_MOST) -> str:
    """``a, b, c`` — the first ``at_most`` of ``strata``, then ``and N more``."""
    shown = ", ".join(strata[:at_most])
    rest = len(strata) - at_most
    return f"{shown} and {rest} more" if rest > 0 else shown


def select_threshold(
    scores: Sequence[float],
    correct: Sequence[bool],
    *,
    target: float,
    delta: float,
    min_accepted: int,
    strata: Sequence[str] | None = None,
    grid: Grid = DEFAULT_SEQUENCE,
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
        per[name] = _sequence(
            sc[m], ok[m], [np.ones(int(m.sum()), dtype=bool)], target, delta, min_accepted, grid
        )
    threshold: float | None = None
    if names:
        threshold = _sequence(
            sc, ok, [lab == name for name in names], target, delta, min_accepted, grid
        )
    failed = [k for k, v in per.items() if v is None] if threshold is None else []
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
            where = (
                (named(failed) if failed else "every stratum at once")
                if strata is not None
                else "the calibration set"
            )
            reason = (
                f"no threshold reaches precision >= {target:g} at level {delta:g} (the share "
                "of delta this test spends) "
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
