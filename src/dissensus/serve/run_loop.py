"""The run loops a server decides its runs on, and the similarity backend they share.

A run loop (:class:`_RunLoop`) is a thread with its own event loop and its own
connection to the journal; calls pass between it and the server's loop through
mailboxes (:class:`_Mailbox`); every task a run creates there is filed under the run
(:func:`_tracking_factory`). :class:`~dissensus.serve.runs.Runner` hands runs to them.

Choices this module makes:

* The similarity backend is built once per server and shared by every run, one call at
  a time; a torch encoder (MiniLM) computes on all cores but one, which the server's own
  loop keeps.
* **Off the event loop.** Runs are journalled (``run.started``, with the run's lock:
  one commit; a request that waits for its records defers it to the run's first
  write, so a panel decided without a model call is one commit in all) and decided on
  a run loop: a thread of its own with its own event loop
  and its own connection to the journal, so embedding and deciding never stall the
  server's loop (``/healthz`` answers during a MiniLM run). The run loop decides many
  runs at once (at most :data:`.runs.RUNS_PER_LOOP`; later ones wait for a place), as
  concurrent ``adecide`` calls share one loop and one connection: on SQLite one run
  loop, since one connection writes at a time anyway and several threads would only
  contend for the GIL and the file's write lock; on PostgreSQL
  :data:`.runs.RUN_LOOPS_POSTGRES`, so that round trips to the database overlap (each
  run goes to the loop with the fewest). The server's loop waits only until
  ``run.started`` is committed (so a journal error is the request's error, as before);
  records, rejects and the end come back through a mailbox that wakes the server's
  loop once per turn of the run loop, not once per hand-over. The run loop keeps its
  connection; one that failed is not handed to later runs and is closed when the runs
  still using it end; all are closed when the server stops. What a run leaves running
  is cancelled when it ends, as ``asyncio.run`` would (its tasks are filed under it).
  A run stopped before ``execute_run`` took it over releases its lock itself. A server
  on an in-memory journal (tests) decides on its loop, since a second connection
  would see another database.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import sys
import threading
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from dissensus.errors import DissensusError
from dissensus.states import SimilarityBackend
from dissensus.states.similarity import Matrix, Vectors
from dissensus.store.errors import JournalError
from dissensus.store.journal import Journal


@dataclass
class _ThreadTask:
    """The task deciding a run on its run loop, once it exists, and whether the server's
    loop stopped the run (set there, read on the run loop: one attribute, no lock or
    event made per run)."""

    task: asyncio.Task[Any] | None = None
    stopped: bool = False


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
