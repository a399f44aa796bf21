"""Label-free shift check: do the deployed cases look like the calibration cases?

The guarantee of an acceptance file holds while new cases are exchangeable with its
calibration cases. Before any label is known, a *classifier two-sample test*
(Lopez-Paz & Oquab, ICLR 2017) asks whether they visibly are not: a classifier learns to
tell calibration cases (label 0) from deployed cases (label 1) on their decision-time
features, and a classifier that cannot (an AUC near 0.5) says the two samples look alike.

**The test is a sample-split one.** The calibration vectors and the deployed vectors are
each split at random (seeded) into a *fitting* half and a *testing* half. The classifier
is fitted on the fitting halves only; on the testing halves it scores every case, and
the p-value is the one-sided Mann–Whitney U test of those scores (deployed scores higher
than calibration scores; :func:`scipy.stats.mannwhitneyu`, ``alternative="greater"``).
The AUC reported is the testing halves' AUC, ``U / (n1 * n2)``. Under exchangeability
the p-value is valid: given the fitting halves the classifier is a fixed function, and
the testing cases, calibration and deployed alike, are exchangeable, so their scores
are too, which is all the rank test needs. Unlike a permutation p-value it can be
arbitrarily small (the level of the 50th check of a file is about 1e-5; see
:func:`check_level`), it costs one fit instead of hundreds, and the check takes
milliseconds rather than seconds. It pays with power: half of each sample fits, half
tests.

**A level over the file's life.** A check runs at a level :func:`check_level` gives it:
``shift_alpha`` (the file's lifetime level, 0.1 by default) is split in two halves, one
for the checks a run makes of its own cases and one for the service's watch, and each
half is spent over its sequence of checks, the i-th at ``(alpha / 2) * 6 / (pi^2 i^2)``
(``sum 1/i^2 = pi^2 / 6``). Whatever the number of checks, the levels of one journal's
checks of one file sum to at most ``alpha``, so by the union bound a file whose cases
stay exchangeable is *ever* flagged (falsely held under ``on_shift: escalate``) with
probability at most ``alpha``. How the pipeline and the service number their checks:
:mod:`dissensus.pipeline.shift` and :mod:`dissensus.serve.shift_watch`.

Each case is one vector: :func:`case_vector` takes the candidate the panel's plurality
backs (the first on ties; the answer acceptance commits in most cases) and keeps its
feature row, with the ``option=<label>`` indicator of the label it backs. The acceptance
file stores those vectors of its calibration cases (:class:`ShiftReference`), so the
check needs no labelled data at run time. **The label mix is part of the vector when the
label set is closed**: a reference keeps the ``option=`` columns when its calibration
cases' candidates hold at most :data:`MAX_OPTION_LABELS` (10) labels (a closed set such
as ``A``/``B`` or ``1``/``2``, where which label the panels back is a property of the
cases: calibration cases chosen by their gold, all ``1``, and deployed cases whose panels
back ``2`` half of the time are told apart), and drops them above that (free answers such
as numbers, where each case's label is its own and says nothing about the case). Deployed
vectors are read on the reference's columns, so a file made before the label mix was
kept (no ``option=`` columns) checks as it did. Under exchangeability the label a panel
backs is exchangeable like every other feature, so the test stays valid.

Choices this module makes: the classifier is a standardised L2 logistic
regression (``C = 1``, liblinear; it is there to detect a difference, not to be the best
detector, and it stays fast), its score the log-odds; each side's fitting half is the
smaller half (``n // 2`` cases, a seeded draw), its testing half the rest; fewer than
:data:`MIN_CASES` (10) cases on either side is too few to test (``p = 1``, not flagged,
the result says why), so every half holds at least 5 cases. Each sample is first put
in one order fixed by its vectors' values, and the split is drawn with the seed and a
digest of both samples, so the check depends on which vectors the samples hold, not on
the order they came in (a resumed run whose cases were journalled in another order
checks the same), and each pair of samples gets a split of its own (one drawn by the
seed alone would take the same positions of the value order for every pair of samples
of those sizes: no random half, and a biased test). The p-value is exact wherever it can be had
cheaply: the exact Mann–Whitney p-value when the testing scores hold no ties and
``n1 * n2`` is at most :data:`EXACT_MAX` (2,500); with ties (identical vectors score
alike, and discrete features make identical vectors common), the exact tail *given the
ties* (a dynamic programme over the groups of equal scores) at the same sizes, and at
any size when the scores take only two values (then a hypergeometric tail). Beyond that,
with ties, the normal approximation on mid-ranks with the continuity correction and the
variance of *untied* ranks: the usual tie-corrected variance makes the tail far too
small at the levels of late checks when one value holds most scores (one deployed case
above 169 tied scores: p = 0.003 where the exact chance is 20/170 = 0.12); the untied
variance is larger there, so that approximation is conservative, and weak, with heavy
ties. The AUC reported counts a tie as half, and a check flags only where that AUC is
above 0.5 too.
A feature absent from a case is 0; a value that is not a finite number
leaves the check untested (``p = 1``, the reason says so). ``permutations`` and ``folds``, the settings of the
permutation test this check used to be, are accepted and ignored; outcomes that
journalled ``permutations`` still read (:class:`ShiftCheck` keeps the field, 0 now).
"""

