"""Table agents for CONCORD (``docs/concord.md``): fixed options, scores given in the problem file.

A table agent needs no model. Its private scale is whatever numbers the problem file
gives (``scores: {R0: 0, I0: 10, A: 6}``), anchors included.

Choices this module makes:

* **Score.** An outcome is looked up by id. An outcome the table has no score for (for
  instance a plan another agent wrote) is a :class:`~dissensus.concord.agent.ScoreFault`
  in its place; the protocol reports that evaluation (and only it: the other outcomes of
  the same call keep their scores) as a fault of this agent and counts it as the
  rejected anchor (0), so the table agent can never be certified on an outcome it did
  not score.
* **Direction.** Which way is better is read from the table's anchor scores (a scale
  may run downwards, e.g. latency in milliseconds with ideal < rejected).
* **Propose.** The option of the pool with the best own score; ties go to the earlier
  option of the pool. With no scored option it passes.
* **Repair.** As the bottleneck, the option of the pool *not yet tabled* with the highest
  own score, provided it scores strictly better than the current leader does for this
  agent (it tries to raise itself); ties go to the earlier option. Otherwise it passes.
  A table agent cannot see how the others would score an untabled option, so it does
  not filter on the floor: the protocol's acceptance test does that.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dissensus.concord.agent import AgentIdentity, NegotiationView, Outcome, ScoreFault

__all__ = ["TableAgent"]


class TableAgent(AgentIdentity):
    """An agent whose scores are a fixed table ``outcome id -> raw score``."""

    kind = "table"
    uses_model = False

    def __init__(
        self, agent_id: str, scores: Mapping[str, float], *, timeout: float | None = None
    ) -> None:
        super().__init__(agent_id, timeout=timeout)
        self.table = dict(scores)
        """Raw score per outcome id, on the agent's private scale."""

    async def score(
        self, outcomes: Sequence[Outcome], view: NegotiationView
    ) -> Sequence[float | ScoreFault]:
        result: list[float | ScoreFault] = []
        for outcome in outcomes:
            if outcome.id is None or outcome.id not in self.table:
                result.append(
                    ScoreFault(message=f"no score in the table for outcome {outcome.id!r}")
                )
            else:
                result.append(float(self.table[outcome.id]))
        return result

    def _sign(self, view: NegotiationView) -> float:
        """+1 when higher raw scores are better on this agent's scale, -1 otherwise."""
        rej = view.rejected.id if view.rejected else None
        ideal = view.ideal.id if view.ideal else None
        if rej in self.table and ideal in self.table and rej is not None and ideal is not None:
            return 1.0 if self.table[ideal] >= self.table[rej] else -1.0
        return 1.0

    def _best(self, pool: Sequence[Outcome], above: float | None, sign: float) -> Outcome | None:
        best: Outcome | None = None
        best_score = None if above is None else sign * above
        for option in pool:
            if option.id is None or option.id not in self.table:
                continue
            value = sign * float(self.table[option.id])
            if best_score is None or value > best_score:
                best, best_score = option, value
        return best

    async def propose(self, view: NegotiationView) -> Outcome | None:
        return self._best(view.options, None, self._sign(view))

    async def repair(self, view: NegotiationView) -> Outcome | None:
        leader = view.leader_candidate()
        current = None
        if leader is not None and leader.id in self.table:
            current = float(self.table[leader.id])
        untabled = [o for o in view.options if o.id not in set(view.tabled)]
        return self._best(untabled, current, self._sign(view))
