"""Reading a panel: reasoning similarity x conclusion agreement -> CA / DA / CD / DD (``docs/states.md``).

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

Choices this module makes:

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
  or calibrated (:mod:`dissensus.states.theta_fit`).
* An agent with empty (or blank) reasoning has no reasoning vector: its pairs are left
  out of the mean and the minimum (and hold 0.0 in the matrix), and the reading names
  it in ``missing_reasoning``. When fewer than two agents gave reasoning, similarity is
  undefined (``similarity_defined`` false, mean and minimum reported as 0.0) and the
  panel is routed by agreement alone: it reads as divergent (DA or DD), because
  convergence is a claim the texts would have to support.
* The matrix is symmetric, clipped to [-1, 1] and has a unit diagonal; byte-identical
  traces have similarity exactly 1. Each pair's similarity is computed from the two
  traces alone (embedding backends: the float64 dot product of their two rows, summed
  along the dimensions in one fixed order, and products commute exactly, so the same two
  traces give the same bits in any order and any batch; matrix backends: called on the panel's distinct traces in sorted order), and
  the mean is an exactly rounded sum (``math.fsum``), so the reading is invariant to
  the order of the agents and, for embedding backends, to the rest of the batch.
* A backend whose matrix or embeddings hold NaN or infinity fails the reading with a
  :class:`~dissensus.errors.DissensusError` naming it (exit 1), as a matrix given to
  :func:`read_from_matrix` does (an ``InputError`` there): a NaN similarity compares
  false with ``theta_s`` and would otherwise read as divergent, with a NaN mean.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from enum import StrEnum
from functools import lru_cache
from itertools import chain
from operator import attrgetter

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field

from dissensus.cases import as_panel
from dissensus.errors import ConfigError, DissensusError, InputError
from dissensus.io.limits import MAX_AGENTS
from dissensus.quoting import quote_short
from dissensus.states.similarity import EmbeddingBackend, SimilarityBackend, backend_key, embeds
from dissensus.types import OutputLike, PanelLike, trusted

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
    "static-all-MiniLM-L6-v2": 0.87,
}
"""Default reasoning-similarity threshold per model: median mean similarity on LLMBar CoT."""


class State(StrEnum):
    """The four disagreement states (``docs/states.md``)."""

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

    @classmethod
    def for_similarity(
        cls, similarity: str | None, theta_s: float | None = None, theta_a: float | None = None
    ) -> Thresholds:
        """:meth:`for_model` of the backend the name ``similarity`` makes, whatever its
        spelling (:func:`~dissensus.states.similarity.backend_key`), without loading it:
        the thresholds a reader with that backend uses."""
        from dissensus.states.encoder import MINILM_NAME
        from dissensus.states.static import STATIC_NAME

        key = backend_key(similarity)
        model = {"minilm": MINILM_NAME, "static": STATIC_NAME}.get(key, key)
        return cls.for_model(model, theta_s, theta_a)


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
    missing_reasoning: list[str] = Field(default_factory=list)
    """Agents that gave no reasoning (left out of the similarity), in panel order."""
    similarity_defined: bool = True
    """False when fewer than two agents gave reasoning: similarity was not measured."""

    @property
    def reasoning_similarity(self) -> float:
        """The disagreement-states paper's reasoning similarity: the mean pairwise similarity."""
        return self.mean_similarity


_STATES = {
    (convergent, agreement): State.of(convergent=convergent, agreement=agreement)
    for convergent in (False, True)
    for agreement in (False, True)
}
"""State.of as a table, for the hot path."""


@lru_cache(maxsize=64)
def _upper(n: int) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    rows, cols = np.triu_indices(n, k=1)
    return rows, cols


@lru_cache(maxsize=64)
def _pairs(n: int) -> tuple[tuple[int, int], ...]:
    """The pairs ``(i, j)``, ``i < j``, in row-major order (the order of ``_upper``)."""
    return tuple((i, j) for i in range(n) for j in range(i + 1, n))


