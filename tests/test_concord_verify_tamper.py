"""CONCORD ``verify``: resealed edits its checks can detect from the record.

Each edit below keeps the digest valid (the forger reseals it); ``verify`` must still
refuse it, because the record holds what contradicts it: ``accepted`` on a round that
tabled no candidate, a trajectory fault removed or invented, a call answered twice or
not at all.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from concord_helpers import IDEAL, REJECTED, HashAgent
from dissensus.concord import TableAgent, negotiate_sync, verify
from dissensus.concord.agent import NegotiationView, Outcome
from dissensus.concord.record import canonical_digest
from dissensus.types import JsonObject

R0 = Outcome(id="R0", text="r")
I0 = Outcome(id="I0", text="i")


def _reseal(doc: JsonObject) -> JsonObject:
    doc["digest"] = canonical_digest({k: v for k, v in doc.items() if k != "digest"})
    return doc


def _refused(doc: JsonObject, prop: str) -> None:
    verdict = verify(_reseal(doc))
    assert not verdict.valid and verdict.violated == prop, verdict


class FaultyRepair(TableAgent):
    async def repair(self, view: NegotiationView) -> Outcome | None:
        raise RuntimeError("repair crashed")


class FaultyPropose(TableAgent):
    async def propose(self, view: NegotiationView) -> Outcome | None:
        raise RuntimeError("propose crashed")


class RaisingScore(TableAgent):
    """Scores the anchors, then every scoring call raises (a whole-call fault)."""

    async def score(self, outcomes: Sequence[Outcome], view: NegotiationView) -> Any:
        if view.phase == "anchors":
            return await super().score(outcomes, view)
        raise RuntimeError("scoring crashed")


def _repair_faults() -> JsonObject:
    agents = [
        TableAgent("a", {"R0": 0, "I0": 10, "A": 9, "B": 2}),
        FaultyRepair("b", {"R0": 0, "I0": 10, "A": 2, "B": 9}),
    ]
    cert = negotiate_sync(
        agents,
        rejected=R0,
        ideal=I0,
        floor=0.7,
        rounds=2,
        options=[Outcome(id="A", text="plan A"), Outcome(id="B", text="plan B")],
    )
    doc = cert.model_dump(mode="json")
    assert verify(doc).valid
    assert [s["candidate"] for s in doc["trajectory"]] == [None, None, None]
    assert [len(s["faults"]) for s in doc["trajectory"]] == [0, 1, 1]
    return doc


def test_accepted_on_a_round_that_tabled_no_candidate_is_refused() -> None:
    doc = _repair_faults()
    doc["trajectory"][1]["accepted"] = True
    _refused(doc, "margin")
    doc = _repair_faults()
    doc["trajectory"][2]["accepted"] = False
    _refused(doc, "margin")


def test_a_repair_fault_removed_invented_or_moved_is_refused() -> None:
    doc = _repair_faults()
    doc["trajectory"][1]["faults"] = []  # a repair round with no outcome at all
    _refused(doc, "selection")
    doc = _repair_faults()
    doc["trajectory"][1]["faults"].append(dict(doc["trajectory"][1]["faults"][0]))
    _refused(doc, "selection")  # the bottleneck answered twice
    doc = _repair_faults()
    doc["trajectory"][1]["faults"][0]["agent"] = "a"  # not the bottleneck
    _refused(doc, "selection")
    doc = _repair_faults()
    doc["trajectory"][1]["notes"].append("b passed")  # a fault and a pass
    _refused(doc, "selection")


def _pass_round() -> JsonObject:
    agents = [
        TableAgent("a", {"R0": 0, "I0": 10, "A": 9}),
        TableAgent("b", {"R0": 0, "I0": 10, "A": 2}),
    ]
    cert = negotiate_sync(
        agents, rejected=R0, ideal=I0, floor=0.7, rounds=1, options=[Outcome(id="A", text="a")]
    )
    doc = cert.model_dump(mode="json")
    assert verify(doc).valid
    assert doc["trajectory"][1]["notes"] == ["b passed"]
    return doc


def test_a_pass_removed_or_a_fault_invented_on_a_pass_is_refused() -> None:
    doc = _pass_round()
    doc["trajectory"][1]["notes"] = []
    _refused(doc, "selection")
    doc = _pass_round()
    doc["trajectory"][1]["faults"] = [{"agent": "b", "phase": "repair", "message": "forged"}]
    _refused(doc, "selection")
    doc = _pass_round()
    doc["trajectory"][1]["accepted"] = True
    doc["trajectory"][1]["improvement"] = None
    _refused(doc, "margin")


def test_a_proposal_fault_removed_or_doubled_is_refused() -> None:
    agents = [
        TableAgent("a", {"R0": 0, "I0": 10, "A": 9}),
        FaultyPropose("b", {"R0": 0, "I0": 10, "A": 8}),
    ]
    cert = negotiate_sync(
        agents, rejected=R0, ideal=I0, floor=0.7, options=[Outcome(id="A", text="a")]
    )
    doc = cert.model_dump(mode="json")
    assert verify(doc).valid
    assert [f["phase"] for f in doc["trajectory"][0]["faults"]] == ["propose"]
    tampered = copy.deepcopy(doc)
    tampered["trajectory"][0]["faults"] = []
    _refused(tampered, "selection")
    tampered = copy.deepcopy(doc)
    tampered["trajectory"][0]["faults"].append(
        {"agent": "a", "phase": "propose", "message": "forged"}
    )
    _refused(tampered, "selection")  # a tabled its proposal: it did not also fault


def test_score_faults_must_match_the_faulted_scores() -> None:
    agents = [
        TableAgent("a", {"R0": 0, "I0": 10, "A": 9}),
        TableAgent("b", {"R0": 0, "I0": 10}),  # cannot score A: a per-outcome fault
        RaisingScore("c", {"R0": 0, "I0": 10}),  # every scoring call raises
    ]
    cert = negotiate_sync(
        agents,
        rejected=R0,
        ideal=I0,
        floor=0.7,
        rounds=0,
        options=[Outcome(id="A", text="a")],
    )
    doc = cert.model_dump(mode="json")
    assert verify(doc).valid
    faults = doc["trajectory"][0]["faults"]
    assert sorted(f["agent"] for f in faults if f["phase"] == "score") == ["b", "c"]
    for i in range(len(faults)):
        tampered = copy.deepcopy(doc)
        del tampered["trajectory"][0]["faults"][i]
        _refused(tampered, "selection")
    tampered = copy.deepcopy(doc)
    tampered["trajectory"][0]["faults"].append({"agent": "a", "phase": "score", "message": "x"})
    _refused(tampered, "selection")
    tampered = copy.deepcopy(doc)
    tampered["trajectory"][0]["faults"][0]["message"] += " (edited)"
    _refused(tampered, "selection")


def test_an_uncalibrated_agent_has_no_score_fault_in_the_trajectory() -> None:
    class NoAnchors(TableAgent):
        async def score(self, outcomes: Sequence[Outcome], view: NegotiationView) -> Any:
            if view.phase == "anchors":
                raise RuntimeError("model down")
            return await super().score(outcomes, view)

    agents = [TableAgent("a", {"R0": 0, "I0": 10, "A": 9}), NoAnchors("b", {"R0": 0, "I0": 10})]
    cert = negotiate_sync(
        agents, rejected=R0, ideal=I0, floor=0.7, rounds=0, options=[Outcome(id="A", text="a")]
    )
    doc = cert.model_dump(mode="json")
    assert verify(doc).valid
    doc["trajectory"][0]["faults"].append(
        {"agent": "b", "phase": "score", "message": doc["candidates"][0]["scores"]["b"]["fault"]}
    )
    _refused(doc, "selection")


def _agents() -> Any:
    @st.composite
    def build(draw: Any) -> list[HashAgent]:
        n = draw(st.integers(1, 4))
        seed = draw(st.integers(0, 10_000))
        return [
            HashAgent(
                f"a{i}",
                seed,
                *draw(st.sampled_from([(0.0, 10.0), (100.0, 0.0)])),
                faults=draw(st.lists(st.sampled_from(["raise", "range", "pass", "anchors"]))),
                bias=draw(st.sampled_from([0.0, 0.3, 0.6])),
            )
            for i in range(n)
        ]

    return build()


@given(_agents(), st.integers(0, 4), st.sampled_from([0.0, 0.5, 0.8]), st.data())
def test_no_trajectory_fault_can_be_removed_or_invented_unseen(
    agents: list[HashAgent], rounds: int, floor: float, data: st.DataObject
) -> None:
    cert = negotiate_sync(agents, rejected=REJECTED, ideal=IDEAL, floor=floor, rounds=rounds)
    doc = cert.model_dump(mode="json")
    assert verify(doc).valid
    where = [(k, i) for k, s in enumerate(doc["trajectory"]) for i in range(len(s["faults"]))]
    if where:
        k, i = data.draw(st.sampled_from(where))
        tampered = copy.deepcopy(doc)
        del tampered["trajectory"][k]["faults"][i]
        assert not verify(_reseal(tampered)).valid
    k = data.draw(st.integers(0, len(doc["trajectory"]) - 1))
    agent = data.draw(st.sampled_from(doc["covered"]))
    phase = data.draw(st.sampled_from(["score", "propose" if k == 0 else "repair"]))
    tampered = copy.deepcopy(doc)
    tampered["trajectory"][k]["faults"].append(
        {"agent": agent, "phase": phase, "message": "a fault that never happened"}
    )
    assert not verify(_reseal(tampered)).valid
    # accepted is set only on a round whose candidate every covered agent scored
    for k, step in enumerate(doc["trajectory"]):
        if step["accepted"] is None:
            tampered = copy.deepcopy(doc)
            tampered["trajectory"][k]["accepted"] = data.draw(st.booleans())
            assert not verify(_reseal(tampered)).valid


class CancelsOnRepair(TableAgent):
    """Cancels the run from inside its repair call (as Ctrl-C would), then repairs."""

    negotiation: Any = None

    async def repair(self, view: NegotiationView) -> Outcome | None:
        self.negotiation.cancel()
        return await super().repair(view)


def test_the_stop_reason_must_match_the_rounds_stop_note() -> None:
    from dissensus.concord.protocol import Negotiation

    options = [Outcome(id="A", text="plan A"), Outcome(id="B", text="plan B")]
    a = CancelsOnRepair("a", {"R0": 0, "I0": 10, "A": 9, "B": 6})  # the bottleneck
    negotiation = Negotiation(
        [a, TableAgent("b", {"R0": 0, "I0": 10, "A": 2, "B": 9})],
        rejected=R0,
        ideal=I0,
        floor=0.7,
        rounds=3,
        options=options,
    )
    a.negotiation = negotiation
    stopped = negotiation.run_sync().model_dump(mode="json")
    assert stopped["spent"]["stopped"] == "cancelled"
    assert verify(stopped).valid
    assert stopped["trajectory"][-1]["notes"][-1] == "run stopped (cancelled) during this round"
    tampered = copy.deepcopy(stopped)
    tampered["trajectory"][-1]["notes"].pop()
    assert not verify(_reseal(tampered)).valid
    # a run that used its whole budget was never stopped at a call
    doc = _repair_faults()
    assert doc["spent"]["stopped"] == "budget_exhausted"
    doc["spent"]["stopped"] = "cancelled"
    _refused(doc, "stop")
    doc["trajectory"][1]["notes"].append("run stopped (cancelled) during this round")
    _refused(doc, "stop")  # not the last round


@given(
    st.integers(1, 4),
    st.integers(0, 10_000),
    st.sampled_from([0.8, 0.95, 0.99]),
    st.integers(0, 3),
    st.sampled_from(["gap", "delete", "empty", "add"]),
    st.data(),
)
def test_a_shortfall_entry_edited_removed_or_invented_is_refused(
    n: int, seed: int, floor: float, rounds: int, edit: str, data: st.DataObject
) -> None:
    """A certificate's shortfall is the list its scores give: one entry's gap edited, an
    entry removed, the list emptied or an entry added, resealed, is refused as
    ``shortfall``."""
    agents = [HashAgent(f"a{i}", seed) for i in range(n)]
    cert = negotiate_sync(agents, rejected=REJECTED, ideal=IDEAL, floor=floor, rounds=rounds)
    doc = cert.model_dump(mode="json")
    assert verify(doc).valid
    short = doc["shortfall"]
    tampered = copy.deepcopy(doc)
    if short and edit in ("gap", "delete"):
        i = data.draw(st.integers(0, len(short) - 1))
        if edit == "gap":
            gap = short[i]["gap"]
            tampered["shortfall"][i]["gap"] = 0.001 if gap != 0.001 else 0.002
        else:
            del tampered["shortfall"][i]
    elif short and edit == "empty":
        tampered["shortfall"] = []
    else:
        listed = {s["agent"] for s in short}
        agent = data.draw(st.sampled_from(doc["covered"]))
        score = doc["scores"][agent]["calibrated"]
        entry = {"agent": agent, "score": score if score is not None else 0.0, "gap": 0.01}
        if agent in listed:  # a second entry for one agent
            entry = copy.deepcopy(next(s for s in short if s["agent"] == agent))
        tampered["shortfall"].append(entry)
    _refused(tampered, "shortfall")


def test_a_merge_into_a_candidate_of_a_later_round_is_refused() -> None:
    """A round-1 merge note naming a candidate tabled only in a repair round (which the
    opening could not have merged into) is refused: it hid the owner's own opening plan
    from the comparison's "Owner decides", which then committed nothing."""
    from dissensus.concord.function import FunctionAgent

    table = {"a": {"shared": 5, "fix": 9}, "b": {"shared": 6, "fix": 8}}

    def agent(agent_id: str) -> FunctionAgent:
        def score(outcome: Outcome, view: NegotiationView) -> float:
            return {"r": 0, "i": 10}.get(outcome.text, table[agent_id].get(outcome.text, 0))

        return FunctionAgent(
            agent_id, score, propose=lambda view: "shared", repair=lambda view: "fix"
        )

    cert = negotiate_sync([agent("a"), agent("b")], rejected=R0, ideal=I0, floor=0.7, rounds=3)
    doc = cert.model_dump(mode="json")
    assert verify(doc).valid
    assert doc["trajectory"][0]["notes"] == ["b proposed C1, already tabled by a; merged"]
    assert [(c["id"], c["round"], c["author"]) for c in doc["candidates"]] == [
        ("C1", 1, "a"),
        ("C2", 2, "a"),
    ]
    forged = copy.deepcopy(doc)
    forged["trajectory"][0]["notes"] = ["b proposed C2, already tabled by a; merged"]
    _refused(forged, "selection")


def test_one_anchor_score_without_the_other_is_refused() -> None:
    agents = [HashAgent("a", 1), HashAgent("b", 2, faults=["anchors"]), HashAgent("c", 3)]
    cert = negotiate_sync(agents, rejected=REJECTED, ideal=IDEAL, floor=0.8, rounds=2)
    doc = cert.model_dump(mode="json")
    assert verify(doc).valid
    assert doc["scores"]["b"]["anchors"] == {"rejected": None, "ideal": None}
    for side in ("rejected", "ideal"):
        tampered = copy.deepcopy(doc)
        tampered["scores"]["b"]["anchors"][side] = 0.5
        _refused(tampered, "calibration")
        assert verify(tampered).message == "agent b has one anchor score without the other"
