"""Claims on audits: the claim endpoint and the pages take ``<run>.<line>`` of an automatic
decision not audited yet; an audit (API, page, library) is refused while another
reviewer holds it; the audit pages walk around audits others hold."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from dissensus.errors import InputError
from dissensus.pipeline.confirm import AlreadyConfirmed, confirm
from dissensus.store import ClaimConflict, Journal
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

OPTIONS = [{"id": "1", "text": "Refunds within 30 days."}, {"id": "2", "text": "No refunds."}]


@pytest.fixture(scope="module", autouse=True)
def _heap_frozen() -> Iterator[None]:
    yield from heap_frozen()


async def _login(client: httpx.AsyncClient, token: str) -> None:
    assert (await login(client, token)).status_code == 303


def _error(html: str) -> str:
    """The page's error line (``#case-error``)."""
    found = re.search(r'id="case-error">([^<]*)<', html)
    assert found, html
    return found.group(1)


def _agreeing(pid: str) -> dict[str, Any]:
    meta = {"question": "Which policy is stated?", "options": OPTIONS}
    return panel(pid, ["1", "1", "1"], swap=["1", "1", "1"], meta=meta)


async def test_the_api_claims_an_automatic_decision_and_confirm_respects_it(
    tmp_path: Path,
) -> None:
    quiet = write_policy(tmp_path / "no-audits.yaml", {"acceptance": {"audit_rate": 0.0}})
    s = settings(tmp_path, policy=str(quiet))
    async with client_for(s) as client:
        (ref,) = await decide_automatic(client, [_agreeing("a")])
        escalated = (
            await client.post("/v1/decide", json=escalating("e"), headers=auth("sub"))
        ).json()["review_id"]
        run_id = ref.rsplit(".", 1)[0]

        claimed = await client.post(f"/v1/review/{ref}/claim", headers=auth("rev"))
        assert claimed.status_code == 200 and claimed.json()["reviewer"] == "rev-name"
        renewed = await client.post(f"/v1/review/{ref}/claim", headers=auth("rev"))
        assert renewed.status_code == 200
        taken = await client.post(f"/v1/review/{ref}/claim", headers=auth("rev2"))
        assert taken.status_code == 409 and taken.json()["claimed_by"] == "rev-name"

        before = journal_events(s.journal)
        blocked = await client.post(
            f"/v1/cases/{ref}/confirm", json={"note": "looks right"}, headers=auth("rev2")
        )
        assert blocked.status_code == 409 and blocked.json()["claimed_by"] == "rev-name"
        assert journal_events(s.journal) == before

        done = await client.post(
            f"/v1/cases/{ref}/confirm",
            json={"note": "looks right", "decision": "1"},  # a blind audit needs one
            headers=auth("rev"),
        )
        assert done.status_code == 200
        with Journal(s.journal) as journal:
            assert journal.current_claim(ref) is None  # the audit released it
        late = await client.post(f"/v1/review/{ref}/claim", headers=auth("rev2"))
        assert late.status_code == 409 and late.json()["confirmed_by"] == "rev-name"

        # Escalated cases are claimed as before; anything else is unknown.
        ok = await client.post(f"/v1/review/{escalated}/claim", headers=auth("rev2"))
        assert ok.status_code == 200
        for unknown in (f"{run_id}.9", "nope.1", "no-dot"):
            missing = await client.post(f"/v1/review/{unknown}/claim", headers=auth("rev"))
            assert missing.status_code == 404, unknown
            assert "no review item" in missing.json()["error"]


def test_claim_audit_checks_the_case_under_the_run_lock(tmp_path: Path) -> None:
    import asyncio

    from dissensus.pipeline.confirm import claim_audit

    quiet = write_policy(tmp_path / "no-audits.yaml", {"acceptance": {"audit_rate": 0.0}})
    s = settings(tmp_path, policy=str(quiet))

    async def decide() -> tuple[str, str]:
        async with client_for(s) as client:
            (ref,) = await decide_automatic(client, [_agreeing("a")])
            rid = (
                await client.post("/v1/decide", json=escalating("e"), headers=auth("sub"))
            ).json()["review_id"]
            return ref, rid

    ref, escalated = asyncio.run(decide())
    with Journal(s.journal) as journal:
        with pytest.raises(InputError, match="not decided automatically"):
            claim_audit(journal, escalated, "alice", ttl=60)
        held = claim_audit(journal, ref, "alice", ttl=60)
        assert held.who == "alice" and journal.current_claim(ref) is not None
        with pytest.raises(ClaimConflict, match="alice"):
            claim_audit(journal, ref, "bob", ttl=60)
        with pytest.raises(ClaimConflict, match="alice"):
            confirm(journal, ref, note="x", reviewer="bob")
        confirm(journal, ref, note="checked", reviewer="alice")
        assert journal.current_claim(ref) is None
        with pytest.raises(AlreadyConfirmed, match="already audited by alice"):
            claim_audit(journal, ref, "bob", ttl=60)


