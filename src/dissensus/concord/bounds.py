"""The cost bound, computable before the run (CONCORD, ``docs/concord.md``).

With ``n`` negotiating agents and a round budget of ``R`` repair rounds:

* rounds <= R;
* candidates <= n + R (one proposal per agent, then one repair per round);
* evaluations <= n * (n + R) (every agent scores every candidate);
* model calls <= n (anchor scoring) + n (proposals) + R (repairs) + n * (R + 1)
  (scoring sweeps: one call per agent for the opening proposals, then one per repair).

``n = 5, R = 6`` gives 6 rounds, 11 candidates, 55 evaluations and 51 model calls, the
published figures. Anchor scoring is not an evaluation (anchors are never candidates);
it is counted among the model calls. Model calls are the calls an LLM agent makes (one
logical call per request); retries and re-asks are reported apart as attempts.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from dissensus.errors import ConfigError

__all__ = ["Bound", "compute_bound"]


class Bound(BaseModel):
    """Worst-case spend of one run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rounds: int
    """Repair rounds."""
    candidates: int
    """Candidates tabled."""
    evaluations: int
    """Agent x candidate scores."""
    model_calls: int
    """Logical model calls if every agent were an LLM agent."""


def compute_bound(agents: int, rounds: int) -> Bound:
    """The bound for ``agents`` negotiating agents and a budget of ``rounds`` repair rounds."""
    if agents < 0 or rounds < 0:
        raise ConfigError("agents and rounds must be non-negative")
    n, r = agents, rounds
    return Bound(
        rounds=r,
        candidates=n + r,
        evaluations=n * (n + r),
        model_calls=n + n + r + n * (r + 1),
    )
