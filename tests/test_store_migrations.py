"""Schema revisions: a 0.2 journal opens and upgrades, a newer one is refused, every
starting revision ends at the same schema as a new journal, on both back ends."""

from __future__ import annotations

import gzip
import sqlite3
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dissensus.cli import app, main
from dissensus.errors import InputError
from dissensus.store import open_journal
from dissensus.store.events import EVENTS_COLUMNS, RUNS_COLUMNS
from dissensus.store.migrations import (
    CURRENT,
    REVISIONS,
    JournalTooNew,
    apply,
    parse_revision,
    plan,
)
from dissensus.store.schema import EVENTS, RUNS
from store_backends import pg_schema, pg_url, raw

FIXTURES = Path(__file__).parent / "fixtures"
RUN_02 = "4db82872ec66"  # the run in the 0.2 journal: 6 panels, one review resolved


def _journal_02(tmp_path: Path) -> str:
    path = tmp_path / "journal-0.2.sqlite"
    path.write_bytes(gzip.decompress((FIXTURES / "journal-0.2.sqlite.gz").read_bytes()))
    return str(path)


def _sqlite_schema(path: str) -> set[tuple[str, str]]:
    db = sqlite3.connect(path)
    try:
        rows = db.execute(
            "SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
        ).fetchall()
    finally:
        db.close()
    return {(str(t), str(n)) for t, n in rows}


def test_schema_definitions_match_the_column_checks() -> None:
    assert RUNS.column_names == RUNS_COLUMNS
    assert EVENTS.column_names == EVENTS_COLUMNS


def test_revisions_are_numbered_in_order_from_one() -> None:
    assert [r.number for r in REVISIONS] == list(range(1, CURRENT + 1))
    assert [r.number for r in plan(0)] == list(range(1, CURRENT + 1))
    assert plan(CURRENT) == ()


def test_a_02_journal_opens_upgrades_and_verifies(tmp_path: Path) -> None:
    path = _journal_02(tmp_path)
    assert raw(path, "SELECT value FROM dissensus_meta WHERE key = 'schema'") == [("1",)]
    head_before = raw(path, "SELECT head_hash, n_events FROM runs")
    with open_journal(path) as journal:
        info = journal.schema()
        assert info["revision"] == CURRENT
        assert [row["revision"] for row in info["history"]] == list(range(1, CURRENT + 1))
        assert info["history"][0]["applied_at"] is None  # revision 1 predates the history
        assert info["history"][-1]["applied_at"]
        report = journal.verify(RUN_02)
        assert report.ok, report
        assert report.n_events == 55
        resolved = [e for e in journal.events(RUN_02) if e.type == "review.resolved"]
        assert len(resolved) == 1
    # The upgrade only adds tables: the events and the chain's head are as they were.
    assert raw(path, "SELECT head_hash, n_events FROM runs") == head_before
    assert raw(path, "SELECT value FROM dissensus_meta WHERE key = 'schema'") == [(str(CURRENT),)]


def test_an_upgraded_journal_has_the_schema_of_a_new_one(tmp_path: Path) -> None:
    old = _journal_02(tmp_path)
    new = str(tmp_path / "new.sqlite")
    open_journal(old).close()
    open_journal(new).close()
    assert _sqlite_schema(old) == _sqlite_schema(new)


@pytest.mark.parametrize("start", range(CURRENT + 1))
def test_every_starting_revision_reaches_the_current_schema(tmp_path: Path, start: int) -> None:
    """A journal left at any revision (made by applying only the revisions up to it)
    upgrades to the same tables and indexes as a journal made new."""
    path = str(tmp_path / f"at-{start}.sqlite")
    db = sqlite3.connect(path, isolation_level=None)
    try:
        for revision in REVISIONS[:start]:
            for sql, args in revision.statements("sqlite"):
                db.execute(sql, args)
        if start:
            db.execute("INSERT OR REPLACE INTO dissensus_meta VALUES ('schema', ?)", (str(start),))
    finally:
        db.close()
    with open_journal(path) as journal:
        assert journal.schema()["revision"] == CURRENT
    fresh = str(tmp_path / "fresh.sqlite")
    open_journal(fresh).close()
    assert _sqlite_schema(path) == _sqlite_schema(fresh)


def test_opening_an_up_to_date_journal_writes_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "j.sqlite")
    open_journal(path).close()
    history = raw(path, "SELECT * FROM dissensus_revisions")
    db = sqlite3.connect(path)
    try:
        before = db.execute("PRAGMA data_version").fetchone()
        open_journal(path).close()
        after = db.execute("PRAGMA data_version").fetchone()
    finally:
        db.close()
    assert before == after  # another connection's commit would change it
    assert raw(path, "SELECT * FROM dissensus_revisions") == history


