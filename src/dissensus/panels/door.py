"""A panel behind one OpenAI-compatible call: fan out, decide, answer or escalate.

:class:`PanelChat` is the library call behind ``POST /v1/chat/completions`` (the HTTP
router of :mod:`dissensus.serve.chat` only translates): a request is fanned out to the
policy's ``panel.members`` (:mod:`dissensus.panels.fanout`), their answers become a
:class:`~dissensus.types.Panel`, and the ordinary pipeline decides it into the journal,
one run per request, like any ``decide`` (:func:`_decide_panel`, the one place the
pipeline is called). The record becomes the completion:

* **committed** (the pipeline committed a decision): ``finish_reason`` ``"stop"``, the
  content is the full text of the first member (in the policy's order) whose decision is
  the committed one, and ``dissensus`` carries the decision, the basis, the acceptance
  figures, the case and run ids and every member's status;
* **escalated**: ``finish_reason`` ``"escalated"``, a content saying a human decides,
  and ``dissensus`` naming the review item, the case to poll and the review page.

:meth:`PanelChat.acase` reads a case back from the journal (``GET /v1/cases/{id}``):
its record with any human resolution, and the answer text.

Choices this module makes: the decision and its journal writes run on a
thread of their own (:class:`~dissensus.panels.worker.DecisionThread`), so the caller's
event loop keeps serving other requests meanwhile, and so do the door's reads of the
journal (a key's case, a case looked up): on the event loop, a read waiting for the
journal's lock, held by a decision waiting on a busy journal, held every request of the
server, health checks included, for as long; the case id is the review id form ``<run>.<line>``
(line 1: one case per run), so it is also what ``POST /v1/cases/{ref}/confirm`` audits;
a committed decision no member gave (a CONCORD outcome) is answered with the decision
itself; the sync twins (``complete``, ``case``, ``close``) run on one private event loop
of the object in a thread of its own (so member backends keep their connections across
calls), and may be called from any thread, several at once (a thread-pool web app), and
from inside a running event loop (a notebook: the caller waits); the completion's ``usage`` is the panel's tokens (every member attempt), and
``created`` is the wall clock at the answer; the request's messages are checked representable
(no lone surrogate) when parsed, since the fan-out builds the panel from them without
validating it (the pipeline validates it); :meth:`PanelChat.awarm` opens the members'
clients ahead of the first request; a request whose own part of the panel (its id and
messages) is over the pipeline's bounds on a record (:mod:`dissensus.io.limits`) is a
``413`` before any member is asked, and a panel the members' answers took over them a
``502`` ``panel_too_large`` (:class:`~dissensus.panels.fanout.PanelTooLarge`), never a
pipeline failure; a case id is read by :func:`~dissensus.pipeline.review.split_ref`, as
every door reads a case reference: its line is ASCII digits without a leading zero, at
most 18 (anything else is an unknown case, so one case has one id).

**Cancellation and the journal.** A request has two parts: the fan-out (asking the
members) and the decision (the pipeline and its journal writes), handed to the decision
thread the moment the fan-out returns. A call cancelled before the hand-off (the
server's ``--timeout``, a shutdown, a caller's ``wait_for``) journals nothing: the
members still running are cancelled and no run is started. A call cancelled after it
does not cancel the decision (it runs to its end on the decision thread, so the journal
never holds half a case): ``on_decide`` (:meth:`PanelChat.acomplete`) is told the case
id and run id at the hand-off, before anything is journalled, so that a caller
cancelled later can still name the case (the HTTP door answers its ``504`` with the
case id and its ``GET /v1/cases/{id}`` link, and tells SDKs not to retry it), and
:meth:`PanelChat.acase` of a case still being decided answers ``deciding`` at once
(``wait=True``: waits for its record), so the case is known as soon as its id is.

**Shutdown.** :meth:`PanelChat.adrain` (the server calls it when it stops): new requests
are refused at once with ``503`` ``shutting_down``; requests still waiting on their
members get the grace it is given to be answered, and are then ended with ``503``
``shutting_down`` (their members cancelled, nothing journalled, safe to retry);
decisions already handed over get the same grace, and their requests are answered
normally. A decision still running then waits on a model (a live follow-up): its model
calls are cut off (:class:`~dissensus.llm.base.Cutoff`, set on every decision's
context: the call in flight fails at once, none is sent after), so its follow-up fails
and the pipeline ends the case as it ends any failed follow-up, journalled (a
cancellation would stop the run instead, and leave the client without an answer). One
that has not ended either after a further bound (a follow-up asleep in a retry's
back-off) is given up on: its request ends with ``503`` :data:`UNFINISHED` naming the
case, and :meth:`PanelChat.aclose` stops it (the run partial and resumable) instead of
waiting; without a drain, :meth:`PanelChat.aclose` waits for every decision.

The content of an escalation says why from what the members gave: a split, one
decision the policy did not let commit on its own, or no usable answer at all.

**Shift watch** (:mod:`dissensus.pipeline.shift_watch`). One request is a run of one
panel, too few cases for a run's own shift check: used as a library, the door keeps a
shift watch and steps it after each decision (on a worker thread, before the request
is answered): every ``shift_every`` judged cases (default 100; 0: no watch) it checks
the latest cases judged with the policy's acceptance file in the journal and journals a
check that flags the file, so that under ``acceptance.on_shift: escalate`` later
requests are held as ``dissensus decide`` holds them. A failed check is logged, never
the request's. Served by ``dissensus serve``, the door's watch is off: the service's
own watch (``--shift-every``) checks the same journal.

**Idempotency keys** (:mod:`dissensus.panels.idempotency`). A request with
``idempotency_key`` makes its case under a run id derived from the key (and its
``key_scope``). Sent again with the key, it waits for any request with the key still
running in this object (its fan-out or its decision), then answers with the case the
journal holds: the same completion id, content and decision, ``dissensus.replayed``
true and a usage of 0 (no member is asked again), or, once a human has resolved an
escalated case, the human's decision (``status`` ``resolved``). The same key with
another request is a ``422`` ``idempotency_key_reused``; a key whose run another
process is deciding, or that stopped before its end, a ``409``
``idempotency_key_in_use`` (ask again later; OpenAI's SDKs retry a ``409`` on their
own). A keyed request that journalled nothing (refused, its members too few, its
client gone before the hand-off) leaves its key free. Two processes on one journal given
the key at once both ask their members; the one whose decision comes second meets the
key's run taken (the ``409``, the case not journalled whole yet) or a busy journal: then
the case the journal holds is its answer as a replay (``replayed`` true, usage 0), since
its own panel was not the one journalled; a keyed panel's ``meta`` holds its request's
attempt id (:data:`ATTEMPT_FIELD`) to tell the two apart.

**A busy or unreachable journal** (:class:`~dissensus.store.errors.JournalBusy`, or any
other :class:`~dissensus.store.errors.JournalError` but a read-only or damaged journal)
while deciding a case, while reading a key's case, or while reading a case
(:meth:`PanelChat.acase`), is a ``503`` :class:`ChatError` with ``code``
:data:`JOURNAL_BUSY` or :data:`JOURNAL_UNAVAILABLE`: the request may be sent again
later (:data:`JOURNAL_FULL` when the journal's disk is full: again once it has room). Its message is a fixed sentence that never names the journal's file
or URL; the store's error (which does) is its ``__cause__``. Any other failure of the
pipeline, a read-only or damaged journal included, is a ``500`` ``decide_failed``.
A decision that failed so may have failed at a commit that went through (the
connection lost before its acknowledgement came): the door reads the journal once
more (its connection reconnects). A case it holds is answered as usual, as if the
commit had been acknowledged; one it does not hold is the ``503`` (nothing of it, or
only its start, is journalled); when the journal cannot be read either, the ``503``
is :data:`JOURNAL_CASE_UNKNOWN`, naming the case (message and ``dissensus`` field) to
poll with :meth:`PanelChat.acase` before asking again.
"""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import ValidationError

