"""A request head that never ends (the "slowloris" client), against a real ``dissensus
serve``: the connection gets a 408 and is closed once ``--timeout`` has passed, a
connection that sends nothing too, and the server keeps answering everyone else."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from pathlib import Path

import httpx
import pytest

from dissensus.serve.protocol import HEAD_MIN_S, head_timeout_protocol
from test_serve_load import start_server

TIMEOUT_S = 2


def _read_all(sock: socket.socket, seconds: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes, and when it closed (s after now)."""
    started = time.monotonic()
    sock.settimeout(seconds)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data, time.monotonic() - started


@pytest.fixture
def server(tmp_path: Path):  # type: ignore[no-untyped-def]
    proc, base = start_server(
        tmp_path, str(tmp_path / "j.sqlite"), extra_args=("--timeout", str(TIMEOUT_S))
    )
    try:
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=60)


@pytest.mark.parametrize(
    "sent", [b"", b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: b"], ids=["nothing", "half"]
)
def test_a_head_that_never_ends_gets_a_408_and_the_connection_closes(
    server: str, sent: bytes
) -> None:
    host, port = server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as slow:
        slow.sendall(sent)
        # Meanwhile the server answers others as usual.
        assert httpx.get(server + "/healthz", timeout=10).status_code == 200
        data, closed_after = _read_all(slow, 30)
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), data
    assert json.loads(body) == {
        "error": f"request head not received within {TIMEOUT_S} s",
        "field": "<head>",
    }
    assert closed_after < 20  # closed by the server, not by the test's own timeout


def test_a_head_that_ends_in_time_is_served_and_the_connection_kept(server: str) -> None:
    host, port = server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        for part in (b"GET /healthz HTTP/1.1\r\n", b"Host: 127.0.0.1\r\n", b"\r\n"):
            sock.sendall(part)
            time.sleep(0.3)  # slow, but well within the limit
        sock.settimeout(10)
        first = sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 200")
        # The same connection serves a second request once its own head arrives.
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        second, _ = _read_all(sock, 10)
    assert second.startswith(b"HTTP/1.1 200")


def test_the_limit_is_at_least_a_second() -> None:
    assert head_timeout_protocol(0.01).head_timeout_s == HEAD_MIN_S  # type: ignore[attr-defined]
    assert head_timeout_protocol(7).head_timeout_s == 7  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "sent",
    [
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header\r\n\r\n",
        b"POST /v1/decide HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 3\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"GET /" + b"a" * 200_000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03<script>\r\n\r\n",
    ],
    ids=["header", "length-and-chunked", "huge-url", "tls-hello"],
)
def test_a_request_the_parser_refuses_gets_a_json_400(server: str, sent: bytes) -> None:
    host, port = server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        # Closed while the rest was still being sent: the answer is read all the same.
        with contextlib.suppress(OSError):
            sock.sendall(sent)
        data, closed_after = _read_all(sock, 30)
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), data[:200]
    assert b"content-type: application/json" in head.lower()
    assert json.loads(body) == {"error": "malformed HTTP request", "field": "<request>"}
    assert closed_after < 20
    assert httpx.get(server + "/healthz", timeout=10).status_code == 200
