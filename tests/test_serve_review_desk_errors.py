"""The review site in-process: an address of the site that names no page, or a method a
page does not take, is a page saying so, never the API's JSON; an option whose id begins
or ends with white space is resolved, confirmed and audited as itself."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings as settings_h
from hypothesis import strategies as st

from dissensus.pipeline.review import as_decision
from dissensus.serve.case_view import OptionView, options_named
from dissensus.store import Journal
from pipeline_cases import panel, write_policy
from serve_helpers import auth, client_for, csrf_of, heap_frozen, login, settings

pytestmark = pytest.mark.anyio

HX = {"HX-Request": "true"}


@pytest.fixture(scope="module", autouse=True)
def _heap_frozen() -> Iterator[None]:
    """The per-test garbage collection walks only this module's objects (see serve_helpers)."""
    yield from heap_frozen()


MISSING = [
    "/review/case/",
    "/review/foo",
    "/review/case/r.1/zzz",
    "/review/auto/",
    "/review/audit/r.1/x/y",
    "/review/case/%3Cscript%3Ealert(1)%3C%2Fscript%3E/x",
]


@pytest.mark.parametrize("path", MISSING)
@pytest.mark.parametrize("htmx", [False, True])
async def test_an_address_of_the_review_site_naming_no_page_is_a_page(
    tmp_path: Path, path: str, htmx: bool
) -> None:
    """A mistyped or cut-off address of the review site (a link pasted short in a chat)
    answered the API's ``{"error":"Not Found","field":null}`` to a reviewer's browser:
    it is now the site's page saying so (404), with the reviewer's header and a way back
    to the queue, the address shown as text, never markup."""
    async with client_for(settings(tmp_path)) as client:
        await login(client, "rev")
        got = await client.get(path, headers=HX if htmx else {})
        assert got.status_code == 404
        assert got.headers["content-type"].startswith("text/html"), got.text[:300]
        assert got.headers["content-security-policy"].startswith("default-src 'self'")
        assert got.headers["cache-control"] == "no-store"
        assert "no page of the review site" in got.text
        assert 'href="/review"' in got.text
        assert "signed in as <b>rev-name</b>" in got.text
        assert "<script>alert" not in got.text


async def test_a_missing_page_without_a_session_is_a_page_too(tmp_path: Path) -> None:
    async with client_for(settings(tmp_path)) as client:
        got = await client.get("/review/case/")
        assert got.status_code == 404
        assert got.headers["content-type"].startswith("text/html")
        assert "no page of the review site" in got.text
        assert "signed in as" not in got.text


async def test_a_method_a_page_does_not_take_is_a_page_naming_the_methods(
    tmp_path: Path,
) -> None:
    """A form sent to a page that only shows (a ``POST`` of the queue or of a case page)
    is a page (405, its ``Allow`` header kept), not JSON."""
    async with client_for(settings(tmp_path)) as client:
        await login(client, "rev")
        for path in ("/review", "/review/case/r.1"):
            got = await client.post(path, data={"a": "b"})
            assert got.status_code == 405, (path, got.text[:300])
            assert got.headers["content-type"].startswith("text/html"), got.text[:300]
            assert "GET" in got.headers["allow"]
            assert "does not take a POST" in got.text


async def test_the_api_and_the_static_files_keep_their_answers(tmp_path: Path) -> None:
    """Only the pages of the review site answer with a page: the API's unknown paths stay
    JSON, the static files' plain text."""
    async with client_for(settings(tmp_path)) as client:
        await login(client, "rev")
        api = await client.get("/v1/nothing-here")
        assert api.status_code == 404
        assert api.headers["content-type"].startswith("application/json")
        static = await client.get("/review/static/nothing.js")
        assert static.status_code == 404
        assert static.headers["content-type"].startswith("text/plain")


def _sha(html: str) -> str:
    found = re.search(r'name="content_sha256" value="([0-9a-f]{64})"', html)
    assert found, html[:500]
    return found.group(1)


def _spaced(pid: str, decisions: list[str]) -> dict[str, Any]:
    """An escalated value conflict whose agents' decisions are ``decisions``."""
    return panel(
        pid, decisions, values=[{"a": 1.0}, {"b": 1.0}, {"a": 0.5}], reasoning=["It is."] * 3
    )


SPACED = ["yes ", "a\u00a0", " 2", "x\u3000"]
"""Option ids an agent's decision may be: white space at either end is part of the id."""


