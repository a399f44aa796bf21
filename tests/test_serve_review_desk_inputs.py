"""The review desk's inputs: notes not given, form bytes, token names, claims by page."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from dissensus.errors import ConfigError
from dissensus.serve.auth import hash_token, load_tokens, token_line
from dissensus.serve.pages import MAX_FORM_BYTES, MAX_FORM_FIELDS
from dissensus.store import Journal
from pipeline_cases import panel, write_policy
from serve_helpers import auth, client_for, csrf_of, escalating, heap_frozen, login, settings

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module", autouse=True)
def _heap_frozen() -> Iterator[None]:
    yield from heap_frozen()


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


def _multipart(fields: list[tuple[str, bytes, str | None]]) -> bytes:
    """A ``multipart/form-data`` body (boundary ``XB``): ``(name, value, filename)``."""
    out = b""
    for name, value, filename in fields:
        named = f'; filename="{filename}"' if filename else ""
        out += f'--XB\r\nContent-Disposition: form-data; name="{name}"{named}\r\n\r\n'.encode()
        out += value + b"\r\n"
    return out + b"--XB--\r\n"


async def test_a_multipart_form_is_refused_unread_and_nothing_is_saved(tmp_path: Path) -> None:
    """A multipart post (which no page sends) had its non-UTF-8 bytes journalled as
    Latin-1 (``\\xff`` as ``ÿ``) and a file part as its Python description
    (``UploadFile(filename=...)``), each a note nobody typed."""
    s = settings(tmp_path)
    multipart = {"content-type": "multipart/form-data; boundary=XB"}
    async with client_for(s) as client:
        run_id, (review_id,) = await _escalate(client, "multipart")
        await login(client, "rev")
        page = await client.get(f"/review/case/{review_id}")
        base = [
            ("csrf", csrf_of(page.text).encode(), None),
            ("content_sha256", _sha(page.text).encode(), None),
            ("decision", b"2", None),
        ]
        for note in [("note", b"bad \xff\xfe bytes", None), ("note", b"a file", "n.txt")]:
            refused = await client.post(
                f"/review/case/{review_id}/resolve",
                content=_multipart([*base, note]),
                headers=multipart,
            )
            assert refused.status_code == 415, refused.text
            assert "nothing was saved" in refused.text
        # The login and logout forms take only what their pages send too.
        form = await client.get("/review/login")
        token = [("token", b"tok-rev", None), ("csrf", csrf_of(form.text).encode(), None)]
        refused = await client.post("/review/login", content=_multipart(token), headers=multipart)
        assert refused.status_code == 415
        out = await client.post("/review/logout", content=_multipart(base[:1]), headers=multipart)
        assert out.status_code == 415
        fine = {"csrf": csrf_of(page.text), "content_sha256": _sha(page.text), "note": "ok"}
        done = await client.post(
            f"/review/case/{review_id}/resolve", data={**fine, "decision": "2"}
        )
        assert done.status_code == 303, done.text
    with Journal(s.journal) as journal:
        resolved = journal.get(run_id, "review/1/resolved")
        assert resolved is not None and resolved.payload["note"] == "ok"


async def test_a_form_larger_than_any_page_sends_is_refused_before_it_is_decoded(
    tmp_path: Path,
) -> None:
    """A form of 8 MiB of ``a=&a=&...`` was decoded on the event loop, field by field,
    holding every other request for seconds (9 s on 2.6 million fields), before the
    login was even checked. A form with more fields, or more bytes, than any page sends
    is now 413 before it is decoded, on the login too, and nothing is saved."""
    s = settings(tmp_path)
    form_type = {"content-type": "application/x-www-form-urlencoded"}
    async with client_for(s) as client:
        run_id, (review_id,) = await _escalate(client, "big-form")
        refused = await client.post("/review/login", content=b"a=&" * 100, headers=form_type)
        assert refused.status_code == 413, refused.text
        await login(client, "rev")
        page = await client.get(f"/review/case/{review_id}")
        fine = f"csrf={csrf_of(page.text)}&content_sha256={_sha(page.text)}&decision=2&note=ok"
        for extra in ["&x=" * MAX_FORM_FIELDS, "&other=" + "%41" * MAX_FORM_BYTES]:
            refused = await client.post(
                f"/review/case/{review_id}/resolve", content=fine + extra, headers=form_type
            )
            assert refused.status_code == 413, refused.text
            assert "nothing was saved" in refused.text
        done = await client.post(
            f"/review/case/{review_id}/resolve", content=fine, headers=form_type
        )
        assert done.status_code == 303, done.text
    with Journal(s.journal) as journal:
        resolved = journal.get(run_id, "review/1/resolved")
        assert resolved is not None and resolved.payload["note"] == "ok"


@pytest.mark.parametrize("sent", ["%C3%A9", "%E2%80%8B", "caf%C3%A9" * 20])
async def test_a_csrf_token_of_any_text_is_refused_as_a_wrong_one(
    tmp_path: Path, sent: str
) -> None:
    """A CSRF token that was not ASCII (``csrf=%C3%A9``) made the comparison raise: a
    500 on the login and on every form, with a traceback in the server's log."""
    s = settings(tmp_path)
    form_type = {"content-type": "application/x-www-form-urlencoded"}
    async with client_for(s) as client:
        run_id, (review_id,) = await _escalate(client, "csrf")
        await client.get("/review/login")  # the pre-session cookie
        refused = await client.post(
            "/review/login", content=f"token=tok-rev&csrf={sent}", headers=form_type
        )
        assert refused.status_code == 403 and "the form expired" in refused.text
        await login(client, "rev")
        page = await client.get(f"/review/case/{review_id}")
        body = f"csrf={sent}&content_sha256={_sha(page.text)}&decision=2&note=ok"
        refused = await client.post(
            f"/review/case/{review_id}/resolve", content=body, headers=form_type
        )
        assert refused.status_code == 403 and "CSRF" in refused.text
        out = await client.post("/review/logout", content=f"csrf={sent}", headers=form_type)
        assert out.status_code == 403
    with Journal(s.journal) as journal:
        assert journal.get(run_id, "review/1/resolved") is None


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


