"""Hostile and careless requests to the JSON API that were once answered wrongly: a
compressed or non-UTF-8-declared body (answered "not UTF-8", or read as other text); a
non-finite number or lone surrogate inside a panel or vote case (named by the field
holding it, not by its own path as the command line names it); a bearer token outside
ASCII (hashed from its Latin-1 reading, so refused)."""

from __future__ import annotations

import gzip
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from dissensus.io.jsonl import Reject, parse_line
from dissensus.serve import create_app
from dissensus.serve.auth import hash_token
from dissensus.types import Panel, VoteCase
from pipeline_cases import panel
from serve_helpers import auth, client_for, escalating, heap_frozen, journal_events, settings

pytestmark = pytest.mark.anyio

CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module", autouse=True)
def _heap_frozen() -> Iterator[None]:
    yield from heap_frozen()


def _refused(res: httpx.Response, field: str) -> str:
    assert res.status_code == 415, res.text
    body = res.json()
    assert body["field"] == field, body
    return str(body["error"])


async def test_a_compressed_body_is_refused_naming_content_encoding(tmp_path: Path) -> None:
    s = settings(tmp_path)
    body = gzip.compress(json.dumps(panel("p1", ["1", "1", "1"])).encode())
    async with client_for(s) as client:
        for encoding in ("gzip", "br", "deflate, gzip"):
            headers = {
                **auth("sub"),
                "Content-Type": "application/json",
                "Content-Encoding": encoding,
            }
            res = await client.post("/v1/decide", headers=headers, content=body)
            assert "compressed" in _refused(res, "Content-Encoding")
        assert journal_events(s.journal) == 0
        # identity is no compression: the body is read as it is.
        plain = json.dumps(panel("p2", ["1", "1", "1"])).encode()
        headers = {**auth("sub"), "Content-Type": "application/json"}
        res = await client.post(
            "/v1/decide", headers={**headers, "Content-Encoding": "identity"}, content=plain
        )
        assert res.status_code == 200, res.text
        written = journal_events(s.journal)
        # Two Content-Encoding headers: refused, whichever comes first.
        res = await client.post(
            "/v1/decide",
            headers=[
                *headers.items(),
                ("Content-Encoding", "identity"),
                ("Content-Encoding", "gzip"),
            ],
            content=body,
        )
        assert res.status_code == 400 and res.json()["field"] == "Content-Encoding", res.text
        # On the chat door the refusal is OpenAI's body.
        res = await client.post(
            CHAT, headers={**headers, "Content-Encoding": "gzip"}, content=gzip.compress(b"{}")
        )
        assert res.status_code == 415, res.text
        error = res.json()["error"]
        assert (error["param"], error["code"]) == ("Content-Encoding", "unsupported_media_type")
    assert journal_events(s.journal) == written  # nothing refused was journalled


async def test_a_body_declared_in_another_charset_is_refused(tmp_path: Path) -> None:
    s = settings(tmp_path)
    # Latin-1 "Ã©" is valid UTF-8 ("é"): it was read as other text than the client sent.
    item = panel("caf\u00c3\u00a9", ["1", "1", "1"])
    latin = json.dumps(item, ensure_ascii=False).encode("latin-1")
    async with client_for(s) as client:
        for declared in ("latin-1", '"ISO-8859-1"', "utf-16"):
            headers = {**auth("sub"), "Content-Type": f"application/json; charset={declared}"}
            res = await client.post("/v1/decide", headers=headers, content=latin)
            assert "UTF-8" in _refused(res, "Content-Type")
        for declared in ("utf-8", "UTF-8", '"utf-8"', "utf8"):
            headers = {**auth("sub"), "Content-Type": f"application/json; charset={declared}"}
            utf8 = json.dumps(panel(f"p-{declared.strip(chr(34))}", ["1", "1", "1"])).encode()
            res = await client.post("/v1/decide", headers=headers, content=utf8)
            assert res.status_code == 200, (declared, res.text)


