"""The web review page in-process: login, CSRF, escaping, resolve and the next case."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from dissensus.store import Journal
from pipeline_cases import panel, write_policy
from serve_helpers import auth, client_for, csrf_of, escalating, heap_frozen, login, settings

pytestmark = pytest.mark.anyio

EVIL = "<script>alert('x')</script> & <b>bold</b>"


@pytest.fixture(scope="module", autouse=True)
def _heap_frozen() -> Iterator[None]:
    """The per-test garbage collection walks only this module's objects (see serve_helpers)."""
    yield from heap_frozen()


def _sha(html: str) -> str:
    found = re.search(r'name="content_sha256" value="([0-9a-f]{64})"', html)
    assert found
    return found.group(1)


async def _login(client: httpx.AsyncClient, token: str) -> httpx.Response:
    return await login(client, token)


async def _events(path: Path) -> int:
    with Journal(path) as journal:
        return sum(i.n_events for i in journal.runs())


async def test_login_queue_case_resolve_next(tmp_path: Path) -> None:
    s = settings(tmp_path)
    evil = panel(
        "evil",
        ["1", "2", "1"],
        values=[{"a": 1.0}, {"b": 1.0}, {"a": 0.5}],
        reasoning=[EVIL] * 3,
        meta={"question": EVIL},
    )
    async with client_for(s) as client:
        run = (
            await client.post("/v1/decide", json=[evil, escalating("second")], headers=auth("sub"))
        ).json()
        first, second = (r["review_id"] for r in run["records"])

        assert (await client.get("/review")).headers["location"] == "/review/login"
        bad = await client.post("/review/login", data={"token": "tok-rev", "csrf": "forged"})
        assert bad.status_code == 403 and "dissensus_session" not in bad.cookies
        wrong = await _login(client, "nope")
        assert wrong.status_code == 401 and "unknown token" in wrong.text
        submitter = await _login(client, "sub")
        assert submitter.status_code == 403
        ok = await _login(client, "rev")
        assert ok.status_code == 303 and ok.headers["location"] == "/review"
        cookie = ok.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/review" in cookie

        queue = await client.get("/review")
        assert queue.status_code == 200 and first in queue.text and second in queue.text
        assert "script-src 'self'" in queue.headers["content-security-policy"]
        filtered = await client.get("/review", params={"reason": "no such reason"})
        assert first not in filtered.text

        case = await client.get(f"/review/case/{first}")
        assert case.status_code == 200
        assert (
            "<script>alert" not in case.text
            and "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in case.text
        )
        assert 'id="next-link"' in case.text and 'data-key="1"' in case.text
        csrf, sha = csrf_of(case.text), _sha(case.text)

        before = await _events(Path(s.journal))
        no_note = await client.post(
            f"/review/case/{first}/resolve",
            data={"decision": "2", "note": " ", "content_sha256": sha, "csrf": csrf},
        )
        assert no_note.status_code == 422 and "overriding the panel" in no_note.text
        no_csrf = await client.post(
            f"/review/case/{first}/resolve",
            data={"decision": "1", "note": "x", "content_sha256": sha},
        )
        assert no_csrf.status_code == 403
        stale = await client.post(
            f"/review/case/{first}/resolve",
            data={"decision": "1", "note": "x", "content_sha256": "0" * 64, "csrf": csrf},
        )
        assert stale.status_code == 409 and "changed since it was shown" in stale.text
        assert await _events(Path(s.journal)) == before

        done = await client.post(
            f"/review/case/{first}/resolve",
            data={
                "decision": "2",
                "note": "the <note>",
                "content_sha256": sha,
                "csrf": csrf,
                "reviewer": "forged",
            },
        )
        assert done.status_code == 303 and done.headers["location"] == f"/review/case/{second}"
        resolved = await client.get(f"/review/case/{first}")
        assert 'id="resolved-by">rev-name<' in resolved.text and "the &lt;note&gt;" in resolved.text
        assert "review.resolved" in resolved.text
        twice = await client.post(
            f"/review/case/{first}/resolve",
            data={"decision": "1", "note": "late <b>note</b>", "content_sha256": sha, "csrf": csrf},
        )
        assert twice.status_code == 409 and "already resolved by rev-name" in twice.text
        # Nothing typed is lost: the refused pick and note are shown, escaped.
        assert 'id="not-saved"' in twice.text and "late &lt;b&gt;note&lt;/b&gt;" in twice.text
        assert "<b>note</b>" not in twice.text

        last = await client.get(f"/review/case/{second}")
        end = await client.post(
            f"/review/case/{second}/resolve",
            data={
                "decision": "1",
                "note": "checked",
                "content_sha256": _sha(last.text),
                "csrf": csrf_of(last.text),
            },
        )
        assert end.headers["location"] == "/review"
        assert (await client.get("/review/case/nope.1")).status_code == 404

        # Without its token the logout is refused (403) and the session stays, cookie too:
        # it used to delete the cookie only, leaving the session open on the server.
        forged = await client.post("/review/logout", data={})
        assert forged.status_code == 403
        assert (await client.get("/review")).status_code == 200
        logout = await client.post("/review/logout", data={"csrf": csrf_of(last.text)})
        assert logout.status_code == 303
        assert (await client.get("/review")).status_code == 303
    with Journal(s.journal) as journal:
        resolution = journal.get(run["run_id"], "review/1/resolved")
        assert resolution is not None and resolution.payload["reviewer"] == "rev-name"
        assert journal.verify(run["run_id"]).ok


