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
* **Off the event loop.** Each run is decided on a thread of its own (at most
  :data:`RUN_THREADS` at once), with its own event loop and its own connection to the
  journal, so embedding and deciding never stall the server's loop (``/healthz``
  answers during a MiniLM run). A worker thread keeps its connection for the runs it
  decides later (opening one costs a schema and review-index check that grows with
  the journal), and its event loop likewise (what a run leaves running is cancelled
  when it ends, as ``asyncio.run`` would); a connection that failed is closed and replaced, and every one is
  closed when the server stops. A server on an in-memory journal (tests) decides on
  its loop, since a second connection would see another database.
* A run stopped by its policy's deadline ends ``incomplete`` (partial, resumable), not
  ``failed``.
* On shutdown (SIGTERM / Ctrl-C) runs in progress get most of the graceful-shutdown
  time to finish, then are cancelled: they end ``incomplete`` (resumable with
  ``dissensus runs resume``; one cancelled after it journalled ``run.finished`` is
  ``finished``), and every open event stream receives that final event and
  ends, so no client is left on a connection the server drops.
* Progress is kept in memory (:class:`RunState`) for the runs this process executes;
  at most :data:`KEEP_FINISHED` finished runs stay in memory, older ones (and runs of
  other processes) are read back from the journal.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel

from dissensus.errors import DissensusError
from dissensus.io.jsonl import Reject
from dissensus.pipeline import CaseRecord, DeadlineReached, RunSpec, execute_run
from dissensus.pipeline.batch import input_lines, start_run
from dissensus.pipeline.review import final_records
from dissensus.states import EmbeddingBackend, SimilarityBackend, get_backend
from dissensus.states.similarity import Matrix, Vectors
from dissensus.store import event_types as ev
from dissensus.store.journal import Journal
from dissensus.types import JsonObject

__all__ = [
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

KEEP_FINISHED = 256
"""Finished runs whose progress stays in memory."""

RUN_THREADS = 8
"""Runs decided at the same time, each on its own thread (later ones wait for a thread)."""

_POOL: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=RUN_THREADS, thread_name_prefix="dissensus-run")
    return _POOL


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


class DecideAnswer(BaseModel):
    """The answer to ``POST /v1/decide`` with a list of panels: the run, its records (as
    ``dissensus decide --json`` writes them) and the rejected items."""

    run_id: str
    status: Status
    rejected: int
    records: list[CaseRecord]
    rejects: list[RunReject]


def reject_of(reject: Reject) -> RunReject:
    """A rejected item as the API reports it: index in the request, field, message."""
    return RunReject(index=reject.line - 1, field=reject.field, error=reject.message)


@dataclass
class _ThreadTask:
    """The event loop and task deciding a run on its thread, once they exist."""

    loop: asyncio.AbstractEventLoop | None = None
    task: asyncio.Task[Any] | None = None


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
    events: list[tuple[str, JsonObject]] = field(default_factory=list)
    """Progress events (kind, JSON data) as they are streamed to followers, untouched."""
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    @property
    def active(self) -> bool:
        """Still deciding in this process (a task cancelled before it ran is not)."""
        return self.status == "running" and self.task is not None and not self.task.done()

    def push(self, kind: str, data: JsonObject) -> None:
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


class _ThreadJournals:
    """One journal connection per worker thread, opened on the thread's first run and
    kept for its later ones."""

    def __init__(self, opener: Callable[[], Journal]) -> None:
        self._opener = opener
        self._local = threading.local()
        self._open: list[Journal] = []
        self._lock = threading.Lock()

    def get(self) -> Journal:
        journal: Journal | None = getattr(self._local, "journal", None)
        if journal is None:
            journal = self._opener()
            self._local.journal = journal
            with self._lock:
                self._open.append(journal)
        return journal

    def discard(self) -> None:
        """Close this thread's connection (after a failure); the next run opens another."""
        journal: Journal | None = getattr(self._local, "journal", None)
        self._local.journal = None
        if journal is not None:
            with self._lock:
                if journal in self._open:
                    self._open.remove(journal)
            with contextlib.suppress(Exception):
                journal.close()

    def close(self) -> None:
        with self._lock:
            journals, self._open = self._open, []
        for journal in journals:
            with contextlib.suppress(Exception):
                journal.close()


