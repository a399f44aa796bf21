"""Clients that go away: before their body arrives, or while the panel's members answer.

* A client closing its connection mid-body used to put "Exception in ASGI application"
  and a starlette ``ClientDisconnect`` traceback in the server's log, on every route
  that reads a body.
* A chat client going away while its members were still answering (an SDK's timeout)
  still had its case journalled and queued for review, a case it could never learn the
  id of, with every member billed: with the SDK's retries, three cases for one call.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest

pytest.importorskip("openai")

from dissensus.store import open_journal
from test_serve_chat_shutdown import ASK, SUB, serve_panel


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage() + (record.exc_text or ""))


@contextmanager
def server_log() -> Iterator[_Records]:
    """The server's log records (attached once the server runs: uvicorn's logging set-up
    replaces the handlers of its loggers when it starts)."""
    records = _Records()
    loggers = [logging.getLogger(n) for n in ("uvicorn.error", "dissensus.serve")]
    for logger in loggers:
        logger.addHandler(records)
    try:
        yield records
    finally:
        for logger in loggers:
            logger.removeHandler(records)


def _serve(stack: ExitStack, tmp_path: Path, latency_s: float) -> str:
    return serve_panel(stack, tmp_path, latency_s)[0]


def test_a_client_gone_mid_body_leaves_no_traceback(tmp_path: Path) -> None:
    with ExitStack() as stack:
        base = _serve(stack, tmp_path, 0.0)
        log = stack.enter_context(server_log())
        port = int(base.rsplit(":", 1)[1])
        for path in ("/v1/decide", "/v1/route", "/v1/chat/completions"):
            with socket.create_connection(("127.0.0.1", port)) as sock:
                head = (
                    f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    "Authorization: Bearer tok-sub\r\nContent-Type: application/json\r\n"
                    "Content-Length: 500\r\n\r\n"
                )
                sock.sendall(head.encode() + b'{"a":')
            time.sleep(0.3)
        with httpx.Client(base_url=base, headers=SUB, timeout=30) as client:
            assert client.post("/v1/chat/completions", json=ASK).status_code == 200
    shown = "\n".join(log.lines)
    assert "Exception in ASGI application" not in shown, shown
    assert "ClientDisconnect" not in shown, shown


def test_a_chat_client_gone_while_members_answer_journals_nothing(tmp_path: Path) -> None:
    with ExitStack() as stack:
        base = _serve(stack, tmp_path, 1.5)
        with (
            httpx.Client(base_url=base, headers=SUB, timeout=0.3) as client,
            pytest.raises(httpx.ReadTimeout),
        ):
            client.post("/v1/chat/completions", json=ASK)
        time.sleep(2.5)  # past the members' answers: a case would be journalled by now
        with open_journal(str(tmp_path / "journal.sqlite")) as store:
            assert list(store.runs()) == []
        # The server goes on answering clients that wait.
        with httpx.Client(base_url=base, headers=SUB, timeout=30) as client:
            answered = client.post("/v1/chat/completions", json=ASK)
        assert answered.status_code == 200, answered.text
    with open_journal(str(tmp_path / "journal.sqlite")) as store:
        assert len(list(store.runs())) == 1
