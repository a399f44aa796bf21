"""The review page's refusals in-process: a refused resolve keeps the form, refusals stay at
the case page's address, the login goes back to a safe ``next``, claims can be given up
(page and API), and a refusal's times are ``<time>`` elements."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from pipeline_cases import panel, write_policy
from serve_helpers import auth, client_for, csrf_of, escalating, heap_frozen, login, settings

pytestmark = pytest.mark.anyio

HX = {"HX-Request": "true"}


@pytest.fixture(scope="module", autouse=True)
def _heap_frozen() -> Iterator[None]:
    """The per-test garbage collection walks only this module's objects (see serve_helpers)."""
    yield from heap_frozen()


def _sha(html: str) -> str:
    found = re.search(r'name="content_sha256" value="([0-9a-f]{64})"', html)
    assert found
    return found.group(1)


def _error(html: str) -> str:
    found = re.search(r'<p class="error" role="alert" id="case-error">(.*?)</p>', html, re.S)
    assert found, html[:2000]
    return found.group(1)


async def _cases(client: httpx.AsyncClient, n: int) -> tuple[str, list[str]]:
    run = (
        await client.post(
            "/v1/decide", json=[escalating(f"r{i}") for i in range(n)], headers=auth("sub")
        )
    ).json()
    return run["run_id"], [r["review_id"] for r in run["records"]]


async def test_a_refused_resolve_keeps_what_was_sent_at_the_case_address(tmp_path: Path) -> None:
    s = settings(tmp_path, max_field_chars=100)
    async with client_for(s) as client:
        run, (rid, _) = await _cases(client, 2)
        await login(client, "rev")
        where = f"/review/case/{rid}?run={run}"
        page = await client.get(where)
        form = {"content_sha256": _sha(page.text), "csrf": csrf_of(page.text)}
        post = f"/review/case/{rid}/resolve?run={run}"

        # An answer of one's own without the note an override needs: 422, the answer kept.
        typed = await client.post(
            post, data={**form, "other": 'a "careful" <answer>', "note": ""}, headers=HX
        )
        assert typed.status_code == 422 and "overriding" in _error(typed.text)
        assert 'value="a &#34;careful&#34; &lt;answer&gt;"' in typed.text
        assert typed.headers["HX-Replace-Url"] == where

        # A note over --max-field-chars: 422, the note (all of it) and the pick kept.
        long = await client.post(post, data={**form, "decision": "2", "note": "n" * 150})
        assert long.status_code == 422 and "at most 100 per field" in long.text
        assert 'value="' + "n" * 150 + '"' in long.text
        assert re.search(r'value="2" data-key="2" checked', long.text)
        assert not re.search(r'value="1" data-key="1" checked', long.text)

        # Another reviewer's claim: 409 naming them, the time a <time>, the form kept.
        claimed = await client.post(f"/v1/review/{rid}/claim", headers=auth("rev2"))
        until = claimed.json()["expires"]
        held = await client.post(
            post, data={**form, "decision": "1", "note": "my careful note"}, headers=HX
        )
        assert held.status_code == 409
        said = _error(held.text)
        assert f'claimed by rev2-name until <time datetime="{until}">{until}</time>' in said
        assert 'value="my careful note"' in held.text
        assert re.search(r'value="1" data-key="1" checked', held.text)
        assert held.headers["HX-Replace-Url"] == where
        # The API keeps the ISO time as a field.
        api = await client.post(
            f"/v1/review/{rid}/resolve",
            json={"decision": "1", "note": "x", "content_sha256": form["content_sha256"]},
            headers=auth("rev"),
        )
        assert api.status_code == 409 and api.json()["claimed_until"] == until
        assert "<time" not in api.json()["error"]

        # The claim button meets the same claim: the same message, with a <time>.
        button = await client.post(f"/review/case/{rid}/claim", data={"csrf": form["csrf"]})
        assert button.status_code == 409 and f'<time datetime="{until}">' in _error(button.text)


