"""The queue a reviewer walks through on the review pages: its filters and order (from the
query string), the cases before and after one, the next open case, and the progress line.

Choices this module makes:

* The filters and order travel in every page's query string, so ``j`` / ``k`` and the
  redirect after a resolve stay in the queue the reviewer came from; defaults are left
  out of the query string, and an unknown status or order is the default one.
* Moving through the queue (``j`` / ``k``) walks the cases of its status: the open queue
  its open cases (a case resolved meanwhile, by anyone, is stepped over), the resolved
  queue its resolved cases, ``all`` both; it skips open cases another reviewer holds a
  claim on. A case outside the queue's filters has no neighbours. The
  lists of audits (automatic decisions, open blind audits) are walked the same way
  (:func:`unclaimed`), in the list's search and order (:func:`audit_list`,
  :func:`next_auto`): the search matches the question and the case id, newest first
  reverses the journal's order, and "by reason" keeps it, since these lists show no
  reason (a blind audit's is the same for every one).
* The queue's order is read once per request (:meth:`QueueView.order`): the case page's
  neighbours and progress and a resolve's next case share it. A write in the same
  request after it was read would not show in it; no route writes after reading it.
* **Back to the queue's page.** A case page's "queue" link, and a blind audit's link
  back to its list, go to the page of the list the case is on (:func:`queue_url`,
  ``?page=N`` of :data:`QUEUE_ROWS` rows each): the 501st case of its queue links to
  page 2. A case not of the queue's status (one resolved meanwhile, seen from the open
  queue) links to the page where it would stand, by the cases of that status before
  it; a case outside the queue's filters to the first.
* The automatic decisions listed for an audit leave out those waiting for a blind audit:
  their committed answer stays hidden until the blind audit is answered. Which those
  are is read from the ``review.audit`` events (few: a sample), and only the cases
  holding one are asked whether it was answered, not each automatic decision.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlencode

from fastapi import Request

from dissensus.pipeline.audit import AUDIT_OPENED, open_audits
from dissensus.pipeline.review import ReviewStatus
from dissensus.serve.blind_audits import has_open_audit
from dissensus.serve.journal_adapter import QueueEntry, QueueSort, UnknownItem, question_of
from dissensus.serve.pages import service_of

__all__ = [
    "QUEUE_ROWS",
    "Progress",
    "QueueView",
    "audit_list",
    "audits_url",
    "auto_refs",
    "list_url",
    "listed",
    "matches",
    "neighbours",
    "next_auto",
    "next_open",
    "progress",
    "queue_url",
    "statuses",
    "unclaimed",
]

QUEUE_ROWS = 500
"""Rows the queue page shows (the count names them all; filters narrow the list)."""

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

    def audits_suffix(self) -> str:
        """The query string of the list of open blind audits (this queue's run, search and
        order)."""
        return QueueView(status="audits", run=self.run, q=self.q, sort=self.sort).suffix()

    def order(self, request: Request, status: str) -> list[QueueEntry]:
        """The queue's entries with ``status`` in its order, worked out once per request
        (a case page asks for its neighbours and its progress, a resolve for the next
        case: one reading of the queue serves them all; the open or resolved entries are
        taken from all of them when those were read already)."""
        memo: dict[tuple[QueueView, str], list[QueueEntry]] = (
            getattr(request.state, "queue_orders", None) or {}
        )
        request.state.queue_orders = memo
        if (self, status) in memo:
            return memo[(self, status)]
        every = memo.get((self, "all"))
        if every is not None and status in ("open", "resolved"):
            got = [e for e in every if e.resolved == (status == "resolved")]
        else:
            got = self._order(request, status)
        memo[(self, status)] = got
        return got

    def _order(self, request: Request, status: str) -> list[QueueEntry]:
        desk = service_of(request).desk
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


@dataclass(frozen=True)
class Progress:
    """Where a case stands in its queue, and the reviewer's day."""

    open: int
    """Cases of the queue's status in the queue (open ones in the open queue)."""
    position: int | None
    """The case's place among them (1-based; ``None`` when it is not one of them)."""
    today: int
    """Cases the reviewer resolved today (UTC)."""
    word: str = "open"
    """What they are: ``open``, ``resolved`` or ``cases`` (the ``all`` queue)."""


def _free(request: Request, entries: list[QueueEntry], me: str) -> list[QueueEntry]:
    """``entries`` without the open ones another reviewer holds a claim on."""
    desk = service_of(request).desk
    claims = desk.live_claims([e.review_id for e in entries if not e.resolved])
    return [
        e
        for e in entries
        if e.resolved or e.review_id not in claims or claims[e.review_id].reviewer == me
    ]


def unclaimed(request: Request, refs: list[str], me: str) -> list[str]:
    """``refs`` (open cases or audits) without those another reviewer holds a claim on."""
    claims = service_of(request).desk.live_claims(refs)
    return [r for r in refs if r not in claims or claims[r].reviewer == me]


def neighbours(
    request: Request, review_id: str, view: QueueView, me: str
) -> tuple[str | None, str | None]:
    """Previous and next case of the queue, for ``k`` / ``j``: of its status (the open
    queue walks open cases, the resolved one resolved cases, ``all`` both), skipping open
    cases claimed by others. A case of the queue's filters but not of its status (one
    just resolved, seen from the open queue) has the nearest such cases around it; a
    case outside the filters has no neighbours."""
    order = view.order(request, "all")
    ids = [e.review_id for e in order]
    if review_id not in ids:
        return None, None
    i = ids.index(review_id)
    status = view.status if view.status in ("open", "resolved") else "all"

    def walked(entries: list[QueueEntry]) -> list[QueueEntry]:
        if status == "all":
            return entries
        return [e for e in entries if e.resolved == (status == "resolved")]

    before = _free(request, walked(order[:i]), me)
    after = _free(request, walked(order[i + 1 :]), me)
    return (
        before[-1].review_id if before else None,
        after[0].review_id if after else None,
    )