from __future__ import annotations

import hashlib
import math
import warnings
from collections.abc import Mapping, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from dissensus.acceptance.features import MAX_OPTION_LABELS, OPTION_PREFIX, Candidate

__all__ = [
    "EXACT_MAX",
    "MAX_OPTION_LABELS",
    "MIN_CASES",
    "ShiftCheck",
    "ShiftReference",
    "case_vector",
    "check_level",
    "reference",
    "shift_check",
    "shift_check_vectors",
]

MIN_CASES = 10
"""Fewest cases on either side for the check to run."""

EXACT_MAX = 2500
"""Largest ``n1 * n2`` of the testing halves for which the exact p-value is used."""


def check_level(file_alpha: float, check: int, *, share: float = 0.5) -> float:
    """The level of the ``check``-th check (1, 2, ...) of a sequence that may spend
    ``share`` of the file's lifetime level ``file_alpha``: ``share * file_alpha * 6 /
    (pi^2 check^2)``, so the levels of the whole sequence sum to ``share * file_alpha``."""
    if check < 1:
        raise ValueError(f"checks are numbered from 1, not {check}")
    return share * file_alpha * 6.0 / (math.pi**2 * check**2)


class ShiftReference(BaseModel):
    """The calibration cases' feature vectors, stored in the acceptance file."""

    model_config = ConfigDict(frozen=True, strict=True)

    features: list[str]
    rows: list[list[float]]

    def copies_of_one_row(self) -> bool:
        """Whether the reference holds two or more rows that are all one vector: no
        sample of calibration cases to compare new cases with (every new case unlike
        that one vector would look shifted)."""
        return len(self.rows) >= 2 and all(row == self.rows[0] for row in self.rows[1:])


class ShiftCheck(BaseModel):
    """Outcome of :func:`shift_check`."""

    model_config = ConfigDict(frozen=True)

    auc: float
    """ROC AUC of telling deployed from calibration cases on the testing halves (0.5: alike)."""
    p_value: float
    """One-sided Mann–Whitney p-value of the testing halves' scores."""
    shifted: bool
    """``p_value <= alpha``: the deployed cases look different."""
    alpha: float
    """The level this check was tested at."""
    calibration_n: int
    deployed_n: int
    permutations: int = 0
    """Label permutations of the p-value: 0 (the sample-split test has none); checks
    made before it journalled theirs."""
    reason: str
    tested_n: tuple[int, int] = (0, 0)
    """Calibration and deployed cases in the testing halves (0, 0 when not tested)."""
    method: str = ""
    """How the p-value was computed (``exact`` or ``asymptotic``; empty when not tested)."""


def case_vector(candidates: Sequence[Candidate]) -> dict[str, float]:
    """One case's vector: the plurality candidate's row, its ``option=<label>`` indicator
    included (the label it backs)."""
    if not candidates:
        return {}
    best = max(candidates, key=lambda c: c.features.get("cand.share", 0.0))
    return dict(best.features)


def reference(cases: Sequence[Sequence[Candidate]]) -> ShiftReference:
    """The :class:`ShiftReference` of the calibration cases: every feature of their
    vectors, the ``option=`` columns only when the candidates hold at most
    :data:`MAX_OPTION_LABELS` labels (module docstring)."""
    vectors = [case_vector(c) for c in cases]
    labels = {cand.label for rows in cases for cand in rows}
    names = sorted({k for v in vectors for k in v})
    if len(labels) > MAX_OPTION_LABELS:
        names = [k for k in names if not k.startswith(OPTION_PREFIX)]
    return ShiftReference(
        features=names, rows=[[float(v.get(k, 0.0)) for k in names] for v in vectors]
    )


