"""The review queue's tools: ``review_list``, ``review_show`` and ``review_resolve`` (the
server's reviewer identity recorded).

Choices this module makes:

* ``review_list`` answers a page of the queue, as ``dissensus review list`` and ``GET
  /v1/review`` do: at most ``limit`` items (1 to 10,000, :data:`REVIEW_PAGE` by
  default), after the item ``after`` names (the last of the previous page, whether it
  is open or resolved). A queue of tens of thousands of items was one answer of tens of
  megabytes to a client that is usually a model, each item read and hashed first. A
  page as long as ``limit`` may have another after it: ask again with ``after`` its
  last ``review_id``. An ``after`` naming no item is refused naming ``after``.
"""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import MCPServer
from pydantic import Field

from dissensus.errors import InputError
from dissensus.integrations._review import resolve_checked
from dissensus.integrations.mcp.arguments import JournalArg, with_untrusted_text
from dissensus.integrations.mcp.errors import _reported, _run_argument
from dissensus.integrations.mcp.settings import _Settings
from dissensus.outputs import ResolutionInfo, ReviewEntry, ReviewView
from dissensus.pipeline import CaseRecord
from dissensus.pipeline.review import find_item, list_items
from dissensus.store import Journal

REVIEW_PAGE = 1000
"""How many items ``review_list`` gives at once by default: the page of ``dissensus review
list`` and of the service's ``GET /v1/review``."""

MAX_PAGE = 10_000
"""The most items one ``review_list`` answer holds (as ``runs_list``'s ``limit``)."""


def add_review_tools(server: MCPServer, settings: _Settings) -> None:
    """Register ``review_list``, ``review_show`` and ``review_resolve``."""

    def review_list(
        journal: JournalArg = None,
        run: str | None = None,
        include_resolved: bool = False,
        limit: Annotated[int, Field(ge=1, le=MAX_PAGE, strict=True)] = REVIEW_PAGE,
        after: str | None = None,
    ) -> list[ReviewEntry]:
        """Review items (open ones unless include_resolved), oldest first, with the hash to
        quote when resolving: at most ``limit`` (1 to 10,000), after the item ``after``
        when given (the last review_id of the previous page: the next page)."""
        with settings.using(journal, must_exist=True) as (store, _), _run_argument("run"):
            if run is not None:
                store.run(run)  # a run the journal does not have is named before ``after``
            if after is not None:
                _after_item(store, after)
            items = list_items(
                store, run_id=run, include_resolved=include_resolved, limit=limit, after=after
            )
            return [ReviewEntry.of(st) for st in items]

    def review_show(review_id: str, journal: JournalArg = None) -> ReviewView:
        """Everything a reviewer needs: the case, positions and value profiles, the hash."""
        with settings.using(journal, must_exist=True) as (store, _):
            return ReviewView.of(find_item(store, review_id), ResolutionInfo.read(store, review_id))

    def review_resolve(
        review_id: str,
        decision: Annotated[str, Field(min_length=1)],
        note: str,
        content_sha256: Annotated[
            str, Field(min_length=64, max_length=64, description="Hash from review_show.")
        ],
        journal: JournalArg = None,
    ) -> CaseRecord:
        """Record a human decision (the server's reviewer identity); the case resumes with it."""
        with settings.using(journal, must_exist=True) as (store, _):
            return resolve_checked(
                store,
                review_id,
                decision=decision,
                note=note,
                content_sha256=content_sha256,
                reviewer=settings.reviewer,
            )

    server.add_tool(
        _reported(review_list), name="review_list", description=with_untrusted_text(review_list)
    )
    server.add_tool(
        _reported(review_show), name="review_show", description=with_untrusted_text(review_show)
    )
    server.add_tool(
        _reported(review_resolve),
        name="review_resolve",
        description=with_untrusted_text(review_resolve),
    )


def _after_item(store: Journal, after: str) -> None:
    """Refuse an ``after`` naming no review item of ``store``, naming the argument (the
    library's error names none)."""
    try:
        find_item(store, after)
    except InputError as exc:
        raise InputError(f"field 'after': {exc}") from exc
