"""A reject can always be written: the start of an overlong line that holds bytes that
are not UTF-8 was kept as lone surrogates, and writing it (``--rejects``, a journal)
was a traceback, or 'an argument is not valid UTF-8'."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from cli_helpers import run_cli
from dissensus.io.jsonl import Reject, parse_line, write_jsonl_line
from dissensus.io.limits import MAX_LINE_CHARS
from dissensus.types import Panel

GOOD = json.dumps(
    {
        "id": "s1",
        "outputs": [
            {"agent": "a", "decision": "1", "reasoning": "r"},
            {"agent": "b", "decision": "1", "reasoning": "r"},
        ],
    }
)


def _overlong_not_utf8(path: Path) -> None:
    with path.open("wb") as out:
        out.write(b'{"id": "\xff\xfe", "x": "' + b"a" * (MAX_LINE_CHARS + 10) + b'"}\n')
        out.write(GOOD.encode() + b"\n")


def test_an_overlong_line_of_bytes_not_utf8_is_a_reject_that_can_be_written() -> None:
    raw = '{"id": "\udcff\udcfe", "x": "' + "a" * (MAX_LINE_CHARS + 10) + '"}\n'
    item = parse_line(Panel, raw, file="f", line=1)
    assert isinstance(item, Reject) and item.field == "<line>"
    assert item.raw.startswith('{"id": "\ufffd\ufffd", "x": "aaa')
    out = io.StringIO()
    write_jsonl_line(out, item)
    assert json.loads(out.getvalue())["raw"] == item.raw


def test_a_reject_keeps_its_text_as_valid_unicode() -> None:
    assert Reject(file="f", line=1, field="x", message="m", raw="a\udcffb").raw == "a\ufffdb"
    assert Reject(file="f", line=1, field="x", message="m", raw="a\ud800b").raw == "a?b"
    assert (
        Reject(file="f", line=1, field="x", message="m", raw="a\U0001f600b").raw == "a\U0001f600b"
    )


@pytest.mark.parametrize("command", ["route", "decide"])
def test_route_and_decide_write_it_to_rejects(tmp_path: Path, command: str) -> None:
    source = tmp_path / "p.jsonl"
    _overlong_not_utf8(source)
    rejects = tmp_path / "rejects.jsonl"
    extra = ["--journal", str(tmp_path / "j.sqlite")] if command == "decide" else []
    proc = run_cli(
        command, str(source), "--similarity", "tfidf", "--json", "--rejects", str(rejects), *extra
    )
    assert "Traceback" not in proc.stderr and "not valid UTF-8" not in proc.stderr
    assert proc.returncode == 3, proc.stderr
    assert f"rejected {source}:1: field '<line>'" in proc.stderr
    (reject,) = [json.loads(line) for line in rejects.read_text().splitlines()]
    assert reject["field"] == "<line>" and reject["raw"].startswith('{"id": "\ufffd\ufffd"')
    assert [json.loads(line)["id"] for line in proc.stdout.splitlines()] == ["s1"]
