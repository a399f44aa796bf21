"""The JSON every door answers with for the same thing: one pydantic model per thing,
used by the service as its ``response_model``, printed by the CLI's ``--json`` and
returned by the MCP tools, so the three can never drift apart.

==================== ====================== ============================ ================
model                CLI                    HTTP                         MCP tool
==================== ====================== ============================ ================
:class:`ReviewEntry` ``review list --json`` ``GET /v1/review``           ``review_list``
:class:`ReviewView`  --                     ``GET /v1/review/{id}``      ``review_show``
:class:`RunSummary`  ``runs list --json``   ``GET /v1/runs``             ``runs_list``
:class:`RouteRecord` ``route --json`` (*)   ``POST /v1/route``           ``route``
``VerifyReport``     ``runs verify --json`` ``GET /v1/runs/{id}/verify`` ``runs_verify``
==================== ====================== ============================ ================

The two listings print one line per entry. (*) See the choices below.

``VerifyReport`` is the journal's own (:class:`dissensus.store.VerifyReport`); it is listed
here because every door shows it unchanged.

Choices this module makes:

* A door may add what only it knows, in a model of its own that extends the shared one:
  the service's review list adds each open case's live ``claim`` and its case view adds
  the ``claim`` and the ``history``; the keys of the shared model are the same everywhere.
* ``review show --json`` prints the item's own keys at the top level with its
  ``resolution`` (a shape older than this module, kept for its readers), so it is not a
  :class:`ReviewView`; the service and the MCP tool nest the item.
* ``route --json`` streams its records from :mod:`dissensus.states.stream` (the fast path
  for large files), which writes the same keys but ``null`` similarities when a panel's
  similarity is undefined and a ``missing_reasoning`` key when reasoning is missing,
  and adds the panel's input ``line`` after ``id`` (as ``decide --json`` does): the
  service and the MCP tool route panels given in a request, which have no line (a
  rejected item is named by its ``index``).
* An entry's ``options`` are :meth:`~dissensus.pipeline.records.ReviewItem.shown_options`
  (the panel's ``meta.options`` in order, then the other decisions in natural order),
  which is the item's own list unless the item was journalled with its options sorted as
  strings; a :class:`ReviewView` holds the item as journalled, which its hash binds.
* ``content_sha256`` is the hash the journal keeps with the item when it has one, else the
  item's (:func:`dissensus.pipeline.review.content_sha256`, the same value).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from dissensus.pipeline.records import Resolution, ReviewItem
from dissensus.pipeline.review import ReviewStatus, content_sha256, resolution_event, split_ref
from dissensus.states.reading import Reading
from dissensus.states.routing import Route
from dissensus.store import Journal, RunInfo
from dissensus.store.locks import RunStatus

__all__ = [
    "RUNS_PAGE",
    "ResolutionInfo",
    "ReviewEntry",
    "ReviewView",
    "RouteRecord",
    "RunSummary",
    "run_summaries",
    "status_of",
]

ReviewState = Literal["open", "resolved"]


def status_of(resolution: object | None) -> ReviewState:
    """``resolved`` once a case has a resolution, else ``open``."""
    return "open" if resolution is None else "resolved"


class ReviewEntry(BaseModel):
    """One case of the review queue, with the hash a resolution must quote."""

    review_id: str
    """``<run>.<line>``."""
    run_id: str
    id: str
    """The case's id (the panel's)."""
    reason: str
    """Why the case came to a human."""
    suggestion: str | None
    """The panel's plurality decision, shown to the reviewer."""
    options: list[str]
    status: ReviewState
    resolution: Resolution | None
    content_sha256: str
    """sha256 of the item's canonical JSON: what a resolution quotes."""

    @classmethod
    def of(cls, st: ReviewStatus) -> ReviewEntry:
        item = st.item
        return cls(
            review_id=item.review_id,
            run_id=item.run_id,
            id=item.id,
            reason=item.reason,
            suggestion=item.suggestion,
            options=item.shown_options(),
            status=status_of(st.resolution),
            resolution=st.resolution,
            content_sha256=st.content_sha256 or content_sha256(item),
        )