async def test_us_ascii_a_quoted_parameter_and_a_repeated_charset(tmp_path: Path) -> None:
    s = settings(tmp_path)
    body = json.dumps(panel("ascii", ["1", "1", "1"])).encode()
    async with client_for(s) as client:
        # US-ASCII is a subset of UTF-8 (RFC 8259, section 11).
        for i, declared in enumerate(("us-ascii", "US-ASCII", "ascii", '"ANSI_X3.4-1968"')):
            headers = {**auth("sub"), "Content-Type": f"application/json; charset={declared}"}
            one = json.dumps(panel(f"a{i}", ["1", "1", "1"])).encode()
            res = await client.post("/v1/decide", headers=headers, content=one)
            assert res.status_code == 200, (declared, res.text)
        # A quoted value holding ";charset=latin1" is that value, not a charset.
        quoted = 'application/json; note="a;charset=latin1"; charset=utf-8'
        headers = {**auth("sub"), "Content-Type": quoted}
        res = await client.post("/v1/decide", headers=headers, content=body)
        assert res.status_code == 200, res.text
        written = journal_events(s.journal)
        for twice in ("charset=utf-8; charset=latin-1", "charset=utf-8;charset=utf-8"):
            headers = {**auth("sub"), "Content-Type": f"application/json; {twice}"}
            res = await client.post("/v1/decide", headers=headers, content=body)
            assert "more than once" in _refused(res, "Content-Type")
        assert journal_events(s.journal) == written


def _unrepresentable_lines() -> list[tuple[str, str]]:
    """Panel lines holding a non-finite number or a lone surrogate, in several places."""
    values = json.dumps(escalating_with_values())
    meta = json.dumps(panel("m1", ["1", "1", "1"], meta={"weight": 12345.5, "note": "n"}))
    return [
        ("values", values.replace("1.5", "1e999", 1)),
        ("values-neg", values.replace("1.5", "-1e999", 1)),
        ("meta", meta.replace("12345.5", "1e999")),
        ("meta-surrogate", meta.replace('"note": "n"', '"note": "\\ud800"')),
        ("reasoning", json.dumps(panel("r1", ["1", "1", "1"], reasoning=["a\udc00b"] * 3))),
    ]


def escalating_with_values() -> dict[str, object]:
    return panel("v1", ["1", "2", "1"], values=[{"a": 1.5}, {"b": 1.0}, {"a": 0.5}])


@pytest.mark.parametrize(
    ("case", "line"), _unrepresentable_lines(), ids=[c for c, _ in _unrepresentable_lines()]
)
async def test_an_unrepresentable_value_is_named_by_its_path_as_the_cli_names_it(
    tmp_path: Path, case: str, line: str
) -> None:
    # The command line's reader names the value itself: meta.weight, outputs.0.values.a.
    cli = parse_line(Panel, line.replace("\udc00", "\\udc00"), file="-", line=1)
    assert isinstance(cli, Reject), case
    assert cli.field.count(".") >= 1, cli
    s = settings(tmp_path)
    body = line.replace("\udc00", "\\udc00")
    headers = {**auth("sub"), "Content-Type": "application/json"}
    async with client_for(s) as client:
        for path in ("/v1/decide", "/v1/route"):
            res = await client.post(path, headers=headers, content=body)
            assert res.status_code == 422, res.text
            assert res.json() == {"error": cli.message, "field": cli.field}, (path, cli)
        res = await client.post("/v1/route", headers=headers, content=f"[{body}]")
        assert res.status_code == 200, res.text
        assert res.json()["rejects"] == [{"index": 0, "field": cli.field, "error": cli.message}]


async def test_a_vote_case_names_an_unrepresentable_value_by_its_path(tmp_path: Path) -> None:
    case = {
        "id": "q1",
        "votes": [
            {"agent": a, "answer": x, "evidence_source": "wiki", "evidence_present": True}
            for a, x in (("a", "yes"), ("b", "yes"), ("c", "no"))
        ],
        "meta": {"w": 7.5},
    }
    text = json.dumps(case)
    cases = [
        (text.replace("7.5", "1e999"), "meta.w", "must be a finite number (got inf)"),
        (
            text.replace('"wiki"', '"\\udc00"', 1),
            "votes.0.evidence_source",
            "not valid Unicode text: a lone surrogate (U+DC00) at character 1",
        ),
    ]
    headers = {**auth("sub"), "Content-Type": "application/json"}
    async with client_for(settings(tmp_path)) as client:
        for body, field, message in cases:
            cli = parse_line(VoteCase, body, file="-", line=1)
            assert isinstance(cli, Reject) and (cli.field, cli.message) == (field, message)
            res = await client.post("/v1/vote", headers=headers, content=body)
            assert res.status_code == 422 and res.json() == {"error": message, "field": field}


