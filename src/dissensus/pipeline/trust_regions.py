"""Calibrated reliability: when may the pipeline accept an agreement the guard cannot back?

The guard refuses consensus weighting when evidence independence cannot be audited
(docs/guard.md).
LLM judges answering from parametric knowledge are never auditable, so the pipeline
needs a second, measured reason to commit: *calibrated reliability*. A calibration
file holds, for each agent and each calibration stratum (e.g. a dataset subset), how
often the agent's order-stable answers were right, by margin score
(:mod:`dissensus.signals`). From it the pipeline derives, per agent, a
*trust region* ``{stable, score <= max_score}``: the largest ``max_score`` whose
answers reached ``target`` precision **in every stratum** (worst stratum, not the
pooled average, so that a region earned on easy cases is not used on hard ones), with
at least ``min_support`` answers in each.

Acceptance (:func:`calibrated_accept`):

1. Agents in their trust region that agree: accept their answer, unless another
   calibrated agent whose stable answers reach ``veto_precision`` (worst stratum, any
   score) stably contradicts it, or trusted agents contradict each other.
2. When *no* agent of the panel is in the calibration at all (a panel of unknown
   judges), fall back to agreement among independent families: at least
   ``min_families`` model families with a stable, decisive (score <= ``fallback_max_score``)
   answer agree, and no agent stably contradicts them. Agents of one family count once:
   they share a latent cause.
3. Otherwise refuse, with the reason.

Choices this module makes: counts are kept per exact score and summed into
regions at load time, so one file serves any target; precision is the raw proportion
(the worst-stratum rule is the conservative device); the file records the marker
lexicon and is refused under a different one (scores would not mean the same). The file
carries no hash; its counts are checked when it is read: every cell two integers
``[answers, right]`` with ``0 <= right <= answers`` under an integer margin score
written as one (``"-7"``; ``" -7"``, ``"-07"`` and ``"1_0"``, which ``int`` reads too,
are refused: spellings of one score were summed into one cell of counts), (a hand edit that claimed more right answers than answers made a trust region of nothing,
and a cell of one number or a score ``abc`` stopped the run with a traceback). Its
format is checked first, so another kind of file (an acceptance file named as the
reliability file) is named for what it is, not by its first unknown field. The counts are
checked when a file is read, not when a run's journalled copy is (``runs show`` and
``runs resume`` of a run started with a file an earlier version let through read it back
as the run used it).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from dissensus.errors import ConfigError
from dissensus.families import canonical_family
from dissensus.io.jsontext import load_json_file
from dissensus.quoting import quote_short
from dissensus.signals import AgentSignal, MarkerLexicon

__all__ = [
    "CALIBRATION_FORMAT",
    "JOURNALLED",
    "Acceptance",
    "AgentCalibration",
    "CalibrationFile",
    "TrustRegion",
    "build_calibration",
    "calibrated_accept",
    "load_calibration",
    "trust_regions",
]

CALIBRATION_FORMAT = "dissensus.reliability/1"

JOURNALLED = "journalled"
"""Validation context key: the file is a run's journalled copy, read back as it was
written (its counts were checked, or not, by the version that started the run)."""


def _cell_problem(score: str, cell: object) -> str | None:
    """Why ``[n, correct]`` under margin score ``score`` cannot be a count, or ``None``."""
    try:
        number = int(score)
    except ValueError:
        return f"margin score {score!r} is not an integer"
    if str(number) != score:
        # " -7", "-07" and "1_0" are ints to int(), and spellings of one score add up.
        return f"margin score {score!r} is not written as an integer is ({str(number)!r})"
    if (
        not isinstance(cell, list)
        or len(cell) != 2
        or not all(isinstance(x, int) and not isinstance(x, bool) for x in cell)
    ):
        return f"expected [answers, right], two integers, got {cell!r}"
    n, right = cell
    if not 0 <= right <= n:
        return f"counts [{n}, {right}]: need 0 <= right <= answers"
    return None


class AgentCalibration(BaseModel):
    """Counts of one agent's stable answers: ``strata[stratum][score] = [n, correct]``.

    Every count is checked (:func:`_cell_problem`): a score key that is no integer, a
    cell that is not two integers, or ``right`` above ``answers`` or below 0 is refused
    naming the stratum and the score, so a hand-edited file never becomes a trust region
    its counts cannot support. A run's journalled copy (validation context
    :data:`JOURNALLED`) is not checked: the run started with it, and reads it back."""

    model_config = ConfigDict(extra="forbid")

    family: str | None = None
    strata: dict[str, dict[str, list[int]]] = Field(default_factory=dict)

    @field_validator("strata", mode="before")
    @classmethod
    def _counts(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(info.context, dict) and info.context.get(JOURNALLED):
            return value  # a run's journalled copy reads back as it was written
        if isinstance(value, dict):
            for stratum, cells in value.items():
                if not isinstance(cells, dict):
                    continue  # the type check below names it
                for score, cell in cells.items():
                    why = _cell_problem(str(score), cell)
                    if why is not None:
                        raise ValueError(f"stratum {stratum!r}, score {score}: {why}")
        return value


class CalibrationFile(BaseModel):
    """A reliability calibration, built from labelled panels only."""

    model_config = ConfigDict(extra="forbid")

    format: str = CALIBRATION_FORMAT
    description: str = ""
    built_from: list[str] = Field(default_factory=list)
    """Where the labelled panels came from (file names, subsets)."""
    stratum_key: str = "subset"
    """``meta`` key of the panels that names their stratum."""
    lexicon: MarkerLexicon = Field(default_factory=MarkerLexicon)
    agents: dict[str, AgentCalibration] = Field(default_factory=dict)


class TrustRegion(BaseModel):
    """Where one agent's answers may be accepted on its own."""

    model_config = ConfigDict(frozen=True)

    agent: str
    max_score: int | None
    """Largest margin score of the region (``None``: the agent is never trusted alone)."""
    worst_precision: float | None
    """Worst-stratum precision of the region (``None`` without a region)."""
    support: int
    """Calibration answers in the region, all strata together."""
    stable_precision: float
    """Worst-stratum precision of all the agent's stable answers (any score)."""


