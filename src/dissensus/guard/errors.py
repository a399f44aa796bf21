"""The guard's typed error (``docs/guard.md``): refusal raised instead of returned, in strict mode.

The correlated-hallucination study raises ``CorrelatedConsensusError`` whenever consensus weighting is unsafe. In
dissensus a refusal is an explained outcome (:class:`~dissensus.guard.decision.GuardDecision`
with ``refusal`` set); only strict mode raises, carrying the decision so that the
caller still sees the failed invariant and its figures.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dissensus.errors import DissensusError

if TYPE_CHECKING:
    from dissensus.guard.decision import GuardDecision

__all__ = ["CorrelatedConsensusError"]


class CorrelatedConsensusError(DissensusError):
    """Consensus weighting was requested on voters whose agreement is not evidence."""

    exit_code = 1

    def __init__(self, message: str, decision: GuardDecision | None = None) -> None:
        super().__init__(message)
        self.decision = decision