async def test_claim_from_the_page_blocks_another_reviewer(tmp_path: Path) -> None:
    s = settings(tmp_path)
    async with client_for(s) as client:
        rid = (await client.post("/v1/decide", json=escalating("a"), headers=auth("sub"))).json()[
            "review_id"
        ]
        await _login(client, "rev")
        page = await client.get(f"/review/case/{rid}")
        claimed = await client.post(f"/review/case/{rid}/claim", data={"csrf": csrf_of(page.text)})
        assert claimed.status_code == 303
        shown = await client.get(f"/review/case/{rid}")
        assert "claimed</b> by rev-name" in shown.text
        other = await client.post(
            f"/v1/review/{rid}/resolve",
            json={"decision": "1", "note": "checked", "content_sha256": _sha(shown.text)},
            headers=auth("rev2"),
        )
        assert other.status_code == 409 and other.json()["claimed_by"] == "rev-name"


async def test_without_tokens_the_page_opens_a_local_session(tmp_path: Path) -> None:
    s = settings(tmp_path, tokens=None)
    async with client_for(s) as client:
        rid = (await client.post("/v1/decide", json=escalating("a"))).json()["review_id"]
        first = await client.get("/review")
        assert first.status_code == 303 and "dissensus_session" in first.headers["set-cookie"]
        assert (await client.get("/review/login")).status_code == 303
        page = await client.get(f"/review/case/{rid}")
        assert page.status_code == 200
        done = await client.post(
            f"/review/case/{rid}/resolve",
            data={
                "decision": "1",
                "note": "checked",
                "content_sha256": _sha(page.text),
                "csrf": csrf_of(page.text),
            },
        )
        assert done.status_code == 303
        assert (await client.get(f"/v1/review/{rid}")).json()["resolution"]["reviewer"] == "local"


