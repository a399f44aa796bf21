"""A journal row edited into JSON of another shape (``{}`` where a case record was, a
review item without its fields) is damage like a payload that is not JSON: every reading
command says so in one line naming the run and the event (exit 2), or reads past it;
never a traceback. ``runs verify`` names the event (exit 1)."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from cli_helpers import cli
from pipeline_cases import write_jsonl, write_policy
from serve_helpers import escalating

READERS = (
    ("runs", "show", "R"),
    ("runs", "show", "R", "--json"),
    ("runs", "show", "R", "--events", "--json"),
    ("runs", "export", "R"),
    ("runs", "list"),
    ("review", "list", "--all"),
    ("review", "list", "--all", "--json"),
    ("review", "show", "R.2"),
    ("review", "show", "R.2", "--json"),
    ("review", "audits"),
    ("acceptance", "status"),
)


@pytest.fixture(scope="module")
def decided(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of three escalated panels, the second resolved by a human."""
    tmp = tmp_path_factory.mktemp("shapes")
    policy = write_policy(tmp / "policy.yaml")
    panels = write_jsonl(tmp / "panels.jsonl", [escalating(f"p{i}") for i in range(3)])
    journal = tmp / "journal.sqlite"
    assert (
        cli("decide", panels, "--policy", policy, "--journal", journal, "--run-id", "R").code == 0
    )
    resolved = cli(
        "review", "resolve", "R.2", "--decision", "2", "--note", "checked",
        "--reviewer", "kim", "--journal", journal,
    )  # fmt: skip
    assert resolved.code == 0, resolved.err
    return journal


@pytest.mark.parametrize("payload", ["{}", '{"line": "x"}', "[]"], ids=["empty", "wrong", "list"])
@pytest.mark.parametrize(
    "key", ["case/2/record", "case/2/review", "case/2/resolved", "review/resolved/R.2"]
)
def test_a_payload_of_another_shape_is_one_line_never_a_traceback(
    decided: Path, tmp_path: Path, key: str, payload: str
) -> None:
    journal = tmp_path / "j.sqlite"
    shutil.copy(decided, journal)
    with sqlite3.connect(journal) as db:
        keys = [row[0] for row in db.execute("SELECT key FROM events WHERE run_id = 'R'")]
        assert key in keys or key.startswith("review/resolved"), keys
        db.execute(
            "UPDATE events SET payload = ? WHERE run_id = 'R' AND (key = ? OR (type = ? AND ? LIKE 'review/resolved/%'))",
            (payload, key, "review.resolved", key),
        )
        assert db.total_changes == 1
    for argv in READERS:
        got = cli(*argv, "--journal", journal)
        assert "Traceback" not in got.err and "ValidationError" not in got.err, (argv, got.err)
        assert got.code in (0, 1, 2), (argv, got.code, got.err)
        if got.code == 2:
            (line,) = got.err.strip().splitlines()
            assert "journal damaged: run R, event" in line and "runs verify" in line, (argv, line)
    verify = cli("runs", "verify", "R", "--journal", journal)
    assert verify.code == 1 and "content does not match its hash" in verify.err, verify.err
