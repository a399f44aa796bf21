"""The review site's login and logout pages (``/review/login``, ``/review/logout``).

The token is posted in a form (never in a URL) with a double-submit CSRF token bound to a
pre-session cookie; success opens a session (:mod:`dissensus.serve.pages`) and goes to
the page the reviewer was sent from (``next``, a path of the review site only:
:func:`~dissensus.serve.pages.safe_next`), else the queue. Without a tokens file there is
no login: the login page sends the reviewer there at once. An unknown token counts
against the address it came from, as a bearer token does: after too many in a minute
the form answers ``429`` without checking the token (:mod:`dissensus.serve.throttle`).
A refused logout (403 without the session's CSRF token, the session kept; 415, 413 or
400 for a body no page sends) is said in plain text, which the page's script shows in its
alert above the page it keeps, with ``Cache-Control: no-store`` and
``X-Content-Type-Options: nosniff`` as every answer of the site.
"""

from __future__ import annotations

import secrets

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse, RedirectResponse, Response

from dissensus.serve.auth import TOKENS_UNAVAILABLE, allows
from dissensus.serve.pages import (
    PRE_COOKIE,
    SESSION_COOKIE,
    post_only,
    read_form,
    render,
    safe_next,
    secure,
    service_of,
    session_of,
    set_session,
)
from dissensus.serve.throttle import peer_of, throttled_message

__all__ = ["router"]

router = APIRouter(include_in_schema=False)
post_only(router, "/review/logout")  # a GET logs nobody out: it goes to the queue


@router.get("/review/login")
async def login_form(request: Request) -> Response:
    service = service_of(request)
    back = safe_next(request.query_params.get("next"))
    if service.tokens is None:
        return RedirectResponse(back or "/review", status_code=303)
    pre = request.cookies.get(PRE_COOKIE) or secrets.token_urlsafe(32)
    response = render(
        "login.html",
        title="log in",
        principal=None,
        csrf=service.sessions.csrf(pre),
        error=None,
        next=back,
    )
    response.set_cookie(
        PRE_COOKIE,
        pre,
        httponly=True,
        samesite="strict",
        path="/review",
        secure=secure(request),
    )
    return response


@router.post("/review/login")
async def login(request: Request) -> Response:
    service = service_of(request)
    form = await read_form(request)  # a multipart or oversized body is never parsed
    if isinstance(form, tuple):
        status, reason = form
        return render(
            "login.html",
            status,
            title="log in",
            principal=None,
            csrf="",
            error=f"{reason}; reload the page",
            next=safe_next(request.query_params.get("next")),
        )
    back = safe_next(str(form.get("next", "")))
    pre = request.cookies.get(PRE_COOKIE)
    if pre is None or not service.sessions.check_csrf(pre, str(form.get("csrf", ""))):
        return render(
            "login.html",
            403,
            title="log in",
            principal=None,
            csrf="",
            error="the form expired; reload the page",
            next=back,
        )
    token = str(form.get("token", "")).strip()
    peer = peer_of(request.scope)
    wait = service.failed_logins.retry_after(peer) if token else None
    if wait is not None:  # not checked at all: see dissensus.serve.throttle
        throttled = render(
            "login.html",
            429,
            title="log in",
            principal=None,
            csrf=service.sessions.csrf(pre),
            error=throttled_message(wait),
            next=back,
        )
        throttled.headers["Retry-After"] = str(wait)
        return throttled
    principal = service.tokens.authenticate(token) if service.tokens is not None and token else None
    if principal is None or not allows(principal, "review"):
        if principal is not None:
            status = 403
            message = f"{principal.name} has role {principal.role}; the review page needs review"
        elif service.tokens is not None and not service.tokens.loads:
            status, message = 503, TOKENS_UNAVAILABLE  # every token refused for now
        else:
            status, message = 401, "unknown token"
            if token:
                service.failed_logins.failed(peer)
        return render(
            "login.html",
            status,
            title="log in",
            principal=None,
            csrf=service.sessions.csrf(pre),
            error=message,
            next=back,
        )
    sid = service.sessions.open(principal)
    response = RedirectResponse(back or "/review", status_code=303)
    set_session(response, sid, request)
    response.delete_cookie(PRE_COOKIE, path="/review")
    return response


@router.post("/review/logout")
async def logout(request: Request) -> Response:
    service = service_of(request)
    principal, sid = session_of(request)
    form = await read_form(request)
    if isinstance(form, tuple):
        status, reason = form
        return _refused(f"{reason}: reload the page and log out from it", status)
    if principal is not None:
        if not service.sessions.check_csrf(sid, str(form.get("csrf", ""))):
            # Refused as every page post without its token is (403), the session and its
            # cookie kept: deleting only the cookie would look like a logout while the
            # session stayed open on the server.
            return _refused("the form expired: reload the page and log out from it", 403)
        service.sessions.close(sid)
    response = RedirectResponse("/review/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/review")
    return response


def _refused(text: str, status: int) -> Response:
    """A refused logout, said in plain text (the page's script shows it in its alert, the
    page kept), never cached nor sniffed as another type, as every page of the site."""
    headers = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
    return PlainTextResponse(text, status_code=status, headers=headers)
