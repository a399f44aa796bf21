"""An interrupt landing anywhere in the run loop leaves nothing behind.

SIGINT and SIGTERM raise :class:`~dissensus.cli.decide.Interrupted` (a
``KeyboardInterrupt``) wherever the main thread is. Here the interrupt is raised, as a
signal handler would raise it, at the N-th line the run loop executes
(:mod:`dissensus.pipeline.batch`, its executor and its runtime), for every N of a run
that reads, re-asks a live model, escalates and rejects, under ``asyncio.run`` as the
CLI runs it, with and without a deadline. Each time the event loop must report nothing
(no ``Task exception was never retrieved``, no generator closed while an ``anext`` runs
it, no task destroyed pending), the run's lock must be released, its chain must verify,
and the resumed run must end with the records of an uninterrupted one.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

import dissensus.pipeline.batch as run_loop
import dissensus.pipeline.executors as executors
import dissensus.pipeline.runtime as runtime
from dissensus.pipeline import execute_run, start_run
from dissensus.pipeline.records import CaseRecord
from dissensus.pipeline.review import final_records
from dissensus.store import Journal
from gc_helpers import heap_frozen
from pipeline_cases import crash_script, mixed_batch, write_jsonl, write_policy


@pytest.fixture(scope="module", autouse=True)
def _heap_frozen() -> Iterator[None]:
    """The collection after each point walks only what this module makes (gc_helpers)."""
    yield from heap_frozen()


FILES = {run_loop.__file__, executors.__file__, runtime.__file__}
SOAK = os.environ.get("DISSENSUS_SOAK") == "1"
STEP = 1 if SOAK else 2


class Interrupted(KeyboardInterrupt):
    """What the CLI's signal handler raises."""


def _interrupted_at(
    journal: Journal, run_id: str, n: int, deadline: float | None
) -> tuple[bool, list[dict[str, Any]], int]:
    """Run ``run_id`` with an interrupt raised at the ``n``-th line the run loop
    executes: whether it was raised, what the event loop reported, the lines run."""
    reports: list[dict[str, Any]] = []
    seen = [0]

    def trace(frame: FrameType, event: str, arg: object) -> Any:
        if frame.f_code.co_filename not in FILES:
            return None
        if event == "line":
            seen[0] += 1
            if seen[0] == n:
                raise Interrupted()
        return trace

    async def main() -> list[CaseRecord]:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: reports.append(context))
        sys.settrace(trace)
        try:
            return [r async for r in execute_run(journal, run_id, deadline_s=deadline)]
        finally:
            sys.settrace(None)

    raised = False
    try:
        asyncio.run(main())
    except Interrupted:
        raised = True
    finally:
        sys.settrace(None)
    gc.collect()  # an unretrieved exception is reported when its task is collected
    return raised, reports, seen[0]


@pytest.mark.parametrize("deadline", [None, 300.0])
def test_an_interrupt_at_any_line_of_the_run_loop_leaves_nothing_behind(
    tmp_path: Path, deadline: float | None
) -> None:
    rows = [mixed_batch()[i] for i in (0, 1, 2, 4)]  # recorded, live re-ask, reject, escalation
    inp = write_jsonl(tmp_path / "in.jsonl", rows)
    model = f"scripted:{crash_script(tmp_path / 's.yaml')}"
    pol = write_policy(tmp_path / "p.yaml", {"seek_context": {"model": model}})
    with Journal(tmp_path / "j.sqlite") as journal, Journal(tmp_path / "b.sqlite") as base:
        n = 1 if STEP == 1 or deadline is None else 2
        tried = 0
        while True:
            run_id = f"r{n}"
            start_run(journal, str(inp), str(pol), run_id=run_id, lock=True)
            raised, reports, lines = _interrupted_at(journal, run_id, n, deadline)
            assert reports == [], (n, [(r.get("message"), r.get("exception")) for r in reports])
            assert journal.verify(run_id).ok, n
            tried += 1
            if tried % 8 == 0 or not raised:
                # Resumed, it ends as a run never interrupted (same id, another journal).
                assert _interrupted_at(journal, run_id, 0, None)[:2] == (False, [])
                start_run(base, str(inp), str(pol), run_id=run_id)
                assert _interrupted_at(base, run_id, 0, None)[:2] == (False, [])
                assert final_records(journal, run_id) == final_records(base, run_id), n
            if not raised:  # past the last line: every point was tried
                assert lines < n
                break
            n += STEP
    assert n > 100 and tried > 100 // STEP
