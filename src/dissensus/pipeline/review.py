"""The human review queue: escalated cases waiting for a person, kept in the run journal.

An escalation journals a ``review.opened`` event holding a
:class:`~dissensus.pipeline.records.ReviewItem` (the panel, the readings, the positions
and value profiles side by side, any packet or certificate). The queue is a view of the
journal, not a second store: an item is *open* until a ``review.resolved`` event for it
exists. Resolving journals the human's decision and note, then *resumes the case*: a
``case.resolved`` event holds the case's new final record (``action: human``,
``auto: false``, the decision, the resolution), which supersedes the pipeline's record
in exports.

Choices where the design is silent: review ids are ``<run>.<line>``; a case can be
resolved once (a second resolution is an error, the first stands); the decision may be
any label, and a label outside the item's options is allowed but flagged
(``outside_options``) because a reviewer may reject every option; a case whose run was
killed before its record was journalled cannot be resolved until the run is resumed.
"""

from __future__ import annotations

from collections.abc import Iterator

from pydantic import BaseModel

from dissensus.errors import DissensusError, InputError
from dissensus.pipeline.records import CaseRecord, Resolution, ReviewItem
from dissensus.store.journal import Journal

__all__ = ["ReviewStatus", "final_records", "find_item", "list_items", "resolve"]


class ReviewStatus(BaseModel):
    """One queue entry."""

    item: ReviewItem
    resolution: Resolution | None


def _split(review_id: str) -> tuple[str, int]:
    run_id, sep, line = review_id.rpartition(".")
    if not sep or not run_id or not line.isdigit():
        raise InputError(f"not a review id: {review_id!r} (expected <run>.<line>)")
    return run_id, int(line)


def _resolution(journal: Journal, run_id: str, line: int) -> Resolution | None:
    event = journal.get(run_id, f"review/{line}/resolved")
    if event is None:
        return None
    return Resolution.model_validate({k: event.payload[k] for k in ("decision", "note", "reviewer")})


def list_items(journal: Journal, *, run_id: str | None = None, include_resolved: bool = False) -> Iterator[ReviewStatus]:
    """Queue entries (open ones only unless ``include_resolved``), oldest run first."""
    events = journal.events(run_id, type="review.opened") if run_id else journal.events_of_type("review.opened")
    for event in events:
        item = ReviewItem.model_validate(event.payload)
        resolution = _resolution(journal, item.run_id, item.line)
        if resolution is None or include_resolved:
            yield ReviewStatus(item=item, resolution=resolution)


def find_item(journal: Journal, review_id: str) -> ReviewStatus:
    """The queue entry ``review_id`` (:class:`InputError` when there is none)."""
    run_id, line = _split(review_id)
    if journal.run(run_id, missing_ok=True) is None:
        raise InputError(f"no review item {review_id!r}: no run {run_id!r} in {journal.path}")
    event = journal.get(run_id, f"case/{line}/review")
    if event is None:
        raise InputError(f"no review item {review_id!r} in {journal.path}")
    item = ReviewItem.model_validate(event.payload)
    return ReviewStatus(item=item, resolution=_resolution(journal, run_id, line))


def resolve(journal: Journal, review_id: str, *, decision: str, note: str, reviewer: str | None = None) -> CaseRecord:
    """Record a human decision on an escalated case and return the case's new record."""
    if not decision.strip():
        raise InputError("the decision must not be empty")
    status = find_item(journal, review_id)
    if status.resolution is not None:
        raise DissensusError(
            f"review item {review_id} was already resolved ({status.resolution.decision!r}: {status.resolution.note})"
        )
    run_id, line = _split(review_id)
    stored = journal.get(run_id, f"case/{line}/record")
    if stored is None:
        raise DissensusError(f"run {run_id} has not finished case {line}: resume it first (dissensus runs resume {run_id})")
    original = CaseRecord.model_validate(stored.payload)
    outside = bool(status.item.options) and decision not in status.item.options
    journal.append(
        run_id,
        "review.resolved",
        {"review_id": review_id, "decision": decision, "note": note, "reviewer": reviewer, "outside_options": outside},
        key=f"review/{line}/resolved",
        case=str(line),
    )
    resolution = Resolution(decision=decision, note=note, reviewer=reviewer)
    record = original.model_copy(
        update={
            "action": "human",
            "decision": decision,
            "auto": False,
            "basis": "human",
            "reason": f"{original.reason}; resolved by a reviewer: {note}" if note else f"{original.reason}; resolved by a reviewer",
            "path": [*original.path, "human:resolved"],
            "resolution": resolution,
        }
    )
    journal.append(run_id, "case.resolved", record.model_dump(mode="json"), key=f"case/{line}/resolved", case=str(line))
    return record


def final_records(journal: Journal, run_id: str) -> list[CaseRecord]:
    """The run's final records in input order, human resolutions superseding escalations."""
    records: dict[str, CaseRecord] = {}
    for event in journal.events(run_id, type="case.record"):
        records[str(event.case)] = CaseRecord.model_validate(event.payload)
    for event in journal.events(run_id, type="case.resolved"):
        records[str(event.case)] = CaseRecord.model_validate(event.payload)
    return sorted(records.values(), key=lambda r: r.line)
