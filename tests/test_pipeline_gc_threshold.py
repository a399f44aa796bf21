"""A local decide run raises the collector's first threshold while it decides, and puts
it back afterwards: when the run ends, when it fails, and not over a threshold that
something else set meanwhile."""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dissensus.errors import DissensusError
from dissensus.pipeline import execute_run, policy_from_dict, start_run
from dissensus.states.similarity import Vectors, cosine_matrix, normalise_rows
from dissensus.states.stream import GC_THRESHOLD, raised_gc_threshold
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
