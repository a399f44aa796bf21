"""Durability points of a run: how many commits a run makes, and what each one holds.

A run of one panel (``decide``) commits once: the run with ``run.started``, the case's
events and ``run.finished``, without lock rows. A run started from a file commits the
run with ``run.started`` and its execution lock first, then each block, the last with
``run.finished`` and the lock's release. A transaction that rolls back takes nothing
with it, a PostgreSQL session lock included. Both back ends.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dissensus.pipeline import batch as run_loop
from dissensus.pipeline import decide
from dissensus.pipeline.batch import execute_run, start_run
from dissensus.store import Journal, JournalConflict, RunExists
from dissensus.types import Panel
from pipeline_cases import panel, write_jsonl, write_policy, write_script
from store_backends import BACKENDS, raw, target_for


class Commits:
    """What each commit of a journal object wrote (event types; lock rows seen after it)."""

    def __init__(self, journal: Journal, target: str) -> None:
        self.journal = journal
        self.target = target
        self.commits: list[list[str]] = []
        self._pending: list[str] = []
        backend: Any = journal._backend  # the object under test's own back end
        original = backend.commit

        def commit() -> None:
            original()
            self.commits.append(self._pending)
            self._pending = []

        backend.commit = commit
        journal._log.on_write.append(lambda _run, events: self._seen(events))

    def _seen(self, events: Any) -> None:
        self._pending.extend(e.type for e in events)

    def reset(self) -> None:
        self.commits = []


@pytest.fixture(params=BACKENDS)
def journal(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Journal, str]]:
    with target_for(request.param, tmp_path) as target, Journal(target) as j:
        yield j, target


def _lock_rows(target: str, run_id: str) -> list[tuple[Any, ...]]:
    return raw(target, "SELECT pid FROM run_locks WHERE run_id = ?", (run_id,))


def test_a_run_of_one_case_commits_once(journal: tuple[Journal, str]) -> None:
    j, target = journal
    seen = Commits(j, target)
    record = decide(Panel.model_validate(panel("p", ["A", "A", "A"])), journal=j, run_id="one")
    assert record.id == "p"
    types = [e.type for e in j.events("one")]
    assert types[0] == "run.started" and types[-1] == "run.finished"
    # The run, its case and run.finished: one commit, no lock row written.
    assert seen.commits == [types], seen.commits
    assert _lock_rows(target, "one") == []
    assert j.verify("one").ok
    # Another process (pid) may take the lock: it was released, not left behind.
    assert j.acquire_run_lock("one", pid=1) is None
    j.release_run_lock("one", pid=1)
    # Deciding it again replays the finished run from the journal: no commit at all
    # (no lock taken, no event written).
    seen.reset()
    again = decide(Panel.model_validate(panel("p", ["A", "A", "A"])), journal=j, run_id="one")
    assert again == record
    assert seen.commits == []
    assert _lock_rows(target, "one") == []
    assert [e.type for e in j.events("one")] == types


def test_a_run_of_several_blocks_commits_once_per_block_and_once_to_start(
    journal: tuple[Journal, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    j, target = journal
    monkeypatch.setattr(run_loop, "BLOCK_CASES", 2)
    rows: list[dict[str, Any] | str] = [panel(f"p{i}", ["A", "A", "B"]) for i in range(5)]
    path = write_jsonl(tmp_path / "in.jsonl", [*rows, "{not json"])
    seen = Commits(j, target)
    info = start_run(j, str(path), run_id="many", lock=True)
    assert len(seen.commits) == 1 and seen.commits[0] == ["run.started"]
    assert [r[0] for r in _lock_rows(target, "many")] == [os.getpid()]

    async def run() -> list[Any]:
        return [r async for r in execute_run(j, info.run_id)]

    records = asyncio.run(run())
    assert [r.id for r in records] == [f"p{i}" for i in range(5)]
    blocks = seen.commits[1:]
    # Each block is one commit; the last also holds run.finished (and the lock's release).
    assert len(blocks) >= 3
    assert all("run.finished" not in c for c in blocks[:-1])
    assert blocks[-1][-1] == "run.finished" and any("input.rejected" in c for c in blocks)
    assert sum(c.count("case.record") for c in blocks) == 5
    assert _lock_rows(target, "many") == []
    report = j.verify("many")
    assert report.ok and report.finished, report.problems


def test_a_run_created_with_its_lock_rolls_back_whole(journal: tuple[Journal, str]) -> None:
    j, target = journal
    started = ("run.started", {"x": 1}, "run/started")
    j.create_run("taken", kind="t", meta={}, first=started, exclusive=True, lock_pid=4242)
    with pytest.raises(RunExists):
        j.create_run("taken", kind="t", meta={}, first=started, exclusive=True, lock_pid=1)
    # The second create changed nothing: the first's lock and event stand.
    assert [r[0] for r in _lock_rows(target, "taken")] == [4242]
    assert j.head("taken").n_events == 1


def test_a_lock_held_elsewhere_refuses_the_run_and_leaves_nothing(
    journal: tuple[Journal, str],
) -> None:
    j, target = journal
    j.create_run("r", kind="t", meta={})
    j.create_run("r2", kind="t", meta={})
    other = Journal(target)
    try:
        # The other journal object (another session on PostgreSQL) holds run "r".
        assert other.acquire_run_lock("r", pid=1) is None
        with pytest.raises(JournalConflict):
            j.create_run("r", kind="t", meta={}, first=("t.x", {}, "k"), lock_pid=2)
        assert j.head("r").n_events == 0  # the event of the refused transaction is gone
        other.release_run_lock("r", pid=1)
        # Taken inside a transaction that rolls back: nothing held afterwards (the
        # PostgreSQL session lock is released with the rollback).
        with pytest.raises(RuntimeError), j.transaction("r2"):
            assert j.acquire_run_lock("r2", pid=3) is None
            raise RuntimeError("roll back")
        assert _lock_rows(target, "r2") == []
        assert other.acquire_run_lock("r2", pid=5) is None
        other.release_run_lock("r2", pid=5)
        # Released inside a transaction: free once it commits.
        assert j.acquire_run_lock("r2", pid=6) is None
        with j.transaction("r2"):
            j.release_run_lock("r2", pid=6)
        assert _lock_rows(target, "r2") == []
        assert other.acquire_run_lock("r2", pid=7) is None
        other.release_run_lock("r2", pid=7)
    finally:
        other.close()


def test_a_new_run_is_created_without_reading_it_back(journal: tuple[Journal, str]) -> None:
    """A run the transaction inserts has no events, a known head and a known header: its
    creation (with its first event and its lock) reads none of them back, and the header
    it returns is the one stored."""
    j, _target = journal
    backend: Any = j._backend  # the object under test's own back end
    original = backend.rows
    reads: list[str] = []

    def rows(sql: str, args: Any = ()) -> Any:
        words = sql.split()
        reads.append(" ".join(words))
        return original(sql, args)

    backend.rows = rows
    meta = {"input": "x.jsonl", "n": [1, 2.5, None], "é": "ü"}
    started = ("run.started", {"spec": {"b": 1, "a": [0.1, "t"]}}, "run/started")
    fresh = j.create_run("fresh", kind="decide", meta=meta, first=started, lock_pid=4242)
    # The id check inside the transaction, then only the lock's own reads: the new run's
    # events, head and row lock are not read.
    assert reads[0] == "SELECT * FROM runs WHERE run_id = ?"
    assert not [r for r in reads if " FROM events " in r or "head_hash" in r], reads
    assert not [r for r in reads if r.startswith("SELECT 1 FROM runs")], reads
    reads.clear()
    j.create_run("plain", kind="t", meta={}, first=started)
    assert reads == ["SELECT * FROM runs WHERE run_id = ?"]  # the id check alone
    backend.rows = original
    assert fresh == j.run("fresh")
    assert (fresh.n_events, fresh.meta) == (1, meta)
    assert fresh.head_hash == list(j.events("fresh"))[-1].hash
    assert j.verify("fresh").ok
    # Without a first event the header is the new run's too.
    bare = j.create_run("bare", kind="t", meta={})
    assert bare == j.run("bare") and bare.n_events == 0
    # An existing run (not exclusive) is read as before: the first event is not repeated.
    again = j.create_run("fresh", kind="decide", meta=meta, first=started)
    assert again == fresh and len(list(j.events("fresh"))) == 1


def test_a_single_panel_with_a_model_call_is_created_before_the_call(
    journal: tuple[Journal, str], tmp_path: Path
) -> None:
    """The case's steps are journalled before its paid call: the run is created there,
    with its lock (a killed process leaves a run ``runs resume`` finishes); its end and
    the lock's release are the last commit."""
    j, target = journal
    script = write_script(tmp_path / "s.yaml", {"a1": "1", "a2": "1", "a3": "2"})
    policy = write_policy(tmp_path / "p.yaml", {"seek_context": {"model": f"scripted:{script}"}})
    seen = Commits(j, target)
    locks: list[list[Any]] = []
    j.after_append = lambda e: locks.append([r[0] for r in _lock_rows(target, "live")])
    record = decide(
        Panel.model_validate(panel("live", ["1", "1", "1"])), policy, journal=j, run_id="live"
    )
    j.after_append = None
    types = [e.type for e in j.events("live")]
    assert "model.call" in types, types
    assert len(seen.commits) >= 2 and seen.commits[0][:2] == ["run.started", "case.steps"]
    assert locks[0] == [os.getpid()]  # held from the run's creation on
    assert seen.commits[-1][-1] == "run.finished" and _lock_rows(target, "live") == []
    assert [t for c in seen.commits for t in c] == types
    assert j.verify("live").ok and record.id == "live"


