"""What every page of the review site shares: rendering, the session, form checks and the
message pages. The pages themselves are routers in :mod:`dissensus.serve.routes`
(``pages_auth``, ``pages_queue``, ``pages_case``, ``pages_audit``; added to an app by
:func:`dissensus.serve.routes.install_pages`); the queue a reviewer walks through is
:mod:`.queue_view`.

Pages: ``/review/login`` (token form), ``/review`` (the queue, filtered by status, run,
reason and text, sorted by age or reason; or the automatic decisions waiting for an
audit; or the open blind audits), ``/review/case/{id}`` (everything ``dissensus review
show`` shows, side by side, with the options labelled as the agents name them
(:mod:`.case_view`), and the resolve bar), ``/review/auto/{run}.{line}`` (an automatic
decision and its audit form), ``/review/audit/{run}.{line}`` (a blind audit: the case
without the committed answer or the suggestion, and the form answering it;
:mod:`.blind_audits`). Every write (resolve, claim, undo, audit) goes through the
same :class:`~dissensus.serve.journal_adapter.ReviewDesk` as the API. The queue page
also shows the acceptance monitor (:func:`dissensus.pipeline.audit.monitor_status`, as
``dissensus acceptance status`` prints it): per acceptance file and stratum, the answered
audits, the audited precision and its anytime-valid bounds, and whether automatic
commits are suspended, after how many audits and since when.

Choices where the design is silent:

* Case text (question, conversation, options, reasoning, packet text) is agent or user
  data: it is rendered with Jinja2's autoescaping inside ``<pre>`` (verbatim, never
  interpreted), and the page's Content-Security-Policy allows scripts from this server
  only, so even an escaping bug could not run injected script.
* The body is ``hx-boost``ed: links and forms load over htmx and swap the page, and every
  page also works as a plain page load. After a resolve the server redirects to the next
  open case of the same queue (the filters and order the reviewer came with travel in
  the case page's query string), skipping cases other reviewers hold claims on, or to
  the queue when none is left.
* Keys (``review.js``): ``1``-``9`` pick an option, ``o`` focuses the field for another
  answer (the only answer a case without options takes), ``n`` focuses the note, ``Enter``
  submits, ``j`` / ``k`` next / previous case of the queue (open or resolved, skipping
  open cases claimed by others), ``c`` claims, ``u`` undoes the reviewer's last
  resolution (within the server's ``undo_window_s``; the form names the case it undoes,
  so a stale page cannot undo another one), ``a`` opens the audit form of an automatic
  decision, ``?`` shows the keys. On a blind audit the same keys pick an option (or type
  another answer), write the note and answer (``Enter``), ``c`` claims the audit, and
  ``j`` / ``k`` move among the open audits nobody else holds; after an answer the page
  goes to the next such audit. ``c`` claims an automatic decision's audit too. Keys act only
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
* A page whose case is unknown answers the message page with 404; a form post without a
  login answers 401, without the session's CSRF token 403.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.datastructures import FormData

from dissensus.errors import DissensusError
from dissensus.serve import journal_errors
from dissensus.serve.auth import LOCAL, Principal, allows
from dissensus.serve.case_view import OptionView, word_diff
from dissensus.serve.journal_adapter import UnknownItem

if TYPE_CHECKING:
    from dissensus.serve.service import Service

__all__ = [
    "CSP",
    "PRE_COOKIE",
    "SESSION_COOKIE",
    "Form",
    "Reviewer",
    "case_render",
    "checked_form",
    "message",
    "option_context",
    "or_not_found",
    "push_url",
    "refused_by",
    "render",
    "require_login",
    "secure",
    "service_of",
    "session_of",
    "set_session",
]

HERE = Path(__file__).resolve().parent
SESSION_COOKIE = "dissensus_session"
PRE_COOKIE = "dissensus_login"
CSP = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'"

_env = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=select_autoescape(["html"]),
    auto_reload=False,
)


@dataclass(frozen=True)
class Reviewer:
    """The logged-in reviewer of a page request and their session id."""

    principal: Principal
    sid: str


@dataclass(frozen=True)
class Form:
    """A checked form post: who sent it, from which session, and its fields."""

    principal: Principal
    sid: str
    data: FormData

    @property
    def reviewer(self) -> Reviewer:
        return Reviewer(self.principal, self.sid)

    def text(self, name: str) -> str:
        """The field ``name`` as stripped text (empty when absent)."""
        return str(self.data.get(name, "")).strip()


def service_of(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


def render(template: str, status: int = 200, **context: Any) -> HTMLResponse:
    """A page from ``templates/``, with the site's Content-Security-Policy, never cached.
    Every value in ``context`` is escaped by the template (autoescaping)."""
    page = _env.get_template(template).render(**context)
    return HTMLResponse(
        page,
        status_code=status,
        headers={"Content-Security-Policy": CSP, "Cache-Control": "no-store"},
    )


def case_render(
    request: Request, who: Reviewer, template: str, status: int, url: str, **context: Any
) -> Response:
    """A page of one case for ``who`` (with their CSRF token), at address ``url`` for htmx."""
    response = render(
        template,
        status,
        principal=who.principal,
        csrf=service_of(request).sessions.csrf(who.sid),
        **context,
    )
    return push_url(request, response, url)


def message(request: Request, who: Reviewer, status: int, title: str, text: str) -> HTMLResponse:
    """The message page (not found, forbidden, a blind audit in the way)."""
    return render(
        "message.html",
        status,
        title=title,
        principal=who.principal,
        csrf=service_of(request).sessions.csrf(who.sid),
        message=text,
    )


def refused_by(request: Request, exc: DissensusError) -> tuple[int, str]:
    """``(status, text)`` of a form refused by ``exc``: 503 when the journal is unreachable
    or busy (the detail logged), else 409; the text never names the journal's location."""
    public = journal_errors.unavailable(exc)
    if public is not None:
        journal_errors.log_unavailable(exc, f"{request.method} {request.url.path}")
        return 503, public
    return 409, journal_errors.scrub(str(exc), [str(service_of(request).journal.path)])


