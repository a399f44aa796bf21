"""``POST /v1/chat/completions`` and ``GET /v1/cases/{id}``: the panel door over HTTP.

An adapter over :class:`dissensus.panels.PanelChat` (the library call decides; this
module translates): the body is OpenAI's chat-completions request, the answer OpenAI's
completion with the ``dissensus`` extension field, or, with ``"stream": true``,
server-sent events in OpenAI's chunk shape ending with ``data: [DONE]``. See
``docs/chat.md``.

Choices this module makes:

* Both endpoints need the ``submit`` role (as ``POST /v1/decide``); tokens are the
  service's bearer tokens, so an OpenAI SDK's ``api_key`` is the dissensus token.
* Every refusal, authentication included, is OpenAI's error body
  ``{"error": {"message", "type", "param", "code"}}`` with the matching status: 400
  invalid request or body (JSON nested deeper than :data:`~dissensus.io.jsonl.MAX_DEPTH`
  levels and integers of more digits than Python converts included, as for
  ``POST /v1/decide``), 401 / 403 authentication, 404 no panel configured or unknown
  case, 413 request over ``panel.max_request_chars`` or over the pipeline's bounds on a
  panel, 502 too few members answered or a panel over the pipeline's bounds once they
  did, 500 the pipeline failed, 503 the journal is busy or unreachable (below) or the
  server is shutting down (below). Unexpected failures are a 500 without a traceback.
* **The journal busy or unreachable** (another writer held its lock past the busy
  timeout, the database down or restarting, the connection lost) is ``503``
  ``journal_busy`` / ``journal_unavailable`` with ``Retry-After`` (as every route of the
  service answers it: :mod:`~dissensus.serve.journal_errors`) and ``x-should-retry:
  true``. A journal whose disk is full is ``503`` ``journal_full`` ("the journal's disk
  is full"), ``x-should-retry: false`` and no ``Retry-After``: an SDK's retry at once
  would ask every member again for a case the journal cannot take until an operator
  frees space. Its message is a fixed sentence; the store's error, which names the journal's
  file or URL, goes to the server's log (one line). No other message of the door names
  the journal's location either. ``GET /v1/cases/{id}`` answers the same ``503`` when
  the journal cannot be read (the library call raises it). When the journal failed
  while the case was being journalled, the door first reads the journal again (once):
  a case it holds (the commit went through, its acknowledgement was lost) is answered
  as usual; one it does not hold gets the ``503`` (nothing of it, or only its start, is
  journalled: asking again is safe); and when the journal cannot be read either, the
  ``503`` is ``journal_unavailable_case_unknown``, naming the case in its message and a
  ``dissensus`` field (``{case_id, run_id, links}``), ``x-should-retry: false``
  (``true`` with an idempotency key): poll ``GET /v1/cases/{id}`` before asking again.
* The body is read outside the route's catch-all: what the service's middleware raises
  from ``receive`` (a chunked body over ``--max-body-bytes``, a body too slow) reaches
  the middleware, which answers it.
* Whether to stream is the validated request's ``stream`` (strictly a boolean), never
  the raw body's.
* A body over :data:`~dissensus.serve.http.INLINE_BODY_BYTES` is parsed and checked in a
  worker thread, as ``POST /v1/decide``'s bodies are: the event loop keeps serving.
* **A client that goes away** (closes its connection) while its members are still
  answering ends its request as a shutdown does: the members are cancelled and nothing
  is journalled (no case it could never learn the id of, no members billed for nobody).
  Once the panel is handed to the decision, the case is journalled all the same.
* A stream starts after the panel is decided (a decision needs every member's answer):
  its three chunks carry the role, the whole content, then ``finish_reason``, ``usage``
  and ``dissensus``; with ``stream_options.include_usage`` the usage is a fourth chunk
  of its own with ``choices: []``, as OpenAI sends it. A request refused before deciding is answered with the error body
  and its status, not as a stream (the shutdown ``503`` excepted, below).
* ``GET /v1/models`` lists one model, ``dissensus-panel`` (none when no panel is
  configured: every name is then unknown), so SDK helpers that list models work, and ``GET /v1/models/{model}`` answers it by name (``models.retrieve``);
  any other name is OpenAI's 404 for an unknown model (``invalid_request_error``,
  ``model_not_found``, ``param`` ``model``; a name with a ``/`` in it is one name,
  unknown like any other). ``/v1/models/`` (no name) is the list with a trailing slash:
  the same relative ``307`` as any such path (:mod:`.slashes`). The request's
  ``model`` is echoed and not otherwise used.
* **Retries.** The door retries its members itself, so a failure an identical request
  sent at once cannot mend, or that would bill every member again, says
  ``x-should-retry: false`` (the header OpenAI's SDKs obey before their own rules,
  which retry every ``5xx``): ``502`` ``panel_unavailable`` / ``panel_too_large``,
  ``500`` ``decide_failed`` and the unexpected ``500`` ``internal``, and the ``504`` of
  a request whose case was already handed to the journal. That ``504`` (the service's
  ``--timeout``: :class:`~dissensus.serve.limits.RequestTimeout`) names the case: its
  message, ``code`` ``timeout_case_journalled`` and a ``dissensus`` field ``{case_id,
  run_id, links}`` like an escalation's, so the client polls ``GET /v1/cases/{id}``
  (which answers ``deciding`` at once while the decision runs) instead of asking again.
* **Shutdown** (:meth:`~dissensus.panels.PanelChat.adrain`, started by
  :class:`~dissensus.serve.server.Server` with the runs' drain): a request still
  waiting on its members when the grace is over, or arriving during it, is answered
  ``503`` ``shutting_down`` with ``Retry-After`` and ``x-should-retry: true`` (nothing
  was journalled: asking again, of another replica or of this server restarted, is
  safe). A streaming request gets the same JSON error body, as OpenAI's API answers a
  stream it refuses before it starts: the official SDK reads an error status's body as
  JSON, and from an event stream it kept neither ``code`` nor message. A request whose decision is running is
  answered normally: a case is never cut in half; a decision whose follow-up model
  calls had to be cut off ends as a failed follow-up does, and one that does not end
  even then is answered ``503`` ``shutting_down_case_unfinished`` naming its case, with
  ``x-should-retry: false``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, RedirectResponse, Response, StreamingResponse

from dissensus.io.limits import DEFAULT, Limits
from dissensus.panels import (
    CaseStatus,
    ChatCompletion,
    ChatError,
    CompletionRequest,
    PanelChat,
    as_chunks,
)
from dissensus.panels.door import (
    JOURNAL_BUSY,
    JOURNAL_CASE_UNKNOWN,
    JOURNAL_FULL,
    JOURNAL_UNAVAILABLE,
    SHUTTING_DOWN,
    UNFINISHED,
)
from dissensus.panels.idempotency import MAX_KEY_CHARS, check_key
from dissensus.pipeline import RunSpec
from dissensus.serve import journal_errors
from dissensus.serve.api_schema import AUTHED, ModelList, ModelObject, answer, refusals
from dissensus.serve.auth import Principal, allows
from dissensus.serve.http import INLINE_BODY_BYTES, BodyError, decode_json_body
from dissensus.serve.limits import TIMEOUT_NOTE, TimeoutNote
from dissensus.serve.slashes import other_spelling
from dissensus.store.journal import Journal
from dissensus.types import JsonObject

__all__ = ["MODEL", "MODEL_ID", "install", "router", "start_warnings"]

log = logging.getLogger("dissensus.serve")

MODEL_ID = "dissensus-panel"
"""The model ``GET /v1/models`` lists."""

MODEL: JsonObject = {"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "dissensus"}
"""OpenAI's model object of :data:`MODEL_ID`, as ``GET /v1/models`` lists it."""

