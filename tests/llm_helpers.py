"""Helpers of the model-client tests: one request a server is expected to refuse."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler

from dissensus.llm.base import BackendError, ChatRequest, Message
from dissensus.llm.openai_backend import OpenAIBackend


def refused(backend: OpenAIBackend) -> BackendError:
    """The :class:`BackendError` of one plain request through ``backend`` (closed after);
    an ``AssertionError`` when the server answered."""

    async def send() -> BackendError:
        try:
            await backend.send(
                ChatRequest(messages=[Message(role="user", content="hi")]), json_mode="none"
            )
        except BackendError as exc:
            return exc
        finally:
            await backend.aclose()
        raise AssertionError("the server answered a request it was to refuse")

    return asyncio.run(send())


def key_echoing(status: int, message_of: Callable[[str], str]) -> type[BaseHTTPRequestHandler]:
    """A loopback model server's handler answering every POST with ``status`` and an
    OpenAI-style error whose message ``message_of`` makes from the bearer key it was sent."""

    class Echoing(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            key = self.headers["Authorization"].removeprefix("Bearer ")
            error = {"message": message_of(key), "type": "invalid_request_error"}
            body = json.dumps({"error": error})
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args: object) -> None:
            pass

    return Echoing
