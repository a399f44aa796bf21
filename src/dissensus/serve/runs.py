"""Decide runs submitted over HTTP: journalled like ``dissensus decide``, followed live.

A request's panels become one run of the journal, exactly as ``dissensus decide`` makes
one run of a file: the server builds one :class:`~dissensus.pipeline.spec.RunSpec` from
its policy at start (every file the policy names loaded and hashed, learned acceptance
included), :func:`dissensus.pipeline.batch.start_run` journals the input (as text, the
way the CLI journals standard input) with that spec, and the cases are decided by
:func:`dissensus.pipeline.execute_run`, the CLI's own loop. A run started here can
therefore be listed, verified, exported and resumed with the CLI, and gives the CLI's
records.

Four modules do it: :mod:`.run_models` (the answer models, a run's state in memory),
:mod:`.run_loop` (the run loops runs are decided on, off the server's loop, and the
similarity backend they share), :mod:`.run_faults` (what the journal holds of a run
after a journal fault, the locks owed back) and this one, whose :class:`Runner` starts,
decides, follows and describes runs. Each keeps the notes on its own choices.

Choices this module makes:

* ``run.started`` also records ``submitted_by``: the name of the token that submitted.
* A run stopped by its policy's deadline ends ``incomplete`` (partial, resumable), not
  ``failed``.
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
* **A run is read from the journal in a worker thread** (:meth:`Runner.describe` and
  :meth:`Runner.require`: ``GET /v1/runs/{id}``, and the event stream of a run not
  followed live), never on the server's loop: the read grows with the run and its
  resolutions (40 ms for a thousand panels of forty agents on SQLite, more on a remote
  PostgreSQL), and ``/healthz`` and every other request waited for it. A run this
  process is deciding is described from memory, on the loop, without the hop.
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
import logging
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from dissensus.io.jsonl import Reject
from dissensus.pipeline import (
    FRESH_ATTEMPTS,
    CaseRecord,
    DeadlineReached,
    RunSpec,
    execute_run,
)
from dissensus.pipeline.batch import new_run_id, start_run
from dissensus.pipeline.review import final_records
from dissensus.pipeline.shift import checks_shift
from dissensus.serve import journal_errors
from dissensus.serve.run_faults import (
    _held,
    _holds,
    _owed_error,
    _OwedLocks,
    _start_acknowledged,
    _stopped_error,
    _take,
)
from dissensus.serve.run_loop import (
    _CURRENT_RUN,
    _leave_a_core_to_the_loop,
    _RunLoop,
    _SharedBackend,
    _SharedEmbedding,
    _spawn,
    _ThreadTask,
)
from dissensus.serve.run_models import (
    DecideAnswer,
    RunDocument,
    RunReject,
    RunState,
    RunStatusView,
    Status,
    _rejects,
    _total,
    item_line,
    reject_of,
)
from dissensus.states import EmbeddingBackend, SimilarityBackend, get_backend
from dissensus.store.errors import JournalError, RunExists
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
        self._launched: dict[str, RunState] = {}
        """The runs launched and not ended (:meth:`_end` and :meth:`in_progress` prune it): a
        request's count of the runs in progress reads these, not every run kept."""
        self._owed = _OwedLocks(journal)
        """Runs this server holds the lock of without deciding them: the journal did not
        take the lock back yet (:meth:`.run_faults._OwedLocks.give_back`)."""

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
        write instead, and a journal error is the run's. The run's id is fresh
        (:func:`new_run_id`): one that names a run the journal holds is not this run's,
        and another is drawn (:data:`~dissensus.pipeline.FRESH_ATTEMPTS` in all; a
        deferred run's is found at its first write: :attr:`RunState.taken`)."""
        for attempt in range(FRESH_ATTEMPTS):
            try:
                return await self._start(lines, submitted_by=submitted_by, defer=defer)
            except RunExists:
                if attempt == FRESH_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def _start(self, lines: list[str], *, submitted_by: str, defer: bool) -> RunState:
        """:meth:`start` under one fresh id."""
        text = "".join(line + "\n" for line in lines)
        extra: JsonObject = {"submitted_by": submitted_by}
        state = RunState(run_id=new_run_id(), total=len(lines), size=len(text), deferred=defer)
        try:
            if self._open_journal is None:  # an in-memory journal: decide on this loop
                try:
                    start_run(self.journal, None, self.spec, text=text, extra=extra,
                              via="serve", run_id=state.run_id, fresh=True)  # fmt: skip
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
        self._launched[state.run_id] = state

    async def _after_start_fault(
        self, state: RunState, text: str, extra: JsonObject, error: Exception
    ) -> RunState:
        """``start_run`` failed with ``error``. A busy or unreachable journal may have
        failed at the start's commit although it went through (its acknowledgement
        lost): the journal is read once more (:func:`.run_faults._holds`). A run it
        holds started is decided from its start, as if the commit had been acknowledged;
        one it does not hold is ``error`` (nothing was journalled); when it cannot tell,
        the run is ``incomplete`` with an error naming ``GET /v1/runs/{id}``, its lock
        given back (:meth:`.run_faults._OwedLocks.give_back`: until the journal takes it,
        the run reads ``running``)."""
        public = journal_errors.unavailable(error)
        if public is None or state.deferred:  # a deferred start writes nothing
            raise error
        if state.task is not None:
            await asyncio.wait([state.task])  # the failed start has let go of the run
        held = await asyncio.to_thread(_holds, self.journal, state.run_id, "run/started")
        if held is False:
            raise error
        journal_errors.log_unavailable(error, f"run {state.run_id}")
        again = RunState(run_id=state.run_id, total=state.total)
        again.started.set_result(None)
        if held:
            log.warning("run %s: started in the journal all the same", state.run_id)
            self._launch(again, text, extra, resume=True)
            return again
        await self._owed.give_back(state.run_id)  # a lock the journal holds for nobody's work
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
            if isinstance(exc, RunExists) and state.deferred and not state.records:
                # A deferred run's fresh id names another run: nothing is journalled,
                # and the id is not this run's to answer for (POST /v1/decide draws
                # another).
                state.status, state.taken, state.error = "failed", True, str(exc)
                if self._states.get(state.run_id) is state:
                    del self._states[state.run_id]
                self._launched.pop(state.run_id, None)
                state.push(state.status, state.summary())
                return
            # The status changes with the final event only, after the looks at the
            # journal below: a follower woken meanwhile (by a record) would end its
            # stream on the changed status, without that event.
            public = journal_errors.unavailable(exc)
            if public is not None:  # the caller may retry; the detail is the log's only
                journal_errors.log_unavailable(exc, f"run {state.run_id}")
                held = await asyncio.to_thread(_held, self.journal, state.run_id)
                if isinstance(held, tuple):  # the commit went through, its answer was lost
                    log.warning("run %s: finished in the journal all the same", state.run_id)
                    _take(state, *held)
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
                                  fresh=True, defer=state.deferred)  # fmt: skip
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
                if control.stopped:
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
                control.stopped = True
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
        none or the journal cannot say (the run is finished all the same). A policy whose
        acceptance file keeps no shift reference (or without one) makes no check: the
        journal is not asked, a query on the server's loop per request saved."""
        if not checks_shift(self.spec.acceptance):
            return None
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

    async def _stopped_by(self, state: RunState, public: str, readable: bool) -> None:
        """The run stopped on a busy or unreachable journal (``public``), unfinished in
        it. Its lock may be left held (the run loop's release failed too, or it never
        had a connection to release it with): given back here
        (:meth:`.run_faults._OwedLocks.give_back`). A run whose start is journalled is
        ``incomplete``, resumed with ``dissensus runs resume``, never submitted again;
        one whose start is not is ``failed``, safe to submit again (``retry``); when
        that cannot be told, ``failed`` with an error naming ``GET /v1/runs/{id}``,
        which tells once the journal is back (:meth:`describe`). ``readable``: the journal answered the look after the fault."""
        run_id = state.run_id
        state.outage = public
        await self._owed.give_back(run_id)
        journalled: bool | None = _start_acknowledged(state)
        if not journalled:
            journalled = (
                await asyncio.to_thread(_holds, self.journal, run_id, "run/started")
                if readable
                else None
            )
        if journalled:
            state.status = "incomplete"
            state.error = _stopped_error(self.journal, run_id, public, owed=run_id in self._owed)
            return
        maybe = f"; the run may be journalled all the same: GET /v1/runs/{run_id}"
        state.status = "failed"
        state.error = public + (maybe if journalled is None else "")
        state.retry = True

    async def settle(self, run_id: str) -> None:
        """Before a run is described: give back its lock if it is owed (one attempt, off
        the loop), so a run whose journal is back reads resumable at once."""
        await self._owed.settle(run_id)

    def _finished(self, run_id: str) -> bool:
        """Whether the journal holds the run's ``run.finished`` (unknown counts as not)."""
        return _holds(self.journal, run_id, "run/finished") is True

    def _end(self, state: RunState) -> None:
        """A run ended: keep the latest :data:`KEEP_FINISHED` ended runs in memory."""
        self._ended[state.run_id] = None
        self._launched.pop(state.run_id, None)
        while len(self._ended) > KEEP_FINISHED:
            old, _ = self._ended.popitem(last=False)
            self._states.pop(old, None)

    def state(self, run_id: str) -> RunState | None:
        return self._states.get(run_id)

    def in_progress(self) -> tuple[int, int]:
        """How many runs this process accepted and has not decided yet (waiting for a place
        on a run loop or deciding), and the characters of their panels' JSONL: each holds
        its panels in memory until it ends."""
        active = [state for state in self._launched.values() if state.active]
        if len(active) < len(self._launched):  # a run once ended stays so
            self._launched = {state.run_id: state for state in active}
        return len(active), sum(state.size for state in active)

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

    async def require(self, run_id: str) -> None:
        """Nothing when the run is this process's or in the journal, else
        :class:`~dissensus.store.errors.UnknownRun` (a deferred run is in the journal only
        once its first write committed; one whose start's outcome was unknown, once the
        journal holds it). The journal is read in a worker thread."""
        state = self._states.get(run_id)
        if state is None or not (state.deferred or state.active):
            await asyncio.to_thread(self.journal.run, run_id)

    async def describe(self, run_id: str) -> RunDocument:
        """A run's status and its final records (journal's view, human resolutions
        included). A run this process is deciding is answered from memory, on the loop;
        any other is read from the journal in a worker thread (see the module)."""
        state = self._states.get(run_id)
        if state is not None and state.active:
            return _in_memory(state)
        # Only a deferred run of this process may be missing (ended before its first
        # write); one whose start's outcome was unknown is unknown if the journal lacks it.
        read = await asyncio.to_thread(
            _journalled,
            self.journal,
            run_id,
            missing_ok=state is not None and state.deferred,
            foreign=state is None,
        )
        if read is None:  # this process's deferred run, ended before its first write
            assert state is not None
            return _in_memory(state)
        return self._document(run_id, state, read)

    def _document(self, run_id: str, state: RunState | None, read: _Journalled) -> RunDocument:
        """The document of a run read from the journal (``state``: this process's, if any)."""
        status: Status = "finished" if read.finished else "incomplete"
        # A run the journal holds finished has no error (one whose commit failed in this
        # process though it went through included).
        error = state.error if state is not None and status != "finished" else None
        if not read.finished and run_id in self._owed:
            # This server holds its lock, not deciding it: not resumable until given back.
            status, error = "running", _owed_error(run_id)
        elif not read.finished and state is not None and state.outage is not None:
            # Stopped by the journal, which holds it (whatever was told then): resumable.
            status, error = (
                "incomplete",
                _stopped_error(self.journal, run_id, state.outage, owed=False),
            )
        elif not read.finished and state is not None and state.status == "failed":
            status = "failed"
        elif not read.finished and state is None and read.locked:
            status = "running"  # executed by another process (the CLI, another replica)
        return RunDocument(
            run_id=run_id,
            status=status,
            total=read.total if state is None else state.total,
            done=len(read.records),
            rejected=len(read.rejects),
            error=error,
            records=read.records,
            rejects=read.rejects,
            shift=read.shift,
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
            doc = await self.describe(run_id)
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
        await self._owed.last()


@dataclass(frozen=True)
class _Journalled:
    """What :meth:`Runner.describe` reads of a run from the journal (in a worker thread)."""

    finished: bool
    records: list[CaseRecord]
    rejects: list[RunReject]
    shift: JsonObject | None
    locked: bool
    """A process holds the run's execution lock (read for a run of another process only)."""
    total: int
    """The run's number of panels (read for a run of another process only, else 0)."""


def _journalled(
    journal: Journal, run_id: str, *, missing_ok: bool, foreign: bool
) -> _Journalled | None:
    """The run as the journal holds it (``None``: missing, and ``missing_ok``); with
    ``foreign`` (a run this process does not hold) also its lock and its total. A long
    read for a large run: called in a worker thread, never on the server's loop."""
    if journal.run(run_id, missing_ok=missing_ok) is None:
        return None
    finished = journal.get(run_id, "run/finished") is not None
    rejects = _rejects(journal, run_id)
    records = final_records(journal, run_id)
    checked = journal.get(run_id, "run/shift")
    return _Journalled(
        finished=finished,
        records=records,
        rejects=rejects,
        shift=dict(checked.payload) if checked is not None else None,
        locked=foreign and not finished and journal.run_lock_holder(run_id) is not None,
        total=_total(journal, run_id, len(records) + len(rejects)) if foreign else 0,
    )


def _in_memory(state: RunState) -> RunDocument:
    """The document of a run from what this process holds of it."""
    return RunDocument(
        **dict(state.summary()), records=list(state.records), rejects=list(state.rejects)
    )
