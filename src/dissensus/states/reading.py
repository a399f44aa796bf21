"""Reading a panel: reasoning similarity x conclusion agreement -> CA / DA / CD / DD (seed 000).

For a panel of agent outputs ``O_i = <r_i, d_i, v_i, gamma_i>`` the reading reports the
pairwise similarity matrix of the reasoning traces, its mean and minimum off-diagonal
value, the plurality decision and the share of voting agents on it. Reasoning is *high*
(convergent) when the mean similarity is at least ``theta_s``; conclusions *agree* when
the plurality share is at least ``theta_a``. The four states:

=====  ==========================  ===================  ==================
value  name                        reasoning            conclusions
=====  ==========================  ===================  ==================
CA     CONVERGENT_AGREEMENT        mean sim >= theta_s  share >= theta_a
DA     DIVERGENT_AGREEMENT         mean sim <  theta_s  share >= theta_a
CD     CONVERGENT_DISAGREEMENT     mean sim >= theta_s  share <  theta_a
DD     DIVERGENT_DISAGREEMENT      mean sim <  theta_s  share <  theta_a
=====  ==========================  ===================  ==================

Choices where the seed is silent:

* Decisions are any categorical labels. ``decision: null`` is an abstention: the
  agent's reasoning still counts for similarity, but it casts no vote, and the
  agreement share is taken among voting agents only.
* Plurality ties: the reported ``decision`` is the smallest tied label in code-point
  order (so it never depends on agent order) and ``tie`` lists every tied label. A tie
  is never an agreement: a tied panel is CD or DD whatever ``theta_a`` is.
* An agreement state needs at least two voting agents; a panel where everyone (or all
  but one) abstained is a disagreement state (its ``agreement`` is 0 when nobody voted).
* ``theta_a`` defaults to 0.8 (at most one dissenter among five). ``theta_s`` has no
  model-free default because raw cosine depends on the model: the defaults in
  :data:`DEFAULT_THETA_S` are the median mean similarity of the 326 LLMBar CoT panels
  (6 judges; Natural, Adversarial/Neighbor, Adversarial/GPTInst) under each built-in
  backend, rounded to two decimals (reproduce with
  ``dissensus calibrate-thresholds PANELS --quantile 0.5``). They are corpus-specific:
  on VariErrNLI's short human explanations the medians are 0.52 (MiniLM) and 0.20
  (TF-IDF), so calibrate on your own corpus. Any other model must be given ``theta_s``
  or calibrated (:mod:`dissensus.states.calibrate`).
* The matrix is symmetrised, clipped to [-1, 1] and has a unit diagonal; byte-identical
  traces have similarity exactly 1. The mean is an exactly rounded sum (``math.fsum``)
  and traces are embedded in a canonical (sorted) order, so the state is invariant to
  the order of the agents.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from enum import StrEnum
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field

from dissensus.errors import ConfigError
from dissensus.states.similarity import EmbeddingBackend, SimilarityBackend
from dissensus.types import Panel

__all__ = [
    "DEFAULT_THETA_A",
    "DEFAULT_THETA_S",
    "Reading",
    "State",
    "Thresholds",
    "read_from_matrix",
    "read_panel",
    "read_panels",
]

DEFAULT_THETA_A = 0.8
"""Default conclusion-agreement threshold: at most one dissenter among five agents."""

DEFAULT_THETA_S: dict[str, float] = {
    "all-MiniLM-L6-v2": 0.86,
    "tfidf": 0.39,
}
"""Default reasoning-similarity threshold per model: median mean similarity on LLMBar CoT."""


class State(StrEnum):
    """The four disagreement states of seed 000."""

    CONVERGENT_AGREEMENT = "CA"
    DIVERGENT_AGREEMENT = "DA"
    CONVERGENT_DISAGREEMENT = "CD"
    DIVERGENT_DISAGREEMENT = "DD"

    @property
    def agreement(self) -> bool:
        """Whether the conclusions agree (CA, DA)."""
        return self in (State.CONVERGENT_AGREEMENT, State.DIVERGENT_AGREEMENT)

    @property
    def convergent(self) -> bool:
        """Whether the reasoning is similar (CA, CD)."""
        return self in (State.CONVERGENT_AGREEMENT, State.CONVERGENT_DISAGREEMENT)

    @classmethod
    def of(cls, *, convergent: bool, agreement: bool) -> State:
        """The state with the given reasoning and conclusion sides."""
        if agreement:
            return cls.CONVERGENT_AGREEMENT if convergent else cls.DIVERGENT_AGREEMENT
        return cls.CONVERGENT_DISAGREEMENT if convergent else cls.DIVERGENT_DISAGREEMENT


class Thresholds(BaseModel):
    """The two cut-offs of a reading."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    theta_s: float = Field(ge=-1.0, le=1.0)
    """Reasoning is convergent when the mean pairwise similarity is >= theta_s."""
    theta_a: float = Field(default=DEFAULT_THETA_A, ge=0.0, le=1.0)
    """Conclusions agree when the plurality share among voters is >= theta_a."""

    @classmethod
    def for_model(
        cls, model: str, theta_s: float | None = None, theta_a: float | None = None
    ) -> Thresholds:
        """Thresholds for ``model``: given values, else the documented defaults."""
        if theta_s is None:
            if model not in DEFAULT_THETA_S:
                raise ConfigError(
                    f"no default theta_s for similarity model {model!r}: give --theta-s "
                    "or derive it with 'dissensus calibrate-thresholds'",
                    field="theta_s",
                )
            theta_s = DEFAULT_THETA_S[model]
        return cls(theta_s=theta_s, theta_a=DEFAULT_THETA_A if theta_a is None else theta_a)


