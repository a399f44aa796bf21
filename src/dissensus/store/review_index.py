"""The review index: one row per review item, derived from the ``review.*`` events.

``review_index`` holds one row per review item (id, run, the ``review.opened`` event's
sequence number, the reason, the ``review.resolved`` event's sequence number or NULL while
open; a ``review.reopened`` event sets it back to NULL), written in the same transaction
as the event it derives from, so the review queue is listed without reading every
``review.opened`` payload (:meth:`ReviewIndex.entries`).

Choices this module makes:

* **The chain stays the evidence.** The index is outside the hash chain; opening a
  journal whose index does not agree with its events (a journal of an older version, or
  written by one) rebuilds it from the events (:meth:`ReviewIndex.rebuild`) and warns
  (:class:`IndexRebuilt`, naming the items: the command that opened it prints one
  ``warning:`` line), since after the rebuild nothing of the difference is left for
  ``runs verify`` to report; a journal that cannot be written then lists its queue from
  the events (:meth:`ReviewIndex.entries` returns ``None``).
* **Checked once per schema revision, not on every open.** Every writer that can open a
  journal writes the index rows in the transaction of the events they derive from, so
  neither a crash nor a concurrent writer leaves them apart; what can is a journal an
  upgrade reached (written without the index, or by a version that derived it
  otherwise). So the comparison with the events, which reads every review event, is made
  when the journal's mark says it has not been made at this schema revision
  (``dissensus_meta`` key :data:`~dissensus.store.migrations.INDEX_CHECKED_KEY`, removed
  by every upgrade: :mod:`~dissensus.store.migrations`), and the mark is then written;
  every later open reads that one row, so its cost does not grow with the journal's
  history. A journal that cannot be written keeps no mark and is compared on every
  open. An index edited outside dissensus after the check is found by ``runs verify`` of
  its run (which compares thoroughly, names the items and rebuilds the index), by
  :meth:`~dissensus.store.journal.Journal.review_index_agrees`, or on the next open when
  the mark is removed with it.
* **Two checks.** The comparison made on opening is cheap first (no payload parsed: the
  item id is the event's ``<run>.<case>``); only when it finds a difference does the
  thorough one (the rebuild's own derivation, reasons included) decide, so a journal
  whose events do not fit the cheap check is not rebuilt on every open. Verification
  always checks thoroughly.
* **Standing resolution.** An item's resolving event is the first ``review.resolved``
  after its last ``review.reopened`` (none when it was reopened last).
* **The database compares**, so no payload is sent over to check the index; except
  where a payload is not JSON (edited outside dissensus) and PostgreSQL's JSON cast
  fails the query: the payloads are then read and compared here, skipping that one as
  the rebuild does (and as SQLite's check does), so only ``runs verify`` of its run
  reports it and every other command works.
* **A row that no longer reads** (a sequence number edited into text, which SQLite
  keeps in an ``INTEGER`` column) is :class:`~dissensus.store.errors.JournalDamaged`
  naming the item and its run when the queue is listed, never a ``ValueError``;
  ``runs verify`` of the run names it too and rebuilds the index.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from contextlib import suppress
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from dissensus.deprecation import deprecated_names, renamed
from dissensus.quoting import quote_short
from dissensus.store import event_types as ev
from dissensus.store.backend import Backend, Row
from dissensus.store.errors import JournalBusy, JournalDamaged, JournalReadOnly
from dissensus.store.events import Event, stored_int
from dissensus.store.migrations import CURRENT, INDEX_CHECKED_KEY
from dissensus.store.transactions import Transactions

__all__ = [
    "REVIEW_OPENED",
    "REVIEW_REOPENED",
    "REVIEW_RESOLVED",
    "IndexEntry",
    "IndexRebuilt",
    "QueuePlace",
    "ReviewFilter",
    "ReviewIndex",
]

REVIEW_OPENED = ev.REVIEW_OPENED
REVIEW_RESOLVED = ev.REVIEW_RESOLVED
REVIEW_REOPENED = ev.REVIEW_REOPENED
"""A resolution undone: the item is open again (its index row loses its resolved_seq)."""

_INDEXED = (REVIEW_OPENED, REVIEW_RESOLVED, REVIEW_REOPENED)

ReviewFilter = Literal["open", "resolved", "all"]


class IndexRebuilt(UserWarning):
    """Opening the journal found review index rows that differ from the events, and
    rebuilt them: the command says so (one ``warning:`` line), since nothing of the
    difference remains for a later ``runs verify`` to report."""


class IndexEntry(BaseModel):
    """One review item as the journal's review index holds it (its row: where the item
    is in its run, and whether it is resolved). Not the review queue's entry a door
    answers with, :class:`dissensus.outputs.ReviewEntry`, which this was once named too."""

    model_config = ConfigDict(frozen=True)

    review_id: str
    run_id: str
    seq: int
    """Sequence number of the item's ``review.opened`` event in its run."""
    reason: str
    """Why the case was escalated (the item's ``reason``)."""
    resolved_seq: int | None
    """Sequence number of its ``review.resolved`` event; ``None`` while open."""


