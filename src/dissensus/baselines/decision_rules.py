"""Decision rules CONCORD is compared with, on identical scores (``docs/concord.md``, ``--compare``).

Each rule picks one of the *opening proposals* (the candidates of round 1, before any
repair: what the agents put on the table) from the same calibrated score matrix
CONCORD used, and is judged by the worst-off score of its pick and the agents it leaves
below the floor:

* **best average**: the highest mean calibrated score;
* **majority vote** (:func:`first_choice_plurality`; the guard's ``majority_vote`` is
  another thing, a vote over labels): every agent votes for the proposal it scores
  highest; the plurality wins. Ties (likely: each agent usually scores its own proposal highest) are broken by
  the Borda count among the tied proposals, then by the earlier proposal; the tie is
  reported in ``note``;
* **owner decides**: the owner's own proposal (the problem's ``owner``, else the first
  agent); the owner sees no other scores. An owner outside the negotiating set, or one
  that tabled nothing, commits nothing (said so in the result);
* **unanimity required**: a proposal every agent scores at or above the floor (the
  earliest if several); otherwise deadlock, nothing is committed;
* **LLM picks a plan**: an arbiter model shown every proposal and every score answers
  one id (an ``enum`` of the proposals' ids in the request's schema); an id that is
  not a proposal is reported as an invalid answer, never replaced by a default;
* **LLM writes a plan**: the arbiter writes a new plan from every proposal and score; the
  caller has every agent score it (those evaluations are outside CONCORD's bound).

Ties elsewhere go to the earlier proposal and are reported.

Choices this module makes:

* **The floor is CONCORD's.** Given ``exact`` (the unrounded calibrated scores, ``None``
  for a faulted one), a pick's agents below the floor, and unanimity's test, are read
  from it, as the protocol reads its certificate: a score recorded as 0.7 whose
  unrounded value is below a floor of 0.7 stays below it, and a faulted score never
  clears the floor, even 0. Without it, the matrix's calibrated scores are compared.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar

from pydantic import BaseModel, ConfigDict

from dissensus.deprecation import deprecated_names, renamed
from dissensus.llm.jsonparse import extract_json
from dissensus.quoting import DATA_RULE, quote_block
from dissensus.types import JsonObject, JsonSchema

if TYPE_CHECKING:
    from dissensus.llm.base import ChatClient, ChatRequest, ChatResponse

_Reply = TypeVar("_Reply", bound=BaseModel)

__all__ = [
    "LLMArbiter",
    "RuleResult",
    "best_average",
    "first_choice_plurality",
    "judge",
    "owner_decides",
    "unanimity",
]

Matrix = Mapping[str, Mapping[str, float]]
"""candidate id -> agent -> calibrated score."""

Exact = Mapping[str, Mapping[str, float | None]]
"""candidate id -> agent -> the unrounded calibrated score, ``None`` for a faulted one:
what the floor is compared with (``exact=``), as CONCORD compares it."""


def _below(
    agents: Sequence[str],
    scores: Mapping[str, float],
    floor: float,
    exact: Mapping[str, float | None] | None,
) -> list[str]:
    """The agents below ``floor``: by ``exact`` when given (a faulted or missing score,
    ``None``, never clears it, even a floor of 0), else by ``scores``."""
    if exact is None:
        return [a for a in agents if scores.get(a, 0.0) < floor]
    return [a for a in agents if (v := exact.get(a)) is None or v < floor]


class RuleResult(BaseModel):
    """What one decision rule commits, judged on the shared scores."""

    strategy: str
    selected: str | None
    """Candidate id (or ``written`` for a plan the arbiter wrote); ``None`` if nothing committed."""
    worst_off: float | None
    below_floor: list[str]
    result: str
    note: str | None = None
    text: str | None = None
    """The plan's text when the rule wrote one."""


