"""The shift watch reads only the cases judged since its last read, and finds what a read of
every judged case finds: whatever was appended, restored from a backup or rewritten with
the same number of events in between, after a read that failed halfway, and while
another connection writes during the read (one snapshot), on both back ends."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import dissensus.pipeline.shift_watch as watch_module
import dissensus.store.follow as follow_module
from dissensus.pipeline.shift_watch import JudgedCases, ShiftWatch, judged_vectors
from dissensus.store import Journal, JournalError
from dissensus.store import event_types as ev
from dissensus.store.journal import NewEvent

RUNS = ("r0", "r1", "r2", "r3")
NOTE = "test.note"

C = ("check",)


def J(run: int, n: int, sha: str = "A") -> tuple[str, int, int, str]:
    """``n`` cases of file ``sha`` judged in run ``run``."""
    return ("judge", run, n, sha)


_OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("judge"),
            st.integers(0, 3),
            st.integers(1, 4),
            st.sampled_from(["A", "A", "B", "-"]),
        ),
        st.tuples(st.just("note"), st.integers(0, 3)),
        st.just(("check",)),
        st.just(("backup",)),
        st.just(("restore",)),
        st.tuples(st.just("rewrite"), st.integers(0, 3), st.integers(0, 2)),
        st.tuples(st.just("fail"), st.integers(1, 5), st.booleans()),
        st.tuples(st.just("during"), st.integers(2, 6), st.integers(0, 4)),
    ),
    min_size=1,
    max_size=14,
)
"""Appends of judged cases (of file A, of file B, without a vector) and of other events,
checks, backups and restores, rewrites of a run (with as many events, or more), a read
or a watch's step failing at its k-th query, and a write from another connection before a read's k-th query."""


class _World:
    """A journal and a second connection to it, and what the test wrote."""

    def __init__(self, journal: Journal, other: Journal) -> None:
        self.journal, self.other = journal, other
        self.n = 0
        self.backup: tuple[list[dict[str, Any]], list[dict[str, Any]]] | None = None

    def _payload(self, sha: str) -> dict[str, Any]:
        self.n += 1
        if sha == "-":
            return {"vector": None, "figures": {"file_sha256": "A"}}
        return {"vector": {"x": float(self.n)}, "figures": {"file_sha256": sha}}

    def append(self, run_id: str, types: list[tuple[str, str]], journal: Journal | None) -> None:
        """``(type, sha)`` events appended to the run (made when missing)."""
        journal = journal or self.journal
        events = []
        for type, sha in types:
            self.n += 1
            payload = self._payload(sha) if type == ev.CASE_ACCEPTANCE else {"n": self.n}
            events.append(NewEvent(type, payload, f"k{self.n}"))
        if journal.run(run_id, missing_ok=True) is None:
            first = events.pop(0)
            journal.create_run(
                run_id, kind="decide", meta={}, first=(first.type, first.payload, first.key)
            )
        journal.append_batch(run_id, events)

    def judge(self, run: int, n: int, sha: str, journal: Journal | None = None) -> None:
        self.append(RUNS[run % len(RUNS)], [(ev.CASE_ACCEPTANCE, sha)] * n, journal)

    def rows(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        backend = self.journal._backend
        return backend.rows("SELECT * FROM runs"), backend.rows("SELECT * FROM events")

    def replace(self, runs: list[dict[str, Any]], events: list[dict[str, Any]]) -> None:
        """The journal's runs and events replaced by these rows (a restore)."""
        backend = self.journal._backend
        with self.journal.transaction():
            backend.exec("DELETE FROM events")
            backend.exec("DELETE FROM runs")
            for table, rows in (("runs", runs), ("events", events)):
                for row in rows:
                    marks = ", ".join("?" * len(row))
                    backend.exec(
                        f"INSERT INTO {table} ({', '.join(row)}) VALUES ({marks})",
                        list(row.values()),
                    )

    def restore(self) -> None:
        """The backup put back, then judged cases journalled anew until the journal holds
        as many as before: the count alone cannot tell."""
        if self.backup is None:
            return
        before = self.journal.count_of_type(ev.CASE_ACCEPTANCE)
        self.replace(*self.backup)
        while self.journal.count_of_type(ev.CASE_ACCEPTANCE) < before:
            self.judge(self.n, 1, "A")

    def rewrite(self, run: int, more: int) -> None:
        """The run made again with as many events of each type, other payloads, and
        ``more`` judged cases after them."""
        run_id = RUNS[run]
        types = [str(e.type) for e in self.journal.events(run_id)]
        types += [ev.CASE_ACCEPTANCE] * more if types else []
        if not types:
            return
        backend = self.journal._backend
        with self.journal.transaction():
            backend.exec("DELETE FROM events WHERE run_id = ?", (run_id,))
            backend.exec("DELETE FROM runs WHERE run_id = ?", (run_id,))
        self.append(run_id, [(t, "B" if self.n % 2 else "A") for t in types], None)


def _full(journal: Journal) -> tuple[Any, ...]:
    """What a read of every judged case finds."""
    return (
        judged_vectors(journal, "A", None),
        judged_vectors(journal, "B", None),
        journal.count_of_type(ev.CASE_ACCEPTANCE),
    )


