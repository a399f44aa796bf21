"""CONCORD: a faulted score or an uncalibrated agent never clears the floor, even 0.

A fault counts as the rejected anchor (calibrated 0) for selection, but the run ends
certified only if every covered agent *really* scored the leader at or above the floor;
``verify`` decides it the same way.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from hypothesis import given
from hypothesis import strategies as st

from concord_helpers import IDEAL, REJECTED
from dissensus.concord import TableAgent, negotiate_sync, verify
from dissensus.concord.agent import NegotiationView, Outcome, ScoreFault
from dissensus.concord.record import canonical_digest
from dissensus.types import JsonObject


class NoAnchors(TableAgent):
    """A table agent whose anchor call fails: it stays uncalibrated."""

    async def score(self, outcomes: Sequence[Outcome], view: NegotiationView) -> list[float]:
        if view.phase == "anchors":
            raise RuntimeError("model down")
        return list(await super().score(outcomes, view))  # type: ignore[arg-type]


def _floor0_run():  # type: ignore[no-untyped-def]
    agents = [
        TableAgent("a", {"R0": 0, "I0": 10, "A": 9}),
        TableAgent("b", {"R0": 0, "I0": 10}),  # cannot score A: a fault
        NoAnchors("c", {"R0": 0, "I0": 10, "A": 1}),  # anchor call fails: uncalibrated
    ]
    return negotiate_sync(
        agents,
        rejected=Outcome(id="R0", text="r"),
        ideal=Outcome(id="I0", text="i"),
        floor=0.0,
        options=[Outcome(id="A", text="plan A")],
    )


def _reseal(doc: JsonObject) -> JsonObject:
    doc["digest"] = canonical_digest({k: v for k, v in doc.items() if k != "digest"})
    return doc


def test_a_fault_or_an_uncalibrated_agent_does_not_clear_a_floor_of_zero() -> None:
    cert = _floor0_run()
    assert cert.status == "best_effort"
    assert cert.spent.stopped == "budget_exhausted"
    assert cert.scores["b"].raw is None and cert.scores["c"].fault is not None
    assert [(s.agent, s.score, s.gap) for s in cert.shortfall] == [("b", 0.0, 0.0), ("c", 0.0, 0.0)]
    assert verify(cert.model_dump(mode="json")).valid


def test_verify_refuses_a_certificate_that_counts_a_fault_as_clearing_a_floor_of_zero() -> None:
    doc = _floor0_run().model_dump(mode="json")
    # what the protocol recorded before: certified at the opening, nothing below the floor
    doc["status"] = "certified"
    doc["shortfall"] = []
    doc["trajectory"] = doc["trajectory"][:1]
    doc["spent"]["rounds"] = 0
    doc["spent"]["stopped"] = "floor_cleared"
    verdict = verify(_reseal(doc))
    assert not verdict.valid and verdict.violated == "stop", verdict
    doc["spent"]["stopped"] = "cancelled"
    doc["trajectory"][0]["notes"].append("run stopped (cancelled) during this round")
    verdict = verify(_reseal(doc))
    assert not verdict.valid and verdict.violated == "status", verdict


def _unit(seed: int, *parts: object) -> float:
    digest = hashlib.sha256("|".join(map(str, (seed, *parts))).encode()).digest()
    return int.from_bytes(digest[:4], "big") / 0xFFFFFFFF


class FaultyAgent:
    """Seeded scores on [0, 10]; ``mode`` injects faults: ``anchors`` (the anchor call
    raises), ``raise`` (every scoring call raises), ``some`` (a ScoreFault in place of
    some outcomes), ``ok`` (none)."""

    kind = "function"
    uses_model = False
    timeout: float | None = None

    def __init__(self, agent_id: str, seed: int, mode: str, bias: float) -> None:
        self.id = agent_id
        self.seed = seed
        self.mode = mode
        self.bias = bias

    def attempts(self) -> int:
        return 0

    async def score(
        self, outcomes: Sequence[Outcome], view: NegotiationView
    ) -> list[float | ScoreFault]:
        if view.phase == "anchors":
            if self.mode == "anchors":
                raise RuntimeError("no anchors")
            return [0.0, 10.0]
        if self.mode == "raise":
            raise RuntimeError("scoring failed")
        out: list[float | ScoreFault] = []
        for o in outcomes:
            u = _unit(self.seed, self.id, o.text)
            if self.mode == "some" and u < 0.4:
                out.append(ScoreFault(message="cannot score this"))
            else:
                out.append(round(10 * (self.bias + (1 - self.bias) * u), 3))
        return out

    async def propose(self, view: NegotiationView) -> Outcome:
        return Outcome(text=f"plan of {self.id}")

    async def repair(self, view: NegotiationView) -> Outcome:
        return Outcome(text=f"repair of {self.id} in round {view.round}")


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["ok", "ok", "some", "raise", "anchors"]),
            st.sampled_from([0.0, 0.5, 0.9]),
        ),
        min_size=1,
        max_size=4,
    ),
    st.integers(0, 1000),
    st.sampled_from([0.0, 0.0, 0.3, 0.7]),
    st.integers(0, 3),
    st.sampled_from(["maximin", "leximin", "nash", "utilitarian"]),
)
def test_no_certified_run_has_a_faulted_or_uncalibrated_covered_agent(
    specs: list[tuple[str, float]], seed: int, floor: float, rounds: int, rule: str
) -> None:
    agents = [FaultyAgent(f"a{i}", seed, mode, bias) for i, (mode, bias) in enumerate(specs)]
    cert = negotiate_sync(
        agents,
        rejected=REJECTED,
        ideal=IDEAL,
        floor=floor,
        rounds=rounds,
        rule=rule,  # type: ignore[arg-type]
    )
    doc = cert.model_dump(mode="json")
    assert verify(doc).valid
    leader = next((c for c in cert.candidates if cert.selected and c.id == cert.selected.id), None)
    really = leader is not None and all(
        cert.scores[a].fault is None
        and leader.scores[a].fault is None
        and leader.scores[a].raw is not None
        and leader.scores[a].raw / 10 >= floor
        for a in cert.covered
    )
    assert (cert.status == "certified") == really
    assert (cert.spent.stopped == "floor_cleared") == really
    if cert.status == "certified":
        assert cert.shortfall == []
    else:  # every covered agent that did not really clear the floor is named
        below = {
            a
            for a in cert.covered
            if leader is None or (raw := leader.scores[a].raw) is None or raw / 10 < floor
        }
        assert {s.agent for s in cert.shortfall} == below
