"""A Ray worker keeps the run's deadline: it starts no model attempt once the deadline
has passed (the local engine's rule, :class:`~dissensus.pipeline.durable.PastDeadline`),
so nothing is sent, handed back or charged for it; it hands the block back marked
``late``, and the driver stops the run as its deadline says (partial, resumable), the
block's reservation settled with what its worker sent.

The worker is exercised in this process (its class is plain Python; Ray only hosts it),
so these tests run without a Ray instance."""

from __future__ import annotations

import asyncio
import json
import pickle
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from dissensus.engines.blocks import plan_blocks
from dissensus.engines.ray import flight as ray_flight
from dissensus.engines.ray import messages, worker
from dissensus.pipeline import load_policy, start_run
from dissensus.pipeline.batch import _started
from dissensus.pipeline.durable import PastDeadline
from dissensus.store.journal import Journal
from pipeline_cases import crash_script, panel, write_jsonl, write_policy


def _decider(tmp_path: Path) -> tuple[worker._Decider, Path, Path]:
    """A worker of run ``K``: 4 panels each making two live calls, recorded to a file."""
    rows = [panel(f"live-{i}", ["1", "1", "1"]) for i in range(4)]
    path = write_jsonl(tmp_path / "in.jsonl", rows)
    policy = write_policy(
        tmp_path / "policy.yaml", {"guard": {"enabled": False}, "budget": {"max_calls": 100}}
    )
    calls = tmp_path / "calls.jsonl"
    model = f"record:{calls}:scripted:{crash_script(tmp_path / 'model.yaml')}"
    with Journal(tmp_path / "j.sqlite") as journal:
        start_run(journal, str(path), load_policy(str(policy))[0], run_id="K", model=model)
        started = _started(journal, "K")
    return worker._Decider("K", started, fault=None), path, calls


def _block(decider: worker._Decider, path: Path, deadline: float | None) -> Any:
    (block,) = plan_blocks(path, 512)
    item = {
        "block": asdict(block),
        "name": str(path),
        "seed": [],
        "allowance": {"calls": 100, "tokens": None},
        "reservation": "reserved/0/1",
        "deadline": deadline,
    }
    return pickle.loads(decider.decide(json.dumps(item)))


def _sent(calls: Path) -> int:
    return len(calls.read_text().splitlines()) if calls.exists() else 0


def test_a_worker_past_the_run_deadline_sends_nothing_and_hands_the_block_back_late(
    tmp_path: Path,
) -> None:
    decider, path, calls = _decider(tmp_path)
    result = _block(decider, path, time.time() - 1.0)
    assert result.late
    assert result.cases == [] and result.charges == ()
    assert (result.spent_calls, _sent(calls)) == (0, 0)
    assert decider.budgets["reserved/0/1"].spent.attempts == 0  # what a stop reports


def test_a_worker_before_the_run_deadline_decides_the_block(tmp_path: Path) -> None:
    decider, path, calls = _decider(tmp_path)
    for deadline in (None, time.time() + 600.0):
        result = _block(decider, path, deadline)
        assert not result.late
        assert len(result.cases) == 4
    assert _sent(calls) == 2 * 4 * 2  # two calls per case, twice


def test_the_wall_clock_deadline_keeps_the_remaining_time() -> None:
    async def both() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        stop_at = loop.time() + 30.0
        wall = messages._wall_deadline(stop_at)
        assert wall is not None
        back = messages._loop_deadline(wall)
        assert back is not None
        return stop_at, back

    stop_at, back = asyncio.run(both())
    # Each conversion reads two clocks a few microseconds apart; another loop's clock
    # is the same monotonic clock.
    assert back == pytest.approx(stop_at, abs=0.05)
    assert messages._wall_deadline(None) is None and messages._loop_deadline(None) is None


def test_a_late_block_stops_the_driver_as_its_deadline(tmp_path: Path) -> None:
    """The driver's side: a block handed back ``late`` raises PastDeadline, which the run
    loop reads as its deadline, and stays in flight (its reservation settled by the stop)."""

    class _Ledger:
        def lose(self, key: str | None) -> None:  # pragma: no cover - no death here
            raise AssertionError(key)

    late = messages._BlockResult(0, [], 1.0, 0.0, late=True)
    flight = ray_flight._Flight.__new__(ray_flight._Flight)
    sent = ray_flight._Sent("ref", "actor", None, [], "reserved/0/1")  # type: ignore[arg-type]
    flight.flight = __import__("collections").deque([sent])
    flight.ledger = _Ledger()  # type: ignore[assignment]
    flight.early = {}

    def take(ref: Any) -> Any:
        return late, [], 0.0

    monkey = pytest.MonkeyPatch()
    monkey.setattr(ray_flight, "_take", take)
    monkey.setattr(ray_flight, "_deaths", lambda: ())
    try:
        with pytest.raises(PastDeadline):
            asyncio.run(flight.next())
    finally:
        monkey.undo()
    assert list(flight.flight) == [sent]
