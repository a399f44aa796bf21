"""The run journal: append-only, hash-chained events per run in one SQLite file.

Every run of the pipeline writes its inputs, readings, guard audits, routes, every
model call with its usage, follow-ups, packets, certificates, review items, human
resolutions and final records as *events*. Each event of a run has a sequence number
(0, 1, 2, ... without gaps), a *key* unique within the run, a type, an optional case
reference, a JSON payload, and ``hash = sha256(prev_hash + canonical(event))`` where
``prev_hash`` is the hash of the run's previous event (:mod:`dissensus.store.canonical`).
:meth:`Journal.verify` recomputes the chain; any edited, removed or reordered event
breaks it.

Choices where the design is silent:

* **Durability.** The database runs in WAL mode with ``synchronous=FULL``: an append
  returns only after its transaction is on disk, so an event that was appended survives
  ``kill -9`` (and power loss) and one that was not is absent entirely (never
  half-written). ``$DISSENSUS_JOURNAL_SYNC=normal`` trades power-loss durability for
  speed: WAL with ``synchronous=NORMAL`` still keeps every committed event across a
  process kill, but the last commits may roll back if the machine loses power.
* **Idempotent keys.** Appending a key that the run already holds returns the stored
  event and writes nothing, after checking the payload is the same
  (:class:`JournalConflict` otherwise). This is what makes a resumed run produce no
  duplicate events: it replays its deterministic steps and only the missing events are
  written.
* **Head anchor.** ``runs.head_hash`` and ``runs.n_events`` are updated in the same
  transaction as each append, so truncating a run's tail is detected too.
* **Several writers.** Appends take a write lock (``BEGIN IMMEDIATE``) and read the
  previous hash inside it, so a review resolution written by another process while a
  batch runs still chains correctly.
* **Timestamps** (``at``, UTC ISO-8601) are part of the hashed event but never of a
  final record, so a resumed run and an uninterrupted one end with the same records.
* The journal stores what it is given; callers never give it secrets (model requests
  are journalled as messages and usage, never as client configuration).
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from dissensus.errors import DissensusError, InputError
from dissensus.store.canonical import GENESIS, canonical, chain_hash

__all__ = [
    "DEFAULT_JOURNAL",
    "Event",
    "Journal",
    "JournalConflict",
    "RunInfo",
    "UnknownRun",
    "VerifyReport",
    "journal_path",
]

DEFAULT_JOURNAL = "dissensus-journal.sqlite"
"""Journal file used when neither ``--journal`` nor ``$DISSENSUS_JOURNAL`` is given."""


def journal_path(option: str | None = None) -> str:
    """The journal to use: the option, else ``$DISSENSUS_JOURNAL``, else :data:`DEFAULT_JOURNAL`."""
    if option:
        return option
    return os.environ.get("DISSENSUS_JOURNAL") or DEFAULT_JOURNAL

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    created TEXT NOT NULL,
    kind TEXT NOT NULL,
    meta TEXT NOT NULL,
    head_hash TEXT NOT NULL,
    n_events INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    key TEXT NOT NULL,
    type TEXT NOT NULL,
    case_ref TEXT,
    at TEXT NOT NULL,
    payload TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL,
    PRIMARY KEY (run_id, seq),
    UNIQUE (run_id, key)
);
CREATE INDEX IF NOT EXISTS events_type ON events (type, run_id);
CREATE INDEX IF NOT EXISTS events_case ON events (run_id, case_ref);
"""


class JournalConflict(DissensusError):
    """A key was appended again with a different payload (the run is not deterministic)."""


class UnknownRun(DissensusError):
    """No run with that id in this journal."""

    exit_code = 2


class Event(BaseModel):
    """One journal event, as stored."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    seq: int
    key: str
    """Unique within the run; appending it again is a no-op."""
    type: str
    """What happened, e.g. ``case.reading``, ``model.call``, ``case.record``."""
    case: str | None
    """The case the event belongs to (``None`` for run-level events)."""
    at: str
    payload: dict[str, Any]
    prev_hash: str
    hash: str

    def body(self) -> dict[str, Any]:
        """The hashed part of the event."""
        return {
            "run": self.run_id,
            "seq": self.seq,
            "key": self.key,
            "type": self.type,
            "case": self.case,
            "at": self.at,
            "payload": self.payload,
        }


class RunInfo(BaseModel):
    """One run's header."""

    run_id: str
    created: str
    kind: str
    meta: dict[str, Any]
    head_hash: str
    n_events: int


