"""What every HTTP route shares: the error shape, authentication by role, reading a
JSON body, validating panels as the CLI validates JSONL lines, and the size limits.

The routes themselves live in :mod:`dissensus.serve.routes` (one router per area); the
choices about errors, bodies and limits are listed in :mod:`dissensus.serve.app`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import Match, Mount

from dissensus.errors import ConfigError, DissensusError, InputError
from dissensus.guard import CorrelatedConsensusError
from dissensus.io.jsonl import MAX_DEPTH, json_depth
from dissensus.io.jsontext import JsonTextError, check_unique_keys, opening_brackets
from dissensus.io.limits import Limits, Overrun, check_record, count_values, too_many_values
from dissensus.serve import journal_errors, library_calls
from dissensus.serve.auth import Principal, Role, allows
from dissensus.serve.journal_adapter import (
    AlreadyConfirmed,
    AlreadyResolved,
    ClaimConflict,
    StaleContent,
    UnknownItem,
)
from dissensus.serve.limits import error_document
from dissensus.serve.runs import item_line
from dissensus.store.journal import UnknownRun
from dissensus.types import field_path, unrepresentable_field

if TYPE_CHECKING:
    from dissensus.serve.service import Service

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

__all__ = [
    "INLINE_BODY_BYTES",
    "PANELS_BODY",
    "ApiError",
    "BodyError",
    "ItemReject",
    "NonFinite",
    "Overruns",
    "allowed_methods",
    "by_size",
    "checked",
    "decode_json_body",
    "error_response",
    "install_errors",
    "items_of",
    "json_body",
    "known_query",
    "limits_of",
    "non_finite",
    "object_body",
    "parse_json",
    "refuse_overrun",
    "require",
    "service_of",
    "single_or_422",
    "validated",
    "with_overruns",
]


class ApiError(Exception):
    """An error answered as ``{error, field}`` with ``status``."""

    def __init__(
        self,
        status: int,
        error: str,
        field: str | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(error)
        self.status = status
        self.error = error
        self.field = field
        self.headers = headers
        self.extra = extra


def service_of(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


def require(role: Role) -> Callable[[Request], Awaitable[Principal]]:
    """A dependency: the caller's principal, which must have ``role`` (403 otherwise)."""

    async def dependency(request: Request) -> Principal:
        principal = service_of(request).authenticate(request)
        if not allows(principal, role):
            raise ApiError(
                403,
                f"the token of {principal.name} has role {principal.role}; this needs {role}",
                "Authorization",
            )
        # The query is checked once the caller is known: a caller without credentials
        # (or with a token refused for its role) is told so, 401/403, never 422 listing
        # the parameters the endpoint takes (:func:`known_query`).
        _check_query(request)
        return principal

    dependency.checks_query = True  # type: ignore[attr-defined]
    return dependency


_QUERY_NAMES: dict[int, frozenset[str]] = {}
"""The query parameters each route takes, by the route's ``id`` (routes live as long
as the app)."""


_AUTHENTICATED: dict[int, bool] = {}
"""Whether each route (by ``id``) depends on :func:`require`, which checks its query."""
_CHECKED: dict[int, bool] = {}
"""Whether each route (by ``id``) has its query checked (depends on :func:`known_query`)."""


def _query_names(route: Any) -> frozenset[str] | None:
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return None
    names = _QUERY_NAMES.get(id(route))
    if names is None:
        found: set[str] = set()
        authenticated = checked = False
        stack = [dependant]
        while stack:  # the route's own parameters and its dependencies'
            current = stack.pop()
            found.update(p.alias for p in current.query_params)
            authenticated |= bool(getattr(current.call, "checks_query", False))
            checked |= current.call is known_query
            stack.extend(current.dependencies)
        names = _QUERY_NAMES[id(route)] = frozenset(found)
        _AUTHENTICATED[id(route)] = authenticated
        _CHECKED[id(route)] = checked
    return names