@pytest.mark.parametrize("option", SPACED)
async def test_picking_an_option_whose_id_ends_in_white_space_resolves_to_it(
    tmp_path: Path, option: str
) -> None:
    """An agent's decision ``"yes "`` is an option of the case; picking it on the page
    (the panel's suggestion) asked for a note "overriding the panel's suggestion", then
    journalled ``"yes"``, a decision outside the options. It is now that option, as the
    radio button sends it; beside an option ``"yes"`` each stays itself, and an answer
    typed with white space around an option's id is still that option."""
    s = settings(tmp_path)
    bare = option.strip()
    cases = [
        _spaced("alone", [option, "other", option]),
        _spaced("twin", [option, bare, option]),
        _spaced("twin-bare", [bare, option, bare]),
        _spaced("typed", [f"{bare}!", "other", f"{bare}!"]),
    ]
    async with client_for(s) as client:
        run = (await client.post("/v1/decide", json=cases, headers=auth("sub"))).json()
        ids = [r["review_id"] for r in run["records"]]
        assert all(ids), run
        await login(client, "rev")
        sent = [
            {"decision": option},  # the suggestion, picked: no note needed
            {"decision": option},
            {"decision": bare},
            {"other": f"  {bare}!  "},  # typed with spaces around: the option
        ]
        for rid, form in zip(ids, sent, strict=True):
            page = await client.get(f"/review/case/{rid}")
            assert f'value="{option}"' in page.text or "typed" in page.text
            done = await client.post(
                f"/review/case/{rid}/resolve",
                data={**form, "csrf": csrf_of(page.text), "content_sha256": _sha(page.text)},
            )
            assert done.status_code == 303, (form, done.text[:3000])
    with Journal(s.journal) as journal:
        got = [journal.get(run["run_id"], f"review/{line}/resolved") for line in range(1, 5)]
    assert [(e.payload["decision"], e.payload["outside_options"]) for e in got if e] == [
        (option, False),
        (option, False),
        (bare, False),
        (f"{bare}!", False),
    ]
    assert got[0] and got[0].payload["note"] == "(no note: agrees with the panel's suggestion)"


@pytest.mark.parametrize("option", SPACED)
async def test_confirming_an_automatic_decision_whose_id_ends_in_white_space_agrees(
    tmp_path: Path, option: str
) -> None:
    """An automatic decision ``"yes "`` confirmed from its page (the committed option,
    picked in advance) was journalled as a correction to ``"yes"``, outside the
    options, and the case's record turned human: it now confirms it. The API's confirm
    naming the option exactly does too, and a blind audit's pick of it agrees."""
    quiet = write_policy(tmp_path / "no-audits.yaml", {"acceptance": {"audit_rate": 0.0}})
    s = settings(tmp_path, policy=str(quiet))
    meta = {"question": "Which?", "options": [{"id": option, "text": "Yes."}, {"id": "no"}]}
    agree = panel("agree", [option] * 3, swap=[option] * 3, meta=meta)
    async with client_for(s) as client:
        run = (await client.post("/v1/decide", json=[agree, agree], headers=auth("sub"))).json()
        assert all(r["auto"] and r["decision"] == option for r in run["records"]), run
        first, second = (f"{run['run_id']}.{r['line']}" for r in run["records"])
        await login(client, "rev")
        page = await client.get(f"/review/auto/{first}")
        picked = re.search(r'name="decision" value="([^"]*)"[^>]* checked', page.text)
        assert picked and picked.group(1) == option
        done = await client.post(
            f"/review/auto/{first}/confirm",
            data={"csrf": csrf_of(page.text), "decision": option, "note": "right"},
        )
        assert done.status_code == 303, done.text[:3000]
        res = await client.post(
            f"/v1/cases/{second}/confirm",
            json={"decision": option, "note": "right"},
            headers=auth("rev"),
        )
        assert res.status_code == 200 and res.json()["agrees"] is True, res.text
    with Journal(s.journal) as journal:
        for line in (1, 2):
            event = journal.get(run["run_id"], f"confirm/{line}")
            assert event is not None
            assert event.payload["decision"] == option
            assert event.payload["agrees"] is True and event.payload["outside_options"] is False
            assert journal.get(run["run_id"], f"case/{line}/resolved") is None


async def test_a_blind_audits_pick_of_an_option_ending_in_white_space_agrees(
    tmp_path: Path,
) -> None:
    audited = write_policy(tmp_path / "audits.yaml", {"acceptance": {"audit_rate": 1.0}})
    s = settings(tmp_path, policy=str(audited))
    meta = {"question": "Which?", "options": [{"id": "yes ", "text": "Yes."}, {"id": "yes"}]}
    agree = panel("agree", ["yes "] * 3, swap=["yes "] * 3, meta=meta)
    async with client_for(s) as client:
        run = (await client.post("/v1/decide", json=[agree], headers=auth("sub"))).json()
        (ref,) = [f"{run['run_id']}.{r['line']}" for r in run["records"]]
        await login(client, "rev")
        page = await client.get(f"/review/audit/{ref}")
        assert page.status_code == 200, page.text[:2000]
        done = await client.post(
            f"/review/audit/{ref}/answer",
            data={"decision": "yes ", "note": "checked blind", "csrf": csrf_of(page.text)},
        )
        assert done.status_code == 303, done.text[:3000]
    with Journal(s.journal) as journal:
        event = journal.get(run["run_id"], "confirm/1")
        assert event is not None and event.payload["decision"] == "yes "
        assert event.payload["agrees"] is True and event.payload["outside_options"] is False


