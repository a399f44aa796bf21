"""The review queue over HTTP: list, show, claim, resolve, undo, and blind audits
(through :class:`~dissensus.serve.journal_adapter.ReviewDesk`).

Choices this module makes:

* The bodies of ``resolve`` and ``confirm`` are read as ``POST /v1/decide`` reads its
  body (:func:`~dissensus.serve.http.object_body`): an empty body or one that is not
  JSON is 400 (``<body>``, ``<json>``, ...), anything else that is not a valid body is
  422 naming the field, so every route refuses a body alike.
* Their ``decision`` and ``note`` must hold more than whitespace and be at most
  ``--max-field-chars`` characters (422 naming the field), as every text field the
  server takes. ``claim`` (``POST`` takes or renews it, ``DELETE`` gives it up) and
  ``undo`` take no body: one sent is not read, and nothing of it is journalled.
* A ``decision`` naming an option by its id or its label as the review page shows it
  ("Output (a)"; trimmed, ignoring case) is journalled as that option's id, as the
  page's typed answer is (:func:`~dissensus.serve.journal_adapter.answer_for`); one
  naming two options alike is 422 naming ``decision``.
* A malformed id or case reference (``R.026``, ``R.-3``: see
  :func:`dissensus.pipeline.review.split_ref`) is an unknown item, 404, like an id
  naming no item; so is a case reference naming no run.
* The list (``GET /v1/review``) is read in a worker thread, not on the server's loop:
  ten thousand items take seconds, which ``/healthz`` and every other request waited.
"""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from dissensus.errors import InputError
from dissensus.io.limits import MAX_FIELD_CHARS
from dissensus.outputs import ReviewEntry, ReviewView, status_of
from dissensus.pipeline.confirm import Confirmation
from dissensus.pipeline.records import CaseRecord, ReviewItem
from dissensus.pipeline.review import control_problem, shows_nothing
from dissensus.quoting import quote_short
from dissensus.serve.api_schema import AUTHED, BODY, refusals
from dissensus.serve.auth import Principal
from dissensus.serve.blind_audits import blind_audit
from dissensus.serve.http import (
    ApiError,
    known_query,
    object_body,
    require,
    service_of,
)
from dissensus.serve.journal_adapter import ClaimInfo, HistoryEntry, ReviewDesk

__all__ = ["router"]

router = APIRouter(dependencies=[Depends(known_query)])
submit = Depends(require("submit"))
review = Depends(require("review"))


def _text(value: str | None, info: ValidationInfo) -> str | None:
    """A reviewer's text: something that shows (not only white space or invisible format
    characters, as the journal refuses: 422 naming the field, not the journal's 400), at
    most the context's ``max_field_chars`` characters
    (:data:`~dissensus.io.limits.MAX_FIELD_CHARS` without one)."""
    if value is None:
        return None
    limit = (info.context or {}).get("max_field_chars", MAX_FIELD_CHARS)
    if len(value) > limit:
        raise ValueError(f"{len(value)} characters; at most {limit} per field")
    if shows_nothing(value):
        raise ValueError(f"the {info.field_name} must not be empty")
    if (problem := control_problem(value, lines=info.field_name == "note")) is not None:
        raise ValueError(f"the {info.field_name} {problem}")
    return value


class ResolveBody(BaseModel):
    """A reviewer's resolution. The reviewer is the token's name, never a field here."""

    model_config = ConfigDict(extra="forbid")

    decision: str = Field(min_length=1)
    """The decision taken (normally one of the item's options). One naming an option by
    its id or its label as the review page shows it (trimmed, ignoring case) is journalled
    as that option's id; anything else is an answer outside the options."""
    note: str = Field(min_length=1)
    """Why (required, as ``review resolve --note``); journalled with the resolution."""
    content_sha256: str = Field(pattern=r"^[0-9a-fA-F]{64}$")
    """sha256 of the case content the reviewer saw (``content_sha256`` of ``GET /v1/review/{id}``);
    upper-case hex is read as the same hash, as the integrations read it."""

    @field_validator("decision", "note")
    @classmethod
    def bounded_text(cls, value: str | None, info: ValidationInfo) -> str | None:
        return _text(value, info)

    @field_validator("content_sha256")
    @classmethod
    def lower_hex(cls, value: str) -> str:
        return value.lower()


