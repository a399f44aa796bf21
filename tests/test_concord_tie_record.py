"""The ties a certificate reports are verified: `dissensus verify` recomputes every
round's `ties` (the selection's and the bottleneck's, in the protocol's words) and
rejects a record whose ties were dropped, invented or reworded and resealed."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.concord import TableAgent, negotiate_sync, verify
from dissensus.concord.agent import Outcome
from dissensus.concord.record import canonical_digest

R0 = Outcome(id="R0", text="nothing")
I0 = Outcome(id="I0", text="everything")
OPTIONS = [Outcome(id=k, text=f"plan {k.lower()}") for k in "ABCD"]


def _reseal(data: dict[str, Any]) -> dict[str, Any]:
    data["digest"] = canonical_digest({k: v for k, v in data.items() if k != "digest"})
    return data


def _tied_run(rule: str) -> dict[str, Any]:
    agents = [
        TableAgent("x", {"R0": 0, "I0": 10, "A": 6, "B": 5, "C": 4}),
        TableAgent("y", {"R0": 0, "I0": 10, "A": 5, "B": 6, "C": 5.5}),
    ]
    cert = negotiate_sync(
        agents, rejected=R0, ideal=I0, floor=0.7, rounds=2, rule=rule, options=OPTIONS[:3]
    )
    return cert.model_dump(mode="json")


def test_a_recorded_tie_is_verified() -> None:
    for rule in ("maximin", "leximin", "nash", "utilitarian"):
        data = _tied_run(rule)
        assert data["trajectory"][0]["ties"], rule  # A and B tie at 0.5
        assert verify(data).valid, rule
        dropped = copy.deepcopy(data)
        dropped["trajectory"][0]["ties"] = []
        verdict = verify(_reseal(dropped))
        assert not verdict.valid and verdict.violated == "selection", rule
        assert "ties" in (verdict.message or "")
        reworded = copy.deepcopy(data)
        reworded["trajectory"][0]["ties"] = [
            data["trajectory"][0]["ties"][0].replace("candidate A", "candidate B")
        ]
        assert not verify(_reseal(reworded)).valid, rule
        invented = copy.deepcopy(data)
        invented["trajectory"][1]["ties"] = [
            "bottleneck tie between x, y at 0.5; y is listed first"
        ]
        assert not verify(_reseal(invented)).valid, rule


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    st.lists(st.lists(st.integers(0, 3), min_size=4, max_size=4), min_size=1, max_size=4),
    st.sampled_from(["maximin", "leximin", "nash", "utilitarian"]),
    st.sampled_from([0.0, 0.5, 0.7, 1.0]),
)
def test_every_run_with_ties_verifies(rows: list[list[int]], rule: str, floor: float) -> None:
    # coarse integer scores tie often, between candidates and between agents
    agents = [
        TableAgent(f"a{i}", {"R0": 0, "I0": 3, **dict(zip("ABCD", row, strict=True))})
        for i, row in enumerate(rows)
    ]
    cert = negotiate_sync(
        agents, rejected=R0, ideal=I0, floor=floor, rounds=3, rule=rule, options=OPTIONS
    )
    data = cert.model_dump(mode="json")
    verdict = verify(data)
    assert verdict.valid, verdict.message
    for step in data["trajectory"]:
        if step["ties"]:
            edited = copy.deepcopy(data)
            edited["trajectory"][step["round"] - 1]["ties"] = step["ties"][1:]
            assert not verify(_reseal(edited)).valid
