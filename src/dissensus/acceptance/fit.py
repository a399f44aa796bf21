"""Fit the acceptance model: a logistic regression over candidate rows, cross-fitted scores.

Each calibration case contributes one row per candidate answer
(:mod:`dissensus.acceptance.features`), labelled 1 when the candidate is the gold
answer. A scikit-learn :class:`~sklearn.linear_model.LogisticRegression` on
standardised features gives ``P(candidate is right)``; the case's score is the best
candidate's probability and its committed answer is that candidate.

The scores used to choose the threshold are *out-of-fold*: the cases are split into
folds (grouped by stratum when strata are given, so a stratum is never scored by a
model that saw it; otherwise cases the caller marks as one — ``keys``, such as a hash
of each panel — share a fold, so a copy is never scored by a model trained on its
twin), and each fold is scored by a model fitted on the others. The
deployed models are *those same fold models* (:class:`CrossFit`), not a model refitted
on every case: a new case is scored by one fold model, chosen by its stratum when the
calibration was stratified and the stratum is known (the model that never saw that
stratum, as in calibration), otherwise by a hash of what the case's agents said (each
agent's name, answer and reasoning, :func:`case_key` and :func:`fold_of_key`: every door
that decides a panel has them; not the panel's id, which a door may make afresh for
each request), or, for a caller holding only candidate rows, a hash of the rows
(:func:`fold_index`); both are uniform over the folds as the calibration's fold sizes
are. The panel, not the rows, decides the fold wherever it is known: the rows hold
similarities of embeddings, whose last bits differ with the batch an encoder computed
them in, and a hash of them would send one case to different fold models through
different doors (or with a warm and a cold embedding cache). A new
case's score is therefore drawn from the same distribution as the calibration cases'
out-of-fold scores, which is what the threshold's bound was computed on; a refitted
model scores new cases a little more confidently than the bound assumed. Fitted
models are plain JSON (:class:`LogisticModel`): no pickle.

The L2 penalty's inverse strength ``C`` is chosen inside each training fold by a
grouped cross-validation over :data:`C_GRID` (three folds of whole cases, so the rows of
one case never sit on both sides; smallest mean log loss, ties to the smaller ``C``) —
nested in the cross-fit, so the out-of-fold scores stay out of fold. A fold with fewer
than :data:`MIN_CASES_FOR_CV` cases, or a single class within a grouped split, uses ``C = 1``.

Choices this module makes: L2 penalty, no class weights (the
rows' base rate is what the score should reflect), the ``liblinear`` solver (exact on
problems this size and about twenty times faster than L-BFGS here; it also shrinks the
intercept slightly); at most 5 folds, fewer when there
are fewer groups; a case whose candidates are all tied gets the first one (candidate
order, see features); ``option=<label>`` features are kept only when the calibration
has at most :data:`MAX_OPTION_LABELS` distinct candidate labels (a closed option set)
and its golds are not all one label (:func:`single_gold`): where every gold is ``"1"``,
an ``option=1`` indicator learns only that the answer is ``"1"``, and the model would
score every case whose plurality says ``"1"`` as right whatever else it reads (the
features that describe the panel are kept); a constant label (every row right or every row wrong) is fitted as a constant model.
A fitted model is consistent by construction and checked when read
(:class:`LogisticModel`: one mean, scale and coefficient per feature, positive scales,
finite numbers); a row whose logit overflows to an undefined value (``inf - inf``, a
feature far beyond anything calibration saw) scores 0, never ``NaN``.
scikit-learn is imported when a model is first fitted, not with the module: scoring a
case with saved models needs only numpy, so a run that applies an ``ACCEPT.json`` does
not pay scikit-learn's seconds of import.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from pydantic import BaseModel, ConfigDict, model_validator

from dissensus.acceptance.features import MAX_OPTION_LABELS, Candidate

__all__ = [
    "C_GRID",
    "MAX_OPTION_LABELS",
    "MIN_CASES_FOR_CV",
    "CrossFit",
    "LogisticModel",
    "case_key",
    "crossfit",
    "crossfit_scores",
    "design",
    "feature_list",
    "fit_arrays",
    "fit_model",
    "fold_index",
    "fold_of_key",
    "score_case",
    "single_gold",
]


C_GRID = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0)
"""The regularisation values the inner cross-validation chooses among."""

MIN_CASES_FOR_CV = 30
"""Fewer training cases than this: no inner cross-validation, ``C = 1``."""

SCORE_PREFIX = "score."
"""Candidate features of the simple score families (:mod:`dissensus.acceptance.families`),
never given to the model."""


class LogisticModel(BaseModel):
    """A fitted logistic regression in plain JSON."""

    model_config = ConfigDict(frozen=True, strict=True)

    kind: str = "logistic_regression"
    features: list[str]
    mean: list[float]
    scale: list[float]
    coef: list[float]
    intercept: float
    c: float = 1.0
    """The L2 regularisation ``C`` the inner cross-validation chose."""

    @model_validator(mode="after")
    def _consistent(self) -> LogisticModel:
        """One mean, scale and coefficient per feature; scales positive; numbers finite."""
        n = len(self.features)
        if self.kind != "logistic_regression":
            raise ValueError(f"kind is 'logistic_regression', got {self.kind!r}")
        if len(set(self.features)) != n:
            raise ValueError("features: a feature is named twice")
        for name in ("mean", "scale", "coef"):
            got = len(getattr(self, name))
            if got != n:
                raise ValueError(f"{name} has {got} values for {n} features")
        numbers = [*self.mean, *self.scale, *self.coef, self.intercept, self.c]
        if not all(math.isfinite(v) for v in numbers):
            raise ValueError("every mean, scale, coefficient, intercept and c must be finite")
        if not all(v > 0 for v in self.scale):
            raise ValueError("every scale must be positive (a constant feature's scale is 1)")
        if self.c <= 0:
            raise ValueError("c must be positive")
        return self

    def matrix(self, rows: Sequence[dict[str, float]]) -> np.ndarray:
        index = {f: i for i, f in enumerate(self.features)}
        x = np.zeros((len(rows), len(self.features)))
        for r, row in enumerate(rows):
            for k, v in row.items():
                i = index.get(k)
                if i is not None:
                    x[r, i] = v
        return x

    def predict(self, rows: Sequence[dict[str, float]]) -> np.ndarray:
        """``P(right)`` for each row (missing features are 0, unknown ones ignored)."""
        if not rows:
            return np.zeros(0)
        return self.predict_matrix(self.matrix(rows))

    def predict_matrix(self, x: np.ndarray) -> np.ndarray:
        """``P(right)`` for rows already laid out in the order of :attr:`features`."""
        with np.errstate(all="ignore"):
            z = (x - np.asarray(self.mean)) / np.asarray(self.scale)
            logit = z @ np.asarray(self.coef) + self.intercept
        # An overflow (a feature far outside anything calibration saw) may leave a
        # logit undefined (inf - inf): such a row scores 0, never a NaN.
        logit = np.where(np.isnan(logit), -np.inf, logit)
        return np.asarray(1.0 / (1.0 + np.exp(-np.clip(logit, -50, 50))))


def single_gold(golds: Sequence[str]) -> str | None:
    """The one label every gold of ``golds`` is, when there are golds and they are all
    one label; ``None`` otherwise."""
    labels = set(golds)
    return next(iter(labels)) if len(labels) == 1 else None


def feature_list(
    cases: Sequence[Sequence[Candidate]], golds: Sequence[str] | None = None
) -> list[str]:
    """Every feature seen in the calibration rows, sorted; ``option=<label>`` features
    only when the candidate labels are few and ``golds`` (when given) are not all one
    label (see the module docstring)."""
    names: set[str] = set()
    options: set[str] = set()
    for rows in cases:
        for cand in rows:
            names.update(cand.features)
            options.add(cand.label)
    if len(options) > MAX_OPTION_LABELS or (golds is not None and single_gold(golds) is not None):
        names = {n for n in names if not n.startswith("option=")}
    return sorted(n for n in names if not n.startswith(SCORE_PREFIX))


def design(
    cases: Sequence[Sequence[Candidate]], golds: Sequence[str], features: list[str]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Feature matrix, labels and owning case index of every candidate row."""
    index = {f: i for i, f in enumerate(features)}
    n_rows = sum(len(c) for c in cases)
    x = np.zeros((n_rows, len(features)))
    y = np.zeros(n_rows, dtype=int)
    owner = np.zeros(n_rows, dtype=int)
    r = 0
    for k, (cands, gold) in enumerate(zip(cases, golds, strict=True)):
        for cand in cands:
            for name, value in cand.features.items():
                i = index.get(name)
                if i is not None:
                    x[r, i] = value
            y[r] = int(cand.label == gold)
            owner[r] = k
            r += 1
    return x, y, owner


