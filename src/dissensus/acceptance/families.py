"""Score families: which score orders the cases for the threshold, chosen validly.

A *score family* turns a case's candidate rows (:mod:`dissensus.acceptance.features`)
into the committed answer and a score; the fixed sequence of
:mod:`dissensus.acceptance.bound` then picks the family's threshold. The families:

* ``learned`` — the learned model's probability that the best candidate is right
  (:mod:`dissensus.acceptance.fit`, out-of-fold on the calibration cases);
* ``votes`` — the plurality answer's first-answer votes over the panel's agents;
* ``votes_both`` — its votes over both presentation orders (first answers and
  re-asks, over agents and re-asked agents);
* ``order_stable`` — the share of agents giving it in both orders;
* ``guard`` — the guard's posterior for it.

Counting wins on some panels (many independent solvers), the model on others (few
judges with known biases): which family is best is not known in advance, so the
calibration chooses among the *competing* families (by default
:data:`DEFAULT_FAMILIES`: ``learned`` and ``votes_both``, which is ``votes`` on panels
without re-asks) by a rule that keeps the guarantee:

* ``bonferroni`` (the default), weighted: every eligible competing family ``f`` runs its
  fixed sequence at level ``delta * w_f`` with weights fixed in advance and summing to 1
  over the eligible competitors (:data:`DEFAULT_WEIGHTS`: 0.9 for ``learned``, 0.1 for
  ``votes_both``; equal weights for a set the caller names); the family whose threshold
  accepts the most calibration cases is chosen (ties: the order above). By the union
  bound the probability that *any* competitor's threshold misses the target is at most
  ``delta``, so the chosen one's is too.
* ``split``: a seeded half of the calibration cases chooses the family (most accepted
  at ``delta``), the other half chooses its threshold at ``delta``.

``evaluation/acceptance_families.py`` measures both: the weighted ``bonferroni`` is
shipped. The split halves the cases each test sees, which costs far more than a factor
in ``delta``. The weights: on the data sets measured the model is the best family or
close to it, and a test at ``0.9 delta`` costs it almost nothing, while counting — the
fallback for panels where the model fails — has power to spare at ``0.1 delta`` on the
large, many-solver panels where it wins (equal weights cost the model 0.03 to 0.08
coverage on LLMBar). Two competitors, not five: the order-stable share and the guard's
posterior never beat both defaults on the data sets measured. The other families are
still scored (non-competing, at the full ``delta``, for ``--explain``) and any set can be
named by the caller.

Choices this module makes: a family is *eligible* when its case scores take
at least two distinct values on the calibration cases (a label-free rule: a family
without re-asks or without a guard is constant and could accept all or nothing). The
rule is the same for every family, the learned one included: a model fitted on cases
whose every answer was right (or wrong) is a constant (every coefficient 0), and its
scores rank nothing either. Only eligible families compete; when none of the competing
families is eligible (a family named alone by the caller included), no threshold is
tested and the file accepts nothing, its reason naming the constant families
(:data:`CONSTANT_REASON`). A family's answer on tied candidates is the first in
candidate order, as for the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from dissensus.acceptance.bound import Grid, StratumFigures, ThresholdChoice, select_threshold
from dissensus.acceptance.features import Candidate

__all__ = [
    "CONSTANT_REASON",
    "DEFAULT_FAMILIES",
    "DEFAULT_WEIGHTS",
    "FAMILIES",
    "FamilyFigures",
    "SelectionRule",
    "eligible",
    "family_score",
    "family_scores",
    "select_family",
]

FAMILIES = ("learned", "votes", "votes_both", "order_stable", "guard")
"""Every score family, in the order ties are broken."""

DEFAULT_FAMILIES = ("learned", "votes_both")
"""The families that compete unless the caller names others (module docstring)."""

DEFAULT_WEIGHTS = {"learned": 0.9, "votes_both": 0.1}
"""Their shares of ``delta`` under the Bonferroni rule (others: equal shares)."""

FEATURE_OF = {
    "votes": "score.votes",
    "votes_both": "score.votes_both",
    "order_stable": "cand.stable_share",
    "guard": "cand.guard_posterior",
}
"""The candidate feature each simple family scores with."""

SelectionRule = Literal["bonferroni", "split"]

CONSTANT_REASON = "constant"
"""Why a family is not eligible: its scores take one value on the calibration cases."""


class FamilyFigures(BaseModel):
    """One family's outcome on the calibration cases (``calibrate-acceptance --explain``)."""

    model_config = ConfigDict(frozen=True, strict=True)

    family: str
    competing: bool = True
    """Whether it competed to be chosen (otherwise scored for information, at ``delta``)."""
    eligible: bool
    """False: its scores are constant on the calibration cases."""
    delta: float
    """The level its fixed sequence ran at."""
    threshold: float | None
    accepted: int
    correct: int
    cases: int
    """Cases its sequence was run on."""

    @property
    def coverage(self) -> float:
        """Share of the cases its threshold accepts."""
        return self.accepted / self.cases if self.cases else 0.0


def family_score(family: str, candidates: Sequence[Candidate]) -> tuple[str | None, float]:
    """A simple family's answer and score for one case (``(None, 0.0)`` without candidates)."""
    key = FEATURE_OF[family]
    best: tuple[str | None, float] = (None, 0.0)
    for cand in candidates:
        value = float(cand.features.get(key, 0.0))
        if best[0] is None or value > best[1]:
            best = (cand.label, value)
    return best


