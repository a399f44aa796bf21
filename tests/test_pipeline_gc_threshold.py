"""A local decide run raises the collector's first threshold while it decides, and puts
it back afterwards: when the run ends, when it fails, and not over a threshold that
something else set meanwhile. Runs overlapping in threads (local and Ray-style) share
one raise: kept until the last ends, which puts back what was there before the first."""

from __future__ import annotations

import asyncio
import gc
import json
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dissensus.engines.ray.executor import _RUN_GC_THRESHOLD
from dissensus.errors import DissensusError
from dissensus.pipeline import execute_run, policy_from_dict, start_run
from dissensus.states.collector import GC_THRESHOLD, raised_gc_threshold
from dissensus.states.similarity import Vectors, cosine_matrix, normalise_rows
from dissensus.store import Journal
from pipeline_cases import panel


class WatchingBackend:
    """Bag-of-words vectors; notes the collector's first threshold at every call."""

    name = "watching-test"

    def __init__(self, fail: bool = False) -> None:
        self.seen: list[int] = []
        self.fail = fail

    def embed(self, texts: Sequence[str]) -> Vectors:
        self.seen.append(gc.get_threshold()[0])
        if self.fail:
            raise RuntimeError("backend failed")
        rows = np.zeros((len(texts), 8), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in text.split():
                rows[i, len(word) % 8] += 1.0
        return normalise_rows(rows)

    def matrix(self, texts: Sequence[str]) -> np.ndarray[Any, Any]:
        return cosine_matrix(self.embed(texts))


@pytest.fixture
def threshold() -> Iterator[tuple[int, int, int]]:
    """The process's thresholds, with a first one below :data:`GC_THRESHOLD`; put back."""
    old = gc.get_threshold()
    gc.set_threshold(700, *old[1:])
    yield gc.get_threshold()
    gc.set_threshold(*old)


def _decide(tmp_path: Path, backend: WatchingBackend) -> list[Any]:
    path = tmp_path / "panels.jsonl"
    lines = [
        json.dumps(panel(f"p{i}", ["1", "1", "2"], reasoning=[f"word {i}", "a b", "c d e"]))
        for i in range(3)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    journal = Journal(tmp_path / "j.sqlite")
    start_run(journal, str(path), policy_from_dict({"reading": {"theta_s": 0.5}}), run_id="r")

    async def go() -> list[Any]:
        return [rec async for rec in execute_run(journal, "r", backend=lambda: backend)]

    try:
        return asyncio.run(go())
    finally:
        journal.close()


def test_local_run_decides_under_the_raised_threshold(
    tmp_path: Path, threshold: tuple[int, int, int]
) -> None:
    backend = WatchingBackend()
    assert len(_decide(tmp_path, backend)) == 3
    assert backend.seen and set(backend.seen) == {GC_THRESHOLD}
    assert gc.get_threshold() == threshold


def test_threshold_is_restored_when_the_run_fails(
    tmp_path: Path, threshold: tuple[int, int, int]
) -> None:
    backend = WatchingBackend(fail=True)
    with pytest.raises((DissensusError, RuntimeError)):
        _decide(tmp_path, backend)
    assert backend.seen == [GC_THRESHOLD]
    assert gc.get_threshold() == threshold


def test_a_threshold_set_meanwhile_is_kept(threshold: tuple[int, int, int]) -> None:
    with raised_gc_threshold():
        assert gc.get_threshold() == (GC_THRESHOLD, *threshold[1:])
        with raised_gc_threshold():  # nested (a second run of the process): no change
            assert gc.get_threshold()[0] == GC_THRESHOLD
        assert gc.get_threshold()[0] == GC_THRESHOLD
        gc.set_threshold(1234, *threshold[1:])
    assert gc.get_threshold()[0] == 1234
    gc.set_threshold(0)
    with raised_gc_threshold():  # collection off stays off
        assert gc.get_threshold()[0] == 0
    assert gc.get_threshold()[0] == 0


def test_collection_disabled_is_left_alone(threshold: tuple[int, int, int]) -> None:
    gc.disable()
    try:
        with raised_gc_threshold(*_RUN_GC_THRESHOLD):
            assert gc.get_threshold() == threshold
        assert not gc.isenabled()
    finally:
        gc.enable()
    assert gc.get_threshold() == threshold


def _overlap(first: Callable[[], Any], second: Callable[[], Any], seen: dict[str, Any]) -> None:
    """``first`` enters, then ``second``; ``first`` leaves while ``second`` is still in:
    each a block on a thread of its own, their order kept by events (no sleeps). An error
    in either sets every event (the other thread never waits for good) and is raised."""
    events = [threading.Event() for _ in range(3)]
    first_in, second_in, first_out = events
    errors: list[BaseException] = []

    def guarded(body: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                body()
            except BaseException as exc:
                errors.append(exc)
                for event in events:
                    event.set()

        return run

    def one() -> None:
        with first():
            first_in.set()
            second_in.wait()
            seen["both"] = gc.get_threshold()
        first_out.set()

    def two() -> None:
        first_in.wait()
        with second():
            second_in.set()
            first_out.wait()
            seen["second alone"] = gc.get_threshold()
        seen["after"] = gc.get_threshold()

    threads = [threading.Thread(target=guarded(one)), threading.Thread(target=guarded(two))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def test_two_overlapping_runs_keep_the_raise_until_the_last_ends(
    threshold: tuple[int, int, int],
) -> None:
    seen: dict[str, Any] = {}
    _overlap(raised_gc_threshold, raised_gc_threshold, seen)
    raised = (GC_THRESHOLD, *threshold[1:])
    assert seen == {"both": raised, "second alone": raised, "after": threshold}
    assert gc.get_threshold() == threshold


@pytest.mark.parametrize("local_first", [True, False])
def test_local_and_ray_runs_overlapping_end_at_the_original(
    threshold: tuple[int, int, int], local_first: bool
) -> None:
    def local() -> Any:
        return raised_gc_threshold()

    def ray() -> Any:
        return raised_gc_threshold(*_RUN_GC_THRESHOLD)

    seen: dict[str, Any] = {}
    _overlap(local, ray, seen) if local_first else _overlap(ray, local, seen)
    assert seen["both"] == _RUN_GC_THRESHOLD  # the highest asked for
    # The run still going keeps what it asked for (at least), whichever ended first.
    assert seen["second alone"] == (
        _RUN_GC_THRESHOLD if local_first else (GC_THRESHOLD, *threshold[1:])
    )
    assert seen["after"] == threshold
    assert gc.get_threshold() == threshold


def test_a_change_from_outside_while_runs_overlap_is_left_alone(
    threshold: tuple[int, int, int],
) -> None:
    outer = raised_gc_threshold()
    inner = raised_gc_threshold(*_RUN_GC_THRESHOLD)
    with outer:
        with inner:
            gc.set_threshold(4321, 7, 8)  # the user's, while both run
        assert gc.get_threshold() == (4321, 7, 8)
        with raised_gc_threshold():  # a run entering afterwards raises over it
            assert gc.get_threshold() == (GC_THRESHOLD, 7, 8)
        assert gc.get_threshold() == (GC_THRESHOLD, 7, 8)  # ``outer`` still asks
    assert gc.get_threshold() == (4321, 7, 8)  # the last run ends at the user's


def test_an_error_in_overlapping_runs_restores_the_original(
    threshold: tuple[int, int, int],
) -> None:
    with pytest.raises(RuntimeError, match="outer"), raised_gc_threshold(*_RUN_GC_THRESHOLD):
        with pytest.raises(RuntimeError, match="inner"), raised_gc_threshold():
            raise RuntimeError("inner")
        assert gc.get_threshold() == _RUN_GC_THRESHOLD
        raise RuntimeError("outer")
    assert gc.get_threshold() == threshold
