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


def _print_version(value: bool) -> None:
    """``--version``: print the installed version (as ``dissensus version`` does) and stop."""
    if value:
        from dissensus import __version__
        from dissensus.cli.common import write_stdout

        write_stdout(f"{__version__}\n", flush=True)
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        help="Print the installed version and exit.",
    ),
) -> None:
    """Decide under disagreement."""
