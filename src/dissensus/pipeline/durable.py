"""Durable steps and journalled model calls: how a killed run resumes without repeating work.

Every step of a case is *memoised in the journal*: :meth:`CaseLog.step` returns the
stored payload when the step's key is already journalled and otherwise computes it,
appends it, and only then returns it. Every model call goes through
:class:`JournalledClient`, which journals the call's result under a deterministic
*call key* before the caller sees it; a resumed run finds the key and replays the
stored result instead of calling the model again.

Choices this module makes:

* Step keys are ``case/<line>/<step>``; every step's payload is one pydantic model
  (:mod:`dissensus.pipeline.steps`), validated again when it is replayed. A step
  computed in this process is returned as computed when it is an instance of the step's
  model (validating its JSON would rebuild the same value), and a step that holds an
  earlier step's value (the review item holds the reading and the guard's check) takes
  that value's JSON as the earlier step made it: the same payload, serialised once.
* **Buffered steps.** A case's steps are kept in memory (:class:`CaseLog`) and reach the
  journal with the case's block (the run loop's group commit), or before the case's
  first model call, whichever comes first; the first write folds the input, reading,
  route and guard into one ``case.steps`` event, without what the case's review item
  in the same write holds (:mod:`dissensus.pipeline.compact`). A crash loses buffered
  steps only, which are deterministic: the resumed run computes them again. Journals
  with one event per step are read alike (:func:`case_steps`).
* Call keys are ``call/<line>/<digest>/<k>``: the digest is the first 32 hex digits (128
  bits) of :func:`call_digest`, the sha256 of the request's identity
  (:func:`dissensus.llm.replay.canonical_request`, the one definition replays and
  recordings use: ``max_tokens`` and client settings are not part of it), the schema's
  name and the model spec the call went to (``null`` for the run's model);
  ``k`` counts identical requests within the case (so two identical questions are two
  calls, and concurrent calls inside a case never depend on their completion order).
* **Spend survives a kill.** Before a live call, a ``model.spend`` event (key
  ``spend/<call key>``) is journalled, and each attempt is journalled as it is sent
  (``model.sent``, key ``sent/<call key>/<n>``, through
  :func:`dissensus.llm.budget.attempt_hook`, right before the request leaves). A failed
  call journals its attempts (``model.failed``, ``outcome: failed``); so does a call the
  budget refused after attempts that failed (``outcome: budget``: the timeouts before
  the refusal count, in the budget and in the case's usage); either holds the tokens
  the server reported for the call's answers, those that failed validation included.
  An attempt that re-asks after such an answer journals, in its ``model.sent``
  (``spent``), what the call spent before it, so the answer's tokens survive a kill or
  a deadline that cuts the call off. A resumed run charges its budget, before anything
  else, with every journalled call's usage, every failed call's attempts and tokens,
  the tokens of answers to calls that never ended (:func:`unended_answers`), and every
  attempt sent that neither accounts for (the process was killed, or stopped by its
  deadline, while the attempt was in flight): an attempt is charged when it is sent,
  and an answer's tokens when it is answered, so no sequence of kills, deadlines and
  resumes sends more attempts, or is answered with more tokens, than the budget
  allows. A call cut off that way is made again on resume; the records equal the
  uninterrupted run's unless the budget binds (the cut-off attempt used part of it). A kill between ``model.spend`` and the attempt's ``model.sent`` sent nothing
  and charges nothing.
* **No attempt after the run's deadline.** The attempt hook
  (:meth:`CaseClient._sent`) starts no attempt once the run's deadline
  (:attr:`JournalledClient.stop_at`) has passed: it raises :class:`PastDeadline`
  before ``model.sent``, which the model client takes as a failed attempt it does not
  retry and :meth:`CaseClient.chat` raises instead, so nothing is sent or journalled
  and no resume charges it, and the run stops as its deadline says (partial, resumable). An attempt in
  flight at the deadline is cancelled by the run loop: one attempt, charged (it was
  sent); the resumed run makes the call again. So N invocations cut off by their
  deadline cost a call at most N attempts, never retries within one, and a first
  attempt delayed past the deadline (the event loop held by a fresh process's import
  of the model SDK) no longer charges an attempt that never left.
* Each model spec has its own client (``seek_context.models`` maps agents to specs);
  all of them draw from the one run budget.
* A replayed call returns the stored text, the stored usage and the parsed object
  re-validated against the caller's schema; its usage counts again in the case's usage
  so that the final record does not depend on where the run was interrupted.
* The journalled request holds the messages, agent, role, stage and sampling settings:
  never client configuration, hence never an API key.
* The model client is created on first live call only, so a run whose follow-ups are
  all recorded (or replayed) needs no model at all.
* A call that fails (:class:`ModelCallError`, :class:`StructuredOutputError`) is not
  journalled as a call, since a resumed run must try it again; its ``model.failed`` and
  the case's usage count what it spent as the model client counted it (the error's
  ``usage``): one call, its attempts, and the tokens the server reported for the answers
  it gave (answers that failed validation were billed), so a failed deliberation does
  not report zero calls nor zero tokens.
* **A journal fault is never a model failure** (:data:`JOURNAL_FAULTS`: the journal's
  own errors, busy or unreachable, a key appended again with another payload, a
  journalled step that no longer reads). The appends around a call (``model.spend``,
  ``model.sent``, ``model.call``, ``model.failed``) raise it to the caller as it is, and
  the follow-ups that catch a failed call (a re-ask, a DCI deliberation) let it through:
  the run stops unfinished, resumable, and the command line exits with the journal's
  code (a lock held past the busy timeout: 1, retry later). The model client turns
  whatever an attempt's hook raises into a failed attempt (``model.sent`` is journalled
  from inside it), so the hook keeps the journal's error and :meth:`CaseClient.chat`
  raises that instead of the model error it was wrapped in; the attempt was never sent.
"""

