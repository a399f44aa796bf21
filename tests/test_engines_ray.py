"""The Ray engine: the same records, rejects and journal as a local run; retries; resume.

These tests start one local Ray instance (2 CPUs, no dashboard) for the module, which
takes tens of seconds: they carry the ``ray`` marker and run only when
``DISSENSUS_TEST_RAY=1`` (``DISSENSUS_TEST_RAY=1 pytest -m ray``), so the default suite
stays fast.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from dissensus.engines import ray as ray_engine
from dissensus.engines.blocks import plan_blocks
from dissensus.engines.ray import RayOptions, decide_ray, flight
from dissensus.pipeline import execute_run, load_policy, start_run
from dissensus.pipeline.records import CaseRecord
from dissensus.store.journal import Event, Journal

pytestmark = [
    pytest.mark.ray,
    pytest.mark.skipif(
        os.environ.get("DISSENSUS_TEST_RAY") != "1",
        reason="starts a local Ray instance (slow): set DISSENSUS_TEST_RAY=1 to run",
    ),
]

REPO = Path(__file__).resolve().parent.parent
PANELS = REPO / "examples" / "llmbar-cot.jsonl"
POLICY = REPO / "examples" / "llmbar-policy.yaml"


@pytest.fixture(scope="module")
def ray_instance() -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def panels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled LLMBar panels with a blank line and two bad lines mixed in."""
    lines = PANELS.read_text(encoding="utf-8").splitlines(keepends=True)
    lines.insert(3, "\n")
    lines.insert(10, "{not json\n")
    lines.insert(
        20,
        json.dumps({"id": "few", "outputs": [{"agent": "a", "decision": "x", "reasoning": "r"}]})
        + "\n",
    )
    path = tmp_path_factory.mktemp("ray") / "panels.jsonl"
    path.write_text("".join(lines), encoding="utf-8")
    return path


async def _collect(stream: AsyncIterator[CaseRecord]) -> list[dict[str, Any]]:
    return [r.model_dump(mode="json") async for r in stream]


def _start(journal: Journal, path: Path, run_id: str) -> None:
    pol, pol_dir = load_policy(str(POLICY))
    # The bundled acceptance file was calibrated with MiniLM; these runs read with tfidf.
    pol = pol.model_copy(update={"acceptance": pol.acceptance.model_copy(update={"model": None})})
    start_run(journal, str(path), pol, policy_dir=pol_dir, run_id=run_id, similarity="tfidf")


@pytest.fixture(scope="module")
def local_run(panels: Path) -> tuple[list[dict[str, Any]], list[str], dict[str, Any]]:
    journal = Journal(":memory:")
    _start(journal, panels, "R")
    rejects: list[str] = []
    records = asyncio.run(
        _collect(execute_run(journal, "R", on_reject=lambda r: rejects.append(r.describe())))
    )
    events = _case_events(journal)
    return records, rejects, events


def _case_events(journal: Journal) -> dict[str, Any]:
    """The run's events by key, but ``run.started`` and the Ray driver's reservations
    (``model.reserved``, ``model.settled``: a local run has none)."""
    skip = ("run/started", "reserved/", "settled/")
    return {e.key: e.payload for e in journal.events("R") if not e.key.startswith(skip)}


def _ray_run(
    journal: Journal, path: Path, run_id: str = "R", **opts: Any
) -> tuple[list[dict[str, Any]], list[str]]:
    rejects: list[str] = []
    options = RayOptions(workers=2, lines_per_block=opts.pop("lines_per_block", 25))
    records = asyncio.run(
        _collect(
            decide_ray(
                journal, run_id, on_reject=lambda r: rejects.append(r.describe()), options=options
            )
        )
    )
    return records, rejects


