"""Crash test: runs killed with SIGKILL at seeded points, then resumed with ``runs resume``.

Events are appended in batches (a block of cases, or a case's steps before its first
model call, in one transaction): a run killed after its N-th event holds the whole batch
of that event; one killed inside a batch holds none of it.

Every killed run must end, after ``dissensus runs resume``, with the same final records
and the same journal events (no event lost, none duplicated) as an uninterrupted run,
a hash chain that verifies, and no completed model call made twice.

The uninterrupted base run goes through the CLI's ``main`` in the test process, which
loads everything a run needs; the killed and resumed runs are forked children of it
(:func:`fault_runner.forked`), so they pay no imports. A child sends itself SIGKILL
right after its N-th journalled event. One run also goes through a fresh interpreter
(``tests/fault_runner.py``) and resumes with ``python -m dissensus``.

The default run kills at every stage and at 6 seeded random points; ``DISSENSUS_SOAK=1``
kills at 20.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dissensus.cli import main
from dissensus.pipeline.review import final_records
from dissensus.store import Journal
from fault_runner import forked
from pipeline_cases import crash_script, mixed_batch, write_jsonl, write_policy

pytestmark = pytest.mark.slow  # the module's tests share a base run

RUN = "crash"
KILLED = -signal.SIGKILL
REJECTED = 3  # the batch holds one bad line
SEEDED_KILLS = 20 if os.environ.get("DISSENSUS_SOAK") == "1" else 6


class Setup:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.input = write_jsonl(root / "in.jsonl", mixed_batch())
        self.script = crash_script(root / "script.yaml")
        self.policy = write_policy(root / "policy.yaml")

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


def _comparable(events: list[Any]) -> dict[str, tuple[str, str | None, Any]]:
    # run.started names the per-run recording file of the model spec: compare the rest.
    out = {}
    for e in events:
        payload = dict(e.payload)
        if e.key == "run/started":
            payload.pop("model", None)
        out[e.key] = (e.type, e.case, payload)
    return out


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Setup, list[Any]]:
    setup = Setup(tmp_path_factory.mktemp("crash"))
    assert main(setup.decide("base")) == REJECTED
    return setup, setup.events("base")


def _kill_and_resume(
    setup: Setup, base_events: list[Any], name: str, kill_after: int, *, in_batch: int = 0
) -> None:
    note = setup.root / f"{name}-batch.json"
    if in_batch:
        assert forked(setup.decide(name), in_batch=(in_batch, str(note))) == KILLED
    else:
        assert forked(setup.decide(name), kill_after) == KILLED
    before = setup.events(name)
    if in_batch:
        # Killed after the batch's rows were written, before its commit: every event of
        # the batches before it survived, none of its own.
        first, size = json.loads(note.read_text())
        assert size >= 2 and len(before) == first
    else:
        # Killed right after the commit of the batch holding event kill_after: all of it
        # survived, nothing after it.
        assert len(before) >= kill_after
    with Journal(setup.root / f"{name}.sqlite") as j:
        assert j.verify(RUN).ok
    journalled_calls = sum(e.type == "model.call" for e in before)
    calls_before = setup.calls(name)

    assert forked(setup.resume(name)) == REJECTED
    after = setup.events(name)
    # An attempt journalled as sent whose call had no result at the kill is sent again on
    # resume: one more ``model.sent`` event per such attempt, nothing else differs.
    answered = {e.key for e in before if e.type == "model.call"} | {
        e.payload["call"] for e in before if e.type == "model.failed"
    }
    cut_off = [e for e in before if e.type == "model.sent" and e.payload["call"] not in answered]
    sends = {e.key for e in after if e.type == "model.sent"}
    base_sends = {e.key for e in base_events if e.type == "model.sent"}
    assert sends >= base_sends and len(sends - base_sends) <= len(cut_off)
    after = [e for e in after if e.type != "model.sent"]
    base_events = [e for e in base_events if e.type != "model.sent"]
    # Zero lost, zero duplicated: the same keys, each once, with the same content.
    assert len(after) == len({e.key for e in after}) == len(base_events)
    assert _comparable(after) == _comparable(base_events)
    # Completed (journalled) model calls were replayed, not made again.
    total_calls = sum(e.type == "model.call" for e in base_events)
    assert setup.calls(name) - calls_before == total_calls - journalled_calls
    with Journal(setup.root / f"{name}.sqlite") as j, Journal(setup.root / "base.sqlite") as b:
        assert j.verify(RUN).ok
        assert final_records(j, RUN) == final_records(b, RUN)
    assert (setup.root / f"{name}.jsonl").read_text() == (setup.root / "base.jsonl").read_text()


def test_the_batch_exercises_every_stage(base: tuple[Setup, list[Any]]) -> None:
    _, events = base
    types = {e.type for e in events}
    assert types >= {
        "run.started", "case.steps", "case.reading", "case.followup", "model.call",
        "case.acceptance", "review.opened", "case.certificate", "case.record", "input.rejected", "run.finished",
    }  # fmt: skip


def test_resume_after_a_kill_at_each_stage(base: tuple[Setup, list[Any]]) -> None:
    """Killed right after the first event of every type (every stage of the pipeline)."""
    setup, events = base
    firsts: dict[str, int] = {}
    for e in events:
        firsts.setdefault(e.type, e.seq + 1)
    points = sorted(p for p in set(firsts.values()) if p < len(events))
    assert len(points) >= 10
    for p in points:
        _kill_and_resume(setup, events, f"stage{p}", p)


def test_runs_killed_inside_a_batch(base: tuple[Setup, list[Any]]) -> None:
    """Killed inside the first and the second batch of several events, before its commit."""
    setup, events = base
    for n in (1, 2):
        _kill_and_resume(setup, events, f"batch{n}", 0, in_batch=n)


def test_runs_killed_at_seeded_random_points(base: tuple[Setup, list[Any]]) -> None:
    """6 seeded points (20 with ``DISSENSUS_SOAK=1``); the first 6 are the same either way."""
    setup, events = base
    rng = random.Random(20240607)
    points = [rng.randint(1, len(events) - 1) for _ in range(SEEDED_KILLS)]
    for i, p in enumerate(points):
        _kill_and_resume(setup, events, f"seeded{i}", p)


def test_kill_and_resume_through_the_real_entry_point(base: tuple[Setup, list[Any]]) -> None:
    setup, events = base
    runner = str(Path(__file__).with_name("fault_runner.py"))
    killed = subprocess.run(
        [sys.executable, runner, str(len(events) // 2), "SIGKILL", *setup.decide("cli")],
        check=False,
    )
    assert killed.returncode == KILLED
    resumed = subprocess.run(
        [sys.executable, "-m", "dissensus", *setup.resume("cli")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert resumed.returncode == REJECTED, resumed.stderr
    records = [json.loads(line) for line in (setup.root / "cli.jsonl").read_text().splitlines()]
    assert [r["id"] for r in records] == [
        "recorded-stable", "live-reask", "evidence-backed", "value-conflict", "negotiated", "live-split", "recorded-flip",
    ]  # fmt: skip
    assert _comparable(setup.events("cli")) == _comparable(events)
