"""Array API of the guard: vectorised voting over many cases at once (``docs/guard.md``).

Every function takes a *label matrix*: an ``int`` array of shape ``(cases, voters)``
holding a class index in ``0..K-1`` per vote and ``-1`` where a voter did not vote on a
case. Column ``j`` is the same voter in every case (this is what lets :func:`wawa`
estimate a skill per voter). :func:`encode_labels` builds such a matrix from strings.

The functions are pure and deterministic: no randomness, no I/O, and ties are broken
toward the smallest class index (with sorted labels, the smallest label), or by an
explicit ``tie_order``. crowd-kit breaks ties by the column order of its score table
(``idxmax`` over labels in the order pandas met them), a fixed class order too: passing
that order as ``tie_order`` reproduces its ``MajorityVote`` and ``Wawa`` exactly.

Choices this module makes:

* ``agreement_i`` (seed: "the fraction of other critics matching agent i") is
  ``(votes for i's answer - 1) / (voters on the case - 1)``; it is 0 for a lone voter.
* Consensus weighting is ``w_i = exp(beta * agreement_i)``; the stated confidence is the
  winning answer's share of the total weight, as the study's adjudicator reports it.
* A label matrix that is not a 2-D integer array, an answer that is not among the
  ``classes`` given to :func:`encode_labels`, or ``classes`` listing one twice, is an
  :class:`~dissensus.errors.InputError` (or :class:`~dissensus.errors.ConfigError`)
  naming it, never a ``KeyError``, a numpy casting ``TypeError`` or a silently wrong
  index.
* An optional ``mask`` restricts which votes carry consensus weight (the guard passes the
  evidence-present votes so that fallback agreement is never turned into weight); votes
  outside the mask keep weight 1 and do not count toward anyone's agreement.
* The reliability posterior is the one-coin Dawid-Skene likelihood ratio: a voter of
  reliability ``r`` on ``K`` classes adds ``log(r (K-1) / (1-r))`` to the answer it voted
  for. The summed log-odds are multiplied by a per-case shrink factor (``n_eff / n``,
  see :mod:`dissensus.guard.calibration`) before the softmax, so that ``n`` correlated
  voters count as ``n_eff`` independent ones.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from dissensus.errors import ConfigError, InputError

__all__ = [
    "MISSING",
    "agreement_fraction",
    "consensus_weighted_vote",
    "encode_labels",
    "log_odds_weights",
    "majority_vote",
    "n_eff_per_case",
    "pairwise_error_correlation",
    "reliability_posterior",
    "vote_counts",
    "wawa",
]

MISSING = -1
"""Label index of a voter that did not vote on a case."""

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]


def encode_labels(
    rows: Sequence[Sequence[str | None]], classes: Sequence[str] | None = None
) -> tuple[IntArray, list[str]]:
    """Encode string answers (``None`` = no vote) as a label matrix and its sorted classes.

    >>> m, classes = encode_labels([["b", "a", None], ["a", "a", "b"]])
    >>> classes, m.tolist()
    (['a', 'b'], [[1, 0, -1], [0, 0, 1]])
    """
    if classes is None:
        classes = sorted({a for row in rows for a in row if a is not None})
    index = {c: i for i, c in enumerate(classes)}
    if len(index) != len(classes):
        twice = next(c for i, c in enumerate(classes) if index[c] != i)
        raise ConfigError(f"classes lists {twice!r} twice", field="classes")
    width = max((len(r) for r in rows), default=0)
    out = np.full((len(rows), width), MISSING, dtype=np.int64)
    for i, row in enumerate(rows):
        for j, answer in enumerate(row):
            if answer is not None:
                found = index.get(answer)
                if found is None:
                    error = InputError(
                        f"rows[{i}][{j}]: answer {answer!r} is not one of the classes given"
                    )
                    error.field = f"rows.{i}.{j}"
                    raise error
                out[i, j] = found
    return out, list(classes)


def _check(labels: IntArray, n_classes: int) -> None:
    if not isinstance(labels, np.ndarray) or labels.ndim != 2:
        raise InputError("labels must be a 2-D (cases, voters) array")
    if labels.dtype.kind not in "iu":
        raise InputError(
            f"labels must be an integer array of class indices (got dtype {labels.dtype})"
        )
    if n_classes < 1:
        raise ConfigError("n_classes must be at least 1", field="n_classes")
    if labels.size and (labels.max() >= n_classes or labels.min() < MISSING):
        raise InputError("labels must lie in -1..n_classes-1")


def vote_counts(labels: IntArray, n_classes: int, weights: FloatArray | None = None) -> FloatArray:
    """Summed vote weight per case and class, shape ``(cases, n_classes)``.

    ``weights`` is ``None`` (every vote 1), a per-voter vector ``(voters,)`` or a per-vote
    matrix ``(cases, voters)``.
    """
    _check(labels, n_classes)
    cases = labels.shape[0]
    present = labels >= 0
    rows = np.broadcast_to(np.arange(cases)[:, None], labels.shape)
    flat = rows[present] * n_classes + labels[present]
    w: FloatArray | None = None
    if weights is not None:
        w = np.broadcast_to(np.asarray(weights, dtype=np.float64), labels.shape)[present]
    counts = np.bincount(flat, weights=w, minlength=cases * n_classes)
    return counts.reshape(cases, n_classes).astype(np.float64, copy=False)


def _normalise(scores: FloatArray) -> FloatArray:
    totals = scores.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        probs = np.where(totals > 0, scores / np.where(totals > 0, totals, 1.0), 0.0)
    return probs


def _argmax(scores: FloatArray, tie_order: Sequence[int] | None) -> IntArray:
    if tie_order is None:
        first: IntArray = np.argmax(scores, axis=1).astype(np.int64)
        return first
    order = np.asarray(tie_order, dtype=np.int64)
    if sorted(order.tolist()) != list(range(scores.shape[1])):
        raise ConfigError("tie_order must be a permutation of the class indices", field="tie_order")
    out: IntArray = order[np.argmax(scores[:, order], axis=1)]
    return out


def majority_vote(
    labels: IntArray,
    n_classes: int,
    weights: FloatArray | None = None,
    tie_order: Sequence[int] | None = None,
) -> tuple[IntArray, FloatArray]:
    """(Weighted) majority: answer index per case and vote shares ``(cases, K)``.

    Ties go to the class that comes first in ``tie_order`` (default: the smallest class
    index). A case without any vote gets answer ``-1`` and all-zero shares.
    """
    counts = vote_counts(labels, n_classes, weights)
    probs = _normalise(counts)
    answers = _argmax(counts, tie_order)
    answers[counts.sum(axis=1) <= 0] = MISSING
    return answers, probs


def agreement_fraction(
    labels: IntArray, n_classes: int, mask: NDArray[np.bool_] | None = None
) -> FloatArray:
    """Fraction of the *other* voters of a case that gave voter ``i``'s answer.

    With ``mask``, only masked votes count as voters (others get agreement 0).
    """
    use = labels >= 0 if mask is None else (labels >= 0) & mask
    masked = np.where(use, labels, MISSING)
    counts = vote_counts(masked, n_classes)
    voters = use.sum(axis=1, keepdims=True).astype(np.float64)
    same = np.take_along_axis(counts, np.where(use, masked, 0), axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.where(voters > 1, (same - 1.0) / np.where(voters > 1, voters - 1.0, 1.0), 0.0)
    return np.where(use, frac, 0.0)


def consensus_weighted_vote(
    labels: IntArray,
    n_classes: int,
    beta: float,
    mask: NDArray[np.bool_] | None = None,
) -> tuple[IntArray, FloatArray]:
    """Consensus weighting ``w_i = exp(beta * agreement_i)``: answers and weight shares.

    The weights of a case are computed as ``exp(beta * (agreement_i - max_j agreement_j))``,
    the same weights divided by one positive number per case (the shares and the answer
    are unchanged), so no finite ``beta`` overflows: the most agreeing voter weighs 1 and
    a weight too small to represent is 0, its limit.
    """
    if not np.isfinite(beta) or beta < 0:
        raise ConfigError("beta must be a finite number >= 0", field="beta")
    frac = agreement_fraction(labels, n_classes, mask)
    if frac.shape[1]:
        frac = frac - frac.max(axis=1, keepdims=True)
    weights = np.exp(float(beta) * frac)
    return majority_vote(labels, n_classes, weights)


def wawa(
    labels: IntArray, n_classes: int, tie_order: Sequence[int] | None = None
) -> tuple[IntArray, FloatArray, FloatArray]:
    """Worker Agreement With Aggregate: majority, skill = agreement with it, weighted vote.

    Returns answers, weight shares and the per-voter skill (NaN for a voter with no vote).
    Same definition as crowd-kit's ``Wawa``.
    """
    mv, _ = majority_vote(labels, n_classes, tie_order=tie_order)
    present = labels >= 0
    agree = (labels == mv[:, None]) & present
    n_votes = present.sum(axis=0).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        skills = np.where(
            n_votes > 0, agree.sum(axis=0) / np.where(n_votes > 0, n_votes, 1.0), np.nan
        )
    answers, probs = majority_vote(labels, n_classes, np.nan_to_num(skills), tie_order)
    return answers, probs, skills


def log_odds_weights(reliability: FloatArray, n_classes: int) -> FloatArray:
    """One-coin log-likelihood ratio of a vote, ``log(r (K-1) / (1 - r))``, never negative.

    A voter no better than chance (``r <= 1/K``) gets weight 0: it is ignored, never
    inverted, because a voter that is wrong on one stratum is rarely wrong the same way
    on another.
    """
    k = max(n_classes, 2)
    # np.clip's bounds, applied by the two ufuncs it is made of (NaN kept).
    r = np.minimum(np.maximum(np.asarray(reliability, dtype=np.float64), 1.0 / k), 1.0 - 1e-6)
    return np.log(r * (k - 1) / (1.0 - r))


def reliability_posterior(
    labels: IntArray,
    n_classes: int,
    weights: FloatArray,
    shrink: FloatArray | float = 1.0,
) -> FloatArray:
    """Posterior over classes, ``softmax(shrink * sum of log-odds weights per class)``.

    ``weights`` is per voter ``(voters,)`` or per vote ``(cases, voters)``; ``shrink`` is
    per case or a scalar. Rows sum to 1 (uniform when no vote carries weight).
    """
    scores = vote_counts(labels, n_classes, weights)
    scores = (
        scores * np.broadcast_to(np.asarray(shrink, dtype=np.float64), (labels.shape[0],))[:, None]
    )
    scores -= scores.max(axis=1, keepdims=True)
    expo = np.exp(scores)
    out: FloatArray = expo / expo.sum(axis=1, keepdims=True)
    return out


def pairwise_error_correlation(errors: FloatArray, min_overlap: int = 5) -> FloatArray:
    """Phi coefficient between voters' error indicators, shape ``(voters, voters)``.

    ``errors`` is ``(cases, voters)`` with 1 = wrong, 0 = right, NaN = no vote. A pair is
    NaN when it shares fewer than ``min_overlap`` cases or one voter's errors are
    constant on the shared cases. The diagonal is 1.
    """
    e = np.asarray(errors, dtype=np.float64)
    voters = e.shape[1]
    out = np.full((voters, voters), np.nan)
    for i in range(voters):
        out[i, i] = 1.0
        for j in range(i + 1, voters):
            both = ~np.isnan(e[:, i]) & ~np.isnan(e[:, j])
            if both.sum() < min_overlap:
                continue
            a, b = e[both, i], e[both, j]
            sa, sb = a.std(), b.std()
            if sa == 0 or sb == 0:
                continue
            rho = float(((a - a.mean()) * (b - b.mean())).mean() / (sa * sb))
            out[i, j] = out[j, i] = rho
    return out


def n_eff_per_case(present: NDArray[np.bool_], rho: FloatArray) -> FloatArray:
    """Effective number of independent voters per case: ``m / (1 + (m-1) * mean rho)``.

    ``present`` is ``(cases, voters)``; ``rho`` a ``(voters, voters)`` correlation matrix
    with no NaN (callers fill unknown pairs first). Off-diagonal correlations are clipped
    to ``[0, 1]`` (a negative one is not counted as extra independence), so the result
    lies in ``[1, m]`` for a case with ``m >= 1`` voters (0 for none). For an
    equicorrelated panel this is exact: the variance of the mean of ``m`` votes with
    pairwise correlation ``rho`` equals that of ``m / (1 + (m-1) rho)`` independent ones.
    """
    p = present.astype(np.float64)
    r = np.clip(np.asarray(rho, dtype=np.float64), 0.0, 1.0)
    np.fill_diagonal(r, 0.0)
    m = p.sum(axis=1)
    pair_sum = np.einsum("cv,vw,cw->c", p, r, p)
    pairs = m * (m - 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_rho = np.where(pairs > 0, pair_sum / np.where(pairs > 0, pairs, 1.0), 0.0)
        out = np.where(m > 0, m / (1.0 + (m - 1.0) * mean_rho), 0.0)
    return out
