"""The review routes refuse alike: one spelling per review id (any other is an unknown
item), bodies read as ``POST /v1/decide`` reads its body, reviewers' texts bounded by
``--max-field-chars``; and the library routes' numbers are finite."""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from dissensus.errors import ConfigError
from dissensus.pipeline.review import list_items
from dissensus.serve import library_calls
from dissensus.store import Journal
from pipeline_cases import panel
from serve_helpers import auth, client_for, escalating, heap_frozen, settings

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parent.parent
JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module", autouse=True)
def _heap_frozen() -> Iterator[None]:
    yield from heap_frozen()


def _events(path: Path) -> int:
    with Journal(path) as journal:
        return sum(info.n_events for info in journal.runs())


def _spellings(review_id: str) -> list[str]:
    """Other spellings of the same line: leading zeros."""
    run, line = review_id.rsplit(".", 1)
    return [f"{run}.0{line}", f"{run}.00{line}"]


async def _escalated(client: httpx.AsyncClient, pid: str) -> tuple[str, str]:
    """A new escalated case: its review id and content hash."""
    decided = await client.post("/v1/decide", json=escalating(pid), headers=auth("sub"))
    rid = decided.json()["review_id"]
    shown = await client.get(f"/v1/review/{rid}", headers=auth("rev"))
    return rid, shown.json()["content_sha256"]


async def _automatic(client: httpx.AsyncClient) -> str:
    """A new automatically committed case: its reference."""
    decided = await client.post(
        "/v1/decide", json=panel("a", ["1", "1"], swap=["1", "1"]), headers=auth("sub")
    )
    assert decided.json()["auto"]
    return f"{decided.headers['X-Dissensus-Run']}.{decided.json()['line']}"


# -- one spelling per review id ---------------------------------------------------------------


async def test_another_spelling_of_a_review_id_is_an_unknown_item(tmp_path: Path) -> None:
    s = settings(tmp_path, undo_window_s=300)
    async with client_for(s) as client:
        rid, sha = await _escalated(client, "u")
        held, held_sha = await _escalated(client, "v")
        claim = await client.post(f"/v1/review/{held}/claim", headers=auth("rev2"))
        assert claim.status_code == 200
        before = _events(Path(s.journal))
        resolve = {"decision": "2", "note": "n", "content_sha256": held_sha}
        for alt in _spellings(held):
            # Neither another claim nor a resolution passes rev2's claim on the case.
            res = await client.post(f"/v1/review/{alt}/claim", headers=auth("rev"))
            assert res.status_code == 404 and "no review item" in res.json()["error"], alt
            res = await client.post(f"/v1/review/{alt}/resolve", json=resolve, headers=auth("rev"))
            assert res.status_code == 404, alt
            assert (await client.get(f"/v1/review/{alt}", headers=auth("rev"))).status_code == 404
        assert _events(Path(s.journal)) == before
        body = {"decision": "2", "note": "n", "content_sha256": sha}
        done = await client.post(f"/v1/review/{rid}/resolve", json=body, headers=auth("rev"))
        assert done.status_code == 200
        for alt in _spellings(rid):
            # An undo under another spelling reopens nothing (the index would miss it).
            res = await client.post(f"/v1/review/{alt}/undo", headers=auth("rev"))
            assert res.status_code == 404, alt
        undone = await client.post(f"/v1/review/{rid}/undo", headers=auth("rev"))
        assert undone.status_code == 200 and undone.json()["status"] == "open"
        listed = await client.get("/v1/review", params={"status": "open"}, headers=auth("rev"))
        assert sorted(e["review_id"] for e in listed.json()) == sorted([rid, held])
    with Journal(s.journal) as journal:
        assert journal.review_index_agrees()
        assert [c.who for c in journal.current_claims([held, *_spellings(held)]).values()] == [
            "rev2-name"
        ]
        assert {st.item.review_id for st in list_items(journal)} == {rid, held}


