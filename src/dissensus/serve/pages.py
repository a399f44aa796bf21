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

Choices this module makes:

* Case text (question, conversation, options, reasoning, packet text) is agent or user
  data: it is rendered with Jinja2's autoescaping inside ``<pre>`` (verbatim, never
  interpreted), and the page's Content-Security-Policy allows scripts from this server
  only, so even an escaping bug could not run injected script.
  The characters that show as nothing (every control and format character and every
  default-ignorable one: zero-width space and joiners, bidi marks and controls,
  variation selectors, tags, Hangul fillers, ...; :data:`dissensus.quoting.INVISIBLE`)
  are shown escaped, as the command line shows them (``\\u200b``), everywhere but in the
  values a form sends back: two agents ``ab`` and ``a\\u200bb``, or two options
  ``approve`` and ``approve\\u200e``, never look alike. Every ``{{ }}`` is a *short*
  field (:func:`dissensus.quoting.visible`: tab and newline shown as ``\\t`` and ``\\n``
  too); a long text shown as lines in a verbatim block (the question, a conversation's
  messages, an option's text, the reasoning, the technical trail, the DCI packet's
  texts) is written ``|lines`` (:func:`dissensus.quoting.visible_text`: line breaks,
  tabs, ZWNJ, ZWJ and the emoji presentation selectors kept).
* The body is ``hx-boost``ed: links and forms load over htmx and swap the page, and every
  page also works as a plain page load. After a resolve the server redirects to the next
  open case of the same queue (the filters and order the reviewer came with travel in
  the case page's query string), skipping cases other reviewers hold claims on, or to
  the queue when none is left.
* Keys (``review.js``): ``1``-``9`` pick an option, ``o`` focuses the field for another
  answer (the only answer a case without options takes), ``n`` focuses the note, ``Enter``
  submits, ``j`` / ``k`` next / previous case of the queue (open or resolved, skipping
  open cases claimed by others), ``c`` claims, ``r`` gives one's claim up, ``u`` ``u``
  undoes the reviewer's last resolution (the first ``u`` names the case and asks, a
  second within five seconds undoes, any other key cancels; within the server's
  ``undo_window_s``; the form names the case it undoes, so a stale page cannot undo
  another one), ``a`` opens the audit form of an automatic
  decision, ``?`` shows the keys. On a blind audit the same keys pick an option (or type
  another answer), write the note and answer (``Enter``), ``c`` claims the audit, ``r``
  gives one's claim on it up, and ``j`` / ``k`` move among the open audits nobody else
  holds; after an answer the page goes to the next such audit. ``c`` and ``r`` claim an
  automatic decision's audit and give it up too. Keys act only when no text field has
  the focus (``Esc`` leaves it) and the keys help is closed (while it is open only ``?``
  and ``Esc`` act, closing it); every page swapped in settles with the focus on its
  heading (``tabindex="-1"``: a screen reader reads out the case moved to), and keys
  typed while a page loads are replayed on the next one.
* A note is required as the server's ``review_note`` setting says: by default only when
  the decision is not the panel's suggestion; a resolution without one journals
  "(no note: agrees with the panel's suggestion)", or "(no note)" for another decision
  (``--review-note never``), since the journal's resolutions always carry a note. Audits always need one (``confirm`` requires it).
* Progress: the case's place among the open cases of its queue, and how many cases the
  reviewer resolved today (UTC).
* Login: a form posting the token (never in a URL) with a double-submit CSRF token bound
  to a pre-session cookie; success sets the session cookie (HttpOnly, SameSite=Strict,
  Path=/review; Secure when served over https). Without a tokens file (loopback only)
  there is no login and the reviewer is ``local``, but forms still carry CSRF tokens:
  a page asked for without the cookie sets the one ``local`` session's
  (:meth:`~dissensus.serve.auth.SessionStore.local`), so cookie-less requests, which
  any web page can make a browser send, open no sessions.