def test_a_typed_answer_names_an_option_by_its_id_or_its_label() -> None:
    """Trimmed; an exact id, then an exact label, then either ignoring case."""
    from dissensus.serve.case_view import OptionView, options_named

    views = [
        OptionView(id="1", label="Output (a)", key="1", text=""),
        OptionView(id="2", label="Output (b)", key="2", text=""),
        OptionView(id="yes", label="yes", key="3", text=""),
    ]
    assert options_named("Output (a)", views) == ["1"]
    assert options_named("  output (B) ", views) == ["2"]
    assert options_named(" 2 ", views) == ["2"]
    assert options_named("YES", views) == ["yes"]
    assert options_named("Output (c)", views) == []
    assert options_named("  ", views) == []
    # An exact id or label wins over one that differs in case; two alike name both.
    cased = [
        OptionView(id="a", label="B", key="1", text=""),
        OptionView(id="b", label="A", key="2", text=""),
    ]
    assert options_named("a", cased) == ["a"] and options_named("A", cased) == ["b"]
    twins = [
        OptionView(id="1", label="Same", key="1", text=""),
        OptionView(id="2", label="Same", key="2", text=""),
    ]
    assert options_named("same", twins) == ["1", "2"]


def _lettered(pid: str) -> dict[str, object]:
    """An escalated case whose options the page labels "Output (a)" / "Output (b)"."""
    return escalating(pid, "Output (a) states the refund window.")


