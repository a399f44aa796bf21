"""A review case's page (``/review/case/{id}``) and its writes: resolve, claim, undo.

The page shows everything ``dissensus review show`` shows, side by side, with the options
labelled as the agents name them (:mod:`dissensus.serve.case_view`), and the resolve bar.
Every write goes through :class:`~dissensus.serve.journal_adapter.ReviewDesk`, as the API's.

Choices this module makes:

* A refused write (no option picked, a note missing, a stale page, another reviewer's
  claim, an item resolved meanwhile) shows the case page again with the reason, with 422
  for what the reviewer can fix on the form (a decision or note over the server's
  ``--max-field-chars`` included), 409 for a conflict and 503 for a busy or unreachable
  journal; a refused resolve shows the form as it was sent (the option picked, the
  answer typed, the note: ``kept``), so nothing typed is lost.
* **Conflicts first.** A resolve from a page opened earlier is checked for what no change
  to the form would cure before the form is: a case resolved meanwhile, its content
  changed since the page was shown, another reviewer's claim (409, in that order, as
  the journal checks them again when it writes). "Pick an option first" on a case
  someone else resolved would send the reviewer to fix a form that can no longer be
  sent.
* **Giving a claim up.** ``POST /review/case/{id}/release`` (``r``, the "give up claim"
  button shown to the claim's holder) drops the reviewer's own claim, as ``DELETE
  /v1/review/{id}/claim`` and ``dissensus review claim --release`` do; another
  reviewer's claim is refused (409 naming the holder).
* **j / k from a page opened earlier.** The case page's "next" and "previous" links
  (``j`` / ``k``) go to ``/review/case/{id}/next`` and ``.../previous`` (the queue's
  query kept), which work out the neighbour when they are followed
  (:func:`~dissensus.serve.queue_view.neighbours`) and redirect to it (303): a case
  resolved or claimed by another reviewer since the page was shown is stepped over, as
  it would be on a page shown now. With no such neighbour left they go to the queue's
  page where the case stands (:func:`~dissensus.serve.queue_view.queue_url`).
* **The undo button goes when its window does.** The case page offers to undo the
  reviewer's last resolution while ``--undo-window`` lasts, and tells the page how many
  milliseconds are left of it (``data-left-ms``); the page's script takes the button
  away then (``review.js``), so ``u u`` and the button are not offered past the window.
  A window longer than a browser's timer can wait (:data:`TIMER_MS_MAX`, about 24.8
  days: ``--undo-window`` takes up to ten years) sends no such number, and the button
  stays: a longer delay would have fired at once and taken it away at once.
  A claim shown on a case page ends there when it expires (``data-claim-left-ms``): the
  status says the case is open again and the holder's "give up claim" goes, so a page
  left open does not show a claim that holds nothing.
  A page left open used to keep the button: pressed later, it was refused and sent the
  reviewer from the case they were on to the one it named. An undo refused all the same
  (sent in the window's last moment, or from a second tab) is said on the page of the
  case the form was on (its ``from`` field), where the reviewer stays.
* After a resolve the page goes to the next open case of the same queue that nobody else
  holds (:func:`~dissensus.serve.queue_view.next_open`), or to the queue when none is left.
* **Another answer.** Besides the options, the resolve bar has a text field for a
  decision of the reviewer's own (``o`` focuses it), since the API's resolve takes any
  decision: a reviewer can reject every option, and a case where every agent abstained
  has no option at all (the field is then the only way to answer, and says so). An
  option picked and a different answer typed are refused (422), as on the blind audit
  form. The decision is journalled exactly as the API's resolve journals it: flagged
  ``outside_options`` when the item lists options and the answer is none of them (not
  when it lists none: there is nothing to be outside of), with the same content hash,
  claim and CSRF checks. An answer typed as the page shows an option (its label, such
  as "Output (a)", or its id; trimmed, ignoring case) is that option, journalled as its
  id (:func:`~dissensus.serve.journal_adapter.answer_for`, as the API's resolve reads
  it too), so it is judged against the suggestion as a pick of it would be; an answer
  naming two options labelled alike is refused (422). With no suggestion (every agent abstained) a typed answer
  overrides nothing, but ``--review-note override`` still asks for a note, since the
  decision then rests on the reviewer alone.
* **Off the event loop.** The case page, its ``j`` / ``k`` links and everything a form
  does (the checks before its write, the write, the page a refusal shows again, the next
  case after a resolve) read the journal and render in a worker thread: a long case
  takes a moment to read and render, and a journal that does not answer (a SQLite
  write lock another process holds, a PostgreSQL behind a silent network) held
  ``/healthz``, the chat door and every other page as long while it was read on the
  event loop.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse, Response
from pydantic import BaseModel

from dissensus.errors import DissensusError
from dissensus.pipeline.records import ReviewItem
from dissensus.pipeline.review import (
    AlreadyResolved,
    ReviewStatus,
    StaleContent,
    as_decision,
    item_decisions,
    refuse_others_claim,
)
from dissensus.quoting import quote_short
from dissensus.serve.case_view import (
    asked_view,
    option_views,
    options_named,
    plain_reasons,
    unread_answers,
)
from dissensus.serve.journal_adapter import (
    AmbiguousAnswer,
    TextTooLong,
    UnknownItem,
    answer_for,
    content_sha256,
)
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
from dissensus.serve.queue_view import QueueView, neighbours, next_open, progress, queue_url

__all__ = ["router"]

router = APIRouter(include_in_schema=False)
post_only(
    router,
    "/review/case/{review_id}/resolve",
    "/review/case/{review_id}/claim",
    "/review/case/{review_id}/release",
    "/review/undo",
)

NO_NOTE = "(no note: agrees with the panel's suggestion)"
"""The note journalled with a resolution the reviewer gave none for, of the suggestion."""

NO_NOTE_GIVEN = "(no note)"
"""The note journalled with a resolution the reviewer gave none for that is not the
panel's suggestion (``--review-note never`` asks for none)."""


