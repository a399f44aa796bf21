"""``POST /v1/decide`` (one run per request, through :class:`~dissensus.serve.runs.Runner`),
``GET /v1/acceptance`` and the runs: list, show, events (Server-Sent Events), verify, export.

Choices this module makes:

* **An event stream stops when its client has gone.** The events are written in parts
  (:meth:`~dissensus.serve.runs.Runner.follow`: at most
  :data:`~dissensus.serve.runs.FOLLOW_BATCH` events, one write each); after each part
  the stream lets the server's loop turn once, so a connection the client closed is
  seen as closed, and ends when the request says its client has disconnected
  (``Request.is_disconnected``). Written in one go, a backlog of a thousand records went
  on being written to a connection that was already gone, and every write after the
  first few logged ``socket.send() raised exception.`` (asyncio's warning), thousands of
  lines per client that left early.
* **Runs accepted are bounded.** A run holds its panels in memory until it is decided
  (about eight times its body: 60 MB for a body of 1,000 panels), and a run loop decides
  at most 32 at once, later ones waiting; thirty bodies of 1,000 panels sent at once
  with ``async=true`` took the server from 0.6 to 2.4 GB. So the runs accepted and not
  decided yet (waiting or deciding, with or without ``async``) are bounded:
  ``max_queued_runs`` of them (``--max-queued``, default 256) holding at most
  ``max_queued_bytes`` characters of panels' JSONL (``--max-queued-bytes``, default 64
  MiB: about 0.5 GB of memory; a run is always taken when no other is in progress, its
  body bounded by ``--max-body-bytes``). A decide request beyond them is 503 with
  ``Retry-After``, in the service's error body, looked at before its body is parsed (by
  its body's size) and again, exactly, just before its run is registered (no await
  between the two): nothing is journalled, and sending it again later is safe.
* **A plain ``POST /v1/decide`` skips the framework's parameter solving.** A request
  without a query string (the common one: one panel or a list, answered with its
  records) is matched first by a route of its own (:func:`install_plain`) that makes
  the same checks in the same order (the caller's token and role, then the body) and
  calls the same endpoint with ``async`` false: FastAPI's dependency solving (the
  router's query check, the role, the ``async`` parameter) was about a fifth of the
  server's own CPU per single-panel request. A request with any query string, and any
  other method on the path (405, ``Allow``), goes to the documented route as before;
  the API schema documents that route only.
* **Verify and export read the journal in worker threads**, never on the server's loop:
  a run of a thousand panels takes seconds to read, and ``/healthz`` and every other
  request waited that long. An export is read and written a part at a time
  (:data:`EXPORT_BATCH` events, one query each), so its body is never held whole; its
  bytes are those of the whole run read at once. The first part is read before the
  answer starts (a journal error is its status); a run still deciding gives the events
  journalled by the time its last part is read, a prefix of its chain. So are a run's
  document and event stream when they are read from the journal (every run but one this
  process is deciding: :meth:`~dissensus.serve.runs.Runner.describe`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.routing import APIRoute
from starlette.routing import Match, Route
from starlette.types import Scope

from dissensus.outputs import RUNS_PAGE, RunSummary, run_summaries
from dissensus.pipeline import FRESH_ATTEMPTS
from dissensus.pipeline.records import CaseRecord
from dissensus.serve import journal_errors
from dissensus.serve.acceptance import AcceptanceStatus, acceptance_status
from dissensus.serve.api_schema import AUTHED, BODY, DecideStarted, answer, refusals, stream
from dissensus.serve.auth import Principal
from dissensus.serve.http import (
    PANELS_BODY,
    ApiError,
    by_size,
    checked,
    items_of,
    json_body,
    known_query,
    limits_of,
    refuse_overrun,
    require,
    service_of,
    single_or_422,
)
from dissensus.serve.runs import DecideAnswer, RunDocument, item_line
from dissensus.store import Journal, VerifyReport
from dissensus.store.errors import UnknownRun
from dissensus.types import Panel

__all__ = ["EXPORT_BATCH", "install_plain", "router"]

EXPORT_BATCH = 1000
"""Events an export reads and writes at once (one query and one write each)."""

router = APIRouter(dependencies=[Depends(known_query)])
submit = Depends(require("submit"))
review = Depends(require("review"))


@router.post(
    "/v1/decide",
    tags=["decide"],
    openapi_extra=PANELS_BODY,
    status_code=200,
    responses={
        **refusals(*AUTHED, *BODY, 503, 504),
        200: answer(
            CaseRecord | DecideAnswer,
            "One panel: its record (as `dissensus decide --json`); a list: the run's answer.",
            **{"X-Dissensus-Run": "The run that decided the request."},
        ),
        202: answer(DecideStarted, "`?async=true`: the run was started; follow its links."),
    },
)
async def decide(
    request: Request,
    principal: Principal = submit,
    run_async: bool = Query(
        False, alias="async", description="Answer 202 with the run id at once."
    ),
) -> Response:
    """Decide a panel or a list of panels (one run); records as ``dissensus decide --json``."""
    service = service_of(request)
    size = len(await request.body())  # a small body needs no value count
    _refuse_when_full(request, size)  # before the body is parsed
    items, single = items_of(await json_body(request), service.settings.max_panels, "panel")
    lines: dict[int, str] = {}  # each valid item's JSONL line, made once by the check
    _, rejects, overruns = await by_size(
        request, checked, Panel, items, limits_of(service), lines, size
    )
    # A panel over the bounds refuses the whole request: nothing is journalled.
    refuse_overrun(overruns, single=single)
    if single:
        single_or_422(rejects)
    jsonl = [lines[i] if i in lines else item_line(item) for i, item in enumerate(items)]
    # Again, exactly: no await between this look and the run's registration by start.
    _refuse_when_full(request, sum(len(line) + 1 for line in jsonl))
    state = await service.runner.start(
        jsonl,
        submitted_by=principal.name,
        defer=not run_async,  # answered with its records: one commit without a model call
    )
    links = {"run": f"/v1/runs/{state.run_id}", "events": f"/v1/runs/{state.run_id}/events"}
    if run_async:
        if state.status != "running":  # its start failed, and whether it went through is unknown
            raise ApiError(
                503,
                _about(state.run_id, "", state.error),
                None,
                headers=journal_errors.retry_headers(state.error),
                run_id=state.run_id,
            )
        return JSONResponse(
            {"run_id": state.run_id, "status": state.status, "links": links}, status_code=202
        )
    try:
        async with asyncio.timeout(service.settings.request_timeout_s):
            await service.runner.wait(state)
            for _ in range(FRESH_ATTEMPTS - 1):
                if not state.taken:
                    break
                # Its fresh id named another run: nothing journalled; another id.
                state = await service.runner.start(jsonl, submitted_by=principal.name, defer=True)
                await service.runner.wait(state)
    except TimeoutError:
        raise ApiError(
            504,
            f"the run took longer than {service.settings.request_timeout_s:g} s; it goes on: poll /v1/runs/{state.run_id}",
            None,
            run_id=state.run_id,
        ) from None
    if state.status == "incomplete":
        raise ApiError(503, _about(state.run_id, "", state.error), None, run_id=state.run_id)
    if state.status == "failed" and state.retry:  # the journal was unreachable or busy
        raise ApiError(
            503,
            _about(state.run_id, " failed", state.error),
            None,
            headers=journal_errors.retry_headers(state.error),
            run_id=state.run_id,
        )
    if state.status != "finished":
        raise ApiError(
            500, _about(state.run_id, f" {state.status}", state.error), None, run_id=state.run_id
        )
    headers = {"X-Dissensus-Run": state.run_id}
    if single:
        if not state.records:  # the run refused the panel the request's checks let through
            reject = state.rejects[0] if state.rejects else None
            raise ApiError(
                422,
                reject.error if reject else "the panel was not decided",
                reject.field if reject else None,
                run_id=state.run_id,
            )
        # Serialised by the model itself, as a list's answer is: no dict of the record
        # made and walked again by the json module.
        return Response(
            state.records[0].model_dump_json(), media_type="application/json", headers=headers
        )
    answer = DecideAnswer(
        run_id=state.run_id,
        status=state.status,
        rejected=len(state.rejects),
        records=state.records,
        rejects=state.rejects,
        shift=state.shift,
    )
    return Response(answer.model_dump_json(), media_type="application/json", headers=headers)


@router.get(
    "/v1/acceptance",
    tags=["runs"],
    response_model=AcceptanceStatus,
    responses=refusals(*AUTHED, 503, 504),
)
async def acceptance(request: Request, _: Principal = submit) -> AcceptanceStatus:
    """The server's learned acceptance: its guarantee, the shift check over the latest
    cases it judged (all runs), and any hold on it."""
    service = service_of(request)
    return await run_in_threadpool(
        acceptance_status,
        service.journal,
        service.spec,
        every=service.settings.shift_every,
        cases=service.shift_watch.cases,
    )


@router.get(
    "/v1/runs",
    tags=["runs"],
    response_model=list[RunSummary],
    responses=refusals(*AUTHED, 404, 422, 503, 504),
)
async def runs_list(
    request: Request,
    response: Response,
    _: Principal = submit,
    limit: int = Query(RUNS_PAGE, ge=1, le=10_000, description="At most this many runs."),
    after: str | None = Query(None, description="Only the runs after this one (a run id)."),
) -> list[RunSummary]:
    """The journal's runs, oldest first, a page at a time (as ``dissensus runs list
    --json --limit --after``); a ``Link`` header (``rel="next"``) names the next page
    when there is one."""
    journal = service_of(request).journal
    try:
        page = await run_in_threadpool(run_summaries, journal, after=after, limit=limit + 1)
    except UnknownRun as exc:  # only ``after`` names a run here; never the journal's place
        raise ApiError(404, journal_errors.scrub(str(exc), [str(journal.path)]), "after") from None
    if len(page) > limit:
        page = page[:limit]
        query = urlencode({"limit": limit, "after": page[-1].run_id})
        response.headers["Link"] = f'</v1/runs?{query}>; rel="next"'
    return page


@router.get(
    "/v1/runs/{run_id}",
    tags=["runs"],
    response_model=RunDocument,
    responses=refusals(*AUTHED, 404, 503, 504),
)
async def runs_show(run_id: str, request: Request, _: Principal = submit) -> RunDocument:
    """A run's status, final records (human resolutions included) and rejects."""
    runner = service_of(request).runner
    await runner.settle(run_id)  # a lock it could not give back in an outage: again now
    return await runner.describe(run_id)