def choose_c(z: np.ndarray, y: np.ndarray, owner: np.ndarray | None) -> float:
    """``C`` by grouped three-fold cross-validation (see the module docstring)."""
    if owner is None or len(set(owner.tolist())) < MIN_CASES_FOR_CV:
        return 1.0
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import log_loss
    from sklearn.model_selection import GroupKFold

    splits = list(GroupKFold(n_splits=3).split(z, y, groups=owner))
    if any(len(set(y[train].tolist())) < 2 for train, _ in splits):
        return 1.0
    best, best_loss = 1.0, float("inf")
    for c in C_GRID:
        loss = 0.0
        for train, test in splits:
            clf = LogisticRegression(C=c, solver="liblinear", max_iter=2000)
            clf.fit(z[train], y[train])
            loss += log_loss(y[test], clf.predict_proba(z[test])[:, 1], labels=[0, 1])
        if loss < best_loss - 1e-12:
            best, best_loss = c, loss
    return best


def fit_arrays(
    x: np.ndarray, y: np.ndarray, features: list[str], owner: np.ndarray | None = None
) -> LogisticModel:
    """Fit the logistic model on a feature matrix (columns named by ``features``).

    ``owner``: the case of each row; with it, ``C`` is chosen by :func:`choose_c`.
    """
    n = len(features)
    if len(y) == 0:
        return LogisticModel(
            features=features, mean=[0.0] * n, scale=[1.0] * n, coef=[0.0] * n, intercept=0.0
        )
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale == 0] = 1.0
    if y.min() == y.max():
        rate = min(max(float(y.mean()), 1e-6), 1 - 1e-6)
        return LogisticModel(
            features=features,
            mean=mean.tolist(),
            scale=scale.tolist(),
            coef=[0.0] * n,
            intercept=float(np.log(rate / (1 - rate))),
        )
    from sklearn.linear_model import LogisticRegression  # on first fit: seconds to import

    z = (x - mean) / scale
    c = choose_c(z, y, owner)
    clf = LogisticRegression(C=c, solver="liblinear", max_iter=2000)
    clf.fit(z, y)
    return LogisticModel(
        features=features,
        mean=mean.tolist(),
        scale=scale.tolist(),
        coef=[float(v) for v in clf.coef_[0]],
        intercept=float(clf.intercept_[0]),
        c=c,
    )


