"""A run whose header row was deleted behind the journal's back, its events left, used to
vanish from every listing while ``runs verify`` said only "no run": now verify names the
run as damaged (exit 1), on SQLite and PostgreSQL alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_helpers import cli
from dissensus.store import Journal
from dissensus.store.errors import UnknownRun
from store_backends import BACKENDS, raw, target_for


@pytest.mark.parametrize("backend", BACKENDS)
def test_events_left_without_their_run_row_fail_verify(backend: str, tmp_path: Path) -> None:
    with target_for(backend, tmp_path) as target:
        with Journal(target) as journal:
            journal.create_run("r1", kind="test", meta={})
            for i in range(3):
                journal.append("r1", "note", {"i": i}, key=f"k{i}")
            journal.create_run("r2", kind="test", meta={})
            assert journal.verify("r1").ok
        raw(target, "DELETE FROM runs WHERE run_id = ?", ["r1"])
        with Journal(target) as journal:
            report = journal.verify("r1")
            assert not report.ok and report.n_events == 3
            assert "no header row" in report.problems[0]
            assert "3 of its events remain" in report.problems[0]
            with pytest.raises(UnknownRun):
                journal.verify("nosuch")  # no run and no events: still an unknown run
            assert journal.verify("r2").ok
        result = cli("runs", "verify", "r1", "--journal", target)
        assert result.code == 1
        assert "r1: FAILED" in result.err and "no header row" in result.err
