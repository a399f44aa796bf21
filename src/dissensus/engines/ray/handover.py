"""The executor's outcomes handed to the run loop a whole block at a time
(:class:`_Handover`): an async generator's protocol, each outcome of a block already
decoded a done future, so the loop takes it without a task or a turn of the event loop."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dissensus.pipeline.executors import Outcome


class _Handover:
    """The outcomes of a stream of blocks, one at a time, as an async generator hands
    them over (``anext``, ``async for``, ``aclose``), where every outcome of a block
    already decoded comes as a *done* future: the run loop takes it without a task of
    its own or a turn of the event loop. Only the first outcome of a block that is
    still to come is a task (waiting for the block), so the loop commits what it holds
    meanwhile, as it would with a generator."""

    def __init__(self, blocks: AsyncGenerator[list[Outcome], None]) -> None:
        self._blocks = blocks
        self._ready: deque[Outcome] = deque()

    def __aiter__(self) -> _Handover:
        return self

    def __anext__(self) -> asyncio.Future[Outcome]:
        loop = asyncio.get_running_loop()
        if self._ready:
            done: asyncio.Future[Outcome] = loop.create_future()
            done.set_result(self._ready.popleft())
            return done
        return loop.create_task(self._first())

    async def _first(self) -> Outcome:
        """The first outcome of the next block that has any (StopAsyncIteration: none)."""
        while not self._ready:
            self._ready.extend(await anext(self._blocks))
        return self._ready.popleft()

    async def aclose(self) -> None:
        self._ready.clear()
        await self._blocks.aclose()
