"""Commands that show a run's records say when its hash chain does not verify.

``runs show``, ``runs export`` and ``review show`` recompute the run's chain before they
show it (writing nothing) and, when a stored event was altered, warn on stderr naming the
first problem and ``runs verify``; ``--json`` carries ``verified``. An untouched run shows
no warning. Before, each showed an edited record as if it had been written so.
"""

from __future__ import annotations

import json
import shlex
import sqlite3
from pathlib import Path

import pytest

from cli_helpers import cli
from pipeline_cases import panel


def _decided(tmp_path: Path) -> Path:
    panels = tmp_path / "in.jsonl"
    rows = [panel("p1", ["x", "y", "x"]), panel("p2", ["x", "y", "z"])]
    panels.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    journal = tmp_path / "j.sqlite"
    res = cli("decide", panels, "--journal", journal, "--run-id", "r1")
    assert res.code == 0, res.err
    return journal


def _tamper(journal: Path) -> None:
    db = sqlite3.connect(journal)
    with db:
        (seq,) = db.execute(
            "SELECT min(seq) FROM events WHERE run_id = 'r1' AND key LIKE 'case/%'"
        ).fetchone()
        db.execute(
            "UPDATE events SET payload = replace(payload, '\"p1\"', '\"forged\"') "
            "WHERE run_id = 'r1' AND seq = ?",
            (seq,),
        )
    db.close()


COMMANDS = [("runs", "show", "r1"), ("runs", "export", "r1"), ("review", "show", "r1.2")]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_reading_command_warns_when_the_run_was_altered(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    journal = _decided(tmp_path)
    res = cli(*command, "--journal", journal)
    assert res.code == 0, res.err
    assert "does not verify" not in res.err
    _tamper(journal)
    before = journal.read_bytes()
    res = cli(*command, "--journal", journal)
    assert res.code == 0, res.err
    assert "warning: run r1 does not verify (1 problem; first: event " in res.err, res.err
    assert "content does not match its hash" in res.err
    suggested = f"dissensus runs verify r1 --journal {shlex.quote(str(journal))}"
    assert f"`{suggested}` lists every problem" in res.err, res.err
    listed = cli(*shlex.split(suggested)[1:])  # the command as shown finds the run
    assert listed.code == 1, listed.err
    assert "content does not match its hash" in listed.out + listed.err
    assert "does not verify" not in res.out  # the records themselves are still shown
    assert journal.read_bytes() == before  # the check writes nothing


@pytest.mark.parametrize("command", [("runs", "show", "r1"), ("review", "show", "r1.2")])
def test_json_says_whether_the_run_verifies(tmp_path: Path, command: tuple[str, ...]) -> None:
    journal = _decided(tmp_path)
    res = cli(*command, "--journal", journal, "--json")
    assert res.code == 0, res.err
    assert json.loads(res.out)["verified"] is True
    _tamper(journal)
    res = cli(*command, "--journal", journal, "--json")
    assert res.code == 0, res.err
    assert json.loads(res.out)["verified"] is False


def test_an_edited_header_is_shown_escaped(tmp_path: Path) -> None:
    """``runs list`` and ``runs show`` print the runs row's header columns as they print
    every field a writer outside dissensus could have set: escaped, on one line (an
    edited kind with a newline and a right-to-left override was printed raw)."""
    journal = _decided(tmp_path)
    db = sqlite3.connect(journal)
    with db:
        db.execute("UPDATE runs SET kind = ? WHERE run_id = 'r1'", ("de\ncide\u202e",))
    db.close()
    listed = cli("runs", "list", "--journal", journal, env={"COLUMNS": "200"})
    assert listed.code == 0, listed.err
    assert "de\\ncide\\u202e" in listed.out
    assert "\u202e" not in listed.out and "de\ncide" not in listed.out
    show = cli("runs", "show", "r1", "--journal", journal)
    assert "(de\\ncide\\u202e)" in show.out, show.out
    assert "\u202e" not in show.out
    assert "header kind" in show.err  # and the edit does not verify
