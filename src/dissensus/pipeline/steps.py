"""The journalled steps of a case, one pydantic model each.

Every step the pipeline journals (:mod:`dissensus.pipeline.durable`) is one of these
models, written with ``model_dump(mode="json")`` and validated again when a resumed run
replays it, so a journal edited or written by another version fails loudly at the step
that no longer fits, and a renamed field fails type checking rather than a run.

=====================  ==================  =============================================
step key               event type          model
=====================  ==================  =============================================
``steps``              ``case.steps``      :class:`CaseSteps` (input, reading, route, guard)
``input``              ``case.input``      :class:`CaseInput`
``reading``            ``case.reading``    :class:`dissensus.states.Reading`
``route``              ``case.route``      :class:`dissensus.states.Route`
``guard``              ``case.guard``      :class:`GuardStep`
``followup<k>``        ``case.followup``   :class:`FollowupStep`
``reread<k>``          ``case.reading``    :class:`dissensus.states.Reading`
``acceptance<k>``      ``case.acceptance`` :class:`AcceptanceStep`
``deliberation``       ``case.packet``     :class:`DeliberationStep`
``concord``            ``case.certificate`` :class:`ConcordStep`
``review``             ``review.opened``   :class:`~dissensus.pipeline.records.ReviewItem`
``record``             ``case.record``     :class:`~dissensus.pipeline.records.CaseRecord`
``call/...``           ``model.call``      :class:`CallRecord`
=====================  ==================  =============================================

A case writes its first steps (input, reading, route, guard) as one ``case.steps`` event
(:class:`CaseSteps`, key ``case/<line>/steps``), leaving out the steps its review item
in the same write holds (``in_review``: :mod:`dissensus.pipeline.compact`); journals
written before it hold one event per step, and all are read alike
(:func:`dissensus.pipeline.compact.case_steps`).

Choices this module makes: the JSON of each step keeps the shape journals had
when steps were plain mappings (same keys), plus ``null`` for fields a step did not
use; unknown keys of an older journal are ignored on replay.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from dissensus.concord.record import Certificate
from dissensus.dci.packet import DecisionPacket
from dissensus.guard.decision import GuardDecision
from dissensus.pipeline.learned import AcceptanceFigures
from dissensus.pipeline.trust_regions import Acceptance
from dissensus.signals import AgentSignal, SecondAnswer, Voice
from dissensus.states import Reading, Route
from dissensus.types import JsonObject, Panel, Usage

__all__ = [
    "AcceptanceStep",
    "CallRecord",
    "CaseInput",
    "CaseSteps",
    "ConcordStep",
    "DeliberationStep",
    "FollowupSource",
    "FollowupStep",
    "GuardStep",
]

FollowupSource = Literal["recorded", "live", "none"]


class _Step(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class CaseInput(_Step):
    """The case as it entered the run."""

    id: str
    line: int
    panel: Panel


class CallRecord(_Step):
    """One completed model call, journalled before its caller sees it."""

    request: JsonObject
    """The request as sent: messages, agent, role, stage, sampling settings (never keys)."""
    schema_: str | None = Field(default=None, alias="schema")
    """Name of the pydantic schema the answer was validated against, if any."""
    text: str
    parsed: Any = None
    model: str
    attempts: int
    usage: Usage

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)


class GuardStep(_Step):
    """The guard's check of the panel's votes (``docs/guard.md``)."""

    applicable: bool
    """Whether there was anything to audit (at least two votes, guard enabled)."""
    backed: bool
    """Evidence-backed and independent agreement on the panel's own answer."""
    reason: str
    decision: GuardDecision | None = None
    """The guard's full decision, when it ran."""


class CaseSteps(_Step):
    """A case's first steps in one event (those it has; each as its own step's JSON).

    The shape of a whole ``case.steps``: a thin one (``in_review``) is validated once
    :func:`dissensus.pipeline.compact.case_steps` has put its review item's steps back."""

    input: CaseInput | None = None
    reading: Reading | None = None
    route: Route | None = None
    guard: GuardStep | None = None


class FollowupStep(_Step):
    """Second answers of one follow-up round: recorded, live, or unavailable (with why)."""

    source: FollowupSource
    answers: dict[str, SecondAnswer] = Field(default_factory=dict)
    """Per agent: only answers that count as that agent's (recorded, or its mapped model's)."""
    voices: list[Voice] = Field(default_factory=list)
    """Shared models asked in both presentations: extra voices, never the panel's agents."""
    usage: Usage = Field(default_factory=Usage)
    perturbation: str | None = None
    why: str | None = None
    """Why no follow-up was available (``source: none``)."""


class AcceptanceStep(Acceptance):
    """Calibrated acceptance after a follow-up, with the signals it was decided on."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    signals: list[AgentSignal] = Field(default_factory=list)
    figures: AcceptanceFigures | None = None
    """Learned acceptance's figures (``None`` for the trust regions)."""
    vector: dict[str, float] | None = None
    """The case's features for the label-free shift check (learned acceptance only;
    ``None`` in journals written before it)."""


class DeliberationStep(_Step):
    """A DCI follow-up: its decision packet, or why there is none."""

    packet: DecisionPacket | None = None
    usage: Usage = Field(default_factory=Usage)
    why: str | None = None


class ConcordStep(_Step):
    """A CONCORD negotiation over the panel's options and utilities."""

    status: Literal["certified", "best_effort"]
    decision: str | None
    worst_off: float | None
    summary: str
    certificate: Certificate
