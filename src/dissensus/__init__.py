"""dissensus: the decision layer for multi-agent LLM systems.

Read a panel's disagreement (:mod:`dissensus.states`), check whether agreement is
evidence (:mod:`dissensus.guard`), negotiate (:mod:`dissensus.concord`), deliberate
(:mod:`dissensus.dci`), or hand the case to a human, always with a verifiable record.
"""

from dissensus.types import AgentOutput, Evidence, Panel, Usage, Vote, VoteCase

__version__ = "0.1.0"

__all__ = ["AgentOutput", "Evidence", "Panel", "Usage", "Vote", "VoteCase", "__version__"]
