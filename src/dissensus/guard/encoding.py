"""Vote cases -> arrays: the bridge between the pydantic models and :mod:`~dissensus.guard.arrays`.

Columns are agents in order of first appearance (or a given order); rows are cases.
Choices: the class set is the sorted union of every answer and gold label seen (or a
given list); a voter absent from a case holds ``-1`` and ``evidence = False``; a vote's
evidence is :func:`~dissensus.guard.provenance.has_evidence` (a parametric source marked
present is no evidence).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from dissensus.families import canonical_family
from dissensus.guard.provenance import has_evidence
from dissensus.types import Vote, VoteCase

__all__ = ["EncodedCases", "encode_cases"]


@dataclass(frozen=True)
class EncodedCases:
    """Votes of many cases as arrays, with the names needed to read them back."""

    labels: NDArray[np.int64]
    """``(cases, agents)`` class index per vote, ``-1`` for no vote."""
    evidence: NDArray[np.bool_]
    """``(cases, agents)`` whether the voter had evidence
    (:func:`~dissensus.guard.provenance.has_evidence`: present, and not parametric)."""
    gold: NDArray[np.int64]
    """``(cases,)`` gold class index, ``-1`` when unlabelled."""
    agents: list[str]
    classes: list[str]
    families: list[str | None]
    """Family of each agent (the first one declared for it)."""


def encode_cases(
    cases: Sequence[VoteCase] | Sequence[Sequence[Vote]],
    agents: Sequence[str] | None = None,
    classes: Sequence[str] | None = None,
) -> EncodedCases:
    """Encode cases (or bare vote lists) as aligned arrays."""
    vote_lists: list[Sequence[Vote]] = [c.votes if isinstance(c, VoteCase) else c for c in cases]
    golds: list[str | None] = [c.gold if isinstance(c, VoteCase) else None for c in cases]
    order: list[str] = list(agents) if agents is not None else []
    families: dict[str, str | None] = {}
    seen = set(order)
    for votes in vote_lists:
        for v in votes:
            if v.agent not in seen:
                seen.add(v.agent)
                order.append(v.agent)
            if families.get(v.agent) is None:
                families[v.agent] = canonical_family(v.family)
    if classes is None:
        found = {v.answer for votes in vote_lists for v in votes}
        found.update(g for g in golds if g is not None)
        classes = sorted(found)
    class_index = {c: i for i, c in enumerate(classes)}
    agent_index = {a: j for j, a in enumerate(order)}
    labels = np.full((len(vote_lists), len(order)), -1, dtype=np.int64)
    evidence = np.zeros((len(vote_lists), len(order)), dtype=bool)
    for i, votes in enumerate(vote_lists):
        for v in votes:
            j = agent_index.get(v.agent)
            k = class_index.get(v.answer)
            if j is None or k is None:
                continue
            labels[i, j] = k
            evidence[i, j] = has_evidence(v)
    gold = np.array(
        [class_index.get(g, -1) if g is not None else -1 for g in golds], dtype=np.int64
    )
    return EncodedCases(
        labels=labels,
        evidence=evidence,
        gold=gold,
        agents=order,
        classes=list(classes),
        families=[families.get(a) for a in order],
    )
