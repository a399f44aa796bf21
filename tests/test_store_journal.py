"""The run journal: hash chain, idempotent keys, tamper detection, durability settings."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dissensus.errors import InputError
from dissensus.store import (
    GENESIS,
    Journal,
    JournalConflict,
    UnknownRun,
    canonical,
    chain_hash,
    journal_path,
)


def _journal(tmp_path: Path, name: str = "j.sqlite") -> Journal:
    journal = Journal(tmp_path / name)
    journal.create_run("r", kind="test", meta={"x": 1})
    return journal


def test_chain_links_every_event_to_the_previous_one(tmp_path: Path) -> None:
    with _journal(tmp_path) as j:
        a = j.append("r", "one", {"v": 1}, key="k1")
        b = j.append("r", "two", {"v": [1.5, "é"]}, key="k2", case="3")
        assert (a.seq, b.seq) == (0, 1)
        assert a.prev_hash == GENESIS and b.prev_hash == a.hash
        assert b.hash == chain_hash(a.hash, b.body())
        assert j.run("r").head_hash == b.hash  # type: ignore[union-attr]
        report = j.verify("r")
        assert report.ok and report.n_events == 2 and report.head_hash == b.hash


def test_appending_a_known_key_writes_nothing_and_a_changed_payload_is_refused(tmp_path: Path) -> None:
    with _journal(tmp_path) as j:
        first = j.append("r", "one", {"v": 1}, key="k")
        again = j.append("r", "one", {"v": 1}, key="k")
        assert again == first
        assert len(list(j.events("r"))) == 1
        with pytest.raises(JournalConflict):
            j.append("r", "one", {"v": 2}, key="k")


def test_unknown_run_is_an_error(tmp_path: Path) -> None:
    with _journal(tmp_path) as j, pytest.raises(UnknownRun):
        j.append("nope", "x", {}, key="k")


@given(st.lists(st.tuples(st.sampled_from("abcdefgh"), st.integers(0, 3)), max_size=30))
def test_any_sequence_of_appends_verifies_and_holds_each_key_once(ops: list[tuple[str, int]]) -> None:
    j = Journal(":memory:")
    j.create_run("r", kind="test", meta={})
    first_payload: dict[str, int] = {}
    for key, value in ops:
        payload = first_payload.setdefault(key, value)
        j.append("r", "e", {"v": payload}, key=key)
    events = list(j.events("r"))
    assert [e.key for e in events] == list(first_payload)
    assert [e.seq for e in events] == list(range(len(events)))
    assert j.verify("r").ok


def _tamper(path: Path, sql: str, *args: object) -> None:
    db = sqlite3.connect(path)
    db.execute(sql, args)
    db.commit()
    db.close()


def test_verify_detects_an_edited_payload(tmp_path: Path) -> None:
    with _journal(tmp_path) as j:
        for i in range(4):
            j.append("r", "e", {"v": i}, key=f"k{i}")
    _tamper(tmp_path / "j.sqlite", "UPDATE events SET payload = ? WHERE seq = 2", canonical({"v": 99}))
    with Journal(tmp_path / "j.sqlite") as j:
        report = j.verify("r")
    assert not report.ok
    assert any("event 2" in p and "hash" in p for p in report.problems)


def test_verify_detects_a_removed_tail_and_a_deleted_middle_event(tmp_path: Path) -> None:
    with _journal(tmp_path) as j:
        for i in range(4):
            j.append("r", "e", {"v": i}, key=f"k{i}")
    _tamper(tmp_path / "j.sqlite", "DELETE FROM events WHERE seq = 3")
    with Journal(tmp_path / "j.sqlite") as j:
        assert not j.verify("r").ok
    _tamper(tmp_path / "j.sqlite", "DELETE FROM events WHERE seq = 1")
    with Journal(tmp_path / "j.sqlite") as j:
        problems = j.verify("r").problems
    assert any("sequence gap" in p for p in problems)


def test_runs_verify_cli_fails_on_an_edited_event(tmp_path: Path) -> None:
    with _journal(tmp_path) as j:
        for i in range(3):
            j.append("r", "e", {"v": i}, key=f"k{i}")
    cmd = [sys.executable, "-m", "dissensus", "runs", "verify", "r", "--journal", str(tmp_path / "j.sqlite")]
    ok = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stderr
    assert "OK" in ok.stdout
    _tamper(tmp_path / "j.sqlite", "UPDATE events SET type = 'forged' WHERE seq = 1")
    bad = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert bad.returncode == 1
    assert "FAILED" in bad.stderr and "event 1" in bad.stderr


def test_wal_and_full_sync_are_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DISSENSUS_JOURNAL_SYNC", raising=False)
    with _journal(tmp_path) as j:
        assert j._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert j._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    monkeypatch.setenv("DISSENSUS_JOURNAL_SYNC", "sometimes")
    with pytest.raises(InputError):
        Journal(tmp_path / "other.sqlite")


def test_journal_path_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DISSENSUS_JOURNAL", raising=False)
    assert journal_path(None) == "dissensus-journal.sqlite"
    monkeypatch.setenv("DISSENSUS_JOURNAL", "/x/env.sqlite")
    assert journal_path(None) == "/x/env.sqlite"
    assert journal_path("opt.sqlite") == "opt.sqlite"


def test_a_missing_directory_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError):
        Journal(tmp_path / "missing" / "j.sqlite")