* Only ``review`` and ``admin`` tokens may log in.
* A page whose case is unknown answers the message page with 404; a form post without a
  login answers 401, a body that is not URL-encoded 415 (:func:`url_encoded`: the
  site's forms never send ``multipart/form-data``, whose parser would read bytes that
  are not UTF-8 as Latin-1 and a file as its description; the login and logout forms
  too), a body larger than any form of the site 413 (:func:`read_form`: over
  :data:`MAX_FORM_BYTES` or :data:`MAX_FORM_FIELDS`, refused before it is decoded,
  and decoded off the event loop), without the session's CSRF token 403, and without the review role 403 too: every form, as every review route of the API, since a session takes its
  token's role as the tokens file has it now (a reviewer made ``submit`` since logging
  in can neither resolve, claim, give a claim up, undo nor confirm).
* **Back where the reviewer was.** A page asked for without a session sends the reviewer
  to ``/review/login?next=<that page>``, and the login goes back there. ``next`` is only
  ever a path of the review site (:func:`safe_next`: ``/review`` or below, never an
  absolute or ``//`` URL, a backslash, a control character or the login page itself;
  nor one that is no URL at all, such as ``//[``), else the queue. A form post refused for want of a session (401: it ended, or the
  server restarted and forgot it) or of its CSRF token (403) answers the message page
  with a link to log in again (401) and, to htmx, the address of the page the form was
  on (``HX-Replace-Url``, :func:`page_url`), so the address bar never stays on a
  post-only URL and reloading shows the page again. What the reviewer typed on the case
  page is kept in the browser meanwhile (``review.js``).
* **Post-only addresses without JavaScript.** A form posted without htmx (JavaScript
  off) leaves the browser on the address it was posted to; an answer that is a
  redirect (a resolve, a claim) moves it on, but a refusal is shown at that address
  (``.../resolve``, the form as it was sent), and reloading it posts the form again (the
  browser asks first). A ``GET`` of any post-only address of the site (reloading it
  after that, or reaching it from the history) is a 303 to the page its form belongs to
  (:func:`form_page`: the case, automatic decision or blind audit of
  ``/review/{case|auto|audit}/ID/...``, the queue otherwise, the query kept), never the
  API's JSON 405. A refusal is not made a redirect: the form as the reviewer sent it
  (pick, typed answer, note) would have to be kept on the server, or in the address.
* **Refusals keep the form.** A resolve refused (422, 409, 503) shows the case page again
  with the reviewer's pick, typed answer and note as they sent them
  (:meth:`Form.kept`, :func:`~dissensus.serve.routes.pages_case.case_page`'s ``kept``), at
  the case page's address (``HX-Replace-Url``); so does a refused audit, on the blind
  audit's or the automatic decision's page (:mod:`~dissensus.serve.routes.pages_audit`).
* **A journal that cannot be reached, on a page load.** Loading a page of the review
  site (a reload, a link opened in a new tab, the page after a login) while the
  journal is unreachable or busy shows a page saying so (503, ``Retry-After``), never
  the API's JSON (:func:`install_page_errors`); a request htmx sends keeps the JSON,
  which ``review.js`` shows in an alert above the page, its form untouched.
* **An address that names no page.** An address of the review site no page answers
  (``/review/case/`` cut short, a mistyped path: 404) or a method a page does not take
  (a form posted to the queue: 405, its ``Allow`` header kept) is the site's message
  page saying so, with a link to the queue (:func:`install_page_errors`), never the
  API's JSON; the API's paths keep their JSON and the static files their plain text.
* **Back to the queue it came from.** A message page's "back to the queue" (a refusal,
  an unknown case, a session ended) goes to the queue whose filters and order the
  request carries (:func:`queue_back`), as the case page's own "queue" link does, not
  to the whole queue: a reviewer working one run's cases found themselves among every
  run's.
* **Times in refusals.** A refusal naming a time (a claim's expiry, when a case was
  resolved or audited) shows it as the page shows other times, in a ``<time>`` element
  the page's script renders in the reader's local time (:func:`refused_by`); the API's
  JSON keeps the ISO-8601 UTC value.
* **Decisions in refusals.** A case resolved or audited before names the standing
  decision as the pages name options: its label, with the option's id beside a label
  that differs ("(decision Output (a), option 1)"), each in ``<bdi>``; the API's message
  keeps the id (``(decision '1')``).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, parse_qsl, quote, urlencode, urlsplit

import anyio
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup, escape
from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException

