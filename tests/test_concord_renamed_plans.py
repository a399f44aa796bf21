"""A proposal whose text is a tabled candidate's is that candidate, whatever id it
gives: the same plan under a new name was tabled and scored again every round."""

from __future__ import annotations

from dissensus.concord import FunctionAgent, negotiate_sync, verify
from dissensus.concord.agent import NegotiationView, Outcome

R0 = Outcome(id="R0", text="leave it")
I0 = Outcome(id="I0", text="fix everything")


def _score_a(outcome: Outcome, view: NegotiationView) -> float:
    return {R0.text: 0.0, I0.text: 10.0, "plan p": 8.0}.get(outcome.text, 2.0)


def _score_b(outcome: Outcome, view: NegotiationView) -> float:
    return {R0.text: 0.0, I0.text: 10.0, "plan p": 3.0}.get(outcome.text, 6.0)


def _rename_leader(view: NegotiationView) -> dict[str, str]:
    leader = next(c for c in view.candidates if c.id == view.leader)
    return {"id": f"again{view.round}", "text": leader.text}


def test_the_leader_renamed_is_merged_not_tabled_again() -> None:
    agents = [
        FunctionAgent("a", _score_a, propose=lambda view: "plan p"),
        FunctionAgent("b", _score_b, propose=lambda view: None, repair=_rename_leader),
    ]
    cert = negotiate_sync(agents, rejected=R0, ideal=I0, floor=0.5, rounds=3)
    assert [c.text for c in cert.candidates] == ["plan p"]
    assert cert.spent.evaluations == 2
    for step in cert.trajectory[1:]:
        assert step.bottleneck == "b"
        assert step.notes == ["b proposed C1, already tabled by a; merged"]
    assert verify(cert.model_dump(mode="json")).valid


def test_one_plan_under_a_taken_id_is_tabled_once() -> None:
    # both propose "z" under the anchor's id: renamed C1 once, then merged into it
    agents = [
        FunctionAgent("x", _score_a, propose=lambda view: {"id": "R0", "text": "z"}),
        FunctionAgent("y", _score_b, propose=lambda view: {"id": "R0", "text": "z"}),
    ]
    cert = negotiate_sync(agents, rejected=R0, ideal=I0, floor=0.5, rounds=2)
    assert [(c.id, c.text) for c in cert.candidates] == [("C1", "z")]
    assert cert.trajectory[0].notes[-1] == "y proposed C1, already tabled by x; merged"
    assert verify(cert.model_dump(mode="json")).valid


def test_a_plan_written_again_with_outer_white_space_is_merged() -> None:
    agents = [
        FunctionAgent("a", _score_a, propose=lambda view: "plan p"),
        FunctionAgent("b", _score_b, propose=lambda view: " plan p\n"),
    ]
    cert = negotiate_sync(agents, rejected=R0, ideal=I0, floor=0.5, rounds=0)
    assert [c.text for c in cert.candidates] == ["plan p"]
    assert cert.trajectory[0].notes == ["b proposed C1, already tabled by a; merged"]
    assert verify(cert.model_dump(mode="json")).valid
