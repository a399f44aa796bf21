"""``Cache-Control: no-store`` and ``X-Content-Type-Options: nosniff`` on the JSON API's
answers, as ASGI middleware.

The review pages send both (:func:`dissensus.serve.pages.render`); the JSON API's
answers carry the same case content (a review item's question, options and reasoning,
a run's records, a chat answer), so :class:`ApiHeaders` adds them to every response
under ``/v1`` that does not set them itself: no browser or proxy cache keeps a case
once it has been read, and no browser reads a JSON answer as another type.

Choices this module makes:

* Every ``/v1`` response, successes and refusals alike (the service's own JSON errors,
  the browser guard's, a 405): none of them is meant to be cached, and telling which
  carry case content would be a rule to keep up to date. A response that sets its own
  ``Cache-Control`` (an event stream's ``no-store``) keeps it.
* Outside ``/v1`` nothing is added: the review pages set their own headers, the static
  files and the API documentation may be cached, and ``/healthz`` and ``/readyz``
  carry nothing of a case.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["API_HEADERS", "ApiHeaders"]

API_HEADERS = ((b"cache-control", b"no-store"), (b"x-content-type-options", b"nosniff"))
"""The headers added to a ``/v1`` response that has none of that name."""


def _api(path: str) -> bool:
    return path == "/v1" or path.startswith("/v1/")


class ApiHeaders:
    """Adds :data:`API_HEADERS` to every ``/v1`` response (see the module docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _api(str(scope.get("path", ""))):
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers") or [])
                have = {bytes(name).lower() for name, _ in headers}
                headers += [(k, v) for k, v in API_HEADERS if k not in have]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, sending)