_IDS = st.lists(
    st.text(
        alphabet=st.sampled_from(["a", "b", "Y", " ", "\u00a0", "\u3000"]), min_size=1, max_size=4
    ).filter(lambda s: s.strip()),
    min_size=1,
    max_size=5,
    unique=True,
)


@settings_h(max_examples=200, derandomize=True, deadline=None)
@given(ids=_IDS, data=st.data())
def test_an_options_exact_id_always_names_that_option(ids: list[str], data: st.DataObject) -> None:
    """Whatever white space the options' ids hold, each id given exactly names that option
    alone (``"a "`` beside ``"a"`` named ``"a"``), in a resolution and in an audit; any
    other decision is trimmed."""
    views = [OptionView(id=i, label=i, key="", text="") for i in ids]
    picked = data.draw(st.sampled_from(ids))
    assert options_named(picked, views) == [picked]
    assert as_decision(picked, ids) == picked
    other = data.draw(st.text(alphabet=st.sampled_from(["c", " "]), max_size=4))
    assert as_decision(other, ids) == other.strip()


def _back(html: str) -> str:
    found = re.search(r'<a id="queue-back" href="([^"]*)">back to the queue</a>', html)
    assert found, html[:3000]
    return found.group(1).replace("&amp;", "&")


async def test_back_to_the_queue_from_a_refusal_keeps_the_queue(tmp_path: Path) -> None:
    """A reviewer working a filtered queue (a run, a search, newest first) who met a
    refusal page (an unknown case, a form whose CSRF token expired, a session ended, a
    form too large) and followed its "back to the queue" landed on the whole queue, their
    place lost: the link goes back to the queue they came from."""
    s = settings(tmp_path)
    async with client_for(s) as client:
        run = (
            await client.post(
                "/v1/decide", json=[_spaced("q1", ["1", "2", "1"])], headers=auth("sub")
            )
        ).json()
        (rid,) = [r["review_id"] for r in run["records"]]
        query = f"run={run['run_id']}&q=tax+%26+more&sort=newest"
        want = f"/review?{query}"
        # A case of another queue's query is a 404 page with the queue kept.
        await login(client, "rev")
        missing = await client.get(f"/review/case/{run['run_id']}.99?{query}")
        assert missing.status_code == 404 and _back(missing.text) == want
        # A form whose CSRF token is wrong: 403, the queue kept.
        page = await client.get(f"/review/case/{rid}?{query}")
        wrong = await client.post(
            f"/review/case/{rid}/resolve?{query}",
            data={"csrf": "x", "decision": "1", "content_sha256": _sha(page.text)},
        )
        assert wrong.status_code == 403 and _back(wrong.text) == want
        # A form too large for any page: 413, the queue kept.
        big = await client.post(
            f"/review/case/{rid}/resolve?{query}", data={"note": "x" * 2_000_000}
        )
        assert big.status_code == 413 and _back(big.text) == want
        # An address naming no page keeps it too; a plain one goes to the whole queue.
        nowhere = await client.get(f"/review/case/{rid}/zzz?{query}")
        assert nowhere.status_code == 404 and _back(nowhere.text) == want
        plain = await client.get(f"/review/case/{run['run_id']}.99")
        assert _back(plain.text) == "/review"
    async with client_for(s) as client:  # no session: 401, the queue kept
        ended = await client.post(f"/review/case/{rid}/resolve?{query}", data={"csrf": "x"})
        assert ended.status_code == 401 and _back(ended.text) == want


async def test_a_missing_page_shows_its_address_with_invisible_characters_escaped(
    tmp_path: Path,
) -> None:
    """A crafted link's right-to-left override shows as an escape on the 404 page: the
    address never reads as something else (``x``, U+202E, ``gpj.exe`` as ``xexe.jpg``)."""
    async with client_for(settings(tmp_path)) as client:
        await login(client, "rev")
        got = await client.get("/review/x%E2%80%AEgpj.exe")
        assert got.status_code == 404
        assert "\u202e" not in got.text
        assert "at /review/x\\u202egpj.exe</p>" in got.text
