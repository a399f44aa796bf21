"""Budgets survive kill and resume; one process resumes a run at a time; deadlines stop a run.

Like ``test_pipeline_crash.py``: the base run goes through the CLI's ``main`` in the test
process; the other runs are forked children of it (:func:`fault_runner.forked`), killed
with SIGKILL right after their N-th journalled event and resumed. The model is one shared scripted model
behind ``record:FILE``, so the recording counts every request that reached "the server".
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import cli
from dissensus.cli import main
from dissensus.llm.fakeserver import FakeServer, ServerSettings
from dissensus.llm.scripted import ScriptedRules
from dissensus.pipeline import Policy, policy_from_dict
from dissensus.pipeline.batch import DeadlineReached, execute_run, start_run
from dissensus.pipeline.review import final_records
from dissensus.store import Journal
from fault_runner import forked
from pipeline_cases import crash_script, mixed_batch, write_jsonl, write_policy

pytestmark = pytest.mark.slow  # the module's tests share a forked base run

RUN = "budget"
KILLED = -signal.SIGKILL
REJECTED = 3
MAX_CALLS = 3  # the batch's live cases want 4 calls: the budget binds


class Setup:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.input = write_jsonl(root / "in.jsonl", mixed_batch())
        self.script = crash_script(root / "script.yaml")
        self.policy = write_policy(
            root / "policy.yaml", {"budget": {"max_calls": MAX_CALLS}, "concurrency": 1}
        )

    def decide(self, name: str) -> list[str]:
        return [
            "decide", str(self.input), "--policy", str(self.policy), "--journal", str(self.root / f"{name}.sqlite"),
            "--run-id", RUN, "--json", "-o", str(self.root / f"{name}.jsonl"),
            "--model", f"record:{self.root / f'{name}-calls.jsonl'}:scripted:{self.script}",
        ]  # fmt: skip

    def resume(self, name: str) -> list[str]:
        return [
            "runs",
            "resume",
            RUN,
            "--journal",
            str(self.root / f"{name}.sqlite"),
            "--json",
            "-o",
            str(self.root / f"{name}.jsonl"),
        ]

    def calls(self, name: str) -> int:
        path = self.root / f"{name}-calls.jsonl"
        return len(path.read_text().splitlines()) if path.exists() else 0

    def events(self, name: str) -> list[Any]:
        with Journal(self.root / f"{name}.sqlite") as j:
            return list(j.events(RUN))


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Setup, list[Any]]:
    setup = Setup(tmp_path_factory.mktemp("budget"))
    assert main(setup.decide("base")) == REJECTED
    return setup, setup.events("base")


def test_the_budget_binds_in_the_uninterrupted_run(base: tuple[Setup, list[Any]]) -> None:
    setup, events = base
    assert setup.calls("base") == MAX_CALLS
    records = [json.loads(line) for line in (setup.root / "base.jsonl").read_text().splitlines()]
    refused = [r for r in records if "budget" in r["reason"]]
    assert refused, "one live case must find the budget spent"
    # Every call journals its spend first, the refused one too; three were made.
    assert sum(e.type == "model.spend" for e in events) == MAX_CALLS + 1
    assert sum(e.type == "model.call" for e in events) == MAX_CALLS


def test_a_killed_and_resumed_run_spends_the_runs_budget_once(
    base: tuple[Setup, list[Any]],
) -> None:
    """Killed right after every spend, call and step of the live cases; resumed each time."""
    setup, events = base
    points = sorted(
        {e.seq + 1 for e in events if e.type in ("model.spend", "model.call", "case.followup")}
    )
    points = [p for p in points if p < len(events)]
    assert len(points) >= 6
    for p in points:
        name = f"kill{p}"
        assert forked(setup.decide(name), p) == KILLED
        assert forked(setup.resume(name)) == REJECTED
        # Never more requests than the budget, across the killed and the resumed process.
        assert setup.calls(name) <= MAX_CALLS, (
            f"killed after event {p}: {setup.calls(name)} requests"
        )
        with Journal(setup.root / f"{name}.sqlite") as j, Journal(setup.root / "base.sqlite") as b:
            assert j.verify(RUN).ok
            assert final_records(j, RUN) == final_records(b, RUN)
        assert (setup.root / f"{name}.jsonl").read_text() == (setup.root / "base.jsonl").read_text()


def test_killed_twice_in_a_row(base: tuple[Setup, list[Any]]) -> None:
    setup, events = base
    spends = [e.seq + 1 for e in events if e.type == "model.spend"]
    name = "twice"
    assert forked(setup.decide(name), spends[0]) == KILLED
    done = len(setup.events(name))
    assert forked(setup.resume(name), spends[-1] - done) == KILLED
    assert forked(setup.resume(name)) == REJECTED
    assert setup.calls(name) <= MAX_CALLS
    assert (setup.root / f"{name}.jsonl").read_text() == (setup.root / "base.jsonl").read_text()


def test_a_second_resume_of_a_run_in_progress_exits_2(base: tuple[Setup, list[Any]]) -> None:
    setup, _ = base
    name = "busy"
    assert forked(setup.decide(name), 5) == KILLED
    journalled = len(setup.events(name))  # the batch holding the 5th event, all of it
    assert journalled >= 5
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with Journal(setup.root / f"{name}.sqlite") as j:
            assert j.acquire_run_lock(RUN, holder.pid) is None  # the other process holds the run
        proc = cli(*setup.resume(name))  # in this process: another pid than the holder's
        assert proc.code == 2, proc.err
        assert f"run {RUN} is being resumed by pid {holder.pid}" in proc.err
        assert "Traceback" not in proc.err
        assert len(setup.events(name)) == journalled  # nothing was appended
    finally:
        holder.kill()
        holder.wait()
    # The holder is gone: its lease is taken over and the run finishes.
    assert forked(setup.resume(name)) == REJECTED
    assert (setup.root / f"{name}.jsonl").read_text() == (setup.root / "base.jsonl").read_text()


def _slow_policy() -> Policy:
    return policy_from_dict(
        {
            "reading": {"similarity": "tfidf", "theta_s": 0.3},
            "routing": {"convergent_disagreement_without_values": "seek_context"},
            "concurrency": 1,
        }
    )


def test_a_deadline_stops_the_run_partial_and_resumable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [r for r in mixed_batch() if isinstance(r, dict)]
    path = write_jsonl(tmp_path / "in.jsonl", rows)
    answer = json.dumps({"decision": "1", "reasoning": "slowly"})
    # Every call (0.8 s) outlasts the 0.1 s deadline: the run stops by its first call.
    with FakeServer(ScriptedRules(default=answer), ServerSettings(latency_s=0.8)) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "k")
        journal = Journal(tmp_path / "j.sqlite")
        start_run(journal, str(path), _slow_policy(), run_id="d", model="openai:gpt-4o-mini")

        async def run(deadline: float | None) -> list[Any]:
            return [r async for r in execute_run(journal, "d", deadline_s=deadline)]

        loop_start = asyncio.new_event_loop()
        try:
            with pytest.raises(DeadlineReached, match=r"deadline of 0\.1 s reached"):
                loop_start.run_until_complete(run(0.1))
        finally:
            loop_start.close()
        stopped = [e for e in journal.events("d") if e.type == "run.stopped"]
        assert [e.payload["reason"] for e in stopped] == ["deadline"]
        assert journal.get("d", "run/finished") is None
        srv.settings.latency_s = 0.0  # the resumed run has no deadline: no need to wait
        records = asyncio.run(run(None))
        assert len(records) == len(rows)
        assert journal.get("d", "run/finished") is not None
        journal.close()


def test_decide_deadline_flag_exits_1_with_a_partial_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [r for r in mixed_batch() if isinstance(r, dict)]
    path = write_jsonl(tmp_path / "in.jsonl", rows)
    policy = write_policy(tmp_path / "policy.yaml", {"concurrency": 1})
    answer = json.dumps({"decision": "1", "reasoning": "slowly"})
    # Every call (0.8 s) outlasts the 0.1 s deadline: the run stops by its first call.
    with FakeServer(ScriptedRules(default=answer), ServerSettings(latency_s=0.8)) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "k")
        journal = str(tmp_path / "j.sqlite")
        argv = [
            "decide",
            str(path),
            "--policy",
            str(policy),
            "--journal",
            journal,
            "--run-id",
            "d",
            "--json",
        ]
        code = main([*argv, "--model", "openai:gpt-4o-mini", "--deadline", "0.1"])
        err = capsys.readouterr().err
        assert code == 1 and "deadline of 0.1 s reached" in err and "runs resume d" in err
        srv.settings.latency_s = 0.0  # the resumed run has no deadline: no need to wait
        assert main(["runs", "resume", "d", "--journal", journal, "--json"]) == 0
    with Journal(journal) as j:
        assert [e.type for e in j.events("d")][-1] == "run.finished"
