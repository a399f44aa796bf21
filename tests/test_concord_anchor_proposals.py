"""A negotiator that proposes an anchor's text is faulted, never tabled: the ideal
anchor, scored as the ideal by every agent, was certified at 1.0 for all of them."""

from __future__ import annotations

from dissensus.concord import FunctionAgent, negotiate_sync, verify
from dissensus.concord.agent import NegotiationView, Outcome

R0 = Outcome(id="R0", text="leave the region down")
I0 = Outcome(id="I0", text="full recovery at no cost")


def _score(outcome: Outcome, view: NegotiationView) -> float:
    return {R0.text: 0.0, I0.text: 10.0}.get(outcome.text.strip(), 5.0)


def test_the_ideal_anchor_proposed_is_a_fault_not_a_certified_plan() -> None:
    agents = [
        FunctionAgent("a", _score, propose=lambda view: f"  {I0.text}\n"),
        FunctionAgent(
            "b",
            _score,
            propose=lambda view: "restart the control plane",
            repair=lambda view: {"id": "X", "text": R0.text},
        ),
    ]
    cert = negotiate_sync(agents, rejected=R0, ideal=I0, floor=0.7, rounds=1)
    assert [c.text for c in cert.candidates] == ["restart the control plane"]
    assert cert.status == "best_effort" and cert.worst_off == 0.5
    opening, repair = cert.trajectory
    assert [(f.agent, f.phase) for f in opening.faults] == [("a", "propose")]
    assert "ideal anchor I0" in opening.faults[0].message
    assert repair.bottleneck == "a"  # the tie goes to the agent listed first
    data = cert.model_dump(mode="json")
    assert verify(data).valid


def test_the_rejected_anchor_as_a_repair_is_a_fault() -> None:
    agents = [
        FunctionAgent("a", _score, propose=lambda view: "restart", repair=lambda view: R0.text),
    ]
    cert = negotiate_sync(agents, rejected=R0, ideal=I0, floor=0.7, rounds=1)
    assert [c.text for c in cert.candidates] == ["restart"]
    assert [(f.agent, f.phase) for f in cert.trajectory[1].faults] == [("a", "repair")]
    assert "rejected anchor R0" in cert.trajectory[1].faults[0].message
    assert verify(cert.model_dump(mode="json")).valid
