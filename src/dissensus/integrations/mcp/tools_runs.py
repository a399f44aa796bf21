"""The journal's runs as tools: ``runs_list`` (a page of runs) and ``runs_verify`` (a
run's hash chain recomputed)."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import MCPServer
from pydantic import Field

from dissensus.integrations.mcp.arguments import JournalArg
from dissensus.integrations.mcp.errors import _reported, _run_argument
from dissensus.integrations.mcp.settings import _Settings
from dissensus.outputs import RUNS_PAGE, RunSummary, run_summaries
from dissensus.store import VerifyReport


def add_runs_tools(server: MCPServer, settings: _Settings) -> None:
    """Register ``runs_list`` and ``runs_verify``."""

    def runs_list(
        journal: JournalArg = None,
        limit: Annotated[int, Field(ge=1, le=10_000, strict=True)] = RUNS_PAGE,
        after: str | None = None,
    ) -> list[RunSummary]:
        """The journal's runs, oldest first, and whether each finished: at most ``limit``
        (1 to 10,000), after the run ``after`` when given (the next page)."""
        with settings.using(journal, must_exist=True) as (store, _), _run_argument("after"):
            return run_summaries(store, after=after, limit=limit)

    def runs_verify(run_id: str, journal: JournalArg = None) -> VerifyReport:
        """Recompute a run's hash chain (``ok`` false names every problem)."""
        with settings.using(journal, must_exist=True) as (store, _):
            return store.verify(run_id)

    server.add_tool(_reported(runs_list), name="runs_list")
    server.add_tool(_reported(runs_verify), name="runs_verify")
