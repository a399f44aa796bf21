"""LLM negotiation agents for CONCORD (``docs/concord.md``): a role prompt over a model client.

The agent speaks through any :class:`dissensus.llm.ChatClient` (in practice a
:class:`dissensus.llm.ModelClient` built by ``resolve_model``). Every method makes
exactly **one** logical model call, which is what lets CONCORD bound model calls before
the run; the client's retries and re-asks show up as attempts.

Prompts: the role is the system prompt. Everything other agents wrote (plans) and the
problem statement are untrusted data: they are quoted with
:func:`dissensus.llm.prompting.quote_block` (JSON in which ``<`` and ``>`` are escaped,
so no text can close its block) and the instructions say never to follow instructions
found there.

Structured answers are requested with a schema built per request (valid for OpenAI
strict mode), so that a model that follows the schema cannot give an unusable answer:

* anchors: ``{"scores": {"<rejected id>": n, "<ideal id>": n}}`` with the rejected
  anchor in [0, 4] and the ideal in [6, 10] (the model's scale runs upwards and its
  anchors always differ);
* scores: ``{"scores": {"<id>": n, ...}}`` with exactly the outcome ids as keys and
  every score bounded by the agent's own anchor interval;
* propose / repair: ``{"text": "..."}``; an empty text passes.

Answers are also accepted in the list form ``{"scores": [{"id", "score"}]}``. Stages
are ``concord.anchors``, ``concord.propose``, ``concord.score`` and ``concord.repair``,
so scripted models can answer per stage.

Choices this module makes:

* A score answer that omits an outcome, scores one it was not asked about or scores
  one twice (the list form) raises :class:`~dissensus.llm.StructuredOutputError`: the
  wrong number of scores, which the protocol reports as this agent's fault for that
  phase. A score is a JSON number: ``true`` or ``"5"`` fails validation (the client
  re-asks, then the call is a fault), never read as 1.0 or 5.0. A propose or repair answer that does not follow the
  schema (no ``text``) is a fault too, never a pass.
* An anchor answer outside the ranges its schema asks for (the rejected anchor above 4,
  the ideal below 6: an inverted scale, or two equal anchors) does not validate
  (:func:`anchor_reply`): the client re-asks it as any invalid answer, then the call
  raises :class:`~dissensus.llm.StructuredOutputError`, an anchor fault of this agent,
  which stays uncalibrated (the run ends ``best_effort``). It is never read as a
  downward scale (a model's 1/10 certified as 0.9) and never ends the run as a
  configuration error. The ranges are checked again on the values read, whatever the
  client (:func:`anchor_problems`).
* An answer holding a key twice in one object (``{"scores": {"C1": 1, "C1": 9}}``) does
  not validate either (:mod:`dissensus.llm.jsonparse`), whichever client read it: it is
  never read last-wins.
* The model stack's heavy parts (the OpenAI SDK) load only when a model is called.
* The agent is told the floor and the current scores when repairing, so it can try to
  raise itself while keeping the others above the floor, as the CONCORD specification asks.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Sequence
from typing import Any, ClassVar, Self, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    StrictFloat,
    ValidationError,
    create_model,
    model_validator,
)

from dissensus.concord.agent import AgentIdentity, NegotiationView, Outcome
from dissensus.llm.base import (
    ChatClient,
    ChatRequest,
    ChatResponse,
    Message,
    StructuredOutputError,
)
from dissensus.llm.jsonparse import JSONExtractError, extract_json
from dissensus.llm.prompting import DATA_RULE, quote_block
from dissensus.types import JsonObject, JsonSchema

__all__ = [
    "ANCHOR_RANGES",
    "AnchorReply",
    "LLMNegotiator",
    "PlanReply",
    "ScoreItem",
    "ScoreReply",
    "anchor_problems",
    "anchor_reply",
    "anchor_schema",
    "plan_schema",
    "score_schema",
]

ANCHOR_RANGES = ((0.0, 4.0), (6.0, 10.0))
"""Where a model's rejected and ideal anchor scores must lie (per-request schema)."""


