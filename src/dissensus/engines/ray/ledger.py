"""The run's budget shared between blocks (:class:`_Ledger`): each block's allowance
(:func:`_share` of what is left), journalled as a reservation (``model.reserved``) before
the block is sent and settled (``model.settled``) when it is back, lost with a worker
that died, or abandoned with what its worker spent."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from dissensus.engines.blocks import Block
from dissensus.engines.ray.messages import _Allowance, _BlockResult
from dissensus.store import event_types as ev

if TYPE_CHECKING:
    from dissensus.pipeline.executors import RunContext
    from dissensus.store.journal import NewEvent


def _share(left: int, slots: int, free: int) -> int:
    """A block's allowance of one limit: what is left of it (limit minus spent) divided
    by ``slots``, rounded up, and no more than ``free`` (left minus open reservations)."""
    return max(0, min(free, -(-max(0, left) // max(1, slots))))


class _Ledger:
    """The driver's account of the run's budget: what was spent (journalled before this
    invocation, charged as a resumed run charges it, and what the blocks back since
    report) and what the blocks in flight hold; it journals each block's reservation
    (``model.reserved``) before the block is sent and makes its settlement
    (``model.settled``). A policy without a call or token limit reserves nothing."""

    def __init__(self, ctx: RunContext, slots: int) -> None:
        from dissensus.llm.budget import Budget
        from dissensus.pipeline.durable import replay_spend

        limits = ctx.spec.policy.budget
        self.journal = ctx.journal
        self.run_id = ctx.run_id
        self.max_calls: int | None = limits.max_calls
        self.max_tokens: int | None = limits.max_tokens
        self.slots = slots
        self.limited = self.max_calls is not None or self.max_tokens is not None
        self.calls = 0
        self.tokens = 0
        self.open: dict[str, _Allowance] = {}
        self.attempts: Counter[int] = Counter()
        """The next attempt of each block (reservations journalled by earlier invocations)."""
        if not self.limited:
            return
        spent = replay_spend(ctx.journal, ctx.run_id, Budget())
        self.calls, self.tokens = spent.attempts, spent.total_tokens
        for event in ctx.journal.events(ctx.run_id, type=ev.MODEL_RESERVED):
            block = int(event.payload["block"])
            after = int(event.payload["attempt"]) + 1
            self.attempts[block] = max(self.attempts[block], after)

    def reserve(self, block: Block, waiting: int) -> tuple[str | None, _Allowance]:
        """Journal (one commit) the allowance of ``block``'s next attempt, ``waiting``
        blocks (this one included) still to be sent; its key and the allowance."""
        if not self.limited:
            return None, _Allowance(calls=None, tokens=None)
        from dissensus.pipeline.run_events import ModelReserved

        slots = min(self.slots, len(self.open) + waiting)
        calls = tokens = None
        if self.max_calls is not None:
            left = self.max_calls - self.calls
            held = sum(a["calls"] or 0 for a in self.open.values())
            calls = _share(left, slots, left - held)
        if self.max_tokens is not None:
            left = self.max_tokens - self.tokens
            held = sum(a["tokens"] or 0 for a in self.open.values())
            tokens = _share(left, slots, left - held)
        attempt = self.attempts[block.index]
        self.attempts[block.index] = attempt + 1
        key = f"reserved/{block.index}/{attempt}"
        payload = ModelReserved(
            block=block.index,
            attempt=attempt,
            first_line=block.first_line,
            last_line=block.last_line,
            calls=calls,
            tokens=tokens,
        ).payload()
        self.journal.append(self.run_id, ev.MODEL_RESERVED, payload, key=key)
        allowance = _Allowance(calls=calls, tokens=tokens)
        self.open[key] = allowance
        return key, allowance

    def settle(self, key: str | None, result: _BlockResult) -> NewEvent | None:
        """The block is back: what it spent is charged, the rest of its allowance is free
        again; the ``model.settled`` event to append with the block's events."""
        if key is None:
            return None
        from dissensus.pipeline.run_events import ModelSettled
        from dissensus.store.journal import NewEvent

        self.release(key, result)
        payload = ModelSettled(
            reservation=key, attempts=result.spent_calls, tokens=result.spent_tokens
        ).payload()
        return NewEvent(ev.MODEL_SETTLED, payload, _settled_key(key))

    def release(self, key: str, result: _BlockResult) -> None:
        """The block of reservation ``key`` is back (its worker spends nothing more): what
        it spent is charged, the rest of its allowance is free again (once: its
        settlement, :meth:`settle`, may follow)."""
        if self.open.pop(key, None) is not None:
            self.calls += result.spent_calls
            self.tokens += result.spent_tokens

    def starved(self, waiting: int) -> bool:
        """Whether the open reservations hold so much that the next block (``waiting``
        still to be sent, this one included) would get less than its share of what is
        left (:func:`_share`): after a worker's death, whose reservation is charged in
        full, until the blocks in flight are back."""
        if not self.limited:
            return False
        slots = min(self.slots, len(self.open) + waiting)
        held_calls = sum(a["calls"] or 0 for a in self.open.values())
        held_tokens = sum(a["tokens"] or 0 for a in self.open.values())
        for limit, spent, held in (
            (self.max_calls, self.calls, held_calls),
            (self.max_tokens, self.tokens, held_tokens),
        ):
            if limit is None:
                continue
            left = limit - spent
            if _share(left, slots, left - held) < _share(left, slots, left):
                return True
        return False

    def abandoned(self, key: str, attempts: int, tokens: int) -> NewEvent:
        """The ``model.settled`` of a reservation whose block the run abandoned (its events
        are never journalled): ``attempts`` and ``tokens`` are what its worker sent or had
        in flight when stopped, which a resumed run charges
        (:func:`~dissensus.pipeline.durable.replay_spend`)."""
        from dissensus.pipeline.run_events import ModelSettled
        from dissensus.store.journal import NewEvent

        self.open.pop(key, None)
        payload = ModelSettled(
            reservation=key, attempts=attempts, tokens=tokens, abandoned=True
        ).payload()
        return NewEvent(ev.MODEL_SETTLED, payload, _settled_key(key))

    def lose(self, key: str | None) -> None:
        """The block's worker died: all of its allowance counts as spent (the reservation
        stays open in the journal, so a resumed run charges it too)."""
        if key is None:
            return
        allowance = self.open.pop(key)
        self.calls += allowance["calls"] or 0
        self.tokens += allowance["tokens"] or 0


def _settled_key(key: str) -> str:
    """The key of the settlement of reservation ``key``."""
    return "settled/" + key.removeprefix("reserved/")