@router.get(
    "/v1/runs/{run_id}/events",
    tags=["runs"],
    response_class=StreamingResponse,
    responses={
        **refusals(*AUTHED, 404, 503),
        200: stream(
            "text/event-stream",
            "Server-Sent Events: `record` and `reject` per case, then `finished` (or "
            "`failed`, `incomplete`, or `running` for a run another process executes "
            "or whose lock this server could not give back yet) with the counts; each "
            "event's data is one JSON object.",
        ),
    },
)
async def runs_events(run_id: str, request: Request, _: Principal = submit) -> StreamingResponse:
    """Progress as Server-Sent Events: ``record`` and ``reject`` per case, then the final status."""
    runner = service_of(request).runner
    await runner.require(run_id)

    async def stream() -> AsyncIterator[str]:
        first = True
        async for part in runner.follow(run_id):
            # Between parts (a HEAD request's stream ends with the first): let the loop
            # see a connection closed meanwhile, and stop writing to a client that left.
            if not first:
                await asyncio.sleep(0)
                if await request.is_disconnected():
                    return
            first = False
            yield "".join(
                f"event: {kind}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"
                for kind, data in part
            )

    return StreamingResponse(
        stream(), media_type="text/event-stream", headers={"Cache-Control": "no-store"}
    )


@router.get(
    "/v1/runs/{run_id}/verify",
    tags=["runs"],
    response_model=VerifyReport,
    responses=refusals(*AUTHED, 404, 503, 504),
)
async def runs_verify(run_id: str, request: Request, _: Principal = submit) -> VerifyReport:
    """Recompute the run's hash chain (``ok`` false names every problem; as
    ``dissensus runs verify --json``)."""
    return await run_in_threadpool(service_of(request).journal.verify, run_id)


