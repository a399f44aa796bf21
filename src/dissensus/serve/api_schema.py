"""What the OpenAPI schema (``/openapi.json``, ``/docs``) says of each endpoint's answers.

Most routes declare their answer as their ``response_model``. Those that write their
answer themselves (a ``JSONResponse`` or a ``Response`` built by hand, so that its bytes
are exactly the record's, or a stream) declare it here instead, as an OpenAPI
``responses`` entry (:func:`answer`, :func:`stream`): the schema describes the answer,
and nothing of what the server sends changes.

The models here are the answers that had none of their own: ``GET /readyz``
(:class:`Ready`), ``POST /v1/decide?async=true`` (:class:`DecideStarted`, ``202``),
a list sent to ``POST /v1/route`` or ``POST /v1/vote`` (:class:`RouteAnswer`,
:class:`VoteAnswer`), and OpenAI's model objects of ``GET /v1/models``
(:class:`ModelList`, :class:`ModelObject`). Every other answer is a model of the
library's (:mod:`dissensus.outputs`, the journal's, the chat door's
:mod:`dissensus.panels.shapes`).

Refusals are declared too, per operation (:func:`refusals`): the statuses it answers,
each with the body it really has, the service's :class:`ErrorBody` (``{"error",
"field"}``) or, on the OpenAI-compatible paths, OpenAI's :class:`OpenAIErrorBody`
(``{"error": {"message", "type", "param", "code"}}``). FastAPI's own ``422``
(``HTTPValidationError``, ``{"detail": [...]}``), which this server never sends (its
validation errors are an :class:`ErrorBody` naming the field), is left out of the
schema (:func:`install`).

Choices this module makes:

* An operation declares the statuses ``docs/serve.md`` lists for it, and those every
  request of its kind may get from the checks before any route: ``400`` (a header sent
  twice, a body that cannot be read), ``403`` (a foreign ``Host``, a cross-origin write),
  ``500``; with a token ``401`` and ``403``; with a body ``408``, ``413``, ``415`` (a
  write), ``422``; ``503`` where the journal is read or written; ``504`` where the
  request time is bounded (not a run's event stream). The ``405`` of a method a path
  does not take, the ``404`` of a path that names no endpoint, the ``307`` of a
  trailing slash and the ``431`` of a request head over 64 KiB belong to no operation.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any, Literal

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict

from dissensus.guard.decision import GuardDecision
from dissensus.outputs import RouteRecord
from dissensus.serve.http import ItemReject

__all__ = [
    "AUTHED",
    "BODY",
    "DecideLinks",
    "DecideStarted",
    "ErrorBody",
    "ModelList",
    "ModelObject",
    "OpenAIError",
    "OpenAIErrorBody",
    "Ready",
    "RouteAnswer",
    "VoteAnswer",
    "answer",
    "install",
    "refusals",
    "stream",
]


class Ready(BaseModel):
    """``GET /readyz``: the journal is reachable."""

    status: Literal["ready"]


class DecideLinks(BaseModel):
    """Where a run started by ``POST /v1/decide?async=true`` is followed."""

    run: str
    """``GET /v1/runs/{id}``: its status, records and rejects."""
    events: str
    """``GET /v1/runs/{id}/events``: its progress as Server-Sent Events."""


class DecideStarted(BaseModel):
    """The ``202`` of ``POST /v1/decide?async=true``: the run was started and goes on."""

    run_id: str
    status: Literal["running", "finished", "failed", "incomplete"]
    links: DecideLinks


class RouteAnswer(BaseModel):
    """``POST /v1/route`` with a list of panels: the routed ones and the rejected items."""

    records: list[RouteRecord]
    rejects: list[ItemReject]
    rejected: int
    """How many items were rejected."""


class VoteAnswer(BaseModel):
    """``POST /v1/vote`` with a list of vote cases: the decisions and the rejected items."""

    decisions: list[GuardDecision]
    rejects: list[ItemReject]
    rejected: int
    """How many items were rejected."""


class ModelObject(BaseModel):
    """OpenAI's model object (``GET /v1/models/{model}``, an entry of ``GET /v1/models``)."""

    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelList(BaseModel):
    """``GET /v1/models``: OpenAI's list of models (the panel's one, or none)."""

    object: Literal["list"]
    data: list[ModelObject]


def answer(model: Any, description: str, **headers: str) -> dict[str, Any]:
    """An OpenAPI ``responses`` entry: a JSON answer of ``model`` (a model class or a
    union of them), with ``headers`` (name: what it says) sent beside it."""
    entry: dict[str, Any] = {"model": model, "description": description}
    if headers:
        entry["headers"] = {
            name: {"description": text, "schema": {"type": "string"}}
            for name, text in headers.items()
        }
    return entry


def stream(media_type: str, description: str) -> dict[str, Any]:
    """An OpenAPI ``responses`` entry: a text answer of ``media_type`` (an event stream,
    JSON lines), whose parts the description names."""
    return {
        "description": description,
        "content": {media_type: {"schema": {"type": "string", "description": description}}},
    }


class ErrorBody(BaseModel):
    """Every refusal of the service (outside the OpenAI-compatible paths): what went wrong
    and the field at fault. Some refusals say more, in fields of their own."""

    model_config = ConfigDict(extra="allow")

    error: str
    """What went wrong, in words (never a traceback, a server path or the journal's place)."""
    field: str | None
    """The field at fault, as the CLI names it (``outputs.1.confidence``, ``<body>``,
    ``<json>``, ``Host``, ``content_sha256``, ...), or ``null``."""
    run_id: str | None = None
    """The run a ``POST /v1/decide`` answered ``503`` or ``504`` started (it may be polled)."""
    resolved_by: str | None = None
    """``409`` of a case resolved before: who resolved it (with ``resolved_at``)."""
    resolved_at: str | None = None
    confirmed_by: str | None = None
    """``409`` of an automatic decision audited before: who audited it (with ``confirmed_at``)."""
    confirmed_at: str | None = None
    claimed_by: str | None = None
    """``409`` of a case another reviewer holds: who (with ``claimed_until``)."""
    claimed_until: str | None = None


