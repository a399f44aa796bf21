"""The review index cannot lie: it is checked against the events by content, not counts.

Moving ``resolved_seq`` from one item to another in ``review_index`` keeps every count
the same; it used to hide an open case, show a resolution on the wrong one, and leave
``runs verify`` at OK. ``runs verify`` compares every index row of its run with what the
events derive (item, run, position, reason, resolving event), names the items whose row
was wrong and rebuilds the index; opening a journal not yet checked at its schema
revision (one an upgrade reached) compares them all and rebuilds the index before
anything is listed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_helpers import run_cli
from dissensus.pipeline.review import list_items, resolve
from dissensus.store import Journal, JournalReadOnly
from dissensus.store.review_index import ReviewIndex
from store_backends import UNMARK_INDEX, raw
from test_review_queue import _escalated


def _journal_with_two_cases(target: str) -> tuple[str, str]:
    with Journal(target) as journal:
        first = _escalated(journal, "run1")
        second = _escalated(journal, "run2")
        resolve(journal, first, decision="1", note="checked", reviewer="kim")
    return first, second


def _move_resolution(target: str, source: str, dest: str) -> None:
    ((seq,),) = raw(target, "SELECT resolved_seq FROM review_index WHERE review_id = ?", (source,))
    raw(target, "UPDATE review_index SET resolved_seq = NULL WHERE review_id = ?", (source,))
    raw(target, "UPDATE review_index SET resolved_seq = ? WHERE review_id = ?", (seq, dest))


@pytest.mark.parametrize("journal_target", ["sqlite", "postgres"], indirect=True)
@pytest.mark.parametrize(
    "edit",
    [
        "move",
        "UPDATE review_index SET reason = 'nothing to see'",
        "UPDATE review_index SET opened_seq = opened_seq + 1",
        "DELETE FROM review_index WHERE run_id = 'run2'",
    ],
)
@pytest.mark.parametrize("checked", [False, True], ids=["unchecked", "after-the-check"])
def test_an_edited_index_is_named_by_verify_and_rebuilt(
    journal_target: str, edit: str, checked: bool
) -> None:
    """Edited in a journal not yet checked at its revision, the index is rebuilt on
    opening, before anything is listed; edited after the check, ``runs verify`` finds it
    (and rebuilds it). Verification names the items either way."""
    target = journal_target
    first, second = _journal_with_two_cases(target)
    if edit == "move":
        _move_resolution(target, first, second)  # every count stays the same
    else:
        raw(target, edit)
    if not checked:
        raw(target, UNMARK_INDEX)
    with Journal(target) as journal:
        if not checked:
            assert [s.item.review_id for s in list_items(journal)] == [second]
            assert [s.item.review_id for s in list_items(journal, resolved_only=True)] == [first]
        reports = [journal.verify(r) for r in ("run1", "run2")]
        assert not all(r.ok for r in reports)
        assert any("review index row" in p for r in reports for p in r.problems)
        assert journal.review_index_agrees()
        assert [s.item.review_id for s in list_items(journal)] == [second]
        assert [s.item.review_id for s in list_items(journal, resolved_only=True)] == [first]
        assert {s.item.reason for s in list_items(journal, include_resolved=True)} != {
            "nothing to see"
        }
    with Journal(target) as journal:  # rebuilt: the next open is clean
        assert journal.verify("run1").ok and journal.verify("run2").ok


def test_runs_verify_fails_on_an_edited_index(tmp_path: Path) -> None:
    target = str(tmp_path / "j.sqlite")
    first, second = _journal_with_two_cases(target)
    _move_resolution(target, first, second)
    res = run_cli("runs", "verify", "run2", "--journal", target)
    assert res.returncode == 1
    assert f"review index row of '{second}'" in res.stdout + res.stderr


def test_a_read_only_journal_with_an_edited_index_lists_from_the_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = str(tmp_path / "j.sqlite")
    first, second = _journal_with_two_cases(target)
    _move_resolution(target, first, second)
    raw(target, UNMARK_INDEX)  # as a journal an upgrade reached

    def read_only(self: ReviewIndex) -> int:
        raise JournalReadOnly("read-only")

    monkeypatch.setattr(ReviewIndex, "rebuild", read_only)
    with Journal(target) as journal:
        assert journal.review_entries() is None
        assert [s.item.review_id for s in list_items(journal)] == [second]
        assert not journal.verify("run2").ok


def test_an_honest_journal_agrees(tmp_path: Path) -> None:
    target = str(tmp_path / "j.sqlite")
    _journal_with_two_cases(target)
    with Journal(target) as journal:
        assert journal.review_index_differences() == []
        assert journal.verify("run1").ok and journal.verify("run2").ok


def test_the_command_that_rebuilds_an_edited_index_says_so(tmp_path: Path) -> None:
    """After the rebuild nothing of the edit is left for a later ``runs verify``: the
    command that opened the journal first (any of them) names the items on one line."""
    target = str(tmp_path / "j.sqlite")
    _journal_with_two_cases(target)
    raw(target, "INSERT INTO review_index VALUES ('run1.999', 'run1', 3, 'forged', NULL)")
    raw(target, UNMARK_INDEX)  # not checked at this revision: compared on opening
    res = run_cli("review", "list", "--journal", target)
    assert res.returncode == 0, res.stderr
    (line,) = [x for x in res.stderr.splitlines() if x.startswith("warning:")]
    assert "review index differed" in line and "'run1.999'" in line, res.stderr
    again = run_cli("review", "list", "--journal", target)
    assert again.returncode == 0 and "warning" not in again.stderr
    with pytest.warns(UserWarning, match="review index differed"):
        raw(target, "DELETE FROM review_index WHERE run_id = 'run2'")
        raw(target, UNMARK_INDEX)
        Journal(target).close()


@pytest.mark.parametrize("journal_target", ["sqlite", "postgres"], indirect=True)
@pytest.mark.parametrize("row_deleted", [False, True])
def test_a_review_event_whose_payload_is_not_json_is_named_by_verify_alone(
    journal_target: str, row_deleted: bool
) -> None:
    """One ``review.opened`` payload cut short (and its index row deleted too): ``runs
    verify`` names that event, and the journal's other runs and commands work, on
    PostgreSQL (whose JSON cast failed the whole query) as on SQLite."""
    target = journal_target
    first, second = _journal_with_two_cases(target)
    raw(
        target,
        "UPDATE events SET payload = substr(payload, 1, 50) "
        "WHERE run_id = 'run2' AND type = 'review.opened'",
    )
    if row_deleted:
        raw(target, "DELETE FROM review_index WHERE review_id = ?", (second,))
    with Journal(target) as journal:
        assert [r.run_id for r in journal.runs()] == ["run1", "run2"]
        assert journal.verify("run1").ok
        report = journal.verify("run2")
        assert not report.ok
        assert any("not valid canonical JSON" in p for p in report.problems), report.problems
        assert [e.review_id for e in journal.review_entries() or []] == [first]
        journal.create_run("run3", kind="decide", meta={})
    with Journal(target) as journal:  # and so does every later open
        assert journal.verify("run1").ok and journal.verify("run3").ok
    for args in (["runs", "list"], ["runs", "verify", "run1"], ["review", "list"]):
        res = run_cli(*args, "--journal", target)
        assert res.returncode == 0, (args, res.stderr)
    res = run_cli("runs", "verify", "run2", "--journal", target)
    assert res.returncode == 1 and "FAILED" in res.stdout + res.stderr, res.stderr
    assert "not valid canonical JSON" in res.stdout + res.stderr


@pytest.mark.parametrize("journal_target", ["sqlite", "postgres"], indirect=True)
def test_the_check_from_read_payloads_agrees_with_the_databases(journal_target: str) -> None:
    """The thorough check made from payloads read (when a payload is not JSON) finds the
    items the database's own comparison finds, for each kind of edit."""
    target = journal_target
    _journal_with_two_cases(target)
    edits = [
        "UPDATE review_index SET reason = 'nothing to see' WHERE run_id = 'run1'",
        "UPDATE review_index SET opened_seq = opened_seq + 1 WHERE run_id = 'run2'",
        "UPDATE review_index SET resolved_seq = NULL",
        "DELETE FROM review_index WHERE run_id = 'run2'",
        "INSERT INTO review_index VALUES ('run1.999', 'run1', 3, 'forged', NULL)",
    ]
    with Journal(target) as journal:
        index = journal._review
        assert index._differences_read(None) == index.differences() == []
        for edit in edits:
            raw(target, edit)
            for run_id in (None, "run1", "run2"):
                assert index._differences_read(run_id) == index.differences(run_id), edit
            assert index._differences_read(None), edit
            journal.rebuild_review_index()
