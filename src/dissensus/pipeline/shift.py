"""The run's shift check: do this run's cases still resemble the acceptance file's calibration cases?

Learned acceptance guarantees precision only while new cases are exchangeable with its
calibration cases. Every case it judges journals its feature vector (the acceptance
step's ``vector``); at the end of a run :func:`check_run` compares them with the
calibration vectors the acceptance file keeps, by the classifier two-sample test of
:func:`dissensus.acceptance.shift.shift_check_vectors`, before any label is known, and
journals the outcome as an ``acceptance.shift`` event (key ``run/shift``). The run's
summary, ``dissensus runs show`` and ``GET /v1/acceptance`` report it.

Choices where the design is silent:

* The check runs when the file keeps calibration vectors and the run judged at least
  :data:`~dissensus.acceptance.shift.MIN_CASES` cases; otherwise nothing is journalled
  (a run of one case says nothing about a distribution).
* A run's check uses at most :data:`MAX_DEPLOYED` of its vectors (a seeded sample, so
  a resumed run journals the same outcome), which keeps it to seconds.
* ``acceptance.on_shift: escalate`` puts a *hold* on the file: a run started after a
  check that flagged this file (same sha256, in the same journal) carries the hold in its
  run specification, and learned acceptance commits nothing in it ("acceptance held: ...")
  until a new acceptance file is calibrated. ``warn`` (the default) only reports.
* The level is ``acceptance.shift_alpha`` (default 0.1): under exchangeability a run is
  flagged with probability at most that.
* An outcome is a :class:`ShiftOutcome`: a ``TypedDict`` rather than a model because it
  is the ``acceptance.shift`` payload itself, which callers extend (the run that wrote it,
  the check in words) and hand on as JSON; journalled outcomes are validated against it
  when read.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from pydantic import TypeAdapter
from typing_extensions import TypedDict

from dissensus.store import event_types as ev
from dissensus.store.journal import Journal

__all__ = [
    "MAX_DEPLOYED",
    "SHIFT_EVENT",
    "ShiftOutcome",
    "check_run",
    "check_vectors",
    "latest_flag",
    "shift_words",
]

SHIFT_EVENT = ev.ACCEPTANCE_SHIFT
"""The journal event of a run's shift check."""


class ShiftOutcome(TypedDict, total=False):
    """A shift check's outcome as journalled (``acceptance.shift``): the fields of
    :class:`~dissensus.acceptance.shift.ShiftCheck` and the file's sha256; ``run_id``
    and ``words`` are added by readers (:func:`latest_flag`, the service)."""

    auc: float
    p_value: float
    shifted: bool
    alpha: float
    calibration_n: int
    deployed_n: int
    permutations: int
    reason: str
    file_sha256: str | None
    run_id: str
    """The run that journalled the check (:func:`latest_flag`)."""
    across_runs: int
    """A check of the service's shift watch (:mod:`dissensus.serve.shift_watch`): how many
    runs the checked cases came from (absent from a run's own check)."""
    newest_run: str
    """A watch's check: the run of the newest case it checked."""
    words: str
    """The check in plain words (:func:`shift_words`), as the service reports it."""


_OUTCOME: TypeAdapter[ShiftOutcome] = TypeAdapter(ShiftOutcome)

MAX_DEPLOYED = 2000
"""Most deployed vectors one check uses (a seeded sample beyond that)."""


def check_vectors(
    acceptance: Mapping[str, Any],
    vectors: list[dict[str, float]],
    *,
    alpha: float,
    permutations: int = 200,
    seed: int = 0,
) -> ShiftOutcome | None:
    """The shift check of ``vectors`` against the file's calibration vectors, as JSON
    (``None`` when the file keeps none)."""
    raw = acceptance.get("shift_reference")
    if not raw:
        return None
    from dissensus.acceptance.shift import ShiftReference, shift_check_vectors

    if len(vectors) > MAX_DEPLOYED:
        vectors = random.Random(seed).sample(vectors, MAX_DEPLOYED)
    check = shift_check_vectors(
        ShiftReference.model_validate(raw),
        vectors,
        alpha=alpha,
        permutations=permutations,
        seed=seed,
    )
    sha = acceptance.get("sha256")
    return ShiftOutcome(
        auc=check.auc,
        p_value=check.p_value,
        shifted=check.shifted,
        alpha=check.alpha,
        calibration_n=check.calibration_n,
        deployed_n=check.deployed_n,
        permutations=check.permutations,
        reason=check.reason,
        file_sha256=None if sha is None else str(sha),
    )


def checks_shift(acceptance: Mapping[str, Any] | None) -> bool:
    """Whether :func:`check_run` checks runs decided with ``acceptance`` (the journalled
    acceptance file's entry): only a file with a shift reference can be checked."""
    return bool(acceptance and acceptance.get("shift_reference"))


def check_run(
    journal: Journal,
    run_id: str,
    acceptance: Mapping[str, Any] | None,
    *,
    alpha: float,
    permutations: int = 200,
) -> ShiftOutcome | None:
    """Check run ``run_id``'s judged cases and journal the outcome (see the module docstring)."""
    from dissensus.acceptance.shift import MIN_CASES

    if acceptance is None or not checks_shift(acceptance):
        return None
    vectors = [
        dict(e.payload["vector"])
        for e in journal.events(run_id, type=ev.CASE_ACCEPTANCE)
        if isinstance(e.payload.get("vector"), dict)
    ]
    if len(vectors) < MIN_CASES:
        return None
    outcome = check_vectors(acceptance, vectors, alpha=alpha, permutations=permutations)
    if outcome is None:
        return None
    journal.append(run_id, SHIFT_EVENT, dict(outcome), key="run/shift")
    return outcome


def latest_flag(journal: Journal, file_sha256: str | None) -> ShiftOutcome | None:
    """The newest journalled shift check that flagged the acceptance file ``file_sha256``."""
    if not file_sha256:
        return None
    flagged = [
        e
        for e in journal.events_of_type(SHIFT_EVENT)
        if e.payload.get("file_sha256") == file_sha256 and e.payload.get("shifted")
    ]
    if not flagged:
        return None
    newest = max(flagged, key=lambda e: e.at)
    return _OUTCOME.validate_python({**newest.payload, "run_id": newest.run_id})


def shift_words(outcome: Mapping[str, Any]) -> str:
    """The shift check in plain words."""
    p = float(outcome.get("p_value", 1.0))
    from dissensus.acceptance.shift import MIN_CASES

    deployed = int(outcome.get("deployed_n", 0))
    if min(deployed, int(outcome.get("calibration_n", 0))) < MIN_CASES:
        return (
            f"Not checked yet: {deployed} judged case(s), and the shift check needs at "
            f"least {MIN_CASES}."
        )
    if outcome.get("shifted"):
        return (
            f"New cases look different from the {outcome.get('calibration_n')} calibration cases "
            f"(shift check p = {p:.2f}, AUC {float(outcome.get('auc', 0.5)):.2f}): the "
            "guarantee may not hold for them; review more, and recalibrate on recent cases."
        )
    return (
        f"New cases resemble the {outcome.get('calibration_n')} calibration cases as far as "
        f"the shift check can tell (p = {p:.2f} over {outcome.get('deployed_n')} cases)."
    )
