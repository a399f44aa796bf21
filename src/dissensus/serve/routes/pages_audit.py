"""The audit pages: an automatic decision and its audit form (``/review/auto/{run}.{line}``),
and a blind audit with the form answering it (``/review/audit/{run}.{line}``,
:mod:`dissensus.serve.blind_audits`). Both answers are journalled by
:meth:`~dissensus.serve.journal_adapter.ReviewDesk.confirm` (``dissensus review confirm``).

Choices this module makes:

* The committed answer stays hidden while a blind audit is open: the automatic-decision
  page of such a case sends the reviewer to the blind form, and its audit form refuses
  with 409.
* An answer typed in either form as the page shows an option (its label or its id,
  trimmed, ignoring case) is that option, journalled as its id
  (:meth:`~dissensus.serve.journal_adapter.ReviewDesk.audit_answer`): it confirms the
  committed answer when that is the option, rather than "correcting" it with the same
  answer spelled as its label.
* Both forms require a note; the automatic-decision form's empty decision confirms the
  committed one, the blind form has no default (an option picked, or another answer
  typed, not both).
* The automatic-decision form offers every option the panel lists (``meta.options``, in
  its order), then any other answer an agent gave, so a reviewer can correct a panel
  that agreed on the wrong option by picking the right one, not only by typing it.
* After an answer the page goes to the next automatic decision left (from the first), or
  to the next open blind audit after this one in the list's order (else the first one
  left), or to the list when none is left; in both lists, and for ``j`` / ``k`` among
  the open blind audits, skipping those another reviewer holds a claim on. The lists
  are the ones the reviewer came from: their search and order travel in the query
  string, as the queue's do (:func:`~dissensus.serve.queue_view.audit_list`,
  :func:`~dissensus.serve.queue_view.next_auto`), and so does the progress line's count.
* **j / k from a page opened earlier.** A blind audit's "next" and "previous" links go
  to ``/review/audit/{ref}/next`` and ``.../previous`` (the list's query kept), which
  work out the neighbour when they are followed and redirect to it (303), as a case
  page's do: an audit answered or claimed by another reviewer since the page was shown
  is stepped over. With none left they go to the list.
* **Conflicts first.** An answer from a page opened earlier is checked for what no
  change to the form would cure before the form is (an audit journalled meanwhile,
  another reviewer's claim: 409, :func:`~dissensus.pipeline.confirm.refuse_conflicts`),
  as a case page's resolve is: "write a note" on a case someone else audited would send
  the reviewer to fix a form that can no longer be sent.
* **Claims on audits.** An audit (:func:`dissensus.pipeline.confirm.confirm`) is refused
  while another reviewer holds a live claim on ``<run>.<line>``, so the pages let a
  reviewer take that claim (``c``, ``POST /review/auto/{ref}/claim`` or
  ``/review/audit/{ref}/claim``, the API's ``POST /v1/review/{ref}/claim``), show who
  holds one, and walk the lists around the audits others hold, as the queue of
  escalations does. A team working through the audits together would otherwise open
  the same case, and all but one of them would find their answer refused ("already
  audited") after doing the work; a blind audit is the costlier case, since it asks for
  a decision from scratch. Claiming is explicit, as on a case page: opening a page
  claims nothing, so looking costs nobody a case. A claim reveals nothing of the
  committed answer, so a blind audit can be claimed while it is open; a refused claim on
  such a case shows the blind page, never the automatic decision's.
* **Giving a claim up.** ``POST /review/auto/{ref}/release`` and
  ``/review/audit/{ref}/release`` (``r``, the "give up claim" button shown to the claim's
  holder) drop the reviewer's own claim on the audit through the same
  :meth:`~dissensus.serve.journal_adapter.ReviewDesk.release` as a case page's, ``DELETE
  /v1/review/{ref}/claim`` and ``dissensus review claim --release`` (the journal keeps
  one claim per ``<run>.<line>``, whether on a case or an audit); another reviewer's
  claim is refused (409 naming the holder). Claiming and giving up from these pages take
  only the reference of an automatic decision (of a blind audit on the blind page), so
  neither touches the claim on an escalated case.
* **Refusals keep the form.** A refused audit (422 for a missing pick or note or a text
  over the server's ``--max-field-chars``, 409 for another reviewer's claim, 503 for a
  busy journal) shows the page again with the form as it was sent (the option picked,
  the answer typed, the note: ``kept``, as on a case page), the automatic decision's
  audit form unfolded; nothing typed is lost. A blind audit answered meanwhile has no
  form any more: the answer sent is shown as a "Not saved, what you sent" line under
  the standing answer, as a case resolved meanwhile shows it.
* **Off the event loop.** Both pages, a blind audit's ``j`` / ``k`` links and
  everything a form does (the checks before its write, the write, the page a refusal
  shows again, the next audit after it) read the journal in a worker thread, as the case
  page does (:mod:`~dissensus.serve.routes.pages_case`): a journal that does not answer
  holds that request only, never ``/healthz`` or another reviewer's page.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse, Response

from dissensus.cases import option_ids
from dissensus.errors import DissensusError
from dissensus.pipeline.confirm import refuse_conflicts
from dissensus.serve.blind_audits import blind_audit, has_open_audit
from dissensus.serve.case_view import asked_view, option_views
from dissensus.serve.journal_adapter import AmbiguousAnswer, TextTooLong, UnknownItem
from dissensus.serve.pages import (
    Form,
    Reviewer,
    case_render,
    checked_form,
    message,
    option_context,
    or_not_found,
    post_only,
    refused_by,
    require_login,
    service_of,
)
from dissensus.serve.queue_view import QueueView, audit_list, audits_url, next_auto, unclaimed

__all__ = ["router"]

router = APIRouter(include_in_schema=False)
post_only(
    router,
    "/review/auto/{ref}/confirm",
    "/review/auto/{ref}/claim",
    "/review/auto/{ref}/release",
    "/review/audit/{ref}/answer",
    "/review/audit/{ref}/claim",
    "/review/audit/{ref}/release",
)

Page = Callable[..., Response]
"""A page renderer: ``(request, ref, reviewer, *, error=None, status=200, kept=None)``."""


def auto_page(
    request: Request,
    ref: str,
    who: Reviewer,
    *,
    error: str | None = None,
    status: int = 200,
    kept: dict[str, str] | None = None,
) -> Response:
    """An automatic decision and its audit form (:class:`UnknownItem` for any other ref),
    the form filled with ``kept`` (a refused form's ``decision``, ``other``, ``note``;
    else the committed decision picked)."""
    service = service_of(request)
    view = QueueView.of(request)
    got = service.desk.auto_case(ref)
    outputs = [o for o in got.panel.get("outputs") or [] if isinstance(o, dict)]
    positions = [
        (str(o.get("agent", "?")), o.get("decision"), str(o.get("reasoning", ""))) for o in outputs
    ]
    # The panel's options in its order, then any other answer an agent (or the decision) gave.
    meta = got.panel.get("meta")
    listed = option_ids(meta if isinstance(meta, dict) else None)
    chosen = {str(d) for _, d, _ in positions if d is not None} | {got.record.decision or ""}
    ids = listed + sorted(i for i in chosen - set(listed) if i)
    options = option_views(ids, got.panel, positions, got.record.decision)
    return case_render(
        request,
        who,
        "auto.html",
        status,
        f"/review/auto/{ref}{view.suffix()}",
        title=f"automatic decision {ref}",
        case=got,
        asked=asked_view(got.panel),
        positions=positions,
        claim=None if got.audit else service.desk.live_claim(ref),
        qs=view.suffix(),
        error=error,
        kept=kept or {},
        **option_context(options),
    )


def audit_page(
    request: Request,
    ref: str,
    who: Reviewer,
    *,
    error: str | None = None,
    status: int = 200,
    kept: dict[str, str] | None = None,
) -> Response:
    """A blind audit and the form answering it (:class:`UnknownItem` when not audited),
    the form filled with ``kept`` (a refused form's ``decision``, ``other``, ``note``)."""
    service = service_of(request)
    view = QueueView.of(request)
    got = blind_audit(service.journal, ref)
    item = got.item
    options = option_views(
        item.options,
        item.panel,
        [(p.agent, p.decision, p.reasoning) for p in item.positions],
        None,
    )
    refs = audit_list(request, view)
    i = refs.index(ref) if ref in refs else None
    before, after = _neighbours(request, refs, ref, who.principal.name)
    return case_render(
        request,
        who,
        "audit.html",
        status,
        f"/review/audit/{ref}{view.suffix()}",
        title=f"blind audit {ref}",
        audit=got,
        item=item,
        answer=got.answer,
        asked=asked_view(item.panel),
        claim=None if got.answer else service.desk.live_claim(ref),
        prev_id=before[-1] if before else None,
        next_id=after[0] if after else None,
        position=None if i is None else i + 1,
        open_count=len(refs),
        qs=view.suffix(),
        list_url=audits_url(view, None if i is None else i + 1),
        error=error,
        kept=kept or {},
        **option_context(options),
    )


def _neighbours(
    request: Request, refs: list[str], ref: str, me: str
) -> tuple[list[str], list[str]]:
    """The open audits before and after ``ref`` in ``refs`` that nobody else holds."""
    i = refs.index(ref) if ref in refs else None
    before = unclaimed(request, refs[:i], me) if i else []
    after = unclaimed(request, refs[i + 1 :], me) if i is not None else []
    return before, after


async def _step(request: Request, ref: str, *, forward: bool) -> Response:
    """To the open audit after (``forward``) or before ``ref`` in the list as it stands
    now, else to the list (see the module docstring)."""
    who = require_login(request)
    if not isinstance(who, Reviewer):
        return who
    target = await run_in_threadpool(_step_target, request, ref, who, forward)
    return RedirectResponse(target, status_code=303)


def _step_target(request: Request, ref: str, who: Reviewer, forward: bool) -> str:
    """Where :func:`_step` goes (read in a worker thread)."""
    view = QueueView.of(request)
    refs = audit_list(request, view)
    before, after = _neighbours(request, refs, ref, who.principal.name)
    target = after[:1] if forward else before[-1:]
    if not target:
        position = refs.index(ref) + 1 if ref in refs else None
        return audits_url(view, position)
    return f"/review/audit/{target[0]}{view.suffix()}"


@router.get("/review/audit/{ref}/next")
async def next_audit(request: Request, ref: str) -> Response:
    return await _step(request, ref, forward=True)


@router.get("/review/audit/{ref}/previous")
async def previous_audit(request: Request, ref: str) -> Response:
    return await _step(request, ref, forward=False)


def _confirm(
    request: Request,
    ref: str,
    form: Form,
    page: Page,
    refusal: Callable[[], str | None],
    decision: str | None,
) -> Response | None:
    """Journal the form's audit of ``ref``: ``None`` once journalled, else the page
    refusing it. ``refusal()`` checks the case (raising :class:`UnknownItem`) and names
    what the form lacks (422); an unknown case is 404, a refused audit 409. A refused
    form is shown again as it was sent."""
    who, kept = form.reviewer, form.kept()
    try:
        why = refusal()
        if why is not None:
            return page(request, ref, who, error=why, status=422, kept=kept)
        service_of(request).desk.confirm(
            ref, decision=decision, note=form.text("note"), reviewer=form.principal.name
        )
    except UnknownItem as exc:
        return message(request, who, 404, "not found", str(exc))
    except (TextTooLong, AmbiguousAnswer) as exc:  # the reviewer can fix it on the form
        return page(request, ref, who, error=str(exc), status=422, kept=kept)
    except DissensusError as exc:
        status, text = refused_by(request, exc)
        return page(request, ref, who, error=text, status=status, kept=kept)
    return None


@router.get("/review/auto/{ref}")
async def auto_case(request: Request, ref: str) -> Response:
    who = require_login(request)
    if not isinstance(who, Reviewer):
        return who
    return await run_in_threadpool(_auto_shown, request, ref, who)


def _auto_shown(request: Request, ref: str, who: Reviewer) -> Response:
    """An automatic decision's page, or its blind audit's while one is open (in a worker
    thread)."""
    if has_open_audit(service_of(request).journal, ref):
        view = QueueView.of(request)
        return RedirectResponse(f"/review/audit/{ref}{view.suffix()}", status_code=303)
    return or_not_found(request, who, lambda: auto_page(request, ref, who))


@router.post("/review/auto/{ref}/confirm")
async def auto_confirm(request: Request, ref: str) -> Response:
    form = await checked_form(request)
    if not isinstance(form, Form):
        return form
    return await run_in_threadpool(_auto_confirmed, request, ref, form)


def _auto_confirmed(request: Request, ref: str, form: Form) -> Response:
    """The answer to an automatic decision's audit form (in a worker thread)."""
    service = service_of(request)
    if has_open_audit(service.journal, ref):
        why = f"case {ref} waits for a blind audit: answer it at /review/audit/{ref}"
        return message(request, form.reviewer, 409, "blind audit", why)

    # The right answer may be none of the listed ones (a free-form panel: a number no
    # member gave): a typed answer replaces the pick, which defaults to the committed one.
    other = form.text("other")

    def refusal() -> str | None:
        service.desk.auto_case(ref)
        refuse_conflicts(service.journal, ref, form.principal.name)
        return None if form.text("note") else "write a note: an audit says why"

    picked = other or form.pick() or None  # an option's id exactly: "yes " stays "yes "
    refused = _confirm(request, ref, form, auto_page, refusal, picked)
    if refused is not None:
        return refused
    view = QueueView.of(request)
    left = next_auto(request, view, form.principal.name)
    target = f"/review/auto/{left}" if left else "/review"
    return RedirectResponse(target + view.suffix(), status_code=303)


@router.get("/review/audit/{ref}")
async def audit_case(request: Request, ref: str) -> Response:
    who = require_login(request)
    if not isinstance(who, Reviewer):
        return who
    return await run_in_threadpool(
        or_not_found, request, who, lambda: audit_page(request, ref, who)
    )


@router.post("/review/audit/{ref}/answer")
async def audit_answer(request: Request, ref: str) -> Response:
    form = await checked_form(request)
    if not isinstance(form, Form):
        return form
    return await run_in_threadpool(_audit_answered, request, ref, form)


def _audit_answered(request: Request, ref: str, form: Form) -> Response:
    """The answer to a blind audit's form (in a worker thread)."""
    service = service_of(request)
    journal = service.journal
    picked, other = form.pick(), form.text("other")  # the option's id exactly, as sent
    view = QueueView.of(request)
    before = audit_list(request, view)

    def refusal() -> str | None:
        blind_audit(journal, ref)
        refuse_conflicts(journal, ref, form.principal.name)
        if not (picked or other):
            return "pick an option (1-9) or type another answer (o) first"
        # An answer typed as an option reads ("Output (a)", its id) is that option.
        if picked and other and picked != service.desk.audit_answer(ref, other):
            return "pick an option or type another answer, not both"
        return None if form.text("note") else "write a note (n): an audit says why"

    refused = _confirm(request, ref, form, audit_page, refusal, picked or other)
    if refused is not None:
        return refused
    left = unclaimed(request, audit_list(request, view), form.principal.name)
    if not left:
        return RedirectResponse(f"/review{view.audits_suffix()}", status_code=303)
    # The next open audit after this one in the list's order nobody else holds, else the
    # first such one left.
    i = before.index(ref) if ref in before else -1
    target = next((r for r in before[i + 1 :] if r in left), left[0])
    return RedirectResponse(f"/review/audit/{target}{view.suffix()}", status_code=303)


async def _claim(
    request: Request, ref: str, *, blind: bool | None, give_up: bool = False
) -> Response:
    """Claim the audit of ``ref`` (with ``give_up``, give the reviewer's claim on it up),
    then show its page again: the blind one when ``blind`` (``None``: while a blind audit
    of ``ref`` is open; a refused claim shows nothing of the committed answer there),
    else the automatic decision's."""
    form = await checked_form(request)
    if not isinstance(form, Form):
        return form
    return await run_in_threadpool(_claimed, request, ref, form, blind, give_up)


def _claimed(request: Request, ref: str, form: Form, blind: bool | None, give_up: bool) -> Response:
    """:func:`_claim`'s answer once the form is checked (in a worker thread)."""
    service = service_of(request)
    if blind is None:
        blind = has_open_audit(service.journal, ref)
    page: Page = audit_page if blind else auto_page
    try:
        if blind:
            blind_audit(service.journal, ref)
        else:
            service.desk.auto_case(ref)  # an audit's: not an escalated case's
        act = service.desk.release if give_up else service.desk.claim
        act(ref, form.principal.name)
    except UnknownItem as exc:
        return message(request, form.reviewer, 404, "not found", str(exc))
    except DissensusError as exc:
        status, text = refused_by(request, exc)
        return page(request, ref, form.reviewer, error=text, status=status)
    where = "audit" if blind else "auto"
    return RedirectResponse(
        f"/review/{where}/{ref}{QueueView.of(request).suffix()}", status_code=303
    )


@router.post("/review/auto/{ref}/claim")
async def auto_claim(request: Request, ref: str) -> Response:
    return await _claim(request, ref, blind=None)


@router.post("/review/audit/{ref}/claim")
async def audit_claim(request: Request, ref: str) -> Response:
    return await _claim(request, ref, blind=True)


@router.post("/review/auto/{ref}/release")
async def auto_release(request: Request, ref: str) -> Response:
    return await _claim(request, ref, blind=None, give_up=True)


@router.post("/review/audit/{ref}/release")
async def audit_release(request: Request, ref: str) -> Response:
    return await _claim(request, ref, blind=True, give_up=True)
