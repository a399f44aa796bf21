"""The queue page's lists: the count line names the list's true size, and every row of
a long list can be reached (pages of :data:`~dissensus.serve.queue_view.QUEUE_ROWS`)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html import escape, unescape
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
    heap_frozen,
    login,
    settings,
)

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module", autouse=True)
def _heap_frozen() -> Iterator[None]:
    yield from heap_frozen()


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


def test_a_text_search_reads_each_item_once_and_follows_the_queue(tmp_path: Path) -> None:
    from dissensus.pipeline import decide, policy_from_dict
    from dissensus.pipeline.review import resolve
    from dissensus.serve.journal_adapter import ReviewDesk
    from dissensus.store import Journal
    from pipeline_cases import as_panel

    policy = policy_from_dict({"reading": {"similarity": "tfidf", "theta_s": 0.3}})

    def escalate(journal: Journal, pid: str, question: str) -> str:
        row = panel(
            pid,
            ["1", "2", "1"],
            values=[{"a": 1.0}, {"b": 1.0}, {"a": 0.5}],
            meta={"question": question},
        )
        record = decide(as_panel(row), policy, journal=journal, run_id=pid)
        assert record.review_id
        return record.review_id

    with Journal(tmp_path / "j.sqlite") as journal:
        desk = ReviewDesk(journal, claim_ttl_s=60)
        tax = escalate(journal, "one", "Is the TAX rule right?")
        escalate(journal, "two", "Is the law rule right?")
        ids = lambda **kw: [e.review_id for e in desk.order(**kw)]  # noqa: E731
        assert ids(text="tax rule") == [tax]
        assert ids(text="two") == ["two.1"]  # the case id
        read: list[int] = []
        follow = journal.follow

        def followed(*args: Any, **kwargs: Any) -> Any:
            state = follow(*args, **kwargs)
            read.append(state.read_runs)
            return state

        journal.follow = followed  # type: ignore[method-assign]
        assert ids(text="rule") == [tax, "two.1"] and read == [0]  # remembered
        later = escalate(journal, "three", "Which tax applies?")
        assert ids(text="tax") == [tax, later] and read == [0, 1]  # only the new run is read
        resolve(journal, tax, decision="1", note="ok", reviewer="r")
        assert [(e.review_id, e.resolved) for e in desk.order(text="tax")] == [
            (tax, True),
            (later, False),
        ]
        assert ids(text="tax", status="open") == [later]
        assert ids(text="tax", status="resolved") == [tax]
        assert ids(text="tax", sort="newest") == [later, tax]


async def test_pages_reach_every_row_and_keep_the_filters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("dissensus.serve.routes.pages_queue.QUEUE_ROWS", 2)
    async with _quiet(tmp_path) as client:
        await _automatic(client, 3)
        split = [
            panel(f"split-{i}", ["1", "2", "1"], values=[{"a": 1.0}, {"b": 1.0}, {"a": 0.5}])
            for i in range(3)
        ]
        run = (await client.post("/v1/decide", json=split, headers=auth("sub"))).json()
        ids = [r["review_id"] for r in run["records"]]

        first = await client.get("/review", params={"run": run["run_id"]})
        assert [i for i in ids if f"/review/case/{i}?" in first.text] == ids[:2]
        assert f'id="next-page" href="/review?run={run["run_id"]}&amp;page=2"' in first.text
        assert 'id="prev-page"' not in first.text
        second = await client.get("/review", params={"run": run["run_id"], "page": "2"})
        assert [i for i in ids if f"/review/case/{i}?" in second.text] == ids[2:]
        assert _count(second.text).startswith("3 case(s), 3–3 shown (page 2)")
        assert f'id="prev-page" href="/review?run={run["run_id"]}"' in second.text
        assert 'id="next-page"' not in second.text
        beyond = await client.get("/review", params={"run": run["run_id"], "page": "9"})
        assert "none on page 9" in _count(beyond.text) and 'class="case-link"' not in beyond.text
        # Past the end, "previous" goes to the last page (it went to page 8, empty too).
        assert f'id="prev-page" href="/review?run={run["run_id"]}&amp;page=2"' in beyond.text
        assert (await client.get("/review", params={"page": "x"})).status_code == 200

        for q in ("", "agree"):
            params = {"status": "automatic", "q": q} if q else {"status": "automatic"}
            auto2 = await client.get("/review", params={**params, "page": "2"})
            assert auto2.text.count('class="auto-link"') == 1, q
            assert _count(auto2.text).startswith("3 case(s), 3–3 shown (page 2)"), q
            assert 'id="prev-page"' in auto2.text and 'id="next-page"' not in auto2.text
        auto1 = await client.get("/review", params={"status": "automatic", "q": "agree"})
        assert 'id="next-page" href="/review?status=automatic&amp;q=agree&amp;page=2"' in (
            auto1.text
        )


async def test_a_page_number_that_is_no_plain_number_shows_the_first_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unicode digits (``²``, ``①``, ``٣``) pass ``str.isdigit`` but not ``int``, and
    ``int`` refuses more than 4,300 digits: each used to be a 500."""
    monkeypatch.setattr("dissensus.serve.routes.pages_queue.QUEUE_ROWS", 2)
    async with _quiet(tmp_path) as client:
        await _automatic(client, 3)
        params = {"status": "automatic"}
        for raw in ("\u00b2", "\u2460", "\u0663", "1" * 4301, "9" * 7, "0", "-1", "", " 2"):
            got = await client.get("/review", params={**params, "page": raw})
            assert got.status_code == 200, raw[:10]
            assert _count(got.text).startswith("3 case(s), the first 2 shown"), raw[:10]
            assert 'id="prev-page"' not in got.text
        # Leading zeros spell the same number, however many.
        padded = await client.get("/review", params={**params, "page": "0" * 5000 + "2"})
        assert padded.status_code == 200
        assert _count(padded.text).startswith("3 case(s), 3–3 shown (page 2)")


