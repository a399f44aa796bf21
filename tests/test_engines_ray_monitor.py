"""The acceptance monitor on the Ray engine: a stratum the monitor has suspended
escalates there as in a local run, with the same records and the same journalled
monitor steps and suspension.

A worker decides against a throw-away journal holding its block's events only, so the
driver reads the monitor's verdicts from the run's journal as the run (each invocation)
starts and hands them to its workers. Most tests run the Ray executor with its workers
in this process (the driver's code as it is, Ray's transport replaced by direct calls),
so they run without a Ray instance; the last one starts a local Ray instance
(``DISSENSUS_TEST_RAY=1``).
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator, Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from dissensus.acceptance.monitor import confseq_available
from dissensus.cli import main
from dissensus.engines.ray import RayExecutor, RayOptions, codec, executor, flight, worker
from dissensus.pipeline import execute_run, start_run
from dissensus.pipeline.audit import monitor_status, run_acceptance
from dissensus.pipeline.confirm import confirm
from dissensus.pipeline.records import CaseRecord
from dissensus.pipeline.review import final_records
from dissensus.store import event_types as ev
from dissensus.store.journal import Event, Journal

pytestmark = pytest.mark.skipif(
    not confseq_available(),
    reason="confseq is not installed (pip install 'dissensus[monitor]')",
)

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "examples" / "llmbar-swap.jsonl"
LINES = SRC.read_text(encoding="utf-8").splitlines(keepends=True)
OPTIONS = RayOptions(workers=2, lines_per_block=3)


class _Killed(Exception):
    pass


@pytest.fixture(scope="module")
def suspended(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with an acceptance file ``A.json`` at ``audit_rate: 1.0``, its policy
    ``p.yaml``, panels ``p.jsonl`` not decided yet, and a journal ``base.sqlite`` whose
    run ``r1`` had every automatic commit audited and answered with the other option:
    the monitor has suspended learned acceptance."""
    root = tmp_path_factory.mktemp("monitor")
    policy = root / "p.yaml"
    policy.write_text(
        "reading: {similarity: tfidf}\n"
        "routing: {convergent_disagreement_without_values: seek_context}\n"
        "acceptance: {model: A.json, audit_rate: 1.0}\n",
        encoding="utf-8",
    )
    args = ["calibrate-acceptance", str(SRC), "--policy", str(policy)]
    assert main([*args, "--out", str(root / "A.json")]) == 0
    first = root / "r1.jsonl"
    first.write_text("".join(LINES[:12]), encoding="utf-8")
    (root / "p.jsonl").write_text("".join(LINES[12:30]), encoding="utf-8")
    with Journal(root / "base.sqlite") as journal:
        start_run(journal, str(first), str(policy), run_id="r1")
        asyncio.run(_collect(execute_run(journal, "r1")))
        for record in final_records(journal, "r1"):
            if record.auto and record.decision is not None:
                other = "B" if record.decision != "B" else "A"
                confirm(journal, f"r1.{record.line}", decision=other, note="wrong")
        assert [row.suspended for row in monitor_status(journal)] == [True]
    return root


async def _collect(stream: AsyncIterator[CaseRecord]) -> list[dict[str, Any]]:
    return [r.model_dump(mode="json") async for r in stream]


def _journal(suspended: Path, tmp_path: Path, name: str, **kw: Any) -> Journal:
    """A copy of the suspended journal with run ``R2`` started on ``p.jsonl``."""
    path = tmp_path / f"{name}.sqlite"
    shutil.copy(suspended / "base.sqlite", path)
    journal = Journal(path, **kw)
    start_run(journal, str(suspended / "p.jsonl"), str(suspended / "p.yaml"), run_id="R2")
    return journal


def _events(journal: Journal) -> dict[str, Any]:
    """Run ``R2``'s events by key, but ``run.started`` and the Ray driver's reservations."""
    skip = ("run/started", "reserved/", "settled/")
    return {e.key: e.payload for e in journal.events("R2") if not e.key.startswith(skip)}


