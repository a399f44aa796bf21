"""A request head that never ends (the "slowloris" client), against a real ``dissensus
serve``: the connection gets a 408 and is closed once ``--timeout`` has passed, a
connection that sends nothing too, and the server keeps answering everyone else. On
the OpenAI-compatible paths that 408, and the 400 of a request the parser refuses, are
OpenAI's error body (they were the service's own before)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from dissensus.serve.protocol import HEAD_MIN_S, MAX_PIPELINED, head_timeout_protocol
from test_serve_load import start_server

TIMEOUT_S = 1
"""The shared server's ``--timeout``: the least the head's limit may be (``HEAD_MIN_S``)."""
WRITE_TIMEOUT_S = 2
"""The ``--timeout`` of the server whose stuck writers are counted: its check that they
are still held a second in must come before the server cuts them off."""


def _read_all(sock: socket.socket, seconds: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes, and when it closed (s after now)."""
    started = time.monotonic()
    sock.settimeout(seconds)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data, time.monotonic() - started


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """One server for the module's tests: each opens its own connections, closed (by the
    server or by the test) before it ends, and none changes the server's settings."""
    tmp = tmp_path_factory.mktemp("slow-head")
    proc, base = start_server(tmp, str(tmp / "j.sqlite"), extra_args=("--timeout", str(TIMEOUT_S)))
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
            time.sleep(0.15)  # slow, but well within the limit
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
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03<script>\r\n\r\n",
    ],
    ids=["header", "length-and-chunked", "tls-hello"],
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


def _openai(message: str, param: str, code: str) -> dict[str, Any]:
    return {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": param,
            "code": code,
        }
    }


def _slow_head(server: str, parts: list[bytes]) -> bytes:
    """Send ``parts`` (a pause between them, each its own packet), never end the head;
    what the server answers before it closes the connection."""
    host, port = server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        for part in parts:
            sock.sendall(part)
            time.sleep(0.2)
        data, closed_after = _read_all(sock, 30)
    assert closed_after < 20
    return data


def test_a_late_head_on_an_openai_path_gets_openai_s_408(server: str) -> None:
    late = f"request head not received within {TIMEOUT_S} s"
    service = {"error": late, "field": "<head>"}
    openai = _openai(late, "<head>", "request_timeout")
    cases = [
        ([b"GET /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: b"], openai),
        # The target ends in the second packet (at its space): it arrived whole.
        ([b"GET /v1/models", b"/dissensus-panel", b" HTTP/1.1\r\nHost: 1"], openai),
        ([b"GET /v1/cases/R.1 HTTP/1.1\r\n"], openai),
        # Not OpenAI paths: the review endpoint under /v1/cases/, and the service's own.
        ([b"POST /v1/cases/R.1/confirm HTTP/1.1\r\nHost: 127.0.0.1\r\n"], service),
        ([b"GET /v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n"], service),
        # A target still arriving names no path yet.
        ([b"GET /v1/chat/compl"], service),
    ]
    with ThreadPoolExecutor(len(cases)) as pool:
        answers = list(pool.map(lambda case: _slow_head(server, case[0]), cases))
    for (parts, expected), data in zip(cases, answers, strict=True):
        head, _, body = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408"), (parts, data[:200])
        assert b"content-type: application/json" in head.lower()
        assert json.loads(body) == expected, parts


def test_a_request_the_parser_refuses_on_an_openai_path_gets_openai_s_400(server: str) -> None:
    host, port = server.removeprefix("http://").split(":")
    refused = [
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 3\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header\r\n\r\n",
        b"GET /v1/cases/R.1?x=1 HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header\r\n\r\n",
        # The second request of a connection, after one that was answered.
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        b"GET /v1/models/dissensus-panel HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header\r\n\r\n",
    ]
    for sent in refused:
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            with contextlib.suppress(OSError):
                sock.sendall(sent)
            data, _ = _read_all(sock, 30)
        if data.startswith(b"HTTP/1.1 200"):  # the first request's answer
            data = data[data.index(b"HTTP/1.1 400") :]
        head, _, body = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400"), (sent, data[:200])
        expected = _openai("malformed HTTP request", "<request>", "invalid_request")
        assert json.loads(body) == expected, sent


