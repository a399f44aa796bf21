"""Decide runs submitted over HTTP: journalled like ``dissensus decide``, followed live.

A request's panels become one run of the journal, exactly as ``dissensus decide`` makes
one run of a file: the server builds one :class:`~dissensus.pipeline.spec.RunSpec` from
its policy at start (every file the policy names loaded and hashed, learned acceptance
included), :func:`dissensus.pipeline.batch.start_run` journals the input (as text, the
way the CLI journals standard input) with that spec, and the cases are decided by
:func:`dissensus.pipeline.execute_run`, the CLI's own loop. A run started here can
therefore be listed, verified, exported and resumed with the CLI, and gives the CLI's
records.

Choices where the design is silent:

* Each panel of a request is one JSONL line (``json.dumps`` of the item), so item ``i``
  is input line ``i + 1`` and a rejected item is reported with the same field path the
  CLI reports for that line (:func:`dissensus.io.jsonl.parse_line`).
* ``run.started`` also records ``submitted_by``: the name of the token that submitted.
* The similarity backend is built once per server and shared by every run, one call at
  a time; a torch encoder (MiniLM) computes on all cores but one, which the server's own
  loop keeps.
* **Off the event loop.** Runs are journalled (``run.started``, with the run's lock:
  one commit; a request that waits for its records defers it to the run's first
  write, so a panel decided without a model call is one commit in all) and decided on
  a run loop: a thread of its own with its own event loop
  and its own connection to the journal, so embedding and deciding never stall the
  server's loop (``/healthz`` answers during a MiniLM run). The run loop decides many
  runs at once (at most :data:`RUNS_PER_LOOP`; later ones wait for a place), as
  concurrent ``adecide`` calls share one loop and one connection: on SQLite one run
  loop, since one connection writes at a time anyway and several threads would only
  contend for the GIL and the file's write lock; on PostgreSQL
  :data:`RUN_LOOPS_POSTGRES`, so that round trips to the database overlap (each run
  goes to the loop with the fewest). The server's loop waits only until
  ``run.started`` is committed (so a journal error is the request's error, as before);
  records, rejects and the end come back through a mailbox that wakes the server's
  loop once per turn of the run loop, not once per hand-over. The run loop keeps its
  connection; one that failed is not handed to later runs and is closed when the runs
  still using it end; all are closed when the server stops. What a run leaves running
  is cancelled when it ends, as ``asyncio.run`` would (its tasks are filed under it).
  A run stopped before ``execute_run`` took it over releases its lock itself. A server
  on an in-memory journal (tests) decides on its loop, since a second connection
  would see another database.
* A run stopped by its policy's deadline ends ``incomplete`` (partial, resumable), not
  ``failed``.
* **A journal fault is checked against the journal.** A run whose journal was busy or
  unreachable may have failed at a commit that went through (its acknowledgement lost
  with the connection): the server then reads the journal once more (its own
  connection, which reconnects). A run it holds finished is ``finished``, with the
  records and rejects that commit journalled, and no error. **A run it holds started,
  unfinished, is ``incomplete``**, not ``failed``: it stopped part-way, resumable,
  and its error gives the command (``dissensus runs resume ID --journal JOURNAL``,
  "not by submitting it again"), answered ``503`` naming the run without
  ``Retry-After``: a client that sent its panels again would start a second run
  deciding them again. Its start is known journalled without a read when this process
  saw a commit of it acknowledged (an ``async`` or resumed run's start, a deferred
  run's record or reject handed over). A run of which nothing is journalled is
  ``failed`` (503 with ``Retry-After``: submitting it again is safe); when the
  journal cannot be read either and the server cannot tell, the run is ``failed``
  with an error saying it may be journalled all the same and naming ``GET
  /v1/runs/{id}``, which reads the journal's outcome once it is back: a run the
  journal holds finished never shows an error, one it holds unfinished reads
  ``incomplete`` with the resume command (:meth:`Runner.describe`), one it does not
  hold stays ``failed``. The run's status changes with its final event only, after
  these looks at the journal: a follower woken meanwhile waits for that event.
  ``POST /v1/decide?async=true`` is answered once ``run.started``
  is committed, so its check is of that commit: a run the journal holds is decided from
  its start and answered ``202`` as usual; one it does not hold is the journal's ``503``
  (nothing journalled); when the journal cannot be read either, the run is
  ``incomplete`` with an error naming ``GET /v1/runs/{id}`` (``404`` until the journal
  holds it: it was not journalled; else resumable with ``dissensus runs resume``, the
  lock its start took given back), answered ``503`` with ``Retry-After`` and
  ``run_id``.
* **A lock this server holds for a run it does not decide is given back.** The lock a
  run's start took is given back by the server when it does not decide the run: its
  start's outcome could not be told, or the run stopped on a journal fault (a release
  on the run loop that failed with the journal, or a resumed run whose run loop could
  not open a connection). When the journal does not take the release either (the
  outage goes on), the run is owed: the server tries again every
  :data:`GIVE_BACK_EVERY` seconds and whenever the run is asked for (``GET
  /v1/runs/{id}``, its events), until the journal takes it, so the lock never outlives
  the outage by more than that. Until then the run reads ``running`` (as its lock
  says: ``dissensus runs resume`` would be refused) with an error saying the server
  still holds its lock and the run cannot be resumed yet, never ``resume with``; then
  ``incomplete`` (a run stopped part-way: its final event and a waiting request's
  ``503`` say to resume it once ``GET /v1/runs/{id}`` reads so). A server stopping
  tries once more.
* On shutdown (SIGTERM / Ctrl-C) runs in progress get most of the graceful-shutdown
  time to finish, then are cancelled: they end ``incomplete`` (resumable with
  ``dissensus runs resume``; one cancelled after it journalled ``run.finished`` is
  ``finished``), and every open event stream receives that final event and
  ends, so no client is left on a connection the server drops.
* A run whose shift check (:mod:`dissensus.pipeline.shift`, at the end of a run of at
  least 10 judged cases) flags its acceptance file is logged as one warning line
  (``run R: New cases look different ...``), and the check is the ``shift`` of the run's
  document (``GET /v1/runs/{id}``) and of ``POST /v1/decide``'s batch answer, as
  ``dissensus runs show --json`` has it.
* Progress is kept in memory (:class:`RunState`) for the runs this process executes;
  at most :data:`KEEP_FINISHED` finished runs stay in memory, older ones (and runs of
  other processes) are read back from the journal. A run of another process that has
  not finished is ``running`` while a live process holds its execution lock (the CLI,
  another replica), else ``incomplete``.
* **Followers get their events in parts** (:meth:`Runner.follow`): at most
  :data:`FOLLOW_BATCH` events at a time, everything already there. A follower that
  joins a run of a thousand cases gets its backlog as a few parts, each one write to
  its connection, and the server's loop turns between parts, so other requests are
  answered meanwhile and a follower that has gone is noticed after one part, not after
  the whole backlog (``GET /v1/runs/{id}/events``: :mod:`.routes.decide`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import os
import sys
import threading
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel

from dissensus.errors import DissensusError
from dissensus.io.jsonl import Reject
from dissensus.pipeline import CaseRecord, DeadlineReached, RunSpec, execute_run
from dissensus.pipeline.batch import input_lines, new_run_id, start_run
from dissensus.pipeline.review import final_records
from dissensus.serve import journal_errors
from dissensus.states import EmbeddingBackend, SimilarityBackend, get_backend
from dissensus.states.similarity import Matrix, Vectors
from dissensus.store import event_types as ev
from dissensus.store.errors import JournalError
from dissensus.store.journal import Journal, is_postgres_url
from dissensus.store.targets import journal_option
from dissensus.types import JsonObject

__all__ = [
    "FOLLOW_BATCH",
    "KEEP_FINISHED",
    "DecideAnswer",
    "RunDocument",
    "RunReject",
    "RunState",
    "RunStatusView",
    "Runner",
    "item_line",
    "reject_of",
]

log = logging.getLogger("dissensus.serve")

KEEP_FINISHED = 256
"""Finished runs whose progress stays in memory."""

RUNS_PER_LOOP = 32
"""Runs decided at the same time on one run loop (later ones wait for a place)."""

RUN_LOOPS_POSTGRES = 4
"""Run loops (threads, journal connections) of a server on PostgreSQL; one on SQLite."""

FOLLOW_BATCH = 64
"""Most events :meth:`Runner.follow` hands over at once (one part of an event stream)."""

GIVE_BACK_EVERY = 1.0
"""Seconds between attempts to give back a run's lock the journal did not take back (an
outage): see :meth:`Runner._give_back`."""


Status = Literal["running", "finished", "failed", "incomplete"]


def item_line(item: Any) -> str:
    """One request item as one JSONL line."""
    return json.dumps(item, ensure_ascii=True, separators=(",", ":"))


class RunReject(BaseModel):
    """A rejected item of a run as the API reports it: its index in the request (0-based),
    the field, the message."""

    index: int
    field: str | None
    error: str


class RunStatusView(BaseModel):
    """Where a run stands: the status line of ``GET /v1/runs/{id}`` and of its events."""

    run_id: str
    status: Status
    total: int
    done: int
    rejected: int
    error: str | None


class RunDocument(RunStatusView):
    """A run's status with its final records (human resolutions included) and rejects."""

    records: list[CaseRecord]
    rejects: list[RunReject]
    shift: dict[str, Any] | None = None
    """The run's shift check as journalled (the ``shift`` of ``dissensus runs show
    --json``); ``None`` while the run goes on, or when it made none (no acceptance file
    with a shift reference, or fewer than 10 judged cases)."""


