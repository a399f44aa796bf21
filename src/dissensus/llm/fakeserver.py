"""Loopback OpenAI-compatible server: scripted answers, injectable latency and faults.

Serves ``POST /v1/chat/completions`` and ``GET /v1/models`` over HTTP/1.1 with
keep-alive, on stdlib ``asyncio`` streams, in a background thread (``start`` /
``stop``, or a ``with`` block) or in the foreground (``serve_forever``, used by
``dissensus fake-llm``). Answers come from the same rule file as ``scripted:FILE``;
who is asking comes from the ``X-Dissensus-Agent`` / ``-Role`` / ``-Stage`` headers
the OpenAI backend sends, and the schema from ``response_format``.

Faults (``FaultPlan``): the first ``len(sequence)`` requests take their fault from
``sequence`` (``null`` = none); later requests draw a fault with probability ``rate``
from ``kinds``, using ``random.Random(seed)`` in arrival order. Kinds:

* ``rate_limit`` — 429 with ``Retry-After: <retry_after>``;
* ``server_error`` — 500;
* ``hang`` — no answer for ``hang_s`` seconds, then the connection is closed;
* ``disconnect`` — the connection is closed without an answer;
* ``truncated`` — 200 whose JSON body is cut in half (``Content-Length`` matches);
* ``schema_violation`` — 200 whose message is a JSON object that fits no useful schema;
* ``empty_choices`` — 200 with ``"choices": []``;
* ``schema_unsupported`` — 400 saying ``response_format`` is unsupported;
* ``auth_error`` — 401 whose message quotes the bearer token the client sent, as some
  servers do (it lets tests prove no error the client raises shows the key).

``json_schema_supported: false`` rejects every ``json_schema`` response format with
that 400, like servers without structured outputs. Latency ``latency_s`` delays every
answer (faults included). Token usage uses ``estimate_tokens``; an answer longer than the
request's ``max_completion_tokens`` (else ``max_tokens``) is cut to it, with finish reason
``length``, as a server stops at its cap. Choices: a request no
rule answers gets a 400 naming the problem; counters (``requests_received``,
``faults``, ``hangs_abandoned``) count chat-completion requests whose body was fully read, which is exactly
what a client's attempt log should match. The settings' numbers are finite
(``allow_inf_nan=False``): a ``1e400`` or ``"inf"`` in the ``server:`` section (a string
to PyYAML, which pydantic read as infinity) is a validation error naming the field,
so ``fake-llm`` refuses it (exit 2) instead of starting with an infinite latency.

Choices this module makes:

* **The URL it prints is one a client can use.** :attr:`FakeServer.base_url` puts an
  IPv6 address in brackets (``--host ::1`` listens on ``http://[::1]:PORT/v1``), as a
  URL must: ``http://::1:PORT/v1`` is refused by every client, ``OPENAI_BASE_URL``
  included.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import threading
import time
from collections import Counter, deque
from typing import Any, Literal
from urllib.parse import unquote

from pydantic import BaseModel, ConfigDict, Field

from dissensus.llm.base import BackendError, ChatRequest, Message, capped, estimate_tokens
from dissensus.llm.schemas import fill_schema
from dissensus.llm.scripted import Responder, ScriptedRules
from dissensus.types import JsonObject, JsonSchema

__all__ = ["FAULT_KINDS", "FakeServer", "FaultKind", "FaultPlan", "ServerSettings"]

FaultKind = Literal[
    "rate_limit",
    "server_error",
    "hang",
    "disconnect",
    "truncated",
    "schema_violation",
    "empty_choices",
    "schema_unsupported",
    "auth_error",
]

FAULT_KINDS: tuple[FaultKind, ...] = (
    "rate_limit",
    "server_error",
    "hang",
    "disconnect",
    "truncated",
    "schema_violation",
    "empty_choices",
)
"""The transient faults drawn by default (``schema_unsupported``, ``auth_error`` are opt-in)."""

_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    429: "Too Many Requests",
    500: "Internal Server Error",
}


class FaultPlan(BaseModel):
    """Which requests fail, and how."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    rate: float = Field(default=0.0, ge=0.0, le=1.0)
    """Probability that a request (after ``sequence``) gets a fault."""
    kinds: list[FaultKind] = Field(default_factory=lambda: list(FAULT_KINDS))
    """Faults drawn uniformly when a request gets one."""
    seed: int = 0
    """Seed of the fault draws."""
    sequence: list[FaultKind | None] = Field(default_factory=list)
    """Faults of the first requests, in arrival order (``None`` = answer normally)."""
    retry_after: str = "1"
    """``Retry-After`` value sent with 429 (seconds or an HTTP date)."""
    hang_s: float = Field(default=30.0, ge=0.0)
    """How long a ``hang`` fault holds the connection."""


