"""Provenance helpers: independent sources, shared causes, fallback agreement (``docs/guard.md``).

Choices this module makes:

* ``parametric`` (or ``parametric:<anything>``) is a model's own memory, not an evidence
  source. A voter *has evidence* (:func:`has_evidence`) when its vote says
  ``evidence_present`` **and** its source is not parametric: a parametric vote marked
  ``evidence_present`` is a voter without evidence. That one definition is used
  everywhere the guard tells the two apart: the sources of invariant 1, the voters of
  fallback agreement (invariant 2), the voters that earn or carry consensus weight, the
  evidence stratum of a vote's reliability, and the strata of the reliability fit.
* Sources are compared as :func:`canonical_source` sees them: Unicode NFKC, without the
  characters that show as nothing (:func:`dissensus.families.comparable_name`: a
  zero-width space, a bidirectional mark, a control), case-folded, surrounding
  whitespace stripped, so ``wiki-index``, ``Wiki-Index``, ``wiki-index `` and
  ``wiki\u200b-index`` are one source (two invisible spellings of one source would
  otherwise pass invariant 1 as two) (the correlated-hallucination study asks to *name* each agent's distinct source, and these name
  the same one). Invariant 1 counts and reports sources in that form. Families have
  their own rule (:func:`dissensus.families.canonical_family`), which also maps a model
  name to its vendor; a source is never mapped (``gpt-index`` is an index, not OpenAI).
  A source that is blank in that form names nothing: it is no evidence.
* Two voters share a latent cause when they name the same model family (a blank one,
  or one of invisible characters only, names none), or the same
  evidence source other than the bare ``parametric`` token or a blank one
  (``parametric:OpenAI`` is one family's memory, so it is shared; bare ``parametric``
  says nothing about whose).
* Fallback agreement is the largest share of one answer among voters *without*
  evidence; it is 0 when fewer than two voters lack evidence (one voter cannot agree
  with anyone), which departs from the study's sketch, where one absent voter alone
  already reads as 1.0 and always refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from dissensus.families import canonical_family, comparable_name
from dissensus.types import Vote

__all__ = [
    "canonical_source",
    "fallback_agreement",
    "has_evidence",
    "independent_sources",
    "is_parametric",
    "share_cause",
]


@lru_cache(maxsize=4096)
def canonical_source(source: str) -> str:
    """A provenance token as comparisons see it: NFKC, invisible characters dropped,
    case-folded, stripped.

    >>> canonical_source(" Wiki-Index "), canonical_source("ＰＡＲＡＭＥＴＲＩＣ")
    ('wiki-index', 'parametric')
    >>> canonical_source("wiki\u200b")
    'wiki'
    """
    return comparable_name(source).casefold().strip()


def is_parametric(source: str) -> bool:
    """Whether a provenance token names a model's own memory rather than evidence."""
    token = canonical_source(source)
    return token == "parametric" or token.startswith("parametric:")


def has_evidence(vote: Vote) -> bool:
    """Whether a voter had evidence: ``evidence_present`` from a named source that is not
    a model's own memory (:func:`is_parametric`). The guard's one test of it."""
    if not vote.evidence_present:
        return False
    token = canonical_source(vote.evidence_source)
    return bool(token) and token != "parametric" and not token.startswith("parametric:")


def independent_sources(votes: Sequence[Vote]) -> list[str]:
    """Distinct sources of the voters that had evidence (:func:`has_evidence`), sorted,
    in their :func:`canonical_source` form."""
    return sorted({canonical_source(v.evidence_source) for v in votes if has_evidence(v)})


def share_cause(a: Vote, b: Vote) -> bool:
    """Whether two voters share a latent cause by their declared provenance."""
    family = canonical_family(a.family) if a.family is not None else None
    if family and family == canonical_family(b.family):
        return True
    source = canonical_source(a.evidence_source)
    return source == canonical_source(b.evidence_source) and source not in ("", "parametric")


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
