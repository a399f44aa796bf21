"""The resume command a stopped run prints (an interrupt, a deadline, a journal gone
mid-run, a Ray worker that died) names the run's output as the shell reads it: the
path shell-quoted as it is (two spaces, a backslash or a tab shown as a message shows
them named another file, and the resumed run wrote there and said it succeeded),
``--json`` for a run that printed JSON, and never a path a terminal cannot show."""

from __future__ import annotations

import io
import shlex
from contextlib import redirect_stderr
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, seed
from hypothesis import settings as settings_h
from hypothesis import strategies as st

from cli_helpers import cli
from dissensus.cli.common import has_control
from dissensus.cli.decide import output_option, said_resumable
from dissensus.engines.blocks import Block
from dissensus.engines.ray.attempts import _worker_died
from dissensus.store.errors import JournalError
from dissensus.store.journal import Journal
from pipeline_cases import panel, write_jsonl


def _named(line: str) -> list[str]:
    """The words of the resume command at the end of ``line``, as the shell reads them."""
    return shlex.split(line[line.index("dissensus runs resume") :])


@pytest.mark.parametrize(
    "name", ["sp  two.jsonl", "back\\new.jsonl", "it's out.jsonl", "ünï ☃.jsonl", "-dash.jsonl"]
)
def test_the_output_is_named_as_the_shell_reads_it(name: str) -> None:
    words = shlex.split(output_option(name))
    assert words == ["--output", name]


@pytest.mark.parametrize("name", ["tab\tx.jsonl", "new\nline.jsonl", "bell\x07.jsonl"])
def test_an_output_a_terminal_cannot_show_is_to_be_typed(name: str) -> None:
    said = output_option(name)
    assert said.startswith(" --output FILE (type") and name not in said
    assert "\t" not in said and "\n" not in said


@seed(20261206)
@settings_h(max_examples=200, derandomize=True)
@given(st.text(min_size=1, max_size=20))
def test_any_shown_output_reads_back_as_itself(name: str) -> None:
    said = output_option(name)
    if has_control(name):
        assert "FILE" in said and name not in said
    else:
        assert shlex.split(said) == ["--output", name]
    assert output_option(None) == "" and output_option(None, json_out=True) == " --json"


def test_a_deadline_names_the_output_file_whole(tmp_path: Path) -> None:
    inp = write_jsonl(tmp_path / "in.jsonl", [panel(f"p{i}", ["1", "2"]) for i in range(400)])
    out, journal = tmp_path / "sp  two\\x.jsonl", tmp_path / "j.sqlite"
    res = cli("decide", inp, "--similarity", "tfidf", "--deadline", "0.001", "-o", out,
              "--journal", journal, "--run-id", "D")  # fmt: skip
    assert res.code == 1 and "deadline of 0.001 s reached" in res.err, res.err
    line = res.err.strip().splitlines()[-1]
    assert _named(line) == [
        "dissensus", "runs", "resume", "D", "--journal", str(journal), "--output", str(out)
    ]  # fmt: skip


def test_a_deadline_of_a_json_run_names_json(tmp_path: Path) -> None:
    inp = write_jsonl(tmp_path / "in.jsonl", [panel(f"p{i}", ["1", "2"]) for i in range(400)])
    journal = tmp_path / "j.sqlite"
    res = cli("decide", inp, "--similarity", "tfidf", "--deadline", "0.001", "--json",
              "--journal", journal, "--run-id", "D")  # fmt: skip
    assert res.code == 1, res.err
    line = res.err.strip().splitlines()[-1]
    assert _named(line)[-1] == "--json", line


