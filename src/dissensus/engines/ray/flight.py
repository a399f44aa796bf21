"""The blocks on their way to and from the workers (:class:`_Flight`): sent as a worker's
place is free, each after its reservation is journalled, taken back in block order
(waiting and decoding on a thread of their own), sent again after a worker's death, and
abandoned when the run stops in the driver (their reservations settled with what their
workers spent)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections import deque
from typing import TYPE_CHECKING, Any, NamedTuple

from dissensus.engines.blocks import Block
from dissensus.engines.ray.attempts import MAX_ATTEMPTS, _Deaths, _deaths, _worker_died
from dissensus.engines.ray.cluster import _ray
from dissensus.engines.ray.codec import _decoded
from dissensus.engines.ray.ledger import _Ledger, _settled_key
from dissensus.engines.ray.messages import (
    _BlockResult,
    _fields,
    _SeedEvent,
    _wall_deadline,
    _WorkItem,
)
from dissensus.engines.ray.pool import _restarted, _send, _stop_all
from dissensus.errors import DissensusError

if TYPE_CHECKING:
    from dissensus.pipeline.executors import Outcome, RunContext
    from dissensus.store.journal import NewEvent


_DEPTH = 2
"""Blocks in flight per worker: one being decided, one waiting, so a worker never idles
while the driver takes its last result."""


class _Sent(NamedTuple):
    """A block sent to a worker."""

    ref: Any
    """Ray's reference to the result."""
    actor: Any
    block: Block
    seed: list[_SeedEvent]
    reservation: str | None


