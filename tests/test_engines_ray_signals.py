"""SIGTERM stops a Ray ``decide`` as SIGINT does: exit 130 with the one line naming the
resume command, the run resumable.

``ray.init`` installs a SIGTERM handler of its own (``sys.exit(15)`` wherever it lands),
which replaced the command line's: a Ray run sent SIGTERM ended with exit 15 and Ray's
crash report on stderr. The driver joins the module's Ray instance (``--ray-address``),
so the command's own ``ray.init`` runs as it does for a user.

Starts a local Ray instance: run with ``DISSENSUS_TEST_RAY=1`` (``make test-ray``)."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from dissensus.store.journal import Journal
from test_engines_ray import POLICY, REPO, panels, pytestmark, ray_instance

__all__ = ["panels", "pytestmark", "ray_instance"]  # the fixtures and the gate


def _reserved(journal: Path) -> bool:
    """Whether the run has sent a block (its first reservation is journalled): read
    only, as another process would."""
    if not journal.exists():
        return False
    try:
        with closing(sqlite3.connect(f"file:{journal}?mode=ro", uri=True, timeout=0.1)) as db:
            query = "SELECT 1 FROM events WHERE run_id = 'R' AND type = 'model.reserved'"
            return db.execute(query).fetchone() is not None
    except sqlite3.Error:  # not created yet
        return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_a_ray_decide_with_the_resume_line(
    ray_instance: Any, panels: Path, tmp_path: Path, sig: signal.Signals
) -> None:
    pol = tmp_path / "policy.yaml"
    pol.write_text(
        POLICY.read_text(encoding="utf-8").replace("model: llmbar-accept.json", "model: null"),
        encoding="utf-8",
    )
    shutil.copy(REPO / "examples" / "llmbar-reliability.json", tmp_path / "llmbar-reliability.json")
    journal = tmp_path / "j.sqlite"
    address = ray_instance.get_runtime_context().gcs_address
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), *sys.path])}
    argv = [sys.executable, "-m", "dissensus", "decide", str(panels), "--policy", str(pol),
            "--similarity", "tfidf", "--journal", str(journal), "--run-id", "R", "--engine",
            "ray", "--ray-address", address, "--workers", "2", "--json",
            "--output", str(tmp_path / "out.jsonl")]  # fmt: skip
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        end = time.monotonic() + 240
        while proc.poll() is None and not _reserved(journal) and time.monotonic() < end:
            time.sleep(0.005)
        assert proc.poll() is None, proc.communicate()[1].decode()[-2000:]
        proc.send_signal(sig)
        _, raw = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    err = raw.decode("utf-8", "replace")
    assert proc.returncode == 130, err[-3000:]
    out = tmp_path / "out.jsonl"
    resume = f"interrupted: resume with dissensus runs resume R --journal {journal} --output {out}"
    assert err.strip().splitlines()[-1] == resume, err[-3000:]
    assert "Traceback" not in err and "SIGTERM received" not in err  # Ray's crash report
    with Journal(journal) as j:
        assert j.get("R", "run/finished") is None and j.verify("R").ok
