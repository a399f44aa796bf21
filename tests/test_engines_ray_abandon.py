"""A Ray run stopped with blocks in flight settles their reservations with what the
stopped workers spent (``model.settled`` ``abandoned``), so its resume has the budget an
uninterrupted run has, and ends with its records, while the attempts of both stay
within ``max_calls``.

Starts a local Ray instance: run with ``DISSENSUS_TEST_RAY=1`` (``make test-ray``)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from dissensus.engines.ray import RayOptions, decide_ray
from dissensus.pipeline import batch, execute_run
from dissensus.pipeline.durable import open_reservations
from dissensus.store import event_types as ev
from dissensus.store.journal import Event, Journal
from test_engines_ray import _collect, _live, _sent, pytestmark, ray_instance

__all__ = ["pytestmark", "ray_instance"]  # the fixture and the gate

MAX_CALLS = 2000
"""Ample for the 480 calls of the run (and of its resume), not for two runs' reservations."""


async def _interrupted(journal: Journal, calls: Path, cancels: int = 1) -> None:
    """Decide run K on Ray and cancel it (as an interrupt does) once its workers sent
    calls; ``cancels`` > 1: cancelled again after each turn of the loop, as an interrupt
    of the command line does (``asyncio.run`` cancels every task left, a cancelled
    task's awaited one included, while the first cancellation is being handled)."""
    options = RayOptions(workers=2, lines_per_block=20)
    task = asyncio.ensure_future(_collect(decide_ray(journal, "K", options=options)))
    while not task.done() and _sent(calls) == 0:
        await asyncio.sleep(0.005)
    assert not task.done(), "the run ended before it could be interrupted"
    task.cancel()
    for _ in range(cancels - 1):
        await asyncio.sleep(0)
        task.cancel()
    await asyncio.gather(task, return_exceptions=True)


@pytest.mark.parametrize("cancels", [1, 3])
def test_an_interrupted_ray_run_resumes_to_the_records_of_an_uninterrupted_one(
    ray_instance: Any, tmp_path: Path, cancels: int
) -> None:
    for name in ("fresh", "cut"):
        (tmp_path / name).mkdir()
    fresh_path, _ = _live(tmp_path / "fresh", MAX_CALLS)
    with Journal(fresh_path) as fresh:
        expected = asyncio.run(_collect(execute_run(fresh, "K")))
    path, calls = _live(tmp_path / "cut", MAX_CALLS)
    with Journal(path) as journal:
        asyncio.run(_interrupted(journal, calls, cancels))
        sent = _sent(calls)
        assert open_reservations(journal, "K") == {}  # every block in flight was settled
        abandoned = [
            e.payload
            for e in journal.events("K", type=ev.MODEL_SETTLED)
            if e.payload.get("abandoned")
        ]
        assert abandoned
        # What the settlements charge covers every call the stopped workers sent.
        journalled = len(list(journal.events("K", type=ev.MODEL_SENT)))
        assert sent <= journalled + sum(p["attempts"] for p in abandoned)
        options = RayOptions(workers=2, lines_per_block=20)
        got = asyncio.run(_collect(decide_ray(journal, "K", options=options)))
        assert journal.verify("K").ok
    assert [r["id"] for r in got] == [r["id"] for r in expected]
    assert got == expected
    assert _sent(calls) <= MAX_CALLS


HANDED_LINE = 27
"""The interrupt lands once the case of this line (in block 1, lines 21-40) is journalled."""


def test_an_interrupted_block_partly_journalled_is_charged_once_for_each_call(
    ray_instance: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run loop journals a block handed to it in several commits; interrupted between
    them, the block's reservation is settled as abandoned with what its unjournalled
    cases spent only: its journalled cases' calls are charged by their own events, so a
    resume charges each of the block's calls once (each case makes two)."""
    monkeypatch.setattr(batch, "BLOCK_CASES", 7)  # a block of 20 cases takes 3 commits
    path, calls = _live(tmp_path, MAX_CALLS)
    options = RayOptions(workers=2, lines_per_block=20)
    first, last = 21, 40  # block 1

    async def interrupted() -> None:
        task: asyncio.Future[Any] | None = None

        def cut(event: Event) -> None:
            if event.key == f"case/{HANDED_LINE}/record" and task is not None:
                task.cancel()  # lands when the loop next waits: part of the block is left

        with Journal(path, after_append=cut) as journal:
            task = asyncio.ensure_future(_collect(decide_ray(journal, "K", options=options)))
            await asyncio.gather(task, return_exceptions=True)
            assert task.cancelled()

    asyncio.run(interrupted())
    with Journal(path) as journal:
        recorded = [
            n for n in range(first, last + 1) if journal.get("K", f"case/{n}/record") is not None
        ]
        assert HANDED_LINE in recorded and len(recorded) < last - first + 1  # partly journalled
        settled = journal.get("K", "settled/1/0")
        assert settled is not None and settled.payload["abandoned"] is True
        own = sum(
            int(e.payload["usage"]["attempts"])
            for e in journal.events("K", type=ev.MODEL_CALL)
            if first <= int(e.case or 0) <= last
        )
        assert own == 2 * len(recorded)
        # The block's 40 calls: the journalled cases' own and the settlement's, once each.
        assert own + settled.payload["attempts"] == 2 * (last - first + 1)
        got = asyncio.run(_collect(decide_ray(journal, "K", options=options)))
        assert len(got) == 240 and journal.verify("K").ok
    assert _sent(calls) <= MAX_CALLS
