"""The run journal on both back ends: hash chain, idempotent keys, tamper detection,
canonical stored text, header anchor, foreign databases, durability settings."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cli_helpers import cli
from dissensus.errors import InputError
from dissensus.store import (
    GENESIS,
    Journal,
    JournalConflict,
    RunExists,
    UnknownRun,
    canonical,
    chain_hash,
    journal_path,
    open_journal,
)
from dissensus.store.events import NewEvent
from store_backends import raw


def _journal(target: str) -> Journal:
    journal = Journal(target)
    journal.create_run("r", kind="test", meta={"x": 1})
    return journal


def _filled(target: str, n: int = 4) -> None:
    with _journal(target) as j:
        for i in range(n):
            j.append("r", "e", {"v": i}, key=f"k{i}")


def test_chain_links_every_event_to_the_previous_one(journal_target: str) -> None:
    with _journal(journal_target) as j:
        a = j.append("r", "one", {"v": 1}, key="k1")
        b = j.append("r", "two", {"v": [1.5, "é"]}, key="k2", case="3")
        assert (a.seq, b.seq) == (0, 1)
        assert a.prev_hash == GENESIS and b.prev_hash == a.hash
        assert b.hash == chain_hash(a.hash, b.body())
        assert j.run("r").head_hash == b.hash  # type: ignore[union-attr]
        report = j.verify("r")
        assert report.ok and report.n_events == 2 and report.head_hash == b.hash
        assert not report.finished


def test_both_back_ends_store_the_same_text_and_chain(tmp_path: Path, journal_target: str) -> None:
    """The hash of an event depends on its content and time only, never on the back end."""
    with _journal(journal_target) as j:
        event = j.append("r", "two", {"v": [1.5, "é", None, {"b": 1, "a": 2}]}, key="k", case="1")
    stored = raw(journal_target, "SELECT payload, hash FROM events WHERE run_id = 'r'")
    assert stored == [(canonical(event.payload), chain_hash(GENESIS, event.body()))]


def test_appending_a_known_key_writes_nothing_and_a_changed_payload_is_refused(
    journal_target: str,
) -> None:
    with _journal(journal_target) as j:
        first = j.append("r", "one", {"v": 1}, key="k")
        again = j.append("r", "one", {"v": 1}, key="k")
        assert again == first
        assert len(list(j.events("r"))) == 1
        with pytest.raises(JournalConflict):
            j.append("r", "one", {"v": 2}, key="k")


def test_unknown_run_is_an_error(journal_target: str) -> None:
    with _journal(journal_target) as j, pytest.raises(UnknownRun):
        j.append("nope", "x", {}, key="k")


def test_a_run_and_its_first_event_are_one_transaction(journal_target: str) -> None:
    with Journal(journal_target) as j:
        with pytest.raises(ValueError, match="Out of range"):
            j.create_run(
                "r", kind="t", meta={}, first=("run.started", {"bad": float("nan")}, "run/started")
            )
        assert j.run("r", missing_ok=True) is None  # nothing left behind
        j.create_run(
            "r", kind="t", meta={}, first=("run.started", {"ok": 1}, "run/started"), exclusive=True
        )
        assert [e.key for e in j.events("r")] == ["run/started"]
        with pytest.raises(RunExists, match="already exists"):
            j.create_run("r", kind="t", meta={}, exclusive=True)


def test_a_transaction_commits_all_its_events_or_none(journal_target: str) -> None:
    with _journal(journal_target) as j:
        with pytest.raises(RuntimeError), j.transaction("r"):
            j.append("r", "a", {}, key="a")
            j.append("r", "b", {}, key="b")
            raise RuntimeError("crash between the two")
        assert list(j.events("r")) == [] and j.run("r").n_events == 0  # type: ignore[union-attr]
        with j.transaction("r"):
            j.append("r", "a", {}, key="a")
            j.append("r", "b", {}, key="b")
        assert [e.seq for e in j.events("r")] == [0, 1] and j.verify("r").ok


@given(st.lists(st.tuples(st.sampled_from("abcdefgh"), st.integers(0, 3)), max_size=30))
def test_any_sequence_of_appends_verifies_and_holds_each_key_once(
    ops: list[tuple[str, int]],
) -> None:
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


def test_verify_detects_an_edited_payload(journal_target: str) -> None:
    _filled(journal_target)
    raw(journal_target, "UPDATE events SET payload = ? WHERE seq = 2", (canonical({"v": 99}),))
    with Journal(journal_target) as j:
        report = j.verify("r")
    assert not report.ok
    assert any("event 2" in p and "hash" in p for p in report.problems)


def test_verify_refuses_a_duplicate_key_payload_that_readers_disagree_on(
    journal_target: str,
) -> None:
    """`{"v":2,"v":9}`: SQLite's json_extract reads one value, Python's json the other."""
    _filled(journal_target)
    raw(journal_target, "UPDATE events SET payload = ? WHERE seq = 2", ('{"v":2,"v":9}',))
    with Journal(journal_target) as j:
        report = j.verify("r")
    assert not report.ok
    assert any("event 2" in p and "duplicate key" in p for p in report.problems)


def test_verify_refuses_stored_text_that_is_not_canonical(journal_target: str) -> None:
    """Same JSON value, other spelling: the hash still matches, the stored text does not."""
    _filled(journal_target)
    raw(journal_target, "UPDATE events SET payload = ? WHERE seq = 1", ('{ "v": 1 }',))
    with Journal(journal_target) as j:
        report = j.verify("r")
    assert not report.ok
    assert report.problems == ["event 1 (k1): stored payload text is not its canonical JSON"]


def test_verify_detects_a_removed_tail_and_a_deleted_middle_event(journal_target: str) -> None:
    _filled(journal_target)
    raw(journal_target, "DELETE FROM events WHERE seq = 3")
    with Journal(journal_target) as j:
        problems = j.verify("r").problems
    assert "run header counts 4 events, journal holds 3" in problems
    assert "run head hash does not match the last event" in problems
    raw(journal_target, "DELETE FROM events WHERE seq = 1")
    with Journal(journal_target) as j:
        problems = j.verify("r").problems
    assert "event 1 missing (1 event)" in problems


def test_a_truncated_finished_run_with_a_fixed_header_is_reported_unfinished(
    journal_target: str,
) -> None:
    with _journal(journal_target) as j:
        j.append("r", "e", {"v": 0}, key="k0")
        j.append("r", "run.finished", {}, key="run/finished")
        assert j.verify("r").finished
        head = j.events("r").__next__().hash
    raw(journal_target, "DELETE FROM events WHERE seq = 1")
    raw(journal_target, "UPDATE runs SET n_events = 1, head_hash = ?", (head,))
    with Journal(journal_target) as j:
        report = j.verify("r")
    assert report.ok and not report.finished  # without a key, all a re-sealed header can show


def test_runs_verify_cli_fails_on_an_edited_event(tmp_path: Path) -> None:
    target = str(tmp_path / "j.sqlite")
    _filled(target, 3)
    ok = cli("runs", "verify", "r", "--journal", target)
    assert ok.code == 0, ok.err
    assert "OK" in ok.out
    raw(target, "UPDATE events SET type = 'forged' WHERE seq = 1")
    bad = cli("runs", "verify", "r", "--journal", target)
    assert bad.code == 1
    assert "FAILED" in bad.err and "event 1" in bad.err


def test_wal_and_full_sync_are_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DISSENSUS_JOURNAL_SYNC", raising=False)
    with _journal(str(tmp_path / "j.sqlite")) as j:
        assert j._backend._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # type: ignore[attr-defined]
        assert j._backend._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # type: ignore[attr-defined]  # FULL
    monkeypatch.setenv("DISSENSUS_JOURNAL_SYNC", "sometimes")
    with pytest.raises(InputError):
        Journal(tmp_path / "other.sqlite")


def test_a_new_journal_has_16_kib_pages_and_an_old_one_keeps_its_own(tmp_path: Path) -> None:
    from dissensus.store.sqlite import PAGE_SIZE

    with Journal(tmp_path / "new.sqlite") as j:
        assert j._backend._db.execute("PRAGMA page_size").fetchone()[0] == PAGE_SIZE == 16384  # type: ignore[attr-defined]
    # A journal made with SQLite's default pages (as earlier versions made them), with a
    # run in it: opened, appended to and verified as it is.
    old = tmp_path / "old.sqlite"
    with Journal(old) as j:
        j.create_run("R", kind="decide", meta={})
        j.append("R", "case.step", {"text": "x" * 6000}, key="k/1")
    db = sqlite3.connect(old)
    db.execute("PRAGMA journal_mode=DELETE")
    db.execute("PRAGMA page_size=4096")
    db.execute("VACUUM")
    db.close()
    with Journal(old) as j:
        assert j._backend._db.execute("PRAGMA page_size").fetchone()[0] == 4096  # type: ignore[attr-defined]
        j.append("R", "case.step", {"text": "y" * 6000}, key="k/2")
        assert [e.payload["text"][0] for e in j.events("R")] == ["x", "y"]
        assert j.verify("R").ok


def test_the_wal_checkpoints_at_about_4_mib_whatever_the_page_size(tmp_path: Path) -> None:
    """SQLite checkpoints after 1,000 WAL pages: with 16 KiB pages the WAL grew to 16 MiB
    before it was copied back; each connection now sets the pages from its file's own
    page size (250 of 16 KiB; an old 4 KiB journal keeps SQLite's 1,000)."""
    new = tmp_path / "new.sqlite"
    with Journal(new) as j:
        assert j._backend._db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 250  # type: ignore[attr-defined]
        j.create_run("R", kind="decide", meta={})
        for block in range(16):  # 8 MiB of events, in blocks of 512 KiB
            j.append_batch(
                "R",
                [
                    NewEvent("case.step", {"text": f"{block}.{i}" + "z" * 65536}, f"k/{block}/{i}")
                    for i in range(8)
                ],
            )
            assert os.path.getsize(f"{new}-wal") < 6 * 1024 * 1024
        assert j.verify("R").ok
    old = tmp_path / "old.sqlite"
    db = sqlite3.connect(old)
    db.execute("PRAGMA page_size=4096")
    db.execute("VACUUM")
    db.close()
    with Journal(old) as j:
        assert j._backend._db.execute("PRAGMA page_size").fetchone()[0] == 4096  # type: ignore[attr-defined]
        assert j._backend._db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000  # type: ignore[attr-defined]
    from dissensus.store.sqlite import checkpoint_pages

    assert (checkpoint_pages(16384), checkpoint_pages(4096), checkpoint_pages(65536)) == (
        250,
        1000,
        62,
    )


def test_journal_path_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DISSENSUS_JOURNAL", raising=False)
    assert journal_path(None) == "dissensus-journal.sqlite"
    monkeypatch.setenv("DISSENSUS_JOURNAL", "/x/env.sqlite")
    assert journal_path(None) == "/x/env.sqlite"
    assert journal_path("opt.sqlite") == "opt.sqlite"


def test_a_missing_directory_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError):
        Journal(tmp_path / "missing" / "j.sqlite")


