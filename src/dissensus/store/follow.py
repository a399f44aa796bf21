"""Following one type of event across a journal's runs: each read reads only what is new.

:class:`TypeFollower` keeps, for every run of the journal, what it took from the run's
events of one type (``keep``: a value, or ``None`` for an event it counts and does not
keep) and how far it read: the run's number of events and the hash of the last of them
(the head of the run's hash chain there). :meth:`TypeFollower.read` brings it up to date
and returns a :class:`Followed`: the kept values of every run, in the order a full read
(:meth:`~dissensus.store.journal.Journal.events_of_type`) lists them (run order, then
sequence), and how many events of the type the journal holds.

Choices this module makes:

* **One snapshot.** Everything a read asks (the runs' heads, the count, the checks of
  the marks, the new events) is one read transaction
  (:meth:`~dissensus.store.backend.Backend.snapshot`): events another writer commits
  meanwhile are not seen by this read, and the next read takes them, never half of a
  state. A busy journal is read as incrementally as an idle one. The snapshot only
  fetches rows: they are parsed (and ``keep`` called) after it ends, so the back end,
  which a journal's other readers and writers in the process share, is held only for
  the queries.
* **What is new.** A run whose head (number of events and head hash) is the one read
  last time is not read. A run that grew is checked first: its event at the last
  sequence number read must still hold the hash read there, which (the chain hashing
  each event on the one before it) means every event read before is still the run's;
  then only its events of the type after that number are read. A run that is new, that
  shrank, whose head changed at the same count (a journal restored from a backup, or
  replaced by another with the same number of events) or whose mark no longer holds
  the hash read is read again from its first event; a run gone from the journal is
  dropped. The order of the runs is the journal's own (``ORDER BY created, run_id``,
  read each time), so a run whose time changed moves as a full read moves it. The
  result is thus the full read's, computed from the rows a full read would read,
  whatever was appended, restored or replaced between two reads.
* **What it trusts.** The runs' heads are the journal's record of what each run holds
  (written in the transaction of every append). A stored event changed outside
  dissensus without its chain (its text edited, its hash left) is not seen by a follower
  that read it before; that is what ``runs verify`` names.
* **A failed read changes nothing.** The new state is built aside and kept only when
  the whole read succeeded: a read that fails (the journal busy, the connection lost,
  a damaged row) leaves the follower as it was, and the next read starts from there.
* **Another journal.** The state is keyed by the journal's name (and the type and run
  kind followed): given a journal of another name, the follower starts afresh.
* **Runs of one kind.** Given a run kind, a read takes only the runs of that kind: their
  heads and their order are read with the kind (the runs' table says it at every read),
  so a run whose kind is no longer that one is dropped and a run that became one is read
  whole; the count is then the events of the type those runs hold.
* **Cost.** A read costs the journal's runs' heads (one light row per run, no payload)
  and the events of the type in the runs that changed since the last read; when every
  head is the one read last time, in the same order (nothing was journalled), the heads
  (and every run's time) are compared at once, not run by run, and the order is not
  read again. When many
  runs changed (a first read), their events of the type are read in one query rather
  than a query per hundred runs. When the only runs that changed are new ones after
  every run read before (one-case runs, as the one-panel doors make them), the values
  kept in order are those of the last read followed by the new runs' (:attr:`Followed.extends`),
  not gathered again run by run. When the heads read begin with those of the last
  read, unchanged (the runs' table gives its rows in the order they were made unless
  rows were deleted, so new runs usually come last), only the runs after them are
  looked at one by one; otherwise every run is (a run whose number of events was not a
  number turns this off: it is read whole whenever the heads changed).
* **Nothing committed since.** Each read first asks the back end what was committed
  since (:meth:`~dissensus.store.backend.Backend.version`, in the read's snapshot: on
  SQLite the file's identity, ``PRAGMA data_version`` and the journal object's own
  writes; on PostgreSQL the server's transaction snapshot; the back ends' modules say
  why each is exact). A read whose version is the one its last read had returns that
  read's state as it is, reading nothing else: nothing was committed, so a full read
  would read the same. Any commit changes it: this journal object's, another
  connection's or process's, a restore of an SQLite file through SQLite's backup API
  (by a connection other than the journal's own). An SQLite file replaced by rename is
  another file identity, so the heads are read again, from the file the journal's
  connection opened (as every read of that connection reads it). Inside a write
  transaction of the journal object there is no version, and the heads are read.
* **Heads shared.** The followers of one journal object (the review desk's, the shift
  watch's in the same process) share the reads of the runs' heads and of their order
  (:class:`SharedHeads`, kept by the journal object): a follower reads them only when
  what was committed since they were last read changed. The heads of a run kind are
  read with the kind (``WHERE kind = ?``), so a follower of one kind reads only its
  kind's rows; when every run's heads are read at that version (a follower of every
  run read them, or did at the last version, in which case they are read first), those
  of a kind are picked from them. Rows are shared, not copied: a kind's heads picked
  are the rows of every run's, every run's read after a kind's reuse the kind's rows
  where equal, the order's ids are those of the heads, and after a commit the heads
  and order read before are kept when they begin the new ones unchanged (new runs come
  last), so the runs' ids and hashes the followers keep are then held once (a run
  changed among them has its rows read anew, and the runs after it are then held
  twice until the followers read them again). Without a version each read reads the
  heads (and, when they changed, the order) itself.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from dissensus.store.events import Event, EventRow, event_from_row

if TYPE_CHECKING:
    from dissensus.store.backend import Backend
    from dissensus.store.journal import Journal

__all__ = ["BULK_RUNS", "Followed", "RunRead", "SharedHeads", "TypeFollower", "follow"]

T = TypeVar("T")

BULK_RUNS = 200
"""Runs to read from above which a read asks for every event of the type in one query."""

_CHUNK = 100
"""Runs named in one query (each ``run_id`` and sequence number a parameter)."""

_SERIALS = itertools.count(1)

_HEADS = "SELECT run_id, n_events, head_hash, created, kind FROM runs"
"""Every run's head: what a read compares (the table's own order, its pages read once
each; a lookup of each run's row by the index would read the table's pages, spread
among the events', once per run)."""

