"""``HEAD`` on the service's ``GET`` paths (:mod:`dissensus.serve.head`): the ``GET``'s
status and headers without a body, the same checks, streams that end at their headers,
and a real server that keeps the connection usable after a ``HEAD``."""

from __future__ import annotations

import asyncio
import itertools
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from starlette.responses import StreamingResponse

from chat_helpers import live_server
from dissensus.serve import create_app
from dissensus.serve.head import HeadAsGet
from pipeline_cases import panel
from serve_helpers import auth, client_for, settings

pytestmark = pytest.mark.anyio


async def test_head_answers_as_get_without_a_body(tmp_path: Path) -> None:
    async with client_for(settings(tmp_path)) as client:
        for path, headers in (("/healthz", {}), ("/v1/runs", auth("sub"))):
            got = await client.get(path, headers=headers)
            head = await client.head(path, headers=headers)
            assert head.status_code == got.status_code == 200
            assert head.content == b""
            assert head.headers["content-type"] == got.headers["content-type"]
            assert head.headers["content-length"] == got.headers["content-length"] != "0"


async def test_head_passes_the_same_checks(tmp_path: Path) -> None:
    async with client_for(settings(tmp_path)) as client:
        assert (await client.head("/v1/runs")).status_code == 401
        assert (await client.head("/v1/runs/nope", headers=auth("sub"))).status_code == 404
        foreign = await client.head("/healthz", headers={"Host": "evil.example"})
        assert foreign.status_code == 403 and foreign.content == b""
        # A path without a GET refuses HEAD like any other method it does not take.
        refused = await client.head("/v1/decide", headers=auth("sub"))
        assert refused.status_code == 405 and refused.headers["allow"] == "POST"
        assert (await client.head("/no/such/path")).status_code == 404


async def test_head_of_a_run_event_stream_is_its_headers(tmp_path: Path) -> None:
    async with client_for(settings(tmp_path)) as client:
        res = await client.post("/v1/decide", json=[panel("a", ["1", "1"])], headers=auth("sub"))
        run_id = res.json()["run_id"]
        head = await client.head(f"/v1/runs/{run_id}/events", headers=auth("sub"))
        assert head.status_code == 200 and head.content == b""
        assert head.headers["content-type"].startswith("text/event-stream")


async def test_an_endless_stream_stops_after_the_headers_of_a_head() -> None:
    produced: list[int] = []

    async def endless() -> AsyncIterator[str]:
        for i in itertools.count():
            produced.append(i)
            yield f"data: {i}\n\n"
            await asyncio.sleep(0)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        assert scope["method"] == "GET"
        await StreamingResponse(endless(), media_type="text/event-stream")(scope, receive, send)

    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(3600)  # the client never goes away by itself
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "HEAD", "path": "/s", "headers": []}
    await asyncio.wait_for(HeadAsGet(app)(scope, receive, send), timeout=10)
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert sent[1]["body"] == b"" and not sent[1].get("more_body", False)
    assert len(produced) < 10  # stopped within a few turns, not after the hour


def test_a_real_server_sends_no_body_and_keeps_the_connection(tmp_path: Path) -> None:
    with live_server(lambda: create_app(settings(tmp_path))) as base:
        host, port = base.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=20) as sock:
            request = f"HEAD /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n"
            request += f"GET /healthz HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
            sock.sendall(request.encode())
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        # The HEAD's answer is headers only: the next bytes are the GET's status line.
        assert rest.startswith(b"HTTP/1.1 200")
        length = int(
            next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(
                b":"
            )[1]
        )
        assert length > 0 and rest.partition(b"\r\n\r\n")[2] != b""