def shift_check(
    ref: ShiftReference,
    deployed: Sequence[Sequence[Candidate]],
    *,
    alpha: float = 0.1,
    seed: int = 0,
    permutations: int | None = None,
    folds: int | None = None,
) -> ShiftCheck:
    """Classifier two-sample test between ``ref`` and the ``deployed`` cases (module docstring)."""
    return shift_check_vectors(
        ref,
        [case_vector(c) for c in deployed],
        alpha=alpha,
        seed=seed,
        permutations=permutations,
        folds=folds,
    )


def _ignored(permutations: int | None, folds: int | None) -> None:
    if permutations is not None or folds is not None:
        warnings.warn(
            "shift_check's permutations and folds are deprecated and ignored: the check is "
            "a sample-split test with a Mann-Whitney p-value",
            DeprecationWarning,
            stacklevel=3,
        )


def _canonical(rows: np.ndarray) -> np.ndarray:
    """``rows`` in one order fixed by their values (lexicographic), so that what follows
    depends on which vectors a sample holds, not on the order they came in."""
    if rows.shape[0] < 2 or rows.shape[1] == 0:
        return rows
    return rows[np.lexsort(rows.T[::-1])]


def _halves(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Indices of a seeded fitting half (``n // 2``) and testing half (the rest) of ``n``."""
    order = rng.permutation(n)
    return np.sort(order[: n // 2]), np.sort(order[n // 2 :])


def _tied_tail(small: np.ndarray, other: np.ndarray) -> float:
    """P(the mid-rank sum of ``len(small)`` scores drawn at random from the pooled scores
    is at least that of ``small``): the exact tail given the ties, by dynamic programming
    over the groups of equal scores (doubled mid-ranks, so sums are integers)."""
    from scipy.special import comb
    from scipy.stats import rankdata

    n = len(small)
    pooled = np.r_[small, other]
    doubled = np.rint(2 * rankdata(pooled)).astype(np.int64)
    observed = int(doubled[:n].sum())
    values, counts = np.unique(doubled, return_counts=True)
    top = int(np.sort(doubled)[-n:].sum()) if n else 0
    ways = np.zeros((n + 1, top + 1))
    ways[0, 0] = 1.0
    for value, count in zip(values.tolist(), counts.tolist(), strict=True):
        grown = ways.copy()  # j = 0: none of this group drawn
        for j in range(1, min(count, n) + 1):
            shift = j * value
            if shift > top:
                break
            grown[j:, shift:] += comb(count, j) * ways[: n + 1 - j, : top + 1 - shift]
        ways = grown
    total = float(comb(len(pooled), n))
    return float(ways[n, observed:].sum() / total)


def _p_value(dep: np.ndarray, cal: np.ndarray) -> tuple[float, float, str]:
    """The AUC of ``dep`` over ``cal`` (a tie counts half), its one-sided p-value and how
    it was computed (module docstring)."""
    from scipy.stats import hypergeom, mannwhitneyu, norm, rankdata

    n_dep, n_cal = len(dep), len(cal)
    pooled = np.r_[dep, cal]
    u = float(rankdata(pooled)[:n_dep].sum() - n_dep * (n_dep + 1) / 2)
    auc = u / (n_dep * n_cal)
    distinct = np.unique(pooled)
    if len(distinct) == 1:
        return auc, 1.0, "exact"  # every score one value: no evidence either way
    if len(distinct) == len(pooled):
        if n_dep * n_cal <= EXACT_MAX:
            p = float(mannwhitneyu(dep, cal, alternative="greater", method="exact").pvalue)
            return auc, p, "exact"
    elif len(distinct) == 2:
        # Two values: the deployed scores' mid-rank sum grows with how many of them hold
        # the higher value, a hypergeometric count.
        high = int((pooled == distinct[1]).sum())
        above = int((dep == distinct[1]).sum())
        return auc, float(hypergeom(n_dep + n_cal, high, n_dep).sf(above - 1)), "exact"
    elif n_dep * n_cal <= EXACT_MAX:
        # The exact tail given the ties, on the smaller side (the mid-rank sums of the two
        # sides add up to a constant, so "deployed high" is "calibration low").
        p = _tied_tail(dep, cal) if n_dep <= n_cal else _tied_tail(-cal, -dep)
        return auc, p, "exact"
    # Mid-ranks, the variance of untied ranks (no tie correction) and the continuity
    # correction: with ties that variance is larger than the true one, which keeps the
    # tail honest where one value holds most scores (the tie-corrected variance makes it
    # far too small at the levels of late checks).
    sd = math.sqrt(n_dep * n_cal * (n_dep + n_cal + 1) / 12.0)
    p = float(norm.sf((u - n_dep * n_cal / 2.0 - 0.5) / sd))
    return auc, p, "asymptotic"


def shift_check_vectors(
    ref: ShiftReference,
    deployed: Sequence[Mapping[str, float]],
    *,
    alpha: float = 0.1,
    seed: int = 0,
    permutations: int | None = None,
    folds: int | None = None,
) -> ShiftCheck:
    """:func:`shift_check` on the deployed cases' vectors (:func:`case_vector`, as the run
    journals them)."""
    _ignored(permutations, folds)
    names = ref.features
    common = {"alpha": alpha, "calibration_n": len(ref.rows), "deployed_n": len(deployed)}
    try:
        # + 0.0: -0.0 and 0.0 are one value (they sort alike but their bytes differ).
        cal = np.asarray(ref.rows, dtype=float).reshape(len(ref.rows), len(names)) + 0.0
        dep = (
            np.asarray(
                [[float(v.get(k, 0.0)) for k in names] for v in deployed], dtype=float
            ).reshape(len(deployed), len(names))
            + 0.0
        )
    except (TypeError, ValueError) as exc:
        return ShiftCheck(
            auc=0.5,
            p_value=1.0,
            shifted=False,
            reason=f"not tested: the vectors are malformed ({exc})",
            **common,
        )
    if min(len(cal), len(dep)) < MIN_CASES:
        return ShiftCheck(
            auc=0.5,
            p_value=1.0,
            shifted=False,
            reason=f"too few cases to test (fewer than {MIN_CASES} on one side)",
            **common,
        )
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if not names or not (np.isfinite(cal).all() and np.isfinite(dep).all()):
        return ShiftCheck(
            auc=0.5,
            p_value=1.0,
            shifted=False,
            reason="not tested: "
            + ("the vectors have no features" if not names else "a value is not a finite number"),
            **common,
        )
    cal, dep = _canonical(cal), _canonical(dep)
    # The split is drawn with the seed *and* a digest of the two samples: the same samples
    # get the same split in any order, and a split drawn by the seed alone would pick the
    # same positions of the value order in every check of samples of these sizes, which
    # is no random half of the data (it would lean to some values, differently on each side).
    digest = hashlib.blake2b(cal.tobytes() + b"|" + dep.tobytes(), digest_size=8).digest()
    rng = np.random.default_rng([seed, int.from_bytes(digest, "big")])
    cal_fit, cal_test = _halves(len(cal), rng)
    dep_fit, dep_test = _halves(len(dep), rng)
    x = np.vstack([cal[cal_fit], dep[dep_fit]])
    y = np.r_[np.zeros(len(cal_fit), dtype=int), np.ones(len(dep_fit), dtype=int)]
    model = make_pipeline(
        StandardScaler(), LogisticRegression(C=1.0, solver="liblinear", random_state=0)
    )
    model.fit(x, y)
    dep_scores = model.decision_function(dep[dep_test])
    cal_scores = model.decision_function(cal[cal_test])
    auc, p, method = _p_value(dep_scores, cal_scores)
    n_dep, n_cal = len(dep_scores), len(cal_scores)
    p = min(1.0, max(0.0, p)) if math.isfinite(p) else 1.0
    # A flag needs the deployed cases to score higher as well (AUC above 0.5).
    shifted = bool(p <= alpha and auc > 0.5)
    figures = f"AUC {auc:.2f}, p = {p:.2g}, level {alpha:.2g}"
    reason = (
        f"the deployed cases look different from the calibration cases ({figures})"
        if shifted
        else f"no difference detected ({figures})"
    )
    return ShiftCheck(
        auc=auc,
        p_value=p,
        shifted=shifted,
        reason=reason,
        tested_n=(n_cal, n_dep),
        method=method,
        **common,
    )