async def test_the_audit_pages_claim_and_walk_around_audits_others_hold(tmp_path: Path) -> None:
    policy = write_policy(tmp_path / "audit.yaml", {"acceptance": {"audit_rate": 1.0}})
    s = settings(tmp_path, policy=str(policy))
    async with client_for(s) as client:
        a, b, c = await decide_automatic(client, [_agreeing(f"b{i}") for i in range(3)])
        run_id = a.rsplit(".", 1)[0]
        qs = f"?run={run_id}"
        assert (await client.post(f"/v1/review/{b}/claim", headers=auth("rev2"))).status_code == 200
        shown = (await client.get(f"/v1/audits/{b}", headers=auth("rev"))).json()
        assert shown["status"] == "open" and shown["claim"]["reviewer"] == "rev2-name"

        await _login(client, "rev")
        listed = await client.get("/review", params={"status": "audits", "run": run_id})
        assert "claimed by rev2-name" in listed.text

        page = await client.get(f"/review/audit/{a}{qs}")
        assert 'id="claim-form"' in page.text
        assert f'id="next-link" href="/review/audit/{a}/next{qs}"' in page.text
        stepped = await client.get(f"/review/audit/{a}/next{qs}")
        assert stepped.headers["location"] == f"/review/audit/{c}{qs}"  # b is rev2's
        assert "1 of 3 open audits" in page.text
        csrf = csrf_of(page.text)
        third = await client.get(f"/review/audit/{c}{qs}")
        assert f'id="prev-link" href="/review/audit/{c}/previous{qs}"' in third.text
        back = await client.get(f"/review/audit/{c}/previous{qs}")
        assert back.headers["location"] == f"/review/audit/{a}{qs}"

        claimed = await client.post(f"/review/audit/{a}/claim{qs}", data={"csrf": csrf})
        assert (
            claimed.status_code == 303 and claimed.headers["location"] == f"/review/audit/{a}{qs}"
        )
        mine = await client.get(f"/review/audit/{a}{qs}")
        assert "<b>claimed</b> by rev-name" in mine.text
        forged = await client.post(f"/review/audit/{c}/claim", data={"csrf": "forged"})
        assert forged.status_code == 403

        before = journal_events(s.journal)
        refused = await client.post(
            f"/review/audit/{b}/answer{qs}", data={"decision": "2", "note": "x", "csrf": csrf}
        )
        assert refused.status_code == 409 and "claimed by rev2-name" in refused.text
        for url in (f"/review/audit/{b}/claim", f"/review/auto/{b}/claim"):
            taken = await client.post(url, data={"csrf": csrf})
            assert taken.status_code == 409 and "claimed by rev2-name" in taken.text, url
            # The blind page: nothing of the committed answer.
            assert 'id="committed"' not in taken.text and "hidden until" in taken.text, url
        assert journal_events(s.journal) == before

        # Answered: on to the next open audit nobody else holds (c, not b).
        done = await client.post(
            f"/review/audit/{a}/answer{qs}", data={"decision": "1", "note": "x", "csrf": csrf}
        )
        assert done.status_code == 303 and done.headers["location"] == f"/review/audit/{c}{qs}"
        last = await client.post(
            f"/review/audit/{c}/answer{qs}", data={"decision": "1", "note": "x", "csrf": csrf}
        )
        assert last.headers["location"] == f"/review?status=audits&run={run_id}"
        assert (
            await client.post("/review/audit/nope.1/claim", data={"csrf": csrf})
        ).status_code == 404
        late = await client.post(f"/review/audit/{a}/claim", data={"csrf": csrf})
        assert late.status_code == 409 and "already audited by rev-name" in late.text
    with Journal(s.journal) as journal:
        assert journal.current_claim(a) is None and journal.current_claim(b) is not None
        assert journal.get(run_id, f"confirm/{b.rsplit('.', 1)[1]}") is None


