"""The audit pages' forms in-process: a refused audit (blind, or of an automatic decision)
keeps what the reviewer sent, escaped as text; the holder of a claim on an audit gives
it up from the page (``give up claim``), nobody else can."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dissensus.store import Journal
from pipeline_cases import panel, write_policy
from serve_helpers import (
    auth,
    client_for,
    csrf_of,
    decide_automatic,
    escalating,
    heap_frozen,
    journal_events,
    login,
    settings,
)

pytestmark = pytest.mark.anyio

HX = {"HX-Request": "true"}
OPTIONS = [{"id": "1", "text": "Refunds within 30 days."}, {"id": "2", "text": "No refunds."}]
HOSTILE = '<script>alert(1)</script> "quotes" & ampersands'
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt; &#34;quotes&#34; &amp; ampersands"


@pytest.fixture(scope="module", autouse=True)
def _heap_frozen() -> Iterator[None]:
    yield from heap_frozen()


def _agreeing(pid: str) -> dict[str, Any]:
    meta = {"question": "Which policy is stated?", "options": OPTIONS}
    return panel(pid, ["1", "1", "1"], swap=["1", "1", "1"], meta=meta)


def _error(html: str) -> str:
    found = re.search(r'<p class="error" role="alert" id="case-error">(.*?)</p>', html, re.S)
    assert found, html[:2000]
    return found.group(1)


def _picked(html: str) -> list[str]:
    """The options checked on the page's form."""
    return re.findall(r'name="decision" value="([^"]*)" data-key="\d"\s*checked', html)


def _value(html: str, field: str) -> str:
    """The value (as in the HTML, escaped) of the form's text field of id ``field``."""
    found = re.search(rf'<input id="{field}" [^>]*?value="([^"]*)"', html)
    assert found, field
    return found.group(1)


async def test_a_refused_blind_audit_keeps_what_was_sent(tmp_path: Path) -> None:
    policy = write_policy(tmp_path / "audit.yaml", {"acceptance": {"audit_rate": 1.0}})
    s = settings(tmp_path, policy=str(policy), max_field_chars=100)
    async with client_for(s) as client:
        (ref,) = await decide_automatic(client, [_agreeing("a")])
        qs = f"?run={ref.rsplit('.', 1)[0]}"
        where = f"/review/audit/{ref}{qs}"
        post = f"/review/audit/{ref}/answer{qs}"
        await login(client, "rev")
        page = await client.get(where)
        assert _picked(page.text) == [] and 'name="note"' in page.text
        csrf = csrf_of(page.text)
        before = journal_events(s.journal)

        # No option picked nor answer typed: 422, the note kept as text, never markup.
        bare = await client.post(post, data={"note": HOSTILE, "csrf": csrf}, headers=HX)
        assert bare.status_code == 422 and "pick an option" in _error(bare.text)
        assert _value(bare.text, "note") == ESCAPED and "<script>alert(1)" not in bare.text
        assert bare.headers["HX-Replace-Url"] == where

        # A pick without a note: 422, the pick kept (a plain post, as without htmx).
        unnoted = await client.post(post, data={"decision": "2", "note": " ", "csrf": csrf})
        assert unnoted.status_code == 422 and "write a note" in _error(unnoted.text)
        assert _picked(unnoted.text) == ["2"] and _value(unnoted.text, "note") == " "

        # A pick and another answer: 422, both kept, the typed answer escaped.
        both = {"decision": "1", "other": HOSTILE, "note": "x", "csrf": csrf}
        twice = await client.post(post, data=both)
        assert twice.status_code == 422 and "not both" in _error(twice.text)
        assert _picked(twice.text) == ["1"]
        assert _value(twice.text, "other-decision") == ESCAPED

        # A note over --max-field-chars: 422, all of it kept.
        long = await client.post(post, data={"decision": "2", "note": "n" * 150, "csrf": csrf})
        assert long.status_code == 422 and "at most 100 per field" in long.text
        assert _value(long.text, "note") == "n" * 150 and _picked(long.text) == ["2"]

        # Another reviewer's claim: 409 naming them, the form kept, the answer still hidden.
        assert (await client.post(f"/v1/review/{ref}/claim", headers=auth("rev2"))).is_success
        held = await client.post(
            post, data={"decision": "1", "note": HOSTILE, "csrf": csrf}, headers=HX
        )
        assert held.status_code == 409 and "claimed by rev2-name" in _error(held.text)
        assert _value(held.text, "note") == ESCAPED and _picked(held.text) == ["1"]
        assert 'id="committed"' not in held.text and "hidden until" in held.text
        assert held.headers["HX-Replace-Url"] == where
        assert journal_events(s.journal) == before

        # A fresh page shows an empty form again.
        again = await client.get(where)
        assert _picked(again.text) == [] and _value(again.text, "note") == ""