def test_a_deferred_run_exists_only_once_written(journal: tuple[Journal, str]) -> None:
    j, target = journal
    started = ("run.started", {"x": 1}, "run/started")
    j.defer_run("later", kind="t", meta={"m": 1}, first=started, lock_pid=4242)
    # Not in the journal: reads find nothing.
    assert j.run("later", missing_ok=True) is None and j.get("later", "run/started") is None
    assert list(j.events("later")) == [] and j.cases_with_events("later", ["1"]) == set()
    deferred = j.deferred("later")
    assert deferred is not None and deferred.payload == {"x": 1}
    # A first write that rolls back creates nothing, and the run stays deferred.
    with pytest.raises(RuntimeError), j.transaction("later"):
        j.append("later", "t.x", {"i": 0}, key="k0")
        raise RuntimeError("roll back")
    assert j.run("later", missing_ok=True) is None and j.deferred("later") is not None
    assert raw(target, "SELECT run_id FROM runs WHERE run_id = ?", ("later",)) == []
    # The first write creates it, with its first event and its lock, in its transaction.
    j.append("later", "t.x", {"i": 1}, key="k1")
    assert j.deferred("later") is None
    assert [e.key for e in j.events("later")] == ["run/started", "k1"]
    assert [r[0] for r in _lock_rows(target, "later")] == [4242]
    info = j.run("later")
    assert info is not None and info.meta == {"m": 1} and j.verify("later").ok
    # Given up before any write: nothing is left.
    j.defer_run("never", kind="t", meta={}, first=started, lock_pid=1)
    j.release_run_lock("never", pid=1)
    assert j.deferred("never") is None and j.run("never", missing_ok=True) is None
    # An id taken meanwhile: the first write is refused whole.
    j.defer_run("later", kind="t", meta={}, first=started)
    with pytest.raises(RunExists):
        j.append("later", "t.x", {"i": 2}, key="k2")
    assert j.deferred("later") is None  # given up: the run holding the id reads as it is
    assert [e.key for e in j.events("later")] == ["run/started", "k1"]
    # Its release (as execute_run's) releases nothing: the lock is the other run's.
    j.release_run_lock("later", pid=4242)
    assert [r[0] for r in _lock_rows(target, "later")] == [4242]
    j.release_run_lock("later", pid=4242)
    assert _lock_rows(target, "later") == []  # a release of its own is one again
    # An id this journal object is starting already is refused at once.
    j.defer_run("twice", kind="t", meta={}, first=started)
    with pytest.raises(RunExists, match="being started"):
        j.defer_run("twice", kind="t", meta={}, first=started)


