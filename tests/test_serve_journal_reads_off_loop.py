"""Long journal reads of the service run in worker threads, never on the server's loop.

Before the fix ``GET /v1/runs/{id}/verify``, ``GET /v1/runs/{id}/export``,
``GET /v1/review``, the review page's queue (with a text search), and ``GET
/v1/runs/{id}`` and ``GET /v1/runs/{id}/events`` of a run this process does not hold in
memory read the journal on the event loop: with a run of a thousand panels of forty
agents the verify took 1.5 s and ``/healthz`` waited 1.5 s with it; with 36 such runs
the review list took 64 s, and so did ``/healthz``. Here the journal's read is made to block until the test lets it go:
``/healthz`` must be answered while it blocks. The export, now written in parts, must
keep its bytes: those of the run's events read at once, one JSON line each. A run this
process is deciding is still described from memory, without the journal.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st

from dissensus.serve import runs
from dissensus.serve.runs import RunState
from dissensus.store import Journal
from serve_helpers import auth, client_for, escalating, heap_frozen, login, settings

pytestmark = pytest.mark.anyio

BLOCK_S = 3.0
"""Longest the patched read blocks (the loop, before the fix)."""


@pytest.fixture(scope="module", autouse=True)
def _heap_frozen() -> Iterator[None]:
    yield from heap_frozen()


def _blocking(
    original: Callable[..., Any], gates: dict[str, threading.Event]
) -> Callable[..., Any]:
    """``original``, made to wait for ``gates["release"]`` (at most :data:`BLOCK_S`);
    ``gates["entered"]`` and ``gates["left"]`` say when the wait began and ended."""

    def read(*args: Any, **kwargs: Any) -> Any:
        gates["entered"].set()
        gates["release"].wait(BLOCK_S)
        gates["left"].set()
        return original(*args, **kwargs)

    return read


async def healthz_while_blocked(
    client: httpx.AsyncClient,
    request: Coroutine[Any, Any, httpx.Response],
    gates: dict[str, threading.Event],
    what: str,
) -> httpx.Response:
    """Send ``request``, whose journal call waits on ``gates`` (:func:`_blocking`), ask for
    ``/healthz`` while it waits, and check that it is answered before the wait ends;
    ``request``'s answer once the wait is let go."""
    try:
        slow = asyncio.create_task(request)
        reached = await asyncio.to_thread(gates["entered"].wait, BLOCK_S)
        health = await client.get("/healthz")
        # On the loop, the call held it until its wait timed out: /healthz came after.
        waited = gates["left"].is_set()
    finally:
        gates["release"].set()
    answer = await slow
    assert reached, f"{what} never started"
    assert health.status_code == 200
    assert not waited, f"/healthz waited for {what}"
    return answer


async def _run(client: httpx.AsyncClient) -> str:
    panels = [escalating(f"p{i}", f"Is tax rate {i} right?") for i in range(3)]
    answer = await client.post("/v1/decide", json=panels, headers=auth("sub"))
    assert answer.status_code == 200, answer.text
    return str(answer.json()["run_id"])