class ResolutionInfo(BaseModel):
    """Who resolved a case, when, how and why (the standing ``review.resolved`` event)."""

    review_id: str
    reviewer: str | None
    at: str
    decision: str
    note: str
    outside_options: bool = False
    """Whether the decision is none of the case's options."""

    @classmethod
    def read(cls, journal: Journal, review_id: str) -> ResolutionInfo | None:
        """The case's standing resolution (``None`` while it is open); a malformed
        ``review_id`` is an :class:`~dissensus.errors.InputError`."""
        run_id, line = split_ref(review_id)
        event = resolution_event(journal, run_id, line)
        if event is None:
            return None
        p = event.payload
        return cls(
            review_id=review_id,
            reviewer=p.get("reviewer"),
            at=event.at,
            decision=str(p["decision"]),
            note=str(p.get("note", "")),
            outside_options=bool(p.get("outside_options", False)),
        )


class ReviewView(BaseModel):
    """A review case with everything a reviewer needs, its status and resolution, and
    the hash a resolution must quote."""

    item: ReviewItem
    status: ReviewState
    resolution: ResolutionInfo | None
    content_sha256: str

    @classmethod
    def of(cls, st: ReviewStatus, resolution: ResolutionInfo | None) -> ReviewView:
        return cls(
            item=st.item,
            status=status_of(resolution),
            resolution=resolution,
            content_sha256=st.content_sha256 or content_sha256(st.item),
        )


class RunSummary(RunInfo):
    """A run's header, whether it finished (its ``run.finished`` event is journalled) and
    its status: ``finished``, ``running`` (a live process holds its execution lock) or
    ``incomplete`` (stopped, resumable)."""

    finished: bool
    status: RunStatus

    @classmethod
    def of(cls, info: RunInfo, *, status: RunStatus) -> RunSummary:
        return cls(**info.model_dump(), finished=status == "finished", status=status)


RUNS_PAGE = 1000
"""How many runs ``GET /v1/runs`` and the MCP tool ``runs_list`` give at once by default."""


def run_summaries(
    journal: Journal, *, after: str | None = None, limit: int | None = None
) -> list[RunSummary]:
    """The journal's runs, oldest first, each with its status: every run, or a page of
    them (``after`` a run id, at most ``limit``), in two queries and one more per run that
    has not finished (its lock is looked at)."""
    infos = journal.runs(after=after, limit=limit)
    statuses = journal.run_statuses([info.run_id for info in infos])
    return [RunSummary.of(info, status=statuses[info.run_id]) for info in infos]


class RouteRecord(BaseModel):
    """One routed panel: its reading's state and figures, and where the rules sent it."""

    model_config = ConfigDict(frozen=True)

    id: str
    state: str
    """``CA`` / ``DA`` / ``CD`` / ``DD``."""
    action: str
    reasoning_similarity: float
    min_similarity: float
    agreement: float
    decision: str | None
    tie: list[str]
    votes: dict[str, int]
    abstentions: int
    rule: str
    """The rule that decided the route."""
    defeated: list[str]
    concurring: list[str]
    model: str
    """The similarity model the reading used."""
    theta_s: float
    theta_a: float

    @classmethod
    def of(cls, reading: Reading, routed: Route) -> RouteRecord:
        return cls(
            id=reading.id,
            state=reading.state.value,
            action=routed.action,
            reasoning_similarity=reading.mean_similarity,
            min_similarity=reading.min_similarity,
            agreement=reading.agreement,
            decision=reading.decision,
            tie=reading.tie,
            votes=reading.votes,
            abstentions=reading.abstentions,
            rule=routed.rule,
            defeated=routed.defeated,
            concurring=routed.concurring,
            model=reading.model,
            theta_s=reading.thresholds.theta_s,
            theta_a=reading.thresholds.theta_a,
        )