class _Flight:
    """The blocks on their way to and from the workers, taken back in block order: each
    block goes to a worker as soon as one of its :data:`_DEPTH` places is free (the
    worker whose result was taken last getting the next), after its reservation is
    journalled (:class:`_Ledger`), all on the run loop's thread; only waiting for a
    result and decoding it happen on a thread of their own. A block whose worker died
    goes again, to the restarted worker, under a new reservation, up to ``attempts``
    (:data:`MAX_ATTEMPTS`) in all: a death on the last raises :class:`WorkerDied`."""

    def __init__(
        self,
        ctx: RunContext,
        todo: list[tuple[Block, list[_SeedEvent]]],
        actors: list[Any],
        ledger: _Ledger,
        attempts: int = MAX_ATTEMPTS,
    ) -> None:
        self.ctx = ctx
        self.waiting = deque(todo)
        self.actors = actors
        self.ledger = ledger
        self.flight: deque[_Sent] = deque()
        self.deaths = _Deaths(attempts)
        self.handed: dict[str, _BlockResult] = {}
        """The results of the blocks handed to the run loop (their cases decoded, and
        dropped: what the worker spent, in all and by case), by reservation key, until
        their settlement is journalled with their last case."""
        self.early: dict[str, tuple[_BlockResult, list[Outcome], float]] = {}
        """Blocks taken back ahead of their turn (:meth:`_make_room`), by reservation key."""

    def start(self) -> None:
        for _ in range(_DEPTH):
            for actor in self.actors:
                self._next_to(actor)

    def _next_to(self, actor: Any) -> None:
        if self.waiting:
            block, seed = self.waiting.popleft()
            self.flight.append(self._send(actor, block, seed, len(self.waiting) + 1))

    def _send(self, actor: Any, block: Block, seed: list[_SeedEvent], waiting: int) -> _Sent:
        key, allowance = self.ledger.reserve(block, waiting)
        item = _WorkItem(
            block=_fields(block),
            name=self.ctx.name,
            seed=seed,
            allowance=allowance,
            reservation=key,
            deadline=_wall_deadline(self.ctx.stop_at),
        )
        ref = _send(actor, json.dumps(item, ensure_ascii=False))
        return _Sent(ref, actor, block, seed, key)

    async def next(self) -> tuple[_BlockResult, list[Outcome], float]:
        """The next block's result, its outcomes (the last one carrying the settlement of
        its reservation) and the CPU s spent decoding it."""
        deaths = _deaths()
        while True:
            sent = self.flight[0]
            try:
                early = self.early.pop(sent.reservation, None) if sent.reservation else None
                if early is not None:
                    result, outcomes, decode_s = early
                else:
                    result, outcomes, decode_s = await asyncio.to_thread(_take, sent.ref)
            except deaths as exc:
                self.ledger.lose(sent.reservation)
                if not self.deaths.died(sent.block.index):
                    # The blocks in flight are abandoned (their reservations settled
                    # with what their workers spent: abandon); the run loop committed the blocks back
                    # before this one while it waited for it.
                    raise _worker_died(
                        self.ctx.run_id,
                        self.ctx.name,
                        sent.block,
                        self.deaths.counts[sent.block.index],
                        exc,
                        self.ctx.journal.path,
                    ) from None
                # Sent again once the restarted worker answers: a block sent to a worker
                # Ray is still restarting fails at once, an attempt lost for nothing.
                await asyncio.to_thread(_restarted, sent.actor)
                waiting = len(self.waiting) + 1
                await self._make_room(waiting)
                self.flight[0] = self._send(sent.actor, sent.block, sent.seed, waiting)
                continue
            break
        if result.late:
            from dissensus.pipeline.durable import PastDeadline

            # The block stays in flight: the stop settles its reservation with what its
            # worker sent (abandon), and the run loop stops as at its deadline.
            raise PastDeadline()
        self.flight.popleft()
        settled = self.ledger.settle(sent.reservation, result)
        if sent.reservation is not None:
            journal, run_id = self.ctx.journal, self.ctx.run_id
            for key in [k for k in self.handed if journal.get(run_id, _settled_key(k))]:
                del self.handed[key]
            self.handed[sent.reservation] = result._replace(cases=[])
        if settled is not None:
            if outcomes:
                # In the transaction that appends the block's last case: its events are
                # durable when the reservation stops counting.
                last = outcomes[-1]
                outcomes[-1] = dataclasses.replace(last, events=[*last.events, settled])
            else:
                self.ctx.journal.append_batch(self.ctx.run_id, [settled])
        self._next_to(sent.actor)
        return result, outcomes, decode_s

    async def _make_room(self, waiting: int) -> None:
        """Before a dead worker's block is sent again: when the open reservations leave
        it less than its share (:meth:`_Ledger.starved`: the dead attempt is charged its
        whole reservation, its spend unknown, and the blocks in flight hold the rest),
        take the blocks in flight back first, ahead of their turn, so that what they did
        not spend is free again for it (with an ample budget it then gets what an
        undisturbed block gets, and its records are the same). A block whose worker
        died too, or stopped at the deadline, is left for its turn."""
        deaths = _deaths()
        for sent in list(self.flight)[1:]:
            if not self.ledger.starved(waiting):
                return
            key = sent.reservation
            if key is None or key in self.early:
                continue
            try:
                taken = await asyncio.to_thread(_take, sent.ref)
            except deaths:
                continue  # its turn raises it again (Ray keeps the error)
            self.early[key] = taken
            if not taken[0].late:
                self.ledger.release(key, taken[0])

    async def abandon(self, *, handed: bool) -> None:
        """The run stopped before its blocks were all journalled: stop the workers of the
        blocks in flight (no attempt is sent any more) and settle each block's
        reservation with what its worker had sent or had in flight (``abandoned``); with
        ``handed``, also those of the blocks handed to the run loop whose last case is
        not journalled (the run loop was cancelled: it journals nothing more), with what
        their worker reported less what their journalled cases' own events charge
        (:meth:`_unjournalled`). A worker that does not answer (dead, restarting, too
        slow), or a restarted one that never started the block (the worker that died
        may have), leaves the reservation open: charged in full on resume. Best effort:
        the journal failing here leaves them open too."""
        sends = [s for s in self.flight if s.reservation is not None]
        answers = await asyncio.to_thread(_stop_all, [s.actor for s in sends]) if sends else {}
        events: list[NewEvent] = []
        for sent in sends:
            key = sent.reservation
            answer = answers.get(id(sent.actor))
            assert key is not None
            if answer is None:
                continue
            if key in answer["spent"]:
                attempts, tokens = answer["spent"][key]
            elif answer["restarted"]:
                continue
            else:  # not started, and a stopped worker never will
                attempts = tokens = 0
            events.append(self.ledger.abandoned(key, attempts, tokens))
        journal, run_id = self.ctx.journal, self.ctx.run_id
        try:
            if handed:
                for key, result in self.handed.items():
                    if journal.get(run_id, _settled_key(key)) is None:
                        events.append(self.ledger.abandoned(key, *self._unjournalled(result)))
            fresh = [e for e in events if journal.get(run_id, e.key) is None]
            if fresh:
                journal.append_batch(run_id, fresh)
        except Exception:  # the journal went away: the reservations stay open
            return

    def _unjournalled(self, result: _BlockResult) -> tuple[int, int]:
        """``(attempts, tokens)`` that the cases not journalled of a block handed to the
        run loop spent: what its worker spent less what its journalled cases' own events
        charge a resumed run (``model.call``, ``model.failed``, ``model.sent``:
        :class:`_Charge`), so that a resume charges each of the block's attempts once.

        Exact because a case's events and its record are appended in one commit, the
        loop appends a block's cases in line order (in one commit or several: it commits
        every :data:`~dissensus.pipeline.batch.BLOCK_CASES` cases), so those journalled
        come first, and it appends nothing once cancelled, which is when this is called.
        Wherever that would not hold, the error is an over-charge: the count stops at the
        first case with a charge whose record is not journalled (one journalled after it
        is charged twice), a case journalled after this count is charged twice, and a
        settlement is never below 0. A case is never charged by neither: its record is
        journalled only with its events. A kill before the settlement is journalled
        leaves the reservation open, charged in full besides the journalled cases."""
        journal, run_id = self.ctx.journal, self.ctx.run_id
        attempts, tokens = result.spent_calls, result.spent_tokens
        for charge in result.charges:
            if journal.get(run_id, f"case/{charge.line}/record") is None:
                break
            attempts -= charge.attempts
            tokens -= charge.tokens
        return max(0, attempts), max(0, tokens)


def _take(ref: Any) -> tuple[_BlockResult, list[Outcome], float]:
    """The block Ray hands back for ``ref`` (waiting for it), decoded (:func:`_decoded`).
    A :class:`~dissensus.errors.DissensusError` the worker raised (its block's bytes
    changed since they were planned) is raised as it is, its one line without Ray's
    traceback: the worker lives on, and the block is not sent again (the run stops)."""
    ray = _ray()
    try:
        raw: bytes = ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        if isinstance(exc.cause, DissensusError):
            raise exc.cause from None
        raise WorkerFailed(exc.cause) from exc
    return _decoded(raw)


class WorkerFailed(RuntimeError):
    """A worker's block failed with an error not of dissensus's own (a bug, or the machine):
    its type and first line, without Ray's traceback (pid, address, colour codes), which
    stays on the exception's cause for a debugger."""

    def __init__(self, cause: BaseException | None) -> None:
        what = f"{type(cause).__name__}: {cause}" if cause is not None else "unknown error"
        super().__init__(f"a Ray worker failed: {what.splitlines()[0] if what else what}")