class DecideAnswer(BaseModel):
    """The answer to ``POST /v1/decide`` with a list of panels: the run, its records (as
    ``dissensus decide --json`` writes them) and the rejected items."""

    run_id: str
    status: Status
    rejected: int
    records: list[CaseRecord]
    rejects: list[RunReject]
    shift: dict[str, Any] | None = None
    """The run's shift check (as :attr:`RunDocument.shift`)."""


def reject_of(reject: Reject) -> RunReject:
    """A rejected item as the API reports it: index in the request, field, message."""
    return RunReject(index=reject.line - 1, field=reject.field, error=reject.message)


@dataclass
class _ThreadTask:
    """The task deciding a run on its run loop, once it exists."""

    task: asyncio.Task[Any] | None = None


def _spawn(loop: asyncio.AbstractEventLoop, main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    loop.create_task(main())


class _Mailbox:
    """Calls handed from one event loop (``source``) to another running on another thread
    (``target``), made there in the order they were posted. The target is woken once per
    turn of the source loop, for every call posted during that turn: each wake-up is a
    write to the target's self-pipe and a switch of threads, which one call per
    record, start and end of each run would pay again and again."""

    def __init__(
        self, source: asyncio.AbstractEventLoop, target: asyncio.AbstractEventLoop
    ) -> None:
        self.source = source
        self.target = target
        self._calls: deque[tuple[Callable[..., None], tuple[Any, ...]]] = deque()
        self._lock = threading.Lock()
        self._due = False

    def post(self, call: Callable[..., None], *args: Any) -> None:
        """Hand ``call(*args)`` to the target loop (called on the source loop's thread)."""
        with self._lock:
            self._calls.append((call, args))
            if self._due:
                return
            self._due = True
        self.source.call_soon(self._wake)  # at the end of this turn of the source loop

    def _wake(self) -> None:
        with contextlib.suppress(RuntimeError):  # the target loop is closed: nobody waits
            self.target.call_soon_threadsafe(self._deliver)

    def _deliver(self) -> None:
        with self._lock:
            calls, self._calls = self._calls, deque()
            self._due = False
        for call, args in calls:
            self.target.call_soon(call, *args)  # each on its own: one failing stops no other


@dataclass
class RunState:
    """What the server knows about one of its runs while (and shortly after) it runs."""

    run_id: str
    total: int
    status: Status = "running"
    done: int = 0
    records: list[CaseRecord] = field(default_factory=list)
    rejects: list[RunReject] = field(default_factory=list)
    error: str | None = None
    events: list[tuple[str, BaseModel]] = field(default_factory=list)
    """Progress events (kind, model), each streamed to followers as the model's JSON (made
    only when the run is followed)."""
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    started: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    """Resolved once ``run.started`` is committed (the journal's error if it cannot be);
    for a deferred run, once it is registered (its first write creates it)."""
    deferred: bool = False
    """Created by its first write (``start_run(..., defer=True)``): a request that waits
    for its records, decided without a model call, is one commit."""
    shift: JsonObject | None = None
    """The run's shift check, read from the journal when the run finished."""
    retry: bool = False
    """Failed because the journal was unreachable or busy, and not known to hold anything
    to resume: ``POST /v1/decide`` answers 503 with ``Retry-After``
    (:mod:`~dissensus.serve.journal_errors`)."""
    outage: str | None = None
    """Stopped by a busy or unreachable journal (its public sentence): a run the journal
    holds unfinished is ``incomplete``, resumable (:meth:`Runner.describe`)."""

    @property
    def active(self) -> bool:
        """Still deciding in this process (a task cancelled before it ran is not)."""
        return self.status == "running" and self.task is not None and not self.task.done()

    def push(self, kind: str, data: BaseModel) -> None:
        self.events.append((kind, data))
        self.changed.set()
        self.changed = asyncio.Event()

    def summary(self) -> RunStatusView:
        return RunStatusView(
            run_id=self.run_id,
            status=self.status,
            total=self.total,
            done=self.done,
            rejected=len(self.rejects),
            error=self.error,
        )


def _leave_a_core_to_the_loop(backend: SimilarityBackend) -> None:
    """A torch encoder computes on every core by default, which starves the server's own
    loop on a small machine: keep one core free for it (no effect on one core)."""
    if "torch" not in sys.modules and "minilm" not in backend.name.lower():
        return
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(max(1, min(torch.get_num_threads(), (os.cpu_count() or 1) - 1)))


class _SharedBackend:
    """One similarity backend shared by the runs of a server, one call at a time (each run
    decides on its own thread; an embedding cache or model is not made for concurrent calls)."""

    def __init__(self, inner: SimilarityBackend) -> None:
        self.inner = inner
        self.name = inner.name
        self._lock = threading.Lock()

    def matrix(self, texts: Sequence[str]) -> Matrix:
        with self._lock:
            return self.inner.matrix(texts)


class _SharedEmbedding(_SharedBackend):
    def embed(self, texts: Sequence[str]) -> Vectors:
        with self._lock:
            return self.inner.embed(texts)  # type: ignore[attr-defined,no-any-return]


_CURRENT_RUN: contextvars.ContextVar[set[asyncio.Task[Any]] | None] = contextvars.ContextVar(
    "dissensus_serve_run_tasks", default=None
)
"""The tasks of the run a task belongs to (set while a run is decided on a run loop)."""


def _tracking_factory(
    loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], **kwargs: Any
) -> asyncio.Task[Any]:
    """A task factory that files every task a run creates (its context names the run's
    set) under that run, so what the run leaves running can be cancelled when it ends."""
    task: asyncio.Task[Any] = asyncio.Task(coro, loop=loop, **kwargs)
    tasks = _CURRENT_RUN.get()
    if tasks is not None:
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    return task