router = APIRouter(tags=["chat"])

_AUTH_TYPES = {401: "authentication_error", 403: "permission_error", 429: "rate_limit_error"}


def install(
    app: FastAPI, *, spec: RunSpec, journal: Journal, limits: Limits = DEFAULT
) -> PanelChat:
    """Open the panel of the server's run specification on ``journal``, keep it on
    ``app.state.chat``, add the routes. ``limits``: the service's bounds on a record
    (``--max-field-chars``, ``--max-agents``), held to the request's own part of its
    panel as to a panel sent to ``POST /v1/decide``."""
    # The service's shift watch checks the chat door's cases: none of the door's own.
    chat = PanelChat(spec, journal=journal, limits=limits, shift_every=0)
    app.state.chat = chat
    app.include_router(router)
    return chat


def start_warnings(chat: PanelChat, request_timeout_s: float | None) -> list[str]:
    """What in the panel's settings cannot work as the policy means it under the service's
    ``--timeout`` (``request_timeout_s``), one line each: a fan-out deadline the request
    time ends first, a call budget that cannot pay for every member's first attempt."""
    if not chat.enabled:
        return []
    panel, out = chat.policy.panel, []
    if request_timeout_s is not None and request_timeout_s < panel.deadline_s:
        out.append(
            f"--timeout {request_timeout_s:g} s is shorter than panel.deadline_s "
            f"{panel.deadline_s:g} s: a chat request whose members take their deadline "
            "ends with 504 before they have answered"
        )
    calls = chat.policy.budget.max_calls
    if calls is not None and calls < len(panel.members):
        out.append(
            f"budget.max_calls {calls} is below the panel's {len(panel.members)} members: "
            "on every chat request the members the budget cannot pay for fail unasked"
        )
    return out


