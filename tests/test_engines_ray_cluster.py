"""``decide --engine ray --ray-address ADDR --workers N`` with N above the cluster's CPUs:
a setting to fix (exit 2, one line naming ``workers`` and the cluster's CPUs), refused
before any run is created; it waited for ever for a worker that could never be scheduled.

Starts a local Ray instance (2 CPUs) and joins it from the command line: run with
``DISSENSUS_TEST_RAY=1`` (``make test-ray``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from test_engines_ray import REPO, pytestmark, ray_instance

__all__ = ["pytestmark", "ray_instance"]  # the fixture and the gate

SWAP = REPO / "examples" / "llmbar-swap.jsonl"


def test_more_workers_than_the_clusters_cpus_is_exit_2_and_creates_no_run(
    ray_instance: Any, tmp_path: Path
) -> None:
    address = ray_instance.get_runtime_context().gcs_address
    env = {
        **{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"},
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), *sys.path]),
    }
    journal = tmp_path / "j.sqlite"
    got = subprocess.run(
        [
            sys.executable, "-m", "dissensus", "decide", str(SWAP), "--engine", "ray",
            "--ray-address", address, "--workers", "3", "--journal", str(journal),
        ],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip
    assert got.returncode == 2, got.stderr[-2000:]
    errors = [line for line in got.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, got.stderr[-2000:]
    assert "field 'workers'" in errors[0] and "--workers 3" in errors[0]
    assert "2 CPU(s)" in errors[0]
    assert "Traceback" not in got.stderr
    assert not journal.exists()
