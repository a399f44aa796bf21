"""The run's shift check: do this run's cases still resemble the acceptance file's calibration cases?

Learned acceptance guarantees precision only while new cases are exchangeable with its
calibration cases. Every case it judges journals its feature vector (the acceptance
step's ``vector``); at the end of a run :func:`check_run` compares them with the
calibration vectors the acceptance file keeps, by the classifier two-sample test of
:func:`dissensus.acceptance.shift.shift_check_vectors`, before any label is known, and
journals the outcome as an ``acceptance.shift`` event (key ``run/shift``). The run's
summary, ``dissensus runs show`` and ``GET /v1/acceptance`` report it.

Choices this module makes:

* The check runs when the file keeps calibration vectors and the run judged at least
  :data:`~dissensus.acceptance.shift.MIN_CASES` cases; otherwise nothing is journalled
  (a run of one case says nothing about a distribution). A file written before the shift
  check keeps no vectors (no ``shift_reference`` field; a ``null`` is refused when the file
  is read): ``decide`` says on one line that the check is off (:func:`shift_off_words`).
* A run's check uses at most :data:`MAX_DEPLOYED` of its vectors (a seeded sample, so
  a resumed run journals the same outcome), which keeps it to well under a second.
* ``acceptance.on_shift: escalate`` puts a *hold* on the file: a run started after a
  check that flagged this file (same sha256, in the same journal) carries the hold in its
  run specification, and learned acceptance commits nothing in it ("acceptance held: ...")
  until a new acceptance file is calibrated. ``warn`` (the default) only reports.
* **The level is spent over the file's life.** ``acceptance.shift_alpha`` (default 0.1)
  is the probability that a file whose cases stay exchangeable with its calibration
  cases is *ever* flagged in a journal. Runs' own checks spend half of it: the check of
  a run is the i-th check of the file, ``i = 1 +`` the number of ``acceptance.shift``
  events of runs' own checks of this file (same sha256; a watch's check, which carries
  ``across_runs``, does not count) already in the journal, from other runs, and is tested
  at :func:`~dissensus.acceptance.shift.check_level` ``(alpha, i)``, that is
  ``(alpha / 2) * 6 / (pi^2 i^2)``: 0.030 for the first check, 0.0003 for the tenth,
  1.2e-5 for the fiftieth. The service's watch spends the other half over its own
  sequence (:mod:`dissensus.serve.shift_watch`). The levels sum to at most ``alpha``
  however many runs, checks and restarts there are, so the union bound gives the
  lifetime guarantee. Two runs finishing at once take consecutive indices: the index is
  counted under a lock named after the file (:meth:`~dissensus.store.journal.Journal.lock_name`,
  held until the check is journalled; SQLite's write transaction already excludes other
  writers, PostgreSQL takes an advisory lock). Caveat: checks journalled before this
  scheme were tested at ``alpha`` each, and only count as indices used. The outcome journals the level used
  (``alpha``), the lifetime level (``file_alpha``) and the index (``check``).
* A resumed run journals the same outcome as an uninterrupted one: the check is seeded,
  its vectors are the run's own (in journal order), and its index counts only other
  runs' checks, read in the transaction that journals the check and ``run.finished``
  together (an interrupted run has journalled neither). Only another run's check
  journalled between the interruption and the resume changes the index, as it must.
* An outcome is a :class:`ShiftOutcome`: a ``TypedDict`` rather than a model because it
  is the ``acceptance.shift`` payload itself, which callers extend (the run that wrote it,
  the check in words) and hand on as JSON; journalled outcomes are validated against it
  when read (those of the permutation test this check used to be, with ``permutations``
  and without ``file_alpha`` and ``check``, too).
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Mapping
from typing import Any

import numpy as np
from pydantic import TypeAdapter
from typing_extensions import TypedDict

from dissensus.store import event_types as ev
from dissensus.store.journal import Journal

__all__ = [
    "EVERY",
    "MAX_DEPLOYED",
    "RUN_SHARE",
    "SHIFT_EVENT",
    "WATCH_SHARE",
    "ShiftOutcome",
    "check_run",
    "check_vectors",
    "checks_shift",
    "latest_flag",
    "load_shift_check",
    "run_check_index",
    "shift_off_words",
    "shift_words",
    "watch_index",
]

SHIFT_EVENT = ev.ACCEPTANCE_SHIFT
"""The journal event of a run's shift check."""

