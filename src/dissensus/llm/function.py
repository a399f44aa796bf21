"""A backend made of one plain function: the in-process double of a model server.

Like httpx's ``MockTransport(handler)``, :class:`FunctionBackend` wraps a handler that
receives each attempt (the request and the structured-output mode) and returns the
answer. Policy stays in :class:`~dissensus.llm.client.ModelClient`, so a test or an
offline tool drives the real client (retries, re-asks, budget, usage) through it.

>>> from dissensus.llm import ChatRequest, Message, ModelClient
>>> backend = FunctionBackend(lambda request, mode: request.messages[-1].content.upper())
>>> with ModelClient(backend) as client:
...     client.chat_sync(ChatRequest(messages=[Message(role="user", content="hi")])).text
'HI'

Choices where nothing else decides:

* The handler may be synchronous or ``async`` and may return text or a full
  :class:`~dissensus.llm.base.BackendResponse`. It may raise
  :class:`~dissensus.llm.base.BackendError` to simulate a failed attempt; any other
  exception reaches the client, which reports it as an unexpected backend failure.
* For text answers the usage is what a server counting like
  :func:`~dissensus.llm.base.estimate_tokens` would report (the completion capped at
  ``max_tokens``), unless fixed ``tokens=(prompt, completion)`` are given.
* Every attempt is kept in ``sent`` (request and mode, in arrival order), and the
  largest number of attempts in flight at once in ``max_in_flight``.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable

from dissensus.llm.base import BackendResponse, ChatRequest, JsonMode, estimate_tokens

__all__ = ["FunctionBackend", "Handler"]

Handler = Callable[
    [ChatRequest, JsonMode],
    str | BackendResponse | Awaitable[str | BackendResponse],
]
"""What a :class:`FunctionBackend` calls for every attempt."""


class FunctionBackend:
    """A :class:`~dissensus.llm.base.ChatBackend` answering with ``handler(request, mode)``."""

    provider = "dissensus.function"

    def __init__(
        self,
        handler: Handler,
        *,
        model_id: str = "function",
        tokens: tuple[int, int] | None = None,
    ) -> None:
        self.handler = handler
        self.model_id = model_id
        self.tokens = tokens
        """Fixed (prompt, completion) tokens reported for text answers; None = estimated."""
        self.sent: list[tuple[ChatRequest, JsonMode]] = []
        """Every attempt received, in order."""
        self.in_flight = 0
        self.max_in_flight = 0

    def __repr__(self) -> str:
        return f"FunctionBackend(model_id={self.model_id!r})"

    async def send(self, request: ChatRequest, *, json_mode: JsonMode) -> BackendResponse:
        self.sent.append((request, json_mode))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0)  # let concurrent attempts interleave, as over a network
            answer = self.handler(request, json_mode)
            if inspect.isawaitable(answer):
                answer = await answer
        finally:
            self.in_flight -= 1
        if isinstance(answer, BackendResponse):
            return answer
        if self.tokens is not None:
            prompt, completion = self.tokens
        else:
            prompt = estimate_tokens(request.prompt_text())
            completion = min(estimate_tokens(answer), request.max_tokens or 10**9)
        return BackendResponse(
            text=answer,
            model=self.model_id,
            prompt_tokens=prompt,
            completion_tokens=completion,
            finish_reason="stop",
        )

    async def aclose(self) -> None:
        return None
