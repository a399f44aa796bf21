"""Selection rules, bounds and the baseline decision rules on hand-checkable fixtures."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dissensus.baselines.decision_rules import best_average, majority_vote, owner_decides, unanimity
from dissensus.concord.bounds import compute_bound
from dissensus.concord.calibration import calibrate
from dissensus.concord.rules import accepts, bottleneck, select


def test_bound_formula() -> None:
    assert compute_bound(5, 6).model_dump() == {
        "rounds": 6,
        "candidates": 11,
        "evaluations": 55,
        "model_calls": 51,
    }
    assert compute_bound(4, 6).model_dump() == {
        "rounds": 6,
        "candidates": 10,
        "evaluations": 40,
        "model_calls": 42,
    }


def test_rules_rank_differently() -> None:
    cands = [("A", [0.5, 0.5, 0.9]), ("B", [0.5, 0.6, 0.6]), ("C", [0.3, 1.0, 1.0])]
    assert select(cands, "maximin", 0.7) == (
        "A",
        "tie under maximin between A, B; the earliest tabled candidate A is chosen",
    )
    assert select(cands, "leximin", 0.7)[0] == "B"
    assert select(cands, "nash", 0.7)[0] == "C"
    assert select(cands, "utilitarian", 0.2)[0] == "C"
    assert (
        select(cands, "utilitarian", 0.4)[0] == "A"
    )  # C fails the floor; A and B clear it, A sums higher


def test_acceptance_needs_a_strict_improvement_of_at_least_the_margin() -> None:
    assert accepts(0.23, 0.24, 0.01)
    assert accepts(0.28, 0.29, 0.01)  # float noise does not defeat an exact margin
    assert not accepts(0.5, 0.5, 0.0)
    assert not accepts(0.5, 0.505, 0.01)


def test_bottleneck_tie_goes_to_the_first_listed() -> None:
    agent, note = bottleneck({"b": 0.2, "a": 0.2, "c": 0.5}, ["b", "a", "c"])
    assert agent == "b" and note is not None and "b, a" in note


@given(st.floats(-1e6, 1e6), st.floats(-1e6, 1e6), st.floats(0, 1))
def test_calibration_maps_anchors_to_0_and_1(rej: float, ideal: float, u: float) -> None:
    if abs(ideal - rej) < 1e-3:
        return
    assert calibrate(rej, rej, ideal) == 0.0
    assert calibrate(ideal, rej, ideal) == 1.0
    assert abs(calibrate(rej + u * (ideal - rej), rej, ideal) - u) < 1e-6


def test_baselines_on_a_hand_fixture() -> None:
    agents = ["x", "y", "z"]
    m = {
        "P": {"x": 1.0, "y": 0.1, "z": 0.9},
        "Q": {"x": 0.6, "y": 0.7, "z": 0.2},
        "R": {"x": 0.2, "y": 0.9, "z": 0.8},
    }
    ids = ["P", "Q", "R"]
    assert best_average(ids, m, agents, 0.7).selected == "P"
    mv = majority_vote(ids, m, agents, 0.7)
    assert mv.selected == "P" and mv.note is None  # x and z vote P, y votes R
    own = owner_decides("y", "Q", m, agents, 0.7)
    assert own.worst_off == 0.2 and own.below_floor == ["x", "z"]
    assert unanimity(ids, m, agents, 0.7).result.startswith("deadlock")