async def known_query(request: Request) -> None:
    """A dependency of the JSON API's routes: a query parameter the route does not take is
    422 naming it (and the ones it takes), never ignored. A misspelt ``theta`` for
    ``theta_s`` or ``Beta`` for ``beta`` was dropped, and the request answered under the
    policy's values as if it had been sent without it, as the command line refuses an
    option it does not know. A parameter given twice (``limit=5&limit=6``) is 422 too:
    the route read the last copy, where a proxy or a log may show the first.

    A route that takes a role (:func:`require`) has its query checked there, after the
    caller is authenticated and authorised: router dependencies run before a route's
    own, and a request without a valid token was answered 422 listing the endpoint's
    parameters, its token never checked (nor counted by the throttle of failed
    checks), where it is 401 (or 403 for a role that may not)."""
    route = request.scope.get("route")
    if _query_names(route) is not None and not _AUTHENTICATED[id(route)]:
        _check_query(request)


def _check_query(request: Request) -> None:
    """:func:`known_query`'s check, for a route that takes it (a route whose router does
    not, such as ``/healthz``, takes any query as before). An empty query has nothing
    to check."""
    if not request.scope.get("query_string"):
        return
    route = request.scope.get("route")
    names = _query_names(route)
    if names is None or not _CHECKED[id(route)]:
        return
    seen: set[str] = set()
    for name, _ in request.query_params.multi_items():
        if name not in names:
            takes = ", ".join(sorted(names)) if names else "none"
            raise ApiError(
                422, f"unknown query parameter {name!r}; this endpoint takes {takes}", name
            )
        if name in seen:
            # Readers differ on which copy counts (the route read the last, a proxy or a
            # log may show the first), as for a header sent twice.
            raise ApiError(422, f"query parameter {name!r} given more than once", name)
        seen.add(name)


def field_of(loc: tuple[int | str, ...] | list[int | str]) -> str | None:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(parts) or None


