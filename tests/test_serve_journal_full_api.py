"""The JSON API when its journal's disk is full: 503 "the journal's disk is full", no
``Retry-After``.

Before: ``POST /v1/decide`` (waiting or ``?async=true``) answered 503 with
``Retry-After: 2`` and "run X failed: the journal is unreachable", and ``GET
/v1/runs/X`` said the same, inviting a retry no retry could mend; the chat door already
said ``journal_full`` and not to retry. A full disk is made real here as the chat
door's test makes it: the journal's connection may not grow past the pages it holds
(``PRAGMA max_page_count``), which SQLite reports as ``SQLITE_FULL``.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest

from dissensus.serve import create_app, journal_errors
from dissensus.store.errors import JournalError
from dissensus.store.journal import Journal
from pipeline_cases import panel
from serve_helpers import auth, settings

pytestmark = pytest.mark.anyio


def _full_journal(journal: Journal) -> Journal:
    """``journal``, whose connection may not add a page to the file."""
    db: sqlite3.Connection = journal._backend._db  # type: ignore[attr-defined]
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count = {pages}")
    return journal


def _fill(app: Any) -> None:
    """Every connection the server has (its own) or opens (each run loop's) is full."""
    _full_journal(app.state.service.journal)
    runner = app.state.service.runner
    opener = runner._open_journal
    runner._open_journal = lambda: _full_journal(opener())


def _body(pid: str) -> bytes:
    row = panel(pid, ["1", "1", "1"], reasoning=["r" * 20_000] * 3)
    return json.dumps(row).encode()


def _full(res: httpx.Response) -> dict[str, Any]:
    assert res.status_code == 503, res.text
    assert "retry-after" not in res.headers, res.headers
    body: dict[str, Any] = res.json()
    assert "the journal's disk is full" in body["error"], body
    assert "unreachable" not in body["error"], body
    return body


@pytest.mark.parametrize("run_async", [False, True])
async def test_a_full_disk_is_said_and_not_retried(tmp_path: Path, run_async: bool) -> None:
    app = create_app(settings(tmp_path))
    headers = {**auth("sub"), "Content-Type": "application/json"}
    url = "/v1/decide?async=true" if run_async else "/v1/decide"
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
        ) as client:
            _fill(app)
            body = _full(await client.post(url, headers=headers, content=_body("p1")))
            assert str(tmp_path) not in json.dumps(body)
            if "run_id" in body:
                run = await client.get(f"/v1/runs/{body['run_id']}", headers=auth("sub"))
                assert run.status_code in (200, 404), run.text
                assert "unreachable" not in run.text, run.text
    finally:
        app.state.service.journal.close()


def _raised_from(cause: BaseException) -> JournalError:
    try:
        try:
            raise cause
        except BaseException as exc:
            raise JournalError("journal /somewhere: it failed") from exc
    except JournalError as outer:
        return outer


class _PgError(Exception):
    sqlstate = "53100"


@pytest.mark.parametrize(
    "cause",
    [sqlite3.OperationalError("database or disk is full"), _PgError("could not write")],
)
def test_the_mapping_says_disk_full_without_retry_after(cause: BaseException) -> None:
    said = journal_errors.unavailable(_raised_from(cause))
    assert said == journal_errors.DISK_FULL == "the journal's disk is full"
    assert journal_errors.retry_headers(said) == {}


def test_an_unreachable_journal_still_invites_a_retry() -> None:
    said = journal_errors.unavailable(_raised_from(ConnectionError("connection refused")))
    assert said == journal_errors.UNREACHABLE
    assert journal_errors.retry_headers(said) == {"Retry-After": "2"}
