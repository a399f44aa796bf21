"""``GET /review``: the server-rendered review queue (Jinja2 + vendored htmx, no build step).

Pages: ``/review/login`` (token form), ``/review`` (the queue, filtered by run, status
and reason), ``/review/case/{id}`` (everything ``dissensus review show`` shows, side by
side, and the resolve form). Every write goes through the same
:class:`~dissensus.serve.journal_adapter.ReviewDesk` as the API.

Choices where the design is silent:

* Case text (question, options, reasoning, packet text) is agent or user data: it is
  rendered with Jinja2's autoescaping inside ``<pre>`` (verbatim, never interpreted),
  and the page's Content-Security-Policy allows scripts from this server only, so
  even an escaping bug could not run injected script.
* The body is ``hx-boost``ed: links and forms load over htmx and swap the page, and every
  page also works as a plain page load. After a resolve the server redirects to the next
  open case of the same queue order (or to the queue when none is left).
* Keys (``review.js``): ``1``-``9`` pick an option, ``n`` focuses the note, ``Enter``
  submits, ``j`` / ``k`` next / previous case in queue order (open or not), ``?`` shows
  the keys. Keys are ignored
  while typing in the note, where ``Enter`` submits the form as usual.
* Login: a form posting the token (never in a URL) with a double-submit CSRF token bound
  to a pre-session cookie; success sets the session cookie (HttpOnly, SameSite=Strict,
  Path=/review; Secure when served over https). Without a tokens file (loopback only)
  there is no login and the reviewer is ``local``, but forms still carry CSRF tokens.
* Only ``review`` and ``admin`` tokens may log in.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, select_autoescape
from pydantic import BaseModel

from dissensus.errors import DissensusError
from dissensus.serve.auth import LOCAL, Principal, allows
from dissensus.serve.journal_adapter import (
    AlreadyResolved,
    ClaimConflict,
    StaleContent,
    UnknownItem,
    content_sha256,
)

__all__ = ["install"]

HERE = Path(__file__).resolve().parent
SESSION_COOKIE = "dissensus_session"
PRE_COOKIE = "dissensus_login"
QUEUE_ROWS = 500
"""Rows the queue page shows (the count names them all; filters narrow the list)."""
CSP = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'"

_env = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=select_autoescape(["html"]),
    auto_reload=False,
)


def _service(request: Request) -> Any:
    return request.app.state.service


def _html(template: str, status: int = 200, **context: Any) -> HTMLResponse:
    page = _env.get_template(template).render(**context)
    return HTMLResponse(
        page,
        status_code=status,
        headers={"Content-Security-Policy": CSP, "Cache-Control": "no-store"},
    )


def _secure(request: Request) -> bool:
    return request.url.scheme == "https"


def _session(request: Request) -> tuple[Principal | None, str | None]:
    service = _service(request)
    sid = request.cookies.get(SESSION_COOKIE)
    principal = service.sessions.get(sid)
    if principal is None:
        return None, None
    return principal, sid


def _require(request: Request) -> tuple[Principal, str] | Response:
    """The logged-in reviewer and session id, or the response that sends them to log in."""
    service = _service(request)
    principal, sid = _session(request)
    if principal is not None and sid is not None and allows(principal, "review"):
        return principal, sid
    if service.tokens is None:
        sid = service.sessions.open(LOCAL)
        response = RedirectResponse(
            str(request.url.path) + (f"?{request.url.query}" if request.url.query else ""),
            status_code=303,
        )
        _set_session(response, sid, request)
        return response
    return RedirectResponse("/review/login", status_code=303)


def _set_session(response: Response, sid: str, request: Request) -> None:
    response.set_cookie(
        SESSION_COOKIE,
        sid,
        httponly=True,
        samesite="strict",
        path="/review",
        secure=_secure(request),
    )


def _options(item: Any) -> list[dict[str, str]]:
    """The options on the table with their texts, numbered for the keys."""
    meta = item.panel.get("meta", {}) or {}
    texts: dict[str, str] = {}
    raw = meta.get("options")
    if isinstance(raw, list):
        for o in raw:
            if isinstance(o, dict):
                texts[str(o.get("id"))] = str(o.get("text", ""))
            else:
                texts[str(o)] = str(o)
    elif isinstance(raw, dict):
        texts = {str(k): str(v) for k, v in raw.items()}
    elif "output_1" in meta and "output_2" in meta:
        texts = {"1": str(meta["output_1"]), "2": str(meta["output_2"])}
    labels = list(item.options) or list(texts)
    return [
        {"key": str(i + 1) if i < 9 else "", "label": label, "text": texts.get(label, "")}
        for i, label in enumerate(labels)
    ]


def _queue(
    request: Request,
    *,
    status: str,
    run: str | None,
    reason: str | None,
    limit: int | None = None,
) -> Iterator[dict[str, Any]]:
    """Queue rows in order (at most ``limit``), items read as the iteration reaches them."""
    desk = _service(request).desk
    for st in desk.items(run_id=run or None, status=status, reason=reason, limit=limit):
        yield {
            "item": st.item,
            "resolution": st.resolution,
            "claim": desk.live_claim(st.item.review_id) if st.resolution is None else None,
        }


def _neighbours(request: Request, review_id: str) -> tuple[str | None, str | None]:
    """Previous and next case in queue order (every status), for ``k`` / ``j``."""
    ids = _service(request).desk.ids(status="all")
    if review_id not in ids:
        return None, None
    i = ids.index(review_id)
    return (ids[i - 1] if i > 0 else None), (ids[i + 1] if i + 1 < len(ids) else None)


def _plain(value: Any) -> dict[str, Any] | None:
    """A part of a review item as plain JSON data (typed parts are dumped), for the template."""
    if value is None:
        return None
    if isinstance(value, BaseModel):
        dumped: dict[str, Any] = value.model_dump(mode="json")
        return dumped
    return dict(value)


def _case_page(
    request: Request,
    review_id: str,
    principal: Principal,
    sid: str,
    *,
    error: str | None = None,
    status: int = 200,
) -> Response:
    service = _service(request)
    desk = service.desk
    st = desk.status(review_id)
    item = st.item
    resolution = desk.resolution(review_id)
    prev_id, next_id = _neighbours(request, review_id)
    meta = item.panel.get("meta", {}) or {}
    question = meta.get("question") or meta.get("input")
    scores = {
        x["agent"]: x.get("score")
        for x in (_plain(item.acceptance) or {}).get("signals", [])
        if isinstance(x, dict)
    }
    response = _html(
        "case.html",
        status,
        title=f"case {item.review_id}",
        principal=principal,
        csrf=service.sessions.csrf(sid),
        item=item,
        question=None if question is None else str(question),
        options=_options(item),
        scores=scores,
        sha256=content_sha256(item),
        resolution=resolution,
        claim=desk.live_claim(review_id) if resolution is None else None,
        history=desk.history(review_id),
        prev_id=prev_id,
        next_id=next_id,
        error=error,
        packet=_plain(item.packet),
        concord=_plain(item.concord),
        reading=_plain(item.reading) or {},
    )
    if request.headers.get("hx-request"):
        response.headers["HX-Push-Url"] = f"/review/case/{review_id}"
    return response


async def _checked_form(request: Request) -> Response | tuple[Principal, str, Any]:
    """A form post's reviewer, session and form, or the page refusing it (401 without a
    login, 403 without the session's CSRF token)."""
    service = _service(request)
    principal, sid = _session(request)
    if principal is None or sid is None:
        return _html(
            "message.html", 401, title="log in", principal=None, csrf="", message="log in first"
        )
    form = await request.form()
    if not service.sessions.check_csrf(sid, str(form.get("csrf", ""))):
        return _html(
            "message.html",
            403,
            title="forbidden",
            principal=principal,
            csrf=service.sessions.csrf(sid),
            message="missing or wrong CSRF token; reload the page",
        )
    return principal, sid, form