Head = tuple[Any, ...]
"""One run's head as read: ``run_id``, number of events, head hash, creation time, kind."""


class SharedHeads:
    """The runs' heads, and their order, of each run kind as one journal object's
    followers last read them, with the back end's version of that read (see the module
    docstring): followers reading at the same version take them from here. Used inside a
    snapshot only (under the back end's lock)."""

    __slots__ = ("_kinds", "_last", "_orders", "_version")

    def __init__(self) -> None:
        self._version: Hashable | None = None
        self._kinds: dict[str | None, list[Head]] = {}
        self._orders: dict[str | None, tuple[str, ...]] = {}
        self._last: tuple[dict[str | None, list[Head]], dict[str | None, tuple[str, ...]]]
        self._last = ({}, {})

    def _kept(self, version: Hashable | None) -> bool:
        """Whether what is read at ``version`` is kept (there is a version); what was
        kept at another version is then only the one to take unchanged rows from."""
        if version is None:
            return False
        if version != self._version:
            self._last = (self._kinds, self._orders) if self._kinds else self._last
            self._version, self._kinds, self._orders = version, {}, {}
        return True

    def read(self, backend: Backend, version: Hashable | None, kind: str | None) -> list[Head]:
        """The heads of the runs (of ``kind`` only, when given) in the snapshot open,
        whose version is ``version``: those read at that version, else read now."""
        if not self._kept(version):
            return _read_heads(backend, kind)
        found = self._kinds.get(kind)
        if found is not None:
            return found
        if kind is not None and None not in self._kinds and None in self._last[0]:
            # Every run's heads were read at the last version too: read them once.
            self.read(backend, version, None)
        every = self._kinds.get(None)
        if kind is not None and every is not None:
            # Every run's heads were read at this version: the kind's are picked.
            found = [row for row in every if row[4] == kind]
        else:
            found = _read_heads(backend, kind)
            last = self._last[0].get(kind)
            if last and found[: len(last)] == last:
                # The heads read before, unchanged, then new ones: those read before
                # are kept (their ids and hashes are the followers'), not copies.
                found = last + found[len(last) :]
            if kind is None and self._kinds:
                found = _shared_rows(found, self._kinds)
        self._kinds[kind] = found
        return found

    def order(
        self, backend: Backend, version: Hashable | None, kind: str | None
    ) -> tuple[str, ...]:
        """The runs (of ``kind`` only, when given) in the journal's order, in the
        snapshot open, whose version is ``version`` (read at that version once)."""
        if not self._kept(version):
            return _read_order(backend, kind)
        found = self._orders.get(kind)
        if found is None:
            found = _read_order(backend, kind)
            last = self._last[1].get(kind)
            same = len(last) if last and found[: len(last)] == last else 0
            # The ids of the heads read at this version (those read before, unchanged,
            # then the others'), not a copy of each.
            found = (last[:same] if last else ()) + _ids_of(found[same:], self._kinds.get(kind, ()))
            self._orders[kind] = found
        return found


