"""CLI command ``dissensus acceptance status``: the acceptance monitor of a journal.

One row per acceptance file (by sha256) the journal's runs decided with and per stratum:
the answered blind audits, how many confirmed the committed answer, the anytime-valid
lower and upper bounds on precision (level delta of the file) and whether automatic
commits in the stratum are suspended, after how many audits and since when
(:func:`dissensus.pipeline.audit.monitor_status`, which the review page and
``GET /v1/acceptance`` show too).

A file a shift check has flagged, whose newest run's policy says ``acceptance.on_shift:
escalate``, is *held*: the next run started with it commits nothing by learned
acceptance (:func:`dissensus.pipeline.shift.holds`). Its rows say ``held`` with the run
whose check flagged it (an ``active`` stratum would mislead), and ``--json`` lists the
holds under ``holds`` (file sha256 -> the flagged check).
"""

from __future__ import annotations

from typing import Any

import typer
from rich.table import Table

from dissensus.cli.app import app
from dissensus.cli.common import EXIT_OK, out_console, print_json, print_table, shown
from dissensus.cli.journals import JournalOpt, JsonOpt, opened_journal

acceptance_app = typer.Typer(
    help="Learned acceptance in use: the audit monitor.", no_args_is_help=True
)
app.add_typer(acceptance_app, name="acceptance")

__all__ = ["acceptance_status"]


@acceptance_app.command("status")
def acceptance_status(
    journal: JournalOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Per acceptance file and stratum: audits, correct, precision bounds, suspended or not."""
    from dissensus.pipeline.audit import monitor_status
    from dissensus.pipeline.shift import holds

    with opened_journal(journal) as store:
        rows = monitor_status(store)
        held = holds(store)
    if json_out:
        print_json({"strata": [r.model_dump(mode="json") for r in rows], "holds": held})
        raise typer.Exit(code=EXIT_OK)
    if not rows:
        out_console.print("no run in this journal decided with an acceptance file")
        raise typer.Exit(code=EXIT_OK)
    table = Table(show_edge=False, title="acceptance monitor")
    for col in ("acceptance", "stratum", "audits", "correct", "lower", "upper", "target", "status"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(
            (r.acceptance_sha256 or "")[:12],
            shown(r.stratum),
            str(r.audits),
            str(r.correct),
            f"{r.lower:.3f}",
            f"{r.upper:.3f}",
            f"{r.target:.2f}",
            _status(r.suspended, r.suspended_after, r.suspended_at, held.get(r.acceptance_sha256)),
        )
    print_table(table)
    raise typer.Exit(code=EXIT_OK)


def _status(suspended: bool, after: int | None, at: str | None, hold: Any) -> str:
    """A stratum's status in words: suspended by its audits, held by a shift check, or
    active."""
    said = f"suspended after {after} audits (since {at})" if suspended else ""
    if hold is not None:
        flagged = f"held: shift flagged by run {shown(str(hold.get('run_id')))}"
        return f"{said}; {flagged}" if said else flagged
    return said or "active"
