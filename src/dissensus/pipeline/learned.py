"""The pipeline's hook to learned acceptance (:mod:`dissensus.acceptance`).

Where the pipeline asks "may we commit?" — after the guard refuses an automatic route
and the follow-up ran (with the re-ask features), or when no follow-up could run (on
the features the panel has) — a configured acceptance file judges the case. This module
loads the file (``acceptance.model`` in the policy, or ``decide --acceptance``), keeps
its verified content in the run's ``run.started`` event (so a resumed run judges with
the same file), and turns a verdict into the journalled step and the record's
``acceptance`` figures.

Choices this module makes: scikit-learn and scipy are imported only when a
file is configured (a missing library is a :class:`ConfigError` saying how to install
it); a file whose content no longer matches its sha256 is refused at start and on
resume, and so is one whose content is inconsistent
(:func:`dissensus.acceptance.file.read_acceptance`: read once, by the strict loader;
the copy a run keeps is read on resume as it was checked when the run started, so a
run started by an earlier version, whose checks were looser, still resumes);
the guard's decision used as features is computed by
:func:`dissensus.acceptance.prepare.acceptance_guard` with the run's guard calibration
and options — the function calibration uses, and the same audit the guard step
journals. Records quote the file's score family (``family``) with the score. The
guarantee in words (:func:`guarantee_sentence`) writes the target and the confidence as
they are (``99.6% confidence``, ``probability >= 0.996``), never rounded up to ``100%``
or ``1.00``, a certainty no calibration gives.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dissensus.errors import ConfigError
from dissensus.files import not_a_file
from dissensus.types import AcceptanceFigures, JsonObject, Panel

__all__ = [
    "AcceptanceFigures",
    "guarantee_sentence",
    "learned_payload",
    "load_learned_data",
    "make_learned",
]


def _import() -> Any:
    try:
        import dissensus.acceptance as acceptance
    except ImportError as exc:  # the package itself turns a missing sklearn/scipy into ConfigError
        raise ConfigError(
            f"learned acceptance needs scikit-learn and scipy: pip install 'dissensus[accept]' ({exc})"
        ) from None
    return acceptance


def load_learned_data(
    name: str | None, base: Path | None, *, policy_file: str | None, field: str
) -> JsonObject | None:
    """Read and verify the acceptance file ``name`` (relative to ``base``); its JSON, or ``None``."""
    if not name:
        return None
    acceptance = _import()
    path = Path(name)
    if not path.is_absolute() and base is not None:
        path = base / path
    why = not_a_file(path)
    if why is not None:
        raise ConfigError(f"acceptance file {why}: {path}", file=policy_file, field=field)
    # Read once, by the strict loader (a leading byte order mark skipped), validated and
    # its sha256 checked. The file's own JSON (not a re-dump, which would add fields a
    # newer version defaults and change the content its sha256 covers): a file written
    # by an older version stays valid.
    _, data = acceptance.read_acceptance(path)
    return dict(data)


def make_learned(
    data: JsonObject, *, similarity: str | None, backend: Any, allow_code: bool | None = None
) -> Any:
    """A :class:`~dissensus.acceptance.prepare.LearnedAcceptance` from the run's stored file
    (``allow_code``: the run's policy's, which the user features the file names need)."""
    acceptance = _import()
    from dissensus.acceptance.prepare import LearnedAcceptance

    if data.get("sha256") != acceptance.canonical_hash(data):
        raise ConfigError(
            "the run's acceptance file does not match its sha256", field="acceptance.model"
        )
    return LearnedAcceptance(
        acceptance.validate_acceptance(data, "the run's acceptance file", journalled=True),
        similarity=similarity,
        sim_backend=backend,
        allow_code=allow_code,
    )


def learned_payload(
    learned: Any, panel: Panel, *, reading: Any, guard: Any, second: Any
) -> dict[str, Any]:
    """The journalled acceptance step of learned acceptance: the fields of
    :class:`~dissensus.pipeline.steps.AcceptanceStep` but ``signals`` (``steps`` imports
    this module, so the caller builds the step)."""
    verdict, vector = learned.judge_case(panel, reading=reading, guard=guard, second=second)
    figures = AcceptanceFigures.model_validate(
        verdict.model_dump(include=set(AcceptanceFigures.model_fields))
    )
    return {
        "accepted": verdict.accepted,
        "decision": verdict.decision,
        "basis": "learned" if verdict.accepted else "none",
        "supporters": [
            o.agent
            for o in panel.outputs
            if o.decision is not None and o.decision == verdict.decision
        ],
        "contradicted_by": [],
        "reason": verdict.reason,
        "figures": figures.model_dump(mode="json"),
        "vector": vector,
    }


def guarantee_sentence(figures: AcceptanceFigures) -> str:
    """The guarantee of an acceptance file, in one sentence."""
    if figures.threshold is None:
        return "learned acceptance accepted nothing: no threshold met the target on the calibration cases"
    from dissensus.acceptance.bound import confidence, plain_guarantee, target_words

    plain = plain_guarantee(figures.target_precision, figures.delta, figures.calibration_n)
    return (
        f"{plain} (auto-accepted cases: precision >= {target_words(figures.target_precision)} with "
        f"probability >= {target_words(confidence(figures.delta))} if these panels are exchangeable with the "
        f"{figures.calibration_n} calibration cases; score family {figures.family}, acceptance "
        f"file {figures.file_sha256[:12]})."
    )