class _RunLoop:
    """A thread running an event loop for as long as the server runs, on which runs are
    decided (many at once, as concurrent ``adecide`` calls share one loop), with one
    connection to the journal for all of them."""

    def __init__(
        self,
        opener: Callable[[], Journal],
        name: str,
        slots: int,
        home: asyncio.AbstractEventLoop,
    ) -> None:
        self._opener = opener
        self.loop = asyncio.new_event_loop()
        self.loop.set_task_factory(_tracking_factory)  # type: ignore[arg-type]
        self.inbox = _Mailbox(home, self.loop)
        """Calls from the server's loop (``home``) to this loop."""
        self.outbox = _Mailbox(self.loop, home)
        """Calls from this loop to the server's."""
        self.runs = 0
        """Runs handed to this loop and not ended (read and written on the server's loop)."""
        self._slots = slots
        self._slot: asyncio.Semaphore | None = None
        self._journal: Journal | None = None
        self._users: dict[int, int] = {}
        self._retired: dict[int, Journal] = {}
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def slot(self) -> asyncio.Semaphore:
        """The bound on runs deciding at once on this loop (used on the loop)."""
        if self._slot is None:
            self._slot = asyncio.Semaphore(self._slots)
        return self._slot

    def journal(self) -> Journal:
        """The loop's connection (opened on its first run), held until :meth:`release`.
        A connection that cannot be opened is a :class:`JournalError` (the journal is
        unreachable), whatever the store calls it when a journal is first opened."""
        journal = self._journal
        if journal is None:
            try:
                journal = self._journal = self._opener()
            except JournalError:
                raise
            except DissensusError as exc:  # "cannot open journal ...": it was open before
                raise JournalError(str(exc)) from exc
        self._users[id(journal)] = self._users.get(id(journal), 0) + 1
        return journal

    def release(self, journal: Journal, *, failed: bool) -> None:
        """A run is done with ``journal``; after a failure the connection is not handed
        to later runs, and it is closed once the runs still using it are done."""
        key = id(journal)
        self._users[key] -= 1
        if failed and journal is self._journal:
            self._journal = None
            self._retired[key] = journal
        if self._users[key] == 0 and journal is not self._journal:
            del self._users[key]
            self._retired.pop(key, None)
            with contextlib.suppress(Exception):
                journal.close()

    def _stop(self) -> None:
        for journal in [self._journal, *self._retired.values()]:
            if journal is not None:
                with contextlib.suppress(Exception):
                    journal.close()
        self._journal = None
        self._retired.clear()
        self.loop.stop()

    def close(self) -> None:
        """Stop the loop (no run is left on it), close its connections, end the thread."""
        if self.loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self._stop)
        self._thread.join()
        self.loop.close()


