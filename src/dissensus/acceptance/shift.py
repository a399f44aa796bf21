"""Label-free shift check: do the deployed cases look like the calibration cases?

The guarantee of an acceptance file holds while new cases are exchangeable with its
calibration cases. Before any label is known, a *classifier two-sample test*
(Lopez-Paz & Oquab, ICLR 2017) asks whether they visibly are not: a classifier is
trained to tell calibration cases (label 0) from deployed cases (label 1) on their
decision-time features; its cross-validated ROC AUC is ~0.5 when the two samples come
from one distribution. The p-value is a permutation test of that AUC (scikit-learn's
:func:`~sklearn.model_selection.permutation_test_score`: the same cross-validation on
shuffled sample labels), so it is valid at any sample size: under exchangeability the
check flags at most an ``alpha`` share of runs.

Each case is one vector: :func:`case_vector` takes the candidate the panel's plurality
backs (the first on ties; the answer acceptance commits in most cases) and keeps its
feature row without the ``option=<label>`` indicators (the label set says nothing about
the case's difficulty). The acceptance file stores those vectors of its calibration
cases (:class:`ShiftReference`), so the check needs no labelled data at run time.

Choices where the design is silent: the classifier is a standardised L2 logistic
regression (``C = 1``, liblinear; it is there to detect a difference, not to be the best
detector, and it stays fast); stratified ``folds``-fold cross-validation (5, fewer when
a sample is smaller), shuffled with ``seed``; ``permutations`` = 200 (p-values down to
1/201); fewer than 10 cases on either side is too few to test (``p = 1``, not flagged,
the result says why); a feature absent from a case is 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from dissensus.acceptance.features import Candidate

__all__ = [
    "MIN_CASES",
    "ShiftCheck",
    "ShiftReference",
    "case_vector",
    "reference",
    "shift_check",
    "shift_check_vectors",
]

MIN_CASES = 10
"""Fewest cases on either side for the check to run."""


class ShiftReference(BaseModel):
    """The calibration cases' feature vectors, stored in the acceptance file."""

    model_config = ConfigDict(frozen=True)

    features: list[str]
    rows: list[list[float]]


class ShiftCheck(BaseModel):
    """Outcome of :func:`shift_check`."""

    model_config = ConfigDict(frozen=True)

    auc: float
    """Cross-validated ROC AUC of telling deployed from calibration cases (0.5: alike)."""
    p_value: float
    """Permutation p-value of that AUC."""
    shifted: bool
    """``p_value <= alpha``: the deployed cases look different."""
    alpha: float
    calibration_n: int
    deployed_n: int
    permutations: int
    reason: str


def case_vector(candidates: Sequence[Candidate]) -> dict[str, float]:
    """One case's vector: the plurality candidate's row without ``option=`` indicators."""
    if not candidates:
        return {}
    best = max(candidates, key=lambda c: c.features.get("cand.share", 0.0))
    return {k: v for k, v in best.features.items() if not k.startswith("option=")}


def reference(cases: Sequence[Sequence[Candidate]]) -> ShiftReference:
    """The :class:`ShiftReference` of the calibration cases."""
    vectors = [case_vector(c) for c in cases]
    names = sorted({k for v in vectors for k in v})
    return ShiftReference(
        features=names, rows=[[float(v.get(k, 0.0)) for k in names] for v in vectors]
    )


def shift_check(
    ref: ShiftReference,
    deployed: Sequence[Sequence[Candidate]],
    *,
    alpha: float = 0.1,
    permutations: int = 200,
    folds: int = 5,
    seed: int = 0,
) -> ShiftCheck:
    """Classifier two-sample test between ``ref`` and the ``deployed`` cases (module docstring)."""
    return shift_check_vectors(
        ref,
        [case_vector(c) for c in deployed],
        alpha=alpha,
        permutations=permutations,
        folds=folds,
        seed=seed,
    )


def shift_check_vectors(
    ref: ShiftReference,
    deployed: Sequence[Mapping[str, float]],
    *,
    alpha: float = 0.1,
    permutations: int = 200,
    folds: int = 5,
    seed: int = 0,
) -> ShiftCheck:
    """:func:`shift_check` on the deployed cases' vectors (:func:`case_vector`, as the run
    journals them)."""
    names = ref.features
    cal = np.asarray(ref.rows, dtype=float).reshape(len(ref.rows), len(names))
    dep = np.asarray(
        [[float(v.get(k, 0.0)) for k in names] for v in deployed], dtype=float
    ).reshape(len(deployed), len(names))
    common = {
        "alpha": alpha,
        "calibration_n": len(cal),
        "deployed_n": len(dep),
        "permutations": permutations,
    }
    if min(len(cal), len(dep)) < MIN_CASES:
        return ShiftCheck(
            auc=0.5,
            p_value=1.0,
            shifted=False,
            reason=f"too few cases to test (fewer than {MIN_CASES} on one side)",
            **common,
        )
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, permutation_test_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x = np.vstack([cal, dep])
    y = np.r_[np.zeros(len(cal), dtype=int), np.ones(len(dep), dtype=int)]
    k = min(folds, len(cal), len(dep))
    model = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, solver="liblinear"))
    auc, _, p = permutation_test_score(
        model,
        x,
        y,
        cv=StratifiedKFold(n_splits=k, shuffle=True, random_state=seed),
        n_permutations=permutations,
        random_state=seed,
        scoring="roc_auc",
    )
    shifted = bool(p <= alpha)
    reason = (
        f"the deployed cases look different from the calibration cases (AUC {auc:.2f}, p = {p:.3f})"
        if shifted
        else f"no difference detected (AUC {auc:.2f}, p = {p:.3f})"
    )
    return ShiftCheck(auc=float(auc), p_value=float(p), shifted=shifted, reason=reason, **common)
