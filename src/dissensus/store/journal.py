"""The run journal: one object over an event log and the services kept beside it.

Every run of the pipeline writes its inputs, readings, guard checks, routes, every model
call with its usage, follow-ups, packets, certificates, review items, human resolutions
and final records as *events* (:mod:`~dissensus.store.events`), each chained on the one
before it (:mod:`~dissensus.store.chain`). ``Journal(target)`` opens the back end the
target names and composes the journal's parts over it:

========================================  ==================================================
:mod:`~dissensus.store.sqlite`,           the back ends: SQLite file (default) or
:mod:`~dissensus.store.postgres`          ``postgresql://`` URL, behind
                                          :class:`~dissensus.store.backend.Backend`
:mod:`~dissensus.store.transactions`      write transactions, and what follows a commit
:mod:`~dissensus.store.log`               runs and the append-only event log (:class:`EventLog`)
:mod:`~dissensus.store.chain`             recomputing the hash chain (:meth:`Journal.verify`)
:mod:`~dissensus.store.run_header`        a run's header and the event it is made from
:mod:`~dissensus.store.seals`             signatures over a run's head
:mod:`~dissensus.store.review_index`      the review queue's index
:mod:`~dissensus.store.claims`            who is working on a review item
:mod:`~dissensus.store.locks`             which process is executing a run
:mod:`~dissensus.store.follow`           one type of event read on incrementally
========================================  ==================================================

:class:`Journal` is the facade the rest of the package uses; its methods delegate to
those parts. Choices this module makes:

* **The back end is chosen by the target**, once, in :func:`open_backend`:
  ``postgresql://`` or ``postgres://`` is PostgreSQL, anything else an SQLite file.
* **Threads.** One journal object may be shared by threads: its statements and
  transactions are serialised by its back end's lock (processes each open their own).
* **After a commit** the events written are given to ``after_append`` (progress
  reporting, fault injection in crash tests), then the runs they close are sealed.
* **Durability points** are commits: every write transaction, one fsync under SQLite's
  ``synchronous=full``. A run can be created with its execution lock
  (``create_run(..., lock_pid=...)``) and ended, last events and lock's release, inside
  one :meth:`Journal.transaction`, so a run of one block commits twice
  (:mod:`dissensus.pipeline.batch` says what a crash between them leaves); a run
  registered with :meth:`Journal.defer_run` is created by its first write
  (:mod:`~dissensus.store.deferred`), so a run of one block can commit once.
* The journal stores what it is given; callers never give it secrets.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar

from dissensus.deprecation import deprecated_names, renamed
from dissensus.errors import ConfigError
from dissensus.store import chain, clock
from dissensus.store.backend import Backend
from dissensus.store.chain import VerifyReport
from dissensus.store.claims import Claim, Claims
from dissensus.store.deferred import DeferredRun, DeferredRuns
from dissensus.store.errors import (
    CaseClosed,
    ClaimConflict,
    JournalBusy,
    JournalConflict,
    JournalError,
    JournalReadOnly,
    RunExists,
    UnknownRun,
)
from dissensus.store.events import Event, NewEvent, RunHead, RunInfo
from dissensus.store.follow import Followed, SharedHeads, follow
from dissensus.store.locks import RunLock, RunLocks, RunStatus
from dissensus.store.log import EventLog, SQLEventLog
from dissensus.store.review_index import IndexEntry, QueuePlace, ReviewFilter, ReviewIndex
from dissensus.store.run_header import STARTED_KEY, header_problems
from dissensus.store.seals import SEAL_TYPE, Seals
from dissensus.store.sqlite import SYNC_ENV
from dissensus.store.targets import (
    BUSY_TIMEOUT_ENV,
    DEFAULT_JOURNAL,
    check_run_id,
    is_postgres_url,
    journal_path,
    mask_url,
)
from dissensus.store.transactions import Transactions

if TYPE_CHECKING:
    from dissensus.signing import PublicKey, Signer

T = TypeVar("T")

__all__ = [
    "BUSY_TIMEOUT_ENV",
    "DEFAULT_JOURNAL",
    "FROM_ENV",
    "SEAL_TYPE",
    "SYNC_ENV",
    "CaseClosed",
    "Claim",
    "ClaimConflict",
    "Event",
    "EventLog",
    "IndexEntry",
    "Journal",
    "JournalBusy",
    "JournalConflict",
    "JournalError",
    "JournalReadOnly",
    "NewEvent",
    "RunExists",
    "RunHead",
    "RunInfo",
    "RunLock",
    "UnknownRun",
    "VerifyReport",
    "is_postgres_url",
    "journal_path",
    "mask_url",
    "open_backend",
    "open_journal",
]


def open_backend(
    target: str | Path, *, synchronous: str | None = None, busy_timeout: float | None = None
) -> Backend:
    """The back end ``target`` names, opened and upgraded to this version's schema.
    A target that is no path (``None``, a number) is a :class:`ConfigError`: it made an
    SQLite file called ``None`` or ``5`` in the working directory."""
    if not isinstance(target, str | os.PathLike):
        raise ConfigError(
            f"a journal is a path or a postgresql:// URL, not {type(target).__name__}",
            field="journal",
        )
    target = os.fspath(target)
    if is_postgres_url(target):
        from dissensus.store.postgres import PostgresBackend

        return PostgresBackend(target, synchronous=synchronous, busy_timeout=busy_timeout)
    from dissensus.store.sqlite import SQLiteBackend

    return SQLiteBackend(target, synchronous=synchronous, busy_timeout=busy_timeout)


class Journal:
    """The run journal. ``Journal(target)`` opens the back end ``target`` names.

    ``target`` is a ``postgresql://`` URL or an SQLite file path, ``":memory:"`` for a
    throw-away one. ``after_append`` is called with every newly written event once it is
    committed (progress reporting, fault injection in crash tests). ``signer`` seals runs
    as they close (:mod:`~dissensus.store.seals`).
    """

    path: str
    """The journal as it may be shown (a URL's password masked)."""
    busy_timeout: float
    """Seconds a writer waits for another writer's lock before :class:`JournalBusy`."""
    after_append: Callable[[Event], None] | None

    def __init__(
        self,
        target: str | Path,
        *,
        after_append: Callable[[Event], None] | None = None,
        synchronous: str | None = None,
        busy_timeout: float | None = None,
        signer: Signer | None = None,
    ) -> None:
        backend = open_backend(target, synchronous=synchronous, busy_timeout=busy_timeout)
        try:
            self._backend = backend
            self.path = backend.path
            self.busy_timeout = backend.busy_timeout
            self.after_append = after_append
            self._tx = Transactions(backend)
            self._log = SQLEventLog(backend, self._tx)
            self._seals = Seals(self._log, self._tx, signer)
            self._review = ReviewIndex(backend, self._tx)
            self._claims = Claims(backend, self._tx, self._log)
            self._locks = RunLocks(backend, self._tx, self._log)
            self._deferred = DeferredRuns()
            self._heads = SharedHeads()
            self._log.on_write.append(self._review.index_events)
            self._tx.after_commit.append(self._report)
            self._tx.after_commit.append(self._seals.after_commit)
            self._review.check_on_open()
        except BaseException:
            backend.close()
            raise

    def _report(self, events: Sequence[Event]) -> None:
        if self.after_append is not None:
            for event in events:
                self.after_append(event)

    @property
    def signer(self) -> Signer | None:
        """What seals this journal's runs (``None``: runs are not sealed)."""
        return self._seals.signer

    @signer.setter
    def signer(self, value: Signer | None) -> None:
        self._seals.signer = value

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._backend.close()

    def schema(self) -> dict[str, Any]:  # plain JSON: SchemaInfo's keys, printed as is
        """The journal's schema revision, this version's, pending revisions and the
        revision history (:class:`~dissensus.store.migrations.SchemaInfo`'s keys; plain
        JSON, printed as it is by ``runs schema --json``)."""
        return dict(self._backend.schema())

    # -- transactions ------------------------------------------------------------------

    def transaction(self, run_id: str | None = None) -> AbstractContextManager[None]:
        """One write transaction, holding ``run_id``'s write lock: everything inside
        commits together or not at all. Nested calls join the outer transaction.

        A journal object may be shared by threads: a transaction holds the object's
        lock, so another thread's statements wait for it to end."""
        if run_id is not None and run_id in self._deferred:
            return self._creating(run_id)
        return self._tx.transaction(run_id)

    def lock_name(self, name: str) -> None:
        """Inside :meth:`transaction`: hold the lock called ``name`` until the transaction
        ends, so that writers counting something before they add to it (a run's shift
        check counting the file's earlier checks) take turns. SQLite's write transaction
        already excludes every other writer; PostgreSQL takes a transaction-level advisory
        lock (waiting at most the busy timeout)."""
        if not self._tx.active:
            raise RuntimeError("lock_name() needs an open transaction")
        with self._backend.errors():
            self._backend.lock_name(name)

    @contextmanager
    def _creating(self, run_id: str) -> Iterator[None]:
        """A transaction on a deferred run: the run is created first (with its lock)."""
        with self._tx.transaction():
            self.create_deferred(run_id, lock=True)
            with self._tx.transaction(run_id):
                yield

    # -- runs -------------------------------------------------------------------------

    def defer_run(
        self,
        run_id: str,
        *,
        kind: str,
        meta: dict[str, Any],  # JSON passing through: the run's header
        first: tuple[str, dict[str, Any], str],  # (type, JSON payload, key)
        lock_pid: int | None = None,
        handed: object = None,
    ) -> None:
        """Register a run to be created, as ``create_run(..., exclusive=True)`` with its
        ``first`` event, inside the transaction of its first write (see
        :mod:`~dissensus.store.deferred`); nothing is written now. ``handed`` is kept
        with the registration for whoever executes the run here (:meth:`handed`)."""
        check_run_id(run_id)
        event = NewEvent(first[0], first[1], first[2])
        if not self._deferred.add(run_id, DeferredRun(kind, meta, event, lock_pid, handed)):
            raise RunExists(f"run {run_id!r} is being started in this process already")

    def deferred(self, run_id: str) -> NewEvent | None:
        """The first event of ``run_id`` when it is registered and not created yet."""
        run = self._deferred.get(run_id)
        return run.first if run is not None else None

    def handed(self, run_id: str) -> tuple[NewEvent, object] | None:
        """The first event of ``run_id`` and what its registration handed on
        (:meth:`defer_run`), when it is registered and not created yet."""
        run = self._deferred.get(run_id)
        return (run.first, run.handed) if run is not None else None

    def create_deferred(self, run_id: str, *, lock: bool, then: Sequence[NewEvent] = ()) -> None:
        """Inside a transaction: create the deferred run ``run_id`` now, with its
        execution lock for the registered process (``lock``) or without, and append
        ``then`` after its first event in the same write (:meth:`append_batch`'s
        meaning: a run's last block and its end, one insert with its start). Not
        registered (created already), ``then`` is appended to it."""
        run = self._deferred.take(run_id)
        if run is None:
            if then:
                self.append_batch(run_id, then)
            return
        # Rolled back, the run waits for its next first write; refused (the id is
        # taken), it is given up.
        again = [run]

        def restore() -> None:
            if again:
                self._deferred.add(run_id, again[0])

        self._tx.on_rollback(restore)
        pid = run.lock_pid if lock else None
        first = (run.first.type, run.first.payload, run.first.key)
        try:
            self.create_run(
                run_id,
                kind=run.kind,
                meta=run.meta,
                first=first,
                exclusive=True,
                lock_pid=pid,
                then=then,
            )
        except RunExists:
            again.clear()
            self._deferred.refuse(run_id)
            raise

    def create_run(
        self,
        run_id: str,
        *,
        kind: str,
        meta: dict[str, Any],  # JSON passing through: the run's header
        first: tuple[str, dict[str, Any], str] | None = None,  # (type, JSON payload, key)
        exclusive: bool = False,
        lock_pid: int | None = None,
        then: Sequence[NewEvent] = (),
    ) -> RunInfo:
        """Register a run (idempotent for the same id unless ``exclusive``).

        ``first`` = ``(type, payload, key)`` is appended in the same transaction, so a
        crash leaves either no run or a run with its first event; ``then`` after it (as
        :meth:`append_batch` appends them). ``exclusive`` raises
        :class:`RunExists` when the id is taken (two ``decide --run-id x`` at once: one
        wins, the other fails cleanly). With ``lock_pid`` the run's execution lock is
        taken for that process in the same transaction too (one commit for the run, its
        first event and its lock; :meth:`acquire_run_lock`), and :class:`JournalConflict`
        is raised, creating nothing, when another live process holds it.
        """
        event = NewEvent(first[0], first[1], first[2]) if first is not None else None
        if lock_pid is None:
            return self._log.create_run(
                run_id, kind=kind, meta=meta, first=event, exclusive=exclusive, then=then
            )
        with self._tx.transaction():
            info = self._log.create_run(
                run_id, kind=kind, meta=meta, first=event, exclusive=exclusive, then=then
            )
            holder = self._locks.acquire(run_id, lock_pid)
            if holder is not None:
                raise JournalConflict(
                    f"run {run_id} is being executed by pid {holder.pid} (host {holder.host})"
                )
        return info

    def run(self, run_id: str, *, missing_ok: bool = False) -> RunInfo | None:
        if missing_ok and run_id in self._deferred:
            return None
        return self._log.run(run_id, missing_ok=missing_ok)

    def runs(self, *, after: str | None = None, limit: int | None = None) -> list[RunInfo]:
        """Every run, oldest first; with ``after`` (a run id) only the runs after it, and
        with ``limit`` at most that many: a page (:class:`UnknownRun` for an ``after``
        the journal does not hold)."""
        return self._log.runs(after=after, limit=limit)

    def newest_runs(self, limit: int, *, kind: str | None = None) -> list[RunInfo]:
        """The ``limit`` newest runs, newest first (of ``kind`` only, when given), read
        through the runs' index: the cost is the runs returned, not the journal's."""
        return self._log.newest_runs(limit, kind=kind)

    # -- events -----------------------------------------------------------------------

    def append(
        self,
        run_id: str,
        type: str,
        payload: dict[str, Any],  # JSON passing through: stored as canonical text
        *,
        key: str,
        case: str | None = None,
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
        A deferred run is created by it (an empty batch included).
        """
        if run_id in self._deferred:
            with self.transaction(run_id):
                return self._log.append_batch(run_id, events)
        return self._log.append_batch(run_id, events)

    def head(self, run_id: str) -> RunHead:
        """The run's number of events and the hash of its last one (:class:`UnknownRun`
        when there is no such run)."""
        return self._log.head(run_id)

    def read(
        self, run_id: str, *, type: str | None = None, case: str | None = None
    ) -> Iterator[Event]:
        """The run's events in sequence order (:meth:`events`; the :class:`EventLog` name)."""
        return self.events(run_id, type=type, case=case)

    def events(
        self, run_id: str, *, type: str | None = None, case: str | None = None
    ) -> Iterator[Event]:
        """A run's events in sequence order, optionally filtered by type and case."""
        if run_id in self._deferred:
            return iter(())
        return self._log.read(run_id, type=type, case=case)

    def events_after(
        self, run_id: str, after: int, limit: int, *, type: str | None = None
    ) -> list[Event]:
        """At most ``limit`` of the run's events after sequence number ``after`` (of
        ``type`` only, when given), in sequence order (a long read in parts: each part a
        query of its own)."""
        if run_id in self._deferred:
            return []
        return self._log.read_after(run_id, after, limit, type=type)

    def refs_after(
        self, run_id: str, after: int, limit: int, *, type: str
    ) -> list[tuple[int, str | None]]:
        """At most ``limit`` ``(sequence number, case ref)`` pairs of the run's events of
        ``type`` after sequence number ``after``, in sequence order, without their
        payloads (:meth:`~dissensus.store.log.SQLEventLog.refs_after`)."""
        if run_id in self._deferred:
            return []
        return self._log.refs_after(run_id, after, limit, type=type)

    def get(self, run_id: str, key: str) -> Event | None:
        """The event stored under ``key``, if any."""
        if run_id in self._deferred:
            return None
        return self._log.get(run_id, key)

    def cases_with_events(self, run_id: str, cases: Sequence[str]) -> set[str]:
        """Which of ``cases`` (case refs, as events name them) have an event in the run."""
        if run_id in self._deferred:
            return set()
        return self._log.cases_with_events(run_id, cases)

    def events_of_type(
        self, type: str, *, since: str | None = None, kind: str | None = None
    ) -> Iterator[Event]:
        """Every event of ``type`` across runs (run order, then sequence); with ``since``
        (an ISO-8601 UTC time as :func:`~dissensus.store.clock.now` writes it), only
        those journalled at or after it; with ``kind``, only those of runs of that kind."""
        return self._log.of_type(type, since=since, kind=kind)

    def count_of_type(self, type: str) -> int:
        """How many events of ``type`` the journal holds, across runs."""
        return self._log.count_of_type(type)

    def follow(
        self,
        type: str,
        keep: Callable[[Event], T | None],
        before: Followed[T] | None = None,
        *,
        kind: str | None = None,
    ) -> Followed[T]:
        """The events of ``type`` across runs (of ``kind`` only, when given) as ``keep``
        keeps them, read on from ``before`` (only what is new since, in one snapshot;
        :func:`~dissensus.store.follow.follow`; :class:`~dissensus.store.follow.TypeFollower`
        keeps the state between reads; the journal object's followers share its reads of
        the runs' heads)."""
        return follow(self._backend, type, keep, before, kind=kind, shared=self._heads)

    def event_at(self, run_id: str, seq: int) -> Event | None:
        """The run's event with sequence number ``seq``, if any."""
        return self._log.at([(run_id, seq)]).get((run_id, seq))

    def events_at(self, refs: Sequence[tuple[str, int]]) -> dict[tuple[str, int], Event]:
        """The events at ``(run_id, seq)`` positions, read in one query per 100."""
        return self._log.at(refs)

    # -- seals and verification -------------------------------------------------------

    def seal(self, run_id: str, *, missing_only: bool = False) -> Event | None:
        """Sign the run's current head with the journal's signer (``None`` without one,
        or when the last event already is a seal); ``missing_only``: only when the last
        event is one a seal follows (its seal lost to a crash between the two commits)."""
        return self._seals.seal(run_id, missing_only=missing_only)

    def verify(
        self,
        run_id: str,
        *,
        public_key: PublicKey | None = None,
        review_index: bool = True,
        each: Callable[[Event], None] | None = None,
    ) -> VerifyReport:
        """Recompute the run's hash chain; compare it with the stored text, hashes and
        head, and the run's header (``created``, ``kind``, ``meta``) with the
        ``run.started`` event it was made from (:mod:`~dissensus.store.run_header`).

        With ``public_key``, also check the run's seals (:attr:`VerifyReport.signature`).
        The run's rows of the review index are checked too (and rebuilt when they differ
        and the journal can be written); ``review_index=False`` checks the chain and the
        header alone and writes nothing (what a reading command checks before it shows a
        run). ``each`` is given every stored row's event as the check reads it, in
        sequence order (a command gathering what it shows of the run in the same pass;
        a row that makes no event is its error). A run
        whose header row is gone while its events remain (deleted outside dissensus) is
        a failed report naming that, not :class:`UnknownRun`.
        """

        try:
            self._log.header(run_id)
        except UnknownRun:
            # No header row: a run never made, or one whose row was deleted outside
            # dissensus while its events stayed (the run vanished from every listing).
            left = self._log.count_rows(run_id)
            if not left:
                raise
            return VerifyReport(
                run_id=run_id,
                ok=False,
                n_events=left,
                head_hash="",
                problems=[
                    f"run {run_id!r} has no header row in the journal's runs table, yet "
                    f"{left} of its events remain: the row was removed outside dissensus, "
                    "so no listing shows the run or its review items"
                ],
            )

        def more(run_id: str) -> list[str]:
            found = header_problems(
                run_id, self._log.header(run_id), self._log.row(run_id, STARTED_KEY)
            )
            if review_index:
                found += self._review.problems(run_id)
            return found

        return chain.verify(self._log, run_id, public_key=public_key, more_problems=more, each=each)

    # -- review index -------------------------------------------------------------------

    def rebuild_review_index(self) -> int:
        """Recompute the review index from the ``review.*`` events; the number of items."""
        return self._review.rebuild()

    def review_index_differences(
        self, run_id: str | None = None, *, thorough: bool = True
    ) -> list[str]:
        """The review ids whose index row differs from what the events derive, by content
        (at most 20 named; :meth:`ReviewIndex.differences
        <dissensus.store.review_index.ReviewIndex.differences>`)."""
        return self._review.differences(run_id, thorough=thorough)

    def review_index_agrees(self) -> bool:
        """Whether every row of the review index is what the events derive (by content)."""
        return not self._review.differences()

    def review_entries(
        self,
        *,
        run_id: str | None = None,
        status: ReviewFilter = "all",
        limit: int | None = None,
        after: QueuePlace | None = None,
    ) -> list[IndexEntry] | None:
        """Review items in queue order (oldest run first, then by position in the run),
        from the review index; ``None`` when the index cannot be trusted (read-only journal
        whose index disagrees with its events: list from the events instead); at most
        ``limit`` of them; with ``after``, only those after that place in the queue."""
        return self._review.entries(run_id=run_id, status=status, limit=limit, after=after)

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
        standing resolution). With ``closed_by`` the claim holds the run's write lock, as a
        resolution does, so a claim and a resolution of one case never interleave: a
        claim is never granted on a case resolved before it. A caller whose closing key
        can change (a resolution undone, the next one keyed anew) reads it inside its own
        :meth:`transaction` on the run, which the claim joins.
        """
        return self._claims.claim(review_id, who, ttl, run_id=run_id, closed_by=closed_by)

    def current_claim(self, review_id: str) -> Claim | None:
        """The unexpired claim on ``review_id``, if any."""
        return self._claims.current(review_id)

    def current_claims(self, review_ids: Sequence[str]) -> dict[str, Claim]:
        """The unexpired claims on ``review_ids`` (one query per 100 ids)."""
        return self._claims.current_many(review_ids)

    def release_claim(self, review_id: str, who: str | None = None) -> bool:
        """Drop the claim on ``review_id`` (only ``who``'s, when given); whether there was
        one to drop. Someone else's claim is left as it is (``False``)."""
        return self._claims.release(review_id, who)

    # -- run locks ----------------------------------------------------------------------

    def acquire_run_lock(self, run_id: str, pid: int | None = None) -> RunLock | None:
        """Take the run's execution lock for ``pid`` (default: this process).

        Returns ``None`` when taken (or already held by ``pid``: then nothing is
        written), else the holder. A holder on this host whose process is gone is
        replaced. Released by :meth:`release_run_lock`. Inside :meth:`transaction` it
        commits with the transaction. A deferred run's lock is taken when it is created.
        """
        if run_id in self._deferred:
            return None
        return self._locks.acquire(run_id, pid)

    def run_lock_holder(self, run_id: str) -> RunLock | None:
        """The live process holding the run's execution lock (this one included), or
        ``None``: reads only (a holder on this host whose process is gone holds nothing)."""
        if run_id in self._deferred:
            return RunLock(
                run_id=run_id, pid=os.getpid(), host=socket.gethostname(), acquired=clock.now()
            )
        return self._locks.holder(run_id)

    def run_status(self, run_id: str) -> RunStatus:
        """``finished`` (its ``run.finished`` is journalled), ``running`` (a live process
        holds its execution lock) or ``incomplete`` (stopped: resumable)."""
        if self.get(run_id, "run/finished") is not None:
            return "finished"
        return self._unfinished(run_id)

    def run_statuses(self, run_ids: Sequence[str]) -> dict[str, RunStatus]:
        """:meth:`run_status` of each run, their ``run.finished`` events read in one query
        (only the runs not finished are asked for their lock)."""
        done = self._log.finished(run_ids)
        return {
            run_id: "finished" if run_id in done else self._unfinished(run_id) for run_id in run_ids
        }

    def _unfinished(self, run_id: str) -> RunStatus:
        return "running" if self.run_lock_holder(run_id) is not None else "incomplete"

    def release_run_lock(self, run_id: str, pid: int | None = None) -> None:
        """Release the run's execution lock if ``pid`` (default: this process) holds it.

        Inside :meth:`transaction` the release commits with the transaction (a run's last
        events and its release in one commit). A deferred run not created yet is
        given up: it leaves nothing; one whose creation was refused releases nothing."""
        if self._deferred.settle(run_id):
            return
        self._locks.release(run_id, pid)


FROM_ENV: Final = "env"
"""``open_journal``'s default signer: the one of ``$DISSENSUS_SIGNING_KEY``, if set."""


def open_journal(
    target: str | Path | None = None,
    *,
    after_append: Callable[[Event], None] | None = None,
    busy_timeout: float | None = None,
    signer: Signer | Literal["env"] | None = FROM_ENV,
) -> Journal:
    """Open the journal ``target`` names (a path or ``postgresql://`` URL; default
    :func:`journal_path`): the one way every door opens a journal it is given by name.

    Its runs are sealed with ``signer``, by default the signer of
    ``$DISSENSUS_SIGNING_KEY`` (:func:`~dissensus.signing.signer_from_env`: unset is
    unsigned; a key set but empty or that does not parse is a
    :class:`~dissensus.errors.ConfigError` naming the variable, raised before the
    journal is opened, never repeating the key); ``None`` opens it unsigned.
    ``Journal(target)`` reads no environment: a journal object keeps the signer it was
    made with."""
    if isinstance(signer, str):  # FROM_ENV
        from dissensus.signing import signer_from_env

        signer = signer_from_env()
    resolved = journal_path(str(target) if target is not None else None)
    return Journal(resolved, after_append=after_append, busy_timeout=busy_timeout, signer=signer)


__getattr__ = deprecated_names(
    __name__,
    renamed(
        __name__,
        globals(),
        {"ReviewEntry": "IndexEntry"},
        "dissensus.outputs.ReviewEntry is the review queue's entry",
    ),
)
