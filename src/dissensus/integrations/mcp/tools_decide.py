"""The tool ``decide``: each panel decided as a journalled run of its own, a panel not
decided reported as a reject beside the others."""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Callable
from typing import Annotated

from mcp.server.mcpserver import MCPServer
from pydantic import Field

from dissensus.errors import ConfigError, DissensusError
from dissensus.integrations.mcp.arguments import JournalArg, PolicyArg, with_untrusted_text
from dissensus.integrations.mcp.errors import _message, _reported
from dissensus.integrations.mcp.results import DecideResult, PanelReject, UnfinishedRun
from dissensus.integrations.mcp.settings import _Settings
from dissensus.io.jsonl import Reject
from dissensus.pipeline import FRESH_ATTEMPTS, DeadlineReached, RunSpec, execute_run
from dissensus.pipeline.batch import new_run_id, start_run
from dissensus.pipeline.shift_watch import ShiftWatch
from dissensus.quoting import SHORT_LIMIT, quote_short
from dissensus.store import Journal, JournalError, RunExists
from dissensus.types import Panel


async def _decide_panels(
    store: Journal,
    spec: RunSpec,
    panels: list[Panel],
    named: Callable[[str], str],
    watch: ShiftWatch | None = None,
) -> DecideResult:
    """Each panel as a run of its own in ``store``, as :func:`~dissensus.pipeline.adecide`
    makes it (the run created by its first write, the case decided by the CLI's loop),
    keeping what ``adecide`` drops: a panel the run refuses, or whose run stops on an
    error of the library's own, is a :class:`PanelReject` with its field path, and the
    panels after it are decided all the same; a panel whose record was made before its run
    stopped is an :class:`UnfinishedRun` (its record under ``result``, its run named, with
    the command that ends it). A journal that fails, or an unexpected
    error, after the first panel ends the call with an error naming the panels done. A
    reject's message names the journal by ``named`` (as the caller named it). After each
    run, the server's shift watch of ``store`` and the file (``watch``) is stepped, off
    the event loop; its failure is logged, never the call's."""
    answer = DecideResult(result=[])
    runs: list[str] = []
    for index, panel in enumerate(panels):
        shown = _short_id(panel.id)
        run_id = new_run_id()
        text = panel.model_dump_json() + "\n"
        refused: list[Reject] = []
        decided = False
        runs.append(run_id)
        try:
            for attempt in range(FRESH_ATTEMPTS):
                try:
                    start_run(store, None, spec, text=text, via="mcp", run_id=run_id,
                              lock=True, defer=True)  # fmt: skip
                    async for record in execute_run(store, run_id, on_reject=refused.append):
                        answer.result.append(record)
                        decided = True
                    break
                except RunExists:
                    # The fresh id names a run the journal holds (48 random bits): not
                    # this panel's, so another is drawn, as adecide does.
                    if decided or attempt == FRESH_ATTEMPTS - 1:
                        raise
                    run_id = runs[-1] = new_run_id()
                    refused.clear()
        except DeadlineReached as exc:  # the run stopped: partial, resumable
            if decided:
                answer.unfinished.append(
                    UnfinishedRun(index=index, id=shown, run_id=run_id, error=named(str(exc)))
                )
            else:
                answer.rejects.append(
                    PanelReject(
                        index=index, id=shown, run_id=run_id, field=None, error=named(str(exc))
                    )
                )
        except JournalError as exc:
            done = index + 1 if decided else index
            if done == 0:
                raise
            # The panels before this one (and this one, when its record was made) are
            # decided and journalled: say so, so that a retry sends only the rest (else
            # their review items would open twice).
            raise JournalError(
                named(_not_all(exc, done, panels, runs, store, after_record=decided))
            ) from None
        except DissensusError as exc:  # this panel's run stopped (resumable): the others go on
            if decided:
                error = named(_resumable(_message(exc), run_id, store))
                answer.unfinished.append(
                    UnfinishedRun(index=index, id=shown, run_id=run_id, error=error)
                )
            else:
                field = exc.field if isinstance(exc, ConfigError) else None
                answer.rejects.append(
                    PanelReject(
                        index=index,
                        id=shown,
                        run_id=run_id,
                        field=field,
                        error=named(_message(exc)),
                    )
                )
        except Exception as exc:
            done = index + 1 if decided else index
            if done == 0:
                raise
            raise DissensusError(
                named(_not_all(exc, done, panels, runs, store, after_record=decided))
            ) from exc
        answer.rejects.extend(
            PanelReject(index=index, id=shown, run_id=run_id, field=r.field, error=r.message)
            for r in refused
        )
        if watch is not None and watch.enabled:
            await asyncio.to_thread(watch.step_quietly, store)
    return answer


def _short_id(text: str) -> str:
    """A panel id as an answer shows it: whole up to :data:`SHORT_LIMIT` characters, else
    its first ones then ``…`` (a 100,000-character id is not echoed back whole)."""
    return text if len(text) <= SHORT_LIMIT else text[:SHORT_LIMIT] + "…"


def _resumable(message: str, run_id: str, store: Journal) -> str:
    """``message`` ending with the command that ends the partial run ``run_id``."""
    if "runs resume" in message:
        return message
    return (
        f"{message}; the run is partial, finish it with: dissensus runs resume {run_id} "
        f"--journal {shlex.quote(str(store.path))}"
    )


def _not_all(
    exc: Exception,
    done: int,
    panels: list[Panel],
    runs: list[str],
    store: Journal,
    *,
    after_record: bool,
) -> str:
    """Why a ``decide`` call stopped with panels ``0..done-1`` (``done`` > 0) decided and
    journalled, and which they were; with ``after_record``, the last of them failed
    after its record was made, so its run may not have ended (it is named with the
    command that ends it)."""
    why = _message(exc) if isinstance(exc, DissensusError) else f"{type(exc).__name__}: {exc}"
    said = f"{' '.join(why.split())}; "
    if done < len(panels):
        said += (
            f"panel {done} ({quote_short(panels[done].id)}) and those after it were not "
            f"decided; panels 0-{done - 1} were (runs {', '.join(runs[:done])}): send only "
            "the rest again"
        )
    else:
        said += f"every panel was decided (runs {', '.join(runs[:done])}): send none again"
    if after_record:
        last = runs[done - 1]
        said += (
            f"; run {last} of panel {done - 1} may not have ended: if `dissensus runs list` "
            f"says it is incomplete, finish it with: dissensus runs resume {last} "
            f"--journal {shlex.quote(str(store.path))}"
        )
    return said


def add_decide_tool(server: MCPServer, settings: _Settings) -> None:
    """Register ``decide``."""

    def decide(
        panels: Annotated[list[Panel], Field(min_length=1)],
        policy: PolicyArg = None,
        journal: JournalArg = None,
    ) -> DecideResult:
        """Decide every panel (read -> guard -> route -> protocol -> record), each a
        journalled run: the records under ``result``, in panel order; a panel that is
        refused (over a bound, say) is in ``rejects`` (index, id, run_id, field, error),
        the others decided all the same; a panel whose record was made but whose run
        then stopped (its policy's deadline) is also in ``unfinished`` (index, id,
        run_id, error with the resume command)."""
        # A plain function: the SDK runs it in a worker thread, where the runs are decided
        # on an event loop of its own, so a journal locked elsewhere never stops the server.
        spec = settings.spec(policy)
        with (
            settings.using(journal, must_exist=False) as (store, named),
            settings.watching(store, spec) as watch,
        ):
            return asyncio.run(_decide_panels(store, spec, panels, named, watch))

    server.add_tool(_reported(decide), name="decide", description=with_untrusted_text(decide))
