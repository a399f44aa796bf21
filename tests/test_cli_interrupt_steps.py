"""SIGTERM during ``decide`` prints one line, wherever it arrives.

``decide``'s handler used to raise the interrupt where the main thread was, which could
be between a coroutine's creation and its scheduling (``coroutine ... was never
awaited`` at exit) or inside the run loop's own bookkeeping (``Task exception was never
retrieved``). Now, while the event loop runs, the loop raises it between two steps;
only a step that keeps the loop longer than ``GRACE_S`` (an embedding) gets it in place.

Here the signal is sent (``signal.raise_signal``) at the N-th line the pipeline executes,
through ``run_and_report`` as ``decide`` calls it: at every line of the live re-ask
(where coroutines are made, then gathered) and at lines spread over a whole run. Each
time the command must exit 130 with the one line naming the resume command (or, once
the run is complete, in its last step, end as the completed run: its own exit code), the
event loop must report nothing, no coroutine may be left unawaited, and the resumed run
must end with the records of an uninterrupted one.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from dissensus.cli.decide import run_and_report
from dissensus.pipeline import start_run
from dissensus.pipeline.review import final_records
from dissensus.store import Journal
from gc_helpers import heap_frozen
from pipeline_cases import crash_script, mixed_batch, write_jsonl, write_policy


@pytest.fixture(scope="module", autouse=True)
def _heap_frozen() -> Iterator[None]:
    """The collection after each step walks only what this module makes (gc_helpers)."""
    yield from heap_frozen()


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _in_a_loop() -> bool:
    """Whether an event loop runs (the run is being decided: ``decide``'s handler is on)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _signalled_at(
    journal: Journal, run_id: str, where: str, n: int, stride: int, out: Path
) -> tuple[int, list[str], int]:
    """``run_and_report`` with SIGTERM sent at the ``n * stride``-th line run, while the
    run's event loop runs, in frames of ``where`` (a function name, or ``*``: any of the
    package's); the exit code, what was reported, and the lines seen."""
    seen = [0]

    def trace(frame: FrameType, event: str, arg: object) -> Any:
        code = frame.f_code
        if "/dissensus/" not in code.co_filename or where not in ("*", code.co_name):
            return trace if where != "*" else None
        if event == "line" and _in_a_loop():
            seen[0] += 1
            if seen[0] == n * stride:
                signal.raise_signal(signal.SIGTERM)
        return trace

    caught = _Records()
    asyncio_log = logging.getLogger("asyncio")
    asyncio_log.addHandler(caught)
    try:
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            sys.settrace(trace)
            try:
                code = run_and_report(
                    journal, run_id, json_out=False, output=str(out), rejects=None, total=None
                )
            finally:
                sys.settrace(None)
            gc.collect()  # what was left behind is reported when it is collected
    finally:
        asyncio_log.removeHandler(caught)
    reported = caught.messages + [str(w.message) for w in warned]
    return code, reported, seen[0]


@pytest.mark.parametrize(("where", "stride"), [("live_reask", 1), ("*", 151)])
def test_sigterm_anywhere_in_a_run_stops_it_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str, stride: int
) -> None:
    rows = [mixed_batch()[i] for i in (0, 1, 2, 4)]  # recorded, live re-ask, reject, escalation
    inp = write_jsonl(tmp_path / "in.jsonl", rows)
    model = f"scripted:{crash_script(tmp_path / 's.yaml')}"
    pol = write_policy(tmp_path / "p.yaml", {"seek_context": {"model": model}})
    out = tmp_path / "out.jsonl"
    with Journal(tmp_path / "j.sqlite") as journal, Journal(tmp_path / "b.sqlite") as base:
        n = 1
        while True:
            run_id = f"r{n}"
            start_run(journal, str(inp), str(pol), run_id=run_id, lock=True)
            capsys.readouterr()
            code, reported, lines = _signalled_at(journal, run_id, where, n, stride, out)
            err = capsys.readouterr().err
            assert reported == [], (n, reported)
            if lines < n * stride:  # past the last line: every point was tried
                assert code == 3
                break
            if code == 3:  # the signal came in the run's last step: it ends as completed
                assert journal.get(run_id, "run/finished") is not None, n
                assert all(line.startswith("rejected") for line in err.strip().splitlines())
                n += 1
                continue
            assert code == 130, (n, err)
            resume = (
                f"interrupted: resume with dissensus runs resume {run_id} --journal {journal.path}"
                f" --output {out}"
            )
            assert err.strip().splitlines()[-1] == resume, n
            assert all(line.startswith("rejected") for line in err.strip().splitlines()[:-1])
            assert journal.verify(run_id).ok, n
            if n % 5 == 0:
                assert _signalled_at(journal, run_id, where, 0, stride, out)[:2] == (3, [])
                start_run(base, str(inp), str(pol), run_id=run_id)
                assert _signalled_at(base, run_id, where, 0, stride, out)[:2] == (3, [])
                assert final_records(journal, run_id) == final_records(base, run_id), n
            n += 1
    assert n > 10


def test_a_signal_as_the_run_finishes_ends_it_as_completed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGINT sent as ``run.finished`` is committed lands in the run's last step (its
    records being handed out): the command ends as the completed run, its records
    written and its own exit code (it said 'interrupted' and kept no output; on the Ray
    engine the loop's shutdown failed with a traceback: tests/test_engines_ray_finished.py)."""
    import os

    from dissensus.store import event_types as ev
    from dissensus.store.journal import Event

    rows = mixed_batch()
    inp = write_jsonl(tmp_path / "in.jsonl", rows)
    model = f"scripted:{crash_script(tmp_path / 's.yaml')}"
    pol = write_policy(tmp_path / "p.yaml", {"seek_context": {"model": model}})
    out = tmp_path / "out.jsonl"

    def interrupt(event: Event) -> None:
        if event.type == ev.RUN_FINISHED:
            os.kill(os.getpid(), signal.SIGINT)

    with Journal(tmp_path / "j.sqlite", after_append=interrupt) as journal:
        start_run(journal, str(inp), str(pol), run_id="R", lock=True)
        capsys.readouterr()
        code = run_and_report(
            journal, "R", json_out=True, output=str(out), rejects=None, total=None
        )
        records = final_records(journal, "R")
    err = capsys.readouterr().err
    assert code == 3, err
    assert all(line.startswith("rejected") for line in err.strip().splitlines()), err
    assert len(out.read_text(encoding="utf-8").splitlines()) == len(records) > 0
