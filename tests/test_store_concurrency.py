"""Several writers on one journal (both back ends): appends from many processes never
fork a run's chain; a lock held past the busy timeout, two starts of one run id and
two resumes of one run end in one-line errors, never driver tracebacks."""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli_helpers import cli
from dissensus.store import Journal, JournalBusy, JournalReadOnly, RunExists
from pipeline_cases import panel, write_jsonl, write_policy
from store_backends import pg_schema, pg_url

FORK = multiprocessing.get_context("fork")
"""Writer processes are forked from the test's process: separate processes with their own
connections, without an interpreter start-up each."""


def _writer(target: str, who: str, n: int) -> None:
    try:
        with Journal(target) as j:
            for i in range(n):
                j.append("shared", "tick", {"who": who, "i": i}, key=f"{who}/{i}")
    except BaseException:
        os._exit(1)
    os._exit(0)


def test_appends_from_many_processes_form_one_unbroken_chain(journal_target: str) -> None:
    with Journal(journal_target) as j:
        j.create_run("shared", kind="test", meta={})
    procs = [FORK.Process(target=_writer, args=(journal_target, f"w{w}", 40)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    with Journal(journal_target) as j:
        report = j.verify("shared")
        events = list(j.events("shared"))
    assert report.ok, report.problems
    assert report.n_events == 160 and [e.seq for e in events] == list(range(160))
    assert len({e.key for e in events}) == 160
    for w in range(4):  # each writer's own events keep their order
        mine = [e.payload["i"] for e in events if e.payload["who"] == f"w{w}"]
        assert mine == list(range(40))


def _hold_write_lock(target: str) -> tuple[object, threading.Event]:
    """Open a transaction that holds the run's write lock until the returned event is set."""
    release = threading.Event()
    ready = threading.Event()

    def hold() -> None:
        if target.startswith("postgresql://"):
            import psycopg

            with psycopg.connect(target) as conn:
                conn.execute("SELECT 1 FROM runs WHERE run_id = 'r' FOR UPDATE")
                ready.set()
                release.wait(30)
                conn.rollback()
        else:
            db = sqlite3.connect(target, isolation_level=None)
            db.execute("BEGIN IMMEDIATE")
            ready.set()
            release.wait(30)
            db.execute("ROLLBACK")
            db.close()

    thread = threading.Thread(target=hold)
    thread.start()
    assert ready.wait(30)
    return thread, release


def test_a_lock_held_past_the_busy_timeout_is_a_one_line_error(journal_target: str) -> None:
    with Journal(journal_target) as j:
        j.create_run("r", kind="test", meta={})
    thread, release = _hold_write_lock(journal_target)
    try:
        with Journal(journal_target, busy_timeout=0.05) as j, pytest.raises(JournalBusy) as caught:
            j.append("r", "e", {}, key="k")
        message = str(caught.value)
        assert "is locked by another writer (waited 0.05 s" in message and "\n" not in message
        assert "sqlite3" not in message and "psycopg" not in message
    finally:
        release.set()
        thread.join()
    with Journal(journal_target) as j:
        j.append("r", "e", {}, key="k")  # the lock is gone: writes resume
        assert j.verify("r").ok


def test_decide_against_a_locked_journal_prints_one_line(tmp_path: Path) -> None:
    journal = str(tmp_path / "j.sqlite")
    with Journal(journal) as j:
        j.create_run("r", kind="test", meta={})
    inp = write_jsonl(tmp_path / "in.jsonl", [panel("a", ["1", "1", "1"])])
    pol = write_policy(tmp_path / "policy.yaml")
    thread, release = _hold_write_lock(journal)
    try:
        # In-process: the write lock is held by another connection (SQLite tells them apart).
        out = cli(
            "decide", inp, "--policy", pol, "--journal", journal,
            env={"DISSENSUS_JOURNAL_BUSY_TIMEOUT": "0.05"},
        )  # fmt: skip
    finally:
        release.set()
        thread.join()
    assert out.code == 1, out.err
    assert out.err.startswith("error: journal ") and out.err.count("\n") == 1
    assert "Traceback" not in out.err


def _decide_child(argv: list[str], err_path: str) -> None:
    """A forked ``dissensus`` process: ``main(argv)``, its error output to ``err_path``."""
    from dissensus.cli import main

    with (
        open(err_path, "w", encoding="utf-8") as err,
        contextlib.redirect_stderr(err),
        contextlib.redirect_stdout(io.StringIO()),
    ):
        code = main(argv)
    os._exit(code)


def test_two_decides_with_one_run_id_at_once_one_wins_the_other_says_why(tmp_path: Path) -> None:
    """Two CLI processes (forked from this one: no interpreter start-up each) race to
    start run ``x``."""
    journal = str(tmp_path / "j.sqlite")
    inp = write_jsonl(tmp_path / "in.jsonl", [panel(f"p{i}", ["1", "1", "1"]) for i in range(3)])
    pol = write_policy(tmp_path / "policy.yaml")
    Journal(journal).close()
    cmd = ["decide", str(inp), "--policy", str(pol), "--journal", journal, "--run-id", "x"]
    procs = [
        FORK.Process(
            target=_decide_child,
            args=([*cmd, "-o", str(tmp_path / f"out{i}.jsonl")], str(tmp_path / f"err{i}.txt")),
        )
        for i in range(2)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    results = [
        (p.exitcode, (tmp_path / f"err{i}.txt").read_text(encoding="utf-8"))
        for i, p in enumerate(procs)
    ]
    codes = sorted(code if code is not None else -1 for code, _ in results)
    assert codes == [0, 2], results
    loser = next(err for code, err in results if code == 2)
    assert "run 'x' already exists" in loser and loser.count("\n") == 1 and "Traceback" not in loser
    with Journal(journal) as j:
        assert j.verify("x").ok and j.verify("x").finished
        assert [e.key for e in j.events("x")].count("run/started") == 1


def test_a_new_run_id_that_exists_is_refused(journal_target: str) -> None:
    with Journal(journal_target) as j:
        j.create_run("x", kind="t", meta={})
        with pytest.raises(RunExists):
            j.create_run("x", kind="t", meta={}, exclusive=True)
        assert j.create_run("x", kind="t", meta={}).run_id == "x"  # idempotent when not exclusive


def test_run_lock_names_its_holder_and_frees_with_it(journal_target: str) -> None:
    run = "lock" + os.urandom(4).hex()
    with Journal(journal_target) as a, Journal(journal_target) as b:
        a.create_run(run, kind="t", meta={})
        assert a.acquire_run_lock(run) is None
        assert a.acquire_run_lock(run) is None  # re-entrant for its holder
        holder = b.acquire_run_lock(run, pid=os.getpid() + 1)
        assert holder is not None and holder.pid == os.getpid() and holder.run_id == run
        a.release_run_lock(run)
        assert b.acquire_run_lock(run, pid=os.getpid() + 1) is None
        b.release_run_lock(run, pid=os.getpid() + 1)
        assert a.acquire_run_lock(run) is None


def _lock_and_die(target: str, run: str) -> None:
    """Take the run lock and exit without releasing it (nor closing the journal)."""
    j = Journal(target)
    os._exit(0 if j.acquire_run_lock(run) is None else 1)


def test_a_run_lock_of_a_dead_process_is_taken_over(journal_target: str) -> None:
    run = "dead" + os.urandom(4).hex()
    with Journal(journal_target) as j:
        j.create_run(run, kind="t", meta={})
    child = FORK.Process(target=_lock_and_die, args=(journal_target, run))
    child.start()
    child.join(timeout=300)
    assert child.exitcode == 0
    with Journal(journal_target) as j:
        assert j.acquire_run_lock(run) is None  # the holder died without releasing


def _lock_and_wait(target: str, run: str, held: object, go: object) -> None:
    """Take the run lock, say so, and hold it until told to exit (without releasing it)."""
    j = Journal(target)
    assert j.acquire_run_lock(run) is None
    held.set()  # type: ignore[attr-defined]
    go.wait(120)  # type: ignore[attr-defined]
    os._exit(0)


def test_run_status_reads_the_lock_of_another_process_without_taking_it(
    journal_target: str,
) -> None:
    run = "status" + os.urandom(4).hex()
    with Journal(journal_target) as j:
        j.create_run(run, kind="t", meta={})
        assert j.run_status(run) == "incomplete" and j.run_lock_holder(run) is None
        held, go = FORK.Event(), FORK.Event()
        child = FORK.Process(target=_lock_and_wait, args=(journal_target, run, held, go))
        child.start()
        try:
            assert held.wait(120)
            assert j.run_status(run) == "running"
            holder = j.run_lock_holder(run)
            assert holder is not None and holder.pid == child.pid
            # Reading took nothing: the lock is still the child's.
            taken = j.acquire_run_lock(run)
            assert taken is not None and taken.pid == child.pid
        finally:
            go.set()
            child.join(timeout=300)
        assert child.exitcode == 0
        # The holder is gone (it never released): the run is stopped, not running. (A
        # PostgreSQL server ends the dead client's session, and its locks, a moment later.)
        for _ in range(200):
            if j.run_status(run) != "running":
                break
            time.sleep(0.05)
        assert j.run_status(run) == "incomplete" and j.run_lock_holder(run) is None
        assert j.acquire_run_lock(run) is None
        assert j.run_status(run) == "running"  # this process's own lock counts too
        with j.transaction(run):
            j.append(run, "run.finished", {}, key="run/finished")
            j.release_run_lock(run)
        assert j.run_status(run) == "finished"


def test_one_journal_object_shared_by_threads_keeps_one_chain(journal_target: str) -> None:
    with Journal(journal_target) as j:
        j.create_run("t", kind="test", meta={})
        errors: list[BaseException] = []

        def work(w: int) -> None:
            try:
                for i in range(25):
                    with j.transaction("t"):
                        j.append("t", "a", {"w": w, "i": i}, key=f"{w}/{i}/a")
                        j.append("t", "b", {"w": w, "i": i}, key=f"{w}/{i}/b")
                    assert j.get("t", f"{w}/{i}/a") is not None
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        events = list(j.events("t"))
        report = j.verify("t")
    assert report.ok and report.n_events == 200
    for k in range(0, 200, 2):  # each transaction's two events are adjacent
        assert events[k].key.endswith("/a") and events[k + 1].key == events[k].key[:-1] + "b"


def test_a_read_only_journal_is_a_usage_error(tmp_path: Path) -> None:
    with Journal(tmp_path / "ro.sqlite") as j:
        j.create_run("r", kind="t", meta={})
        j._backend._db.execute("PRAGMA query_only = ON")  # type: ignore[attr-defined]  # what a read-only file does
        with pytest.raises(JournalReadOnly, match="is read-only") as caught:
            j.append("r", "e", {}, key="k")
    assert caught.value.exit_code == 2


def test_a_read_only_postgresql_session_is_a_usage_error(tmp_path: Path) -> None:
    """A session that may not write (a hot standby, ``default_transaction_read_only``)
    reads the journal and refuses a write with exit 2, as a read-only file does."""
    with pg_schema(pg_url()) as url:
        with Journal(url) as j:
            j.create_run("r", kind="t", meta={})
        ro = url.replace("options=", "options=-cdefault_transaction_read_only%3Don%20", 1)
        with Journal(ro) as j:
            assert [r.run_id for r in j.runs()] == ["r"]
            with pytest.raises(JournalReadOnly, match="read-only") as caught:
                j.append("r", "e", {}, key="k")
        assert caught.value.exit_code == 2
        inputs = write_jsonl(tmp_path / "in.jsonl", [panel("p1", ["A", "A", "A"])])
        done = cli("decide", str(inputs), "--journal", ro, "--run-id", "x")
        assert done.code == 2 and "read-only" in done.err
        assert len(done.err.strip().splitlines()) == 1


@contextlib.contextmanager
def _read_only_mount(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs under ``tmp_path``, remounted read-only by the caller (root only)."""
    import shutil
    import subprocess

    where = tmp_path / "ro"
    where.mkdir()
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("needs root and mount(8) to make a read-only file system")
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(where)],
                          capture_output=True)  # fmt: skip
    if made.returncode != 0:
        pytest.skip("mount(8) is not permitted here (no CAP_SYS_ADMIN)")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_journal_on_a_read_only_file_system_is_read_as_it_is(tmp_path: Path) -> None:
    """An archived journal on a read-only mount (no -shm file can be made beside it) is
    listed, verified and shown; a write is JournalReadOnly; a -wal file with writes still
    in it is named instead of being silently ignored."""
    import shutil
    import subprocess

    made = tmp_path / "j.sqlite"
    with Journal(made) as j:
        j.create_run("r", kind="t", meta={})
        j.append("r", "e", {"n": 1}, key="k")
    with _read_only_mount(tmp_path) as where:
        shutil.copy(made, where / "j.sqlite")
        (where / "stale.sqlite").write_bytes(made.read_bytes())
        (where / "stale.sqlite-wal").write_bytes(b"\0" * 64)
        subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)
        with Journal(where / "j.sqlite") as j:
            assert j.verify("r").ok and [e.key for e in j.events("r")] == ["k"]
            with pytest.raises(JournalReadOnly):
                j.append("r", "e", {"n": 2}, key="k2")
        out = cli("runs", "verify", "r", "--journal", str(where / "j.sqlite"))
        assert out.code == 0, out.err
        stale = cli("runs", "list", "--journal", str(where / "stale.sqlite"))
        assert stale.code == 2 and "-wal" in stale.err, stale.err
