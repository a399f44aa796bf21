"""The service's routes, one :class:`fastapi.APIRouter` per area: the JSON API (health,
decide and runs, library calls, review; :func:`install`) and the review pages (login,
queue, case, audits; :func:`install_pages`, with their shared helpers in
:mod:`dissensus.serve.pages`). The chat door and the API docs install themselves.

``/favicon.ico``, which a browser asks for on its own, answers with the review pages'
icon (``static/favicon.svg``, which the pages name in their ``<link rel="icon">``),
served by the same static-files app as ``/review/static/``, with the same headers. Static
files carry ``X-Content-Type-Options: nosniff``, as the pages and the API's answers do: a
browser reads each as the type it is served as, never as a guess from its bytes."""

from __future__ import annotations

from fastapi import FastAPI, Request, Response
from fastapi.responses import PlainTextResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException
from starlette.types import Scope

from dissensus.serve.pages import HERE
from dissensus.serve.routes import (
    decide,
    health,
    library,
    pages_audit,
    pages_auth,
    pages_case,
    pages_queue,
    review,
)

__all__ = ["FAVICON", "install", "install_pages"]

FAVICON = "favicon.svg"
"""The review pages' icon in ``static/``, also served at ``/favicon.ico``."""


class _Static(StaticFiles):
    """The review pages' static files, each answer with ``nosniff``."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        try:
            response = await super().get_response(path, scope)
        except HTTPException as exc:  # no such file, a method it does not take: said plainly
            response = PlainTextResponse(
                str(exc.detail), exc.status_code, headers=dict(exc.headers or {})
            )
            response.headers["Cache-Control"] = "no-store"
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        return response


def install(app: FastAPI) -> None:
    """Add every router of the JSON API to ``app``."""
    for module in (health, decide, library, review):
        app.include_router(module.router)
    decide.install_plain(app)


def install_pages(app: FastAPI) -> None:
    """Add the review pages' routers and their static files to ``app``."""
    static = _Static(directory=HERE / "static")
    app.mount("/review/static", static, name="review-static")

    async def favicon(request: Request) -> Response:
        return await static.get_response(FAVICON, request.scope)

    app.add_api_route("/favicon.ico", favicon, methods=["GET"], include_in_schema=False)
    for module in (pages_auth, pages_queue, pages_case, pages_audit):
        app.include_router(module.router)
