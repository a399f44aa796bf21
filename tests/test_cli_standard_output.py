"""Standard output that cannot be written, for every command that prints to it.

A full standard output (``> /dev/full``, ``ENOSPC``) is one line naming standard output
and the error, exit 1, never a traceback, in human mode as with ``--json``; a ``decide``
or ``runs resume`` run stays resumable and its line names the resume command. A closed
pipe (``EPIPE``) stays a quiet exit 0. Each command runs as a forked child of the test
process writing to the real device or pipe (:func:`fault_runner.forked`), with the
buffered standard output Python opens by default and with the unbuffered one of
``python -u`` / ``$PYTHONUNBUFFERED`` (where every write fails at once, not at a flush).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli_helpers import cli
from fault_runner import forked
from pipeline_cases import panel, write_jsonl, write_policy
from test_guard_cli import _labelled_lines

RUN = "R"


class Files:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.panels = write_jsonl(root / "in.jsonl", [panel(f"p{i}", ["1", "1"]) for i in range(3)])
        self.policy = write_policy(root / "p.yaml")
        self.journal = root / "j.sqlite"
        self.votes = root / "votes.jsonl"
        self.votes.write_text("\n".join(_labelled_lines()) + "\n")
        res = cli("decide", self.panels, "--policy", self.policy, "--journal", self.journal,
                  "--run-id", RUN, "-o", root / "first.jsonl")  # fmt: skip
        assert res.code == 0, res.err


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Files]:
    yield Files(tmp_path_factory.mktemp("stdout"))


def _commands(f: Files, fresh: Path) -> dict[str, list[str | Path]]:
    decide: list[str | Path] = [
        "decide",
        f.panels,
        "--policy",
        f.policy,
        "--journal",
        fresh,
        "--run-id",
        "N",
    ]
    return {
        "decide": decide,
        "decide --json": [*decide, "--json"],
        "runs resume": ["runs", "resume", RUN, "--journal", f.journal],
        "runs resume --json": ["runs", "resume", RUN, "--journal", f.journal, "--json"],
        "route": ["route", f.panels, "--similarity", "tfidf"],
        "route --json": ["route", f.panels, "--similarity", "tfidf", "--json"],
        "vote": ["vote", f.votes],
        "vote --json": ["vote", f.votes, "--json"],
        "runs show": ["runs", "show", RUN, "--journal", f.journal],
        "runs show --json": ["runs", "show", RUN, "--journal", f.journal, "--json"],
        "runs list": ["runs", "list", "--journal", f.journal],
        "runs verify": ["runs", "verify", RUN, "--journal", f.journal],
        "review list": ["review", "list", "--journal", f.journal],
        "version": ["version"],
    }


NAMES = [
    "decide", "decide --json", "runs resume", "runs resume --json", "route", "route --json",
    "vote", "vote --json", "runs show", "runs show --json", "runs list", "runs verify",
    "review list", "version",
]  # fmt: skip


def _run(
    argv: list[str | Path], stdout: int, err_path: Path, unbuffered: bool
) -> tuple[int | None, str]:
    with open(err_path, "w+b") as err:
        code = forked(
            [str(a) for a in argv], stdout=stdout, stderr=err.fileno(), unbuffered=unbuffered
        )
        err.seek(0)
        return code, err.read().decode("utf-8")


@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("name", NAMES)
def test_a_full_standard_output_is_one_line_naming_it(
    files: Files, tmp_path: Path, name: str, unbuffered: bool
) -> None:
    argv = _commands(files, tmp_path / "fresh.sqlite")[name]
    fd = os.open("/dev/full", os.O_WRONLY)
    try:
        code, err = _run(argv, fd, tmp_path / "stderr", unbuffered)
    finally:
        os.close(fd)
    lines = [x for x in err.splitlines() if not x.startswith("rejected ")]
    assert code == 1, err
    assert "Traceback" not in err and len(lines) == 1, err
    assert lines[0].startswith(
        "error: cannot write standard output: No space left on device (ENOSPC)"
    ), err
    if name.startswith("decide"):
        # The run is journalled: the line names the command that writes its records.
        journal = tmp_path / "fresh.sqlite"
        assert f"dissensus runs resume N --journal {journal} --output FILE" in lines[0], err
        out = tmp_path / "out.jsonl"
        assert cli("runs", "resume", "N", "--journal", journal, "--output", out).code == 0
        assert [json.loads(x)["id"] for x in out.read_text().splitlines()] == ["p0", "p1", "p2"]
    elif name.startswith("runs resume"):
        assert f"dissensus runs resume {RUN} --journal {files.journal} --output FILE" in lines[0]


@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("name", NAMES)
def test_a_closed_standard_output_is_a_quiet_exit_0(
    files: Files, tmp_path: Path, name: str, unbuffered: bool
) -> None:
    argv = _commands(files, tmp_path / "fresh.sqlite")[name]
    r, w = os.pipe()
    os.close(r)  # the reader is gone before the first write: every write is EPIPE
    try:
        code, err = _run(argv, w, tmp_path / "stderr", unbuffered)
    finally:
        os.close(w)
    assert [x for x in err.splitlines() if not x.startswith("rejected ")] == [], err
    assert code == 0, err