async def test_a_refused_audit_of_an_automatic_decision_keeps_what_was_sent(
    tmp_path: Path,
) -> None:
    quiet = write_policy(tmp_path / "no-audits.yaml", {"acceptance": {"audit_rate": 0.0}})
    s = settings(tmp_path, policy=str(quiet), max_field_chars=100)
    async with client_for(s) as client:
        (ref,) = await decide_automatic(client, [_agreeing("a")])
        where = f"/review/auto/{ref}"
        post = f"/review/auto/{ref}/confirm"
        await login(client, "rev")
        page = await client.get(where)
        # Folded, the committed decision picked by default.
        assert '<details id="audit">' in page.text and _picked(page.text) == ["1"]
        csrf = csrf_of(page.text)
        before = journal_events(s.journal)

        # Every option the panel lists is offered, the one nobody chose included.
        assert re.findall(r'name="decision" value="([^"]*)"', page.text) == ["1", "2"]
        # A correction without a note: 422, the pick and the typed answer kept, unfolded.
        typed = {"decision": "1", "other": HOSTILE, "note": "", "csrf": csrf}
        unnoted = await client.post(post, data=typed, headers=HX)
        assert unnoted.status_code == 422 and "write a note" in _error(unnoted.text)
        assert '<details id="audit" open>' in unnoted.text
        assert _picked(unnoted.text) == ["1"]
        assert _value(unnoted.text, "other-decision") == ESCAPED
        assert "<script>alert(1)" not in unnoted.text
        assert unnoted.headers["HX-Replace-Url"] == where

        # No pick sent (it confirms the committed one): kept as sent, nothing picked (not
        # the committed one picked anew).
        long = await client.post(post, data={"note": "n" * 150, "csrf": csrf})
        assert long.status_code == 422 and "at most 100 per field" in long.text
        assert _value(long.text, "audit-note") == "n" * 150 and _picked(long.text) == []

        # Another reviewer's claim: 409 naming them, the note kept as text.
        assert (await client.post(f"/v1/review/{ref}/claim", headers=auth("rev2"))).is_success
        held = await client.post(post, data={"other": "3", "note": HOSTILE, "csrf": csrf})
        assert held.status_code == 409 and "claimed by rev2-name" in _error(held.text)
        assert _value(held.text, "audit-note") == ESCAPED
        assert _value(held.text, "other-decision") == "3" and _picked(held.text) == []
        assert "<script>alert(1)" not in held.text
        assert journal_events(s.journal) == before


