"""The decision packet's mean scores are the scores the options were given.

Rounds after the first score the finalists only, and the packet's means were computed
from the last round's scores alone: an option eliminated in round 1 with a mean of 0.2
was recorded with ``mean_score: 0.0`` (as was one merged or dropped, which nobody ever
scored), and the margin reopen condition could name such an option as the runner-up
``now 0.90 vs 0.00``.
"""

from __future__ import annotations

from dci_helpers import _SELECTED, PANEL, ScriptedParticipant, live_options
from dissensus.dci.acts import RawAct
from dissensus.dci.flow import deliberate_sync
from dissensus.dci.participant import ActReply, ActRequest
from dissensus.dci.task import parse_task
from dissensus.types import Usage

TASK = parse_task(
    {
        "question": "Which road should we take?",
        "options": [{"id": "north", "text": "Take the north road."}],
    }
)

SCORES = {"o1": 0.6, "o2": 0.55, "o3": 0.3, "o4": 0.2, "o5": 0.1}


def test_an_option_eliminated_in_round_one_keeps_its_round_one_mean() -> None:
    agents = [ScriptedParticipant(p, scores=SCORES) for p in PANEL]
    p = deliberate_sync(TASK, agents).packet
    assert p.metrics.rounds == 2  # no lead of 0.15: round 2 scores the three finalists
    assert set(p.scores["framer"]) == {"o1", "o2", "o3"}
    means = {o.id: (o.status, o.mean_score) for o in p.options}
    assert means["o4"] == ("eliminated", 0.2)
    assert means["o5"] == ("eliminated", 0.1)
    assert means["o2"][1] == 0.55 and means["o3"][1] == 0.3
    assert p.selected is not None and p.selected.mean_score == 0.6


class _Echo(ScriptedParticipant):
    """Proposes the task's own option text (merged into it) and scores the one option
    left in play."""

    async def speak(self, request: ActRequest) -> ActReply:
        if request.stage == "propose":
            act = RawAct(act="propose", target="a0", text="same", option="take the North road.")
            return ActReply(act=act, usage=Usage(calls=1, attempts=1))
        return await super().speak(request)


def test_an_option_nobody_scored_has_no_mean_and_is_no_rival() -> None:
    agents = [_Echo(p, scores={"o1": 0.9}) for p in PANEL]
    p = deliberate_sync(TASK, agents).packet
    status = {o.id: o.status for o in p.options}
    assert status == {
        "o1": "selected",
        "o2": "merged",
        "o3": "merged",
        "o4": "merged",
        "o5": "merged",
    }
    assert [o.mean_score for o in p.options] == [0.9, None, None, None, None]
    # the synthesis gives its own reopen condition; none names a merged option as a rival
    assert not any("vs 0.00" in c for c in p.reopen_conditions)


ROUND_1 = {"o1": 0.80, "o2": 0.75, "o3": 0.74, "o4": 0.73, "o5": 0.72}
ROUND_2 = {"o1": 0.90, "o2": 0.30, "o3": 0.20}


class _Rescorer(ScriptedParticipant):
    """Scores every option close in round 1; in round 2 the finalists far apart. Its
    synthesis gives no reopen condition, so the packet writes the margin one."""

    async def speak(self, request: ActRequest) -> ActReply:
        if request.stage == "score":
            shown = live_options(request.prompt)
            source = ROUND_1 if len(shown) > 3 else ROUND_2
            row = {o: source[o] for o in shown}
            act = RawAct(act="recommend", target="o1", text="o1 leads", scores=row)
            return ActReply(act=act, usage=Usage(calls=1, attempts=1))
        if request.stage == "synthesize":
            target = _SELECTED.findall(request.prompt)[0]
            act = RawAct(act="synthesize", target=target, text="We take o1.")
            return ActReply(act=act, usage=Usage(calls=1, attempts=1))
        return await super().speak(request)


def test_the_margin_condition_names_a_rival_the_last_round_scored() -> None:
    task = parse_task(
        {
            "question": "Which road should we take?",
            "options": [{"id": n, "text": f"Take the {n} road."} for n in ("n", "s", "e", "w")],
        }
    )
    p = deliberate_sync(task, [_Rescorer(x) for x in PANEL]).packet
    assert p.metrics.rounds == 2 and p.selected is not None and p.selected.id == "o1"
    means = {o.id: o.mean_score for o in p.options}
    assert means["o4"] == 0.73  # eliminated in round 1: its mean is kept ...
    # ... but it is no rival: round 2 scored o1, o2, o3, and o2 is the runner-up
    assert p.reopen_conditions == [
        "Reopen if a re-score brings o2 within 0.15 of o1 (now 0.90 vs 0.30)."
    ]
