"""A Ray run keeps its deadline end to end: no model request reaches a member after it.

A run of live panels whose every re-ask waits on a loopback model server (fixed latency)
is decided on Ray with a deadline that passes while workers are mid-block. The server
notes when each request arrived: none arrives after the deadline (the worker's own check
and the driver's stop together; a small allowance covers a request already on its way).
The run stops partial and verifiable, and its resume without a deadline ends with the
same records as an uninterrupted local run.

Starts a Ray instance of its own (its workers need the server's address in their
environment): run with ``DISSENSUS_TEST_RAY=1`` (``make test-ray``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from dissensus.engines.ray import RayOptions, decide_ray
from dissensus.llm.fakeserver import FakeServer, ServerSettings
from dissensus.llm.scripted import load_script
from dissensus.pipeline import execute_run, load_policy, start_run
from dissensus.pipeline.batch import DeadlineReached
from dissensus.pipeline.records import CaseRecord
from dissensus.store.journal import Journal
from pipeline_cases import CRASH_ANSWERS, panel, write_jsonl, write_policy, write_script
from test_engines_ray import pytestmark

__all__ = ["pytestmark"]  # the gate

LATENCY_S = 0.4
"""Each model request's wait at the server."""

DEADLINE_S = 6.0
"""The run's deadline: past the workers' start-up, well before 60 panels' re-asks end
(made longer, up to 8 times, when the workers had not started a request by then)."""

SLACK_S = 0.5
"""A request the worker sent just before the deadline may reach the server just after."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeServer]:
    script = write_script(tmp_path_factory.mktemp("script") / "model.yaml", CRASH_ANSWERS)
    fake = FakeServer(load_script(script), ServerSettings(latency_s=LATENCY_S)).start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture(scope="module")
def ray_with_server(server: FakeServer) -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "test"}
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": env},
    )
    try:
        yield ray
    finally:
        ray.shutdown()


def _run(root: Path, n: int) -> Path:
    """Run ``K`` of ``n`` live panels (each re-asks its three agents) in ``root``."""
    root.mkdir()
    rows = [panel(f"live-{i}", ["1", "1", "1"]) for i in range(n)]
    path = write_jsonl(root / "in.jsonl", rows)
    policy = write_policy(root / "policy.yaml", {"guard": {"enabled": False}})
    journal = root / "j.sqlite"
    with Journal(journal) as j:
        start_run(j, str(path), load_policy(str(policy))[0], run_id="K", model="openai:fake-model")
    return journal


async def _collect(stream: AsyncIterator[CaseRecord]) -> list[CaseRecord]:
    return [record async for record in stream]


def test_no_request_reaches_a_member_after_the_deadline_and_the_resume_finishes(
    ray_with_server: Any, server: FakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)  # the local runs' model
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    options = RayOptions(workers=2, lines_per_block=10)
    # On a loaded machine the workers may start after a deadline of DEADLINE_S: then no
    # request was made and nothing was tested, so the run is made again, fresh, with a
    # longer deadline and as many times more panels (what is checked does not depend on
    # either).
    for attempt, times in enumerate((1, 3, 8)):
        n, deadline_s = 60 * times, DEADLINE_S * times
        journal = _run(tmp_path / f"ray-{attempt}", n)
        before = server.requests_received
        with Journal(journal) as j:
            start = time.time()
            with pytest.raises(DeadlineReached):
                asyncio.run(_collect(decide_ray(j, "K", options=options, deadline_s=deadline_s)))
            stopped = time.time()
            assert j.get("K", "run/finished") is None and j.verify("K").ok
            partial = len(list(j.events("K", type="case.record")))
        sent = list(server.arrivals)[before - server.requests_received :]
        if sent:
            break
    assert sent, "the workers started no request before the deadline: nothing was tested"
    assert max(sent) <= start + deadline_s + SLACK_S, (max(sent) - start, stopped - start)
    assert partial < n  # the deadline cut the run short
    with Journal(journal) as j:
        resumed = asyncio.run(_collect(decide_ray(j, "K", options=options)))
        assert j.get("K", "run/finished") is not None and j.verify("K").ok
        finished = {r.line: r for r in resumed}
    local = _run(tmp_path / "local", n)
    with Journal(local) as j:
        expected = {r.line: r for r in asyncio.run(_collect(execute_run(j, "K")))}
    assert len(expected) == n
    # Every case has its record, the same as the local run's (the resume's records are
    # the ones the stopped run did not finish; the journal holds the rest).
    with Journal(journal) as j:
        from dissensus.pipeline.review import final_records

        ray_records = {r.line: r for r in final_records(j, "K")}
    assert set(finished) <= set(ray_records)
    assert {k: (r.decision, r.action) for k, r in ray_records.items()} == {
        k: (r.decision, r.action) for k, r in expected.items()
    }
