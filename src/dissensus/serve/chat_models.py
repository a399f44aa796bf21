"""``GET /v1/models/{model}``: OpenAI's model object of the one model the chat door lists.

``GET /v1/models`` (:mod:`.chat`) lists one model, ``dissensus-panel``; an OpenAI SDK's
``client.models.retrieve("dissensus-panel")`` asks for it by name, and gets here the
same object the list holds (``{"id", "object": "model", "created", "owned_by"}``).

Choices where the design is silent:

* **The same role as the list** (``submit``), checked first: a caller without it gets
  the 401 / 403 of the door, whichever model it names.
* **Any other model is OpenAI's 404 for an unknown model:** ``type``
  ``invalid_request_error``, ``code`` ``model_not_found``, ``param`` ``model`` (what
  OpenAI itself answers; an SDK raises ``NotFoundError``). A name with a ``/`` in it
  (``org/model``, as other gateways name models) is one name, unknown like any other.
* ``/v1/models/`` (no name) is the list with a trailing slash: the same relative ``307``
  to ``/v1/models`` as any such path (:mod:`.slashes`).
"""

from __future__ import annotations

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response

from dissensus.panels import ChatError
from dissensus.serve.chat import MODEL_ID, _authorise, _error
from dissensus.serve.slashes import other_spelling
from dissensus.types import JsonObject

__all__ = ["MODEL", "install", "router"]

MODEL: JsonObject = {"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "dissensus"}
"""OpenAI's model object of :data:`~dissensus.serve.chat.MODEL_ID`, as ``GET /v1/models``
lists it."""

router = APIRouter(tags=["chat"])


def install(app: FastAPI) -> None:
    """Add the route to ``app``."""
    app.include_router(router)


@router.get("/v1/models/{model:path}")
async def model(model: str, request: Request) -> Response:
    """The model ``GET /v1/models`` lists, by name (OpenAI's ``models.retrieve``)."""
    if not model and (target := other_spelling(request.app.router, request.scope)):
        return RedirectResponse(target, status_code=307)
    try:
        _authorise(request)
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
