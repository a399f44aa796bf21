"""A chat completion's body is read up to :data:`MAX_RESPONSE_BYTES` (or the backend's
``max_response_bytes``): past it the attempt fails as ``response_too_large``, not retried,
without reading further, whether the body is declared too long, arrives at once or drips
without end; a panel member answering so fails with that message and the others decide."""

from __future__ import annotations

import asyncio
import json
import socketserver
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import dissensus.llm.openai_backend as openai_backend
from dissensus.llm.base import BackendError, BackendResponse, ChatRequest, Message
from dissensus.llm.function import FunctionBackend
from dissensus.llm.openai_backend import MAX_RESPONSE_BYTES, OpenAIBackend, aiohttp_available
from dissensus.panels import Members, PanelChat
from dissensus.pipeline.policy import policy_from_dict
from dissensus.store.journal import Journal

REQUEST = ChatRequest(messages=[Message(role="user", content="How many apples?")])
ASK = {"model": "m", "messages": [{"role": "user", "content": "How many apples?"}]}
TRANSPORTS = ["httpx", *(["aiohttp"] if aiohttp_available() else [])]
CHUNK = 64 * 1024


def completion(content: str) -> bytes:
    return json.dumps(
        {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 5},
        }
    ).encode()


class _Flooding(socketserver.BaseRequestHandler):
    """Answers every request with ``server.mode``: ``declared`` (a completion of
    ``server.size`` bytes with its ``Content-Length``), ``endless`` (a chunked body that
    never ends, ``server.pause`` seconds between chunks) or ``small`` (a short answer)."""

    server: _Server

    def handle(self) -> None:
        self._read_request()
        self.server.requests += 1
        try:
            if self.server.mode == "small":
                self._send(completion("The answer is 7."))
            elif self.server.mode == "declared":
                self._send(completion("a" * self.server.size))
            else:
                self._endless()
        except OSError:
            pass  # the client closed the connection: what the cap is for

    def _read_request(self) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += self.request.recv(65536)
        head, _, rest = data.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        while len(rest) < length:
            rest += self.request.recv(65536)

    def _send(self, body: bytes) -> None:
        head = (
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        self.request.sendall(head)
        for start in range(0, len(body), CHUNK):
            self.request.sendall(body[start : start + CHUNK])
            self.server.sent += min(CHUNK, len(body) - start)

    def _endless(self) -> None:
        self.request.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        )
        opening = b'{"choices": [{"message": {"content": "'
        self.request.sendall(b"%x\r\n%s\r\n" % (len(opening), opening))
        chunk = b"%x\r\n%s\r\n" % (CHUNK, b"a" * CHUNK)
        while True:
            self.request.sendall(chunk)
            self.server.sent += CHUNK
            time.sleep(self.server.pause)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    mode = "declared"
    size = 0
    pause = 0.0
    requests = 0
    sent = 0


@pytest.fixture
def server() -> Iterator[_Server]:
    httpd = _Server(("127.0.0.1", 0), _Flooding)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def read(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The bytes of every body the backend read, counted as its HTTP client gave them."""
    counts: list[int] = []
    original = openai_backend._capped_body

    async def counted(response: Any, cap: int) -> bytes:
        chunks = response.aiter_bytes
        counts.append(0)

        async def counting() -> Any:
            async for chunk in chunks():
                counts[-1] += len(chunk)
                yield chunk

        response.aiter_bytes = counting
        return await original(response, cap)

    monkeypatch.setattr(openai_backend, "_capped_body", counted)
    return counts


def _url(httpd: _Server) -> str:
    return f"http://127.0.0.1:{httpd.server_address[1]}/v1"


def _send(backend: OpenAIBackend) -> BackendResponse:
    async def main() -> BackendResponse:
        try:
            return await backend.send(REQUEST, json_mode="none")
        finally:
            await backend.aclose()

    return asyncio.run(main())


def _fails(backend: OpenAIBackend) -> BackendError:
    with pytest.raises(BackendError) as caught:
        _send(backend)
    return caught.value


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_body_within_the_cap_is_read(server: _Server, transport: Any) -> None:
    server.mode, server.size = "declared", 900_000
    backend = OpenAIBackend("m", base_url=_url(server), api_key="k-test", transport=transport)
    backend.max_response_bytes = 1_000_000
    assert _send(backend).text == "a" * 900_000


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_body_declared_over_the_cap_is_not_read(
    server: _Server, read: list[int], transport: Any
) -> None:
    server.mode, server.size = "declared", MAX_RESPONSE_BYTES
    backend = OpenAIBackend("m", base_url=_url(server), api_key="k-test", transport=transport)
    error = _fails(backend)
    assert (error.kind, error.retryable) == ("response_too_large", False)
    assert f"over {MAX_RESPONSE_BYTES} bytes" in str(error)
    assert read == [0]


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("pause", [0.0, 0.01])
def test_an_endless_body_is_read_up_to_the_cap_only(
    server: _Server, read: list[int], transport: Any, pause: float
) -> None:
    """No ``Content-Length``, a body without end, at once or dripping: the attempt stops
    at the cap (a timeout would mean it read on), having read at most one chunk past it."""
    server.mode, server.pause = "endless", pause
    backend = OpenAIBackend(
        "m", base_url=_url(server), api_key="k-test", transport=transport, timeout_s=60
    )
    backend.max_response_bytes = 1_000_000
    error = _fails(backend)
    assert (error.kind, error.retryable) == ("response_too_large", False)
    assert "the server's response is over 1000000 bytes" in str(error)
    assert len(read) == 1 and 1_000_000 < read[0] <= 1_000_000 + 4 * CHUNK


def _answering(text: str) -> FunctionBackend:
    return FunctionBackend(
        lambda request, mode: BackendResponse(
            text=text, model="f", prompt_tokens=5, completion_tokens=5, finish_reason="stop"
        )
    )


@pytest.mark.parametrize("mode", ["declared", "endless"])
def test_a_member_answering_past_the_cap_fails_and_the_others_decide(
    tmp_path: Path, server: _Server, read: list[int], mode: str
) -> None:
    server.mode, server.size, server.pause = mode, MAX_RESPONSE_BYTES, 0.001
    section = {
        "answer": "number",
        "members": [{"name": n, "model": "scripted:x", "family": f"f{n}"} for n in "abc"],
        "max_retries": 2,
    }
    policy = policy_from_dict({"reading": {"similarity": "tfidf"}, "panel": section})
    backends: dict[str, Any] = {
        "a": OpenAIBackend("m", base_url=_url(server), api_key="k-test", timeout_s=60),
        "b": _answering("The answer is 7."),
        "c": _answering("The answer is 7."),
    }
    with Journal(str(tmp_path / "j.sqlite")) as journal:
        chat = PanelChat(policy, journal=journal, members=Members(policy.panel, backends))
        try:
            done = chat.complete(ASK)
        finally:
            chat.close()
    report = next(m for m in done.dissensus.members if m.name == "a")
    assert report.status == "failed"
    assert f"the server's response is over {MAX_RESPONSE_BYTES} bytes" in (report.why or "")
    assert server.requests == 1  # not retried: a retry would fetch it again
    assert len(read) == 1 and read[0] <= MAX_RESPONSE_BYTES + 4 * CHUNK
    others = {m.name: (m.status, m.decision) for m in done.dissensus.members if m.name != "a"}
    assert others == {"b": ("answered", "7"), "c": ("answered", "7")}
    assert done.dissensus.status in ("committed", "escalated")  # decided, not a 502
