"""Selection rules, bounds and the baseline decision rules on hand-checkable fixtures."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dissensus.baselines.decision_rules import (
    LLMArbiter,
    best_average,
    first_choice_plurality,
    owner_decides,
    unanimity,
)
from dissensus.concord import reference as _ref
from dissensus.concord import rules as _rules
from dissensus.concord import scale as _cal
from dissensus.concord.bounds import compute_bound
from dissensus.concord.rules import accepts, bottleneck, select
from dissensus.concord.scale import rescale
from dissensus.llm.base import ChatResponse
from dissensus.llm.jsonparse import DuplicateKeyError


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
    assert rescale(rej, rej, ideal) == 0.0
    assert rescale(ideal, rej, ideal) == 1.0
    assert abs(rescale(rej + u * (ideal - rej), rej, ideal) - u) < 1e-6


def test_baselines_on_a_hand_fixture() -> None:
    agents = ["x", "y", "z"]
    m = {
        "P": {"x": 1.0, "y": 0.1, "z": 0.9},
        "Q": {"x": 0.6, "y": 0.7, "z": 0.2},
        "R": {"x": 0.2, "y": 0.9, "z": 0.8},
    }
    ids = ["P", "Q", "R"]
    assert best_average(ids, m, agents, 0.7).selected == "P"
    mv = first_choice_plurality(ids, m, agents, 0.7)
    assert mv.selected == "P" and mv.note is None  # x and z vote P, y votes R
    own = owner_decides("y", "Q", m, agents, 0.7)
    assert own.worst_off == 0.2 and own.below_floor == ["x", "z"]
    assert unanimity(ids, m, agents, 0.7).result.startswith("deadlock")


# -- the protocol's rules against the independent reference the verifier uses ---------


_SCORE = st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.7, 0.75, 0.9, 1.0]) | st.floats(0.0, 1.0)


@given(
    st.lists(st.lists(_SCORE, min_size=3, max_size=3), min_size=1, max_size=6),
    st.sampled_from(_rules.RULES),
    st.sampled_from([0.0, 0.5, 0.7, 1.0]),
)
def test_selection_matches_the_reference(
    vectors: list[list[float]], rule: str, floor: float
) -> None:
    candidates = [(f"C{i}", v) for i, v in enumerate(vectors)]
    assert _rules.select(candidates, rule, floor)[0] == _ref.ref_select(candidates, rule, floor)  # type: ignore[arg-type]


@given(
    st.lists(
        st.tuples(st.lists(_SCORE, min_size=3, max_size=3), st.booleans()), min_size=1, max_size=6
    ),
    st.sampled_from(_rules.RULES),
    st.sampled_from([0.0, 0.5, 0.7, 1.0]),
)
def test_selection_with_the_clearing_set_matches_the_reference(
    vectors: list[tuple[list[float], bool]], rule: str, floor: float
) -> None:
    """Given which candidates clear the floor as certification reads it (any set: a
    fault or an unrounded score may keep any candidate out of it), both agree."""
    candidates = [(f"C{i}", v) for i, (v, _) in enumerate(vectors)]
    clears = {f"C{i}" for i, (_, c) in enumerate(vectors) if c}
    got = _rules.select(candidates, rule, floor, clears)[0]  # type: ignore[arg-type]
    assert got == _ref.ref_select(candidates, rule, floor, clears)


@given(_SCORE, _SCORE, st.sampled_from([0.0, 0.01, 0.1, 0.5]))
def test_acceptance_matches_the_reference(lead: float, new: float, margin: float) -> None:
    assert _rules.improvement(lead, new) == _ref.ref_gain(lead, new)
    assert _rules.accepts(lead, new, margin) == _ref.ref_accepts(lead, new, margin)


@given(st.lists(_SCORE, min_size=1, max_size=6), st.sampled_from([0.0, 0.7, 1.0]))
def test_bottleneck_and_floor_match_the_reference(scores: list[float], floor: float) -> None:
    order = [f"a{i}" for i in range(len(scores))]
    by_agent = dict(zip(order, scores, strict=True))
    assert _rules.bottleneck(by_agent, order)[0] == _ref.ref_bottleneck(by_agent, order)
    assert _rules.clears_floor(scores, floor) == _ref.ref_clears_floor(scores, floor)


@given(
    st.floats(-1e6, 1e6),
    st.floats(-1e6, 1e6),
    st.floats(-1e6, 1e6),
)
def test_calibration_matches_the_reference(raw: float, rejected: float, ideal: float) -> None:
    if _cal.check_anchors(rejected, ideal) is not None:
        return
    assert _cal.in_range(raw, rejected, ideal) == _ref.ref_in_range(raw, rejected, ideal)
    assert _cal.rescale(raw, rejected, ideal) == _ref.ref_rescale(raw, rejected, ideal)


def test_a_bug_in_the_rules_is_caught_by_verify(monkeypatch: pytest.MonkeyPatch) -> None:
    """The verifier replays with the reference: a protocol run with a wrong rule fails it."""
    from dissensus.concord import Outcome, TableAgent, negotiate_sync, verify
    from dissensus.concord import protocol as _protocol

    agents = [
        TableAgent("a", {"R": 0, "I": 10, "X": 9, "Y": 6}),
        TableAgent("b", {"R": 0, "I": 10, "X": 2, "Y": 6}),
    ]
    kwargs = {
        "rejected": Outcome(id="R", text="r"),
        "ideal": Outcome(id="I", text="i"),
        "options": [Outcome(id="X", text="x"), Outcome(id="Y", text="y")],
        "floor": 0.9,
        "rounds": 0,
    }
    honest = negotiate_sync(agents, **kwargs)
    assert verify(honest.model_dump(mode="json")).valid

    def worst_first(candidates, rule, floor, clears=None):  # type: ignore[no-untyped-def]
        ranked = sorted(candidates, key=lambda c: min(c[1]))
        return ranked[0][0], None

    monkeypatch.setattr(_protocol, "select", worst_first)
    buggy = negotiate_sync(agents, **kwargs)
    assert buggy.selected is not None and honest.selected is not None
    assert buggy.selected.id != honest.selected.id
    verdict = verify(buggy.model_dump(mode="json"))
    assert not verdict.valid and verdict.violated == "selection"


class _TextOnlyArbiter:
    """A chat client that answers fixed text and validates nothing (``parsed`` None)."""

    def __init__(self, text: str) -> None:
        self.text = text

    async def chat(self, request: object, schema: object = None) -> ChatResponse:
        return ChatResponse(text=self.text, model="text-only")


def test_arbiter_refuses_a_pick_whose_id_is_written_twice() -> None:
    """An unvalidated answer is read as the model client reads one: a key written twice
    is no answer (it was read last-wins, picking the second id)."""
    arbiter = LLMArbiter(_TextOnlyArbiter('{"id": "A", "id": "B"}'))
    matrix = {"A": {"x": 0.9, "y": 0.8}, "B": {"x": 0.1, "y": 0.2}}
    with pytest.raises(DuplicateKeyError, match="id"):
        asyncio.run(arbiter.pick([("A", "a"), ("B", "b")], matrix, ["x", "y"], 0.5))


def test_arbiter_reads_an_unvalidated_answer_in_prose() -> None:
    arbiter = LLMArbiter(_TextOnlyArbiter('Sure: {"id": "B"} is best.'))
    matrix = {"A": {"x": 0.9, "y": 0.8}, "B": {"x": 0.6, "y": 0.7}}
    result = asyncio.run(arbiter.pick([("A", "a"), ("B", "b")], matrix, ["x", "y"], 0.5))
    assert result.selected == "B"
    text = asyncio.run(
        LLMArbiter(_TextOnlyArbiter('{"text": "a plan"}')).write(
            [("A", "a")], {"A": {"x": 0.9}}, ["x"], 0.5
        )
    )
    assert text == "a plan"
