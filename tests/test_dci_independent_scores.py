"""Stage 5 scores are independent, as stage 2 proposals are.

Each score was asked with the live workspace, whose window of recent acts showed the
recommendations already made in the same stage (``a14 framer recommend -> o1: ...``):
the integrator, last to speak, scored every round knowing how everyone else had.
"""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from dci_helpers import ScriptedParticipant
from dissensus.dci.flow import deliberate_sync
from dissensus.dci.task import DCIConfig, parse_task

TASK = parse_task(
    {
        "question": "Which road should we take?",
        "options": [{"id": "north", "text": "Take the north road."}],
    }
)
_ACT = re.compile(r"^- (a\d+) ", re.M)


@settings(max_examples=25, derandomize=True, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=6),
    rounds=st.integers(min_value=1, max_value=3),
    convergent=st.booleans(),
)
def test_no_scorer_sees_a_recommendation_of_its_own_stage(
    n: int, rounds: int, convergent: bool
) -> None:
    ids = [f"p{i}" for i in range(n)]
    archetypes = ["Framer", "Explorer", "Challenger", "Integrator"]
    task = TASK.model_copy(
        update={
            "participants": parse_task(
                {
                    "question": "q",
                    "participants": [
                        {"id": p, "archetype": archetypes[i % 4]} for i, p in enumerate(ids)
                    ],
                }
            ).participants
        }
    )
    agents = [ScriptedParticipant(p, scores={"o1": 0.6, "o2": 0.55}) for p in ids]
    config = DCIConfig(max_rounds=rounds, convergent_flow=convergent)
    result = deliberate_sync(task, agents, config=config)
    scored = {
        (a.round, a.id)
        for a in result.workspace.acts
        if a.stage == "score" and a.act == "recommend"
    }
    assert scored, "every run here scores"
    asked = 0
    for agent in agents:
        for request in agent.requests:
            if request.stage != "score":
                continue
            asked += 1
            shown = set(_ACT.findall(request.prompt))
            same_stage = {act for round_, act in scored if round_ == request.round}
            assert not shown & same_stage, (request.participant, request.round, shown & same_stage)
    assert asked == len(scored)