async def test_audit_an_automatic_decision_from_the_page(tmp_path: Path) -> None:
    # No blind audit by chance (the default audit share): a blind audit hides the case here.
    quiet = write_policy(tmp_path / "no-audits.yaml", {"acceptance": {"audit_rate": 0.0}})
    s = settings(tmp_path, policy=str(quiet))
    agree = panel(
        "agree",
        ["1", "1", "1"],
        swap=["1", "1", "1"],
        meta={"question": EVIL, "gold": "secret-gold-label"},
    )
    async with client_for(s) as client:
        run = (await client.post("/v1/decide", json=[agree], headers=auth("sub"))).json()
        record = run["records"][0]
        assert record["auto"], record
        ref = f"{run['run_id']}.{record['line']}"
        await _login(client, "rev")
        listed = await client.get("/review", params={"status": "automatic"})
        assert f"/review/auto/{ref}" in listed.text
        page = await client.get(f"/review/auto/{ref}")
        assert page.status_code == 200 and 'id="audit"' in page.text
        assert "<script>alert" not in page.text and "secret-gold-label" not in page.text
        no_note = await client.post(
            f"/review/auto/{ref}/confirm",
            data={"decision": "2", "note": "", "csrf": csrf_of(page.text)},
        )
        assert no_note.status_code == 422
        forged = await client.post(
            f"/review/auto/{ref}/confirm", data={"decision": "2", "note": "x", "csrf": "forged"}
        )
        assert forged.status_code == 403
        done = await client.post(
            f"/review/auto/{ref}/confirm",
            data={"decision": "2", "note": "2 is right", "csrf": csrf_of(page.text)},
        )
        assert done.status_code == 303
        audited = await client.get(f"/review/auto/{ref}")
        assert "Audited</b> by rev-name" in audited.text and 'id="audit"' not in audited.text
        assert (
            f"/review/auto/{ref}"
            not in (await client.get("/review", params={"status": "automatic"})).text
        )
    with Journal(s.journal) as journal:
        audit = journal.get(run["run_id"], f"confirm/{record['line']}")
        assert audit is not None and audit.payload["reviewer"] == "rev-name"
        assert audit.payload["decision"] == "2" and not audit.payload["agrees"]


async def test_an_audit_may_type_an_answer_no_agent_gave(tmp_path: Path) -> None:
    """The right answer of an automatic decision may be none of the listed ones (a
    free-form panel): the audit form's typed answer (key o) replaces the pick."""
    quiet = write_policy(tmp_path / "no-audits.yaml", {"acceptance": {"audit_rate": 0.0}})
    s = settings(tmp_path, policy=str(quiet))
    agree = panel("agree", ["1", "1", "1"], swap=["1", "1", "1"])
    async with client_for(s) as client:
        run = (await client.post("/v1/decide", json=[agree], headers=auth("sub"))).json()
        record = run["records"][0]
        ref = f"{run['run_id']}.{record['line']}"
        await _login(client, "rev")
        page = await client.get(f"/review/auto/{ref}")
        assert 'id="other-decision"' in page.text
        done = await client.post(
            f"/review/auto/{ref}/confirm",
            data={
                "decision": "1",
                "other": "42",
                "note": "none of them",
                "csrf": csrf_of(page.text),
            },
        )
        assert done.status_code == 303
    with Journal(s.journal) as journal:
        audit = journal.get(run["run_id"], f"confirm/{record['line']}")
        assert audit is not None and audit.payload["decision"] == "42"
        assert not audit.payload["agrees"]


async def test_queue_filters_sort_search_and_context(tmp_path: Path) -> None:
    s = settings(tmp_path)
    rows = [
        panel(
            f"q{i}",
            ["1", "2", "1"],
            values=[{"a": 1.0}, {"b": 1.0}, {"a": 0.5}],
            reasoning=["Option 1 is right."] * 3,
            meta={"question": f"question number {i} about {'refunds' if i % 2 else 'shipping'}"},
        )
        for i in range(4)
    ]
    async with client_for(s) as client:
        run = (await client.post("/v1/decide", json=rows, headers=auth("sub"))).json()
        ids = [r["review_id"] for r in run["records"]]
        await _login(client, "rev")
        found = await client.get("/review", params={"q": "REFUNDS", "run": run["run_id"]})
        assert [i for i in ids if i in found.text] == [ids[1], ids[3]]
        newest = await client.get("/review", params={"sort": "newest", "run": run["run_id"]})
        assert newest.text.index(ids[3]) < newest.text.index(ids[0])
        # The queue travels with the case page: j/k and progress stay within the search.
        case = await client.get(f"/review/case/{ids[1]}", params={"q": "refunds"})
        assert f'id="next-link" href="/review/case/{ids[1]}/next?q=refunds"' in case.text
        step = await client.get(f"/review/case/{ids[1]}/next", params={"q": "refunds"})
        assert step.headers["location"] == f"/review/case/{ids[3]}?q=refunds"
        assert 'id="prev-link"' not in case.text
        assert "1 of 2 open in this queue; you resolved 0 today" in case.text
        bogus = await client.get(f"/review/case/{ids[1]}", params={"run": "no-such-run"})
        assert bogus.status_code == 200 and 'id="next-link"' not in bogus.text
        assert (await client.get("/review", params={"run": "no-such-run"})).status_code == 200