class ConfirmBody(BaseModel):
    """A reviewer's audit of an automatic decision. The reviewer is the token's name."""

    model_config = ConfigDict(extra="forbid")

    decision: str | None = Field(default=None, min_length=1)
    """The right decision; omitted: the committed one (a confirmation). Another one corrects
    it. One naming an option by its label (trimmed, ignoring case) is that option's id."""
    note: str = Field(min_length=1)
    """Why (required, as ``review confirm --note``)."""

    @field_validator("decision", "note")
    @classmethod
    def bounded_text(cls, value: str | None, info: ValidationInfo) -> str | None:
        return _text(value, info)


def _body_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The OpenAPI ``requestBody`` of a route that reads ``model`` itself (:func:`object_body`)."""
    schema = model.model_json_schema()
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


class ReviewListEntry(ReviewEntry):
    """A review queue entry (:class:`~dissensus.outputs.ReviewEntry`) with the claim
    holding it now, if any (open cases only)."""

    claim: ClaimInfo | None


class ReviewCaseView(ReviewView):
    """A review case (:class:`~dissensus.outputs.ReviewView`) with the claim holding it
    now, if any, and its review events in the hash chain, oldest first."""

    claim: ClaimInfo | None
    history: list[HistoryEntry]


@router.get(
    "/v1/review",
    tags=["review"],
    response_model=list[ReviewListEntry],
    responses=refusals(*AUTHED, 404, 422, 503, 504),
)
async def review_list(
    request: Request,
    response: Response,
    _: Principal = review,
    status: str = Query("open", pattern="^(open|resolved|all)$"),
    run: str | None = Query(None),
    reason: str | None = Query(None, description="Only items whose reason contains this text."),
    limit: int = Query(1000, ge=1, le=10_000, description="At most this many items, oldest first."),
    after: str | None = Query(None, description="Only the items after this one (a review id)."),
) -> list[ReviewListEntry]:
    """Review items (``dissensus review list --json --limit --after``), with claims, a
    page at a time; a ``Link`` header (``rel="next"``) names the next page when there
    is one."""
    desk = service_of(request).desk
    page = await run_in_threadpool(_listed, desk, run, status, reason or None, limit + 1, after)
    if len(page) > limit:
        page = page[:limit]
        query = {"status": status, "limit": limit, "after": page[-1].review_id}
        query.update({k: v for k, v in (("run", run), ("reason", reason)) if v})
        response.headers["Link"] = f'</v1/review?{urlencode(query)}>; rel="next"'
    return page


def _listed(
    desk: ReviewDesk,
    run: str | None,
    status: str,
    reason: str | None,
    limit: int,
    after: str | None = None,
) -> list[ReviewListEntry]:
    """The review list's entries (read in a worker thread: thousands of items take seconds)."""
    if run is not None:
        desk.journal.run(run)
    try:
        shown = list(desk.items(run_id=run, status=status, reason=reason, limit=limit, after=after))
    except InputError as exc:  # only ``after`` names an item here
        raise ApiError(404, f"no review item {quote_short(str(after))}", "after") from exc
    claims = desk.live_claims([st.item.review_id for st in shown if st.resolution is None])
    return [
        ReviewListEntry(
            **dict(ReviewEntry.of(st)),
            claim=claims.get(st.item.review_id) if st.resolution is None else None,
        )
        for st in shown
    ]


@router.get(
    "/v1/review/{review_id}",
    tags=["review"],
    response_model=ReviewCaseView,
    responses=refusals(*AUTHED, 404, 503, 504),
)
async def review_show(review_id: str, request: Request, _: Principal = review) -> ReviewCaseView:
    """Everything a reviewer needs (the MCP tool ``review_show``) and the content hash to quote."""
    return await run_in_threadpool(_shown, service_of(request).desk, review_id)


def _shown(desk: ReviewDesk, review_id: str) -> ReviewCaseView:
    view = ReviewView.of(desk.status(review_id), desk.resolution(review_id))
    return ReviewCaseView(
        **dict(view), claim=desk.live_claim(review_id), history=desk.history(review_id)
    )


@router.post(
    "/v1/review/{review_id}/claim",
    tags=["review"],
    response_model=ClaimInfo,
    responses=refusals(*AUTHED, 404, 409, 415, 503, 504),
)
async def review_claim(
    review_id: str, request: Request, principal: Principal = review
) -> ClaimInfo:
    """Claim an open case, or the audit of an automatic decision not audited yet
    (``<run>.<line>``), for the configured time (409 when another reviewer holds it, or
    when it was resolved or audited)."""
    return await run_in_threadpool(service_of(request).desk.claim, review_id, principal.name)


