"""``dissensus serve``: the decision layer as an HTTP service (FastAPI).

Every endpoint is an adapter over the library call the CLI makes: ``POST /v1/decide``
runs :func:`dissensus.pipeline.execute_run` (:mod:`.runs`), the review endpoints go
through :class:`~dissensus.serve.journal_adapter.ReviewDesk`, and route / vote /
negotiate / verify / bound through :mod:`.library_calls`. The review page is
:mod:`.review_page`; ``/docs`` and ``/redoc`` are served from local files
(:mod:`.api_docs`). See ``docs/serve.md`` for every endpoint, status code and limit.

Choices where the design is silent:

* Errors are ``{"error": message, "field": path-or-null}``: 400 unreadable body,
  401 no or unknown token, 403 wrong role (or a foreign ``Host``, a cross-origin
  write: :mod:`.origin`), 404 unknown run / review item (never naming the journal),
  408 body not received in time, 409 conflict (stale content hash, already resolved
  (with who and when), claimed by another reviewer, run not finished), 413 body, panel
  count, agents or panel text over the limit, 415 a non-JSON write, 422 invalid input
  (with the field path the CLI would name), 500 ``internal error`` (nothing more),
  504 request timeout.
* A single panel answers with its record; a list answers ``{run_id, status, records,
  rejects}`` (status 200 also when some items were rejected, as the CLI still decides
  the rest; ``rejected`` counts them).
* The journal is used from the event loop only (every handler is ``async``), so one
  connection serves the whole process; SQLite's own locking serialises it with other
  processes (the CLI) sharing the file.
* CPU work of a request (parsing the body, validating panels, route, vote, verify,
  bound) runs in a worker thread (``run_in_threadpool``), so ``/healthz`` and other
  requests keep being answered while it runs; the bounds of :mod:`dissensus.io.limits`
  (agents per panel, characters per field) keep each panel's work small.
* A body nested deeper than :data:`dissensus.io.jsonl.MAX_DEPTH` levels, or holding an
  integer Python refuses to read (more than 4,300 digits), is ``400`` naming
  ``<depth>`` / ``<json>``; any error no handler expected is a JSON ``500`` that names
  nothing of the server (no path, no exception text).
* ``/v1`` takes bearer tokens only (no cookies), so it needs no CSRF protection; the
  review page takes its session cookie and checks a CSRF token on every form. Foreign
  ``Host`` names, cross-origin writes and non-JSON writes are refused before any route
  (:mod:`.origin`).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from dissensus.errors import ConfigError, DissensusError, InputError
from dissensus.guard import CorrelatedConsensusError, GuardThresholds, ReliabilityFit
from dissensus.io.jsonl import MAX_DEPTH, json_depth
from dissensus.io.limits import Limits, Overrun, check_record
from dissensus.pipeline import RunSpec
from dissensus.serve import api_docs, chat, library_calls
from dissensus.serve.acceptance import acceptance_status
from dissensus.serve.auth import (
    LOCAL,
    Principal,
    Role,
    SessionStore,
    TokenStore,
    allows,
    load_tokens,
)
from dissensus.serve.journal_adapter import (
    AlreadyConfirmed,
    AlreadyResolved,
    ClaimConflict,
    ReviewDesk,
    StaleContent,
    UnknownItem,
    content_sha256,
    open_journal,
)
from dissensus.serve.limits import BodyLimit, RequestTimeout
from dissensus.serve.origin import BrowserGuard, allowed_hosts
from dissensus.serve.runs import Runner, item_line
from dissensus.serve.settings import ServeSettings, is_loopback
from dissensus.signing import signer_from_env
from dissensus.store.journal import Journal, UnknownRun
from dissensus.types import Panel, VoteCase

__all__ = ["ApiError", "Service", "create_app"]


class ApiError(Exception):
    """An error answered as ``{error, field}`` with ``status``."""

    def __init__(self, status: int, error: str, field: str | None = None, **extra: Any) -> None:
        super().__init__(error)
        self.status = status
        self.error = error
        self.field = field
        self.extra = extra


class Service:
    """What every request shares: settings, journal, policy, tokens, runs, review desk."""

    def __init__(
        self,
        settings: ServeSettings,
        journal: Journal,
    ) -> None:
        self.settings = settings
        self.journal = journal
        # One run specification for every request, built (and every file it names checked)
        # before the server answers anything: the CLI's records, through this door too.
        self.spec = RunSpec.from_policy(settings.policy)
        self.policy = self.spec.policy
        self.tokens: TokenStore | None = load_tokens(settings.tokens) if settings.tokens else None
        self.sessions = SessionStore(settings.session_ttl_s)
        self.runner = Runner(journal, self.spec, open_journal=_reopener(journal))
        self.desk = ReviewDesk(journal, claim_ttl_s=settings.claim_ttl_s)
        self.guard_calibration: ReliabilityFit | None = self.spec.guard_calibration

    def authenticate(self, request: Request) -> Principal:
        """The bearer token's principal (401 without a valid one)."""
        if self.tokens is None:
            return LOCAL
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise ApiError(
                401, "missing bearer token (Authorization: Bearer TOKEN)", "Authorization"
            )
        principal = self.tokens.authenticate(token.strip())
        if principal is None:
            raise ApiError(401, "unknown token", "Authorization")
        return principal


