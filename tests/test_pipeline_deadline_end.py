"""A deadline that passes once the executor has handed over every case and ended does
not stop the run: it finishes, as it would have a moment earlier.

The loop looked at its clock before it looked at what the executor had handed over, so
a run whose last case was decided just before the deadline stayed partial (a
``run.stopped`` after every case), and a replay with the same deadline stopped again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from pathlib import Path

from dissensus.pipeline.batch import execute_run, start_run
from dissensus.pipeline.executors import LocalExecutor, Outcome, RunContext
from dissensus.store import Journal
from dissensus.store import event_types as ev

REPO = Path(__file__).resolve().parent.parent
PANELS = REPO / "examples" / "llmbar-swap.jsonl"


class _SlowEnd:
    """The local executor, whose last step keeps the event loop past the deadline after
    its last case is handed over."""

    def __init__(self, hold_s: float) -> None:
        self.inner = LocalExecutor()
        self.hold_s = hold_s

    async def outcomes(self, ctx: RunContext) -> AsyncGenerator[Outcome, None]:
        async for outcome in self.inner.outcomes(ctx):
            yield outcome
        time.sleep(self.hold_s)  # the point: the loop is kept past its deadline


def _run(journal: Journal, run_id: str, **kw: object) -> list[object]:
    async def go() -> list[object]:
        return [r async for r in execute_run(journal, run_id, **kw)]  # type: ignore[arg-type]

    return asyncio.run(go())


def test_a_deadline_passing_after_the_last_case_finishes_the_run(tmp_path: Path) -> None:
    text = "".join(PANELS.read_text(encoding="utf-8").splitlines(keepends=True)[:3])
    with Journal(tmp_path / "j.sqlite") as journal:
        start_run(journal, None, {"reading": {"similarity": "tfidf"}}, text=text, run_id="warm")
        assert len(_run(journal, "warm")) == 3  # libraries loaded: the next run is quick
        start_run(journal, None, {"reading": {"similarity": "tfidf"}}, text=text, run_id="r")
        records = _run(journal, "r", deadline_s=1.0, executor=_SlowEnd(1.5))
        assert len(records) == 3
        assert journal.get("r", "run/finished") is not None
        assert not list(journal.events("r", type=ev.RUN_STOPPED))