def _plain(value: BaseModel | None) -> dict[str, Any] | None:
    # A typed part of the review item as the JSON the template reads, passed through untouched.
    return None if value is None else value.model_dump(mode="json")


def case_page(
    request: Request,
    review_id: str,
    who: Reviewer,
    *,
    error: str | None = None,
    status: int = 200,
    kept: dict[str, str] | None = None,
) -> Response:
    """The case page of ``review_id`` (:class:`UnknownItem` when there is none), its
    resolve form filled with ``kept`` (a refused form's ``decision``, ``other``, ``note``)."""
    service = service_of(request)
    desk = service.desk
    view = QueueView.of(request)
    found = desk.status(review_id)
    item = found.item
    resolution = desk.resolution(review_id)
    prev_id, next_id = neighbours(request, review_id, view, who.principal.name)
    scores = {s.agent: s.score for s in item.acceptance.signals} if item.acceptance else {}
    options = option_views(
        item.options,
        item.panel,
        [(p.agent, p.decision, p.reasoning) for p in item.positions],
        item.suggestion,
    )
    undo_window = service.settings.undo_window_s
    undo = desk.last_resolution(who.principal.name, undo_window)
    claim = desk.live_claim(review_id) if resolution is None else None
    return case_render(
        request,
        who,
        "case.html",
        status,
        f"/review/case/{review_id}{view.suffix()}",
        title=f"case {item.review_id}",
        item=item,
        asked=asked_view(item.panel),
        unread=unread_answers(
            item.panel, [(p.agent, p.decision, p.reasoning) for p in item.positions]
        ),
        **option_context(options),
        plain=plain_reasons(
            item.reason, options, sum(1 for p in item.positions if p.decision is None)
        ),
        scores=scores,
        # The hash the resolve checks against (the journalled payload's): an item an
        # early version journalled without fields the model now defaults hashes otherwise.
        sha256=found.content_sha256 or content_sha256(item),
        resolution=resolution,
        claim=claim,
        claim_left_ms=None if claim is None else _ms_until(claim.expires),
        history=desk.history(review_id),
        prev_id=prev_id,
        next_id=next_id,
        qs=view.suffix(),
        queue_url=queue_url(request, review_id, view),
        progress=progress(request, review_id, view, who.principal.name),
        note_policy=service.settings.review_note,
        undo=undo,
        undo_left_ms=None if undo is None else _left_ms(undo.at, undo_window),
        error=error,
        kept=kept or {},
        packet=_plain(item.packet),
        concord=_plain(item.concord),
        reading=_plain(item.reading) or {},
    )


TIMER_MS_MAX = 2**31 - 1
"""The longest delay a browser's ``setTimeout`` waits (about 24.8 days): a longer one
fires at once."""


def _left_ms(at: str, window_s: float) -> int | None:
    """Milliseconds left of the undo window of a resolution journalled ``at``; ``None``
    when more than a browser's timer can wait (the page then keeps the button)."""
    return _ms_to(datetime.fromisoformat(at).timestamp() + window_s)


def _ms_until(expires: str) -> int | None:
    """Milliseconds until a claim that ``expires`` (ISO time) ends; ``None`` when more
    than a browser's timer can wait (the page then says the claim until a reload)."""
    return _ms_to(datetime.fromisoformat(expires).timestamp())