def _tally(
    decisions: Sequence[str | None],
) -> tuple[str | None, float, list[str], dict[str, int], int]:
    counts: dict[str, int] = {}
    abstentions = 0
    for d in decisions:
        if d is None:
            abstentions += 1
        elif d in counts:
            counts[d] += 1
        else:
            counts[d] = 1
    if not counts:
        return None, 0.0, [], {}, abstentions
    voters = len(decisions) - abstentions
    if len(counts) == 1:  # unanimity among voters (the common case): share exactly 1.0
        ((label, top),) = counts.items()
        return label, top / voters, [], {label: top}, abstentions
    top = max(counts.values())
    labels = sorted(counts)
    tied = [label for label in labels if counts[label] == top]
    votes = {label: counts[label] for label in labels}
    return tied[0], top / voters, tied if len(tied) > 1 else [], votes, abstentions


def _square(upper: list[float], n: int) -> list[list[float]]:
    """The symmetric unit-diagonal matrix with the given upper triangle."""
    matrix = [[1.0] * n for _ in range(n)]
    for (i, j), value in zip(_pairs(n), upper, strict=True):
        matrix[i][j] = value
        matrix[j][i] = value
    return matrix


def _build(
    panel: PanelLike,
    upper: list[float],
    model: str,
    thresholds: Thresholds,
    matrix: list[list[float]] | None = None,
) -> Reading:
    """The reading from the upper-triangle similarities (row-major, panel order)."""
    outputs = panel.outputs
    n = len(outputs)
    agents: list[str] = []
    decisions: list[str | None] = []
    missing: list[str] = []
    for o in outputs:
        agents.append(o.agent)
        decisions.append(o.decision)
        if not o.reasoning.strip():
            missing.append(o.agent)
    sims = upper
    if missing:
        has = [bool(o.reasoning.strip()) for o in outputs]
        keep = [has[i] and has[j] for i, j in _pairs(n)]
        upper = [v if k else 0.0 for v, k in zip(upper, keep, strict=True)]
        sims = [v for v, k in zip(upper, keep, strict=True) if k]
        matrix = _square(upper, n)
    elif matrix is None:
        matrix = _square(upper, n)
    defined = bool(sims)
    mean = math.fsum(sims) / len(sims) if defined else 0.0
    decision, share, tie, votes, abstentions = _tally(decisions)
    agree = not tie and n - abstentions >= 2 and share >= thresholds.theta_a
    convergent = defined and mean >= thresholds.theta_s
    values = {
        "id": panel.id,
        "state": _STATES[convergent, agree],
        "decision": decision,
        "agreement": share,
        "tie": tie,
        "votes": votes,
        "abstentions": abstentions,
        "mean_similarity": mean,
        "min_similarity": min(sims) if defined else 0.0,
        "agents": agents,
        "matrix": matrix,
        "model": model,
        "thresholds": thresholds,
        "missing_reasoning": missing,
        "similarity_defined": defined,
    }
    # Every value above is already of its field's type: skip validation (hot path).
    return trusted(Reading, values)


def _identical_to_one(panel: PanelLike, upper: list[float]) -> list[float]:
    """Byte-identical traces have similarity exactly 1."""
    texts = [o.reasoning for o in panel.outputs]
    if len(set(texts)) == len(texts):
        return upper
    return [
        1.0 if texts[i] == texts[j] else v
        for (i, j), v in zip(_pairs(len(texts)), upper, strict=True)
    ]


def read_from_matrix(
    panel: PanelLike,
    matrix: NDArray[np.floating] | Sequence[Sequence[float]],
    model_name: str,
    thresholds: Thresholds,
) -> Reading:
    """Pure reading from a given pairwise similarity ``matrix`` (rows in panel order).

    The matrix is symmetrised (``(M + M.T) / 2``) and clipped to [-1, 1]; the diagonal
    is ignored (taken as 1); identical traces get similarity 1. A matrix of the wrong
    shape or with non-finite values is an :class:`~dissensus.errors.InputError`.
    """
    n = len(panel.outputs)
    m = np.asarray(matrix, dtype=np.float64)
    if m.shape != (n, n):
        raise InputError(
            f"similarity matrix of panel {panel.id!r} has shape {m.shape}, expected ({n}, {n})"
        )
    if not np.all(np.isfinite(m)):
        raise InputError(f"similarity matrix of panel {panel.id!r} has non-finite values")
    rows, cols = _upper(n)
    upper = np.clip((m[rows, cols] + m[cols, rows]) / 2.0, -1.0, 1.0).tolist()
    return _build(panel, _identical_to_one(panel, upper), model_name, thresholds)


