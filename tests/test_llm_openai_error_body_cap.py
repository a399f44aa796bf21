"""An error status's body is read only up to ``ERROR_BODY_BYTES``, on both transports.

The SDK read an error status's body whole before it raised: a server answering 500 with
a 50 MB body took a call to about 465 MB of memory, and a gzip-encoded body could
inflate further. The body is now cut at 64 KiB as decoded (and as many raw bytes), the
call fails as the status says, naming it, and memory stays bounded whatever was sent.
"""

from __future__ import annotations

import gzip
import random
import socket
import threading
import time
import tracemalloc
from collections.abc import Iterator

import openai  # noqa: F401 - imported before memory is measured
import pytest

from dissensus.llm.openai_backend import ERROR_BODY_BYTES, OpenAIBackend, aiohttp_available
from llm_helpers import refused

KEY = "sk-proj-ERRCAP-0123456789abcdef"
BODY_CHARS = 50_000_000
TRANSPORTS = ["httpx", *(["aiohttp"] if aiohttp_available() else [])]
EXPECTED = {500: ("server_error", True), 400: ("client_error", False), 429: ("rate_limit", True)}
REASONS = {500: b"Internal Server Error", 400: b"Bad Request", 429: b"Too Many Requests"}


def _body() -> bytes:
    # An OpenAI-style error whose message alone is 50 MB (a fixed text: no randomness).
    return b'{"error": {"message": "overloaded ' + b"A" * BODY_CHARS + b'"}}'


@pytest.fixture(scope="module")
def bodies() -> dict[str, bytes]:
    plain = _body()
    # About 50 KB of gzip inflating to 50 MB: under the raw cap, so only the decoded cap
    # stops it.
    packed = gzip.compress(plain, compresslevel=9, mtime=0)
    assert len(packed) < ERROR_BODY_BYTES
    return {"plain": plain, "gzip": packed}


class _Server:
    """A loopback server answering every request with ``status`` and ``body``, sent in
    64 KiB writes until the client stops reading (then the connection is dropped)."""

    def __init__(self, status: int, body: bytes, encoding: str | None) -> None:
        head = [
            f"HTTP/1.1 {status} ".encode() + REASONS[status],
            b"Content-Type: application/json",
            f"Content-Length: {len(body)}".encode(),
            b"Connection: close",
        ]
        if encoding:
            head.append(f"Content-Encoding: {encoding}".encode())
        self.head = b"\r\n".join(head) + b"\r\n\r\n"
        self.body = memoryview(body)
        self.sent: list[int] = []
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
                conn.settimeout(5)
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
                sent = 0
                try:
                    conn.sendall(self.head)
                    for start in range(0, len(self.body), 65536):
                        conn.sendall(self.body[start : start + 65536])
                        sent = start + 65536
                except OSError:  # the client closed the connection: it read no further
                    pass
                self.sent.append(min(sent, len(self.body)))

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.sock.close()


@pytest.fixture
def serve() -> Iterator[list[_Server]]:
    running: list[_Server] = []
    yield running
    for server in running:
        server.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("encoding", ["plain", "gzip"])
@pytest.mark.parametrize("status", sorted(EXPECTED))
def test_a_huge_error_body_is_cut_and_the_status_reported(
    bodies: dict[str, bytes],
    serve: list[_Server],
    transport: str,
    encoding: str,
    status: int,
) -> None:
    server = _Server(status, bodies[encoding], None if encoding == "plain" else "gzip")
    serve.append(server)
    backend = OpenAIBackend(
        "m",
        base_url=server.url,
        api_key=KEY,
        timeout_s=20,
        transport=transport,  # type: ignore[arg-type]
    )

    tracemalloc.start()
    try:
        started = time.perf_counter()
        error = refused(backend)
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    # Reading the whole body took the call to about 465 MB; the head is 64 KiB.
    assert peak < 30_000_000, peak
    assert elapsed < 5, elapsed
    kind, retryable = EXPECTED[status]
    assert (error.kind, error.retryable, error.status) == (kind, retryable, status)
    message = str(error)
    assert message.startswith(f"HTTP {status}: Error code: {status} - "), message[:200]
    assert '{"error": {"message": "overloaded AAAA' in message
    assert message.endswith(
        f"(the rest not shown: the body is over {ERROR_BODY_BYTES} bytes, not read further)"
    )
    assert len(message) < 2_200
    assert error.__cause__ is None and error.__context__ is None


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_gzip_error_body_cut_short_still_names_its_status(
    serve: list[_Server], transport: str
) -> None:
    # A gzip stream with no end (its last bytes left out): read whole, it is still no
    # decoding error, and the status is reported as usual.
    whole = gzip.compress(b'{"error": {"message": "the model is overloaded"}}', mtime=0)
    server = _Server(500, whole[:-8], "gzip")
    serve.append(server)
    backend = OpenAIBackend("m", base_url=server.url, api_key=KEY, transport=transport)  # type: ignore[arg-type]

    error = refused(backend)

    assert (error.kind, error.status) == ("server_error", 500)
    assert str(error) == "HTTP 500: Error code: 500 - the model is overloaded"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_short_error_body_is_read_as_before(serve: list[_Server], transport: str) -> None:
    body = b'{"error": {"message": "response_format json_schema is not supported"}}'
    server = _Server(400, gzip.compress(body, mtime=0), "gzip")
    serve.append(server)
    backend = OpenAIBackend("m", base_url=server.url, api_key=KEY, transport=transport)  # type: ignore[arg-type]

    error = refused(backend)

    assert (error.kind, error.status) == ("client_error", 400)
    assert str(error) == "HTTP 400: Error code: 400 - response_format json_schema is not supported"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_an_incompressible_gzip_error_body_is_cut_at_its_raw_bytes(
    serve: list[_Server], transport: str
) -> None:
    # Gzip of random bytes is longer than what it inflates to: its raw bytes reach the cap
    # first, and the stream cut there in the middle is no decoding error.
    noise = random.Random(7).randbytes(16_000_000)
    server = _Server(500, gzip.compress(noise, compresslevel=1, mtime=0), "gzip")
    serve.append(server)
    backend = OpenAIBackend("m", base_url=server.url, api_key=KEY, transport=transport)  # type: ignore[arg-type]

    error = refused(backend)

    assert (error.kind, error.retryable, error.status) == ("server_error", True, 500)
    assert str(error).startswith("HTTP 500: Error code: 500 - ")
    assert str(error).endswith("not read further)")
    assert sum(server.sent) < len(noise)
