"""CONCORD: maximin negotiation over calibrated satisfaction, with verifiable certificates.

See ``docs/concord.md``. Agents that are each right from their own role reach one
decision: anchors calibrate every private scale onto one bar, every agent proposes and
scores, the selection rule picks a leader, the least-satisfied agent repairs, and the run
commits a certificate when every agent clears the floor or reports the shortfall. The
cost bound is known before the run and reconciled at its close.

>>> from dissensus.concord import compute_bound
>>> compute_bound(5, 6).model_dump()
{'rounds': 6, 'candidates': 11, 'evaluations': 55, 'model_calls': 51}
"""

from dissensus.concord.agent import NegotiationAgent, NegotiationView, Outcome, ScoreFault
from dissensus.concord.bounds import Bound, compute_bound
from dissensus.concord.function import FunctionAgent
from dissensus.concord.problem import (
    Problem,
    load_problem,
    negotiation_for,
    parse_problem,
)
from dissensus.concord.protocol import Negotiation, negotiate, negotiate_sync
from dissensus.concord.record import Certificate
from dissensus.concord.rules import RULES, SelectionRule
from dissensus.concord.table import TableAgent
from dissensus.concord.verify import Verdict, verify

__all__ = [
    "RULES",
    "Bound",
    "Certificate",
    "FunctionAgent",
    "Negotiation",
    "NegotiationAgent",
    "NegotiationView",
    "Outcome",
    "Problem",
    "ScoreFault",
    "SelectionRule",
    "TableAgent",
    "Verdict",
    "compute_bound",
    "load_problem",
    "negotiate",
    "negotiate_sync",
    "negotiation_for",
    "parse_problem",
    "verify",
]