def _chat(request: Request) -> PanelChat:
    chat: PanelChat = request.app.state.chat
    return chat


NO_RETRY = frozenset(
    {"panel_unavailable", "panel_too_large", "decide_failed", "internal", UNFINISHED}
)
"""Codes of the door's errors an SDK must not retry (module docstring)."""

JOURNAL_DOWN = frozenset({JOURNAL_BUSY, JOURNAL_UNAVAILABLE, JOURNAL_FULL, JOURNAL_CASE_UNKNOWN})
"""Codes of the ``503`` of a journal that is busy or unreachable (module docstring)."""

RETRY_AFTER_S = 1
"""``Retry-After`` of the shutdown ``503`` and of ``409`` ``idempotency_key_in_use`` (seconds)."""

KEY_HEADER = "Idempotency-Key"
"""The header naming a request's idempotency key (:mod:`dissensus.panels.idempotency`)."""

REPLAYED_HEADER = "Idempotent-Replayed"
"""Set to ``true`` on the answer of a request sent again with its idempotency key."""


def _error(exc: ChatError, *, keyed: bool = False) -> Response:
    """OpenAI's error body of ``exc``, with the headers its code asks for (``keyed``: the
    request has an idempotency key, so sending it again answers its case)."""
    headers: dict[str, str] = dict(exc.headers)
    if exc.status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    if exc.code in NO_RETRY or exc.status == 429:
        # 429: too many unknown tokens from the address (dissensus.serve.throttle); an
        # SDK sending the same key again after Retry-After would most likely fail again.
        headers["x-should-retry"] = "false"
    elif exc.code in (SHUTTING_DOWN, "idempotency_key_in_use", "tokens_unavailable"):
        headers["x-should-retry"] = "true"
        headers["Retry-After"] = str(RETRY_AFTER_S)
    elif exc.code == JOURNAL_FULL:
        # Only an operator mends a full disk; a retry would ask every member again.
        headers["x-should-retry"] = "false"
    elif exc.code in JOURNAL_DOWN:
        # Its case may be journalled: without a key a retry could make a second one.
        retry = exc.code != JOURNAL_CASE_UNKNOWN or keyed
        headers["x-should-retry"] = "true" if retry else "false"
        headers.update(journal_errors.retry_headers())
    return JSONResponse(exc.body(), status_code=exc.status, headers=headers or None)


