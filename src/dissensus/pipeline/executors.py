"""Executors: who decides a run's cases for the one run loop (:func:`~dissensus.pipeline.batch.execute_run`).

The loop owns the run: its lease, its deadline, journalling rejects and what an
executor hands back, the counts and ``run.finished``. An executor only turns the run's
input into :class:`Outcome` values, one per non-blank input line, records *in input
order* (a reject may come as soon as its line is read). :class:`LocalExecutor` decides
in this process; the Ray engine's executor (:class:`dissensus.engines.ray.RayExecutor`)
decides blocks of lines on workers. Either way each outcome carries the case's events
that are not journalled yet, and the loop appends a block of cases in one transaction
(group commit).

Choices this module makes:

* An executor builds its :class:`~dissensus.pipeline.runtime.Runtime` from the run's
  :class:`~dissensus.pipeline.spec.RunSpec` (:attr:`RunContext.spec`) only, so it cannot
  decide with settings the run did not journal.
* Closing an executor's outcome stream (the loop does, on a deadline or an error)
  cancels its cases in flight; their journalled steps stay, so the run resumes.
* :class:`LocalExecutor` embeds each window of panels in calls of a few texts, the
  event loop running between them, and none after the run's deadline
  (:meth:`~dissensus.pipeline.runtime.Runtime.aprefetch`): the cases in flight go on
  while a window is embedded, and a deadline passing in a long embedding stops the run
  after the call in progress.
* While :class:`LocalExecutor` decides, the collector's first threshold is raised to at
  least :data:`~dissensus.states.collector.GC_THRESHOLD` tracked objects
  (:func:`~dissensus.states.collector.raised_gc_threshold`, as ``dissensus route`` and
  the Ray executor do): a process-wide setting, raised while any run of the process
  lasts and put back to what it was when the last ends (unless changed meanwhile from
  outside the runs). The cases in flight and the block the loop has not appended yet
  are tens of thousands of acyclic containers (models, their dumps, the events'
  payloads) freed by reference counting, which the default threshold of 700 had the
  collector walk over and over, the full collections walking everything the process
  holds (about a tenth of a local ``decide``'s CPU). Collections still come when objects accumulate.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from pydantic import BaseModel, ConfigDict

from dissensus.io.jsonl import Reject
from dissensus.pipeline.engine import decide_case_events
from dissensus.pipeline.records import CaseRecord
from dissensus.pipeline.runtime import Runtime
from dissensus.pipeline.spec import RunSpec
from dissensus.states import SimilarityBackend
from dissensus.states.collector import raised_gc_threshold
from dissensus.store.journal import Journal, NewEvent
from dissensus.types import JsonObject, Panel

__all__ = ["CaseEvent", "Executor", "LocalExecutor", "Outcome", "RunContext"]

PREFETCH = 64
"""Panels whose traces are embedded together before they are decided."""


class CaseEvent(BaseModel):
    """A journal event an executor decided elsewhere and hands to the loop to append."""

    model_config = ConfigDict(frozen=True)

    key: str
    type: str
    case: str | None
    payload: JsonObject
    """The step's JSON as the worker journalled it (passed through to the journal untouched)."""


@dataclass(frozen=True)
class Outcome:
    """One input line's outcome: a record (with events to append, if decided elsewhere) or a reject."""

    line: int
    record: CaseRecord | None = None
    reject: Reject | None = None
    events: Sequence[CaseEvent | NewEvent] = ()
    """The case's events not yet journalled, for the loop to append with its block (a
    reject's too: the Ray engine settles a block's reservation with its last outcome,
    whichever it is)."""
    journalled: bool = False
    """The reject is already in the journal (replayed on resume)."""


