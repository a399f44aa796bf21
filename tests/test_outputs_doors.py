"""The shared output models (:mod:`dissensus.outputs`): for one run, the CLI's ``--json``,
the service and the MCP tools give the same keys and values for each of them.

* :class:`~dissensus.outputs.ReviewEntry`: ``review list --all --json`` lines,
  ``GET /v1/review?status=all`` (which adds ``claim``), the ``review_list`` tool.
* :class:`~dissensus.outputs.ReviewView`: ``GET /v1/review/{id}`` (which adds ``claim`` and
  ``history``) and the ``review_show`` tool.
* :class:`~dissensus.outputs.RunSummary`: ``runs list --json`` lines, ``GET /v1/runs``,
  the ``runs_list`` tool.
* ``VerifyReport``: ``runs verify --json``, ``GET /v1/runs/{id}/verify``, ``runs_verify``.

One journal serves every door: a run of three escalated panels, one of them resolved.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import cli
from dissensus.outputs import ResolutionInfo, ReviewEntry, ReviewView, RunSummary
from dissensus.store import VerifyReport
from pipeline_cases import write_jsonl, write_policy
from serve_helpers import auth, client_for, escalating, settings


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What every door says of one journal (the service's, the CLI's and the MCP tools')."""
    tmp = tmp_path_factory.mktemp("doors")
    policy = write_policy(tmp / "policy.yaml")
    journal = tmp / "journal.sqlite"
    panels = write_jsonl(tmp / "panels.jsonl", [escalating(f"p{i}") for i in range(3)])
    decided = cli(
        "decide", panels, "--policy", policy, "--journal", journal, "--run-id", "R", "--json"
    )
    assert decided.code == 0, decided.err
    resolved = cli(
        "review", "resolve", "R.2", "--decision", "2", "--note", "because",
        "--reviewer", "kim", "--journal", journal,
    )  # fmt: skip
    assert resolved.code == 0, resolved.err
    out: dict[str, Any] = {"cli": _cli(journal), "api": asyncio.run(_api(tmp, journal))}
    out["mcp"] = asyncio.run(_mcp(journal, policy))
    return out


def _lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _cli(journal: Path) -> dict[str, Any]:
    reviews = cli("review", "list", "--all", "--json", "--journal", journal)
    runs = cli("runs", "list", "--json", "--journal", journal)
    verify = cli("runs", "verify", "R", "--json", "--journal", journal)
    assert reviews.code == runs.code == verify.code == 0
    return {
        "review_list": _lines(reviews.out),
        "runs_list": _lines(runs.out),
        "runs_verify": json.loads(verify.out),
    }


async def _api(tmp: Path, journal: Path) -> dict[str, Any]:
    async with client_for(settings(tmp, journal=str(journal))) as client:
        got = {
            "review_list": await client.get("/v1/review?status=all", headers=auth("rev")),
            "review_show": await client.get("/v1/review/R.2", headers=auth("rev")),
            "review_show_open": await client.get("/v1/review/R.1", headers=auth("rev")),
            "runs_list": await client.get("/v1/runs", headers=auth("sub")),
            "runs_verify": await client.get("/v1/runs/R/verify", headers=auth("sub")),
        }
    assert all(r.status_code == 200 for r in got.values()), {k: r.text for k, r in got.items()}
    return {k: r.json() for k, r in got.items()}


async def _mcp(journal: Path, policy: Path) -> dict[str, Any]:
    from mcp.client import Client

    from dissensus.integrations.mcp import build_server

    server = build_server(journal=str(journal), policy=str(policy), reviewer="kim")
    calls = {
        "review_list": ("review_list", {"include_resolved": True}),
        "review_show": ("review_show", {"review_id": "R.2"}),
        "review_show_open": ("review_show", {"review_id": "R.1"}),
        "runs_list": ("runs_list", {}),
        "runs_verify": ("runs_verify", {"run_id": "R"}),
    }
    out: dict[str, Any] = {}
    async with Client(server) as client:
        for key, (tool, args) in calls.items():
            result = await client.call_tool(tool, args)
            assert not result.is_error, result
            data = result.structured_content
            assert data is not None
            out[key] = data["result"] if set(data) == {"result"} else data
    return out


def _without(row: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in keys}


def test_review_entry_is_the_same_through_every_door(world: dict[str, Any]) -> None:
    cli_rows = world["cli"]["review_list"]
    api_rows = [_without(r, "claim") for r in world["api"]["review_list"]]
    mcp_rows = world["mcp"]["review_list"]
    assert [r["review_id"] for r in cli_rows] == ["R.1", "R.2", "R.3"]
    assert cli_rows == api_rows == mcp_rows
    assert all(set(r) == set(ReviewEntry.model_fields) for r in cli_rows)
    resolved = [r for r in cli_rows if r["status"] == "resolved"]
    assert [(r["review_id"], r["resolution"]["decision"]) for r in resolved] == [("R.2", "2")]
    assert all(len(r["content_sha256"]) == 64 for r in cli_rows)


def test_review_view_is_the_same_through_the_service_and_mcp(world: dict[str, Any]) -> None:
    for key, status in (("review_show", "resolved"), ("review_show_open", "open")):
        api = world["api"][key]
        assert set(api) == set(ReviewView.model_fields) | {"claim", "history"}
        assert _without(api, "claim", "history") == world["mcp"][key]
        assert api["status"] == status
    shown = world["mcp"]["review_show"]
    assert set(shown["resolution"]) == set(ResolutionInfo.model_fields)
    assert (shown["resolution"]["reviewer"], shown["resolution"]["note"]) == ("kim", "because")
    # The list's hash is the one a resolution quotes, through every door.
    listed = {r["review_id"]: r["content_sha256"] for r in world["cli"]["review_list"]}
    assert shown["content_sha256"] == listed["R.2"]


def test_run_summary_is_the_same_through_every_door(world: dict[str, Any]) -> None:
    rows = world["cli"]["runs_list"]
    assert rows == world["api"]["runs_list"] == world["mcp"]["runs_list"]
    assert [(r["run_id"], r["finished"]) for r in rows] == [("R", True)]
    assert set(rows[0]) == set(RunSummary.model_fields)


def test_verify_report_is_the_same_through_every_door(world: dict[str, Any]) -> None:
    report = world["cli"]["runs_verify"]
    assert report == world["api"]["runs_verify"] == world["mcp"]["runs_verify"]
    assert set(report) == set(VerifyReport.model_fields)
    assert report["ok"] is True and report["problems"] == []