async def test_an_answer_typed_as_an_options_label_is_that_option(tmp_path: Path) -> None:
    """``o``, "Output (a)", a note, Enter: it was journalled as a decision outside the
    options ("resolved: Output (a)", "(none of the options)"); it is option 1, from the
    page and from the API alike, and agrees with the suggestion without a note."""
    s = settings(tmp_path)
    async with client_for(s) as client:
        run = (
            await client.post(
                "/v1/decide",
                json=[_lettered(f"lab{i}") for i in range(4)],
                headers=auth("sub"),
            )
        ).json()
        run_id = run["run_id"]
        typed, quiet, override, api_case = [r["review_id"] for r in run["records"]]
        await login(client, "rev")

        async def typing(review_id: str, other: str, note: str) -> httpx.Response:
            page = await client.get(f"/review/case/{review_id}")
            assert "<bdi>Output (a)</bdi>" in page.text
            return await client.post(
                f"/review/case/{review_id}/resolve",
                data={
                    "csrf": csrf_of(page.text),
                    "content_sha256": _sha(page.text),
                    "other": other,
                    "note": note,
                },
            )

        done = await typing(typed, " Output (a) ", "typed as the page shows it")
        assert done.status_code == 303, done.text
        shown = await client.get(f"/review/case/{typed}")
        assert "(none of the options)" not in shown.text
        # The suggestion typed, without a note: agreeing needs none.
        done = await typing(quiet, "output (A)", "")
        assert done.status_code == 303, done.text
        # The other option typed, without a note: an override needs one.
        refused = await typing(override, "Output (b)", "")
        assert refused.status_code == 422 and "overriding" in refused.text
        # A pick and the same option typed are one answer.
        page = await client.get(f"/review/case/{override}")
        both = await client.post(
            f"/review/case/{override}/resolve",
            data={
                "csrf": csrf_of(page.text),
                "content_sha256": _sha(page.text),
                "decision": "2",
                "other": "output (b)",
                "note": "b states it",
            },
        )
        assert both.status_code == 303, both.text
        sha = (await client.get(f"/v1/review/{api_case}", headers=auth("rev"))).json()[
            "content_sha256"
        ]
        res = await client.post(
            f"/v1/review/{api_case}/resolve",
            json={"decision": "OUTPUT (B)", "note": "n", "content_sha256": sha},
            headers=auth("rev"),
        )
        assert res.status_code == 200 and res.json()["decision"] == "2", res.text
    with Journal(s.journal) as journal:
        events = [journal.get(run_id, f"review/{line}/resolved") for line in (1, 2, 3, 4)]
    got = [(e.payload["decision"], e.payload["outside_options"]) for e in events if e]
    assert got == [("1", False), ("1", False), ("2", False), ("2", False)]
    assert (
        events[1] and events[1].payload["note"] == "(no note: agrees with the panel's suggestion)"
    )


async def test_an_answer_naming_two_options_alike_is_refused(tmp_path: Path) -> None:
    """Two options labelled alike: a typed label names neither for sure (422 naming the
    decision, nothing journalled); an answer of one's own is still outside the options."""
    s = settings(tmp_path)
    twins = escalating("twins")
    twins["meta"]["option_labels"] = {"1": "Same", "2": "Same"}
    async with client_for(s) as client:
        run = (
            await client.post("/v1/decide", json=[twins, escalating("own")], headers=auth("sub"))
        ).json()
        (review_id, own) = [r["review_id"] for r in run["records"]]
        sha = (await client.get(f"/v1/review/{review_id}", headers=auth("rev"))).json()[
            "content_sha256"
        ]
        res = await client.post(
            f"/v1/review/{review_id}/resolve",
            json={"decision": "same", "note": "n", "content_sha256": sha},
            headers=auth("rev"),
        )
        assert res.status_code == 422 and res.json()["field"] == "decision", res.text
        assert "names more than one option" in res.json()["error"]
        await login(client, "rev")
        page = await client.get(f"/review/case/{review_id}")
        refused = await client.post(
            f"/review/case/{review_id}/resolve",
            data={
                "csrf": csrf_of(page.text),
                "content_sha256": _sha(page.text),
                "other": "Same",
                "note": "n",
            },
        )
        assert refused.status_code == 422 and "names more than one option" in refused.text
        assert 'value="Same"' in refused.text
        sha = (await client.get(f"/v1/review/{own}", headers=auth("rev"))).json()["content_sha256"]
        res = await client.post(
            f"/v1/review/{own}/resolve",
            json={"decision": "Option 3", "note": "n", "content_sha256": sha},
            headers=auth("rev"),
        )
        assert res.status_code == 200, res.text
    with Journal(s.journal) as journal:
        assert journal.get(run["run_id"], "review/1/resolved") is None
        event = journal.get(run["run_id"], "review/2/resolved")
        assert event is not None and event.payload["outside_options"] is True