def _non_finite(backend: SimilarityBackend) -> DissensusError:
    """A backend that returned NaN or infinity: a run-time failure naming it (a NaN
    similarity would compare false with theta_s and read as divergent in silence)."""
    return DissensusError(
        f"similarity backend {backend.name!r} returned non-finite values (NaN or infinity)"
    )


def _resolve(backend: SimilarityBackend, thresholds: Thresholds | None) -> Thresholds:
    return thresholds if thresholds is not None else Thresholds.for_model(backend.name)


def _read_with_matrix(panel: PanelLike, backend: SimilarityBackend, th: Thresholds) -> Reading:
    """Matrix backends: the distinct traces in sorted order, so agent order cannot matter."""
    texts = sorted({o.reasoning for o in panel.outputs if o.reasoning.strip()})
    n = len(panel.outputs)
    if not texts:  # nobody gave reasoning: similarity undefined (see _build)
        return _build(panel, [0.0] * len(_pairs(n)), backend.name, th)
    where = {t: i for i, t in enumerate(texts)}
    u = np.asarray(backend.matrix(texts), dtype=np.float64)
    if u.shape != (len(texts), len(texts)):
        raise ConfigError(
            f"similarity backend {backend.name!r} returned a matrix of shape {u.shape}"
        )
    if not np.logical_and.reduce(np.isfinite(u), axis=None):  # ``.all()``, no wrapper
        raise _non_finite(backend)
    # A blank trace maps to row 0; _build leaves its pairs out.
    index = [where.get(o.reasoning, 0) for o in panel.outputs]
    cells = u.tolist()  # the same floats as float(u[a, b]), converted at once
    upper: list[float] = []
    for i, j in _pairs(len(index)):
        a, b = index[i], index[j]
        if a == b:
            upper.append(1.0)
            continue
        # ``clip_unit((u + u.T) / 2.0)`` at the pair's cell, in float64 as there.
        v = (cells[a][b] + cells[b][a]) / 2.0
        upper.append(-1.0 if v < -1.0 else 1.0 if v > 1.0 else v)
    return _build(panel, upper, backend.name, th)


def _pair_similarities(
    rows: NDArray[np.float64] | NDArray[np.float32], index: NDArray[np.intp], n: int
) -> NDArray[np.float64]:
    """Upper-triangle cosines for panels of ``n`` agents (``index``: one row per panel).

    The panels' rows are gathered once (float32 rows widened exactly to float64), then
    each pair position ``(i, j)`` is one ``einsum`` over all panels. A pair's value is
    the float64 dot product of its two rows summed along the dimensions in a fixed order;
    the products commute exactly, so it depends only on the two traces, never on agent
    order or the rest of the batch (property-tested against the per-panel reference).
    """
    r, c = _upper(n)
    gathered = rows[index].astype(np.float64, copy=False)  # (panels, n, dim)
    values = np.empty((index.shape[0], len(r)), dtype=np.float64)
    for k, (i, j) in enumerate(_pairs(n)):
        np.einsum("pd,pd->p", gathered[:, i], gathered[:, j], out=values[:, k])
    np.clip(values, -1.0, 1.0, out=values)
    values[index[:, r] == index[:, c]] = 1.0
    return values


def read_panel(
    panel: PanelLike, backend: SimilarityBackend, thresholds: Thresholds | None = None
) -> Reading:
    """Read one panel with ``backend`` (``thresholds`` default to the model's defaults).

    ``panel`` may also be a mapping (the panel's JSON data), validated into a
    :class:`~dissensus.types.Panel` (:class:`~dissensus.errors.InputError` if invalid)."""
    return read_panels([panel], backend, thresholds)[0]