def _ms_to(ends: float) -> int | None:
    left = (ends - datetime.now(UTC).timestamp()) * 1000
    if not left < TIMER_MS_MAX:  # an infinite window too
        return None
    return max(0, int(left))


def _note_required(request: Request, decision: str, suggestion: str | None) -> bool:
    policy = service_of(request).settings.review_note
    if policy == "always":
        return True
    if policy == "never":
        return False
    return decision != suggestion


def _back_to_case(request: Request, review_id: str) -> Response:
    return RedirectResponse(
        f"/review/case/{review_id}{QueueView.of(request).suffix()}", status_code=303
    )


async def _step(request: Request, review_id: str, *, forward: bool) -> Response:
    """To the case after (``forward``) or before ``review_id`` in the queue as it stands
    now, else to the queue's page (see the module docstring)."""
    who = require_login(request)
    if not isinstance(who, Reviewer):
        return who
    target = await run_in_threadpool(_step_target, request, review_id, who, forward)
    return RedirectResponse(target, status_code=303)


def _step_target(request: Request, review_id: str, who: Reviewer, forward: bool) -> str:
    """Where :func:`_step` goes (read in a worker thread)."""
    view = QueueView.of(request)
    before, after = neighbours(request, review_id, view, who.principal.name)
    target = after if forward else before
    if target is None:
        return queue_url(request, review_id, view)
    return f"/review/case/{target}{view.suffix()}"


@router.get("/review/case/{review_id}/next")
async def next_case(request: Request, review_id: str) -> Response:
    return await _step(request, review_id, forward=True)


@router.get("/review/case/{review_id}/previous")
async def previous_case(request: Request, review_id: str) -> Response:
    return await _step(request, review_id, forward=False)


@router.get("/review/case/{review_id}")
async def case(request: Request, review_id: str) -> Response:
    who = require_login(request)
    if not isinstance(who, Reviewer):
        return who
    return await run_in_threadpool(
        or_not_found, request, who, lambda: case_page(request, review_id, who)
    )


def _refuse_conflicts(request: Request, status: ReviewStatus, form: Form) -> None:
    """Raise what refuses resolving ``status``'s case whatever the form holds (see the
    module docstring): :class:`AlreadyResolved`, :class:`StaleContent`, a claim conflict."""
    review_id = status.item.review_id
    done = status.resolution
    if done is not None:
        raise AlreadyResolved(
            review_id, reviewer=done.reviewer, at=status.resolved_at or "?", decision=done.decision
        )
    quoted = str(form.data.get("content_sha256", ""))
    if quoted != status.content_sha256:
        raise StaleContent(review_id, quoted=quoted, current=status.content_sha256)
    journal = service_of(request).desk.journal
    refuse_others_claim(journal, review_id, form.principal.name, f"review item {review_id}")


def _resolve(request: Request, review_id: str, form: Form) -> Response | None:
    """Journal the form's resolution: ``None`` once journalled, else the page refusing it
    (:class:`UnknownItem` and the desk's conflicts are raised)."""
    service, who, kept = service_of(request), form.reviewer, form.kept()
    status = service.desk.status(review_id)
    _refuse_conflicts(request, status, form)
    item = status.item
    # The option picked is its id exactly ("yes " stays "yes "); anything else trimmed.
    picked, other = as_decision(form.pick(), item_decisions(item)), form.text("other")
    # An answer typed as an option reads ("Output (a)", its id) is that option; one that
    # is an option's own id and another's shown form (literal "yes\\x20" beside "yes ",
    # shown yes\\x20) names both, refused.
    if other and item.options:
        _refuse_two_read_alike(item, other)
    other = answer_for(item, other) if other else other
    if not (picked or other):
        why = (
            "pick an option (1-9) or type another answer (o) first"
            if item.options
            else "type the decision (o) first: no agent gave an answer"
        )
        if kept["decision"]:  # an option of white space only, which no decision may be
            why = (
                "the option picked is white space only, which no decision may be: "
                "type the answer (o) instead"
            )
        return case_page(request, review_id, who, error=why, status=422, kept=kept)
    if picked and other and picked != other:
        why = "pick an option or type another answer, not both"
        return case_page(request, review_id, who, error=why, status=422, kept=kept)
    decision = picked or other
    note = form.text("note")
    if not note and _note_required(request, decision, item.suggestion):
        why = (
            "write a note (n) first"
            if service.settings.review_note == "always"
            else "write a note (n): you are overriding the panel's suggestion"
            if item.suggestion is not None
            else "write a note (n): the panel suggests nothing, so say why"
        )
        return case_page(request, review_id, who, error=why, status=422, kept=kept)
    service.desk.resolve(
        review_id,
        decision=decision,
        note=note or (NO_NOTE if decision == item.suggestion else NO_NOTE_GIVEN),
        reviewer=form.principal.name,
        sha256=str(form.data.get("content_sha256", "")),
    )
    return None


