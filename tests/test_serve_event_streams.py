"""Event streams (``GET /v1/runs/{id}/events``) of a real ``dissensus serve`` whose
clients leave early: each stream ends at once, and the server's log stays quiet.

Before the fix a stream wrote its whole backlog in one go, so a client that read the
first bytes of a 1,000-panel run's stream and closed the connection was answered with
hundreds more writes to the closed socket, each logging asyncio's ``socket.send() raised
exception.`` (about 3,000 lines for ten such clients).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest

from test_serve_load import PLAIN, _panels, start_server, stop_server

PANELS = 1000
LEAVERS = 20
"""Clients that read the first bytes of the stream, then close their connection."""

SUB = {"Authorization": "Bearer tok-sub"}


def _leave_early(url: str, errors: list[BaseException]) -> None:
    try:
        with httpx.stream("GET", url, headers=SUB, timeout=60, **PLAIN) as res:
            assert res.status_code == 200
            for _ in res.iter_raw(100):
                break  # the first bytes, then the connection is closed
    except BaseException as exc:  # reported by the test, not lost in the thread
        errors.append(exc)


def _open_connections(server: psutil.Process, port: int) -> int:
    """The server's connections on its listening port that are not yet closed."""
    return sum(
        1
        for c in server.net_connections(kind="tcp")
        if c.laddr and c.laddr.port == port and c.status != psutil.CONN_LISTEN
    )


@pytest.mark.slow
def test_clients_that_leave_a_stream_early_end_it_quietly(tmp_path: Path) -> None:
    proc, base = start_server(tmp_path, str(tmp_path / "journal.sqlite"))
    port = int(base.rsplit(":", 1)[1])
    try:
        started = httpx.post(
            base + "/v1/decide?async=true", json=_panels(PANELS), headers=SUB, timeout=60, **PLAIN
        )
        assert started.status_code == 202, started.text
        url = f"{base}/v1/runs/{started.json()['run_id']}/events"
        errors: list[BaseException] = []
        threads = [
            threading.Thread(target=_leave_early, args=(url, errors)) for _ in range(LEAVERS)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not errors, errors
        # A client that stays gets every event, in parts, the final status last.
        with httpx.stream("GET", url, headers=SUB, timeout=60, **PLAIN) as res:
            lines = list(res.iter_lines())
        kinds = [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]
        assert len(kinds) == PANELS + 1 and kinds[-1] == "finished", kinds[-3:]
        assert json.loads(lines[-2].removeprefix("data: "))["done"] == PANELS
        # Every stream whose client left has ended: the server holds none of them open.
        server = psutil.Process(proc.pid)
        deadline = time.monotonic() + 10
        while _open_connections(server, port) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _open_connections(server, port) == 0
    finally:
        stop_server(proc)
    log = (tmp_path / "server.log").read_text(encoding="utf-8", errors="replace")
    assert "socket.send() raised" not in log, f"{log.count(chr(10))} log lines: {log[:500]}"
    assert "Traceback" not in log, log[-2000:]
