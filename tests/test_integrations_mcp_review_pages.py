"""The MCP tool ``review_list`` answers a page of the queue, as ``dissensus review list``
and ``GET /v1/review`` do.

A queue of tens of thousands of open items was one answer of tens of megabytes (every
item read and hashed) to a client that is usually a model; the tool now gives at most
``limit`` items (1,000 by default, the CLI's and the service's page), after the item
``after`` names, and refuses an ``after`` naming no item, naming the argument. A page
with more after it says so (a text block after the items, ``_meta.next_after``): a page
that filled ``limit`` said nothing, and a model stopped there.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import cli
from mcp_helpers import tool_data, tool_text
from pipeline_cases import panel, write_jsonl

pytest.importorskip("mcp")

OPEN = 1_003
"""Open items in the journal: more than one default page."""


def _conflict(pid: str) -> dict[str, Any]:
    return panel(pid, ["1", "2"], values=[{"a": 1.0}, {"b": 1.0}],
                 reasoning=["Option 1 is right.", "Option 2 is right."])  # fmt: skip


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A served directory whose ``j.sqlite`` holds :data:`OPEN` open review items."""
    root = tmp_path_factory.mktemp("served")
    (root / "policy.yaml").write_text("reading: {similarity: tfidf}\n", encoding="utf-8")
    panels = write_jsonl(root / "p.jsonl", [_conflict(f"p{i}") for i in range(OPEN)])
    out = cli("decide", str(panels), "--policy", str(root / "policy.yaml"), "--journal",
              str(root / "j.sqlite"), "--json", cwd=root)  # fmt: skip
    assert out.code == 0, out.err
    return root


def _calls(root: Path, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    from mcp.client import Client

    from dissensus.integrations.mcp import build_server

    built = build_server(root=root, journal=str(root / "j.sqlite"))

    async def go() -> list[Any]:
        async with Client(built) as client:
            return [await client.call_tool(name, args) for name, args in calls]

    return asyncio.run(asyncio.wait_for(go(), timeout=120))


def test_review_list_gives_one_page_by_default_as_the_cli_does(served: Path) -> None:
    (listed,) = _calls(served, [("review_list", {})])
    items = tool_data(listed)
    assert len(items) == 1_000
    cli_page = cli("review", "list", "--journal", str(served / "j.sqlite"), "--json", cwd=served)
    assert cli_page.code == 0, cli_page.err
    assert [i["review_id"] for i in items] == [
        json.loads(line)["review_id"] for line in cli_page.out.splitlines()
    ]


def _more(result: Any) -> str | None:
    """The ``after`` a ``review_list`` result says the next page starts after, checking
    its note (the last text block) and its ``_meta`` agree; None when it says none."""
    texts = [c.text for c in result.content]
    items = tool_data(result)
    assert texts[: len(items)] == [json.dumps(i, indent=2, ensure_ascii=False) for i in items]
    meta = (result.meta or {}).get("next_after")
    if len(texts) == len(items):
        assert meta is None
        return None
    (note,) = texts[len(items) :]
    assert meta == items[-1]["review_id"]
    assert note == f'more items after "{meta}": call review_list again with after="{meta}"'
    return str(meta)


def test_review_list_pages_with_limit_and_after(served: Path) -> None:
    (everything,) = _calls(served, [("review_list", {"limit": 10_000})])
    ids = [i["review_id"] for i in tool_data(everything)]
    assert len(ids) == OPEN and len(set(ids)) == OPEN
    assert _more(everything) is None
    seen: list[str] = []
    after: str | None = None
    pages = 0
    while True:
        args: dict[str, Any] = {"limit": 400}
        if after is not None:
            args["after"] = after
        (page,) = _calls(served, [("review_list", args)])
        got = [i["review_id"] for i in tool_data(page)]
        seen += got
        pages += 1
        after = _more(page)
        if after is None:
            break
        assert after == got[-1] and len(got) == 400
    assert seen == ids and pages == 3


def test_a_page_says_when_more_items_follow(served: Path) -> None:
    """The default page (1,000 of 1,003) ends with the note; a page that holds the last
    item exactly, or fewer, has none."""
    first, exact, short = _calls(
        served,
        [
            ("review_list", {}),
            ("review_list", {"limit": OPEN}),
            ("review_list", {"limit": OPEN - 1}),
        ],
    )
    assert _more(first) == tool_data(first)[-1]["review_id"]
    assert _more(exact) is None
    assert _more(short) == tool_data(short)[-1]["review_id"]
    (rest,) = _calls(served, [("review_list", {"after": _more(first)})])
    assert len(tool_data(rest)) == OPEN - 1_000 and _more(rest) is None


def test_the_description_tells_the_paging_rule(served: Path) -> None:
    from mcp.client import Client

    from dissensus.integrations.mcp import build_server

    async def go() -> Any:
        async with Client(build_server(root=served)) as client:
            return await client.list_tools()

    tools = asyncio.run(asyncio.wait_for(go(), timeout=60)).tools
    (tool,) = [t for t in tools if t.name == "review_list"]
    assert "call review_list again with after" in (tool.description or "")
    assert "until a result" in (tool.description or "")
    assert tool.output_schema is not None and "result" in tool.output_schema["properties"]


def test_review_list_refuses_a_bad_page_naming_the_argument(served: Path) -> None:
    results = _calls(
        served,
        [
            ("review_list", {"after": "nosuch.1"}),
            ("review_list", {"after": "not an id"}),
            *[("review_list", {"limit": v}) for v in (0, 10_001, True, "5", 2.0)],
        ],
    )
    fields = ["after", "after"] + ["limit"] * 5
    for result, field in zip(results, fields, strict=True):
        text = tool_text(result)
        assert result.is_error and f"field {field!r}" in text, text
        assert "\n" not in text
