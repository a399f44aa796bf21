"""The review queue's tools: ``review_list``, ``review_show`` and ``review_resolve`` (the
server's reviewer identity recorded).

Choices this module makes:

* ``review_list`` answers a page of the queue, as ``dissensus review list`` and ``GET
  /v1/review`` do: at most ``limit`` items (1 to 10,000, :data:`REVIEW_PAGE` by
  default), after the item ``after`` names (the last of the previous page, whether it
  is open or resolved). A queue of tens of thousands of items was one answer of tens of
  megabytes to a client that is usually a model, each item read and hashed first. An
  ``after`` naming no item is refused naming ``after``.
* **A page says when more follow.** ``limit + 1`` items are read; when there are more
  than ``limit``, the result ends with one more text block, after the items' own
  (:func:`more_note`: ``more items after R: call review_list again with after="R"``),
  and carries ``{"next_after": R}`` in its ``_meta`` (:data:`NEXT_AFTER`), as ``review
  list --limit`` prints its "more items after" line and ``GET /v1/review`` sends a
  ``Link: rel="next"`` header. A page that fills ``limit`` exactly said nothing, and a
  model told to resolve every open case stopped at the first page. The structured
  result is unchanged (the list of items, the ``result`` of the output schema), so a
  client that reads it keeps working; the note is where a model reads, the tool's
  description says what it means, and ``_meta`` is for a program. The last page has
  neither.
"""

from __future__ import annotations

import json
from typing import Annotated

import pydantic_core
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent
from pydantic import Field

from dissensus.errors import InputError
from dissensus.integrations._review import resolve_checked
from dissensus.integrations.mcp.arguments import JournalArg, with_untrusted_text
from dissensus.integrations.mcp.errors import _reported, _run_argument
from dissensus.integrations.mcp.settings import _Settings
from dissensus.outputs import ResolutionInfo, ReviewEntry, ReviewView
from dissensus.pipeline import CaseRecord
from dissensus.pipeline.review import find_item, list_items
from dissensus.quoting import json_shown
from dissensus.store import Journal

REVIEW_PAGE = 1000
"""How many items ``review_list`` gives at once by default: the page of ``dissensus review
list`` and of the service's ``GET /v1/review``."""

MAX_PAGE = 10_000
"""The most items one ``review_list`` answer holds (as ``runs_list``'s ``limit``)."""

NEXT_AFTER = "next_after"
"""The key of a ``review_list`` result's ``_meta`` naming the ``after`` of the next page,
there only when more items follow."""


def more_note(last: str) -> str:
    """The text block ending a ``review_list`` page that more items follow."""
    shown = json_shown(json.dumps(last, ensure_ascii=False))
    return f"more items after {shown}: call review_list again with after={shown}"


def add_review_tools(server: MCPServer, settings: _Settings) -> None:
    """Register ``review_list``, ``review_show`` and ``review_resolve``."""

    def review_list(
        journal: JournalArg = None,
        run: str | None = None,
        include_resolved: bool = False,
        limit: Annotated[int, Field(ge=1, le=MAX_PAGE, strict=True)] = REVIEW_PAGE,
        after: str | None = None,
    ) -> Annotated[CallToolResult, list[ReviewEntry]]:
        """Review items (open ones unless include_resolved), oldest first, with the hash to
        quote when resolving: at most ``limit`` (1 to 10,000, default 1,000), after the item
        ``after`` when given (the last review_id of the previous page: the next page).

        Paging: when more items follow this page, the result ends with the text
        ``more items after "R": call review_list again with after="R"`` (and its
        ``_meta`` holds ``next_after``: R); call again with that ``after`` until a result
        has no such line. A result without it holds the last of the queue."""
        with settings.using(journal, must_exist=True) as (store, _), _run_argument("run"):
            if run is not None:
                store.run(run)  # a run the journal does not have is named before ``after``
            if after is not None:
                _after_item(store, after)
            items = list_items(
                store, run_id=run, include_resolved=include_resolved, limit=limit + 1, after=after
            )
            entries = [ReviewEntry.of(st) for st in items]
            return _page(entries, limit)

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


def _page(entries: list[ReviewEntry], limit: int) -> CallToolResult:
    """The result of ``review_list`` for ``entries`` (at most ``limit + 1``): the first
    ``limit``, as the SDK would answer the list (a text block each, and the list as the
    structured ``result``), and, when there is one more, the note and ``_meta`` naming
    the ``after`` of the next page."""
    page = entries[:limit]
    content = [
        TextContent(type="text", text=pydantic_core.to_json(e, fallback=str, indent=2).decode())
        for e in page
    ]
    meta: dict[str, str] | None = None
    if len(entries) > limit:
        last = page[-1].review_id
        content.append(TextContent(type="text", text=more_note(last)))
        meta = {NEXT_AFTER: last}
    return CallToolResult(
        content=content,
        structured_content={"result": [e.model_dump(mode="json", by_alias=True) for e in page]},
        _meta=meta,
    )


def _after_item(store: Journal, after: str) -> None:
    """Refuse an ``after`` naming no review item of ``store``, naming the argument (the
    library's error names none)."""
    try:
        find_item(store, after)
    except InputError as exc:
        raise InputError(f"field 'after': {exc}") from exc
