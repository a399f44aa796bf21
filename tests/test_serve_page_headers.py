"""Every page of the review desk is never framed (CSP ``frame-ancestors`` and, for
browsers before it, ``X-Frame-Options: DENY``, as the API docs pages are), never cached,
never sniffed, and its address (a case's review id) never sent to another site."""

from __future__ import annotations

from pathlib import Path

import pytest

from serve_helpers import client_for, login, settings


@pytest.mark.anyio
async def test_every_review_page_carries_the_page_headers(tmp_path: Path) -> None:
    async with client_for(settings(tmp_path)) as client:
        pages = [await client.get("/review/login")]
        await login(client, "rev")
        pages += [await client.get("/review"), await client.get("/review/case/nosuch.1")]
    for page in pages:
        assert page.headers["content-type"].startswith("text/html"), page.url
        assert page.headers["x-frame-options"] == "DENY", page.url
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        assert page.headers["referrer-policy"] == "same-origin", page.url
        assert page.headers["cache-control"] == "no-store"
        assert page.headers["x-content-type-options"] == "nosniff"
