"""Decision-time features of a case, one row per candidate answer (pure, no I/O).

Acceptance asks one question: *is the answer the pipeline would commit right?* The
answers on the table are the *candidates*: every decision an agent gave (first answer
or re-ask) plus the case's explicit options. Each candidate gets one feature row; the
model scores each row with the probability that the candidate is the gold answer, and
the pipeline commits the best-scored candidate when its score clears the threshold.

Features use only what exists at decision time (never ``meta.gold``, no word lists
unless a lexicon is given):

* **Per known agent** (agents seen in the calibration; one-hot of its decision
  projected on the candidate): ``agent.<a>.for`` / ``agent.<a>.against`` (voted this
  candidate / another one; both 0 = abstained or absent), ``agent.<a>.reask_for`` /
  ``agent.<a>.reask_against`` and ``agent.<a>.stable_for`` (same answer in both orders)
  where a re-ask exists.
* **Per candidate**: vote share, plurality flag, share of families voting for it,
  re-ask share, share of agents stably on it, the guard's posterior for it and whether
  it is the guard's answer or its verifier's, mean reasoning similarity among its
  supporters (from the reading's matrix), and ``option=<label>`` (the candidate's
  label, kept by the fit only when the label set is closed and small).
* **Per panel**: agreement, plurality share, number of distinct answers, abstention
  share, the reading's state (one-hot) and mean reasoning similarity, the guard's
  n_eff, number of families, whether a re-ask exists and the share of stable agents.
* **Score family inputs** (``score.*``, never given to the model): the candidate's
  first-answer votes over the panel's agents (``score.votes``) and its votes over both
  presentation orders, first answers plus re-asks, over agents plus re-asked agents
  (``score.votes_both``; the first-answer share without a re-ask).
* **Optional reasoning features** (:class:`ReasoningSimilarity`): each agent's
  similarity to its own re-ask reasoning and to the question, averaged over the
  candidate's supporters.
* **Optional marker lexicon**: mean margin score of the supporters
  (:mod:`dissensus.signals`); off by default.
* **User features**: ``module:function`` callables returning ``{name: float}`` for the
  panel, added to every row as ``user.<name>``.

Every feature value is a finite number of magnitude at most :data:`FEATURE_BOUND`
(``1e100``; :func:`bad_value` finds the first that is not): the fit standardises its
features (squares and sums them), the shift check too, and a ``NaN`` cannot be written
to the journal, so a value beyond the bound is an error naming the panel and the
feature (:mod:`dissensus.acceptance.prepare`), never a number that overflows later. The
bound leaves ``10**100``-fold headroom below the largest float for those squares and
sums, and no count, share or similarity comes near it.

Agents absent from the calibration contribute only through candidate and panel
features, so a panel of unknown agents is still scored. Choices this module makes:
an abstention is neither for nor against; candidate order is the order in
which labels first appear (options, then first answers, then re-asks); missing
features are 0 when the model is applied. Families are counted as every comparison
counts them (:func:`dissensus.families.canonical_family`: ``OpenAI`` and ``openai``, or
``gpt-4o`` and ``openai``, are one family); an agent without a family is its own.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict

from dissensus.cases import CaseSpec
from dissensus.deprecation import deprecated_names, renamed
from dissensus.families import canonical_family
from dissensus.types import AgentOutput, Panel

OPTION_PREFIX = "option="
"""The prefix of a candidate's label indicator, ``option=<label>``."""
MAX_OPTION_LABELS = 10
"""Above this many distinct candidate labels, ``option=<label>`` features are not used
(the labels are free answers, not a closed option set): neither by the fit
(:mod:`dissensus.acceptance.fit`) nor by the shift check's reference
(:mod:`dissensus.acceptance.shift`)."""

__all__ = [
    "FEATURE_BOUND",
    "MAX_OPTION_LABELS",
    "OPTION_PREFIX",
    "Candidate",
    "FeatureInputs",
    "PanelFeature",
    "ReasoningSimilarity",
    "SecondLike",
    "bad_value",
    "candidate_rows",
    "case_candidates",
    "feature_inputs",
    "first_bad",
    "question_text",
    "second_pairs",
]

PanelFeature = Callable[[Panel], Mapping[str, float]]
"""A user feature: panel -> named floats (added as ``user.<name>``)."""

FEATURE_BOUND = 1e100
"""Largest magnitude a feature value may have (module docstring)."""


def bad_value(value: float) -> str | None:
    """Why ``value`` cannot be a feature value (non-finite, or beyond :data:`FEATURE_BOUND`);
    ``None`` when it can."""
    if math.isnan(value) or math.isinf(value):
        return f"{value!r} is not a finite number"
    if abs(value) > FEATURE_BOUND:
        return f"{value!r} exceeds the largest magnitude a feature may have ({FEATURE_BOUND:g})"
    return None


def first_bad(rows: Sequence[Mapping[str, float]]) -> tuple[str, str] | None:
    """The first feature of ``rows`` whose value :func:`bad_value` refuses, and why."""
    for row in rows:
        for name, value in row.items():
            why = bad_value(value)
            if why is not None:
                return name, why
    return None


