"""The reliability fit from a labelled set: strata, beta*, reliabilities, correlations, n_eff (``docs/guard.md``).

:func:`fit_reliability` measures, on cases with a gold answer:

* per evidence stratum, the accuracy, mean confidence, binned ECE and
  ``|mean confidence - accuracy|`` of unweighted majority (vote-share confidence),
  consensus weighting at the reference beta, and the guarded aggregator;
* the beta* search (see below);
* each agent's accuracy, overall and per evidence stratum, and a smoothed reliability;
* the pairwise error correlation of the agents and the effective number of independent
  voters of the whole panel, ``n_eff = n / (1 + (n - 1) * mean pairwise error correlation)``;
* whether a single voter is measurably better than the majority on the evidence-absent
  stratum (the correlated-hallucination study's "single independent verifier with veto").

Choices this module makes:

* Strata are per case: ``present`` (every voter had evidence), ``absent`` (no voter
  had), ``mixed`` (the rest), and ``all``. A voter had evidence as the guard reads it
  (:func:`~dissensus.guard.provenance.has_evidence`): a parametric source marked
  ``evidence_present`` is no evidence. beta* is measured on ``absent``; when that
  stratum has fewer than ``min_stratum_cases`` cases, beta* is ``None`` (unmeasured),
  which makes invariant 3 fail: the study requires the stratum to be measured explicitly.
* beta* is the largest beta of the grid such that, for it *and every smaller beta*,
  consensus weighting on the absent stratum (a) loses no accuracy against unweighted
  majority and (b) does not state a mean confidence more than
  ``overconfidence_tolerance`` above the stratum's measured majority accuracy (the study's
  third invariant: a maximal-agreement cluster must not drive confidence above the
  independently measured ceiling). Requiring the whole prefix to be safe keeps beta*
  on the near side of the cliff even when the accuracy delta is not monotone. With two
  answers, weighting never changes the winner, so (a) alone would never bind; (b) is
  what bounds beta there. ``beta_star_accuracy`` reports the study's (a)-only value.
* Reliability of agent ``i`` in a stratum is ``(correct + k * r_agent) / (votes + k)``,
  its overall accuracy smoothed the same way toward the pooled accuracy of all agents
  (``k = smoothing``, default 2): a voter with few labelled votes is not trusted on them.
* Error correlation is the phi coefficient of two agents' error indicators on the cases
  both voted on (at least 5 shared cases and errors not constant, else unmeasured).
* The recommended verifier is measured on the absent stratum, or on all cases when the
  labelled set has no absent case (a panel that always retrieves still gets one);
  among agents of equal accuracy the one that appears first in the labelled set is
  recommended.
* Confidence of a decided answer is never the vote share: see
  :mod:`dissensus.guard.confidence`.
* A calibration file is checked as it is read, a figure out of its range refused
  naming its field (the constraints of :class:`ReliabilityFit`): among them
  ``beta_star`` and ``beta_star_accuracy`` are finite and not negative (or null), as
  every beta of the grid is. A ``beta_star`` of -3 was taken as 0 by invariant 3,
  whose message then said "beta* = 0" beside the figure -3.0.
* :func:`fit_reliability` takes an iterable (not a string) of
  :class:`~dissensus.types.VoteCase`: anything else, or an element that is not one, is an
  :class:`InputError` whose ``field`` is ``cases`` or ``cases[i]``; ``settings`` other
  than a :class:`ReliabilitySettings` or ``None`` is a :class:`ConfigError` naming it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Annotated, Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field, model_validator

from dissensus.errors import ConfigError, InputError
from dissensus.guard.arrays import (
    consensus_weighted_vote,
    majority_vote,
    n_eff_per_case,
    pairwise_error_correlation,
)
from dissensus.guard.encoding import EncodedCases, encode_cases
from dissensus.guard.metrics import CalibrationFigures, figures
from dissensus.types import VoteCase

__all__ = [
    "AgentReliability",
    "BetaPoint",
    "ReliabilityFit",
    "ReliabilitySettings",
    "StratumReport",
    "VerifierChoice",
    "default_beta_grid",
    "fit_reliability",
]

STRATA = ("present", "mixed", "absent", "all")


def default_beta_grid() -> list[float]:
    """0, 0.25, ..., 8."""
    return [round(0.25 * i, 2) for i in range(33)]


class ReliabilitySettings(BaseModel):
    """How a calibration was measured."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    beta_reference: float = 1.5
    """Beta of the consensus-weighting figures in the strata (the study's default)."""
    beta_grid: list[Annotated[float, Field(ge=0.0, allow_inf_nan=False)]] = Field(
        default_factory=default_beta_grid
    )
    """Betas tried by the beta* search, ascending (each finite and not negative, so that
    beta* is one a calibration file may hold)."""
    min_stratum_cases: int = 10
    """Fewest evidence-absent cases for beta* to count as measured."""
    overconfidence_tolerance: float = 0.05
    """How far mean consensus confidence may exceed majority accuracy on the absent stratum."""
    smoothing: float = 2.0
    """Pseudo-votes pulling a reliability toward the agent's (or pool's) accuracy."""
    verifier_margin: float = 0.05
    """Accuracy a single voter must add over majority to be recommended as verifier."""
    min_verifier_votes: int = 20
    """Fewest labelled votes of a recommended verifier."""


