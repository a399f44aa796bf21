"""An attempt cancelled while it waited for a concurrency slot was never sent.

Cancelling calls queued behind a slow one (a fan-out's deadline, a caller giving up)
counted every queued call as an attempt, in the client's usage and in the budget's
count: ten cancelled calls of which one was sent read as ten attempts, and a shared
budget refused later work for attempts no server saw. Only the sent one counts now.
"""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.llm import Budget, ChatRequest, FunctionBackend, Message, ModelClient
from dissensus.llm.base import BackendResponse
from dissensus.llm.client import ClientSettings


async def _cancel_queued(concurrency: int, calls: int, rpm: float | None) -> tuple[int, int, int]:
    release = asyncio.Event()
    started = 0

    async def handler(request: ChatRequest, mode: object) -> str | BackendResponse:
        nonlocal started
        started += 1
        await release.wait()
        return "late"

    budget = Budget(max_calls=1000)
    client = ModelClient(
        FunctionBackend(handler),
        budget=budget,
        settings=ClientSettings(concurrency=concurrency, max_retries=0, rpm=rpm),
    )
    request = ChatRequest(messages=[Message(role="user", content="q")])
    tasks = [asyncio.create_task(client.chat(request)) for _ in range(calls)]
    for _ in range(20):
        await asyncio.sleep(0)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await client.aclose()
    assert budget._reserved[0] == 0  # every reservation released or settled
    return started, client.usage.attempts, budget.spent.attempts


@settings(max_examples=25, deadline=None)
@given(concurrency=st.integers(1, 4), calls=st.integers(1, 12), rpm=st.sampled_from([None, 6.0]))
def test_only_sent_attempts_count_after_a_cancel(
    concurrency: int, calls: int, rpm: float | None
) -> None:
    started, attempts, spent = asyncio.run(_cancel_queued(concurrency, calls, rpm))
    assert started <= min(concurrency, calls)
    assert attempts == started
    assert spent == started


def test_a_budget_is_whole_again_after_queued_calls_are_cancelled() -> None:
    started, attempts, spent = asyncio.run(_cancel_queued(1, 10, None))
    assert (started, attempts, spent) == (1, 1, 1)
