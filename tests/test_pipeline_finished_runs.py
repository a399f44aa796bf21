"""A finished run stays finished.

Resuming a finished run replays its records from the journal: nothing is locked,
decided or appended, whatever the deadline (``runs resume D --deadline 0.001`` used to
stop the replay and append ``run.stopped`` after ``run.finished``). Nothing a run's
execution writes ever follows its ``run.finished``: a property test resumes a run
under random deadlines, and the loop's stop refuses a finished run. Only a human's
review events (and signatures) come after a run's end.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli_helpers import cli
from dissensus.pipeline import DeadlineReached, execute_run, start_run
from dissensus.pipeline import batch as run_loop
from dissensus.pipeline.executors import Outcome, RunContext
from dissensus.pipeline.records import CaseRecord
from dissensus.pipeline.review import final_records
from dissensus.store import Journal
from dissensus.store import event_types as ev
from pipeline_cases import mixed_batch, panel, write_jsonl, write_policy

AFTER_THE_END = {
    ev.REVIEW_RESOLVED,
    ev.CASE_RESOLVED,
    ev.REVIEW_CONFIRMED,
    ev.REVIEW_REOPENED,
    ev.RUN_SEALED,
}
"""What may follow a run's ``run.finished``: a human's review of it, and its seals."""


def _after_the_end(journal: Journal, run_id: str) -> list[str]:
    """The types of the events after ``run.finished`` that a run's execution wrote."""
    types = [e.type for e in journal.events(run_id)]
    if ev.RUN_FINISHED not in types:
        return []
    assert types.count(ev.RUN_FINISHED) == 1
    return [t for t in types[types.index(ev.RUN_FINISHED) + 1 :] if t not in AFTER_THE_END]


def _rows() -> list[dict[str, Any] | str]:
    recorded = [r for r in mixed_batch() if isinstance(r, str) or not r["id"].startswith("live")]
    return [*recorded, *(panel(f"more{i}", ["1", "1", "2"]) for i in range(6))]


def test_resuming_a_finished_run_with_a_deadline_replays_it_and_appends_nothing(
    tmp_path: Path,
) -> None:
    inp = write_jsonl(tmp_path / "in.jsonl", _rows())
    pol = write_policy(tmp_path / "p.yaml")
    j = tmp_path / "dm.sqlite"
    first = cli("decide", inp, "--policy", pol, "--journal", j, "--run-id", "D", "--json")
    assert first.code == 3, first.err  # one line is rejected
    with Journal(j) as journal:
        head = journal.head("D")
    for deadline in ("0.001", "5"):
        again = cli("runs", "resume", "D", "--journal", j, "--json", "--deadline", deadline)
        assert (again.code, again.out) == (first.code, first.out), again.err
        assert "deadline" not in again.err
    with Journal(j) as journal:
        assert journal.head("D") == head  # not one event more
        assert journal.run_status("D") == "finished"
        assert journal.verify("D").ok
    shown = cli("runs", "show", "D", "--journal", j, "--json")
    assert json.loads(shown.out)["events"].get(ev.RUN_STOPPED) is None


class _NeverCalled:
    """An executor that must not be asked: a finished run is not executed."""

    def outcomes(self, ctx: RunContext) -> AsyncGenerator[Outcome, None]:
        raise AssertionError("a finished run was executed again")


def _drain(journal: Journal, run_id: str, **kwargs: Any) -> list[CaseRecord]:
    async def go() -> list[CaseRecord]:
        return [r async for r in execute_run(journal, run_id, **kwargs)]

    return asyncio.run(go())


def test_a_run_finished_while_this_process_waited_for_its_lock_is_replayed(
    tmp_path: Path,
) -> None:
    """The holder finishes the run between this process's look and its taking the lock:
    the run is replayed from the journal, not executed, and the lock is given back."""
    inp = write_jsonl(tmp_path / "in.jsonl", _rows())
    pol = write_policy(tmp_path / "p.yaml")
    with Journal(tmp_path / "j.sqlite") as journal, Journal(tmp_path / "j.sqlite") as other:
        start_run(journal, str(inp), str(pol), run_id="R")
        done: list[list[CaseRecord]] = []
        take = journal.acquire_run_lock

        def finished_meanwhile(run_id: str, pid: int | None = None) -> Any:
            # Another connection (a thread with a loop of its own) ends the run first.
            worker = threading.Thread(target=lambda: done.append(_drain(other, "R")))
            worker.start()
            worker.join()
            return take(run_id, pid)

        journal.acquire_run_lock = finished_meanwhile  # type: ignore[method-assign]
        head = journal.head("R")
        rejects: list[int] = []
        records = _drain(journal, "R", executor=_NeverCalled(), deadline_s=0.0,
                         on_reject=lambda r: rejects.append(r.line))  # fmt: skip
        assert done and records == done[0] == final_records(journal, "R")
        assert rejects == [i + 1 for i, row in enumerate(_rows()) if isinstance(row, str)]
        assert journal.head("R").n_events > head.n_events  # the other connection's events
        assert _after_the_end(journal, "R") == []
        assert journal.run_lock_holder("R") is None


def test_the_loop_never_stops_a_finished_run(tmp_path: Path) -> None:
    inp = write_jsonl(tmp_path / "in.jsonl", _rows())
    with Journal(tmp_path / "j.sqlite") as journal:
        start_run(journal, str(inp), write_policy(tmp_path / "p.yaml"), run_id="R")
        _drain(journal, "R")
        head = journal.head("R")
        with pytest.raises(run_loop.RunFinishedError, match="finished"):
            run_loop._stopped(journal, "R", 0.001, 0)
        assert journal.head("R") == head


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    deadlines=st.lists(st.sampled_from([None, 0.0, 0.0005, 0.002, 0.01]), min_size=1, max_size=5)
)
def test_nothing_of_a_run_follows_its_end_whatever_its_deadlines(
    tmp_path_factory: pytest.TempPathFactory, deadlines: list[float | None]
) -> None:
    """Resumed again and again, each time under a deadline or none, a run ends with the
    records of an uninterrupted one; from its end on, a resume appends nothing."""
    tmp = tmp_path_factory.mktemp("deadlines")
    inp = write_jsonl(tmp / "in.jsonl", _rows())
    pol = write_policy(tmp / "p.yaml")
    with Journal(tmp / "base.sqlite") as base:
        start_run(base, str(inp), str(pol), run_id="R")
        expected = _drain(base, "R")
    with Journal(tmp / "j.sqlite") as journal:
        start_run(journal, str(inp), str(pol), run_id="R")
        records: list[CaseRecord] = []
        for deadline in [*deadlines, None]:
            before = journal.head("R")
            was_finished = journal.run_status("R") == "finished"
            try:
                records = _drain(journal, "R", deadline_s=deadline)
            except DeadlineReached:
                assert not was_finished
                assert journal.run_status("R") == "incomplete"
            if was_finished:
                assert journal.head("R") == before
            assert _after_the_end(journal, "R") == []
            assert journal.verify("R").ok
        assert journal.run_status("R") == "finished"
        assert records == expected