RUN_SHARE = 0.5
"""Share of ``acceptance.shift_alpha`` the runs' own checks spend over their sequence."""
WATCH_SHARE = 0.5
"""Share the service's shift watch spends over its sequence (:mod:`dissensus.serve.shift_watch`)."""
EVERY = 100
"""Judged cases between two checks of the service's shift watch (``--shift-every``)."""


class ShiftOutcome(TypedDict, total=False):
    """A shift check's outcome as journalled (``acceptance.shift``): the fields of
    :class:`~dissensus.acceptance.shift.ShiftCheck`, the file's sha256 and the place of
    the check in the file's spending; ``run_id`` and ``words`` are added by readers
    (:func:`latest_flag`, the service)."""

    auc: float
    p_value: float
    shifted: bool
    alpha: float
    """The level this check was tested at (its share of ``file_alpha``)."""
    file_alpha: float
    """The file's lifetime level (``acceptance.shift_alpha``); absent from checks made
    before the level was spent over the file's life."""
    check: int
    """The check's index in its sequence (runs' own checks, or the watch's)."""
    calibration_n: int
    deployed_n: int
    judged_n: int
    """The judged cases the check was asked about (``deployed_n`` is those it tested: at
    most :data:`MAX_DEPLOYED`, a sample beyond)."""
    permutations: int
    """Label permutations of a permutation-test p-value: 0 now; checks journalled before
    the sample-split test hold theirs."""
    tested_n: list[int]
    """Calibration and deployed cases in the testing halves."""
    method: str
    """``exact`` or ``asymptotic`` (the Mann–Whitney p-value)."""
    reason: str
    file_sha256: str | None
    run_id: str
    """The run that journalled the check (:func:`latest_flag`)."""
    across_runs: int
    """A check of the service's shift watch (:mod:`dissensus.serve.shift_watch`): how many
    runs the checked cases came from (absent from a run's own check)."""
    newest_run: str
    """A watch's check: the run of the newest case it checked."""
    within_run: int
    """A run's check made while it ran (:mod:`dissensus.pipeline.shift_in_run`): the
    run's judged cases it looked at, its first ``within_run``."""
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
    check: int = 1,
    share: float = RUN_SHARE,
    seed: int = 0,
) -> ShiftOutcome | None:
    """The shift check of ``vectors`` against the file's calibration vectors, as JSON
    (``None`` when the file keeps none): the ``check``-th check of a sequence that spends
    ``share`` of the file's lifetime level ``alpha``
    (:func:`~dissensus.acceptance.shift.check_level`)."""
    raw = acceptance.get("shift_reference")
    if not raw:
        return None
    from dissensus.acceptance.shift import ShiftReference, check_level, shift_check_vectors

    # Each check draws its own seeded split of the samples, and what it
    # checks does not depend on the order the vectors came in.
    own = int(np.random.SeedSequence([seed, check, round(share * 1000)]).generate_state(1)[0])
    judged_n = len(vectors)
    if judged_n > MAX_DEPLOYED and _plain(vectors):
        # In an order fixed by the values, and sampled with a digest of them too: a sample
        # drawn by the seed alone would keep the same positions of that order every time,
        # no random sample of the cases (the split of the check avoids it the same way).
        ordered = sorted(
            ({k: float(x) + 0.0 for k, x in v.items()} for v in vectors),
            key=lambda v: sorted(v.items()),
        )
        digest = hashlib.blake2b(repr([sorted(v.items()) for v in ordered]).encode()).digest()
        vectors = random.Random(f"{own}:{digest.hex()}").sample(ordered, MAX_DEPLOYED)
    level = check_level(alpha, check, share=share)
    result = shift_check_vectors(ShiftReference.model_validate(raw), vectors, alpha=level, seed=own)
    sha = acceptance.get("sha256")
    return ShiftOutcome(
        auc=result.auc,
        p_value=result.p_value,
        shifted=result.shifted,
        alpha=result.alpha,
        file_alpha=alpha,
        check=check,
        calibration_n=result.calibration_n,
        deployed_n=result.deployed_n,
        judged_n=judged_n,
        permutations=result.permutations,
        tested_n=list(result.tested_n),
        method=result.method,
        reason=result.reason,
        file_sha256=None if sha is None else str(sha),
    )


