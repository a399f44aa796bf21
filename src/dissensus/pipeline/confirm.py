"""Reviewers confirming automatic decisions: audit labels the acceptance calibration reads.

Escalations reach a person by themselves; automatic decisions do not. A reviewer who
audits an automatically committed case journals what the right decision was
(``dissensus review confirm <run>.<line>``): the committed decision itself (a
*confirmation*) or another one (a *correction*). Each audit is a labelled case for
``calibrate-acceptance --journal`` (:mod:`dissensus.pipeline.labels`), read with the
features the pipeline had when it decided: the panel it journalled (``case.input``),
its first reading, the guard's check and the second answers of its last follow-up.
Audits matter to the guarantee: calibrating on escalations alone would teach the model
only about the cases it was unsure of.

Choices this module makes:

* Only cases the pipeline committed by itself (``auto: true``) can be confirmed; an
  escalated case is decided with ``review resolve`` instead, and a case whose run has not
  journalled its record yet cannot be confirmed until the run is resumed.
* A case is audited once: a second audit is :class:`AlreadyConfirmed`, naming who
  audited it and when (the first stands), like a second resolution.
* A correction makes the reviewer's decision the case's final record (``case.resolved``,
  ``action: human``, the same as a resolution), in the same transaction as the audit, so
  exports never show a decision a person has said is wrong. A confirmation leaves the
  record as it is.
* The note is required, as for resolutions: an audit says why.
* **A blind audit needs the reviewer's own decision.** A case the pipeline opened a blind
  audit for (:mod:`dissensus.pipeline.audit`) is audited with an explicit ``decision``,
  made without seeing the committed one: without it the audit would be the committed
  decision confirmed unseen, a label that agrees by construction
  (:class:`~dissensus.errors.InputError`; the review page refuses "no pick" alike).
* Claims hold for audits as for resolutions: a reviewer other than the holder of a live
  claim on ``<run>.<line>`` is refused (:class:`~dissensus.store.errors.ClaimConflict`),
  and so is an audit without a reviewer name (a library call), who holds no claim. The
  claim is taken
  with :func:`claim_audit` (the service's claim endpoint and pages), on an automatic
  decision not audited yet, under the run's write lock: a claim on a case audited a
  moment before is :class:`AlreadyConfirmed`, never granted. An audit releases its
  reviewer's claim, as a resolution does.
* A decision is trimmed of white space, except one of the case's options (or the
  committed decision) as given (:func:`~dissensus.pipeline.review.as_decision`): the
  committed ``"yes "`` confirmed was journalled as a correction to ``"yes"``.
* A decision that is none of the case's options (every label an agent gave, plus the
  task's options, as a review item lists them) is journalled with ``outside_options``,
  as a resolution is, and calibration leaves it out alike
  (:mod:`dissensus.pipeline.labels`).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from dissensus.cases import option_ids
from dissensus.errors import DissensusError, InputError
from dissensus.pipeline.compact import case_step
from dissensus.pipeline.records import CaseRecord, Resolution
from dissensus.pipeline.review import (
    as_decision,
    check_resolution_fields,
    human_record,
    refuse_others_claim,
    split_ref,
)
from dissensus.pipeline.steps import CaseInput
from dissensus.store import event_types as ev
from dissensus.store.claims import Claim
from dissensus.store.errors import CaseClosed
from dissensus.store.events import Event
from dissensus.store.journal import Journal
from dissensus.store.targets import journal_option
from dissensus.types import Panel

__all__ = [
    "AlreadyConfirmed",
    "Confirmation",
    "case_options",
    "claim_audit",
    "confirm",
    "refuse_conflicts",
]

EVENT = ev.REVIEW_CONFIRMED


class AlreadyConfirmed(DissensusError):
    """The case was audited before (by ``reviewer`` at ``at``)."""

    def __init__(self, ref: str, *, reviewer: str | None, at: str, decision: str) -> None:
        who = reviewer or "an unnamed reviewer"
        super().__init__(f"case {ref} was already audited by {who} at {at} (decision {decision!r})")
        self.ref = ref
        self.reviewer = reviewer
        self.at = at
        self.decision = decision


class Confirmation(BaseModel):
    """One audit of an automatic decision, as journalled."""

    model_config = ConfigDict(frozen=True)

    case_ref: str
    """``<run>.<line>``."""
    id: str
    """The panel's id."""
    committed: str | None
    """The decision the pipeline committed."""
    decision: str
    """The reviewer's decision (the label calibration reads)."""
    agrees: bool
    """True for a confirmation, False for a correction."""
    note: str
    reviewer: str | None = None
    outside_options: bool = False
    """The decision is none of the case's options (:func:`case_options`)."""


def case_options(panel: Panel) -> list[str]:
    """The decisions on the table for an audit: every label an agent gave, plus the
    task's options, as a review item lists them."""
    labels = {o.decision for o in panel.outputs if o.decision is not None}
    return sorted(labels | set(option_ids(panel.meta)))