def read_panels(
    panels: Iterable[PanelLike],
    backend: SimilarityBackend,
    thresholds: Thresholds | None = None,
) -> list[Reading]:
    """Read a batch of panels; an embedding backend embeds each distinct trace once.

    The batch is materialised; stream large inputs in bounded batches. A panel may also
    be a mapping, validated as in :func:`read_panel`. A panel of more than
    :data:`~dissensus.io.limits.MAX_AGENTS` agents is an
    :class:`~dissensus.errors.InputError` naming ``outputs``, as at every other door
    (its similarity matrix grows with the square of its agents).
    """
    batch = [as_panel(p) for p in panels]
    for panel in batch:
        if len(panel.outputs) > MAX_AGENTS:
            raise InputError(
                f"panel {quote_short(str(panel.id))}: field 'outputs': {len(panel.outputs)} "
                f"agents; at most {MAX_AGENTS} per panel"
            )
    return _read_batch(batch, backend, _resolve(backend, thresholds), matrices=True)


def _read_batch(
    batch: list[PanelLike], backend: SimilarityBackend, th: Thresholds, *, matrices: bool
) -> list[Reading]:
    """:func:`read_panels`; with ``matrices`` false, the readings of panels read by the
    vectorised path hold an empty ``matrix`` (every other field as usual).

    Only :func:`dissensus.states.stream.route_stream` asks for that, for readings that
    never leave it when no record shows the matrix: building the matrices as nested
    lists is a tenth of the reading's cost.
    """
    if not embeds(backend):
        return [_read_with_matrix(p, backend, th) for p in batch]
    if not batch:
        return []
    # Attribute getters mapped in C: no bytecode per output.
    outputs = list(chain.from_iterable(map(_OUTPUTS, batch)))
    texts = list(map(_REASONING, outputs))
    unique = set(texts)
    # Blank traces are not embedded: one strip per distinct text, in C (filter).
    distinct = sorted(filter(str.strip, unique))
    if not distinct:  # nobody gave reasoning: similarity undefined (see _build)
        return [_build(p, [0.0] * len(_pairs(len(p.outputs))), backend.name, th) for p in batch]
    rows = backend.embed(distinct)
    if not (isinstance(rows, np.ndarray) and rows.dtype == np.float32):
        rows = np.asarray(rows, dtype=np.float64)  # float32 rows are widened when gathered
    if rows.ndim != 2 or rows.shape[0] != len(distinct):
        raise ConfigError(
            f"similarity backend {backend.name!r} returned embeddings of shape {rows.shape}"
        )
    if not np.isfinite(rows).all():
        raise _non_finite(backend)
    # Each trace's row; -1 marks a blank trace (not embedded). Looked up in C (map).
    position = dict.fromkeys(unique, -1)
    position.update(zip(distinct, range(len(distinct)), strict=True))
    flat = list(map(position.__getitem__, texts))
    by_size: dict[int, list[int]] = {}
    for k, panel in enumerate(batch):
        by_size.setdefault(len(panel.outputs), []).append(k)
    tallies: dict[tuple[str | None, ...], _Tally] = {}
    if len(by_size) == 1:  # the usual case: one panel size, the batch is the group
        ((n, _),) = by_size.items()
        return _read_group(batch, n, rows, flat, outputs, backend.name, th, tallies, matrices)
    starts: list[int] = []
    start = 0
    for panel in batch:
        starts.append(start)
        start += len(panel.outputs)
    readings: list[Reading | None] = [None] * len(batch)
    for n, members in by_size.items():
        group = [batch[k] for k in members]
        group_flat = [x for k in members for x in flat[starts[k] : starts[k] + n]]
        group_outputs = [o for p in group for o in p.outputs]
        read = _read_group(
            group, n, rows, group_flat, group_outputs, backend.name, th, tallies, matrices
        )
        for k, reading in zip(members, read, strict=True):
            readings[k] = reading
    return [r for r in readings if r is not None]


_OUTPUTS = attrgetter("outputs")
_REASONING = attrgetter("reasoning")
_AGENT = attrgetter("agent")
_DECISION = attrgetter("decision")

_Tally = tuple[str | None, float, list[str], dict[str, int], int, bool]
"""A memoised tally: decision, share, tie, votes, abstentions, agreement."""


