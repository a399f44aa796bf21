"""The review path every integration shares: the reviewer's view and the quoted resolve.

A human resolution quotes the hash of the content the reviewer saw, and is refused when
that content changed or the item was already resolved. The integrations resolve through
:func:`resolve_checked`, which is :func:`dissensus.pipeline.review.resolve` (the path of
``dissensus review resolve`` and of the review service) with the hash always quoted, so
a case resolved from a LangGraph interrupt or an MCP tool leaves the same journal events
as one resolved anywhere else: ``review.resolved`` and ``case.resolved`` appended in one
transaction, a stale hash refused (:class:`~dissensus.pipeline.review.StaleContent`), an
already-resolved item refused naming who resolved it and when (:class:`AlreadyResolved`).

Choices this module makes:

* ``content_sha256`` is :func:`dissensus.pipeline.review.content_sha256`: the hex sha256
  of the canonical JSON (sorted keys, compact, UTF-8) of the review item as journalled --
  the case, the readings, the positions and reasons side by side, any packet or
  certificate: everything a reviewer is shown. A quoted hash is compared in lower case:
  the same digits copied in upper case are the same hash, not changed content.
* A reviewer's answer (:class:`ReviewAnswer`) holding a lone surrogate (a ``"\\ud83d"``
  JSON escape) is refused naming its field, as
  :func:`~dissensus.pipeline.review.resolve` refuses one: no UTF-8 journal can hold it.
* An answer the review path refuses for its decision or note (blank, a control
  character, over :data:`~dissensus.io.limits.MAX_FIELD_CHARS` characters) is refused
  naming the field as the answer's other errors are (``field 'note': the note must not
  be empty``): the service's words (``POST /v1/review/{id}/resolve`` gives the field
  beside them), after the field, as the MCP tool and the LangGraph node name a field.
* The request shown to a reviewer (:class:`ReviewRequest`) is a digest of the item (the
  question, options, each agent's decision and reasoning) with the hash of the whole
  item; agent text in it is untrusted data. Its options are in the order the review page
  shows them (:meth:`~dissensus.pipeline.records.ReviewItem.shown_options`).
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

from dissensus.cases import asked_question
from dissensus.errors import InputError
from dissensus.pipeline.records import CaseRecord
from dissensus.pipeline.review import (
    AlreadyResolved,
    ReviewStatus,
    content_sha256,
    record_key,
    resolve,
)
from dissensus.quoting import quote_short
from dissensus.store import Journal
from dissensus.types import lone_surrogate

__all__ = [
    "AlreadyResolved",
    "PositionView",
    "ReviewAnswer",
    "ReviewRequest",
    "content_sha256",
    "resolve_checked",
    "resolved_record",
    "review_request",
]


_ANSWER_FIELDS = ("decision", "note")
"""The answer's fields the review path checks itself (blank, a control character, too
long), its errors named with the field here as the answer's other errors are."""

_HEX64 = re.compile(r"[0-9A-Fa-f]{64}")
"""A sha256 in hex digits of either case (the journal writes lower-case ones)."""


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
    """The case's ``meta.question`` (or ``meta.input``), else the last ``user`` message of a
    chat panel's conversation (:func:`dissensus.cases.asked_question`), when there is one."""
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

    @field_validator("decision", "note", "content_sha256", mode="before")
    @classmethod
    def _unicode_text(cls, value: object) -> object:
        # Before pydantic's own check, which words it differently for constrained fields.
        if isinstance(value, str) and (problem := lone_surrogate(value)) is not None:
            raise ValueError(problem)
        return value


def review_request(status: ReviewStatus, *, error: str | None = None) -> ReviewRequest:
    """The reviewer's view of a queue entry, with the hash of the item as journalled."""
    item = status.item
    question = asked_question(item.panel.get("meta"))
    return ReviewRequest(
        review_id=item.review_id,
        case_id=item.id,
        question=None if question is None else str(question),
        options=item.shown_options(),
        suggestion=item.suggestion,
        reason=item.reason,
        positions=[
            PositionView(agent=p.agent, decision=p.decision, reasoning=p.reasoning)
            for p in item.positions
        ],
        content_sha256=status.content_sha256 or content_sha256(item),
        error=error,
    )


def resolved_record(journal: Journal, status: ReviewStatus) -> CaseRecord | None:
    """The journalled final record of a resolved item (``None`` while it is open)."""
    if status.resolution is None:
        return None
    key = record_key(journal, status.item.run_id, status.item.line)  # after undos too
    event = journal.get(status.item.run_id, key)
    return None if event is None else event.read_as(CaseRecord)


def resolve_checked(
    journal: Journal,
    review_id: str,
    *,
    decision: str,
    note: str,
    content_sha256: str,
    reviewer: str | None,
) -> CaseRecord:
    """Resolve ``review_id`` through the journal's review path, quoting the content hash.

    Raises :class:`~dissensus.pipeline.review.StaleContent` when ``content_sha256`` is not
    the item's hash (in either case of hex digits) and :class:`AlreadyResolved` (naming
    who and when) when it was resolved before.
    """
    if not isinstance(content_sha256, str) or not _HEX64.fullmatch(content_sha256):
        # Not a hash at all: said so, not "the case changed since it was shown".
        error = InputError(
            f"field 'content_sha256': not a sha256 (64 hex digits): {quote_short(str(content_sha256))}"
        )
        error.field = "content_sha256"
        raise error
    content_sha256 = content_sha256.lower()
    try:
        return resolve(
            journal,
            review_id,
            decision=decision,
            note=note,
            reviewer=reviewer,
            content_sha256=content_sha256,
        )
    except InputError as exc:
        if exc.field not in _ANSWER_FIELDS or str(exc).startswith("field "):
            raise
        # Named as every other error of the answer is: ``field 'note': ...``.
        named = InputError(f"field {exc.field!r}: {exc}")
        named.field = exc.field
        raise named from exc