class ServerSettings(BaseModel):
    """Settings of the loopback server (the ``server:`` section of a rule file)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    latency_s: float = Field(default=0.0, ge=0.0)
    """Delay before every answer."""
    json_schema_supported: bool = True
    """Whether ``response_format: json_schema`` is accepted."""
    model: str = "fake-model"
    """Model id listed by ``/v1/models``."""
    faults: FaultPlan = Field(default_factory=FaultPlan)
    fill_schema: bool = False
    """Answer every request that sends a ``json_schema`` response format with
    :func:`dissensus.llm.schemas.fill_schema` of it (first enum value, minimum, a fixed
    string), like a guided-decoding server with the dullest model; rules answer the rest."""
    drip_s: float = Field(default=0.0, ge=0.0)
    """Send every response one byte at a time, this many seconds apart (a slow-loris
    server: each read is quick, the whole answer is not)."""


def _response_schema(payload: JsonObject) -> JsonSchema | None:
    """The JSON schema a request's ``response_format`` asks for, if any."""
    response_format = payload.get("response_format")
    if not isinstance(response_format, dict) or response_format.get("type") != "json_schema":
        return None
    spec = response_format.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    return schema if isinstance(schema, dict) else None


def _json_bytes(data: Any) -> bytes:
    return json.dumps(data, ensure_ascii=False).encode("utf-8")


