"""The guard's entry points refuse an argument of the wrong kind with the project's own
error naming it (``ConfigError`` for the settings of a call, ``InputError`` for the cases),
never an ``AttributeError``/``TypeError`` from inside."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from dissensus.errors import ConfigError, InputError
from dissensus.guard import fit_reliability, guard_case, guard_cases, guard_votes
from dissensus.guard.decision import GuardThresholds
from dissensus.guard.reliability import ReliabilitySettings
from dissensus.types import Vote, VoteCase


def _vote(agent: str, answer: str = "yes", source: str = "parametric") -> Vote:
    return Vote(
        agent=agent, answer=answer, evidence_source=source, evidence_present=source != "parametric"
    )


VOTES = [_vote("a"), _vote("b", "no", "doc1"), _vote("c", "yes", "doc2")]
CASE = VoteCase(id="q1", votes=VOTES, gold="yes")

BAD_CALLS: dict[str, tuple[dict[str, Any], str, str]] = {
    # name: (keyword arguments of guard_votes, field, message part)
    "calibration dict": ({"calibration": {"x": 1}}, "calibration", "got dict"),
    "calibration str": ({"calibration": "cal"}, "calibration", "expected a ReliabilityFit"),
    "settings dict": ({"settings": {"min_sources": 3}}, "settings", "expected GuardThresholds"),
    "beta str": ({"beta": "x"}, "beta", "beta must be a finite number >= 0, got str"),
    "beta None": ({"beta": None}, "beta", "got NoneType"),
    "beta bool": ({"beta": True}, "beta", "got bool"),
    "verifier int": ({"verifier": 5}, "verifier", "expected a string, got int"),
    "case_id int": ({"case_id": 5}, "case_id", "expected a string, got int"),
}


@pytest.mark.parametrize("name", sorted(BAD_CALLS))
def test_guard_votes_names_the_argument_of_the_wrong_kind(name: str) -> None:
    kwargs, field, message = BAD_CALLS[name]
    with pytest.raises(ConfigError) as info:
        guard_votes(VOTES, **kwargs)
    assert info.value.field == field
    assert message in str(info.value)


@pytest.mark.parametrize("beta", [0, 2, 1.5, np.float64(1.5), np.int64(1), np.float32(0.5)])
def test_real_betas_of_any_numeric_type_still_decide(beta: Any) -> None:
    decision = guard_votes(VOTES, beta=beta, case_id="q1", verifier="a")
    assert decision.id == "q1" and decision.answer in {"yes", "no"}


def test_guard_case_and_guard_cases_refuse_what_is_not_a_case() -> None:
    for bad in (None, {"id": "q", "votes": []}, "q1"):
        with pytest.raises(InputError, match="case must be a VoteCase") as info:
            guard_case(bad)  # type: ignore[arg-type]
        assert info.value.field == "case"
    for bad in (None, 5, "q1"):
        with pytest.raises(InputError, match="cases must be an iterable of VoteCase") as info:
            guard_cases(bad)  # type: ignore[arg-type]
        assert info.value.field == "cases"
    with pytest.raises(InputError, match=r"cases\.1 is a dict, not a VoteCase") as info:
        guard_cases([CASE, {"id": "q2"}])  # type: ignore[list-item]
    assert info.value.field == "cases.1"
    assert [d.id for d in guard_cases(iter([CASE, CASE]))] == ["q1", "q1"]


def test_fit_reliability_refuses_what_is_not_cases() -> None:
    for bad in (None, 5, "xx", b"xx"):
        with pytest.raises(InputError, match="cases must be an iterable of VoteCase") as info:
            fit_reliability(bad)  # type: ignore[arg-type]
        assert info.value.field == "cases"
    with pytest.raises(InputError, match=r"cases\.0 is a dict, not a VoteCase") as info:
        fit_reliability([{"id": "q", "gold": "yes", "votes": []}])  # type: ignore[list-item]
    assert info.value.field == "cases.0"
    with pytest.raises(ConfigError, match="expected ReliabilitySettings, got dict") as info:
        fit_reliability([CASE], {"smoothing": 2})  # type: ignore[arg-type]
    assert info.value.field == "settings"


def test_good_arguments_still_fit_and_decide() -> None:
    fit = fit_reliability(iter([CASE] * 3), ReliabilitySettings())
    decision = guard_votes(VOTES, fit, settings=GuardThresholds(), case_id="q1")
    assert fit.cases == 3 and decision.id == "q1"
