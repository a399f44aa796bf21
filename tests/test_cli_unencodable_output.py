"""Standard output in an encoding other than UTF-8 (``PYTHONIOENCODING=ascii``, a Latin-1
locale) writes a character it cannot hold as its JSON escape: a table is printed and a
``--json`` record stays valid JSON with the same value, never a ``UnicodeEncodeError``."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from dissensus.cli import main

IDS = ["\u00e9t\u00e9", "\u03b8-\U0001f600", "plain"]


def _panels(tmp_path: Path) -> Path:
    rows = [
        {
            "id": pid,
            "outputs": [
                {"agent": "a", "decision": "1", "reasoning": "the logs \u2014 show it"},
                {"agent": "b", "decision": "1", "reasoning": "the logs show it"},
            ],
        }
        for pid in IDS
    ]
    path = tmp_path / "panels.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    return path


def _run(encoding: str, *args: str) -> tuple[int, str]:
    out = io.TextIOWrapper(io.BytesIO(), encoding=encoding, write_through=True)
    err = io.TextIOWrapper(io.BytesIO(), encoding=encoding, write_through=True)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    out.flush()
    data = out.buffer.getvalue()  # type: ignore[attr-defined]
    return code, data.decode(encoding)


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_json_records_on_a_narrow_stdout_stay_valid_json(tmp_path: Path, encoding: str) -> None:
    code, out = _run(encoding, "route", str(_panels(tmp_path)), "--similarity", "tfidf", "--json")
    assert code == 0
    assert [json.loads(line)["id"] for line in out.splitlines()] == IDS


def test_a_table_on_an_ascii_stdout_escapes_what_it_cannot_hold(tmp_path: Path) -> None:
    code, out = _run("ascii", "route", str(_panels(tmp_path)), "--similarity", "tfidf")
    assert code == 0
    assert "\\u03b8_s=0.39" in out and "plain" in out
