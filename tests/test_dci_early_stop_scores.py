"""An early stop in a later round's scoring still selects on the latest scores.

Stage 5 cleared the workspace's scores before asking for the round's: a run whose
round-2 scoring stopped (the budget ran out, the deadline passed, every scorer failed)
selected over no scores at all, so the fixed tie-break picked the first option while the
packet itself showed another ahead on the round-1 means. A participant not yet asked
in the cut-short round now keeps its row of the round before; one that failed in it
before the stop has none, as a finished round leaves it.
"""

from __future__ import annotations

import asyncio

import pytest

from dissensus.dci import FunctionParticipant, RawAct, deliberate
from dissensus.dci.packet import DecisionPacket
from dissensus.dci.participant import ActRequest, FailureKind, ParticipantFailure
from dissensus.dci.task import DCIConfig, Task, TaskOption

TASK = Task(
    question="Which plan?",
    options=tuple(TaskOption(id=k, text=f"Plan {k}") for k in ("a", "b", "c")),
)
ROW = {"o1": 0.8, "o2": 0.9, "o3": 0.1}
"""Every scorer's row: o2 leads, but by less than the convergence margin."""


def _run(stop_at: int, kind: FailureKind) -> tuple[DecisionPacket, list[str]]:
    """A deliberation whose round-2 scoring fails with ``kind`` from its scorer number
    ``stop_at`` (0-based) on; the scorers asked in round 2."""
    asked: list[str] = []

    def act(req: ActRequest) -> RawAct:
        if req.stage == "score":
            if req.round == 2:
                asked.append(req.participant)
                if len(asked) > stop_at:
                    raise ParticipantFailure(kind, "stopped")
            return RawAct(act="recommend", target="o2", text="o2", scores=ROW)
        if req.stage == "frame":
            return RawAct(act="frame", target="a0", text="frame")
        return RawAct(act="extend" if req.stage == "propose" else "clarify", target="o1", text="t")

    agents = [FunctionParticipant(p.id, act) for p in TASK.participants]
    return asyncio.run(deliberate(TASK, agents)).packet, asked


@pytest.mark.parametrize("stop_at", [0, 1, 3])
def test_a_budget_stop_in_round_two_scoring_selects_on_the_latest_rows(stop_at: int) -> None:
    packet, _ = _run(stop_at, "budget_exhausted")
    assert packet.status == "budget_exhausted"
    assert packet.selected is not None and packet.selected.id == "o2", packet.path
    assert packet.path != "fallback:tie_break"
    # every participant's latest row, in seat order, on the options still in play
    assert list(packet.scores) == [p.id for p in TASK.participants]
    assert all(row == ROW for row in packet.scores.values())


def test_every_scorer_failing_in_round_two_keeps_the_round_one_decision() -> None:
    packet, asked = _run(0, "model_failure")
    assert len(asked) == len(TASK.participants)
    assert packet.status == "model_failure"
    assert packet.selected is not None and packet.selected.id == "o2"
    means = {o.id: o.mean_score for o in packet.options}
    assert means["o2"] == max(m for m in means.values() if m is not None)


def test_a_recommend_made_before_the_stop_counts_in_the_packet() -> None:
    """The recommends of a scoring stage cut short were dropped with it: the packet read
    its minority from the scores alone and listed a scorer who extended the selected
    option but recommended another both as a supporter and in the minority report."""
    rows = {
        "framer": {"o1": 0.9, "o2": 0.1},
        "explorer": {"o1": 0.2, "o2": 0.3},
    }

    def act(req: ActRequest) -> RawAct:
        if req.stage == "score":
            if req.participant not in rows:
                raise ParticipantFailure("budget_exhausted", "budget spent")
            row = rows[req.participant]
            best = max(row, key=row.__getitem__)
            return RawAct(act="recommend", target=best, text=f"{best} fits", scores=row)
        if req.stage == "frame":
            return RawAct(act="frame", target="a0", text="frame")
        return RawAct(act="extend" if req.stage == "propose" else "clarify", target="o1", text="t")

    task = Task(question="Which plan?", options=TASK.options[:2])
    agents = [FunctionParticipant(p.id, act) for p in task.participants]
    packet = asyncio.run(deliberate(task, agents)).packet
    assert packet.status == "budget_exhausted"
    assert packet.selected is not None and packet.selected.id == "o1"
    assert "explorer" not in packet.selected.supporters
    (minority,) = packet.minority_report
    assert minority.option == "o2" and minority.holders == ["explorer"]
    assert minority.rationale == "explorer: o2 fits"


@pytest.mark.parametrize("stop_stage", ["frame", "propose"])
def test_a_stop_before_canonicalisation_still_keeps_max_options_in_play(stop_stage: str) -> None:
    """A stop in stage 1 or 2 skipped canonicalisation: the packet showed every option
    ever given as in play, beyond ``max_options``, and proposals copying a kept option
    unmerged."""
    proposed: list[str] = []

    def act(req: ActRequest) -> RawAct:
        if req.stage == "frame" and stop_stage != "frame":
            return RawAct(act="frame", target="a0", text="frame")
        if req.stage == "propose" and len(proposed) < 2:
            proposed.append(req.participant)
            return RawAct(act="propose", target="a0", text="p", option="plan A.")
        raise ParticipantFailure("budget_exhausted", "budget spent")

    config = DCIConfig(max_options=2)
    task = Task(question="Which plan?", options=TASK.options, dci=config)
    agents = [FunctionParticipant(p.id, act) for p in task.participants]
    packet = asyncio.run(deliberate(task, agents)).packet
    assert packet.status == "budget_exhausted"
    in_play = [o.id for o in packet.options if o.status in ("live", "selected")]
    assert in_play == ["o1", "o2"]
    statuses = {o.id: o.status for o in packet.options}
    assert statuses["o3"] == "dropped"
    if stop_stage == "propose":  # both copies of "Plan a" merged into it
        assert statuses["o4"] == statuses["o5"] == "merged"
        assert packet.selected is not None and packet.selected.id == "o1"
        assert set(proposed) <= set(packet.selected.supporters)


def test_a_scorer_that_failed_before_the_stop_has_no_row_as_in_a_finished_round() -> None:
    """Round 2's scoring: the first scorer fails (its model), the second scores, the
    third's call is ended by the stop. The one that failed kept its round-1 row, though
    a finished round leaves a scorer that failed with none; the one not yet asked, and
    the one whose call the stop ended, keep theirs."""
    seats = [p.id for p in TASK.participants]

    def act(req: ActRequest) -> RawAct:
        if req.stage == "score":
            if req.round == 2:
                turn = seats.index(req.participant)
                if turn == 0:
                    raise ParticipantFailure("model_failure", "the model failed")
                if turn == 2:
                    raise ParticipantFailure("budget_exhausted", "budget spent")
            return RawAct(act="recommend", target="o2", text="o2", scores=ROW)
        if req.stage == "frame":
            return RawAct(act="frame", target="a0", text="frame")
        return RawAct(act="extend" if req.stage == "propose" else "clarify", target="o1", text="t")

    agents = [FunctionParticipant(p.id, act) for p in TASK.participants]
    packet = asyncio.run(deliberate(TASK, agents)).packet
    assert packet.status == "budget_exhausted"
    assert len(seats) > 3  # one not yet asked when the budget ran out
    assert list(packet.scores) == seats[1:]  # the one that failed has no row
    assert all(row == ROW for row in packet.scores.values())
