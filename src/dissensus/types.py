"""Shared pydantic models: the words every part of dissensus speaks.

This module imports nothing from the package; everything may import it.

Choices where the seeds are silent:

* A decision is any categorical label. JSON numbers and booleans are accepted and
  turned into their string form (``1`` -> ``"1"``, ``true`` -> ``"true"``) so that a
  panel written by another program reads the same way whatever its label type.
* ``decision: null`` is an *abstention*: the agent spoke (its reasoning still counts
  for similarity) but cast no vote. LLMBar judges that gave no usable verdict are
  represented this way.
* A panel needs at least two agents, distinct agent ids and a non-empty reasoning
  trace for every agent; confidence, when given, lies in [0, 1].
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "AgentOutput",
    "Evidence",
    "Panel",
    "Usage",
    "Vote",
    "VoteCase",
]


def _label(value: object) -> object:
    """Normalise a categorical label to ``str`` (``None`` stays ``None``)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return value


def _confidence(value: float | None) -> float | None:
    if value is None:
        return None
    if math.isnan(value) or not 0.0 <= value <= 1.0:
        raise ValueError("confidence must lie in [0, 1]")
    return value


def _check_unique(agents: list[str]) -> None:
    seen: set[str] = set()
    for agent in agents:
        if agent in seen:
            raise ValueError(f"duplicate agent id {agent!r}")
        seen.add(agent)


class Evidence(BaseModel):
    """One piece of evidence an agent consulted (provenance for the guard)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = Field(min_length=1)
    """Provenance token: an index id, a corpus id, a tool name, or ``parametric``."""
    present: bool = True
    """Whether the source actually held supporting evidence for this case."""


class AgentOutput(BaseModel):
    """``O_i = <r_i, d_i, v_i, gamma_i>`` of seed 000, plus evidence provenance."""

    model_config = ConfigDict(extra="allow", frozen=True)

    agent: str = Field(min_length=1)
    """Agent id, unique within a panel."""
    decision: str | None = Field(min_length=1)
    """The agent's categorical decision; ``None`` is an abstention (never ``""``)."""
    reasoning: str
    """The agent's reasoning trace (never empty)."""
    values: dict[str, float] | None = None
    """Value profile: named weights, e.g. ``{"safety": 0.8, "expression": 0.2}``."""
    confidence: float | None = None
    """Self-reported confidence in [0, 1]."""
    evidence: list[Evidence] | None = None
    """Evidence the agent consulted, with whether it was present."""
    family: str | None = None
    """Model family (e.g. ``openai``), used by the guard to spot shared causes."""

    _norm_decision = field_validator("decision", mode="before")(_label)

    @field_validator("reasoning")
    @classmethod
    def _reasoning_not_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("reasoning must not be empty")
        return value

    @field_validator("confidence")
    @classmethod
    def _check_confidence(cls, value: float | None) -> float | None:
        return _confidence(value)


class Panel(BaseModel):
    """One case: a panel of agents has spoken on it."""

    model_config = ConfigDict(extra="allow", frozen=True)

    id: str
    """Case id (numbers are accepted and kept as strings)."""
    meta: dict[str, Any] = Field(default_factory=dict)
    """Case metadata, visible to routing rules as ``meta.<key>``."""
    outputs: list[AgentOutput]
    """What each agent said; at least two agents with distinct ids."""

    _norm_id = field_validator("id", mode="before")(_label)

    @field_validator("outputs")
    @classmethod
    def _check_outputs(cls, value: list[AgentOutput]) -> list[AgentOutput]:
        # A field validator, so that rejects name the field ``outputs``.
        if len(value) < 2:
            raise ValueError(f"a panel needs at least two agents (got {len(value)})")
        _check_unique([out.agent for out in value])
        return value


class Vote(BaseModel):
    """One vote with provenance (seed 003)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agent: str = Field(min_length=1)
    answer: str = Field(min_length=1)
    evidence_source: str = Field(min_length=1)
    """Provenance token: index id, corpus id, or ``parametric``."""
    evidence_present: bool
    confidence: float | None = None
    family: str | None = None
    """Model family; voters of one family share a latent cause."""

    _norm_answer = field_validator("answer", mode="before")(_label)

    @field_validator("confidence")
    @classmethod
    def _check_confidence(cls, value: float | None) -> float | None:
        return _confidence(value)


class VoteCase(BaseModel):
    """One case of the guard's input: votes, and the gold answer when labelled."""

    model_config = ConfigDict(extra="allow", frozen=True)

    id: str
    votes: list[Vote]
    gold: str | None = None
    meta: dict[str, Any] = Field(default_factory=dict)

    _norm_id = field_validator("id", mode="before")(_label)
    _norm_gold = field_validator("gold", mode="before")(_label)

    @field_validator("votes")
    @classmethod
    def _check_votes(cls, value: list[Vote]) -> list[Vote]:
        # A field validator, so that rejects name the field ``votes``.
        if len(value) < 2:
            raise ValueError(f"a case needs at least two voters (got {len(value)})")
        _check_unique([v.agent for v in value])
        return value


class Usage(BaseModel):
    """Model usage, summed over calls. Every attempt counts, retries included."""

    model_config = ConfigDict(extra="forbid")

    calls: int = 0
    """Logical calls (one per request the caller made)."""
    attempts: int = 0
    """HTTP / backend attempts, retries and re-asks included."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    """Estimated cost in the currency of the configured price table (0 when unknown)."""

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        """The usage of both (a new object)."""
        return Usage(
            calls=self.calls + other.calls,
            attempts=self.attempts + other.attempts,
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cost=self.cost + other.cost,
        )

    def __sub__(self, other: Usage) -> Usage:
        """The usage since ``other`` was taken, when ``other`` is an earlier snapshot."""
        return Usage(
            calls=self.calls - other.calls,
            attempts=self.attempts - other.attempts,
            prompt_tokens=self.prompt_tokens - other.prompt_tokens,
            completion_tokens=self.completion_tokens - other.completion_tokens,
            cost=self.cost - other.cost,
        )

    def add(self, other: Usage) -> None:
        """Add ``other`` into this usage in place."""
        self.calls += other.calls
        self.attempts += other.attempts
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.cost += other.cost
