"""Open connections are bounded, in all and per client address, against a real
``dissensus serve``: a connection past a bound is answered 503 at once and closed, the
connections within the bounds are served, and a closed connection frees its place."""

from __future__ import annotations

import contextlib
import json
import resource
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from dissensus.serve.protocol import FILES_KEPT, connection_bound
from test_serve_load import start_server

HEALTH = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"


def _address(base: str) -> tuple[str, int]:
    host, port = base.removeprefix("http://").split(":")
    return host, int(port)


def _answer(sock: socket.socket) -> bytes:
    """Everything the server sends on ``sock`` until it closes (at most 20 s)."""
    sock.settimeout(20)
    data = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            data += chunk
    return data


@contextlib.contextmanager
def _held(base: str, n: int) -> Iterator[list[socket.socket]]:
    """``n`` open connections that send nothing (each waits on the head limit)."""
    socks = [socket.create_connection(_address(base), timeout=20) for _ in range(n)]
    try:
        time.sleep(0.3)  # the server has taken each of them
        yield socks
    finally:
        for sock in socks:
            sock.close()


def _start(tmp_path: Path, *bounds: str) -> tuple[subprocess.Popen[bytes], str]:
    return start_server(
        tmp_path, str(tmp_path / "j.sqlite"), extra_args=("--timeout", "30", *bounds)
    )


@pytest.mark.parametrize(
    ("bound", "said"),
    [
        ("--max-connections", "the server holds its most connections (3)"),
        ("--max-connections-per-address", "this address holds the most connections one may (3)"),
    ],
)
def test_a_connection_past_a_bound_is_answered_503_and_closed(
    tmp_path: Path, bound: str, said: str
) -> None:
    proc, base = _start(tmp_path, bound, "3")
    try:
        with _held(base, 3):
            with socket.create_connection(_address(base), timeout=20) as late:
                late.sendall(HEALTH)
                data = _answer(late)
            head, _, body = data.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 503"), data
            assert b"\r\nretry-after: 1\r\n" in head.lower() + b"\r\n"
            assert json.loads(body) == {
                "error": f"{said}: try again shortly",
                "field": "<connection>",
            }
        # Closed connections free their places: the next client is served.
        time.sleep(0.3)
        assert httpx.get(base + "/healthz", timeout=10).status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_one_address_opening_connections_without_end_holds_no_one_else_out(
    tmp_path: Path,
) -> None:
    """Refused connections lingering used to keep the places they were refused from:
    one address that kept opening connections filled the server's bound with its
    refusals, and every other client was refused too."""
    proc, base = _start(tmp_path, "--max-connections", "40", "--max-connections-per-address", "10")
    host, port = _address(base)
    try:
        with _held(base, 10):
            flood = []
            for _ in range(60):  # far past both bounds, none closed by the client
                flood.append(socket.create_connection((host, port), timeout=20))
            time.sleep(0.3)
            with socket.create_connection(
                (host, port), timeout=20, source_address=("127.0.0.2", 0)
            ) as other:
                other.sendall(HEALTH)
                assert _answer(other).startswith(b"HTTP/1.1 200"), "another address is refused"
            refusals = [_answer(sock) for sock in flood[:3]]
            assert all(r.startswith(b"HTTP/1.1 503") for r in refusals)
            for sock in flood:
                sock.close()
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_a_forwarded_for_header_does_not_change_the_address_tokens_count_under(
    tmp_path: Path,
) -> None:
    """uvicorn takes X-Forwarded-For from a loopback connection as the client's address:
    a local client could pick a fresh one per guess and never be throttled."""
    proc, base = _start(tmp_path, "--login-failures", "3")
    try:
        with httpx.Client(base_url=base, timeout=10) as client:
            for i in range(3):
                wrong = {"Authorization": "Bearer guess", "X-Forwarded-For": f"10.9.9.{i}"}
                assert client.get("/v1/runs", headers=wrong).status_code == 401
            right = {"Authorization": "Bearer tok-sub", "X-Forwarded-For": "10.8.8.8"}
            refused = client.get("/v1/runs", headers=right)
            assert refused.status_code == 429, refused.text
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_connections_within_the_bounds_are_served(tmp_path: Path) -> None:
    proc, base = _start(tmp_path, "--max-connections", "8", "--max-connections-per-address", "8")
    try:
        with _held(base, 6), httpx.Client(base_url=base, timeout=10) as client:
            assert client.get("/healthz").status_code == 200  # the 7th, kept alive
            assert client.get("/healthz").status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_the_bound_fits_the_open_files_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    limits = {"now": (256, 512)}
    monkeypatch.setattr(resource, "getrlimit", lambda _: limits["now"])

    def setrlimit(_: int, value: tuple[int, int]) -> None:
        if value[0] > value[1]:
            raise ValueError("not allowed")
        limits["now"] = value

    monkeypatch.setattr(resource, "setrlimit", setrlimit)
    # raised towards the hard limit, as far as the bound needs
    assert connection_bound(100) == 100 and limits["now"] == (256, 512)
    assert connection_bound(300) == 300 and limits["now"] == (300 + FILES_KEPT, 512)
    # the hard limit too low: the bound is lowered to fit
    assert connection_bound(1024) == 512 - FILES_KEPT and limits["now"] == (512, 512)
