"""Several signals in a row during ``decide`` print one line and exit 130.

The first signal stops the run between two of the event loop's steps; the ones after it
used to be raised again where the main thread was: inside the loop's own shutdown (its
cancelling of the run's tasks, the commit that releases the run's lock), which then
printed ``Task was destroyed but it is pending!``, ``Task exception was never
retrieved`` and ``coroutine ... was never awaited``; and ``runs resume`` said its resume
line twice. Now once a run is stopping, a signal changes nothing.

Here SIGTERM is sent (``signal.raise_signal``) three times, at the N-th line the
pipeline executes while the run's event loop runs and ``gap`` and ``2 * gap`` lines
after it (so the later ones land while the run stops), through ``run_and_report`` as
``decide`` calls it.
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
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _three_signals(
    journal: Journal, run_id: str, first: int, gap: int, out: Path
) -> tuple[int, list[str], int]:
    """``run_and_report`` with SIGTERM at line ``first`` and ``gap``, ``2 * gap`` lines
    after; the exit code, what was reported, and the signals sent."""
    seen = [0]
    at = {first, first + gap, first + 2 * gap}
    sent = [0]

    def trace(frame: FrameType, event: str, arg: object) -> Any:
        if "/dissensus/" not in frame.f_code.co_filename:
            return None
        if event == "line" and _in_a_loop():
            seen[0] += 1
            if seen[0] in at:
                sent[0] += 1
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
                    journal, run_id, json_out=True, output=str(out), rejects=None, total=None
                )
            finally:
                sys.settrace(None)
            gc.collect()  # what was left behind is reported when it is collected
    finally:
        asyncio_log.removeHandler(caught)
    return code, caught.messages + [str(w.message) for w in warned], sent[0]


@pytest.mark.parametrize("gap", [1, 6, 30])
def test_three_sigterms_in_a_row_stop_a_run_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], gap: int
) -> None:
    rows = [mixed_batch()[i] for i in (0, 1, 2, 4)]  # recorded, live re-ask, reject, escalation
    inp = write_jsonl(tmp_path / "in.jsonl", rows)
    model = f"scripted:{crash_script(tmp_path / 's.yaml')}"
    pol = write_policy(tmp_path / "p.yaml", {"seek_context": {"model": model}})
    out = tmp_path / "out.jsonl"
    stopped = 0
    with Journal(tmp_path / "j.sqlite") as journal, Journal(tmp_path / "b.sqlite") as base:
        start_run(base, str(inp), str(pol), run_id="B")
        assert (
            run_and_report(base, "B", json_out=True, output=str(out), rejects=None, total=None) == 3
        )
        for n, first in enumerate(range(1, 2000, 97)):
            run_id = f"r{n}"
            start_run(journal, str(inp), str(pol), run_id=run_id, lock=True)
            capsys.readouterr()
            code, reported, sent = _three_signals(journal, run_id, first, gap, out)
            err = capsys.readouterr().err
            assert reported == [], (first, reported)
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
            if sent == 0:  # past the run's last line
                assert code == 3
                break
            lines = [line for line in err.splitlines() if not line.startswith("rejected")]
            if code == 3:  # the first came in the run's last step: it ends as completed
                assert journal.get(run_id, "run/finished") is not None, first
                assert lines == [], (first, err)
                continue
            assert code == 130, (first, err)
            resume = (
                f"interrupted: resume with dissensus runs resume {run_id} --journal {journal.path}"
                f" --output {out}"
            )
            assert lines == [resume], (first, err)
            assert journal.verify(run_id).ok, first
            stopped += 1
            if stopped % 4 == 0:
                assert _three_signals(journal, run_id, 10**9, gap, out)[:2] == (3, [])
                key = [(r.line, r.state, r.decision) for r in final_records(journal, run_id)]
                assert key == [(r.line, r.state, r.decision) for r in final_records(base, "B")]
    assert stopped > 3


@pytest.mark.parametrize("command", ["decide", "runs resume"])
def test_a_signal_after_the_resume_line_does_not_say_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    """The run stopped and said so; another SIGTERM right after (the handlers are the
    command line's again) ends the command without a second line."""
    import os

    from cli_helpers import cli
    from dissensus.cli import decide, journals

    inp = write_jsonl(tmp_path / "in.jsonl", mixed_batch())
    model = f"scripted:{crash_script(tmp_path / 's.yaml')}"
    pol = write_policy(tmp_path / "p.yaml", {"seek_context": {"model": model}})
    j = tmp_path / "j.sqlite"
    seen = [0]

    def hook(_: object) -> None:
        seen[0] += 1
        if seen[0] == 12:
            os.kill(os.getpid(), signal.SIGTERM)

    said = decide.said_interrupted

    def said_then_signalled(
        journal: Journal,
        run_id: str,
        output: str | None = None,
        json_out: bool = False,
        rejects: str | None = None,
    ) -> int:
        code = said(journal, run_id, output, json_out, rejects)
        signal.raise_signal(signal.SIGTERM)
        return code

    monkeypatch.setattr(decide, "said_interrupted", said_then_signalled)
    if command == "runs resume":
        with Journal(j) as journal:
            start_run(journal, str(inp), str(pol), run_id="R")
        argv = ["runs", "resume", "R", "--journal", str(j), "--json"]
    else:
        argv = ["decide", str(inp), "--run-id", "R", "--policy", str(pol), "--journal", str(j), "--json"]  # fmt: skip
    monkeypatch.setattr(journals, "JOURNAL_HOOKS", [hook])
    res = cli(*argv)
    lines = [x for x in res.err.splitlines() if not x.startswith(("rejected", "error"))]
    assert res.code == 130, res.err
    assert lines == [f"interrupted: resume with dissensus runs resume R --journal {j} --json"], (
        res.err
    )