class ReviewIndex:
    """The review index of one journal, kept beside its event log."""

    def __init__(self, backend: Backend, transactions: Transactions) -> None:
        self._backend = backend
        self._tx = transactions
        self.trusted = True
        """False when the index disagrees with the events and could not be rebuilt
        (read-only): the queue is then listed from the events."""
        self.rebuilt_for: tuple[str, ...] = ()
        """Review ids whose index row differed from the events when the journal was opened."""

    # -- written with the events ------------------------------------------------------

    def index_events(self, run_id: str, events: Sequence[Event]) -> None:
        """Inside the append's transaction: the index rows ``events`` derive, in order
        (consecutive rows of one statement written together)."""
        statement: str | None = None
        batch: list[tuple[Any, ...]] = []
        for event in events:
            if event.type not in _INDEXED:
                continue
            found = _index_row(run_id, event.seq, event.type, event.payload)
            if found is None:
                continue
            sql, args = found
            if sql != statement:
                if statement is not None:
                    self._backend.write_index(statement, batch)
                statement, batch = sql, []
            batch.append(args)
        if statement is not None:
            self._backend.write_index(statement, batch)

    def rebuild(self) -> int:
        """Recompute the review index from the ``review.*`` events; the number of items."""
        backend = self._backend
        with self._tx.transaction():
            with backend.errors():
                backend.lock_review_index()
                backend.exec("DELETE FROM review_index")
                rows = backend.rows(
                    "SELECT run_id, seq, type, payload FROM events WHERE type IN (?, ?, ?) "
                    "ORDER BY run_id, seq",
                    _INDEXED,
                )
            for row in rows:
                try:
                    payload = json.loads(row["payload"])
                except (ValueError, RecursionError):  # a damaged row; runs verify names it
                    continue
                if isinstance(payload, dict):
                    seq = stored_int(
                        row["seq"], f"journal damaged: run {row['run_id']}: sequence number"
                    )
                    found = _index_row(str(row["run_id"]), seq, row["type"], payload)
                    if found is not None:
                        with backend.errors():
                            backend.write_index(found[0], [found[1]])
            with backend.errors():
                count = backend.rows("SELECT COUNT(*) AS n FROM review_index")[0]["n"]
        return int(count)

    # -- checking it against the events -----------------------------------------------

    def differences(self, run_id: str | None = None, *, thorough: bool = True) -> list[str]:
        """The review ids whose index row differs from what the events derive, by
        content (at most 20 named): item, run, position and resolving event, and with
        ``thorough`` the reason too.

        ``thorough`` reads each item's id and reason from its event's payload (a JSON
        function per back end), exactly as :meth:`rebuild` does. Without it (the check
        made on every open) the id is the event's run and case (``<run>.<line>``, what
        every review event of this program carries), no payload is parsed, and each
        opened event is matched with its index row and its resolution through the
        tables' keys.
        """
        if thorough:
            return self._differences_thorough(run_id)
        backend = self._backend
        scope = " AND o.run_id = ?" if run_id is not None else ""
        args: list[Any] = [REVIEW_REOPENED, REVIEW_RESOLVED, REVIEW_OPENED]
        args += [run_id] if run_id else []
        rid = "o.run_id || '.' || o.case_ref"
        mismatched = (
            f"SELECT {rid} AS review_id FROM events o "
            "LEFT JOIN (SELECT run_id, case_ref, MAX(seq) AS zseq FROM events WHERE type = ? "
            "GROUP BY run_id, case_ref) z ON z.run_id = o.run_id AND z.case_ref = o.case_ref "
            "LEFT JOIN events r ON r.run_id = o.run_id AND r.case_ref = o.case_ref AND r.type = ? "
            # ``+r.seq``: not an index term, so the join reads each case's events through
            # ``events_case`` (run, case) rather than every later event of the run through
            # the primary key (run, seq), which made opening a journal of a few thousand
            # reviews take tens of seconds.
            "AND +r.seq > COALESCE(z.zseq, -1) "
            f"LEFT JOIN review_index q ON q.review_id = {rid} "
            f"WHERE o.type = ? AND o.case_ref IS NOT NULL{scope} AND (q.review_id IS NULL "
            f"OR q.run_id <> o.run_id OR q.opened_seq <> o.seq "
            f"OR {backend.distinct('q.resolved_seq', 'r.seq')}) LIMIT 20"
        )
        extra = (
            "SELECT q.review_id FROM review_index q LEFT JOIN events o ON o.run_id = q.run_id "
            f"AND o.seq = q.opened_seq AND o.type = ? AND {rid} = q.review_id "
            "WHERE o.seq IS NULL"
            + (" AND q.run_id = ?" if run_id is not None else "")
            + " LIMIT 20"
        )
        with backend.errors():
            found = [str(r["review_id"]) for r in backend.rows(mismatched, args)]
            found += [
                str(r["review_id"])
                for r in backend.rows(extra, [REVIEW_OPENED] + ([run_id] if run_id else []))
            ]
        return sorted(set(found))[:20]

    def _differences_thorough(self, run_id: str | None) -> list[str]:
        backend = self._backend
        rid = backend.json_text("payload", "review_id")
        reason = f"COALESCE({backend.json_text('payload', 'reason')}, '')"
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
        try:
            with backend.errors():
                rows = backend.rows(sql, args)
        except JournalDamaged:
            # A payload that is not JSON fails PostgreSQL's cast, and with it the whole
            # query (SQLite reads it as NULL): derived here instead, skipping that row.
            return self._differences_read(run_id)
        return [str(r["review_id"]) for r in rows]

    def _differences_read(self, run_id: str | None) -> list[str]:
        """:meth:`differences` (thorough) by reading the payloads here: what
        :meth:`rebuild` would write, compared with the index's rows; a payload that does
        not read is skipped, as the rebuild skips it (``runs verify`` names its event)."""
        backend = self._backend
        scope = " AND run_id = ?" if run_id is not None else ""
        run_args: list[Any] = [run_id] if run_id is not None else []
        with backend.errors():
            events = backend.rows(
                f"SELECT run_id, seq, type, payload FROM events WHERE type IN (?, ?, ?){scope} "
                "ORDER BY run_id, seq",
                [*_INDEXED, *run_args],
            )
            stored = backend.rows(
                "SELECT review_id, run_id, opened_seq, reason, resolved_seq FROM review_index"
                + (" WHERE run_id = ?" if run_id is not None else ""),
                run_args,
            )
        derived: dict[str, list[Any]] = {}
        for row in events:
            try:
                payload = json.loads(row["payload"])
                seq = int(row["seq"])
            except (TypeError, ValueError, RecursionError):
                continue
            review_id = payload.get("review_id") if isinstance(payload, dict) else None
            if not isinstance(review_id, str):
                continue
            found = derived.get(review_id)
            if row["type"] == REVIEW_OPENED:
                if found is None:
                    derived[review_id] = [row["run_id"], seq, str(payload.get("reason", "")), None]
            elif found is not None and found[0] == row["run_id"]:
                if row["type"] == REVIEW_REOPENED:
                    found[3] = None
                elif found[3] is None:
                    found[3] = seq
        want = {(rid, *values) for rid, values in derived.items()}
        have = {
            (
                str(r["review_id"]),
                r["run_id"],
                _int_or_none(r["opened_seq"]),
                r["reason"],
                _int_or_none(r["resolved_seq"]),
            )
            for r in stored
        }
        return sorted({row[0] for row in want ^ have})[:20]

    def check_on_open(self) -> None:
        """Unless the journal's mark says the index was checked at this schema revision
        (one row read): rebuild an index whose content disagrees with the events (when
        writable; a read-only journal then lists its queue from the events), then mark
        it checked. The items that differed are kept for verification to report."""
        if self.checked():
            return
        if self.differences(thorough=False) and (differing := self.differences()):
            self.rebuilt_for = tuple(differing)
            try:
                self.rebuild()
            except JournalReadOnly:
                self.trusted = False
                return
            self._warn_rebuilt(differing)
        self._mark_checked()

    def checked(self) -> bool:
        """Whether the journal's mark says its index was compared with the events (and
        agreed, or was rebuilt) at this schema revision."""
        with self._backend.errors():
            rows = self._backend.rows(
                "SELECT value FROM dissensus_meta WHERE key = ?", (INDEX_CHECKED_KEY,)
            )
        return bool(rows) and rows[0]["value"] == str(CURRENT)

    def _mark_checked(self) -> None:
        """Write the mark (not on a journal that cannot be written: it is checked on every
        open; nor while another writer holds the lock past the busy timeout: the next open
        checks again)."""
        backend = self._backend
        with suppress(JournalReadOnly, JournalBusy), self._tx.transaction(), backend.errors():
            backend.exec(
                "INSERT INTO dissensus_meta (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (INDEX_CHECKED_KEY, str(CURRENT)),
            )

    def _warn_rebuilt(self, differing: Sequence[str]) -> None:
        shown = ", ".join(quote_short(rid) for rid in differing[:5])
        if len(differing) > 5:
            shown += f" and {len(differing) - 5} more"
        warnings.warn(
            IndexRebuilt(
                f"the review index differed from the journal's events for {len(differing)} "
                f"item(s) ({shown}): rebuilt from the events (an edit outside dissensus, "
                "or a journal written by an older version)"
            ),
            stacklevel=3,
        )

    def problems(self, run_id: str) -> list[str]:
        """What verification reports about the run's rows of the index (checked
        thoroughly, reasons included; a writable journal's index is then rebuilt)."""
        now = self.differences(run_id)
        if not self.trusted:
            return [
                f"review index row of {quote_short(rid)} differs from the events (read-only: not rebuilt; "
                "the queue is listed from the events)"
                for rid in now
            ]
        if now:
            with suppress(JournalReadOnly):
                self.rebuild()
        return [
            f"review index row of {quote_short(rid)} differed from the events (rebuilt from the events)"
            for rid in sorted(
                {*now, *(r for r in self.rebuilt_for if r.rpartition(".")[0] == run_id)}
            )
        ]

    # -- the queue --------------------------------------------------------------------

    def entries(
        self,
        *,
        run_id: str | None = None,
        status: ReviewFilter = "all",
        limit: int | None = None,
        after: QueuePlace | None = None,
    ) -> list[IndexEntry] | None:
        """Review items in queue order (oldest run first, then by position in the run);
        ``None`` when the index cannot be trusted; at most ``limit`` of them; with
        ``after`` (a run's creation time, its id and an event's sequence number: an
        item's place) only those after that place (a page after the last one; the
        runs' index and the index's primary key keep its cost that of the page)."""
        if not self.trusted:
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
        if after is not None:
            created, after_run, seq = after
            where.append(
                "(r.created > ? OR (r.created = ? AND (q.run_id > ? "
                "OR (q.run_id = ? AND q.opened_seq > ?))))"
            )
            args.extend([created, created, after_run, after_run, seq])
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY r.created, q.run_id, q.opened_seq"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(int(limit))
        with self._backend.errors():
            rows = self._backend.rows(sql, args)
        return [_entry(r) for r in rows]


