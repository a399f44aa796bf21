"""``/healthz`` and ``/readyz``: the process is up; the journal is reachable."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from dissensus.serve import journal_errors
from dissensus.serve.api_schema import Ready, answer, refusals
from dissensus.serve.http import (
    error_response,
    require,
    service_of,
)

__all__ = ["router"]

router = APIRouter()
submit = Depends(require("submit"))
review = Depends(require("review"))


@router.get("/healthz", tags=["service"], responses=refusals(400, 403, 500))
async def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@router.get(
    "/readyz",
    tags=["service"],
    responses={
        **refusals(400, 403, 500, 503, 504, said={503: "The journal is unreachable."}),
        200: answer(Ready, "The journal is reachable."),
    },
)
async def readyz(request: Request) -> JSONResponse:
    """The journal is reachable."""
    try:
        # In a worker thread: a journal that does not answer (a database behind a network
        # partition waits out its connect timeout) must not hold every other request.
        await run_in_threadpool(service_of(request).journal.run, "readyz-probe", missing_ok=True)
    except Exception as exc:  # any failure means not ready
        # Unauthenticated: the caller learns only that; the log keeps the detail.
        journal_errors.log_unavailable(exc, "GET /readyz")
        return error_response(
            503, journal_errors.UNREACHABLE, headers=journal_errors.retry_headers()
        )
    return JSONResponse({"status": "ready"})
