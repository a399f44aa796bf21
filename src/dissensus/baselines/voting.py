"""Voting baselines as array functions: unweighted majority and agreement-weighted voting.

Thin, documented names over :mod:`dissensus.guard.arrays` (one implementation, two
entry points), for baselines that compare against the guard:

* :func:`unweighted_majority` is crowd-kit's ``MajorityVote`` (ties to the smallest
  class index);
* :func:`agreement_weighted_vote` is crowd-kit's ``Wawa`` (worker agreement with
  aggregate): a majority vote, each voter's skill = its agreement with that majority
  over all cases, then a skill-weighted majority;
* :func:`consensus_weighted` is the seed-003 adjudicator, ``w = exp(beta * agreement)``
  with agreement measured per case.

Every function takes a ``(cases, voters)`` integer label matrix (``-1`` = no vote).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from dissensus.guard.arrays import consensus_weighted_vote, majority_vote, wawa

__all__ = ["agreement_weighted_vote", "consensus_weighted", "unweighted_majority"]


def unweighted_majority(labels: NDArray[np.int64], n_classes: int) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Answer per case and vote shares; see :func:`dissensus.guard.arrays.majority_vote`."""
    return majority_vote(labels, n_classes)


def agreement_weighted_vote(
    labels: NDArray[np.int64], n_classes: int
) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.float64]]:
    """Answer per case, weight shares and per-voter skill (Wawa)."""
    return wawa(labels, n_classes)


def consensus_weighted(
    labels: NDArray[np.int64], n_classes: int, beta: float = 1.5
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Seed-003 consensus weighting ``w_i = exp(beta * agreement_i)`` per case."""
    return consensus_weighted_vote(labels, n_classes, beta)