def test_ray_decide_equals_local_run(
    ray_instance: Any, panels: Path, local_run: Any, tmp_path: Path
) -> None:
    records, rejects, events = local_run
    journal = Journal(tmp_path / "j.sqlite")
    _start(journal, panels, "R")
    got, got_rejects = _ray_run(journal, panels)
    assert [r["id"] for r in got] == [r["id"] for r in records]
    assert got == records  # ids, actions, decisions, reasons, usage: everything
    assert got_rejects == rejects and len(rejects) == 2
    assert journal.verify("R").ok
    ray_events = _case_events(journal)
    assert ray_events == events
    # The driver reserved each block's allowance before sending it, and settled each.
    reserved = {e.key for e in journal.events("R", type="model.reserved")}
    settled = {e.payload["reservation"] for e in journal.events("R", type="model.settled")}
    assert reserved and reserved == settled
    # Driver appends case after case: each case's events are contiguous, in line order.
    cases = [e.case for e in journal.events("R") if e.case is not None]
    order = [int(c) for i, c in enumerate(cases) if i == 0 or cases[i - 1] != c]
    assert order == sorted(order) and len(order) == len(set(order))


def test_killed_worker_is_retried_and_the_result_is_equal(
    ray_instance: Any, panels: Path, local_run: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    records, rejects, _ = local_run
    marker = tmp_path / "killed"
    monkeypatch.setenv(ray_engine.FAULT_ENV, f"2:{marker}")
    journal = Journal(tmp_path / "j.sqlite")
    _start(journal, panels, "R")
    got, got_rejects = _ray_run(journal, panels)
    assert marker.exists()  # a worker really died on block 2
    assert got == records and got_rejects == rejects
    assert journal.verify("R").ok


class _DriverKilled(Exception):
    pass


def test_killed_ray_run_resumes_without_redoing_completed_blocks(
    ray_instance: Any, panels: Path, local_run: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    records, rejects, events = local_run
    path = tmp_path / "j.sqlite"
    count = [0]

    def die_after_many(event: Event) -> None:
        count[0] += 1
        if count[0] == 400:  # mid-way through the appends of the driver
            raise _DriverKilled

    journal = Journal(path, after_append=die_after_many)
    _start(journal, panels, "R")
    with pytest.raises(_DriverKilled):
        _ray_run(journal, panels)
    journal.close()

    sent: list[int] = []
    real = flight._send

    def spy(actor: Any, text: str) -> Any:
        sent.append(json.loads(text)["block"]["index"])
        return real(actor, text)

    monkeypatch.setattr(flight, "_send", spy)
    journal = Journal(path)
    got, got_rejects = _ray_run(journal, panels)
    n_blocks = len(plan_blocks(panels, 25))
    assert 0 < len(sent) < n_blocks and sent[0] > 0  # block 0 was complete: not redone
    assert got == records and got_rejects == rejects
    assert journal.verify("R").ok
    assert _case_events(journal) == events


def test_ray_run_resumes_on_the_local_engine(
    ray_instance: Any, panels: Path, local_run: Any, tmp_path: Path
) -> None:
    records = local_run[0]
    journal = Journal(tmp_path / "j.sqlite")
    _start(journal, panels, "R")
    _ray_run(journal, panels)
    again = asyncio.run(_collect(execute_run(journal, "R")))
    assert again == records


def test_cli_route_and_decide_with_ray_engine(
    ray_instance: Any, panels: Path, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from dissensus.cli import app

    runner = CliRunner()
    local = runner.invoke(
        app,
        [
            "route",
            str(panels),
            "--similarity",
            "tfidf",
            "--json",
            "--rejects",
            str(tmp_path / "l.rej"),
        ],
    )
    ray_out = runner.invoke(
        app,
        [
            "route",
            str(panels),
            "--similarity",
            "tfidf",
            "--json",
            "--engine",
            "ray",
            "--workers",
            "2",
            "--rejects",
            str(tmp_path / "r.rej"),
        ],
    )
    assert local.exit_code == ray_out.exit_code == 3
    assert ray_out.stdout == local.stdout
    assert (tmp_path / "r.rej").read_text() == (tmp_path / "l.rej").read_text()

    pol = tmp_path / "policy.yaml"
    pol.write_text(
        POLICY.read_text(encoding="utf-8").replace("model: llmbar-accept.json", "model: null"),
        encoding="utf-8",
    )
    shutil.copy(REPO / "examples" / "llmbar-reliability.json", tmp_path / "llmbar-reliability.json")
    outs = {}
    for engine in ("local", "ray"):
        out = tmp_path / f"{engine}.jsonl"
        res = runner.invoke(
            app,
            [
                "decide",
                str(panels),
                "--policy",
                str(pol),
                "--similarity",
                "tfidf",
                "--journal",
                str(tmp_path / f"{engine}.sqlite"),
                "--engine",
                engine,
                "--json",
                "--output",
                str(out),
                "--run-id",
                "C",
            ],
        )
        assert res.exit_code == 3, res.output
        outs[engine] = out.read_text()
    assert outs["ray"] == outs["local"]
    verify = runner.invoke(app, ["runs", "verify", "C", "--journal", str(tmp_path / "ray.sqlite")])
    assert verify.exit_code == 0, verify.output


_KILLED_DRIVER = """
import asyncio, os, signal, sys
from dissensus.engines.ray import RayOptions, decide_ray
from dissensus.store import event_types as ev
from dissensus.store.journal import Journal

def die(event):
    if event.type == ev.MODEL_SETTLED:  # the first block is back and journalled
        os.kill(os.getpid(), signal.SIGKILL)

async def main():
    journal = Journal(sys.argv[1], after_append=die)
    options = RayOptions(address=sys.argv[2], workers=2, lines_per_block=20)
    async for _ in decide_ray(journal, "K", options=options):
        pass

asyncio.run(main())
"""


def _live(tmp_path: Path, max_calls: int) -> tuple[Path, Path]:
    """240 panels, each making two live calls (480 in all), a policy with ``max_calls``,
    a run ``K`` started in ``j.sqlite`` whose model writes a line per call sent."""
    from pipeline_cases import crash_script, panel, write_jsonl, write_policy

    rows = [panel(f"live-{i}", ["1", "1", "1"]) for i in range(240)]
    path = write_jsonl(tmp_path / "in.jsonl", rows)
    extra = {"guard": {"enabled": False}, "budget": {"max_calls": max_calls}}
    policy = write_policy(tmp_path / "policy.yaml", extra)
    calls = tmp_path / "calls.jsonl"
    model = f"record:{calls}:scripted:{crash_script(tmp_path / 'model.yaml')}"
    with Journal(tmp_path / "j.sqlite") as journal:
        start_run(journal, str(path), load_policy(str(policy))[0], run_id="K", model=model)
    return tmp_path / "j.sqlite", calls


def _sent(calls: Path) -> int:
    return len(calls.read_text().splitlines()) if calls.exists() else 0


@pytest.mark.parametrize("resume_on", ["ray", "local"])
def test_a_killed_ray_driver_and_its_resume_never_exceed_the_call_budget(
    ray_instance: Any, tmp_path: Path, resume_on: str
) -> None:
    """The driver is killed (SIGKILL) once its first block is journalled, other blocks
    being decided; the resume, on either engine, is charged the open reservations."""
    import subprocess
    import sys

    max_calls = 300
    journal_path, calls = _live(tmp_path, max_calls)
    address = ray_instance.get_runtime_context().gcs_address
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), *sys.path])}
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_DRIVER, str(journal_path), address],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    first = _sent(calls)
    assert 0 < first <= max_calls
    with Journal(journal_path) as journal:
        kinds = {e.type for e in journal.events("K")}
        assert "model.reserved" in kinds and "run.finished" not in kinds
        if resume_on == "ray":
            options = RayOptions(workers=2, lines_per_block=20)
            records = asyncio.run(_collect(decide_ray(journal, "K", options=options)))
        else:
            records = asyncio.run(_collect(execute_run(journal, "K")))
        assert len(records) == 240
        assert journal.verify("K").ok
    assert _sent(calls) <= max_calls  # the first run's calls and the resume's


def test_an_uninterrupted_ray_run_with_an_ample_budget_equals_the_local_run(
    ray_instance: Any, tmp_path: Path
) -> None:
    (tmp_path / "local").mkdir()
    (tmp_path / "ray").mkdir()
    local_journal, local_calls = _live(tmp_path / "local", max_calls=10_000)
    ray_journal, ray_calls = _live(tmp_path / "ray", max_calls=10_000)
    with Journal(local_journal) as journal:
        local = asyncio.run(_collect(execute_run(journal, "K")))
    with Journal(ray_journal) as journal:
        options = RayOptions(workers=2, lines_per_block=20)
        got = asyncio.run(_collect(decide_ray(journal, "K", options=options)))
        assert not [e for e in journal.events("K", type="model.failed")]
    assert got == local
    assert _sent(ray_calls) == _sent(local_calls) == 480
