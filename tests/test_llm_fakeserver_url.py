"""``FakeServer.base_url`` (the URL ``dissensus fake-llm`` prints) is a URL a client can
use: an IPv6 address in brackets, a name or an IPv4 address as it is."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from dissensus.llm import ScriptedRules
from dissensus.llm.fakeserver import FakeServer


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("::1", "http://[::1]:8123/v1"),
        ("::", "http://[::]:8123/v1"),
        ("fe80::1", "http://[fe80::1]:8123/v1"),
        ("127.0.0.1", "http://127.0.0.1:8123/v1"),
        ("localhost", "http://localhost:8123/v1"),
    ],
)
def test_base_url_brackets_an_ipv6_address(host: str, url: str) -> None:
    server = FakeServer(ScriptedRules(default="ok"), host=host, port=8123)
    assert server.base_url == url
    parts = urlsplit(server.base_url)
    assert (parts.hostname, parts.port) == (host, 8123)  # the port can be told apart