async def test_the_automatic_decision_page_claims_its_audit(tmp_path: Path) -> None:
    quiet = write_policy(tmp_path / "no-audits.yaml", {"acceptance": {"audit_rate": 0.0}})
    s = settings(tmp_path, policy=str(quiet))
    async with client_for(s) as client:
        first, second = await decide_automatic(client, [_agreeing("x"), _agreeing("y")])
        await _login(client, "rev")
        page = await client.get(f"/review/auto/{first}")
        assert 'id="claim-form"' in page.text
        csrf = csrf_of(page.text)
        claimed = await client.post(f"/review/auto/{first}/claim", data={"csrf": csrf})
        assert claimed.status_code == 303 and claimed.headers["location"] == f"/review/auto/{first}"
        shown = await client.get(f"/review/auto/{first}")
        assert "<b>Claimed</b> by rev-name" in shown.text
        listed = await client.get("/review", params={"status": "automatic"})
        assert "claimed by rev-name" in listed.text

        blocked = await client.post(
            f"/v1/cases/{first}/confirm", json={"note": "fine"}, headers=auth("rev2")
        )
        assert blocked.status_code == 409 and blocked.json()["claimed_by"] == "rev-name"

        # Another reviewer's claim on the second: after this audit the page skips it.
        assert (
            await client.post(f"/v1/review/{second}/claim", headers=auth("rev2"))
        ).status_code == 200
        taken = await client.post(f"/review/auto/{second}/claim", data={"csrf": csrf})
        assert taken.status_code == 409 and "claimed by rev2-name" in taken.text
        done = await client.post(
            f"/review/auto/{first}/confirm", data={"note": "checked", "csrf": csrf}
        )
        assert done.status_code == 303 and done.headers["location"] == "/review"
        audited = await client.get(f"/review/auto/{first}")
        assert "Audited</b> by rev-name" in audited.text and 'id="claim-form"' not in audited.text
    with Journal(s.journal) as journal:
        assert journal.current_claim(first) is None


async def test_an_audit_page_opened_earlier_names_the_conflict_and_steps_over_it(
    tmp_path: Path,
) -> None:
    """From a blind audit page opened before another reviewer answered or claimed: j / k
    step over what was taken meanwhile, and an empty answer is told "already audited"
    (409), not "pick an option first" (a form it could no longer send)."""
    policy = write_policy(tmp_path / "audit.yaml", {"acceptance": {"audit_rate": 1.0}})
    s = settings(tmp_path, policy=str(policy))
    async with client_for(s) as client:
        a, b, c, d = await decide_automatic(client, [_agreeing(f"s{i}") for i in range(4)])
        qs = f"?run={a.rsplit('.', 1)[0]}"
        await _login(client, "rev")
        page = await client.get(f"/review/audit/{a}{qs}")
        csrf = csrf_of(page.text)
        assert f'id="next-link" href="/review/audit/{a}/next{qs}"' in page.text
        # Meanwhile rev2 answers b and claims c.
        answered = await client.post(
            f"/v1/cases/{b}/confirm",
            json={"note": "checked", "decision": "1"},
            headers=auth("rev2"),
        )
        assert answered.status_code == 200
        assert (await client.post(f"/v1/review/{c}/claim", headers=auth("rev2"))).status_code == 200
        stepped = await client.get(f"/review/audit/{a}/next{qs}")
        assert stepped.status_code == 303
        assert stepped.headers["location"] == f"/review/audit/{d}{qs}"
        back = await client.get(f"/review/audit/{d}/previous{qs}")
        assert back.headers["location"] == f"/review/audit/{a}{qs}"

        before = journal_events(s.journal)
        for ref, holder in ((b, "already audited by rev2-name"), (c, "rev2-name")):
            late = await client.post(f"/review/audit/{ref}/answer{qs}", data={"csrf": csrf})
            assert late.status_code == 409, late.text
            assert holder in _error(late.text)
        assert journal_events(s.journal) == before
        # With nothing left after d, j goes to the list.
        last = await client.get(f"/review/audit/{d}/next{qs}")
        assert last.headers["location"].startswith("/review?")


async def test_an_automatic_decision_audited_meanwhile_is_named_before_the_note(
    tmp_path: Path,
) -> None:
    quiet = write_policy(tmp_path / "no-audits.yaml", {"acceptance": {"audit_rate": 0.0}})
    s = settings(tmp_path, policy=str(quiet))
    async with client_for(s) as client:
        (ref,) = await decide_automatic(client, [_agreeing("q0")])
        await _login(client, "rev")
        page = await client.get(f"/review/auto/{ref}")
        csrf = csrf_of(page.text)
        done = await client.post(
            f"/v1/cases/{ref}/confirm", json={"note": "fine"}, headers=auth("rev2")
        )
        assert done.status_code == 200
        late = await client.post(f"/review/auto/{ref}/confirm", data={"csrf": csrf})
        assert late.status_code == 409, late.text
        assert "already audited by rev2-name" in _error(late.text)
