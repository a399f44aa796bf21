"""The negotiation agent protocol: what CONCORD (``docs/concord.md``) asks of an agent.

The interface lives with the protocol (as DCI's participant protocol lives with DCI):
CONCORD's core imports no agent implementation and no model stack. Table and function
agents live beside it (:mod:`dissensus.concord.table`, :mod:`dissensus.concord.function`);
LLM agents are an adapter (:mod:`dissensus.agents.llm_negotiator`).

An agent scores outcomes on its *private* scale, proposes one outcome, and, when it is
the bottleneck, repairs (writes one new outcome). CONCORD never knows which kind of
agent it talks to: table agents (fixed scores from the problem file), function agents
(Python callables) and LLM agents (a role prompt over a model client) all implement
:class:`NegotiationAgent`.

Choices this module makes:

* Every method is ``async``; synchronous callables are adapted by the function agent.
* ``propose`` / ``repair`` may return ``None``: the agent *passes* (writes nothing).
* ``score`` returns one raw number per outcome, in order, on the agent's own scale; the
  protocol calibrates it against the agent's anchor scores. An outcome the agent cannot
  score (a table agent's missing entry, a function agent's callable raising on that
  outcome) is a :class:`ScoreFault` in its place: that evaluation alone is a fault, the
  other outcomes of the call keep their scores. Anything else (wrong length,
  non-numbers) is a fault the protocol reports for that agent, on every outcome of the
  call.
* The view an agent receives is plain data (:class:`NegotiationView`): the problem
  statement, the controls, every tabled candidate with the calibrated scores the
  agent can see, the current leader and the option pool. Agent text in it is untrusted
  data; LLM agents delimit it in their prompts.
* ``attempts`` lets an agent report model attempts (retries and re-asks included) so the
  protocol can report them beside its logical call count.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "AgentIdentity",
    "AgentKind",
    "NegotiationAgent",
    "NegotiationView",
    "Outcome",
    "ScoreFault",
    "ScoredCandidate",
]

AgentKind = Literal["table", "function", "llm"]


class Outcome(BaseModel):
    """An outcome an agent can score: an anchor, an option or a candidate plan."""

    model_config = ConfigDict(frozen=True)

    id: str | None = None
    """Identifier; ``None`` on a freshly written outcome (the protocol assigns one)."""
    text: str = Field(min_length=1)
    """What the outcome says, in words."""


class ScoreFault(BaseModel):
    """In a ``score`` answer, the place of an outcome the agent could not score: that
    evaluation alone is a fault of the agent (counted as the rejected anchor, 0)."""

    model_config = ConfigDict(frozen=True)

    message: str
    """Why the outcome has no score, in one line."""


class ScoredCandidate(BaseModel):
    """A tabled candidate as an agent sees it."""

    model_config = ConfigDict(frozen=True)

    id: str
    text: str
    author: str
    round: int
    scores: dict[str, float]
    """Calibrated score (0 = rejected anchor, 1 = ideal anchor) per agent that scored it."""
    worst_off: float | None = None
    """The lowest calibrated score among the covered agents, once all have scored."""


class NegotiationView(BaseModel):
    """What an agent is shown when asked to act."""

    model_config = ConfigDict(frozen=True)

    agent: str
    """The agent being asked."""
    phase: Literal["anchors", "propose", "score", "repair"]
    round: int
    """0 for anchors, 1 for the opening proposals, r >= 2 for the (r - 1)-th repair."""
    problem: str = ""
    """The decision to be taken, in words."""
    floor: float
    margin: float
    agents: list[str]
    """The negotiating (covered) agents, in problem order."""
    candidates: list[ScoredCandidate] = Field(default_factory=list)
    """Candidates tabled so far, with the scores visible to this agent."""
    leader: str | None = None
    """Id of the current leading candidate."""
    options: list[Outcome] = Field(default_factory=list)
    """The pool of options known up front (table agents propose and repair from it)."""
    tabled: list[str] = Field(default_factory=list)
    """Ids of outcomes already tabled (candidates)."""
    rejected: Outcome | None = None
    """The rejected anchor (calibrated 0)."""
    ideal: Outcome | None = None
    """The ideal anchor (calibrated 1)."""

    def leader_candidate(self) -> ScoredCandidate | None:
        """The leading candidate, if any."""
        for cand in self.candidates:
            if cand.id == self.leader:
                return cand
        return None


@runtime_checkable
class NegotiationAgent(Protocol):
    """What CONCORD requires of an agent."""

    @property
    def id(self) -> str:
        """Unique agent id."""
        ...

    @property
    def kind(self) -> str:
        """``table``, ``function``, ``llm`` or another kind name."""
        ...

    @property
    def uses_model(self) -> bool:
        """Whether each call costs one model call (counted against the bound)."""
        ...

    @property
    def timeout(self) -> float | None:
        """Seconds one call may take before it is reported as timed out (None: no limit)."""
        ...

    def attempts(self) -> int:
        """Model attempts made so far, retries included (0 for agents without a model)."""
        ...

    async def score(
        self, outcomes: Sequence[Outcome], view: NegotiationView
    ) -> Sequence[float | ScoreFault]:
        """Raw scores on the agent's private scale, one per outcome, in order (a
        :class:`ScoreFault` for an outcome it cannot score)."""
        ...

    async def propose(self, view: NegotiationView) -> Outcome | None:
        """The agent's opening proposal, or ``None`` to pass."""
        ...

    async def repair(self, view: NegotiationView) -> Outcome | None:
        """A new candidate written as the bottleneck, or ``None`` to pass."""
        ...


class AgentIdentity:
    """The id, timeout and attempts figure every shipped negotiating agent carries.

    A convenience for the shipped agents only; protocols see :class:`NegotiationAgent`.
    """

    def __init__(self, agent_id: str, *, timeout: float | None = None) -> None:
        self._id = agent_id
        self._timeout = timeout

    @property
    def id(self) -> str:
        return self._id

    @property
    def timeout(self) -> float | None:
        return self._timeout

    def attempts(self) -> int:
        """Model attempts this agent made (none for agents without a model)."""
        return 0