def judge(
    strategy: str,
    selected: str | None,
    scores: Mapping[str, float] | None,
    agents: Sequence[str],
    floor: float,
    *,
    note: str | None = None,
    text: str | None = None,
    empty: str = "deadlock; no outcome committed",
    exact: Mapping[str, float | None] | None = None,
) -> RuleResult:
    """Worst-off score and agents below the floor of one rule's pick (by ``exact`` when
    given: the unrounded scores, ``None`` for a fault)."""
    if selected is None or scores is None:
        return RuleResult(
            strategy=strategy,
            selected=None,
            worst_off=None,
            below_floor=[],
            result=empty,
            note=note,
            text=text,
        )
    values = [scores.get(a, 0.0) for a in agents]
    below = _below(agents, scores, floor, exact)
    result = f"clears the floor for all {len(agents)}" if not below else f"fails for {len(below)}"
    return RuleResult(
        strategy=strategy,
        selected=selected,
        worst_off=min(values),
        below_floor=below,
        result=result,
        note=note,
        text=text,
    )


def best_average(
    options: Sequence[str],
    matrix: Matrix,
    agents: Sequence[str],
    floor: float,
    *,
    exact: Exact | None = None,
) -> RuleResult:
    means = {o: sum(matrix[o].get(a, 0.0) for a in agents) / len(agents) for o in options}
    if not means:
        return judge("Best average", None, None, agents, floor, empty="no proposal")
    top = max(means.values())
    tied = [o for o in options if means[o] == top]
    note = f"tie on the mean between {', '.join(tied)}; earliest chosen" if len(tied) > 1 else None
    return judge(
        "Best average",
        tied[0],
        matrix[tied[0]],
        agents,
        floor,
        note=note,
        exact=_row(exact, tied[0]),
    )


__getattr__ = deprecated_names(
    __name__,
    renamed(
        __name__,
        globals(),
        {"majority_vote": "first_choice_plurality"},
        "dissensus.guard.majority_vote votes over labels",
    ),
)


def first_choice_plurality(
    options: Sequence[str],
    matrix: Matrix,
    agents: Sequence[str],
    floor: float,
    *,
    exact: Exact | None = None,
) -> RuleResult:
    if not options:
        return judge("Majority vote", None, None, agents, floor, empty="no proposal")
    votes = dict.fromkeys(options, 0)
    for agent in agents:
        top = max(matrix[o].get(agent, 0.0) for o in options)
        votes[next(o for o in options if matrix[o].get(agent, 0.0) == top)] += 1
    most = max(votes.values())
    tied = [o for o in options if votes[o] == most]
    note = None
    if len(tied) > 1:
        borda = dict.fromkeys(tied, 0)
        for agent in agents:
            ranked = sorted(tied, key=lambda o: matrix[o].get(agent, 0.0))
            for points, o in enumerate(ranked):
                borda[o] += points
        best = max(borda.values())
        winner = next(o for o in tied if borda[o] == best)
        note = (
            f"plurality tie ({most} vote(s) each) between {', '.join(tied)}; "
            f"Borda count among them: {', '.join(f'{o}={borda[o]}' for o in tied)}; {winner} wins"
        )
    else:
        winner = tied[0]
    return judge(
        "Majority vote", winner, matrix[winner], agents, floor, note=note, exact=_row(exact, winner)
    )


def owner_decides(
    owner: str,
    proposal: str | None,
    matrix: Matrix,
    agents: Sequence[str],
    floor: float,
    *,
    exact: Exact | None = None,
) -> RuleResult:
    if owner not in agents:
        return judge(
            "Owner decides",
            None,
            None,
            agents,
            floor,
            empty=f"owner {owner} is not in the negotiating set; nothing committed",
        )
    if proposal is None:
        return judge(
            "Owner decides", None, None, agents, floor, empty=f"owner {owner} tabled no proposal"
        )
    return judge(
        "Owner decides",
        proposal,
        matrix[proposal],
        agents,
        floor,
        note=f"owner: {owner}",
        exact=_row(exact, proposal),
    )