async def test_refusals_without_a_session_or_csrf_stay_at_the_page(tmp_path: Path) -> None:
    s = settings(tmp_path)
    async with client_for(s) as client:
        run, (rid,) = await _cases(client, 1)
        await login(client, "rev")
        where = f"/review/case/{rid}?run={run}"
        stale = await client.post(
            f"/review/case/{rid}/resolve?run={run}",
            data={"csrf": "stale", "decision": "1", "note": "x"},
            headers=HX,
        )
        assert stale.status_code == 403 and stale.headers["HX-Replace-Url"] == where
        claim = await client.post(f"/review/case/{rid}/claim?run={run}", data={}, headers=HX)
        assert claim.status_code == 403 and claim.headers["HX-Replace-Url"] == where
        # undo's page is the one htmx says the reviewer was on, when it is this site's.
        undo = await client.post(
            "/review/undo",
            data={"review_id": rid},
            headers={**HX, "HX-Current-URL": f"http://127.0.0.1{where}"},
        )
        assert undo.status_code == 403 and undo.headers["HX-Replace-Url"] == where
        foreign = await client.post(
            "/review/undo",
            data={"review_id": rid},
            headers={**HX, "HX-Current-URL": f"http://evil.example{where}"},
        )
        assert foreign.headers["HX-Replace-Url"] == "/review"

    async with client_for(s) as fresh:  # a server restart forgets every session
        gone = await fresh.post(
            f"/review/case/{rid}/resolve?run={run}", data={"csrf": "x"}, headers=HX
        )
        assert gone.status_code == 401 and gone.headers["HX-Replace-Url"] == where
        link = f'href="/review/login?next={quote(where, safe="/")}"'
        assert link.replace("&", "&amp;") in gone.text and "session has ended" in gone.text


@pytest.mark.parametrize(
    "hostile",
    [
        "//evil.example/review",
        "https://evil.example/review",
        "/review\\@evil.example",
        "/\\evil.example",
        "/reviewers",
        "/review/../v1/runs",
        "/review/login?next=/review",
        "javascript:alert(1)",
        " /review/case/x",
        "/review/case/x\r\nSet-Cookie: a=b",
        "/review#//evil.example",
        "",
        "//[",  # no URL at all (an unclosed IPv6 bracket): these three were a 500
        "http://[::1/review",
        "//[x]/review",
    ],
)
async def test_the_login_goes_back_to_a_page_of_this_site_only(
    tmp_path: Path, hostile: str
) -> None:
    s = settings(tmp_path)
    async with client_for(s) as client:
        run, (rid,) = await _cases(client, 1)
        where = f"/review/case/{rid}?run={run}"
        sent = await client.get(where)
        assert sent.status_code == 303
        assert sent.headers["location"] == "/review/login?next=" + quote(where, safe="/")
        form = await client.get(sent.headers["location"])
        assert f'name="next" value="{where}"'.replace("&", "&amp;") in form.text
        back = await client.post(
            "/review/login", data={"token": "tok-rev", "csrf": csrf_of(form.text), "next": where}
        )
        assert back.status_code == 303 and back.headers["location"] == where

    async with client_for(s) as client:
        form = await client.get("/review/login", params={"next": hostile})
        assert 'name="next"' not in form.text
        gone = await client.post(
            "/review/login",
            data={"token": "tok-rev", "csrf": csrf_of(form.text), "next": hostile},
        )
        assert gone.status_code == 303 and gone.headers["location"] == "/review"


async def test_a_claim_is_given_up_by_its_holder_only(tmp_path: Path) -> None:
    s = settings(tmp_path)
    async with client_for(s) as client:
        run, (rid,) = await _cases(client, 1)
        # The API: DELETE gives the caller's own claim up; another's is 409 naming them.
        assert (await client.delete(f"/v1/review/{rid}/claim", headers=auth("rev"))).json() == {
            "review_id": rid,
            "released": False,
        }
        held = (await client.post(f"/v1/review/{rid}/claim", headers=auth("rev"))).json()
        other = await client.delete(f"/v1/review/{rid}/claim", headers=auth("rev2"))
        assert other.status_code == 409
        assert other.json()["claimed_by"] == "rev-name"
        assert other.json()["claimed_until"] == held["expires"]
        assert "rev-name" in other.json()["error"]
        mine = await client.delete(f"/v1/review/{rid}/claim", headers=auth("rev"))
        assert mine.status_code == 200 and mine.json() == {"review_id": rid, "released": True}
        assert (await client.get(f"/v1/review/{rid}", headers=auth("rev"))).json()["claim"] is None
        unknown = await client.delete(f"/v1/review/{run}.99/claim", headers=auth("rev"))
        assert unknown.status_code == 404
        assert (
            await client.delete(f"/v1/review/{rid}/claim", headers=auth("sub"))
        ).status_code == 403

        # The page: the holder sees "give up claim" and uses it.
        await login(client, "rev")
        page = await client.get(f"/review/case/{rid}")
        assert 'id="release-form"' not in page.text
        csrf = csrf_of(page.text)
        await client.post(f"/review/case/{rid}/claim", data={"csrf": csrf})
        page = await client.get(f"/review/case/{rid}")
        assert 'id="release-form"' in page.text and "give up claim (r)" in page.text
        gave = await client.post(f"/review/case/{rid}/release?run={run}", data={"csrf": csrf})
        assert (
            gave.status_code == 303 and gave.headers["location"] == f"/review/case/{rid}?run={run}"
        )
        page = await client.get(f"/review/case/{rid}")
        assert "<b>open</b>" in page.text and 'id="release-form"' not in page.text

        # Someone else's claim: 409 naming them, with the time as a <time>.
        theirs = (await client.post(f"/v1/review/{rid}/claim", headers=auth("rev2"))).json()
        refused = await client.post(f"/review/case/{rid}/release", data={"csrf": csrf})
        assert refused.status_code == 409
        said = _error(refused.text)
        assert "rev2-name" in said and f'<time datetime="{theirs["expires"]}">' in said
        assert (await client.get(f"/v1/review/{rid}", headers=auth("rev"))).json()["claim"][
            "reviewer"
        ] == "rev2-name"
        no_csrf = await client.post(f"/review/case/{rid}/release", data={})
        assert no_csrf.status_code == 403


