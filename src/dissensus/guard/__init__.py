"""Guard for consensus-weighted voting (seed 003, DESIGN §3).

Agreement among voters that share a model, an index or a prompt is not evidence.
:func:`audit` checks the seed's three invariants on one case's votes and decides by
consensus weighting, bounded weighting, unweighted majority or a single verifier,
with an explained refusal when weighting is unsafe. :func:`calibrate` measures on a
labelled set what the guard needs: strata, beta*, reliabilities, error correlations
and the effective number of independent voters. :mod:`dissensus.guard.arrays` is the
vectorised array API (majority, consensus weighting, Wawa) for throughput.
"""

from dissensus.guard.arrays import (
    agreement_fraction,
    consensus_weighted_vote,
    encode_labels,
    majority_vote,
    wawa,
)
from dissensus.guard.calibration import Calibration, CalibrationSettings, calibrate
from dissensus.guard.confidence import Posterior, PriorSettings, posterior
from dissensus.guard.decision import (
    GuardDecision,
    GuardSettings,
    InvariantCheck,
    Mode,
    Refusal,
    audit,
    audit_case,
    audit_many,
)
from dissensus.guard.errors import CorrelatedConsensusError

__all__ = [
    "Calibration",
    "CalibrationSettings",
    "CorrelatedConsensusError",
    "GuardDecision",
    "GuardSettings",
    "InvariantCheck",
    "Mode",
    "Posterior",
    "PriorSettings",
    "Refusal",
    "agreement_fraction",
    "audit",
    "audit_case",
    "audit_many",
    "calibrate",
    "consensus_weighted_vote",
    "encode_labels",
    "majority_vote",
    "posterior",
    "wawa",
]
