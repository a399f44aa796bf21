"""The run journal's interface and the logic both back ends share.

Every run of the pipeline writes its inputs, readings, guard audits, routes, every
model call with its usage, follow-ups, packets, certificates, review items, human
resolutions and final records as *events*. Each event of a run has a sequence number
(0, 1, 2, ... without gaps), a *key* unique within the run, a type, an optional case
reference, a JSON payload stored as canonical text, and
``hash = sha256(prev_hash + canonical(event))`` where ``prev_hash`` is the hash of the
run's previous event (:mod:`dissensus.store.canonical`). :meth:`Journal.verify`
recomputes the chain; any edited, removed, inserted or reordered event breaks it.

Two back ends hold the same schema and the same chain: an embedded SQLite file
(:mod:`dissensus.store.sqlite`, the default) and a PostgreSQL server for many writers
(:mod:`dissensus.store.postgres`, ``postgresql://...``). ``Journal(target)`` and
:func:`open_journal` pick the back end from the target.

Choices where the design is silent:

* **Idempotent keys.** Appending a key that the run already holds returns the stored
  event and writes nothing, after checking the payload is the same
  (:class:`JournalConflict` otherwise). A resumed run replays its deterministic steps
  and only the missing events are written.
* **One writer per run at a time.** An append (or a :meth:`Journal.transaction`) takes
  the run's write lock (SQLite: the database write lock, ``BEGIN IMMEDIATE``;
  PostgreSQL: ``SELECT ... FOR UPDATE`` on the run's header row) and reads the previous
  hash inside it, so concurrent writers never fork the chain. Several events appended
  in one :meth:`Journal.transaction` are committed together or not at all.
* **Group commit.** :meth:`Journal.append_batch` appends a block of events in one
  transaction (one commit, one fsync under SQLite's ``synchronous=full``), each chained
  on the one before it exactly as single appends would be; the commit is the durability
  point (all of the block or none). :class:`EventLog` is that seam (append a batch, read,
  head), which both back ends implement; the run loop appends a block of cases at once.
* **Head anchor.** ``runs.head_hash`` and ``runs.n_events`` change in the same
  transaction as each append; verify checks them against the chain.
* **Canonical text.** A payload is stored as its canonical JSON text, and verify
  requires the stored text to *be* canonical: a payload edited to carry a duplicate key
  (which different JSON readers resolve differently) fails verification.
* **Seals.** When the journal has a signer (``DISSENSUS_SIGNING_KEY``, read by the CLI),
  every ``run.finished``, ``case.resolved`` and ``review.reopened`` append is followed by a ``run.sealed``
  event whose payload signs ``{run, n_events, head}`` of the chain before it
  (:mod:`dissensus.signing`). An unkeyed chain cannot stop an editor who re-chains
  every hash; a seal can, for anyone holding the public key.
* **Busy writers.** A writer waits up to the busy timeout (``$DISSENSUS_JOURNAL_BUSY_TIMEOUT``
  seconds, default 30) for a lock, then fails with :class:`JournalBusy` (one line, exit 1).
* **Claims and run locks** are coordination state, kept outside the hash chain: a claim
  says who is working on a review item until when; a run lock says which process is
  executing a run. Neither is evidence; resolutions name their reviewer in the chain.
* **Review index.** ``review_index`` holds one row per review item (id, run, the
  ``review.opened`` event's sequence number, the reason, the ``review.resolved`` event's
  sequence number or NULL while open; a ``review.reopened`` event sets it back to NULL),
  written by :meth:`Journal.append` in the same
  transaction as the event it derives from, so the review queue is listed without reading
  every ``review.opened`` payload (:meth:`Journal.review_entries`). The hash chain stays
  the evidence: the index is outside it, and opening a journal whose index does not count
  the same items as its events (a journal of an older version, or written by one) rebuilds
  it from the events (:meth:`Journal.rebuild_review_index`); a journal that cannot be
  written then lists its queue from the events.
* **Timestamps** (``at``, UTC ISO-8601) are part of the hashed event but never of a
  final record, so a resumed run and an uninterrupted one end with the same records.
* **Threads.** One journal object may be shared by threads: its statements and
  transactions are serialised by a lock (processes each open their own object).
* The journal stores what it is given; callers never give it secrets.
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict

from dissensus.errors import ConfigError, DissensusError
from dissensus.store import event_types as ev
from dissensus.store.canonical import GENESIS, canonical, chain_hash, event_hash

if TYPE_CHECKING:
    from dissensus.signing import PublicKey, Signer

__all__ = [
    "BUSY_TIMEOUT_ENV",
    "DEFAULT_JOURNAL",
    "SEAL_TYPE",
    "CaseClosed",
    "Claim",
    "ClaimConflict",
    "Event",
    "EventLog",
    "Journal",
    "JournalBusy",
    "JournalConflict",
    "JournalError",
    "JournalReadOnly",
    "NewEvent",
    "ReviewEntry",
    "RunExists",
    "RunHead",
    "RunInfo",
    "RunLock",
    "UnknownRun",
    "VerifyReport",
    "check_run_id",
    "is_postgres_url",
    "journal_path",
    "mask_url",
    "open_journal",
]

DEFAULT_JOURNAL = "dissensus-journal.sqlite"
"""Journal file used when neither ``--journal`` nor ``$DISSENSUS_JOURNAL`` is given."""

BUSY_TIMEOUT_ENV = "DISSENSUS_JOURNAL_BUSY_TIMEOUT"
"""Seconds a writer waits for another writer's lock before :class:`JournalBusy` (default 30)."""

SEAL_TYPE = ev.RUN_SEALED
"""Type of the event that signs the chain before it."""

SEAL_AFTER = frozenset({ev.RUN_FINISHED, ev.CASE_RESOLVED, ev.REVIEW_REOPENED})
"""Event types after which a journal with a signer seals the run's head."""

RUNS_COLUMNS = ("run_id", "created", "kind", "meta", "head_hash", "n_events")
EVENTS_COLUMNS = ("run_id", "seq", "key", "type", "case_ref", "at", "payload", "prev_hash", "hash")