def _shared_rows(rows: list[Head], kinds: Mapping[str | None, list[Head]]) -> list[Head]:
    """``rows`` (every run's heads), each the row of its kind's heads in ``kinds`` where
    that row is equal and comes next in the kind's order (both are in the table's order),
    not a copy of it."""
    at: dict[Any, int] = {}
    shared: list[Head] = []
    for row in rows:
        of_kind = kinds.get(row[4])
        i = at.get(row[4], 0)
        if of_kind is not None and i < len(of_kind) and of_kind[i] == row:
            row = of_kind[i]
            at[row[4]] = i + 1
        shared.append(row)
    return shared


def _ids_of(ids: tuple[str, ...], heads: Sequence[Head]) -> tuple[str, ...]:
    """``ids``, each the string of its head in ``heads`` where it has one (the heads are
    looked at from the last, new runs being there, until every id was found)."""
    wanted = set(ids)
    found: dict[str, str] = {}
    for row in reversed(heads):
        if len(found) == len(wanted):
            break
        if row[0] in wanted:
            found[row[0]] = row[0]
    return tuple(found.get(run_id, run_id) for run_id in ids)


def _read_heads(backend: Backend, kind: str | None) -> list[Head]:
    """The heads of the runs (of ``kind`` only, when given), in the table's order."""
    if kind is None:
        return backend.values(_HEADS)
    return backend.values(_HEADS + " WHERE kind = ?", (kind,))


def _read_order(backend: Backend, kind: str | None) -> tuple[str, ...]:
    """The runs (of ``kind`` only, when given) in the order a full read lists them."""
    where, of_kind = ("", ()) if kind is None else (" WHERE kind = ?", (kind,))
    return tuple(row[0] for row in backend.values(_ORDER.format(where=where), of_kind))


_ORDER = "SELECT run_id FROM runs{where} ORDER BY created, run_id"
"""The runs in the order a read of events across runs lists them."""


@dataclass(frozen=True, slots=True)
class RunRead(Generic[T]):
    """What was read of one run: its head then, its events of the type, those kept."""

    n_events: int | None
    """The run's number of events as read (``None``: not a number, read whole each time)."""
    head_hash: str
    count: int
    """Events of the type read in the run."""
    kept: tuple[tuple[int, T], ...]
    """``(sequence number, value)`` of the events kept, in sequence order."""


@dataclass(frozen=True)
class Followed(Generic[T]):
    """One consistent state of a journal, as a :class:`TypeFollower` read it."""

    journal: str
    """The journal's name."""
    type: str
    runs: Mapping[str, RunRead[T]]
    order: tuple[str, ...]
    """The runs in the journal's order (creation time, then id)."""
    count: int
    """Events of the type the journal holds (runs without a header row included, as
    :meth:`~dissensus.store.journal.Journal.count_of_type` counts them)."""
    values: tuple[T, ...] = ()
    """The kept values in full-read order (run order, then sequence)."""
    read_runs: int = 0
    """Runs whose events this read read (0: nothing was new)."""
    serial: int = 0
    """This state's number, unique in the process."""
    extends: int | None = None
    """The :attr:`serial` of the state whose :attr:`values` begin this one's (``None``:
    read anew)."""
    kind: str | None = None
    """The kind of the runs read (``None``: every run)."""
    heads: Sequence[Head] = ()
    """The runs' heads as read (``run_id``, number of events, head hash, creation time,
    kind), in the order the table gave them."""
    version: Hashable | None = None
    """The back end's version of the read (``None``: none)."""
    damaged: bool = False
    """Whether a run's number of events was not a number (such a run is read whole
    whenever the heads changed)."""

    def kept(self) -> Iterator[T]:
        """The kept values in full-read order (run order, then sequence)."""
        return iter(self.values)


