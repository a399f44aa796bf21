"""A fresh run id that names a run the journal holds already (48 random bits: another
panel's run) is not the request's run: every door that draws one draws another, as
:func:`~dissensus.pipeline.adecide` does, rather than refusing the request with the
advice meant for an id its caller chose. Each test journals a run under an id, then
makes the door's ``new_run_id`` draw that id first."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from adding_members import NAMES, Adding, section
from dissensus.llm.base import BackendResponse
from dissensus.panels import Members, PanelChat
from dissensus.pipeline import decide
from dissensus.pipeline.policy import policy_from_dict
from dissensus.store.journal import Journal, open_journal
from pipeline_cases import panel

OTHER = panel("other", ["x", "y"])
POLICY = {"reading": {"similarity": "tfidf"}}


def _taken(path: Path) -> Any:
    """The record of another panel's run journalled as ``taken``."""
    return decide(OTHER, POLICY, journal=str(path), run_id="taken")


def _draws(monkeypatch: pytest.MonkeyPatch, module: Any, *ids: str) -> None:
    drawn: Iterator[str] = iter(ids)
    monkeypatch.setattr(module, "new_run_id", lambda: next(drawn))


def _unchanged(path: Path, first: Any) -> None:
    with open_journal(str(path)) as journal:
        assert journal.verify("taken").ok
    assert decide(OTHER, POLICY, journal=str(path), run_id="taken") == first  # a replay


class _Counted(Adding):
    """A member answering with the sum it finds in the question; counts its calls."""

    def __init__(self) -> None:
        self.asked = 0

    async def send(self, request: Any, *, json_mode: Any) -> BackendResponse:
        self.asked += 1
        return await super().send(request, json_mode=json_mode)


@pytest.mark.anyio
async def test_the_chat_door_draws_again_without_asking_the_members_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dissensus.panels.door as door

    path = tmp_path / "j.sqlite"
    first = _taken(path)
    members = {n: _Counted() for n in NAMES}
    policy = policy_from_dict({"reading": {"similarity": "tfidf"}, "panel": section()})
    _draws(monkeypatch, door, "taken", "fresh")
    body = {"model": "dissensus-panel", "messages": [{"role": "user", "content": "3 plus 4 ?"}]}
    with Journal(str(path)) as journal:
        chat = PanelChat(policy, journal=journal, members=Members(policy.panel, dict(members)))
        try:
            done = await chat.acomplete(body)
        finally:
            await chat.aclose()
        assert done.dissensus.run_id == "fresh"
        assert "7" in (done.dissensus.decision, done.dissensus.suggestion)
        assert done.id.endswith("fresh") and "fresh" in done.dissensus.case_id
        assert [m.asked for m in members.values()] == [1, 1, 1]
        assert journal.verify("fresh").ok
    _unchanged(path, first)


def test_the_mcp_decide_tool_draws_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mcp")
    from mcp.client import Client

    import dissensus.integrations.mcp.tools_decide as tools
    from dissensus.integrations.mcp import build_server
    from mcp_helpers import tool_data

    path = tmp_path / "j.sqlite"
    first = _taken(path)
    _draws(monkeypatch, tools, "taken", "fresh")

    async def go() -> Any:
        async with Client(build_server(root=tmp_path, journal=str(path))) as client:
            return await client.call_tool("decide", {"panels": [{**OTHER, "id": "mine"}]})

    res = asyncio.run(asyncio.wait_for(go(), timeout=60))
    assert not res.is_error
    assert [r["id"] for r in tool_data(res)] == ["mine"]  # decided, no reject
    with open_journal(str(path)) as journal:
        assert journal.verify("fresh").ok
        assert journal.run("fresh") is not None
    _unchanged(path, first)


@pytest.mark.anyio
@pytest.mark.parametrize("query", ["", "?async=true"])
async def test_post_decide_draws_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, query: str
) -> None:
    import dissensus.serve.runs as runs
    from serve_helpers import auth, client_for, settings

    path = tmp_path / "journal.sqlite"
    first = _taken(path)
    _draws(monkeypatch, runs, "taken", "fresh")
    async with client_for(settings(tmp_path)) as client:
        res = await client.post(f"/v1/decide{query}", json={**OTHER, "id": "mine"},
                                headers=auth("sub"))  # fmt: skip
        assert res.status_code in (200, 202), res.text
        assert res.headers.get("X-Dissensus-Run", "fresh") == "fresh"
        if query:
            assert res.json()["run_id"] == "fresh"
            for _ in range(200):
                run = (await client.get("/v1/runs/fresh", headers=auth("sub"))).json()
                if run["status"] != "running":
                    break
                await asyncio.sleep(0.02)
            assert run["status"] == "finished", run
        else:
            assert res.json()["id"] == "mine"
    with open_journal(str(path)) as journal:
        assert journal.verify("fresh").ok
    _unchanged(path, first)


def test_cli_decide_without_a_run_id_draws_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dissensus.pipeline.batch as batch
    from cli_helpers import cli

    path = tmp_path / "j.sqlite"
    first = _taken(path)
    panels = tmp_path / "panels.jsonl"
    panels.write_text(json.dumps({**OTHER, "id": "mine"}) + "\n", encoding="utf-8")
    _draws(monkeypatch, batch, "taken", "fresh")
    res = cli("decide", panels, "--journal", path, "--similarity", "tfidf", "--json")
    assert res.code == 0, res.err
    assert "resume" not in res.err
    with open_journal(str(path)) as journal:
        assert journal.verify("fresh").ok
        assert journal.run("fresh") is not None
    _unchanged(path, first)
