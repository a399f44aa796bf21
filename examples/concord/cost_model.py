"""A cost model as a CONCORD function agent: monthly dollars, lower is better.

The agent reads a plan's words and adds up what each measure it recognises costs per
month. Its private scale runs downwards: the rejected anchor (losing checkout sales) is
20000 dollars a month, the ideal (nothing to pay) is 0.
"""

from __future__ import annotations

from dissensus.concord.agent import NegotiationView, Outcome

REJECTED = 20000.0
IDEAL = 0.0

COSTS = {
    "edge cache": 2000.0,
    "static assets": 3000.0,
    "waf": 5000.0,
    "app servers": 12000.0,
    "read replica": 2000.0,
}


def score(outcome: Outcome, view: NegotiationView) -> float:
    """Monthly cost of the plan in dollars."""
    if view.rejected is not None and outcome.id == view.rejected.id:
        return REJECTED
    if view.ideal is not None and outcome.id == view.ideal.id:
        return IDEAL
    text = outcome.text.lower()
    hits = [cost for phrase, cost in COSTS.items() if phrase in text]
    if not hits:
        raise ValueError("no costed measure in this plan")
    return min(REJECTED, sum(hits))
