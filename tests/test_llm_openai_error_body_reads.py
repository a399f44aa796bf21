"""An error status whose body cannot be read is a retried connection failure, unchained.

The SDK reads an error status's body itself and let the HTTP library's exception through
when that read failed (a 500 cut short by a dropped connection, a body that is not the
gzip it claims): the call failed at once as ``unexpected``, never retried, with that
exception chained under the failure, and it holds the request whose ``Authorization``
header is the key.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator

import pytest

from dissensus.llm import ChatRequest, ClientSettings, Message, ModelCallError, ModelClient
from dissensus.llm.openai_backend import OpenAIBackend, aiohttp_available

KEY = "sk-proj-ERRBODY-0123456789abcdef"

REPLIES = {
    "cut": (
        b"HTTP/1.1 500 Oops\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
        b'{"error": '
    ),
    "gzip": (
        b"HTTP/1.1 500 Oops\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
        b"Content-Length: 12\r\nConnection: close\r\n\r\nnot gzip at "
    ),
}


class _Server:
    """A loopback server answering every request with one raw reply, then closing."""

    def __init__(self, reply: bytes) -> None:
        self.reply = reply
        self.requests = 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(2)
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                while len(body) < length:
                    body += conn.recv(65536)
                self.requests += 1
                conn.sendall(self.reply)

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.sock.close()


@pytest.fixture(params=sorted(REPLIES))
def server(request: pytest.FixtureRequest) -> Iterator[_Server]:
    running = _Server(REPLIES[request.param])
    yield running
    running.close()


TRANSPORTS = ["httpx", *(["aiohttp"] if aiohttp_available() else [])]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_an_unreadable_error_body_is_retried_and_keeps_the_key_out_of_the_chain(
    server: _Server, transport: str
) -> None:
    backend = OpenAIBackend(
        "m",
        base_url=server.url,
        api_key=KEY,
        timeout_s=5,
        transport=transport,  # type: ignore[arg-type]
    )
    client = ModelClient(backend, settings=ClientSettings(max_retries=2, backoff_base_s=0))

    async def call() -> ModelCallError:
        try:
            await client.chat(ChatRequest(messages=[Message(role="user", content="hi")]))
        except ModelCallError as exc:
            return exc
        finally:
            await client.aclose()
        raise AssertionError("the server answered")

    error = asyncio.run(call())
    assert error.kind == "connection"
    assert len(error.attempts) == 3 and server.requests == 3
    assert "reading the error response" in str(error)
    chain: list[BaseException] = []
    link: BaseException | None = error
    while link is not None:
        chain.append(link)
        link = link.__cause__ or link.__context__
    assert [type(e).__name__ for e in chain] == ["ModelCallError", "BackendError"]
    for link in chain:
        assert KEY not in repr(vars(link)) and KEY not in str(link)