from dissensus.acceptance.monitor import target_words
from dissensus.errors import DissensusError
from dissensus.io.limits import MAX_FIELD_CHARS
from dissensus.quoting import visible, visible_label, visible_text
from dissensus.serve import journal_errors
from dissensus.serve.auth import LOCAL, Principal, allows
from dissensus.serve.case_view import OptionView, word_diff
from dissensus.serve.http import allowed_methods, service_of
from dissensus.serve.journal_adapter import (
    AlreadyConfirmed,
    AlreadyResolved,
    ClaimConflict,
    UnknownItem,
)

__all__ = [
    "CSP",
    "PRE_COOKIE",
    "SESSION_COOKIE",
    "Form",
    "Reviewer",
    "case_render",
    "checked_form",
    "form_page",
    "install_page_errors",
    "login_url",
    "message",
    "option_context",
    "or_not_found",
    "page_url",
    "post_only",
    "push_url",
    "queue_back",
    "read_form",
    "refused_by",
    "render",
    "require_login",
    "safe_next",
    "secure",
    "service_of",
    "session_of",
    "set_session",
    "url_encoded",
]

HERE = Path(__file__).resolve().parent
SESSION_COOKIE = "dissensus_session"
PRE_COOKIE = "dissensus_login"
CSP = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'"


