"""The review desk's journal writes run in worker threads, never on the server's loop.

A claim, a give-up, a resolution, an undo and an audit (``POST /v1/review/{id}/claim``,
``DELETE`` of it, ``.../resolve``, ``.../undo``, ``POST /v1/cases/{ref}/confirm``, and the
review pages' forms that do the same) wrote the journal on the event loop. A write waits
for the journal's write lock: while another process held it (the CLI deciding or
resolving on the same SQLite file, as docs/serve.md allows), a claim held the loop for
the whole busy timeout, and ``/healthz``, the chat door and every page waited 30 s with
it. Here the desk's write is made to block until the test lets it go: ``/healthz`` must
be answered while it blocks, and the write must then go through.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from pipeline_cases import panel, write_policy
from serve_helpers import (
    auth,
    client_for,
    csrf_of,
    decide_automatic,
    escalating,
    heap_frozen,
    login,
    settings,
)
from test_serve_journal_reads_off_loop import _blocking, healthz_while_blocked

pytestmark = pytest.mark.anyio

Send = Callable[[httpx.AsyncClient, str, str], Coroutine[Any, Any, httpx.Response]]


@pytest.fixture(scope="module", autouse=True)
def _heap_frozen() -> Iterator[None]:
    yield from heap_frozen()


async def _sha(client: httpx.AsyncClient, review_id: str) -> str:
    shown = await client.get(f"/v1/review/{review_id}", headers=auth("rev"))
    return str(shown.json()["content_sha256"])


async def _resolve(client: httpx.AsyncClient, review_id: str, _: str) -> httpx.Response:
    body = {"decision": "1", "note": "n", "content_sha256": await _sha(client, review_id)}
    return await client.post(f"/v1/review/{review_id}/resolve", json=body, headers=auth("rev"))


async def _undo(client: httpx.AsyncClient, review_id: str, auto: str) -> httpx.Response:
    done = await _resolve(client, review_id, auto)
    assert done.status_code == 200, done.text
    return await client.post(f"/v1/review/{review_id}/undo", headers=auth("rev"))


async def _release(client: httpx.AsyncClient, review_id: str, _: str) -> httpx.Response:
    taken = await client.post(f"/v1/review/{review_id}/claim", headers=auth("rev"))
    assert taken.status_code == 200, taken.text
    return await client.delete(f"/v1/review/{review_id}/claim", headers=auth("rev"))


async def _form(client: httpx.AsyncClient, page: str, action: str, **fields: str) -> httpx.Response:
    shown = await client.get(page)
    assert shown.status_code == 200, shown.text[:300]
    data = {"csrf": csrf_of(shown.text), **fields}
    sha = re.search(r'name="content_sha256" value="([^"]+)"', shown.text)
    if sha and action.endswith("/resolve"):
        data["content_sha256"] = sha.group(1)
    return await client.post(action, data=data)


async def _page_resolve(client: httpx.AsyncClient, review_id: str, _: str) -> httpx.Response:
    page = f"/review/case/{review_id}"
    return await _form(client, page, page + "/resolve", decision="1", note="n")


async def _page_claim(client: httpx.AsyncClient, review_id: str, _: str) -> httpx.Response:
    page = f"/review/case/{review_id}"
    return await _form(client, page, page + "/claim")


async def _page_confirm(client: httpx.AsyncClient, _: str, auto: str) -> httpx.Response:
    page = f"/review/auto/{auto}"
    return await _form(client, page, page + "/confirm", note="checked")


async def _page_auto_claim(client: httpx.AsyncClient, _: str, auto: str) -> httpx.Response:
    page = f"/review/auto/{auto}"
    return await _form(client, page, page + "/claim")


# (the desk's method made to block, the request that calls it)
CASES: dict[str, tuple[str, Send]] = {
    "claim": (
        "claim",
        lambda client, rid, _: client.post(f"/v1/review/{rid}/claim", headers=auth("rev")),
    ),
    "give up a claim": ("release", _release),
    "resolve": ("resolve", _resolve),
    "undo": ("undo", _undo),
    "confirm": (
        "confirm",
        lambda client, _, auto: client.post(
            f"/v1/cases/{auto}/confirm", json={"note": "checked"}, headers=auth("rev")
        ),
    ),
    "page resolve": ("resolve", _page_resolve),
    "page claim": ("claim", _page_claim),
    "page confirm": ("confirm", _page_confirm),
    "page audit claim": ("claim", _page_auto_claim),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_healthz_is_answered_while_a_review_write_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    method, send = CASES[case]
    quiet = write_policy(tmp_path / "no-audits.yaml", {"acceptance": {"audit_rate": 0.0}})
    async with client_for(settings(tmp_path, policy=str(quiet))) as client:
        run = await client.post("/v1/decide", json=[escalating("p0")], headers=auth("sub"))
        review_id = f"{run.json()['run_id']}.1"
        [auto] = await decide_automatic(client, [panel("a", ["1", "1", "1"], swap=["1"] * 3)])
        if case.startswith("page"):
            await login(client, "rev")
        desk = client._transport.app.state.service.desk  # type: ignore[attr-defined]
        gates = {name: threading.Event() for name in ("entered", "release", "left")}
        monkeypatch.setattr(desk, method, _blocking(getattr(desk, method), gates))
        answer = await healthz_while_blocked(
            client, send(client, review_id, auto), gates, f"the {case}"
        )
        assert answer.status_code in (200, 303), answer.text[:300]
