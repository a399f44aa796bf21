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
  the limit (at least :data:`BODY_MIN_S`) is over is answered ``408`` (field
  ``<body>``), not ``504``, and the connection is closed with it, so a slow client
  cannot hold a request or its connection open by trickling its body, and is told that
  its body, not the server, was slow. A request whose body had
  all arrived and whose answer did not start in time is the ``504``. A route whose work
  goes on after the time is over (the chat door's decision, once handed over, is
  journalled whole) says so by setting a :class:`TimeoutNote` on the scope under
  :data:`TIMEOUT_NOTE`: its ``504`` then carries the note's words, code, fields and
  headers (the chat door's names the case: ``docs/chat.md``).

The number of panels per request is checked by the decide and route handlers (it needs
the parsed body); it answers ``413`` too.

Errors are the service's JSON error body ``{"error": ..., "field": ...}``, except on the
OpenAI-compatible paths (:func:`openai_path`: ``/v1/chat/completions``, ``/v1/models``,
``/v1/cases/{id}`` and every other path under ``/v1/chat/``, ``/v1/models/`` and
``/v1/cases/`` but the review endpoint ``/v1/cases/{ref}/confirm``), where every
refusal, these middlewares' and the app's exception handlers' included, is OpenAI's
``{"error": {"message", "type", "param", "code"}}`` (:func:`error_document`), so an
OpenAI SDK raises its usual exception whichever layer refused the request. The status
is the same either way.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "TIMEOUT_NOTE",
    "BodyLimit",
    "RequestTimeout",
    "TimeoutNote",
    "error_body",
    "error_document",
    "openai_path",
    "openai_type",
    "send_error",
]

_OPENAI_CODES = {
    400: "invalid_request",
    401: "invalid_api_key",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    408: "request_timeout",
    409: "conflict",
    413: "request_too_large",
    415: "unsupported_media_type",
    431: "request_header_too_large",
    422: "invalid_request",
    429: "too_many_unknown_tokens",
    500: "internal",
    503: "unavailable",
    504: "timeout",
}
"""OpenAI's ``code`` of a refusal by status, where the refusing layer names none."""


def openai_path(path: str) -> bool:
    """Whether ``path`` is one of the OpenAI-compatible endpoints', whose errors are OpenAI's.

    ``/v1/chat/completions`` (and anything else under ``/v1/chat/``), ``/v1/models`` (and
    ``/v1/models/...``, where an SDK looks a model up) and everything under
    ``/v1/cases/`` (``/v1/cases/{id}``, and every path there that names no endpoint, so
    its 404 is the door's too) but ``/v1/cases/{ref}/confirm`` (one segment, then
    ``confirm``), a review endpoint that keeps the service's own error body. ``path`` is
    the request's decoded path (an ``%2F`` in a case id is a ``/`` here, as it is to the
    router)."""
    if path in ("/v1/chat/completions", "/v1/models"):
        return True
    if path.startswith(("/v1/chat/", "/v1/models/")):
        return True
    case = path.removeprefix("/v1/cases/")
    if case == path:
        return False
    ref, _, rest = case.partition("/")
    return not (ref and rest == "confirm")


def openai_type(status: int) -> str:
    """OpenAI's error ``type`` of a status."""
    if status == 401:
        return "authentication_error"
    if status == 403:
        return "permission_error"
    if status == 429:
        return "rate_limit_error"
    return "server_error" if status >= 500 else "invalid_request_error"