def install(app: FastAPI) -> None:
    """Add the review page's routes and static files to ``app``."""
    app.mount("/review/static", StaticFiles(directory=HERE / "static"), name="review-static")

    @app.get("/review/login", include_in_schema=False)
    async def login_form(request: Request) -> Response:
        service = _service(request)
        if service.tokens is None:
            return RedirectResponse("/review", status_code=303)
        pre = request.cookies.get(PRE_COOKIE) or secrets.token_urlsafe(32)
        response = _html(
            "login.html",
            title="log in",
            principal=None,
            csrf=service.sessions.csrf(pre),
            error=None,
        )
        response.set_cookie(
            PRE_COOKIE,
            pre,
            httponly=True,
            samesite="strict",
            path="/review",
            secure=_secure(request),
        )
        return response

    @app.post("/review/login", include_in_schema=False)
    async def login(request: Request) -> Response:
        service = _service(request)
        form = await request.form()
        pre = request.cookies.get(PRE_COOKIE)
        if not service.sessions.check_csrf(pre, str(form.get("csrf", ""))):
            return _html(
                "login.html",
                403,
                title="log in",
                principal=None,
                csrf="",
                error="the form expired; reload the page",
            )
        token = str(form.get("token", "")).strip()
        principal = (
            service.tokens.authenticate(token) if service.tokens is not None and token else None
        )
        if principal is None or not allows(principal, "review"):
            message = (
                "unknown token"
                if principal is None
                else f"{principal.name} has role {principal.role}; the review page needs review"
            )
            assert pre is not None
            return _html(
                "login.html",
                401 if principal is None else 403,
                title="log in",
                principal=None,
                csrf=service.sessions.csrf(pre),
                error=message,
            )
        sid = service.sessions.open(principal)
        response = RedirectResponse("/review", status_code=303)
        _set_session(response, sid, request)
        response.delete_cookie(PRE_COOKIE, path="/review")
        return response

    @app.post("/review/logout", include_in_schema=False)
    async def logout(request: Request) -> Response:
        service = _service(request)
        principal, sid = _session(request)
        form = await request.form()
        if principal is not None and service.sessions.check_csrf(sid, str(form.get("csrf", ""))):
            service.sessions.close(sid)
        response = RedirectResponse("/review/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/review")
        return response

    @app.get("/review", include_in_schema=False)
    async def queue(
        request: Request, status: str = "open", run: str = "", reason: str = ""
    ) -> Response:
        got = _require(request)
        if isinstance(got, Response):
            return got
        principal, sid = got
        if status not in ("open", "resolved", "all"):
            status = "open"
        service = _service(request)
        known = not run or service.journal.run(run, missing_ok=True) is not None
        rows = (
            list(
                _queue(
                    request, status=status, run=run or None, reason=reason or None, limit=QUEUE_ROWS
                )
            )
            if known
            else []
        )
        runs = sorted({info.run_id for info in service.journal.runs() if info.kind == "decide"})
        total = (
            service.desk.count(run_id=run or None, status=status, reason=reason or None)
            if known
            else 0
        )
        return _html(
            "queue.html",
            title="review queue",
            principal=principal,
            csrf=service.sessions.csrf(sid),
            rows=rows,
            total=total,
            runs=runs,
            filters={"status": status, "run": run, "reason": reason},
            query=urlencode({"status": status, "run": run, "reason": reason}),
        )

    @app.get("/review/case/{review_id}", include_in_schema=False)
    async def case(request: Request, review_id: str) -> Response:
        got = _require(request)
        if isinstance(got, Response):
            return got
        principal, sid = got
        try:
            return _case_page(request, review_id, principal, sid)
        except UnknownItem as exc:
            return _html(
                "message.html",
                404,
                title="not found",
                principal=principal,
                csrf=_service(request).sessions.csrf(sid),
                message=str(exc),
            )

    @app.post("/review/case/{review_id}/resolve", include_in_schema=False)
    async def resolve(request: Request, review_id: str) -> Response:
        service = _service(request)
        checked = await _checked_form(request)
        if isinstance(checked, Response):
            return checked
        principal, sid, form = checked
        if not allows(principal, "review"):
            return _html(
                "message.html",
                403,
                title="forbidden",
                principal=principal,
                csrf=service.sessions.csrf(sid),
                message="this needs the review role",
            )
        decision = str(form.get("decision", "")).strip()
        try:
            if not decision:
                return _case_page(
                    request,
                    review_id,
                    principal,
                    sid,
                    error="pick an option (1-9) first",
                    status=422,
                )
            if not str(form.get("note", "")).strip():
                return _case_page(
                    request, review_id, principal, sid, error="write a note (n) first", status=422
                )
            service.desk.resolve(
                review_id,
                decision=decision,
                note=str(form.get("note", "")),
                reviewer=principal.name,
                sha256=str(form.get("content_sha256", "")),
            )
        except UnknownItem as exc:
            return _html(
                "message.html",
                404,
                title="not found",
                principal=principal,
                csrf=service.sessions.csrf(sid),
                message=str(exc),
            )
        except (AlreadyResolved, StaleContent, ClaimConflict) as exc:
            return _case_page(request, review_id, principal, sid, error=str(exc), status=409)
        except DissensusError as exc:
            return _case_page(request, review_id, principal, sid, error=str(exc), status=409)
        rows = _queue(request, status="open", run=None, reason=None)
        target = next(
            (
                r["item"].review_id
                for r in rows
                if r["claim"] is None or r["claim"].reviewer == principal.name
            ),
            None,
        )
        return RedirectResponse(
            f"/review/case/{target}" if target else "/review?done=1", status_code=303
        )

    @app.post("/review/case/{review_id}/claim", include_in_schema=False)
    async def claim(request: Request, review_id: str) -> Response:
        service = _service(request)
        checked = await _checked_form(request)
        if isinstance(checked, Response):
            return checked
        principal, sid, _ = checked
        try:
            service.desk.claim(review_id, principal.name)
        except (AlreadyResolved, ClaimConflict) as exc:
            return _case_page(request, review_id, principal, sid, error=str(exc), status=409)
        return RedirectResponse(f"/review/case/{review_id}", status_code=303)
