"""Hostile and careless requests to the JSON API that were once answered wrongly: a
compressed or non-UTF-8-declared body (answered "not UTF-8", or read as other text)."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from pipeline_cases import panel
from serve_helpers import auth, client_for, heap_frozen, journal_events, settings

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