class _NotStarted(Exception):
    """The run could not be journalled (its ``started`` future holds why)."""


class _StartFailed(Exception):
    """``start_run`` failed with :attr:`error`: its commit may have gone through."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class Runner:
    """Starts, executes and follows decide runs for the service (one :class:`RunSpec` for all)."""

    def __init__(
        self,
        journal: Journal,
        spec: RunSpec,
        *,
        open_journal: Callable[[], Journal] | None = None,
    ) -> None:
        self.journal = journal
        self.spec = spec
        self.policy = spec.policy
        self.policy_file = spec.policy_file
        self._open_journal = open_journal
        self._loops: list[_RunLoop] = []
        self._backend: SimilarityBackend | None = None
        self._backend_lock = threading.Lock()
        self._states: OrderedDict[str, RunState] = OrderedDict()
        self._ended: OrderedDict[str, None] = OrderedDict()
        self._owed: set[str] = set()
        """Runs this server holds the lock of without deciding them: the journal did not
        take the lock back yet (:meth:`_give_back`)."""
        self._giving_back: asyncio.Task[None] | None = None

    def backend(self) -> SimilarityBackend:
        with self._backend_lock:
            if self._backend is None:
                inner = get_backend(
                    self.policy.reading.similarity, allow_code=self.policy.allow_code or None
                )
                _leave_a_core_to_the_loop(inner)
                self._backend = (
                    _SharedEmbedding(inner)
                    if isinstance(inner, EmbeddingBackend)
                    else _SharedBackend(inner)
                )
            return self._backend

    def warm(self) -> None:
        """Load what every run needs (the similarity backend's model, learned acceptance's
        libraries) now, at start-up, rather than in the middle of serving."""
        backend = self.backend()
        if isinstance(backend, EmbeddingBackend):
            backend.embed(["warm up"])
        if self.spec.acceptance is not None:
            from dissensus.pipeline.learned import make_learned

            make_learned(
                self.spec.acceptance,
                similarity=self.policy.reading.similarity,
                backend=backend,
                allow_code=self.policy.allow_code or None,
            )

    async def start(self, lines: list[str], *, submitted_by: str, defer: bool = False) -> RunState:
        """Journal a new run of ``lines`` (one panel each) and start deciding it; returns
        once ``run.started`` is committed (the journal's error when it cannot be). With
        ``defer`` (a caller that waits for the records) the run is created by its first
        write instead, and a journal error is the run's."""
        text = "".join(line + "\n" for line in lines)
        extra: JsonObject = {"submitted_by": submitted_by}
        state = RunState(run_id=new_run_id(), total=len(lines), deferred=defer)
        try:
            if self._open_journal is None:  # an in-memory journal: decide on this loop
                try:
                    start_run(self.journal, None, self.spec, text=text, extra=extra,
                              via="serve", run_id=state.run_id)  # fmt: skip
                except Exception as exc:
                    raise _StartFailed(exc) from exc
                state.started.set_result(None)
            self._launch(state, text, extra)
            await asyncio.shield(state.started)
        except _NotStarted:  # stopped before it could try: never an internal error's 500
            raise JournalError("the run could not be started") from None
        except _StartFailed as failed:
            return await self._after_start_fault(state, text, extra, failed.error)
        return state

    def _launch(
        self, state: RunState, text: str, extra: JsonObject, *, resume: bool = False
    ) -> None:
        """Register the run and start deciding it (``resume``: its start is journalled)."""
        self._states[state.run_id] = state
        state.task = asyncio.create_task(self._execute(state, text, extra, resume=resume))

    async def _after_start_fault(
        self, state: RunState, text: str, extra: JsonObject, error: Exception
    ) -> RunState:
        """``start_run`` failed with ``error``. A busy or unreachable journal may have
        failed at the start's commit although it went through (its acknowledgement
        lost): the journal is read once more (:meth:`_holds`). A run it holds started is
        decided from its start, as if the commit had been acknowledged; one it does not
        hold is ``error`` (nothing was journalled); when it cannot tell, the run is
        ``incomplete`` with an error naming ``GET /v1/runs/{id}``, its lock given back
        (:meth:`_give_back`: until the journal takes it, the run reads ``running``)."""
        public = journal_errors.unavailable(error)
        if public is None or state.deferred:  # a deferred start writes nothing
            raise error
        if state.task is not None:
            await asyncio.wait([state.task])  # the failed start has let go of the run
        held = await asyncio.to_thread(self._holds, state.run_id, "run/started")
        if held is False:
            raise error
        journal_errors.log_unavailable(error, f"run {state.run_id}")
        again = RunState(run_id=state.run_id, total=state.total)
        again.started.set_result(None)
        if held:
            log.warning("run %s: started in the journal all the same", state.run_id)
            self._launch(again, text, extra, resume=True)
            return again
        await self._give_back(state.run_id)  # a lock the journal holds for nobody's work
        again.status = "incomplete"
        again.retry = True
        again.error = journal_errors.scrub(
            f"{public}: whether the run's start was journalled could not be told; poll "
            f"GET /v1/runs/{state.run_id} before submitting again (404: it was not; "
            f"incomplete: it was, and is resumed with: dissensus runs resume {state.run_id}"
            f"{journal_option(self.journal.path)}; running: it was, and this server still "
            "holds its lock: poll again)",
            [str(self.journal.path)],
        )
        self._states[state.run_id] = again
        self._end(again)
        return again

    async def _execute(
        self, state: RunState, text: str, extra: JsonObject, *, resume: bool = False
    ) -> None:
        def on_reject(reject: Reject) -> None:
            data = reject_of(reject)
            state.rejects.append(data)
            state.push("reject", data)

        def on_record(record: CaseRecord) -> None:
            state.records.append(record)
            state.done += 1
            state.push("record", record)

        try:
            await self._decide(state, text, extra, on_reject, on_record, resume=resume)
        finally:
            if not state.started.done():  # the run loop could not take it
                state.started.set_exception(RuntimeError("the run could not be started"))

    async def _decide(
        self,
        state: RunState,
        text: str,
        extra: JsonObject,
        on_reject: Callable[[Reject], None],
        on_record: Callable[[CaseRecord], None],
        *,
        resume: bool = False,
    ) -> None:
        try:
            if self._open_journal is None:
                async for record in execute_run(
                    self.journal, state.run_id, on_reject=on_reject, backend=self.backend
                ):
                    on_record(record)
            else:
                await self._off_loop(state, text, extra, on_reject, on_record, resume=resume)
            state.status = "finished"
            state.shift = self._shift_of(state.run_id)
        except _NotStarted:
            self._states.pop(state.run_id, None)
            return
        except asyncio.CancelledError:
            if not state.started.done():
                state.started.cancel()
                self._states.pop(state.run_id, None)
                raise
            if self._finished(state.run_id):
                # Stopped only after the run journalled its end: it is finished.
                state.status = "finished"
                state.push("finished", state.summary())
                self._end(state)
                raise
            state.status = "incomplete"
            # A remote caller reads it: the journal's place is ``--journal JOURNAL``.
            state.error = journal_errors.scrub(
                "cancelled (the server stopped); resume with: dissensus runs resume "
                + state.run_id
                + journal_option(self.journal.path),
                [str(self.journal.path)],
            )
            if state.deferred and self.journal.run(state.run_id, missing_ok=True) is None:
                # A deferred run stopped before its first write: nothing to resume.
                state.status = "failed"
                state.error = (
                    "cancelled (the server stopped) before anything was journalled; submit it again"
                )
                state.retry = True  # answered 503 with Retry-After: safe to send again
            state.push("incomplete", state.summary())
            self._end(state)
            raise
        except DeadlineReached as exc:
            state.status = "incomplete"
            state.error = str(exc)
        except Exception as exc:  # reported to the client, never swallowed silently
            # The status changes with the final event only, after the looks at the
            # journal below: a follower woken meanwhile (by a record) would end its
            # stream on the changed status, without that event.
            public = journal_errors.unavailable(exc)
            if public is not None:  # the caller may retry; the detail is the log's only
                journal_errors.log_unavailable(exc, f"run {state.run_id}")
                held = await asyncio.to_thread(self._held, state.run_id)
                if isinstance(held, tuple):  # the commit went through, its answer was lost
                    log.warning("run %s: finished in the journal all the same", state.run_id)
                    self._take(state, *held)
                    state.shift = await asyncio.to_thread(self._shift_of, state.run_id)
                    state.status = "finished"
                else:
                    await self._stopped_by(state, public, held is False)
            else:  # never the journal's location (a remote caller reads it)
                state.status = "failed"
                state.error = journal_errors.scrub(
                    f"{type(exc).__name__}: {exc}", [str(self.journal.path)]
                )
        state.push(state.status, state.summary())
        self._end(state)

    def _run_loop(self) -> _RunLoop:
        """The run loop with the fewest runs (made on first use)."""
        assert self._open_journal is not None
        if not self._loops:
            home = asyncio.get_running_loop()
            count = RUN_LOOPS_POSTGRES if is_postgres_url(str(self.journal.path)) else 1
            self._loops = [
                _RunLoop(self._open_journal, f"dissensus-run-{i}", RUNS_PER_LOOP, home)
                for i in range(count)
            ]
        return min(self._loops, key=lambda r: r.runs)

    async def _off_loop(
        self,
        state: RunState,
        text: str,
        extra: JsonObject,
        on_reject: Callable[[Reject], None],
        on_record: Callable[[CaseRecord], None],
        *,
        resume: bool = False,
    ) -> None:
        """Journal and decide the run on a run loop (its own thread, event loop and journal
        connection), so embedding and deciding never hold up the server's loop;
        cancelling this coroutine cancels the run there, and waits until it stopped.
        ``resume``: the run is journalled already (its start's acknowledgement was
        lost): decided from its start, and a connection that cannot be opened is the
        run's error."""
        loop = asyncio.get_running_loop()
        runs = self._run_loop()
        outbox = runs.outbox
        done: asyncio.Future[None] = loop.create_future()
        control = _ThreadTask()
        stop = threading.Event()

        def settle(error: BaseException | None) -> None:
            if done.done():
                return
            if isinstance(error, asyncio.CancelledError):
                done.cancel()
            elif error is not None:
                done.set_exception(error)
            else:
                done.set_result(None)

        def started(error: BaseException | None) -> None:
            if not state.started.done():
                if error is None:
                    state.started.set_result(None)
                else:
                    state.started.set_exception(error)

        def rejected(reject: Reject) -> None:
            outbox.post(on_reject, reject)

        async def decide() -> None:
            try:
                journal = runs.journal()
            except Exception as exc:  # no connection to the journal: the run's start fails
                if resume:  # the run exists: its failure (its lock given back by _decide)
                    raise
                outbox.post(started, exc)
                raise _NotStarted from None
            failed = True
            try:
                try:
                    if not resume:
                        start_run(journal, None, self.spec, text=text, extra=extra,
                                  via="serve", run_id=state.run_id, lock=True,
                                  defer=state.deferred)  # fmt: skip
                except Exception as exc:  # its commit may have gone through
                    outbox.post(started, _StartFailed(exc))
                    raise _NotStarted from None
                outbox.post(started, None)
                try:
                    async with runs.slot():
                        records = execute_run(
                            journal, state.run_id, on_reject=rejected, backend=self.backend
                        )
                        async with contextlib.aclosing(records):  # type: ignore[type-var]
                            async for record in records:
                                outbox.post(on_record, record)
                except BaseException:
                    # Stopped before execute_run took the run over: the lock start_run
                    # took is released here (else execute_run released it).
                    with contextlib.suppress(Exception):
                        journal.release_run_lock(state.run_id)
                    raise
                failed = False
            finally:
                runs.release(journal, failed=failed)  # a connection that failed is not reused

        async def main() -> None:
            control.task = asyncio.current_task()
            tasks: set[asyncio.Task[Any]] = set()
            error: BaseException | None = None
            try:
                if stop.is_set():
                    raise asyncio.CancelledError
                _CURRENT_RUN.set(tasks)
                await decide()
            except BaseException as exc:
                error = exc
            finally:
                # What the run left running is cancelled, as asyncio.run would.
                left = [t for t in tasks if t is not control.task and not t.done()]
                for task in left:
                    task.cancel()
                if left:
                    await asyncio.gather(*left, return_exceptions=True)
                outbox.post(settle, error)

        runs.runs += 1
        try:
            runs.inbox.post(_spawn, runs.loop, main)
            try:
                await asyncio.shield(done)
            except asyncio.CancelledError:
                stop.set()
                task = control.task
                if task is not None:
                    with contextlib.suppress(RuntimeError):  # its loop already closed
                        runs.loop.call_soon_threadsafe(task.cancel)
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await done
                await asyncio.sleep(0)  # let the last records the thread handed over land
                raise
        finally:
            runs.runs -= 1
            if not state.started.done():
                state.started.set_exception(_NotStarted())

    def _shift_of(self, run_id: str) -> JsonObject | None:
        """The finished run's shift check, logged as a warning when it flagged the file
        (a client of ``POST /v1/decide`` may never ask for it); ``None`` when the run made
        none or the journal cannot say (the run is finished all the same)."""
        try:
            checked = self.journal.get(run_id, "run/shift")
        except Exception:  # the journal is unreachable: the records are the answer
            return None
        if checked is None:
            return None
        shift = dict(checked.payload)
        if shift.get("shifted"):
            from dissensus.pipeline.shift import shift_words

            log.warning("run %s: %s", run_id, shift_words(shift))
        return shift

    def _held(
        self, run_id: str
    ) -> tuple[list[CaseRecord], list[RunReject]] | Literal[False] | None:
        """After a journal fault: the run's records and rejects when the journal holds it
        finished (its last commit went through), ``False`` when it does not, ``None``
        when it cannot tell (one read with the server's own connection, which
        reconnects when it was lost)."""
        held = self._holds(run_id, "run/finished")
        if held is None:
            return None
        if not held:
            return False
        try:
            return final_records(self.journal, run_id), _rejects(self.journal, run_id)
        except Exception:  # unreachable again: the caller is told the run may be there
            return None

    def _holds(self, run_id: str, key: str) -> bool | None:
        """After a journal fault: whether the journal holds the run's event ``key``
        (``run/started``: the run exists; ``run/finished``: it ended), ``None`` when it
        cannot tell (one read with the server's own connection, which reconnects when it
        was lost)."""
        try:
            return self.journal.get(run_id, key) is not None
        except Exception:  # still unreachable: the caller is told the run may be there
            return None

    @staticmethod
    def _take(state: RunState, records: list[CaseRecord], rejects: list[RunReject]) -> None:
        """The records and rejects of a finished run that its state (and its followers)
        did not get, since the commit that journalled them was never acknowledged."""
        for reject in rejects[len(state.rejects) :]:
            state.rejects.append(reject)
            state.push("reject", reject)
        for record in records[len(state.records) :]:
            state.records.append(record)
            state.done += 1
            state.push("record", record)

    async def _stopped_by(self, state: RunState, public: str, readable: bool) -> None:
        """The run stopped on a busy or unreachable journal (``public``), unfinished in
        it. Its lock may be left held (the run loop's release failed too, or it never
        had a connection to release it with): given back here (:meth:`_give_back`). A
        run whose start is journalled is ``incomplete``, resumed with ``dissensus runs
        resume``, never submitted again; one whose start is not is ``failed``, safe to
        submit again (``retry``); when that cannot be told, ``failed`` with an error
        naming ``GET /v1/runs/{id}``, which tells once the journal is back
        (:meth:`describe`). ``readable``: the journal answered the look after the fault."""
        run_id = state.run_id
        state.outage = public
        await self._give_back(run_id)
        journalled: bool | None = _start_acknowledged(state)
        if not journalled:
            journalled = (
                await asyncio.to_thread(self._holds, run_id, "run/started") if readable else None
            )
        if journalled:
            state.status = "incomplete"
            state.error = self._stopped_error(run_id, public, owed=run_id in self._owed)
            return
        maybe = f"; the run may be journalled all the same: GET /v1/runs/{run_id}"
        state.status = "failed"
        state.error = public + (maybe if journalled is None else "")
        state.retry = True

    def _stopped_error(self, run_id: str, public: str, *, owed: bool) -> str:
        """The error of a run a journal fault stopped part-way, journalled: resumed with
        the CLI (the journal's place masked), not submitted again; while this server
        holds its lock (``owed``), once ``GET /v1/runs/{id}`` reads it ``incomplete``."""
        when = (
            f" once GET /v1/runs/{run_id} reads incomplete (this server gives its lock on "
            "the run back when the journal takes it)"
            if owed
            else ""
        )
        return journal_errors.scrub(
            f"{public}: the run stopped part-way and is journalled; resume it with: "
            f"dissensus runs resume {run_id}{journal_option(self.journal.path)}{when}, "
            "not by submitting it again (another run would decide its panels again)",
            [str(self.journal.path)],
        )

    def _release(self, run_id: str) -> bool:
        """One attempt to give back this server's lock on ``run_id`` (with the server's
        own connection, which reconnects); whether the journal took it."""
        try:
            self.journal.release_run_lock(run_id)
        except Exception:  # unreachable or busy still: tried again later
            return False
        return True

    async def _give_back(self, run_id: str) -> None:
        """Give back the lock this server took for a run it does not decide (its start's
        outcome was unknown, or it stopped on a journal fault). When the journal does not
        take it, the run is owed: it reads ``running`` with an error saying so (never
        ``resume with``: the lock would refuse that), and every :data:`GIVE_BACK_EVERY`
        seconds, and whenever the run is asked for (:meth:`settle`), the lock is given
        back again until the journal takes it."""
        if await asyncio.to_thread(self._release, run_id):
            self._owed.discard(run_id)
            return
        if run_id not in self._owed:
            log.warning("run %s: its lock is given back once the journal takes it", run_id)
            self._owed.add(run_id)
        if self._giving_back is None or self._giving_back.done():
            self._giving_back = asyncio.create_task(self._keep_giving_back())

    async def _keep_giving_back(self) -> None:
        """Until the journal took back every owed lock (one attempt per round while it
        refuses them: the first refusal ends the round)."""
        while self._owed:
            await asyncio.sleep(GIVE_BACK_EVERY)
            for run_id in list(self._owed):
                if run_id not in self._owed:  # given back by settle() meanwhile
                    continue
                if not await asyncio.to_thread(self._release, run_id):
                    break
                self._owed.discard(run_id)
                log.info("run %s: its lock given back", run_id)

    async def settle(self, run_id: str) -> None:
        """Before a run is described: give back its lock if it is owed (one attempt, off
        the loop), so a run whose journal is back reads resumable at once."""
        if run_id in self._owed:
            await self._give_back(run_id)
            if run_id not in self._owed:
                log.info("run %s: its lock given back", run_id)

    def _finished(self, run_id: str) -> bool:
        """Whether the journal holds the run's ``run.finished`` (unknown counts as not)."""
        return self._holds(run_id, "run/finished") is True

    def _end(self, state: RunState) -> None:
        """A run ended: keep the latest :data:`KEEP_FINISHED` ended runs in memory."""
        self._ended[state.run_id] = None
        while len(self._ended) > KEEP_FINISHED:
            old, _ = self._ended.popitem(last=False)
            self._states.pop(old, None)

    def state(self, run_id: str) -> RunState | None:
        return self._states.get(run_id)

    async def wait(self, state: RunState) -> None:
        """Until the run ends (also when it is stopped by a shutdown: ``incomplete``)."""
        if state.task is None:
            return
        try:
            await asyncio.shield(state.task)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not state.task.cancelled() or (current is not None and current.cancelling()):
                raise  # the waiter itself is cancelled

    def require(self, run_id: str) -> None:
        """Nothing when the run is this process's or in the journal, else
        :class:`~dissensus.store.errors.UnknownRun` (a deferred run is in the journal only
        once its first write committed; one whose start's outcome was unknown, once the
        journal holds it)."""
        state = self._states.get(run_id)
        if state is None or not (state.deferred or state.active):
            self.journal.run(run_id)

    def describe(self, run_id: str) -> RunDocument:
        """A run's status and its final records (journal's view, human resolutions included)."""
        state = self._states.get(run_id)
        if state is not None and state.active:
            return RunDocument(
                **dict(state.summary()), records=list(state.records), rejects=list(state.rejects)
            )
        # Only a deferred run of this process may be missing (ended before its first
        # write); one whose start's outcome was unknown is unknown if the journal lacks it.
        info = self.journal.run(run_id, missing_ok=state is not None and state.deferred)
        if info is None:  # this process's deferred run, ended before its first write
            assert state is not None
            return RunDocument(
                **dict(state.summary()), records=list(state.records), rejects=list(state.rejects)
            )
        finished = self.journal.get(run_id, "run/finished")
        rejects = _rejects(self.journal, run_id)
        records = final_records(self.journal, run_id)
        checked = self.journal.get(run_id, "run/shift")
        status: Status = "finished" if finished is not None else "incomplete"
        # A run the journal holds finished has no error (one whose commit failed in this
        # process though it went through included).
        error = state.error if state is not None and status != "finished" else None
        if finished is None and run_id in self._owed:
            # This server holds its lock, not deciding it: not resumable until given back.
            status, error = "running", _owed_error(run_id)
        elif finished is None and state is not None and state.outage is not None:
            # Stopped by the journal, which holds it (whatever was told then): resumable.
            status, error = "incomplete", self._stopped_error(run_id, state.outage, owed=False)
        elif finished is None and state is not None and state.status == "failed":
            status = "failed"
        elif finished is None and state is None and self.journal.run_lock_holder(run_id):
            status = "running"  # executed by another process (the CLI, another replica)
        return RunDocument(
            run_id=run_id,
            status=status,
            total=_total(self.journal, run_id, len(records) + len(rejects))
            if state is None
            else state.total,
            done=len(records),
            rejected=len(rejects),
            error=error,
            records=records,
            rejects=rejects,
            shift=dict(checked.payload) if checked is not None else None,
        )

    async def follow(
        self, run_id: str, batch: int = FOLLOW_BATCH
    ) -> AsyncIterator[list[tuple[str, JsonObject]]]:
        """Progress events of a run: every record and reject, then its final status (each
        event's data is the JSON streamed to the client), handed over in lists of at most
        ``batch`` events: what is there already, so a follower that joins late gets its
        backlog in a few large parts rather than one at a time (see the module)."""
        state = self._states.get(run_id)
        if state is None or not (state.active or state.events):
            await self.settle(run_id)
            doc = self.describe(run_id)
            ended: list[tuple[str, BaseModel]] = [
                *(("reject", reject) for reject in doc.rejects),
                *(("record", record) for record in doc.records),
                (doc.status, RunStatusView.model_validate(dict(doc))),
            ]
            for start in range(0, len(ended), batch):
                yield [
                    (k, data.model_dump(mode="json")) for k, data in ended[start : start + batch]
                ]
            return
        sent = 0
        while True:
            waiter = state.changed
            while sent < len(state.events):
                part = state.events[sent : sent + batch]
                sent += len(part)
                yield [(kind, data.model_dump(mode="json")) for kind, data in part]
            if state.status != "running" and sent >= len(state.events):
                return
            await waiter.wait()

    async def drain(self, seconds: float) -> None:
        """Shutting down: let running runs finish for up to ``seconds``, then stop the rest
        (each ends ``incomplete``, resumable, and its event streams end with that event)."""
        running = [s.task for s in self._states.values() if s.task is not None and s.active]
        if running and seconds > 0:
            await asyncio.wait(running, timeout=seconds)
        await self.close()

    async def close(self) -> None:
        for state in list(self._states.values()):
            if state.task is not None and not state.task.done():
                state.task.cancel()
        for state in list(self._states.values()):
            if state.task is not None:
                # Shutting down: an interrupted run stays resumable from the journal.
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await state.task
        loops, self._loops = self._loops, []
        for runs in loops:
            await asyncio.to_thread(runs.close)
        await self._last_give_back()

    async def _last_give_back(self) -> None:
        """Stopping: one last attempt for each owed lock (a process that lives on, the
        server embedded, would hold them; once it exits they hold nothing)."""
        giving, self._giving_back = self._giving_back, None
        if giving is not None:
            giving.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await giving
        for run_id in list(self._owed):
            if not await asyncio.to_thread(self._release, run_id):
                break
            self._owed.discard(run_id)


def _start_acknowledged(state: RunState) -> bool:
    """Whether this process saw a commit of the run acknowledged (its start, a block of
    cases), so the journal holds it: a run started before it was decided (``async``, a
    resumed one), or a deferred run that handed over a record or a reject."""
    return not state.deferred or bool(state.records or state.rejects)


def _owed_error(run_id: str) -> str:
    """The error of a run this server holds the lock of without deciding it."""
    return (
        "the run is journalled and not decided; this server holds its lock on the run until "
        "the journal takes it back (it was unreachable or busy), and until then the run "
        f"cannot be resumed: poll GET /v1/runs/{run_id}"
    )


def _rejects(journal: Journal, run_id: str) -> list[RunReject]:
    """The run's rejected items as journalled, as the API reports them."""
    return [
        RunReject(
            index=int(e.payload["line"]) - 1, field=e.payload["field"], error=e.payload["message"]
        )
        for e in journal.events(run_id, type=ev.INPUT_REJECTED)
    ]


def _total(journal: Journal, run_id: str, seen: int) -> int:
    """The run's number of panels (its non-blank input lines), also for a run this
    process did not start or that was interrupted; ``seen`` when the input is unreadable."""
    started = journal.get(run_id, "run/started")
    source = started.payload.get("input") if started is not None else None
    try:
        _, lines = input_lines(source) if isinstance(source, dict) else ("", None)
        if lines is None and isinstance(source, dict) and source.get("path") not in (None, "-"):
            with open(str(source["path"]), encoding="utf-8", errors="replace") as handle:
                lines = list(handle)
    except (DissensusError, OSError):
        return seen
    if lines is None:
        return seen
    return max(seen, sum(1 for line in lines if line.strip()))