class Acceptance(BaseModel):
    """Outcome of :func:`calibrated_accept`."""

    model_config = ConfigDict(frozen=True)

    accepted: bool
    decision: str | None
    basis: str
    """``calibrated``, ``independent_families`` or ``none``."""
    supporters: list[str]
    contradicted_by: list[str]
    reason: str


def load_calibration(path: str | Path, lexicon: MarkerLexicon) -> CalibrationFile:
    """Read a calibration file and check it was built with ``lexicon``."""
    name = str(path)
    # One line when unreadable, not UTF-8 or not strict JSON (duplicate keys, NaN, ...).
    data: Any = load_json_file(path, what="calibration file")
    if isinstance(data, dict) and "format" not in data:
        raise ConfigError(
            f"not a reliability calibration: no format (expected {CALIBRATION_FORMAT!r})",
            file=name,
            field="format",
        )
    fmt = data.get("format") if isinstance(data, dict) else None
    if isinstance(data, dict) and fmt != CALIBRATION_FORMAT:
        # The format first: another kind of file fails on its first field otherwise
        # ("field 'settings': Extra inputs are not permitted" for an acceptance file).
        hint = (
            ": an acceptance file (calibrate-acceptance) goes in acceptance.model"
            if isinstance(fmt, str) and fmt.startswith("dissensus.acceptance/")
            else ""
        )
        raise ConfigError(
            f"not a reliability calibration: format {quote_short(str(fmt))}, expected "
            f"{CALIBRATION_FORMAT!r}{hint}",
            file=name,
            field="format",
        )
    try:
        cal = CalibrationFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        message = str(first["msg"])
        if message.startswith("Value error, "):
            message = message[len("Value error, ") :]
        raise ConfigError(
            message, file=name, field=".".join(str(p) for p in first["loc"])
        ) from None
    if cal.format != CALIBRATION_FORMAT:
        raise ConfigError(f"unsupported format {cal.format!r}", file=name, field="format")
    if cal.lexicon != lexicon:
        raise ConfigError(
            "built with another marker lexicon than the policy's acceptance.markers",
            file=name,
            field="lexicon",
        )
    return cal


def build_calibration(
    cases: Iterable[tuple[list[AgentSignal], str, str]],
    *,
    lexicon: MarkerLexicon,
    stratum_key: str = "subset",
    built_from: list[str] | None = None,
    description: str = "",
) -> CalibrationFile:
    """Count stable answers per agent, stratum and score from ``(signals, stratum, gold)``."""
    agents: dict[str, AgentCalibration] = {}
    for signals, stratum, gold in cases:
        for sig in signals:
            if not sig.stable:
                continue
            entry = agents.setdefault(sig.agent, AgentCalibration(family=sig.family))
            cell = entry.strata.setdefault(stratum, {}).setdefault(str(sig.score), [0, 0])
            cell[0] += 1
            cell[1] += int(sig.decision == gold)
    return CalibrationFile(
        description=description,
        built_from=list(built_from or []),
        stratum_key=stratum_key,
        lexicon=lexicon,
        agents=dict(sorted(agents.items())),
    )


def _region_counts(stratum: dict[str, list[int]], max_score: int | None) -> tuple[int, int]:
    n = correct = 0
    for score, (count, right) in stratum.items():
        if max_score is None or int(score) <= max_score:
            n += count
            correct += right
    return n, correct


def _worst(
    entry: AgentCalibration, max_score: int | None, min_support: int
) -> tuple[float | None, int]:
    worst: float | None = None
    total = 0
    for stratum in entry.strata.values():
        n, correct = _region_counts(stratum, max_score)
        total += n
        if n < min_support:
            return None, total
        precision = correct / n
        worst = precision if worst is None else min(worst, precision)
    return worst, total