async def test_the_holder_gives_a_blind_audit_claim_up_from_the_page(tmp_path: Path) -> None:
    policy = write_policy(tmp_path / "audit.yaml", {"acceptance": {"audit_rate": 1.0}})
    s = settings(tmp_path, policy=str(policy))
    async with client_for(s) as client:
        (ref,) = await decide_automatic(client, [_agreeing("a")])
        escalated = (
            await client.post("/v1/decide", json=escalating("e"), headers=auth("sub"))
        ).json()["review_id"]
        qs = f"?run={ref.rsplit('.', 1)[0]}"
        where = f"/review/audit/{ref}{qs}"
        await login(client, "rev")
        page = await client.get(where)
        assert 'id="release-form"' not in page.text
        csrf = csrf_of(page.text)
        await client.post(f"/review/audit/{ref}/claim{qs}", data={"csrf": csrf})
        mine = await client.get(where)
        assert "<b>claimed</b> by rev-name" in mine.text
        assert f'id="release-form" method="post" action="/review/audit/{ref}/release{qs}"' in (
            mine.text
        )
        assert "give up claim (r)" in mine.text

        # Without the session's CSRF token: refused, the claim kept.
        for data in ({}, {"csrf": "forged"}):
            forged = await client.post(f"/review/audit/{ref}/release{qs}", data=data)
            assert forged.status_code == 403
        with Journal(s.journal) as journal:
            assert journal.current_claim(ref) is not None

        # A plain form post (no htmx): given up, back to the page.
        gave = await client.post(f"/review/audit/{ref}/release{qs}", data={"csrf": csrf})
        assert gave.status_code == 303 and gave.headers["location"] == where
        shown = await client.get(where)
        assert "<b>claimed</b>" not in shown.text and 'id="release-form"' not in shown.text
        with Journal(s.journal) as journal:
            assert journal.current_claim(ref) is None

        # Someone else's claim: no button, and a forced post is 409 naming them, on the
        # blind page (from either address), the claim kept.
        theirs = (await client.post(f"/v1/review/{ref}/claim", headers=auth("rev2"))).json()
        held = await client.get(where)
        assert "claimed</b> by rev2-name" in held.text and 'id="release-form"' not in held.text
        for url in (f"/review/audit/{ref}/release", f"/review/auto/{ref}/release"):
            refused = await client.post(url, data={"csrf": csrf}, headers=HX)
            assert refused.status_code == 409, url
            said = _error(refused.text)
            assert "rev2-name" in said and f'<time datetime="{theirs["expires"]}">' in said
            assert 'id="committed"' not in refused.text and "hidden until" in refused.text
            assert refused.headers["HX-Replace-Url"] == f"/review/audit/{ref}"
        with Journal(s.journal) as journal:
            held_now = journal.current_claim(ref)
            assert held_now is not None and held_now.who == "rev2-name"

        # Only audits: an escalated case's claim is not given up here, an unknown one is 404.
        assert (await client.post(f"/v1/review/{escalated}/claim", headers=auth("rev"))).is_success
        for url in (f"/review/audit/{escalated}/release", "/review/audit/nope.1/release"):
            missing = await client.post(url, data={"csrf": csrf})
            assert missing.status_code == 404, url
        with Journal(s.journal) as journal:
            assert journal.current_claim(escalated) is not None


async def test_the_holder_gives_an_automatic_decisions_audit_claim_up(tmp_path: Path) -> None:
    quiet = write_policy(tmp_path / "no-audits.yaml", {"acceptance": {"audit_rate": 0.0}})
    s = settings(tmp_path, policy=str(quiet))
    async with client_for(s) as client:
        (ref,) = await decide_automatic(client, [_agreeing("a")])
        escalated = (
            await client.post("/v1/decide", json=escalating("e"), headers=auth("sub"))
        ).json()["review_id"]
        where = f"/review/auto/{ref}"
        await login(client, "rev")
        page = await client.get(where)
        assert 'id="release-form"' not in page.text
        csrf = csrf_of(page.text)
        await client.post(f"/review/auto/{ref}/claim", data={"csrf": csrf})
        mine = await client.get(where)
        assert "<b>Claimed</b> by rev-name" in mine.text
        assert f'id="release-form" method="post" action="/review/auto/{ref}/release"' in mine.text

        gave = await client.post(f"/review/auto/{ref}/release", data={"csrf": csrf})
        assert gave.status_code == 303 and gave.headers["location"] == where
        shown = await client.get(where)
        assert "<b>Claimed</b>" not in shown.text and 'id="release-form"' not in shown.text
        # Nothing held: nothing to give up, back to the page all the same.
        again = await client.post(f"/review/auto/{ref}/release", data={"csrf": csrf})
        assert again.status_code == 303 and again.headers["location"] == where
        assert (
            await client.post(f"/review/auto/{ref}/release", data={"csrf": "forged"})
        ).status_code == 403

        assert (await client.post(f"/v1/review/{ref}/claim", headers=auth("rev2"))).is_success
        refused = await client.post(f"/review/auto/{ref}/release", data={"csrf": csrf})
        assert refused.status_code == 409 and "rev2-name" in _error(refused.text)
        assert "<b>Claimed</b> by rev2-name" in refused.text
        assert 'id="release-form"' not in refused.text

        # An escalated case's claim is neither taken nor given up from an audit's address.
        for action in ("claim", "release"):
            missing = await client.post(f"/review/auto/{escalated}/{action}", data={"csrf": csrf})
            assert missing.status_code == 404, action
        with Journal(s.journal) as journal:
            assert journal.current_claim(escalated) is None
            held = journal.current_claim(ref)
            assert held is not None and held.who == "rev2-name"
