"""``decide``'s progress keeps talking: on a timer, while embedding, from the command's start.

With ``$DISSENSUS_PROGRESS=1`` and a standard error that is no terminal, progress is a
plain line every 5 s (docs/cli.md). It used to print only when a case advanced or the
status changed, so a first window being embedded (the model loading, 900 texts) was
silent for 80 s; the embedding status was never shown, because the run's prefetch hands
the backend 32 texts at a time and the progress wrapper only spoke for more than 32; the
clock started with the bar, after a resume had read its journal (0:00:05 at 31 s), and
that read said nothing.

Here the lines are driven by a fake clock (:class:`_Lines` ``clock``), the embedding by
a fake backend whose calls the test counts, and the timer thread by a tiny interval
waited on with an event (the assertion is on what was said, not on how long it took).

A progress line never lands inside a record. Standard output and standard error often
share one pipe (``2>&1`` into a CI log), and a pipe write of more than 4 KB is not
atomic: the timer thread's line landed inside a 30,000-character record. Here a fake
standard output writes each record in two halves and, between them, waits until the
timer thread has either said a line (into the record: the fault) or is waiting for the
output lock (the fix); the shared "pipe" must then hold every record whole.

The last line of a run with rejected lines said ``1,094/1,100 (99%)``: the bar counted
the records, its total the input's lines. Rejected lines advance it too now.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any, cast

import numpy as np
import pytest
from pydantic import BaseModel

from cli_helpers import cli
from dissensus.cli import common
from dissensus.cli.common import _Lines, _Ticker, command_started, mark_command_start
from dissensus.cli.decide import _EmbeddingProgress, _emitter
from dissensus.io.atomic import stdout_handle
from dissensus.pipeline import start_run
from dissensus.pipeline.runtime import EMBED_CHUNK, PrefetchedBackend
from dissensus.store import Journal
from pipeline_cases import panel, write_jsonl


class _Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _lines(
    clock: _Clock, *, total: float | None = 10, started: float | None = None
) -> tuple[_Lines, list[str]]:
    said: list[str] = []
    lines = _Lines(
        "deciding",
        total,
        every=5.0,
        clock=clock,
        started=clock.now if started is None else started,
        write=said.append,
    )
    return lines, said


def test_a_line_comes_every_interval_even_when_nothing_advanced() -> None:
    clock = _Clock()
    lines, said = _lines(clock)
    clock.now += 4.9
    assert lines.tick() is False and said == []
    clock.now += 0.1  # 5 s: due, though no case advanced
    assert lines.tick() is True
    assert said == ["deciding: 0/10 (0%) 0:00:05\n"]
    assert lines.tick() is False  # not again at once
    clock.now += 5
    lines.update("deciding (embedding 64/900 texts)", None, None)  # the timer would say it too
    assert said[-1] == "deciding (embedding 64/900 texts): 0/10 (0%) 0:00:10\n"
    clock.now += 2
    lines.advance(3)
    assert len(said) == 2  # advancing says nothing before the interval
    clock.now += 3
    assert lines.tick() is True
    assert said[-1] == "deciding (embedding 64/900 texts): 3/10 (30%) 0:00:15\n"


def test_the_clock_counts_from_the_command_start() -> None:
    clock = _Clock()
    lines, said = _lines(clock, started=clock.now - 31)  # the command began 31 s ago
    lines.say()
    assert said == ["deciding: 0/10 (0%) 0:00:31\n"]
    before = command_started()
    try:
        mark_command_start(123.0)
        assert command_started() == 123.0
        assert _Lines("x", None)._start == 123.0  # a bar made later counts from there
    finally:
        mark_command_start(before)


def test_a_phase_with_nothing_counted_says_its_time() -> None:
    clock = _Clock()
    lines, said = _lines(clock, total=None)
    clock.now += 26
    lines.say()
    assert said == ["deciding: 0:00:26\n"]


def test_the_timer_thread_says_lines_while_the_main_thread_is_busy() -> None:
    said: list[str] = []
    three = threading.Event()

    def write(line: str) -> None:
        said.append(line)
        if len(said) >= 3:
            three.set()

    lines = _Lines("deciding", 4, every=0.01, write=write)
    ticker = _Ticker(lines)
    ticker.start()
    try:
        assert three.wait(30), said  # nothing advanced: the thread alone said them
    finally:
        ticker.stop()
    count = len(said)
    assert all(line.startswith("deciding: 0/4 (0%) ") for line in said)
    ticker.stop()
    assert len(said) == count  # stopped: no more lines


class _Bar:
    def __init__(self) -> None:
        self.said: list[str] = []

    def update(self, *, description: str | None = None, **_: Any) -> None:
        if description is not None:
            self.said.append(description)


class _Counting:
    name = "counting"

    def __init__(self) -> None:
        self.calls: list[int] = []

    def embed(self, texts: Sequence[str]) -> Any:
        self.calls.append(len(texts))
        return np.ones((len(texts), 3))

    def matrix(self, texts: Sequence[str]) -> Any:
        raise AssertionError("not used")


def _label(extra: str) -> str:
    return "deciding" + (f" ({extra})" if extra else "")


def test_embedding_progress_counts_texts_across_the_prefetch_calls() -> None:
    inner = _Counting()
    bar = _Bar()
    backend = PrefetchedBackend(_EmbeddingProgress(inner, bar, _label))  # type: ignore[arg-type]
    texts = [f"trace {i}" for i in range(100)]
    asyncio.run(backend.aprefetch(texts))
    assert inner.calls == [EMBED_CHUNK, EMBED_CHUNK, EMBED_CHUNK, 100 - 3 * EMBED_CHUNK]
    assert bar.said == [
        "deciding (embedding 0/100 texts)",  # before the first call (which loads the model)
        "deciding (embedding 0/100 texts)",
        "deciding (embedding 32/100 texts)",
        "deciding (embedding 32/100 texts)",
        "deciding (embedding 64/100 texts)",
        "deciding (embedding 64/100 texts)",
        "deciding (embedding 96/100 texts)",
        "deciding (embedding 96/100 texts)",
        "deciding",  # all embedded
    ]
    # A second window counts afresh; texts held already are not counted (nor embedded).
    bar.said.clear()
    backend.prefetch([*texts[:10], "new a", "new b"])
    assert inner.calls[-1] == 2
    assert bar.said == [
        "deciding (embedding 0/2 texts)",
        "deciding (embedding 0/2 texts)",
        "deciding",
    ]


def test_resume_says_it_reads_the_journal(tmp_path: Path) -> None:
    rows = [panel(f"p{i}", ["1", "1", "2"]) for i in range(3)]
    inp = write_jsonl(tmp_path / "in.jsonl", list(rows))
    with Journal(tmp_path / "j.sqlite") as journal:
        start_run(journal, str(inp), None, similarity="tfidf", run_id="R")
    env = {"DISSENSUS_PROGRESS": "1"}
    res = cli("runs", "resume", "R", "--journal", tmp_path / "j.sqlite", "--json", env=env)
    assert res.code == 0, res.err
    said = res.err.splitlines()
    assert said[0].startswith("resuming run R: reading the journal: 0:00:0"), res.err
    assert said[1].startswith("resuming run R: reading the journal: 0:00:"), res.err
    assert said[-1].startswith("deciding: 3/3 (100%) 0:00:"), res.err
    assert common.LINE_EVERY_S == 5.0  # the documented interval


class _Watched:
    """A re-entrant lock that sets ``moved`` when another thread finds it held."""

    def __init__(self, moved: threading.Event) -> None:
        self._lock = threading.RLock()
        self._moved = moved

    def __enter__(self) -> _Watched:
        if not self._lock.acquire(blocking=False):
            self._moved.set()  # the timer waits for the record's end
            self._lock.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


def _on_a_shared_pipe(
    monkeypatch: pytest.MonkeyPatch, write_one: Callable[[IO[str]], None]
) -> list[str]:
    """What a pipe shared by standard output and the timer's lines holds after
    ``write_one`` wrote one record to standard output (each write in two halves, the
    timer given its chance between them); its lines."""
    pipe: list[str] = []
    moved = threading.Event()
    monkeypatch.setattr(common, "OUTPUT_LOCK", _Watched(moved), raising=False)

    class Halves:
        def write(self, text: str) -> int:
            half = len(text) // 2
            pipe.append(text[:half])
            moved.clear()
            # The timer's next line: into the record, or waiting for its end.
            assert moved.wait(30), "the timer neither said a line nor waited"
            pipe.append(text[half:])
            return len(text)

        def flush(self) -> None:
            return None

    def said(line: str) -> None:
        pipe.append(line)
        moved.set()

    ticker = _Ticker(_Lines("deciding", 4, every=0.001, write=said))
    halves = cast("IO[str]", Halves())
    monkeypatch.setattr(sys, "stdout", halves)
    ticker.start()
    try:
        write_one(halves)
    finally:
        ticker.stop()
        monkeypatch.undo()
    return "".join(pipe).splitlines()


class _Record(BaseModel):
    id: str
    line: int


def test_a_progress_line_never_lands_inside_a_decided_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    record = _Record(id="x" * 30_000, line=1)
    emit = _emitter(True, None, stdout_handle(), {})  # --json: the records on stdout
    lines = _on_a_shared_pipe(monkeypatch, lambda _: emit(record))  # type: ignore[arg-type]
    assert record.model_dump_json() in lines, [line[-60:] for line in lines]
    assert all(line.startswith(("deciding: ", '{"id"')) for line in lines)


@pytest.mark.parametrize("to_stdout", [True, False])
def test_a_progress_line_never_lands_inside_a_streamed_record(
    monkeypatch: pytest.MonkeyPatch, to_stdout: bool
) -> None:
    """``route``, ``guard vote`` and ``convert`` write their records through
    :func:`~dissensus.cli.common.whole_records` while their bar is up."""
    from dissensus.cli.common import whole_records

    monkeypatch.setattr(common, "_plain_lines", lambda: True)  # DISSENSUS_PROGRESS=1, a log
    text = json.dumps({"id": "y" * 30_000}) + "\n"

    def write(halves: IO[str]) -> None:
        # A handle that cannot tell where it writes counts as standard error's pipe.
        whole_records(stdout_handle() if to_stdout else halves).write(text)

    lines = _on_a_shared_pipe(monkeypatch, write)
    assert text.strip() in lines, [line[-60:] for line in lines]


def test_a_file_apart_from_standard_error_is_written_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dissensus.cli.common import whole_records

    monkeypatch.setattr(common, "_plain_lines", lambda: True)
    with open(tmp_path / "out.jsonl", "w", encoding="utf-8") as handle:
        assert whole_records(handle) is handle  # buffered: no flush a record


def test_rejected_lines_count_toward_the_last_progress_line(tmp_path: Path) -> None:
    rows: list[dict[str, Any] | str] = [panel(f"p{i}", ["1", "1", "2"]) for i in range(5)]
    inp = write_jsonl(tmp_path / "in.jsonl", [*rows[:2], "not json", *rows[2:], "{}"])
    journal = tmp_path / "j.sqlite"
    env = {"DISSENSUS_PROGRESS": "1"}
    args = ("--journal", journal, "--json")
    res = cli("decide", inp, "--similarity", "tfidf", "--run-id", "R", *args, env=env)
    assert res.code == 3, res.err
    said = [line for line in res.err.splitlines() if line.startswith("deciding")]
    assert said[-1].startswith("deciding: 7/7 (100%) 0:00:"), res.err
    resumed = cli("runs", "resume", "R", *args, env=env)  # a finished run's replay
    assert resumed.code == 3, resumed.err
    said = [line for line in resumed.err.splitlines() if line.startswith("deciding")]
    assert said[-1].startswith("deciding: 7/7 (100%) 0:00:"), resumed.err
