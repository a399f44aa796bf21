"""One request, every member at once: the answers of a policy's ``panel.members`` as a Panel.

:class:`Members` opens each member's backend once (an OpenAI-compatible server keeps its
connection pool across requests) and :meth:`Members.fan_out` asks all of them the same
messages concurrently, through the project's model client
(:class:`~dissensus.llm.client.ModelClient`: retries with backoff, ``Retry-After``,
per-attempt deadlines, one budget, every attempt counted). Each member is one voice: it
is asked once, under its own agent name.

Choices this module makes:

* **One client per member per request**, over the shared backend, drawing on one
  :class:`~dissensus.llm.budget.Budget` per request (``panel.request_max_tokens``): a
  request's spend never leaks into another's budget. A structured-output mode a server
  rejected is therefore re-learned per request (one extra attempt), a small price for
  the isolation.
* **No re-ask.** A member's answer is what it said once (``max_reasks=0``); an answer
  without a usable decision is an abstention (:mod:`dissensus.panels.answers`), as
  ZeroEval scores its solvers.
* **A cut-off answer is no vote.** An answer the server ended early, at the completion
  cap (``finish_reason`` ``"length"``) or by its content filter (``"content_filter"``), is
  an abstention whatever it reads as (a "125" cut to "12" is not a vote for 12), and one
  with **empty reasoning**, as a blank answer is (:mod:`dissensus.panels.answers`): its
  text, read as reasoning, agreed with the vote it echoed, so one real vote and a cut-off
  copy of it read as two agreeing members and learned acceptance could commit a panel
  most of whose members were broken or cut off. ``why`` names the finish reason and
  ``meta.answers`` keeps the text, which the review's case page shows beside the
  member's empty reasoning. A request's
  ``max_tokens`` lowers the members' cap, so a client asking for a small one gets
  abstentions, not votes read from truncated answers.
* **A refusal is no vote.** An answer whose message holds a ``refusal`` and no content
  (OpenAI's structured outputs' way of declining) abstains with ``why`` saying the
  member refused (not "no number in the answer"); its refusal text is its reasoning,
  never read for a decision.
* **A** ``Retry-After`` **past the deadline fails the member at once.** A member whose
  server asks to be retried later than the fan-out's deadline leaves (a 429 with
  ``Retry-After: 100000``) fails then, its ``why`` naming the wait, rather than
  sleeping the rest of the deadline out.
* **Failures are abstentions without reasoning.** A member that gives no answer (every
  attempt failed, the budget refused it, the deadline passed) stays in the panel as an
  abstention with an empty reasoning trace, so the panel always has its configured
  members and the reading counts only the voices that spoke; the failure is written in
  ``meta.members`` with why. Fewer than ``panel.min_answers`` members that spoke is a
  :class:`PanelUnavailable`.
* **The pipeline's bounds** (:mod:`dissensus.io.limits`, applied to every record the
  pipeline reads) are the fan-out's to keep, since it builds the panel. A member whose
  answer is longer than one text field may be (:data:`~dissensus.io.limits.MAX_FIELD_CHARS`,
  its text or the reasoning or decision read from it) is a failure like the others: an
  abstention without reasoning, its text not kept in ``meta.answers``, and ``why`` naming
  the bound, so the rest of the panel is still decided. A panel whose text is over the
  record's bound (:data:`~dissensus.io.limits.MAX_PANEL_CHARS`) once the answers are in
  is a :class:`PanelTooLarge`, before the pipeline sees it (the door answers ``502``
  ``panel_too_large``): which answers to drop to fit would be a choice of the door's,
  not the members'. The request's own part of the panel (its id and messages) is checked
  before any member is asked (:func:`request_overrun`); failure reasons are cut to
  :data:`MAX_WHY_CHARS` characters.
* **The policy's budget bounds the fan-out.** Every member attempt is drawn from the
  policy's ``budget`` (``max_calls`` attempts, ``max_tokens`` prompt and completion
  tokens, with ``panel.request_max_tokens`` the smaller token bound), and the run that
  decides the panel gets what the fan-out left for its follow-up calls: one request
  never spends more than ``budget`` allows. A member the budget cannot pay for fails
  (``meta.members`` names why: "call budget exhausted", "token budget exhausted").
* **A token budget is shared fairly.** With ``panel.request_max_tokens`` each member's
  completion cap is lowered, where needed, to its share of the budget (the budget over
  the number of members) less its prompt's estimate, so that every member's first
  attempt fits at once: the budget reserves each attempt's worst case (prompt and
  completion cap) while it is in flight, and with the policy's cap alone (1,024 by
  default) the members that started first held the whole budget and the others
  failed with "token budget exhausted" — a panel decided on fewer voices than the
  budget could pay for. Retries draw on what the first attempts leave once settled.
  When the prompt alone is over a member's share, the cap is left as it is and the
  budget decides who is asked (the others fail, named in ``meta.members``).
* **The deadline** (``panel.deadline_s``) bounds the whole fan-out; members still running
  then are cancelled and reported ``failed`` with the deadline as the reason.
* **What the panel records**: ``meta.source`` is ``"chat"``, ``meta.messages`` the
  request's messages (a reviewer needs the question), ``meta.question`` the last
  ``user`` message's text and ``meta.options`` the policy's ``panel.options`` (when it
  lists them): the case in the shape every door's panels state it, so the policy's
  follow-up (a live re-ask) can ask it again. ``meta.members`` every member's
  status and ``meta.answers`` every member's full text, so the answer returned later
  (``GET /v1/cases/{id}``) is read from the journal, not from memory.
* **Per-member concurrency.** At most ``panel.member_concurrency`` calls are in flight
  per member across all requests (one semaphore per member and event loop); a request
  waiting for a slot waits within its deadline.
* **The panel is validated once.** :meth:`Members.fan_out` builds the
  :class:`~dissensus.types.Panel` without validating it (``model_construct``): every
  part is built here from validated pieces (the policy's unique members, at least two;
  :class:`~dissensus.types.AgentOutput` validated; request text checked representable
  by :func:`dissensus.panels.door.parse_request`), and the pipeline validates the panel
  anyway when it reads it back from its journalled text; validating it here as well
  cost a third of the fan-out's own CPU. So are the members' requests: what does not
  depend on the request (the instructions' message, the answer's schema) is made once
  per panel, and each request is :func:`member_request`'s, put together from validated
  parts without validating them again.
* **Answers read as they arrive.** Each member's answer is read (its decision, its
  report, its voice in the panel) by the member's own task as soon as its call ends,
  while the slower members are still answering: between the slowest answer and the
  hand-off to the decision only that answer is read, and the panel put together. A
  member the deadline ends is read with the panel, with its failure.
* **Warm start.** :meth:`Members.awarm` opens every member's client on the caller's
  event loop (the server calls it at start-up), so the first request does not pay for
  importing the SDK and building its HTTP client.
* ``openai:`` members with a ``base_url`` talk to that server (an empty ``base_url`` is
  a :class:`~dissensus.errors.ConfigError` naming ``panel.members.N.base_url``, never
  read as none: that member would have sent its prompts to ``$OPENAI_BASE_URL`` or
  OpenAI's own API instead of its server); the key is
  ``$OPENAI_API_KEY`` (``unused`` when absent), or the variable the member's
  ``api_key_env`` names (which must be set: a :class:`~dissensus.errors.ConfigError`
  when the panel is opened), never written anywhere. They are called
  through the official ``openai`` SDK (one pooled client per event loop), as every
  other model call is, on the SDK's aiohttp client where ``aiohttp`` is installed
  (the ``serve`` extra installs it): a request pays every member's client CPU before
  the slowest answer can be read, and that client spends about a third less per call
  than the default one. Without it, the SDK's default client.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from dataclasses import dataclass
from pathlib import Path

from dissensus.cases import asked_question
from dissensus.errors import ConfigError, DissensusError
from dissensus.io.limits import DEFAULT, MAX_FIELD_CHARS, Limits, Overrun, check_record
from dissensus.llm.base import (
    BackendError,
    BackendResponse,
    ChatBackend,
    ChatRequest,
    JsonMode,
    LLMError,
    Message,
    StructuredOutputError,
)
from dissensus.llm.budget import Budget
from dissensus.llm.client import ClientSettings, ModelClient, prompt_estimate
from dissensus.llm.openai_backend import PLACEHOLDER_KEY, OpenAIBackend, aiohttp_available
from dissensus.llm.resolve import make_backend, model_id_problem
from dissensus.panels.answers import MemberAnswer, read_answer, verdict_schema
from dissensus.panels.shapes import MemberReport
from dissensus.pipeline.policy import (
    BudgetSettings,
    PanelMember,
    PanelSettings,
    relative_model_spec,
)
from dissensus.types import AgentOutput, JsonObject, Panel, Usage, trusted

__all__ = [
    "STAGE",
    "FanOut",
    "Members",
    "PanelTooLarge",
    "PanelUnavailable",
    "member_request",
    "request_overrun",
]

STAGE = "panel.answer"
"""The ``stage`` of every member request (part of a recording's key)."""


class PanelUnavailable(DissensusError):
    """Too few members answered for the panel to be decided."""

    def __init__(self, message: str, reports: list[MemberReport]) -> None:
        super().__init__(message)
        self.reports = reports


class PanelTooLarge(DissensusError):
    """The panel of the members' answers is over a bound the pipeline applies to every
    record (:mod:`dissensus.io.limits`): it cannot be decided as it is."""

    def __init__(self, message: str, reports: list[MemberReport]) -> None:
        super().__init__(message)
        self.reports = reports


SOURCE = "chat"
"""``meta.source`` of every panel the door builds."""


def _request_meta(messages: list[Message]) -> list[JsonObject]:
    """``meta.messages``: the request's messages as the panel records them."""
    return [{"role": m.role, "content": m.content} for m in messages]


def _case_meta(recorded: list[JsonObject], options: list[str] | None) -> JsonObject:
    """``meta.question`` (the last ``user`` message: :func:`~dissensus.cases.asked_question`)
    and ``meta.options`` (the policy's ``panel.options``, plain ids): the case as the
    other doors' panels state it, so a follow-up (a live re-ask) can ask it again."""
    out: JsonObject = {}
    question = asked_question({"messages": recorded})
    if question is not None:
        out["question"] = question
    if options:
        out["options"] = list(options)
    return out


def request_overrun(
    panel_id: str, messages: list[Message], limits: Limits = DEFAULT
) -> Overrun | None:
    """The first bound of ``limits`` (:mod:`dissensus.io.limits`; the service's may be
    lower) that the request's own part of its panel (``id``, ``meta.source``,
    ``meta.messages``) goes over, or ``None``.

    The members' answers only add to that part, so a request over a bound cannot be
    decided whatever they answer: the door refuses it before asking any member.
    """
    longest = max((len(m.content) for m in messages), default=0)
    # Every message, and the last user message again as ``meta.question``.
    total = sum(len(m.role) + len(m.content) for m in messages) + longest
    if max(longest, len(panel_id)) <= limits.max_field_chars and (
        len(panel_id) + len(SOURCE) + total <= limits.max_panel_chars
    ):
        return None  # the usual case, without building and walking the record
    recorded = _request_meta(messages)
    own = {
        "id": panel_id,
        "meta": {"source": SOURCE, "messages": recorded, **_case_meta(recorded, None)},
    }
    return check_record(own, limits=limits)


def _read(text: str, settings: PanelSettings) -> tuple[MemberAnswer | None, str | None]:
    """A member's text read as an answer, or ``None`` and why it cannot be one: a text
    longer than a panel's text field may be (:data:`~dissensus.io.limits.MAX_FIELD_CHARS`)."""
    longest = len(text)
    answer = None
    if longest <= MAX_FIELD_CHARS:
        answer = read_answer(text, settings)
        longest = max(len(answer.reasoning), len(answer.decision or ""))
    if longest <= MAX_FIELD_CHARS:
        return answer, None
    why = (
        f"the answer is {longest} characters; at most {MAX_FIELD_CHARS} per field "
        "of a panel (dissensus.io.limits)"
    )
    return None, why


def _report_meta(report: MemberReport) -> JsonObject:
    """A member's entry in ``meta.members``: its report without the decision (what
    ``report.model_dump(mode="json", exclude={"decision"})`` gives, in its key order)."""
    return {
        "name": report.name,
        "family": report.family,
        "model": report.model,
        "status": report.status,
        "why": report.why,
        "attempts": report.attempts,
    }


MAX_WHY_CHARS = 2_000
"""Longest failure reason kept in ``meta.members`` (an error may quote a whole body)."""


@dataclass(frozen=True)
class FanOut:
    """The panel of one request and what it cost."""

    panel: Panel
    reports: list[MemberReport]
    usage: Usage
    answers: dict[str, str]
    """Every member's full text (empty for a member that failed)."""


def member_request(
    member: str,
    messages: list[Message],
    settings: PanelSettings,
    *,
    temperature: float | None = None,
    seed: int | None = None,
    max_tokens: int | None = None,
) -> ChatRequest:
    """The request a member receives (also the key of its ``replay:`` recording)."""
    full = list(messages)
    if settings.instructions:
        full.insert(0, Message(role="system", content=settings.instructions))
    structured = settings.answer == "structured"
    return ChatRequest(
        messages=full,
        agent=member,
        stage=STAGE,
        temperature=temperature,
        seed=seed,
        max_tokens=max_tokens,
        json_schema=verdict_schema(settings) if structured else None,
        schema_name="PanelVerdict" if structured else None,
    )


class _Requests:
    """:func:`member_request` for every member of one panel, with what does not depend on
    the request (the instructions' message, the answer's schema) made once: the requests
    are built unvalidated from validated parts (the request's messages and parameters,
    the policy's settings) and equal :func:`member_request`'s."""

    def __init__(self, settings: PanelSettings) -> None:
        self.prefix = (
            [Message(role="system", content=settings.instructions)] if settings.instructions else []
        )
        structured = settings.answer == "structured"
        self.schema = verdict_schema(settings) if structured else None
        self.schema_name = "PanelVerdict" if structured else None

    def of(
        self,
        member: str,
        messages: list[Message],
        *,
        temperature: float | None,
        seed: int | None,
        max_tokens: int | None,
    ) -> ChatRequest:
        fields = {
            "messages": [*self.prefix, *messages],
            "agent": member,
            "role": None,
            "stage": STAGE,
            "temperature": temperature,
            "max_tokens": max_tokens,
            "seed": seed,
            "json_schema": self.schema,
            "schema_name": self.schema_name,
        }
        return trusted(ChatRequest, fields)


def _backend(
    i: int, member: PanelMember, settings: PanelSettings, policy_dir: Path | None
) -> ChatBackend:
    """Member ``i``'s backend; a :class:`ConfigError` naming its field otherwise."""
    where = f"panel.members.{i}.model"
    spec = (
        relative_model_spec(member.model, policy_dir, field=where) if policy_dir else member.model
    )
    kind, _, rest = spec.partition(":")
    problem = model_id_problem(rest) if kind == "openai" else None
    if problem is not None:
        # Checked here as make_backend checks it: a member with its own server or key
        # is made without it, and its id (`openai: gpt-4o`) would be sent as written.
        raise ConfigError(
            f"member {member.name}: invalid model spec {spec!r}: {problem}", field=where
        )
    if member.base_url is not None and not member.base_url:
        # Read as "no base_url", the member would talk to $OPENAI_BASE_URL or, without
        # it, to OpenAI's own API with $OPENAI_API_KEY: a member meant to be a local
        # server (an unset template variable) sending its prompts elsewhere.
        raise ConfigError(
            f"member {member.name}: base_url is empty: give the member's server URL, or "
            "leave base_url out for $OPENAI_BASE_URL",
            field=f"panel.members.{i}.base_url",
        )
    if kind == "openai" and member.api_key_env:
        key = os.environ.get(member.api_key_env)
        if not key:
            raise ConfigError(
                f"member {member.name}: ${member.api_key_env} is not set (its API key)",
                field=f"panel.members.{i}.api_key_env",
            )
        base_url = member.base_url or os.environ.get("OPENAI_BASE_URL") or None
        return _openai(rest, base_url, key, settings, key_env=member.api_key_env)
    if kind == "openai" and member.base_url:
        env_key = os.environ.get("OPENAI_API_KEY")  # set but empty: refused as empty
        try:
            return _openai(
                rest, member.base_url, PLACEHOLDER_KEY if env_key is None else env_key, settings
            )
        except ConfigError as exc:
            raise ConfigError(f"member {member.name}: {exc.inner()}", field=where) from None
    try:
        return make_backend(spec, settings=ClientSettings(timeout_s=settings.attempt_timeout_s))
    except ConfigError as exc:
        raise ConfigError(f"member {member.name}: {exc.inner()}", field=where) from None


def _openai(
    model: str,
    base_url: str | None,
    key: str,
    settings: PanelSettings,
    *,
    key_env: str | None = None,
) -> OpenAIBackend:
    return OpenAIBackend(
        model,
        base_url=base_url,
        api_key=key,
        timeout_s=settings.attempt_timeout_s,
        transport="aiohttp" if aiohttp_available() else "httpx",
        key_env=key_env,
    )


CUT_SHORT = {
    "length": "the answer was cut off at the completion cap (finish_reason 'length')",
    "content_filter": "the answer was stopped by the server's content filter "
    "(finish_reason 'content_filter')",
}
"""Finish reasons of an answer the server ended early, and why such an answer abstains."""

REFUSED = "the member refused to answer (its message held a refusal, no content)"
"""Why a member whose answer was a refusal (OpenAI's ``message.refusal``) abstains."""


class _Watched:
    """A member's backend as one request sees it: the finish reason of its last answer is
    kept, and a failure whose ``Retry-After`` is past the request's deadline is final
    (see the module docstring). One per member per request, over the shared backend."""

    __slots__ = (
        "finish_reason",
        "initial_json_mode",
        "inner",
        "model_id",
        "provider",
        "refused",
        "stop_at",
    )

    def __init__(self, inner: ChatBackend, stop_at: float) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.provider = getattr(inner, "provider", "dissensus")
        self.initial_json_mode = getattr(inner, "initial_json_mode", "schema")
        self.stop_at = stop_at
        """The fan-out's deadline on the event loop's clock."""
        self.finish_reason: str | None = None
        self.refused = False

    def redact_message(self, text: str) -> str:
        """``text`` scrubbed of the shared backend's key, when it knows one (the client
        scrubs an exception the backend did not expect with it)."""
        own = getattr(self.inner, "redact_message", None)
        return str(own(text)) if callable(own) else text

    async def send(self, request: ChatRequest, *, json_mode: JsonMode) -> BackendResponse:
        try:
            response = await self.inner.send(request, json_mode=json_mode)
        except BackendError as exc:
            wait = exc.retry_after
            if wait is None or not exc.retryable:
                raise
            left = self.stop_at - asyncio.get_running_loop().time()
            if wait <= left:
                raise
            raise BackendError(
                f"{exc} (Retry-After {wait:g} s, past the deadline {max(left, 0.0):.3g} s away)",
                kind=exc.kind,
                retryable=False,
                status=exc.status,
                retry_after=wait,
            ) from None
        self.finish_reason = response.finish_reason
        self.refused = response.refused
        return response

    async def aclose(self) -> None:
        return None  # the shared backend is the Members' to close


@dataclass
class _Asked:
    member: PanelMember
    client: ModelClient
    watched: _Watched
    text: str | None = None
    failure: str | None = None
    read: tuple[AgentOutput, MemberReport, str] | None = None
    """The member's voice in the panel, its report and its text, once read
    (:meth:`Members._read_member`)."""


class Members:
    """The member backends of a panel, opened once and shared by every request."""

    def __init__(
        self,
        settings: PanelSettings,
        backends: dict[str, ChatBackend],
    ) -> None:
        self.settings = settings
        self.backends = backends
        self._slots: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[str, asyncio.Semaphore]
        ] = weakref.WeakKeyDictionary()
        self.client_settings = ClientSettings(
            timeout_s=settings.attempt_timeout_s,
            max_retries=settings.max_retries,
            max_reasks=0,
            backoff_base_s=0.1,
            backoff_max_s=settings.deadline_s,
            retry_after_cap_s=settings.deadline_s,
            concurrency=64,
        )
        self._requests = _Requests(settings)

    @classmethod
    def open(cls, settings: PanelSettings, policy_dir: Path | None = None) -> Members:
        """The backends of ``settings.members`` (relative model files under ``policy_dir``)."""
        return cls(
            settings,
            {m.name: _backend(i, m, settings, policy_dir) for i, m in enumerate(settings.members)},
        )

    async def awarm(self) -> None:
        """Open every backend's client on this event loop now (backends without ``awarm``:
        nothing to open)."""
        for backend in self.backends.values():
            warm = getattr(backend, "awarm", None)
            if warm is not None:
                await warm()

    async def aclose(self) -> None:
        """Release every backend."""
        for backend in self.backends.values():
            await backend.aclose()

    def _slot(self, member: str) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        slots = self._slots.get(loop)
        if slots is None:
            slots = self._slots[loop] = {}
        if member not in slots:
            slots[member] = asyncio.Semaphore(self.settings.member_concurrency)
        return slots[member]

    async def _ask(self, asked: _Asked, request: ChatRequest) -> None:
        try:
            async with self._slot(request.agent or ""):
                response = await asked.client.chat(request)
        except StructuredOutputError as exc:
            asked.text = exc.attempts[-1] if exc.attempts else ""
        except LLMError as exc:
            asked.failure = str(exc)
        else:
            asked.text = response.text
        # Read now, while the slower members are still answering ("Answers read as
        # they arrive"): only the last answer's reading is left for the panel.
        asked.read = self._read_member(asked)

    def _fair_cap(
        self,
        name: str,
        messages: list[Message],
        cap: int | None,
        temperature: float | None,
        seed: int | None,
        tokens: int,
    ) -> int | None:
        """The completion cap that lets every member's first attempt fit in the request's
        token budget at once (see the module docstring): its share less the prompt."""
        st = self.settings
        probe = self._requests.of(name, messages, temperature=temperature, seed=seed, max_tokens=1)
        fair = tokens // len(st.members) - prompt_estimate(probe)
        if fair < 1:  # the prompt alone is over a member's share: the budget decides
            return cap
        return fair if cap is None else min(cap, fair)

    async def fan_out(
        self,
        panel_id: str,
        messages: list[Message],
        *,
        temperature: float | None = None,
        seed: int | None = None,
        max_tokens: int | None = None,
        limit: BudgetSettings | None = None,
    ) -> FanOut:
        """Ask every member ``messages`` at once and build the panel of their answers,
        within ``panel.request_max_tokens`` and ``limit`` (the policy's ``budget``)."""
        st = self.settings
        caps = [c for c in (max_tokens, st.max_tokens) if c is not None]
        cap = min(caps) if caps else None
        bounds = (st.request_max_tokens, limit.max_tokens if limit is not None else None)
        totals = [t for t in bounds if t is not None]
        tokens = min(totals) if totals else None
        budget = Budget(max_calls=limit.max_calls if limit else None, max_tokens=tokens)
        if tokens is not None and st.members:
            cap = self._fair_cap(st.members[0].name, messages, cap, temperature, seed, tokens)
        asked: dict[str, _Asked] = {}
        tasks: dict[str, asyncio.Task[None]] = {}
        stop_at = asyncio.get_running_loop().time() + st.deadline_s
        for member in st.members:
            watched = _Watched(self.backends[member.name], stop_at)
            client = ModelClient(watched, budget=budget, settings=self.client_settings)
            asked[member.name] = got = _Asked(member, client, watched)
            request = self._requests.of(
                member.name, messages, temperature=temperature, seed=seed, max_tokens=cap
            )
            tasks[member.name] = asyncio.create_task(self._ask(got, request))
        done: set[asyncio.Task[None]] = set()
        pending: set[asyncio.Task[None]] = set(tasks.values())
        try:
            done, pending = await asyncio.wait(tasks.values(), timeout=st.deadline_s)
        finally:
            # Only tasks still running are cancelled and awaited (gathering the finished
            # ones too cost the request another turn of the event loop); a finished
            # one's exception is taken, as that gathering took it.
            for task in done:
                if not task.cancelled():
                    task.exception()
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
        for name, task in tasks.items():
            if task in pending:
                asked[name].failure = f"no answer within the deadline of {st.deadline_s:g} s"
        return self._panel(panel_id, messages, asked)

    def _read_member(self, got: _Asked) -> tuple[AgentOutput, MemberReport, str]:
        """The member's voice in the panel (an abstention without reasoning when it gave
        no usable answer), its report and its full text (empty for a failure)."""
        st, member = self.settings, got.member
        attempts = got.client.usage.attempts
        model = self.backends[member.name].model_id
        answer: MemberAnswer | None = None
        why: str | None = got.failure
        if got.text is not None and got.watched.refused:
            answer = MemberAnswer(decision=None, reasoning=got.text.strip(), why=REFUSED)
        elif got.text is not None:
            answer, why = _read(got.text, st)
            cut = CUT_SHORT.get(got.watched.finish_reason or "")
            if answer is not None and cut is not None:
                # No reasoning either: its text, cut off, would read as agreeing with
                # the votes it echoes (module docstring); meta.answers keeps it.
                answer = MemberAnswer(decision=None, reasoning="", why=cut)
        if answer is None:
            why = why or "no answer"
            if len(why) > MAX_WHY_CHARS:
                why = why[: MAX_WHY_CHARS - 1] + "\u2026"
            output = AgentOutput(
                agent=member.name, decision=None, reasoning="", family=member.family
            )
            report = MemberReport(
                name=member.name,
                family=member.family,
                model=model,
                status="failed",
                why=why,
                attempts=attempts,
            )
            return output, report, ""
        output = AgentOutput(
            agent=member.name,
            decision=answer.decision,
            reasoning=answer.reasoning,
            family=member.family,
        )
        report = MemberReport(
            name=member.name,
            family=member.family,
            model=model,
            status="answered" if answer.decision is not None else "abstained",
            decision=answer.decision,
            why=answer.why,
            attempts=attempts,
        )
        return output, report, got.text or ""

    def _panel(self, panel_id: str, messages: list[Message], asked: dict[str, _Asked]) -> FanOut:
        st = self.settings
        outputs: list[AgentOutput] = []
        reports: list[MemberReport] = []
        answers: dict[str, str] = {}
        usage = Usage()
        for member in st.members:
            got = asked[member.name]
            usage.add(got.client.usage)
            # A member the deadline ended is read here, with its failure.
            output, report, text = got.read or self._read_member(got)
            outputs.append(output)
            reports.append(report)
            answers[member.name] = text
        spoke = sum(1 for r in reports if r.status != "failed")
        if spoke < st.min_answers:
            detail = "; ".join(f"{r.name}: {r.why}" for r in reports if r.status == "failed")
            raise PanelUnavailable(
                f"{spoke} of {len(reports)} members answered (at least {st.min_answers} needed): {detail}",
                reports,
            )
        recorded = _request_meta(messages)
        meta: JsonObject = {
            "source": SOURCE,
            "messages": recorded,
            **_case_meta(recorded, st.options),
            "members": [_report_meta(r) for r in reports],
            "answers": answers,
        }
        # Validated once, by the pipeline, from its journalled text (module docstring).
        panel = Panel.model_construct(id=panel_id, meta=meta, outputs=outputs)
        # The bounds the pipeline applies to the record, checked where they are still
        # the door's to report: each answer fits a field (above), the whole may not.
        over = check_record(panel)
        if over is not None:
            raise PanelTooLarge(
                f"the panel of the members' answers is over the pipeline's bound: "
                f"{over.field}: {over.message}",
                reports,
            )
        return FanOut(
            panel=panel,
            reports=reports,
            usage=usage,
            answers=answers,
        )