class FakeServer:
    """An OpenAI-compatible HTTP server on loopback for tests, benchmarks and trials.

    >>> with FakeServer(ScriptedRules(default="hello")) as server:  # doctest: +SKIP
    ...     server.base_url
    'http://127.0.0.1:54321/v1'
    """

    def __init__(
        self,
        script: ScriptedRules | None = None,
        settings: ServerSettings | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        keep_bodies: int = 1000,
    ) -> None:
        self.script = script if script is not None else ScriptedRules(default="ok")
        if settings is None:
            settings = ServerSettings.model_validate(self.script.server or {})
        self.settings = settings
        self.host = host
        self.port = port
        self.requests_received = 0
        """Chat-completion requests fully read (faulty ones included)."""
        self.faults: Counter[str] = Counter()
        """Faults injected, per kind."""
        self.hangs_abandoned = 0
        """``hang`` faults the client gave up on (it closed the connection before ``hang_s``)."""
        self.bodies: deque[JsonObject] = deque(maxlen=keep_bodies)
        """Parsed bodies of the last ``keep_bodies`` chat-completion requests, oldest first."""
        self.arrivals: deque[float] = deque(maxlen=keep_bodies)
        """Wall-clock times (``time.time()``) the last ``keep_bodies`` chat-completion
        requests were fully read at, oldest first."""
        self._responder = Responder(self.script, name="fake-llm")
        self._rng = random.Random(settings.faults.seed)
        self._server: asyncio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stopped: asyncio.Event | None = None
        self._start_error: BaseException | None = None

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT/v1``, for ``OPENAI_BASE_URL``; an IPv6 address in brackets
        (``http://[::1]:8000/v1``), without which no client can tell it from the port."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    # -- lifecycle ------------------------------------------------------------------

    async def _open(self) -> None:
        self._stopped = asyncio.Event()
        self._server = await asyncio.start_server(self._handle, self.host, self.port)
        sockets = self._server.sockets
        if sockets:
            self.port = int(sockets[0].getsockname()[1])

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        if self._stopped is not None:
            self._stopped.set()

    def start(self) -> FakeServer:
        """Serve in a daemon thread; returns once the port is bound."""
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._open())
            except OSError as exc:
                self._start_error = exc
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=run, name="dissensus-fake-llm", daemon=True)
        self._thread.start()
        ready.wait()
        if self._start_error is not None:
            raise self._start_error
        return self

    def stop(self) -> None:
        """Stop the background server (open connections are dropped)."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        asyncio.run_coroutine_threadsafe(self._close(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        self._loop = None
        self._thread = None

    async def serve_forever(self, on_ready: Any = None) -> None:
        """Serve in the current event loop until cancelled; ``on_ready(server)`` once bound."""
        await self._open()
        if on_ready is not None:
            on_ready(self)
        assert self._stopped is not None
        try:
            await self._stopped.wait()
        finally:
            await self._close()

    def __enter__(self) -> FakeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- HTTP -----------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            while True:
                request_line = await reader.readline()
                if not request_line.strip():
                    break
                method, target, _version = request_line.decode("latin-1").split(" ", 2)
                headers: dict[str, str] = {}
                while True:
                    line = await reader.readline()
                    if line in (b"\r\n", b"\n", b""):
                        break
                    name, _, value = line.decode("latin-1").partition(":")
                    headers[name.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0") or "0")
                body = await reader.readexactly(length) if length else b""
                keep_open = await self._dispatch(
                    method, target.split("?", 1)[0], headers, body, reader, writer
                )
                if not keep_open or headers.get("connection", "").lower() == "close":
                    break
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        except asyncio.CancelledError:
            pass  # the server is stopping; this handler's task was cancelled by ``_close``
        finally:
            if task is not None:
                self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await writer.wait_closed()

    async def _write(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        body: bytes,
        extra: dict[str, str] | None = None,
    ) -> None:
        head = [
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}",
            "Content-Type: application/json",
        ]
        head.append(f"Content-Length: {len(body)}")
        head.extend(f"{k}: {v}" for k, v in (extra or {}).items())
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        if self.settings.drip_s > 0:
            for i in range(len(data)):
                writer.write(data[i : i + 1])
                await writer.drain()
                await asyncio.sleep(self.settings.drip_s)
            return
        writer.write(data)
        await writer.drain()

    async def _error(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        message: str,
        extra: dict[str, str] | None = None,
    ) -> None:
        body = _json_bytes(
            {"error": {"message": message, "type": "invalid_request_error", "code": status}}
        )
        await self._write(writer, status, body, extra)

    def _draw_fault(self) -> FaultKind | None:
        plan = self.settings.faults
        index = self.requests_received - 1
        if index < len(plan.sequence):
            return plan.sequence[index]
        if plan.rate > 0 and plan.kinds and self._rng.random() < plan.rate:
            return self._rng.choice(plan.kinds)
        return None

    async def _dispatch(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> bool:
        if path.rstrip("/") == "/v1/models":
            models = {
                "object": "list",
                "data": [
                    {
                        "id": self.settings.model,
                        "object": "model",
                        "created": 0,
                        "owned_by": "dissensus",
                    }
                ],
            }
            await self._write(writer, 200, _json_bytes(models))
            return True
        if path.rstrip("/") != "/v1/chat/completions":
            await self._error(writer, 404, f"no route {path}")
            return True
        if method != "POST":
            await self._error(writer, 405, "use POST")
            return True
        self.requests_received += 1
        self.arrivals.append(time.time())
        fault = self._draw_fault()
        if fault is not None:
            self.faults[fault] += 1
        try:
            payload = json.loads(body or b"{}")
        except ValueError:
            payload = None
        if isinstance(payload, dict):
            self.bodies.append(payload)
        if self.settings.latency_s > 0:
            await asyncio.sleep(self.settings.latency_s)
        if fault == "hang":
            # Hold the connection until the client gives up (EOF) or hang_s passes.
            try:
                await asyncio.wait_for(reader.read(), timeout=self.settings.faults.hang_s)
                self.hangs_abandoned += 1  # end of stream: the client closed first
            except ConnectionError:
                self.hangs_abandoned += 1
            except TimeoutError:
                pass  # the server gave up first
            return False
        if fault == "disconnect":
            return False
        if fault == "rate_limit":
            await self._error(
                writer, 429, "rate limit reached", {"Retry-After": self.settings.faults.retry_after}
            )
            return True
        if fault == "server_error":
            await self._error(writer, 500, "internal server error")
            return True
        if fault == "auth_error":
            token = headers.get("authorization", "").removeprefix("Bearer ").strip()
            await self._error(writer, 401, f"Incorrect API key provided: {token}")
            return True
        if not isinstance(payload, dict) or not isinstance(payload.get("messages"), list):
            await self._error(writer, 400, "body must be a JSON object with 'messages'")
            return True
        response_format = payload.get("response_format") or {}
        wants_schema = (
            isinstance(response_format, dict) and response_format.get("type") == "json_schema"
        )
        if fault == "schema_unsupported" or (
            wants_schema and not self.settings.json_schema_supported
        ):
            await self._error(
                writer, 400, "response_format of type json_schema is not supported by this server"
            )
            return True
        return await self._complete(payload, headers, fault, writer)

    def _request_of(self, payload: JsonObject, headers: dict[str, str]) -> ChatRequest:
        messages = []
        for item in payload["messages"]:
            role = item.get("role") if isinstance(item, dict) else None
            content = item.get("content") if isinstance(item, dict) else None
            if role in ("system", "user", "assistant") and isinstance(content, str):
                messages.append(Message(role=role, content=content))
        response_format = payload.get("response_format") or {}
        spec = response_format.get("json_schema") if isinstance(response_format, dict) else None
        schema_name = spec.get("name") if isinstance(spec, dict) else None

        def header(name: str) -> str | None:
            value = headers.get(name)
            return unquote(value) if value is not None else None

        return ChatRequest(
            messages=messages,
            agent=header("x-dissensus-agent"),
            role=header("x-dissensus-role"),
            stage=header("x-dissensus-stage"),
            schema_name=schema_name if isinstance(schema_name, str) else None,
        )

    async def _complete(
        self,
        payload: JsonObject,
        headers: dict[str, str],
        fault: FaultKind | None,
        writer: asyncio.StreamWriter,
    ) -> bool:
        request = self._request_of(payload, headers)
        schema = _response_schema(payload)
        if fault == "schema_violation":
            text = json.dumps({"unexpected": "this object violates the requested schema"})
        elif self.settings.fill_schema and schema is not None:
            text = json.dumps(fill_schema(schema), ensure_ascii=False)
        else:
            try:
                text = self._responder.answer(request)
            except BackendError as exc:
                await self._error(writer, 400, str(exc))
                return True
        text, finish = capped(text, _max_tokens(payload))
        prompt_tokens = estimate_tokens(request.prompt_text())
        completion_tokens = estimate_tokens(text)
        choices = (
            []
            if fault == "empty_choices"
            else [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": finish,
                }
            ]
        )
        completion = {
            "id": f"chatcmpl-{self.requests_received}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": str(payload.get("model") or self.settings.model),
            "choices": choices,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
        body = _json_bytes(completion)
        if fault == "truncated":
            body = body[: len(body) // 2]
        await self._write(writer, 200, body)
        return True


def _max_tokens(payload: JsonObject) -> int | None:
    """The request's completion cap (``max_completion_tokens``, else ``max_tokens``), if
    it names a positive integer."""
    for name in ("max_completion_tokens", "max_tokens"):
        value = payload.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None
