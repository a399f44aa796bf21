"""The queue page's lists: the count line names the list's true size, and every row of
a long list can be reached (pages of :data:`~dissensus.serve.queue_view.QUEUE_ROWS`)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from pipeline_cases import panel, write_policy
from serve_helpers import auth, client_for, heap_frozen, login, settings

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module", autouse=True)
def _heap_frozen() -> Iterator[None]:
    yield from heap_frozen()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _count(html: str) -> str:
    found = re.search(r'<p class="count" id="queue-count">(.*?)</p>', html, re.S)
    assert found, html[:2000]
    return found.group(1)


def _quiet(tmp_path: Path) -> httpx.AsyncClient:
    """A client of a server committing automatically, with no blind audits by chance."""
    quiet = write_policy(tmp_path / "no-audits.yaml", {"acceptance": {"audit_rate": 0.0}})
    return client_for(settings(tmp_path, policy=str(quiet)))


async def _automatic(client: httpx.AsyncClient, n: int) -> str:
    """Decide ``n`` panels committed automatically; the run id (signed in as a reviewer)."""
    agree = [panel(f"agree-{i}", ["1", "1", "1"], swap=["1", "1", "1"]) for i in range(n)]
    run = (await client.post("/v1/decide", json=agree, headers=auth("sub"))).json()
    assert all(r["auto"] for r in run["records"]), run
    await login(client, "rev")
    return str(run["run_id"])


async def test_the_count_of_automatic_decisions_names_the_rows_shown(tmp_path: Path) -> None:
    async with _quiet(tmp_path) as client:
        await _automatic(client, 3)
        page = await client.get("/review", params={"status": "automatic"})
        assert page.text.count('class="auto-link"') == 3
        assert _count(page.text).startswith("3 case(s); you resolved 0 today"), _count(page.text)


async def test_a_capped_list_counts_past_the_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("dissensus.serve.routes.pages_queue.QUEUE_ROWS", 2)
    async with _quiet(tmp_path) as client:
        await _automatic(client, 3)
        page = await client.get("/review", params={"status": "automatic"})
        assert page.text.count('class="auto-link"') == 2
        assert _count(page.text).startswith("3 case(s), the first 2 shown"), _count(page.text)
        # A search reads each case to match it: it counts one past the rows shown.
        found = await client.get("/review", params={"status": "automatic", "q": "agree"})
        assert found.text.count('class="auto-link"') == 2
        assert _count(found.text).startswith("at least 3 case(s), the first 2 shown")
        one = await client.get("/review", params={"status": "automatic", "q": "agree-1"})
        assert _count(one.text).startswith("1 case(s); ")
