"""The review queue's tools: ``review_list``, ``review_show`` and ``review_resolve`` (the
server's reviewer identity recorded)."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import MCPServer
from pydantic import Field

from dissensus.integrations._review import resolve_checked
from dissensus.integrations.mcp.arguments import JournalArg
from dissensus.integrations.mcp.errors import _reported, _run_argument
from dissensus.integrations.mcp.settings import _Settings
from dissensus.outputs import ResolutionInfo, ReviewEntry, ReviewView
from dissensus.pipeline import CaseRecord
from dissensus.pipeline.review import find_item, list_items


def add_review_tools(server: MCPServer, settings: _Settings) -> None:
    """Register ``review_list``, ``review_show`` and ``review_resolve``."""

    def review_list(
        journal: JournalArg = None, run: str | None = None, include_resolved: bool = False
    ) -> list[ReviewEntry]:
        """Review items (open ones unless include_resolved), with the hash to quote when resolving."""
        with settings.using(journal, must_exist=True) as (store, _), _run_argument("run"):
            return [
                ReviewEntry.of(st)
                for st in list_items(store, run_id=run, include_resolved=include_resolved)
            ]

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

    server.add_tool(_reported(review_list), name="review_list")
    server.add_tool(_reported(review_show), name="review_show")
    server.add_tool(_reported(review_resolve), name="review_resolve")