class Reading(BaseModel):
    """What the structure of one panel's disagreement looks like."""

    model_config = ConfigDict(frozen=True)

    id: str
    """The panel's id."""
    state: State
    """CA, DA, CD or DD."""
    decision: str | None
    """Plurality decision (smallest tied label on a tie; ``None`` when nobody voted)."""
    agreement: float
    """Share of voting agents on the plurality decision (0 when nobody voted)."""
    tie: list[str]
    """The tied plurality labels, sorted; empty when the plurality is unique."""
    votes: dict[str, int]
    """Votes per label, labels sorted."""
    abstentions: int
    """Agents with ``decision: null``."""
    mean_similarity: float
    """Mean of the off-diagonal pairwise reasoning similarities."""
    min_similarity: float
    """Smallest off-diagonal pairwise reasoning similarity."""
    agents: list[str]
    """Agent ids in the order of the matrix rows (the panel's order)."""
    matrix: list[list[float]]
    """Pairwise reasoning similarity, symmetric, unit diagonal."""
    model: str
    """The similarity model the reading used."""
    thresholds: Thresholds
    """The thresholds the reading used."""

    @property
    def reasoning_similarity(self) -> float:
        """The seed's reasoning similarity: the mean pairwise similarity."""
        return self.mean_similarity


@lru_cache(maxsize=64)
def _upper(n: int) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    rows, cols = np.triu_indices(n, k=1)
    return rows, cols


def _tally(
    decisions: Sequence[str | None],
) -> tuple[str | None, float, list[str], dict[str, int], int]:
    counts = Counter(d for d in decisions if d is not None)
    voters = sum(counts.values())
    abstentions = len(decisions) - voters
    if voters == 0:
        return None, 0.0, [], {}, abstentions
    top = max(counts.values())
    tied = sorted(label for label, c in counts.items() if c == top)
    votes = {label: counts[label] for label in sorted(counts)}
    return tied[0], top / voters, tied if len(tied) > 1 else [], votes, abstentions


def _build(panel: Panel, sim: NDArray[np.float64], model: str, thresholds: Thresholds) -> Reading:
    """The reading from a symmetric, clipped, unit-diagonal matrix in panel order."""
    outputs = panel.outputs
    rows, cols = _upper(len(outputs))
    upper = sim[rows, cols].tolist()
    mean = math.fsum(upper) / len(upper)
    decision, share, tie, votes, abstentions = _tally([o.decision for o in outputs])
    voters = len(outputs) - abstentions
    agree = not tie and voters >= 2 and share >= thresholds.theta_a
    state = State.of(convergent=mean >= thresholds.theta_s, agreement=agree)
    return Reading.model_construct(
        id=panel.id,
        state=state,
        decision=decision,
        agreement=share,
        tie=tie,
        votes=votes,
        abstentions=abstentions,
        mean_similarity=mean,
        min_similarity=min(upper),
        agents=[o.agent for o in outputs],
        matrix=sim.tolist(),
        model=model,
        thresholds=thresholds,
    )