async def test_an_audit_answer_typed_as_an_options_label_is_that_option(tmp_path: Path) -> None:
    """An audit answering "Output (a)" of a case committed to option 1 confirms it: it
    was journalled as a correction to a decision outside the options."""
    quiet = write_policy(tmp_path / "no-audits.yaml", {"acceptance": {"audit_rate": 0.0}})
    s = settings(tmp_path, policy=str(quiet))
    said = ["Output (a) states the refund window."] * 3
    agree = panel("agree", ["1", "1", "1"], swap=["1", "1", "1"], reasoning=said)
    async with client_for(s) as client:
        run = (await client.post("/v1/decide", json=[agree, agree], headers=auth("sub"))).json()
        first, second = (f"{run['run_id']}.{r['line']}" for r in run["records"])
        assert all(r["auto"] and r["decision"] == "1" for r in run["records"]), run
        res = await client.post(
            f"/v1/cases/{first}/confirm",
            json={"decision": " output (a)", "note": "right"},
            headers=auth("rev"),
        )
        assert res.status_code == 200, res.text
        assert res.json()["decision"] == "1" and res.json()["agrees"] is True
        await login(client, "rev")
        page = await client.get(f"/review/auto/{second}")
        assert "<bdi>Output (b)</bdi>" in page.text
        done = await client.post(
            f"/review/auto/{second}/confirm",
            data={"csrf": csrf_of(page.text), "other": "Output (b)", "note": "b is right"},
        )
        assert done.status_code == 303, done.text
    with Journal(s.journal) as journal:
        event = journal.get(run["run_id"], "confirm/2")
        assert event is not None
        assert (event.payload["decision"], event.payload["outside_options"]) == ("2", False)


async def test_a_blind_audits_typed_label_is_the_option_picked(tmp_path: Path) -> None:
    """On a blind audit, option 1 picked and "output (a)" typed are one answer (it was
    refused as "not both"), and "Output (a)" typed alone confirms option 1."""
    audited = write_policy(tmp_path / "audits.yaml", {"acceptance": {"audit_rate": 1.0}})
    s = settings(tmp_path, policy=str(audited))
    said = ["Output (a) states the refund window."] * 3
    agree = panel("agree", ["1", "1", "1"], swap=["1", "1", "1"], reasoning=said)
    async with client_for(s) as client:
        run = (await client.post("/v1/decide", json=[agree, agree], headers=auth("sub"))).json()
        refs = [f"{run['run_id']}.{r['line']}" for r in run["records"]]
        await login(client, "rev")
        for ref, form in zip(
            refs, ({"decision": "1", "other": "output (a)"}, {"other": "Output (a)"}), strict=True
        ):
            page = await client.get(f"/review/audit/{ref}")
            assert "<bdi>Output (a)</bdi>" in page.text
            done = await client.post(
                f"/review/audit/{ref}/answer",
                data={**form, "note": "checked blind", "csrf": csrf_of(page.text)},
            )
            assert done.status_code == 303, done.text
    with Journal(s.journal) as journal:
        for line in (1, 2):
            event = journal.get(run["run_id"], f"confirm/{line}")
            assert event is not None and event.payload["decision"] == "1"
            assert event.payload["agrees"] is True and event.payload["outside_options"] is False