def follow(
    backend: Backend,
    type: str,
    keep: Callable[[Event], T | None],
    before: Followed[T] | None,
    *,
    kind: str | None = None,
    shared: SharedHeads | None = None,
) -> Followed[T]:
    """The state after ``before`` (``None``: nothing read yet), read in one snapshot
    (see the module docstring); ``before`` itself is never changed. With ``kind``, only
    the runs of that kind are read; with ``shared``, the heads are those it holds when
    read at the same version."""
    if before is not None and (
        before.journal != backend.path or before.type != type or before.kind != kind
    ):
        before = None
    known: Mapping[str, RunRead[T]] = before.runs if before is not None else {}
    with backend.errors(), backend.snapshot():
        version = backend.version()
        if before is not None and version is not None and version == before.version:
            # Nothing was committed since the last read: its state is this one's.
            return replace(before, read_runs=0, serial=next(_SERIALS), extends=before.serial)
        shared = shared or SharedHeads()
        heads = shared.read(backend, version, kind)
        count = (
            int(backend.values("SELECT COUNT(*) FROM events WHERE type = ?", (type,))[0][0])
            if kind is None
            else -1  # the events of the type the runs read hold: summed below
        )
        if before is not None and (heads is before.heads or heads == before.heads):
            # Every run's head and time as read last time: nothing to read, and the
            # runs' order is the one read then.
            return replace(
                before,
                count=before.count if count < 0 else count,
                read_runs=0,
                serial=next(_SERIALS),
                extends=before.serial,
                heads=heads,
                version=version,
            )
        order = shared.order(backend, version, kind)
        # The heads read last time, unchanged, then new runs (the table's order is the
        # order rows were made in, so new runs come last): those runs are as read then,
        # and only the new ones are looked at one by one.
        same = 0
        if before is not None and not before.damaged and len(heads) >= len(before.heads):
            same = len(before.heads) if heads[: len(before.heads)] == before.heads else 0
        runs: dict[str, RunRead[T]] = dict(known) if same else {}
        damaged = False
        marks: dict[str, int] = {}
        """Runs to read, from which sequence number."""
        grown: list[tuple[str, int, str]] = []
        for run_id, n_events, head_hash, *_ in itertools.islice(heads, same, None):
            old = known.get(run_id)
            if n_events.__class__ is not int:
                n_events = None  # damaged: read whole each time
                damaged = True
            if old is not None and old.n_events is not None:
                if old.n_events == n_events and old.head_hash == head_hash:
                    runs[run_id] = old
                    continue
                if old.n_events and n_events is not None and old.n_events < n_events:
                    grown.append((run_id, old.n_events - 1, old.head_hash))
                    marks[run_id] = old.n_events
                    runs[run_id] = RunRead(n_events, head_hash, 0, ())
                    continue
            marks[run_id] = 0
            runs[run_id] = RunRead(n_events, head_hash, 0, ())
        for start in range(0, len(grown), _CHUNK):
            chunk = grown[start : start + _CHUNK]
            where = " OR ".join(["(run_id = ? AND seq = ?)"] * len(chunk))
            held = {
                (run_id, seq): digest
                for run_id, seq, digest in backend.values(
                    f"SELECT run_id, seq, hash FROM events WHERE {where}",
                    [x for run_id, seq, _ in chunk for x in (run_id, seq)],
                )
            }
            for run_id, seq, digest in chunk:
                if held.get((run_id, seq)) == digest:
                    old, new = known[run_id], runs[run_id]
                    runs[run_id] = RunRead(new.n_events, new.head_hash, old.count, old.kept)
                else:
                    marks[run_id] = 0  # the run read before is not this one: read it whole
        rows = _new_rows(backend, type, marks)
    # The rows are parsed and kept out of the snapshot: the back end (shared with the
    # journal's other readers and writers) is free again once they are fetched.
    counts = dict.fromkeys(marks, 0)
    added: dict[str, list[tuple[int, T]]] = {run_id: [] for run_id in marks}
    for row in rows:
        run_id = str(row["run_id"])
        event = event_from_row(row)
        counts[run_id] += 1
        value = keep(event)
        if value is not None:
            added[run_id].append((event.seq, value))
    for run_id in marks:
        run = runs[run_id]
        runs[run_id] = RunRead(
            run.n_events, run.head_hash, run.count + counts[run_id], (*run.kept, *added[run_id])
        )
    # Only runs after those read before are new (the usual case: new runs): the values
    # read before begin the new ones; else they are gathered anew.
    values: tuple[T, ...]
    extends = None
    if (
        before is not None
        and not any(run_id in known for run_id in marks)
        and order[: len(before.order)] == before.order
    ):
        extends = before.serial
        tail = (v for run_id in order[len(before.order) :] for _, v in runs[run_id].kept)
        values = before.values + tuple(tail)
    else:
        values = tuple(v for run_id in order for _, v in runs[run_id].kept)
    if count < 0 and same:
        assert before is not None
        count = before.count + sum(runs[row[0]].count for row in heads[same:])
    elif count < 0:
        count = sum(run.count for run in runs.values())
    return Followed(
        journal=backend.path,
        type=type,
        runs=runs,
        order=order,
        count=count,
        values=values,
        read_runs=len(marks),
        serial=next(_SERIALS),
        extends=extends,
        kind=kind,
        heads=heads,
        version=version,
        damaged=damaged,
    )


