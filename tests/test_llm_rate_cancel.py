"""A request cancelled while it waits for its request-rate slot gives the slot back.

The rate limiter kept every slot it handed out: twenty calls queued at ``rpm=60`` and
cancelled (a fan-out's deadline, a caller giving up) left the schedule twenty seconds
out, and the next call waited for slots nobody used.
"""

from __future__ import annotations

import asyncio
import itertools
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.llm import ChatRequest, ClientSettings, FunctionBackend, Message, ModelClient
from dissensus.llm.retry import RateLimiter


async def _cancel_waiters(limiter: RateLimiter, waiters: int, order: list[int]) -> None:
    tasks = [asyncio.create_task(limiter.wait()) for _ in range(waiters)]
    await asyncio.sleep(0.01)
    for index in order:
        tasks[index].cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


@settings(max_examples=40, deadline=None)
@given(data=st.data(), waiters=st.integers(1, 12))
def test_cancelled_waiters_leave_the_schedule_as_it_was(data: st.DataObject, waiters: int) -> None:
    order = data.draw(st.permutations(range(waiters)))

    async def run() -> float:
        limiter = RateLimiter(60.0)  # a slot a second
        await limiter.wait()  # one request started now: the next slot is a second out
        await _cancel_waiters(limiter, waiters, list(order))
        return limiter._next - time.monotonic()

    # The next slot is the one after the started request's, not after the cancelled ones'.
    assert asyncio.run(run()) <= 1.0


def test_a_cancelled_waiter_before_a_live_one_keeps_the_spacing() -> None:
    async def run() -> list[float]:
        limiter = RateLimiter(600.0)  # a slot every 0.1 s
        starts: list[float] = []

        async def start() -> None:
            await limiter.wait()
            starts.append(time.monotonic())

        first = asyncio.create_task(start())
        doomed = asyncio.create_task(start())
        live = asyncio.create_task(start())
        await asyncio.sleep(0.01)
        doomed.cancel()
        await asyncio.gather(first, live, return_exceptions=True)
        late = asyncio.create_task(start())
        await late
        return starts

    starts = asyncio.run(run())
    assert len(starts) == 3
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert all(gap >= 0.09 for gap in gaps), gaps


def test_the_next_call_after_cancelled_queued_calls_is_not_held() -> None:
    async def run() -> float:
        client = ModelClient(
            FunctionBackend(lambda request, mode: "ok"), settings=ClientSettings(rpm=60)
        )
        request = ChatRequest(messages=[Message(role="user", content="q")])
        await client.chat(request)
        tasks = [asyncio.create_task(client.chat(request)) for _ in range(20)]
        await asyncio.sleep(0.05)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        started = time.monotonic()
        await asyncio.wait_for(client.chat(request), 10)
        await client.aclose()
        return time.monotonic() - started

    assert asyncio.run(run()) < 2.0  # it waited twenty seconds
