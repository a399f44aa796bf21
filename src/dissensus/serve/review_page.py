"""``GET /review``: the server-rendered review queue (Jinja2 + vendored htmx, no build step).

Pages: ``/review/login`` (token form), ``/review`` (the queue, filtered by status, run,
reason and text, sorted by age or reason; or the automatic decisions waiting for an
audit; or the open blind audits), ``/review/case/{id}`` (everything ``dissensus review
show`` shows, side by side, with the options labelled as the agents name them
(:mod:`.case_view`), and the resolve bar), ``/review/auto/{run}.{line}`` (an automatic
decision and its audit form), ``/review/audit/{run}.{line}`` (a blind audit: the case
without the committed answer or the suggestion, and the form answering it;
:mod:`.review_page_audits`). Every write (resolve, claim, undo, audit) goes through the
same :class:`~dissensus.serve.journal_adapter.ReviewDesk` as the API. The queue page
also shows the acceptance monitor (:func:`dissensus.pipeline.audit.monitor_status`, as
``dissensus acceptance status`` prints it): per acceptance file and stratum, the answered
audits, the audited precision and its anytime-valid bounds, and whether automatic
commits are suspended, after how many audits and since when.

Choices where the design is silent:

* Case text (question, options, reasoning, packet text) is agent or user data: it is
  rendered with Jinja2's autoescaping inside ``<pre>`` (verbatim, never interpreted),
  and the page's Content-Security-Policy allows scripts from this server only, so
  even an escaping bug could not run injected script.
* The body is ``hx-boost``ed: links and forms load over htmx and swap the page, and every
  page also works as a plain page load. After a resolve the server redirects to the next
  open case of the same queue (the filters and order the reviewer came with travel in
  the case page's query string), skipping cases other reviewers hold claims on, or to
  the queue when none is left.
* Keys (``review.js``): ``1``-``9`` pick an option, ``n`` focuses the note, ``Enter``
  submits, ``j`` / ``k`` next / previous case of the queue (open or resolved, skipping
  open cases claimed by others), ``c`` claims, ``u`` undoes the reviewer's last
  resolution (within the server's ``undo_window_s``; the form names the case it undoes,
  so a stale page cannot undo another one), ``a`` opens the audit form of an automatic
  decision, ``?`` shows the keys. On a blind audit the same keys pick an option, write
  the note and answer (``Enter``), and ``j`` / ``k`` move among the open audits; after
  an answer the page goes to the next open audit. Keys act only
  when no text field has the focus (``Esc`` leaves it); every page settles with the
  focus on the page, and keys typed while a page loads are replayed on the next one.
* A note is required as the server's ``review_note`` setting says: by default only when
  the decision is not the panel's suggestion; a resolution without one journals
  "(no note: agrees with the panel's suggestion)", since the journal's resolutions always
  carry a note. Audits always need one (``confirm`` requires it).
* Progress: the case's place among the open cases of its queue, and how many cases the
  reviewer resolved today (UTC).
* Login: a form posting the token (never in a URL) with a double-submit CSRF token bound
  to a pre-session cookie; success sets the session cookie (HttpOnly, SameSite=Strict,
  Path=/review; Secure when served over https). Without a tokens file (loopback only)
  there is no login and the reviewer is ``local``, but forms still carry CSRF tokens.
* Only ``review`` and ``admin`` tokens may log in.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, select_autoescape
from pydantic import BaseModel

from dissensus.errors import DissensusError
from dissensus.serve.acceptance import monitor_rows
from dissensus.serve.auth import LOCAL, Principal, allows
from dissensus.serve.case_view import option_views, plain_reasons, word_diff
from dissensus.serve.journal_adapter import (
    AlreadyResolved,
    ClaimConflict,
    QueueEntry,
    QueueSort,
    ReviewDesk,
    StaleContent,
    UnknownItem,
    content_sha256,
    question_of,
)
from dissensus.serve.review_page_audits import blind_audit, has_open_audit, open_audit_refs

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


_SORTS: dict[str, QueueSort] = {"oldest": "oldest", "newest": "newest", "reason": "reason"}
_STATUSES = ("open", "resolved", "all", "automatic", "audits")


@dataclass(frozen=True)
class QueueView:
    """The queue a reviewer is working through: filters and order (from the query string)."""

    status: str = "open"
    run: str = ""
    reason: str = ""
    q: str = ""
    sort: QueueSort = "oldest"

    @classmethod
    def of(cls, request: Request) -> QueueView:
        p = request.query_params
        status = p.get("status", "open")
        sort = p.get("sort", "oldest")
        return cls(
            status=status if status in _STATUSES else "open",
            run=p.get("run", "").strip(),
            reason=p.get("reason", "").strip(),
            q=p.get("q", "").strip(),
            sort=_SORTS.get(sort, "oldest"),
        )

    def query(self) -> str:
        """The query string that brings this queue back (defaults left out)."""
        pairs = {
            "status": "" if self.status == "open" else self.status,
            "run": self.run,
            "reason": self.reason,
            "q": self.q,
            "sort": "" if self.sort == "oldest" else self.sort,
        }
        return urlencode({k: v for k, v in pairs.items() if v})

    def suffix(self) -> str:
        q = self.query()
        return f"?{q}" if q else ""

    def order(self, request: Request, status: str) -> list[QueueEntry]:
        desk: ReviewDesk = _service(request).desk
        if status in ("automatic", "audits"):
            return []
        if self.run and desk.journal.run(self.run, missing_ok=True) is None:
            return []
        return desk.order(
            run_id=self.run or None,
            status=status,
            reason=self.reason or None,
            text=self.q or None,
            sort=self.sort,
        )


def _free(request: Request, entries: list[QueueEntry], me: str) -> list[QueueEntry]:
    """``entries`` without the open ones another reviewer holds a claim on."""
    desk = _service(request).desk
    claims = desk.live_claims([e.review_id for e in entries if not e.resolved])
    return [
        e
        for e in entries
        if e.resolved or e.review_id not in claims or claims[e.review_id].reviewer == me
    ]


def _neighbours(
    request: Request, review_id: str, view: QueueView, me: str
) -> tuple[str | None, str | None]:
    """Previous and next case of the queue (open or resolved, skipping cases claimed by
    others), for ``k`` / ``j``. A case outside the queue's filters has no neighbours."""
    order = view.order(request, "all")
    ids = [e.review_id for e in order]
    if review_id not in ids:
        return None, None
    i = ids.index(review_id)
    before = _free(request, order[:i], me)
    after = _free(request, order[i + 1 :], me)
    return (
        before[-1].review_id if before else None,
        after[0].review_id if after else None,
    )