def journal_path(option: str | None = None) -> str:
    """The journal to use: the option, else ``$DISSENSUS_JOURNAL``, else :data:`DEFAULT_JOURNAL`."""
    if option:
        return option
    return os.environ.get("DISSENSUS_JOURNAL") or DEFAULT_JOURNAL


def is_postgres_url(target: str | Path) -> bool:
    """Whether ``target`` names a PostgreSQL journal (``postgresql://`` or ``postgres://``)."""
    return str(target).startswith(("postgresql://", "postgres://"))


RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
"""What a run id may be: letters, digits, ``_``, ``-`` and ``.`` (not first, never ``..``),
at most 128 characters: safe in file names, URLs, shells and review ids."""


def check_run_id(run_id: str) -> str:
    """``run_id`` when it is a valid run id (:data:`RUN_ID_PATTERN`); ConfigError otherwise."""
    if not isinstance(run_id, str) or RUN_ID_PATTERN.fullmatch(run_id) is None or ".." in run_id:
        shown = repr(run_id) if len(str(run_id)) <= 80 else repr(str(run_id)[:80]) + "..."
        raise ConfigError(
            f"invalid run id {shown}: use 1-128 letters, digits, '_', '-' or '.' "
            "(not first, never '..')",
            field="run_id",
        )
    return run_id


def mask_url(target: str | Path) -> str:
    """``target`` as it may be shown: a URL's password replaced by ``***``.

    The one function every message, log line and page uses to name a journal; a path or
    a URL without a password comes back unchanged. A target that cannot be parsed as a
    URL but holds ``@`` loses everything before the last ``@`` (it may be credentials).
    """
    text = str(target)
    if "://" not in text:
        return text
    try:
        parts = urlsplit(text)
        password = parts.password
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        scheme, _, rest = text.partition("://")
        return f"{scheme}://***@{rest.rpartition('@')[2]}" if "@" in rest else text
    if password is None:
        return text
    if ":" in host:
        host = f"[{host}]"
    if port is not None:
        host += f":{port}"
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


def busy_timeout(value: float | None = None) -> float:
    """The busy timeout in seconds: ``value``, else ``$DISSENSUS_JOURNAL_BUSY_TIMEOUT``, else 30."""
    if value is not None:
        return float(value)
    raw = os.environ.get(BUSY_TIMEOUT_ENV)
    if not raw:
        return 30.0
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not (0 <= seconds < float("inf")):
        raise ConfigError(
            f"{BUSY_TIMEOUT_ENV} must be a finite number of seconds >= 0, got {raw!r}"
        )
    return seconds


class JournalError(DissensusError):
    """The journal cannot be used (unreachable, not a dissensus journal, a database error)."""


class JournalConflict(DissensusError):
    """A key was appended again with a different payload (the run is not deterministic)."""


class JournalBusy(JournalError):
    """Another writer held the journal's lock longer than the busy timeout."""


class JournalReadOnly(JournalError):
    """The journal cannot be written (a read-only file or database user)."""

    exit_code = 2


class UnknownRun(DissensusError):
    """No run with that id in this journal."""

    exit_code = 2


class CaseClosed(DissensusError):
    """A claim on a case whose closing event (its resolution) is already journalled."""

    def __init__(self, message: str, *, event: Event) -> None:
        super().__init__(message)
        self.event = event


class RunExists(DissensusError):
    """A new run was given the id of a run the journal already holds."""

    exit_code = 2


class ClaimConflict(DissensusError):
    """Someone else holds an unexpired claim on the review item."""

    def __init__(self, message: str, *, holder: str, expires: str) -> None:
        super().__init__(message)
        self.holder = holder
        self.expires = expires


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


class NewEvent(NamedTuple):
    """An event to append: what happened, its payload, its key and its case."""

    type: str
    payload: dict[str, Any]
    key: str
    case: str | None = None
    text: str | None = None
    """The payload's canonical JSON text when the caller already has it (a worker made
    it): stored and hashed as given, so it must be ``canonical(payload)``."""


class RunHead(NamedTuple):
    """Where a run's chain stands: how many events it holds and the hash of the last."""

    n_events: int
    head_hash: str


class EventLog(Protocol):
    """The append-only, hash-chained log of a run's events: the seam both back ends fill.

    ``append_batch`` writes a block of events in one transaction (the durability point:
    once it returns, every event of the block is committed; a crash before that leaves
    none of them); ``read`` lists a run's events in sequence order; ``head`` says where
    its chain stands. The review index, seals, claims and run locks are kept by the
    journal beside it.
    """

    def append_batch(self, run_id: str, events: Sequence[NewEvent]) -> list[Event]: ...

    def read(
        self, run_id: str, *, type: str | None = None, case: str | None = None
    ) -> Iterator[Event]: ...

    def head(self, run_id: str) -> RunHead: ...


class RunInfo(BaseModel):
    """One run's header."""

    run_id: str
    created: str
    kind: str
    meta: dict[str, Any]
    head_hash: str
    n_events: int


class Claim(BaseModel):
    """Who is working on a review item, until when (UTC ISO-8601)."""

    review_id: str
    run_id: str
    who: str
    claimed_at: str
    expires: str


class RunLock(BaseModel):
    """The process executing a run."""

    run_id: str
    pid: int
    host: str
    acquired: str


class ReviewEntry(BaseModel):
    """One review item as the journal's review index holds it."""

    model_config = ConfigDict(frozen=True)

    review_id: str
    run_id: str
    seq: int
    """Sequence number of the item's ``review.opened`` event in its run."""
    reason: str
    """Why the case was escalated (the item's ``reason``)."""
    resolved_seq: int | None
    """Sequence number of its ``review.resolved`` event; ``None`` while open."""


REVIEW_OPENED = ev.REVIEW_OPENED
REVIEW_RESOLVED = ev.REVIEW_RESOLVED
REVIEW_REOPENED = ev.REVIEW_REOPENED
"""A resolution undone: the item is open again (its index row loses its resolved_seq)."""

ReviewFilter = Literal["open", "resolved", "all"]