# (what is made to block: "journal" or "desk", its methods, the request)
CASES: dict[str, tuple[str, tuple[str, ...], Callable[[str], str], str]] = {
    "verify": ("journal", ("verify",), lambda run: f"/v1/runs/{run}/verify", "sub"),
    "export": (
        "journal",
        ("events", "events_after"),
        lambda run: f"/v1/runs/{run}/export",
        "sub",
    ),
    "review list": ("desk", ("items",), lambda run: "/v1/review?limit=10000", "rev"),
    "queue search": ("journal", ("follow",), lambda run: "/review?q=tax", "page"),
    # A run this process does not hold (finished long ago, or another process's): its
    # document and its event stream are read from the journal.
    "run shown": ("journal", ("run",), lambda run: f"/v1/runs/{run}", "sub"),
    "run's events": ("journal", ("run",), lambda run: f"/v1/runs/{run}/events", "sub"),
    # ... and its records and rejects (the run's lookup above comes first).
    "run shown, records": ("journal", ("events",), lambda run: f"/v1/runs/{run}", "sub"),
    "run's events, records": (
        "journal",
        ("events",),
        lambda run: f"/v1/runs/{run}/events",
        "sub",
    ),
    # A readiness probe of a journal that does not answer (a database behind a network
    # partition waits out its connect timeout), and a review item, were read on the loop.
    "ready": ("journal", ("run",), lambda run: "/readyz", "nobody"),
    "review item shown": ("desk", ("status",), lambda run: f"/v1/review/{run}.1", "rev"),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_healthz_is_answered_while_a_long_journal_read_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    owner, methods, path_of, who = CASES[case]
    async with client_for(settings(tmp_path)) as client:
        run = await _run(client)
        headers = {}
        if who == "page":
            await login(client, "rev")
        elif who != "nobody":
            headers = auth(who)
        service = client._transport.app.state.service  # type: ignore[attr-defined]
        service.runner._states.pop(run)  # as a run decided long ago, or by another process
        target = service.journal if owner == "journal" else service.desk
        gates = {name: threading.Event() for name in ("entered", "release", "left")}
        for name in methods:
            original = getattr(target, name, None)
            if original is not None:
                monkeypatch.setattr(target, name, _blocking(original, gates))
        answer = await healthz_while_blocked(
            client, client.get(path_of(run), headers=headers), gates, f"the {case}'s read"
        )
        assert answer.status_code == 200, answer.text[:300]


async def test_the_export_in_parts_is_the_runs_events_read_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("dissensus.serve.routes.decide.EXPORT_BATCH", 4)
    async with client_for(settings(tmp_path)) as client:
        run = await _run(client)
        journal = client._transport.app.state.service.journal  # type: ignore[attr-defined]
        whole = "".join(event.model_dump_json() + "\n" for event in journal.events(run))
        assert whole.count("\n") > 4 * 2, "the run is read in several parts"
        export = await client.get(f"/v1/runs/{run}/export", headers=auth("sub"))
        assert export.status_code == 200
        assert export.headers["content-type"] == "application/x-ndjson"
        assert export.content == whole.encode()
        # a part boundary on the last event: no empty part, nothing twice
        monkeypatch.setattr("dissensus.serve.routes.decide.EXPORT_BATCH", whole.count("\n"))
        again = await client.get(f"/v1/runs/{run}/export", headers=auth("sub"))
        assert again.content == whole.encode()
        unknown = await client.get("/v1/runs/nope/export", headers=auth("sub"))
        assert unknown.status_code == 404 and "error" in unknown.json()


@hyp_settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(after=st.integers(-2, 30), limit=st.integers(1, 30))
def test_a_read_in_parts_is_the_runs_events_from_a_place(
    journal_target: str, after: int, limit: int
) -> None:
    """``events_after`` (one part of an export) on either back end: the run's events after
    sequence number ``after``, in order, at most ``limit`` of them."""
    with Journal(journal_target) as journal:
        if journal.run("r", missing_ok=True) is None:
            journal.create_run("r", kind="decide", meta={})
            for i in range(20):
                journal.append("r", "case.note", {"i": i}, key=f"k{i}", case=str(i % 3))
        every = list(journal.events("r"))
        assert (
            journal.events_after("r", after, limit) == [e for e in every if e.seq > after][:limit]
        )
        assert journal.events_after("nope", after, limit) == []


async def test_a_run_being_decided_is_described_from_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``GET /v1/runs/{id}`` of a run this process is deciding reads no journal (no worker
    thread either: answered as before, from its progress in memory)."""
    async with client_for(settings(tmp_path)) as client:
        service = client._transport.app.state.service  # type: ignore[attr-defined]
        state = RunState(run_id="r-held", total=3, done=1)
        state.task = asyncio.get_running_loop().create_future()  # type: ignore[assignment]

        def unread(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("the journal was read")

        service.runner._states["r-held"] = state
        for name in ("run", "get", "events"):
            monkeypatch.setattr(service.journal, name, unread)
        monkeypatch.setattr(runs, "_journalled", unread)
        try:
            shown = await client.get("/v1/runs/r-held", headers=auth("sub"))
        finally:
            state.task.cancel()
        assert shown.status_code == 200, shown.text
        assert shown.json()["status"] == "running"
        assert (shown.json()["total"], shown.json()["done"]) == (3, 1)
