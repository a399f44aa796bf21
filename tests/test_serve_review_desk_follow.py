"""The review desk's remembered reads (the automatic decisions, the acceptance files of the
runs' starts, the queue's search texts) are those of the journal as it is: after a
restore from a backup, or a run written again, that leaves the journal as many events
of each type and the same newest one, the desk showed the cases it had read before; it
now finds what a desk reading everything anew finds, on both back ends, reading only
what is new since its last read, whichever connection or process wrote, and a page with
nothing new reads nothing but what the back end says was committed since."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import dissensus.serve.journal_adapter as adapter
import dissensus.store.clock as clock
import dissensus.store.follow as follow_module
from dissensus.pipeline.batch import RUN_KIND
from dissensus.serve.journal_adapter import ReviewDesk
from dissensus.store import Journal
from dissensus.store import event_types as ev
from dissensus.store.journal import NewEvent

RUNS = ("r0", "r1", "r2")
QUESTIONS = ("cats", "dogs")
TABLES = ("runs", "events", "review_index")


class _World:
    """A journal (the desk's), another connection to it, the one of the two the test
    writes with, a clock the test moves, and what the test wrote."""

    def __init__(
        self, journal: Journal, monkeypatch: pytest.MonkeyPatch, other: Journal | None = None
    ) -> None:
        self.desk_journal = self.journal = journal
        self.other = other or journal
        self.copy: Path | None = None
        """A copy of the journal file (SQLite's backup API), when one was made."""
        self.n = 0
        self.tick = 0
        self.backup: dict[str, list[dict[str, Any]]] | None = None
        monkeypatch.setattr(clock, "now", self.now)

    def now(self) -> str:
        self.tick += 1
        return f"2030-01-01T00:00:{self.tick // 1_000_000:02d}.{self.tick % 1_000_000:06d}+00:00"

    def _event(self, type: str, run_id: str, value: Any, line: str | None = None) -> NewEvent:
        """A case's record or review item (a new case unless ``line`` is given)."""
        if line is None:
            self.n += 1
            line = str(self.n)
        if type == ev.CASE_RECORD:
            payload: dict[str, Any] = {"id": f"c{line}", "auto": value, "decision": "1"}
        else:
            payload = {
                "review_id": f"{run_id}.{line}",
                "id": f"c{line}",
                "reason": "split",
                "panel": {"meta": {"question": f"about {value}"}},
            }
        kind = "record" if type == ev.CASE_RECORD else "review"
        return NewEvent(type, payload, f"case/{line}/{kind}", line)

    def start(self, run_id: str, kind: str, sha: str | None) -> None:
        """The run made (when missing), its start naming acceptance file ``sha``."""
        if self.journal.run(run_id, missing_ok=True) is not None:
            return
        acc = {"sha256": sha, "target_precision": 0.9, "delta": 0.05} if sha else None
        payload = {"kind": kind, "acceptance": acc}
        self.journal.create_run(run_id, kind=kind, meta={}, first=(ev.RUN_STARTED, payload, "s"))

    def add(self, run_id: str, events: list[tuple[str, Any]]) -> None:
        self.start(run_id, RUN_KIND, None)
        self.journal.append_batch(run_id, [self._event(t, run_id, v) for t, v in events])

    def rows(self) -> dict[str, list[dict[str, Any]]]:
        backend = self.journal._backend
        return {table: backend.rows(f"SELECT * FROM {table}") for table in TABLES}

    def replace(self, rows: dict[str, list[dict[str, Any]]]) -> None:
        """The journal's runs, events and review index replaced by ``rows`` (a restore)."""
        backend = self.journal._backend
        with self.journal.transaction():
            for table in reversed(TABLES):
                backend.exec(f"DELETE FROM {table}")
            for table in TABLES:
                for row in rows[table]:
                    marks = ", ".join("?" * len(row))
                    backend.exec(
                        f"INSERT INTO {table} ({', '.join(row)}) VALUES ({marks})",
                        list(row.values()),
                    )

    def drop(self, run_id: str) -> list[Any]:
        """The run deleted; its events as they were."""
        events = list(self.journal.events(run_id))
        backend = self.journal._backend
        with self.journal.transaction():
            for table in reversed(TABLES):
                backend.exec(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
        return events

    def rewrite(self, run_id: str, kind: str, flip: bool) -> None:
        """The run made again (of ``kind``) with its cases' events, their automatic flags
        and questions changed when ``flip``, and another acceptance file."""
        events = self.drop(run_id)
        if not events:
            return
        started = events[0].payload.get("acceptance") or {}
        self.start(run_id, kind, "B" if started.get("sha256") == "A" else "A")
        again = []
        for e in events[1:]:
            if e.type == ev.CASE_RECORD:
                value: Any = bool(e.payload["auto"]) != flip
            else:
                asked = e.payload["panel"]["meta"]["question"].split()[-1]
                value = QUESTIONS[1 - QUESTIONS.index(asked)] if flip else asked
            again.append(self._event(e.type, run_id, value, e.case))
        self.journal.append_batch(run_id, again)


def _seen(desk: ReviewDesk) -> tuple[Any, ...]:
    """What the desk shows: the automatic decisions, the acceptance files, the queue's
    entries matching each question."""
    return (
        desk.auto_cases(audited=True),
        desk.acceptance_files(),
        *(desk.order(text=q) for q in QUESTIONS),
    )


def _sqlite(journal: Journal) -> bool:
    return journal._backend.dialect == "sqlite"


def _file_copy(world: _World, tmp_path: Path) -> None:
    """A copy of an SQLite journal's file, made through SQLite's backup API."""
    if not _sqlite(world.journal):
        return
    world.copy = tmp_path / "copy.sqlite"
    with (
        sqlite3.connect(world.journal.path) as src,
        sqlite3.connect(world.copy) as dst,
    ):
        src.backup(dst)
    src.close()
    dst.close()


def _file_restore(world: _World) -> None:
    """The copy put back into the journal's file through SQLite's backup API, by a
    connection of its own (PostgreSQL: the rows backed up, put back by the other
    connection)."""
    if world.copy is not None:
        with (
            sqlite3.connect(world.copy) as src,
            sqlite3.connect(world.journal.path, isolation_level=None) as dst,
        ):
            src.backup(dst)
        src.close()
        dst.close()
    elif world.backup is not None and not _sqlite(world.journal):
        world.journal, kept = world.other, world.journal
        try:
            world.replace(world.backup)
        finally:
            world.journal = kept


def _fresh(journal: Journal) -> tuple[Any, ...]:
    """What a desk that remembers nothing shows."""
    return _seen(ReviewDesk(journal, claim_ttl_s=60))


@pytest.fixture
def world(journal_target: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[_World]:
    with (
        Journal(journal_target, synchronous="normal") as journal,
        Journal(journal_target, synchronous="normal") as other,
    ):
        yield _World(journal, monkeypatch, other)


def test_a_restore_keeping_the_count_and_the_newest_event_shows_the_journal(
    world: _World,
) -> None:
    """A journal restored from a backup holding as many case records, run starts and
    review items as before, and the same newest of each (another run was written again
    meanwhile): the desk listed the cases it had read before the restore."""
    world.start("r1", RUN_KIND, "A")
    world.add("r1", [(ev.CASE_RECORD, False), (ev.REVIEW_OPENED, "cats")])
    world.start("r2", RUN_KIND, "A")
    world.add("r2", [(ev.CASE_RECORD, True), (ev.REVIEW_OPENED, "dogs")])
    world.backup = world.rows()
    # r1 written again as an older run (its events timed before r2's), with the other
    # answers: the newest event of each type is still r2's, and the counts are the same.
    world.tick = 0
    world.rewrite("r1", RUN_KIND, flip=True)
    desk = ReviewDesk(world.journal, claim_ttl_s=60)
    before = _seen(desk)
    assert before == _fresh(world.journal)
    assert before[0] == ["r1.1", "r2.3"] and set(before[1]) == {"B", "A"}
    assert [e.review_id for e in before[2]] == []
    world.replace(world.backup)
    assert world.journal.count_of_type(ev.CASE_RECORD) == 2
    after = _seen(desk)
    assert after == _fresh(world.journal)
    assert after[0] == ["r2.3"] and list(after[1]) == ["A"]
    assert [e.review_id for e in after[2]] == ["r1.2"]


_OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("add"),
            st.sampled_from(RUNS),
            st.lists(
                st.one_of(
                    st.tuples(st.just(ev.CASE_RECORD), st.booleans()),
                    st.tuples(st.just(ev.REVIEW_OPENED), st.sampled_from(QUESTIONS)),
                ),
                min_size=1,
                max_size=3,
            ),
        ),
        st.tuples(st.just("start"), st.sampled_from(RUNS), st.sampled_from(["A", "B", None])),
        st.tuples(
            st.just("rewrite"),
            st.sampled_from(RUNS),
            st.sampled_from([RUN_KIND, "other"]),
            st.booleans(),
        ),
        st.tuples(st.just("drop"), st.sampled_from(RUNS)),
        st.just(("rewind",)),
        st.just(("check",)),
        st.just(("backup",)),
        st.just(("restore",)),
        st.just(("restore_file",)),
        st.just(("swap",)),
    ),
    min_size=1,
    max_size=14,
)
"""Cases appended (automatic or not, escalated with one question or the other), runs
started (naming a file or none), written again (of a kind, their answers changed or
not) or deleted, the clock set back, checks, backups and restores (of the rows, or of
the file through SQLite's backup API), by the desk's connection or by another one
(``swap`` changes which)."""


@settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(ops=_OPS, bulk=st.booleans())
# A run resumed after the list was read, and another server's run journalled late with a
# time before every record read:
@example(
    ops=[
        ("add", "r0", [(ev.CASE_RECORD, True)]),
        ("add", "r1", [(ev.CASE_RECORD, True)]),
        ("check",),
        ("add", "r0", [(ev.CASE_RECORD, True)]),
        ("rewind",),
        ("add", "r2", [(ev.CASE_RECORD, True)]),
        ("check",),
    ],
    bulk=False,
)
# A run written again with a time before the newest record's and other answers, then of
# another kind:
@example(
    ops=[
        ("add", "r1", [(ev.CASE_RECORD, True), (ev.REVIEW_OPENED, "cats")]),
        ("add", "r2", [(ev.CASE_RECORD, True)]),
        ("check",),
        ("rewind",),
        ("rewrite", "r1", RUN_KIND, True),
        ("check",),
        ("rewrite", "r1", "other", False),
        ("check",),
    ],
    bulk=False,
)
# Written by another connection after a page, then restored from a copy of the file
# holding as many events of each type:
@example(
    ops=[
        ("add", "r1", [(ev.CASE_RECORD, True), (ev.REVIEW_OPENED, "cats")]),
        ("backup",),
        ("check",),
        ("swap",),
        ("rewrite", "r1", RUN_KIND, True),
        ("check",),
        ("restore_file",),
        ("check",),
        ("swap",),
        ("add", "r2", [(ev.CASE_RECORD, True)]),
    ],
    bulk=False,
)
def test_the_desk_reading_on_finds_what_a_fresh_desk_finds(
    world: _World, ops: list[tuple[Any, ...]], bulk: bool, tmp_path: Path
) -> None:
    world.journal = world.desk_journal
    world.replace({table: [] for table in TABLES})  # each example on an empty journal
    world.backup, world.copy = None, None
    desk = ReviewDesk(world.desk_journal, claim_ttl_s=60)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(follow_module, "BULK_RUNS", 0 if bulk else 200)
        for op in ops:
            kind = op[0]
            if kind == "add":
                world.add(op[1], op[2])
            elif kind == "start":
                world.start(op[1], RUN_KIND, op[2])
            elif kind == "rewrite":
                world.rewrite(op[1], op[2], op[3])
            elif kind == "drop":
                world.drop(op[1])
            elif kind == "rewind":
                world.tick = 0
            elif kind == "backup":
                world.backup = world.rows()
                _file_copy(world, tmp_path)
            elif kind == "restore" and world.backup is not None:
                world.replace(world.backup)
            elif kind == "restore_file":
                _file_restore(world)
            elif kind == "swap":
                world.journal = (
                    world.other if world.journal is world.desk_journal else world.desk_journal
                )
            elif kind == "check":
                assert _seen(desk) == _fresh(world.desk_journal)
        assert _seen(desk) == _fresh(world.desk_journal)


def test_past_the_cap_a_search_reads_its_entries_and_remembers_nothing(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A journal of more review items than a desk remembers the search texts of: each
    search reads those of its entries, and finds what a desk under the cap finds."""
    with Journal(tmp_path / "j.sqlite", synchronous="normal") as journal:
        world = _World(journal, monkeypatch)
        world.add("r0", [(ev.REVIEW_OPENED, "cats"), (ev.REVIEW_OPENED, "dogs")])
        world.add("r1", [(ev.REVIEW_OPENED, "cats")])
        under = [ReviewDesk(journal, claim_ttl_s=60).order(text=q) for q in QUESTIONS]
        assert [[e.review_id for e in got] for got in under] == [["r0.1", "r1.3"], ["r0.2"]]
        monkeypatch.setattr(adapter, "SEARCH_CACHE_ITEMS", 2)
        desk = ReviewDesk(journal, claim_ttl_s=60)
        assert [desk.order(text=q) for q in QUESTIONS] == under
        assert desk._opened.state is None


def _heads_reads(journal: Journal, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A list growing with each read of the runs' heads (``heads``) or of their order
    (``order``) through ``journal``."""
    backend = journal._backend
    real = backend.values
    reads: list[str] = []

    def values(sql: str, args: Any = ()) -> Any:
        if sql.startswith(follow_module._HEADS):
            reads.append("heads")
        elif sql.startswith("SELECT run_id FROM runs") and "ORDER BY created" in sql:
            reads.append("order")
        return real(sql, args)

    monkeypatch.setattr(backend, "values", values)
    return reads


def test_a_page_with_nothing_new_reads_no_heads_and_one_after_a_write(
    world: _World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The desk's followers share one read of the runs' heads; with nothing committed
    since (SQLite says so for free), a page reads none. On PostgreSQL the server's
    snapshot says it, which writes of any database of the server change: only what the
    page shows is compared there."""
    world.start("r1", RUN_KIND, "A")
    world.add("r1", [(ev.CASE_RECORD, True), (ev.REVIEW_OPENED, "cats")])
    desk = ReviewDesk(world.desk_journal, claim_ttl_s=60)
    reads = _heads_reads(world.desk_journal, monkeypatch)
    first = _seen(desk)
    assert first == _fresh(world.desk_journal)
    sqlite = _sqlite(world.desk_journal)
    if sqlite:  # a first read of heads and one of order a kind, for the three followers
        assert sorted(reads) == ["heads", "heads", "order", "order"]
    reads.clear()
    assert _seen(desk) == first
    if sqlite:
        assert reads == []
    for writer in (world.other, world.desk_journal):
        world.journal = writer
        world.add("r2", [(ev.CASE_RECORD, True)])
        reads.clear()
        now = _seen(desk)
        assert now == _fresh(world.desk_journal) and now != first
        if sqlite:  # every run's heads, read once: the decide runs' are picked from them
            assert sorted(reads) == ["heads", "order", "order"]
        first = now


def test_a_write_of_another_process_is_seen(world: _World, journal_target: str) -> None:
    """Another process appends a case between two pages: the desk shows it."""
    world.add("r1", [(ev.CASE_RECORD, True)])
    desk = ReviewDesk(world.desk_journal, claim_ttl_s=60)
    assert _seen(desk)[0] == ["r1.1"]
    script = (
        "import sys\n"
        "from dissensus.store import Journal\n"
        "from dissensus.store.journal import NewEvent\n"
        "payload = {'id': 'c9', 'auto': True, 'decision': '1'}\n"
        "with Journal(sys.argv[1], synchronous='normal') as journal:\n"
        "    journal.append_batch('r1', [NewEvent('case.record', payload, 'case/9/record', '9')])\n"
    )
    subprocess.run([sys.executable, "-c", script, journal_target], check=True, timeout=60)
    seen = _seen(desk)
    assert seen == _fresh(world.desk_journal) and seen[0] == ["r1.1", "r1.9"]


def test_a_file_replaced_by_rename_is_read_as_the_connection_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A journal file replaced by another through a rename: the desk's connection reads
    the file it opened, as every other read of that connection does, and the desk shows
    what a fresh desk on that connection shows."""
    path = tmp_path / "j.sqlite"
    with Journal(path, synchronous="normal") as journal:
        world = _World(journal, monkeypatch)
        world.add("r1", [(ev.CASE_RECORD, True)])
        desk = ReviewDesk(journal, claim_ttl_s=60)
        assert _seen(desk)[0] == ["r1.1"]
        with Journal(tmp_path / "new.sqlite", synchronous="normal") as new:
            _World(new, monkeypatch).add("r2", [(ev.CASE_RECORD, True)])
        (tmp_path / "new.sqlite").rename(path)
        reads = _heads_reads(journal, monkeypatch)
        seen = _seen(desk)
        assert seen == _fresh(journal) and seen[0] == ["r1.1"]
        assert reads  # the file's identity changed: the heads were read again


def test_the_version_changes_with_every_commit_and_only_in_a_read(world: _World) -> None:
    """A back end's version: none outside a read snapshot or inside a write transaction;
    another in a snapshot after a commit of this connection or of another."""
    backend = world.desk_journal._backend
    assert backend.version() is None

    def now() -> Any:
        with backend.snapshot():
            return backend.version()

    first = now()
    assert first is not None
    if _sqlite(world.desk_journal):
        assert now() == first  # nothing committed (PostgreSQL: the server's other databases)
    for writer in (world.desk_journal, world.other):
        world.journal = writer
        world.add(f"r{writer is world.other}", [(ev.CASE_RECORD, True)])
        later = now()
        assert later is not None and later != first
        first = later
    with world.desk_journal.transaction(), backend.snapshot():
        assert backend.version() is None
