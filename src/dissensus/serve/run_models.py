"""What the service answers about its decide runs, and a run's state in memory.

The answer models (:class:`RunReject`, :class:`RunStatusView`, :class:`RunDocument`,
:class:`DecideAnswer`), the run's progress as the server keeps it (:class:`RunState`),
and the reads that give a run of the journal those shapes (its rejects, its total).

Choices this module makes:

* Each panel of a request is one JSONL line (``json.dumps`` of the item), so item ``i``
  is input line ``i + 1`` and a rejected item is reported with the same field path the
  CLI reports for that line (:func:`dissensus.io.jsonl.parse_line`).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel

from dissensus.errors import DissensusError
from dissensus.io.jsonl import Reject
from dissensus.pipeline import CaseRecord
from dissensus.pipeline.batch import input_lines
from dissensus.store import event_types as ev
from dissensus.store.journal import Journal
from dissensus.types import JsonObject

__all__ = [
    "DecideAnswer",
    "RunDocument",
    "RunReject",
    "RunState",
    "RunStatusView",
    "Status",
    "item_line",
    "reject_of",
]

Status = Literal["running", "finished", "failed", "incomplete"]


def item_line(item: Any) -> str:
    """One request item as one JSONL line."""
    return json.dumps(item, ensure_ascii=True, separators=(",", ":"))


class RunReject(BaseModel):
    """A rejected item of a run as the API reports it: its index in the request (0-based),
    the field, the message."""

    index: int
    field: str | None
    error: str


class RunStatusView(BaseModel):
    """Where a run stands: the status line of ``GET /v1/runs/{id}`` and of its events."""

    run_id: str
    status: Status
    total: int
    done: int
    rejected: int
    error: str | None


class RunDocument(RunStatusView):
    """A run's status with its final records (human resolutions included) and rejects."""

    records: list[CaseRecord]
    rejects: list[RunReject]
    shift: dict[str, Any] | None = None
    """The run's shift check as journalled (the ``shift`` of ``dissensus runs show
    --json``); ``None`` while the run goes on, or when it made none (no acceptance file
    with a shift reference, or fewer than 10 judged cases)."""


class DecideAnswer(BaseModel):
    """The answer to ``POST /v1/decide`` with a list of panels: the run, its records (as
    ``dissensus decide --json`` writes them) and the rejected items."""

    run_id: str
    status: Status
    rejected: int
    records: list[CaseRecord]
    rejects: list[RunReject]
    shift: dict[str, Any] | None = None
    """The run's shift check (as :attr:`RunDocument.shift`)."""


def reject_of(reject: Reject) -> RunReject:
    """A rejected item as the API reports it: index in the request, field, message."""
    return RunReject(index=reject.line - 1, field=reject.field, error=reject.message)


@dataclass
class RunState:
    """What the server knows about one of its runs while (and shortly after) it runs."""

    run_id: str
    total: int
    status: Status = "running"
    done: int = 0
    records: list[CaseRecord] = field(default_factory=list)
    rejects: list[RunReject] = field(default_factory=list)
    error: str | None = None
    events: list[tuple[str, BaseModel]] = field(default_factory=list)
    """Progress events (kind, model), each streamed to followers as the model's JSON (made
    only when the run is followed)."""
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    started: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    """Resolved once ``run.started`` is committed (the journal's error if it cannot be);
    for a deferred run, once it is registered (its first write creates it)."""
    size: int = 0
    """Characters of its panels' JSONL (what it holds in memory until decided grows with it)."""
    deferred: bool = False
    """Created by its first write (``start_run(..., defer=True)``): a request that waits
    for its records, decided without a model call, is one commit."""
    shift: JsonObject | None = None
    """The run's shift check, read from the journal when the run finished."""
    taken: bool = False
    """Failed at its first write because its fresh id names a run the journal already
    holds (another run's; a deferred run): nothing was journalled, and ``POST
    /v1/decide`` decides the panels again under another fresh id."""
    retry: bool = False
    """Failed because the journal was unreachable or busy, and not known to hold anything
    to resume: ``POST /v1/decide`` answers 503 with ``Retry-After``
    (:mod:`~dissensus.serve.journal_errors`)."""
    outage: str | None = None
    """Stopped by a busy or unreachable journal (its public sentence): a run the journal
    holds unfinished is ``incomplete``, resumable (:meth:`.runs.Runner.describe`)."""

    @property
    def active(self) -> bool:
        """Still deciding in this process (a task cancelled before it ran is not)."""
        return self.status == "running" and self.task is not None and not self.task.done()

    def push(self, kind: str, data: BaseModel) -> None:
        self.events.append((kind, data))
        self.changed.set()
        self.changed = asyncio.Event()

    def summary(self) -> RunStatusView:
        return RunStatusView(
            run_id=self.run_id,
            status=self.status,
            total=self.total,
            done=self.done,
            rejected=len(self.rejects),
            error=self.error,
        )


def _rejects(journal: Journal, run_id: str) -> list[RunReject]:
    """The run's rejected items as journalled, as the API reports them."""
    return [
        RunReject(
            index=int(e.payload["line"]) - 1, field=e.payload["field"], error=e.payload["message"]
        )
        for e in journal.events(run_id, type=ev.INPUT_REJECTED)
    ]


def _total(journal: Journal, run_id: str, seen: int) -> int:
    """The run's number of panels (its non-blank input lines), also for a run this
    process did not start or that was interrupted; ``seen`` when the input is unreadable."""
    started = journal.get(run_id, "run/started")
    source = started.payload.get("input") if started is not None else None
    try:
        _, lines = input_lines(source) if isinstance(source, dict) else ("", None)
        if lines is None and isinstance(source, dict) and source.get("path") not in (None, "-"):
            with open(str(source["path"]), encoding="utf-8", errors="replace") as handle:
                lines = list(handle)
    except (DissensusError, OSError):
        return seen
    if lines is None:
        return seen
    return max(seen, sum(1 for line in lines if line.strip()))
