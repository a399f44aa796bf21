"""What the driver and the decide workers send each other: a block to decide (a
:class:`_WorkItem` as JSON text: the block's place, the events to resume from, the
allowance of its model calls, the run's deadline on the wall clock) and what comes back
(a pickled :class:`_BlockResult`: each line's outcome, what the block spent and what its
cases charge a resumed run), a stopped worker's answer (:class:`_Stopped`) and the
acceptance monitor the driver hands every worker (:class:`_Monitor`)."""

from __future__ import annotations

import asyncio
import time
from typing import NamedTuple, TypeAlias

from typing_extensions import TypedDict

from dissensus.engines.blocks import Block
from dissensus.types import JsonObject


class _BlockFields(TypedDict):
    """A :class:`~dissensus.engines.blocks.Block` as JSON (``dataclasses.asdict``)."""

    index: int
    first_line: int
    n_lines: int
    path: str
    offset: int
    length: int
    lines: list[str] | None
    sha256: str | None


class _SeedEvent(TypedDict):
    """A journalled case event the driver hands a worker (resuming a case)."""

    key: str
    type: str
    case: str | None
    payload: JsonObject


class _Monitor(TypedDict):
    """The acceptance monitor as the driver read it from the run's journal, for the
    workers (:func:`_monitor_of`)."""

    verdicts: dict[str, JsonObject]
    """Stratum -> its verdict (a :class:`~dissensus.acceptance.monitor.MonitorStep` as
    JSON), for the strata with answered audits."""
    journalled: list[_SeedEvent]
    """The run's ``acceptance.suspended`` events an earlier invocation journalled: a
    resume journals no other for their strata."""


class _Allowance(TypedDict):
    """What a worker's client may spend on one block (``None``: no limit of that kind)."""

    calls: int | None
    tokens: int | None


class _WorkItem(TypedDict):
    """One block for a decide worker: where its lines are, the events to resume from and
    what its model calls may spend."""

    block: _BlockFields
    name: str
    seed: list[_SeedEvent]
    allowance: _Allowance
    reservation: str | None
    """The key of the block's reservation (``None``: the policy reserves nothing)."""
    deadline: float | None
    """The run's deadline on the wall clock (``time.time()``; ``None``: no deadline): the
    worker starts no model attempt once it has passed (:class:`_BlockResult.late`)."""


_EventText: TypeAlias = tuple[str, str, str | None, str]
"""A case event a worker hands back: ``(key, type, case, canonical text of the payload)``."""


class _CaseResult(NamedTuple):
    """One line's outcome as a worker hands it back: a record with its events, or a reject."""

    line: int
    record: JsonObject | None
    """The record as JSON values (``CaseRecord.model_dump(mode="json")``), or None: a
    reject, or the record is the payload of the case's ``case/LINE/record`` event."""
    reject: JsonObject | None
    """The reject as JSON values, or None."""
    events: list[_EventText]
    """The case's events not yet journalled, in the order they happened."""


class _Stopped(TypedDict):
    """A stopped worker's answer (:meth:`_Decider.stop`)."""

    restarted: bool
    """Whether Ray restarted this worker since it was made: a block it has not started
    may then have been started by the worker that died (its spend unknown)."""
    spent: dict[str, tuple[int, int]]
    """``(attempts, tokens)`` of each block it started, by reservation key: sent or in
    flight when it stopped (in-flight attempts at their reserved worst case), final
    since no attempt is sent after a stop."""


class _Charge(NamedTuple):
    """What a resumed run's budget is charged (:func:`~dissensus.pipeline.durable.replay_spend`)
    for the model events of one case that a block added to the journal."""

    line: int
    attempts: int
    tokens: int


class _BlockResult(NamedTuple):
    """What a decide worker hands back for one block (pickled: one object per block)."""

    block: int
    """The block's index."""
    cases: list[_CaseResult]
    rss_mb: float
    cpu_s: float
    spent_calls: int = 0
    """Attempts the worker's client sent for the block (its allowance's budget)."""
    spent_tokens: int = 0
    """Tokens the worker's client used for the block."""
    charges: tuple[_Charge, ...] = ()
    """What a resumed run charges for each case's new events, once journalled (the cases
    that charge anything, in line order: :func:`_case_charge`)."""
    late: bool = False
    """The run's deadline stopped the block (a model attempt would have started after
    it): its cases are not taken, and the driver stops the run as its deadline says."""


def _rss_mb() -> float:
    """Peak resident memory of this process, in MB."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _fields(block: Block) -> _BlockFields:
    """``block`` as JSON."""
    return _BlockFields(
        index=block.index,
        first_line=block.first_line,
        n_lines=block.n_lines,
        path=block.path,
        offset=block.offset,
        length=block.length,
        lines=list(block.lines) if block.lines is not None else None,
        sha256=block.sha256,
    )


def _block_of(raw: _BlockFields) -> Block:
    lines = raw.get("lines")
    return Block(
        index=raw["index"],
        first_line=raw["first_line"],
        n_lines=raw["n_lines"],
        path=raw["path"],
        offset=raw["offset"],
        length=raw["length"],
        lines=tuple(lines) if lines is not None else None,
        sha256=raw.get("sha256"),
    )


def _wall_deadline(stop_at: float | None) -> float | None:
    """The run's deadline ``stop_at`` (the running event loop's clock) on the wall clock,
    which a worker's process shares (a cluster's machines keep it in step)."""
    if stop_at is None:
        return None
    return time.time() + (stop_at - asyncio.get_running_loop().time())


def _loop_deadline(deadline: float | None) -> float | None:
    """A wall-clock ``deadline`` (:func:`_wall_deadline`) on the running event loop's clock."""
    if deadline is None:
        return None
    return asyncio.get_running_loop().time() + (deadline - time.time())
