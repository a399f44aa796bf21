"""A proposal longer than one plan may hold is a fault of that call, never tabled: the
record, every later view and every model agent's prompt would carry it."""

from __future__ import annotations

from dissensus.concord import FunctionAgent, TableAgent, negotiate_sync, verify
from dissensus.concord.agent import NegotiationView, Outcome
from dissensus.io.limits import MAX_FIELD_CHARS

R0 = Outcome(id="R0", text="nothing")
I0 = Outcome(id="I0", text="everything")
HUGE = "x" * (MAX_FIELD_CHARS + 1)


def _score(outcome: Outcome, view: NegotiationView) -> float:
    return 0.0 if outcome.id == "R0" else 10.0 if outcome.id == "I0" else 5.0


def test_a_runaway_proposal_or_repair_is_a_fault_not_a_candidate() -> None:
    agents = [
        FunctionAgent(
            "f",
            _score,
            propose=lambda view: HUGE,
            repair=lambda view: {"text": "short plan", "id": "Z" * (MAX_FIELD_CHARS + 1)},
        ),
        TableAgent("t", {"R0": 0, "I0": 10, "A": 8}),
    ]
    cert = negotiate_sync(
        agents,
        rejected=R0,
        ideal=I0,
        floor=0.7,
        rounds=1,
        options=[Outcome(id="A", text="plan a")],
    )
    assert all(len(c.text) <= MAX_FIELD_CHARS for c in cert.candidates)
    assert [c.id for c in cert.candidates] == ["A"]
    opening, repair = cert.trajectory
    assert [(f.agent, f.phase) for f in opening.faults] == [("f", "propose")]
    assert "32,769 characters long" in opening.faults[0].message
    assert [(f.agent, f.phase) for f in repair.faults] == [("f", "repair")]
    assert "id is 32,769 characters" in repair.faults[0].message
    assert verify(cert.model_dump(mode="json")).valid


def test_a_long_pool_option_is_still_tabled() -> None:
    option = Outcome(id="A", text="y" * (MAX_FIELD_CHARS + 5))
    agents = [TableAgent("t", {"R0": 0, "I0": 10, "A": 8})]
    cert = negotiate_sync(agents, rejected=R0, ideal=I0, floor=0.7, rounds=0, options=[option])
    assert cert.status == "certified" and cert.selected is not None
    assert cert.selected.id == "A"
