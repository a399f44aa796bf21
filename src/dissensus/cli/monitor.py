"""CLI command ``dissensus acceptance status``: the acceptance monitor of a journal.

One row per acceptance file (by sha256) the journal's runs decided with and per stratum:
the answered blind audits, how many confirmed the committed answer, the anytime-valid
lower and upper bounds on precision (level delta of the file) and whether automatic
commits in the stratum are suspended, after how many audits and since when
(:func:`dissensus.pipeline.audit.monitor_status`, which the review page and
``GET /v1/acceptance`` show too).
"""

from __future__ import annotations

import typer
from rich.table import Table

from dissensus.cli.app import app
from dissensus.cli.common import EXIT_OK, out_console, print_json, shown
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

    with opened_journal(journal) as store:
        rows = monitor_status(store)
    if json_out:
        print_json({"strata": [r.model_dump(mode="json") for r in rows]})
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
            f"suspended after {r.suspended_after} audits (since {r.suspended_at})"
            if r.suspended
            else "active",
        )
    out_console.print(table)
    raise typer.Exit(code=EXIT_OK)
