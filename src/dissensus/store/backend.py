"""The back-end seam: what a database must do for the journal (the SQL dialect seam).

The journal's services (:mod:`~dissensus.store.log`, :mod:`~dissensus.store.review_index`,
:mod:`~dissensus.store.claims`, :mod:`~dissensus.store.locks`, :mod:`~dissensus.store.seals`,
:mod:`~dissensus.store.chain`) write their SQL once, with ``?`` placeholders, and run it
through a :class:`Backend`. Two back ends implement it: SQLite
(:class:`~dissensus.store.sqlite.SQLiteBackend`) and PostgreSQL
(:class:`~dissensus.store.postgres.PostgresBackend`). The tables themselves are defined
once in :mod:`~dissensus.store.schema` and created by :mod:`~dissensus.store.migrations`.

Choices this module makes:

* **Rows are dicts keyed by column.** :data:`Row` is the row of whatever query was asked:
  the query names its columns, and each service turns its rows into a model
  (:class:`~dissensus.store.events.Event`, :class:`~dissensus.store.claims.Claim`, ...)
  where it reads them, so a row never travels further than the service that asked.
* **Transactions are the back end's**, begun, committed and rolled back through it (a
  read of several queries that must agree with each other takes a ``snapshot``: one
  read transaction);
  :class:`~dissensus.store.transactions.Transactions` nests them and runs what follows a
  commit. ``lock`` serialises one journal object's statements across threads.
* **Only what differs is here.** Appending (reading the head, writing a block of rows),
  the review index's JSON access and lock, a claim row's lock and the run's write lock
  are per dialect; everything else is the same SQL on both.
* **Session locks.** A back end whose server holds locks for a session (PostgreSQL's
  advisory locks) offers them as :class:`SessionLocks`, and run locks use them; one
  without (SQLite) has ``session_locks = None``, and a run lock is a row whose holder's
  process is checked.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, cast

from dissensus.store.events import EventRow, EventValues, RunHead, stored_int
from dissensus.store.migrations import SchemaInfo
from dissensus.store.schema import Dialect

__all__ = ["Backend", "Row", "SessionLocks", "stored_keys"]

Row = dict[str, Any]  # a database row passing through: columns named by its query
"""One row of a query, keyed by column name (the query's SQL says which columns); read
into a model by the service that asked."""


class SessionLocks(Protocol):
    """Locks the database server holds for this connection's session (released when the
    session ends, even on ``kill -9``)."""

    def holds(self, run_id: str) -> bool:
        """Whether this session holds the run's lock."""
        ...

    def held(self, run_id: str) -> bool:
        """Whether any session (this one or another) holds the run's lock."""
        ...

    def try_lock(self, run_id: str) -> bool:
        """Take the run's lock for this session unless another session holds it."""
        ...

    def unlock(self, run_id: str) -> None:
        """Release the run's lock if this session holds it."""
        ...


