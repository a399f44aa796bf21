"""The MCP ``route`` tool names only the similarity backends it serves: an unknown name
was answered with the library's list, which offers ``module:function``, a backend this
server refuses."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from mcp_helpers import tool_data, tool_text
from pipeline_cases import panel


def _call(root: Path, args: dict[str, Any]) -> Any:
    pytest.importorskip("mcp")
    from mcp.client import Client

    from dissensus.integrations.mcp import build_server

    async def go() -> Any:
        async with Client(build_server(root=root)) as client:
            return await client.call_tool("route", args)

    return asyncio.run(asyncio.wait_for(go(), timeout=60))


def test_an_unknown_backend_is_refused_with_the_served_ones(tmp_path: Path) -> None:
    panels = [panel("p", ["1", "1"], reasoning=["same", "same"])]
    bad = _call(tmp_path, {"panels": panels, "similarity": "tfidf2"})
    assert bad.is_error
    assert tool_text(bad) == (
        "Error executing tool route: field 'similarity': unknown similarity backend "
        "'tfidf2'; expected one of minilm, tfidf, static"
    )
    good = _call(tmp_path, {"panels": panels, "similarity": " TFIDF "})
    assert tool_data(good)[0]["id"] == "p"