from dissensus.errors import ConfigError, DissensusError, InputError
from dissensus.io.limits import DEFAULT, Limits
from dissensus.llm.base import Cutoff, Message, cut_off_by
from dissensus.panels.completion import (
    answer_of,
    as_chunks,
    case_links,
    escalation_text,
    parse_request,
)
from dissensus.panels.errors import (
    CLOSED,
    JOURNAL_BUSY,
    JOURNAL_CASE_UNKNOWN,
    JOURNAL_FULL,
    JOURNAL_UNAVAILABLE,
    SHUTTING_DOWN,
    UNFINISHED,
    case_unknown,
    journal_down,
    journal_outage,
    shutting_down,
    unfinished_case,
)
from dissensus.panels.fanout import (
    FanOut,
    Members,
    PanelTooLarge,
    PanelUnavailable,
    request_overrun,
)
from dissensus.panels.idempotency import (
    FINGERPRINT_FIELD,
    check_fingerprint,
    check_key,
    key_in_use,
    keyed_run_id,
    request_fingerprint,
    run_taken,
)
from dissensus.panels.shapes import (
    COMMITTED,
    ESCALATED,
    AssistantMessage,
    CaseStatus,
    ChatCompletion,
    ChatError,
    Choice,
    CompletionRequest,
    CompletionUsage,
    MemberReport,
    PanelResult,
    RequestMessage,
)
from dissensus.panels.worker import DecisionThread
from dissensus.pipeline import (
    FRESH_ATTEMPTS,
    CaseRecord,
    Policy,
    RunSpec,
    adecide,
    new_run_id,
)
from dissensus.pipeline.durable import case_step
from dissensus.pipeline.records import review_id_for
from dissensus.pipeline.review import final_records, split_ref
from dissensus.pipeline.shift_watch import EVERY, ShiftWatch
from dissensus.pipeline.steps import CaseInput
from dissensus.quoting import quote_short
from dissensus.store.errors import JournalError, RunExists
from dissensus.store.journal import Journal
from dissensus.types import Panel, Usage, find_unrepresentable

