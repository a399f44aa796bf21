"""A follower of one run kind reads only the heads of that kind's runs, and the runs' ids
and hashes a follower keeps are those of the heads shared at the next version, not copies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import dissensus.store.follow as follow_module
from dissensus.store import Journal
from dissensus.store import event_types as ev
from dissensus.store.follow import TypeFollower


def _run(journal: Journal, run_id: str, kind: str) -> None:
    journal.create_run(
        run_id,
        kind=kind,
        meta={},
        first=(ev.CASE_RECORD, {"id": run_id, "auto": True, "decision": "1"}, "case/1"),
    )


def _heads_rows(journal: Journal, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list of the number of rows each read of the runs' heads fetched."""
    backend = journal._backend
    real = backend.values
    fetched: list[int] = []

    def values(sql: str, args: Any = ()) -> Any:
        rows = real(sql, args)
        if sql.startswith(follow_module._HEADS):
            fetched.append(len(rows))
        return rows

    monkeypatch.setattr(backend, "values", values)
    return fetched


def test_a_kind_follower_reads_only_its_kind_heads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(tmp_path / "j.sqlite")
    with Journal(path) as journal, Journal(path) as other:
        for i in range(8):
            _run(journal, f"r{i}", "decide" if i % 3 == 0 else "note")
        fetched = _heads_rows(journal, monkeypatch)
        follower = TypeFollower(ev.CASE_RECORD, lambda e: e.run_id, kind="decide")
        assert list(follower.read(journal).kept()) == ["r0", "r3", "r6"]
        assert fetched == [3]
        fetched.clear()
        _run(other, "r8", "note")
        _run(other, "r9", "decide")
        assert list(follower.read(journal).kept()) == ["r0", "r3", "r6", "r9"]
        assert fetched == [4]
        fetched.clear()
        everything = TypeFollower(ev.CASE_RECORD, lambda e: e.run_id)
        assert len(list(everything.read(journal).kept())) == 10
        assert fetched == [10]


def test_unchanged_runs_keep_the_strings_read_before(tmp_path: Path) -> None:
    path = str(tmp_path / "j.sqlite")
    with Journal(path) as journal, Journal(path) as other:
        for i in range(5):
            _run(journal, f"r{i}", "decide")
        follower = TypeFollower(ev.CASE_RECORD, lambda e: e.run_id, kind="decide")
        before = follower.read(journal)
        ids = {row[0]: row[0] for row in before.heads}
        assert all(run_id is ids[run_id] for run_id in before.order)
        assert all(run_id is ids[run_id] for run_id in before.runs)
        _run(other, "r5", "decide")
        after = follower.read(journal)
        assert list(after.kept()) == [f"r{i}" for i in range(6)]
        assert all(a is b for a, b in zip(after.heads, before.heads, strict=False))
        assert all(a is b for a, b in zip(after.order, before.order, strict=False))
        ids = {row[0]: row[0] for row in after.heads}
        assert all(run_id is ids[run_id] for run_id in after.order)
        assert all(run_id is ids[run_id] for run_id in after.runs)
        hashes = {row[0]: row[2] for row in after.heads}
        assert all(run.head_hash is hashes[run_id] for run_id, run in after.runs.items())