_CORRELATION_BOUND = 1.0 + 1e-9
"""A correlation's bound, with room for rounding (numpy's corrcoef may give 1.0000000000000002)."""


class AgentReliability(BaseModel):
    """One agent's measured accuracy and the smoothed reliabilities the guard uses."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agent: str
    family: str | None
    votes: int = Field(ge=0)
    accuracy: float | None = Field(ge=0.0, le=1.0)
    reliability: float = Field(ge=0.0, le=1.0)
    votes_present: int = Field(ge=0)
    reliability_present: float = Field(ge=0.0, le=1.0)
    votes_absent: int = Field(ge=0)
    reliability_absent: float = Field(ge=0.0, le=1.0)


class StratumReport(BaseModel):
    """Accuracy and calibration of each aggregator on one evidence stratum."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    stratum: str
    cases: int
    majority: CalibrationFigures
    """Unweighted majority, confidence = vote share."""
    consensus: CalibrationFigures
    """Consensus weighting at ``beta_reference``, confidence = weight share."""
    guarded: CalibrationFigures | None = None
    """The guard with this calibration (in-sample)."""


class BetaPoint(BaseModel):
    """One beta of the search, on the evidence-absent stratum."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    beta: float
    accuracy: float
    accuracy_delta: float
    """Consensus accuracy minus unweighted-majority accuracy."""
    mean_confidence: float
    overshoot: float
    """Mean consensus confidence minus majority accuracy."""
    safe: bool


class VerifierChoice(BaseModel):
    """A voter measurably better than the majority on the evidence-absent stratum."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agent: str
    accuracy: float
    majority_accuracy: float
    votes: int


