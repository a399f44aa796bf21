"""A value in a table cell is one line: a newline, carriage return or tab in an id, an
answer or an agent is shown escaped, so it can never fake a table row."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from cli_helpers import cli
from dissensus.cli.common import shown, shown_block
from pipeline_cases import panel, write_jsonl
from test_guard_cli import _labelled_lines


def _vote(agent: str, answer: str, source: str) -> dict[str, object]:
    return {"agent": agent, "answer": answer, "evidence_source": source, "evidence_present": True}


def _no_fake_rows(out: str, fake: str) -> None:
    """``fake`` (the text after the newline) never starts a line of its own or a cell."""
    for line in out.splitlines():
        cells = [c.strip() for c in line.replace("┃", "│").split("│")]
        assert fake not in cells, line


def test_vote_table_escapes_newlines_in_the_id_and_refuses_them_in_an_answer() -> None:
    """A case id may hold a newline (shown escaped, never a fake row); an answer is a
    label, one line without control characters, so one holding a newline is rejected
    naming it."""
    case = {"id": "c1\nc2", "votes": [_vote("a", "yes", "w"), _vote("b", "yes", "x")]}
    res = cli("vote", "-", stdin=(json.dumps(case) + "\n").encode())
    assert res.code == 0, res.err
    assert "c1\\nc2" in res.out
    _no_fake_rows(res.out, "c2")
    bad = {"id": "c3", "votes": [_vote("a", "yes\nNOPE", "w"), _vote("b", "yes", "x")]}
    res = cli("vote", "-", stdin=(json.dumps(bad) + "\n").encode())
    assert res.code == 3
    assert "field 'votes.0.answer'" in res.err and "control character U+000A" in res.err
    assert "NOPE" not in res.out


def test_route_table_escapes_newlines_tabs_and_returns_in_the_id(tmp_path: Path) -> None:
    panels = write_jsonl(
        tmp_path / "p.jsonl",
        [panel("p1\nFAKE", ["1", "1"]), panel("p2\r\tx", ["1", "2"])],
    )
    res = cli("route", panels, "--similarity", "tfidf")
    assert res.code == 0, res.err
    assert "p1\\nFAKE" in res.out and "p2\\x0d\\tx" in res.out
    _no_fake_rows(res.out, "FAKE")
    assert "\r" not in res.out and "\t" not in res.out


def test_calibrate_refuses_an_agent_holding_a_newline(tmp_path: Path) -> None:
    """An agent id is one line without control characters: a vote's agent holding a
    newline (which could have faked a row of the agents' table) is rejected naming it."""
    lines = []
    for line in _labelled_lines():
        case = json.loads(line)
        for vote in case["votes"]:
            if vote["agent"] == "a":
                vote["agent"] = "a\nFAKE"
        lines.append(json.dumps(case))
    labelled = tmp_path / "labelled.jsonl"
    labelled.write_text("\n".join(lines) + "\n")
    res = cli("calibrate", labelled)
    assert "field 'votes.0.agent'" in res.err and "control character U+000A" in res.err
    _no_fake_rows(res.out, "FAKE")


@settings(max_examples=200, derandomize=True)
@given(st.text())
def test_shown_is_always_one_line_and_shown_block_keeps_the_lines(text: str) -> None:
    one = shown(text)
    assert "\n" not in one and "\r" not in one and "\t" not in one
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in one)
    block = shown_block(text)
    assert block.count("\n") == text.count("\n") and block.count("\t") == text.count("\t")
    assert "\r" not in block


INVISIBLE = "\u00ad\u200b\u2060\u2061\u2062\u2063\u2064\ufeff"


@settings(max_examples=200, derandomize=True)
@given(st.text(alphabet=st.sampled_from(["a", "b", " ", *INVISIBLE]), min_size=1))
def test_characters_that_show_as_nothing_are_escaped(text: str) -> None:
    """``agent\\u200bb`` printed as ``agentb`` looked like another agent: every character
    that shows as nothing is escaped, and what is printed tells the texts apart."""
    for shown_text in (shown(text), shown_block(text)):
        assert not any(c in INVISIBLE for c in shown_text), shown_text
    assert shown("agent\u200bb") == "agent\\u200bb" != shown("agentb")
    # A joiner is escaped in a line (two names must never look alike, as on a page) and
    # kept in a block of text (scripts and emoji need it).
    assert shown("a\u200db") == "a\\u200db" != shown("ab")
    assert shown_block("a\u200db") == "a\u200db"
    # Lookalikes the page tells apart, the terminal does too.
    for mark in ("\u034f", "\u180e", "\ufe0f", "\U000e0061", "\u200e", "\u061c"):
        assert shown(f"appro{mark}ve") != "approve", mark
