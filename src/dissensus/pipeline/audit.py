"""Blind audits of automatic commits: which cases are audited, and what the audits said.

A seeded share (``acceptance.audit_rate``) of automatic commits also journals a *blind
audit item* (``review.audit``, key ``case/<line>/audit``): the case's review item with
the committed answer, the suggestion, the acceptance step, the guard's check and the
readings' plurality decision withheld, so the reviewer judges the case afresh. The
reviewer answers it with ``dissensus review confirm <run>.<line>`` (or the service's
confirm endpoint): the case record stays automatic, and the confirmation or correction
is an unbiased label for ``calibrate-acceptance --journal`` and for the acceptance
monitor (:mod:`dissensus.acceptance.monitor`).

Choices this module makes:

* A case is audited when ``sha256("<seed>:<run id>:<line>")``, read as a number in
  [0, 1), is below the rate: deterministic, so a resumed run picks the same cases, and
  independent of the case's content (no panel can be written to avoid its audit). A
  door that makes a run of each panel draws with that run's id: every door audits the
  same share, not the same cases.
* Audit items are not in the review queue (``review list`` shows escalations); they are
  listed by :func:`open_audits` (``dissensus review audits``). An audit is open until
  the case is confirmed or corrected.
* CONCORD certificates are not audited: they commit on the agents' own utilities, not on
  an acceptance rule.
* Audit outcomes are read in journal order (runs in start order, then sequence), one
  list per acceptance stratum, counting only audits of runs that decided with the same
  acceptance file (its ``sha256``); audits still open do not count.
* :func:`monitor_status` is the one account of the monitor every door shows
  (``dissensus acceptance status``, the review page, ``GET /v1/acceptance``). A
  suspended stratum is suspended *since* the journal time of the answer to the audit
  that took its upper bound below the target (the evidence's time; runs journal
  ``acceptance.suspended`` later, when a case first meets the suspension).
* :func:`run_acceptance` is what one run met: the strata the monitor suspended for it
  (its own ``acceptance.suspended`` events, each the monitor's verdict as
  :func:`monitor_status` computes it for the file) and the shift hold it started with
  (its specification's ``shift_hold``, the flag :func:`dissensus.pipeline.shift.holds`
  reports) or met on a resume (its ``acceptance.held`` event, ``held_on_resume``), so that a run decided before a suspension is not said to be suspended.
  ``decide``'s summary and ``dissensus runs show`` (``--json``: ``acceptance``) say it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping

from pydantic import BaseModel, ConfigDict

from dissensus.acceptance.monitor import MonitorStep
from dissensus.pipeline.confirm import EVENT as CONFIRMED
from dissensus.pipeline.records import ReviewItem
from dissensus.pipeline.run_events import HELD_KEY
from dissensus.store import event_types as ev
from dissensus.store.events import Event
from dissensus.store.journal import Journal
from dissensus.types import JsonObject

__all__ = [
    "AUDIT_OPENED",
    "MonitorRow",
    "RunAcceptance",
    "SuspendedStratum",
    "acceptance_of",
    "audit_item",
    "audit_outcomes",
    "audit_share",
    "is_audited",
    "journalled_suspensions",
    "kept_suspended",
    "monitor_status",
    "open_audits",
    "run_acceptance",
]

AUDIT_OPENED = ev.REVIEW_AUDIT


def audit_share(seed: int, run_id: str, line: int) -> float:
    """The case's position in [0, 1): audited when below the audit rate."""
    digest = hashlib.sha256(f"{seed}:{run_id}:{line}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def is_audited(seed: int, run_id: str, line: int, rate: float) -> bool:
    """Whether the automatic commit of case ``line`` of ``run_id`` opens a blind audit."""
    return rate > 0 and audit_share(seed, run_id, line) < rate


def audit_item(journal: Journal, run_id: str, line: int) -> ReviewItem | None:
    """The blind audit item of case ``line`` of ``run_id``, if it was audited."""
    event = journal.get(run_id, f"case/{line}/audit")
    return event.read_as(ReviewItem) if event is not None else None


def open_audits(journal: Journal, run_id: str | None = None) -> Iterator[ReviewItem]:
    """Audit items not yet confirmed or corrected (one run, or every run)."""
    events = (
        journal.events(run_id, type=AUDIT_OPENED)
        if run_id
        else journal.events_of_type(AUDIT_OPENED)
    )
    for event in events:
        if journal.get(event.run_id, f"confirm/{event.case}") is None:
            yield event.read_as(ReviewItem)


def _answered(journal: Journal, acceptance_sha256: str) -> dict[str, list[tuple[bool, str]]]:
    """Stratum -> (the committed answer was right, when the audit was answered), in the
    order the audits were *answered*, over every run that decided with the acceptance file.

    The order is the one in which outcomes became known, so a new answer only ever
    extends the sequence at its end: the bounds already computed (and a suspension they
    gave) stay as they were. Ordered by when audits were opened, an early audit answered
    late would be inserted before outcomes already seen and could lift a suspension.
    """
    found: dict[str, list[tuple[str, str, int, bool]]] = {}
    for event in journal.events_of_type(AUDIT_OPENED):
        payload = event.payload
        if payload.get("acceptance_sha256") != acceptance_sha256:
            continue
        done = journal.get(event.run_id, f"confirm/{event.case}")
        if done is None or done.type != CONFIRMED:
            continue
        stratum = str(payload.get("stratum") or "all")
        found.setdefault(stratum, []).append(
            (done.at, done.run_id, done.seq, bool(done.payload.get("agrees")))
        )
    return {
        stratum: [(right, at) for at, _, _, right in sorted(rows)]
        for stratum, rows in found.items()
    }


def journalled_suspensions(journal: Journal, acceptance_sha256: str) -> dict[str, Event]:
    """Stratum -> the first ``acceptance.suspended`` event any run journalled for the
    acceptance file ``acceptance_sha256``: a suspension, once journalled, stays (only a
    new acceptance file lifts it), whatever the audits answered since."""
    out: dict[str, Event] = {}
    for event in journal.events_of_type(ev.ACCEPTANCE_SUSPENDED):
        payload = event.payload
        if payload.get("acceptance_sha256") != acceptance_sha256:
            continue
        stratum = str(payload.get("stratum") or "all")
        if stratum not in out or event.at < out[stratum].at:
            out[stratum] = event
    return out


def kept_suspended(step: MonitorStep, suspension: Event | None) -> MonitorStep:
    """``step``, suspended as journalled when an earlier run suspended its stratum."""
    if suspension is None or step.suspended:
        return step
    after = suspension.payload.get("suspended_after")
    return step.model_copy(
        update={"suspended": True, "suspended_after": after if isinstance(after, int) else None}
    )


def audit_outcomes(journal: Journal, acceptance_sha256: str) -> dict[str, list[bool]]:
    """Stratum -> the answered audits' outcomes (True: the committed answer was right),
    in the order they were answered, over every run that decided with the acceptance file
    ``acceptance_sha256``."""
    return {
        stratum: [right for right, _ in answers]
        for stratum, answers in _answered(journal, acceptance_sha256).items()
    }


class MonitorRow(BaseModel):
    """The acceptance monitor of one acceptance file and stratum, as every door shows it."""

    model_config = ConfigDict(frozen=True)

    acceptance_sha256: str
    """The acceptance file (its sha256) the audited runs decided with."""
    stratum: str
    audits: int
    """Answered blind audits."""
    correct: int
    """Audits that confirmed the committed answer."""
    precision: float | None
    """Audited precision (``correct / audits``); ``None`` without audits."""
    lower: float
    """Anytime-valid lower bound on precision (level ``delta``)."""
    upper: float
    """Anytime-valid upper bound on precision; below ``target`` means suspended."""
    target: float
    delta: float
    suspended: bool
    suspended_after: int | None = None
    """Audits at which the upper bound first fell below the target."""
    suspended_at: str | None = None
    """When the audit that suspended the stratum was answered (journal time, UTC)."""
    reason: str | None = None
    """The escalation reason later cases of a suspended stratum carry."""


def monitor_status(
    journal: Journal,
    acceptance_sha256: str | None = None,
    *,
    files: Mapping[str, JsonObject] | None = None,
) -> list[MonitorRow]:
    """The acceptance monitor of every acceptance file the journal's runs decided with
    (or only ``acceptance_sha256``): one row per file and audited stratum (a file without
    answered audits: one row for stratum ``all`` with no audits). ``files``: those
    files by sha256 as the runs' starts name them (the first run's copy of each), when
    the caller keeps them; else every run's start is read."""
    from dissensus.acceptance.monitor import ONE_STRATUM, monitor

    if files is None:
        found: dict[str, JsonObject] = {}
        for event in journal.events_of_type(ev.RUN_STARTED):
            acc = event.payload.get("acceptance")
            if isinstance(acc, dict) and acc.get("sha256"):
                found.setdefault(str(acc["sha256"]), acc)
        files = found
    rows = []
    for sha, acc in files.items():
        if acceptance_sha256 is not None and sha != acceptance_sha256:
            continue
        target, delta = float(acc["target_precision"]), float(acc["delta"])
        strata = _answered(journal, sha) or {ONE_STRATUM: []}
        suspensions = journalled_suspensions(journal, sha)
        for stratum, answers in sorted(strata.items()):
            kept = suspensions.get(stratum)
            step = monitor(
                [right for right, _ in answers],
                target=target,
                delta=delta,
                stratum=stratum,
                acceptance_sha256=sha,
            )
            # When the audits suspend the stratum, the time the deciding audit was
            # answered; when only a journalled suspension does, the time it was journalled.
            at = answers[step.suspended_after - 1][1] if step.suspended_after else None
            if not step.suspended and kept is not None:
                step, at = kept_suspended(step, kept), kept.at
            after = step.suspended_after
            rows.append(
                MonitorRow(
                    acceptance_sha256=sha,
                    stratum=stratum,
                    audits=step.audits,
                    correct=step.correct,
                    precision=step.correct / step.audits if step.audits else None,
                    lower=step.lower,
                    upper=step.upper,
                    target=target,
                    delta=delta,
                    suspended=step.suspended,
                    suspended_after=after,
                    suspended_at=at,
                    reason=step.reason() if step.suspended else None,
                )
            )
    return rows


class SuspendedStratum(BaseModel):
    """A stratum whose automatic commits the monitor suspended in a run."""

    model_config = ConfigDict(frozen=True)

    stratum: str
    reason: str
    """The escalation reason its cases carried (``acceptance suspended: ...``)."""
    suspended_after: int | None = None
    """Audits at which the upper bound first fell below the target."""


class RunAcceptance(BaseModel):
    """What stopped learned acceptance in one run, if anything (:func:`run_acceptance`)."""

    model_config = ConfigDict(frozen=True)

    suspended: list[SuspendedStratum]
    """The strata the acceptance monitor suspended for the run (empty: none)."""
    held: str | None = None
    """Why the run's acceptance file is on hold (a flagged shift check)."""
    held_on_resume: bool = False
    """Whether the hold came after the run started (a check flagged the file, on a resume
    or while it ran): the cases journalled before it keep their records, automatic
    commits among them."""
    held_within_run: int | None = None
    """The run's judged cases at the check that held it while it ran (``None``: the hold
    came on a resume, or at the start)."""

    def words(self) -> str | None:
        """One sentence for a run's summary (``None``: learned acceptance was free)."""
        if self.held is not None and self.held_within_run is not None:
            return (
                "Learned acceptance is held after a shift check flagged its file while the "
                f"run ran, after {self.held_within_run} judged cases: {self.held}; it "
                "commits nothing from then on (the cases decided before it keep their "
                "records), and the cases it would have judged go to review."
            )
        if self.held is not None and self.held_on_resume:
            return (
                "Learned acceptance is held after a shift check flagged its file while the "
                f"run was stopped: {self.held}; it commits nothing from the resume on (the "
                "cases decided before it keep their records), and the cases it would have "
                "judged go to review."
            )
        if self.held is not None:
            return (
                f"Learned acceptance is held after a flagged shift check: {self.held}; it "
                "commits nothing in this run, and the cases it would have judged go to review."
            )
        if self.suspended:
            why = "; ".join(s.reason.removeprefix("acceptance suspended: ") for s in self.suspended)
            return (
                f"Learned acceptance is suspended: {why}; the cases it would have committed "
                "go to review until a new acceptance file is calibrated."
            )
        return None


def run_acceptance(journal: Journal, run_id: str) -> RunAcceptance | None:
    """The suspensions and the hold learned acceptance met in run ``run_id`` (``None``
    for a run without an acceptance file; module docstring)."""
    started = journal.get(run_id, "run/started")
    if started is None or not isinstance(started.payload.get("acceptance"), dict):
        return None
    return acceptance_of(
        started,
        journal.events(run_id, type=ev.ACCEPTANCE_SUSPENDED),
        held=journal.get(run_id, HELD_KEY),
    )


def acceptance_of(
    started: Event | None, suspensions: Iterable[Event], *, held: Event | None = None
) -> RunAcceptance | None:
    """:func:`run_acceptance` of a run whose ``run/started`` event, ``acceptance.suspended``
    events (in sequence order) and ``acceptance.held`` event (``held``: none when the
    run met no flag on a resume) were read already (a command gathering what it shows in
    one pass over the run)."""
    if started is None or not isinstance(started.payload.get("acceptance"), dict):
        return None
    suspended = []
    for event in suspensions:
        payload = event.payload
        after = payload.get("suspended_after")
        suspended.append(
            SuspendedStratum(
                stratum=str(payload.get("stratum") or "all"),
                reason=str(payload.get("reason") or "acceptance suspended"),
                suspended_after=after if isinstance(after, int) else None,
            )
        )
    hold = started.payload.get("shift_hold")
    if hold:
        return RunAcceptance(suspended=suspended, held=str(hold))
    since = held.payload.get("hold") if held is not None else None
    within = held.payload.get("within_run") if held is not None else None
    return RunAcceptance(
        suspended=suspended,
        held=str(since) if since else None,
        held_on_resume=bool(since),
        held_within_run=within if isinstance(within, int) and since else None,
    )
