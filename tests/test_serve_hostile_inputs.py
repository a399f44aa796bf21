"""Hostile inputs against a real ``dissensus serve`` (uvicorn on loopback).

Each input must be answered with a 4xx (JSON), the server must keep answering
``/healthz`` while and after it works on them, and its memory must stay bounded. Before
the fixes: deep JSON, huge integers and long references were plain-text 500s, a slow
body held ``/v1/decide`` past ``--timeout``, foreign ``Host`` / ``Origin`` were served,
and one panel of 2,000 agents held the event loop for 20 s and 792 MiB.
"""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import httpx
import psutil
import pytest
import yaml

from test_serve_load import start_server

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parent.parent
TIMEOUT_S = 2
"""The probed server's request timeout (short: the slow body must meet it)."""
RSS_GROWTH_MIB = 300
"""Most the server's resident memory may grow over the whole probe."""


def _panel(agents: int) -> dict[str, object]:
    return {
        "id": "wide",
        "outputs": [
            {"agent": f"a{i}", "decision": str(i % 3), "reasoning": f"reason {i % 17}"}
            for i in range(agents)
        ],
    }


def _slow_body(base: str, seconds: float) -> int:
    """Send a decide request whose body never completes; the status the server answers."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=seconds + 20) as sock:
        sock.sendall(
            b"POST /v1/decide HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer tok-sub\r\nContent-Length: 100000\r\n\r\n["
        )
        answer = sock.recv(4096).decode("latin-1")
    return int(answer.split()[1])


def _raw_status(base: str, request: bytes) -> int:
    """The status a request sent as ``request`` (bytes on the wire) is answered with."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        sock.sendall(request)
        answer = sock.recv(4096).decode("latin-1")
    return int(answer.split()[1])


async def test_the_probe_inputs_get_4xx_and_the_server_keeps_answering(tmp_path: Path) -> None:
    proc, base = start_server(
        tmp_path, str(tmp_path / "j.sqlite"), extra_args=("--timeout", str(TIMEOUT_S))
    )
    sub = {"Authorization": "Bearer tok-sub", "Content-Type": "application/json"}
    adm = {"Authorization": "Bearer tok-adm"}
    try:
        server = psutil.Process(proc.pid)
        start_rss = server.memory_info().rss
        async with httpx.AsyncClient(base_url=base, timeout=60, verify=False) as client:
            probes: list[tuple[str, str, dict[str, str], bytes | None]] = []
            deep = b"[" * 5000 + b"]" * 5000
            huge = b'{"id": ' + b"7" * 5000 + b', "outputs": []}'
            for path in ("/v1/decide", "/v1/route", "/v1/vote", "/v1/negotiate", "/v1/verify"):
                probes += [("POST", path, sub, deep), ("POST", path, sub, huge)]
            wide = json.dumps(_panel(2000)).encode()
            probes += [("POST", "/v1/decide", sub, wide), ("POST", "/v1/route", sub, wide)]
            ref = "x." + "9" * 5000
            probes += [
                ("GET", f"/v1/review/{ref}", adm, None),
                ("POST", f"/v1/review/{ref}/claim", adm, None),
            ]
            problem = (REPO / "examples" / "concord" / "region-table.yaml").read_text("utf-8")
            as_json = json.dumps(yaml.safe_load(problem)).encode()
            probes += [
                ("POST", "/v1/negotiate?deadline=inf", sub, as_json),
                ("POST", "/v1/negotiate?deadline=1e309", sub, as_json),
                ("GET", "/v1/runs", {**adm, "Host": "[::1]evil.example"}, None),
                ("GET", "/v1/runs", {**adm, "Host": "attacker.example"}, None),
                ("POST", "/v1/decide", {**sub, "Origin": "https://evil.example"}, wide),
                ("POST", "/v1/decide", {**sub, "Content-Type": "text/plain"}, wide),
            ]

            async def send(
                method: str, path: str, headers: dict[str, str], body: bytes | None
            ) -> int:
                res = await client.request(method, path, headers=headers, content=body)
                assert res.headers["content-type"].startswith("application/json"), (path, res.text)
                return res.status_code

            async def healthy() -> list[int]:
                codes = []
                for _ in range(10):
                    codes.append((await client.get("/healthz")).status_code)
                    await asyncio.sleep(0.05)
                return codes

            slow = asyncio.to_thread(_slow_body, base, TIMEOUT_S)
            results, health, slow_status = await asyncio.gather(
                asyncio.gather(*(send(*p) for p in probes)), healthy(), slow
            )
            for probe, status in zip(probes, results, strict=True):
                assert 400 <= status < 500, (probe[0], probe[1][:40], status)
            two_hosts = (
                b"GET /v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: attacker.example\r\n"
                b"Authorization: Bearer tok-adm\r\nConnection: close\r\n\r\n"
            )
            assert await asyncio.to_thread(_raw_status, base, two_hosts) == 400
            assert health == [200] * 10
            assert slow_status in (408, 504)
            assert (await client.get("/healthz")).status_code == 200
            assert (await client.get("/v1/runs", headers=adm)).json() == []  # nothing journalled
        growth_mib = (server.memory_info().rss - start_rss) / 2**20
        assert growth_mib < RSS_GROWTH_MIB, f"server memory grew by {growth_mib:.0f} MiB"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
