"""Provenance helpers: independent sources, shared causes, fallback agreement (``docs/guard.md``).

Choices where the design is silent:

* ``parametric`` (or ``parametric:<anything>``) is a model's own memory, not an evidence
  source. A voter *has evidence* (:func:`has_evidence`) when its vote says
  ``evidence_present`` **and** its source is not parametric: a parametric vote marked
  ``evidence_present`` is a voter without evidence. That one definition is used
  everywhere the guard tells the two apart: the sources of invariant 1, the voters of
  fallback agreement (invariant 2), the voters that earn or carry consensus weight, the
  evidence stratum of a vote's reliability, and the strata of the reliability fit.
* Two voters share a latent cause when they name the same model family, or the same
  evidence source other than the bare ``parametric`` token (``parametric:OpenAI`` is
  one family's memory, so it is shared; bare ``parametric`` says nothing about whose).
* Fallback agreement is the largest share of one answer among voters *without*
  evidence; it is 0 when fewer than two voters lack evidence (one voter cannot agree
  with anyone), which departs from the design's sketch, where one absent voter alone
  already reads as 1.0 and always refused.
"""

from __future__ import annotations

from collections.abc import Sequence

from dissensus.families import canonical_family
from dissensus.types import Vote

__all__ = [
    "fallback_agreement",
    "has_evidence",
    "independent_sources",
    "is_parametric",
    "share_cause",
]


def is_parametric(source: str) -> bool:
    """Whether a provenance token names a model's own memory rather than evidence."""
    token = source.strip().lower()
    return token == "parametric" or token.startswith("parametric:")


def has_evidence(vote: Vote) -> bool:
    """Whether a voter had evidence: ``evidence_present`` from a source that is not a
    model's own memory (:func:`is_parametric`). The guard's one test of it."""
    return vote.evidence_present and not is_parametric(vote.evidence_source)


def independent_sources(votes: Sequence[Vote]) -> list[str]:
    """Distinct sources of the voters that had evidence (:func:`has_evidence`), sorted."""
    return sorted({v.evidence_source for v in votes if has_evidence(v)})


def share_cause(a: Vote, b: Vote) -> bool:
    """Whether two voters share a latent cause by their declared provenance."""
    if a.family is not None and canonical_family(a.family) == canonical_family(b.family):
        return True
    return (
        a.evidence_source == b.evidence_source and a.evidence_source.strip().lower() != "parametric"
    )


def fallback_agreement(votes: Sequence[Vote]) -> tuple[float, int]:
    """(largest one-answer share among voters without evidence, number of such voters).

    A voter without evidence is one :func:`has_evidence` says no of: a parametric vote
    marked ``evidence_present`` is one of them."""
    absent = [v.answer for v in votes if not has_evidence(v)]
    if len(absent) < 2:
        return 0.0, len(absent)
    return _top_count(absent) / len(absent), len(absent)


def _top_count(answers: list[str]) -> int:
    """The largest number of equal answers (``Counter(answers).most_common(1)[0][1]``)."""
    counts: dict[str, int] = {}
    for answer in answers:
        counts[answer] = counts.get(answer, 0) + 1
    return max(counts.values())
