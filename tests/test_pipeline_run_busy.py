"""A run another live process executes is refused at once, naming that process.

The other process is a real ``dissensus decide`` (a forked child of the test process)
stopped inside a commit of one of its blocks: it holds the run's execution lock and
SQLite's write lock, as a run does for seconds through its last commit and shift
check. ``runs resume`` used to read the whole run first and then wait for the write
lock (until the busy timeout, or until the other process had finished the run, which it
then replayed); it must exit 2 with ``run R is being resumed by pid N`` while the other
process still holds the run, and so must the library's run loop. Once released, the
other process finishes the run as if nothing had happened.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import cli
from dissensus.pipeline import RunBusy, execute_run
from dissensus.pipeline.review import final_records
from dissensus.store import Journal
from pipeline_cases import mixed_batch, panel, write_jsonl, write_policy

RUN = "R"


def _hold_in_a_block(argv: list[str], inside: Any, release: Any) -> None:
    """The child: ``dissensus ARGV``, stopped inside its first commit of a block (rows
    written, transaction open) until ``release`` is set."""
    from dissensus.cli import main
    from dissensus.store.sqlite import SQLiteBackend

    original = SQLiteBackend.write_events

    def write(self: SQLiteBackend, rows: Any) -> None:
        original(self, rows)
        if len(rows) >= 2 and not inside.is_set():
            inside.set()
            release.wait(120)

    SQLiteBackend.write_events = write  # type: ignore[method-assign]
    os._exit(main(argv))


@contextmanager
def _decide_holding_the_run(argv: list[str]) -> Iterator[multiprocessing.process.BaseProcess]:
    context = multiprocessing.get_context("fork")
    inside, release = context.Event(), context.Event()
    child = context.Process(target=_hold_in_a_block, args=(argv, inside, release))
    child.start()
    try:
        assert inside.wait(120), "the child never reached a block's commit"
        yield child
    finally:
        release.set()
        child.join(120)
        if child.is_alive():
            child.kill()
            child.join()


def test_a_resume_of_a_run_another_process_executes_fails_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [r for r in mixed_batch() if isinstance(r, str) or not r["id"].startswith("live")]
    inp = write_jsonl(
        tmp_path / "in.jsonl", [*rows, *(panel(f"p{i}", ["1", "2"]) for i in range(20))]
    )
    pol = write_policy(tmp_path / "p.yaml")
    j = tmp_path / "j.sqlite"
    argv = ["decide", str(inp), "--policy", str(pol), "--journal", str(j), "--run-id", RUN,
            "--output", str(tmp_path / "out.jsonl")]  # fmt: skip
    assert cli(*[a.replace("j.sqlite", "base.sqlite") for a in argv[:-2]]).code == 3
    # Without the fix the resume would wait for the write lock: a second, not 30.
    monkeypatch.setenv("DISSENSUS_JOURNAL_BUSY_TIMEOUT", "1")
    with _decide_holding_the_run(argv) as child:
        with Journal(j) as journal:
            before = journal.head(RUN)
            assert journal.run_lock_holder(RUN) is not None
        resumed = cli("runs", "resume", RUN, "--journal", j)
        assert resumed.code == 2, resumed.err
        assert f"run {RUN} is being resumed by pid {child.pid}" in resumed.err
        assert "Traceback" not in resumed.err
        # The library's run loop says the same, without waiting for the write lock.
        with Journal(j, busy_timeout=1) as other:

            async def drain() -> None:
                async for _ in execute_run(other, RUN):
                    pass

            with pytest.raises(RunBusy, match=f"being resumed by pid {child.pid}"):
                asyncio.run(drain())
            assert other.head(RUN) == before  # nothing was appended
        assert child.is_alive()  # refused while the other process held the run
    assert child.exitcode == 3  # it finished the run (one line rejected)
    with Journal(j) as journal, Journal(tmp_path / "base.sqlite") as base:
        assert journal.verify(RUN).ok and journal.run_status(RUN) == "finished"
        assert final_records(journal, RUN) == final_records(base, RUN)
