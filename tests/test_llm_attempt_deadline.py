"""An attempt of a backend that keeps no deadline of its own (an in-process function) is
cut off by the client shortly after ``timeout_s``: before, a hanging handler held the
call, and a deliberation waiting on it, for as long as it hung."""

from __future__ import annotations

import asyncio
import time

import pytest

from dissensus.llm import ChatRequest, Message, ModelClient
from dissensus.llm.base import ModelCallError
from dissensus.llm.client import ATTEMPT_GRACE_S, ClientSettings
from dissensus.llm.function import FunctionBackend


def _request() -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content="hi")])


def test_a_hanging_in_process_attempt_times_out_and_is_retried() -> None:
    calls: list[float] = []

    async def handler(request: ChatRequest, mode: str) -> str:
        calls.append(time.monotonic())
        if len(calls) == 1:
            await asyncio.sleep(30)  # hangs: the first attempt only
        return "answer"

    settings = ClientSettings(timeout_s=0.2, max_retries=1, backoff_base_s=0.0)
    with ModelClient(FunctionBackend(handler), settings=settings) as client:
        started = time.monotonic()
        answer = client.chat_sync(_request())
        took = time.monotonic() - started
    assert answer.text == "answer" and len(calls) == 2
    assert took < 0.2 + ATTEMPT_GRACE_S + 2.0


def test_an_attempt_that_always_hangs_fails_as_a_timeout() -> None:
    async def handler(request: ChatRequest, mode: str) -> str:
        await asyncio.sleep(30)
        return "never"

    settings = ClientSettings(timeout_s=0.1, max_retries=0)
    with (
        ModelClient(FunctionBackend(handler), settings=settings) as client,
        pytest.raises(ModelCallError) as info,
    ):
        client.chat_sync(_request())
    assert info.value.kind == "timeout"
    assert "no answer within 0.1 s" in str(info.value)
