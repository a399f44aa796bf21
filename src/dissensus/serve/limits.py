"""Request limits of ``dissensus serve``: body size and request time, as ASGI middleware.

* **Body size.** A ``Content-Length`` above the limit is answered ``413`` before the body
  is read; a body without a length (chunked) is counted as it arrives and cut off with
  ``413`` as soon as it passes the limit. Either way the handler never sees it, so
  nothing is journalled.
* **Request time.** A request still running after the limit is answered ``504``
  (when no byte of the response was sent yet). Server-sent event streams are exempt:
  they last as long as the run they follow; ``/v1/decide`` enforces the limit itself, so
  that its 504 can name the run, which goes on and can be polled. Reading the request
  body is bounded on every path, the exempt ones included: a body still arriving when
  the limit (at least :data:`BODY_MIN_S`) is over is answered ``408`` (field ``<body>``), so a slow client cannot
  hold a request open by trickling its body.

The number of panels per request is checked by the decide and route handlers (it needs
the parsed body); it answers ``413`` too.

Errors are the service's JSON error body ``{"error": ..., "field": ...}``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["BodyLimit", "RequestTimeout", "error_body", "send_error"]


def error_body(error: str, field: str | None = None, **extra: Any) -> bytes:
    """The JSON error document."""
    return json.dumps({"error": error, "field": field, **extra}, ensure_ascii=False).encode("utf-8")


async def send_error(send: Send, status: int, error: str, field: str | None = None) -> None:
    body = error_body(error, field)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


BODY_MIN_S = 1.0
"""Least time a request body gets to arrive, whatever the request timeout."""


class _TooLarge(Exception):
    pass


class _SlowBody(Exception):
    pass


class BodyLimit:
    """Answer 413 to request bodies larger than ``max_bytes``."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        message = f"request body larger than {self.max_bytes} bytes"
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await send_error(send, 400, "invalid Content-Length", "Content-Length")
                    return
                if declared > self.max_bytes:
                    await send_error(send, 413, message, "<body>")
                    return
        seen = 0
        started = False

        async def counted() -> Message:
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.max_bytes:
                    raise _TooLarge
            return msg

        async def tracked(msg: Message) -> None:
            nonlocal started
            if msg["type"] == "http.response.start":
                started = True
            await send(msg)

        try:
            await self.app(scope, counted, tracked)
        except _TooLarge:
            if not started:
                await send_error(send, 413, message, "<body>")


class RequestTimeout:
    """Answer 504 to requests that take longer than ``seconds`` (paths ending in ``exempt`` excepted)."""

    def __init__(
        self, app: ASGIApp, seconds: float, exempt: tuple[str, ...] = ("/events", "/v1/decide")
    ) -> None:
        self.app = app
        self.seconds = seconds
        self.exempt = exempt

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if str(scope.get("path", "")).endswith(self.exempt):
            await self._body_bounded(scope, receive, send)
            return
        started = False

        async def tracked(msg: Message) -> None:
            nonlocal started
            if msg["type"] == "http.response.start":
                started = True
            await send(msg)

        try:
            await asyncio.wait_for(self.app(scope, receive, tracked), self.seconds)
        except TimeoutError:
            if not started:
                await send_error(send, 504, f"request took longer than {self.seconds:g} s", None)

    async def _body_bounded(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the app with no limit on its own time but ``seconds`` to receive the body."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(self.seconds, BODY_MIN_S)
        body_done = False
        started = False

        async def timed() -> Message:
            nonlocal body_done
            if body_done:
                return await receive()
            remaining = deadline - loop.time()
            try:
                msg = await asyncio.wait_for(receive(), max(remaining, 0.0))
            except TimeoutError:
                raise _SlowBody from None
            if msg["type"] != "http.request" or not msg.get("more_body", False):
                body_done = True
            return msg

        async def tracked(msg: Message) -> None:
            nonlocal started
            if msg["type"] == "http.response.start":
                started = True
            await send(msg)

        try:
            await self.app(scope, timed, tracked)
        except _SlowBody:
            if not started:
                message = f"request body not received within {self.seconds:g} s"
                await send_error(send, 408, message, "<body>")
