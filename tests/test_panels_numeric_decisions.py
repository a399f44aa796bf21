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
    assert read_answer(_said(1e300), free).decision == "1e+300"


def test_a_boolean_is_still_no_decision() -> None:
    options = PanelSettings(answer="structured", options=["1", "0"])
    assert read_answer(_said(True), options).decision is None


@seed(20261205)
@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=-(2**40), max_value=2**40))
def test_an_integer_and_its_float_are_one_vote(n: int) -> None:
    free = PanelSettings(answer="structured")
    assert read_answer(_said(n), free).decision == read_answer(_said(float(n)), free).decision