def test_a_journal_lost_mid_run_names_the_output_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real, calls = Journal.append_batch, [0]

    def failing(self: Journal, run_id: str, events: Any) -> Any:
        calls[0] += 1
        if calls[0] == 1:  # the first block's commit (the run's start is journalled before)
            raise JournalError("the database connection was lost")
        return real(self, run_id, events)

    monkeypatch.setattr(Journal, "append_batch", failing)
    inp = write_jsonl(tmp_path / "in.jsonl", [panel(f"p{i}", ["1", "2"]) for i in range(400)])
    out, journal = tmp_path / "sp  two.jsonl", tmp_path / "j.sqlite"
    res = cli("decide", inp, "--similarity", "tfidf", "-o", out,
              "--journal", journal, "--run-id", "J")  # fmt: skip
    assert res.code == 1 and "connection was lost" in res.err, (calls, res.err)
    line = res.err.strip().splitlines()[-1]
    assert _named(line)[-2:] == ["--output", str(out)], line


def test_a_dead_ray_worker_names_the_output_and_json() -> None:
    block = Block(index=0, first_line=1, n_lines=2, path="in.jsonl")
    died = _worker_died("R", "in.jsonl", block, 3, RuntimeError("gone"), "/tmp/a  b.sqlite")
    for output, json_out, tail in [
        ("o  1.jsonl", False, ["--output", "o  1.jsonl"]),
        (None, True, ["--json"]),
    ]:
        err = io.StringIO()
        with redirect_stderr(err):
            assert said_resumable(died, "/tmp/a  b.sqlite", output, json_out) == 1
        words = _named(err.getvalue())
        assert words == ["dissensus", "runs", "resume", "R", "--journal", "/tmp/a  b.sqlite", *tail]


JOURNALS = ["j\nrm -rf x\x1b[2J.sqlite", "tab\tj.sqlite", "bell\x07.sqlite"]


def _typed_not_printed(line: str, journal: Path) -> None:
    """``line`` asks for the journal's path typed, and holds no control character."""
    assert "--journal JOURNAL (type the journal's path" in line, line
    assert str(journal) not in line and not has_control(line), line


@pytest.mark.parametrize("name", JOURNALS)
def test_a_deadline_never_prints_a_journal_path_a_terminal_cannot_show(
    tmp_path: Path, name: str
) -> None:
    """A journal path with a newline or an escape sequence was printed raw in the resume
    command (its newline ended the line, ``ESC[2J`` cleared the screen); it is asked for."""
    inp = write_jsonl(tmp_path / "in.jsonl", [panel(f"p{i}", ["1", "2"]) for i in range(400)])
    journal = tmp_path / name
    res = cli("decide", inp, "--similarity", "tfidf", "--deadline", "0.001", "--json",
              "--journal", journal, "--run-id", "D")  # fmt: skip
    assert res.code == 1 and "deadline of 0.001 s reached" in res.err, res.err
    (line,) = [ln for ln in res.err.splitlines() if "runs resume" in ln]
    _typed_not_printed(line, journal)
    assert line.endswith(" --json"), line


def test_every_resume_line_asks_for_a_journal_path_a_terminal_cannot_show(
    tmp_path: Path,
) -> None:
    """The Ray worker's, the interrupt's, the journal failure's and ``runs resume``'s
    interrupt line name such a journal as the deadline's does."""
    from dissensus.cli.decide import said_interrupted
    from dissensus.cli.runs import said_resume_interrupted

    journal = tmp_path / JOURNALS[0]
    block = Block(index=0, first_line=1, n_lines=2, path="in.jsonl")
    died = _worker_died("R", "in.jsonl", block, 3, RuntimeError("gone"), str(journal))
    err = io.StringIO()
    with redirect_stderr(err):
        said_resumable(died, str(journal), "o.jsonl", False)
        said_resume_interrupted("R", str(journal))

        class Opened:
            path = str(journal)

        said_interrupted(Opened(), "R")  # type: ignore[arg-type]
    lines = err.getvalue().splitlines()
    assert len(lines) == 3, lines
    for line in lines:
        _typed_not_printed(line, journal)
    assert lines[0].endswith(" --output o.jsonl"), lines[0]