class _ThreadLoops:
    """One event loop per worker thread, made on the thread's first run and kept for its
    later ones: a fresh loop per run (``asyncio.run``) costs a selector, a self-pipe and
    a scan of every task of the process, for each single-panel request."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._made: list[asyncio.AbstractEventLoop] = []
        self._lock = threading.Lock()

    def run(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` to the end on this thread's loop, then cancel whatever it left
        running (as ``asyncio.run`` does), so the next run starts on an empty loop."""
        loop: asyncio.AbstractEventLoop | None = getattr(self._local, "loop", None)
        if loop is None or loop.is_closed():
            loop = asyncio.new_event_loop()
            self._local.loop = loop
            with self._lock:
                self._made.append(loop)
        try:
            loop.run_until_complete(coro)
        finally:
            left = asyncio.all_tasks(loop)
            for task in left:
                task.cancel()
            if left:
                loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))

    def close(self) -> None:
        """Close every loop (the server has stopped: none is running)."""
        with self._lock:
            loops, self._made = self._made, []
        for loop in loops:
            with contextlib.suppress(RuntimeError):
                loop.close()


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
        self._journals = _ThreadJournals(open_journal) if open_journal is not None else None
        self._loops = _ThreadLoops()
        self._backend: SimilarityBackend | None = None
        self._backend_lock = threading.Lock()
        self._states: OrderedDict[str, RunState] = OrderedDict()

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
                self.spec.acceptance, similarity=self.policy.reading.similarity, backend=backend
            )

    def start(self, lines: list[str], *, submitted_by: str) -> RunState:
        """Journal a new run of ``lines`` (one panel each) and start deciding it."""
        text = "".join(line + "\n" for line in lines)
        info = start_run(
            self.journal,
            None,
            self.spec,
            text=text,
            extra={"submitted_by": submitted_by},
            via="serve",
        )
        state = RunState(run_id=info.run_id, total=len(lines))
        self._states[info.run_id] = state
        state.task = asyncio.create_task(self._execute(state))
        self._evict()
        return state

    async def _execute(self, state: RunState) -> None:
        loop = asyncio.get_running_loop()

        def on_reject(reject: Reject) -> None:
            data = reject_of(reject)
            state.rejects.append(data)
            state.push("reject", data.model_dump(mode="json"))

        def on_record(record: CaseRecord) -> None:
            state.records.append(record)
            state.done += 1
            state.push("record", record.model_dump(mode="json"))

        try:
            if self._open_journal is None:  # an in-memory journal: decide on this loop
                async for record in execute_run(
                    self.journal, state.run_id, on_reject=on_reject, backend=self.backend
                ):
                    on_record(record)
            else:
                await self._off_loop(state, loop, on_reject, on_record)
            state.status = "finished"
        except asyncio.CancelledError:
            if self._finished(state.run_id):
                # Stopped only after the run journalled its end: it is finished.
                state.status = "finished"
                state.push("finished", state.summary().model_dump(mode="json"))
                raise
            state.status = "incomplete"
            state.error = (
                "cancelled (the server stopped); resume with: dissensus runs resume " + state.run_id
            )
            state.push("incomplete", state.summary().model_dump(mode="json"))
            raise
        except DeadlineReached as exc:
            state.status = "incomplete"
            state.error = str(exc)
        except Exception as exc:  # reported to the client, never swallowed silently
            state.status = "failed"
            state.error = f"{type(exc).__name__}: {exc}"
        state.push(state.status, state.summary().model_dump(mode="json"))

    async def _off_loop(
        self,
        state: RunState,
        loop: asyncio.AbstractEventLoop,
        on_reject: Callable[[Reject], None],
        on_record: Callable[[CaseRecord], None],
    ) -> None:
        """Decide the run on a thread of its own (own event loop, own journal connection),
        so embedding and deciding never hold up the server's loop; cancelling this
        coroutine cancels the run there, and waits until it stopped."""
        assert self._journals is not None
        journals = self._journals
        control = _ThreadTask()
        stop = threading.Event()

        async def main() -> None:
            control.loop = asyncio.get_running_loop()
            control.task = asyncio.current_task()
            if stop.is_set():
                return

            def rejected(reject: Reject) -> None:
                loop.call_soon_threadsafe(on_reject, reject)

            journal = journals.get()
            records = execute_run(journal, state.run_id, on_reject=rejected, backend=self.backend)
            try:
                # Closed here, whatever happens: the thread's loop outlives the run.
                async with contextlib.aclosing(records):  # type: ignore[type-var]
                    async for record in records:
                        loop.call_soon_threadsafe(on_record, record)
            except BaseException:
                journals.discard()  # a connection that failed is not reused
                raise

        def work() -> None:
            self._loops.run(main())

        done = loop.run_in_executor(_executor(), work)
        try:
            await asyncio.shield(done)
        except asyncio.CancelledError:
            stop.set()
            inner_loop, task = control.loop, control.task
            if inner_loop is not None and task is not None:
                with contextlib.suppress(RuntimeError):  # its loop already closed
                    inner_loop.call_soon_threadsafe(task.cancel)
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await done
            await asyncio.sleep(0)  # let the last records the thread handed over land
            raise

    def _finished(self, run_id: str) -> bool:
        """Whether the journal holds the run's ``run.finished`` (unknown counts as not)."""
        try:
            return self.journal.get(run_id, "run/finished") is not None
        except Exception:  # the journal is unreachable: the run is not known to be finished
            return False

    def _evict(self) -> None:
        finished = [k for k, s in self._states.items() if s.status != "running"]
        for key in finished[: max(0, len(finished) - KEEP_FINISHED)]:
            del self._states[key]

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

    def describe(self, run_id: str) -> RunDocument:
        """A run's status and its final records (journal's view, human resolutions included)."""
        info = self.journal.run(run_id)
        assert info is not None
        state = self._states.get(run_id)
        if state is not None and state.active:
            return RunDocument(
                **dict(state.summary()), records=list(state.records), rejects=list(state.rejects)
            )
        finished = self.journal.get(run_id, "run/finished")
        rejects = [
            RunReject(
                index=int(e.payload["line"]) - 1,
                field=e.payload["field"],
                error=e.payload["message"],
            )
            for e in self.journal.events(run_id, type=ev.INPUT_REJECTED)
        ]
        records = final_records(self.journal, run_id)
        status: Status = "finished" if finished is not None else "incomplete"
        if finished is None and state is not None and state.status == "failed":
            status = "failed"
        return RunDocument(
            run_id=run_id,
            status=status,
            total=_total(self.journal, run_id, len(records) + len(rejects))
            if state is None
            else state.total,
            done=len(records),
            rejected=len(rejects),
            error=state.error if state is not None else None,
            records=records,
            rejects=rejects,
        )

    async def follow(self, run_id: str) -> AsyncIterator[tuple[str, JsonObject]]:
        """Progress events of a run: every record and reject, then its final status (each
        event's data is the JSON streamed to the client)."""
        state = self._states.get(run_id)
        if state is None or not (state.active or state.events):
            doc = self.describe(run_id)
            for reject in doc.rejects:
                yield "reject", reject.model_dump(mode="json")
            for record in doc.records:
                yield "record", record.model_dump(mode="json")
            yield doc.status, RunStatusView.model_validate(dict(doc)).model_dump(mode="json")
            return
        sent = 0
        while True:
            waiter = state.changed
            while sent < len(state.events):
                yield state.events[sent]
                sent += 1
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
        if self._journals is not None:
            self._journals.close()
        self._loops.close()


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
