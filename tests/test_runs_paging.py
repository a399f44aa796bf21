"""The runs a page at a time: :meth:`Journal.runs` with ``after`` / ``limit``, and the
doors that list them (``runs list --limit --after``, ``GET /v1/runs`` with its ``Link``
header, the MCP tool ``runs_list``).

A service journals one run per single-panel request, so its journal holds runs by the
hundred thousand: every listing read them all (a query per run, then one or two more for
its status) on the service's event loop, and answered them in one body.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli_helpers import cli
from dissensus.outputs import run_summaries
from dissensus.store import Journal, open_journal
from serve_helpers import auth, client_for
from serve_helpers import settings as serve_settings


def _fill(journal: Journal, ids: list[str], *, finished: set[str]) -> None:
    for run_id in ids:
        journal.create_run(run_id, kind="decide", meta={"input": "-"})
        if run_id in finished:
            journal.append(run_id, "run.finished", {}, key="run/finished")


def _all_pages(journal: Journal, size: int) -> list[str]:
    seen: list[str] = []
    after = None
    while True:
        page = journal.runs(after=after, limit=size)
        seen.extend(info.run_id for info in page)
        if len(page) < size:
            return seen
        after = page[-1].run_id


def test_pages_of_runs_are_the_runs_on_both_back_ends(journal_target: str) -> None:
    ids = [f"r{i:02d}" for i in range(7)]
    with open_journal(journal_target) as journal:
        _fill(journal, ids, finished={"r01", "r04"})
        every = [info.run_id for info in journal.runs()]
        assert every == ids  # oldest first
        assert _all_pages(journal, 3) == every
        assert [i.run_id for i in journal.runs(after="r04")] == ["r05", "r06"]
        assert journal.runs(after="r06", limit=5) == []
        statuses = journal.run_statuses(every)
        assert statuses == {run_id: journal.run_status(run_id) for run_id in every}
        assert {k for k, v in statuses.items() if v == "finished"} == {"r01", "r04"}


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(0, 12),
    size=st.integers(1, 5),
    same_instant=st.booleans(),
    data=st.data(),
)
def test_paging_visits_every_run_once_in_order(
    tmp_path_factory: pytest.TempPathFactory, n: int, size: int, same_instant: bool, data: Any
) -> None:
    """Whatever the page size, and when runs share their creation instant (ties are
    ordered by id), the pages together are the whole listing, once each."""
    path = tmp_path_factory.mktemp("paging") / "j.sqlite"
    ids = data.draw(
        st.lists(
            st.from_regex(r"[a-z0-9]{1,6}", fullmatch=True), min_size=n, max_size=n, unique=True
        )
    )
    with open_journal(path) as journal:
        _fill(journal, ids, finished=set(ids[::2]))
    if same_instant:
        with sqlite3.connect(path) as db:
            db.execute("UPDATE runs SET created = '2026-01-01T00:00:00.000000+00:00'")
    with open_journal(path) as journal:
        every = [info.run_id for info in journal.runs()]
        assert sorted(every) == sorted(ids)
        if same_instant:
            assert every == sorted(ids)
        assert _all_pages(journal, size) == every
        summaries = run_summaries(journal)
        assert [s.status for s in summaries] == [journal.run_status(r) for r in every]


def test_the_listing_order_has_an_index(tmp_path: Path) -> None:
    """A page is read through the index (revision 3), not by sorting the whole table."""
    path = tmp_path / "j.sqlite"
    with open_journal(path) as journal:
        _fill(journal, ["a", "b"], finished=set())
    with sqlite3.connect(path) as db:
        plan = db.execute(
            "EXPLAIN QUERY PLAN SELECT * FROM runs WHERE created > ? OR (created = ? AND run_id > ?) "
            "ORDER BY created, run_id LIMIT 10",
            ("x", "x", "a"),
        ).fetchall()
    text = " ".join(str(row[-1]) for row in plan)
    assert "runs_created" in text and "TEMP B-TREE" not in text, text


def test_runs_list_pages_on_the_command_line(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    with open_journal(path) as journal:
        _fill(journal, ["a", "b", "c"], finished={"b"})
    first = cli("runs", "list", "--journal", path, "--json", "--limit", "2")
    assert first.code == 0, first.err
    rows = [json.loads(line) for line in first.out.splitlines()]
    assert [(r["run_id"], r["status"]) for r in rows] == [("a", "incomplete"), ("b", "finished")]
    rest = cli("runs", "list", "--journal", path, "--json", "--after", "b")
    assert [json.loads(line)["run_id"] for line in rest.out.splitlines()] == ["c"]
    unknown = cli("runs", "list", "--journal", path, "--after", "zz")
    assert unknown.code == 2 and "no run 'zz'" in unknown.err
    zero = cli("runs", "list", "--journal", path, "--limit", "0")
    assert zero.code == 2 and "--limit" in zero.err


def test_the_service_gives_runs_a_page_at_a_time(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    with open_journal(path) as journal:
        _fill(journal, [f"r{i}" for i in range(5)], finished={"r2"})

    async def go() -> None:
        async with client_for(serve_settings(tmp_path, journal=str(path))) as client:
            seen: list[str] = []
            url: str | None = "/v1/runs?limit=2"
            pages = 0
            while url is not None:
                got = await client.get(url, headers=auth("sub"))
                assert got.status_code == 200, got.text
                seen.extend(row["run_id"] for row in got.json())
                link = got.headers.get("link")
                url = re.fullmatch(r'<(/v1/runs\?[^>]*)>; rel="next"', link)[1] if link else None  # type: ignore[index]
                pages += 1
            assert seen == [f"r{i}" for i in range(5)] and pages == 3
            every = await client.get("/v1/runs", headers=auth("sub"))
            assert [r["run_id"] for r in every.json()] == seen and "link" not in every.headers
            assert [r["status"] for r in every.json()].count("finished") == 1
            for query, field in (("limit=0", "limit"), ("limit=10001", "limit")):
                bad = await client.get(f"/v1/runs?{query}", headers=auth("sub"))
                assert bad.status_code == 422 and field in bad.text, bad.text
            unknown = await client.get("/v1/runs?after=nope", headers=auth("sub"))
            assert unknown.status_code == 404, unknown.text
            assert unknown.json()["field"] == "after"
            assert str(path) not in unknown.text and "journal.sqlite" not in unknown.text
            assert unknown.json()["error"] == "no run 'nope'", unknown.text

    asyncio.run(go())


def test_the_mcp_tool_lists_a_page(tmp_path: Path) -> None:
    from mcp.client import Client

    from dissensus.integrations.mcp import build_server

    path = tmp_path / "j.sqlite"
    with open_journal(path) as journal:
        _fill(journal, ["a", "b", "c"], finished=set())

    async def go() -> list[Any]:
        server = build_server(journal=str(path), reviewer="kim")
        out = []
        async with Client(server) as client:
            for args in ({"limit": 2}, {"after": "b"}, {"limit": 0}):
                out.append(await client.call_tool("runs_list", args))
        return out

    first, rest, bad = asyncio.run(go())
    assert [r["run_id"] for r in first.structured_content["result"]] == ["a", "b"]
    assert [r["run_id"] for r in rest.structured_content["result"]] == ["c"]
    assert bad.is_error and "limit" in str(bad.content)


def test_a_runs_list_limit_past_a_billion_names_the_option(tmp_path: Path) -> None:
    """A limit too large for the databases' integers failed as 'datatype mismatch'."""
    from cli_helpers import cli

    result = cli("runs", "list", "--journal", tmp_path / "j.sqlite", "--limit", "9" * 23)
    assert result.code == 2 and "--limit" in result.err and "Traceback" not in result.err
