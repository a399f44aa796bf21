"""``review list`` pages as ``GET /v1/review`` does: ``--limit N`` (default 1,000, the
service's page) and ``--after REVIEW_ID``, saying when more items follow; the service's
list takes ``after`` too and names the next page in a ``Link`` header.

Before, ``review list`` printed every item of the journal (4.5 GB to list 100,000) and had
no way to ask for part of them, and ``GET /v1/review`` had ``limit`` but no way past it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import cli
from pipeline_cases import panel
from serve_helpers import auth, client_for, escalating, settings


def _journal_with_items(journal: str, tmp_path: Path, n: int) -> list[str]:
    """A run of ``n`` escalated cases; their review ids in queue order."""
    panels = tmp_path / "in.jsonl"
    lines = [json.dumps(panel(f"p{i}", ["1", "2", "1"])) for i in range(n)]
    panels.write_text("\n".join(lines) + "\n", encoding="utf-8")
    res = cli("decide", panels, "--journal", journal, "--run-id", "r1", "--json")
    assert res.code == 0, res.err
    ids = [json.loads(x)["review_id"] for x in res.out.splitlines()]
    assert all(ids) and len(ids) == n
    return ids


def test_review_list_pages_with_limit_and_after(journal_target: str, tmp_path: Path) -> None:
    ids = _journal_with_items(journal_target, tmp_path, 7)
    whole = cli("review", "list", "--journal", journal_target, "--json")
    assert whole.code == 0 and whole.err == ""
    assert [json.loads(x)["review_id"] for x in whole.out.splitlines()] == ids

    pages: list[str] = []
    after: list[str] = []
    for _ in range(4):
        res = cli("review", "list", "--journal", journal_target, "--json", "--limit", "3", *after)
        assert res.code == 0, res.err
        page = [json.loads(x)["review_id"] for x in res.out.splitlines()]
        pages += page
        if len(pages) < len(ids):
            # More follow: said on stderr (stdout stays one entry a line), with the command.
            assert f"more items after {page[-1]}" in res.err, res.err
            assert f"--after {page[-1]} --limit 3" in res.err
            after = ["--after", page[-1]]
        else:
            assert res.err == "", res.err
            break
    assert pages == ids

    table = cli("review", "list", "--journal", journal_target, "--limit", "2")
    assert table.code == 0, table.err
    assert ids[0] in table.out and ids[1] in table.out and ids[2] not in table.out
    assert f"more items after {ids[1]} (at most 2 shown)" in table.out
    last = cli("review", "list", "--journal", journal_target, "--after", ids[-2])
    assert ids[-1] in last.out and ids[-2] not in last.out and "more items" not in last.out
    beyond = cli("review", "list", "--journal", journal_target, "--after", ids[-1])
    assert beyond.code == 0 and "no review items open" in beyond.out

    unknown = cli("review", "list", "--journal", journal_target, "--after", "r1.99")
    assert unknown.code == 2 and "no review item" in unknown.err


def test_review_list_after_a_resolved_item_pages_past_it(tmp_path: Path) -> None:
    """``--after`` names a place in the queue: an item that is resolved (so not listed
    among the open ones) still marks where the next page starts."""
    journal = str(tmp_path / "j.sqlite")
    ids = _journal_with_items(journal, tmp_path, 4)
    res = cli("review", "resolve", ids[1], "--decision", "1", "--note", "n", "--journal", journal)
    assert res.code == 0, res.err
    nxt = cli("review", "list", "--journal", journal, "--json", "--after", ids[1])
    assert [json.loads(x)["review_id"] for x in nxt.out.splitlines()] == ids[2:]


@pytest.mark.anyio
async def test_service_review_list_pages_with_after_and_a_link(tmp_path: Path) -> None:
    async with client_for(settings(tmp_path)) as client:
        run = (
            await client.post(
                "/v1/decide",
                json=[escalating("a"), escalating("b"), escalating("c")],
                headers=auth("sub"),
            )
        ).json()
        ids = [r["review_id"] for r in run["records"]]
        first = await client.get("/v1/review?limit=2", headers=auth("rev"))
        assert [x["review_id"] for x in first.json()] == ids[:2]
        link = first.headers["link"]
        assert link == f'</v1/review?status=open&limit=2&after={ids[1]}>; rel="next"'
        second = await client.get(link[1 : link.index(">")], headers=auth("rev"))
        assert [x["review_id"] for x in second.json()] == ids[2:]
        assert "link" not in second.headers
        unknown = await client.get("/v1/review?after=nope.1", headers=auth("rev"))
        assert unknown.status_code == 404 and unknown.json()["field"] == "after"


@pytest.mark.parametrize("limit", ["1000000001", "9223372036854775807", "99999999999999999999999"])
def test_review_list_limit_beyond_any_database_integer_is_refused(
    journal_target: str, tmp_path: Path, limit: str
) -> None:
    # Before, a --limit past SQLite's integers was a traceback (OverflowError), and past
    # PostgreSQL's bigint an error naming the database's type.
    _journal_with_items(journal_target, tmp_path, 2)
    res = cli("review", "list", "--journal", journal_target, "--limit", limit)
    assert res.code == 2, (res.code, res.out, res.err)
    assert "Traceback" not in res.err and "--limit" in res.err
    assert "1000000000" in res.err.replace(",", "")
    top = cli("review", "list", "--journal", journal_target, "--json", "--limit", "1000000000")
    assert top.code == 0, top.err
    assert len(top.out.splitlines()) == 2