def _entry(row: Row) -> IndexEntry:
    """An index row read back; a sequence number edited into text outside dissensus is
    :class:`JournalDamaged` naming the item and its run (``runs verify`` of the run
    rebuilds the index), never a ``ValueError``."""
    review_id = str(row["review_id"])
    where = (
        f"journal damaged: review index row of {quote_short(review_id)} "
        f"(run {quote_short(str(row['run_id']))}):"
    )
    resolved = row["resolved_seq"]
    return IndexEntry(
        review_id=review_id,
        run_id=str(row["run_id"]),
        seq=stored_int(row["opened_seq"], f"{where} its opened event's sequence number"),
        reason=str(row["reason"]),
        resolved_seq=(
            None
            if resolved is None
            else stored_int(resolved, f"{where} its resolving event's sequence number")
        ),
    )


QueuePlace = tuple[str, str, int]
"""An item's place in the review queue: its run's creation time, its run's id and the
sequence number of its ``review.opened`` event (the queue's order)."""


def _int_or_none(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return -1  # an edited row: differs from whatever the events derive


_OPEN = (
    "INSERT INTO review_index (review_id, run_id, opened_seq, reason, resolved_seq) "
    "VALUES (?, ?, ?, ?, NULL) ON CONFLICT (review_id) DO NOTHING"
)
_REOPEN = "UPDATE review_index SET resolved_seq = NULL WHERE review_id = ? AND run_id = ?"
_RESOLVE = (
    "UPDATE review_index SET resolved_seq = ? "
    "WHERE review_id = ? AND run_id = ? AND resolved_seq IS NULL"
)


def _index_row(
    run_id: str,
    seq: int,
    type: str,
    payload: dict[str, Any],  # JSON passing through: the event's payload
) -> tuple[str, tuple[Any, ...]] | None:
    """The statement and row a ``review.*`` event writes on the index (``None``: none)."""
    review_id = payload.get("review_id")
    if not isinstance(review_id, str):
        return None
    if type == REVIEW_OPENED:
        return _OPEN, (review_id, run_id, seq, str(payload.get("reason", "")))
    if type == REVIEW_REOPENED:
        return _REOPEN, (review_id, run_id)
    return _RESOLVE, (seq, review_id, run_id)


__getattr__ = deprecated_names(
    __name__,
    renamed(
        __name__,
        globals(),
        {"ReviewEntry": "IndexEntry"},
        "dissensus.outputs.ReviewEntry is the review queue's entry",
    ),
)
