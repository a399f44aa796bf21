"""The Typer application every command module registers on."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="dissensus",
    help="Decide under disagreement: read a panel's disagreement, guard agreement, "
    "negotiate, deliberate or escalate, with a verifiable record.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Decide under disagreement."""