class SecondLike(Protocol):
    """An agent's re-ask answer (``decision`` and optional ``reasoning``)."""

    @property
    def decision(self) -> str | None: ...

    @property
    def reasoning(self) -> str | None: ...


class Candidate(BaseModel):
    """One candidate answer with its feature row."""

    model_config = ConfigDict(frozen=True)

    label: str
    features: dict[str, float]


class FeatureInputs(BaseModel):
    """What the features are computed from (all optional except the panel)."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    panel: Panel
    state: str | None = None
    """The reading's state (CA / DA / CD / DD)."""
    mean_similarity: float | None = None
    agents: list[str] = []
    """Agent ids in the order of ``matrix``."""
    matrix: list[list[float]] | None = None
    """The reading's pairwise reasoning similarity."""
    guard_probabilities: dict[str, float] | None = None
    guard_answer: str | None = None
    guard_n_eff: float | None = None
    guard_verifier: str | None = None
    second: dict[str, tuple[str | None, str | None]] = {}
    """Re-ask answers: agent -> (decision, reasoning)."""
    reasoning_sim: dict[str, dict[str, float]] = {}
    """Optional per-agent reasoning similarities (``reask``, ``question``)."""
    margins: dict[str, float] = {}
    """Optional per-agent marker margin scores."""
    user: dict[str, float] = {}


def question_text(panel: Panel) -> str:
    """The case's question, when the panel names one (:class:`~dissensus.cases.CaseSpec`)."""
    return CaseSpec.from_meta(panel.meta).question or ""


def _options(panel: Panel) -> list[str]:
    """The case's option ids, in order (:class:`~dissensus.cases.CaseSpec`)."""
    return CaseSpec.from_meta(panel.meta).option_ids()


def case_candidates(case: FeatureInputs) -> list[str]:
    """Candidate labels: options, then first answers, then re-asks (first appearance)."""
    seen: dict[str, None] = {}
    for label in _options(case.panel):
        seen.setdefault(label, None)
    for out in case.panel.outputs:
        if out.decision is not None:
            seen.setdefault(out.decision, None)
    for decision, _ in case.second.values():
        if decision is not None:
            seen.setdefault(decision, None)
    return list(seen)


def _mean_pairwise(indices: list[int], matrix: list[list[float]]) -> float:
    if len(indices) < 2:
        return 0.0
    vals = [matrix[i][j] for k, i in enumerate(indices) for j in indices[k + 1 :]]
    return float(np.mean(vals))


def _family(output: AgentOutput) -> str:
    """The agent's family as comparisons see it (the agent itself without one)."""
    return canonical_family(output.family) or str(output.agent)


def candidate_rows(case: FeatureInputs) -> list[Candidate]:
    """One :class:`Candidate` per candidate label (see the module docstring)."""
    panel = case.panel
    outs = panel.outputs
    n = len(outs)
    votes = [o.decision for o in outs]
    voters = [d for d in votes if d is not None]
    counts: dict[str, int] = {}
    for d in voters:
        counts[d] = counts.get(d, 0) + 1
    top = max(counts.values()) if counts else 0
    families = {_family(o) for o in outs}
    has_reask = bool(case.second)
    stable = {
        o.agent: o.decision
        for o in outs
        if o.decision is not None
        and o.agent in case.second
        and case.second[o.agent][0] == o.decision
    }
    reask_votes = [d for d, _ in case.second.values() if d is not None]
    panel_f: dict[str, float] = {
        "panel.agreement": top / len(voters) if voters else 0.0,
        "panel.distinct": float(len(counts)),
        "panel.abstentions": (n - len(voters)) / n,
        "panel.n_agents": float(n),
        "panel.families": float(len(families)),
        "panel.has_reask": float(has_reask),
        "panel.stable_share": len(stable) / n if has_reask else 0.0,
        "panel.mean_similarity": float(case.mean_similarity or 0.0),
        "panel.guard_n_eff": float(case.guard_n_eff or 0.0),
    }
    if case.state:
        panel_f[f"panel.state.{case.state}"] = 1.0
    for key, value in case.user.items():
        panel_f[f"user.{key}"] = float(value)
    index = {a: i for i, a in enumerate(case.agents)}
    rows: list[Candidate] = []
    for label in case_candidates(case):
        f = dict(panel_f)
        supporters = [o for o in outs if o.decision == label]
        f["cand.share"] = len(supporters) / len(voters) if voters else 0.0
        f["cand.plurality"] = float(bool(counts) and counts.get(label, 0) == top)
        f["cand.families"] = len({_family(o) for o in supporters}) / len(families)
        f["cand.reask_share"] = (
            sum(d == label for d in reask_votes) / len(reask_votes) if reask_votes else 0.0
        )
        f["cand.stable_share"] = sum(d == label for d in stable.values()) / n if has_reask else 0.0
        # The simple score families' inputs (never given to the model, see fit.SCORE_PREFIX).
        first = len(supporters)
        reasked = sum(d == label for d in reask_votes)
        f["score.votes"] = first / n
        f["score.votes_both"] = (
            (first + reasked) / (n + len(case.second)) if has_reask else first / n
        )
        if case.guard_probabilities is not None:
            f["cand.guard_posterior"] = float(case.guard_probabilities.get(label, 0.0))
            f["cand.guard_answer"] = float(case.guard_answer == label)
        if case.guard_verifier is not None:
            vote = next((o.decision for o in outs if o.agent == case.guard_verifier), None)
            f["cand.verifier_for"] = float(vote == label)
        if case.matrix is not None:
            f["cand.sim_within"] = _mean_pairwise(
                [index[o.agent] for o in supporters if o.agent in index], case.matrix
            )
        if case.reasoning_sim:
            for kind in ("reask", "question"):
                vals = [
                    case.reasoning_sim[o.agent][kind]
                    for o in supporters
                    if kind in case.reasoning_sim.get(o.agent, {})
                ]
                if vals:
                    f[f"cand.reasoning_{kind}"] = float(np.mean(vals))
        if case.margins:
            vals = [case.margins[o.agent] for o in supporters if o.agent in case.margins]
            f["cand.margin_mean"] = float(np.mean(vals)) if vals else 0.0
        f[f"{OPTION_PREFIX}{label}"] = 1.0
        for o in outs:
            a = o.agent
            if o.decision is not None:
                f[f"agent.{a}.for" if o.decision == label else f"agent.{a}.against"] = 1.0
            again = case.second.get(a)
            if again is not None and again[0] is not None:
                f[f"agent.{a}.reask_for" if again[0] == label else f"agent.{a}.reask_against"] = 1.0
            if stable.get(a) == label:
                f[f"agent.{a}.stable_for"] = 1.0
        rows.append(Candidate(label=label, features=f))
    return rows


