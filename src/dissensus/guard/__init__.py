"""Guard for consensus-weighted voting (``docs/guard.md``).

Agreement among voters that share a model, an index or a prompt is not evidence.
:func:`guard_votes` checks the three invariants of the correlated-hallucination study on one case's votes and decides by
consensus weighting, bounded weighting, unweighted majority or a single verifier,
with an explained refusal when weighting is unsafe. :func:`fit_reliability` measures on a
labelled set what the guard needs: strata, beta*, reliabilities, error correlations
and the effective number of independent voters. :mod:`dissensus.guard.arrays` is the
vectorised array API (majority, consensus weighting, Wawa) for throughput.
"""

from dissensus.deprecation import deprecated_names, renamed
from dissensus.guard.arrays import (
    agreement_fraction,
    consensus_weighted_vote,
    encode_labels,
    majority_vote,
    wawa,
)
from dissensus.guard.confidence import Posterior, PriorSettings, posterior
from dissensus.guard.decision import (
    GuardDecision,
    GuardThresholds,
    InvariantCheck,
    Mode,
    Refusal,
    guard_case,
    guard_cases,
    guard_votes,
)
from dissensus.guard.errors import CorrelatedConsensusError
from dissensus.guard.reliability import ReliabilityFit, ReliabilitySettings, fit_reliability
from dissensus.guard.votes import panel_votes

_DEPRECATED = {
    "Calibration": "ReliabilityFit",
    "CalibrationSettings": "ReliabilitySettings",
    "GuardSettings": "GuardThresholds",
    "calibrate": "fit_reliability",
    "audit": "guard_votes",
    "audit_case": "guard_case",
    "audit_many": "guard_cases",
}
"""Earlier names of the reliability fit and of the guard's thresholds: still importable,
with a :class:`DeprecationWarning` naming the current one. Nothing in the package uses
them (a ruff banned-API rule in ``pyproject.toml``); ``GuardSettings`` is the policy's
``guard:`` section (:class:`dissensus.pipeline.policy.GuardSettings`), not these thresholds.
An *audit* is a reviewer's blind check of an automatic commit
(:mod:`dissensus.pipeline.audit`); the guard's check of one case's votes is
:func:`guard_votes`."""


__getattr__ = deprecated_names(__name__, renamed(__name__, globals(), _DEPRECATED))


__all__ = [
    "CorrelatedConsensusError",
    "GuardDecision",
    "GuardThresholds",
    "InvariantCheck",
    "Mode",
    "Posterior",
    "PriorSettings",
    "Refusal",
    "ReliabilityFit",
    "ReliabilitySettings",
    "agreement_fraction",
    "consensus_weighted_vote",
    "encode_labels",
    "fit_reliability",
    "guard_case",
    "guard_cases",
    "guard_votes",
    "majority_vote",
    "panel_votes",
    "posterior",
    "wawa",
]