@pytest.fixture(scope="module")
def local(suspended: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Any], Any]:
    """Run ``R2`` decided locally: its records and events."""
    with _journal(suspended, tmp_path_factory.mktemp("local"), "local") as journal:
        records = asyncio.run(_collect(execute_run(journal, "R2")))
        events = _events(journal)
    reasons = [r["reason"] for r in records]
    assert any("acceptance suspended" in why for why in reasons), reasons
    assert not any(r["auto"] and r["basis"] == "learned" for r in records)
    assert any(e.get("suspended") is True for e in events.values()), "no monitor step journalled"
    return records, events


class _InProcess:
    """A Ray worker in this process: ``decide.remote`` is deferred to the driver's
    waiting thread (``_take``), where no event loop runs."""

    def __init__(self, *args: Any) -> None:
        self.decider = worker._Decider(*args)


@pytest.fixture
def in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Ray executor with its workers in this process."""
    monkeypatch.setattr(executor, "ensure_ray", lambda options: options.workers)
    monkeypatch.setattr(
        executor, "_deciders", lambda n, args: [_InProcess(*args) for _ in range(n)]
    )

    def send(actor: _InProcess, text: str) -> Callable[[], bytes]:
        return partial(actor.decider.decide, text)

    monkeypatch.setattr(flight, "_send", send)
    monkeypatch.setattr(flight, "_take", lambda ref: codec._decoded(ref()))
    monkeypatch.setattr(executor, "_release", lambda actors: None)


def _ray(journal: Journal) -> list[dict[str, Any]]:
    return asyncio.run(_collect(execute_run(journal, "R2", executor=RayExecutor(OPTIONS))))


def _same_as_local(journal: Journal, got: list[dict[str, Any]], local: Any) -> None:
    records, events = local
    assert got == records  # actions, reasons ("acceptance suspended: ..."), everything
    assert _events(journal) == events  # case.monitor steps and acceptance.suspended too
    assert journal.verify("R2").ok
    found = run_acceptance(journal, "R2")
    assert found is not None and [s.stratum for s in found.suspended] == ["all"]


def test_a_ray_run_escalates_what_the_monitor_suspended_as_a_local_run(
    suspended: Path, local: Any, tmp_path: Path, in_process: None
) -> None:
    with _journal(suspended, tmp_path, "ray") as journal:
        got = _ray(journal)
        _same_as_local(journal, got, local)
        (event,) = journal.events("R2", type=ev.ACCEPTANCE_SUSPENDED)
        assert event.case is None and event.payload["suspended_after"] is not None


def test_the_workers_get_the_monitor_the_driver_read(
    suspended: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_process: None
) -> None:
    """Read once, from the run's journal, as the run starts: every worker gets it."""
    made: list[Any] = []
    real = executor._deciders

    def spy(n: int, args: tuple[Any, ...]) -> list[Any]:
        made.extend(args[3:])
        return real(n, args)

    monkeypatch.setattr(executor, "_deciders", spy)
    with Journal(suspended / "base.sqlite") as journal:
        (row,) = monitor_status(journal)
    with _journal(suspended, tmp_path, "ray") as journal:
        _ray(journal)
    assert len(made) == 1 and set(made[0]["verdicts"]) == {"all"}
    assert made[0]["journalled"] == []  # the run had journalled no suspension yet
    shipped = made[0]["verdicts"]["all"]
    assert shipped["acceptance_sha256"] == row.acceptance_sha256
    assert shipped["suspended"] is True
    assert (shipped["audits"], shipped["suspended_after"]) == (row.audits, row.suspended_after)


