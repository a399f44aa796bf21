"""The commands ``decide`` prints for the user to copy name the journal as the shell
needs it: ``--journal`` with the path shell-quoted (a path with spaces, ``$`` or ``;``),
or nothing when a bare command opens that journal anyway (``$DISSENSUS_JOURNAL``)."""

from __future__ import annotations

import shlex
from pathlib import Path

from cli_helpers import cli
from pipeline_cases import panel, write_jsonl


def _escalating(tmp_path: Path) -> Path:
    rows = [panel(f"p{i}", ["1", "2"], reasoning=["yes, one", "no, two"]) for i in range(3)]
    return write_jsonl(tmp_path / "in.jsonl", rows)


def _review_lines(out: str) -> list[str]:
    lines = out.splitlines()
    at = lines.index("review them:")
    return [line.strip() for line in lines[at + 1 : at + 3]]


def test_the_review_commands_decide_prints_can_be_copied(tmp_path: Path) -> None:
    inp = _escalating(tmp_path)
    odd = tmp_path / "sp dir"
    odd.mkdir()
    journal = odd / "j $x;.sqlite"
    res = cli("decide", inp, "--journal", journal, "--similarity", "tfidf", "--run-id", "r")
    assert res.code == 0, res.err
    listed, shown_one = _review_lines(res.out)
    assert shlex.split(listed)[1:] == ["review", "list", "--journal", str(journal)]
    assert shlex.split(shown_one)[1:] == ["review", "show", "r.1", "--journal", str(journal)]
    again = cli(*shlex.split(listed)[1:])
    assert again.code == 0 and "r.1" in again.out, again.err


def test_a_bare_command_when_the_environment_names_the_journal(tmp_path: Path) -> None:
    inp = _escalating(tmp_path)
    journal = tmp_path / "env.sqlite"
    env = {"DISSENSUS_JOURNAL": str(journal)}
    res = cli("decide", inp, "--similarity", "tfidf", "--run-id", "r", env=env)
    assert res.code == 0, res.err
    listed, shown_one = _review_lines(res.out)
    assert shlex.split(listed)[1:] == ["review", "list"]
    assert shlex.split(shown_one)[1:] == ["review", "show", "r.1"]


def test_review_show_tells_a_decision_from_its_twin_with_a_trailing_space(tmp_path: Path) -> None:
    """``yes`` and ``yes `` printed alike ("options: yes, yes "; both agents "yes" in the
    positions): the trailing space is printed escaped, as the review page shows it."""
    row = panel("twins", ["yes", "yes ", "yes", "yes "], reasoning=["a", "b", "c", "d"])
    inp = write_jsonl(tmp_path / "in.jsonl", [row])
    journal = tmp_path / "j.sqlite"
    res = cli("decide", inp, "--journal", journal, "--similarity", "tfidf", "--run-id", "r")
    assert res.code == 0 and "review r.1" in res.out, res.out + res.err
    show = cli("review", "show", "r.1", "--journal", journal)
    assert show.code == 0, show.err
    assert ", yes, yes\\x20 " in show.out, show.out
    assert sum(" yes\\x20 " in line for line in show.out.splitlines() if "│" in line) == 2