async def test_a_transfer_coding_other_than_chunked_is_refused(tmp_path: Path) -> None:
    s = settings(tmp_path)
    good = json.dumps(panel("t1", ["1", "1", "1"])).encode()
    headers = {**auth("sub"), "Content-Type": "application/json"}
    async with client_for(s) as client:
        for coding in ("gzip, chunked", "deflate,chunked", "gzip"):
            res = await client.post(
                "/v1/decide",
                headers={**headers, "Transfer-Encoding": coding},
                content=gzip.compress(good),
            )
            assert "chunked" in _refused(res, "Transfer-Encoding"), coding
        assert journal_events(s.journal) == 0
        for coding in ("chunked", "Chunked"):

            async def stream() -> AsyncIterator[bytes]:
                yield good

            res = await client.post(
                "/v1/decide", headers={**headers, "Transfer-Encoding": coding}, content=stream()
            )
            assert res.status_code == 200, (coding, res.text)


async def test_a_token_outside_ascii_is_taken_as_the_login_form_takes_it(tmp_path: Path) -> None:
    token = "p\u00e4sswort-\u00fcber-\u20ac"
    tokens = tmp_path / "hand-tokens.txt"
    tokens.write_text(f"{hash_token(token)} hand admin\n", encoding="utf-8")
    s = settings(tmp_path, tokens=str(tokens))
    async with client_for(s) as client:
        sent = f"Bearer {token}".encode()  # what curl -H and every client send: UTF-8
        res = await client.get("/v1/runs", headers={"Authorization": sent})
        assert res.status_code == 200, res.text
        # Its Latin-1 bytes are another token, and bytes that are not UTF-8 match none.
        for other in (f"Bearer {token}".encode("latin-1", "replace"), b"Bearer \xff\xfe"):
            res = await client.get("/v1/runs", headers={"Authorization": other})
            assert res.status_code == 401 and res.json()["error"] == "unknown token", res.text


async def test_latin_1_bytes_of_a_token_match_no_line_and_count_as_failed(
    tmp_path: Path,
) -> None:
    # Every character of this token has a Latin-1 byte: read as it came (Latin-1), the
    # bytes p\xe4sswort were the token line of hash_token("pässwort").
    token = "p\u00e4sswort"
    tokens = tmp_path / "hand-tokens.txt"
    tokens.write_text(f"{hash_token(token)} hand admin\n", encoding="utf-8")
    s = settings(tmp_path, tokens=str(tokens))
    app = create_app(s)
    service = app.state.service
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
    ) as client:
        latin = f"Bearer {token}".encode("latin-1")
        assert b"\xe4" in latin
        before = len(service.failed_logins)
        res = await client.get("/v1/runs", headers={"Authorization": latin})
        assert res.status_code == 401 and res.json()["error"] == "unknown token", res.text
        assert len(service.failed_logins) > before
        good = await client.get("/v1/runs", headers={"Authorization": f"Bearer {token}".encode()})
        assert good.status_code == 200, good.text


async def test_a_reviewer_text_with_a_lone_surrogate_is_named_as_such(tmp_path: Path) -> None:
    s = settings(tmp_path)
    async with client_for(s) as client:
        await client.post("/v1/decide", json=[escalating("e1")], headers=auth("sub"))
        item = (await client.get("/v1/review", headers=auth("rev"))).json()[0]
        url = f"/v1/review/{item['review_id']}/resolve"
        body = json.dumps({"decision": "1", "note": "ok", "content_sha256": item["content_sha256"]})
        headers = {**auth("rev"), "Content-Type": "application/json"}
        for field, text in (("note", '"ok"'), ("decision", '"1"')):
            bad = body.replace(f'"{field}": {text}', f'"{field}": "a\\udc80"')
            res = await client.post(url, headers=headers, content=bad)
            assert res.status_code == 422, res.text
            assert res.json() == {
                "error": "not valid Unicode text: a lone surrogate (U+DC80) at character 2",
                "field": field,
            }
        res = await client.post(url, headers=headers, content=body)
        assert res.status_code == 200, res.text


