"""``/favicon.ico``: the icon a browser asks for on its own is served, as a static file is."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dissensus.serve.pages import HERE
from dissensus.serve.routes import FAVICON
from serve_helpers import client_for, heap_frozen, login, settings

pytestmark = pytest.mark.anyio

SECURITY = (
    "cache-control",
    "content-security-policy",
    "x-content-type-options",
    "x-frame-options",
    "referrer-policy",
    "access-control-allow-origin",
)
"""The headers that say how a browser may use an answer."""


@pytest.fixture(scope="module", autouse=True)
def _heap_frozen() -> Iterator[None]:
    yield from heap_frozen()


async def test_the_favicon_is_the_static_icon_with_a_static_files_headers(tmp_path: Path) -> None:
    icon = (HERE / "static" / FAVICON).read_bytes()
    async with client_for(settings(tmp_path)) as client:
        got = await client.get("/favicon.ico")
        static = await client.get(f"/review/static/{FAVICON}")
        css = await client.get("/review/static/review.css")
        head = await client.head("/favicon.ico")
        again = await client.get("/favicon.ico", headers={"if-none-match": got.headers["etag"]})
        posted = await client.post("/favicon.ico")
    assert got.status_code == 200 and got.content == icon and icon.startswith(b"<svg ")
    assert got.headers["content-type"] == "image/svg+xml"
    assert dict(got.headers) == dict(static.headers)
    assert {h: got.headers.get(h) for h in SECURITY} == {h: css.headers.get(h) for h in SECURITY}
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-length"] == str(len(icon))
    assert again.status_code == 304
    assert posted.status_code == 405 and posted.headers["allow"] == "GET, HEAD"
    for answer in (got, css, head):  # read as the type served, never sniffed
        assert answer.headers["x-content-type-options"] == "nosniff"


async def test_a_missing_static_file_is_a_plain_404_with_nosniff(tmp_path: Path) -> None:
    async with client_for(settings(tmp_path)) as client:
        missing = await client.get("/review/static/nope.js")
        posted = await client.post("/review/static/review.css")
    assert missing.status_code == 404 and missing.text == "Not Found"
    assert missing.headers["content-type"].startswith("text/plain")
    assert missing.headers["x-content-type-options"] == "nosniff"
    assert missing.headers["cache-control"] == "no-store"
    assert posted.status_code == 405 and posted.headers["x-content-type-options"] == "nosniff"


async def test_docs_serve_md_names_the_static_files_plain_errors(tmp_path: Path) -> None:
    """The Errors section of docs/serve.md says every error is JSON but those of the
    static files, and says what they answer (it said every error, these included)."""
    docs = Path(__file__).resolve().parents[1] / "docs" / "serve.md"
    errors = docs.read_text(encoding="utf-8").split("## Errors", 1)[1].split("\n| ", 1)[0]
    flat = " ".join(errors.split())
    assert "Every error is JSON" in flat and "except under `/review/static/`" in flat
    said = flat.split("The review pages' static files (`/review/static/...`)", 1)[1]
    async with client_for(settings(tmp_path)) as client:
        missing = await client.get("/review/static/nope.js")
        posted = await client.post("/review/static/review.css")
        icon = await client.post("/favicon.ico")
    assert "plain-text `404` (`Not Found`)" in said and missing.text == "Not Found"
    assert "plain-text `405` (`Method Not Allowed`, `Allow: GET, HEAD`)" in said
    assert posted.text == "Method Not Allowed" and posted.headers["allow"] == "GET, HEAD"
    for answer in (missing, posted):
        assert answer.headers["content-type"].startswith("text/plain")
        assert answer.headers["cache-control"] == "no-store"
    assert "a wrong method there is the JSON `405`" in said
    assert icon.status_code == 405 and set(icon.json()) == {"error", "field"}


async def test_the_pages_name_the_icon(tmp_path: Path) -> None:
    async with client_for(settings(tmp_path)) as client:
        assert (await login(client, "rev")).status_code == 303
        queue = await client.get("/review")
    assert queue.status_code == 200
    assert f'<link rel="icon" href="/review/static/{FAVICON}" type="image/svg+xml">' in queue.text
