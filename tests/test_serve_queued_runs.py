"""The decide runs a server accepted and has not decided yet are bounded.

Before the fix ``POST /v1/decide?async=true`` took any number of runs, each holding its
panels in memory until decided: thirty bodies of 1,000 panels sent at once took the
server from 0.6 to 2.4 GB. Now a request beyond ``--max-queued`` runs or
``--max-queued-bytes`` of panels is 503 with ``Retry-After`` in the service's error
body, and nothing of it is journalled; once the runs in progress end, the next is taken.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from dissensus.serve import runs as runs_module
from pipeline_cases import panel
from serve_helpers import auth, client_for, heap_frozen, journal_events, settings

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module", autouse=True)
def _heap_frozen() -> Iterator[None]:
    yield from heap_frozen()


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Runs are decided only once the event is set (until then they stay in progress)."""
    release = threading.Event()
    original = runs_module.execute_run

    def execute_run(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        async def records() -> AsyncIterator[Any]:
            while not release.is_set():
                await asyncio.sleep(0.01)
            async for record in original(*args, **kwargs):
                yield record

        return records()

    monkeypatch.setattr(runs_module, "execute_run", execute_run)
    yield release
    release.set()


def _panels(n: int, tag: str) -> list[dict[str, Any]]:
    return [panel(f"{tag}-{i}", ["1", "1", "1"], swap=["1", "1", "1"]) for i in range(n)]


async def _finished(client: httpx.AsyncClient, run_id: str) -> None:
    for _ in range(500):
        doc = (await client.get(f"/v1/runs/{run_id}", headers=auth("sub"))).json()
        if doc["status"] != "running":
            assert doc["status"] == "finished", doc
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"run {run_id} did not finish")


async def _refused(client: httpx.AsyncClient, body: Any, journal: Path, params: Any) -> str:
    before = journal_events(journal)
    answer = await client.post("/v1/decide", json=body, headers=auth("sub"), params=params)
    assert answer.status_code == 503, answer.text
    assert answer.headers["Retry-After"] == "2"
    assert set(answer.json()) == {"error", "field"} and answer.json()["field"] is None
    assert journal_events(journal) == before, "a refused request journalled something"
    return str(answer.json()["error"])


async def test_runs_beyond_max_queued_are_refused_until_one_ends(
    tmp_path: Path, held: threading.Event
) -> None:
    s = settings(tmp_path, max_queued_runs=2)
    async with client_for(s) as client:
        first = []
        for k in range(2):
            answer = await client.post(
                "/v1/decide",
                json=_panels(2, f"a{k}"),
                headers=auth("sub"),
                params={"async": "true"},
            )
            assert answer.status_code == 202, answer.text
            first.append(answer.json()["run_id"])
        for params in ({"async": "true"}, {}):  # waiting for the records or not
            error = await _refused(client, _panels(1, "b"), Path(s.journal), params)
            assert error == (
                "the server holds 2 runs (its --max-queued) not decided yet; "
                "send the request again later"
            )
        held.set()
        for run_id in first:
            await _finished(client, run_id)
        again = await client.post(
            "/v1/decide", json=_panels(1, "c"), headers=auth("sub"), params={"async": "true"}
        )
        assert again.status_code == 202, again.text
        await _finished(client, again.json()["run_id"])


async def test_panels_beyond_max_queued_bytes_are_refused_but_one_run_is_always_taken(
    tmp_path: Path, held: threading.Event
) -> None:
    s = settings(tmp_path, max_queued_bytes=4096)
    big = _panels(20, "big")  # well over 4 KiB of JSONL
    async with client_for(s) as client:
        alone = await client.post(
            "/v1/decide", json=big, headers=auth("sub"), params={"async": "true"}
        )
        assert alone.status_code == 202, alone.text  # no other run in progress
        error = await _refused(client, _panels(1, "small"), Path(s.journal), {"async": "true"})
        assert error == (
            "the server holds 4,096 bytes of panels (its --max-queued-bytes) not decided "
            "yet; send the request again later"
        )
        held.set()
        await _finished(client, alone.json()["run_id"])
        after = await client.post(
            "/v1/decide", json=_panels(1, "after"), headers=auth("sub"), params={"async": "true"}
        )
        assert after.status_code == 202, after.text


async def test_the_count_of_runs_in_progress_reads_only_runs_not_ended(tmp_path: Path) -> None:
    """Each request counts the runs in progress; the runs it reads are those launched and
    not ended, not every ended run the server keeps (up to ``KEEP_FINISHED``)."""
    s = settings(tmp_path)
    app_client = client_for(s)
    async with app_client as client:
        service = app_client._transport.app.state.service  # type: ignore[attr-defined]
        runner = service.runner
        for k in range(6):
            answer = await client.post("/v1/decide", json=_panels(1, f"d{k}"), headers=auth("sub"))
            assert answer.status_code == 200, answer.text
        started = await client.post(
            "/v1/decide", json=_panels(2, "e"), headers=auth("sub"), params={"async": "true"}
        )
        await _finished(client, started.json()["run_id"])
        assert runner.in_progress() == (0, 0)
        assert runner._launched == {}
        assert len(runner._ended) == 7  # the ended runs are kept all the same
