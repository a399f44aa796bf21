"""On the Ray engine too, a run under ``on_shift: escalate`` is held from the check mid-run
that flags its file: the loop starts the workers again with the held specification, and
the records are those of the local engine's run up to where each was held.

Starts a local Ray instance: run with ``DISSENSUS_TEST_RAY=1`` (``make test-ray``)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from dissensus.engines.ray import RayOptions, decide_ray
from dissensus.pipeline.batch import start_run
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
    rows = [json.loads(line) for line in PANELS.read_text(encoding="utf-8").splitlines()]
    lines = []
    for i in range(180):
        row = shifted(rows[i % len(rows)])
        row["id"] = f"s{i}"
        lines.append(json.dumps(row) + "\n")
    long = tmp_path / "long.jsonl"
    long.write_text("".join(lines), encoding="utf-8")
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
