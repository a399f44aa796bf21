"""The negotiation agent protocol, under its earlier import path.

The interface lives with CONCORD (:mod:`dissensus.concord.agent`); this module keeps
``from dissensus.agents.negotiator import Outcome`` working for function-agent files.
"""

from __future__ import annotations

from dissensus.concord.agent import (
    AgentIdentity,
    AgentKind,
    NegotiationAgent,
    NegotiationView,
    Outcome,
    ScoredCandidate,
)

__all__ = [
    "AgentIdentity",
    "AgentKind",
    "NegotiationAgent",
    "NegotiationView",
    "Outcome",
    "ScoredCandidate",
]