def trust_regions(
    cal: CalibrationFile, *, target: float, min_support: int
) -> dict[str, TrustRegion]:
    """Each calibrated agent's trust region for ``target`` precision (pure)."""
    regions: dict[str, TrustRegion] = {}
    for agent, entry in cal.agents.items():
        scores = sorted({int(s) for stratum in entry.strata.values() for s in stratum})
        best: tuple[int, float, int] | None = None
        for score in scores:
            worst, support = _worst(entry, score, min_support)
            if worst is not None and worst >= target:
                best = (score, worst, support)
        overall, _ = _worst(entry, None, 1)
        regions[agent] = TrustRegion(
            agent=agent,
            max_score=best[0] if best else None,
            worst_precision=best[1] if best else None,
            support=best[2] if best else 0,
            stable_precision=overall if overall is not None else 0.0,
        )
    return regions


def calibrated_accept(
    signals: list[AgentSignal],
    regions: dict[str, TrustRegion],
    *,
    veto_precision: float,
    min_families: int,
    fallback_max_score: int,
) -> Acceptance:
    """May the panel's answer be accepted on calibrated reliability? (see module docstring)"""
    calibrated = [s for s in signals if s.agent in regions]
    if calibrated:
        return _accept_calibrated(signals, regions, veto_precision)
    return _accept_families(signals, min_families, fallback_max_score)


def _accept_calibrated(
    signals: list[AgentSignal], regions: dict[str, TrustRegion], veto: float
) -> Acceptance:
    trusted = []
    for sig in signals:
        region = regions.get(sig.agent)
        if region and region.max_score is not None and sig.stable and sig.score <= region.max_score:
            trusted.append(sig)
    answers = sorted({s.decision for s in trusted if s.decision is not None})
    if not answers:
        return Acceptance(
            accepted=False,
            decision=None,
            basis="none",
            supporters=[],
            contradicted_by=[],
            reason="no calibrated agent gave a stable, decisive answer inside its trust region",
        )
    if len(answers) > 1:
        return Acceptance(
            accepted=False,
            decision=None,
            basis="none",
            supporters=[s.agent for s in trusted],
            contradicted_by=[],
            reason="trusted agents contradict each other: "
            + ", ".join(f"{s.agent}={s.decision}" for s in trusted),
        )
    decision = answers[0]
    vetoes = [
        s.agent
        for s in signals
        if s.stable
        and s.decision != decision
        and s.agent in regions
        and regions[s.agent].stable_precision >= veto
    ]
    supporters = [s.agent for s in trusted]
    if vetoes:
        return Acceptance(
            accepted=False,
            decision=decision,
            basis="none",
            supporters=supporters,
            contradicted_by=vetoes,
            reason=f"trusted answer {decision!r} stably contradicted by reliable agent(s) "
            + ", ".join(vetoes),
        )
    return Acceptance(
        accepted=True,
        decision=decision,
        basis="calibrated",
        supporters=supporters,
        contradicted_by=[],
        reason=f"calibrated reliability: {', '.join(supporters)} stable and decisive inside trust region "
        + ", ".join(
            f"{s.agent}: score {s.score} <= {regions[s.agent].max_score}, "
            f"worst-stratum precision {regions[s.agent].worst_precision:.2f}"
            for s in trusted
        ),
    )


def _accept_families(signals: list[AgentSignal], min_families: int, max_score: int) -> Acceptance:
    decisive = [s for s in signals if s.stable and s.score <= max_score]
    answers = sorted({s.decision for s in decisive if s.decision is not None})
    if len(answers) != 1:
        reason = (
            "no agent of this (uncalibrated) panel gave a stable, decisive answer"
            if not answers
            else "stable, decisive agents of this (uncalibrated) panel disagree"
        )
        return Acceptance(
            accepted=False,
            decision=None,
            basis="none",
            supporters=[],
            contradicted_by=[],
            reason=reason,
        )
    decision = answers[0]
    families = sorted({canonical_family(s.family) or s.agent for s in decisive})
    contra = [s.agent for s in signals if s.stable and s.decision != decision]
    supporters = [s.agent for s in decisive]
    if contra:
        return Acceptance(
            accepted=False,
            decision=decision,
            basis="none",
            supporters=supporters,
            contradicted_by=contra,
            reason=f"answer {decision!r} stably contradicted by " + ", ".join(contra),
        )
    if len(families) < min_families:
        return Acceptance(
            accepted=False,
            decision=decision,
            basis="none",
            supporters=supporters,
            contradicted_by=[],
            reason=f"only {len(families)} independent famil{'y' if len(families) == 1 else 'ies'} "
            f"({', '.join(families)}) stable and decisive; {min_families} needed without calibration",
        )
    return Acceptance(
        accepted=True,
        decision=decision,
        basis="independent_families",
        supporters=supporters,
        contradicted_by=[],
        reason=f"{len(families)} independent families ({', '.join(families)}) stable and decisive on {decision!r}",
    )
