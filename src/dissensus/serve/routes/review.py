"""The review queue over HTTP: list, show, claim, resolve, undo, and blind audits
(through :class:`~dissensus.serve.journal_adapter.ReviewDesk`)."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from dissensus.outputs import ReviewEntry, ReviewView, status_of
from dissensus.pipeline.confirm import Confirmation
from dissensus.pipeline.records import CaseRecord, ReviewItem
from dissensus.serve.auth import Principal
from dissensus.serve.http import (
    require,
    service_of,
)
from dissensus.serve.journal_adapter import ClaimInfo, HistoryEntry

__all__ = ["router"]

router = APIRouter()
submit = Depends(require("submit"))
review = Depends(require("review"))


class ResolveBody(BaseModel):
    """A reviewer's resolution. The reviewer is the token's name, never a field here."""

    model_config = ConfigDict(extra="forbid")

    decision: str = Field(min_length=1)
    """The decision taken (normally one of the item's options)."""
    note: str = Field(min_length=1)
    """Why (required, as ``review resolve --note``); journalled with the resolution."""
    content_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    """sha256 of the case content the reviewer saw (``content_sha256`` of ``GET /v1/review/{id}``)."""


class ConfirmBody(BaseModel):
    """A reviewer's audit of an automatic decision. The reviewer is the token's name."""

    model_config = ConfigDict(extra="forbid")

    decision: str | None = Field(default=None, min_length=1)
    """The right decision; omitted: the committed one (a confirmation). Another one corrects it."""
    note: str = Field(min_length=1)
    """Why (required, as ``review confirm --note``)."""


class ReviewListEntry(ReviewEntry):
    """A review queue entry (:class:`~dissensus.outputs.ReviewEntry`) with the claim
    holding it now, if any (open cases only)."""

    claim: ClaimInfo | None


class ReviewCaseView(ReviewView):
    """A review case (:class:`~dissensus.outputs.ReviewView`) with the claim holding it
    now, if any, and its review events in the hash chain, oldest first."""

    claim: ClaimInfo | None
    history: list[HistoryEntry]


@router.get("/v1/review", tags=["review"], response_model=list[ReviewListEntry])
async def review_list(
    request: Request,
    _: Principal = review,
    status: str = Query("open", pattern="^(open|resolved|all)$"),
    run: str | None = Query(None),
    reason: str | None = Query(None, description="Only items whose reason contains this text."),
    limit: int = Query(1000, ge=1, le=10_000, description="At most this many items, oldest first."),
) -> list[ReviewListEntry]:
    """Review items (``dissensus review list --json``), with claims."""
    desk = service_of(request).desk
    if run is not None:
        service_of(request).journal.run(run)
    shown = list(desk.items(run_id=run, status=status, reason=reason or None, limit=limit))
    claims = desk.live_claims([st.item.review_id for st in shown if st.resolution is None])
    return [
        ReviewListEntry(
            **dict(ReviewEntry.of(st)),
            claim=claims.get(st.item.review_id) if st.resolution is None else None,
        )
        for st in shown
    ]


@router.get("/v1/review/{review_id}", tags=["review"], response_model=ReviewCaseView)
async def review_show(review_id: str, request: Request, _: Principal = review) -> ReviewCaseView:
    """Everything a reviewer needs (the MCP tool ``review_show``) and the content hash to quote."""
    desk = service_of(request).desk
    view = ReviewView.of(desk.status(review_id), desk.resolution(review_id))
    return ReviewCaseView(
        **dict(view), claim=desk.live_claim(review_id), history=desk.history(review_id)
    )


@router.post("/v1/review/{review_id}/claim", tags=["review"], response_model=ClaimInfo)
async def review_claim(
    review_id: str, request: Request, principal: Principal = review
) -> ClaimInfo:
    """Claim an open case, or the audit of an automatic decision not audited yet
    (``<run>.<line>``), for the configured time (409 when another reviewer holds it, or
    when it was resolved or audited)."""
    return service_of(request).desk.claim(review_id, principal.name)


class BlindAuditView(BaseModel):
    """A blind audit item and whether it was answered."""

    item: ReviewItem
    """The case without the committed answer or the suggestion."""
    status: Literal["open", "audited"]
    claim: ClaimInfo | None = None
    """The claim holding the audit now, if any (open audits only)."""


@router.get("/v1/audits/{case_ref}", tags=["review"], response_model=BlindAuditView)
async def audit_show(case_ref: str, request: Request, _: Principal = review) -> BlindAuditView:
    """A blind audit item (``<run>.<line>``): the case without the committed answer or the
    suggestion; answer it with ``POST /v1/cases/{case_ref}/confirm``. 404: not audited."""
    from dissensus.pipeline.audit import audit_item
    from dissensus.pipeline.review import split_ref

    desk = service_of(request).desk
    journal = desk.journal
    run_id, line = split_ref(case_ref, "case reference")
    item = audit_item(journal, run_id, line)
    if item is None:
        raise StarletteHTTPException(404, f"no blind audit for case {case_ref}")
    done = journal.get(run_id, f"confirm/{line}") is not None
    return BlindAuditView(
        item=item,
        status="audited" if done else "open",
        claim=None if done else desk.live_claim(case_ref),
    )


@router.post("/v1/cases/{case_ref}/confirm", tags=["review"], response_model=Confirmation)
async def case_confirm(
    case_ref: str, body: ConfirmBody, request: Request, principal: Principal = review
) -> Confirmation:
    """Audit an automatic decision (``<run>.<line>``): confirm it, or correct it with another
    decision (the case's record becomes ``human``). 409: audited before. 400: not automatic."""
    return service_of(request).desk.confirm(
        case_ref, decision=body.decision, note=body.note, reviewer=principal.name
    )


@router.post("/v1/review/{review_id}/resolve", tags=["review"], response_model=CaseRecord)
async def review_resolve(
    review_id: str, body: ResolveBody, request: Request, principal: Principal = review
) -> CaseRecord:
    """Resolve a case; the reviewer is the token's name. 409: stale hash, already resolved, claimed."""
    return service_of(request).desk.resolve(
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


@router.post("/v1/review/{review_id}/undo", tags=["review"], response_model=Reopened)
async def review_undo(review_id: str, request: Request, principal: Principal = review) -> Reopened:
    """Undo the caller's resolution within the server's undo window (a ``review.reopened``
    event; the case is open again). 409: open, resolved by someone else, or too late."""
    service = service_of(request)
    status = service.desk.undo(
        review_id, reviewer=principal.name, within_s=service.settings.undo_window_s
    )
    return Reopened(review_id=review_id, status=status_of(status.resolution))