def error_document(
    status: int,
    error: str,
    field: str | None = None,
    *,
    path: str = "",
    code: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The JSON error document of a refusal of a request to ``path``: the service's own
    ``{"error", "field", **extra}``, or on an :func:`openai_path` OpenAI's ``{"error":
    {"message", "type", "param", "code", **extra}}`` (``param`` is the field; ``code``,
    when not given, follows the status)."""
    if not openai_path(path):
        return {"error": error, "field": field, **extra}
    return {
        "error": {
            "message": error,
            "type": openai_type(status),
            "param": field,
            "code": code or _OPENAI_CODES.get(status),
            **extra,
        }
    }


def error_body(
    error: str,
    field: str | None = None,
    *,
    status: int = 400,
    path: str = "",
    code: str | None = None,
    **extra: Any,
) -> bytes:
    """The JSON error document, encoded (see :func:`error_document`)."""
    document = error_document(status, error, field, path=path, code=code, **extra)
    return json.dumps(document, ensure_ascii=False).encode("utf-8")


async def send_error(
    send: Send,
    status: int,
    error: str,
    field: str | None = None,
    *,
    scope: Scope | None = None,
    code: str | None = None,
    fields: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> None:
    """Answer ``status`` with the error body of a request to ``scope``'s path
    (``fields``: more top-level fields of the document; ``headers``: more headers)."""
    path = str(scope.get("path", "")) if scope is not None else ""
    if fields:
        document = {**error_document(status, error, field, path=path, code=code), **fields}
        body = json.dumps(document, ensure_ascii=False).encode("utf-8")
    else:
        body = error_body(error, field, status=status, path=path, code=code)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *(
                    (k.lower().encode("latin-1"), v.encode("latin-1"))
                    for k, v in (headers or {}).items()
                ),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


BODY_MIN_S = 1.0
"""Least time a request body gets to arrive, whatever the request timeout."""


class _Refused(BaseException):
    """Raised from ``receive()`` to end the app's request: a :class:`BaseException` (as
    :class:`asyncio.CancelledError` is) so that a route's ``except Exception`` (the chat
    route answers any failure with a 500) cannot swallow it, and the middleware that
    raised it answers."""


class _TooLarge(_Refused):
    pass


class _SlowBody(_Refused):
    pass


class _StartWatch:
    """A ``send`` that passes every message on and notes when the response has started:
    after that no error can be answered in its place."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = False

    async def __call__(self, msg: Message) -> None:
        if msg["type"] == "http.response.start":
            self.started = True
        await self._send(msg)


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
                    await send_error(
                        send, 400, "invalid Content-Length", "Content-Length", scope=scope
                    )
                    return
                if declared > self.max_bytes:
                    await send_error(send, 413, message, "<body>", scope=scope)
                    return
        seen = 0
        tracked = _StartWatch(send)

        async def counted() -> Message:
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.max_bytes:
                    raise _TooLarge
            return msg

        try:
            await self.app(scope, counted, tracked)
        except _TooLarge:
            if not tracked.started:
                await send_error(send, 413, message, "<body>", scope=scope)


TIMEOUT_NOTE = "dissensus.timeout_note"
"""Scope key of a route's :class:`TimeoutNote`."""


@dataclass(frozen=True)
class TimeoutNote:
    """What a route's ``504`` says besides the time, when the route's work goes on after
    the request's time is over (set on the scope under :data:`TIMEOUT_NOTE`)."""

    message: str
    """Appended to the 504's message."""
    code: str | None = None
    """The error's ``code`` (``None``: the status's)."""
    fields: Mapping[str, Any] = field(default_factory=dict)
    """More top-level fields of the error document."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """More response headers."""


class RequestTimeout:
    """Answer 504 to requests that take longer than ``seconds`` (paths ending in ``exempt``
    excepted), and 408 to a request whose body is still arriving when the time is over."""

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
        loop = asyncio.get_running_loop()
        end = loop.time() + self.seconds
        body_end = max(end, loop.time() + BODY_MIN_S)
        tracked = _StartWatch(send)
        reading = False  # the app asked for the body
        body_done = False  # ... and has all of it

        def move(when: float) -> None:
            if not limit.expired():  # an expiring limit cannot be moved
                limit.reschedule(when)

        async def watched() -> Message:
            nonlocal reading, body_done
            if not body_done and not reading:
                reading = True
                move(body_end)  # the body gets at least BODY_MIN_S
            msg = await receive()
            if not body_done and (msg["type"] != "http.request" or not msg.get("more_body")):
                body_done = True
                move(end)
            return msg

        try:
            async with asyncio.timeout_at(end) as limit:
                await self.app(scope, watched, tracked)
        except TimeoutError:
            if tracked.started:
                return
            if reading and not body_done:
                await self._slow_body(send, scope)
            else:
                message = f"request took longer than {self.seconds:g} s"
                note = scope.get(TIMEOUT_NOTE)
                if isinstance(note, TimeoutNote):
                    await send_error(
                        send,
                        504,
                        message + note.message,
                        None,
                        scope=scope,
                        code=note.code,
                        fields=note.fields,
                        headers=note.headers,
                    )
                else:
                    await send_error(send, 504, message, None, scope=scope)

    async def _slow_body(self, send: Send, scope: Scope) -> None:
        message = f"request body not received within {max(self.seconds, BODY_MIN_S):g} s"
        # The connection closes with the answer: the rest of the body may still be on its
        # way, and a client trickling it must not keep the connection it came on.
        await send_error(send, 408, message, "<body>", scope=scope, headers={"Connection": "close"})

    async def _body_bounded(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the app with no limit on its own time but ``seconds`` to receive the body."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(self.seconds, BODY_MIN_S)
        body_done = False
        tracked = _StartWatch(send)

        async def timed() -> Message:
            nonlocal body_done
            if body_done:
                return await receive()
            # A timer on this task, not wait_for's task around each receive(): a body
            # that has arrived is read without a task made and scheduled for it.
            try:
                async with asyncio.timeout_at(deadline):
                    msg = await receive()
            except TimeoutError:
                raise _SlowBody from None
            if msg["type"] != "http.request" or not msg.get("more_body", False):
                body_done = True
            return msg

        try:
            await self.app(scope, timed, tracked)
        except _SlowBody:
            if not tracked.started:
                await self._slow_body(send, scope)
