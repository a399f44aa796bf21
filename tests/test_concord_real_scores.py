"""A score is any real number: NumPy numbers count, huge integers are faults, never crashes.

A function agent's score callable over a NumPy array returns ``numpy.int64`` or
``numpy.float32``; those were "not a number", so the agent stayed uncalibrated and the
run ended best-effort. An agent answering ``10**400`` made the run raise
``OverflowError`` instead of recording a fault.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from fractions import Fraction

import numpy as np
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from dissensus.baselines.compare import score_outcome
from dissensus.concord import FunctionAgent, NegotiationView, Outcome, ScoreFault, verify
from dissensus.concord.protocol import negotiate_sync
from dissensus.concord.scale import brief, real

R0 = Outcome(id="R0", text="leave it broken")
I0 = Outcome(id="I0", text="fixed at no cost")
OPTIONS = [Outcome(id="A", text="fail over"), Outcome(id="B", text="restore")]
TABLE = np.array([0, 10, 8, 3])
ROW = {"R0": 0, "I0": 1, "A": 2, "B": 3}


class Answering:
    """An agent answering fixed raw values: ``anchors`` for the anchors, ``value`` else."""

    kind = "custom"
    uses_model = False
    timeout = None

    def __init__(
        self, agent_id: str, anchors: Sequence[object], value: object, *, model: bool = False
    ) -> None:
        self.id = agent_id
        self.uses_model = model  # equal anchors from a model are a fault, not bad input
        self._anchors = list(anchors)
        self._value = value

    def attempts(self) -> int:
        return 0

    async def score(self, outcomes: Sequence[Outcome], view: NegotiationView) -> list[object]:
        if view.phase == "anchors":
            return self._anchors
        return [self._value for _ in outcomes]

    async def propose(self, view: NegotiationView) -> Outcome | None:
        return Outcome(text=f"plan of {self.id}")

    async def repair(self, view: NegotiationView) -> Outcome | None:
        return None


def _run(agents: Sequence[object], floor: float = 0.7) -> dict[str, object]:
    cert = negotiate_sync(agents, rejected=R0, ideal=I0, floor=floor, options=OPTIONS)  # type: ignore[arg-type]
    data = cert.model_dump(mode="json")
    assert verify(data).valid, verify(data)
    return data


def test_numpy_numbers_from_a_function_agent_are_scores() -> None:
    def as_int64(outcome: Outcome, view: NegotiationView) -> object:
        return TABLE[ROW[str(outcome.id)]]

    def as_float32(outcome: Outcome, view: NegotiationView) -> object:
        return np.float32(TABLE[ROW[str(outcome.id)]])

    def as_fraction(outcome: Outcome, view: NegotiationView) -> object:
        return Fraction(int(TABLE[ROW[str(outcome.id)]]), 1)

    agents = [
        FunctionAgent("ints", as_int64),
        FunctionAgent("floats", as_float32),
        FunctionAgent("fractions", as_fraction),
    ]
    data = _run(agents)
    assert data["status"] == "certified"
    scores = data["scores"]
    assert isinstance(scores, dict)
    assert {a: s["calibrated"] for a, s in scores.items()} == {
        "ints": 0.8,
        "floats": 0.8,
        "fractions": 0.8,
    }
    assert all(s["fault"] is None for s in scores.values())


def test_a_bool_is_still_not_a_score() -> None:
    def flag(outcome: Outcome, view: NegotiationView) -> object:
        return np.bool_(True) if outcome.id == "A" else TABLE[ROW[str(outcome.id)]]

    data = _run([FunctionAgent("flags", flag)])
    faults = [f["message"] for step in data["trajectory"] for f in step["faults"]]  # type: ignore[attr-defined]
    assert any("score must be a number, got bool" in m for m in faults), faults


def test_an_integer_too_large_for_a_float_is_a_fault_not_a_crash() -> None:
    data = _run([Answering("ok", [0, 10], 9), Answering("huge", [0, 10], 10**400)])
    assert data["status"] == "best_effort"
    faults = [f["message"] for step in data["trajectory"] for f in step["faults"]]  # type: ignore[attr-defined]
    assert any("outside the anchors' range" in m for m in faults), faults

    data = _run([Answering("ok", [0, 10], 9), Answering("anchors", [0, 10**5000], 5)])
    scores = data["scores"]
    assert isinstance(scores, dict)
    fault = scores["anchors"]["fault"]
    assert fault.startswith("expected two finite numbers for the anchors, got ")
    assert len(fault) < 300  # an integer of 5001 digits has no repr: named briefly


def test_the_written_plan_of_compare_reads_numbers_alike() -> None:
    data = _run([Answering("a", [0, 10], 9), Answering("b", [0, 10], 9)])
    from dissensus.concord.record import Certificate

    cert = Certificate.model_validate(data)
    agents = {
        "a": Answering("a", [0, 10], np.int64(7)),
        "b": Answering("b", [0, 10], 10**400),
    }
    faults: list[object] = []
    result = asyncio.run(score_outcome(agents, cert, "written plan", faults))  # type: ignore[arg-type]
    assert result["a"] == 0.7
    assert result["b"] == 0.0 and len(faults) == 1


NUMBERS = st.one_of(
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-20, 20).map(np.int64),
    st.floats(-20, 20, width=32).map(np.float32),
    st.fractions(),
    st.booleans(),
    st.just(ScoreFault(message="cannot")),
    st.sampled_from(["5", None, [1.0], 3 + 0j]),
)


@seed(20261205)
@settings(max_examples=150, deadline=None)
@given(anchors=st.lists(NUMBERS, min_size=2, max_size=2), value=NUMBERS)
def test_whatever_numbers_an_agent_answers_the_run_ends_with_a_valid_record(
    anchors: list[object], value: object
) -> None:
    data = _run([Answering("steady", [0, 10], 8), Answering("odd", anchors, value, model=True)])
    spent = data["spent"]
    assert isinstance(spent, dict) and spent["within_bound"]
    if data["status"] == "certified":
        number = real(value)
        assert number is not None and not isinstance(value, bool)


def test_real_and_brief() -> None:
    assert real(np.int64(3)) == 3.0 and real(True) is None and real("1") is None
    assert real(10**400) == float("inf") and real(-(10**400)) == float("-inf")
    assert brief(10**5000) == "<int>"
    assert len(brief("x" * 10_000)) == 200