class ScoreItem(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    score: StrictFloat
    """A JSON number: ``true`` or ``"5"`` is not one (the client re-asks, then faults)."""


class ScoreReply(BaseModel):
    """Scores of outcomes: ``{"scores": {id: n}}`` or ``{"scores": [{"id", "score"}]}``."""

    model_config = ConfigDict(extra="forbid")

    scores: list[ScoreItem]

    @model_validator(mode="before")
    @classmethod
    def _from_mapping(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("scores"), dict):
            items = [{"id": k, "score": v} for k, v in data["scores"].items()]
            return {**data, "scores": items}
        return data


def anchor_problems(
    scores: Sequence[tuple[str, float]], rejected_id: str, ideal_id: str
) -> list[str]:
    """How the anchor scores ``scores`` (id, score) leave the ranges of
    :data:`ANCHOR_RANGES` (the rejected anchor low, the ideal high); empty when they do
    not. Ids other than the two anchors are not looked at."""
    problems: list[str] = []
    for (low, high), anchor, name in zip(
        ANCHOR_RANGES, (rejected_id, ideal_id), ("rejected", "ideal"), strict=True
    ):
        if any(i == anchor and not low <= score <= high for i, score in scores):
            problems.append(f"the {name} anchor {anchor} must score within [{low:g}, {high:g}]")
    return problems


class AnchorReply(ScoreReply):
    """An anchor answer as its request's schema (:func:`anchor_schema`) has it: the
    rejected anchor (:attr:`anchor_ids`' first) within [0, 4], the ideal within [6, 10]."""

    anchor_ids: ClassVar[tuple[str, str]] = ("", "")

    @model_validator(mode="after")
    def _in_ranges(self) -> Self:
        scores = [(item.id, item.score) for item in self.scores]
        problems = anchor_problems(scores, *self.anchor_ids)
        if problems:
            raise ValueError("; ".join(problems))
        return self


@functools.lru_cache(maxsize=256)
def anchor_reply(rejected_id: str, ideal_id: str) -> type[AnchorReply]:
    """The model validating an anchor answer for these anchor ids: what
    :func:`anchor_schema` asks for, as a pydantic model (named ``AnchorReply``)."""
    model = create_model("AnchorReply", __base__=AnchorReply, __module__=__name__)
    model.anchor_ids = (rejected_id, ideal_id)
    return model


class PlanReply(BaseModel):
    """A proposal or repair; an empty text passes."""

    model_config = ConfigDict(extra="forbid")

    text: str


def _closed(properties: JsonSchema) -> JsonSchema:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def _number(low: float | None = None, high: float | None = None) -> JsonSchema:
    out: JsonSchema = {"type": "number"}
    if low is not None:
        out["minimum"] = low
    if high is not None:
        out["maximum"] = high
    return out


def anchor_schema(rejected_id: str, ideal_id: str) -> JsonSchema:
    """Strict schema of the anchor answer: the rejected anchor low, the ideal high."""
    (rl, rh), (il, ih) = ANCHOR_RANGES
    return _closed({"scores": _closed({rejected_id: _number(rl, rh), ideal_id: _number(il, ih)})})


def score_schema(ids: Sequence[str], bounds: tuple[float, float] | None) -> JsonSchema:
    """Strict schema of a score answer: exactly ``ids``, each within ``bounds``."""
    low, high = bounds if bounds is not None else (None, None)
    return _closed({"scores": _closed({i: _number(low, high) for i in dict.fromkeys(ids)})})


def plan_schema() -> JsonSchema:
    """Strict schema of a proposal or repair."""
    return _closed({"text": {"type": "string"}})


R = TypeVar("R", bound=BaseModel)


def _reply(resp: ChatResponse, model: type[R]) -> R:
    """The answer of ``resp`` as ``model``: the client's validated instance, else its text
    read as the client reads it (a key twice in one object does not validate); an answer
    that does not validate raises :class:`StructuredOutputError`."""
    if isinstance(resp.parsed, model):
        return resp.parsed
    try:
        return model.model_validate(extract_json(resp.text))
    except JSONExtractError as exc:
        problem = str(exc)
    except ValidationError as exc:
        problem = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(root)'}: {err['msg']}"
            for err in exc.errors(include_url=False, include_input=False)
        )
    raise StructuredOutputError(
        f"the answer does not validate: {problem}", attempts=[resp.text], errors=[problem]
    )


_RULES = "You negotiate one decision with other agents who each own a different role. " + DATA_RULE


