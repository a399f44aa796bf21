"""``bound`` takes the same ranges through HTTP, MCP and the command line (256 / 257
agents, 1,000 / 1,001 rounds)."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import cli
from mcp_helpers import tool_data, tool_text
from serve_helpers import auth, client_for, settings

pytest.importorskip("mcp")


def _http(tmp: Path, requests: list[tuple[str, str, Any]]) -> list[Any]:
    """Each request's ``(status, body)`` from one in-process service."""

    async def go() -> list[Any]:
        async with client_for(settings(tmp)) as client:
            out = []
            for method, url, body in requests:
                kwargs: dict[str, Any] = {"headers": auth("sub")}
                if body is not None:
                    kwargs["json"] = body
                res = await client.request(method, url, **kwargs)
                out.append((res.status_code, res.json()))
            return out

    return asyncio.run(asyncio.wait_for(go(), timeout=120))


def _mcp(tmp: Path, tool_calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """Each call's result from one in-process MCP server."""
    from mcp.client import Client

    from dissensus.integrations.mcp import build_server

    built = build_server(journal=str(tmp / "mcp.sqlite"), root=tmp)

    async def go() -> list[Any]:
        async with Client(built) as client:
            return [await client.call_tool(name, args) for name, args in tool_calls]

    return asyncio.run(asyncio.wait_for(go(), timeout=120))


def _field_of(text: str) -> str:
    found = re.search(r"field '([^']+)'", text)
    assert found, text
    return found.group(1)


@pytest.mark.parametrize(
    ("agents", "rounds", "field"),
    [(256, 1000, None), (257, 1000, "agents"), (256, 1001, "rounds"), (1_000_000, 6, "agents")],
)
def test_bound_takes_the_same_ranges_through_every_door(
    tmp_path: Path, agents: int, rounds: int, field: str | None
) -> None:
    (h,) = _http(tmp_path, [("GET", f"/v1/bound?agents={agents}&rounds={rounds}", None)])
    (m,) = _mcp(tmp_path, [("bound", {"agents": agents, "rounds": rounds})])
    c = cli("bound", "--agents", str(agents), "--rounds", str(rounds), "--json")
    if field is None:
        assert h[0] == 200 and c.code == 0
        assert h[1] == tool_data(m) == json.loads(c.out)
        return
    limit = {"agents": 256, "rounds": 1000}[field]
    said = f"less than or equal to {limit}"
    assert h[0] == 422 and h[1]["field"] == field and said in h[1]["error"], h
    assert m.is_error and _field_of(tool_text(m)) == field and said in tool_text(m)
    assert c.code == 2 and f"--{field}" in c.err and said in c.err, c.err