def _reopener(journal: Journal) -> Callable[[], Journal] | None:
    """How a run's thread opens its own connection to ``journal`` (``None`` for an
    in-memory journal, which no second connection can see)."""
    target = str(journal.path)
    if target == ":memory:":
        return None
    signer, after = journal.signer, journal.after_append
    return lambda: open_journal(target, signer=signer, after_append=after)


def _service(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


def require(role: Role) -> Callable[[Request], Awaitable[Principal]]:
    """A dependency: the caller's principal, which must have ``role`` (403 otherwise)."""

    async def dependency(request: Request) -> Principal:
        principal = _service(request).authenticate(request)
        if not allows(principal, role):
            raise ApiError(
                403,
                f"the token of {principal.name} has role {principal.role}; this needs {role}",
                "Authorization",
            )
        return principal

    return dependency


def _field_of(loc: tuple[int | str, ...] | list[int | str]) -> str | None:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(parts) or None


def _error(status: int, error: str, field: str | None = None, **extra: Any) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(
        {"error": error, "field": field, **extra}, status_code=status, headers=headers
    )


def _install_errors(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return _error(exc.status, exc.error, exc.field, **exc.extra)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0]
        return _error(
            422, str(first.get("msg", "invalid request")), _field_of(first.get("loc", ()))
        )

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail))

    @app.exception_handler(DissensusError)
    async def dissensus_error(request: Request, exc: DissensusError) -> JSONResponse:
        response = _dissensus_error(exc)
        # No message names the journal's file or URL to a remote caller.
        where = str(_service(request).journal.path)
        if where and where != ":memory:" and where.encode() in bytes(response.body):
            body = json.loads(bytes(response.body))
            message = str(body["error"])
            for said in (f" in journal {where}", f" in {where}", where):
                message = message.replace(said, "" if said != where else "the journal")
            body["error"] = message
            return JSONResponse(body, status_code=response.status_code, headers=None)
        return response

    def _dissensus_error(exc: DissensusError) -> JSONResponse:
        if isinstance(exc, AlreadyResolved):
            return _error(409, str(exc), None, resolved_by=exc.reviewer, resolved_at=exc.at)
        if isinstance(exc, AlreadyConfirmed):
            return _error(409, str(exc), None, confirmed_by=exc.reviewer, confirmed_at=exc.at)
        if isinstance(exc, ClaimConflict):
            return _error(409, str(exc), None, claimed_by=exc.holder, claimed_until=exc.expires)
        if isinstance(exc, StaleContent):
            return _error(409, str(exc), "content_sha256")
        if isinstance(exc, UnknownItem | UnknownRun):
            return _error(404, str(exc))
        if isinstance(exc, library_calls.TooManyAgents):
            return _error(413, str(exc), exc.field)
        if isinstance(exc, ConfigError):
            return _error(422, str(exc), exc.field)
        if isinstance(exc, InputError):
            return _error(400, str(exc))
        if isinstance(exc, CorrelatedConsensusError):
            return _error(409, str(exc))
        return _error(409, str(exc))

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        # Deliberately says nothing of the exception: its text may name server paths.
        return _error(500, "internal error", None)