ABSTAINED = {
    "outputs": [
        {"agent": "a", "decision": None, "reasoning": "r"},
        {"agent": "b", "decision": None, "reasoning": "r"},
    ]
}


async def test_a_case_no_agent_answered_is_resolved_with_a_typed_answer(tmp_path: Path) -> None:
    s = settings(tmp_path)
    async with client_for(s) as client:
        run = (
            await client.post(
                "/v1/decide",
                json=[{"id": "e", **ABSTAINED}, {"id": "e2", **ABSTAINED}, escalating("opts")],
                headers=auth("sub"),
            )
        ).json()
        page_id, api_id, with_options = (r["review_id"] for r in run["records"])
        shown = (await client.get(f"/v1/review/{page_id}", headers=auth("rev"))).json()
        assert shown["item"]["options"] == [] and shown["item"]["suggestion"] is None

        await _login(client, "rev")
        page = await client.get(f"/review/case/{page_id}")
        assert page.status_code == 200 and 'data-key="1"' not in page.text
        assert 'id="other-decision" name="other"' in page.text
        assert "no agent gave an answer: type the decision" in page.text
        csrf, sha = csrf_of(page.text), _sha(page.text)

        before = await _events(Path(s.journal))
        refused = {
            "nothing typed": ({"note": "x"}, 422, "type the decision (o) first"),
            "no note": ({"other": "yes"}, 422, "the panel suggests nothing"),
            "stale page": (
                {"other": "yes", "note": "x", "content_sha256": "0" * 64},
                409,
                "changed since it was shown",
            ),
        }
        for why, (data, status, text) in refused.items():
            got = await client.post(
                f"/review/case/{page_id}/resolve",
                data={"content_sha256": sha, "csrf": csrf, **data},
            )
            assert got.status_code == status and text in got.text, why
        forged = await client.post(
            f"/review/case/{page_id}/resolve",
            data={"other": "yes", "note": "x", "content_sha256": sha, "csrf": "forged"},
        )
        assert forged.status_code == 403
        assert await _events(Path(s.journal)) == before

        done = await client.post(
            f"/review/case/{page_id}/resolve",
            data={"other": " <b>yes</b> ", "note": "read it", "content_sha256": sha, "csrf": csrf},
        )
        assert done.status_code == 303 and done.headers["location"] == f"/review/case/{api_id}"
        resolved = await client.get(f"/review/case/{page_id}")
        assert 'data-decision="&lt;b&gt;yes&lt;/b&gt;"' in resolved.text
        assert "<b>yes</b>" not in resolved.text and "(none of the options)" not in resolved.text

        # The same answer through the API, for the journal's comparison below.
        api_sha = (await client.get(f"/v1/review/{api_id}", headers=auth("rev"))).json()
        by_api = await client.post(
            f"/v1/review/{api_id}/resolve",
            json={
                "decision": "<b>yes</b>",
                "note": "read it",
                "content_sha256": api_sha["content_sha256"],
            },
            headers=auth("rev"),
        )
        assert by_api.status_code == 200

        # A case with options: another answer is flagged outside them; not both at once.
        other = await client.get(f"/review/case/{with_options}")
        assert "or another answer (<kbd>o</kbd>)" in other.text
        form = {"content_sha256": _sha(other.text), "csrf": csrf_of(other.text), "note": "x"}
        both = await client.post(
            f"/review/case/{with_options}/resolve", data={**form, "decision": "1", "other": "3"}
        )
        assert both.status_code == 422 and "not both" in both.text
        outside = await client.post(
            f"/review/case/{with_options}/resolve", data={**form, "other": "neither"}
        )
        assert outside.status_code == 303
        flagged = await client.get(f"/review/case/{with_options}")
        assert "(none of the options)" in flagged.text

    with Journal(s.journal) as journal:
        rid = run["run_id"]
        lines = [r["line"] for r in run["records"]]
        by_page, by_api_event, with_opts = (journal.get(rid, f"review/{n}/resolved") for n in lines)
        assert by_page is not None and by_api_event is not None and with_opts is not None
        same = ("review_id", "content_sha256")
        assert {k: v for k, v in by_page.payload.items() if k not in same} == {
            k: v for k, v in by_api_event.payload.items() if k not in same
        }
        assert by_page.payload["decision"] == "<b>yes</b>"
        assert by_page.payload["reviewer"] == "rev-name"
        assert by_page.payload["outside_options"] is False  # no option to be outside of
        assert with_opts.payload["outside_options"] is True
        assert with_opts.payload["decision"] == "neither"
        record = journal.get(rid, f"case/{lines[0]}/resolved")
        assert record is not None and record.payload["decision"] == "<b>yes</b>"
        assert record.payload["action"] == "human"
        assert journal.verify(rid).ok