def _refused(request: Request, exc: ChatError, *, keyed: bool = False) -> Response:
    """The answer of a refusal of the door: a busy or unreachable journal's detail (the
    error's cause) goes to the server's log only, and no message names the journal's
    path or URL (:mod:`~dissensus.serve.journal_errors`)."""
    if exc.code in JOURNAL_DOWN and exc.__cause__ is not None:
        journal_errors.log_unavailable(exc.__cause__, f"{request.method} {request.url.path}")
    exc.message = journal_errors.scrub(exc.message, [str(_chat(request).journal.path)])
    return _error(exc, keyed=keyed)


def _idempotency_key(request: Request) -> str | None:
    """The request's ``Idempotency-Key`` (``None``: none), or a ``400`` :class:`ChatError`."""
    sent = request.headers.getlist(KEY_HEADER)
    if not sent:
        return None
    if len(sent) > 1:
        raise ChatError(
            400,
            f"the {KEY_HEADER} header was sent {len(sent)} times: send it once",
            param=KEY_HEADER,
            code="invalid_idempotency_key",
        )
    # Whitespace around a header value is not part of it (RFC 9110, section 5.5).
    return check_key(sent[0].strip(" \t"), param=KEY_HEADER)


def _timeout_note(case_id: str, run_id: str, *, keyed: bool = False) -> TimeoutNote:
    """What this request's ``504`` says once its case is handed to the journal (with an
    idempotency key, asking again with it answers the case: an SDK may retry)."""
    link = f"/v1/cases/{case_id}"
    then = (
        f"poll GET {link}, or send the request again with the same {KEY_HEADER}"
        if keyed
        else f"poll GET {link} instead of asking again"
    )
    return TimeoutNote(
        f"; its case {case_id} is being decided and journalled all the same: {then}",
        code="timeout_case_journalled",
        fields={
            "dissensus": {
                "case_id": case_id,
                "run_id": run_id,
                "links": {"case": link, "verify": f"/v1/runs/{run_id}/verify"},
            }
        },
        headers={"x-should-retry": "true" if keyed else "false"},
    )


def _authorise(request: Request) -> Principal:
    """The caller's principal with the ``submit`` role, or a :class:`ChatError` (401 / 403;
    429 after too many unknown tokens from the address; 503 while the tokens file does
    not load)."""
    service = request.app.state.service
    try:
        principal: Principal = service.authenticate(request)
    except Exception as exc:  # the service's own error type, re-shaped for OpenAI clients
        status = int(getattr(exc, "status", 401))
        raise ChatError(
            status,
            str(getattr(exc, "error", exc)),
            type=_AUTH_TYPES.get(
                status, "server_error" if status >= 500 else "invalid_request_error"
            ),
            param="Authorization",  # as the service's own body names the field
            # 503: the tokens file does not load (dissensus.serve.auth); retried by SDKs
            code={
                401: "invalid_api_key",
                429: "too_many_unknown_tokens",
                503: "tokens_unavailable",
            }.get(status, "forbidden"),
            headers=getattr(exc, "headers", None) if status == 429 else None,
        ) from None
    if not allows(principal, "submit"):
        raise ChatError(
            403,
            f"the token of {principal.name} has role {principal.role}; this needs submit",
            type="permission_error",
            param="Authorization",
            code="forbidden",
        )
    return principal


def _json(raw: bytes) -> Any:
    """The JSON document of a body, or a ``400`` :class:`ChatError` naming why it is not one:
    the reader of ``POST /v1/decide`` (:func:`dissensus.serve.http.decode_json_body`), so
    the message is the service's, in OpenAI's error shape."""
    try:
        return decode_json_body(raw)
    except BodyError as exc:
        raise _unreadable(exc.message, exc.field) from None


def _unreadable(message: str, field: str) -> ChatError:
    """The 400 of a body that is no JSON document: ``param`` names what was wrong, as the
    service's own body's ``field`` does (``<body>``, ``<encoding>``, ``<json>``, ``<depth>``)."""
    return ChatError(400, message, param=field, code="invalid_request")


