"""A server that cannot be reached is named, with why, on both transports.

A refused connection read ``connection error: Connection error.`` (httpx) or ``the server
closed the connection`` (aiohttp, which was not so: no connection was ever made), with no
word of which server or why; ``decide`` put that in every record of the run.
"""

from __future__ import annotations

import socket

import pytest

from dissensus.llm.openai_backend import OpenAIBackend, Transport, aiohttp_available
from llm_helpers import refused

TRANSPORTS: list[Transport] = ["httpx"] + (["aiohttp"] if aiohttp_available() else [])


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_refused_connection_names_the_server_and_why(transport: Transport) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    key = "sk-unreachable-key-0123456789"
    error = refused(OpenAIBackend("m", base_url=url, api_key=key, transport=transport))
    assert error.kind == "connection" and error.retryable
    assert str(error) == (
        f"connection error: cannot connect to {url}: the connection was refused "
        "(is the server running, on this port?)"
    )
    assert key not in str(error)
    assert error.__cause__ is None and error.__context__ is None