@router.get(
    "/v1/runs/{run_id}/export",
    tags=["runs"],
    response_class=StreamingResponse,
    responses={
        **refusals(*AUTHED, 404, 503, 504),
        200: stream(
            "application/x-ndjson",
            "The run's journal events, one JSON object per line, with their hashes.",
        ),
    },
)
async def runs_export(run_id: str, request: Request, _: Principal = submit) -> StreamingResponse:
    """The run's events as JSONL, with hashes (verifiable without this program)."""
    journal = service_of(request).journal
    await run_in_threadpool(journal.run, run_id)
    # The first part is read before the answer starts: a journal error is its status.
    first = await run_in_threadpool(_export_part, journal, run_id, -1)

    async def parts() -> AsyncIterator[str]:
        part = first
        while part is not None:
            text, last = part
            yield text
            part = (
                None
                if last is None
                else await run_in_threadpool(_export_part, journal, run_id, last)
            )

    return StreamingResponse(parts(), media_type="application/x-ndjson")


def _export_part(journal: Journal, run_id: str, after: int) -> tuple[str, int | None] | None:
    """The JSONL of the run's next :data:`EXPORT_BATCH` events after sequence number
    ``after``, and the last one's number (``None`` when no part follows); ``None`` when
    no event is left. Read and written in a worker thread."""
    events = journal.events_after(run_id, after, EXPORT_BATCH)
    if not events:
        return None
    text = "".join(event.model_dump_json() + "\n" for event in events)
    return text, events[-1].seq if len(events) == EXPORT_BATCH else None