def error_response(
    status: int,
    error: str,
    field: str | None = None,
    *,
    path: str = "",
    headers: Mapping[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    """The JSON error response of a refusal of a request to ``path``: the service's own
    body, or OpenAI's on an OpenAI-compatible path (:func:`~dissensus.serve.limits.error_document`).
    ``headers`` are kept (a 405's ``Allow``); a 401 also says ``WWW-Authenticate: Bearer``."""
    sent = dict(headers or {})
    if status == 401:
        sent.setdefault("WWW-Authenticate", "Bearer")
    return JSONResponse(
        error_document(status, error, field, path=path, **extra),
        status_code=status,
        headers=sent or None,
    )


def _path(request: Request) -> str:
    return str(request.scope.get("path", ""))


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
"""The methods an ``Allow`` header may name, in the order it names them."""


def allowed_methods(request: Request) -> list[str]:
    """Every method some route of the app takes on the request's path, with ``HEAD``
    wherever ``GET`` is (:mod:`dissensus.serve.head`), in :data:`_METHODS` order.

    The router answers a wrong method with the ``Allow`` of the first route whose path
    matched, so a path served by two routes (``POST`` and ``DELETE`` of a claim) named
    one of them only. Each method is matched against the app's routes as the router
    matches a request (``matches`` of a fresh scope: nothing of the request's changes).
    A mount (the static files) takes any method and answers for itself: it is not asked
    here, and the ``Allow`` of its own 405 is kept.
    """
    scope = request.scope
    routes = [r for r in getattr(request.app, "routes", []) if not isinstance(r, Mount)]
    taken: set[str] = set()
    for method in _METHODS:
        probe = {
            "type": "http",
            "method": method,
            "path": scope.get("path", ""),
            "root_path": scope.get("root_path", ""),
            "headers": [],
            "query_string": b"",
        }
        if any(route.matches(probe)[0] == Match.FULL for route in routes):
            taken.add(method)
    if "GET" in taken:
        taken.add("HEAD")
    return [m for m in _METHODS if m in taken]


def install_errors(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(
            exc.status, exc.error, exc.field, path=_path(request), headers=exc.headers, **exc.extra
        )

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0]
        message = str(first.get("msg", "invalid request"))
        return error_response(422, message, field_of(first.get("loc", ())), path=_path(request))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # The exception's headers are kept: a 405 names the allowed methods (``Allow``),
        # all of them (:func:`allowed_methods`), not only the first matching route's.
        headers = dict(exc.headers or {})
        if exc.status_code == 405 and (allowed := allowed_methods(request)):
            named = [h for h in headers if h.lower() == "allow"]
            own = {m.strip().upper() for h in named for m in headers.pop(h).split(",")}
            headers["Allow"] = ", ".join([*allowed, *sorted(own - set(allowed) - {""})])
        return error_response(
            exc.status_code, str(exc.detail), path=_path(request), headers=headers or None
        )

    @app.exception_handler(DissensusError)
    async def dissensus_error(request: Request, exc: DissensusError) -> JSONResponse:
        path = _path(request)
        status, message, field, extra = dissensus_error_parts(exc)
        if isinstance(exc, UnknownRun) and field is None:
            # The request names the run in its path (``/v1/runs/{run_id}``) or in its
            # ``run`` query parameter (``/v1/review?run=``): the field at fault.
            field = next((k for k in ("run_id", "run") if k in request.path_params), None)
            if field is None and "run" in request.query_params:
                field = "run"
        headers: dict[str, str] = {}
        if status == 503:
            # Unreachable or busy: retry later (a full disk: not before an operator
            # frees space); the detail is the server log's only.
            journal_errors.log_unavailable(exc, f"{request.method} {path}")
            headers = journal_errors.retry_headers(message)
        # No message names the journal's file or URL to a remote caller.
        message = journal_errors.scrub(message, [str(service_of(request).journal.path)])
        return error_response(status, message, field, path=path, headers=headers, **extra)

    def dissensus_error_parts(
        exc: DissensusError,
    ) -> tuple[int, str, str | None, dict[str, Any]]:
        """``(status, message, field, extra)`` of a library error. A journal that is
        unreachable or busy is 503 with a fixed message (:mod:`.journal_errors`); a
        read-only or damaged one, like any other library error, 409."""
        public = journal_errors.unavailable(exc)
        if public is not None:
            return 503, public, None, {}
        if isinstance(exc, AlreadyResolved):
            return 409, str(exc), None, {"resolved_by": exc.reviewer, "resolved_at": exc.at}
        if isinstance(exc, AlreadyConfirmed):
            return 409, str(exc), None, {"confirmed_by": exc.reviewer, "confirmed_at": exc.at}
        if isinstance(exc, ClaimConflict):
            return 409, str(exc), None, {"claimed_by": exc.holder, "claimed_until": exc.expires}
        if isinstance(exc, StaleContent):
            return 409, str(exc), "content_sha256", {}
        if isinstance(exc, UnknownItem | UnknownRun):
            return 404, str(exc), None, {}
        if isinstance(exc, library_calls.TooManyAgents):
            return 413, str(exc), exc.field, {}
        if isinstance(exc, ConfigError):
            return 422, str(exc), exc.field, {}
        if isinstance(exc, InputError):
            return 400, str(exc), None, {}
        if isinstance(exc, CorrelatedConsensusError):
            return 409, str(exc), None, {}
        return 409, str(exc), None, {}

    @app.exception_handler(ClientDisconnect)
    async def gone(request: Request, exc: ClientDisconnect) -> Response:
        # The client closed its connection before its body arrived: nobody reads an
        # answer, and it is no failure of the server (the catch-all below would log it
        # as one, with a traceback).
        return Response(status_code=400)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        # Deliberately says nothing of the exception: its text may name server paths.
        return error_response(500, "internal error", None, path=_path(request))


JSON_LINES_HINT = "the body is one JSON document, not JSON Lines: send the lines' objects as a list [{...}, {...}]"
"""Added to the parser's "Extra data" when the body is JSON Lines (a panels file sent as
it is, the command line's input format)."""


def _json_lines(text: str) -> bool:
    """Whether ``text`` is JSON Lines: two or more lines, each blank or one JSON object.
    Asked only of a body the parser refused with "Extra data", to say what to send."""
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) < 2:
        return False
    for line in lines:
        try:
            if not isinstance(json.loads(line, parse_constant=non_finite), dict):
                return False
        except (ValueError, RecursionError):
            return False
    return True


class NonFinite(ValueError):
    """``NaN``, ``Infinity`` or ``-Infinity`` in a body: Python's JSON extensions, not JSON."""


def non_finite(name: str) -> Any:
    """A ``parse_constant`` for :func:`json.loads` that refuses every constant."""
    raise NonFinite(name)


class BodyError(ValueError):
    """A request body that is no JSON document: ``message`` says why, ``field`` names what
    was wrong (``<body>``, ``<encoding>``, ``<json>``, ``<depth>`` or the path of a key
    written twice). Each door answers it in its own error shape."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


def decode_json_body(raw: bytes) -> Any:
    """The JSON document of a body, or :class:`BodyError` naming why it is not one: the one
    reader of both doors' bodies (``POST /v1/decide`` and the other routes through
    :func:`parse_json`, the chat door through its own wrapper), so a body is refused with
    the same message whichever door it is sent to.

    An empty body (nothing but whitespace) is ``empty request body`` (``<body>``). The
    body must be UTF-8 (RFC 8259 section 8.1), decoded strictly: UTF-16 and UTF-32,
    which :func:`json.loads` would detect and accept in bytes, are refused (``<encoding>``,
    or ``<json>`` for a UTF-16 / UTF-32 body without a byte order mark, whose bytes happen
    to be valid UTF-8 but not JSON). A UTF-8 byte order mark at the start is accepted
    and dropped, as RFC 8259 allows a parser to, and as the JSONL reader does on a file's
    first line (:func:`dissensus.io.jsonl.parse_line`). Text the parser refuses is
    ``invalid JSON: <why> (line N)`` (``<json>``; JSON Lines, a panels file sent as it
    is, add what to send instead: :data:`JSON_LINES_HINT`). ``NaN`` and ``Infinity``, which
    Python's parser accepts and RFC 8259 does not, are refused as not JSON (``<json>``),
    as the JSONL reader refuses them, and so is a key written twice in one object (the
    field names its path, the message too: ``a.b: duplicate key``), as a JSONL line is.
    Nesting deeper than :data:`~dissensus.io.jsonl.MAX_DEPTH` anywhere is refused
    (``<depth>``), except that a list (of panels) may be one level deeper than a JSONL
    line, the list holding them: each item on its own is held to a line's depth."""
    if not raw.strip():
        raise BodyError("empty request body", "<body>")
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError:
        raise BodyError("request body is not UTF-8", "<encoding>") from None
    deep = BodyError(f"JSON nested deeper than {MAX_DEPTH} levels", "<depth>")
    try:
        body = json.loads(text, parse_constant=non_finite)
    except json.JSONDecodeError as exc:
        message = f"invalid JSON: {exc.msg} (line {exc.lineno})"
        if exc.msg == "Extra data" and _json_lines(text):
            message += f"; {JSON_LINES_HINT}"
        raise BodyError(message, "<json>") from None
    except NonFinite as exc:
        raise BodyError(f"invalid JSON: {exc} is not a JSON number", "<json>") from None
    except RecursionError:
        raise deep from None
    except ValueError:  # an integer of more digits than Python converts
        message = f"invalid JSON: an integer of more than {sys.get_int_max_str_digits()} digits"
        raise BodyError(message, "<json>") from None
    deepest = MAX_DEPTH + 1 if isinstance(body, list) else MAX_DEPTH
    if opening_brackets(text) > MAX_DEPTH and json_depth(body) > deepest:
        raise deep
    try:
        check_unique_keys(body, text)
    except JsonTextError as exc:  # a key written twice: which value was meant is unknown
        raise BodyError(f"{exc.field}: {exc.message}", exc.field) from None
    return body


