"""A packet does not depend on the order a model wrote its scores' keys in.

The selected option's supporters counted every participant whose best score went to
it, the best being the first of the row's keys among equal scores: a challenger
scoring ``{"o1": 0.8, "o2": 0.8}`` supported o1, the same scores written
``{"o2": 0.8, "o1": 0.8}`` did not, and the packet differed.
"""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from dci_helpers import PANEL, ScriptedParticipant
from dissensus.dci.acts import RawAct
from dissensus.dci.flow import deliberate_sync
from dissensus.dci.participant import ActReply, ActRequest
from dissensus.dci.task import DCIConfig, parse_task

TASK = parse_task(
    {
        "question": "Which road should we take?",
        "options": [
            {"id": "north", "text": "Take the north road."},
            {"id": "south", "text": "Take the south road."},
            {"id": "east", "text": "Take the east road."},
        ],
    }
)
ROWS = {
    "framer": {"o1": 0.9, "o2": 0.2, "o3": 0.2},
    "explorer": {"o1": 0.9, "o2": 0.3, "o3": 0.1},
    "challenger": {"o1": 0.7, "o2": 0.7, "o3": 0.7},
    "integrator": {"o1": 0.4, "o2": 0.6, "o3": 0.6},
}


class _Scorer(ScriptedParticipant):
    def __init__(self, id: str, order: list[str]) -> None:
        super().__init__(id)
        self.order = order

    async def speak(self, request: ActRequest) -> ActReply:
        if request.stage != "score":
            return await super().speak(request)
        row = ROWS[self.id]
        scores = {o: row[o] for o in self.order}
        return ActReply(act=RawAct(act="recommend", target="o1", text="t", scores=scores))


def _packet(orders: list[list[str]]) -> str:
    """The packet's JSON as written (no key sorting): its bytes, scores' keys included."""
    agents = [_Scorer(p, order) for p, order in zip(PANEL, orders, strict=True)]
    packet = deliberate_sync(TASK, agents, config=DCIConfig(max_options=3)).packet
    return json.dumps(packet.model_dump(mode="json"))


BASE = _packet([["o1", "o2", "o3"]] * 4)


@settings(max_examples=30, derandomize=True, deadline=None)
@given(orders=st.lists(st.permutations(["o1", "o2", "o3"]), min_size=4, max_size=4))
def test_the_packet_is_the_same_whatever_the_key_order(orders: list[list[str]]) -> None:
    assert _packet(orders) == BASE
    selected = json.loads(BASE)["selected"]
    assert isinstance(selected, dict) and selected["id"] == "o1"
    # a tie at the top with the selected option is support, whatever the order
    assert "challenger" in selected["supporters"]


TWO = parse_task(
    {
        "question": "Which road?",
        "options": [
            {"id": "north", "text": "Take the north road."},
            {"id": "south", "text": "Take the south road."},
        ],
    }
)
SPLIT = {
    "framer": ({"o1": 0.9, "o2": 0.2}, "o1"),
    "explorer": ({"o1": 0.9, "o2": 0.3}, "o1"),
    "challenger": ({"o2": 0.7, "o1": 0.7}, "o2"),
    "integrator": ({"o1": 0.8, "o2": 0.4}, "o1"),
}


class _Recommender(ScriptedParticipant):
    async def speak(self, request: ActRequest) -> ActReply:
        if request.stage != "score":
            return await super().speak(request)
        row, target = SPLIT[self.id]
        act = RawAct(act="recommend", target=target, text=f"I back {target}", scores=row)
        return ActReply(act=act)


def test_a_tied_scorer_who_recommended_another_option_is_minority_not_support() -> None:
    p = deliberate_sync(TWO, [_Recommender(x) for x in PANEL], config=DCIConfig(max_options=2))
    packet = p.packet
    assert packet.selected is not None and packet.selected.id == "o1"
    assert [(m.option, m.holders) for m in packet.minority_report] == [("o2", ["challenger"])]
    assert "challenger" not in packet.selected.supporters
    assert {"framer", "explorer", "integrator"} <= set(packet.selected.supporters)


class _ProposerRecommendsElsewhere(ScriptedParticipant):
    """Every participant scores o5 (the challenger's own proposal) top but the
    challenger, which recommends o1."""

    async def speak(self, request: ActRequest) -> ActReply:
        from dci_helpers import live_options

        if request.stage != "score":
            return await super().speak(request)
        options = live_options(request.prompt)
        best = "o1" if self.id == "challenger" else "o5"
        row = {o: (0.9 if o == best else 0.2) for o in options}
        return ActReply(act=RawAct(act="recommend", target=best, text=f"I back {best}", scores=row))


def test_a_proposer_who_recommended_another_option_is_minority_not_support() -> None:
    p = deliberate_sync(
        TWO, [_ProposerRecommendsElsewhere(x) for x in PANEL], config=DCIConfig(max_options=5)
    )
    packet = p.packet
    assert packet.selected is not None and packet.selected.id == "o5"
    assert "challenger" in p.workspace.options["o5"].supporters  # it proposed o5
    assert [(m.option, m.holders) for m in packet.minority_report] == [("o1", ["challenger"])]
    assert packet.selected.supporters == ["explorer", "framer", "integrator"]


@settings(max_examples=25, deadline=None, derandomize=True)
@given(targets=st.lists(st.sampled_from(["o1", "o2"]), min_size=4, max_size=4))
def test_no_participant_is_both_supporter_and_minority(targets: list[str]) -> None:
    plan = dict(zip(PANEL, targets, strict=True))

    class _Votes(ScriptedParticipant):
        async def speak(self, request: ActRequest) -> ActReply:
            if request.stage != "score":
                return await super().speak(request)
            t = plan[self.id]
            row = {"o1": 0.9 if t == "o1" else 0.3, "o2": 0.9 if t == "o2" else 0.3}
            return ActReply(act=RawAct(act="recommend", target=t, text=f"I back {t}", scores=row))

    packet = deliberate_sync(
        TWO, [_Votes(x) for x in PANEL], config=DCIConfig(max_options=2)
    ).packet
    if packet.selected is None:
        return
    minority = {h for m in packet.minority_report for h in m.holders}
    assert not minority & set(packet.selected.supporters)