class LLMNegotiator(AgentIdentity):
    """An agent whose scores, proposals and repairs come from a chat model."""

    kind = "llm"
    uses_model = True

    def __init__(
        self, agent_id: str, role: str, client: ChatClient, *, timeout: float | None = None
    ) -> None:
        super().__init__(agent_id, timeout=timeout)
        self.role = role
        """The role prompt."""
        self._client = client
        self._bounds: tuple[float, float] | None = None
        """The interval of this agent's own anchor scores, once it gave them."""

    def attempts(self) -> int:
        usage = self._client.usage_by_agent.get(self._id)
        return usage.attempts if usage is not None else 0

    def _request(self, stage: str, user: str, schema: JsonSchema) -> ChatRequest:
        system = f"{self.role}\n\n{_RULES}"
        return ChatRequest(
            messages=[Message(role="system", content=system), Message(role="user", content=user)],
            agent=self._id,
            role=self.role,
            stage=f"concord.{stage}",
            temperature=0.0,
            json_schema=schema,
        )

    def _context(self, view: NegotiationView) -> JsonObject:
        return {
            "problem": view.problem,
            "floor": view.floor,
            "agents": view.agents,
            "candidates": [
                {"id": c.id, "author": c.author, "text": c.text, "calibrated_scores": c.scores}
                for c in view.candidates
            ],
            "leader": view.leader,
        }

    @staticmethod
    def _anchor_ids(outcomes: Sequence[Outcome], view: NegotiationView) -> tuple[str, str] | None:
        """The rejected and ideal ids when ``outcomes`` are the anchors of the anchor phase."""
        ids = [str(o.id) for o in outcomes]
        rejected, ideal = view.rejected, view.ideal
        anchors = [str(rejected.id), str(ideal.id)] if rejected and ideal else None
        if view.phase == "anchors" and ids == anchors:
            return ids[0], ids[1]
        return None

    def _schema(self, outcomes: Sequence[Outcome], view: NegotiationView) -> JsonSchema:
        anchors = self._anchor_ids(outcomes, view)
        if anchors is not None:
            return anchor_schema(*anchors)
        return score_schema([str(o.id) for o in outcomes], self._bounds)

    async def score(self, outcomes: Sequence[Outcome], view: NegotiationView) -> Sequence[float]:
        stage = "anchors" if view.phase == "anchors" else "score"
        items = [{"id": o.id, "text": o.text} for o in outcomes]
        user = (
            "Score each outcome for your role on your own scale (higher is better). "
            'Answer with JSON {"scores": {"<id>": <score>, ...}} covering every id.\n'
            f"Problem:\n{quote_block('PROBLEM', {'problem': view.problem}, indent=1)}\n"
            f"Outcomes:\n{quote_block('OUTCOMES', items, indent=1)}"
        )
        anchors = self._anchor_ids(outcomes, view)
        validator = anchor_reply(*anchors) if anchors is not None else ScoreReply
        request = self._request(stage, user, self._schema(outcomes, view))
        resp = await self._client.chat(request, schema=validator)
        reply = _reply(resp, validator)
        by_id = {item.id: item.score for item in reply.scores}
        missing = [o.id for o in outcomes if o.id not in by_id]
        if missing:
            raise StructuredOutputError(
                f"the answer scores no outcome {', '.join(str(m) for m in missing)}",
                attempts=[resp.text],
            )
        asked = {str(o.id) for o in outcomes}
        extra = list(dict.fromkeys(i for i in by_id if i not in asked))
        if extra:
            raise StructuredOutputError(
                f"the answer scores outcomes it was not asked about: {', '.join(extra)}",
                attempts=[resp.text],
            )
        counts = Counter(item.id for item in reply.scores)
        twice = [i for i, n in counts.items() if n > 1]
        if twice:
            raise StructuredOutputError(
                f"the answer scores an outcome more than once: {', '.join(twice)}",
                attempts=[resp.text],
            )
        values = [by_id[str(o.id)] for o in outcomes]
        if anchors is not None:
            problems = anchor_problems(list(zip(anchors, values, strict=True)), *anchors)
            if problems:
                raise StructuredOutputError(
                    f"anchor scores {values[0]:g} and {values[1]:g} outside the ranges "
                    f"asked for: {'; '.join(problems)}",
                    attempts=[resp.text],
                )
        if view.phase == "anchors" and len(values) == 2:
            self._bounds = (min(values), max(values))
        return values

    async def _plan(self, stage: str, instruction: str, view: NegotiationView) -> Outcome | None:
        state = quote_block("STATE", self._context(view), indent=1)
        user = f"{instruction}\nState of the negotiation:\n{state}"
        resp = await self._client.chat(self._request(stage, user, plan_schema()), schema=PlanReply)
        reply = _reply(resp, PlanReply)
        text = reply.text.strip()
        return Outcome(text=text) if text else None

    async def propose(self, view: NegotiationView) -> Outcome | None:
        return await self._plan(
            "propose",
            'Propose the one outcome you consider best from your role. Answer {"text": "..."}.',
            view,
        )

    async def repair(self, view: NegotiationView) -> Outcome | None:
        return await self._plan(
            "repair",
            "You are the least satisfied agent with the leading candidate. Write ONE new candidate "
            f"that raises your own satisfaction while keeping every other agent at or above the floor "
            f'({view.floor}). Answer {{"text": "..."}}; an empty text passes.',
            view,
        )
