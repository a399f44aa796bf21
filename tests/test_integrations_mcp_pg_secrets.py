"""The MCP server's own PostgreSQL journal is never named with its password.

A tool error naming the server's journal (``no run 'x' in journal URL``, a reject's
``dissensus runs resume RUN --journal URL``) was re-worded to name the journal "as
configured", which put the ``--journal`` URL's password back into the answer the caller
reads. It is masked, as the store itself names the journal.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from store_backends import pg_schema, pg_url

pytest.importorskip("mcp")

SECRET = "S3cretPW-never-shown"


def _with_password(url: str) -> str:
    """``url`` with a password (the test server trusts loopback: it is sent, not checked)."""
    scheme, _, rest = url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if not at:
        userinfo, host = "postgres", rest
    user = userinfo.partition(":")[0]
    return f"{scheme}://{user}:{SECRET}@{host}"


def _panel(pid: str) -> dict[str, Any]:
    return {
        "id": pid,
        "outputs": [
            {"agent": "a", "decision": "1", "reasoning": "One is right."},
            {"agent": "b", "decision": "2", "reasoning": "Two is right."},
        ],
    }


def test_errors_naming_the_servers_postgres_journal_mask_its_password() -> None:
    from mcp.client import Client

    from dissensus.integrations.mcp import build_server

    calls: list[tuple[str, dict[str, Any]]] = [
        ("decide", {"panels": [_panel("p")]}),
        ("runs_verify", {"run_id": "nope"}),
        ("review_show", {"review_id": "nope.1"}),
        ("runs_list", {"after": "nope"}),
        ("review_list", {"run": "nope"}),
    ]
    with pg_schema(_with_password(pg_url())) as url:
        server = build_server(journal=url, policy=None)

        async def go() -> list[Any]:
            async with Client(server) as client:
                return [await client.call_tool(name, args) for name, args in calls]

        results = asyncio.run(asyncio.wait_for(go(), timeout=120))
    decided, *refused = results
    assert not decided.is_error
    assert SECRET not in json.dumps(decided.structured_content)
    for (name, _), result in zip(calls[1:], refused, strict=True):
        assert result.is_error, name
        text = result.content[0].text
        assert "no run 'nope'" in text, text
        assert SECRET not in text, f"{name}: {text}"
        assert ":***@" in text, f"{name}: {text}"
