"""``decide --engine ray --json`` keeps standard output for its records: Ray's own
message about a worker that died (``(raylet) A worker died or was killed …``, which Ray
prints on standard output) goes to standard error, and the run still finishes.

The command runs in a process of its own, which starts its own Ray instance (this module
starts none in the test process): run with ``DISSENSUS_TEST_RAY=1`` (``make test-ray``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from test_engines_ray import PANELS, REPO, pytestmark

__all__ = ["pytestmark"]  # the gate


def test_a_dead_worker_s_message_goes_to_stderr_not_into_the_json_records(
    tmp_path: Path,
) -> None:
    panels = tmp_path / "panels.jsonl"
    panels.write_text(
        "".join(PANELS.read_text(encoding="utf-8").splitlines(keepends=True)[:12]),
        encoding="utf-8",
    )
    marker = tmp_path / "killed.txt"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO / "src"),
        "DISSENSUS_FAULT_RAY_KILL": f"0:{marker}:1",  # the first block's worker dies once
    }
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dissensus",
            "decide",
            str(panels),
            "--similarity",
            "tfidf",
            "--journal",
            str(tmp_path / "j.sqlite"),
            "--engine",
            "ray",
            "--workers",
            "1",
            "--run-id",
            "K",
            "--json",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode in (0, 3), done.stderr[-2000:]
    assert marker.read_text(encoding="utf-8").count("killed") == 1  # the worker did die
    lines = done.stdout.splitlines()
    assert len(lines) == 12, done.stdout[:500]
    for line in lines:  # every line is a record: nothing of Ray's in between
        assert json.loads(line)["line"] >= 1, line