async def test_a_panels_file_sent_as_it_is_is_told_to_send_a_list(tmp_path: Path) -> None:
    rows = [panel(f"p{i}", ["1", "1", "1"]) for i in range(3)]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    headers = {**auth("sub"), "Content-Type": "application/json"}
    async with client_for(settings(tmp_path)) as client:
        res = await client.post("/v1/decide", headers=headers, content=text)
        assert res.status_code == 400, res.text
        body = res.json()
        assert body["field"] == "<json>"
        assert body["error"].startswith("invalid JSON: Extra data (line 2); "), body
        assert "not JSON Lines" in body["error"] and "list" in body["error"], body
        # Not JSON Lines (a second document that is no object): the parser's words only.
        res = await client.post("/v1/decide", headers=headers, content='{"id": "a"} 3')
        assert res.json() == {"error": "invalid JSON: Extra data (line 1)", "field": "<json>"}
        # The list is what it asks for.
        res = await client.post("/v1/decide", headers=headers, content=json.dumps(rows))
        assert res.status_code == 200 and len(res.json()["records"]) == 3, res.text


async def test_a_misspelt_query_parameter_is_refused_not_ignored(tmp_path: Path) -> None:
    one = panel("q1", ["1", "1", "2"])
    async with client_for(settings(tmp_path)) as client:
        sub, rev = auth("sub"), auth("rev")
        # theta for theta_s: the record was the policy's thresholds', as if never sent.
        res = await client.post("/v1/route?theta=-1", json=one, headers=sub)
        assert res.status_code == 422, res.text
        body = res.json()
        assert body["field"] == "theta", body
        assert "unknown query parameter 'theta'" in body["error"], body
        assert "similarity, theta_a, theta_s" in body["error"], body
        for method, url, headers in (
            ("POST", "/v1/decide?asnyc=true", sub),
            ("POST", "/v1/vote?Beta=2", sub),
            ("GET", "/v1/runs?limt=5", sub),
            ("GET", "/v1/review?state=resolved", rev),
            ("GET", "/v1/bound?agents=3&round=2", sub),
            ("GET", "/v1/runs/x/verify?full=1", sub),
        ):
            res = await client.request(method, url, json=one, headers=headers)
            assert res.status_code == 422, (url, res.text)
            assert res.json()["field"] == url.split("?")[1].split("&")[-1].split("=")[0], url
        assert (await client.get("/v1/runs", headers=sub)).json() == []  # nothing was decided
        # The parameters a route takes are read as before, HEAD and the aliases too.
        res = await client.post("/v1/route?theta_s=-1", json=one, headers=sub)
        assert res.status_code == 200 and res.json()["theta_s"] == -1, res.text
        res = await client.post("/v1/decide?async=true", json=[one], headers=sub)
        assert res.status_code == 202, res.text
        res = await client.head("/v1/runs?limit=1", headers=sub)
        assert res.status_code == 200, res.text
        res = await client.get("/v1/bound?agents=3&rounds=2", headers=sub)
        assert res.status_code == 200, res.text


async def test_a_query_parameter_given_twice_is_refused(tmp_path: Path) -> None:
    async with client_for(settings(tmp_path)) as client:
        sub = auth("sub")
        for url in ("/v1/runs?limit=5&limit=6", "/v1/bound?agents=3&rounds=2&agents=300"):
            res = await client.get(url, headers=sub)
            assert res.status_code == 422, res.text
            name = url.split("?")[1].split("=")[0]
            assert res.json() == {
                "error": f"query parameter {name!r} given more than once",
                "field": name,
            }
        res = await client.post(
            "/v1/decide?async=false&async=true", json=[panel("d", ["1", "1", "1"])], headers=sub
        )
        assert res.status_code == 422 and res.json()["field"] == "async", res.text
        assert (await client.get("/v1/runs", headers=sub)).json() == []