class ReasoningSimilarity:
    """Per-agent similarity of its reasoning to its own re-ask reasoning and to the question.

    ``backend`` is any :class:`~dissensus.states.similarity.SimilarityBackend` (the
    reader's); one ``matrix`` call per panel.
    """

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    def __call__(
        self, panel: Panel, second: Mapping[str, tuple[str | None, str | None]]
    ) -> dict[str, dict[str, float]]:
        texts: list[str] = []
        slots: list[tuple[str, str, int]] = []
        question = question_text(panel)
        q_index = -1
        if question:
            q_index = 0
            texts.append(question)
        for out in panel.outputs:
            i = len(texts)
            texts.append(out.reasoning)
            again = second.get(out.agent)
            if again is not None and again[1]:
                texts.append(again[1])
                slots.append((out.agent, "reask", i))
            if q_index >= 0:
                slots.append((out.agent, "question", i))
        if not slots:
            return {}
        m = np.asarray(self.backend.matrix(texts), dtype=float)
        result: dict[str, dict[str, float]] = {}
        for agent, kind, i in slots:
            j = i + 1 if kind == "reask" else q_index
            result.setdefault(agent, {})[kind] = float(m[i, j])
        return result


def second_pairs(
    second: Mapping[str, SecondLike] | None,
) -> dict[str, tuple[str | None, str | None]]:
    """Re-ask answers as ``agent -> (decision, reasoning)``."""
    return {a: (s.decision, s.reasoning) for a, s in (second or {}).items()}


def feature_inputs(
    panel: Panel,
    *,
    reading: Any = None,
    guard: Any = None,
    second: Mapping[str, SecondLike] | None = None,
    reasoning_sim: dict[str, dict[str, float]] | None = None,
    margins: dict[str, float] | None = None,
    user: dict[str, float] | None = None,
) -> FeatureInputs:
    """A :class:`FeatureInputs` from a panel, its :class:`~dissensus.states.Reading`, the guard's
    :class:`~dissensus.guard.GuardDecision` (either may be ``None``) and any re-ask answers."""
    return FeatureInputs(
        panel=panel,
        state=reading.state.value if reading is not None else None,
        mean_similarity=reading.mean_similarity if reading is not None else None,
        agents=list(reading.agents) if reading is not None else [],
        matrix=[list(r) for r in reading.matrix] if reading is not None else None,
        guard_probabilities=dict(guard.probabilities) if guard is not None else None,
        guard_answer=guard.answer if guard is not None else None,
        guard_n_eff=guard.n_eff if guard is not None else None,
        guard_verifier=guard.verifier if guard is not None else None,
        second=second_pairs(second),
        reasoning_sim=reasoning_sim or {},
        margins=margins or {},
        user=user or {},
    )


_RENAMED = {"CaseInput": "FeatureInputs", "case_input": "feature_inputs"}
"""Earlier names, importable with a :class:`DeprecationWarning`: ``CaseInput`` is the
pipeline's journalled case (:class:`dissensus.pipeline.steps.CaseInput`)."""


__getattr__ = deprecated_names(__name__, renamed(__name__, globals(), _RENAMED))
