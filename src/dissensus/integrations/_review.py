"""The review path every integration shares: the content hash and the checked resolve.

A human resolution quotes the hash of the content the reviewer saw, and is refused when
that content changed or the item was already resolved. The integrations resolve through
:func:`resolve_checked`, which adds those two checks to
:func:`dissensus.pipeline.review.resolve` (the CLI's path), so a case resolved from a
LangGraph interrupt or an MCP tool leaves the same journal events as one resolved with
``dissensus review resolve``.

Choices where the design is silent:

* ``content_sha256`` is the hex sha256 of the canonical JSON
  (:func:`dissensus.store.canonical`: sorted keys, compact, UTF-8) of the review item as
  journalled, i.e. ``ReviewItem.model_dump(mode="json")``: the case, the readings, the
  positions and reasons side by side, any packet or certificate -- everything a
  reviewer is shown. The item is the single source of what was shown, so the hash is
  the same wherever it is computed; this module is the one place that defines it.
* An already-resolved item is refused with an error naming the reviewer and the time of
  the first resolution (the ``review.resolved`` event's timestamp); the first stands.
* The checks and the append are not one transaction here: two resolutions racing in the
  same instant can both pass the check, and the journal's idempotent key then keeps the
  first and refuses the second with a conflict.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dissensus.errors import DissensusError
from dissensus.pipeline.records import CaseRecord, ReviewItem
from dissensus.pipeline.review import ReviewStatus, find_item, resolve
from dissensus.store import Journal
from dissensus.store.canonical import canonical, sha256_text

__all__ = [
    "AlreadyResolved",
    "PositionView",
    "ReviewAnswer",
    "ReviewRequest",
    "StaleReview",
    "content_sha256",
    "resolve_checked",
    "resolved_record",
    "review_request",
]


class StaleReview(DissensusError):
    """The content hash quoted by a resolution is not the hash of the item's content."""


class AlreadyResolved(DissensusError):
    """The review item already has a resolution (the first one stands)."""


def content_sha256(item: ReviewItem) -> str:
    """Hex sha256 of the canonical JSON of ``item`` (what the reviewer is shown)."""
    return sha256_text(canonical(item.model_dump(mode="json")))


_item_hash = content_sha256  # the resolver's keyword argument shadows the name


class PositionView(BaseModel):
    """One agent's decision and reason, as the reviewer sees it (agent text is untrusted)."""

    model_config = ConfigDict(frozen=True)

    agent: str
    decision: str | None
    reasoning: str


class ReviewRequest(BaseModel):
    """What a reviewer is asked: the item in brief, with the hash to quote back."""

    model_config = ConfigDict(frozen=True)

    review_id: str
    """Id of the review item (``<run>.<line>``)."""
    case_id: str
    question: str | None
    """The case's ``meta.question`` (or ``meta.input``), when the panel has one."""
    options: list[str]
    suggestion: str | None
    """The panel's plurality decision."""
    reason: str
    """Why the case was escalated."""
    positions: list[PositionView]
    content_sha256: str
    """Quote this back in the resolution; a different value is refused as stale."""
    error: str | None = None
    """Why the previous answer to this request was refused, when it was."""


class ReviewAnswer(BaseModel):
    """A reviewer's resolution: the decision, why, and the hash of what was seen."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    decision: str = Field(min_length=1)
    note: str
    content_sha256: str = Field(min_length=64, max_length=64)


def review_request(item: ReviewItem, *, error: str | None = None) -> ReviewRequest:
    """The reviewer's view of ``item``."""
    meta: dict[str, Any] = item.panel.get("meta") or {}
    question = meta.get("question") or meta.get("input")
    return ReviewRequest(
        review_id=item.review_id,
        case_id=item.id,
        question=None if question is None else str(question),
        options=list(item.options),
        suggestion=item.suggestion,
        reason=item.reason,
        positions=[
            PositionView(agent=p.agent, decision=p.decision, reasoning=p.reasoning)
            for p in item.positions
        ],
        content_sha256=content_sha256(item),
        error=error,
    )


def resolved_record(journal: Journal, status: ReviewStatus) -> CaseRecord | None:
    """The journalled final record of a resolved item (``None`` while it is open)."""
    if status.resolution is None:
        return None
    event = journal.get(status.item.run_id, f"case/{status.item.line}/resolved")
    return None if event is None else CaseRecord.model_validate(event.payload)


def _when(journal: Journal, item: ReviewItem) -> str:
    event = journal.get(item.run_id, f"review/{item.line}/resolved")
    return event.at if event is not None else "an unknown time"


def resolve_checked(
    journal: Journal,
    review_id: str,
    *,
    decision: str,
    note: str,
    content_sha256: str,
    reviewer: str | None,
) -> CaseRecord:
    """Resolve ``review_id`` as the CLI does, after checking the hash and that it is open.

    Raises :class:`StaleReview` when ``content_sha256`` is not the item's hash and
    :class:`AlreadyResolved` (naming who and when) when it was resolved before.
    """
    status = find_item(journal, review_id)
    if status.resolution is not None:
        who = status.resolution.reviewer or "an unnamed reviewer"
        raise AlreadyResolved(
            f"review item {review_id} was already resolved by {who} at {_when(journal, status.item)} "
            f"(decision {status.resolution.decision!r})"
        )
    current = _item_hash(status.item)
    if content_sha256 != current:
        raise StaleReview(
            f"review item {review_id}: the case content changed since it was shown "
            f"(quoted sha256 {content_sha256[:16]}..., current {current[:16]}...); reload it"
        )
    return resolve(journal, review_id, decision=decision, note=note, reviewer=reviewer)
