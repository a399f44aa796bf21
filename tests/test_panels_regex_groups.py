"""``answer: regex`` reads the first group of the pattern that took part in the match.

Before, a pattern with alternatives (``Answer: ([A-D])|ANSWER=([A-D])``) read group 1
only: an answer matching the second alternative abstained as "the pattern matched an
empty decision", although it had given one.
"""

from __future__ import annotations

from hypothesis import given, seed, settings
from hypothesis import strategies as st

from dissensus.panels.answers import read_answer
from dissensus.pipeline.policy import PanelSettings

ALTERNATIVES = PanelSettings(answer="regex", pattern=r"Answer: ([A-D])|ANSWER=([A-D])")


def test_the_second_alternative_votes_its_group() -> None:
    got = read_answer("I checked each option, so ANSWER=C", ALTERNATIVES)
    assert got.decision == "c" and got.why is None


def test_the_first_alternative_still_votes() -> None:
    assert read_answer("Answer: B", ALTERNATIVES).decision == "b"


def test_an_empty_group_is_still_an_empty_decision() -> None:
    empty = PanelSettings(answer="regex", pattern=r"Answer:\s*(\w*)")
    got = read_answer("Answer: ", empty)
    assert got.decision is None and got.why == "the pattern matched an empty decision"


def test_an_optional_group_left_out_is_an_empty_decision() -> None:
    optional = PanelSettings(answer="regex", pattern=r"Answer:(?: (\w+))?")
    got = read_answer("Answer:", optional)
    assert got.decision is None and got.why == "the pattern matched an empty decision"


def test_a_pattern_without_groups_votes_the_match() -> None:
    whole = PanelSettings(answer="regex", pattern=r"\b[A-D]\b")
    assert read_answer("it is C here", whole).decision == "c"


@seed(20261205)
@settings(max_examples=80, deadline=None)
@given(
    letter=st.sampled_from("ABCD"),
    second=st.booleans(),
    before=st.text(alphabet="xyz .,", max_size=20),
)
def test_either_alternative_gives_the_same_vote(letter: str, second: bool, before: str) -> None:
    text = f"{before} {'ANSWER=' if second else 'Answer: '}{letter}"
    got = read_answer(text, ALTERNATIVES)
    assert got.decision == letter.lower(), (text, got)
