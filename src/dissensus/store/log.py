"""The event log: runs and their append-only, hash-chained events, over a back end.

:class:`EventLog` is the seam (append a batch, read, head), after LangGraph's checkpoint
savers: a few methods, and everything else of the journal (the chain's verification,
seals, the review index, claims, run locks) kept by services beside it.
:class:`SQLEventLog` implements it, and the runs' headers, over either
:class:`~dissensus.store.backend.Backend`.

Choices this module makes:

* **Idempotent keys.** Appending a key that the run already holds returns the stored
  event and writes nothing, after checking the payload is the same
  (:class:`~dissensus.store.errors.JournalConflict` otherwise). A resumed run replays
  its deterministic steps and only the missing events are written.
* **Group commit.** :meth:`SQLEventLog.append_batch` appends a block of events in one
  transaction (one commit, one fsync under SQLite's ``synchronous=full``), each chained
  on the one before it exactly as single appends would be; the commit is the durability
  point (all of the block or none).
* **Head anchor.** ``runs.head_hash`` and ``runs.n_events`` change in the same
  transaction as each append; verification checks them against the chain.
* **One timestamp per block.** Every event of a batch carries the same ``at``.
  Timestamps are part of the hashed event but never of a final record, so a resumed
  run and an uninterrupted one end with the same records.
* **What an append derives** (the review index's rows) is written by the ``on_write``
  callbacks inside the append's transaction, after the events' rows.
* **A new run is not read back.** When :meth:`SQLEventLog.create_run` inserts the run,
  its first event is chained on the genesis hash without asking the back end where the
  chain stands or which keys it holds, the run's write lock is the insert's, and the
  header returned is the one inserted: three round trips fewer per run on PostgreSQL
  (a single-panel request is a run of its own). A run that already existed is read and
  appended to as any other.
* **A run's header time is its first event's.** A run created with its first event
  stores one reading of the clock as both its ``created`` and the event's ``at``, so
  verification can compare the header with the event it was made from
  (:mod:`~dissensus.store.run_header`).
* **Ids no run can have are not looked up.** A run is created only under a valid run id
  (:func:`~dissensus.store.targets.check_run_id`), so every lookup by run id here
  (:meth:`SQLEventLog.run`, which every door's lookup of a run goes through, and the
  reads of a run's events) answers an id that is none (one holding a NUL, say) as it
  answers a run the journal does not hold, without querying: no run
  (:class:`~dissensus.store.errors.UnknownRun`, saying why no run can have that id),
  no events. PostgreSQL's text cannot hold a NUL, and asking it about one was a
  :class:`~dissensus.store.errors.JournalError` (a 503 on the service) where SQLite
  answered 404.
* **A run is read a page at a time.** :meth:`SQLEventLog.read` (every type, or one
  type) and :meth:`SQLEventLog.rows` (what verification reads) ask for :data:`PAGE`
  events at a time, each page a query of its own after the last sequence number the
  one before it ended on (keyset pages on the ``(run_id, seq)`` key, the same SQL on
  both back ends), so reading a run of any length holds one page in memory. No page
  holds anything between pages: no transaction stays open (a PostgreSQL read is an
  autocommit statement; an SQLite read in WAL mode never blocks a writer), and the
  journal object's lock is taken per page, so another thread's statement goes
  between two pages. A page ends on the stored sequence number as it is, so a
  sequence number edited into text (SQLite keeps it) still comes once, after the
  numbers, as ``ORDER BY seq`` puts it, and verification names it. A run appended
  to while it is read is read to its end as it stands when the last page is asked
  for. A case's events (``read(case=...)``, a handful) are one query.
  :meth:`SQLEventLog.refs_after` pages the same way over only the sequence numbers and
  cases of one type's events (how a replay learns the order its records were journalled
  in without reading them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, cast

from dissensus.errors import ConfigError
from dissensus.quoting import quote_short
from dissensus.store import clock
from dissensus.store.backend import Backend, Row
from dissensus.store.canonical import GENESIS, EventHasher, canonical
from dissensus.store.errors import JournalConflict, RunExists, UnknownRun
from dissensus.store.events import (
    Event,
    EventRow,
    EventValues,
    NewEvent,
    RunHead,
    RunInfo,
    RunRow,
    event_from_row,
    run_from_row,
    stored_int,
    written_event,
)
from dissensus.store.targets import check_run_id, journal_option, may_be_held
from dissensus.store.transactions import Transactions

__all__ = ["PAGE", "EventLog", "SQLEventLog"]

PAGE = 1000
"""Events a read of a whole run (or of one type in it) asks the back end for at a time."""


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


class SQLEventLog:
    """The event log and the runs' headers in a back end's ``runs`` and ``events`` tables."""

    def __init__(self, backend: Backend, transactions: Transactions) -> None:
        self._backend = backend
        self._tx = transactions
        self.on_write: list[Callable[[str, Sequence[Event]], None]] = []
        """Called inside an append's transaction with the events it wrote to a run."""

    def _event_rows(self, sql: str, args: Sequence[Any] = ()) -> list[EventRow]:
        with self._backend.errors():
            # Every query given here selects whole rows of ``events``.
            return cast("list[EventRow]", self._backend.rows(sql, args))

    # -- runs -------------------------------------------------------------------------

    def create_run(
        self,
        run_id: str,
        *,
        kind: str,
        meta: dict[str, Any],  # JSON passing through: stored as canonical text
        first: NewEvent | None = None,
        exclusive: bool = False,
        then: Sequence[NewEvent] = (),
    ) -> RunInfo:
        """Register a run (idempotent for the same id unless ``exclusive``), with its
        ``first`` event in the same transaction, and the events ``then`` after it (as
        :meth:`append_batch` appends them; to a run it creates, in one write with the
        first)."""
        check_run_id(run_id)
        backend = self._backend
        exists = (
            f"run {run_id!r} already exists in {backend.path}; resume it with: "
            f"dissensus runs resume {run_id}{journal_option(backend.path)}"
        )
        with self._tx.transaction():
            # An exclusive creation asks nothing first: the insert says whether it is new.
            existing = None if exclusive else self.run(run_id, missing_ok=True)
            if existing is not None:
                self.append_batch(run_id, [first, *then] if first is not None else then)
            else:
                created, meta_text = clock.now(), canonical(meta)
                with backend.errors():
                    changed = backend.exec(
                        "INSERT INTO runs (run_id, created, kind, meta, head_hash, n_events) "
                        "VALUES (?, ?, ?, ?, ?, 0) ON CONFLICT (run_id) DO NOTHING",
                        (run_id, created, kind, meta_text, GENESIS),
                    )
                if not changed:
                    if exclusive:
                        raise RunExists(exists)
                    self.append_batch(run_id, [first, *then] if first is not None else then)
                else:
                    # A run this transaction made: its lock is held, it has no events and
                    # its header is known, so none of them is read back.
                    self._tx.created(run_id)
                    head = RunHead(n_events=0, head_hash=GENESIS)
                    items = [first, *then] if first is not None else list(then)
                    if items:
                        texts = [
                            i.text if i.text is not None else canonical(i.payload) for i in items
                        ]
                        self._append(run_id, items, texts, {}, head, at=created)
                        known = self._tx.fresh(run_id)  # advanced by the append
                        assert known is not None
                        head = known[0]
                    row = {"run_id": run_id, "created": created, "kind": kind, "meta": meta_text}
                    return run_from_row(cast(RunRow, {**row, **head._asdict()}))
        info = self.run(run_id)
        assert info is not None
        return info

    def run(self, run_id: str, *, missing_ok: bool = False) -> RunInfo | None:
        """The run's header (``None`` with ``missing_ok`` when there is no such run,
        :class:`~dissensus.store.errors.UnknownRun` without); an id no run can have is
        not looked up."""
        rows: list[Row] = []
        if may_be_held(run_id):
            with self._backend.errors():
                rows = self._backend.rows("SELECT * FROM runs WHERE run_id = ?", (run_id,))
        if not rows:
            if missing_ok:
                return None
            why = ""
            try:
                check_run_id(run_id)
            except ConfigError as exc:  # say why no run can have that id
                why = f" ({exc})"
            raise UnknownRun(f"no run {quote_short(run_id)} in journal {self._backend.path}{why}")
        return run_from_row(cast(RunRow, rows[0]))  # the query is SELECT * FROM runs

    def runs(self, *, after: str | None = None, limit: int | None = None) -> list[RunInfo]:
        """The runs, oldest first (creation time, then id), in one query: all of them, or
        with ``after`` those that come after that run (:class:`UnknownRun` when there is
        none) and with ``limit`` at most that many (a page; the runs' index keeps a page's
        cost independent of the journal's size)."""
        where = ""
        args: tuple[str, ...] = ()
        if after is not None:
            anchor = self.run(after)
            assert anchor is not None
            where = " WHERE created > ? OR (created = ? AND run_id > ?)"
            args = (anchor.created, anchor.created, anchor.run_id)
        page = "" if limit is None else f" LIMIT {int(limit)}"
        with self._backend.errors():
            rows = self._backend.rows(
                f"SELECT * FROM runs{where} ORDER BY created, run_id{page}", args
            )
        return [run_from_row(cast(RunRow, row)) for row in rows]  # whole rows of runs

    def newest_runs(self, limit: int, *, kind: str | None = None) -> list[RunInfo]:
        """The ``limit`` newest runs (of ``kind`` only, when given), newest first (creation
        time, then id, both descending): the runs' ``(created, run_id)`` index read
        backwards, so the query stops after the runs it returns (and the runs of other
        kinds it passes), whatever the journal's size."""
        where, args = ("", ()) if kind is None else (" WHERE kind = ?", (kind,))
        with self._backend.errors():
            rows = self._backend.rows(
                f"SELECT * FROM runs{where} ORDER BY created DESC, run_id DESC"
                f" LIMIT {max(0, int(limit))}",
                args,
            )
        return [run_from_row(cast(RunRow, row)) for row in rows]  # whole rows of runs

    def finished(self, run_ids: Sequence[str]) -> set[str]:
        """Which of ``run_ids`` have their ``run.finished`` event journalled (one query per
        500 ids, below both back ends' bound on a statement's parameters)."""
        out: set[str] = set()
        run_ids = [run_id for run_id in run_ids if may_be_held(run_id)]
        for start in range(0, len(run_ids), 500):
            chunk = tuple(run_ids[start : start + 500])
            marks = ", ".join("?" for _ in chunk)
            sql = f"SELECT run_id FROM events WHERE key = 'run/finished' AND run_id IN ({marks})"
            with self._backend.errors():
                out.update(str(row["run_id"]) for row in self._backend.rows(sql, chunk))
        return out

    # -- appending --------------------------------------------------------------------

    def append_batch(self, run_id: str, events: Sequence[NewEvent]) -> list[Event]:
        """Append ``events`` to the run in order, in one transaction: all of them or none.

        Each event chains on the one before it exactly as single appends would; a key
        the run already holds (or one repeated earlier in the batch) is not written again
        and its stored event is returned in its place, after checking the payload is the
        same (:class:`~dissensus.store.errors.JournalConflict` otherwise). Returns the
        events in the given order.
        """
        items = list(events)
        if not items:
            return []
        texts = [item.text if item.text is not None else canonical(item.payload) for item in items]
        backend = self._backend
        keys = [i.key for i in items]
        with self._tx.transaction(run_id):
            fresh = self._tx.fresh(run_id)
            existing: dict[str, EventRow]
            head: RunHead | None
            if fresh is not None and fresh[1].isdisjoint(keys):
                # A run this transaction created: its head and keys are known.
                existing, head = {}, fresh[0]
            else:
                with backend.errors():
                    existing, head = backend.append_state(run_id, keys)
            return self._append(run_id, items, texts, existing, head)

    def _append(
        self,
        run_id: str,
        items: Sequence[NewEvent],
        texts: Sequence[str],
        existing: dict[str, EventRow],
        head: RunHead | None,
        *,
        at: str | None = None,
    ) -> list[Event]:
        """:meth:`append_batch` inside the run's write transaction, given the events'
        canonical texts and what ``append_state`` says of the run (stored events by key,
        the chain's head); ``at`` is the events' time (default: now)."""
        backend = self._backend
        seq = head.n_events if head else 0
        prev = head.head_hash if head else GENESIS
        at = at if at is not None else clock.now()
        event_hash = EventHasher(run_id, at)
        out: list[Event] = []
        rows: list[EventValues] = []
        written: dict[str, tuple[str, Event]] = {}
        fresh: list[Event] = []
        for item, text in zip(items, texts, strict=True):
            stored = existing.get(item.key)
            if stored is not None:
                if stored["payload"] != text:
                    raise JournalConflict(
                        f"run {run_id}: event {item.key!r} was journalled with a different payload"
                    )
                out.append(event_from_row(stored))
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
                prev, seq=seq, key=item.key, type=item.type, case=item.case, payload_text=text
            )
            rows.append((run_id, seq, item.key, item.type, item.case, at, text, prev, digest))
            event = written_event(
                run_id, seq, item.key, item.type, item.case, at, item.payload, prev, digest
            )
            written[item.key] = (text, event)
            fresh.append(event)
            out.append(event)
            prev = digest
            seq += 1
        if rows:
            with backend.errors():
                backend.write_events(rows)
                for derive in self.on_write:
                    derive(run_id, fresh)
            self._tx.written(fresh)
            self._tx.advanced(run_id, RunHead(n_events=seq, head_hash=prev), list(written))
        return out

    # -- reading ----------------------------------------------------------------------

    def head(self, run_id: str) -> RunHead:
        """The run's number of events and the hash of its last one
        (:class:`~dissensus.store.errors.UnknownRun` when there is no such run); the
        rest of its header is not read (a ``meta`` edited into text that is no JSON is
        for verification to name)."""
        row = self.header(run_id)
        count = stored_int(row["n_events"], f"journal damaged: run {run_id}: event count")
        return RunHead(n_events=count, head_hash=str(row["head_hash"]))

    def header(self, run_id: str) -> Row:
        """The run's ``runs`` row as it is stored, nothing read into a model
        (:class:`~dissensus.store.errors.UnknownRun` when there is no such run)."""
        rows: list[Row] = []
        if may_be_held(run_id):
            with self._backend.errors():
                rows = self._backend.rows("SELECT * FROM runs WHERE run_id = ?", (run_id,))
        if not rows:
            self.run(run_id)  # UnknownRun, saying why where no run can have the id
            return self.header(run_id)  # created in the meantime
        return rows[0]

    def read(
        self, run_id: str, *, type: str | None = None, case: str | None = None
    ) -> Iterator[Event]:
        """A run's events in sequence order, optionally filtered by type and case."""
        if not may_be_held(run_id):
            return
        sql = "SELECT * FROM events WHERE run_id = ?"
        args: list[Any] = [run_id]
        if type is not None:
            sql += " AND type = ?"
            args.append(type)
        if case is not None:
            sql += " AND case_ref = ?"
            args.append(case)
        if case is None:
            yield from (event_from_row(row) for row in self._pages(sql, args))
            return
        # Sorted here: with ORDER BY in the query SQLite walks the run's events in
        # sequence order instead of looking the case up in its index.
        rows = sorted(
            self._event_rows(sql, args),
            key=lambda r: stored_int(r["seq"], f"journal damaged: run {run_id}: sequence number"),
        )
        for row in rows:
            yield event_from_row(row)

    def _pages(self, sql: str, args: Sequence[Any]) -> Iterator[EventRow]:
        """The rows of ``sql`` (a ``SELECT * FROM events WHERE ...`` of one run) in
        sequence order, :data:`PAGE` at a time: each page one query, after the stored
        sequence number the page before it ended on."""
        page = self._event_rows(f"{sql} ORDER BY seq LIMIT {PAGE}", args)
        while page:
            yield from page
            if len(page) < PAGE:
                return
            last = page[-1]["seq"]
            page = self._event_rows(f"{sql} AND seq > ? ORDER BY seq LIMIT {PAGE}", [*args, last])

    def read_after(
        self, run_id: str, after: int, limit: int, *, type: str | None = None
    ) -> list[Event]:
        """At most ``limit`` of the run's events whose sequence number is above ``after``
        (of ``type`` only, when given), in sequence order: one part of a long read (an
        export read a part at a time)."""
        if not may_be_held(run_id):
            return []
        if type is None:
            sql = "SELECT * FROM events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?"
            args: tuple[Any, ...] = (run_id, after, limit)
        else:
            sql = (
                "SELECT * FROM events WHERE run_id = ? AND seq > ? AND type = ? "
                "ORDER BY seq LIMIT ?"
            )
            args = (run_id, after, type, limit)
        rows = self._event_rows(sql, args)
        return [event_from_row(row) for row in rows]

    def refs_after(
        self, run_id: str, after: int, limit: int, *, type: str
    ) -> list[tuple[int, str | None]]:
        """At most ``limit`` ``(sequence number, case ref)`` pairs of the run's events of
        ``type`` whose sequence number is above ``after``, in sequence order, as stored
        (the case ref as text), their payloads not read: where a long read in case
        order finds its events."""
        if not may_be_held(run_id):
            return []
        sql = (
            "SELECT seq, case_ref FROM events WHERE run_id = ? AND seq > ? AND type = ? "
            "ORDER BY seq LIMIT ?"
        )
        with self._backend.errors():
            rows = self._backend.rows(sql, (run_id, after, type, limit))
        where = f"journal damaged: run {run_id}: sequence number"
        return [
            (
                stored_int(row["seq"], where),
                None if row["case_ref"] is None else str(row["case_ref"]),
            )
            for row in rows
        ]

    def cases_with_events(self, run_id: str, cases: Sequence[str]) -> set[str]:
        """Which of ``cases`` (case refs) have at least one event in the run (500 refs
        per query)."""
        found: set[str] = set()
        unique = list(dict.fromkeys(cases)) if may_be_held(run_id) else []
        for start in range(0, len(unique), 500):
            chunk = unique[start : start + 500]
            marks = ", ".join("?" * len(chunk))
            with self._backend.errors():
                rows = self._backend.rows(
                    f"SELECT DISTINCT case_ref FROM events WHERE run_id = ? AND case_ref IN ({marks})",
                    [run_id, *chunk],
                )
            found.update(str(r["case_ref"]) for r in rows)
        return found

    def rows(self, run_id: str, *, after: Any = None) -> Iterator[EventRow]:
        """The run's stored rows in sequence order, as they are (for verification), read
        a page at a time; with ``after`` (a stored sequence number, as stored), only the
        rows after it."""
        if not may_be_held(run_id):
            return iter(())
        if after is None:
            return self._pages("SELECT * FROM events WHERE run_id = ?", (run_id,))
        return self._pages("SELECT * FROM events WHERE run_id = ? AND seq > ?", (run_id, after))

    def count_rows(self, run_id: str) -> int:
        """How many rows the journal holds for the run, whatever their sequence numbers."""
        if not may_be_held(run_id):
            return 0
        with self._backend.errors():
            rows = self._backend.rows(
                "SELECT COUNT(*) AS n FROM events WHERE run_id = ?", (run_id,)
            )
        return int(rows[0]["n"])

    def get(self, run_id: str, key: str) -> Event | None:
        """The event stored under ``key``, if any."""
        row = self.row(run_id, key)
        return event_from_row(row) if row is not None else None

    def row(self, run_id: str, key: str) -> EventRow | None:
        """The stored row of the event under ``key``, as it is (for verification)."""
        if not may_be_held(run_id):
            return None
        rows = self._event_rows("SELECT * FROM events WHERE run_id = ? AND key = ?", (run_id, key))
        return rows[0] if rows else None

    def type_at(self, run_id: str, seq: int) -> str | None:
        """The type of the run's event ``seq``, if there is one."""
        if not may_be_held(run_id):
            return None
        with self._backend.errors():
            rows = self._backend.rows(
                "SELECT type FROM events WHERE run_id = ? AND seq = ?", (run_id, seq)
            )
        return str(rows[0]["type"]) if rows else None

    def of_type(
        self, type: str, *, since: str | None = None, kind: str | None = None
    ) -> Iterator[Event]:
        """Every event of ``type`` across runs (run order, then sequence); with ``since``
        (a time in :func:`~dissensus.store.clock.now`'s form), only those at or after it,
        chosen by the database (the text sorts in time order), so a read of the recent
        ones does not grow with the journal's history; with ``kind``, only those of runs
        of that kind."""
        where, args = "", [type]
        if since is not None:
            where, args = f"{where} AND e.at >= ?", [*args, since]
        if kind is not None:
            where, args = f"{where} AND r.kind = ?", [*args, kind]
        rows = self._event_rows(
            "SELECT e.* FROM events e JOIN runs r ON r.run_id = e.run_id WHERE e.type = ?"
            f"{where} ORDER BY r.created, e.run_id, e.seq",
            args,
        )
        for row in rows:
            yield event_from_row(row)

    def count_of_type(self, type: str) -> int:
        """How many events of ``type`` the journal holds, across runs (the type's index)."""
        with self._backend.errors():
            rows = self._backend.rows("SELECT COUNT(*) AS n FROM events WHERE type = ?", (type,))
        return int(rows[0]["n"])

    def at(self, refs: Sequence[tuple[str, int]]) -> dict[tuple[str, int], Event]:
        """The events at ``(run_id, seq)`` positions, read in one query per 100."""
        out: dict[tuple[str, int], Event] = {}
        refs = [ref for ref in dict.fromkeys(refs) if may_be_held(ref[0])]
        for start in range(0, len(refs), 100):
            chunk = refs[start : start + 100]
            where = " OR ".join(["(run_id = ? AND seq = ?)"] * len(chunk))
            rows = self._event_rows(
                f"SELECT * FROM events WHERE {where}", [x for ref in chunk for x in ref]
            )
            for row in rows:
                event = event_from_row(row)
                out[(event.run_id, event.seq)] = event
        return out