def test_open_journal_picks_the_back_end_from_the_target(journal_target: str) -> None:
    with open_journal(journal_target) as j:
        kind = type(j._backend).__name__
    assert kind == (
        "PostgresBackend" if journal_target.startswith("postgresql://") else "SQLiteBackend"
    )


def test_another_applications_sqlite_database_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    db.commit()
    db.close()
    with pytest.raises(InputError, match="another application"):
        Journal(path)
    db = sqlite3.connect(path)
    tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    db.close()
    assert tables == ["users"]
    (tmp_path / "panels.jsonl").write_text("", encoding="utf-8")
    out = cli("decide", tmp_path / "panels.jsonl", "--journal", path)
    assert out.code == 2, out.err
    assert out.err.count("\n") == 1 and "another application" in out.err


def test_a_table_named_runs_with_other_columns_is_refused(journal_target: str) -> None:
    raw(journal_target, "CREATE TABLE runs (id INTEGER PRIMARY KEY, started TEXT)")
    with pytest.raises(InputError, match="another application"):
        Journal(journal_target)


def test_a_journal_missing_a_table_or_an_index_gets_it_back_on_opening(
    journal_target: str,
) -> None:
    """Opening skips creating the schema only when every table and index is there."""
    with Journal(journal_target) as j:
        j.create_run("r", kind="t", meta={})
    raw(journal_target, "DROP TABLE claims")
    raw(journal_target, "DROP INDEX events_case")
    with Journal(journal_target) as j:
        assert j.claim("r.1", "kim", 60, run_id="r").who == "kim"
    if journal_target.startswith("postgresql://"):
        sql = (
            "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND indexname = ?"
        )
    else:
        sql = "SELECT name FROM sqlite_master WHERE type = 'index' AND name = ?"
    assert raw(journal_target, sql, ("events_case",)) == [("events_case",)]


