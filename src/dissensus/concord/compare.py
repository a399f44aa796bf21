"""CONCORD against other decision rules on identical scores (seed 002, comparison).

The classic rules (:mod:`dissensus.baselines.decision_rules`) pick among the opening
proposals recorded in a certificate, using the very calibrated scores CONCORD used; the
CONCORD row is the certificate itself. :func:`score_outcome` has every covered agent
score one extra outcome (an arbiter's written plan) and calibrates it against the
anchors recorded in the certificate; those calls are outside the run's bound and a
faulty or out-of-range answer counts 0, as in the protocol.

Rows are ordered by worst-off score, highest first; ties keep the order
CONCORD, LLM writes, LLM picks, owner decides, best average, majority vote, unanimity;
a rule that committed nothing comes last.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from dissensus.agents.negotiator import NegotiationAgent, NegotiationView, Outcome
from dissensus.baselines.decision_rules import (
    RuleResult,
    best_average,
    judge,
    majority_vote,
    owner_decides,
    unanimity,
)
from dissensus.concord.calibration import calibrate, in_range
from dissensus.concord.record import Certificate

__all__ = ["RULE_ORDER", "compare_rules", "opening", "order_rows", "score_outcome"]

RULE_ORDER = (
    "CONCORD",
    "LLM writes a plan",
    "LLM picks a plan",
    "Owner decides",
    "Best average",
    "Majority vote",
    "Unanimity required",
)


def opening(cert: Certificate) -> tuple[list[tuple[str, str]], dict[str, dict[str, float]]]:
    """The opening proposals (id, text) and the calibrated score matrix of every candidate."""
    options = [(c.id, c.text) for c in cert.candidates if c.round == 1]
    matrix = {c.id: {a: e.calibrated for a, e in c.scores.items()} for c in cert.candidates}
    return options, matrix


def concord_row(cert: Certificate) -> RuleResult:
    scores = {a: s.calibrated for a, s in cert.scores.items() if s.calibrated is not None}
    row = judge(
        "CONCORD",
        cert.selected.id if cert.selected else None,
        scores if cert.selected else None,
        cert.covered,
        cert.floor,
        note=cert.status,
        empty="no candidate",
    )
    return row


def compare_rules(cert: Certificate, owner: str | None = None) -> list[RuleResult]:
    """CONCORD and the classic rules on the certificate's scores."""
    options, matrix = opening(cert)
    ids = [o for o, _ in options]
    agents = cert.covered
    owner_id = owner if owner is not None else agents[0]
    own = next((c.id for c in cert.candidates if c.round == 1 and c.author == owner_id), None)
    rows = [
        concord_row(cert),
        owner_decides(owner_id, own, matrix, agents, cert.floor),
        best_average(ids, matrix, agents, cert.floor),
        majority_vote(ids, matrix, agents, cert.floor),
        unanimity(ids, matrix, agents, cert.floor),
    ]
    return order_rows(rows)


def order_rows(rows: Sequence[RuleResult]) -> list[RuleResult]:
    def key(row: RuleResult) -> tuple[int, float, int]:
        rank = RULE_ORDER.index(row.strategy) if row.strategy in RULE_ORDER else len(RULE_ORDER)
        if row.worst_off is None:
            return (1, 0.0, rank)
        return (0, -row.worst_off, rank)

    return sorted(rows, key=key)


async def score_outcome(
    agents: Mapping[str, NegotiationAgent], cert: Certificate, text: str
) -> dict[str, float]:
    """Calibrated score of one extra outcome by every covered agent (faults count 0)."""
    outcome = Outcome(id="written", text=text)
    result: dict[str, float] = {}
    for agent_id in cert.covered:
        anchors = cert.scores[agent_id].anchors
        agent = agents.get(agent_id)
        if agent is None or anchors.rejected is None or anchors.ideal is None:
            result[agent_id] = 0.0
            continue
        view = NegotiationView(
            agent=agent_id,
            phase="score",
            round=0,
            floor=cert.floor,
            margin=cert.margin,
            agents=list(cert.covered),
        )
        try:
            (raw,) = await agent.score([outcome], view)
        except Exception:  # an agent's failure scores 0, as in the protocol
            result[agent_id] = 0.0
            continue
        ok = (
            isinstance(raw, int | float)
            and math.isfinite(raw)
            and in_range(raw, anchors.rejected, anchors.ideal)
        )
        result[agent_id] = calibrate(raw, anchors.rejected, anchors.ideal) if ok else 0.0
    return result