def _new_rows(backend: Backend, type: str, marks: Mapping[str, int]) -> list[EventRow]:
    """The rows of ``type`` at or after each run's mark in ``marks``, each run's in
    sequence order."""
    if not marks:
        return []
    if len(marks) > BULK_RUNS:
        rows = cast(
            "list[EventRow]",
            backend.rows("SELECT * FROM events WHERE type = ? ORDER BY run_id, seq", (type,)),
        )
        return [row for row in rows if _after(row, marks.get(str(row["run_id"])))]
    wanted = list(marks.items())
    found: list[EventRow] = []
    for start in range(0, len(wanted), _CHUNK):
        chunk: Sequence[tuple[str, int]] = wanted[start : start + _CHUNK]
        where = " OR ".join(["(run_id = ? AND seq >= ?)"] * len(chunk))
        found += cast(
            "list[EventRow]",
            backend.rows(
                f"SELECT * FROM events WHERE type = ? AND ({where}) ORDER BY run_id, seq",
                [type, *(x for pair in chunk for x in pair)],
            ),
        )
    return found


def _after(row: EventRow, mark: int | None) -> bool:
    """Whether the row's run is to be read (``mark`` not ``None``) and its sequence
    number is at or after ``mark`` (a number stored as text, which only a hand edit
    makes, is read again every time)."""
    if mark is None:
        return False
    seq = row["seq"]
    return seq.__class__ is not int or seq >= mark


class TypeFollower(Generic[T]):
    """The events of ``type`` across a journal's runs (of ``kind`` only, when given), each
    kept as ``keep`` says, read incrementally (see the module docstring). Threads may share one: reads are
    independent, and the state kept is that of the read that succeeded last (of reads
    running at once, the last to finish, not necessarily the one that began last)."""

    def __init__(
        self, type: str, keep: Callable[[Event], T | None], *, kind: str | None = None
    ) -> None:
        self.type = type
        self.kind = kind
        """Only the runs of this kind are read (``None``: every run)."""
        self._keep = keep
        self._state: Followed[T] | None = None
        self._lock = threading.Lock()

    @property
    def state(self) -> Followed[T] | None:
        """The state of the read that succeeded last (``None``: none yet)."""
        return self._state

    def forget(self) -> None:
        """Start afresh: the next read reads every event of the type."""
        with self._lock:
            self._state = None

    def read(self, journal: Journal) -> Followed[T]:
        """The journal's state now (:func:`follow` from the last state read); kept only
        when the read succeeds."""
        state = journal.follow(self.type, self._keep, self._state, kind=self.kind)
        with self._lock:
            self._state = state
        return state
