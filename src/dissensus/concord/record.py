"""The CONCORD certificate: the record a second program can verify (``docs/concord.md``).

The record carries the raw numbers everything was derived from: every agent's raw
anchor scores, every candidate with every agent's raw and calibrated score, the
trajectory of the leader, the bound and the spend. Its ``digest`` is the SHA-256 of the
canonical JSON of the record without the digest (keys sorted, no whitespace, UTF-8).

Top-level fields are exactly: ``status``, ``selected``, ``scores``, ``worst_off``,
``floor``, ``margin``, ``budget``, ``bound``, ``spent``, ``trajectory``, ``shortfall``,
``covered``, ``unknown``, ``candidates``, ``digest``. The remaining controls (selection
rule, deadline, communication regime) live in ``budget``; faults live where they
happened (an agent's anchors in ``scores``, an evaluation in its candidate, a proposal
or repair in its trajectory step); the reason the run stopped is ``spent.stopped``.
"""

from __future__ import annotations

import hashlib
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from dissensus.canonical import canonical
from dissensus.concord.bounds import Bound
from dissensus.concord.rules import SelectionRule
from dissensus.deprecation import deprecated_names, renamed
from dissensus.types import JsonObject

__all__ = [
    "AgentScore",
    "Anchors",
    "CandidateRecord",
    "Certificate",
    "Evaluation",
    "Fault",
    "RunControls",
    "Selected",
    "Shortfall",
    "Spent",
    "Step",
    "Stop",
    "canonical_digest",
]

Stop = Literal["floor_cleared", "budget_exhausted", "deadline", "cancelled", "no_candidate"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Anchors(_Model):
    """An agent's raw scores of the two anchors (``None`` when it failed to give them)."""

    rejected: float | None
    ideal: float | None


class Evaluation(_Model):
    """One agent's score of one candidate."""

    raw: float | None
    """What the agent answered on its private scale (``None`` on a fault)."""
    calibrated: float
    """``(raw - rejected) / (ideal - rejected)``; 0 (the rejected anchor) on a fault."""
    fault: str | None = None


class Fault(_Model):
    """A failure of one agent in one phase (raised, timed out, invalid answer)."""

    agent: str
    phase: str
    message: str


class CandidateRecord(_Model):
    """A tabled candidate with every score it received."""

    id: str
    text: str
    author: str
    round: int
    scores: dict[str, Evaluation]
    worst_off: float | None
    """Lowest calibrated score over the covered agents; ``None`` if not all scored it."""


class Selected(_Model):
    id: str
    text: str
    author: str
    round: int


class AgentScore(_Model):
    """An agent's standing on the selected candidate, with its calibration."""

    calibrated: float | None
    raw: float | None
    anchors: Anchors
    fault: str | None = None
    """Why the agent could not be calibrated, if so."""


class RunControls(_Model):
    """The run's controls other than floor and margin."""

    rounds: int
    """Round budget, in repair rounds."""
    rule: SelectionRule = "maximin"
    deadline_s: float | None = None
    topology: Literal["group", "graph"] = "group"
    edges: list[list[str]] | None = None


class Spent(_Model):
    """What the run actually spent, reconciled against the bound."""

    rounds: int
    candidates: int
    evaluations: int
    model_calls: int
    attempts: int
    """Model attempts, retries and re-asks included (not bounded by ``model_calls``)."""
    agent_calls: int
    """Every call to an agent, whatever its kind."""
    messages: int
    hops: int
    stopped: Stop
    within_bound: bool


class Step(_Model):
    """One round of the trajectory."""

    round: int
    leader: str | None
    worst_off: float | None
    """Worst-off score of the leader at the end of the round."""
    bottleneck: str | None = None
    """Who repaired in this round (rounds >= 2)."""
    candidate: str | None = None
    """The candidate tabled by the repair (rounds >= 2); ``None`` when it passed or failed."""
    accepted: bool | None = None
    """Whether that candidate replaced the leader."""
    improvement: float | None = None
    ties: list[str] = Field(default_factory=list)
    """Ties broken in this round (leader or bottleneck), in words."""
    notes: list[str] = Field(default_factory=list)
    """Other visible adjustments (merged duplicate proposals, reassigned ids, halts)."""
    faults: list[Fault] = Field(default_factory=list)


class Shortfall(_Model):
    agent: str
    score: float
    gap: float


class Certificate(_Model):
    """The record of one CONCORD run."""

    status: Literal["certified", "best_effort"]
    selected: Selected | None
    scores: dict[str, AgentScore]
    worst_off: float | None
    floor: float
    margin: float
    budget: RunControls
    bound: Bound
    spent: Spent
    trajectory: list[Step]
    shortfall: list[Shortfall]
    covered: list[str]
    unknown: list[str]
    candidates: list[CandidateRecord]
    digest: str = ""

    def body(self) -> JsonObject:
        """The record without its digest, as JSON-compatible data."""
        data = self.model_dump(mode="json")
        data.pop("digest", None)
        return data

    def sealed(self) -> Certificate:
        """A copy with the digest set."""
        return self.model_copy(update={"digest": canonical_digest(self.body())})


def canonical_digest(body: JsonObject) -> str:
    """SHA-256 of the canonical JSON of ``body``."""
    text = canonical(body)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


__getattr__ = deprecated_names(
    __name__,
    renamed(
        __name__,
        globals(),
        {"Budget": "RunControls"},
        "dissensus.llm.budget.Budget is the model client's spending limit",
    ),
)
