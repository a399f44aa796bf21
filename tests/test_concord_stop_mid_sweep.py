"""A stop that comes while a phase's calls run ends the phase: no call starts after it.

The calls of one phase are issued together and start one after another on the loop;
agents that answer without awaiting (table agents) used to run the whole phase after a
cancellation or a deadline (seconds of CPU on a large problem, the service's
``/v1/negotiate`` past its ``--timeout``). Each call now checks both as it starts.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from concord_helpers import IDEAL, REJECTED, HashAgent
from dissensus.concord import Negotiation, NegotiationView, Outcome, TableAgent, verify
from test_concord_protocol import agents_strategy, controls


class StopsAt:
    """Wraps an agent that answers without awaiting: its call number ``at`` (counted
    over every wrapped agent) stops the run (``cancel()``, or the clock past the
    deadline) and answers as usual; every call that starts is counted."""

    def __init__(self, inner: HashAgent, shared: dict[str, Any], at: int, how: str) -> None:
        self.inner, self.shared, self.at, self.how = inner, shared, at, how
        self.id, self.kind, self.uses_model, self.timeout = inner.id, "function", True, None

    def attempts(self) -> int:
        return self.inner.attempts()

    def _tick(self) -> None:
        self.shared["calls"] += 1
        if self.shared["calls"] == self.at:
            if self.how == "cancel":
                self.shared["negotiation"].cancel()
            else:
                self.shared["clock"][0] = 1_000.0  # past any deadline of the test

    async def score(self, outcomes: Sequence[Outcome], view: NegotiationView) -> Sequence[float]:
        self._tick()
        return await self.inner.score(outcomes, view)

    async def propose(self, view: NegotiationView) -> Outcome | None:
        self._tick()
        return await self.inner.propose(view)

    async def repair(self, view: NegotiationView) -> Outcome | None:
        self._tick()
        return await self.inner.repair(view)


@given(agents_strategy(), controls, st.integers(1, 40), st.sampled_from(["cancel", "deadline"]))
@settings(max_examples=80, deadline=None)
def test_no_call_starts_after_a_stop(  # type: ignore[no-untyped-def]
    agents, ctl, at, how
) -> None:
    reference = Negotiation(copy.deepcopy(agents), rejected=REJECTED, ideal=IDEAL, **ctl)
    made = reference.run_sync().spent.agent_calls  # the calls of the run left alone
    clock = [0.0]
    shared: dict[str, Any] = {"calls": 0, "clock": clock}
    wrapped = [StopsAt(a, shared, at, how) for a in agents]
    neg = Negotiation(
        wrapped,
        rejected=REJECTED,
        ideal=IDEAL,
        deadline_s=500.0 if how == "deadline" else None,
        clock=lambda: clock[0],
        **ctl,
    )
    shared["negotiation"] = neg
    cert = neg.run_sync()
    assert shared["calls"] == min(at, made)  # the call that stopped the run was its last
    if at < made:
        assert cert.spent.stopped == ("cancelled" if how == "cancel" else "deadline")
    assert cert.spent.agent_calls == shared["calls"]  # the calls made, none that were not
    verdict = verify(cert.model_dump(mode="json"))
    assert verdict.valid, verdict


def test_a_cancel_mid_sweep_of_table_agents_records_the_answers_that_arrived() -> None:
    options = [Outcome(id=f"O{i}", text=f"option {i}") for i in range(3)]
    tables = [
        TableAgent(f"t{k}", {"R0": 0, "I0": 10, **{f"O{i}": (i + k) % 10 for i in range(3)}})
        for k in range(6)
    ]
    neg = Negotiation(tables, rejected=REJECTED, ideal=IDEAL, floor=0.99, options=options)
    inner = tables[2].score
    asked: list[str] = []

    async def cancelling(outcomes: Sequence[Outcome], view: NegotiationView) -> Any:
        asked.append(view.phase)
        if view.phase == "score":
            neg.cancel()
        return await inner(outcomes, view)

    tables[2].score = cancelling  # type: ignore[method-assign]
    cert = neg.run_sync()
    assert asked == ["anchors", "score"]
    assert cert.spent.stopped == "cancelled"
    scored = {a for c in cert.candidates for a in c.scores}
    assert scored == {"t0", "t1", "t2"}  # the sweep ended with t2's answer, recorded
    assert cert.spent.agent_calls == 6 + 6 + 3  # anchors, proposals, three scores
    assert verify(cert.model_dump(mode="json")).valid