_SUBMIT = require("submit")


async def _plain_decide(request: Request) -> Response:
    """``POST /v1/decide`` without a query string: :func:`decide`, ``async`` false."""
    return await decide(request, await _SUBMIT(request), False)


class _PlainDecide(Route):
    """The route of a ``POST /v1/decide`` without a query string (see the module
    docstring); any other request on the path is left to ``documented``, the route the
    schema describes, which stays the request's ``route`` either way."""

    def __init__(self, documented: APIRoute) -> None:
        super().__init__(documented.path, _plain_decide, methods=["POST"])
        self.documented = documented

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] != "http" or scope.get("method") != "POST" or scope.get("query_string"):
            return Match.NONE, {}
        match, child = super().matches(scope)
        if match != Match.FULL:  # a 405 and its ``Allow`` are the documented route's
            return Match.NONE, {}
        return match, {**child, "route": self.documented}


def install_plain(app: FastAPI) -> None:
    """Put :class:`_PlainDecide` ahead of every route of ``app`` (after :data:`router`
    was included), standing for the route ``app`` serves the documented
    ``POST /v1/decide`` with, the route a request with a query string is given: a FastAPI
    that copies an included router's routes into the app (older versions) serves its
    copy, found among the app's routes; one that includes the router itself (the version
    this project pins) serves the router's own route."""
    documented = next(
        r
        for routes in (app.router.routes, router.routes)
        for r in routes
        if isinstance(r, APIRoute) and r.path == "/v1/decide" and "POST" in (r.methods or ())
    )
    app.router.routes.insert(0, _PlainDecide(documented))


def _refuse_when_full(request: Request, size: int) -> None:
    """503 with ``Retry-After`` when the server holds ``max_queued_runs`` runs accepted and
    not decided yet, or a run of ``size`` characters would take their panels past
    ``max_queued_bytes`` (see the module docstring); nothing is journalled."""
    service = service_of(request)
    runs, held = service.runner.in_progress()
    settings = service.settings
    if runs >= settings.max_queued_runs:
        full = f"{settings.max_queued_runs} runs (its --max-queued)"
    elif runs and held + size > settings.max_queued_bytes:
        full = f"{settings.max_queued_bytes:,} bytes of panels (its --max-queued-bytes)"
    else:
        return
    raise ApiError(
        503,
        f"the server holds {full} not decided yet; send the request again later",
        None,
        headers=journal_errors.retry_headers(),
    )


def _about(run_id: str, status: str, error: str | None) -> str:
    """``run ID[ status]: error``, the run named once (the pipeline's own messages of a
    run, such as its deadline's, already start with ``run ID:``)."""
    text = error or ""
    prefix = f"run {run_id}: "
    if text.startswith(prefix):
        text = text[len(prefix) :]
    return f"run {run_id}{status}: {text}"
