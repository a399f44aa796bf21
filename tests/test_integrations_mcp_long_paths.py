"""A path argument the system refuses (a name over its length limit) is a tool error
naming the argument.

``decide(journal="a" * 5000)`` (and ``policy``, ``rules``, ``calibration`` likewise) crashed
the tool: the caller read only ``Error executing tool decide`` and the server logged a
traceback (``OSError: [Errno 36] File name too long``). It is refused on one line naming
the argument, and the server keeps serving.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

LONG = "a" * 5000

PANEL = {
    "id": "p",
    "outputs": [
        {"agent": "a", "decision": "1", "reasoning": "One is right."},
        {"agent": "b", "decision": "2", "reasoning": "Two is right."},
    ],
}


def _calls(root: Path, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    from mcp.client import Client

    from dissensus.integrations.mcp import build_server

    server = build_server(journal=str(root / "j.sqlite"), root=root)

    async def go() -> list[Any]:
        async with Client(server) as client:
            return [await client.call_tool(name, args) for name, args in calls]

    return asyncio.run(asyncio.wait_for(go(), timeout=120))


def test_a_name_too_long_is_refused_naming_the_argument(tmp_path: Path) -> None:
    no_cases: list[Any] = []
    calls: list[tuple[str, dict[str, Any]]] = [
        ("decide", {"panels": [PANEL], "journal": LONG}),
        ("decide", {"panels": [PANEL], "policy": LONG}),
        ("runs_list", {"journal": f"{LONG}/j.sqlite"}),
        ("review_list", {"journal": LONG}),
        ("route", {"panels": [PANEL], "similarity": "tfidf", "rules": LONG}),
        ("vote", {"cases": no_cases, "calibration": LONG}),
        ("decide", {"panels": [PANEL]}),  # and the server goes on serving
    ]
    *refused, served = _calls(tmp_path, calls)
    for (name, args), result in zip(calls, refused, strict=False):
        field = next(k for k, v in args.items() if isinstance(v, str) and LONG in v)
        assert result.is_error, name
        text = result.content[0].text
        assert f"field {field!r}: not a usable path" in text, f"{name}: {text}"
        assert LONG[:100] not in text
    assert not served.is_error, served.content