def parse_json(raw: bytes) -> Any:
    """The JSON document of a body (:func:`decode_json_body`), or :class:`ApiError` 400
    naming why it is not one."""
    try:
        return decode_json_body(raw)
    except BodyError as exc:
        raise ApiError(400, exc.message, exc.field) from None


INLINE_BODY_BYTES = 16 * 1024
"""Bodies up to this size are parsed and validated on the event loop (a panel or a few
take tens of microseconds, less than the hop to a worker thread); larger ones in a
worker thread."""


async def json_body(request: Request) -> Any:
    raw = await request.body()
    if len(raw) <= INLINE_BODY_BYTES:
        return parse_json(raw)
    return await run_in_threadpool(parse_json, raw)


async def object_body(request: Request, model: type[M]) -> M:
    """The request's body as ``model``, refused as ``POST /v1/decide`` refuses a body: 400
    when it is empty (``<body>``) or not JSON (:func:`json_body`), 422 when it is not an
    object (``<root>``) or does not validate (the first invalid field, message as
    :func:`reject_of` words it; a lone surrogate or a non-finite number as the JSONL
    reader words it, :func:`_unrepresentable`). ``model`` validates with the context
    ``{"max_field_chars": --max-field-chars}``, so its text fields can be bounded by the
    server's setting."""
    body = await json_body(request)
    if not isinstance(body, dict):
        raise ApiError(422, "expected a JSON object", "<root>")
    context = {"max_field_chars": service_of(request).settings.max_field_chars}
    try:
        return model.model_validate(body, context=context)
    except ValidationError as exc:
        reject = _unrepresentable(0, body) or reject_of(0, exc)
        raise ApiError(422, reject.error, reject.field) from None