SignatureStatus = Literal["signed", "unsigned", "invalid"]


class VerifyReport(BaseModel):
    """Outcome of recomputing a run's hash chain (and, with a public key, its seals)."""

    run_id: str
    ok: bool
    n_events: int
    head_hash: str
    problems: list[str]
    finished: bool = False
    """Whether the chain holds the run's ``run.finished`` event (an unfinished run was
    interrupted, or its tail was removed together with its header fixed)."""
    signature: SignatureStatus | None = None
    """With a public key: ``signed`` (the last event is a valid seal of everything
    before it), ``unsigned`` (no seal, or events after the last seal), ``invalid``."""
    signature_detail: str | None = None


class _Pending:
    """Events written inside the current transaction, reported once it commits."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.seal_runs: list[str] = []


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def _later(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat(timespec="microseconds")


def _strict_loads(text: str) -> Any:
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in items:
            if k in out:
                raise ValueError(f"duplicate key {k!r}")
            out[k] = v
        return out

    return json.loads(text, object_pairs_hook=pairs)


class Journal:
    """The run journal. ``Journal(target)`` opens the back end ``target`` names.

    ``target`` is a ``postgresql://`` URL (:class:`~dissensus.store.postgres.PostgresJournal`)
    or an SQLite file path, ``":memory:"`` for a throw-away one
    (:class:`~dissensus.store.sqlite.SQLiteJournal`). ``after_append`` is called with
    every newly written event once it is committed (progress reporting, fault injection
    in crash tests). ``signer`` seals runs as they close (see the module docstring).
    """

    path: str
    after_append: Callable[[Event], None] | None
    signer: Signer | None

    def __new__(cls, target: str | Path, *args: Any, **kwargs: Any) -> Journal:
        if cls is Journal:
            if is_postgres_url(target):
                from dissensus.store.postgres import PostgresJournal

                return object.__new__(PostgresJournal)
            from dissensus.store.sqlite import SQLiteJournal

            return object.__new__(SQLiteJournal)
        return object.__new__(cls)

    def __init__(
        self,
        target: str | Path,
        *,
        after_append: Callable[[Event], None] | None = None,
        synchronous: str | None = None,
        busy_timeout: float | None = None,
        signer: Signer | None = None,
    ) -> None:  # pragma: no cover - every back end defines its own
        raise NotImplementedError

    # -- what a back end provides --------------------------------------------------------

    _depth: int = 0
    _pending: _Pending | None = None
    _locked_runs: set[str]
    _lock: threading.RLock

    def _rows(self, sql: str, args: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Run a query (``?`` placeholders) and return its rows as dicts."""
        raise NotImplementedError

    def _exec(self, sql: str, args: Sequence[Any] = ()) -> int:
        """Run a statement (``?`` placeholders) and return the number of rows it changed."""
        raise NotImplementedError

    def _append_state(self, run_id: str, key: str) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """Inside the run's write transaction: (the event stored under ``key`` or None,
        the run's ``head_hash`` and ``n_events``)."""
        rows = self._rows("SELECT * FROM events WHERE run_id = ? AND key = ?", (run_id, key))
        if rows:
            return rows[0], {}
        return None, self._rows("SELECT head_hash, n_events FROM runs WHERE run_id = ?", (run_id,))[
            0
        ]

    def _write_event(self, row: tuple[Any, ...]) -> None:
        """Inside the run's write transaction: insert the event row and move the run's head."""
        self._exec(
            "INSERT INTO events (run_id, seq, key, type, case_ref, at, payload, prev_hash, hash) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            row,
        )
        self._exec(
            "UPDATE runs SET head_hash = ?, n_events = ? WHERE run_id = ?",
            (row[8], row[1] + 1, row[0]),
        )

    def _batch_state(
        self, run_id: str, keys: Sequence[str]
    ) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
        """Inside the run's write transaction: (the events stored under any of ``keys``, by
        key; the run's ``head_hash`` and ``n_events``)."""
        head = self._rows("SELECT head_hash, n_events FROM runs WHERE run_id = ?", (run_id,))[0]
        found: dict[str, dict[str, Any]] = {}
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), 500):
            chunk = unique[start : start + 500]
            marks = ", ".join("?" * len(chunk))
            for row in self._rows(
                f"SELECT * FROM events WHERE run_id = ? AND key IN ({marks})", [run_id, *chunk]
            ):
                found[str(row["key"])] = row
        return found, head

    def _write_events(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """Inside the run's write transaction: insert consecutive event rows of one run and
        move its head to the last of them."""
        for row in rows:
            self._write_event(row)

    def _write_index(self, sql: str, args: Sequence[Any]) -> None:
        """Inside the write transaction: a statement on the review index (after the event's)."""
        self._exec(sql, args)

    def _lock_review_index(self) -> None:
        """Inside a write transaction: keep other writers off the review index until commit."""

    _review_index_ok: bool = True
    """False when the index disagrees with the events and could not be rebuilt (read-only)."""
    _index_rebuilt_for: tuple[str, ...] = ()
    """Review ids whose index row differed from the events when the journal was opened."""

    def _begin(self) -> None:
        raise NotImplementedError

    def _commit(self) -> None:
        raise NotImplementedError

    def _rollback(self) -> None:
        raise NotImplementedError

    def _lock_run(self, run_id: str) -> bool:
        """Inside a write transaction: lock the run's header; False when there is no such run."""
        raise NotImplementedError

    def _claim_row(self, review_id: str) -> tuple[bool, dict[str, Any] | None]:
        """Inside a write transaction: (locked_by_someone_else, current claim row)."""
        raise NotImplementedError

    def _errors(self) -> Any:
        """A context manager translating driver errors into :class:`JournalError`."""
        raise NotImplementedError

    def schema(self) -> dict[str, Any]:
        """The journal's schema revision, this version's, pending revisions and the
        revision history (:mod:`~dissensus.store.migrations`)."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def acquire_run_lock(self, run_id: str, pid: int | None = None) -> RunLock | None:
        """Take the run's execution lock for ``pid`` (default: this process).

        Returns ``None`` when taken, else the holder. A holder on this host whose
        process is gone is replaced. Released by :meth:`release_run_lock`.
        """
        raise NotImplementedError

    def release_run_lock(self, run_id: str, pid: int | None = None) -> None:
        """Release the run's execution lock if ``pid`` (default: this process) holds it."""
        raise NotImplementedError

    # -- transactions ------------------------------------------------------------------

    @contextmanager
    def transaction(self, run_id: str | None = None) -> Iterator[None]:
        """One write transaction, holding ``run_id``'s write lock: everything inside
        commits together or not at all. Nested calls join the outer transaction.

        A journal object may be shared by threads: a transaction holds the object's
        lock, so another thread's statements wait for it to end."""
        with self._lock, self._transaction(run_id):
            yield

    @contextmanager
    def _transaction(self, run_id: str | None) -> Iterator[None]:
        if self._depth:
            if run_id is not None and run_id not in self._locked_runs:
                with self._errors():
                    if not self._lock_run(run_id):
                        raise UnknownRun(f"no run {run_id!r} in journal {self.path}")
                self._locked_runs.add(run_id)
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        pending = _Pending()
        with self._errors():
            self._begin()
        self._depth = 1
        self._pending = pending
        self._locked_runs = set()
        try:
            if run_id is not None:
                with self._errors():
                    found = self._lock_run(run_id)
                if not found:
                    raise UnknownRun(f"no run {run_id!r} in journal {self.path}")
                self._locked_runs.add(run_id)
            yield
            with self._errors():
                self._commit()
        except BaseException:
            with suppress(Exception):  # the first error is the one to report
                self._rollback()
            raise
        finally:
            self._depth = 0
            self._pending = None
            self._locked_runs = set()
        for event in pending.events:
            if self.after_append is not None:
                self.after_append(event)
        for sealed_run in dict.fromkeys(pending.seal_runs):
            self.seal(sealed_run)

    # -- runs -------------------------------------------------------------------------

    def create_run(
        self,
        run_id: str,
        *,
        kind: str,
        meta: dict[str, Any],
        first: tuple[str, dict[str, Any], str] | None = None,
        exclusive: bool = False,
    ) -> RunInfo:
        """Register a run (idempotent for the same id unless ``exclusive``).

        ``first`` = ``(type, payload, key)`` is appended in the same transaction, so a
        crash leaves either no run or a run with its first event. ``exclusive`` raises
        :class:`RunExists` when the id is taken (two ``decide --run-id x`` at once: one
        wins, the other fails cleanly).
        """
        check_run_id(run_id)
        with self.transaction():
            existing = self.run(run_id, missing_ok=True)
            if existing is not None:
                if exclusive:
                    raise RunExists(
                        f"run {run_id!r} already exists in {self.path}; resume it with 'dissensus runs resume'"
                    )
            else:
                with self._errors():
                    changed = self._exec(
                        "INSERT INTO runs (run_id, created, kind, meta, head_hash, n_events) "
                        "VALUES (?, ?, ?, ?, ?, 0) ON CONFLICT (run_id) DO NOTHING",
                        (run_id, _now(), kind, canonical(meta), GENESIS),
                    )
                if not changed and exclusive:
                    raise RunExists(f"run {run_id!r} already exists in {self.path}")
            if first is not None:
                type_, payload, key = first
                self.append(run_id, type_, payload, key=key)
        info = self.run(run_id)
        assert info is not None
        return info

    def run(self, run_id: str, *, missing_ok: bool = False) -> RunInfo | None:
        with self._errors():
            rows = self._rows("SELECT * FROM runs WHERE run_id = ?", (run_id,))
        if not rows:
            if missing_ok:
                return None
            raise UnknownRun(f"no run {run_id!r} in journal {self.path}")
        row = rows[0]
        return RunInfo(
            run_id=row["run_id"],
            created=row["created"],
            kind=row["kind"],
            meta=json.loads(row["meta"]),
            head_hash=row["head_hash"],
            n_events=int(row["n_events"]),
        )

    def runs(self) -> list[RunInfo]:
        """Every run, oldest first."""
        with self._errors():
            ids = [
                r["run_id"] for r in self._rows("SELECT run_id FROM runs ORDER BY created, run_id")
            ]
        out = []
        for run_id in ids:
            info = self.run(run_id)
            assert info is not None
            out.append(info)
        return out

    # -- events -----------------------------------------------------------------------

    def append(
        self, run_id: str, type: str, payload: dict[str, Any], *, key: str, case: str | None = None
    ) -> Event:
        """Append one event (or return the stored one when ``key`` is already there)."""
        return self.append_batch(run_id, [NewEvent(type, payload, key, case)])[0]

    def append_batch(self, run_id: str, events: Sequence[NewEvent]) -> list[Event]:
        """Append ``events`` to the run in order, in one transaction (one commit, hence one
        fsync under SQLite's ``synchronous=full``): all of them or none.

        Each event chains on the one before it exactly as single appends would; a key
        the run already holds (or one repeated earlier in the batch) is not written again
        and its stored event is returned in its place, after checking the payload is the
        same (:class:`JournalConflict` otherwise). Returns the events in the given order.
        """
        items = list(events)
        if not items:
            return []
        texts = [item.text if item.text is not None else canonical(item.payload) for item in items]
        with self.transaction(run_id):
            with self._errors():
                if len(items) == 1:
                    found, head = self._append_state(run_id, items[0].key)
                    existing = {items[0].key: found} if found is not None else {}
                else:
                    existing, head = self._batch_state(run_id, [i.key for i in items])
            seq = int(head["n_events"]) if head else 0
            prev = str(head["head_hash"]) if head else GENESIS
            at = _now()
            out: list[Event] = []
            rows: list[tuple[Any, ...]] = []
            written: dict[str, tuple[str, Event]] = {}
            fresh: list[Event] = []
            for item, text in zip(items, texts, strict=True):
                stored = existing.get(item.key)
                if stored is not None:
                    if stored["payload"] != text:
                        raise JournalConflict(
                            f"run {run_id}: event {item.key!r} was journalled with a different payload"
                        )
                    out.append(_row_event(stored))
                    continue
                again = written.get(item.key)
                if again is not None:
                    if again[0] != text:
                        raise JournalConflict(
                            f"run {run_id}: event {item.key!r} appears twice in a batch with "
                            "different payloads"
                        )
                    out.append(again[1])
                    continue
                digest = event_hash(
                    prev,
                    run=run_id,
                    seq=seq,
                    key=item.key,
                    type=item.type,
                    case=item.case,
                    at=at,
                    payload_text=text,
                )
                rows.append((run_id, seq, item.key, item.type, item.case, at, text, prev, digest))
                event = Event.model_construct(
                    run_id=run_id,
                    seq=seq,
                    key=item.key,
                    type=item.type,
                    case=item.case,
                    at=at,
                    payload=item.payload,
                    prev_hash=prev,
                    hash=digest,
                )
                written[item.key] = (text, event)
                fresh.append(event)
                out.append(event)
                prev = digest
                seq += 1
            if rows:
                with self._errors():
                    self._write_events(rows)
                    for event in fresh:
                        if event.type in (REVIEW_OPENED, REVIEW_RESOLVED, REVIEW_REOPENED):
                            self._index_review(run_id, event.seq, event.type, event.payload)
                assert self._pending is not None
                self._pending.events.extend(fresh)
                if self.signer is not None and any(e.type in SEAL_AFTER for e in fresh):
                    self._pending.seal_runs.append(run_id)
        return out

    def head(self, run_id: str) -> RunHead:
        """The run's number of events and the hash of its last one (:class:`UnknownRun`
        when there is no such run)."""
        info = self.run(run_id)
        assert info is not None
        return RunHead(n_events=info.n_events, head_hash=info.head_hash)

    def read(
        self, run_id: str, *, type: str | None = None, case: str | None = None
    ) -> Iterator[Event]:
        """The run's events in sequence order (:meth:`events`; the :class:`EventLog` name)."""
        return self.events(run_id, type=type, case=case)

    def seal(self, run_id: str) -> Event | None:
        """Sign the run's current head with the journal's signer (``None`` without one,
        or when the last event already is a seal)."""
        signer = self.signer
        if signer is None:
            return None
        with self.transaction(run_id):
            info = self.run(run_id)
            assert info is not None
            if info.n_events:
                last = self._rows(
                    "SELECT type FROM events WHERE run_id = ? AND seq = ?",
                    (run_id, info.n_events - 1),
                )
                if last and last[0]["type"] == SEAL_TYPE:
                    return None
            claim = {"run": run_id, "n_events": info.n_events, "head": info.head_hash}
            payload = {**claim, "signature": signer.sign_text(canonical(claim))}
            return self.append(run_id, SEAL_TYPE, payload, key=f"seal/{info.n_events}")

    def get(self, run_id: str, key: str) -> Event | None:
        """The event stored under ``key``, if any."""
        with self._errors():
            rows = self._rows("SELECT * FROM events WHERE run_id = ? AND key = ?", (run_id, key))
        return _row_event(rows[0]) if rows else None

    def events(
        self, run_id: str, *, type: str | None = None, case: str | None = None
    ) -> Iterator[Event]:
        """A run's events in sequence order, optionally filtered by type and case."""
        sql = "SELECT * FROM events WHERE run_id = ?"
        args: list[Any] = [run_id]
        if type is not None:
            sql += " AND type = ?"
            args.append(type)
        if case is not None:
            sql += " AND case_ref = ?"
            args.append(case)
        with self._errors():
            if case is None:
                rows = self._rows(sql + " ORDER BY seq", args)
            else:
                # Sorted here: with ORDER BY in the query SQLite walks the run's events in
                # sequence order instead of looking the case up in its index.
                rows = sorted(self._rows(sql, args), key=lambda r: int(r["seq"]))
        for row in rows:
            yield _row_event(row)

    def events_of_type(self, type: str) -> Iterator[Event]:
        """Every event of ``type`` across runs (run order, then sequence)."""
        with self._errors():
            rows = self._rows(
                "SELECT e.* FROM events e JOIN runs r ON r.run_id = e.run_id WHERE e.type = ? "
                "ORDER BY r.created, e.run_id, e.seq",
                (type,),
            )
        for row in rows:
            yield _row_event(row)

    # -- review index -------------------------------------------------------------------

    def _index_review(self, run_id: str, seq: int, type: str, payload: dict[str, Any]) -> None:
        """Inside the append's transaction: the index row an ``review.*`` event derives."""
        review_id = payload.get("review_id")
        if not isinstance(review_id, str):
            return
        if type == REVIEW_OPENED:
            self._write_index(
                "INSERT INTO review_index (review_id, run_id, opened_seq, reason, resolved_seq) "
                "VALUES (?, ?, ?, ?, NULL) ON CONFLICT (review_id) DO NOTHING",
                (review_id, run_id, seq, str(payload.get("reason", ""))),
            )
        elif type == REVIEW_REOPENED:
            self._write_index(
                "UPDATE review_index SET resolved_seq = NULL WHERE review_id = ? AND run_id = ?",
                (review_id, run_id),
            )
        else:
            self._write_index(
                "UPDATE review_index SET resolved_seq = ? "
                "WHERE review_id = ? AND run_id = ? AND resolved_seq IS NULL",
                (seq, review_id, run_id),
            )

    def rebuild_review_index(self) -> int:
        """Recompute the review index from the ``review.*`` events; the number of items."""
        with self.transaction():
            with self._errors():
                self._lock_review_index()
                self._exec("DELETE FROM review_index")
                rows = self._rows(
                    "SELECT run_id, seq, type, payload FROM events WHERE type IN (?, ?, ?) "
                    "ORDER BY run_id, seq",
                    (REVIEW_OPENED, REVIEW_RESOLVED, REVIEW_REOPENED),
                )
            for row in rows:
                payload = json.loads(row["payload"])
                if isinstance(payload, dict):
                    with self._errors():
                        self._index_review(
                            str(row["run_id"]), int(row["seq"]), row["type"], payload
                        )
            with self._errors():
                count = self._rows("SELECT COUNT(*) AS n FROM review_index")[0]["n"]
        return int(count)

    def _json_text(self, column: str, key: str) -> str:
        """SQL for the text of top-level ``key`` of the JSON text in ``column``."""
        return f"json_extract({column}, '$.{key}')"

    def review_index_differences(
        self, run_id: str | None = None, *, thorough: bool = True
    ) -> list[str]:
        """The review ids whose index row differs from what the events derive, by
        content (at most 20 named): item, run, position and resolving event, and with
        ``thorough`` the reason too.

        The database compares, so no payload is sent over. ``thorough`` reads each
        item's id and reason from its event's payload (a JSON function per back end),
        exactly as :meth:`rebuild_review_index` does. Without it (the check made on every
        open) the id is the event's run and case (``<run>.<line>``, what every review
        event of this program carries), no payload is parsed, and each opened event is
        matched with its index row and its resolution through the tables' keys.

        An item's resolving event is its standing one: the first ``review.resolved`` after
        its last ``review.reopened`` (none when it was reopened last), the row
        :meth:`rebuild_review_index` writes.
        """
        if thorough:
            return self._index_differences_thorough(run_id)
        scope = " AND o.run_id = ?" if run_id is not None else ""
        args: list[Any] = [REVIEW_REOPENED, REVIEW_RESOLVED, REVIEW_OPENED]
        args += [run_id] if run_id else []
        rid = "o.run_id || '.' || o.case_ref"
        mismatched = (
            f"SELECT {rid} AS review_id FROM events o "
            "LEFT JOIN (SELECT run_id, case_ref, MAX(seq) AS zseq FROM events WHERE type = ? "
            "GROUP BY run_id, case_ref) z ON z.run_id = o.run_id AND z.case_ref = o.case_ref "
            "LEFT JOIN events r ON r.run_id = o.run_id AND r.case_ref = o.case_ref AND r.type = ? "
            "AND r.seq > COALESCE(z.zseq, -1) "
            f"LEFT JOIN review_index q ON q.review_id = {rid} "
            f"WHERE o.type = ? AND o.case_ref IS NOT NULL{scope} AND (q.review_id IS NULL "
            f"OR q.run_id <> o.run_id OR q.opened_seq <> o.seq "
            f"OR {self._distinct('q.resolved_seq', 'r.seq')}) LIMIT 20"
        )
        extra = (
            "SELECT q.review_id FROM review_index q LEFT JOIN events o ON o.run_id = q.run_id "
            f"AND o.seq = q.opened_seq AND o.type = ? AND {rid} = q.review_id "
            "WHERE o.seq IS NULL"
            + (" AND q.run_id = ?" if run_id is not None else "")
            + " LIMIT 20"
        )
        with self._errors():
            found = [str(r["review_id"]) for r in self._rows(mismatched, args)]
            found += [
                str(r["review_id"])
                for r in self._rows(extra, [REVIEW_OPENED] + ([run_id] if run_id else []))
            ]
        return sorted(set(found))[:20]

    def _distinct(self, left: str, right: str) -> str:
        """SQL: ``left`` and ``right`` differ, NULL being a value."""
        return f"{left} IS NOT {right}"

    def _index_differences_thorough(self, run_id: str | None) -> list[str]:
        rid = self._json_text("payload", "review_id")
        reason = f"COALESCE({self._json_text('payload', 'reason')}, '')"
        scope = " AND run_id = ?" if run_id is not None else ""
        run_args: list[Any] = [run_id] if run_id is not None else []
        of_type = f"SELECT run_id, seq, {rid} AS rid FROM events WHERE type = ?{scope}"
        sql = (
            f"WITH o AS (SELECT run_id, seq, {rid} AS rid, {reason} AS reason FROM events "
            f"WHERE type = ?{scope}), "
            f"s AS ({of_type}), "
            f"z AS (SELECT run_id, rid, MAX(seq) AS zseq FROM ({of_type}) x GROUP BY run_id, rid), "
            "r AS (SELECT s.run_id, s.rid, MIN(s.seq) AS rseq FROM s LEFT JOIN z "
            "ON z.run_id = s.run_id AND z.rid = s.rid WHERE s.seq > COALESCE(z.zseq, -1) "
            "GROUP BY s.run_id, s.rid), "
            "d AS (SELECT o.rid AS review_id, o.run_id, o.seq AS opened_seq, o.reason, "
            "r.rseq AS resolved_seq FROM o LEFT JOIN r ON r.run_id = o.run_id AND r.rid = o.rid "
            "WHERE o.rid IS NOT NULL), "
            "q AS (SELECT review_id, run_id, opened_seq, reason, resolved_seq FROM review_index"
            + (" WHERE run_id = ?" if run_id is not None else "")
            + ") "
            "SELECT review_id FROM (SELECT * FROM d EXCEPT SELECT * FROM q) a UNION "
            "SELECT review_id FROM (SELECT * FROM q EXCEPT SELECT * FROM d) b "
            "ORDER BY review_id LIMIT 20"
        )
        args = [
            REVIEW_OPENED,
            *run_args,
            REVIEW_RESOLVED,
            *run_args,
            REVIEW_REOPENED,
            *run_args,
            *run_args,
        ]
        with self._errors():
            rows = self._rows(sql, args)
        return [str(r["review_id"]) for r in rows]

    def review_index_agrees(self) -> bool:
        """Whether every row of the review index is what the events derive (by content)."""
        return not self.review_index_differences()

    def _check_review_index(self) -> None:
        """On opening: rebuild an index whose content disagrees with the events (when
        writable; a read-only journal then lists its queue from the events). The items
        that differed are kept for :meth:`verify` to report."""
        # The cheap check first; the thorough one (the rebuild's own derivation) decides,
        # so a journal whose events do not fit the cheap one is not rebuilt on every open.
        if not self.review_index_differences(thorough=False):
            return
        differing = self.review_index_differences()
        if not differing:
            return
        self._index_rebuilt_for = tuple(differing)
        try:
            self.rebuild_review_index()
        except JournalReadOnly:
            self._review_index_ok = False

    def _index_problems(self, run_id: str) -> list[str]:
        """What :meth:`verify` reports about the run's rows of the review index (checked
        thoroughly, reasons included; a writable journal's index is then rebuilt)."""
        now = self.review_index_differences(run_id)
        if not self._review_index_ok:
            return [
                f"review index row of {rid} differs from the events (read-only: not rebuilt; "
                "the queue is listed from the events)"
                for rid in now
            ]
        if now:
            with suppress(JournalReadOnly):
                self.rebuild_review_index()
        return [
            f"review index row of {rid} differed from the events (rebuilt from the events)"
            for rid in sorted(
                {*now, *(r for r in self._index_rebuilt_for if r.rpartition(".")[0] == run_id)}
            )
        ]

    def review_entries(
        self, *, run_id: str | None = None, status: ReviewFilter = "all", limit: int | None = None
    ) -> list[ReviewEntry] | None:
        """Review items in queue order (oldest run first, then by position in the run),
        from the review index; ``None`` when the index cannot be trusted (read-only journal
        whose index disagrees with its events: list from the events instead); at most
        ``limit`` of them."""
        if not self._review_index_ok:
            return None
        sql = (
            "SELECT q.review_id, q.run_id, q.opened_seq, q.reason, q.resolved_seq "
            "FROM review_index q JOIN runs r ON r.run_id = q.run_id"
        )
        where: list[str] = []
        args: list[Any] = []
        if run_id is not None:
            where.append("q.run_id = ?")
            args.append(run_id)
        if status == "open":
            where.append("q.resolved_seq IS NULL")
        elif status == "resolved":
            where.append("q.resolved_seq IS NOT NULL")
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY r.created, q.run_id, q.opened_seq"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(int(limit))
        with self._errors():
            rows = self._rows(sql, args)
        return [
            ReviewEntry(
                review_id=str(r["review_id"]),
                run_id=str(r["run_id"]),
                seq=int(r["opened_seq"]),
                reason=str(r["reason"]),
                resolved_seq=None if r["resolved_seq"] is None else int(r["resolved_seq"]),
            )
            for r in rows
        ]

    def event_at(self, run_id: str, seq: int) -> Event | None:
        """The run's event with sequence number ``seq``, if any."""
        return self.events_at([(run_id, seq)]).get((run_id, seq))

    def events_at(self, refs: Sequence[tuple[str, int]]) -> dict[tuple[str, int], Event]:
        """The events at ``(run_id, seq)`` positions, read in one query per 100."""
        out: dict[tuple[str, int], Event] = {}
        refs = list(dict.fromkeys(refs))
        for start in range(0, len(refs), 100):
            chunk = refs[start : start + 100]
            where = " OR ".join(["(run_id = ? AND seq = ?)"] * len(chunk))
            with self._errors():
                rows = self._rows(
                    f"SELECT * FROM events WHERE {where}", [x for ref in chunk for x in ref]
                )
            for row in rows:
                event = _row_event(row)
                out[(event.run_id, event.seq)] = event
        return out

    # -- review claims ------------------------------------------------------------------

    def claim(
        self,
        review_id: str,
        who: str,
        ttl: float,
        *,
        run_id: str,
        closed_by: str | None = None,
    ) -> Claim:
        """Claim ``review_id`` for ``who`` for ``ttl`` seconds (renewing one's own claim).

        :class:`ClaimConflict` when someone else holds an unexpired claim (naming who);
        :class:`CaseClosed` when the run holds the event keyed ``closed_by`` (the case's
        resolution). With ``closed_by`` the claim holds the run's write lock, as a
        resolution does, so a claim and a resolution of one case never interleave: a
        claim is never granted on a case resolved before it.
        """
        if not who.strip():
            raise DissensusError("a claim needs a reviewer name")
        if not (0 < ttl < float("inf")):
            raise DissensusError(f"claim time must be a positive number of seconds, got {ttl!r}")
        with self.transaction(run_id if closed_by is not None else None):
            if closed_by is not None and (closing := self.get(run_id, closed_by)) is not None:
                raise CaseClosed(f"review item {review_id} is closed", event=closing)
            busy, row = self._claim_row(review_id)
            now = _now()
            if busy:
                raise ClaimConflict(
                    f"review item {review_id} is being claimed by someone else",
                    holder="?",
                    expires=now,
                )
            if row is not None and row["who"] != who and str(row["expires"]) > now:
                raise ClaimConflict(
                    f"review item {review_id} is claimed by {row['who']} until {row['expires']}",
                    holder=str(row["who"]),
                    expires=str(row["expires"]),
                )
            claim = Claim(
                review_id=review_id, run_id=run_id, who=who, claimed_at=now, expires=_later(ttl)
            )
            with self._errors():
                changed = self._exec(
                    "INSERT INTO claims (review_id, run_id, who, claimed_at, expires) VALUES (?, ?, ?, ?, ?) "
                    "ON CONFLICT (review_id) DO UPDATE SET run_id = excluded.run_id, who = excluded.who, "
                    "claimed_at = excluded.claimed_at, expires = excluded.expires "
                    "WHERE claims.who = excluded.who OR claims.expires <= ?",
                    (
                        claim.review_id,
                        claim.run_id,
                        claim.who,
                        claim.claimed_at,
                        claim.expires,
                        now,
                    ),
                )
            if not changed:
                # Someone else's claim was committed while this one waited for it: name them.
                with self._errors():
                    rows = self._rows(
                        "SELECT who, expires FROM claims WHERE review_id = ?", (review_id,)
                    )
                holder = str(rows[0]["who"]) if rows else "?"
                until = str(rows[0]["expires"]) if rows else now
                raise ClaimConflict(
                    f"review item {review_id} was just claimed by {holder} until {until}",
                    holder=holder,
                    expires=until,
                )
        return claim

    def current_claim(self, review_id: str) -> Claim | None:
        """The unexpired claim on ``review_id``, if any."""
        with self._errors():
            rows = self._rows(
                "SELECT * FROM claims WHERE review_id = ? AND expires > ?", (review_id, _now())
            )
        return Claim.model_validate(rows[0]) if rows else None

    def current_claims(self, review_ids: Sequence[str]) -> dict[str, Claim]:
        """The unexpired claims on ``review_ids`` (one query per 100 ids)."""
        out: dict[str, Claim] = {}
        ids = list(dict.fromkeys(review_ids))
        now = _now()
        for start in range(0, len(ids), 100):
            chunk = ids[start : start + 100]
            marks = ", ".join("?" * len(chunk))
            with self._errors():
                rows = self._rows(
                    f"SELECT * FROM claims WHERE review_id IN ({marks}) AND expires > ?",
                    [*chunk, now],
                )
            for row in rows:
                claim = Claim.model_validate(row)
                out[claim.review_id] = claim
        return out

    def release_claim(self, review_id: str, who: str | None = None) -> None:
        """Drop the claim on ``review_id`` (only ``who``'s, when given)."""
        with self.transaction(), self._errors():
            if who is None:
                self._exec("DELETE FROM claims WHERE review_id = ?", (review_id,))
            else:
                self._exec("DELETE FROM claims WHERE review_id = ? AND who = ?", (review_id, who))

    # -- verification -----------------------------------------------------------------

    def verify(self, run_id: str, *, public_key: PublicKey | None = None) -> VerifyReport:
        """Recompute the run's hash chain; compare it with the stored text, hashes and head.

        With ``public_key``, also check the run's seals (:attr:`VerifyReport.signature`).
        """
        info = self.run(run_id)
        assert info is not None
        with self._errors():
            rows = self._rows("SELECT * FROM events WHERE run_id = ? ORDER BY seq", (run_id,))
        problems: list[str] = []
        prev = GENESIS
        count = 0
        finished = False
        seals: list[tuple[int, dict[str, Any]]] = []
        for row in rows:
            seq, key = int(row["seq"]), str(row["key"])
            where = f"event {seq} ({key})"
            if seq != count:
                problems.append(f"event {count}: sequence gap (found seq {seq})")
            if row["prev_hash"] != prev:
                problems.append(f"{where}: prev_hash does not match the previous event")
            try:
                payload = _strict_loads(str(row["payload"]))
                text = canonical(payload)
            except ValueError as exc:
                problems.append(f"{where}: stored payload is not valid canonical JSON ({exc})")
                prev = str(row["hash"])
                count += 1
                continue
            if text != row["payload"]:
                problems.append(f"{where}: stored payload text is not its canonical JSON")
            body = {
                "run": row["run_id"],
                "seq": seq,
                "key": key,
                "type": row["type"],
                "case": row["case_ref"],
                "at": row["at"],
                "payload": payload,
            }
            if chain_hash(prev, body) != row["hash"]:
                problems.append(f"{where}: content does not match its hash")
            if row["type"] == ev.RUN_FINISHED:
                finished = True
            if row["type"] == SEAL_TYPE and isinstance(payload, dict):
                seals.append((seq, payload))
                if (
                    payload.get("n_events") != seq
                    or payload.get("head") != prev
                    or payload.get("run") != run_id
                ):
                    problems.append(f"{where}: seal does not describe the chain before it")
            prev = str(row["hash"])
            count += 1
        if count != info.n_events:
            problems.append(f"run header counts {info.n_events} events, journal holds {count}")
        if prev != info.head_hash:
            problems.append("run head hash does not match the last event")
        problems.extend(self._index_problems(run_id))
        report = VerifyReport(
            run_id=run_id,
            ok=not problems,
            n_events=count,
            head_hash=prev,
            problems=problems,
            finished=finished,
        )
        if public_key is not None:
            status, detail = _seal_status(run_id, seals, count, public_key)
            report.signature = status
            report.signature_detail = detail
        return report

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers for back ends ----------------------------------------------------------

    def _lock_holder(self, row: dict[str, Any] | None) -> RunLock | None:
        """The live holder described by a run-lock row (``None``: free or stale)."""
        if row is None:
            return None
        lock = RunLock(
            run_id=row["run_id"], pid=int(row["pid"]), host=row["host"], acquired=row["acquired"]
        )
        if lock.host == socket.gethostname() and not _pid_alive(lock.pid):
            return None
        return lock


def _pid_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host is running: a zombie (killed, not yet reaped by
    its parent, as right after ``kill -9``) is not."""
    if pid <= 0:
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


def _seal_status(
    run_id: str, seals: list[tuple[int, dict[str, Any]]], count: int, public_key: PublicKey
) -> tuple[SignatureStatus, str]:
    from dissensus.signing import verify_text

    if not seals:
        return "unsigned", "the run has no seal"
    for seq, payload in seals:
        claim = {k: payload.get(k) for k in ("run", "n_events", "head")}
        signature = payload.get("signature")
        if (
            not isinstance(signature, dict)
            or verify_text(canonical(claim), signature, public_key) != "valid"
        ):
            return "invalid", f"seal at event {seq} does not verify with this public key"
    last_seq = seals[-1][0]
    if last_seq != count - 1:
        return (
            "unsigned",
            f"{count - 1 - last_seq} event(s) after the last seal (event {last_seq}) are unsigned",
        )
    return (
        "signed",
        f"head signed at event {last_seq} covering {seals[-1][1].get('n_events')} event(s)",
    )


def _row_event(row: dict[str, Any]) -> Event:
    return Event(
        run_id=row["run_id"],
        seq=int(row["seq"]),
        key=row["key"],
        type=row["type"],
        case=row["case_ref"],
        at=row["at"],
        payload=json.loads(row["payload"]),
        prev_hash=row["prev_hash"],
        hash=row["hash"],
    )


def open_journal(
    target: str | Path | None = None,
    *,
    after_append: Callable[[Event], None] | None = None,
    busy_timeout: float | None = None,
    signer: Signer | None = None,
) -> Journal:
    """Open the journal ``target`` names (a path or ``postgresql://`` URL; default
    :func:`journal_path`)."""
    resolved = journal_path(str(target) if target is not None else None)
    return Journal(resolved, after_append=after_append, busy_timeout=busy_timeout, signer=signer)
