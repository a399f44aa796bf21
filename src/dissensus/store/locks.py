"""Run locks: which process is executing a run.

A run lock is coordination state, kept outside the hash chain: ``runs resume`` and the
service take it so that two processes never execute one run at once. Choices this
module makes:

* **Two ways to hold one**, by what the back end offers (:class:`RunLocks` picks):
  where the database server holds locks for a session (PostgreSQL's advisory locks,
  :class:`~dissensus.store.backend.SessionLocks`) the server decides and releases the lock
  when the holder's connection ends, even on ``kill -9``; the ``run_locks`` row only names
  the holder for the message. Without them (SQLite) the row is the lock, and a holder on
  this host whose process is gone is replaced.
* **A zombie is gone.** A process killed but not yet reaped by its parent (as right after
  ``kill -9``) holds nothing (``/proc/<pid>/stat`` says ``Z``).
* **A holder on another host** is trusted to be alive (its process cannot be checked).
* **A row edited outside dissensus** (the pid made text, or a number no process can
  have: SQLite keeps either in an ``INTEGER`` column) names no process, so on this host
  its lock is free and taken over; never a ``ValueError`` or ``OverflowError`` from
  ``runs list`` or ``runs resume``.
* **Inside a transaction.** Taking or releasing a lock joins the caller's open
  transaction, so a run can be created with its lock taken, or finished with its lock
  released, in one commit. A PostgreSQL session lock is not transactional: one taken
  inside a transaction is released again if it rolls back, and one released inside a
  transaction is released only once it commits.
* **Holding it already** costs a read, not a write: asking for a lock this process
  (same pid, same host; on PostgreSQL, this session) holds returns at once.
* **Held by another live process** is said at once too: outside a transaction the row
  is read first, and a live holder is returned without waiting for SQLite's write lock
  (which the holder may keep for seconds, say through a run's last commit and its shift
  check); the write transaction that takes a free or orphaned lock reads the row again.
"""

from __future__ import annotations

import os
import socket
from typing import Literal

from pydantic import BaseModel

from dissensus.store import clock
from dissensus.store.backend import Backend, Row, SessionLocks
from dissensus.store.log import SQLEventLog
from dissensus.store.targets import may_be_held
from dissensus.store.transactions import Transactions

__all__ = ["RunLock", "RunLocks", "RunStatus", "pid_alive"]

_UPSERT = (
    "INSERT INTO run_locks (run_id, pid, host, acquired) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (run_id) DO UPDATE SET pid = excluded.pid, host = excluded.host, acquired = excluded.acquired"
)
_DELETE = "DELETE FROM run_locks WHERE run_id = ? AND pid = ? AND host = ?"


RunStatus = Literal["finished", "running", "incomplete"]
"""A run as the journal and its locks tell it: its ``run.finished`` is journalled; a live
process holds its execution lock; or neither (stopped, resumable)."""


class RunLock(BaseModel):
    """The process executing a run."""

    run_id: str
    pid: int
    host: str
    acquired: str


def _lock_of(row: Row) -> RunLock:
    return RunLock(
        run_id=str(row["run_id"]),
        pid=_stored_pid(row["pid"]),
        host=str(row["host"]),
        acquired=str(row["acquired"]),
    )


_PID_MAX = 2**31 - 1
"""Above any process id (a ``pid_t`` is a signed 32-bit integer)."""


