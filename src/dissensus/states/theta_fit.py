"""Fitting theta_s to a reference corpus (``docs/states.md``).

Absolute cosine values depend on the embedding model, so a fixed theta_s means different
things under different models. The fit fixes it from data instead: theta_s is the
``quantile`` of the per-panel mean reasoning similarity over a reference corpus, so that
(for example) ``quantile=0.5`` calls the more similar half of the corpus convergent.

Choices this module makes:

* The statistic is the per-panel *mean* pairwise similarity, the same quantity the
  reader compares with theta_s.
* Quantiles use linear interpolation between order statistics (numpy's default), so
  the result is deterministic and lies within the observed range.
* Panels are read in batches of ``batch_size`` (distinct traces embedded once per
  batch); only one float per panel is kept, never the panels themselves.
* A panel whose similarity is undefined (fewer than two agents gave reasoning,
  ``similarity_defined`` false) has no mean similarity: it is left out of the fit, not
  counted as 0.0. ``panels`` counts the panels fitted on, ``undefined_similarity`` the
  panels left out; a corpus with no panel of defined similarity is an
  :class:`~dissensus.errors.InputError` (exit 2), like an empty one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from itertools import islice

import numpy as np
from pydantic import BaseModel, ConfigDict

from dissensus.errors import ConfigError, InputError
from dissensus.states.reading import DEFAULT_THETA_A, Thresholds, read_panels
from dissensus.states.similarity import SimilarityBackend
from dissensus.types import PanelLike

__all__ = ["ThresholdFit", "fit_theta_s", "mean_similarities", "theta_s_at"]


class ThresholdFit(BaseModel):
    """The outcome of a calibration run."""

    model_config = ConfigDict(frozen=True)

    model: str
    """The similarity model calibrated."""
    quantile: float
    """The quantile of per-panel mean similarity taken."""
    theta_s: float
    """The calibrated reasoning-similarity threshold."""
    panels: int
    """Number of reference panels fitted on (those with a defined similarity)."""
    undefined_similarity: int = 0
    """Panels left out because their similarity is undefined (fewer than two agents
    gave reasoning)."""
    min_similarity: float
    """Smallest per-panel mean similarity in the corpus."""
    median_similarity: float
    """Median per-panel mean similarity."""
    max_similarity: float
    """Largest per-panel mean similarity."""


def _batches(items: Iterable[PanelLike], size: int) -> Iterator[list[PanelLike]]:
    it = iter(items)
    while batch := list(islice(it, size)):
        yield batch


def mean_similarities(
    panels: Iterable[PanelLike], backend: SimilarityBackend, batch_size: int = 256
) -> list[float | None]:
    """Per-panel mean reasoning similarity, in input order; ``None`` for a panel whose
    similarity is undefined (fewer than two agents gave reasoning)."""
    # theta_s is irrelevant for the mean; any value lets the reader run without defaults.
    th = Thresholds(theta_s=0.0, theta_a=DEFAULT_THETA_A)
    out: list[float | None] = []
    for batch in _batches(panels, batch_size):
        out.extend(
            r.mean_similarity if r.similarity_defined else None
            for r in read_panels(batch, backend, th)
        )
    return out


def fit_theta_s(
    panels: Iterable[PanelLike],
    backend: SimilarityBackend,
    quantile: float,
    batch_size: int = 256,
    *,
    source: str | None = None,
) -> ThresholdFit:
    """Calibrate theta_s at ``quantile`` (in [0, 1]) of per-panel mean similarity.

    Panels whose similarity is undefined are left out (``undefined_similarity``);
    ``source`` (the corpus file) prefixes the error when no panel is left to fit on.
    """
    if math.isnan(quantile) or not 0.0 <= quantile <= 1.0:
        raise ConfigError(f"quantile must lie in [0, 1], got {quantile}", field="quantile")
    means = mean_similarities(panels, backend, batch_size)
    sims = np.asarray([m for m in means if m is not None], dtype=np.float64)
    where = f"{source}: " if source else ""
    if not means:
        raise InputError(f"{where}cannot fit theta_s on an empty corpus")
    if sims.size == 0:
        raise InputError(
            f"{where}cannot fit theta_s: none of the {len(means)} panels has a defined "
            "reasoning similarity (each needs at least two agents that gave reasoning)"
        )
    return ThresholdFit(
        model=backend.name,
        quantile=quantile,
        theta_s=float(np.quantile(sims, quantile)),
        panels=int(sims.size),
        undefined_similarity=len(means) - int(sims.size),
        min_similarity=float(sims.min()),
        median_similarity=float(np.median(sims)),
        max_similarity=float(sims.max()),
    )


def theta_s_at(panels: Iterable[PanelLike], backend: SimilarityBackend, quantile: float) -> float:
    """theta_s at ``quantile`` of the corpus' per-panel mean similarity."""
    return fit_theta_s(panels, backend, quantile).theta_s