def _next_open(request: Request, review_id: str, view: QueueView, me: str) -> str | None:
    """The open case to go to after ``review_id``: the next one in the queue's order that
    nobody else holds, else the first such one before it."""
    order = view.order(request, "all")
    ids = [e.review_id for e in order]
    i = ids.index(review_id) if review_id in ids else -1
    candidates = [e for e in order[i + 1 :] + order[: max(i, 0)] if not e.resolved]
    free = _free(request, candidates, me)
    return free[0].review_id if free else None


def _progress(request: Request, review_id: str, view: QueueView, me: str) -> dict[str, Any]:
    open_ids = [e.review_id for e in view.order(request, "open")]
    return {
        "open": len(open_ids),
        "position": open_ids.index(review_id) + 1 if review_id in open_ids else None,
        "today": _service(request).desk.resolved_today(me),
    }


def _note_required(request: Request, decision: str, suggestion: str | None) -> bool:
    policy = _service(request).settings.review_note
    if policy == "always":
        return True
    if policy == "never":
        return False
    return decision != suggestion


def _statuses(request: Request, entries: list[QueueEntry]) -> Iterator[Any]:
    """The queue entries' items (one read per item)."""
    desk = _service(request).desk
    for e in entries:
        try:
            yield desk.status(e.review_id)
        except UnknownItem:  # pragma: no cover - the index is written with the event
            continue


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
    view = QueueView.of(request)
    st = desk.status(review_id)
    item = st.item
    resolution = desk.resolution(review_id)
    prev_id, next_id = _neighbours(request, review_id, view, principal.name)
    scores = {
        x["agent"]: x.get("score")
        for x in (_plain(item.acceptance) or {}).get("signals", [])
        if isinstance(x, dict)
    }
    options = option_views(
        item.options,
        item.panel,
        [(p.agent, p.decision, p.reasoning) for p in item.positions],
        item.suggestion,
    )
    texts = [o for o in options if o.text]
    labels = {o.id: o.label for o in options}
    policy = service.settings.review_note
    response = _html(
        "case.html",
        status,
        title=f"case {item.review_id}",
        principal=principal,
        csrf=service.sessions.csrf(sid),
        item=item,
        question=question_of(item.panel),
        options=options,
        labels=labels,
        diff=word_diff(texts[0].text, texts[1].text) if len(texts) >= 2 else None,
        diff_labels=(texts[0].label, texts[1].label) if len(texts) >= 2 else None,
        plain=plain_reasons(
            item.reason, options, sum(1 for p in item.positions if p.decision is None)
        ),
        scores=scores,
        sha256=content_sha256(item),
        resolution=resolution,
        claim=desk.live_claim(review_id) if resolution is None else None,
        history=desk.history(review_id),
        prev_id=prev_id,
        next_id=next_id,
        qs=view.suffix(),
        progress=_progress(request, review_id, view, principal.name),
        note_policy=policy,
        undo=desk.last_resolution(principal.name, service.settings.undo_window_s),
        error=error,
        packet=_plain(item.packet),
        concord=_plain(item.concord),
        reading=_plain(item.reading) or {},
    )
    if request.headers.get("hx-request"):
        response.headers["HX-Push-Url"] = f"/review/case/{review_id}{view.suffix()}"
    return response