def confirm(
    journal: Journal,
    ref: str,
    *,
    note: str,
    decision: str | None = None,
    reviewer: str | None = None,
) -> Confirmation:
    """Journal a reviewer's audit of the automatic decision of case ``ref``.

    ``decision`` defaults to the committed decision (a confirmation).
    """
    check_resolution_fields(decision=decision, note=note, reviewer=reviewer)
    run_id, line = _checked_ref(journal, ref)
    with journal.transaction(run_id):
        record = _automatic_record(journal, ref, run_id, line)
        _refuse_conflicts(journal, ref, run_id, line, reviewer)
        # The blind audit item of the case (pipeline.audit's key; that module imports this).
        if decision is None and journal.get(run_id, f"case/{line}/audit") is not None:
            raise InputError(
                f"case {ref} is a blind audit: give your own decision (--decision), made "
                "without looking at the committed one; confirming it unseen would record a "
                "label that agrees by construction"
            )
        given = case_step(journal, run_id, line, "input")
        options = case_options(CaseInput.model_validate(given).panel) if given else []
        # An option's id is kept exactly ("yes "), any other answer trimmed (as_decision).
        known = {*options, *([record.decision] if record.decision is not None else [])}
        chosen = as_decision(decision, known) if decision is not None else record.decision
        audit = Confirmation(
            case_ref=ref,
            id=record.id,
            committed=record.decision,
            decision=chosen,
            agrees=chosen == record.decision,
            note=note,
            reviewer=reviewer,
            outside_options=bool(options) and chosen not in options,
        )
        journal.append(
            run_id, EVENT, audit.model_dump(mode="json"), key=f"confirm/{line}", case=str(line)
        )
        if not audit.agrees:
            corrected = human_record(
                record, Resolution(decision=chosen, note=note, reviewer=reviewer), "corrected"
            )
            journal.append(
                run_id,
                ev.CASE_RESOLVED,
                corrected.model_dump(mode="json"),
                key=f"case/{line}/resolved",
                case=str(line),
            )
        if reviewer is not None:  # in the audit's own transaction (see review.resolve)
            journal.release_claim(ref, reviewer)
    return audit


def claim_audit(journal: Journal, ref: str, who: str, *, ttl: float) -> Claim:
    """Claim the audit of the automatic decision of case ``ref`` for ``who`` for ``ttl``
    seconds (renews ``who``'s own claim).

    :class:`InputError` when ``ref`` is no automatic decision; :class:`AlreadyConfirmed`
    when it was audited (checked again under the run's write lock);
    :class:`~dissensus.store.errors.ClaimConflict` when someone else holds it.
    """
    run_id, line = _checked_ref(journal, ref)
    _automatic_record(journal, ref, run_id, line)
    try:
        return journal.claim(ref, who, ttl, run_id=run_id, closed_by=f"confirm/{line}")
    except CaseClosed as closed:
        raise _already(ref, closed.event) from None


def refuse_conflicts(journal: Journal, ref: str, reviewer: str | None) -> None:
    """Raise what refuses an audit of case ``ref`` by ``reviewer`` whatever it answers:
    an audit journalled before (:class:`AlreadyConfirmed`), another reviewer's live
    claim. :func:`confirm` checks the same again in the transaction that writes; a form
    checks it first, so a reviewer is not sent to fix a form that can no longer be sent."""
    run_id, line = _checked_ref(journal, ref)
    _refuse_conflicts(journal, ref, run_id, line, reviewer)


def _refuse_conflicts(
    journal: Journal, ref: str, run_id: str, line: int, reviewer: str | None
) -> None:
    done = journal.get(run_id, f"confirm/{line}")
    if done is not None:
        raise _already(ref, done)
    refuse_others_claim(journal, ref, reviewer, f"case {ref}")


def _checked_ref(journal: Journal, ref: str) -> tuple[str, int]:
    run_id, line = split_ref(ref, "case reference")
    if journal.run(run_id, missing_ok=True) is None:
        raise InputError(f"no case {ref!r}: no run {run_id!r} in {journal.path}")
    return run_id, line


def _automatic_record(journal: Journal, ref: str, run_id: str, line: int) -> CaseRecord:
    """The record the pipeline committed by itself for case ``ref`` (:class:`InputError`
    for a case with no record yet or one that was not decided automatically)."""
    stored = journal.get(run_id, f"case/{line}/record")
    if stored is None:
        raise InputError(
            f"no record for case {ref!r}: no such line, or the run has not finished it "
            f"(dissensus runs resume {run_id}{journal_option(journal.path)})"
        )
    record = stored.read_as(CaseRecord)
    if not record.auto or record.decision is None:
        raise InputError(
            f"case {ref!r} was not decided automatically ({record.action}): "
            + (
                f"resolve it with `dissensus review resolve {record.review_id}"
                f"{journal_option(journal.path)} --decision D --note TEXT`"
                if record.review_id
                else "there is no automatic decision to confirm"
            )
        )
    return record


def _already(ref: str, done: Event) -> AlreadyConfirmed:
    return AlreadyConfirmed(
        ref,
        reviewer=done.payload.get("reviewer"),
        at=done.at,
        decision=str(done.payload.get("decision")),
    )
