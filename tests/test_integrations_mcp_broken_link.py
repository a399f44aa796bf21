"""A journal the MCP tools must find, named by a symbolic link to no file: the error says
so, as the CLI's "file not found" does, since ``ls`` shows the name; the link's target
is not named (it may lie outside the directory the server serves)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from mcp_helpers import tool_text


def _call(root: Path, name: str, args: dict[str, Any], **server: Any) -> Any:
    pytest.importorskip("mcp")
    from mcp.client import Client

    from dissensus.integrations.mcp import build_server

    async def go() -> Any:
        async with Client(build_server(root=root, **server)) as client:
            return await client.call_tool(name, args)

    return asyncio.run(asyncio.wait_for(go(), timeout=60))


def test_a_broken_link_as_the_journal_is_named_so(tmp_path: Path) -> None:
    os.symlink("gone.sqlite", tmp_path / "j.sqlite")
    res = _call(tmp_path, "runs_list", {"journal": "j.sqlite"})
    assert res.is_error
    assert tool_text(res) == (
        "Error executing tool runs_list: journal not found under the directory the server "
        "serves (a broken symbolic link) (field 'journal')"
    )
    res = _call(tmp_path, "runs_list", {"journal": "other.sqlite"})
    assert tool_text(res).endswith("serves (field 'journal')")  # no file, no link
    res = _call(tmp_path, "runs_list", {}, journal=str(tmp_path / "j.sqlite"))
    assert tool_text(res).endswith("(a broken symbolic link) (field 'journal')")
    assert not (tmp_path / "gone.sqlite").exists()


@pytest.mark.parametrize(
    ("tool", "field"), [("decide", "policy"), ("route", "rules"), ("vote", "calibration")]
)
def test_a_broken_link_as_a_file_argument_is_named_so(
    tmp_path: Path, tool: str, field: str
) -> None:
    """The ``policy``, ``rules`` and ``calibration`` arguments say a link to no file as
    the journal argument does; a name with nothing there keeps the plain message."""
    from pipeline_cases import panel

    os.symlink("gone.yaml", tmp_path / "link.yaml")
    votes = [{"agent": a, "answer": "yes", "evidence_source": "kb", "evidence_present": True}
             for a in "ab"]  # fmt: skip
    base: dict[str, Any] = {
        "decide": {"panels": [panel("p", ["1", "1"])]},
        "route": {"panels": [panel("p", ["1", "1"])], "similarity": "tfidf"},
        "vote": {"cases": [{"id": "q", "votes": votes}]},
    }[tool]
    res = _call(tmp_path, tool, {**base, field: "link.yaml"}, journal=str(tmp_path / "j.sqlite"))
    assert res.is_error
    assert tool_text(res).endswith(
        f"field '{field}': no such file under the directory the server serves "
        "(a broken symbolic link)"
    )
    res = _call(tmp_path, tool, {**base, field: "other.yaml"}, journal=str(tmp_path / "j.sqlite"))
    assert tool_text(res).endswith("no such file under the directory the server serves")
    assert not (tmp_path / "gone.yaml").exists()
