"""Standard streams: a file and the same bytes piped in are the same lines (a lone
carriage return ends a line in both); a command started without standard input or output (``<&-``, ``>&-``): Python leaves
``sys.stdin`` / ``sys.stdout`` ``None``, and every command reading ``-`` or printing was
an AttributeError traceback. Now reading it is one line, exit 2 (an input that cannot
be read); writing it one line, exit 1 (as a full disk); no stderr at all (``2>&-``) is
no failure."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline_cases import panel, write_jsonl

REPO = Path(__file__).resolve().parent.parent


def _run(args: list[str], redirect: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    line = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "dissensus", *args])
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run(
        ["bash", "-c", f"{line} {redirect}"],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    "args",
    [
        ["route", "-", "--similarity", "tfidf"],
        ["vote", "-"],
        ["calibrate", "-", "--out", "c.json"],
        ["decide", "-", "--similarity", "tfidf", "--journal", "j.sqlite"],
    ],
    ids=lambda a: a[0],
)
def test_reading_a_closed_standard_input_is_one_line_exit_2(
    args: list[str], tmp_path: Path
) -> None:
    done = _run(args, "<&-", tmp_path)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: ") and "standard input is closed" in line
    assert not (tmp_path / "c.json").exists()


def test_writing_a_closed_standard_output_is_one_line_exit_1(tmp_path: Path) -> None:
    panels = write_jsonl(tmp_path / "p.jsonl", [panel("a", ["1", "1", "2"])])
    done = _run(["route", str(panels), "--similarity", "tfidf", "--json"], ">&-", tmp_path)
    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: ") and "standard output is closed" in line


def test_no_standard_error_is_no_failure(tmp_path: Path) -> None:
    panels = write_jsonl(tmp_path / "p.jsonl", [panel("a", ["1", "1", "2"])])
    done = _run(["route", str(panels), "--similarity", "tfidf", "--json"], "2>&-", tmp_path)
    assert done.returncode == 0 and done.stdout.count("\n") == 1


@pytest.mark.parametrize("command", ["route", "vote"])
def test_a_file_and_the_same_bytes_on_standard_input_are_the_same_lines(
    command: str, tmp_path: Path
) -> None:
    """Lines ended by a lone carriage return: a file is read with universal newlines, and
    standard input now too (it read them as one line, rejected)."""
    import json

    if command == "route":
        rows = [json.dumps(panel(f"p{i}", ["1", "1", "2"])) for i in range(3)]
        extra = ["--similarity", "tfidf"]
    else:
        vote = {"agent": "a", "answer": "x", "evidence_source": "kb", "evidence_present": True}
        rows = [json.dumps({"id": i, "votes": [vote, {**vote, "agent": "b"}]}) for i in range(3)]
        extra = []
    path = tmp_path / "in.jsonl"
    path.write_bytes("\r".join(rows).encode() + b"\r")
    from_file = _run([command, str(path), "--json", *extra], "", tmp_path)
    piped = _run([command, "-", "--json", *extra], f"< {shlex.quote(str(path))}", tmp_path)
    assert from_file.returncode == piped.returncode == 0, piped.stderr
    assert from_file.stdout == piped.stdout and from_file.stdout.count("\n") == 3
