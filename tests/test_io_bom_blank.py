"""A UTF-8 byte order mark alone on the first line is a blank line, skipped.

A BOM before the first line is skipped and blank lines are skipped (cli.md, "Input
lines"); a file or standard input holding only a BOM (or a BOM, then a blank line) used
to be rejected as ``field '<json>': invalid JSON`` at line 1.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli_helpers import cli, run_cli
from dissensus.io.jsonl import Reject, blank_line, parse_line, read_numbered_models
from dissensus.io.views import read_numbered_panel_views
from dissensus.types import Panel
from pipeline_cases import panel, write_policy

BOM = "\ufeff"
_SPACE = st.text(alphabet=" \t\r\n\x0b\x0c\u00a0\u2003", max_size=6)


@settings(max_examples=200, derandomize=True)
@given(before=_SPACE, lines=st.lists(_SPACE.map(lambda s: s + "\n"), max_size=4))
def test_a_bom_then_white_space_is_blank_on_every_reader(before: str, lines: list[str]) -> None:
    text = [BOM + before + "\n", *lines]
    assert blank_line(text[0], 1)
    assert list(read_numbered_models(Panel, text, file="f")) == []
    assert list(read_numbered_panel_views(text, file="f")) == []


def test_a_bom_past_the_first_line_is_not_skipped() -> None:
    assert not blank_line(BOM + "\n", 2)
    assert not blank_line(BOM + BOM + "\n", 1)


@pytest.mark.parametrize("data", [b"\xef\xbb\xbf", b"\xef\xbb\xbf\n", b"\xef\xbb\xbf\n\n"])
@pytest.mark.parametrize("source", ["file", "stdin"])
def test_route_and_decide_take_a_file_of_only_a_bom_as_empty(
    tmp_path: Path, data: bytes, source: str
) -> None:
    path = tmp_path / "b.jsonl"
    path.write_bytes(data)
    arg = str(path) if source == "file" else "-"
    stdin = data if source == "stdin" else None
    routed = cli("route", arg, "--similarity", "tfidf", "--json", stdin=stdin)
    assert (routed.code, routed.out, routed.err) == (0, "", "")
    pol = write_policy(tmp_path / "p.yaml")
    j = tmp_path / "j.sqlite"
    decided = cli("decide", arg, "--policy", pol, "--journal", j, "--json", "--run-id", "R",
                  stdin=stdin)  # fmt: skip
    assert (decided.code, decided.out) == (0, ""), decided.err
    assert "rejected" not in decided.err


def test_a_bom_then_a_blank_line_then_a_panel_reads_the_panel_at_line_three(
    tmp_path: Path,
) -> None:
    path = tmp_path / "b.jsonl"
    path.write_bytes(b"\xef\xbb\xbf\n\n" + json.dumps(panel("p", ["1", "2"])).encode() + b"\n")
    routed = cli("route", path, "--similarity", "tfidf", "--json")
    assert routed.code == 0, routed.err
    assert [json.loads(x)["id"] for x in routed.out.splitlines()] == ["p"]


def test_a_bom_beginning_a_later_line_is_rejected_saying_so(tmp_path: Path) -> None:
    """Two files joined with cat, each saved with a byte order mark: the second one's
    first line was rejected with the parser's advice, 'Unexpected UTF-8 BOM (decode
    using utf-8-sig)'."""
    one = json.dumps(panel("a", ["1", "1"]))
    two = json.dumps(panel("b", ["1", "2"]))
    joined = tmp_path / "joined.jsonl"
    joined.write_text(BOM + one + "\n" + BOM + two + "\n", encoding="utf-8")
    item = parse_line(Panel, BOM + two + "\n", file="f", line=2)
    assert isinstance(item, Reject)
    assert item.field == "<json>"
    assert "begins with a byte order mark (U+FEFF)" in item.message
    assert "utf-8-sig" not in item.message
    proc = run_cli("route", str(joined), "--similarity", "tfidf", "--json")
    assert proc.returncode == 3
    assert [json.loads(line)["id"] for line in proc.stdout.splitlines()] == ["a"]
    assert proc.stderr == (
        f"rejected {joined}:2: field '<json>': invalid JSON: the line begins with a byte "
        "order mark (U+FEFF), skipped only before the first line (files joined with cat? "
        "remove the mark)\n"
    )
