"""The Ray driver's bound on a block's attempts, without a Ray instance.

A block whose worker dies is sent again, up to ``MAX_ATTEMPTS`` attempts in all; a death
on the last stops the run with one line (``WorkerDied``, exit 1) instead of sending the
block for ever. The driver's loop (``_Flight.next``) runs here against a stand-in for
Ray's result (``_take``) and for the send (``_send``); Ray itself is imported for its
exception classes only (no instance is started).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dissensus.engines import ray as ray_engine
from dissensus.engines.blocks import Block
from dissensus.engines.ray import MAX_ATTEMPTS, WorkerDied
from dissensus.engines.ray import fault as ray_fault
from dissensus.engines.ray import flight as ray_flight
from dissensus.engines.ray.attempts import _death_cause, _Deaths, _worker_died
from dissensus.engines.ray.fault import _fault, _maybe_die
from dissensus.engines.ray.flight import _Flight
from dissensus.engines.ray.messages import _BlockResult
from dissensus.errors import DissensusError

BOUND_S = 20.0
"""A bounded wait: a driver that sends a dying block for ever fails the test, not hangs."""


def _block(index: int, first: int, n: int) -> Block:
    return Block(index=index, first_line=first, n_lines=n, path="in.jsonl", lines=("{}",) * n)


def test_a_block_has_max_attempts_attempts() -> None:
    assert MAX_ATTEMPTS == 3
    deaths = _Deaths()
    assert deaths.died(2) and deaths.died(2)
    assert deaths.died(5)  # counted per block
    assert not deaths.died(2)  # the third death of block 2: its last attempt
    assert deaths.counts == {2: 3, 5: 1}


def test_a_single_attempt_gives_up_at_the_first_death() -> None:
    assert not _Deaths(1).died(0)
    with pytest.raises(ValueError, match="at least one attempt"):
        _Deaths(0)


def test_the_error_is_one_line_naming_the_lines_the_deaths_and_the_resume() -> None:
    ray = pytest.importorskip("ray")
    error = ray.exceptions.ActorDiedError()
    died = _worker_died("R1", "/data/in.jsonl", _block(2, 51, 25), 3, error)
    assert isinstance(died, DissensusError) and died.exit_code == 1
    text = str(died)
    assert "\n" not in text
    assert text.startswith(
        "run R1: the Ray worker deciding input lines 51-75 of /data/in.jsonl (block 2) "
        "died 3 times (Ray's last error: ActorDiedError); the run stopped"
    )
    assert text.endswith("cannot change) with: dissensus runs resume R1")
    one = str(_worker_died("R1", "-", _block(0, 7, 1), 1, error))
    assert "deciding input line 7 (block 0) died 1 time (" in one  # standard input: no name


def test_the_cause_is_rays_error_and_what_a_worker_that_failed_to_start_raised() -> None:
    class Failed(Exception):
        actor_init_failed = True

    assert _death_cause(OSError("first\n\tactor_id: 12")) == "Ray's last error: OSError"
    started = _death_cause(Failed("The actor died because of an error\nTraceback\nValueError: bad"))
    assert started == "Ray's last error: Failed, the worker failed to start: ValueError: bad"
    cut = _death_cause(Failed("x" * 500))
    assert len(cut) == 160 and cut.endswith("...")
    assert _death_cause(Failed()) == "Ray's last error: Failed, the worker failed to start"


def test_the_fault_switch_reads_block_marker_and_times(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ray_engine.FAULT_ENV, raising=False)
    assert _fault() is None
    monkeypatch.setenv(ray_engine.FAULT_ENV, "2:/tmp/x/killed")
    assert _fault() == (2, "/tmp/x/killed", 1)
    monkeypatch.setenv(ray_engine.FAULT_ENV, "2:/tmp/x/killed:1000")
    assert _fault() == (2, "/tmp/x/killed", 1000)


def test_the_fault_kills_the_first_times_workers_of_its_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kills: list[int] = []
    monkeypatch.setattr(ray_fault.os, "kill", lambda pid, sig: kills.append(sig))
    marker = tmp_path / "killed"
    fault = (2, str(marker), 2)
    _maybe_die(fault, 1)  # another block: nothing
    _maybe_die(None, 2)
    assert kills == [] and not marker.exists()
    for _ in range(4):
        _maybe_die(fault, 2)
    assert len(kills) == 2 and marker.read_text().splitlines() == ["killed", "killed"]


class _Ledger:
    """A stand-in for the driver's ledger: reservations named, losses counted."""

    def __init__(self) -> None:
        self.reserved: list[str] = []
        self.lost: list[str | None] = []

    def reserve(self, block: Block, waiting: int) -> tuple[str, dict[str, int | None]]:
        key = f"reserved/{block.index}/{len(self.reserved)}"
        self.reserved.append(key)
        return key, {"calls": None, "tokens": None}

    def lose(self, key: str | None) -> None:
        self.lost.append(key)

    def settle(self, key: str | None, result: Any) -> None:
        return None


