"""Selection rules, acceptance and bottleneck choice (CONCORD phases 3-5, ``docs/concord.md``).

Pure functions over calibrated scores. The default rule is *maximin*: the candidate
whose worst-off agent is best off. The CONCORD specification leaves the other rules open; the ones
offered rank candidates as follows (higher key is better):

* ``maximin``: the worst-off score;
* ``leximin``: the scores sorted ascending, compared lexicographically;
* ``nash``: the product of the scores, then the worst-off score;
* ``utilitarian``: candidates clearing the floor for every agent first, ranked by the
  sum of scores; the others after them, ranked by their worst-off score
  ("utilitarian with floor"). Whether a candidate clears the floor is read as the
  protocol reads it for certification (the unrounded scores; a faulted score never
  clears it, even a floor of 0), never from the 12-decimal scores: a candidate the
  run could never certify on does not rank among those that clear it.

Choices this module makes:

* **Ties** among equally ranked candidates go to the earliest tabled candidate that
  clears the floor for every agent (read unrounded, as certification reads it: two
  worst-off scores that both round to 0.7 tie, yet only a real 0.7 clears a floor of
  0.7), else to the earliest tabled candidate (round, then problem order of the
  authors); every tie is reported in words.
* **Replacement.** Whatever the rule, the leader is replaced only by a candidate whose
  worst-off score beats the leader's by a strict improvement of at least the margin
  (``improvement > 0`` and ``improvement >= margin``, the improvement rounded to 12
  decimals). Among the candidates that qualify the rule picks. The worst-off score of
  the leader therefore strictly increases at every replacement, so the run cannot cycle.
* **Bottleneck.** The covered agent with the lowest calibrated score on the leader; ties
  go to the agent listed first in the problem, reported. A score that is not a number
  (which calibration never records) ranks lowest, so the choice is always defined.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import Literal

from dissensus.concord.scale import DIGITS
from dissensus.errors import ConfigError, InputError

__all__ = [
    "RULES",
    "SelectionRule",
    "accepts",
    "bottleneck",
    "clears_floor",
    "rule_key",
    "select",
    "worst_off",
]

SelectionRule = Literal["maximin", "leximin", "nash", "utilitarian"]
RULES: tuple[SelectionRule, ...] = ("maximin", "leximin", "nash", "utilitarian")


def worst_off(scores: Sequence[float]) -> float:
    """The lowest score (the worst-off agent's satisfaction)."""
    return min(scores)


def clears_floor(scores: Sequence[float], floor: float) -> bool:
    """Whether every score is at or above the floor."""
    return all(s >= floor for s in scores)


def rule_key(
    rule: SelectionRule, scores: Sequence[float], floor: float, clears: bool | None = None
) -> tuple[float, ...]:
    """Sort key of a score vector under ``rule`` (higher is better). ``clears`` says
    whether the candidate clears the floor for every agent as the protocol reads it (the
    unrounded scores, a fault never clearing it); without it, read from ``scores``."""
    if rule == "maximin":
        return (min(scores),)
    if rule == "leximin":
        return tuple(sorted(scores))
    if rule == "nash":
        return (round(math.prod(scores), DIGITS), min(scores))
    if rule == "utilitarian":
        if clears_floor(scores, floor) if clears is None else clears:
            return (1.0, round(sum(scores), DIGITS))
        return (0.0, min(scores))
    raise ConfigError(f"unknown selection rule {rule!r}", field="rule")


def select(
    candidates: Sequence[tuple[str, Sequence[float]]],
    rule: SelectionRule,
    floor: float,
    clears: Collection[str] | None = None,
) -> tuple[str, str | None]:
    """The best candidate under ``rule`` and a note on the tie, if any: on a tie, the
    earliest that clears the floor for every agent (``clears``: the ids of those that do,
    as the protocol reads the floor), else the earliest."""
    if not candidates:
        raise InputError("no candidate to select from")
    keys = [
        rule_key(rule, scores, floor, None if clears is None else cid in clears)
        for cid, scores in candidates
    ]
    best = max(keys)
    tied = [cid for (cid, _), key in zip(candidates, keys, strict=True) if key == best]
    if len(tied) == 1:
        return tied[0], None
    clearing = [cid for cid in tied if clears is not None and cid in clears]
    if clearing and len(clearing) < len(tied):
        return clearing[0], (
            f"tie under {rule} between {', '.join(tied)}; {clearing[0]}, the earliest tabled "
            "candidate that clears the floor for every agent, is chosen"
        )
    note = f"tie under {rule} between {', '.join(tied)}; the earliest tabled candidate {tied[0]} is chosen"
    return tied[0], note


def improvement(leader_worst: float, new_worst: float) -> float:
    """Rounded improvement of the worst-off score."""
    return round(new_worst - leader_worst, DIGITS)


def accepts(leader_worst: float, new_worst: float, margin: float) -> bool:
    """Whether a candidate with ``new_worst`` may replace a leader with ``leader_worst``."""
    gain = improvement(leader_worst, new_worst)
    return gain > 0 and gain >= margin


def bottleneck(scores: Mapping[str, float], order: Sequence[str]) -> tuple[str, str | None]:
    """The least-satisfied agent (problem order breaks ties) and a note on the tie, if any."""
    ranked = [a for a in order if a in scores]
    if not ranked:
        raise InputError("no scored agent to choose a bottleneck from")

    def level(agent: str) -> float:
        value = scores[agent]
        return -math.inf if math.isnan(value) else value

    low = min(level(a) for a in ranked)
    tied = [a for a in ranked if level(a) == low]
    if len(tied) == 1:
        return tied[0], None
    return tied[
        0
    ], f"bottleneck tie between {', '.join(tied)} at {low:.4g}; {tied[0]} is listed first"