def _read_group(
    group: list[PanelLike],
    n: int,
    rows: NDArray[np.float64] | NDArray[np.float32],
    flat: list[int],
    outputs: list[OutputLike],
    model: str,
    th: Thresholds,
    tallies: dict[tuple[str | None, ...], _Tally],
    matrices: bool,
) -> list[Reading]:
    """The readings of panels of ``n`` agents each, vectorised over the group.

    The per-agent fields are gathered for the whole group in one pass, the pair
    similarities and matrices computed as arrays; per panel remain the exactly rounded
    mean, the minimum and the tally (memoised per batch on the tuple of decisions, with
    fresh lists and dicts for each reading). A panel with a blank trace is read by
    :func:`_build`, the per-panel reference, which the vectorised path equals on every
    other panel (property-tested).
    """
    # ``flat``: the row of each output's trace (-1: blank), ``outputs`` in group order.
    index = np.array(flat, dtype=np.intp).reshape(len(group), n)
    blank = index < 0
    with_blank = blank.any(axis=1)
    blank_rows: list[bool] = with_blank.tolist()  # type: ignore[assignment]
    if with_blank.any():
        index[blank] = 0  # _build leaves the pairs of a blank trace out
    sims = _pair_similarities(rows, index, n)
    r, c = _upper(n)
    if matrices:
        square = np.ones((len(group), n, n))
        square[:, r, c] = sims
        square[:, c, r] = sims
        squares: list[list[list[float]]] = square.tolist()
    else:
        squares = [[] for _ in group]  # never read (see _read_batch)
    agents = list(map(_AGENT, outputs))
    decisions = list(map(_DECISION, outputs))
    pairs = len(r)
    theta_a, theta_s = th.theta_a, th.theta_s
    fsum = math.fsum
    readings: list[Reading] = []
    append = readings.append
    start = 0
    for panel, upper, matrix, blanks in zip(group, sims.tolist(), squares, blank_rows, strict=True):
        end = start + n
        if blanks:
            append(_build(panel, upper, model, th))
            start = end
            continue
        key = tuple(decisions[start:end])
        tally = tallies.get(key)
        if tally is None:
            decision, share, tie, votes, abstentions = _tally(key)
            agree = not tie and n - abstentions >= 2 and share >= theta_a
            tally = tallies[key] = (decision, share, tie, votes, abstentions, agree)
        decision, share, tie, votes, abstentions, agree = tally
        mean = fsum(upper) / pairs
        values = {
            "id": panel.id,
            "state": _STATES[mean >= theta_s, agree],
            "decision": decision,
            "agreement": share,
            "tie": tie.copy(),
            "votes": votes.copy(),
            "abstentions": abstentions,
            "mean_similarity": mean,
            "min_similarity": min(upper),
            "agents": agents[start:end],
            "matrix": matrix,
            "model": model,
            "thresholds": th,
            "missing_reasoning": [],
            "similarity_defined": True,
        }
        # As in _build: every value is already of its field's type (hot path).
        append(trusted(Reading, values))
        start = end
    return readings


def _read_reference(
    panels: Sequence[PanelLike], backend: EmbeddingBackend, th: Thresholds
) -> list[Reading]:
    """The per-panel reading of :func:`read_panels` (each panel alone through
    :func:`_build`), the reference the vectorised path is tested against."""
    readings = []
    for panel in panels:
        texts = sorted({o.reasoning for o in panel.outputs if o.reasoning.strip()})
        n = len(panel.outputs)
        if not texts:
            readings.append(_build(panel, [0.0] * len(_pairs(n)), backend.name, th))
            continue
        vectors = backend.embed(texts)
        if not (isinstance(vectors, np.ndarray) and vectors.dtype == np.float32):
            vectors = np.asarray(vectors, dtype=np.float64)
        where = {t: i for i, t in enumerate(texts)}
        index = [where.get(o.reasoning, 0) for o in panel.outputs]
        # Each pair from its own two rows, the smaller row index first.
        lo = [min(index[i], index[j]) for i, j in _pairs(n)]
        hi = [max(index[i], index[j]) for i, j in _pairs(n)]
        left = vectors[lo].astype(np.float64)
        right = vectors[hi].astype(np.float64)
        values = np.clip(np.einsum("ij,ij->i", left, right), -1.0, 1.0)
        upper = [1.0 if a == b else v for a, b, v in zip(lo, hi, values.tolist(), strict=True)]
        readings.append(_build(panel, upper, backend.name, th))
    return readings