async def test_case_references_unknown_or_misspelt_are_404(tmp_path: Path) -> None:
    s = settings(tmp_path)
    async with client_for(s) as client:
        ref = await _automatic(client)
        before = _events(Path(s.journal))
        for bad in ("nope.1", *_spellings(ref), ref[:-1] + "-3", ref[:-1] + "0"):
            res = await client.post(
                f"/v1/cases/{bad}/confirm", json={"note": "checked"}, headers=auth("rev")
            )
            assert res.status_code == 404 and res.json()["field"] is None, (bad, res.text)
            res = await client.get(f"/v1/audits/{bad}", headers=auth("rev"))
            assert res.status_code == 404, (bad, res.text)
        assert _events(Path(s.journal)) == before
        ok = await client.post(
            f"/v1/cases/{ref}/confirm", json={"note": "ok", "decision": "1"}, headers=auth("rev")
        )
        assert ok.status_code == 200, ok.text


async def _login(client: httpx.AsyncClient) -> None:
    form = await client.get("/review/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert csrf
    done = await client.post("/review/login", data={"token": "tok-rev", "csrf": csrf.group(1)})
    assert done.status_code == 303


async def test_the_page_refuses_another_spelling_and_an_overlong_note(tmp_path: Path) -> None:
    s = settings(tmp_path, max_field_chars=1000)
    async with client_for(s) as client:
        rid, _ = await _escalated(client, "p")
        await _login(client)
        page = await client.get(f"/review/case/{rid}")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        sha = re.search(r'name="content_sha256" value="([0-9a-f]{64})"', page.text)
        assert csrf and sha
        before = _events(Path(s.journal))
        form = {"csrf": csrf.group(1), "content_sha256": sha.group(1), "decision": "2"}
        for alt in _spellings(rid):
            assert (await client.get(f"/review/case/{alt}")).status_code == 404
            res = await client.post(f"/review/case/{alt}/resolve", data={**form, "note": "n"})
            assert res.status_code == 404, alt
        res = await client.post(f"/review/case/{rid}/resolve", data={**form, "note": "x" * 1001})
        assert res.status_code >= 400 and "at most 1000" in res.text
        assert _events(Path(s.journal)) == before


# -- the bodies of resolve and confirm --------------------------------------------------------


async def test_resolve_and_confirm_bodies_are_refused_as_decide_refuses(tmp_path: Path) -> None:
    s = settings(tmp_path)
    async with client_for(s) as client:
        rid, sha = await _escalated(client, "b")
        ref = await _automatic(client)
        paths = (f"/v1/review/{rid}/resolve", f"/v1/cases/{ref}/confirm")
        before = _events(Path(s.journal))
        decide = await client.post("/v1/decide", content=b'{"id":', headers={**auth("sub"), **JSON})
        assert (decide.status_code, decide.json()["field"]) == (400, "<json>")
        for path in paths:
            for raw, field in ((b'{"decision":', "<json>"), (b"", "<body>"), (b"  ", "<body>")):
                res = await client.post(path, content=raw, headers={**auth("rev"), **JSON})
                assert (res.status_code, res.json()["field"]) == (400, field), (path, raw)
            res = await client.post(path, json=["a list"], headers=auth("rev"))
            assert (res.status_code, res.json()["field"]) == (422, "<root>")
        valid = {"decision": "2", "note": "n", "content_sha256": sha}
        for field in ("decision", "note"):
            for blank in (" ", "\t\n"):
                body = {**valid, field: blank}
                res = await client.post(paths[0], json=body, headers=auth("rev"))
                assert (res.status_code, res.json()["field"]) == (422, field), res.text
                body = {"decision": "1", "note": "n", field: blank}
                res = await client.post(paths[1], json=body, headers=auth("rev"))
                assert (res.status_code, res.json()["field"]) == (422, field), res.text
        assert _events(Path(s.journal)) == before


@pytest.mark.parametrize("limit", [None, 500])
async def test_reviewers_texts_are_bounded_by_max_field_chars(
    tmp_path: Path, limit: int | None
) -> None:
    s = settings(tmp_path) if limit is None else settings(tmp_path, max_field_chars=limit)
    most = s.max_field_chars
    async with client_for(s) as client:
        rid, sha = await _escalated(client, "t")
        ref = await _automatic(client)
        before = _events(Path(s.journal))
        resolve = f"/v1/review/{rid}/resolve"
        confirm = f"/v1/cases/{ref}/confirm"
        for field in ("decision", "note"):
            body: dict[str, Any] = {"decision": "2", "note": "n", "content_sha256": sha}
            body[field] = "x" * (most + 1)
            res = await client.post(resolve, json=body, headers=auth("rev"))
            assert (res.status_code, res.json()["field"]) == (422, field), res.text
            assert f"at most {most}" in res.json()["error"]
            res = await client.post(
                confirm, json={"note": "n", field: "x" * (most + 1)}, headers=auth("rev")
            )
            assert (res.status_code, res.json()["field"]) == (422, field), res.text
        assert _events(Path(s.journal)) == before
        fits = {"decision": "2", "note": "y" * most, "content_sha256": sha}
        assert (await client.post(resolve, json=fits, headers=auth("rev"))).status_code == 200
        fits = {"decision": "z" * most, "note": "y" * most}
        assert (await client.post(confirm, json=fits, headers=auth("rev"))).status_code == 200


async def test_the_openapi_schema_still_describes_the_bodies(tmp_path: Path) -> None:
    async with client_for(settings(tmp_path)) as client:
        schema = (await client.get("/openapi.json")).json()
    for path, fields in (
        ("/v1/review/{review_id}/resolve", {"decision", "note", "content_sha256"}),
        ("/v1/cases/{case_ref}/confirm", {"decision", "note"}),
    ):
        body = schema["paths"][path]["post"]["requestBody"]
        assert body["required"] is True
        assert set(body["content"]["application/json"]["schema"]["properties"]) == fields


# -- numbers in the library routes' queries ---------------------------------------------------


async def test_non_finite_query_numbers_are_422_naming_the_parameter(tmp_path: Path) -> None:
    problem = yaml.safe_load(
        (REPO / "examples" / "concord" / "region-table.yaml").read_text(encoding="utf-8")
    )
    vote_case = {
        "id": "q",
        "votes": [
            {"agent": a, "answer": "yes", "evidence_source": "wiki", "evidence_present": True}
            for a in "abc"
        ],
    }
    calls: list[tuple[str, str, Any]] = [
        ("/v1/negotiate", "deadline", problem),
        ("/v1/route", "theta_s", escalating("r")),
        ("/v1/route", "theta_a", escalating("r")),
        ("/v1/vote", "beta", vote_case),
        ("/v1/vote", "max_fallback_agreement", vote_case),
    ]
    async with client_for(settings(tmp_path)) as client:
        for path, name, body in calls:
            for value in ("inf", "1e309", "-inf", "nan", "Infinity"):
                res = await client.post(
                    path,
                    params={name: value},
                    content=json.dumps(body),
                    headers={**auth("sub"), **JSON},
                )
                assert (res.status_code, res.json()["field"]) == (422, name), (
                    path,
                    value,
                    res.text,
                )
        ok = await client.post(
            "/v1/negotiate", params={"deadline": "30"}, json=problem, headers=auth("sub")
        )
        assert ok.status_code == 200 and ok.json()["budget"]["deadline_s"] == 30


async def test_a_verifier_that_did_not_vote_is_the_majority_as_in_the_cli(tmp_path: Path) -> None:
    """As ``dissensus vote --verifier``: not an error, and the reason says so."""
    case = {
        "id": "q",
        "votes": [
            {"agent": a, "answer": ans, "evidence_source": "wiki", "evidence_present": True}
            for a, ans in (("a", "yes"), ("b", "yes"), ("c", "no"))
        ],
    }
    async with client_for(settings(tmp_path)) as client:
        res = await client.post(
            "/v1/vote", params={"verifier": "zzz"}, json=case, headers=auth("sub")
        )
        named = await client.post(
            "/v1/vote", params={"verifier": "c"}, json=case, headers=auth("sub")
        )
    assert res.status_code == 200 and res.json()["mode"] == "majority"
    assert "verifier zzz did not vote" in res.json()["reason"]
    assert named.json()["mode"] == "verifier" and named.json()["answer"] == "no"


@pytest.mark.parametrize("deadline", [math.inf, -math.inf, math.nan, -1.0])
def test_the_library_call_refuses_a_deadline_json_cannot_hold(deadline: float) -> None:
    """The route's check, again where the route calls the library (what reaches the
    certificate must be finite)."""
    problem = yaml.safe_load(
        (REPO / "examples" / "concord" / "region-table.yaml").read_text(encoding="utf-8")
    )
    with pytest.raises(ConfigError) as refused:
        asyncio.run(library_calls.negotiate(problem, deadline=deadline, rule=None))
    assert refused.value.field == "deadline"