from __future__ import annotations

import asyncio
import functools
import types
import typing
from collections import Counter
from collections.abc import Callable, Collection, Iterable
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from dissensus.deprecation import deprecated_names, renamed
from dissensus.errors import DissensusError
from dissensus.llm.base import (
    BudgetExceeded,
    ChatClient,
    ChatRequest,
    ChatResponse,
    ModelCallError,
    StructuredOutputError,
)
from dissensus.llm.budget import Budget, attempt_hook, call_spent
from dissensus.llm.client import ModelClient
from dissensus.llm.replay import canonical_request
from dissensus.pipeline.compact import (
    COMPACT_STEPS,
    STEPS_STEP,
    STEPS_TYPE,
    case_step,
    case_steps,
    fold,
)
from dissensus.pipeline.run_events import (
    ModelFailed,
    ModelReserved,
    ModelSent,
    ModelSettled,
    ModelSpend,
)
from dissensus.pipeline.steps import CallRecord
from dissensus.store import errors as store_errors
from dissensus.store import event_types as ev
from dissensus.store.canonical import canonical, sha256_text
from dissensus.store.journal import Journal, NewEvent
from dissensus.types import JsonObject, Usage

__all__ = [
    "COMPACT_STEPS",
    "JOURNAL_FAULTS",
    "STEPS_TYPE",
    "CaseClient",
    "CaseLog",
    "JournalledClient",
    "PastDeadline",
    "UnreadableStep",
    "call_digest",
    "case_step",
    "case_steps",
    "open_reservations",
    "replay_spend",
    "unended_answers",
]

M = TypeVar("M", bound=BaseModel)


