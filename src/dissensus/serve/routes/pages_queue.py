"""The review queue page (``GET /review``): the open, resolved or all cases of a queue
(:mod:`dissensus.serve.queue_view`), or the automatic decisions waiting for an audit, or
the open blind audits; and the acceptance monitor (:mod:`dissensus.serve.acceptance`).

Choices this module makes:

* **j from the queue.** The first row of the list shown that no other reviewer holds
  (a case, an automatic decision or a blind audit) is the queue page's ``next-link``,
  the link ``j`` follows on a case page: a reviewer at the keyboard starts or goes on
  from the queue with ``j`` instead of tabbing past the filters to the first row.
* Every list shows who holds a live claim on each open case or audit, and a resolved
  case's decision as its page names it (the option's label, and its id beside a label
  that differs).
* At most :data:`~dissensus.serve.queue_view.QUEUE_ROWS` rows are shown on a page;
  ``?page=2`` and on show the next ones (the filters kept, links under the list; a
  ``page`` that is not a number from 1 to 999,999 written in ASCII digits, e.g. ``²``
  or ``①``, which ``str.isdigit`` accepts and ``int`` does not, shows the first), and
  the count names them all (a text search of the automatic decisions or the blind audits reads each one
  to match it, so it counts one past the rows shown and says "at least"). The text search of the automatic decisions and of the blind audits matches
  the question and the case id (the reason is not shown there); their order is the
  journal's, newest first its reverse (:func:`~dissensus.serve.queue_view.listed`).
* **The run filter** is a text field: any run id can be typed (or pasted, or come in
  ``?run=``), and its suggestions (a ``datalist``, offered as the reviewer types or
  with the field's list key) are the :data:`RUN_CHOICES` newest decide runs, newest
  first, read through the runs' index, and the run filtered on. A journal behind the
  chat door holds a run per request: listing every run made the page grow with every
  request ever journalled (megabytes at a hundred thousand runs). A run id the journal
  does not hold shows an empty list saying so. The "run started" column reads the
  runs of the rows shown, one lookup each, not every run.
* The lists (a text search reads each item's text the first time), the run choices and the
  reviewer's count, and the monitor's confidence sequences, take a moment with a large
  journal: they are read and computed in worker threads, off the event loop, so
  ``/healthz`` and other requests are answered meanwhile.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from dissensus.pipeline.audit import MonitorRow
from dissensus.pipeline.batch import RUN_KIND
from dissensus.pipeline.records import Resolution, ReviewItem
from dissensus.serve.acceptance import monitor_rows
from dissensus.serve.blind_audits import blind_audit, open_audit_refs
from dissensus.serve.case_view import option_views
from dissensus.serve.journal_adapter import AutoCase, ClaimInfo, UnknownItem, question_of
from dissensus.serve.pages import Reviewer, render, require_login, service_of
from dissensus.serve.queue_view import (
    QUEUE_ROWS,
    QueueView,
    auto_refs,
    list_url,
    listed,
    statuses,
)
from dissensus.serve.service import Service
from dissensus.store import Journal, RunInfo

__all__ = ["RUN_CHOICES", "router"]

router = APIRouter(include_in_schema=False)

R = TypeVar("R")

RUN_CHOICES = 200
"""How many of the newest decide runs the run filter suggests (any other can be typed)."""


@dataclass(frozen=True)
class CaseRow:
    """A row of the queue of review cases."""

    item: ReviewItem
    resolution: Resolution | None
    claim: ClaimInfo | None
    question: str | None
    decided: str | None = None
    """How the case page names the resolution's decision (its option's label)."""


@dataclass(frozen=True)
class AutoRow:
    """A row of the automatic decisions waiting for an audit."""

    case: AutoCase
    question: str | None
    claim: ClaimInfo | None = None


@dataclass(frozen=True)
class AuditRow:
    """A row of the open blind audits."""

    item: ReviewItem
    question: str | None
    claim: ClaimInfo | None = None


_CASES = ("open", "resolved", "all")
"""The statuses listing review cases (the others list audits)."""


def _label(item: ReviewItem, decision: str) -> str:
    """The label of option ``decision`` as the case page shows it (the id when it has none)."""
    positions = [(p.agent, p.decision, p.reasoning) for p in item.positions]
    views = option_views(item.options, item.panel, positions, item.suggestion)
    return next((o.label for o in views if o.id == decision), decision)


def _case_rows(request: Request, view: QueueView, start: int) -> Listing[CaseRow]:
    order = view.order(request, view.status)
    page = order[start : start + QUEUE_ROWS]
    shown = {st.item.review_id: st for st in statuses(request, page)}
    claims = service_of(request).desk.live_claims([e.review_id for e in page if not e.resolved])
    rows = [
        CaseRow(
            item=st.item,
            resolution=st.resolution,
            claim=claims.get(e.review_id),
            question=question_of(st.item.panel),
            decided=_label(st.item, st.resolution.decision) if st.resolution else None,
        )
        for e in page
        if (st := shown.get(e.review_id)) is not None
    ]
    return Listing(rows, len(order))


@dataclass(frozen=True)
class Listing(Generic[R]):
    """The rows of one list shown, and how many the list holds."""

    rows: list[R]
    total: int
    """Rows in the whole list (cases, automatic decisions or audits)."""
    exact: bool = True
    """False when the search stopped counting past the rows shown: ``total`` is then a
    lower bound (the page says "at least")."""


def _matching(
    refs: list[str], row: Callable[[str], R], text: Callable[[R], str], q: str, start: int
) -> Listing[R]:
    """The :data:`QUEUE_ROWS` rows of ``refs`` from the ``start``-th on whose text contains
    ``q`` (any case), and how many there are: all of ``refs`` without ``q``; with it,
    counted up to one past the rows shown (each ref is read to be searched), so the
    total is exact when the last rows are shown and "at least" otherwise."""
    if not q:
        return Listing([row(ref) for ref in refs[start : start + QUEUE_ROWS]], len(refs))
    needle, seen = q.lower(), 0
    rows: list[R] = []
    for ref in refs:
        got = row(ref)
        if needle not in text(got).lower():
            continue
        seen += 1
        if seen > start + QUEUE_ROWS:
            return Listing(rows, seen, exact=False)
        if seen > start:
            rows.append(got)
    return Listing(rows, seen)


def _auto_rows(request: Request, view: QueueView, start: int) -> Listing[AutoRow]:
    desk = service_of(request).desk

    def row(ref: str) -> AutoRow:
        case = desk.auto_case(ref)
        return AutoRow(case=case, question=question_of(case.panel) or None)

    def rows() -> Listing[AutoRow]:
        refs = listed(auto_refs(request, view.run or None), view)
        return _matching(
            refs, row, lambda r: f"{r.question or ''} {r.case.record.id}", view.q, start
        )

    try:
        got = rows()
    except UnknownItem:  # a listed case the journal no longer holds (restored): read again
        desk.forget()
        got = rows()
    claims = desk.live_claims([r.case.ref for r in got.rows])
    return replace(got, rows=[replace(r, claim=claims.get(r.case.ref)) for r in got.rows])


def _audit_rows(request: Request, view: QueueView, start: int) -> Listing[AuditRow]:
    journal = service_of(request).journal

    def row(ref: str) -> AuditRow:
        item = blind_audit(journal, ref).item
        return AuditRow(item=item, question=question_of(item.panel) or None)

    refs = listed(open_audit_refs(journal, view.run or None), view)
    got = _matching(refs, row, lambda r: f"{r.question or ''} {r.item.id}", view.q, start)
    claims = service_of(request).desk.live_claims([r.item.review_id for r in got.rows])
    return replace(got, rows=[replace(r, claim=claims.get(r.item.review_id)) for r in got.rows])


_PAGE = re.compile(r"0*([1-9][0-9]{0,5})")
"""A page number: ASCII digits, below a million once leading zeros are dropped."""


def _page(request: Request) -> int:
    """The page of the list asked for (``?page=``, from 1 up to 999,999); anything else
    (Unicode digits such as ``²``, longer numbers, signs, spaces) is the first."""
    found = _PAGE.fullmatch(request.query_params.get("page", "1"))
    return int(found.group(1)) if found else 1


@router.get("/review")
async def queue(request: Request) -> Response:
    who = require_login(request)
    if not isinstance(who, Reviewer):
        return who
    view = QueueView.of(request)
    service = service_of(request)
    page = _page(request)
    start = (page - 1) * QUEUE_ROWS
    lists = await run_in_threadpool(_lists, request, view, start, who.principal.name)
    cases, auto, audits = lists.cases, lists.auto, lists.audits
    shown = auto if view.status == "automatic" else audits if view.status == "audits" else cases
    more = not shown.exact or start + len(shown.rows) < shown.total
    back = page - 1
    if not shown.rows and shown.exact and page > 1:  # past the end: back to the last page
        back = min(back, max(1, -(-shown.total // QUEUE_ROWS)))
    monitor, monitor_error = await run_in_threadpool(_monitor, service)
    return render(
        "queue.html",
        created=lists.created,
        title="review queue",
        principal=who.principal,
        csrf=service.sessions.csrf(who.sid),
        rows=cases.rows,
        total=shown.total,
        total_exact=shown.exact,
        shown=len(shown.rows),
        page=page,
        first_row=start + 1,
        prev_page=list_url(view, back) if page > 1 else None,
        next_page=list_url(view, page + 1) if more else None,
        auto_rows=auto.rows,
        audit_rows=audits.rows,
        monitor=monitor or [],
        monitor_error=monitor_error,
        current_sha256=(service.spec.acceptance or {}).get("sha256"),
        runs=lists.runs,
        run_known=lists.run_known,
        filters=view,
        qs=view.suffix(),
        today=lists.today,
    )


def _monitor(service: Service) -> tuple[list[MonitorRow] | None, str | None]:
    """The acceptance monitor's rows, over the acceptance files the desk keeps (read in a
    worker thread)."""
    return monitor_rows(service.journal, files=service.desk.acceptance_files())


@dataclass(frozen=True)
class _Lists:
    """What the queue page reads of the journal (:func:`_lists`)."""

    cases: Listing[CaseRow]
    auto: Listing[AutoRow]
    audits: Listing[AuditRow]
    runs: list[str]
    """The run filter's suggestions: the :data:`RUN_CHOICES` newest decide runs, newest
    first, and the run filtered on."""
    created: dict[str, str]
    """When each run of the case rows shown was started."""
    run_known: bool
    """Whether the journal holds the run filtered on (true without one)."""
    today: int
    """The cases the reviewer resolved today."""


def _lists(request: Request, view: QueueView, start: int, reviewer: str) -> _Lists:
    """The queue page's lists from the ``start``-th row, its runs and the reviewer's count
    of today, read in a worker thread (see the module docstring)."""
    journal = service_of(request).journal
    filtered = journal.run(view.run, missing_ok=True) if view.run else None
    known = not view.run or filtered is not None
    status = view.status if known else ""
    cases = _case_rows(request, view, start) if status in _CASES else Listing([], 0)
    runs = [info.run_id for info in journal.newest_runs(RUN_CHOICES, kind=RUN_KIND)]
    if filtered is not None and filtered.run_id not in runs:
        runs.append(filtered.run_id)
    started = {info.run_id: info for info in _runs_of(journal, cases.rows)}
    return _Lists(
        cases=cases,
        auto=_auto_rows(request, view, start) if status == "automatic" else Listing([], 0),
        audits=_audit_rows(request, view, start) if status == "audits" else Listing([], 0),
        runs=runs,
        created={run_id: info.created for run_id, info in started.items()},
        run_known=known,
        today=service_of(request).desk.resolved_today(reviewer),
    )


def _runs_of(journal: Journal, rows: list[CaseRow]) -> list[RunInfo]:
    """The headers of the runs of ``rows`` (one lookup per run, at most one per row)."""
    found = (journal.run(run_id, missing_ok=True) for run_id in {r.item.run_id for r in rows})
    return [info for info in found if info is not None]