def test_a_trickled_body_gets_a_408_and_the_connection_closes(server: str) -> None:
    """A body still arriving at ``--timeout`` is 408, and the connection closes with it:
    a client that went on trickling kept the connection open after its 408."""
    host, port = server.removeprefix("http://").split(":")
    head = (
        b"POST /v1/decide HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer tok-sub\r\nContent-Length: 1000000\r\n\r\n{"
    )
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(head)
        sock.settimeout(0.25)
        data, started, closed = b"", time.monotonic(), False
        while time.monotonic() - started < 15:
            with contextlib.suppress(OSError):
                sock.sendall(b" ")  # one byte at a time, as long as the server listens
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:  # reset after the close
                closed = True
                break
            if not chunk:
                closed = True
                break
            data += chunk
    assert data.startswith(b"HTTP/1.1 408"), data[:200]
    assert b"connection: close" in data.lower()
    assert closed and time.monotonic() - started < 15


@pytest.mark.parametrize(
    ("head", "status"),
    [
        (b"Content-Type: application/json\r\nContent-Length: 100000000000\r\n", b"413"),
        (b"Content-Type: text/plain\r\nContent-Length: 1000000\r\n", b"415"),
    ],
    ids=["413-announced", "415-before-the-body"],
)
def test_an_answer_before_the_body_ends_the_connection(
    server: str, head: bytes, status: bytes
) -> None:
    """A request answered before its body arrived (100 GB announced: 413 at once) kept
    its connection for as long as its client trickled the body: uvicorn dropped the
    bytes, each restarting its keep-alive timer, and no request timer ran any more."""
    host, port = server.removeprefix("http://").split(":")
    sent = (
        b"POST /v1/decide HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer tok-sub\r\n"
        + head
        + b"\r\n{"
    )
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(sent)
        sock.settimeout(0.25)
        data, closed = b"", False
        for _ in range(120):  # 30 s at most, many times the 1 s --timeout
            with contextlib.suppress(OSError):
                sock.sendall(b" " * 100)  # the body goes on arriving
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:  # reset after the close
                closed = True
                break
            if not chunk:
                closed = True
                break
            data += chunk
    assert data.startswith(b"HTTP/1.1 " + status), data[:200]
    assert closed, data[:200]


@pytest.mark.parametrize(
    "head",
    [
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n",
        b"POST /v1/route HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n",
        b"POST /v1/decide HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer tok-sub\r\n"
        b"Content-Type: text/plain\r\n",
    ],
    ids=["200-body-unread", "401", "415"],
)
def test_an_answer_before_the_body_says_the_connection_closes(server: str, head: bytes) -> None:
    """An answer made before its request's body arrived (a route that reads no body, a
    refusal) ended the connection without saying so: a keep-alive client (httpx, an SDK)
    sent its next request on it and lost it ("Server disconnected without sending a
    response"), as a claim sent with ``{}`` as its body did to the request after it."""
    host, port = server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(head + b"Content-Length: 2\r\n\r\n")  # the body is late
        sock.settimeout(30)
        data = b""
        while b"\r\n\r\n" not in data and (chunk := sock.recv(65536)):
            data += chunk
        sock.sendall(b"{}")
        rest, _ = _read_all(sock, 30)  # the connection ends after the answer
    answer = (data + rest).decode()
    answered, _, _ = answer.partition("\r\n\r\n")
    assert "\r\nconnection: close" in answered.lower(), answer
    assert answer.count("HTTP/1.1 ") == 1, answer


def test_requests_pipelined_past_the_bound_are_dropped_and_the_connection_ends(
    server: str,
) -> None:
    """5,000 requests sent in one go ahead of their answers were each queued (about 1 KB
    of the server's memory per 42-byte request) and all answered: a few hundred such
    connections took the server to gigabytes. The queue is now bounded; the requests
    past it are dropped, the queued ones answered, and the connection ends."""
    host, port = server.removeprefix("http://").split(":")
    sent = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 5000
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(sent)
        data, _ = _read_all(sock, 30)
    answers = data.count(b"HTTP/1.1 ")
    assert answers == data.count(b"HTTP/1.1 200 OK"), data[:300]
    # Every request queued before the bound is answered (1 answering + MAX_PIPELINED);
    # a packet boundary may let a few more in, never the thousands sent.
    assert MAX_PIPELINED + 1 <= answers < 1000, answers
    assert data.endswith(b'{"status":"ok"}')  # the connection ended after a whole answer


