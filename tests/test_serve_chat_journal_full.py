"""The panel door when its journal's disk is full: ``503`` ``journal_full``, not retried.

Before: SQLite's "database or disk is full" was answered as an unreachable journal
(``journal_unavailable``, "the journal is unreachable", ``x-should-retry: true``), so
the OpenAI SDK retried at once, twice, each retry asking every member again for a case
the journal could not take either. A full disk is made real here: the journal's own
connection may not grow past the pages it holds (``PRAGMA max_page_count``), which
SQLite reports as ``SQLITE_FULL``.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest

from dissensus.llm.base import BackendResponse
from dissensus.panels import ChatError, Members
from dissensus.panels.errors import JOURNAL_FULL, JOURNAL_UNAVAILABLE, journal_outage
from dissensus.pipeline.policy import policy_from_dict
from dissensus.serve import ServeSettings, create_app
from dissensus.store.errors import JournalError
from dissensus.store.journal import Journal
from serve_helpers import auth, write_tokens

pytestmark = pytest.mark.anyio

NAMES = ["m1", "m2", "m3"]


class _Seven:
    provider = "test"
    model_id = "seven"

    def __init__(self) -> None:
        self.calls = 0

    async def send(self, request: Any, *, json_mode: Any) -> BackendResponse:
        self.calls += 1
        return BackendResponse(
            text="Adding gives 7. The answer is 7.",
            model="seven",
            prompt_tokens=5,
            completion_tokens=5,
        )

    async def aclose(self) -> None:
        return None


def _app(root: Path) -> tuple[Any, dict[str, _Seven]]:
    write_tokens(root / "tokens.txt")
    (root / "script.yaml").write_text("default: '0'\n", encoding="utf-8")
    section = {
        "answer": "number",
        "max_retries": 0,
        "members": [{"name": n, "model": "scripted:script.yaml", "family": f"f{n}"} for n in NAMES],
    }
    (root / "policy.json").write_text(
        json.dumps({"reading": {"similarity": "tfidf"}, "panel": section}), encoding="utf-8"
    )
    settings = ServeSettings(
        journal=str(root / "journal.sqlite"),
        policy=str(root / "policy.json"),
        tokens=str(root / "tokens.txt"),
    )
    app = create_app(settings)
    backends = {n: _Seven() for n in NAMES}
    policy = policy_from_dict(
        {"panel": {**section, "members": [{"name": n, "model": "scripted:x"} for n in NAMES]}}
    )
    app.state.chat.members = Members(policy.panel, dict(backends))
    return app, backends


def _fill(journal: Journal) -> None:
    """The journal's connection may not add a page to the file."""
    db: sqlite3.Connection = journal._backend._db  # type: ignore[attr-defined]
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count = {pages}")


async def test_a_full_journal_is_503_journal_full_not_retried(tmp_path: Path) -> None:
    app, backends = _app(tmp_path)
    body = {
        "model": "dissensus-panel",
        "messages": [{"role": "user", "content": "What is 3 plus 4? " + "x" * 20_000}],
    }
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1")
    try:
        async with client:
            _fill(app.state.chat.journal)
            res = await client.post("/v1/chat/completions", json=body, headers=auth("sub"))
        assert res.status_code == 503, res.text
        error = res.json()["error"]
        assert error["code"] == "journal_full", error
        assert error["type"] == "server_error"
        assert "the journal's disk is full" in error["message"]
        assert "unreachable" not in error["message"]
        assert str(tmp_path) not in res.text
        assert res.headers["x-should-retry"] == "false"
        assert "retry-after" not in res.headers
        assert sum(b.calls for b in backends.values()) == len(NAMES)
    finally:
        app.state.chat.close()
        app.state.service.journal.close()
    with Journal(str(tmp_path / "journal.sqlite")) as journal:
        assert all(run.finished for run in journal.runs())


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
    ("cause", "code"),
    [
        (sqlite3.OperationalError("database or disk is full"), JOURNAL_FULL),
        (_PgError('could not extend file "base/1/2": No space left on device'), JOURNAL_FULL),
        (OSError(28, "No space left on device"), JOURNAL_FULL),
        (ConnectionError("connection refused"), JOURNAL_UNAVAILABLE),
    ],
)
def test_a_full_disk_is_told_apart_from_an_unreachable_journal(
    cause: BaseException, code: str
) -> None:
    outage = journal_outage(_raised_from(cause))
    assert outage is not None and outage[1] == code


def test_the_library_call_raises_the_journal_full_error(tmp_path: Path) -> None:
    from dissensus.panels import PanelChat

    section = {"answer": "number", "members": [{"name": n, "model": "scripted:x"} for n in NAMES]}
    policy = policy_from_dict({"reading": {"similarity": "tfidf"}, "panel": section})
    with Journal(str(tmp_path / "j.sqlite")) as journal:
        chat = PanelChat(
            policy, journal=journal, members=Members(policy.panel, {n: _Seven() for n in NAMES})
        )
        try:
            _fill(journal)
            body = {
                "model": "m",
                "messages": [{"role": "user", "content": "3 + 4? " + "y" * 20_000}],
            }
            with pytest.raises(ChatError) as caught:
                chat.complete(body)
        finally:
            chat.close()
    assert caught.value.status == 503 and caught.value.code == JOURNAL_FULL
    assert isinstance(caught.value.__cause__, JournalError)
