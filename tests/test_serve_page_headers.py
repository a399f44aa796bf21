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


@pytest.mark.anyio
async def test_the_logouts_refusals_are_never_cached_nor_sniffed(tmp_path: Path) -> None:
    """``POST /review/logout`` refused (without its CSRF token: 403; a body that is not a
    form: 415; a field that is not UTF-8: 400) answers plain text, which carried neither
    ``no-store`` nor ``nosniff`` where every other answer of the desk carries both."""
    form_type = {"content-type": "application/x-www-form-urlencoded"}
    json_type = {"content-type": "application/json"}
    async with client_for(settings(tmp_path)) as client:
        await login(client, "rev")
        refused = {
            403: await client.post("/review/logout", data={"csrf": "forged"}),
            415: await client.post("/review/logout", content=b"{}", headers=json_type),
            400: await client.post("/review/logout", content=b"csrf=%FF", headers=form_type),
        }
        assert (await client.get("/review")).status_code == 200  # still logged in
    for status, answer in refused.items():
        assert answer.status_code == status, answer.text
        assert answer.headers["content-type"].startswith("text/plain")
        assert "reload the page and log out from it" in answer.text
        assert answer.headers["cache-control"] == "no-store", status
        assert answer.headers["x-content-type-options"] == "nosniff", status
