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


CONFIDENCE = PanelSettings(answer="regex", pattern=r"Answer:\s*([A-D])?\s*(\d+)%")


def test_a_later_group_of_the_same_alternative_never_votes() -> None:
    got = read_answer("Not sure which letter. Answer: 80%", CONFIDENCE)
    assert got.decision is None and got.why == "the pattern matched an empty decision"
    assert read_answer("Answer: B 80%", CONFIDENCE).decision == "b"


def test_a_named_decision_group_is_the_decision() -> None:
    named = PanelSettings(answer="regex", pattern=r"conf (\d+) ans (?P<decision>[A-D])?")
    assert read_answer("conf 80 ans B", named).decision == "b"
    assert read_answer("conf 80 ans ", named).decision is None


def test_alternatives_after_a_common_prefix_are_still_alternatives() -> None:
    prefixed = PanelSettings(answer="regex", pattern=r"Answer: (x)|Answer: (y)")
    assert read_answer("Answer: y", prefixed).decision == "y"


def test_only_the_first_group_of_the_matching_alternative_votes() -> None:
    pattern = PanelSettings(answer="regex", pattern=r"A: (x)|B: ([A-D])?\s*(\d+)")
    assert read_answer("B: 80", pattern).decision is None
    assert read_answer("B: C 80", pattern).decision == "c"


@seed(20261206)
@settings(max_examples=60, deadline=None)
@given(confidence=st.integers(min_value=0, max_value=100), before=st.text(alphabet="xyz .,"))
def test_a_confidence_figure_is_never_a_vote(confidence: int, before: str) -> None:
    got = read_answer(f"{before} Answer: {confidence}%", CONFIDENCE)
    assert got.decision is None, got


def test_alternatives_inside_a_group_around_the_whole_still_vote() -> None:
    """A group around the whole pattern that captures nothing keeps its alternatives
    top-level, whatever kind it is: scoped flags (the usual way to make a pattern
    case-insensitive), atomic, or repeated; and a pattern's own flags are read with it."""
    for pattern in (
        r"(?i:answer: ([a-d])|answer=([a-d]))",
        r"(?>Answer: ([A-D])|ANSWER=([A-D]))",
        r"(?:Answer: ([A-D])|ANSWER=([A-D])){1}",
        r"(?:Answer: ([A-D])|ANSWER=([A-D]))+",
        r"(?x) Answer: \s ([A-D])  |  ANSWER= ([A-D])",
    ):
        got = read_answer("ANSWER=C", PanelSettings(answer="regex", pattern=pattern))
        assert got.decision == "c", (pattern, got)


def test_a_group_of_a_prefix_alternation_never_votes() -> None:
    """Alternatives beside a group of their own are a prefix: their groups never vote
    ("hint" was a vote). Group 1 is the decision unless a group is named ``decision``."""
    for pattern in (
        r"(?:(Note): |(Hint): )*Answer: ([A-D])",
        r"(?:(Note): |(Hint): )?Answer: ([A-D])",
        r"(?i:(Note): |(Hint): )Answer: ([A-D])",
        r"(?:(Note): |(Hint): )Answer: ([A-D])",
    ):
        got = read_answer("Hint: Answer: B", PanelSettings(answer="regex", pattern=pattern))
        assert got.decision is None, (pattern, got)
        named = pattern.replace("([A-D])", "(?P<decision>[A-D])")
        assert (
            read_answer("Hint: Answer: B", PanelSettings(answer="regex", pattern=named)).decision
            == "b"
        )
