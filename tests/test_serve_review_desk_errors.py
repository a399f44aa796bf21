"""The review site's own errors in-process: an address of the site that names no page, or
a method a page does not take, is a page saying so, never the API's JSON."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from serve_helpers import client_for, heap_frozen, login, settings

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
