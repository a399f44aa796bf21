"""The Ray engine as an executor of the one run loop (:class:`RayExecutor`, and
:func:`decide_ray`, the loop called with it): blocks planned, those complete in the
journal replayed, the others decided by a pool of workers (:class:`_Flight`) and handed
over in input order, the collector's thresholds raised meanwhile, and what is in flight
abandoned when the run stops.

The run's input is read as the run journalled it: planning hashes the file against its
journalled sha256 (another: :class:`~dissensus.errors.InputError` before any block is
sent) and gives each block its own bytes' sha256, which the worker deciding it (or the
driver replaying it from the journal) checks as it reads the block. A block that reads
otherwise (the file edited meanwhile) stops the run with the error a local run gives
(the worker's error raised in the driver as it is, never taken for a worker's death nor
sent again), before ``run.finished`` and without the block's records: the run resumes
once the file is put back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine
from typing import TYPE_CHECKING, Any, cast

from dissensus.engines.blocks import Block, plan_blocks, plan_text_blocks
from dissensus.engines.ray.cluster import RayOptions, _warm, ensure_ray
from dissensus.engines.ray.fault import _fault
from dissensus.engines.ray.flight import _DEPTH, _Flight
from dissensus.engines.ray.handover import _Handover
from dissensus.engines.ray.ledger import _Ledger
from dissensus.engines.ray.messages import _Monitor, _SeedEvent
from dissensus.engines.ray.pool import _deciders, _release
from dissensus.engines.ray.resume import _complete, _replayed, _seeds
from dissensus.errors import InputError
from dissensus.io.jsonl import Reject
from dissensus.states.collector import raised_gc_threshold
from dissensus.store import event_types as ev

if TYPE_CHECKING:
    from dissensus.pipeline.executors import Outcome, RunContext
    from dissensus.pipeline.records import CaseRecord


def _plan(ctx: RunContext, lines_per_block: int) -> list[Block]:
    if ctx.lines is not None:
        return plan_text_blocks(ctx.lines, lines_per_block)
    return plan_blocks(ctx.name, lines_per_block, ctx.sha256)


class RayExecutor:
    """The Ray engine as an executor of the one run loop (:func:`dissensus.pipeline.execute_run`).

    ``stats``, when given, receives ``blocks`` (planned), ``blocks_sent`` (decided by
    workers; the rest were complete in the journal), ``worker_rss_mb`` (the largest
    peak RSS a worker reported), ``worker_cpu_s`` (the CPU time, user and system,
    the workers' processes spent deciding the blocks, summed) and
    ``driver_decode_cpu_s`` (the CPU time the driver spent decoding what the workers
    handed back: records, events and their payloads).
    """

    # ``stats`` is the caller's dict, filled with the keys above (the CLI prints them).
    def __init__(
        self,
        options: RayOptions | None = None,
        stats: dict[str, Any] | None = None,  # figures for the caller
    ) -> None:
        self.options = options or RayOptions()
        self.stats = stats if stats is not None else {}

    def outcomes(self, ctx: RunContext) -> AsyncGenerator[Outcome, None]:
        # An async generator's protocol, kept by a hand-over of whole blocks (_Handover).
        return cast("AsyncGenerator[Outcome, None]", _Handover(self._blocks(ctx)))

    async def _blocks(self, ctx: RunContext) -> AsyncGenerator[list[Outcome], None]:
        """The run's outcomes a block at a time, in input order."""
        opts = self.options
        blocks = _plan(ctx, opts.lines_per_block)
        seeds = _seeds(ctx.journal, ctx.run_id)
        todo: list[tuple[Block, list[_SeedEvent]]] = []
        complete: dict[int, bool] = {}
        for block in blocks:
            done = _complete(block, seeds)
            complete[block.index] = done
            if not done:
                seed: list[_SeedEvent] = [
                    e
                    for line in range(block.first_line, block.last_line + 1)
                    for e in seeds.get(str(line), [])
                ]
                todo.append((block, seed))
        info = self.stats
        info.update(
            blocks=len(blocks),
            blocks_sent=len(todo),
            worker_rss_mb=0.0,
            worker_cpu_s=0.0,
            driver_decode_cpu_s=0.0,
        )
        flight: _Flight | None = None
        actors: list[Any] = []
        if todo:
            _warm(ctx.spec.policy.reading.similarity)
            workers = ensure_ray(opts)
            actors = _deciders(
                min(workers, len(todo)),
                (ctx.run_id, ctx.spec.started_fields(), _fault(), _monitor_of(ctx)),
            )
            ledger = _Ledger(ctx, slots=len(actors) * _DEPTH)
            flight = _Flight(ctx, todo, actors, ledger)
        collected = self._collect(ctx, blocks, complete, flight)
        finished = cancelled = False
        with raised_gc_threshold(*_RUN_GC_THRESHOLD):
            try:
                async for batch in collected:
                    yield batch
                finished = True
            except (asyncio.CancelledError, GeneratorExit):
                cancelled = True  # the run loop stopped taking outcomes (and journals no more)
                raise
            finally:
                try:
                    await collected.aclose()
                    if flight is not None and not finished:
                        # After a deadline the run loop journals what it was handed.
                        end = ctx.stop_at
                        late = end is not None and asyncio.get_running_loop().time() >= end
                        # Settled to the end even when cancelled again meanwhile (an
                        # interrupt's ``asyncio.run`` cancels its tasks once more: _settling).
                        await _settling(flight.abandon(handed=cancelled and not late))
                finally:
                    _release(actors)

    async def _collect(
        self,
        ctx: RunContext,
        blocks: list[Block],
        complete: dict[int, bool],
        flight: _Flight | None,
    ) -> AsyncGenerator[list[Outcome], None]:
        """The outcomes of ``blocks`` in order, a block at a time: replayed, or as the
        workers hand them back."""
        info = self.stats
        if flight is not None:
            flight.start()
        for block in blocks:
            if complete[block.index]:
                yield list(_replayed(ctx.journal, ctx.run_id, block))
                continue
            assert flight is not None  # a block not complete was sent
            result, outcomes, decode_s = await flight.next()
            if result.block != block.index:  # _Flight keeps the order; never mix
                raise InputError(
                    f"Ray returned block {result.block} where block {block.index} was due"
                )
            info["worker_rss_mb"] = max(info["worker_rss_mb"], result.rss_mb)
            info["worker_cpu_s"] += result.cpu_s
            info["driver_decode_cpu_s"] += decode_s
            yield outcomes


async def _settling(settle: Coroutine[Any, Any, None]) -> None:
    """Await ``settle`` (a run's abandon: :meth:`_Flight.abandon`) to its end whatever
    cancels the awaiting task meanwhile, then raise the cancellation it got, if any. An
    interrupted run is cancelled more than once: its task and the task it awaits, when
    the loop stops (``asyncio.run`` cancels every task left); a second cancellation
    landing while the workers are being stopped left every reservation in flight open,
    charged in full on resume (nearly the whole budget left). A second *signal* still
    stops the command at once (the command line raises it where it lands)."""
    task = asyncio.ensure_future(settle)
    cancelled = False
    while True:
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done():  # the settling itself was cancelled, not the awaiting task
                raise
            cancelled = True
            continue
        break
    if cancelled:
        raise asyncio.CancelledError


_RUN_GC_THRESHOLD = (250_000, 20, 100)
"""The collector's thresholds while a run's blocks come back, at least (one raise shared
with the process's other runs, its original thresholds restored when the last ends:
:func:`~dissensus.states.collector.raised_gc_threshold`): a decoded block is some
hundred thousand fresh containers (about 83,000 for 512 synthetic 5-agent panels),
alive until the loop has journalled them, which the default thresholds (700, 10, 10) would have the collector walk again and again (about a
third of the driver's CPU). The first threshold is about three such blocks: one block
being journalled while the next is decoded stays under it, so the collector runs when
the heap grows, not once a block (50,000 had it walk about a block each time: 9 us of
the driver's CPU per panel, against 3 us)."""


def _monitor_of(ctx: RunContext) -> _Monitor:
    """The acceptance monitor's verdicts by stratum, read from the run's journal as this
    invocation starts (:func:`~dissensus.pipeline.runtime.monitor_verdicts`; none for a
    run without an acceptance file), and the suspensions the run journalled already, as
    JSON for the workers: a worker's journal holds only its block's events, neither the
    audits nor the suspensions of the run's journal."""
    from dissensus.pipeline.runtime import monitor_verdicts

    if ctx.spec.acceptance is None:
        return _Monitor(verdicts={}, journalled=[])
    verdicts = monitor_verdicts(ctx.journal, ctx.spec.acceptance)
    journalled = [
        _SeedEvent(key=e.key, type=e.type, case=e.case, payload=e.payload)
        for e in ctx.journal.events(ctx.run_id, type=ev.ACCEPTANCE_SUSPENDED)
    ]
    return _Monitor(
        verdicts={name: step.model_dump(mode="json") for name, step in verdicts.items()},
        journalled=journalled,
    )


def decide_ray(
    journal: Any,
    run_id: str,
    *,
    on_reject: Callable[[Reject], None] | None = None,
    options: RayOptions | None = None,
    stats: dict[str, Any] | None = None,  # figures for the caller (bench_scale)
    deadline_s: float | None = None,
) -> AsyncIterator[CaseRecord]:
    """Decide (or finish deciding) a run on Ray: the one run loop with a :class:`RayExecutor`
    (its records handed straight through, without a generator of its own around them)."""
    from dissensus.pipeline.batch import execute_run

    return execute_run(
        journal,
        run_id,
        on_reject=on_reject,
        deadline_s=deadline_s,
        executor=RayExecutor(options, stats),
    )
