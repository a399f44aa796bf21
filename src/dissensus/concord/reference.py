"""An independent reference of CONCORD's arithmetic, for the verifier and the tests.

:mod:`dissensus.concord.rules` and :mod:`dissensus.concord.scale` are what the
protocol runs. If :func:`dissensus.concord.verify.verify` replayed a certificate with
the same functions, a bug in them would be invisible to both. This module states each
rule again from its definition (docs/concord.md), a few lines of plain Python each,
written without calling those modules; the verifier replays with it, and the tests
check the two agree on random inputs.

Definitions (higher is better; ties go to the earliest candidate):

* rescaling: ``(raw - rejected) / (ideal - rejected)`` rounded to 12 decimals; a value
  that is not a finite number (anchors whose span overflows) cannot be rescaled
  (``ValueError``); the floor is compared with the unrounded value (:func:`ref_ratio`);
* in range: ``raw`` finite and between the two anchors, both included;
* maximin: the worst-off score; leximin: the sorted scores compared element by
  element; nash: the product of the scores (rounded to 12 decimals), then the
  worst-off score; utilitarian: candidates where everyone clears the floor first (read
  as certification reads it, when the caller says which do), by the sum of scores
  (rounded), then the others by the worst-off score; on a tie, the earliest candidate
  that clears the floor, else the earliest;
* acceptance: the worst-off score rises by at least the margin, and by more than 0,
  the rise rounded to 12 decimals;
* bottleneck: the covered agent with the lowest score, the first listed on a tie (a
  score that is not a number counts as the lowest).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence

from dissensus.errors import ConfigError, InputError

__all__ = [
    "ref_accepts",
    "ref_bottleneck",
    "ref_bottleneck_tie_notes",
    "ref_clears_floor",
    "ref_gain",
    "ref_in_range",
    "ref_ratio",
    "ref_rescale",
    "ref_select",
    "ref_tie_notes",
]

_DECIMALS = 12


def ref_ratio(raw: float, rejected: float, ideal: float) -> float:
    """The calibrated score of ``raw``, unrounded; ``ValueError`` when not a finite number."""
    span = ideal - rejected
    if span == 0 or math.isnan(span) or math.isinf(span):
        raise ValueError(f"the anchors {rejected!r} and {ideal!r} span no finite scale")
    value = (raw - rejected) / span
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"score {raw!r} has no finite calibrated value")
    return value + 0.0


def ref_rescale(raw: float, rejected: float, ideal: float) -> float:
    """The calibrated score of ``raw``, rounded; ``ValueError`` when not a finite number."""
    return round(ref_ratio(raw, rejected, ideal), _DECIMALS) + 0.0


def ref_in_range(raw: float, rejected: float, ideal: float) -> bool:
    """Whether ``raw`` is a finite number between the anchors."""
    if math.isnan(raw) or math.isinf(raw):
        return False
    if rejected <= ideal:
        return rejected <= raw <= ideal
    return ideal <= raw <= rejected


def ref_clears_floor(scores: Sequence[float], floor: float) -> bool:
    """Every score at or above ``floor``."""
    return not any(score < floor for score in scores)


def _lowest(scores: Sequence[float]) -> float:
    low = scores[0]
    for score in scores[1:]:
        if score < low:
            low = score
    return low


def _better(
    rule: str,
    a: Sequence[float],
    b: Sequence[float],
    floor: float,
    clear: tuple[bool, bool] | None = None,
) -> int:
    """1 if ``a`` ranks above ``b`` under ``rule``, -1 if below, 0 if equal (``clear``:
    whether each clears the floor as certification reads it, when known)."""

    def cmp(x: float, y: float) -> int:
        return (x > y) - (x < y)

    if rule == "maximin":
        return cmp(_lowest(a), _lowest(b))
    if rule == "leximin":
        for x, y in zip(sorted(a), sorted(b), strict=False):
            if x != y:
                return cmp(x, y)
        return cmp(len(a), len(b))
    if rule == "nash":
        pa, pb = 1.0, 1.0
        for x in a:
            pa *= x
        for y in b:
            pb *= y
        first = cmp(round(pa, _DECIMALS), round(pb, _DECIMALS))
        return first or cmp(_lowest(a), _lowest(b))
    if rule == "utilitarian":
        ca, cb = (
            clear if clear is not None else (ref_clears_floor(a, floor), ref_clears_floor(b, floor))
        )
        if ca != cb:
            return 1 if ca else -1
        if ca:
            return cmp(round(sum(a), _DECIMALS), round(sum(b), _DECIMALS))
        return cmp(_lowest(a), _lowest(b))
    raise ConfigError(f"unknown selection rule {rule!r}", field="rule")


def ref_select(
    candidates: Sequence[tuple[str, Sequence[float]]],
    rule: str,
    floor: float,
    clears: Collection[str] | None = None,
) -> str:
    """The id of the best candidate under ``rule``; on a tie, the earliest of those that
    clear the floor (``clears``, ids, as certification reads it), else the earliest."""
    best_id, best_scores = candidates[0]
    for cid, scores in candidates[1:]:
        clear = None if clears is None else (cid in clears, best_id in clears)
        order = _better(rule, scores, best_scores, floor, clear)
        if order > 0 or (order == 0 and clear is not None and clear[0] and not clear[1]):
            best_id, best_scores = cid, scores
    return best_id


def ref_tie_notes(
    candidates: Sequence[tuple[str, Sequence[float]]],
    rule: str,
    floor: float,
    clears: Collection[str],
) -> list[str]:
    """The words a selection among ``candidates`` reports on a tie (none without one):
    the candidates ranked level with the chosen one, in tabling order, and which of them
    is chosen (the earliest clearing the floor when only some do, else the earliest)."""
    chosen = ref_select(candidates, rule, floor, clears)
    chosen_scores = next(s for cid, s in candidates if cid == chosen)
    tied = [
        cid
        for cid, scores in candidates
        if _better(rule, scores, chosen_scores, floor, (cid in clears, chosen in clears)) == 0
    ]
    if len(tied) < 2:
        return []
    listed = ", ".join(tied)
    clearing = [cid for cid in tied if cid in clears]
    if clearing and len(clearing) < len(tied):
        return [
            f"tie under {rule} between {listed}; {clearing[0]}, the earliest tabled "
            "candidate that clears the floor for every agent, is chosen"
        ]
    return [f"tie under {rule} between {listed}; the earliest tabled candidate {tied[0]} is chosen"]


def ref_bottleneck_tie_notes(scores: Mapping[str, float], order: Sequence[str]) -> list[str]:
    """The words the bottleneck choice reports on a tie (none without one)."""

    def level(value: float) -> float:
        return -math.inf if math.isnan(value) else value

    chosen = ref_bottleneck(scores, order)
    low = level(scores[chosen])
    tied = [a for a in order if a in scores and level(scores[a]) == low]
    if len(tied) < 2:
        return []
    return [f"bottleneck tie between {', '.join(tied)} at {low:.4g}; {tied[0]} is listed first"]


def ref_gain(leader_worst: float, new_worst: float) -> float:
    """The rise of the worst-off score, rounded."""
    return round(new_worst - leader_worst, _DECIMALS)


def ref_accepts(leader_worst: float, new_worst: float, margin: float) -> bool:
    """Whether the new candidate may replace the leader."""
    gain = ref_gain(leader_worst, new_worst)
    return gain > 0 and gain >= margin


def ref_bottleneck(scores: Mapping[str, float], order: Sequence[str]) -> str:
    """The least-satisfied agent, the first listed on a tie."""

    def level(value: float) -> float:
        return -math.inf if math.isnan(value) else value

    chosen: str | None = None
    for agent in order:
        if agent in scores and (chosen is None or level(scores[agent]) < level(scores[chosen])):
            chosen = agent
    if chosen is None:
        raise InputError("no scored agent")
    return chosen
