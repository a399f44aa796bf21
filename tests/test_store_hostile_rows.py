"""Coordination rows edited outside dissensus are one error line, never a traceback.

The review index and the run locks are outside the hash chain, and SQLite keeps
whatever text is written into an ``INTEGER`` column. A review index row whose sequence
number was edited into text made ``review list`` end in ``ValueError`` and a traceback;
it is now one ``journal damaged`` line naming the item and its run (exit 2), and
``runs verify`` of the run rebuilds the index, after which the queue lists again.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from cli_helpers import cli
from dissensus.store import Journal
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