class SpendEvent(Protocol):
    """A journal event as :func:`unended_answers` reads it (a stored or a new event)."""

    @property
    def type(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def payload(self) -> dict[str, Any]: ...


class UnreadableStep(DissensusError):
    """A journalled step does not fit the step's model (edited, or written by another version).

    Formerly ``JournalError``, a name that stays importable from here with a
    :class:`DeprecationWarning`; :class:`dissensus.store.JournalError` is the journal's own
    error (unreachable, not a journal, a database error)."""


__getattr__ = deprecated_names(
    __name__,
    renamed(
        __name__,
        globals(),
        {"JournalError": "UnreadableStep"},
        "dissensus.store.JournalError is the journal's own error",
    ),
)


class PastDeadline(Exception):
    """The run's deadline passed before the next long step started (a prefetch's next
    embedding call, a model call's next attempt): nothing more is started, and the run
    loop stops the run as its deadline says (partial, resumable)."""


# The store's JournalError by its module: this module's own name ``JournalError`` is a
# deprecated alias of UnreadableStep (above).
JOURNAL_FAULTS: tuple[type[DissensusError], ...] = (
    store_errors.JournalError,
    store_errors.JournalConflict,
    UnreadableStep,
)
"""Errors of the journal, not of a model: a follow-up that catches a failed model call
lets these through (the run stops, resumable), never records them as the case's outcome."""


def call_digest(request: ChatRequest, schema: str | None, model: str | None) -> str:
    """sha256 of a call's identity: the request's canonical form, the schema name, the model spec."""
    return sha256_text(
        canonical({"request": canonical_request(request), "schema": schema, "model": model})
    )


class CaseLog:
    """The journal, seen from one case of one run.

    Steps are *buffered*: :meth:`append` keeps a step's event in memory (where
    :meth:`stored` finds it) and the case's events reach the journal together, either
    when the run loop appends the case's block (:meth:`take`) or, before the case's first
    model call, through :meth:`flush` (so a paid call is journalled after the steps that
    led to it). The case's journalled events are read once, on first use, in one query
    (none when the caller knows the case has none: ``fresh``).
    The first write of a case folds its buffered :data:`COMPACT_STEPS` into one
    ``case.steps`` event (:class:`~dissensus.pipeline.steps.CaseSteps`).
    """

    def __init__(self, journal: Journal, run_id: str, line: int, *, fresh: bool = False) -> None:
        self.journal = journal
        self.run_id = run_id
        self.line = line
        self.ref = str(line)
        # ``fresh``: the caller knows the journal holds no event of the case (no query).
        self._known: dict[str, JsonObject] | None = {} if fresh else None
        self._pending: list[NewEvent] = []
        self._buffered: dict[str, JsonObject] = {}
        self._written = False
        self._dumps: dict[int, tuple[BaseModel, JsonObject]] = {}
        """The JSON of each value this log appended (by identity), reused inside later steps."""

    def key(self, step: str) -> str:
        return f"case/{self.ref}/{step}"

    def _journalled(self) -> dict[str, JsonObject]:
        if self._known is None:
            self._known = case_steps(self.journal.events(self.run_id, case=self.ref))
        return self._known

    def stored(self, step: str) -> JsonObject | None:
        return self._stored(f"case/{self.ref}/{step}")

    def _stored(self, key: str) -> JsonObject | None:
        """The payload buffered or journalled under ``key``."""
        found = self._buffered.get(key)
        if found is not None:
            return found
        known = self._known
        return (known if known is not None else self._journalled()).get(key)

    def replayed(self, step: str, model: type[M]) -> M | None:
        """The journalled ``step`` validated as ``model`` (``None`` when not journalled).

        A journalled payload that no longer fits its model is a :class:`UnreadableStep`
        naming the run, the key and the field, never a silently different run.
        """
        found = self._stored(f"case/{self.ref}/{step}")
        if found is None:
            return None
        return self._validated(step, model, found)

    def _validated(self, step: str, model: type[M], found: JsonObject) -> M:
        """The stored payload of ``step`` validated as ``model`` (see :meth:`replayed`)."""
        try:
            return model.model_validate(found)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "<payload>"
            raise UnreadableStep(
                f"run {self.run_id}: journalled step {self.key(step)} is not a valid {model.__name__} "
                f"(field {where}: {first['msg']})"
            ) from None

    def step(
        self,
        step: str,
        type: str,
        model: type[M],
        compute: Callable[[], M],
        *,
        json_fields: Collection[str] = (),
        form: Callable[[JsonObject], JsonObject] | None = None,
    ) -> M:
        """The journalled ``step``, computing and appending it if missing (validated either way)."""
        found = self._stored(f"case/{self.ref}/{step}")
        if found is not None:
            return self._validated(step, model, found)
        return self.append(step, type, model, compute(), json_fields=json_fields, form=form)

    def append(
        self,
        step: str,
        type: str,
        model: type[M],
        value: M,
        *,
        json_fields: Collection[str] = (),
        form: Callable[[JsonObject], JsonObject] | None = None,
    ) -> M:
        """Buffer ``value`` under ``step`` (idempotent); the payload as it will be journalled,
        validated.

        ``json_fields`` names fields of ``value`` that hold JSON already (a mapping of JSON
        values, which its dump would copy): the payload takes them as they are. ``form``
        makes the journalled payload from the value's JSON (e.g. a review item's
        :func:`~dissensus.pipeline.review_form.journal_form`); ``model`` reads it back.
        """
        key = f"case/{self.ref}/{step}"
        stored = self._stored(key)
        if stored is None:
            dumped = self._dump(value, json_fields)
            self._dumps[id(value)] = (value, dumped)
            stored = form(dumped) if form is not None else dumped
            self._buffered[key] = stored
            self._pending.append(NewEvent(type, stored, key, self.ref))
            if value.__class__ is model:
                # A validated instance of the step's model: what validating its dump returns.
                return value
        return model.model_validate(stored)

    def dumped(self, value: BaseModel) -> JsonObject | None:
        """The JSON this log made of ``value`` when it appended it (``None`` if it did not)."""
        found = self._dumps.get(id(value))
        return found[1] if found is not None and found[0] is value else None

    def _dump(self, value: BaseModel, json_fields: Collection[str]) -> JsonObject:
        """``value.model_dump(mode="json")``, taking the JSON of fields that hold a value
        this log appended (or that hold JSON, ``json_fields``) instead of making it again."""
        reuse: dict[str, Any] = {}
        values = value.__dict__
        for name, classes in _model_fields(value.__class__).items():
            field = values.get(name)
            if field.__class__ in classes:
                found = self._dumps.get(id(field))
                if found is not None and found[0] is field:
                    reuse[name] = found[1]
        for name in json_fields:
            given = values.get(name)
            if isinstance(given, dict):
                reuse[name] = given
        if not reuse:
            return value.model_dump(mode="json")
        rest = value.model_dump(mode="json", exclude=set(reuse))
        out = {
            n: reuse[n] if n in reuse else rest[n]
            for n in value.__class__.model_fields
            if n in reuse or n in rest
        }
        out.update((n, v) for n, v in rest.items() if n not in out)
        return out

    def take(self) -> list[NewEvent]:
        """The case's buffered events (compacted on the case's first write), handed over
        for the caller to append; the buffer is empty afterwards."""
        events = self._compacted()
        self._pending = []
        self._buffered = {}
        return events

    def flush(self) -> None:
        """Append the buffered events now (in one transaction)."""
        if self._pending:
            events = self.take()
            self.journal.append_batch(self.run_id, events)
            known = self._journalled()
            known.update(case_steps(events))

    def _compacted(self) -> list[NewEvent]:
        events = self._pending
        if self._written:
            return events
        self._written = True
        if self.key(STEPS_STEP) in self._journalled():
            return events
        return fold(events, self.ref)


@functools.cache
def _model_fields(cls: type[BaseModel]) -> dict[str, frozenset[type]]:
    """The fields of ``cls`` whose value may be a model another step appended, with the
    (frozen) model classes whose JSON their dump is: the field's type, or the members of
    its union; none when the class customises its serialisation."""
    decorators = cls.__pydantic_decorators__
    if decorators.field_serializers or decorators.model_serializers or cls.model_computed_fields:
        return {}
    out: dict[str, frozenset[type]] = {}
    for name, info in cls.model_fields.items():
        if info.exclude:
            continue
        hint = info.annotation
        union = typing.get_origin(hint) in (typing.Union, types.UnionType)
        members = typing.get_args(hint) if union else (hint,)
        models = frozenset(
            m
            for m in members
            if isinstance(m, type) and issubclass(m, BaseModel) and m.model_config.get("frozen")
        )
        if models:
            out[name] = models
    return out


def replay_spend(journal: Journal, run_id: str, budget: Budget, *, model: str = "-") -> Usage:
    """Charge ``budget`` with the run's journalled spend; returns it.

    Completed calls count their usage, failed ones (model errors, budget refusals) theirs
    too (their attempts, and the tokens of the answers the server gave them); every
    attempt journalled as sent (``model.sent``) that neither accounts for counts one
    attempt more: it was sent by a process that was killed or cancelled before it learnt
    the outcome, and a provider may have billed it; a call that never ended counts the
    tokens of the answers it was given before it was cut off (:func:`unended_answers`).
    Every reservation of the Ray engine (``model.reserved``) that no ``model.settled``
    settles counts in full, its calls as attempts and its tokens as prompt tokens: the
    worker it was made for may have spent all of it, and the driver was killed (or
    stopped) before it journalled the block's events (:func:`open_reservations`). A reservation settled as *abandoned*
    (:class:`~dissensus.pipeline.run_events.ModelSettled` ``abandoned``: the driver
    stopped on an interrupt, a deadline or an error with the block in flight, and
    settled it with what the stopped worker had sent or had in flight) counts what its
    settlement says, the block's events never having been journalled. A journal without
    reservations (a local run, a journal written before them) is charged as before.
    """
    total = Usage()
    accounted: Counter[str] = Counter()
    ended: list[SpendEvent] = []
    for event in journal.events(run_id, type=ev.MODEL_CALL):
        call = event.read_as(CallRecord)
        total.add(call.usage)
        accounted[event.key] += call.usage.attempts
        ended.append(event)
        _charge(budget, call.usage, call.model or model)
    for event in journal.events(run_id, type=ev.MODEL_FAILED):
        spent = Usage.model_validate(event.payload["usage"])
        total.add(spent)
        accounted[str(event.payload.get("call"))] += spent.attempts
        ended.append(event)
        _charge(budget, spent, model)
    sent_events = list(journal.events(run_id, type=ev.MODEL_SENT))
    sent: Counter[str] = Counter(str(e.payload.get("call")) for e in sent_events)
    unanswered = sum(max(0, n - accounted[key]) for key, n in sent.items())
    cut_off = unended_answers(sorted([*ended, *sent_events], key=_seq))
    cut_off.attempts = unanswered
    if unanswered or cut_off.total_tokens:
        total.add(cut_off)
        if unanswered:
            _charge(budget, cut_off, model)
        else:  # answers whose attempts their call's other events count
            budget.charge(tokens=cut_off.total_tokens)
    for reserved in open_reservations(journal, run_id).values():
        held = Usage(attempts=reserved.calls or 0, prompt_tokens=reserved.tokens or 0)
        total.add(held)
        budget.charge(attempts=held.attempts, tokens=held.prompt_tokens)
    for event in journal.events(run_id, type=ev.MODEL_SETTLED):
        if event.payload.get("abandoned") is True:
            settled = event.read_as(ModelSettled)
            spent = Usage(attempts=settled.attempts, prompt_tokens=settled.tokens)
            total.add(spent)
            budget.charge(attempts=spent.attempts, tokens=spent.prompt_tokens)
    return total


def unended_answers(events: Iterable[SpendEvent]) -> Usage:
    """The tokens of answers given to calls that never ended, from a run's spend events
    (``model.sent``, ``model.call``, ``model.failed``) in journal order.

    A call re-asked after an answer that failed validation journals that answer's usage
    with the re-ask's ``model.sent`` (``spent``); its ``model.call`` or ``model.failed``
    counts it again when the call ends. A call cut off before (a kill, a deadline) has
    none: its latest ``spent`` is what the server answered it in that process. A
    ``spent`` lower than the one before starts another process's try of the call, and
    the earlier try's figure is kept."""
    open_: dict[str, Usage] = {}
    lost = Usage()
    for event in events:
        payload = event.payload
        if event.type == ev.MODEL_SENT:
            key = str(payload.get("call"))
            raw = payload.get("spent")
            spent = Usage.model_validate(raw) if raw is not None else Usage()
            before = open_.get(key)
            if before is not None and spent.total_tokens < before.total_tokens:
                lost.add(before)
            open_[key] = spent
        else:
            key = event.key if event.type == ev.MODEL_CALL else str(payload.get("call"))
            open_.pop(key, None)  # ended: its event counts the whole call
    for spent in open_.values():
        lost.add(spent)
    return Usage(
        prompt_tokens=lost.prompt_tokens, completion_tokens=lost.completion_tokens, cost=lost.cost
    )


def open_reservations(journal: Journal, run_id: str) -> dict[str, ModelReserved]:
    """The run's reservations (``model.reserved``, by key) that no ``model.settled`` settles."""
    reserved = {
        e.key: e.read_as(ModelReserved) for e in journal.events(run_id, type=ev.MODEL_RESERVED)
    }
    if reserved:
        for event in journal.events(run_id, type=ev.MODEL_SETTLED):
            reserved.pop(str(event.payload.get("reservation")), None)
    return reserved


def _seq(event: Any) -> int:
    """An event's sequence number (sorts a run's events of several types)."""
    seq: int = event.seq
    return seq


def _charge(budget: Budget, usage: Usage, model: str) -> None:
    for attempt in range(usage.attempts):
        try:
            reservation = budget.reserve(model=model, prompt_tokens=0, completion_tokens=0)
        except BudgetExceeded:
            return  # already spent to the limit: every further call is refused anyway
        first = attempt == 0
        budget.settle(
            reservation,
            model=model,
            prompt_tokens=usage.prompt_tokens if first else 0,
            completion_tokens=usage.completion_tokens if first else 0,
        )


class JournalledClient:
    """Creates the run's model clients lazily (one per spec) and hands out per-case views.

    ``stop_at`` is the run's deadline on the event loop's clock (``loop.time()``), if
    any: no attempt starts once it has passed (:class:`PastDeadline`)."""

    def __init__(
        self,
        journal: Journal,
        run_id: str,
        factory: Callable[[str | None], ModelClient],
        *,
        stop_at: float | None = None,
    ) -> None:
        self.journal = journal
        self.run_id = run_id
        self.stop_at = stop_at
        self._factory = factory
        self._clients: dict[str | None, ModelClient] = {}

    def past_deadline(self) -> bool:
        """Whether the run's deadline has passed (on the running event loop's clock)."""
        stop_at = self.stop_at
        return stop_at is not None and asyncio.get_running_loop().time() >= stop_at

    def live(self, model: str | None = None) -> ModelClient:
        """The client of model spec ``model`` (``None``: the run's model)."""
        client = self._clients.get(model)
        if client is None:
            client = self._clients[model] = self._factory(model)
        return client

    def for_case(self, log: CaseLog) -> CaseClient:
        return CaseClient(self, log)

    async def aclose(self) -> None:
        clients = list(self._clients.values())
        self._clients.clear()
        for client in clients:
            await client.aclose()


def _request_payload(request: ChatRequest) -> JsonObject:
    return request.model_dump(mode="json")


class CaseClient:
    """The model client as one case sees it: every call journalled, replayed on resume.

    A :class:`~dissensus.llm.ChatClient` (``chat``, ``usage``, ``usage_by_agent``) asking
    the run's model; :meth:`for_model` is the same client asking another model spec
    (an agent's own, ``seek_context.models``), a :class:`~dissensus.llm.ChatClient` too.
    The model is chosen by the client, not by an argument of ``chat``, so the protocol
    every caller types against stays the one :class:`~dissensus.llm.client.ModelClient`
    implements (as an HTTP client is bound to its transport).
    """

    def __init__(self, owner: JournalledClient, log: CaseLog) -> None:
        self._owner = owner
        self._log = log
        self._seen: Counter[str] = Counter()
        self.usage = Usage()
        self.usage_by_agent: dict[str, Usage] = {}
        self.calls: list[str] = []
        """Keys of the calls made (live or replayed), in call order."""
        self._sends: dict[str, int] = {}
        self._faults: dict[str, Exception] = {}
        """The journal's error of a call whose attempt could not be journalled as sent, or
        the :class:`PastDeadline` of one whose attempt the deadline stopped."""

    def _key(self, request: ChatRequest, schema: type[BaseModel] | None, model: str | None) -> str:
        digest = call_digest(request, schema.__name__ if schema else None, model)
        k = self._seen[digest]
        self._seen[digest] += 1
        return f"call/{self._log.ref}/{digest[:32]}/{k}"

    def _count(self, request: ChatRequest, usage: Usage) -> None:
        self.usage.add(usage)
        self.usage_by_agent.setdefault(request.agent or "-", Usage()).add(usage)

    def for_model(self, model: str | None) -> ChatClient:
        """This client asking model spec ``model`` (``None``: the run's model); its calls
        are journalled and counted as this client's."""
        return self if model is None else _ModelSpecClient(self, model)

    async def chat(
        self, request: ChatRequest, *, schema: type[BaseModel] | None = None
    ) -> ChatResponse:
        """One call to the run's model: replayed when journalled, else made and journalled."""
        return await self._call(request, schema, None)

    async def _call(
        self, request: ChatRequest, schema: type[BaseModel] | None, model: str | None
    ) -> ChatResponse:
        """One call to model spec ``model`` (``None``: the run's model)."""
        key = self._key(request, schema, model)
        self.calls.append(key)
        journal, run_id, ref = self._owner.journal, self._owner.run_id, self._log.ref
        event = journal.get(run_id, key)
        if event is not None:
            response = self._replay(event.payload, schema)
        else:
            # The case's steps so far go to the journal before the money is spent.
            self._log.flush()
            journal.append(
                run_id,
                ev.MODEL_SPEND,
                ModelSpend(call=key, agent=request.agent, model=model).payload(),
                key=f"spend/{key}",
                case=ref,
            )
            try:
                with attempt_hook(lambda: self._sent(key)):
                    response = await self._owner.live(model).chat(request, schema=schema)
            except (ModelCallError, StructuredOutputError) as exc:
                fault = self._faults.pop(key, None)
                if fault is not None:
                    # The journal failed, not the model: the attempt was never sent.
                    raise fault from exc
                spent = _spent_by(exc, Usage(calls=1, attempts=max(1, len(exc.attempts))))
                self._failed(key, spent, "failed")
                self._count(request, spent)
                raise
            except BudgetExceeded as exc:
                fault = self._faults.pop(key, None)
                if fault is not None:
                    raise fault from exc
                # Refused, maybe after attempts that failed (timeouts) or answers that did
                # not validate: those were sent and count, in the journal and in the
                # case's usage.
                fallback = Usage(calls=1 if exc.attempts else 0, attempts=len(exc.attempts))
                spent = _spent_by(exc, fallback)
                self._failed(key, spent, "budget")
                self._count(request, spent)
                raise
            call = CallRecord(
                request=_request_payload(request),
                schema=schema.__name__ if schema else None,
                text=response.text,
                parsed=_parsed_payload(response.parsed),
                model=response.model,
                attempts=response.attempts,
                usage=response.usage,
            )
            journal.append(
                run_id,
                ev.MODEL_CALL,
                call.model_dump(mode="json", by_alias=True),
                key=key,
                case=ref,
            )
        self._count(request, response.usage)
        return response

    def _failed(self, key: str, spent: Usage, outcome: str) -> None:
        journal, run_id = self._owner.journal, self._owner.run_id
        n = _next_index(journal, run_id, f"failed/{key}")
        payload = ModelFailed(call=key, usage=spent, outcome=outcome).payload()
        journal.append(
            run_id, ev.MODEL_FAILED, payload, key=f"failed/{key}/{n}", case=self._log.ref
        )

    def _sent(self, key: str) -> None:
        """Journal one attempt of call ``key`` as it is sent (``sent/<call key>/<n>``); an
        attempt the run's deadline has passed is not sent (:class:`PastDeadline`)."""
        if self._owner.past_deadline():
            # The model client makes a failed attempt of this, never retried: _call raises
            # it instead; nothing was sent or journalled, so no resume charges it.
            self._faults[key] = stop = PastDeadline()
            raise stop
        journal, run_id = self._owner.journal, self._owner.run_id
        n = self._sends.get(key)
        if n is None:
            n = _next_index(journal, run_id, f"sent/{key}")
        spent = call_spent()
        # The tokens of the call's earlier answers (that failed validation) are journalled
        # with the attempt that re-asks, so a call cut off after it still charges them.
        sent = (
            ModelSent(call=key, n=n, spent=spent)
            if spent.total_tokens
            else ModelSent(call=key, n=n)
        )
        try:
            journal.append(
                run_id,
                ev.MODEL_SENT,
                sent.payload(),
                key=f"sent/{key}/{n}",
                case=self._log.ref,
            )
        except Exception as exc:
            # The model client makes a failed attempt of whatever this raises: keep the
            # journal's error for _call to raise instead (nothing was sent).
            self._faults[key] = exc
            raise
        self._sends[key] = n + 1

    def _replay(self, payload: JsonObject, schema: type[BaseModel] | None) -> ChatResponse:
        try:
            call = CallRecord.model_validate(payload)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise UnreadableStep(
                f"run {self._owner.run_id}: journalled model call is not a valid CallRecord "
                f"(field {'.'.join(str(p) for p in first['loc'])}: {first['msg']})"
            ) from None
        parsed: Any = call.parsed
        if schema is not None and parsed is not None:
            parsed = schema.model_validate(parsed)
        return ChatResponse(
            text=call.text,
            parsed=parsed,
            usage=call.usage,
            model=call.model,
            attempts=call.attempts,
        )


class _ModelSpecClient:
    """A :class:`CaseClient` asking one model spec: its calls and usage are the case's."""

    def __init__(self, case: CaseClient, model: str) -> None:
        self._case = case
        self._model = model

    async def chat(
        self, request: ChatRequest, *, schema: type[BaseModel] | None = None
    ) -> ChatResponse:
        # The same module's client: one code path journals every call, whatever the model.
        return await self._case._call(request, schema, self._model)

    @property
    def usage(self) -> Usage:
        """The case's usage (every model spec)."""
        return self._case.usage

    @property
    def usage_by_agent(self) -> dict[str, Usage]:
        """The case's usage per agent (every model spec)."""
        return self._case.usage_by_agent


def _spent_by(exc: Exception, fallback: Usage) -> Usage:
    """What the failed call that raised ``exc`` spent: the model client's count (its
    attempts, and the tokens of the answers the server gave, such as answers that failed
    validation), else ``fallback`` (an error no model client counted)."""
    usage = getattr(exc, "usage", None)
    return usage.model_copy() if isinstance(usage, Usage) else fallback


def _next_index(journal: Journal, run_id: str, prefix: str) -> int:
    """The first ``n`` for which ``<prefix>/<n>`` is not journalled."""
    n = 0
    while journal.get(run_id, f"{prefix}/{n}") is not None:
        n += 1
    return n


def _parsed_payload(parsed: Any) -> Any:
    if isinstance(parsed, BaseModel):
        return parsed.model_dump(mode="json")
    return parsed
