"""On the Ray engine too, a run under ``on_shift: escalate`` is held from the check mid-run
that flags its file: the loop starts the workers again with the held specification, and
the records are those of the local engine's run up to where each was held.

Starts a local Ray instance: run with ``DISSENSUS_TEST_RAY=1`` (``make test-ray``)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from dissensus.engines.ray import RayOptions, decide_ray
from dissensus.pipeline.batch import DeadlineReached, start_run
from dissensus.pipeline.shift_in_run import FIRST, within_key
from dissensus.store import Journal
from shift_helpers import PANELS, build_world, shifted
from test_engines_ray import pytestmark, ray_instance

__all__ = ["pytestmark", "ray_instance"]  # the fixture and the gate


def _held(record: Any) -> bool:
    return bool(record.basis != "learned" and "acceptance held" in record.reason)


def test_a_ray_run_is_held_from_the_check_that_flags_it_mid_run(
    ray_instance: Any, tmp_path: Path
) -> None:
    world = build_world(tmp_path)
    long = _long(tmp_path, 180)
    with Journal(tmp_path / "j.sqlite") as journal:
        start_run(journal, str(long), world / "hold.yaml", run_id="R")

        async def go() -> list[Any]:
            options = RayOptions(workers=2, lines_per_block=16)
            return [r async for r in decide_ray(journal, "R", options=options)]

        records = asyncio.run(go())
        assert [r.id for r in records] == [f"s{i}" for i in range(180)]
        held = [_held(r) for r in records]
        first = held.index(True)
        assert first >= FIRST and all(held[first:]), held
        check = journal.get("R", within_key(FIRST))
        assert check is not None and check.payload["shifted"]
        assert journal.get("R", "run/finished") is not None


def test_a_deadline_right_after_the_restart_commits_no_record_twice(
    ray_instance: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Ray executor started again hands the committed blocks over again (read from
    the journal); a deadline passing while it does must not commit them a second time."""
    from dissensus.engines.ray import executor as ray_executor
    from dissensus.pipeline import batch

    world = build_world(tmp_path)
    long = _long(tmp_path, 300)
    deadline = 20.0
    state = {"restarted": False, "read": 0, "t0": 0.0}
    replayed, held_within = ray_executor._replayed, batch._held_within

    def held(*args: Any, **kw: Any) -> Any:
        state["restarted"] = True
        return held_within(*args, **kw)

    def slow(journal: Any, run_id: str, block: Any) -> Any:
        out = list(replayed(journal, run_id, block))
        if state["restarted"]:
            state["read"] += 1
            if state["read"] == 3:  # a slow read of the journal: the deadline passes here
                time.sleep(max(0.0, state["t0"] + deadline + 0.3 - time.monotonic()))
        return iter(out)

    monkeypatch.setattr(ray_executor, "_replayed", slow)
    monkeypatch.setattr(batch, "_held_within", held)
    with Journal(tmp_path / "j.sqlite") as journal:
        start_run(journal, str(long), world / "hold.yaml", run_id="R")
        got: list[Any] = []

        async def go() -> None:
            state["t0"] = time.monotonic()
            options = RayOptions(workers=1, lines_per_block=16)
            async for record in decide_ray(journal, "R", options=options, deadline_s=deadline):
                got.append(record)

        with pytest.raises(DeadlineReached):
            asyncio.run(go())
        assert state["restarted"] and state["read"] >= 3
        lines = [r.line for r in got]
        assert len(lines) == len(set(lines)), lines
        stopped = [e.payload for e in journal.events("R") if e.type == "run.stopped"]
        assert stopped and stopped[0]["cases"] == len(lines)


def _long(root: Path, n: int) -> Path:
    rows = [json.loads(line) for line in PANELS.read_text(encoding="utf-8").splitlines()]
    lines = []
    for i in range(n):
        row = shifted(rows[i % len(rows)])
        row["id"] = f"s{i}"
        lines.append(json.dumps(row) + "\n")
    path = root / "long.jsonl"
    path.write_text("".join(lines), encoding="utf-8")
    return path
