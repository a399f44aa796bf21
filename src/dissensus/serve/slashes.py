"""A path that differs from a route's by a trailing slash: a ``307`` to the route, with
a relative ``Location``.

FastAPI answers ``GET /v1/runs/`` with a ``307`` to ``/v1/runs`` (and ``/x`` with one to
``/x/`` when only that route exists), but its ``Location`` is an absolute URL built from
the request's ``Host`` header, which the service checks by name only (not the port),
and not at all on a non-loopback address without ``--allow-host``: ``Host:
localhost:1`` got ``Location: http://localhost:1/v1/runs``, and a ``Host`` of any name
got a redirect to that host. :class:`SlashRedirect` takes the place of that redirect
(``FastAPI(redirect_slashes=False)``; it is the router's ``default``, called when no
route matched).

Choices this module makes:

* **The redirect is kept, relative** (``Location: /v1/runs``, the query kept), not
  turned into a 404: someone who types ``/review/`` or follows a link with a slash lands
  on the page, and a client that follows redirects gets the resource, as before.
  RFC 9110 (section 10.2.2) allows a relative reference; browsers, ``curl -L``, httpx
  and requests resolve it against the URL they asked for, so the answer echoes nothing
  of ``Host`` and keeps the scheme and port the client used (``https`` behind a proxy
  included).
* **Still ``307``:** method and body are kept (a ``POST`` stays a ``POST``).
* **Never to another host:** the path is percent-encoded but for ``/`` and the
  characters a path may hold as they are (a ``\\``, which browsers read as ``/``, is
  ``%5C``), and a target that would start with ``//`` (read as ``//host``) is not
  redirected: it is the 404 of any unknown path.
* Any other unmatched path goes on to the router's own ``default``: the 404 of the
  service (OpenAI's on the OpenAI-compatible paths).
"""

from __future__ import annotations

from urllib.parse import quote

from starlette.responses import RedirectResponse
from starlette.routing import Match, Router
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["PATH_SAFE", "SlashRedirect", "other_spelling"]

PATH_SAFE = "/-._~!$&'()*+,;=:@%"
"""Characters kept as they are in a redirect's path (RFC 3986 ``pchar`` and ``/``; ``%``
so that what was already encoded stays so)."""


def other_spelling(router: Router, scope: Scope) -> str | None:
    """The relative URL (path and query) of the route that ``scope``'s path names but for
    a trailing slash, or ``None`` when there is none (see the module)."""
    path = str(scope["path"])  # the whole path (an ASGI path includes any root path)
    if path == "/" or path == str(scope.get("root_path", "")) + "/":
        return None
    other = path.rstrip("/") if path.endswith("/") else path + "/"
    if not other:
        return None
    moved = {**scope, "path": other}
    if not any(route.matches(moved)[0] is not Match.NONE for route in router.routes):
        return None
    location = quote(other, safe=PATH_SAFE)
    if not location.startswith("/") or location.startswith("//"):
        return None
    query = bytes(scope.get("query_string", b"")).decode("latin-1")
    return f"{location}?{query}" if query else location


class SlashRedirect:
    """The router's ``default``: a ``307`` with a relative ``Location`` to the route a path
    names but for a trailing slash, else ``fallback`` (the router's own default)."""

    def __init__(self, router: Router, fallback: ASGIApp) -> None:
        self.router = router
        self.fallback = fallback

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            target = other_spelling(self.router, scope)
            if target is not None:
                await RedirectResponse(target, status_code=307)(scope, receive, send)
                return
        await self.fallback(scope, receive, send)