def _flight(
    monkeypatch: pytest.MonkeyPatch, deaths: list[BaseException]
) -> tuple[_Flight, _Ledger, list[int]]:
    """A flight of one block (lines 1-25) to one worker, whose first results are
    ``deaths`` (raised), then the block's (empty) result; the list of what the driver
    did: each send (its number) and each wait for the worker's restart (-1)."""
    sent: list[int] = []

    def send(actor: Any, text: str) -> int:
        sent.append(len([n for n in sent if n >= 0]))
        return sent[-1]

    def take(ref: int) -> tuple[_BlockResult, list[Any], float]:
        if ref < len(deaths):
            raise deaths[ref]
        return _BlockResult(0, [], 0.0, 0.0), [], 0.0

    def restarted(actor: Any) -> None:  # the driver waits for the worker before a resend
        sent.append(-1)

    monkeypatch.setattr(ray_flight, "_send", send)
    monkeypatch.setattr(ray_flight, "_take", take)
    monkeypatch.setattr(ray_flight, "_restarted", restarted)
    ctx = SimpleNamespace(
        run_id="R", name="in.jsonl", journal=SimpleNamespace(path="j.sqlite"), stop_at=None
    )
    ledger = _Ledger()
    flight = _Flight(ctx, [(_block(0, 1, 25), [])], ["worker"], ledger)  # type: ignore[arg-type]
    flight.start()
    return flight, ledger, sent


async def _next(flight: _Flight) -> Any:
    return await asyncio.wait_for(flight.next(), BOUND_S)


def test_a_block_whose_worker_always_dies_is_sent_max_attempts_times_then_stops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ray = pytest.importorskip("ray")
    always = [ray.exceptions.ActorDiedError() for _ in range(1000)]
    flight, ledger, sent = _flight(monkeypatch, always)
    with pytest.raises(WorkerDied, match=r"input lines 1-25 of in.jsonl \(block 0\) died 3 times"):
        asyncio.run(_next(flight))
    assert sent == [0, -1, 1, -1, 2]  # each send after a death waited for the worker
    # Each dead attempt's reservation counts as spent (and stays open in the journal).
    assert ledger.lost == ledger.reserved == ["reserved/0/0", "reserved/0/1", "reserved/0/2"]


def test_a_block_killed_by_rays_memory_monitor_counts_as_a_death(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ray = pytest.importorskip("ray")
    oom = [
        ray.exceptions.OutOfMemoryError("Task was killed due to the node running low on memory.")
    ]
    flight, _, sent = _flight(monkeypatch, oom * 1000)
    with pytest.raises(WorkerDied, match=r"died 3 times \(Ray's last error: OutOfMemoryError\)"):
        asyncio.run(_next(flight))
    assert sent == [0, -1, 1, -1, 2]


def test_a_block_whose_worker_dies_fewer_times_than_the_limit_comes_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ray = pytest.importorskip("ray")
    twice = [ray.exceptions.ActorDiedError() for _ in range(MAX_ATTEMPTS - 1)]
    flight, ledger, sent = _flight(monkeypatch, twice)
    result, outcomes, _ = asyncio.run(_next(flight))
    assert result.block == 0 and outcomes == []
    assert sent == [0, -1, 1, -1, 2] and len(ledger.lost) == MAX_ATTEMPTS - 1