class VerifyReport(BaseModel):
    """Outcome of recomputing a run's hash chain."""

    run_id: str
    ok: bool
    n_events: int
    head_hash: str
    problems: list[str]


SYNC_ENV = "DISSENSUS_JOURNAL_SYNC"
"""``full`` (default) or ``normal``: SQLite's ``synchronous`` setting of the journal."""


def _sync_mode(value: str | None) -> str:
    mode = (value or os.environ.get(SYNC_ENV) or "full").strip().upper()
    if mode not in ("FULL", "NORMAL"):
        raise InputError(f"{SYNC_ENV} must be 'full' or 'normal', got {mode.lower()!r}")
    return mode


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def _row_event(row: sqlite3.Row) -> Event:
    return Event(
        run_id=row["run_id"],
        seq=row["seq"],
        key=row["key"],
        type=row["type"],
        case=row["case_ref"],
        at=row["at"],
        payload=json.loads(row["payload"]),
        prev_hash=row["prev_hash"],
        hash=row["hash"],
    )


class Journal:
    """An SQLite run journal (``":memory:"`` for a throw-away one).

    ``after_append`` is called with every newly written event once it is committed
    (used for progress reporting and for fault injection in crash tests).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        after_append: Callable[[Event], None] | None = None,
        synchronous: str | None = None,
    ) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            parent = Path(self.path).parent
            if not parent.is_dir():
                raise InputError(f"journal directory does not exist: {parent}")
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, timeout=30.0)
        except sqlite3.Error as exc:
            raise InputError(f"cannot open journal {self.path}: {exc}") from exc
        self._db.row_factory = sqlite3.Row
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={_sync_mode(synchronous)}")
            self._db.executescript(_SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise InputError(f"not a dissensus journal: {self.path}: {exc}") from exc
        self.after_append = after_append

    # -- runs -------------------------------------------------------------------------

    def create_run(self, run_id: str, *, kind: str, meta: dict[str, Any]) -> RunInfo:
        """Register a run (idempotent for the same id)."""
        existing = self.run(run_id, missing_ok=True)
        if existing is not None:
            return existing
        self._db.execute(
            "INSERT INTO runs (run_id, created, kind, meta, head_hash, n_events) VALUES (?, ?, ?, ?, ?, 0)",
            (run_id, _now(), kind, canonical(meta), GENESIS),
        )
        info = self.run(run_id)
        assert info is not None
        return info

    def run(self, run_id: str, *, missing_ok: bool = False) -> RunInfo | None:
        row = self._db.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            if missing_ok:
                return None
            raise UnknownRun(f"no run {run_id!r} in journal {self.path}")
        return RunInfo(
            run_id=row["run_id"],
            created=row["created"],
            kind=row["kind"],
            meta=json.loads(row["meta"]),
            head_hash=row["head_hash"],
            n_events=row["n_events"],
        )

    def runs(self) -> list[RunInfo]:
        """Every run, oldest first."""
        ids = [r["run_id"] for r in self._db.execute("SELECT run_id FROM runs ORDER BY created, run_id")]
        out = []
        for run_id in ids:
            info = self.run(run_id)
            assert info is not None
            out.append(info)
        return out

    # -- events -----------------------------------------------------------------------

    def append(self, run_id: str, type: str, payload: dict[str, Any], *, key: str, case: str | None = None) -> Event:
        """Append one event (or return the stored one when ``key`` is already there)."""
        text = canonical(payload)
        self._db.execute("BEGIN IMMEDIATE")
        try:
            row = self._db.execute(
                "SELECT * FROM events WHERE run_id = ? AND key = ?", (run_id, key)
            ).fetchone()
            if row is not None:
                self._db.execute("COMMIT")
                stored = _row_event(row)
                if canonical(stored.payload) != text:
                    raise JournalConflict(
                        f"run {run_id}: event {key!r} was journalled with a different payload"
                    )
                return stored
            head = self._db.execute(
                "SELECT head_hash, n_events FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
            if head is None:
                raise UnknownRun(f"no run {run_id!r} in journal {self.path}")
            seq = int(head["n_events"])
            prev = str(head["head_hash"])
            at = _now()
            body = {"run": run_id, "seq": seq, "key": key, "type": type, "case": case, "at": at, "payload": payload}
            digest = chain_hash(prev, body)
            self._db.execute(
                "INSERT INTO events (run_id, seq, key, type, case_ref, at, payload, prev_hash, hash) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, seq, key, type, case, at, text, prev, digest),
            )
            self._db.execute(
                "UPDATE runs SET head_hash = ?, n_events = ? WHERE run_id = ?", (digest, seq + 1, run_id)
            )
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise
        event = Event(
            run_id=run_id, seq=seq, key=key, type=type, case=case, at=at, payload=payload, prev_hash=prev, hash=digest
        )
        if self.after_append is not None:
            self.after_append(event)
        return event

    def get(self, run_id: str, key: str) -> Event | None:
        """The event stored under ``key``, if any."""
        row = self._db.execute("SELECT * FROM events WHERE run_id = ? AND key = ?", (run_id, key)).fetchone()
        return None if row is None else _row_event(row)

    def events(self, run_id: str, *, type: str | None = None, case: str | None = None) -> Iterator[Event]:
        """A run's events in sequence order, optionally filtered by type and case."""
        sql = "SELECT * FROM events WHERE run_id = ?"
        args: list[Any] = [run_id]
        if type is not None:
            sql += " AND type = ?"
            args.append(type)
        if case is not None:
            sql += " AND case_ref = ?"
            args.append(case)
        rows = self._db.execute(sql + " ORDER BY seq", args).fetchall()
        for row in rows:
            yield _row_event(row)

    def events_of_type(self, type: str) -> Iterator[Event]:
        """Every event of ``type`` across runs (run order, then sequence)."""
        rows = self._db.execute(
            "SELECT e.* FROM events e JOIN runs r ON r.run_id = e.run_id WHERE e.type = ? "
            "ORDER BY r.created, e.run_id, e.seq",
            (type,),
        ).fetchall()
        for row in rows:
            yield _row_event(row)

    # -- verification -----------------------------------------------------------------

    def verify(self, run_id: str) -> VerifyReport:
        """Recompute the run's hash chain and compare it with the stored hashes and head."""
        info = self.run(run_id)
        assert info is not None
        problems: list[str] = []
        prev = GENESIS
        count = 0
        for event in self.events(run_id):
            if event.seq != count:
                problems.append(f"event {count}: sequence gap (found seq {event.seq})")
            if event.prev_hash != prev:
                problems.append(f"event {event.seq} ({event.key}): prev_hash does not match the previous event")
            digest = chain_hash(prev, event.body())
            if digest != event.hash:
                problems.append(f"event {event.seq} ({event.key}): content does not match its hash")
            prev = event.hash
            count += 1
        if count != info.n_events:
            problems.append(f"run header counts {info.n_events} events, journal holds {count}")
        if prev != info.head_hash:
            problems.append("run head hash does not match the last event")
        return VerifyReport(run_id=run_id, ok=not problems, n_events=count, head_hash=prev, problems=problems)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- run leases (one process at a time works on a run) ----------------------------

    def claim_run(self, run_id: str, pid: int) -> int | None:
        """Take the run's lease for process ``pid``; the holder's pid when another live process has it.

        The lease is a row of ``run_leases`` written under the write lock, so two
        processes cannot both take it; a lease whose process is gone (killed) is taken over.
        Pids are those of this host.
        """
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS run_leases (run_id TEXT PRIMARY KEY, pid INTEGER NOT NULL, at TEXT NOT NULL)"
        )
        self._db.execute("BEGIN IMMEDIATE")
        try:
            row = self._db.execute("SELECT pid FROM run_leases WHERE run_id = ?", (run_id,)).fetchone()
            if row is not None and int(row["pid"]) != pid and _pid_alive(int(row["pid"])):
                self._db.execute("ROLLBACK")
                return int(row["pid"])
            self._db.execute(
                "INSERT OR REPLACE INTO run_leases (run_id, pid, at) VALUES (?, ?, ?)", (run_id, pid, _now())
            )
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise
        return None

    def release_run(self, run_id: str, pid: int) -> None:
        """Give up the run's lease held by ``pid`` (no-op when it holds none)."""
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS run_leases (run_id TEXT PRIMARY KEY, pid INTEGER NOT NULL, at TEXT NOT NULL)"
        )
        self._db.execute("DELETE FROM run_leases WHERE run_id = ? AND pid = ?", (run_id, pid))


def _pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