def unanimity(
    options: Sequence[str],
    matrix: Matrix,
    agents: Sequence[str],
    floor: float,
    *,
    exact: Exact | None = None,
) -> RuleResult:
    for o in options:
        if not _below(agents, matrix[o], floor, _row(exact, o)):
            return judge("Unanimity required", o, matrix[o], agents, floor, exact=_row(exact, o))
    return judge("Unanimity required", None, None, agents, floor)


def _row(exact: Exact | None, option: str) -> Mapping[str, float | None] | None:
    return None if exact is None else exact.get(option, {})


class PickReply(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str


class WriteReply(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str


_ARBITER = "You arbitrate between agents who each own a role. " + DATA_RULE


def _table(
    options: Sequence[tuple[str, str]],
    matrix: Matrix,
    agents: Sequence[str],
    problem: str,
    floor: float,
) -> str:
    data: JsonObject = {
        "problem": problem,
        "floor": floor,
        "plans": [
            {"id": o, "text": t, "scores": {a: matrix[o].get(a) for a in agents}}
            for o, t in options
        ],
    }
    return quote_block("PLANS", data, indent=1)


def _closed(properties: JsonSchema) -> JsonSchema:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def _request(stage: str, user: str, schema: JsonSchema) -> ChatRequest:
    from dissensus.llm.base import ChatRequest, Message  # deferred: the model stack is heavy

    return ChatRequest(
        messages=[Message(role="system", content=_ARBITER), Message(role="user", content=user)],
        agent="arbiter",
        role="arbiter",
        stage=stage,
        temperature=0.0,
        json_schema=schema,
    )


def _reply(resp: ChatResponse, model: type[_Reply]) -> _Reply:
    """The arbiter's answer as ``model``: the client's validated instance, else its text
    read as the model client reads a structured answer (:func:`extract_json`: a key
    written twice is refused, never read last-wins)."""
    if isinstance(resp.parsed, model):
        return resp.parsed
    return model.model_validate(extract_json(resp.text))


class LLMArbiter:
    """The comparison's arbiter over a model (:class:`dissensus.baselines.compare.Arbiter`).

    Requests carry a per-request schema (strict mode): the pick is an ``enum`` of the
    plan ids, the written plan a string.
    """

    def __init__(self, client: ChatClient) -> None:
        self.client = client

    async def pick(
        self,
        plans: Sequence[tuple[str, str]],
        matrix: Matrix,
        agents: Sequence[str],
        floor: float,
        problem: str = "",
    ) -> RuleResult:
        user = (
            "Pick the one plan to commit. Scores are calibrated satisfaction (0 = rejected, 1 = ideal). "
            'Answer {"id": "..."}.\n' + _table(plans, matrix, agents, problem, floor)
        )
        ids = [o for o, _ in plans]
        schema = _closed({"id": {"type": "string", "enum": ids} if ids else {"type": "string"}})
        resp = await self.client.chat(
            _request("concord.compare.pick", user, schema), schema=PickReply
        )
        reply = _reply(resp, PickReply)
        if reply.id not in ids:
            return judge(
                "LLM picks a plan",
                None,
                None,
                agents,
                floor,
                empty=f"invalid answer: {reply.id!r} is not a plan; nothing committed",
            )
        return judge("LLM picks a plan", reply.id, matrix[reply.id], agents, floor)

    async def write(
        self,
        plans: Sequence[tuple[str, str]],
        matrix: Matrix,
        agents: Sequence[str],
        floor: float,
        problem: str = "",
    ) -> str:
        user = (
            "Write one plan every agent can accept. Scores are calibrated satisfaction (0 = rejected, "
            '1 = ideal). Answer {"text": "..."}.\n' + _table(plans, matrix, agents, problem, floor)
        )
        schema = _closed({"text": {"type": "string"}})
        resp = await self.client.chat(
            _request("concord.compare.write", user, schema), schema=WriteReply
        )
        reply = _reply(resp, WriteReply)
        return reply.text