def _read(cases: JudgedCases, journal: Journal) -> tuple[Any, ...]:
    first = cases.read(journal, "A")
    return first.vectors(window=None), cases.read(journal, "B").vectors(window=None), first.counted


@contextmanager
def _queries(journal: Journal, before: Callable[[int], None]) -> Iterator[None]:
    """Every query of the journal's back end (rows and tuples, counted together) preceded
    by ``before(its number)``."""
    backend = journal._backend
    calls = [0]

    def counted(real: Callable[..., Any]) -> Callable[..., Any]:
        def query(sql: str, args: Any = ()) -> Any:
            calls[0] += 1
            before(calls[0])
            return real(sql, args)

        return query

    backend.rows = counted(backend.rows)  # type: ignore[method-assign]
    backend.values = counted(backend.values)  # type: ignore[method-assign]
    try:
        yield
    finally:
        del backend.rows, backend.values


_SPEC = SimpleNamespace(
    acceptance={"sha256": "A", "shift_reference": {"kept": True}},
    policy=SimpleNamespace(acceptance=SimpleNamespace(shift_alpha=0.05)),
)


def _check(acceptance: Any, vectors: list[dict[str, float]], *, check: int, **_: Any) -> Any:
    """The check's verdict, standing for the cases it was given."""
    return {"shifted": False, "check": check, "cases": [sorted(v.items()) for v in vectors]}


@pytest.fixture
def journals(journal_target: str) -> Iterator[tuple[Journal, Journal]]:
    with (
        Journal(journal_target, synchronous="normal") as journal,
        Journal(journal_target, synchronous="normal") as other,
    ):
        yield journal, other


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(ops=_OPS, bulk=st.booleans())
# A restore that leaves as many judged cases as before, and rewrites of a run with as
# many events or more:
@example(ops=[J(0, 2), ("backup",), J(0, 2), C, ("restore",), C], bulk=False)
@example(ops=[J(1, 3), J(2, 1), C, ("rewrite", 1, 0), C], bulk=False)
@example(ops=[J(1, 3), J(2, 1), C, ("rewrite", 1, 1), C], bulk=True)
# Reads failing at each of their queries (the runs' heads, the count, the marks' check,
# the new cases), alone and in a watch's step:
@example(
    ops=[J(0, 2), C, J(0, 2), J(3, 1), *[("fail", k, False) for k in range(1, 5)], C], bulk=False
)
@example(ops=[J(0, 2), C, J(0, 2), J(3, 1), ("fail", 5, True), C], bulk=False)
# Another connection writing once the read began:
@example(ops=[J(0, 2), C, J(1, 1), ("during", 2, 0), C, ("during", 4, 2), C], bulk=False)
def test_the_watch_reading_on_finds_what_a_full_read_finds(
    journals: tuple[Journal, Journal], ops: list[tuple[Any, ...]], bulk: bool
) -> None:
    journal, other = journals
    world = _World(journal, other)
    world.replace([], [])  # each example on an empty journal
    cases = JudgedCases()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(watch_module, "check_vectors", _check)
        patch.setattr(watch_module, "MIN_CASES", 1)
        patch.setattr(follow_module, "BULK_RUNS", 0 if bulk else 200)
        watch = ShiftWatch(_SPEC, every=3, journal=journal, cases=cases)  # type: ignore[arg-type]
        full = ShiftWatch(_SPEC, every=3, journal=journal)  # type: ignore[arg-type]
        for op in ops:
            kind = op[0]
            if kind == "judge":
                world.judge(op[1], op[2], op[3])
            elif kind == "note":
                world.append(RUNS[op[1]], [(NOTE, "")], None)
            elif kind == "backup":
                world.backup = world.rows()
            elif kind == "restore":
                world.restore()
            elif kind == "rewrite":
                world.rewrite(op[1], op[2])
            elif kind == "check":
                assert _read(cases, journal) == _full(journal)
                full.cases = JudgedCases()  # the reference reads every case
                assert watch.step() == full.step()
            elif kind == "fail":
                kept, seen = cases._follower.state, watch.seen

                def fail(call: int, at: int = op[1]) -> None:
                    if call == at:
                        raise JournalError("the journal failed (injected)")

                try:
                    with _queries(journal, fail):
                        if op[2]:
                            watch.step()
                        else:
                            cases.read(journal, "A")
                except JournalError:
                    assert cases._follower.state is kept and watch.seen == seen
                else:
                    if op[2]:
                        full.cases = JudgedCases()
                        full.step()
            else:  # "during": another connection writes once the read's snapshot is taken
                expected = _full(journal)

                def write(call: int, at: int = op[1], run: int = op[2]) -> None:
                    if call == at:
                        world.judge(run, 1, "A", other)

                with _queries(journal, write):
                    got = cases.read(journal, "A")
                assert (got.vectors(window=None), got.counted) == (expected[0], expected[2])
        assert _read(cases, journal) == _full(journal)


