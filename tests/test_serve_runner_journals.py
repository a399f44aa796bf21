"""The service's runs reuse one journal connection and one event loop per worker thread,
replace a connection that failed, and close every one when the server stops."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

from dissensus.pipeline import RunSpec
from dissensus.serve.runs import Runner, _ThreadLoops
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


def test_runs_on_one_thread_share_a_connection_and_all_close(tmp_path: Path) -> None:
    path = str(tmp_path / "journal.sqlite")
    spec = RunSpec.from_policy(write_policy(tmp_path / "policy.yaml"))
    opener = _Opener(path)
    main = open_journal(path)

    async def scenario() -> list[str]:
        runner = Runner(main, spec, open_journal=opener)
        statuses = []
        for k in range(6):  # one after the other: an idle worker thread takes each
            state = runner.start([_line(f"p{k}")], submitted_by="t")
            await runner.wait(state)
            statuses.append(state.status)
        await runner.close()
        return statuses

    try:
        statuses = asyncio.run(scenario())
    finally:
        main.close()
    assert statuses == ["finished"] * 6
    # One connection per thread that decided a run, never one per run.
    assert len(opener.opened) == len(set(opener.threads))
    assert len(opener.opened) < 6
    assert sorted(map(id, opener.closed)) == sorted(map(id, opener.opened))
    with open_journal(path) as journal:
        runs = journal.runs()
        assert len(runs) == 6
        assert all(journal.verify(r.run_id).ok for r in runs)


def test_a_connection_that_failed_is_replaced(tmp_path: Path) -> None:
    path = str(tmp_path / "journal.sqlite")
    spec = RunSpec.from_policy(write_policy(tmp_path / "policy.yaml"))
    opener = _Opener(path)
    main = open_journal(path)

    async def scenario() -> tuple[int, list[str]]:
        runner = Runner(main, spec, open_journal=opener)
        for pid in ("a", "b"):
            state = runner.start([_line(pid)], submitted_by="t")
            await runner.wait(state)
        # Break every connection a worker kept: a run on such a thread fails once, and
        # the thread opens a new connection for its next run.
        broken = list(opener.opened)
        for journal in broken:
            journal.close()
        statuses = []
        for k in range(len(broken) + 3):
            state = runner.start([_line(f"c{k}")], submitted_by="t")
            await runner.wait(state)
            statuses.append(state.status)
        await runner.close()
        return len(broken), statuses

    try:
        n_broken, statuses = asyncio.run(scenario())
    finally:
        main.close()
    assert set(statuses) <= {"finished", "failed"}
    assert statuses.count("failed") <= n_broken  # each broken connection fails one run at most
    assert statuses.count("finished") >= 3
    assert len(opener.opened) > n_broken  # replaced


def test_a_threads_loop_is_reused_and_left_empty_after_each_run() -> None:
    """What a run leaves running is cancelled when it ends (as ``asyncio.run`` would), the
    next run on the thread gets the same loop with nothing on it, and close closes it."""
    loops = _ThreadLoops()
    seen: list[tuple[asyncio.AbstractEventLoop, int]] = []
    stray: list[asyncio.Task[None]] = []

    async def leaves_a_task() -> None:
        stray.append(asyncio.get_running_loop().create_task(asyncio.sleep(3600)))
        seen.append((asyncio.get_running_loop(), len(asyncio.all_tasks())))

    def on_one_thread() -> None:
        loops.run(leaves_a_task())
        loops.run(leaves_a_task())

    worker = threading.Thread(target=on_one_thread)
    worker.start()
    worker.join()
    (first, tasks_first), (second, tasks_second) = seen
    assert first is second
    assert tasks_first == tasks_second == 2  # the run itself and its own stray task
    assert all(t.cancelled() for t in stray)
    loops.close()
    assert first.is_closed()
