"""Output files: written through a temporary file and renamed, except devices and pipes.

Renaming over ``/dev/null`` as root would replace the device with a regular file, so a
path that exists and is neither a regular file nor a directory is written in place. A
named pipe stands in for the device here (the suite must never touch ``/dev/null``).
"""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest

from cli_helpers import cli
from dissensus.cli.common import atomic_output, check_output_path


def _drain(path: Path, into: list[str]) -> threading.Thread:
    def read() -> None:
        with open(path, encoding="utf-8") as fh:
            into.append(fh.read())

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def test_a_regular_file_is_replaced_whole(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text("old\n")
    with atomic_output(str(out)) as handle:
        handle.write("new\n")
        assert out.read_text() == "old\n"  # not visible until the end
    assert out.read_text() == "new\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]


def test_a_named_pipe_is_written_in_place_and_stays_a_pipe(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    check_output_path(str(fifo), option="--out")  # accepted
    got: list[str] = []
    reader = _drain(fifo, got)
    with atomic_output(str(fifo)) as handle:
        handle.write("through the pipe\n")
    reader.join(timeout=10)
    assert got == ["through the pipe\n"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["pipe"]  # no temporary file left


def test_route_out_to_a_named_pipe(tmp_path: Path) -> None:
    panels = tmp_path / "p.jsonl"
    outputs = [{"agent": a, "decision": "A", "reasoning": "same words"} for a in ("x", "y")]
    panels.write_text(json.dumps({"id": "c1", "outputs": outputs}) + "\n")
    fifo = tmp_path / "records"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = _drain(fifo, got)
    res = cli("route", panels, "--similarity", "tfidf", "--json", "--out", fifo)
    reader.join(timeout=10)
    assert res.code == 0, res.err
    assert json.loads(got[0].splitlines()[0])["id"] == "c1"
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_directory_is_still_refused(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="is a directory"):
        check_output_path(str(tmp_path), option="--out")
