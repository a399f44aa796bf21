"""The HTTP service and the MCP server make the same library calls (:mod:`dissensus.calls`):
the same bad ``negotiate``, ``verify`` or ``route`` request names the same field with the
same message through both, and ``bound`` takes the same ranges through HTTP, MCP and the
command line (256 / 257 agents, 1,000 / 1,001 rounds)."""

from __future__ import annotations

import asyncio
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli_helpers import cli
from dissensus.errors import ConfigError
from mcp_helpers import tool_data, tool_text
from serve_helpers import auth, client_for, settings

pytest.importorskip("mcp")

ROOT = Path(__file__).resolve().parents[1]


def _problem() -> dict[str, Any]:
    text = (ROOT / "examples" / "concord" / "region-table.yaml").read_text(encoding="utf-8")
    problem: dict[str, Any] = yaml.safe_load(text)
    return problem


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


MCP_FUNCTIONS_HINT = " (start the server with --allow-functions to run them)"
"""What the MCP server adds to the refusal of a function agent: it can allow them."""


def _same_refusal(http: tuple[int, Any], mcp: Any, field: str) -> None:
    """The service's error body and the tool's error text say the same thing (the MCP
    server adds, to a function agent's refusal, how it would run them)."""
    status, body = http
    assert status in (413, 422), body
    assert mcp.is_error, tool_text(mcp)
    assert body["field"] == field == _field_of(tool_text(mcp))
    said = re.sub(r"^Error executing tool \w+: ", "", tool_text(mcp))
    if field.endswith(".kind"):
        assert MCP_FUNCTIONS_HINT not in body["error"]
        said = said.replace(MCP_FUNCTIONS_HINT, "", 1) if MCP_FUNCTIONS_HINT in said else "?"
    assert body["error"] == said


def _negotiate_mistakes() -> list[tuple[str, dict[str, Any], str]]:
    problem = _problem()
    fn_agent = {"id": "f", "kind": "function", "score": "os:getcwd"}
    many = [{**problem["agents"][0], "id": f"a{i}"} for i in range(257)]
    return [
        ("", {**problem, "agents": [*problem["agents"], fn_agent]}, "agents.3.kind"),
        ("", {**problem, "model": "scripted:/etc/passwd"}, "model"),
        ("", {**problem, "agents": many}, "agents"),
        ("?rule=dictator", problem, "rule"),
    ]


def test_negotiate_refuses_the_same_mistake_alike_through_http_and_mcp(tmp_path: Path) -> None:
    mistakes = _negotiate_mistakes()
    http = _http(tmp_path, [("POST", f"/v1/negotiate{q}", body) for q, body, _ in mistakes])
    mcp = _mcp(
        tmp_path,
        [
            ("negotiate", {"problem": body, **({"rule": "dictator"} if q else {})})
            for q, body, _ in mistakes
        ],
    )
    for (_, _, field), h, m in zip(mistakes, http, mcp, strict=True):
        _same_refusal(h, m, field)
    assert http[2][0] == 413  # too many agents: the service's status for it


@pytest.mark.parametrize("deadline", [math.inf, -math.inf, math.nan, -1.0])
def test_the_mcp_negotiation_refuses_a_deadline_json_cannot_hold(deadline: float) -> None:
    """The finite-deadline check is the shared call's, so the MCP door has it too."""
    from dissensus.concord.problem import Problem
    from dissensus.integrations.mcp.tools_concord import _negotiate

    problem = Problem.model_validate(_problem())
    with pytest.raises(ConfigError) as refused:
        asyncio.run(_negotiate(problem, None, deadline, allow_functions=False))
    assert refused.value.field == "deadline"


def test_the_mcp_negotiation_counts_its_agents_before_parsing() -> None:
    from dissensus import calls

    problem = _problem()
    many = [{**problem["agents"][0], "id": f"a{i}"} for i in range(257)]
    options = calls.DoorOptions(allow_functions=True, max_agents=256)
    with pytest.raises(calls.TooManyAgents, match="257 agents; at most 256"):
        asyncio.run(calls.negotiate({**problem, "agents": many}, deadline=None, rule=None,
                                    options=options))  # fmt: skip


def test_verify_refuses_the_same_certificate_alike_through_http_and_mcp(tmp_path: Path) -> None:
    wrapped = {"certificate": {"version": 1, "floor": "high"}, "comparison": {}}
    bare = {"floor": "high"}
    http = _http(tmp_path, [("POST", "/v1/verify", wrapped), ("POST", "/v1/verify", bare)])
    mcp = _mcp(
        tmp_path,
        [("verify_certificate", {"certificate": wrapped}),
         ("verify_certificate", {"certificate": bare})],
    )  # fmt: skip
    for h, m in zip(http, mcp, strict=True):
        status, body = h
        if status == 200:  # a verdict, not a refusal: the same verdict
            assert body == tool_data(m)
        else:
            _same_refusal(h, m, body["field"])
    assert http[0] == http[1]  # the wrapper is unwrapped the same way


def test_verify_unwraps_a_comparison_alike_through_http_and_mcp(tmp_path: Path) -> None:
    problem = _problem()
    (cert,) = _http(tmp_path, [("POST", "/v1/negotiate", problem)])
    assert cert[0] == 200
    wrapped = {"certificate": {**cert[1], "floor": 0.99}, "comparison": {}}
    (h,) = _http(tmp_path, [("POST", "/v1/verify", wrapped)])
    (m,) = _mcp(tmp_path, [("verify_certificate", {"certificate": wrapped})])
    assert h[0] == 200 and h[1] == tool_data(m) and h[1]["valid"] is False


def test_route_refuses_a_code_backend_alike_through_http_and_mcp(tmp_path: Path) -> None:
    from serve_helpers import escalating

    panel = escalating("p1")
    (h,) = _http(tmp_path, [("POST", "/v1/route?similarity=os:getcwd", panel)])
    (m,) = _mcp(tmp_path, [("route", {"panels": [panel], "similarity": "os:getcwd"})])
    _same_refusal(h, m, "similarity")


def test_route_records_are_alike_through_http_and_mcp(tmp_path: Path) -> None:
    from serve_helpers import escalating

    panel = escalating("p1")
    (h,) = _http(tmp_path, [("POST", "/v1/route?similarity=tfidf&theta_s=0.5&theta_a=0.5", panel)])
    (m,) = _mcp(tmp_path, [("route", {"panels": [panel], "similarity": "tfidf",
                                      "theta_s": 0.5, "theta_a": 0.5})])  # fmt: skip
    assert h[0] == 200 and [h[1]] == tool_data(m)


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