__all__ = [
    "CLOSED",
    "JOURNAL_BUSY",
    "JOURNAL_CASE_UNKNOWN",
    "JOURNAL_FULL",
    "JOURNAL_UNAVAILABLE",
    "SHUTTING_DOWN",
    "UNFINISHED",
    "PanelChat",
    "answer_of",
    "as_chunks",
    "parse_request",
]

T = TypeVar("T")

CUT_REASON = "the panel door is shutting down"
"""Why the model calls of decisions still running at the end of a drain are cut off."""


def _retrieved(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()  # its caller reports it; retrieved here, never logged twice


async def _settle(futures: list[Future[Any]]) -> None:
    """Until every one of ``futures`` is done: never cancels them (a waiter cancelled
    leaves them running), never raises what they raise."""
    if not futures:
        return
    wrapped = [asyncio.wrap_future(f) for f in futures]
    for future in wrapped:
        future.add_done_callback(_retrieved)
    await asyncio.wait(wrapped)


def _cancelling() -> int:
    """How many cancellations of the current task are pending."""
    task = asyncio.current_task()
    return task.cancelling() if task is not None else 0


ATTEMPT_FIELD = "request_attempt"
"""The panel ``meta`` field of a keyed request's own attempt (a random id): after a fault,
it tells the case this request journalled (its commit went through, the acknowledgement
lost) from the one another request with the key journalled first."""


def _recorded_reports(panel: Panel) -> list[MemberReport]:
    """The members' reports of a journalled panel (``meta.members`` and their decisions)."""
    decisions = {out.agent: out.decision for out in panel.outputs}
    reports = []
    for entry in panel.meta.get("members") or []:
        if not isinstance(entry, dict):
            continue
        name = entry.get("name")
        decision = decisions.get(name) if isinstance(name, str) else None
        try:
            reports.append(MemberReport.model_validate({**entry, "decision": decision}))
        except ValidationError:
            continue
    return reports


def _message(message: RequestMessage) -> Message:
    """A request message as the model client's (``developer`` is a ``system`` message)."""
    if message.role == "user":
        return Message(role="user", content=message.text())
    if message.role == "assistant":
        return Message(role="assistant", content=message.text())
    return Message(role="system", content=message.text())


async def _decide_panel(
    panel: Panel,
    spec: RunSpec,
    *,
    journal: Journal,
    run_id: str,
    cutoff: Cutoff | None = None,
    fresh: bool = False,
) -> CaseRecord:
    """The one call into the pipeline: decide ``panel`` as run ``run_id`` of ``journal``,
    its model calls under ``cutoff`` (:meth:`PanelChat.adrain`); ``fresh``: the id was
    drawn here, not an idempotency key's (:func:`~dissensus.pipeline.adecide`)."""
    with cut_off_by(cutoff):
        return await adecide(panel, spec, journal=journal, run_id=run_id, fresh=fresh)


def _forget(deciding: dict[str, Any], case_id: str, _: object) -> None:
    """Drop a decision handed off, once done, from those running (its own case id: a
    request that drew another id keeps the one it then holds)."""
    deciding.pop(case_id, None)


def _after(spec: RunSpec, fan: FanOut) -> RunSpec:
    """``spec`` with the budget the fan-out left: the run's follow-up calls draw only on
    what the members did not spend (one request, one budget)."""
    limits = spec.policy.budget
    if limits.max_calls is None and limits.max_tokens is None:
        return spec
    spent = fan.usage
    left = limits.model_copy(
        update={
            "max_calls": None
            if limits.max_calls is None
            else max(0, limits.max_calls - spent.attempts),
            "max_tokens": None
            if limits.max_tokens is None
            else max(0, limits.max_tokens - spent.prompt_tokens - spent.completion_tokens),
        }
    )
    return spec.model_copy(update={"policy": spec.policy.model_copy(update={"budget": left})})


class PanelChat:
    """The policy's panel behind one chat-completions call (async first, sync twins).

    >>> chat = PanelChat.from_file("policy.yaml", journal=open_journal("runs.sqlite"))  # doctest: +SKIP
    >>> done = chat.complete({"model": "panel", "messages": [{"role": "user", "content": "2+2?"}]})  # doctest: +SKIP
    >>> done.choices[0].finish_reason, done.dissensus.decision  # doctest: +SKIP
    """

    def __init__(
        self,
        policy: RunSpec | Policy,
        *,
        journal: Journal,
        policy_dir: Path | None = None,
        members: Members | None = None,
        limits: Limits = DEFAULT,
        shift_every: int = EVERY,
    ) -> None:
        # The bounds on a request's own part of its panel (the service's may be lower).
        self.limits = limits
        # One run specification for every request, built (and checked) once.
        self.spec = RunSpec.from_policy(policy, base_dir=policy_dir)
        self.policy = self.spec.policy
        self.journal = journal
        self.policy_dir = Path(self.spec.base_dir) if self.spec.base_dir else None
        # The shift watch of the door's cases, stepped after each decision (module
        # docstring); the service runs its own instead (shift_every=0 here).
        self.shift_watch = ShiftWatch(self.spec, every=shift_every, journal=journal)
        # ``members``: backends already open (tests, benchmarks); else the policy's.
        try:
            self.members = members or Members.open(self.policy.panel, self.policy_dir)
        except ConfigError as exc:  # named in the policy's file
            if exc.file or not self.spec.policy_file:
                raise
            raise ConfigError(exc.message, file=self.spec.policy_file, field=exc.field) from None
        # The sync twins' loop, in a thread of its own (see the module docstring).
        self._sync = DecisionThread("dissensus-chat-sync")
        # Decisions run off the caller's loop (see dissensus.panels.worker).
        self._decider = DecisionThread("dissensus-chat-decide")
        # Requests waiting on their members (fan-outs, on the caller's loop) and
        # decisions handed over (case id -> its future on the decision thread).
        self._fanning: set[asyncio.Task[FanOut]] = set()
        self._deciding: dict[str, Future[CaseRecord]] = {}
        # Keyed requests running here (run id -> done when the request has ended).
        self._keys: dict[str, Future[None]] = {}
        # Requests waiting on their decisions (the shields they await), and the cutoff
        # of every decision's model calls (adrain).
        self._waiting: set[asyncio.Future[CaseRecord]] = set()
        self._cutoff = Cutoff()
        self._abandoned = False
        self._drained: asyncio.Event | None = None
        self._closing = False
        self._closed = False

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on this object's private loop and wait for it (the sync twins
        share the loop, from whatever thread they are called; an interrupted wait
        cancels the call)."""
        future = self._sync.submit(coro)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    @classmethod
    def from_file(cls, path: str | Path | None, *, journal: Journal) -> PanelChat:
        """The panel of the policy file at ``path`` (``None``: no panel)."""
        return cls(RunSpec.from_policy(path), journal=journal)

    @property
    def enabled(self) -> bool:
        """Whether the policy names any members."""
        return bool(self.policy.panel.members)

    async def awarm(self) -> None:
        """Open the members' clients on this event loop now (a server calls it at
        start-up, so the first request does not import the model SDK)."""
        if self.enabled:
            await self.members.awarm()

    async def adrain(self, seconds: float, cut_s: float | None = None) -> None:
        """Stop taking requests (``503`` ``shutting_down``); give requests still waiting on
        their members up to ``seconds`` to get their answers, then end them (``503``
        ``shutting_down``: members cancelled, nothing journalled). Decisions handed over
        get the same ``seconds``; the model calls of those still running then are cut
        off (failed calls, so their follow-ups fail and the pipeline ends their cases as
        it ends any failed follow-up) and they get ``cut_s`` more seconds (default: half
        of ``seconds``); the requests of any still running then end with ``503``
        :data:`UNFINISHED`, and :meth:`aclose` stops their decisions (the runs stay
        resumable). See the module docstring."""
        self._closing = True
        self._drained = drained = asyncio.Event()
        try:
            await self._drain(seconds, cut_s)
        finally:
            drained.set()

    async def _drain(self, seconds: float, cut_s: float | None) -> None:
        loop = asyncio.get_running_loop()
        until = loop.time() + max(seconds, 0.0)
        fanning = list(self._fanning)
        if fanning and seconds > 0:
            await asyncio.wait(fanning, timeout=seconds)
        for task in list(self._fanning):
            task.cancel()
        await self._decided_within(until - loop.time())
        self._decider.call_soon(self._cutoff.cut, CUT_REASON)
        await self._decided_within(seconds / 2 if cut_s is None else cut_s)
        if self._deciding:
            self._abandoned = True
            for waiting in list(self._waiting):
                waiting.cancel()

    async def _decided_within(self, seconds: float) -> None:
        """Until every decision handed over so far is done, or ``seconds`` have passed."""
        deciding = list(self._deciding.values())
        if not deciding or seconds <= 0:
            return
        wrapped = [asyncio.wrap_future(f) for f in deciding]
        for future in wrapped:
            future.add_done_callback(_retrieved)
        await asyncio.wait(wrapped, timeout=seconds)

    async def _decided(self) -> None:
        """Until every decision handed over so far is journalled (or failed)."""
        await _settle(list(self._deciding.values()))

    async def _decided_or_drained(self) -> None:
        """Until every decision is done, or until a drain (:meth:`adrain`, on this loop)
        has given up on those still running."""
        drained = self._drained
        if drained is None:
            await self._decided()
            return
        settling = asyncio.ensure_future(self._decided())
        draining = asyncio.ensure_future(drained.wait())
        try:
            await asyncio.wait({settling, draining}, return_when=asyncio.FIRST_COMPLETED)
            if not settling.done() and not self._abandoned:
                await settling  # the drain ended without giving up on any
        finally:
            settling.cancel()
            draining.cancel()

    async def aclose(self) -> None:
        """Release the members' backends and end the decisions' thread, once every
        decision handed to it is done (a case is journalled whole or not at all); after
        a drain that gave up on some (:meth:`adrain`), those are stopped instead."""
        self._closing = self._closed = True
        await self._decided_or_drained()
        await self.members.aclose()
        self._decider.stop()

    def close(self) -> None:
        """Sync twin of :meth:`aclose` (also closes the sync twins' loop)."""
        try:
            self._run(self.aclose())
        finally:
            self._sync.stop()

    def check(self, body: Any) -> CompletionRequest:
        """The request, validated against the wire shape and the panel's limits."""
        if not self.enabled:
            raise ChatError(
                404,
                "no panel is configured: the policy's panel.members is empty",
                type="invalid_request_error",
                code="panel_not_configured",
            )
        request = parse_request(body)
        chars = request.content_chars()
        limit = self.policy.panel.max_request_chars
        if chars > limit:
            raise ChatError(
                413,
                f"the messages hold {chars} characters; at most {limit}",
                param="messages",
                code="request_too_large",
            )
        return request

    async def acomplete(
        self,
        body: Any,
        *,
        on_decide: Callable[[str, str], None] | None = None,
        idempotency_key: str | None = None,
        key_scope: str = "",
    ) -> ChatCompletion:
        """Answer one request (see the module docstring); refusals raise :class:`ChatError`.

        ``on_decide(case_id, run_id)`` is called when the panel is handed to the
        decision: from then on the case is journalled even if this call is cancelled.
        ``idempotency_key`` (in ``key_scope``: whose key it is): a request sent again
        with the same key is answered with the case the first one journalled, no member
        asked again (:mod:`dissensus.panels.idempotency`, "Idempotency keys" above).
        """
        request = self.check(body)
        fingerprint: str | None = None
        if idempotency_key is None:
            run_id = new_run_id()
        else:
            key = check_key(idempotency_key, param="idempotency_key")
            run_id = keyed_run_id(key, key_scope)
            fingerprint = request_fingerprint(request)
        case_id = review_id_for(run_id, 1)
        panel_id = f"chatcmpl-{run_id}"
        messages = [_message(m) for m in request.messages]
        # The pipeline's bounds on what the request puts in the panel, before any member
        # is asked: over them, no answer could make the panel decidable.
        over = request_overrun(panel_id, messages, self.limits)
        if over is not None:
            where = over.field.removeprefix("meta.")
            raise ChatError(
                413,
                f"{where if where != '<text>' else 'the messages'}: {over.message} "
                "(the pipeline's bound on a panel)",
                param="messages",
                code="request_too_large",
            )
        if self._closed:
            raise ChatError(
                503,
                "this PanelChat is closed (close() or aclose() was called): make a new one",
                type="server_error",
                code=CLOSED,
            )
        if self._closing:
            raise shutting_down(ended=False)
        if fingerprint is None:
            return await self._answer(request, run_id, case_id, panel_id, messages, on_decide)
        # A keyed request: after any request with its key still running here, the case
        # it journalled, else this request makes it (and holds the key meanwhile).
        try:
            replayed = await self._replayed(request, run_id, case_id, fingerprint, on_decide)
        except JournalError as exc:  # the key's case could not be read
            outage = journal_outage(exc)
            if outage is None:
                raise
            then = (
                "the case of this idempotency key could not be read; send the request again later"
            )
            raise journal_down(outage, then) from exc
        if replayed is not None:
            return replayed
        if self._closing:  # the drain began while this request waited for its key
            raise shutting_down(ended=True)
        holding: Future[None] = Future()
        self._keys[run_id] = holding
        try:
            return await self._answer(
                request, run_id, case_id, panel_id, messages, on_decide, fingerprint
            )
        finally:
            self._keys.pop(run_id, None)
            holding.set_result(None)

    async def _answer(
        self,
        request: CompletionRequest,
        run_id: str,
        case_id: str,
        panel_id: str,
        messages: list[Message],
        on_decide: Callable[[str, str], None] | None,
        fingerprint: str | None = None,
    ) -> ChatCompletion:
        """Fan the request out, hand its panel to the decision, answer from the record."""
        # The fan-out is a task of its own, so that a shutdown can end it (adrain) and
        # tell that apart from the caller being cancelled.
        fanning = asyncio.ensure_future(
            self.members.fan_out(
                panel_id,
                messages,
                temperature=request.temperature,
                seed=request.seed,
                max_tokens=request.completion_cap(),
                limit=self.policy.budget,
            )
        )
        self._fanning.add(fanning)
        try:
            fan = await fanning
        except asyncio.CancelledError:
            if self._closing and fanning.cancelled() and not _cancelling():
                raise shutting_down(ended=True) from None
            raise
        except PanelUnavailable as exc:
            raise ChatError(502, str(exc), type="server_error", code="panel_unavailable") from None
        except PanelTooLarge as exc:
            raise ChatError(502, str(exc), type="server_error", code="panel_too_large") from None
        finally:
            self._fanning.discard(fanning)
        panel = fan.panel
        if fingerprint is not None:
            meta = {**panel.meta, FINGERPRINT_FIELD: fingerprint, ATTEMPT_FIELD: uuid.uuid4().hex}
            panel = panel.model_copy(update={"meta": meta})
        spent = _after(self.spec, fan)
        last = FRESH_ATTEMPTS - 1 if fingerprint is None else 0
        for attempt in range(last + 1):
            # The hand-off (no await since the fan-out returned): from here the case is
            # journalled whatever becomes of this call (module docstring).
            decision = self._decider.submit(
                self._decide_watched(panel, spent, run_id, fresh=fingerprint is None)
            )
            self._deciding[case_id] = decision
            decision.add_done_callback(functools.partial(_forget, self._deciding, case_id))
            if on_decide is not None:
                on_decide(case_id, run_id)
            waiting = asyncio.shield(asyncio.wrap_future(decision))
            self._waiting.add(waiting)
            try:
                record = await waiting
            except asyncio.CancelledError:
                if self._abandoned and waiting.cancelled() and not _cancelling():
                    raise unfinished_case(case_id, run_id) from None
                raise
            except DissensusError as exc:
                if fingerprint is not None and run_taken(exc):
                    raise key_in_use(case_id, run_id) from None
                if fingerprint is None and isinstance(exc, RunExists) and attempt < last:
                    # The id drawn for this request names another run (48 random
                    # bits): the same answers are decided under another, no member
                    # asked again.
                    run_id = new_run_id()
                    case_id = review_id_for(run_id, 1)
                    panel = panel.model_copy(update={"id": f"chatcmpl-{run_id}"})
                    continue
                outage = journal_outage(exc)
                if outage is None:
                    raise ChatError(
                        500,
                        f"the pipeline failed: {exc}",
                        type="server_error",
                        code="decide_failed",
                    ) from None
                if fingerprint is not None:
                    # Another process may have journalled the key's case meanwhile: what the
                    # journal holds is answered only as the key's case, its question checked.
                    return await self._keyed_after_fault(
                        exc, outage, request, run_id, case_id, fingerprint, panel, fan
                    )
                record = await self._after_fault(exc, outage, run_id, case_id, keyed=False)
            finally:
                self._waiting.discard(waiting)
            break
        return self._completion(request, run_id, case_id, panel, fan.reports, fan.usage, record)

    async def _decide_watched(
        self, panel: Panel, spec: RunSpec, run_id: str, *, fresh: bool = False
    ) -> CaseRecord:
        """:func:`_decide_panel`, then a step of the shift watch off the decision thread's
        loop (a failed check is logged, never the request's)."""
        record = await _decide_panel(
            panel, spec, journal=self.journal, run_id=run_id, cutoff=self._cutoff, fresh=fresh
        )
        if self.shift_watch.enabled:
            await asyncio.to_thread(self.shift_watch.step_quietly)
        return record

    async def _keyed_after_fault(
        self,
        exc: DissensusError,
        outage: tuple[str, str],
        request: CompletionRequest,
        run_id: str,
        case_id: str,
        fingerprint: str,
        panel: Panel,
        fan: FanOut,
    ) -> ChatCompletion:
        """A keyed request's answer after its decision met a busy or unreachable journal:
        the case the journal holds under the key, if any, checked as a replay is (another
        question under the key: ``422``), this request's own answer when the journalled
        panel is the one it made (its commit went through: the panel's
        :data:`ATTEMPT_FIELD` is this request's), else the journalled case as a replay
        (another request with the key journalled it first, as two servers given the key
        at once do; equal answers of deterministic members do not make it this one's);
        nothing journalled: the ``503`` (:meth:`_after_fault`)."""
        try:
            found = await asyncio.to_thread(self._keyed_case, run_id)
        except DissensusError:
            raise case_unknown(case_id, run_id, keyed=True) from exc
        if found is None:
            then = "its case was not journalled (at most its start); send the request again later"
            raise journal_down(outage, then) from exc
        journalled, record = found
        check_fingerprint(journalled, fingerprint, case_id)
        if journalled.meta.get(ATTEMPT_FIELD) == panel.meta[ATTEMPT_FIELD]:
            return self._completion(request, run_id, case_id, panel, fan.reports, fan.usage, record)
        return self._completion(
            request,
            run_id,
            case_id,
            journalled,
            _recorded_reports(journalled),
            Usage(),
            record,
            True,
        )

    def _keyed_case(self, run_id: str) -> tuple[Panel, CaseRecord] | None:
        """The panel and record of the key's case when the journal holds its run finished."""
        record = self._journalled(run_id)
        entered = case_step(self.journal, run_id, 1, "input")
        if record is None or entered is None:
            return None
        return CaseInput.model_validate(entered).panel, record

    async def _after_fault(
        self,
        exc: DissensusError,
        outage: tuple[str, str],
        run_id: str,
        case_id: str,
        *,
        keyed: bool,
    ) -> CaseRecord:
        """The case's record when the journal holds it although its decision failed on a
        busy or unreachable journal (the commit went through, its acknowledgement was
        lost: answered as if it had come); else the ``503`` (not journalled, or, when
        the journal cannot be read now either, :func:`~dissensus.panels.errors.case_unknown`)."""
        try:
            record = await asyncio.to_thread(self._journalled, run_id)
        except DissensusError:
            raise case_unknown(case_id, run_id, keyed=keyed) from exc
        if record is not None:
            return record
        then = "its case was not journalled (at most its start); send the request again later"
        raise journal_down(outage, then) from exc

    def _journalled(self, run_id: str) -> CaseRecord | None:
        """The record of the run's case when the journal holds the run finished (one
        read with the journal's connection, which reconnects when it was lost)."""
        if self.journal.get(run_id, "run/finished") is None:
            return None
        return next((r for r in final_records(self.journal, run_id) if r.line == 1), None)

    async def _replayed(
        self,
        request: CompletionRequest,
        run_id: str,
        case_id: str,
        fingerprint: str,
        on_decide: Callable[[str, str], None] | None = None,
    ) -> ChatCompletion | None:
        """The answer of the case a request with this key journalled (``None``: none did),
        once every request with the key still running here has ended; ``on_decide`` is
        told the case when it waits on its decision (its case is journalled, whatever
        becomes of this call)."""
        told = False
        while True:
            deciding = self._deciding.get(case_id)
            if deciding is not None and on_decide is not None and not told:
                on_decide(case_id, run_id)
                told = True
            running = [f for f in (self._keys.get(run_id), deciding) if f]
            if running:
                await _settle(running)
                continue
            # Read off the event loop: the journal's lock may be held by a decision
            # waiting on a busy journal, and the loop serves every other request.
            found = await asyncio.to_thread(self._key_case, run_id)
            # A request with the key that began while the journal was read is waited for.
            if self._keys.get(run_id) is None and self._deciding.get(case_id) is None:
                break
        if found is None:
            return None
        panel, record = found
        if record is None or panel is None:
            raise key_in_use(case_id, run_id)
        check_fingerprint(panel, fingerprint, case_id)
        return self._completion(
            request, run_id, case_id, panel, _recorded_reports(panel), Usage(), record, True
        )

    def _key_case(self, run_id: str) -> tuple[Panel | None, CaseRecord | None] | None:
        """The key's run as the journal holds it: ``None`` when there is none, else its
        case's panel and final record (either ``None`` while it is not journalled whole)."""
        if self.journal.run(run_id, missing_ok=True) is None:
            return None
        record = next((r for r in final_records(self.journal, run_id) if r.line == 1), None)
        entered = case_step(self.journal, run_id, 1, "input")
        panel = CaseInput.model_validate(entered).panel if entered is not None else None
        return panel, record

    def complete(
        self, body: Any, *, idempotency_key: str | None = None, key_scope: str = ""
    ) -> ChatCompletion:
        """Sync twin of :meth:`acomplete`."""
        return self._run(self.acomplete(body, idempotency_key=idempotency_key, key_scope=key_scope))

    def _completion(
        self,
        request: CompletionRequest,
        run_id: str,
        case_id: str,
        panel: Panel,
        reports: list[MemberReport],
        usage: Usage,
        record: CaseRecord,
        replayed: bool = False,
    ) -> ChatCompletion:
        committed = record.decision is not None and record.action != "escalate"
        text, member = answer_of(panel, record.decision) if committed else (None, None)
        if record.action == "human":
            status: Literal["committed", "escalated", "resolved"] = "resolved"
        else:
            status = "committed" if committed else "escalated"
        result = PanelResult(
            status=status,
            case_id=case_id,
            run_id=run_id,
            decision=record.decision if committed else None,
            answered_by=member,
            action=record.action,
            basis=record.basis,
            reason=record.reason,
            state=record.state,
            route=record.route,
            review_id=record.review_id,
            suggestion=record.suggestion,
            acceptance=record.acceptance,
            members=reports,
            links=case_links(run_id, case_id, record.review_id),
            replayed=replayed,
        )
        content = text if committed else escalation_text(case_id, record.reason, reports)
        return ChatCompletion(
            id=panel.id,
            created=int(time.time()),
            model=request.model,
            choices=[
                Choice(
                    message=AssistantMessage(content=content),
                    finish_reason=COMMITTED if committed else ESCALATED,
                )
            ],
            usage=CompletionUsage.of(usage),
            dissensus=result,
        )

    async def acase(self, case_id: str, *, wait: bool = False) -> CaseStatus:
        """A case as the journal holds it now (``404`` :class:`ChatError` when unknown):
        ``deciding`` at once while its decision runs here, unless ``wait`` (then its
        record once journalled). A busy or unreachable journal is the ``503``
        :class:`ChatError` ``journal_busy`` / ``journal_unavailable``, the store's error
        its ``__cause__``."""
        unknown = ChatError(
            404,
            f"no case {quote_short(case_id)} in the journal",
            type="invalid_request_error",
            code="unknown_case",
        )
        # Read as every door reads a case reference (ASCII digits, no leading zero, at
        # most 18): ``str.isdigit`` takes "¹" and "١" (the second would be another id of
        # the same case), ``int`` 4,301 digits not.
        try:
            run_id, line = split_ref(case_id, "case reference")
        except InputError:
            raise unknown from None
        if find_unrepresentable(run_id) is not None:  # a lone surrogate: no run has it
            raise unknown
        deciding = self._deciding.get(case_id)
        if deciding is not None and not wait:  # handed over, not journalled yet
            return CaseStatus(
                case_id=case_id,
                run_id=run_id,
                status="deciding",
                decision=None,
                answer=None,
                record=None,
                links=case_links(run_id, case_id, None),
            )
        if deciding is not None:
            await _settle([deciding])
        try:
            # Off the event loop, as a key's case is read (:meth:`_replayed`).
            found = await asyncio.to_thread(self._journalled_case, run_id, line)
        except JournalError as exc:  # the case could not be read: ask again later
            outage = journal_outage(exc)
            if outage is None:
                raise
            raise journal_down(outage, "the case could not be read; ask again later") from exc
        if found is None:
            raise unknown
        panel, record = found
        if record.action == "human":
            status = "resolved"
        elif record.decision is None:
            status = "escalated"
        else:
            status = "committed"
        text, member = answer_of(panel, record.decision)
        return CaseStatus(
            case_id=case_id,
            run_id=run_id,
            status=status,
            decision=record.decision,
            answer=text,
            answered_by=member,
            record=record,
            links=case_links(run_id, case_id, record.review_id),
        )

    def _journalled_case(self, run_id: str, line: int) -> tuple[Panel, CaseRecord] | None:
        """The panel and final record of the run's case on ``line``, ``None`` when the
        journal holds no such case."""
        if self.journal.run(run_id, missing_ok=True) is None:
            return None
        record = next((r for r in final_records(self.journal, run_id) if r.line == line), None)
        entered = case_step(self.journal, run_id, line, "input")
        if record is None or entered is None:
            return None
        return CaseInput.model_validate(entered).panel, record

    def case(self, case_id: str, *, wait: bool = False) -> CaseStatus:
        """Sync twin of :meth:`acase`."""
        return self._run(self.acase(case_id, wait=wait))