def _visible(value: Any) -> Any:
    """What every ``{{ }}`` of a page shows: a string as a short field, with the
    characters that show as nothing escaped as the command line escapes them
    (``agent\\u200bb``, not ``agentb``; newline ``\\n``; :func:`dissensus.quoting.visible`),
    then HTML-escaped. A value that must come back as it was sent (a form field's
    ``value``, an option id a radio button posts, a ``data-`` attribute the script
    compares) is written ``|e`` in the template: escaped markup, left as it is; a long
    text shown as lines is written ``|lines`` (:func:`_lines`)."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return visible(value)
    return value


def _lines(value: Any) -> Markup:
    """A long text for a verbatim block (``{{ p.reasoning|lines }}``): escaped as
    :func:`dissensus.quoting.visible_text` escapes it (line breaks, tabs, joiners and
    emoji presentation selectors kept), then HTML-escaped."""
    return escape(visible_text("" if value is None else value))


def _label(value: Any) -> Any:
    """A decision, an option's id or label, an agent or a family
    (``{{ (o.label)|label }}``): escaped as :func:`dissensus.quoting.visible_label`
    escapes it (``yes `` reads ``yes\\x20``), then HTML-escaped; ``None`` as nothing."""
    if value is None or isinstance(value, Markup):
        return value
    return escape(visible_label(value))


_env = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=select_autoescape(["html"]),
    auto_reload=False,
    finalize=_visible,
)
_env.filters["lines"] = _lines
_env.filters["label"] = _label
# A target precision as every door words it: 0.90, 0.975, 0.999 (never 1.00).
_env.filters["target"] = target_words


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

    def pick(self) -> str:
        """The option picked (the ``decision`` radio button) exactly as it was sent, since
        an option's id may begin or end with white space (``"yes "``, an agent's
        decision); empty when it is blank or absent."""
        value = str(self.data.get("decision", ""))
        return value if value.strip() else ""

    def kept(self) -> dict[str, str]:
        """The answer fields of a case's form (``decision``, ``other``, ``note``) as sent,
        unstripped: what a refused form shows again, so nothing typed is lost."""
        return {name: str(self.data.get(name, "")) for name in ("decision", "other", "note")}


def render(template: str, status: int = 200, **context: Any) -> HTMLResponse:
    """A page from ``templates/``, with the site's Content-Security-Policy, never cached
    nor sniffed as another type, never framed (``X-Frame-Options: DENY`` too), its
    address never sent to another site (``Referrer-Policy: same-origin``). Every value in ``context`` is escaped by the template
    (autoescaping)."""
    page = _env.get_template(template).render(**context)
    return HTMLResponse(page, status_code=status, headers=_PAGE_HEADERS)


_PAGE_HEADERS = {
    "Content-Security-Policy": CSP,
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    # For browsers that predate CSP's frame-ancestors, as the API docs pages send it.
    "X-Frame-Options": "DENY",
    # A case's address (its review id) is not sent to other sites a page links to.
    "Referrer-Policy": "same-origin",
}


def case_render(
    request: Request, who: Reviewer, template: str, status: int, url: str, **context: Any
) -> Response:
    """A page of one case for ``who`` (with their CSRF token), at address ``url`` for htmx
    (a refusal, ``status`` 400 or more, replaces the address the form post left)."""
    response = render(
        template,
        status,
        principal=who.principal,
        csrf=service_of(request).sessions.csrf(who.sid),
        **context,
    )
    return push_url(request, response, url, replace=status >= 400)


_QUEUE_KEYS = ("status", "run", "reason", "q", "sort")
"""The query parameters that name a queue (:class:`~dissensus.serve.queue_view.QueueView`)."""


def queue_back(request: Request) -> str:
    """The queue a message page's "back to the queue" goes to: the one whose filters and
    order the request's query carries (every case page, link and form of the site keeps
    them), else the whole queue."""
    params = request.query_params
    pairs = [(k, v) for k in _QUEUE_KEYS if (v := params.get(k, "").strip())]
    return "/review?" + urlencode(pairs) if pairs else "/review"


def message(request: Request, who: Reviewer, status: int, title: str, text: str) -> Response:
    """The message page (not found, forbidden, a blind audit in the way); after a form
    post, at the address of the page the form was on (:func:`page_url`)."""
    response = render(
        "message.html",
        status,
        title=title,
        principal=who.principal,
        csrf=service_of(request).sessions.csrf(who.sid),
        message=text,
        back=queue_back(request),
    )
    if request.method == "POST":
        push_url(request, response, page_url(request), replace=True)
    return response


def _page_load(request: Request) -> bool:
    """Whether ``request`` loads a whole page of the review site (not htmx's, which
    swaps a part in, nor a static file)."""
    path = request.url.path
    if not (path == "/review" or path.startswith("/review/")):
        return False
    return not path.startswith("/review/static/") and not request.headers.get("hx-request")


def install_page_errors(app: FastAPI) -> None:
    """A journal that cannot be used now (unreachable or busy) answers a page load of the
    review site with a page saying so (503, ``Retry-After``), where the API's handler
    (:func:`~dissensus.serve.http.install_errors`, installed first) answered JSON: a
    reload while the database was down showed the reviewer ``{"error": ...}``. Requests
    htmx sends keep the JSON, which the page's script shows in an alert above the page
    and the form it keeps. An address of the review site that names no page, or a
    method a page does not take, is a page too (:func:`_no_such_page`)."""
    api_handler = app.exception_handlers[DissensusError]

    async def page_or_api(request: Request, exc: Exception) -> Response:
        public = journal_errors.unavailable(exc)
        if public is None or not _page_load(request):
            answered = api_handler(request, exc)
            return await answered if inspect.isawaitable(answered) else answered
        journal_errors.log_unavailable(exc, f"{request.method} {request.url.path}")
        response = render(
            "message.html",
            503,
            title="the journal cannot be reached",
            principal=None,
            message=(
                f"{public}: nothing can be shown or saved until it is back. Reload this page"
                " in a moment; what you typed on a case stays in this browser."
            ),
            back=queue_back(request),
        )
        response.headers.update(journal_errors.retry_headers(public))
        return response

    app.add_exception_handler(DissensusError, page_or_api)

    http_handler = app.exception_handlers[StarletteHTTPException]

    async def page_or_http(request: Request, exc: Exception) -> Response:
        if not isinstance(exc, StarletteHTTPException) or not _site_page(request):
            answered = http_handler(request, exc)
            return await answered if inspect.isawaitable(answered) else answered
        return _no_such_page(request, exc)

    app.add_exception_handler(StarletteHTTPException, page_or_http)


def _site_page(request: Request) -> bool:
    """Whether ``request`` asks for an address of the review site's pages (not of the
    API, nor of the static files, which answer plain text of their own)."""
    path = request.url.path
    if not (path == "/review" or path.startswith("/review/")):
        return False
    return not path.startswith("/review/static/")


def _no_such_page(request: Request, exc: StarletteHTTPException) -> Response:
    """The page answering an address of the review site that names no page (404) or a
    method a page does not take (405, its ``Allow`` header kept): the site's message
    page, with the reviewer's header when a session is live, never the API's JSON."""
    principal, sid = session_of(request)
    if exc.status_code == 405:
        title = "not saved"
        text = f"{request.url.path} does not take a {request.method}; nothing was saved"
    elif exc.status_code == 404:
        title = "not found"
        text = f"there is no page of the review site at {request.url.path}"
    else:  # pragma: no cover - the router raises only the two above
        title, text = "refused", str(exc.detail)
    response = render(
        "message.html",
        exc.status_code,
        title=title,
        principal=principal,
        csrf=service_of(request).sessions.csrf(sid) if sid is not None else "",
        message=text,
        back=queue_back(request),
    )
    if exc.status_code == 405:
        allowed = allowed_methods(request) or [
            m.strip() for k, v in (exc.headers or {}).items() if k.lower() == "allow"
            for m in v.split(",")
        ]  # fmt: skip
        response.headers["Allow"] = ", ".join(allowed)
    return response


def _timed(text: str, iso: str) -> Markup:
    """``text`` escaped, with the time ``iso`` in it as a ``<time>`` element (the page's
    script shows it in the reader's local time)."""
    shown = Markup('<time datetime="{0}">{0}</time>').format(iso)
    return escape(visible(text)).replace(escape(iso), shown)


def refused_by(request: Request, exc: DissensusError) -> tuple[int, str]:
    """``(status, text)`` of a form refused by ``exc``: 503 when the journal is unreachable
    or busy (the detail logged), else 409; the text never names the journal's location.
    A time it names (a claim's expiry, a resolution's or an audit's) is a ``<time>``."""
    public = journal_errors.unavailable(exc)
    if public is not None:
        journal_errors.log_unavailable(exc, f"{request.method} {request.url.path}")
        return 503, public
    text = journal_errors.scrub(str(exc), [str(service_of(request).journal.path)])
    if isinstance(exc, ClaimConflict):
        return 409, _timed(text, exc.expires)
    if isinstance(exc, AlreadyResolved | AlreadyConfirmed):
        return 409, _decided(request, text, exc)
    return 409, text


def _decided(request: Request, text: str, exc: AlreadyResolved | AlreadyConfirmed) -> Markup:
    """The refusal of a case resolved (audited) before, its time a ``<time>``, naming the
    decision as the pages do: the option's label, its id beside a label that differs."""
    tail = f" (decision {exc.decision!r})"
    if not text.endswith(tail):
        return _timed(text, exc.at)
    desk = service_of(request).desk
    if isinstance(exc, AlreadyResolved):
        labels = desk.labels(exc.review_id)
    else:
        labels = desk.labels(exc.ref, audit=True)
    label = labels.get(exc.decision, exc.decision)
    named = (
        Markup("<bdi>{}</bdi>").format(visible_label(label))
        if label == exc.decision
        else Markup("<bdi>{}</bdi>, option <bdi>{}</bdi>").format(
            visible_label(label), visible_label(exc.decision)
        )
    )
    return _timed(text[: -len(tail)], exc.at) + Markup(" (decision {})").format(named)


def or_not_found(request: Request, who: Reviewer, page: Callable[[], Response]) -> Response:
    """``page()``, or the 404 message page when it names an unknown case."""
    try:
        return page()
    except UnknownItem as exc:
        return message(request, who, 404, "not found", str(exc))


def push_url(request: Request, response: Response, url: str, *, replace: bool = False) -> Response:
    """Tell htmx the address of a page it swapped in (so back and reload work): a new
    history entry, or with ``replace`` the current one's (a refused form stays on the
    page it was posted from)."""
    if request.headers.get("hx-request"):
        response.headers["HX-Replace-Url" if replace else "HX-Push-Url"] = url
    return response


_NOT_NEXT = ("/review/login", "/review/logout", "/review/static/")
_FORM_POST = re.compile(r"^/review/(case|auto|audit)/([^/]+)/[a-z]+$")


def _split(url: str) -> SplitResult | None:
    """``url`` split, or ``None`` when it cannot be (``//[``, ``http://[::1``: an
    unclosed IPv6 bracket makes :func:`~urllib.parse.urlsplit` raise; a ``next=`` or an
    ``HX-Current-URL`` holding one was a 500)."""
    try:
        return urlsplit(url)
    except ValueError:
        return None


def safe_next(value: str | None) -> str | None:
    """``value`` when it is a path (and query) of the review site a login may go back to,
    else ``None``: never an absolute or scheme-relative (``//host``) URL, a backslash
    (which browsers read as a slash), a control character or whitespace, a ``.`` /
    ``..`` segment, nor the login and logout pages."""
    if not value or len(value) > 2048 or "\\" in value:
        return None
    if any(ord(c) <= 0x20 or ord(c) == 0x7F for c in value):
        return None
    parts = _split(value)
    if parts is None or parts.scheme or parts.netloc or parts.fragment:
        return None
    path = parts.path
    if not (path == "/review" or path.startswith("/review/")):
        return None
    if any(seg in (".", "..") for seg in path.split("/")):
        return None
    if path.startswith(_NOT_NEXT) or path in ("/review/login", "/review/logout"):
        return None
    return value


def login_url(next_url: str | None) -> str:
    """The login page, going back to ``next_url`` (when safe) after it."""
    target = safe_next(next_url)
    if target is None or target == "/review":
        return "/review/login"
    return "/review/login?next=" + quote(target, safe="/")


def page_url(request: Request) -> str:
    """The address (path and query) of the review page a form was posted from: the case
    (or automatic decision, or blind audit) page of a ``/review/{case|auto|audit}/ID/...``
    post, else the page htmx says it was on (``HX-Current-URL``, when it is this site's
    and :func:`safe_next` takes it), else the queue."""
    query = f"?{request.url.query}" if request.url.query else ""
    found = _FORM_POST.match(request.url.path)
    if found:
        return f"/review/{found[1]}/{quote(found[2], safe='')}{query}"
    current = request.headers.get("hx-current-url")
    parts = _split(current) if current else None
    here = _split(str(request.base_url)) if parts is not None else None
    if (
        parts is not None
        and here is not None
        and (parts.scheme, parts.netloc) == (here.scheme, here.netloc)
        and not _FORM_POST.match(parts.path)
    ):
        known = safe_next(parts.path + (f"?{parts.query}" if parts.query else ""))
        if known is not None:
            return known
    return "/review" + query


async def form_page(request: Request) -> Response:
    """A ``GET`` of a post-only address of the review site (``.../resolve``,
    ``/review/undo``, ...: left in the address bar by a form refused without JavaScript,
    then reloaded, or reached again through the history): 303 to the page the form
    belongs to (:func:`page_url`), never the API's JSON 405. It changes nothing: a
    ``GET`` of ``/review/logout`` goes to the queue, logged in as before."""
    return RedirectResponse(page_url(request), status_code=303)


def post_only(router: APIRouter, *paths: str) -> None:
    """Answer a ``GET`` of each of ``paths`` (routes of ``router`` that only take
    ``POST``) with :func:`form_page`."""
    for path in paths:
        router.add_api_route(path, form_page, methods=["GET"], include_in_schema=False)


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
    tokens file: the shared ``local`` session, then the same page again)."""
    service = service_of(request)
    principal, sid = session_of(request)
    if principal is not None and sid is not None and allows(principal, "review"):
        return Reviewer(principal, sid)
    if service.tokens is None:
        sid = service.sessions.local(LOCAL)
        response = RedirectResponse(
            str(request.url.path) + (f"?{request.url.query}" if request.url.query else ""),
            status_code=303,
        )
        set_session(response, sid, request)
        return response
    here = str(request.url.path) + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(login_url(here), status_code=303)


FORM_TYPE = "application/x-www-form-urlencoded"
"""The one body type of the review site's forms: what a browser and htmx send for them."""


