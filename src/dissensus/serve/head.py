"""``HEAD`` on every ``GET`` path of ``dissensus serve``, as ASGI middleware.

FastAPI routes answer only the methods they name, so ``HEAD /healthz`` (what load
balancers, uptime checks and ``curl -I`` send) would be a ``405``. :class:`HeadAsGet`
hands a ``HEAD`` request to the app as the ``GET`` of the same path, with the same
headers, so it passes the same checks (token, role, ``Host``) and gets the same status
and headers; the server sends no body for it (uvicorn drops a ``HEAD`` response's body,
as HTTP requires).

Choices this module makes:

* **Streams end at their headers.** A ``GET`` that answers with a stream (a run's
  ``/events``) would go on for as long as the run; for ``HEAD`` the response is
  completed right after its headers, and the stream is told the client has gone
  (``http.disconnect``), so it stops.
* A path without a ``GET`` answers ``HEAD`` with the same ``405`` (naming what it takes
  in ``Allow``) or ``404`` as any other method.
* ``OPTIONS`` is unchanged: the service answers no cross-origin preflight.
"""

from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["HeadAsGet"]


class HeadAsGet:
    """Answer ``HEAD`` as the ``GET`` of the same path, without its body."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "HEAD":
            await self.app(scope, receive, send)
            return
        done = asyncio.Event()

        async def head_send(message: Message) -> None:
            if done.is_set():
                return
            if message["type"] == "http.response.body":
                # The first part of the body ends the response: a stream stops here.
                done.set()
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(message)

        async def head_receive() -> Message:
            # Whoever waits for the client (a stream listening for a disconnect) is told
            # it left as soon as the response is complete.
            if not done.is_set():
                message = asyncio.ensure_future(receive())
                ended = asyncio.ensure_future(done.wait())
                await asyncio.wait((message, ended), return_when=asyncio.FIRST_COMPLETED)
                ended.cancel()
                if message.done():
                    return message.result()
                message.cancel()
            return {"type": "http.disconnect"}

        # The server still sees HEAD (its own scope), so it sends no body.
        await self.app({**scope, "method": "GET"}, head_receive, head_send)