def _auto_page(
    request: Request,
    ref: str,
    principal: Principal,
    sid: str,
    *,
    error: str | None = None,
    status: int = 200,
) -> Response:
    service = _service(request)
    view = QueueView.of(request)
    got = service.desk.auto_case(ref)
    outputs = [o for o in got.panel.get("outputs") or [] if isinstance(o, dict)]
    positions = [
        (str(o.get("agent", "?")), o.get("decision"), str(o.get("reasoning", ""))) for o in outputs
    ]
    ids = sorted({str(d) for _, d, _ in positions if d is not None} | {got.record.decision or ""})
    options = option_views([i for i in ids if i], got.panel, positions, got.record.decision)
    response = _html(
        "auto.html",
        status,
        title=f"automatic decision {ref}",
        principal=principal,
        csrf=service.sessions.csrf(sid),
        case=got,
        question=question_of(got.panel),
        options=options,
        labels={o.id: o.label for o in options},
        positions=positions,
        claim=service.desk.live_claim(ref),
        qs=view.suffix(),
        error=error,
    )
    if request.headers.get("hx-request"):
        response.headers["HX-Push-Url"] = f"/review/auto/{ref}{view.suffix()}"
    return response


def _auto_refs(request: Request, run_id: str | None) -> list[str]:
    """Unaudited automatic decisions, without those waiting for a blind audit (their
    committed answer stays hidden until the blind audit is answered)."""
    desk = _service(request).desk
    return [r for r in desk.auto_cases(run_id=run_id) if not has_open_audit(desk.journal, r)]


