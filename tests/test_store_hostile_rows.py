"""Coordination rows edited outside dissensus are one error line, never a traceback.

The review index and the run locks are outside the hash chain, and SQLite keeps
whatever text is written into an ``INTEGER`` column. A review index row whose sequence
number was edited into text made ``review list`` end in ``ValueError`` and a traceback;
it is now one ``journal damaged`` line naming the item and its run (exit 2), and
``runs verify`` of the run rebuilds the index, after which the queue lists again. A
run lock's pid edited the same way made ``runs list`` and ``runs resume`` fail alike.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from cli_helpers import cli
from dissensus.pipeline import Policy, start_run
from dissensus.store import Journal
from pipeline_cases import panel, write_jsonl
from test_review_queue import _escalated


@pytest.mark.parametrize("column", ["opened_seq", "resolved_seq"])
@pytest.mark.parametrize("value", ["x", "", "seven", " 7 junk"])
def test_a_review_index_row_edited_into_text_is_named_not_a_traceback(
    tmp_path: Path, column: str, value: str
) -> None:
    path = tmp_path / "j.sqlite"
    with Journal(path) as journal:
        review_id = _escalated(journal, "run1")
    db = sqlite3.connect(path)
    with db:
        db.execute(f"UPDATE review_index SET {column} = ? WHERE review_id = ?", (value, review_id))
    db.close()
    listed = cli("review", "list", "--all", "--journal", path)
    assert listed.code == 2, listed.err
    assert "Traceback" not in listed.err and len(listed.err.strip().splitlines()) == 1
    assert "journal damaged" in listed.err and "'run1.1'" in listed.err and "'run1'" in listed.err
    verified = cli("runs", "verify", "run1", "--journal", path)
    assert verified.code == 1 and "rebuilt from the events" in verified.err
    again = cli("review", "list", "--all", "--journal", path, "--json")
    assert again.code == 0, again.err
    assert review_id in again.out


@pytest.mark.parametrize("pid", ["x", "seven", 2**40, 1e20, -1])
def test_a_run_lock_naming_no_process_is_free_not_a_traceback(tmp_path: Path, pid: object) -> None:
    """A ``run_locks`` row whose pid was edited (into text, or a number no process can
    have) made ``runs list`` and ``runs resume`` end in ``ValueError`` or
    ``OverflowError``; the row now names no process, so the run is listed as stopped
    and resumes."""
    path = tmp_path / "j.sqlite"
    inputs = write_jsonl(tmp_path / "in.jsonl", [panel(f"p{i}", ["1", "1", "2"]) for i in range(3)])
    with Journal(path) as journal:
        start_run(journal, str(inputs), Policy(), run_id="r", similarity="tfidf", lock=True)
    db = sqlite3.connect(path)
    with db:
        assert db.execute("UPDATE run_locks SET pid = ? WHERE run_id = 'r'", (pid,)).rowcount == 1
    db.close()
    listed = cli("runs", "list", "--journal", path, "--json")
    assert listed.code == 0, listed.err
    assert "incomplete" in listed.out
    resumed = cli("runs", "resume", "r", "--journal", path, "--json")
    assert resumed.code == 0, resumed.err
    assert "Traceback" not in resumed.err
    with Journal(path) as journal:
        assert journal.verify("r").ok
        assert journal.get("r", "run/finished") is not None