def family_scores(
    family: str, cases: Sequence[Sequence[Candidate]]
) -> list[tuple[str | None, float]]:
    """A simple family's answer and score for every case."""
    return [family_score(family, c) for c in cases]


def eligible(family: str, scores: Sequence[tuple[str | None, float]]) -> bool:
    """Label-free: does the family's case score take at least two values? (The same rule
    for every family, ``learned`` included: a constant score ranks nothing.)"""
    return len({round(s, 12) for _, s in scores}) >= 2


def _nothing(strata: Sequence[str] | None, idx: Sequence[int], reason: str) -> ThresholdChoice:
    """The choice that accepts nothing over the cases ``idx`` (every stratum's figures
    empty), with ``reason``."""
    labels = [str(strata[i]) if strata is not None else "all" for i in idx]
    sizes = {name: labels.count(name) for name in sorted(set(labels))}
    return ThresholdChoice(
        threshold=None,
        reason=reason,
        accepted=0,
        correct=0,
        error_upper=1.0,
        strata=[
            StratumFigures(
                stratum=name, n=n, accepted=0, correct=0, error_upper=1.0, threshold=None
            )
            for name, n in sizes.items()
        ],
    )


def _correct(scores: Sequence[tuple[str | None, float]], golds: Sequence[str]) -> list[bool]:
    return [d is not None and d == g for (d, _), g in zip(scores, golds, strict=True)]


def _run(
    scores: Sequence[tuple[str | None, float]],
    golds: Sequence[str],
    idx: Sequence[int],
    *,
    target: float,
    delta: float,
    min_accepted: int,
    strata: Sequence[str] | None,
    grid: Grid,
) -> ThresholdChoice:
    sub = [scores[i] for i in idx]
    return select_threshold(
        [s for _, s in sub],
        _correct(sub, [golds[i] for i in idx]),
        target=target,
        delta=delta,
        min_accepted=min_accepted,
        strata=[strata[i] for i in idx] if strata is not None else None,
        grid=grid,
    )


def _levels(ok: Sequence[str], delta: float) -> dict[str, float]:
    """Each competitor's share of ``delta`` (weights fixed in advance, renormalised over
    the eligible competitors; a label-free rule)."""
    if set(ok) <= set(DEFAULT_WEIGHTS):
        weights = {f: DEFAULT_WEIGHTS[f] for f in ok}
    else:
        weights = dict.fromkeys(ok, 1.0)
    total = sum(weights.values())
    return {f: delta * w / total for f, w in weights.items()}


def select_family(
    scores: dict[str, list[tuple[str | None, float]]],
    golds: Sequence[str],
    *,
    target: float,
    delta: float,
    min_accepted: int,
    strata: Sequence[str] | None = None,
    grid: Grid,
    rule: SelectionRule = "bonferroni",
    seed: int = 0,
    compete: Sequence[str] = DEFAULT_FAMILIES,
) -> tuple[str, ThresholdChoice, list[FamilyFigures]]:
    """The chosen family, its threshold choice and every family's figures (module docstring).

    ``scores``: family -> the calibration cases' ``(answer, score)`` (out-of-fold for
    ``learned``). ``compete``: the families that may be chosen (those present in ``scores``).
    """
    names = [f for f in FAMILIES if f in scores]
    rivals = [f for f in names if f in compete]
    if not rivals:
        raise ValueError("no competing score family among the scores")
    constant = {f for f in names if not eligible(f, scores[f])}
    ok = [f for f in rivals if f not in constant]
    n = len(golds)
    every = list(range(n))

    def run(f: str, idx: Sequence[int], at: float) -> ThresholdChoice:
        return _run(
            scores[f],
            golds,
            idx,
            target=target,
            delta=at,
            min_accepted=min_accepted,
            strata=strata,
            grid=grid,
        )

    first: dict[str, ThresholdChoice] = {}
    levels: dict[str, float] = {}
    choose_on = every
    if not ok:
        # Nothing to rank with: a constant score would accept all or nothing, as the
        # labels fall. The file accepts nothing, and says why.
        whose = "the competing family" if len(rivals) == 1 else "every competing family"
        reason = (
            f"no eligible score family: {whose} ({', '.join(rivals)}) is {CONSTANT_REASON} "
            f"on the {n} calibration cases (a score that takes one value cannot tell a "
            "right answer from a wrong one), so no threshold is tested"
        )
        chosen, final = rivals[0], _nothing(strata, every, reason)
    else:
        test_on = every
        if rule == "split" and len(ok) > 1:
            perm = np.random.default_rng(seed).permutation(n)
            choose_on = sorted(perm[: n // 2].tolist())
            test_on = sorted(perm[n // 2 :].tolist())
            levels = dict.fromkeys(ok, delta)
        else:
            levels = _levels(ok, delta)
        first = {f: run(f, choose_on, levels[f]) for f in ok}
        chosen = max(ok, key=lambda f: (first[f].accepted, -names.index(f)))
        final = first[chosen] if test_on is choose_on else run(chosen, test_on, delta)
    figures = []
    for f in names:
        got = first.get(f) or run(f, every, delta)
        figures.append(
            FamilyFigures(
                family=f,
                competing=f in ok,
                eligible=f not in constant,
                delta=levels.get(f, delta),
                threshold=got.threshold,
                accepted=got.accepted,
                correct=got.correct,
                cases=len(choose_on) if f in ok else n,
            )
        )
    return chosen, final, figures
