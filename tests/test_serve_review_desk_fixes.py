"""The review page in-process, on a page opened earlier: ``j`` / ``k`` step over cases
resolved or claimed meanwhile, a refusal of a case resolved meanwhile names the conflict
before what the form lacks, and a blind audit answered meanwhile shows what was sent."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from pipeline_cases import panel, write_policy
from serve_helpers import auth, client_for, csrf_of, escalating, heap_frozen, login, settings

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module", autouse=True)
def _heap_frozen() -> Iterator[None]:
    """The per-test garbage collection walks only this module's objects (see serve_helpers)."""
    yield from heap_frozen()


def _href(html: str, link: str) -> str:
    found = re.search(rf'id="{link}" href="([^"]+)"', html)
    assert found, html[:2000]
    return found.group(1).replace("&amp;", "&")


async def _cases(client: httpx.AsyncClient, n: int) -> tuple[str, list[str]]:
    run = (
        await client.post(
            "/v1/decide", json=[escalating(f"s{i}") for i in range(n)], headers=auth("sub")
        )
    ).json()
    return run["run_id"], [r["review_id"] for r in run["records"]]


async def _resolve_as(client: httpx.AsyncClient, rid: str, token: str) -> None:
    sha = (await client.get(f"/v1/review/{rid}", headers=auth(token))).json()["content_sha256"]
    done = await client.post(
        f"/v1/review/{rid}/resolve",
        json={"decision": "1", "note": "checked", "content_sha256": sha},
        headers=auth(token),
    )
    assert done.status_code == 200, done.text


async def test_j_k_from_a_page_opened_earlier_step_over_cases_taken_meanwhile(
    tmp_path: Path,
) -> None:
    """The links of a page shown before another reviewer resolved the next case and
    claimed the one after lead past both; with none left, to the queue's page."""
    async with client_for(settings(tmp_path)) as client:
        run, (a, b, c, d) = await _cases(client, 4)
        await login(client, "rev")
        q = f"?run={run}&sort=oldest&q=s"
        first = (await client.get(f"/review/case/{a}{q}")).text
        last = (await client.get(f"/review/case/{d}{q}")).text
        nxt, prev = _href(first, "next-link"), _href(last, "prev-link")
        await _resolve_as(client, b, "rev2")
        claimed = await client.post(f"/v1/review/{c}/claim", headers=auth("rev2"))
        assert claimed.status_code == 200, claimed.text
        shown = f"?run={run}&q=s"  # the queue's query, defaults left out
        got = await client.get(nxt)
        assert got.status_code == 303 and got.headers["location"] == f"/review/case/{d}{shown}"
        back = await client.get(prev)
        assert back.status_code == 303 and back.headers["location"] == f"/review/case/{a}{shown}"
        # d resolved too: nothing after a, so j goes to the queue (its page of a).
        await _resolve_as(client, d, "rev2")
        end = await client.get(nxt)
        assert end.status_code == 303 and end.headers["location"] == f"/review{shown}"
    async with client_for(settings(tmp_path)) as client:  # no session: log in, then on
        got = await client.get(nxt)
        assert got.status_code == 303 and got.headers["location"].startswith("/review/login")


async def test_a_blind_audit_answered_meanwhile_shows_what_was_sent(tmp_path: Path) -> None:
    """The second reviewer's answer to a blind audit answered meanwhile is refused (409)
    with the "Not saved, what you sent" line the case page has, escaped."""
    audited = write_policy(tmp_path / "audits.yaml", {"acceptance": {"audit_rate": 1.0}})
    s = settings(tmp_path, policy=str(audited))
    agree = panel("agree", ["1", "1", "1"], swap=["1", "1", "1"])
    async with client_for(s) as client:
        run = (await client.post("/v1/decide", json=[agree], headers=auth("sub"))).json()
        audit = f"{run['run_id']}.{run['records'][0]['line']}"
        await login(client, "rev")
        blind = await client.get(f"/review/audit/{audit}")
        assert blind.status_code == 200 and 'id="resolve-form"' in blind.text
        done = await client.post(
            f"/v1/cases/{audit}/confirm",
            json={"decision": "1", "note": "checked"},
            headers=auth("rev2"),
        )
        assert done.status_code == 200, done.text
        late = await client.post(
            f"/review/audit/{audit}/answer",
            data={"decision": "2", "note": "late <b>note</b>", "csrf": csrf_of(blind.text)},
        )
        assert late.status_code == 409 and "already audited by rev2-name" in late.text
        sent = re.search(r'<p id="not-saved">(.*?)</p>', late.text, re.S)
        assert sent, late.text[-3000:]
        assert "Not saved, what you sent: " in sent.group(1)
        assert 'class="sent-decision">2</bdi>' in sent.group(1)
        assert 'class="sent-note">late &lt;b&gt;note&lt;/b&gt;</bdi>' in sent.group(1)
        typed = await client.post(
            f"/review/audit/{audit}/answer",
            data={"other": "none of them", "note": "n", "csrf": csrf_of(blind.text)},
        )
        assert typed.status_code == 409
        assert (
            'id="not-saved">Not saved, what you sent: <bdi class="sent-decision">none of them<'
            in typed.text
        )


def _error(html: str) -> str:
    found = re.search(r'<p class="error" role="alert" id="case-error">(.*?)</p>', html, re.S)
    assert found, html[:2000]
    return found.group(1)


async def test_a_conflict_is_named_before_what_the_form_lacks(tmp_path: Path) -> None:
    """From a page opened earlier, an empty form (or one lacking a note) on a case
    resolved meanwhile is told who resolved it, not "pick an option first"; on a case
    another reviewer claimed, who holds it; with a stale content hash, to reload."""
    async with client_for(settings(tmp_path)) as client:
        _, (a, b, c) = await _cases(client, 3)
        await login(client, "rev")
        pages = {rid: (await client.get(f"/review/case/{rid}")).text for rid in (a, b, c)}
        sha = re.compile(r'name="content_sha256" value="([0-9a-f]{64})"')

        def form(rid: str, **fields: str) -> dict[str, str]:
            found = sha.search(pages[rid])
            assert found
            return {"csrf": csrf_of(pages[rid]), "content_sha256": found.group(1), **fields}

        await _resolve_as(client, a, "rev2")
        for sent in ({}, {"decision": "2"}, {"decision": "1", "other": "x"}):
            late = await client.post(f"/review/case/{a}/resolve", data=form(a, **sent))
            assert late.status_code == 409, sent
            assert "already resolved by rev2-name" in _error(late.text), sent
        assert (await client.post(f"/v1/review/{b}/claim", headers=auth("rev2"))).status_code == 200
        held = await client.post(f"/review/case/{b}/resolve", data=form(b))
        assert held.status_code == 409 and "claimed by rev2-name" in _error(held.text)
        stale = await client.post(
            f"/review/case/{c}/resolve", data={**form(c), "content_sha256": "0" * 64}
        )
        assert stale.status_code == 409 and "changed since it was shown" in _error(stale.text)
        # A form that can be sent is still checked as before.
        empty = await client.post(f"/review/case/{c}/resolve", data=form(c))
        assert empty.status_code == 422 and "pick an option" in _error(empty.text)
