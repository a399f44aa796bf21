"""``runs verify`` of a run that a live process is executing says so.

It said "not finished: interrupted, or its tail was removed" for a run that was simply
still being decided (a ``decide`` in another terminal, the service), which an auditor
reads as an alarm. It now names the process executing it; a run nobody executes still
gets the old words.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from cli_helpers import cli
from dissensus.pipeline import Policy, start_run
from dissensus.store import Journal
from pipeline_cases import panel, write_jsonl


def test_verify_names_the_process_executing_an_unfinished_run(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    inputs = write_jsonl(tmp_path / "in.jsonl", [panel("p1", ["1", "1", "2"])])
    with Journal(path) as journal:
        start_run(journal, str(inputs), Policy(), run_id="r", similarity="tfidf", lock=True)
    running = cli("runs", "verify", "r", "--journal", path)
    assert running.code == 0, running.err
    assert f"being executed by pid {os.getpid()} on {socket.gethostname()}" in running.out
    assert "interrupted" not in running.out
    with Journal(path) as journal:
        journal.release_run_lock("r")
    stopped = cli("runs", "verify", "r", "--journal", path)
    assert stopped.code == 0, stopped.err
    assert "not finished: interrupted, or its tail was removed" in stopped.out
