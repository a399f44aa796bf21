"""A block whose Ray worker dies every time: the run stops after ``MAX_ATTEMPTS`` attempts
with one line (exit 1), the journal verifies and keeps what was done, and a resume once
the fault is gone ends with the records of a local run.

The workers really die (``$DISSENSUS_FAULT_RAY_KILL`` with a count: the worker that gets
the block kills its own process, every time). Each run is bounded (a wait, or the run's
``--deadline``): a driver that sent the block for ever would fail, not hang.

Starts a local Ray instance: run with ``DISSENSUS_TEST_RAY=1`` (``make test-ray``).
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import cli
from dissensus.engines import ray as ray_engine
from dissensus.engines.blocks import plan_blocks
from dissensus.engines.ray import RayOptions, decide_ray, resume
from dissensus.errors import DissensusError
from dissensus.pipeline import execute_run
from dissensus.pipeline.durable import open_reservations
from dissensus.store import Journal
from test_engines_ray import (
    POLICY,
    REPO,
    _case_events,
    _collect,
    _ray_run,
    _start,
    local_run,
    panels,
    pytestmark,
    ray_instance,
)

__all__ = ["local_run", "panels", "pytestmark", "ray_instance"]  # the fixtures and the gate

BOUND_S = 240.0
"""Seconds a run may take here: a few worker restarts take well under a minute; a driver
sending the dying block again and again never ends."""

ALWAYS = 1000
"""Kills asked for: more than any bounded run gets through (the block always kills)."""


def _bounded_ray_run(journal: Journal, run_id: str = "R") -> list[dict[str, Any]]:
    async def run() -> list[dict[str, Any]]:
        options = RayOptions(workers=2, lines_per_block=25)
        stream = decide_ray(journal, run_id, options=options)
        return await asyncio.wait_for(_collect(stream), BOUND_S)

    return asyncio.run(run())


def _journalled(journal: Journal, block: Any) -> bool:
    """Every line of ``block`` has a journalled record or reject."""
    return resume._complete(block, resume._seeds(journal, "R"))


def test_a_block_whose_worker_always_dies_stops_the_run_which_resumes_when_fixed(
    ray_instance: Any, panels: Path, local_run: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    records, rejects, events = local_run
    marker = tmp_path / "killed"
    monkeypatch.setenv(ray_engine.FAULT_ENV, f"2:{marker}:{ALWAYS}")
    path = tmp_path / "j.sqlite"
    journal = Journal(path)
    _start(journal, panels, "R")
    with pytest.raises(DissensusError) as stopped:  # not a TimeoutError: the run ended
        _bounded_ray_run(journal)
    attempts = ray_engine.MAX_ATTEMPTS
    blocks = plan_blocks(panels, 25)
    bad = blocks[2]
    assert isinstance(stopped.value, ray_engine.WorkerDied) and stopped.value.exit_code == 1
    message = str(stopped.value)
    assert "\n" not in message
    assert f"input lines {bad.first_line}-{bad.last_line} of {panels} (block 2)" in message
    assert f"died {attempts} times" in message and "dissensus runs resume R" in message
    assert len(marker.read_text().splitlines()) == attempts  # a worker really died each time
    # What came back before the block is journalled; the block itself is not; the journal
    # holds together and the run is not finished.
    assert _journalled(journal, blocks[0]) and _journalled(journal, blocks[1])
    assert not _journalled(journal, bad)
    assert journal.verify("R").ok
    assert journal.get("R", "run/finished") is None
    # Each dead attempt's reservation stays open: a resume charges it in full.
    opened = open_reservations(journal, "R")
    assert {f"reserved/2/{n}" for n in range(attempts)} <= set(opened)
    journal.close()

    monkeypatch.delenv(ray_engine.FAULT_ENV)  # the cause removed
    journal = Journal(path)
    got, got_rejects = _ray_run(journal, panels)
    assert got == records and got_rejects == rejects
    assert journal.verify("R").ok
    assert _case_events(journal) == events
    assert f"reserved/2/{attempts}" not in open_reservations(journal, "R")  # settled
    journal.close()


def test_cli_decide_on_ray_stops_with_one_line_and_runs_resume_finishes_it(
    ray_instance: Any, panels: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pol = tmp_path / "policy.yaml"
    pol.write_text(
        POLICY.read_text(encoding="utf-8").replace("model: llmbar-accept.json", "model: null"),
        encoding="utf-8",
    )
    shutil.copy(REPO / "examples" / "llmbar-reliability.json", tmp_path / "llmbar-reliability.json")
    common = ["--policy", pol, "--similarity", "tfidf", "--json", "--run-id", "C"]
    local = tmp_path / "local.jsonl"
    res = cli("decide", panels, *common, "--journal", tmp_path / "l.sqlite", "--output", local)
    assert res.code == 3, res.err

    marker = tmp_path / "killed"
    monkeypatch.setenv(ray_engine.FAULT_ENV, f"0:{marker}:{ALWAYS}")
    journal = tmp_path / "r.sqlite"
    ray_opts = ["--engine", "ray", "--workers", "2"]
    # The deadline bounds the run: a driver that never gave up would stop on it instead.
    res = cli(
        "decide", panels, *common, "--journal", journal, *ray_opts,
        "--output", tmp_path / "first.jsonl", "--deadline", str(int(BOUND_S)),
    )  # fmt: skip
    n_lines = len(panels.read_text(encoding="utf-8").splitlines())
    attempts = ray_engine.MAX_ATTEMPTS
    assert res.code == 1, res.err
    assert res.err.count("\n") == 1 and "Traceback" not in res.err, res.err
    assert res.err.startswith(
        f"error: run C: the Ray worker deciding input lines 1-{n_lines} of "
    ), res.err
    assert f"(block 0) died {attempts} times (" in res.err
    resume = f"dissensus runs resume C --journal {journal} --output {tmp_path / 'first.jsonl'}"
    assert res.err.endswith(f"with: {resume}\n"), res.err
    assert len(marker.read_text().splitlines()) == attempts
    verify = cli("runs", "verify", "C", "--journal", journal)
    assert verify.code == 0, verify.out + verify.err

    monkeypatch.delenv(ray_engine.FAULT_ENV)
    out = tmp_path / "resumed.jsonl"
    resumed = cli("runs", "resume", "C", "--journal", journal, "--json", "--output", out, *ray_opts)
    assert resumed.code == 3, resumed.err  # the bad lines of the input are rejects
    assert out.read_text() == local.read_text()
    got = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert got and all(r["id"] for r in got)
    verify = cli("runs", "verify", "C", "--journal", journal)
    assert verify.code == 0, verify.out + verify.err


def test_a_block_sent_again_after_its_worker_died_keeps_an_ample_budget(
    ray_instance: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker dies once on block 0 (and on the block queued behind it), the budget is
    ample: the dead attempt is charged its whole reservation (its spend unknown), yet the
    block sent again gets an allowance (the blocks in flight are taken back first, what
    they did not spend free again), so the records are those of a local run."""
    from test_engines_ray import _live

    for name in ("local", "ray"):
        (tmp_path / name).mkdir()
    local_path, _ = _live(tmp_path / "local", AMPLE)
    with Journal(local_path) as local:
        expected = asyncio.run(_collect(execute_run(local, "K")))
    path, _ = _live(tmp_path / "ray", AMPLE)
    marker = tmp_path / "killed"
    monkeypatch.setenv(ray_engine.FAULT_ENV, f"0:{marker}:1")
    with Journal(path) as journal:
        options = RayOptions(workers=2, lines_per_block=80)
        got = asyncio.run(_collect(decide_ray(journal, "K", options=options)))
        assert len(marker.read_text().splitlines()) == 1  # the worker really died
        again = journal.get("K", "reserved/0/1")
        assert again is not None and again.payload["calls"] > 0
        assert journal.verify("K").ok
    assert got == expected


AMPLE = 100_000
"""Calls allowed: far more than the 480 the run makes."""
