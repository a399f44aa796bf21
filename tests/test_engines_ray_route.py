"""``route --engine ray`` writes the records of a local run: an id holding a character
that ``str.splitlines`` splits at (U+2028, U+0085, ``\\x1c``) stays in its one record, and
an input named by a relative path is read by the workers, whose working directory is
not the driver's (a cluster's is where it was started).

Starts a local Ray instance: run with ``DISSENSUS_TEST_RAY=1`` (``make test-ray``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from dissensus.cli import app
from test_engines_ray import PANELS, pytestmark, ray_instance

__all__ = ["pytestmark", "ray_instance"]  # the fixture and the gate

ODD_IDS = ["a\u2028b", "c\x85d", "e\x1cf"]


def _panels(path: Path, ids: list[str]) -> None:
    rows = [json.loads(line) for line in PANELS.read_text(encoding="utf-8").splitlines()[:12]]
    for row, new in zip(rows, ids, strict=False):
        row["id"] = new
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    path.write_text(text, encoding="utf-8")


def _route(*args: str) -> Any:
    return CliRunner().invoke(app, ["route", *args, "--similarity", "tfidf", "--json"])


def test_ray_route_keeps_an_id_with_a_line_separator_in_its_record(
    ray_instance: Any, tmp_path: Path
) -> None:
    path = tmp_path / "in.jsonl"
    _panels(path, ODD_IDS)
    local = _route(str(path))
    assert local.exit_code == 0, local.output
    ray_out = _route(str(path), "--engine", "ray", "--workers", "2")
    assert ray_out.exit_code == 0, ray_out.output
    assert ray_out.stdout == local.stdout
    records = [json.loads(line) for line in ray_out.stdout.split("\n") if line]
    assert len(records) == 12
    assert [r["id"] for r in records[:3]] == ODD_IDS


def test_ray_route_reads_an_input_named_by_a_relative_path(
    ray_instance: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _panels(tmp_path / "in.jsonl", [])
    monkeypatch.chdir(tmp_path)  # the workers started elsewhere (the fixture's directory)
    local = _route("in.jsonl")
    assert local.exit_code == 0, local.output
    ray_out = _route("in.jsonl", "--engine", "ray", "--workers", "2")
    assert ray_out.exit_code == 0, ray_out.output
    assert ray_out.stdout == local.stdout


def test_ray_route_reads_a_named_pipe_and_keeps_the_rejects_in_line(
    ray_instance: Any, tmp_path: Path
) -> None:
    """A named pipe is read once, by the driver, as standard input is: its records and
    rejects are a local run's (it was taken for a missing file after ``--rejects`` had
    been emptied)."""
    import os
    import threading

    path = tmp_path / "in.jsonl"
    _panels(path, [])
    text = path.read_text(encoding="utf-8") + "not json\n"
    path.write_text(text, encoding="utf-8")
    local_rejects = tmp_path / "local.rejects.jsonl"
    local = _route(str(path), "--rejects", str(local_rejects))
    assert local.exit_code == 3, local.output
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    writer = threading.Thread(target=lambda: pipe.write_text(text, encoding="utf-8"), daemon=True)
    writer.start()
    rejects = tmp_path / "rejects.jsonl"
    ray_out = _route(str(pipe), "--engine", "ray", "--workers", "2", "--rejects", str(rejects))
    writer.join(timeout=30)
    assert ray_out.exit_code == 3, ray_out.output
    assert ray_out.stdout == local.stdout
    assert len(ray_out.stdout.splitlines()) == 12
    local_lines = [json.loads(x) for x in local_rejects.read_text(encoding="utf-8").splitlines()]
    ray_lines = [json.loads(x) for x in rejects.read_text(encoding="utf-8").splitlines()]
    assert [r["line"] for r in ray_lines] == [r["line"] for r in local_lines] == [13]
