"""Opening a journal costs the same however long its history: the review index is
compared with the events once per schema revision, not on every open.

Every open compared every review item with its events (1.2 s of a 1.4 s open on a
journal of 80,000 items, and a ``statement_timeout`` in the URL failed every command
once the journal was large). The comparison is now made when the journal's mark
(``dissensus_meta``, ``review_index_checked``) does not name this schema revision: a
journal an upgrade reached (every upgrade removes the mark), or one not opened by this
version yet; then the mark is written. A stale index is still rebuilt on opening there,
and an edit made after the check is named by ``runs verify``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from dissensus.pipeline.review import list_items, list_items_from_events, resolve
from dissensus.store import Journal
from dissensus.store.migrations import CURRENT
from dissensus.store.postgres import PostgresBackend
from dissensus.store.review_index import IndexRebuilt
from dissensus.store.sqlite import SQLiteBackend
from store_backends import UNMARK_INDEX, raw
from test_review_queue import _escalated

_MARK = "SELECT value FROM dissensus_meta WHERE key = 'review_index_checked'"


@contextmanager
def _statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every statement the journal's services run through a back end meanwhile."""
    seen: list[str] = []
    with monkeypatch.context() as patch:
        for backend in (SQLiteBackend, PostgresBackend):
            for name in ("rows", "exec"):
                original = getattr(backend, name)

                def spy(self: Any, sql: str, args: Any = (), _original: Any = original) -> Any:
                    seen.append(sql)
                    return _original(self, sql, args)

                patch.setattr(backend, name, spy)
        yield seen


def _journal_with_items(target: str, runs: int) -> list[str]:
    with Journal(target) as journal:
        ids = [_escalated(journal, f"run{i}") for i in range(runs)]
        resolve(journal, ids[0], decision="1", note="checked", reviewer="kim")
    return ids


def _reads_history(statements: list[str]) -> list[str]:
    return [sql for sql in statements if "events" in sql or "review_index" in sql]


@pytest.mark.parametrize("runs", [1, 4])
def test_opening_a_checked_journal_reads_no_event_and_no_index_row(
    journal_target: str, runs: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    _journal_with_items(journal_target, runs)
    with _statements(monkeypatch) as seen, Journal(journal_target):
        pass
    assert _reads_history(seen) == []
    # One row read by its key, whatever the number of items.
    assert seen == ["SELECT value FROM dissensus_meta WHERE key = ?"]


def test_a_journal_not_checked_at_its_revision_is_checked_once(
    journal_target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a journal that an older version wrote, or whose index was edited before this
    version opened it: rebuilt on opening (saying so), marked, then opened unread."""
    ids = _journal_with_items(journal_target, 3)
    raw(journal_target, "DELETE FROM review_index WHERE review_id <> ?", (ids[0],))
    raw(journal_target, UNMARK_INDEX)
    with pytest.warns(IndexRebuilt, match="2 item"), Journal(journal_target) as journal:
        assert [s.item.review_id for s in list_items(journal)] == ids[1:]
    assert raw(journal_target, _MARK) == [(str(CURRENT),)]
    with _statements(monkeypatch) as seen, Journal(journal_target) as journal:
        assert _reads_history(seen) == []
        assert journal.review_index_agrees()


def test_an_upgrade_removes_the_mark_and_a_stale_index_is_rebuilt(
    journal_target: str,
) -> None:
    """A journal of revision 2 (written by an older version) with an index behind its
    events: the upgrade removes the mark, and the open compares and rebuilds."""
    ids = _journal_with_items(journal_target, 2)
    raw(journal_target, "UPDATE dissensus_meta SET value = '2' WHERE key = 'schema'")
    raw(journal_target, "UPDATE review_index SET resolved_seq = NULL")
    assert raw(journal_target, _MARK) == [(str(CURRENT),)]  # a mark the upgrade must drop
    with pytest.warns(IndexRebuilt, match=ids[0]), Journal(journal_target) as journal:
        assert journal.schema()["revision"] == CURRENT
        assert [s.item.review_id for s in list_items(journal)] == ids[1:]
        assert list(list_items(journal, include_resolved=True)) == list(
            list_items_from_events(journal, include_resolved=True)
        )
    assert raw(journal_target, _MARK) == [(str(CURRENT),)]


def test_an_index_edited_after_the_check_is_named_by_verify(journal_target: str) -> None:
    ids = _journal_with_items(journal_target, 2)
    raw(journal_target, "UPDATE review_index SET resolved_seq = NULL")
    with Journal(journal_target) as journal:  # not compared on opening: the mark holds
        assert not journal.review_index_agrees()
        report = journal.verify("run0")
        assert report.problems == [
            f"review index row of '{ids[0]}' differed from the events (rebuilt from the events)"
        ]
        assert journal.review_index_agrees()
        assert [s.item.review_id for s in list_items(journal)] == ids[1:]


@pytest.mark.parametrize("journal_target", ["postgres"], indirect=True)
def test_a_journal_that_cannot_be_written_is_compared_on_every_open(
    journal_target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only session (PostgreSQL's ``default_transaction_read_only``) keeps no mark."""
    _journal_with_items(journal_target, 2)
    raw(journal_target, UNMARK_INDEX)
    read_only = journal_target + "%20-cdefault_transaction_read_only%3Don"
    for _ in range(2):
        with _statements(monkeypatch) as seen, Journal(read_only) as journal:
            assert journal.review_index_agrees()
        assert _reads_history(seen), seen
        assert raw(journal_target, _MARK) == []
