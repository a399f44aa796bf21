"""Per-decision confidence that accounts for n_eff and measured reliability (``docs/guard.md``).

Raw vote share is the number the correlated-hallucination failure hides behind: five clones agreeing give
the same share as five independent voters. The guard states instead a posterior over
the answers:

1. each vote adds the one-coin log-likelihood ratio ``w_i = log(r_i (K-1) / (1 - r_i))``
   to its answer, with ``r_i`` the voter's measured reliability in the evidence stratum
   of its vote (:func:`~dissensus.guard.provenance.has_evidence`, from the calibration) or a prior when unmeasured; ``K`` is the number of
   possible answers;
2. the summed log-odds are multiplied by the redundancy factor
   ``shrink = sum_i w_i^2 / sum_ij w_i w_j rho_ij`` (``rho_ii = 1``), the weighted design
   effect of correlated votes. With equal weights it is exactly ``n_eff / n`` with
   ``n_eff = n / (1 + (n - 1) * mean rho)``: ``n`` voters with pairwise error
   correlation ``rho`` count as ``n_eff`` independent ones. With unequal weights a
   dominant, well-measured voter is not discounted for the redundancy of voters that
   carry almost no weight;
3. a softmax turns the scores into probabilities that sum to 1.

Choices this module makes:

* ``rho_ij`` is the measured pairwise error correlation, clipped to ``[0, 1]``; an
  unmeasured pair gets ``prior_rho_shared`` (0.8) when the two voters share a declared
  cause (family or source, :func:`~dissensus.guard.provenance.share_cause`), else
  ``prior_rho_other`` (0.3): language models share much of their training data, so
  distinct families are not assumed independent.
* An unmeasured voter's reliability is ``prior_reliability`` (0.7) without calibration,
  the calibration's pooled reliability with it.
* The answers are the calibration's labels plus every answer voted; when that leaves
  a single answer, the key ``"*"`` (any other answer) is added so that agreement never
  yields a probability of exactly 1. When that single answer is itself ``"*"``, the
  key is ``"**"`` (the shortest run of ``*`` that is not an answer, :func:`other_key`),
  so a real answer ``"*"`` gets the same confidence as any other label.
* Without calibration the posterior is a function of the priors and the votes' family,
  source and answer, in order: it is computed once per such structure and reused (at
  most 256 kept), the same figures as computing it again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dissensus.guard.arrays import log_odds_weights
from dissensus.guard.provenance import has_evidence, share_cause
from dissensus.guard.reliability import ReliabilityFit
from dissensus.types import Vote

__all__ = ["OTHER", "Posterior", "PriorSettings", "answer_space", "other_key", "posterior"]

OTHER = "*"
"""Key of the probability of any answer nobody voted for, when it is the only alternative
(``"**"`` instead when ``"*"`` is the answer voted: see :func:`other_key`)."""


def other_key(answers: set[str] | frozenset[str]) -> str:
    """The key of "any other answer": :data:`OTHER`, lengthened until no answer is it."""
    key = OTHER
    while key in answers:
        key += OTHER
    return key


@dataclass(frozen=True)
class PriorSettings:
    """Priors used where the calibration is silent (or absent)."""

    prior_reliability: float = 0.7
    """Reliability of a voter with no labelled votes, without calibration."""
    prior_rho_shared: float = 0.8
    """Error correlation of an unmeasured pair that shares a family or a source."""
    prior_rho_other: float = 0.3
    """Error correlation of any other unmeasured pair."""


@dataclass(frozen=True)
class Posterior:
    """The guard's belief over the answers of one case."""

    probabilities: dict[str, float]
    n_eff: float
    """``m / (1 + (m - 1) * mean rho)`` over the ``m`` voters."""
    mean_rho: float
    shrink: float
    """Factor applied to the summed log-odds (``n_eff / m`` for equal weights)."""
    reliabilities: dict[str, float]


def answer_space(votes: Sequence[Vote], calibration: ReliabilityFit | None) -> list[str]:
    """Every answer the case can be decided as, sorted."""
    answers = {v.answer for v in votes}
    if calibration is not None:
        answers.update(calibration.labels)
    if len(answers) < 2:
        answers.add(other_key(answers))
    return sorted(answers)


_LOOKUPS: dict[int, tuple[ReliabilityFit, dict[str, int]]] = {}