async def test_every_page_has_one_h1(tmp_path: Path) -> None:
    """The login, queue and case pages, and the message pages (404, 401, 403), each have
    exactly one ``<h1>`` naming what the page is."""
    async with client_for(settings(tmp_path)) as client:
        run, (rid,) = await _cases(client, 1)
        shown = {"login": await client.get("/review/login")}
        await login(client, "rev")
        shown["queue"] = await client.get("/review")
        shown["case"] = await client.get(f"/review/case/{rid}?run={run}")
        shown["404"] = await client.get("/review/case/nope.1")
        shown["403"] = await client.post(f"/review/case/{rid}/claim", data={"csrf": "no"})
        client.cookies.clear()
        shown["401"] = await client.post(f"/review/case/{rid}/claim", data={"csrf": "x"})
    assert [shown[k].status_code for k in ("404", "403", "401")] == [404, 403, 401]
    for name, page in shown.items():
        assert len(re.findall(r"<h1[ >]", page.text)) == 1, name
    heading = {k: re.search(r"<h1[^>]*>(.*?)</h1>", shown[k].text) for k in ("404", "401")}
    assert [h and h.group(1) for h in heading.values()] == ["Not found", "Log in"]


async def test_a_get_of_a_post_only_address_goes_to_the_forms_page(tmp_path: Path) -> None:
    """Without JavaScript a refused resolve leaves the browser on ``.../resolve``; a GET
    of it (a reload after a redirect, the history) answered the API's JSON 405. Every
    post-only address of the review site is a 303 to the page its form belongs to, the
    query kept, and changes nothing (a GET of the logout logs nobody out)."""
    s = settings(tmp_path)
    async with client_for(s) as client:
        run, (rid,) = await _cases(client, 1)
        await login(client, "rev")
        page = await client.get(f"/review/case/{rid}?run={run}")
        # The refusal a form posted without htmx leaves at the post-only address.
        refused = await client.post(
            f"/review/case/{rid}/resolve?run={run}",
            data={
                "csrf": csrf_of(page.text),
                "content_sha256": _sha(page.text),
                "decision": "2",
                "note": "",
            },
        )
        assert refused.status_code == 422 and "HX-Replace-Url" not in refused.headers
        ref = f"{run}.7"
        pages = {
            f"/review/case/{rid}/resolve?run={run}": f"/review/case/{rid}?run={run}",
            f"/review/case/{rid}/claim": f"/review/case/{rid}",
            f"/review/case/{rid}/release?status=all": f"/review/case/{rid}?status=all",
            f"/review/undo?run={run}": f"/review?run={run}",
            f"/review/auto/{ref}/confirm": f"/review/auto/{ref}",
            f"/review/auto/{ref}/claim": f"/review/auto/{ref}",
            f"/review/auto/{ref}/release": f"/review/auto/{ref}",
            f"/review/audit/{ref}/answer?q=tax": f"/review/audit/{ref}?q=tax",
            f"/review/audit/{ref}/claim": f"/review/audit/{ref}",
            f"/review/audit/{ref}/release": f"/review/audit/{ref}",
            "/review/logout": "/review",
        }
        for address, back in pages.items():
            for method in ("GET", "HEAD"):
                got = await client.request(method, address)
                assert got.status_code == 303, (method, address, got.text)
                assert got.headers["location"] == back, address
        # An address htmx names that is no URL (an unclosed IPv6 bracket) was a 500.
        for current in ("http://[", "//[x]/review", "http://[::1"):
            hx = {"HX-Request": "true", "HX-Current-URL": current}
            got = await client.get("/review/logout", headers=hx)
            assert got.status_code == 303 and got.headers["location"] == "/review", current
        assert (await client.get(f"/review/case/{rid}?run={run}")).status_code == 200
        assert "<b>open</b>" in (await client.get(f"/review/case/{rid}")).text
        # Other methods are still refused, naming GET now.
        put = await client.put(f"/review/case/{rid}/resolve", json={})
        assert put.status_code == 405 and put.headers["allow"] == "GET, HEAD, POST"
    async with client_for(s) as client:  # without a session: to the page, which asks for one
        got = await client.get(f"/review/case/{rid}/resolve?run={run}")
        assert got.status_code == 303 and got.headers["location"] == f"/review/case/{rid}?run={run}"