async def _unless_gone(request: Request, answer: Awaitable[ChatCompletion]) -> ChatCompletion:
    """``answer``, cancelled if the client disconnects first (module docstring): a
    :class:`ChatError` then, which nobody reads."""
    answering = asyncio.ensure_future(answer)
    watching = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({answering, watching}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        answering.cancel()
        raise
    finally:
        watching.cancel()
    if not answering.done():
        answering.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await answering
        raise ChatError(400, "the client closed the connection", code="client_closed")
    return answering.result()


async def _disconnected(request: Request) -> None:
    """Return when the client has closed the connection (its body was read already:
    the next message the server sends is ``http.disconnect``)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _event(data: str) -> str:
    return f"data: {data}\n\n"


@router.post(
    "/v1/chat/completions",
    responses={
        **refusals(
            *AUTHED,
            408,
            413,
            415,
            404,
            409,
            422,
            502,
            503,
            504,
            openai=True,
            said={
                400: "An invalid request or body (not JSON, not UTF-8, nested too deep, "
                "empty, or not a chat-completions request), an invalid `Idempotency-Key`, "
                "or a header sent twice.",
                404: "No panel is configured (the policy's `panel.members` is empty).",
                409: "The case of this `Idempotency-Key` is being decided by another "
                "process, or its run stopped before its end (`idempotency_key_in_use`, "
                "`Retry-After`).",
                422: "This `Idempotency-Key` was used with another request "
                "(`idempotency_key_reused`).",
                413: "The request is over `panel.max_request_chars`, the body over "
                "`--max-body-bytes`, or the panel over the pipeline's bounds.",
                500: "The pipeline failed, or an error no handler expected "
                "(`x-should-retry: false`).",
                503: "The journal is busy or unreachable (`journal_busy`, "
                "`journal_unavailable`, `Retry-After`; the message never names the "
                "journal; `journal_full` when its disk is full, `x-should-retry: false`; "
                "`journal_unavailable_case_unknown` when the case may be "
                "journalled all the same: `dissensus` names it), the server is shutting down "
                "(`shutting_down`, `Retry-After`; with `stream: true` too, as JSON), or its "
                "tokens file does not load (`tokens_unavailable`, `Retry-After`).",
                504: "The request took longer than the server's `--timeout`; once its case "
                "was handed to the journal, `timeout_case_journalled` and `dissensus` "
                "name the case to poll.",
            },
        ),
        200: {
            **answer(
                ChatCompletion,
                "The completion (`finish_reason` `stop`, or `escalated` to a human), with "
                "the `dissensus` field; with `stream: true`, Server-Sent Events of "
                "`chat.completion.chunk` objects ending with `data: [DONE]`.",
                **{
                    "X-Dissensus-Run": "The run that journalled the case.",
                    REPLAYED_HEADER: "`true` when the request was sent again with its "
                    "`Idempotency-Key`: the case the first one journalled.",
                },
            ),
            "content": {
                "text/event-stream": {
                    "schema": {
                        "type": "string",
                        "description": "`data: {chunk}` events (ChatCompletionChunk), "
                        "then `data: [DONE]`.",
                    }
                }
            },
        },
    },
    openapi_extra={
        "parameters": [
            {
                "name": KEY_HEADER,
                "in": "header",
                "required": False,
                "schema": {"type": "string", "minLength": 1, "maxLength": MAX_KEY_CHARS},
                "description": "One key, one case: the request sent again with the same key "
                "is answered with the case the first one journalled, no member asked again. "
                "1 to 255 visible ASCII characters, such as a UUID; scoped to the token.",
            }
        ]
    },
)
async def chat_completions(request: Request) -> Response:
    """Fan the request out to the policy's panel, decide, answer (``stop``) or escalate (``escalated``)."""
    try:
        principal = _authorise(request)
        chat = _chat(request)
        key = _idempotency_key(request)
    except ChatError as exc:
        return _error(exc)
    # Read outside the broad ``except`` below: what the service's middleware raises from
    # the body's ``receive`` (a body over --max-body-bytes, one arriving too slowly) is
    # the middleware's to answer, not a failure of the door.
    raw = await request.body()

    def handed_off(case_id: str, run_id: str) -> None:
        # Read by the service's RequestTimeout if the time runs out from here on.
        request.scope[TIMEOUT_NOTE] = _timeout_note(case_id, run_id, keyed=key is not None)

    asked: CompletionRequest | None = None
    try:
        if len(raw) <= INLINE_BODY_BYTES:
            asked = chat.check(_json(raw))
        else:
            asked = await run_in_threadpool(lambda: chat.check(_json(raw)))
        answering = chat.acomplete(
            asked, on_decide=handed_off, idempotency_key=key, key_scope=principal.name
        )
        completion = await _unless_gone(request, answering)
    except ChatError as exc:
        return _refused(request, exc, keyed=key is not None)
    except Exception:
        log.exception("chat completion failed")
        return _error(ChatError(500, "internal error", type="server_error", code="internal"))
    headers = {"X-Dissensus-Run": completion.dissensus.run_id}
    if completion.dissensus.replayed:
        headers[REPLAYED_HEADER] = "true"
    if not asked.stream:
        # The completion is a validated model: serialised once, straight to the body.
        return Response(
            completion.model_dump_json(), media_type="application/json", headers=headers
        )

    options = asked.stream_options
    include_usage = bool(options is not None and options.include_usage)

    async def stream() -> AsyncIterator[str]:
        for chunk in as_chunks(completion, include_usage=include_usage):
            yield _event(chunk.model_dump_json())
        yield _event("[DONE]")

    return StreamingResponse(
        stream(),
        media_type="text/event-stream",
        headers={**headers, "Cache-Control": "no-store"},
    )


@router.get(
    "/v1/cases/{case_id}",
    responses={
        **refusals(
            *AUTHED,
            404,
            503,
            504,
            openai=True,
            said={
                404: "No such case.",
                503: "The journal is busy or unreachable (`journal_busy`, "
                "`journal_unavailable`, `Retry-After`, `x-should-retry: true`; the message "
                "never names the journal), or its tokens file does not load "
                "(`tokens_unavailable`, `Retry-After`).",
            },
        ),
        200: answer(CaseStatus, "The case as the journal holds it now."),
    },
)
async def case_status(case_id: str, request: Request) -> Response:
    """A chat case now: committed, escalated (waiting for a human) or resolved, with the answer."""
    try:
        _authorise(request)
        status = await _chat(request).acase(case_id)
    except ChatError as exc:
        return _refused(request, exc)
    return JSONResponse(status.model_dump(mode="json"))


@router.get(
    "/v1/models",
    responses={
        **refusals(*AUTHED, 504, openai=True),
        200: answer(ModelList, "The panel's model, or none when no panel is set."),
    },
)
async def models(request: Request) -> Response:
    """The one model a chat client can name (none when no panel is configured)."""
    try:
        _authorise(request)
    except ChatError as exc:
        return _error(exc)
    return JSONResponse({"object": "list", "data": [MODEL] if _chat(request).enabled else []})


@router.get(
    "/v1/models/{model:path}",
    responses={
        **refusals(
            *AUTHED, 404, 504, openai=True, said={404: "No such model (`model_not_found`)."}
        ),
        200: answer(ModelObject, "The model, as `GET /v1/models` lists it."),
    },
)
async def model(model: str, request: Request) -> Response:
    """The model ``GET /v1/models`` lists, by name (OpenAI's ``models.retrieve``)."""
    if not model and (target := other_spelling(request.app.router, request.scope)):
        return RedirectResponse(target, status_code=307)
    try:
        _authorise(request)
        if not _chat(request).enabled:
            raise ChatError(
                404,
                f"the model {model!r} does not exist: no panel is configured "
                "(the policy's panel.members is empty)",
                param="model",
                code="model_not_found",
            )
        if model != MODEL_ID:
            raise ChatError(
                404,
                f"the model {model!r} does not exist: this server has one, {MODEL_ID!r}",
                param="model",
                code="model_not_found",
            )
    except ChatError as exc:
        return _error(exc)
    return JSONResponse(MODEL)