def _parse_json(raw: bytes) -> Any:
    """The JSON document of a body (:class:`ApiError` 400 naming why it is not one)."""
    try:
        body = json.loads(raw)
    except UnicodeDecodeError:
        raise ApiError(400, "request body is not UTF-8", "<encoding>") from None
    except json.JSONDecodeError as exc:
        raise ApiError(400, f"invalid JSON: {exc.msg}", "<json>") from None
    except RecursionError:
        raise ApiError(400, f"JSON nested deeper than {MAX_DEPTH} levels", "<depth>") from None
    except ValueError:  # an integer of more digits than Python converts
        message = f"invalid JSON: an integer of more than {sys.get_int_max_str_digits()} digits"
        raise ApiError(400, message, "<json>") from None
    if (raw.count(b"[") + raw.count(b"{")) > MAX_DEPTH and json_depth(body) > MAX_DEPTH + 1:
        # One level more than a JSONL line may have: the list holding the panels.
        raise ApiError(400, f"JSON nested deeper than {MAX_DEPTH} levels", "<depth>")
    return body


async def _json_body(request: Request) -> Any:
    raw = await request.body()
    if not raw.strip():
        raise ApiError(400, "empty request body", "<body>")
    return await run_in_threadpool(_parse_json, raw)


def _limits(service: Service) -> Limits:
    return Limits(
        max_agents=service.settings.max_agents, max_field_chars=service.settings.max_field_chars
    )


def _items(body: Any, limit: int, what: str) -> tuple[list[Any], bool]:
    """``(items, single)`` of a body that is one object or a list of them."""
    if isinstance(body, dict):
        return [body], True
    if not isinstance(body, list):
        raise ApiError(422, f"expected a {what} object or a list of them", "<root>")
    if not body:
        raise ApiError(422, f"no {what}s in the list", "<root>")
    if len(body) > limit:
        raise ApiError(413, f"{len(body)} {what}s in one request; at most {limit}", "<root>")
    return body, False


def _reject(index: int, error: ValidationError | None) -> dict[str, Any]:
    if error is None:
        return {"index": index, "field": "<root>", "error": "expected a JSON object"}
    first = error.errors()[0]
    message = str(first["msg"]).removeprefix("Value error, ")
    return {
        "index": index,
        "field": ".".join(str(p) for p in first["loc"]) or "<root>",
        "error": message,
    }


def _validated(
    model: type[Any], items: list[Any]
) -> tuple[list[tuple[int, Any]], list[dict[str, Any]]]:
    """Items validated as the CLI validates JSONL lines: ``([(index, model)], [reject])``.

    The item is the parsed JSON of a line, so the reject names the same field path and
    message as :func:`dissensus.io.jsonl.parse_line` (a test pins that).
    """
    good: list[tuple[int, Any]] = []
    rejects: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            rejects.append(_reject(index, None))
            continue
        try:
            good.append((index, model.model_validate(item)))
        except ValidationError as exc:
            rejects.append(_reject(index, exc))
    return good, rejects


def _single_or_422(rejects: list[dict[str, Any]]) -> None:
    if rejects:
        raise ApiError(422, rejects[0]["error"], rejects[0]["field"])


Overruns = list[tuple[int, Overrun]]


def _checked(
    model: type[Any], items: list[Any], limits: Limits
) -> tuple[list[tuple[int, Any]], list[dict[str, Any]], Overruns]:
    """:func:`_validated`, with the valid records over ``limits`` set apart as overruns."""
    good, rejects = _validated(model, items)
    kept: list[tuple[int, Any]] = []
    overruns: Overruns = []
    for index, record in good:
        over = check_record(record, None, limits)
        if over is None:
            kept.append((index, record))
        else:
            overruns.append((index, over))
    return kept, rejects, overruns