def test_a_newer_journal_is_refused_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(tmp_path / "j.sqlite")
    open_journal(path).close()
    raw(path, "UPDATE dissensus_meta SET value = ? WHERE key = 'schema'", (str(CURRENT + 1),))
    with pytest.raises(JournalTooNew, match=r"newer dissensus \(schema revision \d+"):
        open_journal(path)
    assert main(["runs", "list", "--journal", path]) == 2
    err = capsys.readouterr().err
    assert "newer dissensus" in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_an_unreadable_revision_is_a_clear_error(tmp_path: Path) -> None:
    path = str(tmp_path / "j.sqlite")
    open_journal(path).close()
    raw(path, "UPDATE dissensus_meta SET value = 'two' WHERE key = 'schema'")
    with pytest.raises(InputError, match="unreadable schema revision 'two'"):
        open_journal(path)
    assert parse_revision(None, "x") == 0
    with pytest.raises(InputError):
        parse_revision("-1", "x")


def test_a_01_journal_with_only_runs_and_events_gains_the_rest(tmp_path: Path) -> None:
    old = _journal_02(tmp_path)
    for table in ("claims", "review_index", "run_locks", "dissensus_meta"):
        raw(old, f"DROP TABLE {table}")
    with open_journal(old) as journal:
        assert journal.schema()["revision"] == CURRENT
        report = journal.verify(RUN_02)
        # The chain is intact; the review index, absent before, was built from the events
        # on opening, which this opening's verify reports.
        assert report.n_events == 55
        assert report.problems
        assert all("rebuilt from the events" in p for p in report.problems)
    with open_journal(old) as journal:
        assert journal.verify(RUN_02).ok


def test_two_openers_upgrade_once(tmp_path: Path) -> None:
    path = _journal_02(tmp_path)
    errors: list[BaseException] = []

    def opener() -> None:
        try:
            open_journal(path).close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=opener) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert raw(path, "SELECT revision FROM dissensus_revisions ORDER BY revision") == [
        (n,) for n in range(1, CURRENT + 1)
    ]


def test_runs_schema_prints_the_revision(tmp_path: Path) -> None:
    path = _journal_02(tmp_path)
    result = CliRunner().invoke(app, ["runs", "schema", "--journal", path, "--json"])
    assert result.exit_code == 0, result.output
    assert f'"revision": {CURRENT}' in result.output
    text = CliRunner().invoke(app, ["runs", "schema", "--journal", path])
    assert f"schema revision {CURRENT} (this version writes {CURRENT})" in text.output


def test_apply_records_each_revision_once() -> None:
    seen: list[str] = []
    applied = apply(1, "sqlite", lambda sql, args: seen.append(sql), at="now", by="test")
    assert [r.number for r in applied] == list(range(2, CURRENT + 1))
    history = [s for s in seen if s.startswith("INSERT INTO dissensus_revisions")]
    # revision 1 (already there, undated) and every applied revision
    assert len(history) == CURRENT


# -- PostgreSQL -----------------------------------------------------------------------


def _copy_rows(source: str, target: str, table: str) -> None:
    db = sqlite3.connect(source)
    try:
        rows = db.execute(f"SELECT * FROM {table}").fetchall()
    finally:
        db.close()
    for row in rows:
        marks = ", ".join("?" for _ in row)
        raw(target, f"INSERT INTO {table} VALUES ({marks})", row)


def test_a_02_postgres_journal_opens_and_upgrades(tmp_path: Path) -> None:
    import psycopg

    source = _journal_02(tmp_path)
    with pg_schema(pg_url()) as url:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute((FIXTURES / "journal-0.2-postgres.sql").read_text())  # type: ignore[arg-type]
        for table in ("runs", "events", "review_index"):
            _copy_rows(source, url, table)
        with open_journal(url) as journal:
            info = journal.schema()
            assert info["revision"] == CURRENT
            assert [row["revision"] for row in info["history"]] == list(range(1, CURRENT + 1))
            assert journal.verify(RUN_02).ok
        raw(url, "UPDATE dissensus_meta SET value = ? WHERE key = 'schema'", (str(CURRENT + 1),))
        with pytest.raises(JournalTooNew):
            open_journal(url)


def test_a_revision_is_applied_by_the_source_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """The version a schema revision row names is the code's (``dissensus version``), not
    an editable install's metadata, which kept the version it was installed at."""
    from importlib import metadata

    import dissensus
    from dissensus.store.migrations import applied_by

    monkeypatch.setattr(metadata, "version", lambda name: "0.0.1")  # a stale install
    assert applied_by() == f"dissensus {dissensus.__version__}"
