"""The service's routes, one :class:`fastapi.APIRouter` per area; :func:`install` adds
them all to an app (the review page, the chat door and the API docs install themselves)."""

from __future__ import annotations

from fastapi import FastAPI

from dissensus.serve.routes import decide, health, library, review

__all__ = ["install"]


def install(app: FastAPI) -> None:
    """Add every router of the JSON API to ``app``."""
    for module in (health, decide, library, review):
        app.include_router(module.router)
