"""A reviewer name holds no character that shows as nothing: not only controls and
format characters, but every default-ignorable character (a Hangul filler, a combining
grapheme joiner, a variation selector) and the line and paragraph separators.

Before, ``alice`` + U+3164 or ``al`` + U+034F + ``ice`` was taken: it looked like
``alice`` on every screen, and claimed and resolved cases as someone else.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from cli_helpers import cli
from dissensus.errors import InputError
from dissensus.pipeline.review import (
    REVIEWER_ENV,
    find_item,
    resolve,
    reviewer_name,
    reviewer_name_problem,
)
from dissensus.store.journal import open_journal
from pipeline_cases import panel

HIDDEN = [
    "\u3164",  # Hangul filler (Lo, default ignorable)
    "\u115f",  # Hangul choseong filler
    "\u1160",  # Hangul jungseong filler
    "\uffa0",  # halfwidth Hangul filler
    "\u034f",  # combining grapheme joiner (Mn)
    "\ufe00",  # variation selector-1
    "\ufe0f",  # emoji presentation selector
    "\U000e0100",  # variation selector-17
    "\u17b4",  # Khmer inherent vowel
    "\u2028",  # line separator (Zl)
    "\u2029",  # paragraph separator (Zp)
    "\u200b",  # zero-width space (Cf), refused before too
]


@seed(20261205)
@settings(max_examples=60, deadline=None)
@given(
    hidden=st.sampled_from(HIDDEN),
    left=st.text(alphabet="abcdefgh", min_size=1, max_size=5),
    right=st.text(alphabet="abcdefgh", min_size=1, max_size=5),
)
def test_a_name_with_a_character_that_shows_as_nothing_is_refused(
    hidden: str, left: str, right: str
) -> None:
    name = left + hidden + right
    assert reviewer_name_problem(name, "the name") is not None
    with pytest.raises(InputError, match="--reviewer may not hold control or invisible"):
        reviewer_name(name, {}, lambda: "login")
    with pytest.raises(InputError, match=f"{REVIEWER_ENV} may not hold control or invisible"):
        reviewer_name(None, {REVIEWER_ENV: name}, lambda: "login")
    assert reviewer_name(left + right, {}, lambda: "login") == left + right


def test_visible_names_of_every_script_stay_allowed() -> None:
    for name in ("alice", "Zoë", "김민지", "محمد", "José María", "李 雷", "o'brien-2"):
        assert reviewer_name_problem(name, "the name") is None, name


@pytest.mark.parametrize("hidden", ["\u3164", "\u034f", "\u2028"])
def test_the_cli_and_the_library_refuse_such_a_reviewer_and_journal_nothing(
    tmp_path: Path, hidden: str
) -> None:
    journal = str(tmp_path / "j.sqlite")
    panels = tmp_path / "in.jsonl"
    panels.write_text(json.dumps(panel("p0", ["1", "2", "1"])) + "\n", encoding="utf-8")
    res = cli("decide", panels, "--journal", journal, "--run-id", "r1", "--json")
    assert res.code == 0, res.err
    rid = json.loads(res.out.splitlines()[0])["review_id"]
    name = "al" + hidden + "ice"
    for args in (
        ("review", "claim", rid, "--reviewer", name),
        ("review", "resolve", rid, "--decision", "1", "--note", "n", "--reviewer", name),
    ):
        res = cli(*args, "--journal", journal)
        assert res.code == 2, (args, res.out, res.err)
        assert "may not hold control or invisible" in res.err
    with open_journal(journal) as store:
        with pytest.raises(InputError, match="the reviewer may not hold"):
            resolve(store, rid, decision="1", note="n", reviewer=name)
        assert find_item(store, rid).resolution is None
        assert store.current_claim(rid) is None
