"""The service's routes, one :class:`fastapi.APIRouter` per area: the JSON API (health,
decide and runs, library calls, review; :func:`install`) and the review pages (login,
queue, case, audits; :func:`install_pages`, with their shared helpers in
:mod:`dissensus.serve.pages`). The chat door and the API docs install themselves."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

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

__all__ = ["install", "install_pages"]


def install(app: FastAPI) -> None:
    """Add every router of the JSON API to ``app``."""
    for module in (health, decide, library, review):
        app.include_router(module.router)


def install_pages(app: FastAPI) -> None:
    """Add the review pages' routers and their static files to ``app``."""
    app.mount("/review/static", StaticFiles(directory=HERE / "static"), name="review-static")
    for module in (pages_auth, pages_queue, pages_case, pages_audit):
        app.include_router(module.router)