async def test_a_note_over_the_field_bound_is_a_422_on_the_page(tmp_path: Path) -> None:
    s = settings(tmp_path, max_field_chars=100)
    async with client_for(s) as client:
        run = (
            await client.post("/v1/decide", json=[escalating("long")], headers=auth("sub"))
        ).json()
        review_id = run["records"][0]["review_id"]
        assert (await _login(client, "rev")).status_code == 303
        case = await client.get(f"/review/case/{review_id}")
        before = await _events(Path(s.journal))
        res = await client.post(
            f"/review/case/{review_id}/resolve",
            data={
                "decision": "1",
                "note": "n" * 101,
                "content_sha256": _sha(case.text),
                "csrf": csrf_of(case.text),
            },
        )
        assert res.status_code == 422 and "at most 100 per field" in res.text
        assert await _events(Path(s.journal)) == before  # nothing journalled


async def test_j_k_and_the_progress_line_keep_to_the_queues_status(tmp_path: Path) -> None:
    """The open queue walks open cases: one resolved meanwhile (by another reviewer) is
    stepped over by j / k, and the progress line counts open cases; the resolved queue
    walks resolved cases and counts them; all walks both."""
    s = settings(tmp_path)
    async with client_for(s) as client:
        run = (
            await client.post(
                "/v1/decide", json=[escalating(f"st{i}") for i in range(4)], headers=auth("sub")
            )
        ).json()
        a, b, c, d = (r["review_id"] for r in run["records"])
        for done in (b, c):
            sha = (await client.get(f"/v1/review/{done}", headers=auth("rev2"))).json()[
                "content_sha256"
            ]
            resolved = await client.post(
                f"/v1/review/{done}/resolve",
                json={"decision": "1", "note": "checked", "content_sha256": sha},
                headers=auth("rev2"),
            )
            assert resolved.status_code == 200, resolved.text
        await _login(client, "rev")
        q = f"?run={run['run_id']}"

        async def links(html: str) -> tuple[str | None, str | None]:
            """Where the case's previous and next links lead (followed: they go to the
            neighbour as the queue stands when they are followed)."""

            async def to(link: str) -> str | None:
                found = re.search(rf'id="{link}" href="([^"]+)"', html)
                if found is None:
                    return None
                got = await client.get(found.group(1).replace("&amp;", "&"))
                moved = re.match(r"/review/case/([^?]+)", got.headers["location"])
                assert moved, got.headers["location"]
                return moved.group(1)

            return await to("prev-link"), await to("next-link")

        first = (await client.get(f"/review/case/{a}{q}")).text
        assert await links(first) == (None, d)
        assert "1 of 2 open in this queue" in first
        last = (await client.get(f"/review/case/{d}{q}")).text
        assert await links(last) == (a, None) and "2 of 2 open in this queue" in last
        # A resolved case seen from the open queue: its open neighbours around it.
        assert await links((await client.get(f"/review/case/{b}{q}")).text) == (a, d)
        done = (await client.get(f"/review/case/{b}{q}&status=resolved")).text
        assert await links(done) == (None, c) and "1 of 2 resolved in this queue" in done
        every = (await client.get(f"/review/case/{b}{q}&status=all")).text
        assert await links(every) == (a, c) and "2 of 4 cases in this queue" in every


