"""``$DISSENSUS_PROGRESS`` takes the usual spellings of on and off (``yes`` was read as
off without a word), off silences a terminal's bar too, and any other value stops the
command at its start with one line naming the variable (exit 2); ``--help`` and
``version`` still answer."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_helpers import cli
from dissensus.cli import common
from dissensus.cli.common import progress_enabled, progress_setting
from pipeline_cases import panel, write_jsonl


@pytest.mark.parametrize("value", ["1", "yes", "YES", "true", "On", " on "])
def test_every_spelling_of_on_turns_progress_on(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("DISSENSUS_PROGRESS", value)
    monkeypatch.setattr(common.err_console, "_force_terminal", False)
    assert progress_setting() is True
    assert progress_enabled() and not progress_enabled(False)


@pytest.mark.parametrize("value", ["0", "no", "false", "OFF"])
def test_every_spelling_of_off_turns_progress_off_on_a_terminal_too(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("DISSENSUS_PROGRESS", value)
    monkeypatch.setattr(common.err_console, "_force_terminal", True)
    assert progress_setting() is False and not progress_enabled()


@pytest.mark.parametrize("value", [None, "", "  "])
def test_unset_or_empty_leaves_it_to_the_terminal(
    monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv("DISSENSUS_PROGRESS", raising=False)
    else:
        monkeypatch.setenv("DISSENSUS_PROGRESS", value)
    for terminal in (True, False):
        monkeypatch.setattr(common.err_console, "_force_terminal", terminal)
        assert progress_setting() is None and progress_enabled() is terminal


def test_yes_draws_the_progress_lines(tmp_path: Path) -> None:
    inp = write_jsonl(tmp_path / "in.jsonl", [panel("a", ["1", "2", "1"])])
    done = cli("route", inp, "--json", env={"DISSENSUS_PROGRESS": "yes"})
    assert done.code == 0, done.err
    assert "reading panels: 1/1 (100%)" in done.err


@pytest.mark.parametrize("value", ["maybe", "2", "y\x1b[2J"])
def test_an_unknown_value_stops_the_command_at_its_start(tmp_path: Path, value: str) -> None:
    inp = write_jsonl(tmp_path / "in.jsonl", [panel("a", ["1", "2", "1"])])
    done = cli("route", inp, "--json", env={"DISSENSUS_PROGRESS": value})
    assert done.code == 2
    assert done.out == ""
    [line] = done.err.splitlines()
    assert line.startswith("error: $DISSENSUS_PROGRESS is ")
    assert "1, true, yes, on" in line and "0, false, no, off" in line
    assert "\x1b" not in line


@pytest.mark.parametrize(
    "argv", [["--help"], ["version"], ["serve", "--help"], ["runs", "list", "--help"]]
)
def test_an_unknown_value_lets_help_and_the_version_through(argv: list[str]) -> None:
    done = cli(*argv, env={"DISSENSUS_PROGRESS": "maybe"})
    assert (done.code, done.err) == (0, "")
    assert done.out


def test_an_unknown_value_still_stops_a_command_that_runs(tmp_path: Path) -> None:
    done = cli(
        "runs", "list", "--journal", tmp_path / "j.sqlite", env={"DISSENSUS_PROGRESS": "maybe"}
    )
    assert done.code == 2 and done.err.startswith("error: $DISSENSUS_PROGRESS is 'maybe'")
    assert not (tmp_path / "j.sqlite").exists()