def test_a_journal_written_before_the_meta_table_still_opens(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    _filled(str(path), 2)
    raw(str(path), "DROP TABLE dissensus_meta")
    raw(str(path), "DROP TABLE claims")
    with Journal(path) as j:
        assert j.verify("r").ok


def test_one_canonical_json_everywhere() -> None:
    """The journal, replay keys and CONCORD digests share one canonical JSON, which
    refuses non-finite numbers."""
    import hashlib

    from dissensus.concord.record import canonical_digest
    from dissensus.llm import replay

    assert replay._canonical_json is canonical
    body = {"b": [1.5, "é"], "a": None}
    assert (
        canonical_digest(body) == "sha256:" + hashlib.sha256(canonical(body).encode()).hexdigest()
    )
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError):
            canonical({"x": bad})


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(_JSON)
def test_canonical_is_the_documented_json_dumps(value: object) -> None:
    """The reused encoder writes exactly what ``json.dumps`` with the canonical options does."""
    import json

    expected = json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    assert canonical(value) == expected


def test_cases_with_events_names_the_cases_that_have_one(journal_target: str) -> None:
    with _journal(journal_target) as j:
        j.append("r", "e", {"v": 1}, key="a", case="1")
        j.append("r", "e", {"v": 2}, key="b", case="3")
        j.append("r", "e", {"v": 3}, key="c")
        assert j.cases_with_events("r", ["1", "2", "3", "1"]) == {"1", "3"}
        assert j.cases_with_events("r", [str(i) for i in range(1200)]) == {"1", "3"}
        assert j.cases_with_events("r", []) == set()


def test_an_sqlite_uri_is_refused_and_dot_slash_names_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``file:j.sqlite?mode=rwc`` made a stray empty file of that name and a journal
    ``j.sqlite`` that was not 0600; a URI is refused, ``./file:...`` is a plain path."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match=r"SQLite URIs .*\./file:j\.sqlite\?mode=rwc"):
        Journal("file:j.sqlite?mode=rwc")
    assert list(tmp_path.iterdir()) == []
    with _journal("./file:j.sqlite") as j:
        j.append("r", "e", {"v": 1}, key="k1")
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(("-wal", "-shm"))] == [
        "file:j.sqlite"
    ]
    assert (tmp_path / "file:j.sqlite").stat().st_mode & 0o777 == 0o600