def _lookup(calibration: ReliabilityFit) -> dict[str, int]:
    """Agent -> row of the calibration's tables, built once per calibration object."""
    hit = _LOOKUPS.get(id(calibration))
    if hit is not None and hit[0] is calibration:
        return hit[1]
    if len(_LOOKUPS) > 32:
        _LOOKUPS.clear()
    index = {a.agent: i for i, a in enumerate(calibration.agents)}
    _LOOKUPS[id(calibration)] = (calibration, index)
    return index


def _measured(calibration: ReliabilityFit | None, a: str, b: str) -> float | None:
    if calibration is None:
        return None
    index = _lookup(calibration)
    i, j = index.get(a), index.get(b)
    return None if i is None or j is None else calibration.error_correlation[i][j]


def _reliability(calibration: ReliabilityFit | None, agent: str, present: bool) -> float | None:
    if calibration is None:
        return None
    i = _lookup(calibration).get(agent)
    if i is None:
        return None
    row = calibration.agents[i]
    return row.reliability_present if present else row.reliability_absent


def _rho(
    votes: Sequence[Vote], calibration: ReliabilityFit | None, priors: PriorSettings
) -> np.ndarray:
    m = len(votes)
    r = np.zeros((m, m))
    r.flat[:: m + 1] = 1.0  # np.eye(m) without its argument handling
    for i in range(m):
        for j in range(i + 1, m):
            measured = _measured(calibration, votes[i].agent, votes[j].agent)
            if measured is None:
                value = (
                    priors.prior_rho_shared
                    if share_cause(votes[i], votes[j])
                    else priors.prior_rho_other
                )
            else:
                value = min(max(measured, 0.0), 1.0)
            r[i, j] = r[j, i] = value
    return r


def posterior(
    votes: Sequence[Vote],
    calibration: ReliabilityFit | None = None,
    priors: PriorSettings | None = None,
) -> Posterior:
    """The reliability-weighted, redundancy-shrunk posterior over the answers."""
    priors = priors or PriorSettings()
    if calibration is not None:
        return _posterior(votes, calibration, priors)
    # Without calibration the posterior depends only on the votes' families, sources and
    # answers (in order): panels of one structure share it.
    key = (priors, tuple([(v.family, v.evidence_source, v.answer) for v in votes]))
    hit = _UNCALIBRATED.get(key)
    if hit is None:
        if len(_UNCALIBRATED) >= 256:
            _UNCALIBRATED.clear()
        hit = _UNCALIBRATED[key] = _posterior(votes, None, priors)
    return Posterior(
        probabilities=dict(hit.probabilities),
        n_eff=hit.n_eff,
        mean_rho=hit.mean_rho,
        shrink=hit.shrink,
        reliabilities={v.agent: float(priors.prior_reliability) for v in votes},
    )


_UNCALIBRATED: dict[tuple[PriorSettings, tuple[tuple[str | None, str, str], ...]], Posterior] = {}
"""Uncalibrated posteriors by priors and the votes' (family, source, answer), bounded."""


def _posterior(
    votes: Sequence[Vote], calibration: ReliabilityFit | None, priors: PriorSettings
) -> Posterior:
    """:func:`posterior`, computed."""
    space = answer_space(votes, calibration)
    k = len(space)
    default = (
        calibration.pooled_reliability if calibration is not None else priors.prior_reliability
    )
    rel = []
    for v in votes:
        measured = _reliability(calibration, v.agent, has_evidence(v))
        rel.append(default if measured is None else measured)
    w = log_odds_weights(np.array(rel, dtype=np.float64), k)
    r = _rho(votes, calibration, priors)
    m = len(votes)
    mean_rho = float((np.add.reduce(r, axis=None) - m) / (m * (m - 1))) if m > 1 else 0.0
    n_eff = m / (1.0 + (m - 1) * mean_rho) if m else 0.0
    denom = float(w @ r @ w)
    shrink = float(w @ w) / denom if denom > 0 else 1.0
    scores = np.zeros(k)
    index = {a: i for i, a in enumerate(space)}
    for v, wi in zip(votes, w, strict=True):
        scores[index[v.answer]] += wi
    scores = shrink * scores
    scores -= np.maximum.reduce(scores)
    p = np.exp(scores)
    p /= np.add.reduce(p)
    return Posterior(
        probabilities={a: float(p[i]) for i, a in enumerate(space)},
        n_eff=float(n_eff),
        mean_rho=mean_rho,
        shrink=shrink,
        reliabilities={v.agent: float(x) for v, x in zip(votes, rel, strict=True)},
    )