def fit_model(
    cases: Sequence[Sequence[Candidate]], golds: Sequence[str], features: list[str] | None = None
) -> LogisticModel:
    """Fit the logistic model on every candidate row of ``cases``."""
    feats = features if features is not None else feature_list(cases, golds)
    x, y, owner = design(cases, golds, feats)
    return fit_arrays(x, y, feats, owner)


def score_case(model: LogisticModel, candidates: Sequence[Candidate]) -> tuple[str | None, float]:
    """The best candidate and its score (``(None, 0.0)`` without candidates)."""
    if not candidates:
        return None, 0.0
    p = model.predict([c.features for c in candidates])
    best = int(np.argmax(p))
    return candidates[best].label, float(p[best])


@dataclass
class CrossFit:
    """Out-of-fold scores of the calibration cases and the fold models that produced them."""

    scores: list[tuple[str | None, float]]
    """``(answer, score)`` of every case, from the model that did not see it."""
    models: list[LogisticModel]
    """Model ``k`` was fitted on every fold but ``k``."""
    fold_of_group: dict[str, int] = field(default_factory=dict)
    """Stratum -> the fold holding it, when the folds were grouped by stratum."""
    fold_of_case: list[int] = field(default_factory=list)
    """The fold holding each case (empty when there was no cross-fit)."""


def case_key(outputs: Sequence[tuple[str, str | None, str]]) -> str:
    """The text a case's fold is drawn from: each agent's ``(agent, decision, reasoning)``,
    as compact JSON (exact strings, no floats)."""
    return json.dumps([list(o) for o in outputs], separators=(",", ":"), ensure_ascii=False)


def fold_of_key(key: str, folds: int) -> int:
    """The fold model that scores a case with :func:`case_key` ``key``: sha256 modulo ``folds``."""
    if folds <= 1:
        return 0
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big") % folds


