"""The review desk's inputs: notes not given, form bytes, token names, claims by page."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from dissensus.errors import ConfigError
from dissensus.serve.auth import hash_token, load_tokens, token_line
from dissensus.store import Journal
from pipeline_cases import panel, write_policy
from serve_helpers import auth, client_for, csrf_of, escalating, heap_frozen, login, settings

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module", autouse=True)
def _heap_frozen() -> Iterator[None]:
    yield from heap_frozen()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _sha(html: str) -> str:
    found = re.search(r'name="content_sha256" value="([0-9a-f]{64})"', html)
    assert found
    return found.group(1)


async def _escalate(client: httpx.AsyncClient, *ids: str) -> tuple[str, list[str]]:
    run = (
        await client.post("/v1/decide", json=[escalating(i) for i in ids], headers=auth("sub"))
    ).json()
    return run["run_id"], [r["review_id"] for r in run["records"]]


async def test_a_resolution_without_a_note_says_whether_it_follows_the_suggestion(
    tmp_path: Path,
) -> None:
    """Under ``--review-note never`` an override without a note is journalled "(no
    note)": it used to say "(no note: agrees with the panel's suggestion)", which was
    false."""
    s = settings(tmp_path, review_note="never")
    async with client_for(s) as client:
        run_id, (override, agree) = await _escalate(client, "override", "agree")
        await login(client, "rev")
        for review_id, decision in ((override, "2"), (agree, "1")):
            page = await client.get(f"/review/case/{review_id}")
            assert page.headers["x-content-type-options"] == "nosniff"
            form = {"decision": decision, "note": "", "csrf": csrf_of(page.text)}
            done = await client.post(
                f"/review/case/{review_id}/resolve",
                data={**form, "content_sha256": _sha(page.text)},
            )
            assert done.status_code == 303, done.text
    with Journal(s.journal) as journal:
        notes = [journal.get(run_id, f"review/{n}/resolved") for n in (1, 2)]
        assert [n.payload["note"] for n in notes if n is not None] == [
            "(no note)",
            "(no note: agrees with the panel's suggestion)",
        ]


async def test_a_form_whose_bytes_are_not_utf8_is_refused_and_nothing_is_saved(
    tmp_path: Path,
) -> None:
    """``%FF`` in a form field was journalled as U+FFFD, a decision nobody typed."""
    s = settings(tmp_path)
    async with client_for(s) as client:
        run_id, (review_id,) = await _escalate(client, "bytes")
        await login(client, "rev")
        page = await client.get(f"/review/case/{review_id}")
        body = (
            f"csrf={csrf_of(page.text)}&content_sha256={_sha(page.text)}"
            "&decision=%FF%FE&note=%ED%A0%80"
        )
        refused = await client.post(
            f"/review/case/{review_id}/resolve",
            content=body,
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
        assert refused.status_code == 400 and "not valid UTF-8" in refused.text
        fine = body.replace("%FF%FE", "2").replace("%ED%A0%80", "caf%C3%A9")
        done = await client.post(
            f"/review/case/{review_id}/resolve",
            content=fine,
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
        assert done.status_code == 303, done.text
    with Journal(s.journal) as journal:
        resolved = journal.get(run_id, "review/1/resolved")
        assert resolved is not None and resolved.payload["note"] == "café"


async def test_the_case_pages_claim_does_not_take_an_audit(tmp_path: Path) -> None:
    """An audit's reference posted to the case page's claim route is a 404 and claims
    nothing: it used to take the audit's claim, then send the reviewer to a 404."""
    quiet = write_policy(tmp_path / "no-audits.yaml", {"acceptance": {"audit_rate": 0.0}})
    s = settings(tmp_path, policy=str(quiet))
    agree = panel("agree", ["1", "1", "1"], swap=["1", "1", "1"])
    async with client_for(s) as client:
        run = (await client.post("/v1/decide", json=[agree], headers=auth("sub"))).json()
        ref = f"{run['run_id']}.{run['records'][0]['line']}"
        await login(client, "rev")
        page = await client.get("/review")
        taken = await client.post(f"/review/case/{ref}/claim", data={"csrf": csrf_of(page.text)})
        assert taken.status_code == 404
    with Journal(s.journal) as journal:
        assert journal.current_claim(ref) is None


@pytest.mark.parametrize("name", ["al\u200bice", "z" * 129, "bob\u202e"])
def test_a_token_name_a_resolution_would_refuse_is_refused_when_made_and_read(
    tmp_path: Path, name: str
) -> None:
    """A token name is the reviewer a resolution names: ``serve-token`` and the tokens
    file refuse a look-alike (invisible characters) or over-long name, which used to
    claim cases and then fail every resolve."""
    with pytest.raises(ConfigError) as made:
        token_line(name, "review")
    assert made.value.field == "name"
    tokens = tmp_path / "tokens.txt"
    tokens.write_text(f"# team\n{hash_token('t')} {name} review\n", encoding="utf-8")
    with pytest.raises(ConfigError) as read:
        load_tokens(tokens)
    assert read.value.field == "name" and ":2" in str(read.value)
    token, line = token_line("ålice-ü", "review")  # not ASCII, but nothing invisible
    tokens.write_text(line + "\n", encoding="utf-8")
    found = load_tokens(tokens).authenticate(token)
    assert found is not None and found.name == "ålice-ü"


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
async def test_nan_and_infinity_in_a_body_are_not_json(tmp_path: Path, constant: str) -> None:
    """Python's JSON parser accepts them; the API refuses them as not JSON (400), as the
    JSONL reader does, on every JSON door."""
    s = settings(tmp_path)
    async with client_for(s) as client:
        body = '[{"id": "p", "outputs": [], "meta": {"x": CONST}}]'.replace("CONST", constant)
        decided = await client.post(
            "/v1/decide",
            content=body,
            headers={**auth("sub"), "content-type": "application/json"},
        )
        assert decided.status_code == 400, decided.text
        assert decided.json() == {
            "error": f"invalid JSON: {constant} is not a JSON number",
            "field": "<json>",
        }
        chat = await client.post(
            "/v1/chat/completions",
            content='{"model": "m", "messages": [], "temperature": CONST}'.replace(
                "CONST", constant
            ),
            headers={**auth("sub"), "content-type": "application/json"},
        )
        assert chat.status_code == 400 and "not a JSON number" in chat.text


@pytest.mark.parametrize("text", ["\u200b", " \u200b\u2060 ", "\ufeff\t"])
def test_a_decision_or_note_of_invisible_characters_only_is_empty(text: str) -> None:
    """A zero-width space passed the not-blank check and was journalled as a decision."""
    from dissensus.errors import InputError
    from dissensus.pipeline.review import check_resolution_fields

    with pytest.raises(InputError, match="the decision must not be empty"):
        check_resolution_fields(decision=text, note="n", reviewer="kim")
    with pytest.raises(InputError, match="the note must not be empty"):
        check_resolution_fields(decision="1", note=text, reviewer="kim")
    check_resolution_fields(decision="1\u200b2", note="n", reviewer="kim")  # shows "12"


@pytest.mark.parametrize("text", ["\u200b", "\u00ad", "\u200b\u200b "])
async def test_an_invisible_note_or_decision_is_422_naming_the_field(
    tmp_path: Path, text: str
) -> None:
    """The API's own check took only white space as empty: a zero-width note reached the
    journal's check and came back 400 with no field, where serve.md promises 422."""
    async with client_for(settings(tmp_path)) as client:
        run = (
            await client.post(
                "/v1/decide",
                json=[panel("a", ["1", "1"], swap=["1", "1"]), escalating("b")],
                headers=auth("sub"),
            )
        ).json()
        auto, escalated = run["records"]
        review_id = escalated["review_id"]
        sha = (await client.get(f"/v1/review/{review_id}", headers=auth("rev"))).json()[
            "content_sha256"
        ]
        for field, body in (
            ("note", {"decision": "1", "note": text, "content_sha256": sha}),
            ("decision", {"decision": text, "note": "n", "content_sha256": sha}),
        ):
            res = await client.post(
                f"/v1/review/{review_id}/resolve", json=body, headers=auth("rev")
            )
            assert res.status_code == 422 and res.json()["field"] == field, res.text
        ref = f"{run['run_id']}.{auto['line']}"
        res = await client.post(
            f"/v1/cases/{ref}/confirm", json={"note": text}, headers=auth("rev")
        )
        assert res.status_code == 422 and res.json()["field"] == "note", res.text


async def test_a_form_sending_a_field_twice_is_refused_and_nothing_is_saved(
    tmp_path: Path,
) -> None:
    """``decision=1&decision=2`` was saved as 2: the last copy won in silence."""
    s = settings(tmp_path)
    async with client_for(s) as client:
        run_id, (review_id,) = await _escalate(client, "twice")
        await login(client, "rev")
        page = await client.get(f"/review/case/{review_id}")
        body = f"csrf={csrf_of(page.text)}&content_sha256={_sha(page.text)}&note=n"
        refused = await client.post(
            f"/review/case/{review_id}/resolve",
            content=body + "&decision=1&decision=2",
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
        assert refused.status_code == 422, refused.text
        assert "&#39;decision&#39; more than once" in refused.text
        done = await client.post(
            f"/review/case/{review_id}/resolve",
            content=body + "&decision=2",
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
        assert done.status_code == 303, done.text
    with Journal(s.journal) as journal:
        resolved = journal.get(run_id, "review/1/resolved")
        assert resolved is not None and resolved.payload["decision"] == "2"


@pytest.mark.parametrize("bad", ["1\x00", "\x1b[31m1", "1\x7f", "1\x85"])
def test_a_decision_with_a_control_character_is_refused(bad: str) -> None:
    """``"1\\u0000"`` looked like ``1`` everywhere and was journalled as an answer outside
    the options; a note keeps its line breaks and tabs."""
    from dissensus.errors import InputError
    from dissensus.pipeline.review import check_resolution_fields

    with pytest.raises(InputError, match="the decision holds the control character U\\+"):
        check_resolution_fields(decision=bad, note="n", reviewer="kim")
    with pytest.raises(InputError, match="the note holds the control character U\\+"):
        check_resolution_fields(decision="1", note=bad, reviewer="kim")
    check_resolution_fields(decision="1", note="line one\n\tline two\r\n", reviewer="kim")


async def test_a_control_character_is_422_naming_the_field_over_http(tmp_path: Path) -> None:
    async with client_for(settings(tmp_path)) as client:
        _, (review_id,) = await _escalate(client, "nul")
        sha = (await client.get(f"/v1/review/{review_id}", headers=auth("rev"))).json()[
            "content_sha256"
        ]
        res = await client.post(
            f"/v1/review/{review_id}/resolve",
            json={"decision": "1\u0000", "note": "n", "content_sha256": sha},
            headers=auth("rev"),
        )
        assert res.status_code == 422 and res.json()["field"] == "decision", res.text
        res = await client.post(
            f"/v1/review/{review_id}/resolve",
            json={"decision": "1", "note": "seen\nand checked", "content_sha256": sha},
            headers=auth("rev"),
        )
        assert res.status_code == 200, res.text