def _stored_pid(value: object) -> int:
    """A lock row's process id read back; one edited outside dissensus into text or a
    number no process can have names no process (0)."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        pid = value
    else:
        try:
            pid = int(str(value).strip(), 10)
        except ValueError:
            return 0
    return pid if 0 < pid <= _PID_MAX else 0


class RunLocks:
    """The run locks of one journal."""

    def __init__(self, backend: Backend, transactions: Transactions, log: SQLEventLog) -> None:
        self._backend = backend
        self._tx = transactions
        self._log = log

    def acquire(self, run_id: str, pid: int | None = None) -> RunLock | None:
        """Take the run's execution lock for ``pid`` (default: this process); ``None``
        when taken, else the holder."""
        pid = os.getpid() if pid is None else pid
        session = self._backend.session_locks
        if session is not None:
            return self._acquire_session(session, run_id, pid)
        return self._acquire_row(run_id, pid)

    def release(self, run_id: str, pid: int | None = None) -> None:
        """Release the run's execution lock if ``pid`` (default: this process) holds it."""
        pid = os.getpid() if pid is None else pid
        backend = self._backend
        session = backend.session_locks
        if session is None:
            with self._tx.transaction(), backend.errors():
                backend.exec(_DELETE, (run_id, pid, socket.gethostname()))
            return
        with backend.errors():
            backend.exec(_DELETE, (run_id, pid, socket.gethostname()))

        def unlock() -> None:
            with backend.errors():
                session.unlock(run_id)

        # Released once the DELETE is committed (at once outside a transaction).
        self._tx.on_commit(unlock)

    def holder(self, run_id: str) -> RunLock | None:
        """The live holder of the run's lock (this process included), or ``None``; reads
        only. On PostgreSQL the server's session locks decide (a row its holder's ended
        session left behind names no one); on SQLite the row, unless its process on this
        host is gone; an id no run can have holds nothing, unasked."""
        if not may_be_held(run_id):
            return None
        backend = self._backend
        with backend.errors():
            rows = backend.rows("SELECT * FROM run_locks WHERE run_id = ?", (run_id,))
            session = backend.session_locks
            if session is None:
                return _live_holder(rows[0] if rows else None)
            if not session.held(run_id):
                return None
        if rows:
            return _lock_of(rows[0])
        return RunLock(run_id=run_id, pid=0, host="?", acquired=clock.now())

    def _ours(self, row: Row | None, pid: int) -> bool:
        return (
            row is not None
            and _stored_pid(row["pid"]) == pid
            and row["host"] == socket.gethostname()
        )

    def _acquire_row(self, run_id: str, pid: int) -> RunLock | None:
        backend = self._backend
        if not self._tx.active:
            # Held already (taken with the run, or by an earlier call): nothing to write.
            # Held by another live process: said at once, without waiting for the
            # database's write lock (which that process may hold for seconds).
            with backend.errors():
                rows = backend.rows("SELECT * FROM run_locks WHERE run_id = ?", (run_id,))
            row = rows[0] if rows else None
            if self._ours(row, pid):
                return None
            holder = _live_holder(row)
            if holder is not None:
                return holder
        with self._tx.transaction(run_id), backend.errors():
            rows = backend.rows("SELECT * FROM run_locks WHERE run_id = ?", (run_id,))
            holder = _live_holder(rows[0] if rows else None)
            if holder is not None and not (
                holder.pid == pid and holder.host == socket.gethostname()
            ):
                return holder
            backend.exec(_UPSERT, (run_id, pid, socket.gethostname(), clock.now()))
        return None

    def _acquire_session(self, session: SessionLocks, run_id: str, pid: int) -> RunLock | None:
        backend = self._backend
        self._log.run(run_id)  # UnknownRun when there is no such run
        with backend.errors():
            if session.holds(run_id):
                rows = backend.rows("SELECT * FROM run_locks WHERE run_id = ?", (run_id,))
                if rows and _stored_pid(rows[0]["pid"]) != pid:
                    return _lock_of(rows[0])
                return None
            if not session.try_lock(run_id):
                rows = backend.rows("SELECT * FROM run_locks WHERE run_id = ?", (run_id,))
                if rows:
                    return _lock_of(rows[0])
                return RunLock(run_id=run_id, pid=0, host="?", acquired=clock.now())
            if self._tx.active:
                # The session lock outlives a rollback of the transaction taking it.
                self._tx.on_rollback(lambda: session.unlock(run_id))
            backend.exec(_UPSERT, (run_id, pid, socket.gethostname(), clock.now()))
        return None


def _live_holder(row: Row | None) -> RunLock | None:
    """The live holder a run-lock row names (``None``: free, or its process is gone)."""
    if row is None:
        return None
    lock = _lock_of(row)
    if lock.host == socket.gethostname() and not pid_alive(lock.pid):
        return None
    return lock


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host is running: a zombie (killed, not yet reaped by
    its parent, as right after ``kill -9``) is not."""
    if not 0 < pid <= _PID_MAX:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """True when ``/proc`` says ``pid`` is a zombie or dead (False where there is no ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return False
    # The state follows the command name, which is in parentheses and may hold any byte.
    state = stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3]
    return state in (b"Z", b"X", b"x")