def load_shift_check() -> None:
    """Import what a check needs (scipy, scikit-learn: about a second the first time), so
    that a caller can pay it before taking the journal's write lock."""
    import scipy.stats  # noqa: F401
    import sklearn.linear_model
    import sklearn.pipeline
    import sklearn.preprocessing  # noqa: F401

    import dissensus.acceptance.shift  # noqa: F401


def _plain(vectors: list[dict[str, float]]) -> bool:
    """Whether every value is a finite number (anything else leaves the check untested,
    and would make the order the sample is drawn in depend on the input's order)."""
    return all(isinstance(x, int | float) and math.isfinite(x) for v in vectors for x in v.values())


def checks_shift(acceptance: Mapping[str, Any] | None) -> bool:
    """Whether :func:`check_run` checks runs decided with ``acceptance`` (the journalled
    acceptance file's entry): only a file with a shift reference can be checked."""
    return bool(acceptance and acceptance.get("shift_reference"))


def shift_off_words(acceptance: Mapping[str, Any] | None) -> str | None:
    """One line saying that runs decided with ``acceptance`` (the journalled acceptance
    file's entry) are not shift-checked, when its file keeps no calibration vectors (a
    file written before the shift check); ``None`` when they are checked, or without a file."""
    if not acceptance or checks_shift(acceptance):
        return None
    sha = str(acceptance.get("sha256") or "")[:12]
    return (
        f"The shift check is off for this run: acceptance file {sha} keeps no calibration "
        "vectors (it was written before the shift check); calibrate a new file to have new "
        "cases compared with its calibration cases."
    )


def run_check_index(journal: Journal, file_sha256: str | None, run_id: str) -> int:
    """The index of run ``run_id``'s next own check of the file ``file_sha256``: 1 + the
    runs' own checks of that file journalled by other runs, and by this one while it ran
    (``within_run``; a watch's check, with ``across_runs``, is of the other sequence)."""
    earlier = sum(
        1
        for e in journal.events_of_type(SHIFT_EVENT)
        if (e.run_id != run_id or "within_run" in e.payload)
        and e.payload.get("file_sha256") == file_sha256
        and "across_runs" not in e.payload
    )
    return 1 + earlier


def watch_index(judged: int, every: int) -> int:
    """The index of the shift watch's check when ``judged`` cases were judged with the
    file in the journal, one check every ``every``: ``judged // every`` (0: no check yet).
    It is read from the journal, so a restarted server goes on numbering where it was."""
    return judged // every if every > 0 else 0


