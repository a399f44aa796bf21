"""What the pipeline leaves behind: the final record of a case and a human-review item.

Choices this module makes:

* ``action`` is the route that finally applied: ``auto`` / ``auto_explain`` (committed
  by the pipeline, possibly after a follow-up), ``concord`` (committed by a CONCORD
  certificate), ``escalate`` (waiting for a human), ``human`` (a human resolved it).
* ``auto`` is true exactly when the pipeline committed the decision itself.
* ``route`` is the first route's action: one of the disagreement-states paper's four (:class:`~dissensus.states.Action`)
  or one of the two the pipeline adds (``concord``, ``deliberate``), the only actions a
  policy may name (:data:`~dissensus.pipeline.policy.PIPELINE_ACTIONS`). ``rule`` is a
  :data:`~dissensus.states.routing.RuleId`: rules are named by their authors, so their ids
  are an open set, a ``str`` newtype rather than an enumeration. Both are written in JSON
  as the same strings as before.
* A record holds no clock time and no run-specific secret, so a run resumed after a
  crash ends with records identical to an uninterrupted run's; the review id is
  ``<run>.<line>`` (the input line of the case), unique within a journal.
* A review item's ``options`` are in the order a reviewer is shown them
  (:func:`~dissensus.cases.review_options`: the panel's ``meta.options`` in order, then
  the agents' other decisions in natural order). An item journalled when they were kept
  in string order (``1, 10, 11, 2``) is shown in that order too: every view of the
  options reads :meth:`ReviewItem.shown_options` (:func:`~dissensus.cases.shown_order`),
  while the item itself, which its content hash binds, stays as journalled. A
  ``meta.options`` object (what ``convert`` writes) is journalled with its keys sorted,
  so its declared order lives in the item's own list, which that order reads.
* A review item is journalled with each position's reasoning left out where the panel
  beside it holds the same text, and read back whole
  (:mod:`dissensus.pipeline.review_form`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dissensus.cases import shown_order
from dissensus.dci.packet import DecisionPacket
from dissensus.pipeline.learned import AcceptanceFigures
from dissensus.pipeline.review_form import whole_form
from dissensus.pipeline.steps import AcceptanceStep, ConcordStep, GuardStep
from dissensus.states import Action, Reading, State
from dissensus.states.routing import RuleId
from dissensus.types import Usage

__all__ = [
    "AgentPosition",
    "CaseRecord",
    "FinalAction",
    "PipelineAction",
    "Resolution",
    "ReviewItem",
    "review_id_for",
]

FinalAction = Literal["auto", "auto_explain", "concord", "escalate", "human"]
"""The route that finally applied to a case (see the module docstring)."""

PipelineAction = Action | Literal["concord", "deliberate"]
"""A route action the pipeline runs: the disagreement-states paper's four, ``concord`` (escalate through
CONCORD) and ``deliberate`` (seek context with a DCI deliberation)."""


def review_id_for(run_id: str, line: int) -> str:
    """The review id of the case on input ``line`` of run ``run_id``."""
    return f"{run_id}.{line}"


class Resolution(BaseModel):
    """A human's decision on an escalated case."""

    model_config = ConfigDict(frozen=True)

    decision: str
    note: str
    reviewer: str | None = None


class CaseRecord(BaseModel):
    """The final record of one case (one JSONL line of ``dissensus decide --json``)."""

    model_config = ConfigDict(frozen=True)

    id: str
    """The panel's id."""
    line: int
    """Input line of the panel (1-based)."""
    action: FinalAction
    decision: str | None
    """The committed decision; ``None`` while waiting for a human."""
    auto: bool
    """True when the pipeline committed the decision itself (after any automatic follow-up)."""
    reason: str
    """Why, in one sentence a reviewer can check against the journal."""
    state: State
    """The first reading's state (CA / DA / CD / DD)."""
    route: PipelineAction
    """The first route (``auto``, ``auto_explain``, ``seek_context``, ``escalate``,
    ``concord`` or ``deliberate``)."""
    rule: RuleId
    """The routing rule that decided the first route."""
    path: list[str]
    """Every step taken, in order (e.g. ``guard:refused``, ``seek_context:recorded``)."""
    basis: str | None = None
    """What the commitment rests on: ``guard``, ``learned``, ``calibrated``, ``independent_families``,
    ``concord_certificate``, ``human``; ``None`` without a decision."""
    suggestion: str | None = None
    """For escalated cases: the panel's plurality decision, shown to the reviewer."""
    review_id: str | None = None
    usage: Usage = Field(default_factory=Usage)
    """Model usage of the case (journalled calls, replayed ones included)."""
    resolution: Resolution | None = None
    acceptance: AcceptanceFigures | None = None
    """Learned acceptance's figures, when an acceptance file judged the case."""


class AgentPosition(BaseModel):
    """One agent's position, side by side with the others' for a reviewer."""

    model_config = ConfigDict(frozen=True)

    agent: str
    family: str | None
    decision: str | None
    second: str | None = None
    """Answer under the follow-up perturbation, when there was one."""
    stable: bool | None = None
    confidence: float | None
    values: dict[str, float] | None
    reasoning: str


class ReviewItem(BaseModel):
    """Everything a reviewer needs to decide an escalated case."""

    model_config = ConfigDict(frozen=True)

    review_id: str
    run_id: str
    line: int
    id: str
    reason: str
    suggestion: str | None
    options: list[str]
    """Decisions on the table (the task's options, then every other label an agent gave),
    as journalled; :meth:`shown_options` is the order to show them in."""
    positions: list[AgentPosition]
    value_dimensions: list[str]
    """Union of the agents' value-profile keys (columns of the side-by-side table)."""
    # The panel's JSON (meta.gold removed), journalled in review.opened; the review screens
    # read it by key, so it becomes a Panel together with them.
    panel: dict[str, Any]
    """The panel as the reviewer sees it (``meta.gold`` withheld)."""
    reading: Reading
    reread: Reading | None = None
    guard: GuardStep | None = None
    acceptance: AcceptanceStep | None = None
    """The last calibrated acceptance, with every agent's and voice's signals."""
    packet: DecisionPacket | None = None
    """DCI decision packet, when a deliberation ran."""
    concord: ConcordStep | None = None
    """CONCORD summary and certificate, when a negotiation ran."""
    audit: bool = False
    """A blind audit of an automatic commit (``review confirm``): ``suggestion`` and the
    acceptance step are withheld and the readings' plurality decision blanked."""
    stratum: str | None = None
    """The acceptance stratum of an audited case (monitoring key, with ``acceptance_sha256``)."""
    acceptance_sha256: str | None = None
    """The acceptance file the audited run decided with, if any."""

    @model_validator(mode="before")
    @classmethod
    def _whole(cls, data: Any) -> Any:
        """A journalled item's positions with their reasonings put back from the panel
        (:mod:`dissensus.pipeline.review_form`)."""
        return whole_form(data)

    def shown_options(self) -> list[str]:
        """:attr:`options` in the order a reviewer is shown them, whenever the item was
        journalled (:func:`~dissensus.cases.shown_order`): a fresh item's own order."""
        return shown_order(self.panel.get("meta"), self.options)