class Backend(Protocol):
    """One open database holding a journal."""

    path: str
    """How the journal is named in messages (a URL's password masked)."""
    busy_timeout: float
    """Seconds a writer waits for another writer's lock."""
    dialect: Dialect
    lock: threading.RLock
    """Held around every statement and transaction of this object (threads share it)."""

    @property
    def session_locks(self) -> SessionLocks | None:
        """The server's session locks, if the back end has them."""
        ...

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        """Run a query (``?`` placeholders) and return its rows."""
        ...

    def exec(self, sql: str, args: Sequence[Any] = ()) -> int:
        """Run a statement (``?`` placeholders); the number of rows it changed."""
        ...

    def values(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run a query (``?`` placeholders) and return its rows as tuples, in the order
        its columns are named: for a query of many light rows, where a dict a row costs
        more than the row."""
        ...

    def errors(self) -> AbstractContextManager[None]:
        """Translate the driver's errors into :class:`~dissensus.store.errors.JournalError` s."""
        ...

    def begin(self) -> None:
        """Open a write transaction."""
        ...

    def snapshot(self) -> AbstractContextManager[None]:
        """Every query inside reads one consistent state of the journal (one read
        transaction: what another writer commits meanwhile is not seen), holding
        :attr:`lock`. Inside a write transaction of this object it is that transaction (on
        PostgreSQL each of its statements sees what was committed when it began: a read
        that must agree is made outside one)."""
        ...

    def version(self) -> Hashable | None:
        """Inside a :meth:`snapshot` (none of a write transaction): a value equal in two
        snapshots of this object only when nothing was committed to the journal between
        them (``None``: no such value here; each back end says how it makes it)."""
        ...

    def commit(self) -> None: ...

    def rollback(self) -> None: ...

    def lock_run(self, run_id: str) -> bool:
        """Inside a write transaction: take the run's write lock; False when there is no
        such run."""
        ...

    def append_state(
        self, run_id: str, keys: Sequence[str]
    ) -> tuple[dict[str, EventRow], RunHead | None]:
        """Inside the run's write transaction: the events stored under any of ``keys`` (by
        key) and where the run's chain stands (``None`` only when every key is stored, so
        nothing will be written)."""
        ...

    def write_events(self, rows: Sequence[EventValues]) -> None:
        """Inside the run's write transaction: insert consecutive event rows of one run and
        move its head to the last of them."""
        ...

    def write_index(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Inside the write transaction: a statement on the review index, once per row of
        arguments in order, after the events' rows (its result is not needed)."""
        ...

    def lock_review_index(self) -> None:
        """Inside a write transaction: keep other writers off the review index until commit."""
        ...

    def lock_name(self, name: str) -> None:
        """Inside a write transaction: hold the lock called ``name`` until the transaction
        ends (another writer asking for the same name waits for it)."""
        ...

    def json_text(self, column: str, key: str) -> str:
        """SQL for the text of top-level ``key`` of the JSON text in ``column``."""
        ...

    def distinct(self, left: str, right: str) -> str:
        """SQL: ``left`` and ``right`` differ, NULL being a value."""
        ...

    def claim_row(self, review_id: str) -> Row | None:
        """Inside a write transaction: the review item's claim row (locked where the
        dialect can), if any."""
        ...

    def schema(self) -> SchemaInfo:
        """The journal's schema revision and history (:mod:`~dissensus.store.migrations`)."""
        ...

    def close(self) -> None: ...


def stored_keys(
    rows: Callable[[str, Sequence[Any]], list[Row]], run_id: str, keys: Sequence[str]
) -> tuple[dict[str, EventRow], RunHead | None]:
    """:meth:`Backend.append_state` in SQL both dialects take: a lone key's event first
    (when it is stored, the head is not read), else the head, then the keys 500 at a time."""
    if len(keys) == 1:
        found = rows("SELECT * FROM events WHERE run_id = ? AND key = ?", (run_id, keys[0]))
        if found:
            return {keys[0]: cast(EventRow, found[0])}, None
        return {}, _head(rows, run_id)
    head = _head(rows, run_id)
    stored: dict[str, EventRow] = {}
    unique = list(dict.fromkeys(keys))
    for start in range(0, len(unique), 500):
        chunk = unique[start : start + 500]
        marks = ", ".join("?" * len(chunk))
        for row in rows(
            f"SELECT * FROM events WHERE run_id = ? AND key IN ({marks})", [run_id, *chunk]
        ):
            stored[str(row["key"])] = cast(EventRow, row)  # the query is SELECT * FROM events
    return stored, head


def _head(rows: Callable[[str, Sequence[Any]], list[Row]], run_id: str) -> RunHead:
    row = rows("SELECT head_hash, n_events FROM runs WHERE run_id = ?", (run_id,))[0]
    count = stored_int(row["n_events"], f"journal damaged: run {run_id}: event count")
    return RunHead(n_events=count, head_hash=str(row["head_hash"]))