async def by_size(request: Request, call: Callable[..., T], *args: Any) -> T:
    """``call(*args)``: on the event loop for a body of at most :data:`INLINE_BODY_BYTES`
    (already read), else in a worker thread."""
    if len(await request.body()) <= INLINE_BODY_BYTES:
        return call(*args)
    return await run_in_threadpool(call, *args)


def limits_of(service: Service) -> Limits:
    return Limits(
        max_agents=service.settings.max_agents, max_field_chars=service.settings.max_field_chars
    )


def items_of(body: Any, limit: int, what: str) -> tuple[list[Any], bool]:
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


class ItemReject(BaseModel):
    """An item of a request's list that was not accepted: where and why, in the words the
    JSONL reader uses for the same line."""

    index: int
    """The item's place in the list (0-based)."""
    field: str
    """The field path (``<root>`` for the item itself)."""
    error: str


def reject_of(index: int, error: ValidationError | None) -> ItemReject:
    if error is None:
        return ItemReject(index=index, field="<root>", error="expected a JSON object")
    first = error.errors()[0]
    message = str(first["msg"]).removeprefix("Value error, ")
    return ItemReject(index=index, field=field_path(first["loc"]) or "<root>", error=message)


def _unrepresentable(index: int, item: dict[str, Any]) -> ItemReject | None:
    """The reject of an item holding a non-finite number (``1e999``) or a lone surrogate
    (``"\\ud800"``), named by the value's own path, or None.

    The JSONL reader refuses such a line before its model sees it
    (:func:`~dissensus.io.jsontext.check_json_value`), naming the value
    (``meta.weight: must be a finite number (got inf)``); the models refuse it too, but
    name the field that holds it (``meta``) or say "unable to parse raw data as a
    unicode string". Asked only of an item its model refused: a model that takes an item
    has found nothing of the kind in it."""
    found = unrepresentable_field(item)
    if found is None:
        return None
    field, message = found
    return ItemReject(index=index, field=field, error=message)