def url_encoded(request: Request) -> bool:
    """Whether a form post's body is URL-encoded, or absent. Another body type (a
    ``multipart/form-data`` post, which no page of the site sends) is refused before it is
    parsed: Starlette reads a multipart field that is not UTF-8 as Latin-1 (``\\xff``
    journalled as ``ÿ``), and a file part as an upload whose text is its Python
    description, so either would be saved as a note or decision nobody typed."""
    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind == FORM_TYPE:
        return True
    length = request.headers.get("content-length", "0").strip()
    return not kind and length in ("0", "") and "transfer-encoding" not in request.headers


MAX_FORM_FIELDS = 64
"""Fields a form of the review site may send (its largest sends six)."""

MAX_FORM_BYTES = 3 * MAX_FIELD_CHARS * 12 + 64 * 1024
"""Bytes a form of the review site may take: three text fields (decision, other answer,
note) of :data:`~dissensus.io.limits.MAX_FIELD_CHARS` characters each, every one
percent-encoded at its longest (12 bytes for a 4-byte character), and the rest."""


def _form_fields(body: bytes) -> list[tuple[str, str]] | None:
    """The fields of an URL-encoded form, or ``None`` when one is not UTF-8 once
    percent-decoded (Starlette would decode it with replacement: ``%FF`` journalled as
    U+FFFD, a decision nobody typed)."""
    try:
        return parse_qsl(body.decode("utf-8"), keep_blank_values=True, errors="strict")
    except (UnicodeDecodeError, ValueError):
        return None


