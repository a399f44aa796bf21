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
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from dissensus.guard.decision import GuardDecision
from dissensus.outputs import RouteRecord
from dissensus.serve.http import ItemReject

__all__ = [
    "DecideLinks",
    "DecideStarted",
    "ModelList",
    "ModelObject",
    "Ready",
    "RouteAnswer",
    "VoteAnswer",
    "answer",
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