def test_a_check_reads_only_the_runs_that_changed(tmp_path: Any) -> None:
    with Journal(tmp_path / "j.sqlite", synchronous="normal") as journal:
        world = _World(journal, journal)
        for run in range(4):
            world.judge(run, 3, "A")
        cases = JudgedCases()
        assert len(cases.read(journal, "A")) == 12
        state = cases._follower.state
        assert state is not None and state.read_runs == 4
        world.judge(2, 2, "A")
        assert len(cases.read(journal, "A")) == 14
        state = cases._follower.state
        assert state is not None and state.read_runs == 1
        assert cases.read(journal, "A").vectors(window=None) == judged_vectors(journal, "A", None)
        state = cases._follower.state
        assert state is not None and state.read_runs == 0


def test_a_run_of_many_cases_is_gathered_once_not_copied_case_by_case(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading a run's cases builds what was read of it once per read, not once per case
    (each of which copied every case before it: a run of N cases cost N²/2 copies)."""
    built: list[object] = []
    real = follow_module.RunRead

    def counted(*args: Any) -> Any:
        built.append(args)
        return real(*args)

    monkeypatch.setattr(follow_module, "RunRead", counted)
    with Journal(tmp_path / "j.sqlite", synchronous="normal") as journal:
        world = _World(journal, journal)
        world.judge(0, 300, "A")
        world.judge(1, 2, "A")
        cases = JudgedCases()
        assert len(cases.read(journal, "A")) == 302
        assert len(built) <= 3 * 2  # a few per run read
        built.clear()
        world.judge(0, 200, "A")
        assert cases.read(journal, "A").vectors(window=None) == judged_vectors(journal, "A", None)
        assert len(built) <= 3


@pytest.mark.parametrize("bulk", [False, True])
def test_rows_are_parsed_once_the_journal_is_free_again(
    journal_target: str, monkeypatch: pytest.MonkeyPatch, bulk: bool
) -> None:
    """A read holds the journal's back end (which every thread of the process using the
    journal shares) only while it queries: its rows are parsed, and kept, after."""
    monkeypatch.setattr(follow_module, "BULK_RUNS", 0 if bulk else 200)
    with Journal(journal_target, synchronous="normal") as journal:
        world = _World(journal, journal)
        for run in range(3):
            world.judge(run, 2, "A")
        lock = journal._backend.lock  # type: ignore[attr-defined]

        def free() -> bool:
            if not lock.acquire(blocking=False):
                return False
            lock.release()
            return True

        with ThreadPoolExecutor(1) as other:

            def keep(event: Any) -> bool:
                return other.submit(free).result()

            for _ in range(2):
                followed = journal.follow(ev.CASE_ACCEPTANCE, keep)
                assert followed.count == 6 and list(followed.kept()) == [True] * 6


def test_a_run_head_that_is_not_utf8_is_read_as_a_full_read_reads_it(tmp_path: Any) -> None:
    """A run's head hash edited into bytes that are not UTF-8 fails no watch check: its
    tuples are read again with replacement characters, as its rows are, and the run is
    read whole each time (its head never matches what was read), finding what a full
    read finds."""
    path = tmp_path / "j.sqlite"
    with Journal(path) as journal:
        world = _World(journal, journal)
        world.judge(1, 2, "A")
        world.judge(2, 1, "A")
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("UPDATE runs SET head_hash = CAST(X'ff00' AS TEXT) WHERE run_id = 'r2'")
    db.close()
    with Journal(path) as journal:
        heads = dict(journal._backend.values("SELECT run_id, head_hash FROM runs"))
        assert heads["r2"] == "\ufffd\x00" and len(heads["r1"]) == 64
        cases = JudgedCases()
        for _ in range(2):
            assert cases.read(journal, "A").vectors(window=None) == judged_vectors(
                journal, "A", None
            )
        assert len(cases.read(journal, "A")) == 3


def test_a_run_whose_count_is_not_a_number_is_read_whole_when_runs_are_added(
    tmp_path: Any,
) -> None:
    """A run whose number of events was edited into text is read whole whenever the
    heads changed, also when the only change is a new run after it (the read that looks
    only at the runs after those read before does not apply): a judged case added to it
    by hand, its head left as it was, is found as a full read finds it."""
    path = tmp_path / "j.sqlite"
    with Journal(path) as journal:
        world = _World(journal, journal)
        world.judge(1, 2, "A")
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("UPDATE runs SET n_events = 'x' WHERE run_id = 'r1'")
    db.close()
    with Journal(path) as journal:
        world = _World(journal, journal)
        world.n = 100
        cases = JudgedCases()
        assert len(cases.read(journal, "A")) == 2
        db = sqlite3.connect(path, isolation_level=None)
        db.execute(
            "INSERT INTO events (run_id, seq, key, type, case_ref, at, payload, prev_hash, hash) "
            "SELECT run_id, seq + 10, key || '+', type, case_ref, at, payload, prev_hash, hash "
            "FROM events WHERE run_id = 'r1' AND seq = 1"
        )
        db.close()
        world.judge(2, 1, "A")
        assert cases.read(journal, "A").vectors(window=None) == judged_vectors(journal, "A", None)
        assert len(cases.read(journal, "A")) == 4