def _topical(n: int) -> list[dict[str, Any]]:
    """``n`` panels committed automatically, asking about tax except the third (law)."""
    return [
        panel(
            f"agree-{i}",
            ["1", "1", "1"],
            swap=["1", "1", "1"],
            meta={"question": f"Which {'law' if i == 2 else 'tax'} rule applies ({i})?"},
        )
        for i in range(n)
    ]


def _href(html: str, link: str) -> str | None:
    found = re.search(rf'id="{link}" href="([^"]+)"', html)
    return unescape(found.group(1)) if found else None


async def test_the_blind_audits_keep_the_lists_search_and_order(tmp_path: Path) -> None:
    """j / k, the progress line, the list's link and the audit after an answer follow the
    search and order the list of blind audits was opened with, as the queue's do."""
    every = write_policy(tmp_path / "audits.yaml", {"acceptance": {"audit_rate": 1.0}})
    async with client_for(settings(tmp_path, policy=str(every))) as client:
        refs = await decide_automatic(client, _topical(4))
        await login(client, "rev")
        qs = "?status=audits&q=tax&sort=newest"
        listed = await client.get("/review" + qs)
        shown = re.findall(r'class="audit-link" href="/review/audit/([^"?]+)', listed.text)
        assert shown == [refs[3], refs[1], refs[0]]

        async def lands(html: str, link: str) -> str | None:
            """Where a j / k link leads when followed (the neighbour as it stands then)."""
            href = _href(html, link)
            return None if href is None else (await client.get(href)).headers["location"]

        first = await client.get(f"/review/audit/{refs[3]}{qs}")
        assert _href(first.text, "next-link") == f"/review/audit/{refs[3]}/next{qs}"
        assert await lands(first.text, "next-link") == f"/review/audit/{refs[1]}{qs}"
        assert _href(first.text, "prev-link") is None
        assert ">1 of 3 open audits<" in first.text
        assert f'href="/review{escape(qs)}">blind audits<' in first.text
        middle = await client.get(f"/review/audit/{refs[1]}{qs}")
        assert await lands(middle.text, "prev-link") == f"/review/audit/{refs[3]}{qs}"
        assert await lands(middle.text, "next-link") == f"/review/audit/{refs[0]}{qs}"
        assert ">2 of 3 open audits<" in middle.text

        done = await client.post(
            f"/review/audit/{refs[3]}/answer{qs}",
            data={"decision": "1", "note": "checked", "csrf": csrf_of(first.text)},
        )
        assert done.status_code == 303 and done.headers["location"] == (
            f"/review/audit/{refs[1]}{qs}"
        )


