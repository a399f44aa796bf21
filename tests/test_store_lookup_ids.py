"""A lookup by an id no run can have (one holding a NUL, say) is answered as "no such
run" without querying, on both back ends alike: PostgreSQL's text cannot hold a NUL,
and asking it about one was a JournalError (503 "the journal is unreachable" on the
service, inviting a retry) where SQLite answered 404."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dissensus.errors import ConfigError
from dissensus.store import Journal, UnknownRun
from dissensus.store.targets import check_run_id
from serve_helpers import auth, client_for, escalating, login, settings


def _no_run_id(text: str) -> bool:
    try:
        check_run_id(text)
    except ConfigError:
        return True
    return False


_UNHELD = ["ab\x00c", "\x00", "a\x00", "x\x00.1", "a\udcff"]
"""Ids no journal can hold (a NUL; a lone surrogate, no UTF-8): never looked up."""
_NOT_IDS = ["a b", "..", "é", "nightly run #1"]
"""Ids outside the pattern a journal may still hold (runs of versions before run ids
were checked): looked up, no run here, and the miss says why no new run can have them."""


def _queries(journal: Journal) -> list[str]:
    """Every statement the journal's back end runs from now on (appended as it runs)."""
    backend = journal._backend
    seen: list[str] = []
    rows, exec_ = backend.rows, backend.exec

    def counted_rows(sql: str, args: Any = ()) -> Any:
        seen.append(sql)
        return rows(sql, args)

    def counted_exec(sql: str, args: Any = ()) -> Any:
        seen.append(sql)
        return exec_(sql, args)

    backend.rows = counted_rows  # type: ignore[method-assign]
    backend.exec = counted_exec  # type: ignore[method-assign]
    return seen


def _looks_up_nothing(journal: Journal, run_id: str) -> None:
    with pytest.raises(UnknownRun, match="invalid run id"):
        journal.run(run_id)
    assert journal.run(run_id, missing_ok=True) is None
    with pytest.raises(UnknownRun, match="invalid run id"):
        journal.head(run_id)
    with pytest.raises(UnknownRun, match="invalid run id"):
        journal.runs(after=run_id)
    with pytest.raises(UnknownRun, match="invalid run id"):
        journal.verify(run_id)
    assert list(journal.events(run_id)) == []
    assert list(journal.events(run_id, case="1")) == []
    assert journal.get(run_id, "run/finished") is None
    assert journal.cases_with_events(run_id, ["1"]) == set()
    assert journal.event_at(run_id, 0) is None
    assert journal.run_lock_holder(run_id) is None
    assert journal.run_status(run_id) == "incomplete"
    assert journal.run_statuses([run_id]) == {run_id: "incomplete"}


@pytest.mark.parametrize("run_id", _UNHELD)
def test_an_id_no_journal_can_hold_is_no_run_without_a_query(
    journal_target: str, run_id: str
) -> None:
    with Journal(journal_target) as journal:
        journal.create_run("r", kind="t", meta={})
        seen = _queries(journal)
        _looks_up_nothing(journal, run_id)
        assert seen == []
        # A valid id is still looked up.
        assert journal.run("r") is not None and seen


@pytest.mark.parametrize("run_id", _NOT_IDS)
def test_an_id_outside_the_pattern_is_looked_up_and_missing(
    journal_target: str, run_id: str
) -> None:
    with Journal(journal_target) as journal:
        journal.create_run("r", kind="t", meta={})
        seen = _queries(journal)
        _looks_up_nothing(journal, run_id)
        assert seen  # asked: an older version may have made a run under it


def test_a_run_an_older_version_made_under_another_id_stays_readable(tmp_path: Path) -> None:
    """Versions before run ids were checked took any ``--run-id``: such a run (here
    renamed in the file, as an older version would have written it) is still found,
    its events read and its review items listed, though no new run can take the id."""
    import sqlite3

    from dissensus.pipeline import decide
    from dissensus.pipeline.review import list_items

    path = tmp_path / "j.sqlite"
    split = {
        "id": "p1",
        "outputs": [
            {"agent": "a", "decision": "yes", "reasoning": "one reason"},
            {"agent": "b", "decision": "no", "reasoning": "another reason"},
            {"agent": "c", "decision": "maybe", "reasoning": "a third reason"},
        ],
    }
    with Journal(path) as journal:
        record = decide(split, {"reading": {"similarity": "tfidf"}}, journal=journal, run_id="r1")
        assert record.action == "escalate"
    old = "nightly run #1"
    with sqlite3.connect(path) as db:
        for table in ("runs", "events", "review_index"):
            db.execute(f"UPDATE {table} SET run_id = ? WHERE run_id = 'r1'", (old,))
        db.execute("UPDATE review_index SET review_id = ? || '.1'", (old,))
    with Journal(path) as journal:
        assert journal.run(old) is not None
        assert next(e.type for e in journal.events(old)) == "run.started"
        assert journal.run_status(old) == "finished"
        assert len(list(list_items(journal, run_id=old))) == 1  # still in the queue


def test_any_text_that_is_no_run_id_is_no_run(journal_target: str) -> None:
    with Journal(journal_target) as journal:
        journal.create_run("r", kind="t", meta={})

        @given(st.text(max_size=12).filter(_no_run_id))
        def check(run_id: str) -> None:
            with pytest.raises(UnknownRun):
                journal.run(run_id)
            assert list(journal.events(run_id)) == []

        check()
        assert journal.run("r") is not None


_URLS = [
    ("GET", "/v1/runs/ab%00c", None),
    ("GET", "/v1/runs/ab%00c/events", None),
    ("GET", "/v1/review?run=a%00b", None),
    ("GET", "/v1/runs?after=a%00b", None),
    ("GET", "/v1/cases/ab%00c.1", None),
    ("GET", "/v1/audits/a%00.1", None),
    ("GET", "/v1/review/x%00.1", None),
    ("POST", "/v1/review/x%00.1/claim", {}),
    ("DELETE", "/v1/review/x%00.1/claim", None),
    (
        "POST",
        "/v1/review/x%00.1/resolve",
        {"decision": "1", "note": "n", "content_sha256": "0" * 64},
    ),
    ("POST", "/v1/review/x%00.1/undo", {}),
    ("POST", "/v1/cases/ab%00c.1/confirm", {"decision": "1", "note": "n"}),
]
_PAGES = ["/review?run=a%00b", "/review/case/x%00.1", "/review/audit/a%00.1"]


@pytest.mark.anyio
async def test_nul_ids_answer_as_unknown_on_every_door(journal_target: str, tmp_path: Path) -> None:
    """The same answers on both back ends: not found (or the page's refusal), never 503."""
    async with client_for(settings(tmp_path, journal=journal_target)) as client:
        made = await client.post("/v1/decide", json=[escalating("p1")], headers=auth("sub"))
        assert made.status_code == 200
        answers: dict[str, int] = {}
        for method, url, body in _URLS:
            got: httpx.Response = await client.request(method, url, headers=auth("adm"), json=body)
            answers[f"{method} {url}"] = got.status_code
            assert "unreachable" not in got.text and "Retry-After" not in got.headers
        await login(client, "adm")
        for url in _PAGES:
            answers[url] = (await client.get(url)).status_code
    assert answers == {
        **{f"{m} {u}": 404 for m, u, _ in _URLS},
        "/review?run=a%00b": 200,  # the queue, saying there is no such run
        "/review/case/x%00.1": 404,
        "/review/audit/a%00.1": 404,
    }