async def test_a_conflict_names_the_standing_decision_by_its_label(tmp_path: Path) -> None:
    """ "already resolved ... (decision '1')" named the raw id where the page shows
    "Output (a)": the refusal names the label with the id beside it, as the queue does
    (a decision whose label is its id, or no option at all, once); the API keeps the id."""
    audited = write_policy(tmp_path / "audits.yaml", {"acceptance": {"audit_rate": 1.0}})
    s = settings(tmp_path, policy=str(audited))
    said = "Output (a) states the refund window."
    agree = panel("agree", ["1", "1", "1"], swap=["1", "1", "1"], reasoning=[said] * 3)
    async with client_for(s) as client:
        run = (
            await client.post(
                "/v1/decide",
                json=[escalating("lab", said), escalating("plain"), escalating("own"), agree],
                headers=auth("sub"),
            )
        ).json()
        lettered, plain, own, _ = (r.get("review_id") for r in run["records"])
        audit = f"{run['run_id']}.{run['records'][3]['line']}"
        await login(client, "rev")
        standing = {lettered: "1", plain: "2", own: "no refund at all"}
        pages = {rid: await client.get(f"/review/case/{rid}") for rid in standing}
        for rid, decision in standing.items():
            sha = _sha(pages[rid].text)
            first = await client.post(
                f"/v1/review/{rid}/resolve",
                json={"decision": decision, "note": "n", "content_sha256": sha},
                headers=auth("rev2"),
            )
            assert first.status_code == 200, first.text
        said_by = {}
        for rid in standing:
            late = await client.post(
                f"/review/case/{rid}/resolve",
                data={
                    "csrf": csrf_of(pages[rid].text),
                    "content_sha256": _sha(pages[rid].text),
                    "decision": "2",
                    "note": "late",
                },
            )
            assert late.status_code == 409
            said_by[rid] = _error(late.text)
        assert said_by[lettered].endswith(
            "(decision <bdi>Output (a)</bdi>, option <bdi>1</bdi>)"
        ), said_by[lettered]
        assert said_by[plain].endswith("(decision <bdi>2</bdi>)"), said_by[plain]
        assert said_by[own].endswith("(decision <bdi>no refund at all</bdi>)"), said_by[own]
        assert "already resolved by rev2-name at <time" in said_by[lettered]
        api = await client.post(
            f"/v1/review/{lettered}/resolve",
            json={"decision": "2", "note": "n", "content_sha256": _sha(pages[lettered].text)},
            headers=auth("rev"),
        )
        assert api.status_code == 409 and api.json()["error"].endswith("(decision '1')")

        # The blind audit answered by someone else first.
        blind = await client.get(f"/review/audit/{audit}")
        done = await client.post(
            f"/v1/cases/{audit}/confirm",
            json={"decision": "1", "note": "checked"},
            headers=auth("rev2"),
        )
        assert done.status_code == 200, done.text
        late = await client.post(
            f"/review/audit/{audit}/answer",
            data={"decision": "2", "note": "late", "csrf": csrf_of(blind.text)},
        )
        assert late.status_code == 409
        said = _error(late.text)
        assert "already audited by rev2-name at <time" in said
        assert said.endswith("(decision <bdi>Output (a)</bdi>, option <bdi>1</bdi>)"), said


async def test_a_refused_undo_is_said_on_the_page_the_reviewer_is_on(tmp_path: Path) -> None:
    """An undo refused (the window ended as it was sent, or a second tab undid it first)
    was said on the undone case's page, taking the reviewer off the case they were on."""
    s = settings(tmp_path)
    async with client_for(s) as client:
        run, (first, second) = await _cases(client, 2)
        await login(client, "rev")
        page = await client.get(f"/review/case/{first}?run={run}")
        done = await client.post(
            f"/review/case/{first}/resolve?run={run}",
            data={
                "csrf": csrf_of(page.text),
                "content_sha256": _sha(page.text),
                "decision": "1",
                "note": "",
            },
        )
        assert done.status_code in (200, 303), done.text[:500]
        here = await client.get(f"/review/case/{second}?run={run}")
        assert 'name="from" value="' + second + '"' in here.text  # the undo form says where
        form = {"csrf": csrf_of(here.text), "review_id": first, "from": second}
        undone = await client.post(f"/review/undo?run={run}", data=form)
        assert undone.status_code in (200, 303)
        again = await client.post(f"/review/undo?run={run}", data=form, headers=HX)
        assert again.status_code >= 400
        assert f'data-review-id="{second}"' in again.text  # still on the second case
        assert _error(again.text)
