"""Typed payloads of the run-level journal events, like the case steps of
:mod:`dissensus.pipeline.steps`: every writer builds its payload through one of these
models, and a reader may validate a payload with the same model.

Choices where the design is silent: the payloads keep the keys earlier versions wrote
(only the fields a writer gave), so a journal written
before these models is read by them unchanged, and the hash chain's canonical text of a
new event is what the earlier dictionaries gave.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from dissensus.types import Usage

__all__ = ["ModelFailed", "ModelSent", "ModelSpend", "ReviewResolved", "RunFinished", "RunStopped"]


class _Payload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow")

    def payload(self) -> dict[str, Any]:
        """The event's payload: the fields that were given (nested models whole), as JSON."""
        given = self.model_fields_set | set(self.model_extra or {})
        return {k: v for k, v in self.model_dump(mode="json").items() if k in given}


class RunFinished(_Payload):
    """``run.finished``: what the run decided (keys absent when nothing was counted)."""

    cases: int = 0
    auto: int = 0
    escalated: int = 0
    rejected: int = 0


class RunStopped(_Payload):
    """``run.stopped``: a run stopped before its end (resumable)."""

    reason: Literal["deadline"]
    deadline_s: float
    cases: int


class ModelSpend(_Payload):
    """``model.spend``: a model call about to be made, charged to the run's budget."""

    call: str
    agent: str | None
    model: str | None


class ModelSent(_Payload):
    """``model.sent``: attempt ``n`` of call ``call`` is being sent."""

    call: str
    n: int


class ModelFailed(_Payload):
    """``model.failed``: a call that failed after its attempts, with what they cost."""

    call: str
    usage: Usage
    outcome: str


class ReviewResolved(_Payload):
    """``review.resolved``: a human's decision on an escalated case."""

    review_id: str
    decision: str
    note: str
    reviewer: str | None
    outside_options: bool
    content_sha256: str