@dataclass
class RunContext:
    """What an executor gets: the run, its specification and its input."""

    journal: Journal
    run_id: str
    spec: RunSpec
    name: str
    """The input file's path, or ``-`` for journalled text."""
    lines: list[str] | None = field(default=None)
    """The input's lines when it is journalled text; ``None``: read ``name``."""
    stop_at: float | None = None
    """The run's deadline on the event loop's clock (``loop.time()``), if any: the loop
    stops the run then, and an executor may start no long work after it
    (:class:`~dissensus.pipeline.runtime.PastDeadline`)."""
    sha256: str | None = None
    """The input file's sha256 as the run journalled it: read to its end, a file that
    hashes otherwise (changed since the run started) stops the run."""
    after: int = 0
    """The input lines up to this one are committed already: the run loop started the
    executor again mid-run (a shift flag held the file), and :meth:`panels` skips them."""

    def panels(self) -> Iterator[tuple[Panel | Reject, int]]:
        """``(panel or reject, line number)`` for every non-blank input line, lazily."""
        from dissensus.pipeline.batch import numbered_panels

        items = numbered_panels(self.name, self.lines, self.sha256)
        if not self.after:
            return items
        return ((item, line) for item, line in items if line > self.after)


class Executor(Protocol):
    """Decides a run's cases; see the module docstring."""

    def outcomes(self, ctx: RunContext) -> AsyncGenerator[Outcome, None]:
        """One :class:`Outcome` per non-blank input line, records in input order."""
        ...


class LocalExecutor:
    """Decide in this process: at most ``policy.concurrency`` cases in flight, each case's
    events handed to the loop with its record (those before a model call are journalled
    before the call); traces of :data:`PREFETCH` panels embedded together."""

    def __init__(self, backend: Callable[[], SimilarityBackend] | None = None) -> None:
        self.backend = backend

    async def outcomes(self, ctx: RunContext) -> AsyncGenerator[Outcome, None]:
        rt = Runtime(
            ctx.spec, ctx.journal, ctx.run_id, backend_factory=self.backend, stop_at=ctx.stop_at
        )
        window: list[tuple[int, asyncio.Task[tuple[CaseRecord, list[NewEvent]]]]] = []
        limit = ctx.spec.policy.concurrency
        with raised_gc_threshold():
            try:
                for chunk in windows(ctx.panels()):
                    cases = [(line, p) for p, line in chunk if isinstance(p, Panel)]
                    await rt.aprefetch(cases, ctx.stop_at)
                    for item, line in chunk:
                        if isinstance(item, Reject):
                            yield Outcome(line=line, reject=item)
                            continue
                        task = asyncio.create_task(decide_case_events(rt, item, line))
                        window.append((line, task))
                        if len(window) >= limit:
                            yield await _settled(window)
                while window:
                    yield await _settled(window)
            finally:
                for _, task in window:
                    task.cancel()
                await asyncio.gather(*(t for _, t in window), return_exceptions=True)
                await rt.client.aclose()


async def _settled(
    window: list[tuple[int, asyncio.Task[tuple[CaseRecord, list[NewEvent]]]]],
) -> Outcome:
    """The first case of ``window`` once decided, taken out of it (it stays in the window,
    to be cancelled with the others, while it is awaited)."""
    number, task = window[0]
    record, events = await task
    window.pop(0)
    return Outcome(line=number, record=record, events=events)


def windows(
    items: Iterator[tuple[Panel | Reject, int]],
) -> Iterator[list[tuple[Panel | Reject, int]]]:
    """``items`` in lists of :data:`PREFETCH` (the last one shorter), read lazily."""
    chunk: list[tuple[Panel | Reject, int]] = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= PREFETCH:
            yield chunk
            chunk = []
    yield chunk


def prefetched(
    rt: Runtime, items: Iterator[tuple[Panel | Reject, int]]
) -> Iterator[tuple[Panel | Reject, int]]:
    """``items`` unchanged, with the traces of every :data:`PREFETCH` panels embedded first."""
    for chunk in windows(items):
        rt.prefetch([(line, p) for p, line in chunk if isinstance(p, Panel)])
        yield from chunk