def test_a_ray_run_killed_mid_way_resumes_as_the_local_run(
    suspended: Path, local: Any, tmp_path: Path, in_process: None
) -> None:
    """Killed after a block with a suspended case is journalled, resumed on Ray: the
    resume reads the monitor again (the run's own suspension included)."""

    def kill(event: Event) -> None:
        if event.key == "case/10/record":
            raise _Killed

    journal = _journal(suspended, tmp_path, "ray", after_append=kill)
    with pytest.raises(_Killed):
        _ray(journal)
    journal.close()
    with Journal(tmp_path / "ray.sqlite") as journal:
        done = [e.case for e in journal.events("R2", type=ev.CASE_RECORD)]
        assert done and len(done) < len(local[0])
        assert list(journal.events("R2", type=ev.ACCEPTANCE_SUSPENDED))
        _same_as_local(journal, _ray(journal), local)


@pytest.fixture(scope="module")
def one_open(suspended: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """``suspended``'s files with a journal whose run ``r1`` has all its audits but the
    last answered wrong (the monitor suspended already), and that last one's id."""
    root = tmp_path_factory.mktemp("open")
    for name in ("p.yaml", "A.json", "p.jsonl", "r1.jsonl"):
        shutil.copy(suspended / name, root / name)
    with Journal(root / "base.sqlite") as journal:
        start_run(journal, str(root / "r1.jsonl"), str(root / "p.yaml"), run_id="r1")
        asyncio.run(_collect(execute_run(journal, "r1")))
        auto = [r for r in final_records(journal, "r1") if r.auto and r.decision is not None]
        for record in auto:
            other = "B" if record.decision != "B" else "A"
            if record is not auto[-1]:
                confirm(journal, f"r1.{record.line}", decision=other, note="wrong")
        (row,) = monitor_status(journal)
        assert row.suspended and row.audits == len(auto) - 1
    last = auto[-1]
    return root, f"r1.{last.line}:{'B' if last.decision != 'B' else 'A'}"


@pytest.mark.parametrize(("first", "then"), [("local", "local"), ("ray", "ray"), ("ray", "local")])
def test_a_run_resumed_after_more_audits_keeps_the_suspension_it_journalled(
    one_open: tuple[Path, str], tmp_path: Path, in_process: None, first: str, then: str
) -> None:
    """Stopped once its suspension is journalled, resumed after another audit was
    answered: the resume reads the monitor afresh (one audit more) but journals no
    second, different suspension (a conflict that stopped the resume), and its records
    are those of an uninterrupted run."""
    root, last = one_open
    with _journal(root, tmp_path, "whole") as journal:
        whole = asyncio.run(_collect(execute_run(journal, "R2")))

    def kill(event: Event) -> None:
        if event.type == ev.ACCEPTANCE_SUSPENDED:
            raise _Killed

    journal = _journal(root, tmp_path, "parts", after_append=kill)
    with pytest.raises(_Killed):
        _ray(journal) if first == "ray" else asyncio.run(_collect(execute_run(journal, "R2")))
    journal.close()
    with Journal(tmp_path / "parts.sqlite") as journal:
        (before,) = journal.events("R2", type=ev.ACCEPTANCE_SUSPENDED)
        ref, decision = last.split(":")
        confirm(journal, ref, decision=decision, note="wrong")
        got = _ray(journal) if then == "ray" else asyncio.run(_collect(execute_run(journal, "R2")))
        assert got == whole
        (after,) = journal.events("R2", type=ev.ACCEPTANCE_SUSPENDED)
        assert after == before
        # The resume read the monitor afresh: its cases' steps count the new audit.
        audits = {e.payload["audits"] for e in journal.events("R2", type=ev.CASE_MONITOR)}
        assert before.payload["audits"] + 1 in audits


@pytest.mark.ray
@pytest.mark.skipif(
    os.environ.get("DISSENSUS_TEST_RAY") != "1",
    reason="starts a local Ray instance (slow): set DISSENSUS_TEST_RAY=1 to run",
)
def test_on_ray_a_suspended_monitor_escalates_as_in_a_local_run(
    suspended: Path, local: Any, tmp_path: Path
) -> None:
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        with _journal(suspended, tmp_path, "ray") as journal:
            _same_as_local(journal, _ray(journal), local)
    finally:
        ray.shutdown()