class ReliabilityFit(BaseModel):
    """Everything :func:`dissensus.guard.guard_votes` needs from a labelled set (JSON-ready)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1] = 1
    cases: int = Field(ge=0)
    labels: list[str]
    pooled_reliability: float = Field(ge=0.0, le=1.0)
    """Accuracy of all labelled votes together."""
    agents: list[AgentReliability]
    error_correlation: list[list[float | None]]
    """Pairwise error correlation, agents in the order of ``agents`` (``None`` = unmeasured)."""
    mean_error_correlation: float | None = Field(ge=-_CORRELATION_BOUND, le=_CORRELATION_BOUND)
    n_eff: float = Field(ge=0.0)
    """Effective number of independent voters of the whole panel."""
    strata: list[StratumReport]
    beta_search: list[BetaPoint]
    beta_stratum_cases: int
    beta_star: float | None = Field(ge=0.0, allow_inf_nan=False)
    """Largest safe beta, ``None`` when the absent stratum is not measured (a beta of the
    grid: finite and not negative)."""
    beta_star_accuracy: float | None = Field(ge=0.0, allow_inf_nan=False)
    """The study's definition alone: largest beta whose accuracy delta (and every smaller one's) is >= 0."""
    verifier: VerifierChoice | None
    settings: ReliabilitySettings

    @model_validator(mode="after")
    def _one_row_per_agent(self) -> ReliabilityFit:
        """A file edited by hand is refused naming the field, not used: an agent named
        twice, or a correlation matrix that is not one row and column per agent with
        values in [-1, 1], crashed the guard with an IndexError."""
        names = [a.agent for a in self.agents]
        if len(set(names)) != len(names):
            twice = next(n for n in names if names.count(n) > 1)
            raise ValueError(f"agents: agent {twice!r} appears more than once")
        n = len(names)
        if len(self.error_correlation) != n or any(len(row) != n for row in self.error_correlation):
            raise ValueError(
                f"error_correlation: must be {n} rows of {n} values, one per agent of 'agents'"
            )
        for row in self.error_correlation:
            for value in row:
                if value is not None and not abs(value) <= _CORRELATION_BOUND:
                    raise ValueError(f"error_correlation: {value!r} is not within [-1, 1]")
        return self

    def _position(self, name: str) -> int | None:
        return next((i for i, a in enumerate(self.agents) if a.agent == name), None)

    def agent(self, name: str) -> AgentReliability | None:
        i = self._position(name)
        return None if i is None else self.agents[i]

    def reliability(self, name: str, evidence_present: bool) -> float | None:
        """Smoothed reliability of ``name`` in the stratum of its vote (``None`` if unknown)."""
        a = self.agent(name)
        if a is None:
            return None
        return a.reliability_present if evidence_present else a.reliability_absent

    def correlation(self, a: str, b: str) -> float | None:
        """Measured error correlation of two agents (``None`` if unmeasured)."""
        i, j = self._position(a), self._position(b)
        if i is None or j is None:
            return None
        return self.error_correlation[i][j]

    def stratum(self, name: str) -> StratumReport:
        return next(s for s in self.strata if s.stratum == name)


def _smooth(correct: float, votes: float, prior: float, k: float) -> float:
    return (correct + k * prior) / (votes + k)


def _agents(
    enc: EncodedCases, settings: ReliabilitySettings
) -> tuple[list[AgentReliability], float]:
    present = enc.labels >= 0
    right = (enc.labels == enc.gold[:, None]) & present
    total = int(present.sum())
    pooled = float(right.sum() / total) if total else 0.5
    k = settings.smoothing
    out: list[AgentReliability] = []
    for j, name in enumerate(enc.agents):
        votes = int(present[:, j].sum())
        correct = int(right[:, j].sum())
        overall = _smooth(correct, votes, pooled, k)
        ev = enc.evidence[:, j] & present[:, j]
        no = ~enc.evidence[:, j] & present[:, j]
        out.append(
            AgentReliability(
                agent=name,
                family=enc.families[j],
                votes=votes,
                accuracy=correct / votes if votes else None,
                reliability=overall,
                votes_present=int(ev.sum()),
                reliability_present=_smooth(float(right[ev, j].sum()), float(ev.sum()), overall, k),
                votes_absent=int(no.sum()),
                reliability_absent=_smooth(float(right[no, j].sum()), float(no.sum()), overall, k),
            )
        )
    return out, pooled


def _strata_masks(enc: EncodedCases) -> dict[str, NDArray[np.bool_]]:
    present = enc.labels >= 0
    with_ev = (enc.evidence & present).sum(axis=1)
    voters = present.sum(axis=1)
    return {
        "present": (with_ev == voters) & (voters > 0),
        "absent": with_ev == 0,
        "mixed": (with_ev > 0) & (with_ev < voters),
        "all": np.ones(len(voters), dtype=bool),
    }


def _beta_search(
    enc: EncodedCases, mask: NDArray[np.bool_], settings: ReliabilitySettings
) -> tuple[list[BetaPoint], float | None, float | None]:
    labels = enc.labels[mask]
    gold = enc.gold[mask]
    k = len(enc.classes)
    if labels.shape[0] < settings.min_stratum_cases:
        return [], None, None
    mv, _ = majority_vote(labels, k)
    base = float(np.mean(mv == gold))
    points: list[BetaPoint] = []
    star: float | None = 0.0
    star_acc: float | None = 0.0
    prefix_ok = prefix_acc_ok = True
    for beta in sorted(settings.beta_grid):
        answers, probs = consensus_weighted_vote(labels, k, beta)
        acc = float(np.mean(answers == gold))
        conf = float(np.mean(probs.max(axis=1)))
        delta = acc - base
        overshoot = conf - base
        acc_ok = delta >= -1e-12
        safe = beta == 0 or (acc_ok and overshoot <= settings.overconfidence_tolerance)
        points.append(
            BetaPoint(
                beta=beta,
                accuracy=acc,
                accuracy_delta=delta,
                mean_confidence=conf,
                overshoot=overshoot,
                safe=safe,
            )
        )
        prefix_ok = prefix_ok and safe
        prefix_acc_ok = prefix_acc_ok and acc_ok
        if prefix_ok:
            star = beta
        if prefix_acc_ok:
            star_acc = beta
    return points, star, star_acc


def _verifier(
    enc: EncodedCases,
    mask: NDArray[np.bool_],
    agents: list[AgentReliability],
    settings: ReliabilitySettings,
) -> VerifierChoice | None:
    labels = enc.labels[mask]
    gold = enc.gold[mask]
    if labels.shape[0] == 0:
        return None
    mv, _ = majority_vote(labels, len(enc.classes))
    best: VerifierChoice | None = None
    for j, a in enumerate(agents):
        voted = labels[:, j] >= 0
        votes = int(voted.sum())
        if votes < settings.min_verifier_votes:
            continue
        acc = float(np.mean(labels[voted, j] == gold[voted]))
        maj = float(np.mean(mv[voted] == gold[voted]))
        if acc >= maj + settings.verifier_margin and (best is None or acc > best.accuracy):
            best = VerifierChoice(agent=a.agent, accuracy=acc, majority_accuracy=maj, votes=votes)
    return best


def _nan_to_none(x: float) -> float | None:
    return None if math.isnan(x) else float(x)


def fit_reliability(
    cases: Sequence[VoteCase], settings: ReliabilitySettings | None = None
) -> ReliabilityFit:
    """Measure a :class:`ReliabilityFit` on labelled cases (cases without gold are ignored).

    >>> from dissensus.types import Vote, VoteCase
    >>> v = lambda a, x: Vote(agent=a, answer=x, evidence_source="parametric", evidence_present=False)
    >>> cal = fit_reliability([VoteCase(id=str(i), votes=[v("a", "y"), v("b", "y" if i % 3 else "n")], gold="y") for i in range(30)])
    >>> cal.cases, [a.agent for a in cal.agents]
    (30, ['a', 'b'])
    """
    from dissensus.guard.decision import GuardThresholds, guard_cases

    if settings is not None and not isinstance(settings, ReliabilitySettings):
        raise ConfigError(
            f"expected ReliabilitySettings, got {type(settings).__name__}", field="settings"
        )
    settings = settings or ReliabilitySettings()
    if isinstance(cases, str | bytes) or not isinstance(cases, Iterable):
        error = InputError(f"cases must be an iterable of VoteCase, not {type(cases).__name__}")
        error.field = "cases"
        raise error
    labelled: list[VoteCase] = []
    for i, case in enumerate(cases):
        if not isinstance(case, VoteCase):
            error = InputError(f"cases.{i} is a {type(case).__name__}, not a VoteCase")
            error.field = f"cases.{i}"
            raise error
        if case.gold is not None:
            labelled.append(case)
    if not labelled:
        raise InputError("the reliability fit needs at least one case with a gold answer")
    enc = encode_cases(labelled)
    k = len(enc.classes)
    agents, pooled = _agents(enc, settings)
    present = enc.labels >= 0
    errors = np.where(present, (enc.labels != enc.gold[:, None]).astype(np.float64), np.nan)
    rho = pairwise_error_correlation(errors)
    off = rho[~np.eye(len(enc.agents), dtype=bool)]
    off = off[~np.isnan(off)]
    mean_rho = float(np.clip(off, 0.0, 1.0).mean()) if off.size else None
    full = np.ones((1, len(enc.agents)), dtype=bool)
    n_eff = float(n_eff_per_case(full, np.nan_to_num(rho, nan=mean_rho or 0.0))[0])
    masks = _strata_masks(enc)
    search, star, star_acc = _beta_search(enc, masks["absent"], settings)
    verifier = _verifier(
        enc, masks["absent"] if masks["absent"].sum() else masks["all"], agents, settings
    )

    mv, mp = majority_vote(enc.labels, k)
    cw, cp = consensus_weighted_vote(enc.labels, k, settings.beta_reference)
    base = ReliabilityFit(
        cases=len(labelled),
        labels=enc.classes,
        pooled_reliability=pooled,
        agents=agents,
        error_correlation=[[_nan_to_none(x) for x in row] for row in rho],
        mean_error_correlation=mean_rho,
        n_eff=n_eff,
        strata=[],
        beta_search=search,
        beta_stratum_cases=int(masks["absent"].sum()),
        beta_star=star,
        beta_star_accuracy=star_acc,
        verifier=verifier,
        settings=settings,
    )
    decisions = guard_cases(labelled, base, settings=GuardThresholds())
    g_conf = np.array([d.confidence for d in decisions])
    g_hit = np.array([d.answer == c.gold for d, c in zip(decisions, labelled, strict=True)])
    strata = []
    for name in STRATA:
        m = masks[name]
        strata.append(
            StratumReport(
                stratum=name,
                cases=int(m.sum()),
                majority=figures(mp.max(axis=1)[m], (mv == enc.gold)[m]),
                consensus=figures(cp.max(axis=1)[m], (cw == enc.gold)[m]),
                guarded=figures(g_conf[m], g_hit[m]),
            )
        )
    return base.model_copy(update={"strata": strata})