def test_a_deferred_run_refused_at_its_write_leaves_the_other_runs_lock(
    journal: tuple[Journal, str],
) -> None:
    """The id was taken after the deferred run was registered: its one write is refused
    (``RunExists``) and its end releases nothing, not the lock of the run holding the id."""
    j, target = journal
    j.create_run("x", kind="decide", meta={}, lock_pid=os.getpid())
    other = Journal(target)
    try:
        text = json.dumps(panel("p", ["A", "A", "A"])) + "\n"
        start_run(other, None, text=text, run_id="x", lock=True, defer=True)

        async def run() -> list[Any]:
            return [r async for r in execute_run(other, "x")]

        with pytest.raises(RunExists):
            asyncio.run(run())
        assert [r[0] for r in _lock_rows(target, "x")] == [os.getpid()]
        assert list(j.events("x")) == []
    finally:
        other.close()


def test_cases_without_model_calls_are_committed_in_full_blocks(
    journal: tuple[Journal, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Group commit: cases that make no model call arrive within a few turns of the event
    loop, so the loop fills its blocks instead of committing every few cases (it committed
    about every 4 cases when it looked only one turn ahead: 502 commits for 2,000 cases)."""
    j, target = journal
    monkeypatch.setattr(run_loop, "BLOCK_CASES", 16)
    rows = [panel(f"p{i}", ["A", "A", "B"]) for i in range(96)]
    path = write_jsonl(tmp_path / "in.jsonl", rows)
    info = start_run(j, str(path), run_id="blocks")
    seen = Commits(j, target)

    async def run() -> int:
        return sum([1 async for _ in execute_run(j, info.run_id)])

    assert asyncio.run(run()) == 96
    sizes = [c.count("case.record") for c in seen.commits]
    assert sum(sizes) == 96
    assert len(seen.commits) <= 96 // 16 + 2, sizes


def test_a_run_of_one_case_writes_its_start_case_and_end_in_one_insert(
    journal: tuple[Journal, str],
) -> None:
    """The run's creation, its case and its end are one commit and one insert of events
    (with one update of the run's head): its start is no longer written on its own."""
    j, _target = journal
    backend: Any = j._backend  # the object under test's own back end
    original = backend.write_events
    inserts: list[list[str]] = []

    def write_events(rows: Any) -> None:
        inserts.append([row[3] for row in rows])
        original(rows)

    backend.write_events = write_events
    record = decide(Panel.model_validate(panel("p", ["A", "A", "B"])), journal=j, run_id="one")
    types = [e.type for e in j.events("one")]
    assert inserts == [types] and types[0] == "run.started" and types[-1] == "run.finished"
    assert j.verify("one").ok and j.run("one") is not None
    assert (
        decide(Panel.model_validate(panel("p", ["A", "A", "B"])), journal=j, run_id="one") == record
    )
