"""DCI-CF stage 7: the deterministic fallback cascade (``docs/dci.md``).

When deliberation does not converge, the decision is forced by pure rules applied in a
fixed order, each narrowing the candidate set; the rule at which one candidate is left
names the path (``fallback:outranking`` ... ``fallback:tie_break``):

1. **Outranking** (ELECTRE I style). Criteria are the participants' scores (equal
   weights unless given). ``C(a,b)`` is the weight share of participants scoring
   ``a >= b``; ``D(a,b)`` is the largest deficit ``max_j (g_j(b) - g_j(a))``.
   ``a`` outranks ``b`` when ``C(a,b) >= concordance`` and ``D(a,b) <= discordance``.
   Candidates are the options no other option strictly outranks (``b S a`` and not
   ``a S b``); if that set is empty (a cycle) every option stays a candidate.
2. **Minimax regret** among the candidates: regret of ``a`` for participant ``j`` is
   ``max_b g_j(b) - g_j(a)`` over all options; keep the options whose largest regret
   is smallest.
3. **Satisficing**: keep the candidates every participant scores at least ``level``
   (if none does, the set is unchanged).
4. **Fixed tie-break**: the first remaining option in canonical order (task options in
   file order, then proposals in speaking order), fixed before anyone scores.

Choices this module makes: the thresholds (concordance 0.6, discordance 0.4,
satisficing 0.5, all settings), regret-based minimax, and that participants whose score
row is incomplete are left out (reported). Float comparisons use a 1e-9 tolerance so the
result never depends on rounding noise.

>>> r = cascade(["o1", "o2"], {"p1": {"o1": 0.9, "o2": 0.2}, "p2": {"o1": 0.8, "o2": 0.3}})
>>> r.selected, r.rule
('o1', 'outranking')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

__all__ = [
    "CascadeResult",
    "CascadeStep",
    "FallbackRule",
    "cascade",
    "concordance",
    "discordance",
    "minimax_regret",
    "outranking_candidates",
    "satisficing",
]

FallbackRule = Literal["outranking", "minimax", "satisficing", "tie_break"]
_EPS = 1e-9

Scores = Mapping[str, Mapping[str, float]]


class CascadeStep(BaseModel):
    """One rule applied: which candidates went in and which came out."""

    model_config = ConfigDict(frozen=True)

    rule: FallbackRule
    candidates_in: list[str]
    candidates_out: list[str]
    detail: dict[str, float]
    """Per-option figure the rule used (net outranking count, max regret, min score)."""


class CascadeResult(BaseModel):
    """Outcome of the cascade, with every step and the raw matrices."""

    model_config = ConfigDict(frozen=True)

    selected: str | None
    """The chosen option (``None`` only when there were no options)."""
    rule: FallbackRule
    """The rule at which a single candidate remained."""
    steps: list[CascadeStep]
    concordance: dict[str, dict[str, float]]
    discordance: dict[str, dict[str, float]]
    excluded_participants: list[str]
    """Participants left out because their score row was incomplete."""


def _complete_rows(
    options: Sequence[str], scores: Scores
) -> tuple[dict[str, dict[str, float]], list[str]]:
    rows: dict[str, dict[str, float]] = {}
    excluded: list[str] = []
    for participant in sorted(scores):
        row = scores[participant]
        if all(o in row for o in options):
            rows[participant] = {o: float(row[o]) for o in options}
        else:
            excluded.append(participant)
    return rows, excluded


def concordance(a: str, b: str, rows: Scores, weights: Mapping[str, float] | None = None) -> float:
    """Weight share of participants scoring ``a`` at least as high as ``b``."""
    total = sum(_w(weights, j) for j in rows)
    if total <= 0:
        return 0.0
    agree = sum(_w(weights, j) for j, row in rows.items() if row[a] >= row[b] - _EPS)
    return agree / total


def discordance(a: str, b: str, rows: Scores) -> float:
    """Largest score deficit of ``a`` against ``b`` over participants (0 when none)."""
    return max((max(0.0, row[b] - row[a]) for row in rows.values()), default=0.0)


def _w(weights: Mapping[str, float] | None, participant: str) -> float:
    return 1.0 if weights is None else float(weights.get(participant, 0.0))


def outranking_candidates(
    options: Sequence[str],
    rows: Scores,
    *,
    concordance_threshold: float,
    discordance_threshold: float,
    weights: Mapping[str, float] | None = None,
) -> tuple[list[str], dict[str, float], dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """Options not strictly outranked by another; with net outranking counts and C, D."""
    c = {a: {b: concordance(a, b, rows, weights) for b in options if b != a} for a in options}
    d = {a: {b: discordance(a, b, rows) for b in options if b != a} for a in options}

    def outranks(a: str, b: str) -> bool:
        return c[a][b] >= concordance_threshold - _EPS and d[a][b] <= discordance_threshold + _EPS

    net = {
        a: float(
            sum(outranks(a, b) for b in options if b != a)
            - sum(outranks(b, a) for b in options if b != a)
        )
        for a in options
    }
    kept = [
        a
        for a in options
        if not any(outranks(b, a) and not outranks(a, b) for b in options if b != a)
    ]
    return (kept or list(options)), net, c, d


def minimax_regret(
    candidates: Sequence[str], options: Sequence[str], rows: Scores
) -> tuple[list[str], dict[str, float]]:
    """Candidates whose largest regret (against the best option per participant) is smallest."""
    if not rows:
        return list(candidates), {}
    best = {j: max(row[o] for o in options) for j, row in rows.items()}
    regret = {a: max(best[j] - row[a] for j, row in rows.items()) for a in candidates}
    low = min(regret.values())
    return [a for a in candidates if regret[a] <= low + _EPS], regret


def satisficing(
    candidates: Sequence[str], rows: Scores, level: float
) -> tuple[list[str], dict[str, float]]:
    """Candidates every participant scores at least ``level``; unchanged if none qualifies."""
    if not rows:
        return list(candidates), {}
    low = {a: min(row[a] for row in rows.values()) for a in candidates}
    kept = [a for a in candidates if low[a] >= level - _EPS]
    return (kept or list(candidates)), low


def cascade(
    options: Sequence[str],
    scores: Scores,
    *,
    concordance_threshold: float = 0.6,
    discordance_threshold: float = 0.4,
    satisficing_level: float = 0.5,
    weights: Mapping[str, float] | None = None,
) -> CascadeResult:
    """Run outranking -> minimax -> satisficing -> fixed tie-break over ``options``.

    ``options`` is the canonical order (it decides the tie-break); ``scores`` maps each
    participant to its score per option.
    """
    opts = list(dict.fromkeys(options))
    rows, excluded = _complete_rows(opts, scores)
    steps: list[CascadeStep] = []
    if not opts:
        return CascadeResult(
            selected=None,
            rule="tie_break",
            steps=[],
            concordance={},
            discordance={},
            excluded_participants=excluded,
        )

    kept, net, c, d = outranking_candidates(
        opts,
        rows,
        concordance_threshold=concordance_threshold,
        discordance_threshold=discordance_threshold,
        weights=weights,
    )
    steps.append(
        CascadeStep(rule="outranking", candidates_in=opts, candidates_out=kept, detail=net)
    )
    result_rule: FallbackRule = "outranking"
    current = kept
    if len(current) > 1:
        after, regret = minimax_regret(current, opts, rows)
        steps.append(
            CascadeStep(rule="minimax", candidates_in=current, candidates_out=after, detail=regret)
        )
        current, result_rule = after, "minimax"
    if len(current) > 1:
        after, low = satisficing(current, rows, satisficing_level)
        steps.append(
            CascadeStep(rule="satisficing", candidates_in=current, candidates_out=after, detail=low)
        )
        current, result_rule = after, "satisficing"
    if len(current) > 1:
        steps.append(
            CascadeStep(
                rule="tie_break", candidates_in=current, candidates_out=current[:1], detail={}
            )
        )
        current, result_rule = current[:1], "tie_break"
    return CascadeResult(
        selected=current[0],
        rule=result_rule,
        steps=steps,
        concordance=c,
        discordance=d,
        excluded_participants=excluded,
    )
