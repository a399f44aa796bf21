"""A structured answer's decision given as a JSON number: ``1.0`` is the number 1.

Before, ``{"decision": 1.0}`` was read as the text ``"1.0"``: beside the options
``["1", "2"]`` it abstained ("not one of the options"), and without options a member
writing ``7`` and one writing ``7.0`` were a split of two decisions.
"""

from __future__ import annotations

import json

from hypothesis import given, seed, settings
from hypothesis import strategies as st

from dissensus.panels.answers import read_answer
from dissensus.pipeline.policy import PanelSettings
from dissensus.types import AgentOutput


def _said(decision: object) -> str:
    return json.dumps({"decision": decision, "reasoning": "counted twice"})


def test_a_whole_float_matches_its_option() -> None:
    options = PanelSettings(answer="structured", options=["1", "2"])
    got = read_answer(_said(1.0), options)
    assert got.decision == "1" and got.why is None


def test_without_options_7_and_7_0_are_one_decision() -> None:
    free = PanelSettings(answer="structured")
    assert read_answer(_said(7), free).decision == read_answer(_said(7.0), free).decision == "7"


def test_a_fraction_stays_a_fraction() -> None:
    free = PanelSettings(answer="structured")
    assert read_answer(_said(0.5), free).decision == "0.5"
    assert read_answer(_said(1e300), free).decision == str(int(1e300)) == _cli_reads(1e300)


def test_a_boolean_is_still_no_decision() -> None:
    options = PanelSettings(answer="structured", options=["1", "0"])
    assert read_answer(_said(True), options).decision is None


@seed(20261205)
@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=-(2**40), max_value=2**40))
def test_an_integer_and_its_float_are_one_vote(n: int) -> None:
    free = PanelSettings(answer="structured")
    assert read_answer(_said(n), free).decision == read_answer(_said(float(n)), free).decision


def _cli_reads(decision: object) -> str | None:
    """The decision ``dissensus decide`` and library ``decide`` read from a panel line."""
    line = json.dumps({"agent": "a", "decision": decision, "reasoning": "r"})
    return AgentOutput.model_validate_json(line).decision


def test_a_large_whole_float_is_one_vote_with_its_integer() -> None:
    free = PanelSettings(answer="structured")
    votes = [read_answer(_said(v), free).decision for v in (10**16, 10**16, 1e16)]
    assert votes == ["10000000000000000"] * 3 == [_cli_reads(1e16)] * 3
    assert read_answer(_said(9007199254740993.0), free).decision == "9007199254740992"


def test_a_boolean_reads_as_the_cli_reads_it() -> None:
    free = PanelSettings(answer="structured")
    assert read_answer(_said(True), free).decision == "true" == _cli_reads(True)


@seed(20261207)
@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.booleans(),
        st.integers(min_value=-(10**30), max_value=10**30),
        st.floats(allow_nan=False, allow_infinity=False),
    )
)
def test_the_door_reads_a_json_number_or_boolean_as_the_cli_does(value: object) -> None:
    free = PanelSettings(answer="structured")
    assert read_answer(_said(value), free).decision == _cli_reads(value)