def test_a_journal_lost_mid_run_asks_for_a_journal_path_a_terminal_cannot_show(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real, calls = Journal.append_batch, [0]

    def failing(self: Journal, run_id: str, events: Any) -> Any:
        calls[0] += 1
        if calls[0] == 1:
            raise JournalError("the database connection was lost")
        return real(self, run_id, events)

    monkeypatch.setattr(Journal, "append_batch", failing)
    inp = write_jsonl(tmp_path / "in.jsonl", [panel(f"p{i}", ["1", "2"]) for i in range(40)])
    journal = tmp_path / JOURNALS[0]
    res = cli("decide", inp, "--similarity", "tfidf", "--json",
              "--journal", journal, "--run-id", "J")  # fmt: skip
    assert res.code == 1 and "connection was lost" in res.err, (calls, res.err)
    (line,) = [ln for ln in res.err.splitlines() if "runs resume" in ln]
    _typed_not_printed(line, journal)


def test_a_deadline_names_the_rejects_file_and_the_resume_writes_it_whole(tmp_path: Path) -> None:
    """The resume command names ``--rejects FILE`` too: copied as shown, the file ends
    with every rejected line of the run (the resumed run writes it whole); without it,
    the lines rejected after the stop were only said on standard error."""
    lines = [panel(f"p{i}", ["1", "2"]) for i in range(400)]
    inp = write_jsonl(tmp_path / "in.jsonl", lines)
    with inp.open("a") as handle:
        handle.write("not json\n")  # rejected after the deadline stopped the run
    out, rejects, journal = tmp_path / "o.jsonl", tmp_path / "r  j.jsonl", tmp_path / "j.sqlite"
    res = cli("decide", inp, "--similarity", "tfidf", "--deadline", "0.001", "-o", out,
              "--rejects", rejects, "--journal", journal, "--run-id", "D")  # fmt: skip
    assert res.code == 1, res.err
    named = _named(res.err.strip().splitlines()[-1])
    assert named[-4:] == ["--output", str(out), "--rejects", str(rejects)]
    assert rejects.read_text() == ""
    resumed = cli(*named[1:])
    assert resumed.code == 3, resumed.err
    assert rejects.read_text().count("\n") == 1 and out.read_text().count("\n") == 400


@seed(20261206)
@settings_h(max_examples=100, derandomize=True)
@given(st.text(min_size=1, max_size=20), st.text(min_size=1, max_size=20))
def test_any_shown_rejects_file_reads_back_as_itself(output: str, rejects: str) -> None:
    said = output_option(output, rejects=rejects)
    if has_control(output) or has_control(rejects):
        assert "FILE" in said
    else:
        assert shlex.split(said) == ["--output", output, "--rejects", rejects]
    assert output_option(None, rejects="r.jsonl") == " --rejects r.jsonl"


def test_a_run_id_taken_names_the_resume_with_this_commands_output(tmp_path: Path) -> None:
    """``decide --run-id R`` of a run the journal holds names the command that resumes it
    with this command's ``--output`` and ``--rejects``, the paths as they are: the
    command it named resumed into a table, not into the file given."""
    inp = write_jsonl(tmp_path / "in.jsonl", [panel("a", ["1", "2", "1"])])
    journal = tmp_path / "j.sqlite"
    assert cli("decide", inp, "--journal", journal, "--run-id", "R").code == 0
    out, rejects = tmp_path / "o  u.jsonl", tmp_path / "r.jsonl"
    res = cli("decide", inp, "--journal", journal, "--run-id", "R", "-o", out, "--rejects", rejects)
    assert res.code == 2
    [line] = res.err.splitlines()
    assert line.startswith("error: run 'R' already exists in ")
    assert _named(line) == ["dissensus", "runs", "resume", "R", "--journal", str(journal),
                            "--output", str(out), "--rejects", str(rejects)]  # fmt: skip
    assert not out.exists() and not rejects.exists()