def or_not_found(request: Request, who: Reviewer, page: Callable[[], Response]) -> Response:
    """``page()``, or the 404 message page when it names an unknown case."""
    try:
        return page()
    except UnknownItem as exc:
        return message(request, who, 404, "not found", str(exc))


def push_url(request: Request, response: Response, url: str) -> Response:
    """Tell htmx the address of a page it swapped in (so back and reload work)."""
    if request.headers.get("hx-request"):
        response.headers["HX-Push-Url"] = url
    return response


def secure(request: Request) -> bool:
    return request.url.scheme == "https"


def session_of(request: Request) -> tuple[Principal | None, str | None]:
    """The session cookie's principal and session id (``None`` without a live session)."""
    sid = request.cookies.get(SESSION_COOKIE)
    principal = service_of(request).sessions.get(sid)
    if principal is None:
        return None, None
    return principal, sid


def set_session(response: Response, sid: str, request: Request) -> None:
    response.set_cookie(
        SESSION_COOKIE,
        sid,
        httponly=True,
        samesite="strict",
        path="/review",
        secure=secure(request),
    )


def require_login(request: Request) -> Reviewer | Response:
    """The logged-in reviewer, or the response that sends them to log in (without a
    tokens file: a fresh ``local`` session, then the same page again)."""
    service = service_of(request)
    principal, sid = session_of(request)
    if principal is not None and sid is not None and allows(principal, "review"):
        return Reviewer(principal, sid)
    if service.tokens is None:
        sid = service.sessions.open(LOCAL)
        response = RedirectResponse(
            str(request.url.path) + (f"?{request.url.query}" if request.url.query else ""),
            status_code=303,
        )
        set_session(response, sid, request)
        return response
    return RedirectResponse("/review/login", status_code=303)


async def checked_form(request: Request, *, role_check: bool = False) -> Form | Response:
    """A form post's reviewer, session and fields, or the page refusing it (401 without a
    login, 403 without the session's CSRF token, or, with ``role_check``, without the
    review role)."""
    service = service_of(request)
    principal, sid = session_of(request)
    if principal is None or sid is None:
        return render(
            "message.html", 401, title="log in", principal=None, csrf="", message="log in first"
        )
    data = await request.form()
    who = Reviewer(principal, sid)
    if not service.sessions.check_csrf(sid, str(data.get("csrf", ""))):
        return message(
            request, who, 403, "forbidden", "missing or wrong CSRF token; reload the page"
        )
    if role_check and not allows(principal, "review"):
        return message(request, who, 403, "forbidden", "this needs the review role")
    return Form(principal, sid, data)


def option_context(options: list[OptionView]) -> dict[str, Any]:
    """What a case's template shows of its options (keyword arguments of :func:`render`):
    the options, their labels by id, and the word diff of the first two with texts."""
    texts = [o for o in options if o.text]
    two = len(texts) >= 2
    return {
        "options": options,
        "labels": {o.id: o.label for o in options},
        "diff": word_diff(texts[0].text, texts[1].text) if two else None,
        "diff_labels": (texts[0].label, texts[1].label) if two else None,
    }
