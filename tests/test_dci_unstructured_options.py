"""The ablation without DCI-CF holds the options proposed in its discussion to stage 2's
rules.

Its discussion rounds admit ``propose`` and ``spawn``, and what they proposed was never
canonicalised: three copies of the task's own option and twelve more ideas were all
scored (17 options in play against ``max_options: 5``), the copies splitting the scores
of one option.
"""

from __future__ import annotations

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
        "options": [{"id": "north", "text": "Take the north road."}],
    }
)


class _Proposer(ScriptedParticipant):
    """Proposes in every discussion round: the framer the task's option again, the
    others a new idea."""

    async def speak(self, request: ActRequest) -> ActReply:
        if request.stage != "discuss":
            return await super().speak(request)
        self.requests.append(request)
        text = "take the North road." if self.id == "framer" else f"{self.id} idea {request.round}"
        return ActReply(act=RawAct(act="propose", target="a0", text="t", option=text))


@settings(max_examples=12, derandomize=True, deadline=None)
@given(rounds=st.integers(min_value=1, max_value=4), max_options=st.integers(1, 6))
def test_discussion_proposals_merge_and_are_capped(rounds: int, max_options: int) -> None:
    agents = [_Proposer(p, scores={"o1": 0.6}) for p in PANEL]
    config = DCIConfig(convergent_flow=False, max_rounds=rounds, max_options=max_options)
    p = deliberate_sync(TASK, agents, config=config).packet
    assert p.status == "complete" and p.path == "unstructured:mean_score"
    in_play = [o for o in p.options if o.status in ("live", "selected")]
    assert len(in_play) == max_options
    # the framer's copies of the task's option merged into it, never scored apart
    copies = [o for o in p.options if o.text == "take the North road."]
    assert len(copies) == rounds and all(o.status == "merged" for o in copies)
    assert all(set(row) == {o.id for o in in_play} for row in p.scores.values())