def fold_index(candidates: Sequence[Candidate], folds: int) -> int:
    """The fold model that scores a new case: a hash of its candidate rows, modulo ``folds``."""
    if folds <= 1:
        return 0
    body = [[c.label, sorted(c.features.items())] for c in candidates]
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big") % folds


def _same_groups(keys: Sequence[str]) -> tuple[list[int], int]:
    """Each case's group (cases with one key share one, numbered by first appearance)
    and the number of groups."""
    ids: dict[str, int] = {}
    return [ids.setdefault(k, len(ids)) for k in keys], len(ids)


def crossfit(
    cases: Sequence[Sequence[Candidate]],
    golds: Sequence[str],
    *,
    groups: Sequence[str] | None = None,
    folds: int = 5,
    seed: int = 0,
    features: list[str] | None = None,
    keys: Sequence[str] | None = None,
) -> CrossFit:
    """Cross-fitted scores and fold models (see the module docstring).

    Fewer than two cases cannot be cross-fitted: every score is ``(None, 0.0)`` and the
    one model is fitted on what there is. ``keys``: what makes two cases one (e.g. a
    hash of each panel); without strata, cases with one key always fall in one fold, so
    a copy of a case is never scored by a model trained on it. With every key distinct,
    or without ``keys``, the folds are those of a plain shuffled K-fold over the cases
    (not grouped by their rows: distinct panels often have identical rows when the
    features are votes).
    """
    n = len(cases)
    feats = features if features is not None else feature_list(cases, golds)
    out: list[tuple[str | None, float]] = [(None, 0.0)] * n
    same, distinct_cases = _same_groups(
        list(keys) if keys is not None else [str(i) for i in range(n)]
    )
    distinct = sorted(set(groups)) if groups is not None else []
    by_stratum = len(distinct) >= 2
    if n < 2 or (not by_stratum and distinct_cases < 2):
        return CrossFit(out, [fit_model(cases, golds, feats)])
    x, y, owner = design(cases, golds, feats)
    idx = np.arange(n)
    splits: list[tuple[np.ndarray, np.ndarray]]
    from sklearn.model_selection import GroupKFold, KFold

    fold_of_group: dict[str, int] = {}
    if groups is not None and by_stratum:
        k = min(folds, len(distinct))
        splits = list(GroupKFold(n_splits=k).split(idx, groups=list(groups)))
        for f, (_, test) in enumerate(splits):
            for i in test.tolist():
                fold_of_group[str(groups[i])] = f
    else:
        # K-fold over the distinct cases (a copy goes with its first appearance); with
        # every case distinct these are exactly the folds of a K-fold over the cases.
        k = min(folds, distinct_cases)
        member = np.asarray(same)
        splits = [
            (np.flatnonzero(np.isin(member, train)), np.flatnonzero(np.isin(member, test)))
            for train, test in KFold(n_splits=k, shuffle=True, random_state=seed).split(
                np.arange(distinct_cases)
            )
        ]
    models: list[LogisticModel] = []
    fold_of_case = [0] * n
    for f, (train, test) in enumerate(splits):
        for i in test.tolist():
            fold_of_case[i] = f
        rows = np.isin(owner, train)
        model = fit_arrays(x[rows], y[rows], feats, owner[rows])
        models.append(model)
        test_rows = np.flatnonzero(np.isin(owner, test))
        p = model.predict_matrix(x[test_rows])
        best: dict[int, tuple[float, int]] = {}
        for row, prob in zip(test_rows.tolist(), p.tolist(), strict=True):
            case_k = int(owner[row])
            if case_k not in best or prob > best[case_k][0]:
                best[case_k] = (float(prob), row)
        for case_k, (prob, row) in best.items():
            pos = row - int(np.flatnonzero(owner == case_k)[0])
            out[case_k] = (cases[case_k][pos].label, prob)
    return CrossFit(out, models, fold_of_group, fold_of_case)


def crossfit_scores(
    cases: Sequence[Sequence[Candidate]],
    golds: Sequence[str],
    *,
    groups: Sequence[str] | None = None,
    folds: int = 5,
    seed: int = 0,
) -> list[tuple[str | None, float]]:
    """Out-of-fold ``(answer, score)`` for every case (see :func:`crossfit`)."""
    return crossfit(cases, golds, groups=groups, folds=folds, seed=seed).scores
