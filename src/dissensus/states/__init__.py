"""Disagreement reading and defeasible routing (``docs/states.md``).

A :class:`Reading` of a panel crosses reasoning similarity (how alike the agents'
reasoning traces are) with conclusion agreement (the plurality share) into one of four
states, CA / DA / CD / DD; :func:`route` turns a reading plus case metadata into a
meta-action through defeasible rules.

Example::

    from dissensus.states import RuleSet, Thresholds, get_backend, read_panel, route
    backend = get_backend("tfidf")
    reading = read_panel(panel, backend, Thresholds(theta_s=0.3, theta_a=0.8))
    decision = route(reading, panel.meta, RuleSet.default())
"""

from dissensus.states.reading import (
    DEFAULT_THETA_A,
    DEFAULT_THETA_S,
    Reading,
    State,
    Thresholds,
    read_from_matrix,
    read_panel,
    read_panels,
)
from dissensus.states.routing import Action, Route, RuleId, RuleSet, route
from dissensus.states.similarity import (
    EmbeddingBackend,
    SimilarityBackend,
    callable_backend,
    get_backend,
)
from dissensus.states.theta_fit import ThresholdFit, fit_theta_s, theta_s_at

__all__ = [
    "DEFAULT_THETA_A",
    "DEFAULT_THETA_S",
    "Action",
    "EmbeddingBackend",
    "Reading",
    "Route",
    "RuleId",
    "RuleSet",
    "SimilarityBackend",
    "State",
    "ThresholdFit",
    "Thresholds",
    "callable_backend",
    "fit_theta_s",
    "get_backend",
    "read_from_matrix",
    "read_panel",
    "read_panels",
    "route",
    "theta_s_at",
]
