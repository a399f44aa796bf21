"""The guarded aggregator: invariants, decision boundary, explained refusal (``docs/guard.md``).

:func:`guard_votes` takes the votes of one case (with provenance) and an optional
:class:`~dissensus.guard.reliability.ReliabilityFit`, checks the three invariants of the correlated-hallucination study
and decides in one of four modes:

========== ===================================================================
mode       when
========== ===================================================================
consensus  all three invariants hold: consensus weighting ``w = exp(beta * agreement)``
           with agreement decomposed from availability (only voters with evidence
           carry or earn consensus weight)
bounded    all invariants hold but beta was cut to the measured beta*, or the caller
           turned decomposition off: weighting with ``beta <= beta*``
majority   an invariant failed (or no weighting was asked): unweighted majority
verifier   an invariant failed and a single verifier is named (or recommended by the
           calibration) and voted: its answer stands, with veto over the majority
========== ===================================================================

The invariants, each reported with its figures whether it holds or not:

1. *evidence independence is auditable*: at least ``min_sources`` (2) distinct,
   non-parametric evidence sources among the voters that had evidence, and those voters
   not all of one declared model family (the study's "not all downstream of one
   model");
2. *agreement is decomposed from availability*: fallback agreement (largest one-answer
   share among voters without evidence) below ``max_fallback_agreement`` (0.85, the
   seed's default);
3. *the weighting is bounded*: a calibration measured beta* on the evidence-absent
   stratum and ``min(beta, beta*) > 0``.

A refusal names the first invariant that failed, with its figures; the decision is still
made by the fallback mode. ``strict=True`` raises
:class:`~dissensus.guard.errors.CorrelatedConsensusError` instead (it carries the
decision). Whatever the mode, the stated confidence is the posterior of
:mod:`dissensus.guard.confidence` (reliability-weighted, shrunk by redundancy), never a
vote or weight share; the mode's own share is reported beside it as ``share``.

Choices this module makes:

* A tie is broken by the posterior, then by the smallest answer, whether the votes tied
  (majority) or their consensus weights did (consensus, bounded: weighting that ties
  says nothing for either answer, so the answer is not left to its spelling); ``tie``
  records it and the reason says so. The array API's own weighted vote
  (:func:`~dissensus.guard.arrays.consensus_weighted_vote`) still gives a tie to the
  smallest class.
* "Veto" with categorical answers: when the verifier disagrees with the majority the
  majority's answer is vetoed and the verifier's stands. A recommended verifier
  (calibration) is used only with ``use_recommended_verifier`` (default on); an
  explicitly named one always, when it voted.
* ``beta = 0`` asks for no weighting: no refusal is recorded, and invariant 3 holds
  (nothing to bound, whatever beta* is or whether it was measured). The case is decided
  by unweighted majority, or by the verifier when invariant 1 or 2 failed (a verifier is
  the fallback of a failed invariant, never consulted while all three hold): a
  calibration that measured beta* = 0 no longer sends a beta-0 case to its verifier.
* Invariant 1 reads a model family only when every voter that had evidence declares
  one: all of one family fails it (figure ``family``), and a voter without a declared
  family keeps the check to the sources, as before families were read.
* One agent, one vote: votes are a sequence of :class:`~dissensus.types.Vote` whose
  agents are distinct (as :class:`~dissensus.types.VoteCase` and a panel require); an
  agent voting twice, or anything that is not a vote, is an :class:`InputError` naming
  it, never a second voice.
* The other arguments are checked for their kind, once per call (never per vote):
  ``calibration`` a :class:`~dissensus.guard.reliability.ReliabilityFit` or ``None``,
  ``settings`` a :class:`GuardThresholds` or ``None``, ``beta`` a real number (not a
  ``bool``), ``verifier`` and ``case_id`` a string or ``None``: anything else is a
  :class:`ConfigError` naming the argument. ``guard_case`` takes a
  :class:`~dissensus.types.VoteCase` and ``guard_cases`` an iterable of them (not a
  string); anything else is an :class:`InputError` naming ``case``, ``cases`` or
  ``cases[i]`` (its ``field``).
* The checks, the refusal and the decision are built without a second validation when
  every value is already of its field's exact type (what validating them would return;
  the figures plain JSON scalars); any other value (an ``int`` or numpy beta, say) goes
  through validation as before.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from numbers import Real
from operator import itemgetter
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from dissensus.errors import ConfigError, InputError
from dissensus.families import canonical_family
from dissensus.guard.arrays import consensus_weighted_vote
from dissensus.guard.confidence import PriorSettings, posterior
from dissensus.guard.errors import CorrelatedConsensusError
from dissensus.guard.provenance import fallback_agreement, has_evidence, independent_sources
from dissensus.guard.reliability import ReliabilityFit
from dissensus.types import Vote, VoteCase, trusted

__all__ = [
    "GuardDecision",
    "GuardThresholds",
    "InvariantCheck",
    "Mode",
    "Refusal",
    "guard_case",
    "guard_cases",
    "guard_votes",
]

Mode = Literal["consensus", "bounded", "majority", "verifier"]
Figure = float | int | str | bool | None


class GuardThresholds(BaseModel):
    """Thresholds of the guard (defaults are the correlated-hallucination study's where it gives one).

    Every number is checked when the thresholds are made (a pydantic ``ValidationError``
    naming the field): ``max_fallback_agreement`` and the two correlations finite, from 0
    to 1; ``prior_reliability`` finite, strictly between 0 and 1. ``min_sources`` below 2
    counts as 2 here (a run journalled with ``min_sources: 1`` resumes as it always
    did); a new policy setting below 2 is refused (:class:`CheckedGuardThresholds`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_sources: int = 2
    """Independent evidence sources needed for invariant 1 (never below 2: a value below
    counts as 2, and a new policy setting below is refused, :class:`CheckedGuardThresholds`)."""
    max_fallback_agreement: float = Field(default=0.85, ge=0.0, le=1.0, allow_inf_nan=False)
    """Fallback agreement at or above this fails invariant 2 (a share: 0 to 1)."""
    decompose: bool = True
    """Give consensus weight only to agreement among voters with evidence."""
    use_recommended_verifier: bool = True
    """Fall back to the calibration's recommended verifier instead of majority."""
    prior_reliability: float = Field(default=0.7, gt=0.0, lt=1.0, allow_inf_nan=False)
    prior_rho_shared: float = Field(default=0.8, ge=0.0, le=1.0, allow_inf_nan=False)
    prior_rho_other: float = Field(default=0.3, ge=0.0, le=1.0, allow_inf_nan=False)

    def priors(self) -> PriorSettings:
        return PriorSettings(self.prior_reliability, self.prior_rho_shared, self.prior_rho_other)


class CheckedGuardThresholds(GuardThresholds):
    """:class:`GuardThresholds` as a policy loaded now is checked
    (:func:`dissensus.pipeline.policy.policy_from_dict`): ``min_sources`` at least 2 too.
    The runtime reads a journalled policy with :class:`GuardThresholds` (a ``min_sources``
    of 1 counting as 2, as it always did), so a run started before this check still
    resumes."""

    min_sources: int = Field(default=2, ge=2)


class InvariantCheck(BaseModel):
    """One invariant, checked, with the figures it was checked on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    number: int
    name: str
    holds: bool
    message: str
    figures: dict[str, Figure]


class Refusal(BaseModel):
    """Why consensus weighting was refused: the first failed invariant and its figures."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    invariant: int
    name: str
    message: str
    figures: dict[str, Figure]


class GuardDecision(BaseModel):
    """The guard's decision on one case, with everything needed to check it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str | None = None
    mode: Mode
    answer: str
    confidence: float
    """Posterior probability of ``answer`` (accounts for n_eff and reliability)."""
    probabilities: dict[str, float]
    """Posterior over every possible answer; sums to 1."""
    weighted: bool
    """Whether consensus weighting decided the answer."""
    refusal: Refusal | None
    reason: str
    n_eff: float
    n_voters: int
    shrink: float
    share: float
    """The mode's own share for the answer (vote share, or weight share when weighted)."""
    tie: bool
    beta_requested: float
    beta_used: float | None
    beta_star: float | None
    verifier: str | None
    invariants: list[InvariantCheck]


_PLAIN_FIGURES = frozenset({float, int, str, bool, type(None)})
"""Figure values that validation keeps as they are (the union's exact-type members)."""


def _check(
    number: int, name: str, holds: bool, message: str, figures: dict[str, Figure]
) -> InvariantCheck:
    """``InvariantCheck(...)``; built without validation when every figure is a plain
    JSON scalar (validation would return the same values)."""
    if _PLAIN_FIGURES.issuperset(map(type, figures.values())):
        values = {
            "number": number,
            "name": name,
            "holds": holds,
            "message": message,
            "figures": figures,
        }
        return trusted(InvariantCheck, values)
    return InvariantCheck(number=number, name=name, holds=holds, message=message, figures=figures)


_FLOAT_FIELDS = ("confidence", "n_eff", "shrink", "share", "beta_requested")
_OPTIONAL_FLOAT_FIELDS = ("beta_used", "beta_star")
_OPTIONAL_STR_FIELDS = ("id", "verifier")
# The exact types each group of fields may hold (looked up in C, no generator per check).
_FLOATS = itemgetter(*_FLOAT_FIELDS)
_OPTIONAL_FLOATS = itemgetter(*_OPTIONAL_FLOAT_FIELDS)
_OPTIONAL_STRS = itemgetter(*_OPTIONAL_STR_FIELDS)
_FLOAT = frozenset({float})
_OPTIONAL_FLOAT = frozenset({float, type(None)})
_OPTIONAL_STR = frozenset({str, type(None)})


def _decision(values: dict[str, Any]) -> GuardDecision:
    """``GuardDecision(**values)``; built without validation when every value is already
    of its field's exact type (the mode, answer, probabilities and checks are made here)."""
    plain = (
        _FLOAT.issuperset(map(type, _FLOATS(values)))
        and _OPTIONAL_FLOAT.issuperset(map(type, _OPTIONAL_FLOATS(values)))
        and _OPTIONAL_STR.issuperset(map(type, _OPTIONAL_STRS(values)))
        and values["answer"].__class__ is str
        and values["n_voters"].__class__ is int
    )
    if not plain:
        return GuardDecision(**values)
    # In field order, as validation stores them (a dump writes them in this order).
    return trusted(GuardDecision, {name: values[name] for name in _DECISION_FIELDS})


_DECISION_FIELDS = tuple(GuardDecision.model_fields)


def _one_model(votes: Sequence[Vote]) -> tuple[str, int] | None:
    """``(family, voters)`` when every voter that had evidence declares a model family and
    they all declare the same one (compared as :func:`canonical_family` sees them), else
    ``None``: their sources are all read by one model."""
    family: str | None = None
    count = 0
    for v in votes:
        if not has_evidence(v):
            continue
        own = canonical_family(v.family) if v.family is not None else None
        if not own or (family is not None and own != family):
            return None
        family, count = own, count + 1
    return (family, count) if family is not None and count >= 2 else None


def _check_sources(votes: Sequence[Vote], settings: GuardThresholds) -> InvariantCheck:
    sources = independent_sources(votes)
    need = max(settings.min_sources, 2)
    holds = len(sources) >= need
    msg = (
        f"{len(sources)} independent evidence source(s) among voters with evidence (need {need})"
        + ("" if holds else ": agreement is not evidence")
    )
    figures: dict[str, Figure] = {
        "independent_sources": len(sources),
        "required": need,
        "sources": ",".join(sources),
    }
    one_model = _one_model(votes) if holds else None
    if one_model is not None:
        # The study's invariant 1: the sources must not all be downstream of one model.
        holds = False
        family, count = one_model
        msg = (
            f"{len(sources)} evidence source(s) among voters with evidence, but all {count} "
            f"of those voters are of one model family ({family}): their sources are read by "
            "one model, agreement is not evidence"
        )
        figures["family"] = family
    return _check(1, "evidence independence is auditable", holds, msg, figures)


def _check_fallback(votes: Sequence[Vote], settings: GuardThresholds) -> InvariantCheck:
    frac, absent = fallback_agreement(votes)
    holds = frac < settings.max_fallback_agreement
    msg = f"fallback agreement {frac:.2f} among {absent} voter(s) without evidence (maximum {settings.max_fallback_agreement:.2f})"
    if not holds:
        msg += ": voters agree without evidence, likely a shared confabulation"
    return _check(
        2,
        "agreement is decomposed from availability",
        holds,
        msg,
        {
            "fallback_agreement": frac,
            "voters_without_evidence": absent,
            "maximum": settings.max_fallback_agreement,
        },
    )


def _check_beta(beta: float, calibration: ReliabilityFit | None) -> InvariantCheck:
    name = "the weighting is bounded by a measured beta*"
    if beta == 0:
        # No weighting asked: nothing to bound, whatever beta* is (or whether it was
        # measured), so the verifier is consulted only when invariant 1 or 2 fails.
        return _check(
            3,
            name,
            True,
            "beta 0: no consensus weighting asked, nothing to bound",
            {
                "beta_requested": beta,
                "beta_star": calibration.beta_star if calibration is not None else None,
            },
        )
    if calibration is None:
        return _check(
            3,
            name,
            False,
            "no calibration: the evidence-absent accuracy delta is not measured",
            {"beta_requested": beta, "beta_star": None},
        )
    figs: dict[str, Figure] = {
        "beta_requested": beta,
        "beta_star": calibration.beta_star,
        "beta_star_accuracy": calibration.beta_star_accuracy,
        "absent_stratum_cases": calibration.beta_stratum_cases,
        "min_stratum_cases": calibration.settings.min_stratum_cases,
    }
    if calibration.beta_star is None:
        return InvariantCheck(
            number=3,
            name=name,
            holds=False,
            message=f"evidence-absent stratum not measured ({calibration.beta_stratum_cases} case(s), need {calibration.settings.min_stratum_cases})",
            figures=figs,
        )
    if calibration.beta_star <= 0:
        worst = next((p for p in calibration.beta_search if not p.safe), None)
        detail = (
            f" (at beta {worst.beta:g}: accuracy delta {worst.accuracy_delta:+.2f}, confidence {worst.mean_confidence:.2f} "
            f"vs majority accuracy {worst.mean_confidence - worst.overshoot:.2f})"
            if worst
            else ""
        )
        return InvariantCheck(
            number=3,
            name=name,
            holds=False,
            message="beta* = 0: every beta > 0 loses accuracy or overstates confidence on the evidence-absent stratum"
            + detail,
            figures=figs,
        )
    return InvariantCheck(
        number=3,
        name=name,
        holds=True,
        message=f"beta used {min(beta, calibration.beta_star):g} <= beta* {calibration.beta_star:g}",
        figures=figs,
    )


def _majority(votes: Sequence[Vote], probs: dict[str, float]) -> tuple[str, float, bool]:
    counts: dict[str, int] = {}
    for v in votes:
        counts[v.answer] = counts.get(v.answer, 0) + 1
    top = max(counts.values())
    leaders = sorted(a for a, c in counts.items() if c == top)
    if len(leaders) == 1:
        return leaders[0], top / len(votes), False
    answer = max(leaders, key=lambda a: (probs.get(a, 0.0), -leaders.index(a)))
    return answer, top / len(votes), True


_TIE_TOLERANCE = 1e-12
"""Relative difference of two weight shares that still counts as a tie (rounding)."""


def _weighted(
    votes: Sequence[Vote], beta: float, decompose: bool, probs: dict[str, float]
) -> tuple[str, float, bool]:
    """The consensus-weighted answer, its weight share and whether the weights tied; a
    tie is broken as the majority's is (the posterior, then the smallest answer)."""
    answers = sorted({v.answer for v in votes})
    index = {a: i for i, a in enumerate(answers)}
    labels = np.array([[index[v.answer] for v in votes]], dtype=np.int64)
    mask = np.array([[has_evidence(v) for v in votes]]) if decompose else None
    _, shares = consensus_weighted_vote(labels, len(answers), beta, mask)
    row: list[float] = shares[0].tolist()
    top = max(row)
    # Equal weight sums added in another voter order can differ in the last bit: a tie
    # is equal up to rounding.
    leaders = [
        a
        for a, share in zip(answers, row, strict=True)
        if math.isclose(share, top, rel_tol=_TIE_TOLERANCE)
    ]
    if len(leaders) == 1:
        return leaders[0], top, False
    answer = max(leaders, key=lambda a: (probs.get(a, 0.0), -leaders.index(a)))
    return answer, top, True


def _check_votes(votes: object) -> None:
    """Votes are a sequence of :class:`Vote`, one per agent (see the module docstring)."""
    if not isinstance(votes, Sequence) or isinstance(votes, str):
        raise InputError(f"votes must be a sequence of Vote, not {type(votes).__name__}")
    seen: set[str] = set()
    for i, vote in enumerate(votes):
        if not isinstance(vote, Vote):
            raise InputError(f"votes.{i} is a {type(vote).__name__}, not a Vote")
        if vote.agent in seen:
            raise InputError(f"duplicate agent id {vote.agent!r}: one agent, one vote")
        seen.add(vote.agent)


def _check_arguments(
    calibration: object, beta: object, verifier: object, settings: object, case_id: object
) -> None:
    """The kind of every argument but the votes (see the module docstring)."""
    if calibration is not None and not isinstance(calibration, ReliabilityFit):
        raise ConfigError(
            f"expected a ReliabilityFit (fit_reliability), got {type(calibration).__name__}",
            field="calibration",
        )
    if settings is not None and not isinstance(settings, GuardThresholds):
        raise ConfigError(
            f"expected GuardThresholds, got {type(settings).__name__}", field="settings"
        )
    if beta.__class__ is not float and (isinstance(beta, bool) or not isinstance(beta, Real)):
        raise ConfigError(
            f"beta must be a finite number >= 0, got {type(beta).__name__}", field="beta"
        )
    for name, value in (("verifier", verifier), ("case_id", case_id)):
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"expected a string, got {type(value).__name__}", field=name)


def _input_error(message: str, field: str) -> InputError:
    error = InputError(message)
    error.field = field
    return error


def guard_votes(
    votes: Sequence[Vote],
    calibration: ReliabilityFit | None = None,
    *,
    beta: float = 1.5,
    strict: bool = False,
    verifier: str | None = None,
    settings: GuardThresholds | None = None,
    case_id: str | None = None,
) -> GuardDecision:
    """Decide one case under the guard.

    >>> from dissensus.types import Vote
    >>> votes = [Vote(agent=a, answer="yes", evidence_source="parametric", evidence_present=False) for a in "abc"]
    >>> d = guard_votes(votes)
    >>> d.mode, d.answer, d.refusal.invariant, d.weighted
    ('majority', 'yes', 1, False)
    """
    _check_arguments(calibration, beta, verifier, settings, case_id)
    settings = settings or GuardThresholds()
    _check_votes(votes)
    if len(votes) < 2:
        raise InputError("the guard needs at least two votes")
    if not (math.isfinite(beta) if beta.__class__ is float else np.isfinite(beta)) or beta < 0:
        raise ConfigError("beta must be a finite number >= 0", field="beta")
    post = posterior(votes, calibration, settings.priors())
    checks = [
        _check_sources(votes, settings),
        _check_fallback(votes, settings),
        _check_beta(beta, calibration),
    ]
    failed = next((c for c in checks if not c.holds), None)
    beta_star = calibration.beta_star if calibration is not None else None
    common = {
        "id": case_id,
        "probabilities": post.probabilities,
        "n_eff": post.n_eff,
        "n_voters": len(votes),
        "shrink": post.shrink,
        "beta_requested": beta,
        "beta_star": beta_star,
        "invariants": checks,
    }
    neff_txt = f"n_eff {post.n_eff:.2f} of {len(votes)}"

    if failed is None and beta > 0 and beta_star is not None:
        used = min(beta, beta_star)
        mode: Mode = "consensus" if used == beta and settings.decompose else "bounded"
        answer, share, tie = _weighted(votes, used, settings.decompose, post.probabilities)
        why = "all three invariants hold; " + (
            f"consensus weighting at beta {used:g}"
            if mode == "consensus"
            else f"weighting bounded at beta {used:g} (requested {beta:g}, beta* {beta_star:g})"
        )
        if tie:
            why += " (tie broken by the calibrated posterior)"
        return _decision(
            {
                "mode": mode,
                "answer": answer,
                "confidence": post.probabilities[answer],
                "weighted": True,
                "refusal": None,
                "reason": f"{why}; {neff_txt}",
                "share": share,
                "tie": tie,
                "beta_used": used,
                "verifier": None,
                **common,
            }
        )

    refusal = None
    if failed is not None and beta > 0:
        # The failed check's own (validated) values: the refusal's fields as they are.
        refusal = trusted(
            Refusal,
            {
                "invariant": failed.number,
                "name": failed.name,
                "message": failed.message,
                "figures": failed.figures,
            },
        )
    maj, maj_share, tie = _majority(votes, post.probabilities)
    # The verifier is the fallback of a failed invariant (decision boundary): at beta 0
    # with every invariant holding nothing was refused, and the majority decides.
    chosen = verifier if failed is not None else None
    if (
        failed is not None
        and chosen is None
        and settings.use_recommended_verifier
        and calibration is not None
        and calibration.verifier
    ):
        chosen = calibration.verifier.agent
    ver_vote = next((v for v in votes if v.agent == chosen), None) if chosen else None
    head = (
        f"refused consensus weighting: invariant {failed.number} ({failed.message})"
        if refusal and failed
        else "no consensus weighting requested (beta 0)"
    )
    if ver_vote is not None:
        answer = ver_vote.answer
        veto = answer != maj
        share = sum(v.answer == answer for v in votes) / len(votes)
        why = f"{head}; verifier {chosen} " + (
            f"vetoed the majority answer {maj!r}" if veto else "confirmed the majority"
        )
        decision = _decision(
            {
                "mode": "verifier",
                "answer": answer,
                "confidence": post.probabilities[answer],
                "weighted": False,
                "refusal": refusal,
                "reason": f"{why}; {neff_txt}",
                "share": share,
                "tie": tie,
                "beta_used": None,
                "verifier": chosen,
                **common,
            }
        )
    else:
        why = f"{head}; unweighted majority"
        if tie:
            why += " (tie broken by the calibrated posterior)"
        if chosen:
            why += f" (verifier {chosen} did not vote)"
        decision = _decision(
            {
                "mode": "majority",
                "answer": maj,
                "confidence": post.probabilities[maj],
                "weighted": False,
                "refusal": refusal,
                "reason": f"{why}; {neff_txt}",
                "share": maj_share,
                "tie": tie,
                "beta_used": None,
                "verifier": None,
                **common,
            }
        )
    if strict and refusal is not None:
        raise CorrelatedConsensusError(
            f"consensus weighting unsafe: invariant {refusal.invariant}: {refusal.message}",
            decision,
        )
    return decision


def guard_case(
    case: VoteCase,
    calibration: ReliabilityFit | None = None,
    *,
    beta: float = 1.5,
    strict: bool = False,
    verifier: str | None = None,
    settings: GuardThresholds | None = None,
) -> GuardDecision:
    """:func:`guard_votes` on a :class:`VoteCase` (its id is copied to the decision)."""
    if not isinstance(case, VoteCase):
        raise _input_error(f"case must be a VoteCase, not {type(case).__name__}", "case")
    return guard_votes(
        case.votes,
        calibration,
        beta=beta,
        strict=strict,
        verifier=verifier,
        settings=settings,
        case_id=case.id,
    )


def guard_cases(
    cases: Iterable[VoteCase],
    calibration: ReliabilityFit | None = None,
    *,
    beta: float = 1.5,
    verifier: str | None = None,
    settings: GuardThresholds | None = None,
) -> list[GuardDecision]:
    """:func:`guard_case` on every case (never strict: refusals are outcomes)."""
    if isinstance(cases, str | bytes) or not isinstance(cases, Iterable):
        raise _input_error(
            f"cases must be an iterable of VoteCase, not {type(cases).__name__}", "cases"
        )
    out: list[GuardDecision] = []
    for i, case in enumerate(cases):
        if not isinstance(case, VoteCase):
            raise _input_error(
                f"cases.{i} is a {type(case).__name__}, not a VoteCase", f"cases.{i}"
            )
        out.append(guard_case(case, calibration, beta=beta, verifier=verifier, settings=settings))
    return out
