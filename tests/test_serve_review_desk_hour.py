"""The review page over a long shift, in-process: what a page reads does not grow with the
journal's history, and a page loaded while the journal is away says so."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

import dissensus.store.log as log_module
from dissensus.serve import create_app
from dissensus.store import clock
from dissensus.store.errors import JournalError
from dissensus.store.event_types import REVIEW_RESOLVED
from serve_helpers import auth, client_for, escalating, heap_frozen, login, settings

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module", autouse=True)
def _heap_frozen() -> Iterator[None]:
    """The per-test garbage collection walks only this module's objects (see serve_helpers)."""
    yield from heap_frozen()


@pytest.mark.parametrize("window", [315_576_000.0, 1e12, float("inf")])
async def test_an_undo_window_longer_than_a_browsers_timer_keeps_the_button(
    tmp_path: Path, window: float
) -> None:
    """An undo window of ten years (the longest ``--undo-window`` takes) or more, an
    infinite one included, shows the case page with the undo and no time left for the
    page's timer, whose delay would overflow and fire at once."""
    async with client_for(settings(tmp_path, undo_window_s=window)) as client:
        run = (
            await client.post(
                "/v1/decide", json=[escalating(f"w{i}") for i in range(2)], headers=auth("sub")
            )
        ).json()
        first, second = (r["review_id"] for r in run["records"])
        got = await client.get(f"/v1/review/{first}", headers=auth("rev"))
        done = await client.post(
            f"/v1/review/{first}/resolve",
            json={"decision": "1", "note": "ok", "content_sha256": got.json()["content_sha256"]},
            headers=auth("rev"),
        )
        assert done.status_code == 200, done.text
        await login(client, "rev")
        page = await client.get(f"/review/case/{second}")
        assert page.status_code == 200, page.text[:500]
        assert f'name="review_id" value="{first}"' in page.text
        assert "data-left-ms" not in page.text


async def test_a_page_reads_only_the_resolutions_of_today_and_the_undo_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Resolutions journalled on earlier days are not read to render a case or the queue
    (each page counts today's and finds the one to undo): the page costs the same
    however many cases the journal's history holds. The count and the undo stay right."""
    async with client_for(settings(tmp_path)) as client:
        run = (
            await client.post(
                "/v1/decide", json=[escalating(f"h{i}") for i in range(6)], headers=auth("sub")
            )
        ).json()
        ids = [r["review_id"] for r in run["records"]]

        async def resolve(rid: str) -> None:
            got = await client.get(f"/v1/review/{rid}", headers=auth("rev"))
            done = await client.post(
                f"/v1/review/{rid}/resolve",
                json={
                    "decision": "1",
                    "note": "ok",
                    "content_sha256": got.json()["content_sha256"],
                },
                headers=auth("rev"),
            )
            assert done.status_code == 200, done.text

        days_ago = (datetime.now(UTC) - timedelta(days=3)).isoformat(timespec="microseconds")
        with monkeypatch.context() as m:
            m.setattr(clock, "now", lambda: days_ago)
            for rid in ids[:4]:
                await resolve(rid)
        await resolve(ids[4])

        today = datetime.now(UTC).date().isoformat()
        read: list[str] = []
        made = log_module.event_from_row

        def counted(row: Any) -> Any:
            if row["type"] == REVIEW_RESOLVED:
                read.append(str(row["at"]))
            return made(row)

        await login(client, "rev")
        monkeypatch.setattr(log_module, "event_from_row", counted)
        page = await client.get(f"/review/case/{ids[5]}?run={run['run_id']}")
        queue = await client.get(f"/review?run={run['run_id']}")
        assert page.status_code == 200 and queue.status_code == 200
        assert "you resolved 1 today" in page.text and "you resolved 1 today" in queue.text
        assert f'name="review_id" value="{ids[4]}"' in page.text  # the undo of the last one
        assert read and all(at >= today for at in read), read


async def test_a_page_loaded_while_the_journal_is_unreachable_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reload of a case page (or the queue) while the journal cannot be reached is a
    page naming the outage (503, Retry-After), never the API's JSON; htmx's requests
    keep the JSON the page's script shows in an alert, the page left as it was."""
    s = settings(tmp_path)
    app = create_app(s)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        run = (await client.post("/v1/decide", json=[escalating("u0")], headers=auth("sub"))).json()
        rid = run["records"][0]["review_id"]
        await login(client, "rev")

        def unreachable(*_: Any, **__: Any) -> Any:
            raise JournalError(f"journal {s.journal}: unable to open database file")

        desk = app.state.service.desk
        monkeypatch.setattr(desk, "status", unreachable)
        monkeypatch.setattr(desk, "order", unreachable)
        for path in (f"/review/case/{rid}", "/review"):
            page = await client.get(path)
            assert page.status_code == 503, (path, page.text)
            assert page.headers["content-type"].startswith("text/html")
            assert page.headers["retry-after"].isdigit()
            assert "the journal is unreachable" in page.text and "Reload this page" in page.text
            assert str(s.journal) not in page.text and "journal.sqlite" not in page.text
        swapped = await client.get(f"/review/case/{rid}", headers={"HX-Request": "true"})
        assert swapped.status_code == 503
        assert swapped.json() == {"error": "the journal is unreachable", "field": None}