def _force_identical(panel: Panel, sim: NDArray[np.float64]) -> None:
    """Byte-identical traces have similarity exactly 1 (in place)."""
    groups: dict[str, list[int]] = {}
    for i, out in enumerate(panel.outputs):
        groups.setdefault(out.reasoning, []).append(i)
    if len(groups) == len(panel.outputs):
        return
    for members in groups.values():
        if len(members) > 1:
            sim[np.ix_(members, members)] = 1.0


def read_from_matrix(
    panel: Panel,
    matrix: NDArray[np.floating] | Sequence[Sequence[float]],
    model_name: str,
    thresholds: Thresholds,
) -> Reading:
    """Pure reading from a given pairwise similarity ``matrix`` (rows in panel order).

    The matrix is symmetrised (``(M + M.T) / 2``), clipped to [-1, 1] and given a unit
    diagonal; identical traces get similarity 1.
    """
    n = len(panel.outputs)
    m = np.asarray(matrix, dtype=np.float64)
    if m.shape != (n, n):
        raise ValueError(
            f"similarity matrix of panel {panel.id!r} has shape {m.shape}, expected ({n}, {n})"
        )
    if not np.all(np.isfinite(m)):
        raise ValueError(f"similarity matrix of panel {panel.id!r} has non-finite values")
    sim = np.clip((m + m.T) / 2.0, -1.0, 1.0)
    np.fill_diagonal(sim, 1.0)
    _force_identical(panel, sim)
    return _build(panel, sim, model_name, thresholds)


def _canonical(panel: Panel) -> tuple[list[str], NDArray[np.intp]]:
    """Distinct traces in sorted order, and each agent's index into them."""
    texts = sorted({o.reasoning for o in panel.outputs})
    where = {t: i for i, t in enumerate(texts)}
    return texts, np.fromiter((where[o.reasoning] for o in panel.outputs), dtype=np.intp)


def _expand(unique_sim: NDArray[np.float64], index: NDArray[np.intp]) -> NDArray[np.float64]:
    u = np.clip((unique_sim + unique_sim.T) / 2.0, -1.0, 1.0)
    np.fill_diagonal(u, 1.0)
    full: NDArray[np.float64] = u[np.ix_(index, index)]
    return full


def _resolve(backend: SimilarityBackend, thresholds: Thresholds | None) -> Thresholds:
    return thresholds if thresholds is not None else Thresholds.for_model(backend.name)


def read_panel(
    panel: Panel, backend: SimilarityBackend, thresholds: Thresholds | None = None
) -> Reading:
    """Read one panel with ``backend`` (``thresholds`` default to the model's defaults)."""
    th = _resolve(backend, thresholds)
    texts, index = _canonical(panel)
    return _build(panel, _expand(backend.matrix(texts), index), backend.name, th)


def read_panels(
    panels: Iterable[Panel],
    backend: SimilarityBackend,
    thresholds: Thresholds | None = None,
) -> list[Reading]:
    """Read a batch of panels; an embedding backend embeds each distinct trace once.

    The batch is materialised; stream large inputs in bounded batches.
    """
    batch = list(panels)
    th = _resolve(backend, thresholds)
    if not isinstance(backend, EmbeddingBackend):
        return [read_panel(p, backend, th) for p in batch]
    distinct = sorted({o.reasoning for p in batch for o in p.outputs})
    if not distinct:
        return []
    rows = backend.embed(distinct).astype(np.float64, copy=False)
    position = {t: i for i, t in enumerate(distinct)}
    readings: list[Reading] = []
    for panel in batch:
        texts, index = _canonical(panel)
        sub = rows[[position[t] for t in texts]]
        readings.append(_build(panel, _expand(sub @ sub.T, index), backend.name, th))
    return readings