def _refuse_overrun(overruns: Overruns, *, single: bool) -> None:
    """413 (too many agents) or 422 (a field too long) for the first overrun, if any."""
    if not overruns:
        return
    index, over = overruns[0]
    status = 413 if over.count else 422
    if single:
        raise ApiError(status, over.message, over.field)
    raise ApiError(status, f"item {index}: {over.message}", f"{index}.{over.field}")


def _with_overruns(rejects: list[dict[str, Any]], overruns: Overruns) -> list[dict[str, Any]]:
    """``rejects`` and the overruns as rejects, in item order."""
    more = [{"index": i, "field": o.field, "error": o.message} for i, o in overruns]
    return sorted(rejects + more, key=lambda r: int(r["index"])) if more else rejects


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


_PANELS_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "oneOf": [
                        {"type": "object", "title": "Panel"},
                        {"type": "array", "items": {"type": "object", "title": "Panel"}},
                    ],
                    "description": "One panel or a list of panels, each as one line of the JSONL input format.",
                }
            }
        },
    }
}


def create_app(
    settings: ServeSettings | None = None,
    *,
    journal: Journal | None = None,
) -> FastAPI:
    """The service over ``settings.journal`` (or an already open ``journal``)."""
    settings = settings or ServeSettings()
    owned = journal is None
    store = (
        journal if journal is not None else open_journal(settings.journal, signer=signer_from_env())
    )
    service = Service(settings, store)

    @asynccontextmanager
    async def lifespan(started: FastAPI) -> AsyncIterator[None]:
        # Load the encoder and the acceptance libraries before the first request, not
        # while answering one (imports and model loading hold up the whole process).
        await asyncio.to_thread(service.runner.warm)
        yield
        await service.runner.close()
        await started.state.chat.aclose()
        if owned:
            store.close()

    app = FastAPI(
        title="dissensus",
        summary="Decide under disagreement: the decision layer as an HTTP service.",
        version=_version(),
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    app.state.service = service
    _install_errors(app)
    _routes(app)
    chat.install(app, spec=service.spec, journal=store)
    from dissensus.serve.review_page import install as install_review_page

    install_review_page(app)
    api_docs.install(app)
    app.add_middleware(RequestTimeout, seconds=settings.request_timeout_s)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    hosts = allowed_hosts(settings.host, settings.allow_hosts, loopback=is_loopback(settings.host))
    app.add_middleware(BrowserGuard, hosts=hosts)
    return app


def _version() -> str:
    from dissensus import __version__

    return __version__


def _routes(app: FastAPI) -> None:
    submit = Depends(require("submit"))
    review = Depends(require("review"))

    @app.get("/healthz", tags=["service"])
    async def healthz() -> dict[str, str]:
        """The process is up."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["service"])
    async def readyz(request: Request) -> JSONResponse:
        """The journal is reachable."""
        try:
            _service(request).journal.run("readyz-probe", missing_ok=True)
        except Exception as exc:  # any failure means not ready
            return _error(503, f"journal unreachable: {exc}")
        return JSONResponse({"status": "ready"})

    # -- decide and runs ------------------------------------------------------------------

    @app.post("/v1/decide", tags=["decide"], openapi_extra=_PANELS_BODY, status_code=200)
    async def decide(
        request: Request,
        principal: Principal = submit,
        run_async: bool = Query(
            False, alias="async", description="Answer 202 with the run id at once."
        ),
    ) -> Response:
        """Decide a panel or a list of panels (one run); records as ``dissensus decide --json``."""
        service = _service(request)
        items, single = _items(await _json_body(request), service.settings.max_panels, "panel")
        _, rejects, overruns = await run_in_threadpool(_checked, Panel, items, _limits(service))
        # A panel over the bounds refuses the whole request: nothing is journalled.
        _refuse_overrun(overruns, single=single)
        if single:
            _single_or_422(rejects)
        state = service.runner.start([item_line(i) for i in items], submitted_by=principal.name)
        links = {"run": f"/v1/runs/{state.run_id}", "events": f"/v1/runs/{state.run_id}/events"}
        if run_async:
            return JSONResponse(
                {"run_id": state.run_id, "status": state.status, "links": links}, status_code=202
            )
        try:
            await asyncio.wait_for(service.runner.wait(state), service.settings.request_timeout_s)
        except TimeoutError:
            raise ApiError(
                504,
                f"the run took longer than {service.settings.request_timeout_s:g} s; it goes on: poll {links['run']}",
                None,
                run_id=state.run_id,
            ) from None
        if state.status == "incomplete":
            raise ApiError(503, f"run {state.run_id}: {state.error}", None, run_id=state.run_id)
        if state.status != "finished":
            raise ApiError(
                500, f"run {state.run_id} {state.status}: {state.error}", None, run_id=state.run_id
            )
        headers = {"X-Dissensus-Run": state.run_id}
        if single:
            return JSONResponse(state.records[0].model_dump(mode="json"), headers=headers)
        return JSONResponse(
            {
                "run_id": state.run_id,
                "status": state.status,
                "rejected": len(state.rejects),
                "records": [r.model_dump(mode="json") for r in state.records],
                "rejects": state.rejects,
            },
            headers=headers,
        )

    @app.get("/v1/acceptance", tags=["runs"])
    async def acceptance(request: Request, _: Principal = submit) -> dict[str, Any]:
        """The server's learned acceptance: its guarantee, the shift check over the latest
        cases it judged (all runs), and any hold on it."""
        service = _service(request)
        return await run_in_threadpool(
            acceptance_status,
            service.journal,
            service.spec,
        )

    @app.get("/v1/runs", tags=["runs"])
    async def runs_list(request: Request, _: Principal = submit) -> list[dict[str, Any]]:
        """Every run of the journal (as ``dissensus runs list --json``)."""
        journal = _service(request).journal
        return [
            {**info.model_dump(), "finished": journal.get(info.run_id, "run/finished") is not None}
            for info in journal.runs()
        ]

    @app.get("/v1/runs/{run_id}", tags=["runs"])
    async def runs_show(run_id: str, request: Request, _: Principal = submit) -> dict[str, Any]:
        """A run's status, final records (human resolutions included) and rejects."""
        return _service(request).runner.describe(run_id)

    @app.get("/v1/runs/{run_id}/events", tags=["runs"])
    async def runs_events(
        run_id: str, request: Request, _: Principal = submit
    ) -> StreamingResponse:
        """Progress as Server-Sent Events: ``record`` and ``reject`` per case, then the final status."""
        runner = _service(request).runner
        _service(request).journal.run(run_id)

        async def stream() -> AsyncIterator[str]:
            async for kind, data in runner.follow(run_id):
                yield f"event: {kind}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"

        return StreamingResponse(
            stream(), media_type="text/event-stream", headers={"Cache-Control": "no-store"}
        )

    @app.get("/v1/runs/{run_id}/verify", tags=["runs"])
    async def runs_verify(run_id: str, request: Request, _: Principal = submit) -> dict[str, Any]:
        """Recompute the run's hash chain (``ok`` false names every problem)."""
        return _service(request).journal.verify(run_id).model_dump()

    @app.get("/v1/runs/{run_id}/export", tags=["runs"])
    async def runs_export(run_id: str, request: Request, _: Principal = submit) -> Response:
        """The run's events as JSONL, with hashes (verifiable without this program)."""
        journal = _service(request).journal
        journal.run(run_id)
        body = "".join(event.model_dump_json() + "\n" for event in journal.events(run_id))
        return Response(body, media_type="application/x-ndjson")

    # -- library calls ------------------------------------------------------------------------

    @app.post("/v1/route", tags=["library"], openapi_extra=_PANELS_BODY)
    async def route(
        request: Request,
        _: Principal = submit,
        similarity: str | None = Query(
            None, description="tfidf or minilm (default: the policy's)."
        ),
        theta_s: float | None = Query(None, ge=-1.0, le=1.0),
        theta_a: float | None = Query(None, gt=0.0, le=1.0),
    ) -> Any:
        """Read and route panels with the default rules (``dissensus route --json``)."""
        service = _service(request)
        items, single = _items(await _json_body(request), service.settings.max_panels, "panel")
        good, rejects, overruns = await run_in_threadpool(_checked, Panel, items, _limits(service))
        if single:
            _refuse_overrun(overruns, single=True)
            _single_or_422(rejects)
        rejects = _with_overruns(rejects, overruns)
        backend = library_calls.backend_for(similarity or service.policy.reading.similarity)
        records = (
            await run_in_threadpool(
                library_calls.route,
                [p for _, p in good],
                backend,
                theta_s=theta_s,
                theta_a=theta_a,
            )
            if good
            else []
        )
        if single:
            return records[0]
        return {"records": records, "rejects": rejects, "rejected": len(rejects)}

    @app.post("/v1/vote", tags=["library"])
    async def vote(
        request: Request,
        _: Principal = submit,
        beta: float = Query(1.5, ge=0.0, allow_inf_nan=False),
        strict: bool = Query(False),
        verifier: str | None = Query(None),
        decompose: bool = Query(True),
        max_fallback_agreement: float = Query(0.85, ge=0.0, le=1.0),
    ) -> Any:
        """Guarded decisions of vote cases (``dissensus vote --json``)."""
        service = _service(request)
        items, single = _items(await _json_body(request), service.settings.max_panels, "vote case")
        good, rejects, overruns = await run_in_threadpool(
            _checked, VoteCase, items, _limits(service)
        )
        if single:
            _refuse_overrun(overruns, single=True)
            _single_or_422(rejects)
        rejects = _with_overruns(rejects, overruns)
        settings = GuardThresholds(
            max_fallback_agreement=max_fallback_agreement, decompose=decompose
        )
        decisions = await run_in_threadpool(
            library_calls.vote,
            [c for _, c in good],
            service.guard_calibration,
            beta=beta,
            strict=strict,
            verifier=verifier,
            settings=settings,
        )
        out = [d.model_dump(mode="json") for d in decisions]
        if single:
            return out[0]
        return {"decisions": out, "rejects": rejects, "rejected": len(rejects)}

    @app.post("/v1/negotiate", tags=["library"])
    async def negotiate(
        request: Request,
        _: Principal = submit,
        deadline: float | None = Query(None, ge=0.0),
        rule: str | None = Query(None),
    ) -> Any:
        """Negotiate with CONCORD on a problem document (``dissensus negotiate --json``)."""
        body = await _json_body(request)
        cert = await library_calls.negotiate(
            body, deadline=deadline, rule=rule, max_agents=_service(request).settings.max_agents
        )
        return cert.model_dump(mode="json")

    @app.post("/v1/verify", tags=["library"])
    async def verify(request: Request, _: Principal = submit) -> Any:
        """Recompute a CONCORD certificate (``valid`` false names the first violated property)."""
        body = await _json_body(request)
        if not isinstance(body, dict):
            raise ApiError(422, "a certificate is a JSON object", "<root>")
        verdict = await run_in_threadpool(library_calls.verify, body)
        return verdict.model_dump(mode="json")

    @app.get("/v1/bound", tags=["library"])
    async def bound(
        _: Principal = submit,
        agents: int = Query(..., ge=1, le=1_000_000, description="Negotiating agents."),
        rounds: int = Query(..., ge=0, le=1_000_000, description="Repair rounds."),
    ) -> dict[str, Any]:
        """The worst-case cost of a CONCORD run (``dissensus bound --json``)."""
        return await run_in_threadpool(library_calls.bound, agents, rounds)

    # -- review -------------------------------------------------------------------------------

    @app.get("/v1/review", tags=["review"])
    async def review_list(
        request: Request,
        _: Principal = review,
        status: str = Query("open", pattern="^(open|resolved|all)$"),
        run: str | None = Query(None),
        reason: str | None = Query(None, description="Only items whose reason contains this text."),
        limit: int = Query(
            1000, ge=1, le=10_000, description="At most this many items, oldest first."
        ),
    ) -> list[dict[str, Any]]:
        """Review items (``dissensus review list --json``), with claims."""
        desk = _service(request).desk
        if run is not None:
            _service(request).journal.run(run)
        shown = list(desk.items(run_id=run, status=status, reason=reason or None, limit=limit))
        claims = desk.live_claims([st.item.review_id for st in shown if st.resolution is None])
        out: list[dict[str, Any]] = []
        for st in shown:
            claim = claims.get(st.item.review_id) if st.resolution is None else None
            out.append(
                {
                    "review_id": st.item.review_id,
                    "run_id": st.item.run_id,
                    "id": st.item.id,
                    "reason": st.item.reason,
                    "suggestion": st.item.suggestion,
                    "options": st.item.options,
                    "status": "resolved" if st.resolution else "open",
                    "resolution": st.resolution.model_dump() if st.resolution else None,
                    "claim": claim.model_dump() if claim else None,
                }
            )
        return out

    @app.get("/v1/review/{review_id}", tags=["review"])
    async def review_show(
        review_id: str, request: Request, _: Principal = review
    ) -> dict[str, Any]:
        """Everything a reviewer needs (``dissensus review show --json``) and the content hash to quote."""
        desk = _service(request).desk
        st = desk.status(review_id)
        resolution = desk.resolution(review_id)
        claim = desk.live_claim(review_id)
        return {
            "item": st.item.model_dump(mode="json"),
            "content_sha256": content_sha256(st.item),
            "status": "resolved" if resolution else "open",
            "resolution": resolution.model_dump() if resolution else None,
            "claim": claim.model_dump() if claim else None,
            "history": [h.model_dump() for h in desk.history(review_id)],
        }

    @app.post("/v1/review/{review_id}/claim", tags=["review"])
    async def review_claim(
        review_id: str, request: Request, principal: Principal = review
    ) -> dict[str, Any]:
        """Claim an open case for the configured time (409 when another reviewer holds it)."""
        return _service(request).desk.claim(review_id, principal.name).model_dump()

    @app.get("/v1/audits/{case_ref}", tags=["review"])
    async def audit_show(case_ref: str, request: Request, _: Principal = review) -> dict[str, Any]:
        """A blind audit item (``<run>.<line>``): the case without the committed answer or the
        suggestion; answer it with ``POST /v1/cases/{case_ref}/confirm``. 404: not audited."""
        from dissensus.pipeline.audit import audit_item
        from dissensus.pipeline.review import split_ref

        journal = _service(request).desk.journal
        run_id, line = split_ref(case_ref, "case reference")
        item = audit_item(journal, run_id, line)
        if item is None:
            raise StarletteHTTPException(404, f"no blind audit for case {case_ref}")
        done = journal.get(run_id, f"confirm/{line}") is not None
        return {"item": item.model_dump(mode="json"), "status": "audited" if done else "open"}

    @app.post("/v1/cases/{case_ref}/confirm", tags=["review"])
    async def case_confirm(
        case_ref: str, body: ConfirmBody, request: Request, principal: Principal = review
    ) -> dict[str, Any]:
        """Audit an automatic decision (``<run>.<line>``): confirm it, or correct it with another
        decision (the case's record becomes ``human``). 409: audited before. 400: not automatic."""
        audit = _service(request).desk.confirm(
            case_ref, decision=body.decision, note=body.note, reviewer=principal.name
        )
        return audit.model_dump(mode="json")

    @app.post("/v1/review/{review_id}/resolve", tags=["review"])
    async def review_resolve(
        review_id: str, body: ResolveBody, request: Request, principal: Principal = review
    ) -> dict[str, Any]:
        """Resolve a case; the reviewer is the token's name. 409: stale hash, already resolved, claimed."""
        record = _service(request).desk.resolve(
            review_id,
            decision=body.decision,
            note=body.note,
            reviewer=principal.name,
            sha256=body.content_sha256,
        )
        return record.model_dump(mode="json")

    @app.post("/v1/review/{review_id}/undo", tags=["review"])
    async def review_undo(
        review_id: str, request: Request, principal: Principal = review
    ) -> dict[str, Any]:
        """Undo the caller's resolution within the server's undo window (a ``review.reopened``
        event; the case is open again). 409: open, resolved by someone else, or too late."""
        service = _service(request)
        status = service.desk.undo(
            review_id, reviewer=principal.name, within_s=service.settings.undo_window_s
        )
        return {
            "review_id": review_id,
            "status": "open" if status.resolution is None else "resolved",
        }
