"""A damaged journal file is a one-line usage error (exit 2) naming the journal.

The journal is a real one (``decide``), with one page overwritten in place: SQLite then
reports "database disk image is malformed" from whichever statement meets the page,
which every reading command turns into
:class:`~dissensus.store.errors.JournalDamaged`.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from cli_helpers import cli
from dissensus.store import Journal, JournalError
from dissensus.store.errors import JournalDamaged
from pipeline_cases import panel, write_jsonl, write_policy

COMMANDS = [
    ["runs", "list"],
    ["runs", "show", "U"],
    ["runs", "export", "U"],
    ["runs", "schema"],
    ["runs", "verify", "U"],
    ["review", "list"],
    ["review", "show", "U.1"],
    ["review", "audits"],
    ["acceptance", "status"],
]
NOT_READING_EVENTS = [["runs", "list"], ["runs", "schema"], ["review", "audits"]]
"""Commands that never read the events table's rows (opening a journal whose review index
was checked at its schema revision reads none either): they answer from the pages they
read."""


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("damaged")
    good = write_jsonl(root / "in.jsonl", [panel(f"c{i}", ["1", "2", "2"]) for i in range(40)])
    path = root / "j.sqlite"
    policy = write_policy(root / "p.yaml")
    res = cli("decide", good, "--policy", policy, "--journal", path, "--run-id", "U")
    assert res.code == 0, res.err
    assert not Path(f"{path}-wal").exists() or Path(f"{path}-wal").stat().st_size == 0
    return path


def _damaged(journal: Path, to: Path) -> Path:
    """A copy of ``journal`` with the root page of its events table overwritten (the
    bytes after the page's 8-byte header become 0xff)."""
    shutil.copy(journal, to)
    db = sqlite3.connect(to)
    try:
        page_size = db.execute("PRAGMA page_size").fetchone()[0]
        (root,) = db.execute(
            "SELECT rootpage FROM sqlite_master WHERE type = 'table' AND name = 'events'"
        ).fetchone()
    finally:
        db.close()
    with open(to, "r+b") as handle:
        handle.seek((root - 1) * page_size + 8)
        handle.write(b"\xff" * (page_size - 16))
    return to


@pytest.mark.parametrize("args", COMMANDS, ids=[" ".join(a) for a in COMMANDS])
def test_every_reader_of_a_damaged_page_exits_2(
    journal: Path, tmp_path: Path, args: list[str]
) -> None:
    broken = _damaged(journal, tmp_path / "broken.sqlite")
    res = cli(*args, "--journal", broken)
    if args in NOT_READING_EVENTS:
        assert res.code == 0 and res.err == "", (res.code, res.err)
        return
    assert res.code == 2, (res.code, res.err)
    assert res.err.startswith(f"error: journal {broken} is damaged"), res.err
    assert "malformed" in res.err and len(res.err.strip().splitlines()) == 1
    assert "Traceback" not in res.err


def test_the_library_raises_journal_damaged(journal: Path, tmp_path: Path) -> None:
    broken = _damaged(journal, tmp_path / "broken.sqlite")
    with pytest.raises(JournalDamaged, match="is damaged") as info, Journal(broken) as store:
        store.verify("U")
    assert isinstance(info.value, JournalError) and info.value.exit_code == 2


EDITED_ROW_COMMANDS = [
    ["runs", "show", "m"],
    ["runs", "export", "m"],
    ["review", "show", "m.1"],
    ["review", "resolve", "m.1", "--decision", "2", "--note", "x", "--reviewer", "r"],
    ["review", "claim", "m.1", "--reviewer", "r"],
]


@pytest.fixture(scope="module")
def edited_journal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A journal whose one event payload (seq 3) was edited to text that is not JSON."""
    root = tmp_path_factory.mktemp("edited")
    good = write_jsonl(root / "in.jsonl", [panel(f"c{i}", ["1", "2", "2"]) for i in range(4)])
    path = root / "j.sqlite"
    res = cli(
        "decide",
        good,
        "--policy",
        write_policy(root / "p.yaml"),
        "--journal",
        path,
        "--run-id",
        "m",
    )
    assert res.code == 0, res.err
    db = sqlite3.connect(path)
    try:
        (key,) = db.execute("SELECT key FROM events WHERE run_id = 'm' AND seq = 3").fetchone()
        db.execute("UPDATE events SET payload = '{not json' WHERE run_id = 'm' AND seq = 3")
        db.commit()
    finally:
        db.close()
    (root / "key").write_text(key)
    return path


@pytest.mark.parametrize(
    "args", EDITED_ROW_COMMANDS, ids=[" ".join(a) for a in EDITED_ROW_COMMANDS]
)
def test_an_edited_payload_is_one_line_naming_the_event(
    edited_journal: Path, tmp_path: Path, args: list[str]
) -> None:
    copy = tmp_path / "j.sqlite"
    shutil.copy(edited_journal, copy)
    key = (edited_journal.parent / "key").read_text()
    res = cli(*args, "--journal", copy)
    assert "Traceback" not in res.err
    assert res.code == 2, (res.code, res.err)
    assert len(res.err.strip().splitlines()) == 1, res.err
    assert res.err.startswith("error: journal damaged: run m, event 3"), res.err
    assert key in res.err and "not valid JSON" in res.err


def test_runs_verify_still_names_the_edited_event(edited_journal: Path, tmp_path: Path) -> None:
    copy = tmp_path / "j.sqlite"
    shutil.copy(edited_journal, copy)
    res = cli("runs", "verify", "m", "--journal", copy)
    assert res.code == 1, res.err
    assert "event 3" in res.out + res.err
