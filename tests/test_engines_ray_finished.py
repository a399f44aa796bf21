"""A signal that arrives once a Ray ``decide`` is finished (its ``run.finished`` journalled,
its last records being handed out) lets the command end as the completed run it is:
its records written, its exit code, nothing more on stderr than the run's own lines.

It used to be raised by the event loop's callback after the run's task had ended, which
left the loop's own callback that stops it behind: the loop's shutdown, waiting for the
Ray engine's threads, failed with ``RuntimeError: Event loop stopped before Future
completed`` (a traceback, exit 1). Here the signal is sent from the journal's hook as
``run.finished`` is committed, the moment a Ctrl-C at the end of a run lands in.

Starts a local Ray instance: run with ``DISSENSUS_TEST_RAY=1`` (``make test-ray``)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from dissensus.cli.decide import run_and_report
from dissensus.store import event_types as ev
from dissensus.store.journal import Event, Journal
from test_engines_ray import _start, panels, pytestmark, ray_instance

__all__ = ["panels", "pytestmark", "ray_instance"]  # the fixtures and the gate


@pytest.mark.parametrize("engine", ["ray"])
def test_a_signal_once_the_run_is_finished_ends_it_as_completed(
    ray_instance: Any,
    panels: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    engine: str,
) -> None:
    def interrupt(event: Event) -> None:
        if event.type == ev.RUN_FINISHED:
            os.kill(os.getpid(), signal.SIGINT)

    out = tmp_path / "out.jsonl"
    with Journal(tmp_path / "j.sqlite", after_append=interrupt) as journal:
        _start(journal, panels, "R")
        capsys.readouterr()
        code = run_and_report(
            journal,
            "R",
            json_out=True,
            output=str(out),
            rejects=None,
            total=None,
            engine=engine,
            workers=2,
        )
        assert journal.get("R", "run/finished") is not None
    err = capsys.readouterr().err
    assert code == 3, err  # two rejected lines: the run's own status
    assert all(line.startswith("rejected") for line in err.strip().splitlines()), err
    assert len(out.read_text(encoding="utf-8").splitlines()) == 150
