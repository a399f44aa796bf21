"""Learned acceptance with a finite-sample guarantee: may the pipeline commit this case?

* :mod:`~dissensus.acceptance.features` — decision-time features, one row per candidate.
* :mod:`~dissensus.acceptance.fit` — logistic model (scikit-learn), cross-fitted scores.
* :mod:`~dissensus.acceptance.bound` — fixed-sequence testing with Clopper–Pearson bounds.
* :mod:`~dissensus.acceptance.file` — the ``ACCEPT.json`` format, its hash, load/save.
* :mod:`~dissensus.acceptance.calibrate` — calibrate on labelled cases, apply to one case.
* :mod:`~dissensus.acceptance.families` — score families and the valid choice among them.
* :mod:`~dissensus.acceptance.shift` — the label-free shift check (classifier two-sample test).

Requires scikit-learn and scipy (the ``accept`` extra); importing this package without
them raises a :class:`~dissensus.errors.ConfigError` saying how to install them.
"""

from __future__ import annotations

from dissensus.acceptance import _requires  # noqa: F401  (first: says when the extra is missing)
from dissensus.acceptance.bound import (
    StratumFigures,
    ThresholdChoice,
    clopper_pearson_upper,
    fewest_tested,
    select_threshold,
)
from dissensus.acceptance.calibrate import (
    AcceptanceVerdict,
    apply_acceptance,
    calibrate,
    library_versions,
    model_for,
    stratum_of,
)
from dissensus.acceptance.families import FAMILIES, FamilyFigures, select_family
from dissensus.acceptance.features import (
    Candidate,
    FeatureInputs,
    ReasoningSimilarity,
    candidate_rows,
    feature_inputs,
)
from dissensus.acceptance.file import (
    ACCEPTANCE_FORMAT,
    AcceptanceFile,
    FeatureSettings,
    canonical_hash,
    load_acceptance,
    read_acceptance,
    save_acceptance,
    validate_acceptance,
)
from dissensus.acceptance.fit import (
    CrossFit,
    LogisticModel,
    case_key,
    crossfit,
    crossfit_scores,
    fit_model,
    fold_index,
    fold_of_key,
    score_case,
)
from dissensus.acceptance.shift import ShiftCheck, ShiftReference, shift_check
from dissensus.deprecation import deprecated_names, renamed

__all__ = [
    "ACCEPTANCE_FORMAT",
    "FAMILIES",
    "AcceptanceFile",
    "AcceptanceVerdict",
    "Candidate",
    "CrossFit",
    "FamilyFigures",
    "FeatureInputs",
    "FeatureSettings",
    "LogisticModel",
    "ReasoningSimilarity",
    "ShiftCheck",
    "ShiftReference",
    "StratumFigures",
    "ThresholdChoice",
    "apply_acceptance",
    "calibrate",
    "candidate_rows",
    "canonical_hash",
    "case_key",
    "clopper_pearson_upper",
    "crossfit",
    "crossfit_scores",
    "feature_inputs",
    "fewest_tested",
    "fit_model",
    "fold_index",
    "fold_of_key",
    "library_versions",
    "load_acceptance",
    "model_for",
    "read_acceptance",
    "save_acceptance",
    "score_case",
    "select_family",
    "select_threshold",
    "shift_check",
    "stratum_of",
    "validate_acceptance",
]

_RENAMED = {"CaseInput": "FeatureInputs", "case_input": "feature_inputs"}
"""Earlier names, importable with a :class:`DeprecationWarning`: ``CaseInput`` is the
pipeline's journalled case (:class:`dissensus.pipeline.steps.CaseInput`)."""


__getattr__ = deprecated_names(__name__, renamed(__name__, globals(), _RENAMED))