async def test_the_queue_names_a_resolved_decision_as_the_case_page_does(tmp_path: Path) -> None:
    """The "resolved" column shows the option's label, escaped, with its id beside it, as
    the case page's options do; an answer outside the options is shown as it is."""
    labelled = panel(
        "labelled",
        ["1", "2", "1"],
        values=[{"a": 1.0}, {"b": 1.0}, {"a": 0.5}],
        meta={"option_labels": {"1": EVIL, "2": "Reject"}},
    )
    async with client_for(settings(tmp_path)) as client:
        run = (
            await client.post(
                "/v1/decide", json=[labelled, escalating("plain")], headers=auth("sub")
            )
        ).json()
        first, second = (r["review_id"] for r in run["records"])
        for rid, decision in ((first, "1"), (second, "not <i>listed</i>")):
            sha = (await client.get(f"/v1/review/{rid}", headers=auth("rev"))).json()
            done = await client.post(
                f"/v1/review/{rid}/resolve",
                json={"decision": decision, "note": "n", "content_sha256": sha["content_sha256"]},
                headers=auth("rev"),
            )
            assert done.status_code == 200, done.text
        await _login(client, "rev")
        queue = (await client.get("/review", params={"status": "resolved"})).text
        case = (await client.get(f"/review/case/{first}")).text
    shown = "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &lt;b&gt;bold&lt;/b&gt;"
    assert f"<b>resolved</b>: <bdi>{shown}</bdi>" in case
    assert f"resolved: <bdi>{shown}</bdi> <small>(option <bdi>1</bdi>)</small>" in queue
    assert "resolved: <bdi>not &lt;i&gt;listed&lt;/i&gt;</bdi></td>" in queue
    assert "<script>alert" not in queue


async def test_an_item_journalled_without_todays_defaults_resolves_from_its_page(
    tmp_path: Path,
) -> None:
    """An item an early version journalled lacks fields the model now fills with defaults
    (``audit``, ``stratum``, ``acceptance_sha256``): its page quotes the hash the resolve
    checks (the journalled payload's), so the reviewer's decision is taken."""
    import json
    import sqlite3

    s = settings(tmp_path)
    async with client_for(s) as client:
        run = (
            await client.post("/v1/decide", json=[escalating("old")], headers=auth("sub"))
        ).json()
        (review_id,) = (r["review_id"] for r in run["records"])
        with sqlite3.connect(s.journal) as db:
            (payload,) = db.execute(
                "SELECT payload FROM events WHERE type = 'review.opened'"
            ).fetchone()
            early = {
                k: v
                for k, v in json.loads(payload).items()
                if k not in ("audit", "stratum", "acceptance_sha256")
            }
            db.execute(
                "UPDATE events SET payload = ? WHERE type = 'review.opened'",
                (json.dumps(early, sort_keys=True, separators=(",", ":")),),
            )
        assert (await _login(client, "rev")).status_code == 303
        case = await client.get(f"/review/case/{review_id}")
        assert case.status_code == 200
        listed = (await client.get("/v1/review", headers=auth("rev"))).json()
        (entry,) = (e for e in listed if e["review_id"] == review_id)
        assert _sha(case.text) == entry["content_sha256"]
        done = await client.post(
            f"/review/case/{review_id}/resolve",
            data={
                "decision": "1",
                "note": "checked",
                "content_sha256": _sha(case.text),
                "csrf": csrf_of(case.text),
            },
        )
        assert done.status_code == 303, done.text