@pytest.mark.parametrize(
    ("path", "sent"),
    [
        ("/healthz", b"GET /" + b"a" * 200_000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
        ("/healthz", b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * (4 << 20)),
        (
            "/v1/chat/completions",
            b"POST /v1/chat/completions HTTP/1.1\r\nX-Big: " + b"a" * (1 << 20),
        ),
    ],
    ids=["huge-url", "huge-header", "huge-header-chat"],
)
def test_a_head_over_64_kib_gets_a_431_and_the_connection_closes(
    server: str, path: str, sent: bytes
) -> None:
    """The parser builds a header's value by concatenation: a 100 MB value took 11 s of
    the server's CPU (and answered 200). The head's bytes are counted before it reads them."""
    host, port = server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        with contextlib.suppress(OSError):  # closed while the rest was still being sent
            for at in range(0, len(sent), 65536):
                sock.sendall(sent[at : at + 65536])
        data, closed_after = _read_all(sock, 30)
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431"), data[:200]
    if path.startswith("/v1/chat/"):
        error = json.loads(body)["error"]
        assert (error["param"], error["code"]) == ("<head>", "request_header_too_large")
    else:
        assert json.loads(body) == {"error": "request head over 65536 bytes", "field": "<head>"}
    assert closed_after < 20
    # A head within the bound is served, on a kept-alive connection too.
    with httpx.Client(base_url=server, timeout=10) as client:
        for _ in range(3):
            assert client.get("/healthz", headers={"X-Ok": "a" * 60_000}).status_code == 200


@pytest.mark.parametrize(
    ("status", "sent"),
    [
        (
            b"400",
            b"POST /v1/decide HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 3\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        ),
        (b"431", b"GET /v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * (1 << 17)),
        (b"408", b"GET /v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: b"),
    ],
    ids=["length-and-chunked", "head-over-64-kib", "late-head"],
)
def test_the_server_s_own_refusals_carry_the_api_s_headers(
    server: str, status: bytes, sent: bytes
) -> None:
    """Every /v1 answer, refusals included, says ``Cache-Control: no-store`` and
    ``X-Content-Type-Options: nosniff``: the refusals the HTTP layer writes itself too."""
    host, port = server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        with contextlib.suppress(OSError):  # closed while the rest was still being sent
            for at in range(0, len(sent), 65536):
                sock.sendall(sent[at : at + 65536])
        data, _ = _read_all(sock, 30)
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 " + status), data[:200]
    lines = head.lower().split(b"\r\n")[1:]
    assert lines.count(b"cache-control: no-store") == 1, head
    assert lines.count(b"x-content-type-options: nosniff") == 1, head
    assert json.loads(body)["field"] in ("<request>", "<head>")


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to count sockets")
def test_clients_that_never_read_their_answers_are_cut_off(tmp_path: Path) -> None:
    """Clients that ask for more than the socket buffers hold and never read it kept
    their connections (and the server's sockets and buffers) for as long as they liked:
    once the server's writing has waited on a client for ``--timeout``, its connection
    is aborted."""
    proc, base = start_server(
        tmp_path, str(tmp_path / "j.sqlite"), extra_args=("--timeout", str(WRITE_TIMEOUT_S))
    )
    try:
        host, port = base.removeprefix("http://").split(":")
        assert httpx.get(base + "/healthz", timeout=10).status_code == 200
        before = _open_fds(proc.pid)
        ask = b"GET /openapi.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 60
        stuck = []
        for _ in range(5):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect((host, int(port)))
            sock.sendall(ask)  # sixty answers of about 110 kB each, none read
            stuck.append(sock)
        time.sleep(1)
        assert _open_fds(proc.pid) > before
        deadline = time.monotonic() + WRITE_TIMEOUT_S * 6
        while _open_fds(proc.pid) > before and time.monotonic() < deadline:
            time.sleep(0.2)
        held = _open_fds(proc.pid) - before
        # Meanwhile everyone else is served as usual.
        assert httpx.get(base + "/healthz", timeout=10).status_code == 200
        for sock in stuck:
            sock.close()
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    assert held <= 0, f"{held} connections of clients that never read are still open"