class ClaimRelease(BaseModel):
    """The answer to giving up a claim."""

    review_id: str
    released: bool
    """Whether a live claim of the caller's was dropped (``false``: none held the case)."""


@router.delete(
    "/v1/review/{review_id}/claim",
    tags=["review"],
    response_model=ClaimRelease,
    responses=refusals(*AUTHED, 404, 409, 415, 503, 504),
)
async def review_release(
    review_id: str, request: Request, principal: Principal = review
) -> ClaimRelease:
    """Give up the caller's claim on a case or an audit before it expires (``released:
    false`` when no claim held it). 409 naming the holder (``claimed_by``) when another
    reviewer holds it: only the holder may give a claim up."""
    released = await run_in_threadpool(service_of(request).desk.release, review_id, principal.name)
    return ClaimRelease(review_id=review_id, released=released)


class BlindAuditView(BaseModel):
    """A blind audit item and whether it was answered."""

    item: ReviewItem
    """The case without the committed answer or the suggestion."""
    status: Literal["open", "audited"]
    claim: ClaimInfo | None = None
    """The claim holding the audit now, if any (open audits only)."""


@router.get(
    "/v1/audits/{case_ref}",
    tags=["review"],
    response_model=BlindAuditView,
    responses=refusals(*AUTHED, 404, 503, 504),
)
async def audit_show(case_ref: str, request: Request, _: Principal = review) -> BlindAuditView:
    """A blind audit item (``<run>.<line>``): the case without the committed answer or the
    suggestion; answer it with ``POST /v1/cases/{case_ref}/confirm``. 404: not audited."""
    return await run_in_threadpool(_audit_shown, service_of(request).desk, case_ref)


def _audit_shown(desk: ReviewDesk, case_ref: str) -> BlindAuditView:
    audit = blind_audit(desk.journal, case_ref)
    done = audit.answer is not None
    return BlindAuditView(
        item=audit.item,
        status="audited" if done else "open",
        claim=None if done else desk.live_claim(case_ref),
    )


@router.post(
    "/v1/cases/{case_ref}/confirm",
    tags=["review"],
    response_model=Confirmation,
    responses=refusals(*AUTHED, *BODY, 404, 409, 503, 504),
    openapi_extra=_body_schema(ConfirmBody),
)
async def case_confirm(
    case_ref: str, request: Request, principal: Principal = review
) -> Confirmation:
    """Audit an automatic decision (``<run>.<line>``): confirm it, or correct it with another
    decision (the case's record becomes ``human``). 409: audited before. 400: not automatic."""
    body = await object_body(request, ConfirmBody)
    return await run_in_threadpool(
        service_of(request).desk.confirm,
        case_ref,
        decision=body.decision,
        note=body.note,
        reviewer=principal.name,
    )


@router.post(
    "/v1/review/{review_id}/resolve",
    tags=["review"],
    response_model=CaseRecord,
    responses=refusals(*AUTHED, *BODY, 404, 409, 503, 504),
    openapi_extra=_body_schema(ResolveBody),
)
async def review_resolve(
    review_id: str, request: Request, principal: Principal = review
) -> CaseRecord:
    """Resolve a case; the reviewer is the token's name. 409: stale hash, already resolved, claimed."""
    body = await object_body(request, ResolveBody)
    return await run_in_threadpool(
        service_of(request).desk.resolve,
        review_id,
        decision=body.decision,
        note=body.note,
        reviewer=principal.name,
        sha256=body.content_sha256,
    )


class Reopened(BaseModel):
    """A case after an undo (open again, unless another resolution stands)."""

    review_id: str
    status: Literal["open", "resolved"]


@router.post(
    "/v1/review/{review_id}/undo",
    tags=["review"],
    response_model=Reopened,
    responses=refusals(*AUTHED, 404, 409, 415, 503, 504),
)
async def review_undo(review_id: str, request: Request, principal: Principal = review) -> Reopened:
    """Undo the caller's resolution within the server's undo window (a ``review.reopened``
    event; the case is open again). 409: open, resolved by someone else, or too late."""
    service = service_of(request)
    status = await run_in_threadpool(
        service.desk.undo,
        review_id,
        reviewer=principal.name,
        within_s=service.settings.undo_window_s,
    )
    return Reopened(review_id=review_id, status=status_of(status.resolution))