class OpenAIError(BaseModel):
    """OpenAI's error object."""

    model_config = ConfigDict(extra="allow")

    message: str
    type: str
    """``invalid_request_error``, ``authentication_error`` (401), ``permission_error``
    (403), ``rate_limit_error`` (429) or ``server_error`` (5xx)."""
    param: str | None
    """The field at fault (the service's ``field``), or ``null``."""
    code: str | None
    """The refusal's name: ``invalid_request``, ``invalid_api_key``, ``forbidden``,
    ``forbidden_host``, ``forbidden_origin``, ``not_found``, ``model_not_found``,
    ``unknown_case``, ``request_timeout``, ``request_too_large``,
    ``unsupported_media_type``, ``panel_unavailable``, ``panel_too_large``,
    ``shutting_down``, ``timeout``, ``timeout_case_journalled``, ``internal``, ..."""


class OpenAIErrorBody(BaseModel):
    """Every refusal on the OpenAI-compatible paths (``/v1/chat/completions``,
    ``/v1/models``, ``/v1/cases/{id}``): OpenAI's error body, so an OpenAI SDK raises its
    usual exception."""

    model_config = ConfigDict(extra="allow")

    error: OpenAIError
    dissensus: dict[str, Any] | None = None
    """The ``504`` of a chat request whose case was handed to the journal names it
    (``case_id``, ``run_id``, ``links``): poll ``GET /v1/cases/{id}``."""


_SAID = {
    400: "The request cannot be read: a body that is not JSON, not UTF-8, nested too "
    "deep or empty (`field`: `<json>`, `<encoding>`, `<depth>`, `<body>`), or a header "
    "sent twice (`Host`, `Origin`, `Content-Type`, `Authorization`, ...).",
    401: "No bearer token, or an unknown one (`WWW-Authenticate: Bearer`).",
    429: "Too many unknown tokens from the caller's address within a minute "
    "(`Retry-After`): the token was not checked.",
    403: "The token's role does not allow the endpoint, a `Host` the server does not "
    "answer to, or a write from another origin.",
    404: "No such run, review item, case or model.",
    408: "The request body did not arrive within the server's `--timeout` (`<body>`); "
    "the connection is closed.",
    409: "A conflict: a stale `content_sha256`, a case already resolved or audited, "
    "claimed by another reviewer, or not finished by its run, a strict vote refusal, "
    "a read-only or damaged journal.",
    413: "The body (`<body>`), the number of items (`<root>`) or the agents of an item "
    "are over the server's limits.",
    415: "A write whose body is not declared JSON (`Content-Type`).",
    422: "Invalid input, with the field the CLI would name, a text field over "
    "`--max-field-chars`, or a query parameter out of its range.",
    500: "An error no handler expected (`internal error`, nothing more).",
    502: "Too few of the panel's members answered, or their answers make a panel over "
    "the pipeline's bounds.",
    503: "The journal is unreachable or busy (`Retry-After`; the request may be sent "
    "again; a decide run it holds part-way is named without `Retry-After`: resume it, "
    "do not send it again), or the server is shutting down.",
    504: "The request took longer than the server's `--timeout`.",
}
"""What a refusal of each status means, in the schema's words (``docs/serve.md``, Errors)."""

AUTHED = (400, 401, 403, 429, 500)
"""What any request with a token may be answered: a header sent twice, no or an unknown
token, a role, ``Host`` or origin refused, too many unknown tokens from the address, an
unexpected failure."""

BODY = (400, 408, 413, 415, 422)
"""What a request with a JSON body may be answered besides: a body that cannot be read,
late, too large, not declared JSON, or invalid."""


def refusals(
    *statuses: int, openai: bool = False, said: Mapping[int, str] | None = None
) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries of the refusals ``statuses``: each the service's
    :class:`ErrorBody`, or with ``openai`` OpenAI's :class:`OpenAIErrorBody`;
    ``said`` gives a status's description for this operation."""
    model = OpenAIErrorBody if openai else ErrorBody
    words = {**_SAID, **(said or {})}
    return {
        status: {"model": model, "description": words[status]} for status in sorted(set(statuses))
    }


_FASTAPI_422 = "#/components/schemas/HTTPValidationError"


def _responses(schema: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for item in schema.get("paths", {}).values():
        for operation in item.values():
            if isinstance(operation, dict) and isinstance(operation.get("responses"), dict):
                yield operation["responses"]


def _without_fastapi_422(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` without FastAPI's default ``422`` (``HTTPValidationError``), which it
    adds to every operation with a parameter that declares no ``422`` of its own: this
    server never sends that body."""
    for responses in _responses(schema):
        for status, response in list(responses.items()):
            content = response.get("content", {}) if isinstance(response, dict) else {}
            if any(
                media.get("schema", {}).get("$ref") == _FASTAPI_422 for media in content.values()
            ):
                del responses[status]
    models = schema.get("components", {}).get("schemas", {})
    models.pop("HTTPValidationError", None)
    if "ValidationError" in models and '/schemas/ValidationError"' not in json.dumps(schema):
        models.pop("ValidationError")
    return schema


def install(app: FastAPI) -> None:
    """Make ``app``'s OpenAPI schema leave out FastAPI's default ``422`` (see the module)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        return _without_fastapi_422(build())

    app.openapi = openapi  # type: ignore[method-assign]
