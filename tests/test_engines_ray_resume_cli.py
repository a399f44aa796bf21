"""``dissensus runs resume ID --engine ray``: a run interrupted on the local engine is
finished on Ray (and the other way round), with the records of an uninterrupted run.

Starts a local Ray instance: run with ``DISSENSUS_TEST_RAY=1`` (``make test-ray``)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from dissensus.pipeline import execute_run
from dissensus.store import Event, Journal
from test_engines_ray import _collect, _start, local_run, panels, pytestmark, ray_instance

__all__ = ["local_run", "panels", "pytestmark", "ray_instance"]  # the fixtures and the gate


class _Killed(Exception):
    pass


def test_a_local_run_interrupted_midway_is_resumed_on_ray_from_the_cli(
    ray_instance: Any, panels: Path, local_run: Any, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from dissensus.cli import app

    records = local_run[0]
    path = tmp_path / "j.sqlite"
    count = [0]

    def die_midway(event: Event) -> None:
        count[0] += 1
        if count[0] == 300:
            raise _Killed

    journal = Journal(path, after_append=die_midway)
    _start(journal, panels, "R")
    with pytest.raises(_Killed):
        asyncio.run(_collect(execute_run(journal, "R")))
    journal.close()
    out = tmp_path / "out.jsonl"
    args = ["runs", "resume", "R", "--journal", str(path), "--json", "--output", str(out)]
    done = CliRunner().invoke(app, [*args, "--engine", "ray", "--workers", "2"])
    assert done.exit_code == 3, done.output  # the bad lines of the input are rejects
    got = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in got] == [r["id"] for r in records]
    assert [(r["action"], r["decision"]) for r in got] == [
        (r["action"], r["decision"]) for r in records
    ]
    verify = CliRunner().invoke(app, ["runs", "verify", "R", "--journal", str(path)])
    assert verify.exit_code == 0, verify.output