def _refuse_two_read_alike(item: ReviewItem, typed: str) -> None:
    """:class:`AmbiguousAnswer` when the answer ``typed`` into the page names more than
    one of ``item``'s options as read (:func:`options_named`, ``typed``)."""
    positions = [(p.agent, p.decision, p.reasoning) for p in item.positions]
    views = option_views(item.options, item.panel, positions, None)
    named = options_named(typed, views, typed=True)
    if len(named) > 1:
        listed = ", ".join(quote_short(i) for i in named[:5])
        raise AmbiguousAnswer(
            f"{quote_short(typed)} names more than one option ({listed}): pick the option "
            "itself, or type it as the page shows it",
            field="decision",
        )


@router.post("/review/case/{review_id}/resolve")
async def resolve(request: Request, review_id: str) -> Response:
    form = await checked_form(request)
    if not isinstance(form, Form):
        return form
    return await run_in_threadpool(_resolved, request, review_id, form)


def _resolved(request: Request, review_id: str, form: Form) -> Response:
    """The answer to a resolve form: the next open case once journalled, else the page
    refusing it (in a worker thread, as every step reads the journal)."""
    try:
        refused = _resolve(request, review_id, form)
    except UnknownItem as exc:
        return message(request, form.reviewer, 404, "not found", str(exc))
    except (TextTooLong, AmbiguousAnswer) as exc:  # the reviewer can fix it on the form
        return case_page(
            request, review_id, form.reviewer, error=str(exc), status=422, kept=form.kept()
        )
    except DissensusError as exc:
        status, text = refused_by(request, exc)
        return case_page(
            request, review_id, form.reviewer, error=text, status=status, kept=form.kept()
        )
    if refused is not None:
        return refused
    view = QueueView.of(request)
    target = next_open(request, review_id, view, form.principal.name)
    if target is None:
        return RedirectResponse(f"/review{view.suffix()}", status_code=303)
    return RedirectResponse(f"/review/case/{target}{view.suffix()}", status_code=303)


@router.post("/review/undo")
async def undo(request: Request) -> Response:
    form = await checked_form(request)
    if not isinstance(form, Form):
        return form
    return await run_in_threadpool(_undone, request, form)


def _undone(request: Request, form: Form) -> Response:
    """The answer to an undo form: back to the case reopened, else the page refusing it
    (in a worker thread)."""
    service = service_of(request)
    review_id = str(form.data.get("review_id", ""))
    try:
        service.desk.undo(
            review_id, reviewer=form.principal.name, within_s=service.settings.undo_window_s
        )
    except UnknownItem as exc:
        return message(request, form.reviewer, 404, "not found", str(exc))
    except DissensusError as exc:
        status, text = refused_by(request, exc)
        here = str(form.data.get("from") or review_id)  # the page the reviewer is on
        try:
            return case_page(request, here, form.reviewer, error=text, status=status)
        except UnknownItem:
            return case_page(request, review_id, form.reviewer, error=text, status=status)
    return _back_to_case(request, review_id)


async def _on_claim(request: Request, review_id: str, act: Callable[[str], object]) -> Response:
    """Take or give up (``act(reviewer)``) the claim on a case, then back to its page."""
    form = await checked_form(request)
    if not isinstance(form, Form):
        return form
    return await run_in_threadpool(_claimed, request, review_id, form, act)


def _claimed(
    request: Request, review_id: str, form: Form, act: Callable[[str], object]
) -> Response:
    """:func:`_on_claim`'s answer once the form is checked (in a worker thread)."""
    try:
        act(form.principal.name)
    except UnknownItem as exc:
        return message(request, form.reviewer, 404, "not found", str(exc))
    except DissensusError as exc:
        status, text = refused_by(request, exc)
        return case_page(request, review_id, form.reviewer, error=text, status=status)
    return _back_to_case(request, review_id)


@router.post("/review/case/{review_id}/claim")
async def claim(request: Request, review_id: str) -> Response:
    desk = service_of(request).desk

    def take(who: str) -> None:
        desk.status(review_id)  # a case page's: an audit is claimed from its own page
        desk.claim(review_id, who)

    return await _on_claim(request, review_id, take)


@router.post("/review/case/{review_id}/release")
async def release(request: Request, review_id: str) -> Response:
    desk = service_of(request).desk

    def give_up(who: str) -> None:
        desk.status(review_id)  # a case page's: not an audit's
        desk.release(review_id, who)

    return await _on_claim(request, review_id, give_up)
