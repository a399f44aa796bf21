"""The service's runs are journalled and decided on a run loop (its own thread) that keeps
one journal connection, replaces a connection that failed, cancels what a run leaves
running, and closes everything when the server stops."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from dissensus.pipeline import RunSpec
from dissensus.serve.runs import Runner
from dissensus.store import open_journal
from dissensus.store.journal import Journal
from pipeline_cases import panel, write_policy


class _Opener:
    """Opens journals on ``path``, noting which thread opened each and which were closed."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.threads: list[int] = []
        self.opened: list[Journal] = []
        self.closed: list[Journal] = []

    def __call__(self) -> Journal:
        journal = open_journal(self.path)
        self.threads.append(threading.get_ident())
        self.opened.append(journal)
        close = journal.close

        def noted_close() -> None:
            self.closed.append(journal)
            close()

        journal.close = noted_close  # type: ignore[method-assign]
        return journal


def _line(pid: str) -> str:
    return json.dumps(panel(pid, ["1", "1", "1"]))


def test_runs_share_one_connection_and_it_closes(tmp_path: Path) -> None:
    """Runs one after the other and at once are journalled and decided on the run loop's
    one connection, opened on its thread, and closed when the server stops."""
    path = str(tmp_path / "journal.sqlite")
    spec = RunSpec.from_policy(write_policy(tmp_path / "policy.yaml"))
    opener = _Opener(path)
    main = open_journal(path)

    async def scenario() -> list[str]:
        runner = Runner(main, spec, open_journal=opener)
        statuses = []
        for k in range(3):
            state = await runner.start([_line(f"p{k}")], submitted_by="t")
            await runner.wait(state)
            statuses.append(state.status)
        states = await asyncio.gather(
            *(runner.start([_line(f"q{k}"), _line(f"r{k}")], submitted_by="t") for k in range(6))
        )
        for state in states:
            await runner.wait(state)
            statuses.append(state.status)
        await runner.close()
        return statuses

    try:
        statuses = asyncio.run(scenario())
    finally:
        main.close()
    assert statuses == ["finished"] * 9
    assert len(opener.opened) == 1
    assert opener.threads[0] != threading.get_ident()
    assert sorted(map(id, opener.closed)) == sorted(map(id, opener.opened))
    with open_journal(path) as journal:
        runs = journal.runs()
        assert len(runs) == 9
        assert all(journal.verify(r.run_id).ok for r in runs)
    with sqlite3.connect(path) as db:  # every run's lock released
        assert db.execute("SELECT count(*) FROM run_locks").fetchone() == (0,)


def test_a_connection_that_failed_is_replaced(tmp_path: Path) -> None:
    path = str(tmp_path / "journal.sqlite")
    spec = RunSpec.from_policy(write_policy(tmp_path / "policy.yaml"))
    opener = _Opener(path)
    main = open_journal(path)

    async def scenario() -> tuple[list[str], list[str]]:
        runner = Runner(main, spec, open_journal=opener)
        for pid in ("a", "b"):
            state = await runner.start([_line(pid)], submitted_by="t")
            await runner.wait(state)
        # Break the connection the run loop kept: the next run fails (it cannot even be
        # journalled), and the loop opens a new connection for the one after.
        opener.opened[0].close()
        errors = []
        try:
            await runner.start([_line("c0")], submitted_by="t")
        except Exception as exc:
            errors.append(type(exc).__name__)
        statuses = []
        for k in range(3):
            state = await runner.start([_line(f"d{k}")], submitted_by="t")
            await runner.wait(state)
            statuses.append(state.status)
        await runner.close()
        return errors, statuses

    try:
        errors, statuses = asyncio.run(scenario())
    finally:
        main.close()
    assert len(errors) == 1
    assert statuses == ["finished"] * 3
    assert len(opener.opened) == 2  # replaced once
    assert set(map(id, opener.closed)) == set(map(id, opener.opened))


def test_what_a_run_leaves_running_is_cancelled_when_it_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's tasks are filed under it: those still running when it ends are cancelled
    (as ``asyncio.run`` would); the loop goes on with the next run."""
    import dissensus.serve.runs as runs

    real = runs.execute_run
    stray: list[asyncio.Task[None]] = []

    async def leaves_a_task(journal: Journal, run_id: str, **kw: Any) -> AsyncIterator[Any]:
        stray.append(asyncio.get_running_loop().create_task(asyncio.sleep(3600)))
        async for record in real(journal, run_id, **kw):
            yield record

    monkeypatch.setattr(runs, "execute_run", leaves_a_task)
    path = str(tmp_path / "journal.sqlite")
    spec = RunSpec.from_policy(write_policy(tmp_path / "policy.yaml"))
    main = open_journal(path)

    async def scenario() -> list[str]:
        runner = Runner(main, spec, open_journal=lambda: open_journal(path))
        statuses = []
        for k in range(2):
            state = await runner.start([_line(f"s{k}")], submitted_by="t")
            await runner.wait(state)
            statuses.append(state.status)
        await runner.close()
        return statuses

    try:
        statuses = asyncio.run(scenario())
    finally:
        main.close()
    assert statuses == ["finished"] * 2
    assert len(stray) == 2 and all(t.cancelled() for t in stray)


def test_a_run_waited_for_is_one_commit_and_takes_no_lock(tmp_path: Path) -> None:
    """A deferred run (``POST /v1/decide`` without ``async``) is created by its one commit,
    the run, its case and ``run.finished`` together, and never writes a lock row; a run
    answered at once (``async``) is journalled first, with its lock."""
    path = str(tmp_path / "journal.sqlite")
    spec = RunSpec.from_policy(write_policy(tmp_path / "policy.yaml"))
    main = open_journal(path)
    with sqlite3.connect(path) as db:
        db.executescript(
            "CREATE TABLE lock_log (run_id TEXT);"
            "CREATE TRIGGER noted AFTER INSERT ON run_locks "
            "BEGIN INSERT INTO lock_log VALUES (NEW.run_id); END;"
        )

    async def scenario() -> tuple[str, str]:
        runner = Runner(main, spec, open_journal=lambda: open_journal(path))
        waited = await runner.start([_line("w")], submitted_by="t", defer=True)
        await runner.wait(waited)
        early = await runner.start([_line("e")], submitted_by="t")
        await runner.wait(early)
        assert (waited.status, early.status) == ("finished", "finished")
        await runner.close()
        return waited.run_id, early.run_id

    try:
        waited, early = asyncio.run(scenario())
    finally:
        main.close()
    with sqlite3.connect(path) as db:
        locked = [r[0] for r in db.execute("SELECT run_id FROM lock_log")]
        stamps = {
            run: {r[0] for r in db.execute("SELECT at FROM events WHERE run_id = ?", (run,))}
            for run in (waited, early)
        }
    assert locked == [early]
    with open_journal(path) as journal:
        for run in (waited, early):
            report = journal.verify(run)
            assert report.ok and report.finished
        assert next(e.type for e in journal.events(waited)) == "run.started"
    # The early run's start is a transaction of its own (its own timestamp).
    assert len(stamps[early]) == 2 and len(stamps[waited]) <= 2