def _audit_page(
    request: Request,
    ref: str,
    principal: Principal,
    sid: str,
    *,
    error: str | None = None,
    status: int = 200,
) -> Response:
    service = _service(request)
    view = QueueView.of(request)
    got = blind_audit(service.journal, ref)
    item = got.item
    options = option_views(
        item.options,
        item.panel,
        [(p.agent, p.decision, p.reasoning) for p in item.positions],
        None,
    )
    texts = [o for o in options if o.text]
    refs = open_audit_refs(service.journal, view.run or None)
    i = refs.index(ref) if ref in refs else None
    response = _html(
        "audit.html",
        status,
        title=f"blind audit {ref}",
        principal=principal,
        csrf=service.sessions.csrf(sid),
        audit=got,
        item=item,
        answer=got.answer,
        question=question_of(item.panel),
        options=options,
        labels={o.id: o.label for o in options},
        diff=word_diff(texts[0].text, texts[1].text) if len(texts) >= 2 else None,
        diff_labels=(texts[0].label, texts[1].label) if len(texts) >= 2 else None,
        prev_id=refs[i - 1] if i else None,
        next_id=refs[i + 1] if i is not None and i + 1 < len(refs) else None,
        position=None if i is None else i + 1,
        open_count=len(refs),
        qs=view.suffix(),
        list_qs="?" + urlencode({"status": "audits", **({"run": view.run} if view.run else {})}),
        error=error,
    )
    if request.headers.get("hx-request"):
        response.headers["HX-Push-Url"] = f"/review/audit/{ref}{view.suffix()}"
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
    async def queue(request: Request) -> Response:
        got = _require(request)
        if isinstance(got, Response):
            return got
        principal, sid = got
        view = QueueView.of(request)
        service = _service(request)
        known = not view.run or service.journal.run(view.run, missing_ok=True) is not None
        order = view.order(request, view.status) if known else []
        shown = {st.item.review_id: st for st in _statuses(request, order[:QUEUE_ROWS])}
        claims = service.desk.live_claims(
            [e.review_id for e in order[:QUEUE_ROWS] if not e.resolved]
        )
        rows = [
            {
                "item": shown[e.review_id].item,
                "resolution": shown[e.review_id].resolution,
                "claim": claims.get(e.review_id),
                "question": question_of(shown[e.review_id].item.panel),
            }
            for e in order[:QUEUE_ROWS]
            if e.review_id in shown
        ]
        auto_rows = []
        needle = view.q.lower()
        if view.status == "automatic" and known:
            for ref in _auto_refs(request, view.run or None):
                got = service.desk.auto_case(ref)
                question = question_of(got.panel) or ""
                if needle and needle not in f"{question} {got.record.id}".lower():
                    continue
                auto_rows.append({"case": got, "question": question or None})
                if len(auto_rows) >= QUEUE_ROWS:
                    break
        audit_rows = []
        if view.status == "audits" and known:
            for ref in open_audit_refs(service.journal, view.run or None):
                item = blind_audit(service.journal, ref).item
                question = question_of(item.panel) or ""
                if needle and needle not in f"{question} {item.id}".lower():
                    continue
                audit_rows.append({"item": item, "question": question or None})
                if len(audit_rows) >= QUEUE_ROWS:
                    break
        # The confidence sequences take a moment with many audits: off the event loop.
        monitor, monitor_error = await run_in_threadpool(monitor_rows, service.journal)
        current = (service.spec.acceptance or {}).get("sha256")
        infos = [info for info in service.journal.runs() if info.kind == "decide"]
        runs = sorted({info.run_id for info in infos})
        return _html(
            "queue.html",
            created={info.run_id: info.created for info in infos},
            title="review queue",
            principal=principal,
            csrf=service.sessions.csrf(sid),
            rows=rows,
            total=(
                len(auto_rows)
                if view.status == "automatic"
                else len(audit_rows)
                if view.status == "audits"
                else len(order)
            ),
            auto_rows=auto_rows,
            audit_rows=audit_rows,
            monitor=monitor or [],
            monitor_error=monitor_error,
            current_sha256=current,
            runs=runs,
            filters=view,
            qs=view.suffix(),
            today=service.desk.resolved_today(principal.name),
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
            suggestion = service.desk.status(review_id).item.suggestion
            note = str(form.get("note", "")).strip()
            if not note and _note_required(request, decision, suggestion):
                why = (
                    "write a note (n) first"
                    if service.settings.review_note == "always"
                    else "write a note (n): you are overriding the panel's suggestion"
                )
                return _case_page(request, review_id, principal, sid, error=why, status=422)
            service.desk.resolve(
                review_id,
                decision=decision,
                note=note or "(no note: agrees with the panel's suggestion)",
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
        view = QueueView.of(request)
        target = _next_open(request, review_id, view, principal.name)
        if target is None:
            return RedirectResponse(f"/review{view.suffix()}", status_code=303)
        return RedirectResponse(f"/review/case/{target}{view.suffix()}", status_code=303)

    @app.get("/review/auto/{ref}", include_in_schema=False)
    async def auto_case(request: Request, ref: str) -> Response:
        got = _require(request)
        if isinstance(got, Response):
            return got
        principal, sid = got
        if has_open_audit(_service(request).journal, ref):
            view = QueueView.of(request)
            return RedirectResponse(f"/review/audit/{ref}{view.suffix()}", status_code=303)
        try:
            return _auto_page(request, ref, principal, sid)
        except UnknownItem as exc:
            return _html(
                "message.html",
                404,
                title="not found",
                principal=principal,
                csrf=_service(request).sessions.csrf(sid),
                message=str(exc),
            )

    @app.post("/review/auto/{ref}/confirm", include_in_schema=False)
    async def auto_confirm(request: Request, ref: str) -> Response:
        service = _service(request)
        checked = await _checked_form(request)
        if isinstance(checked, Response):
            return checked
        principal, sid, form = checked
        decision = str(form.get("decision", "")).strip() or None
        note = str(form.get("note", ""))
        if has_open_audit(service.journal, ref):
            return _html(
                "message.html",
                409,
                title="blind audit",
                principal=principal,
                csrf=service.sessions.csrf(sid),
                message=f"case {ref} waits for a blind audit: answer it at /review/audit/{ref}",
            )
        try:
            service.desk.auto_case(ref)
            if not note.strip():
                return _auto_page(
                    request,
                    ref,
                    principal,
                    sid,
                    error="write a note: an audit says why",
                    status=422,
                )
            service.desk.confirm(ref, decision=decision, note=note, reviewer=principal.name)
        except UnknownItem as exc:
            return _html(
                "message.html",
                404,
                title="not found",
                principal=principal,
                csrf=service.sessions.csrf(sid),
                message=str(exc),
            )
        except DissensusError as exc:
            return _auto_page(request, ref, principal, sid, error=str(exc), status=409)
        view = QueueView.of(request)
        left = _auto_refs(request, view.run or None)
        target = f"/review/auto/{left[0]}" if left else "/review"
        query = view.query()
        return RedirectResponse(target + (f"?{query}" if query else ""), status_code=303)

    @app.post("/review/undo", include_in_schema=False)
    async def undo(request: Request) -> Response:
        service = _service(request)
        checked = await _checked_form(request)
        if isinstance(checked, Response):
            return checked
        principal, sid, form = checked
        review_id = str(form.get("review_id", ""))
        try:
            service.desk.undo(
                review_id, reviewer=principal.name, within_s=service.settings.undo_window_s
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
        except DissensusError as exc:
            return _case_page(request, review_id, principal, sid, error=str(exc), status=409)
        view = QueueView.of(request)
        return RedirectResponse(f"/review/case/{review_id}{view.suffix()}", status_code=303)

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
        except UnknownItem as exc:
            return _html(
                "message.html",
                404,
                title="not found",
                principal=principal,
                csrf=service.sessions.csrf(sid),
                message=str(exc),
            )
        view = QueueView.of(request)
        return RedirectResponse(f"/review/case/{review_id}{view.suffix()}", status_code=303)

    @app.get("/review/audit/{ref}", include_in_schema=False)
    async def audit_case(request: Request, ref: str) -> Response:
        got = _require(request)
        if isinstance(got, Response):
            return got
        principal, sid = got
        try:
            return _audit_page(request, ref, principal, sid)
        except UnknownItem as exc:
            return _html(
                "message.html",
                404,
                title="not found",
                principal=principal,
                csrf=_service(request).sessions.csrf(sid),
                message=str(exc),
            )

    @app.post("/review/audit/{ref}/answer", include_in_schema=False)
    async def audit_answer(request: Request, ref: str) -> Response:
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
        picked = str(form.get("decision", "")).strip()
        other = str(form.get("other", "")).strip()
        decision = picked or other
        note = str(form.get("note", "")).strip()
        view = QueueView.of(request)
        before = open_audit_refs(service.journal, view.run or None)
        try:
            blind_audit(service.journal, ref)
            if not decision or (picked and other and picked != other):
                why = (
                    "pick an option (1-9) or type another answer first"
                    if not decision
                    else "pick an option or type another answer, not both"
                )
                return _audit_page(request, ref, principal, sid, error=why, status=422)
            if not note:
                why = "write a note (n): an audit says why"
                return _audit_page(request, ref, principal, sid, error=why, status=422)
            service.desk.confirm(ref, decision=decision, note=note, reviewer=principal.name)
        except UnknownItem as exc:
            return _html(
                "message.html",
                404,
                title="not found",
                principal=principal,
                csrf=service.sessions.csrf(sid),
                message=str(exc),
            )
        except DissensusError as exc:
            return _audit_page(request, ref, principal, sid, error=str(exc), status=409)
        left = open_audit_refs(service.journal, view.run or None)
        if not left:
            query = urlencode({"status": "audits", **({"run": view.run} if view.run else {})})
            return RedirectResponse(f"/review?{query}", status_code=303)
        # The next open audit after this one in the list's order, else the first one left.
        i = before.index(ref) if ref in before else -1
        target = next((r for r in before[i + 1 :] if r in left), left[0])
        return RedirectResponse(f"/review/audit/{target}{view.suffix()}", status_code=303)
