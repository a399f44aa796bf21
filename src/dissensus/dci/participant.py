"""The agent protocol DCI talks to: a participant speaks one act per request.

DCI never calls a model. It hands a participant an :class:`ActRequest` (system text,
stage prompt, allowed acts, and on a re-ask the problems with the previous attempt) and
receives an :class:`ActReply` (the raw act and the usage of producing it). Whether the
participant is an LLM (:mod:`dissensus.agents.deliberator`), a Python function or a
recording, the flow cannot tell.

A participant that cannot answer raises :class:`ParticipantFailure` with a ``kind``:
``budget_exhausted`` (the run must stop), ``model_failure`` (the call failed after its
retries) or ``invalid_output`` (no parseable act; the flow may re-ask).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from dissensus.dci.acts import RawAct
from dissensus.types import JsonSchema, Usage

__all__ = ["ActReply", "ActRequest", "FunctionParticipant", "Participant", "ParticipantFailure"]


class ActRequest(BaseModel):
    """What the flow asks of a participant."""

    model_config = ConfigDict(frozen=True)

    participant: str
    archetype: str
    stage: str
    """``frame``, ``propose``, ``challenge``, ``revise``, ``score``, ``synthesize`` or ``discuss``."""
    round: int
    system: str
    prompt: str
    allowed_acts: tuple[str, ...]
    typed: bool = True
    """False in the no-typed-grammar ablation."""
    feedback: tuple[str, ...] = ()
    """Problems with the previous attempt (set on a re-ask)."""
    response_schema: JsonSchema | None = None
    """JSON schema of a valid act for this request (:func:`dissensus.dci.acts.act_schema`):
    allowed acts, existing target ids and live option ids as enums. Participants over
    a model send it as the structured-output schema; ``None`` in the untyped ablation."""


class ActReply(BaseModel):
    """A participant's answer: one raw act and what it cost."""

    act: RawAct
    usage: Usage = Field(default_factory=Usage)


FailureKind = Literal["budget_exhausted", "model_failure", "invalid_output"]


class ParticipantFailure(Exception):
    """The participant could not produce an act."""

    def __init__(self, kind: FailureKind, message: str, *, usage: Usage | None = None) -> None:
        super().__init__(message)
        self.kind: FailureKind = kind
        self.usage = usage or Usage()


@runtime_checkable
class Participant(Protocol):
    """Anything that speaks acts."""

    id: str

    async def speak(self, request: ActRequest) -> ActReply:
        """One act for ``request``; raise :class:`ParticipantFailure` when impossible."""
        ...


class FunctionParticipant:
    """A participant backed by a plain (async) Python function: tests, rule-based agents."""

    def __init__(self, id: str, fn: Callable[[ActRequest], Awaitable[RawAct] | RawAct]) -> None:
        self.id = id
        self._fn = fn

    async def speak(self, request: ActRequest) -> ActReply:
        out = self._fn(request)
        act = await out if isinstance(out, Awaitable) else out
        return ActReply(act=act)