async def test_the_next_automatic_decision_keeps_the_lists_search_and_order(
    tmp_path: Path,
) -> None:
    async with _quiet(tmp_path) as client:
        refs = await decide_automatic(client, _topical(4))
        await login(client, "rev")
        qs = "?status=automatic&q=tax&sort=newest"
        listed = await client.get("/review" + qs)
        shown = re.findall(r'class="auto-link" href="/review/auto/([^"?]+)', listed.text)
        assert shown == [refs[3], refs[1], refs[0]]
        page = await client.get(f"/review/auto/{refs[3]}{qs}")
        done = await client.post(
            f"/review/auto/{refs[3]}/confirm{qs}",
            data={"note": "checked", "csrf": csrf_of(page.text)},
        )
        assert done.status_code == 303 and done.headers["location"] == (
            f"/review/auto/{refs[1]}{qs}"
        )


def _link(html: str, name: str) -> str:
    """The address of the page's link ``id=name``, unescaped."""
    found = re.search(rf'<a id="{name}" href="([^"]*)"', html)
    assert found, html[:2000]
    return unescape(found.group(1))


async def test_a_cases_queue_link_goes_back_to_the_page_it_is_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A case opened from page 2 of its queue ("3 of 5") linked back to page 1: the
    link names the page the case is on, its filters kept; a case resolved meanwhile, seen
    from the open queue, the page where it would stand. So does a blind audit's link
    back to its list."""
    monkeypatch.setattr("dissensus.serve.routes.pages_queue.QUEUE_ROWS", 2)
    monkeypatch.setattr("dissensus.serve.queue_view.QUEUE_ROWS", 2)
    audited = write_policy(tmp_path / "audits.yaml", {"acceptance": {"audit_rate": 1.0}})
    async with client_for(settings(tmp_path, policy=str(audited))) as client:
        split = [
            panel(f"split-{i}", ["1", "2", "1"], values=[{"a": 1.0}, {"b": 1.0}, {"a": 0.5}])
            for i in range(5)
        ]
        run = (await client.post("/v1/decide", json=split, headers=auth("sub"))).json()
        run_id, ids = run["run_id"], [r["review_id"] for r in run["records"]]
        await login(client, "rev")
        queue = f"/review?run={run_id}"
        wanted = {0: queue, 1: queue, 2: f"{queue}&page=2", 3: f"{queue}&page=2"}
        wanted[4] = f"{queue}&page=3"
        for i, back in wanted.items():
            case = await client.get(f"/review/case/{ids[i]}", params={"run": run_id})
            assert _link(case.text, "queue-link") == back, i
            listed = await client.get(back)
            assert f"/review/case/{ids[i]}?" in listed.text, i
        newest = await client.get(
            f"/review/case/{ids[0]}", params={"run": run_id, "sort": "newest"}
        )
        assert _link(newest.text, "queue-link") == f"{queue}&sort=newest&page=3"
        # Resolved meanwhile: where it would stand among the open cases.
        sha = (await client.get(f"/v1/review/{ids[2]}", headers=auth("rev"))).json()[
            "content_sha256"
        ]
        done = await client.post(
            f"/v1/review/{ids[2]}/resolve",
            json={"decision": "1", "note": "n", "content_sha256": sha},
            headers=auth("rev"),
        )
        assert done.status_code == 200, done.text
        gone = await client.get(f"/review/case/{ids[2]}", params={"run": run_id})
        assert _link(gone.text, "queue-link") == f"{queue}&page=2"
        resolved = await client.get(
            f"/review/case/{ids[2]}", params={"run": run_id, "status": "resolved"}
        )
        assert _link(resolved.text, "queue-link") == f"/review?status=resolved&run={run_id}"

        agree = [panel(f"agree-{i}", ["1", "1", "1"], swap=["1", "1", "1"]) for i in range(3)]
        audits = await decide_automatic(client, agree)
        blind = await client.get(f"/review/audit/{audits[2]}")
        assert _link(blind.text, "list-link") == "/review?status=audits&page=2"
        listed = await client.get("/review?status=audits&page=2")
        assert f"/review/audit/{audits[2]}" in listed.text
        first = await client.get(f"/review/audit/{audits[0]}")
        assert _link(first.text, "list-link") == "/review?status=audits"