def check_run(
    journal: Journal,
    run_id: str,
    acceptance: Mapping[str, Any] | None,
    *,
    alpha: float,
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
    sha = acceptance.get("sha256")
    # Counted and journalled under one lock (module docstring): no two runs share an index.
    journal.lock_name(f"shift-check:{sha}")
    index = run_check_index(journal, None if sha is None else str(sha), run_id)
    outcome = check_vectors(acceptance, vectors, alpha=alpha, check=index, share=RUN_SHARE)
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


def holds(journal: Journal) -> dict[str, ShiftOutcome]:
    """Acceptance file (sha256) -> the flagged check that holds it: the files whose
    newest run's policy says ``on_shift: escalate`` and that a check has flagged, so that
    the next run started with them would commit nothing by learned acceptance."""
    newest: dict[str, Mapping[str, Any]] = {}
    for event in journal.events_of_type(ev.RUN_STARTED):
        acc = event.payload.get("acceptance")
        if isinstance(acc, dict) and acc.get("sha256"):
            newest[str(acc["sha256"])] = event.payload  # journal order: the last is newest
    out: dict[str, ShiftOutcome] = {}
    for sha, started in newest.items():
        policy = started.get("policy")
        settings = policy.get("acceptance") if isinstance(policy, dict) else None
        if isinstance(settings, dict) and settings.get("on_shift") == "escalate":
            flag = latest_flag(journal, sha)
            if flag is not None:
                out[sha] = flag
    return out


def _digits(p: float, alpha: float) -> int:
    """Significant digits that show ``p`` and the level ``alpha`` apart (2 when they differ
    there: "p = 0.0012 > level 0.0012" would contradict itself)."""
    for digits in range(2, 8):
        if f"{p:.{digits}g}" != f"{alpha:.{digits}g}":
            return digits
    return 8


def _level(outcome: Mapping[str, Any], digits: int = 2) -> str:
    """The check's level in words: of which check, and the file's lifetime level (for
    checks journalled with them)."""
    alpha = outcome.get("alpha")
    if alpha is None:
        return ""
    check = outcome.get("check")
    if check is None:
        return f"level {float(alpha):.{digits}g}"
    return f"level {float(alpha):.{digits}g} of check {int(check)}"


def _lifetime(outcome: Mapping[str, Any]) -> str:
    file_alpha = outcome.get("file_alpha")
    if file_alpha is None:
        return ""
    return (
        f" A file whose cases stay like its calibration cases is flagged with probability "
        f"at most {float(file_alpha):.2g} over its life."
    )


def shift_words(outcome: Mapping[str, Any]) -> str:
    """The shift check in plain words."""
    p = float(outcome.get("p_value", 1.0))
    from dissensus.acceptance.shift import MIN_CASES

    deployed = int(outcome.get("deployed_n", 0))
    calibration = int(outcome.get("calibration_n", 0))
    if calibration < MIN_CASES:
        return (
            f"Not checked: the acceptance file keeps {calibration} calibration case(s), and "
            f"the shift check needs at least {MIN_CASES}."
        )
    if deployed < MIN_CASES:
        return (
            f"Not checked yet: {deployed} judged case(s), and the shift check needs at "
            f"least {MIN_CASES}."
        )
    reason = str(outcome.get("reason", ""))
    if reason.startswith("not tested"):
        return f"Not checked: {reason.removeprefix('not tested: ')}."
    judged = int(outcome.get("judged_n", deployed))
    over = f"{deployed} cases" if judged == deployed else f"{deployed} of {judged} cases"
    alpha = outcome.get("alpha")
    digits = 2 if alpha is None else _digits(p, float(alpha))
    level = _level(outcome, digits)
    auc = float(outcome.get("auc", 0.5))
    if outcome.get("shifted"):
        against = f" ≤ {level}" if level else ""
        return (
            f"New cases look different from the {calibration} calibration cases "
            f"(shift check p = {p:.{digits}g}{against}, AUC {auc:.2f}): the "
            "guarantee may not hold for them; review more, and recalibrate on recent cases."
            + _lifetime(outcome)
        )
    if level and alpha is not None and p <= float(alpha):
        # Under the level, but the deployed cases score no higher (AUC 0.5 or below).
        against = f" ≤ {level}, but AUC {auc:.2f}: the deployed cases score no higher"
    else:
        against = (f" > {level}" if level else "") + f", AUC {auc:.2f}"
    # Not flagging is no evidence of likeness (another split of the same cases may flag
    # them): the words say what the test found, nothing more.
    return (
        f"No shift detected (shift check p = {p:.{digits}g}{against}, over {over} and the "
        f"{calibration} calibration cases)." + _lifetime(outcome)
    )
