"""The MCP server over stdio with the real mcp client: list tools, call each, bad arguments.

The mcp client is imported by the test, not at collection (every test worker would pay it).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

from mcp_helpers import tool_data, tool_text
from pipeline_cases import panel

if TYPE_CHECKING:
    from mcp import StdioServerParameters

ROOT = Path(__file__).resolve().parents[1]
TOOLS = {
    "route", "vote", "decide", "negotiate", "verify_certificate", "bound",
    "review_list", "review_show", "review_resolve", "runs_list", "runs_verify",
}  # fmt: skip


def _params(tmp_path: Path) -> StdioServerParameters:
    from mcp import StdioServerParameters

    policy = tmp_path / "policy.yaml"
    policy.write_text(
        yaml.safe_dump({"reading": {"similarity": "tfidf", "theta_s": 0.3}}), encoding="utf-8"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
        "DISSENSUS_REVIEWER": "kim@example.org",
    }
    args = [
        "-m",
        "dissensus",
        "mcp",
        "--journal",
        str(tmp_path / "j.sqlite"),
        "--policy",
        str(policy),
    ]
    return StdioServerParameters(command=sys.executable, args=args, env=env, cwd=str(tmp_path))


async def _session(tmp_path: Path) -> None:
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    errlog = (tmp_path / "server-stderr.txt").open("w", encoding="utf-8")
    async with (
        stdio_client(_params(tmp_path), errlog=errlog) as (read, write),
        ClientSession(read, write) as s,
    ):
        await s.initialize()
        listed = (await s.list_tools()).tools
        assert {t.name for t in listed} == TOOLS
        schemas = {t.name: t.input_schema for t in listed}
        assert (
            "outputs" in json.dumps(schemas["decide"])
            and "content_sha256" in schemas["review_resolve"]["required"]
        )

        assert tool_data(await s.call_tool("bound", {"agents": 5, "rounds": 6})) == {
            "rounds": 6, "candidates": 11, "evaluations": 55, "model_calls": 51,
        }  # fmt: skip
        bad = await s.call_tool("bound", {"agents": "five", "rounds": 6})
        assert bad.is_error and "agents" in tool_text(bad)

        agree = panel("p-agree", ["1", "1", "1"], evidence=[[{"source": f"kb:{i}"}] for i in range(3)],
                      reasoning=["Option 1 states the refund window of 30 days."] * 3)  # fmt: skip
        conflict = panel("p-conflict", ["1", "2", "1"], values=[{"a": 1.0}, {"b": 1.0}, {"a": 0.5}],
                         reasoning=["Option 1 is right."] * 3)  # fmt: skip
        routed = tool_data(
            await s.call_tool(
                "route", {"panels": [agree, conflict], "similarity": "tfidf", "theta_s": 0.3}
            )
        )
        assert [(r["id"], r["state"], r["action"]) for r in routed] == [
            ("p-agree", "CA", "auto"),
            ("p-conflict", "CD", "escalate"),
        ]

        case = {"id": "q1", "votes": [
            {"agent": "a", "answer": "yes", "evidence_source": "wiki", "evidence_present": True},
            {"agent": "b", "answer": "yes", "evidence_source": "news", "evidence_present": True},
            {"agent": "c", "answer": "no", "evidence_source": "parametric", "evidence_present": False},
        ]}  # fmt: skip
        (decision,) = tool_data(await s.call_tool("vote", {"cases": [case]}))
        assert decision["id"] == "q1" and decision["answer"] == "yes" and decision["n_eff"] > 0

        records = tool_data(await s.call_tool("decide", {"panels": [agree, conflict]}))
        assert [(r["id"], r["action"]) for r in records] == [
            ("p-agree", "auto"),
            ("p-conflict", "escalate"),
        ]
        review_id = records[1]["review_id"]
        bad = await s.call_tool(
            "decide", {"panels": [{"id": "x", "outputs": [agree["outputs"][0]]}]}
        )
        assert bad.is_error and "field 'panels.0.outputs'" in tool_text(bad)

        (entry,) = tool_data(await s.call_tool("review_list", {}))
        assert entry["review_id"] == review_id and entry["status"] == "open"
        shown = tool_data(await s.call_tool("review_show", {"review_id": review_id}))
        assert shown["content_sha256"] == entry["content_sha256"] and shown["item"]["options"] == [
            "1",
            "2",
        ]
        bad = await s.call_tool("review_show", {"review_id": "no-dot"})
        assert bad.is_error and "review id" in tool_text(bad)

        answer = {"review_id": review_id, "decision": "2", "note": "policy says 2"}
        missing = await s.call_tool("review_resolve", answer)
        assert missing.is_error and "content_sha256" in tool_text(missing)
        stale = await s.call_tool("review_resolve", {**answer, "content_sha256": "0" * 64})
        assert stale.is_error and "changed since it was shown" in tool_text(stale)
        record = tool_data(
            await s.call_tool(
                "review_resolve", {**answer, "content_sha256": shown["content_sha256"]}
            )
        )
        assert (record["action"], record["decision"]) == ("human", "2")
        assert record["resolution"]["reviewer"] == "kim@example.org"
        again = await s.call_tool(
            "review_resolve", {**answer, "content_sha256": shown["content_sha256"]}
        )
        assert again.is_error and "already resolved by kim@example.org at" in tool_text(again)
        assert tool_data(await s.call_tool("review_list", {})) == []

        problem = yaml.safe_load(
            (ROOT / "examples" / "concord" / "region-table.yaml").read_text(encoding="utf-8")
        )
        cert = tool_data(await s.call_tool("negotiate", {"problem": problem}))
        assert cert["status"] in ("certified", "best_effort") and cert["selected"]
        verdict = tool_data(await s.call_tool("verify_certificate", {"certificate": cert}))
        assert verdict["valid"] is True
        forged = {**cert, "floor": cert["floor"] + 0.2}
        verdict = tool_data(await s.call_tool("verify_certificate", {"certificate": forged}))
        assert verdict["valid"] is False and verdict["violated"]
        # Tool arguments are untrusted: no server-side code, no caller-chosen model.
        fn_agent = {"id": "finance", "kind": "function", "score": "os:getcwd"}
        bad = await s.call_tool(
            "negotiate", {"problem": {**problem, "agents": [*problem["agents"], fn_agent]}}
        )
        # (the fields of the problem document, as ``POST /v1/negotiate`` names them)
        assert (
            bad.is_error
            and "field 'agents.3.kind'" in tool_text(bad)
            and "not run by this server" in tool_text(bad)
        )
        bad = await s.call_tool(
            "negotiate", {"problem": {**problem, "model": "record:/tmp/x.yaml:openai:m"}}
        )
        assert bad.is_error and "field 'model'" in tool_text(bad)
        bad = await s.call_tool("route", {"panels": [agree], "similarity": "os:getcwd"})
        assert bad.is_error and "similarity" in tool_text(bad)
        bad = await s.call_tool("negotiate", {"problem": {**problem, "floor": "high"}})
        assert bad.is_error and "floor" in tool_text(bad)


def test_every_tool_over_stdio(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    asyncio.run(asyncio.wait_for(_session(tmp_path), timeout=120))
    # Refused calls (the bad ``bound``, ``decide`` and ``review_show`` above) are the
    # caller's errors: the server's stderr, the client's log of it, has no line for them.
    logged = (tmp_path / "server-stderr.txt").read_text(encoding="utf-8")
    assert "rejected arguments" not in logged and "INFO" not in logged, logged


def test_a_stdin_line_over_the_bound_ends_the_session(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The SDK's stdio transport read a line without bound (``dissensus mcp < /dev/zero``
    grew one string until the host ran out of memory); the server's reads at most the
    bound and ends the session at a longer line, as at the end of its input."""
    import io

    from mcp.server import stdio

    from dissensus.integrations.mcp import transport

    monkeypatch.setattr(stdio, "_UnownedTextWrapper", stdio._UnownedTextWrapper)
    transport._bound_stdin_lines(limit=40)
    transport._bound_stdin_lines(limit=40)  # once only: a second call wraps nothing again
    good = '{"jsonrpc":"2.0","method":"n"}\n'
    full = '{"jsonrpc":"2.0","method":"' + "n" * 10 + '"}\n'  # 40 characters and its end
    raw = (good + full + good + "x" * 95 + "\n" + good).encode()
    wrapper = stdio._UnownedTextWrapper(io.BytesIO(raw), encoding="utf-8")
    assert list(iter(wrapper.readline, "")) == [good, full, good]
    assert wrapper.readline() == ""  # ended: the line after it is not read
    assert "over 40 characters: the session ends" in capsys.readouterr().err


def test_dissensus_mcp_on_an_endless_line_stops_at_the_bound(tmp_path: Path) -> None:
    """A client that sends bytes without a newline: the server stops, in bounded memory."""
    import subprocess

    pytest.importorskip("mcp")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    with open("/dev/zero", "rb") as zero:
        done = subprocess.run(
            [sys.executable, "-m", "dissensus", "mcp", "--journal", str(tmp_path / "j.sqlite")],
            stdin=zero, capture_output=True, env=env, cwd=tmp_path, timeout=120, check=False,
        )  # fmt: skip
    assert "the session ends" in done.stderr.decode(), done.stderr[-2000:]
