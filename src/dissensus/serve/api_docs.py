"""The interactive API documentation (``/docs``, ``/redoc``), served without a CDN.

FastAPI's own documentation pages load Swagger UI and ReDoc from a public CDN (and a
favicon and fonts from other hosts), so on a machine without internet access they stay
blank. Here both pages are FastAPI's HTML (:func:`fastapi.openapi.docs.get_swagger_ui_html`,
:func:`~fastapi.openapi.docs.get_redoc_html`) pointed at script, style sheet and icon
files this server serves itself, under :data:`ASSETS_URL`.

Choices this module makes:

* The files come from the ``fastapi-offline`` package (part of the ``serve`` extra),
  which ships the Swagger UI 5 distribution (OpenAPI 3.1, the version FastAPI writes)
  and ReDoc's standalone bundle; only its files are used, not its application class.
* ReDoc is served without Google Fonts (a third host), so it uses the browser's fonts.
* Without that package the two pages answer ``503 {error, field}`` naming the package;
  the schema itself (``/openapi.json``) never depends on it.
* Both pages carry a Content-Security-Policy (scripts from this server and the page's
  own inline script, by hash; ``frame-ancestors 'none'``) and ``X-Frame-Options: DENY``,
  so no other site can frame them.
* The pages need no token, like ``/openapi.json``: they describe the API, they do not
  call it (Swagger UI's "Try it out" sends the bearer token the user types in).
"""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles

__all__ = ["ASSETS_URL", "assets_dir", "install"]

ASSETS_URL = "/docs-assets"
"""Where the documentation pages' scripts, style sheet and icon are served."""

MISSING = (
    "the API documentation page needs the fastapi-offline package "
    "(pip install 'dissensus[serve]'); the schema is at /openapi.json"
)


def assets_dir() -> Path | None:
    """The directory holding Swagger UI's and ReDoc's files, or ``None`` when not installed."""
    try:
        import fastapi_offline
    except ImportError:
        return None
    folder = Path(fastapi_offline.__file__).parent / "static"
    needed = ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js", "favicon.png")
    return folder if all((folder / name).is_file() for name in needed) else None


_INLINE_SCRIPT = re.compile(rb"<script>(.*?)</script>", re.DOTALL)


def _framed(page: HTMLResponse) -> HTMLResponse:
    """``page`` with a Content-Security-Policy: scripts from this server and the page's own
    inline script (by its hash) only, no framing by any other page (clickjacking)."""
    hashes = " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(m.group(1)).digest()).decode() + "'"
        for m in _INLINE_SCRIPT.finditer(bytes(page.body))
    )
    page.headers["Content-Security-Policy"] = (
        f"default-src 'self'; script-src 'self' {hashes}; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; worker-src 'self' blob:; connect-src 'self'; "
        "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    )
    page.headers["X-Frame-Options"] = "DENY"
    page.headers["X-Content-Type-Options"] = "nosniff"
    return page


def install(app: FastAPI, *, docs_url: str = "/docs", redoc_url: str = "/redoc") -> None:
    """Serve ``docs_url`` (Swagger UI) and ``redoc_url`` (ReDoc) from local files.

    ``app`` must be created with ``docs_url=None, redoc_url=None`` (FastAPI's CDN pages).
    """
    folder = assets_dir()
    openapi_url = app.openapi_url or "/openapi.json"
    if folder is not None:
        app.mount(ASSETS_URL, StaticFiles(directory=folder), name="docs-assets")

    def unavailable() -> Response:
        return JSONResponse({"error": MISSING, "field": None}, status_code=503)

    @app.get(docs_url, include_in_schema=False)
    async def swagger_ui(request: Request) -> Response:
        if folder is None:
            return unavailable()
        root = request.scope.get("root_path", "")
        page: HTMLResponse = get_swagger_ui_html(
            openapi_url=f"{root}{openapi_url}",
            title=f"{app.title} - API",
            swagger_js_url=f"{root}{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS_URL}/favicon.png",
            oauth2_redirect_url=None,
            swagger_ui_parameters=app.swagger_ui_parameters,
        )
        return _framed(page)

    @app.get(redoc_url, include_in_schema=False)
    async def redoc(request: Request) -> Response:
        if folder is None:
            return unavailable()
        root = request.scope.get("root_path", "")
        page: HTMLResponse = get_redoc_html(
            openapi_url=f"{root}{openapi_url}",
            title=f"{app.title} - API",
            redoc_js_url=f"{root}{ASSETS_URL}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{ASSETS_URL}/favicon.png",
            with_google_fonts=False,
        )
        return _framed(page)