def next_open(request: Request, review_id: str, view: QueueView, me: str) -> str | None:
    """The open case to go to after ``review_id``: the next one in the queue's order that
    nobody else holds, else the first such one before it."""
    order = view.order(request, "all")
    ids = [e.review_id for e in order]
    i = ids.index(review_id) if review_id in ids else -1
    candidates = [e for e in order[i + 1 :] + order[: max(i, 0)] if not e.resolved]
    free = _free(request, candidates, me)
    return free[0].review_id if free else None


def progress(request: Request, review_id: str, view: QueueView, me: str) -> Progress:
    """The progress line: the case's place among the queue's cases of its status."""
    status = view.status if view.status in ("open", "resolved") else "all"
    ids = [e.review_id for e in view.order(request, status)]
    return Progress(
        open=len(ids),
        position=ids.index(review_id) + 1 if review_id in ids else None,
        today=service_of(request).desk.resolved_today(me),
        word="cases" if status == "all" else status,
    )


def list_url(view: QueueView, page: int) -> str:
    """The address of page ``page`` of ``view``'s list (the queue page), filters kept."""
    query = "&".join(q for q in (view.query(), "" if page == 1 else f"page={page}") if q)
    return f"/review?{query}" if query else "/review"


def _page_of(index: int) -> int:
    """The page of the list showing its row ``index`` (0-based)."""
    return index // QUEUE_ROWS + 1


def queue_url(request: Request, review_id: str, view: QueueView) -> str:
    """The page of ``view``'s queue that shows ``review_id`` (see the module docstring)."""
    if view.status not in ("open", "resolved", "all"):
        return list_url(view, 1)
    ids = [e.review_id for e in view.order(request, view.status)]
    if review_id in ids:
        return list_url(view, _page_of(ids.index(review_id)))
    every = view.order(request, "all")
    at = next((i for i, e in enumerate(every) if e.review_id == review_id), None)
    if at is None:
        return list_url(view, 1)
    before = sum(1 for e in every[:at] if e.resolved == (view.status == "resolved"))
    return list_url(view, _page_of(before))


def audits_url(view: QueueView, position: int | None) -> str:
    """The page of the list of open blind audits (``view``'s run, search and order)
    showing the audit at ``position`` (1-based; the first page without one)."""
    audits = QueueView(status="audits", run=view.run, q=view.q, sort=view.sort)
    return list_url(audits, 1 if position is None else _page_of(position - 1))


def statuses(request: Request, entries: list[QueueEntry]) -> Iterator[ReviewStatus]:
    """The queue entries' items (one read per item)."""
    desk = service_of(request).desk
    for e in entries:
        try:
            yield desk.status(e.review_id)
        except UnknownItem:  # pragma: no cover - the index is written with the event
            continue


_AUDIT_KEY = re.compile(r"case/[^/]+/audit")
"""The key of a blind audit item (``case/<line>/audit``)."""


def auto_refs(request: Request, run_id: str | None) -> list[str]:
    """Unaudited automatic decisions, without those waiting for a blind audit (their
    committed answer stays hidden until the blind audit is answered). Only the cases
    with a blind audit (one read of the ``review.audit`` events) are looked up one by
    one, not every automatic decision."""
    desk = service_of(request).desk
    refs = desk.auto_cases(run_id=run_id)
    audits = (
        desk.journal.events(run_id, type=AUDIT_OPENED)
        if run_id
        else desk.journal.events_of_type(AUDIT_OPENED)
    )
    audited = {f"{e.run_id}.{e.key[5:-6]}" for e in audits if _AUDIT_KEY.fullmatch(e.key)}
    return [r for r in refs if r not in audited or not has_open_audit(desk.journal, r)]


def listed(refs: list[str], view: QueueView) -> list[str]:
    """``refs`` of a list of audits (in journal order) in ``view``'s order: newest first
    reverses it; "by reason" keeps it (these lists show no reason)."""
    return refs[::-1] if view.sort == "newest" else refs


def matches(view: QueueView, question: str | None, case_id: str) -> bool:
    """Whether a case of a list of audits matches ``view``'s search (its question or its
    case id, any case; every case without a search)."""
    return view.q.lower() in f"{question or ''} {case_id}".lower()


def audit_list(request: Request, view: QueueView) -> list[str]:
    """The open blind audits of ``view``'s list: its run, its search, its order."""
    journal = service_of(request).journal
    if view.run and journal.run(view.run, missing_ok=True) is None:
        return []
    items = open_audits(journal, view.run or None)
    return listed([i.review_id for i in items if matches(view, question_of(i.panel), i.id)], view)


def next_auto(request: Request, view: QueueView, me: str) -> str | None:
    """The first automatic decision left in ``view``'s list (its run, search and order)
    that nobody else holds."""
    desk = service_of(request).desk
    try:
        return _next_auto(request, view, me)
    except UnknownItem:  # a listed case the journal no longer holds (restored): read again
        desk.forget()
        return _next_auto(request, view, me)


def _next_auto(request: Request, view: QueueView, me: str) -> str | None:
    desk = service_of(request).desk
    for ref in unclaimed(request, listed(auto_refs(request, view.run or None), view), me):
        case = desk.auto_case(ref)
        if matches(view, question_of(case.panel), case.record.id):
            return ref
    return None