def validated(model: type[Any], items: list[Any]) -> tuple[list[tuple[int, Any]], list[ItemReject]]:
    """Items validated as the CLI validates JSONL lines: ``([(index, model)], [reject])``.

    The item is the parsed JSON of a line, so the reject names the same field path and
    message as :func:`dissensus.io.jsonl.parse_line` (a test pins that), a non-finite
    number or a lone surrogate too (:func:`_unrepresentable`).
    """
    good: list[tuple[int, Any]] = []
    rejects: list[ItemReject] = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            rejects.append(reject_of(index, None))
            continue
        try:
            good.append((index, model.model_validate(item)))
        except ValidationError as exc:
            rejects.append(_unrepresentable(index, item) or reject_of(index, exc))
    return good, rejects


def single_or_422(rejects: list[ItemReject]) -> None:
    if rejects:
        raise ApiError(422, rejects[0].error, rejects[0].field)


Overruns = list[tuple[int, Overrun]]


def checked(
    model: type[Any],
    items: list[Any],
    limits: Limits,
    lines: dict[int, str] | None = None,
    body_bytes: int | None = None,
) -> tuple[list[tuple[int, Any]], list[ItemReject], Overruns]:
    """:func:`validated`, with the valid records over ``limits`` set apart as overruns.

    With ``lines``, each valid item's JSONL line (:func:`~dissensus.serve.runs.item_line`)
    is made here and kept in it by index: its length bounds every field's (an escape
    only lengthens a string), so a record whose line is within the bounds is not walked,
    as :func:`dissensus.io.jsonl.parse_line` does for a line of a file.

    An item holding more JSON values than ``max_panel_values`` is set apart before it is
    validated: building its model and its line cost about a hundred times the body's size
    in memory (an 8 MB body of 740,000 keys took 640 MB) for a record refused anyway. A
    body of ``body_bytes`` no more than that bound cannot hold such an item (every value
    takes a byte), so its items are not walked twice."""
    overruns: Overruns = []
    if body_bytes is None or body_bytes > limits.max_panel_values:
        for index, item in enumerate(items):
            if isinstance(item, dict) and (n := count_values(item)) > limits.max_panel_values:
                overruns.append((index, too_many_values(n, limits)))
    crowded = {index for index, _ in overruns}
    if crowded:
        items = [{} if i in crowded else item for i, item in enumerate(items)]
    good, rejects = validated(model, items)
    rejects = [r for r in rejects if r.index not in crowded]
    kept: list[tuple[int, Any]] = []
    for index, record in good:
        if index in crowded:
            continue
        over = check_record(record, _line_chars(items, index, lines), limits)
        if over is None:
            kept.append((index, record))
        else:
            overruns.append((index, over))
    return kept, rejects, sorted(overruns, key=lambda o: o[0])


def _line_chars(items: list[Any], index: int, lines: dict[int, str] | None) -> int | None:
    """The length of item ``index``'s line, kept in ``lines`` (None: not made here)."""
    if lines is None:
        return None
    try:
        line = item_line(items[index])
    except (RecursionError, ValueError):  # made (and failing) where the run is started
        return None
    lines[index] = line
    return len(line)


def refuse_overrun(overruns: Overruns, *, single: bool) -> None:
    """413 (too many agents) or 422 (a field too long) for the first overrun, if any."""
    if not overruns:
        return
    index, over = overruns[0]
    status = 413 if over.count else 422
    if single:
        raise ApiError(status, over.message, over.field)
    raise ApiError(status, f"item {index}: {over.message}", f"{index}.{over.field}")


def with_overruns(rejects: list[ItemReject], overruns: Overruns) -> list[ItemReject]:
    """``rejects`` and the overruns as rejects, in item order."""
    more = [ItemReject(index=i, field=o.field, error=o.message) for i, o in overruns]
    return sorted(rejects + more, key=lambda r: r.index) if more else rejects


# An OpenAPI fragment handed to FastAPI as it is (JSON schema, not data of this service).
PANELS_BODY: dict[str, Any] = {
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
