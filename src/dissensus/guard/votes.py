"""A panel's votes as the guard reads them: one per voting agent, with its provenance.

The guard checks :class:`~dissensus.types.Vote` lists; a pipeline run, the acceptance
features and the integrations all start from a :class:`~dissensus.types.Panel`, and
read its votes through this one function so that they audit the same votes.

Choices this module makes: an agent without a decision (an abstention) casts
no vote; a vote's provenance is the agent's first evidence item that was present and
is not a model's own memory (``parametric``, ``parametric:*``), else its first item that
was present, else its first item: an agent that also consulted an index is read from
the index, whatever the order of its items. A vote from a parametric item alone is a
vote without evidence to the guard, even marked present
(:func:`~dissensus.guard.provenance.has_evidence`). An agent that consulted no evidence
votes from ``parametric:<family or agent>``, which the guard never counts as a source. The votes
of a validated panel are built without validating them again (their fields are the
outputs' own, already checked).
"""

from __future__ import annotations

from typing import Any

from dissensus.guard.provenance import is_parametric
from dissensus.types import AgentOutput, Panel, Vote, trusted

__all__ = ["panel_votes"]


def panel_votes(panel: Panel) -> list[Vote]:
    """The guard's votes for a panel: one per voting agent, with its evidence provenance.

    An agent that consulted no evidence votes from ``parametric:<family or agent>``.
    """
    votes: list[Vote] = []
    for out in panel.outputs:
        if out.decision is None:
            continue
        evidence = out.evidence
        if evidence:
            present = [e for e in evidence if e.present]
            found = [e for e in present if not is_parametric(e.source)]
            source = (found or present or evidence)[0].source
        else:
            present = []
            source = f"parametric:{out.family or out.agent}"
        values: dict[str, Any] = {
            "agent": out.agent,
            "answer": out.decision,
            "evidence_source": source,
            "evidence_present": bool(present),
            "confidence": out.confidence,
            "family": out.family,
        }
        # A validated output's fields are valid vote fields (the source is an evidence
        # item's, or built from the family or agent): no second validation.
        votes.append(trusted(Vote, values) if out.__class__ is AgentOutput else Vote(**values))
    return votes
