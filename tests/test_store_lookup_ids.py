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


_NOT_IDS = ["ab\x00c", "\x00", "a\x00", "x\x00.1", "a b", "..", "é"]


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


@pytest.mark.parametrize("run_id", _NOT_IDS)
def test_an_id_no_run_can_have_is_no_run_without_a_query(journal_target: str, run_id: str) -> None:
    with Journal(journal_target) as journal:
        journal.create_run("r", kind="t", meta={})
        seen = _queries(journal)
        _looks_up_nothing(journal, run_id)
        assert seen == []
        # A valid id is still looked up.
        assert journal.run("r") is not None and seen


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
