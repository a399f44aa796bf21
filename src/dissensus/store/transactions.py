"""Write transactions over a back end: nesting, the run's write lock, and what follows a commit.

Every write of the journal (an append, a claim, a run lock, a rebuild of the review index)
runs in :meth:`Transactions.transaction`. Choices this module makes:

* **One writer per run at a time.** A transaction given a run id takes the run's write
  lock (SQLite: the database write lock, ``BEGIN IMMEDIATE``; PostgreSQL: ``SELECT ...
  FOR UPDATE`` on the run's header row) before anything is read, so concurrent writers
  never fork the chain.
* **Nesting joins.** A transaction opened inside another joins it (taking the further
  run's lock); only the outermost commits, so everything inside commits together or not
  at all.
* **After the commit.** The events written inside are reported once the transaction has
  committed (never for one rolled back), to the ``after_commit`` callbacks in the order
  they were registered (the journal's ``after_append``, then its seals).
* **Threads.** A transaction holds the back end's lock, so another thread's statements on
  the same object wait for it to end.
* **What cannot roll back.** A step outside the database's transaction (a PostgreSQL
  session lock taken or released inside it) registers what must follow the commit
  (:meth:`Transactions.on_commit`) or undo it on a rollback
  (:meth:`Transactions.on_rollback`); outside a transaction a commit callback runs at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress

from dissensus.quoting import quote_short
from dissensus.store.backend import Backend
from dissensus.store.canonical import GENESIS
from dissensus.store.errors import UnknownRun
from dissensus.store.events import Event, RunHead

__all__ = ["Transactions"]


class Transactions:
    """Nested write transactions on one back end."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self._depth = 0
        self._written: list[Event] | None = None
        self._locked_runs: set[str] = set()
        self._fresh: dict[str, tuple[RunHead, set[str]]] = {}
        self._on_commit: list[Callable[[], None]] = []
        self._on_rollback: list[Callable[[], None]] = []
        self.after_commit: list[Callable[[Sequence[Event]], None]] = []
        """Called with the events a transaction wrote, once it has committed."""

    @contextmanager
    def transaction(self, run_id: str | None = None) -> Iterator[None]:
        """One write transaction, holding ``run_id``'s write lock: everything inside
        commits together or not at all. Nested calls join the outer transaction."""
        with self._backend.lock, self._transaction(run_id):
            yield

    def created(self, run_id: str) -> None:
        """Inside a transaction: ``run_id``'s row was inserted by it, so the transaction
        holds the run's write lock already (nothing else can see the row before commit),
        and what it writes to the run is all the run holds (:meth:`fresh`)."""
        assert self._depth
        self._locked_runs.add(run_id)
        self._fresh[run_id] = (RunHead(n_events=0, head_hash=GENESIS), set())

    def fresh(self, run_id: str) -> tuple[RunHead, set[str]] | None:
        """For a run this transaction created: its head and the keys it holds, as known
        without asking the back end (``None`` for any other run)."""
        return self._fresh.get(run_id)

    def advanced(self, run_id: str, head: RunHead, keys: Sequence[str]) -> None:
        """A run this transaction created now ends at ``head`` and holds ``keys`` too."""
        known = self._fresh.get(run_id)
        if known is not None:
            known[1].update(keys)
            self._fresh[run_id] = (head, known[1])

    def written(self, events: Sequence[Event]) -> None:
        """Inside a transaction: ``events`` were written (reported once it commits)."""
        assert self._written is not None
        self._written.extend(events)

    @property
    def active(self) -> bool:
        """Whether a transaction is open on this object."""
        return self._depth > 0

    def on_commit(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the open transaction commits (dropped if it rolls back);
        at once when no transaction is open."""
        if not self._depth:
            callback()
            return
        self._on_commit.append(callback)

    def on_rollback(self, callback: Callable[[], None]) -> None:
        """Inside a transaction: run ``callback`` if it rolls back (errors in it are
        suppressed: the first error is the one to report)."""
        assert self._depth
        self._on_rollback.append(callback)

    def _lock(self, run_id: str) -> None:
        backend = self._backend
        with backend.errors():
            found = backend.lock_run(run_id)
        if not found:
            raise UnknownRun(f"no run {quote_short(run_id)} in journal {backend.path}")
        self._locked_runs.add(run_id)

    @contextmanager
    def _transaction(self, run_id: str | None) -> Iterator[None]:
        if self._depth:
            if run_id is not None and run_id not in self._locked_runs:
                self._lock(run_id)
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        backend = self._backend
        written: list[Event] = []
        with backend.errors():
            backend.begin()
        self._depth = 1
        self._written = written
        self._locked_runs = set()
        self._fresh = {}
        self._on_commit, self._on_rollback = [], []
        try:
            if run_id is not None:
                self._lock(run_id)
            yield
            with backend.errors():
                backend.commit()
        except BaseException:
            with suppress(Exception):  # the first error is the one to report
                backend.rollback()
            for undo in self._on_rollback:
                with suppress(Exception):
                    undo()
            raise
        finally:
            self._depth = 0
            self._written = None
            self._locked_runs = set()
            self._fresh = {}
            committed, self._on_commit, self._on_rollback = self._on_commit, [], []
        for then in committed:
            then()
        for callback in self.after_commit:
            callback(written)