async def read_form(request: Request) -> FormData | tuple[int, str]:
    """A form post's fields, or ``(status, reason)`` refusing it: 415 for a body that is
    not URL-encoded (:func:`url_encoded`), 413 for one over :data:`MAX_FORM_BYTES` or
    :data:`MAX_FORM_FIELDS` (checked before it is decoded), 400 for a field that is not
    UTF-8. The body is decoded in a worker thread: decoding costs about a microsecond a
    byte, and 8 MiB of ``a=&a=&...`` held the event loop, and every other request, for
    9 s."""
    if not url_encoded(request):
        return 415, f"the form must be sent as {FORM_TYPE}, as the page sends it"
    too_large = (413, "the form is larger than any form of these pages")
    declared = request.headers.get("content-length", "0").strip()
    if declared.isdigit() and int(declared) > MAX_FORM_BYTES:
        return too_large
    body = await request.body()
    if len(body) > MAX_FORM_BYTES or body.count(b"&") >= MAX_FORM_FIELDS:
        return too_large
    fields = await anyio.to_thread.run_sync(_form_fields, body)
    if fields is None:
        return 400, "the form is not valid UTF-8"
    items: list[tuple[str, str | UploadFile]] = list(fields)
    return FormData(items)


async def checked_form(request: Request) -> Form | Response:
    """A form post's reviewer, session and fields, or the page refusing it (401 without a
    login, 403 without the session's CSRF token or without the review role), at the
    address of the page the form was on (:func:`page_url`); the role is checked on every
    form (module docstring)."""
    service = service_of(request)
    principal, sid = session_of(request)
    if principal is None or sid is None:
        back = page_url(request)
        response = render(
            "message.html",
            401,
            title="log in",
            principal=None,
            csrf="",
            message="not saved: your session has ended (the server may have restarted); "
            "log in again to go on. What you typed on a case stays in this browser.",
            link=(login_url(back), "log in again"),
            back=queue_back(request),
        )
        return push_url(request, response, back, replace=True)
    who = Reviewer(principal, sid)
    data = await read_form(request)
    if isinstance(data, tuple):
        status, reason = data
        title = "bad request" if status == 400 else "not saved"
        return message(request, who, status, title, f"{reason}; nothing was saved")
    if not service.sessions.check_csrf(sid, str(data.get("csrf", ""))):
        return message(
            request, who, 403, "forbidden", "missing or wrong CSRF token; reload the page"
        )
    if not allows(principal, "review"):
        return message(request, who, 403, "forbidden", "this needs the review role")
    names = [name for name, _ in data.multi_items()]
    if twice := sorted({name for name in names if names.count(name) > 1}):
        # No form of these pages sends a field twice (radio buttons send the one picked);
        # taking the last copy would save a decision the reviewer may not have meant.
        return message(
            request,
            who,
            422,
            "not saved",
            f"the form sends {', '.join(repr(n[:40]) for n in twice[:3])} more than once; "
            "nothing was saved",
        )
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
