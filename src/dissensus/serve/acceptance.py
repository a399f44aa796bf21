"""``GET /v1/acceptance``: the server's learned acceptance, watched while it is used.

The answer names the acceptance file (sha256, score family, target, confidence,
calibration cases, threshold), states its guarantee in plain words, gives the
acceptance monitor of that file (``monitor``: per stratum, the answered blind audits,
the audited precision and its anytime-valid bounds, suspended or not, after how many
audits and since when; :func:`dissensus.pipeline.audit.monitor_status`, the function
``dissensus acceptance status`` prints), and runs the
label-free shift check (:mod:`dissensus.pipeline.shift`) over a *window*: the latest
:data:`WINDOW` cases judged with this file in the journal, across runs. ``hold`` is the
newest flagged check of the file when the policy says ``acceptance.on_shift: escalate``
(new runs then commit nothing on it).

Choices this module makes: the window is read from the journal at each
request, on from the service's last read of the judged cases (the shift watch's
:class:`~dissensus.pipeline.shift_watch.JudgedCases`: only the cases judged since, in
one snapshot of the journal, checked to be the same cases a read of them all would
find, so several servers agree); the check runs in a worker
thread; it is tested at the level of the shift watch's check of as many judged cases
(:func:`~dissensus.pipeline.shift.watch_index`; index 1 below ``--shift-every`` cases),
over the latest cases (the watch's own check looks at those up to the last multiple of
``--shift-every``, so the two differ by the cases judged since); it is journalled
nowhere and holds nothing; without an acceptance file the answer says so (``file: null``). When the
monitor's library (``confseq``, extra ``monitor``) is not installed and audits have been
answered, ``monitor`` is ``null`` and ``monitor_error`` says how to install it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from dissensus.acceptance.bound import plain_guarantee
from dissensus.deprecation import deprecated_names, renamed
from dissensus.errors import ConfigError
from dissensus.pipeline.audit import MonitorRow, monitor_status
from dissensus.pipeline.shift import (
    EVERY,
    WATCH_SHARE,
    check_vectors,
    latest_flag,
    shift_words,
    watch_index,
)
from dissensus.pipeline.shift_watch import WINDOW, JudgedCases, judged_vectors
from dissensus.pipeline.spec import RunSpec
from dissensus.store.journal import Journal

__all__ = [
    "WINDOW",
    "AcceptanceFileSummary",
    "AcceptanceStatus",
    "acceptance_status",
    "judged_vectors",
    "monitor_rows",
]


def monitor_rows(
    journal: Journal,
    acceptance_sha256: str | None = None,
    *,
    files: Mapping[str, Any] | None = None,
) -> tuple[list[MonitorRow] | None, str | None]:
    """The monitor's rows (:func:`~dissensus.pipeline.audit.monitor_status`; ``files``:
    the acceptance files the runs name, when the desk keeps them), or ``None`` and why
    when its library is missing."""
    try:
        return monitor_status(journal, acceptance_sha256, files=files), None
    except ConfigError as exc:
        return None, str(exc)


class AcceptanceFileSummary(BaseModel):
    """The acceptance file the server decides with, as ``GET /v1/acceptance`` names it (the
    file itself is :class:`dissensus.acceptance.AcceptanceFile`)."""

    sha256: str | None
    family: str
    """The score family (``learned`` for files written before families)."""
    target_precision: float
    delta: float
    """One minus the guarantee's confidence."""
    calibration_n: int
    threshold: float | None
    """``None``: no threshold met the target; the file accepts nothing."""


class AcceptanceStatus(BaseModel):
    """The answer of ``GET /v1/acceptance`` (every part ``None`` without an acceptance file)."""

    file: AcceptanceFileSummary | None = None
    guarantee: str | None = None
    """The guarantee in plain words."""
    # The shift check's and the hold's JSON pass through untouched (pipeline.shift's own).
    shift: dict[str, Any] | None = None
    hold: dict[str, Any] | None = None
    monitor: list[MonitorRow] | None = None
    monitor_error: str | None = None


def acceptance_status(
    journal: Journal, spec: RunSpec, *, every: int = 100, cases: JudgedCases | None = None
) -> AcceptanceStatus:
    """The answer of ``GET /v1/acceptance`` (``every``: the server's ``--shift-every``,
    which numbers the shift watch's checks; the window's check is reported at the level
    of the watch's check of the same number of judged cases; ``cases``: the judged cases
    read so far, read on from there; default: all of them read)."""
    data = spec.acceptance
    if data is None:
        return AcceptanceStatus()
    sha = data.get("sha256")
    target = float(data.get("target_precision", 0.0))
    delta = float(data.get("delta", 1.0))
    calibration_n = int(data.get("calibration_n", 0))
    file = AcceptanceFileSummary(
        sha256=sha,
        family=data.get("family", "learned"),
        target_precision=target,
        delta=delta,
        calibration_n=calibration_n,
        threshold=data.get("threshold"),
    )
    guarantee = (
        plain_guarantee(target, delta, calibration_n) + "."
        if data.get("threshold") is not None
        else "This acceptance file accepts nothing: no threshold met the target."
    )
    judged = (cases if cases is not None else JudgedCases()).read(journal, sha)
    vectors = [vector for vector, _ in judged.vectors()]
    settings = spec.policy.acceptance
    shift = check_vectors(
        data,
        vectors,
        alpha=settings.shift_alpha,
        check=max(1, watch_index(len(judged), every or EVERY)),
        share=WATCH_SHARE,
    )
    if shift is not None:
        shift["words"] = shift_words(shift)
    hold = latest_flag(journal, sha) if spec.policy.acceptance.on_shift == "escalate" else None
    rows, error = monitor_rows(journal, str(sha)) if sha else ([], None)
    return AcceptanceStatus(
        file=file, guarantee=guarantee, shift=shift, hold=hold, monitor=rows, monitor_error=error
    )


__getattr__ = deprecated_names(
    __name__,
    renamed(
        __name__,
        globals(),
        {"AcceptanceFile": "AcceptanceFileSummary"},
        "dissensus.acceptance.AcceptanceFile is the file itself",
    ),
)
