"""``route`` on Ray (and ``decide``, which starts Ray the same way) writes none of Ray's
own INFO and WARNING lines (its start, its token authentication, each dataset started
and finished) on standard error: a run's standard error holds the command's lines only.

Starts a local Ray instance (in the command's process): run with ``DISSENSUS_TEST_RAY=1``
(``make test-ray``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from test_engines_ray import PANELS, REPO, pytestmark

__all__ = ["pytestmark"]  # the gate

RAY_LINE = re.compile(r"\b(INFO|WARNING)\b")


def test_a_ray_route_writes_no_ray_info_or_warning_lines(tmp_path: Path) -> None:
    panels = tmp_path / "in.jsonl"
    panels.write_text(
        "".join(PANELS.read_text(encoding="utf-8").splitlines(keepends=True)[:10]),
        encoding="utf-8",
    )
    env = {
        **{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"},
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), *sys.path]),
    }
    got = subprocess.run(
        [
            sys.executable, "-m", "dissensus", "route", str(panels), "--similarity", "tfidf",
            "--json", "--engine", "ray", "--workers", "2",
        ],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert got.returncode == 0, got.stderr[-2000:]
    assert len(got.stdout.splitlines()) == 10
    assert not [line for line in got.stderr.splitlines() if RAY_LINE.search(line)], got.stderr
