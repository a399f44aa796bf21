"""CLI command ``dissensus mcp``: serve the library's tools over the Model Context Protocol.

``dissensus mcp [--journal PATH] [--policy FILE] [--reviewer NAME] [--allow-functions]
[--root DIR]`` speaks MCP on standard input/output (the stdio transport) until the client
disconnects. The tools' file arguments (``journal``, ``policy``, ``rules``,
``calibration``) must lie under ``--root`` (default: the working directory); the
server's own ``--journal`` and ``--policy`` are not confined. The MCP SDK is
the optional extra ``mcp``; it is imported only when the command runs, and its absence is
a usage error (exit 2) naming the extra. See :mod:`dissensus.integrations.mcp`.
"""

from __future__ import annotations

from typing import Annotated

import typer

from dissensus.cli.app import app
from dissensus.errors import ConfigError

__all__ = ["mcp_command"]


@app.command("mcp")
def mcp_command(
    journal: Annotated[
        str | None,
        typer.Option(
            "--journal",
            help="Default run journal of the tools. Default: $DISSENSUS_JOURNAL or "
            "./dissensus-journal.sqlite.",
        ),
    ] = None,
    policy: Annotated[
        str | None, typer.Option("--policy", help="Default pipeline policy (YAML) of decide.")
    ] = None,
    reviewer: Annotated[
        str | None,
        typer.Option(
            "--reviewer", help="Identity review_resolve records. Default: $DISSENSUS_REVIEWER."
        ),
    ] = None,
    allow_functions: Annotated[
        bool,
        typer.Option(
            "--allow-functions",
            help="Let negotiate run function agents, and decide a policy that imports code "
            "(server-side code).",
        ),
    ] = False,
    root: Annotated[
        str | None,
        typer.Option(
            "--root",
            help="Directory the tools' file arguments (journal, policy, rules, calibration) "
            "must lie under. Default: the working directory.",
        ),
    ] = None,
    shift_every: Annotated[
        int,
        typer.Option(
            "--shift-every",
            min=0,
            help="Judged cases between two checks of decide's shift watch (0: none).",
        ),
    ] = 100,
) -> None:
    """Serve route, vote, decide, negotiate, verify, bound and the review queue as MCP tools (stdio)."""
    try:
        from dissensus.integrations.mcp import serve
    except ModuleNotFoundError as exc:
        if "dissensus[mcp]" in str(exc):  # the package's own words name the extra
            raise ConfigError(str(exc)) from exc
        raise ConfigError(
            f"the MCP server needs the 'mcp' extra (pip install 'dissensus[mcp]'): {exc}"
        ) from exc
    from dissensus.cli.common import check_journal_file
    from dissensus.store.targets import journal_path

    check_journal_file(journal_path(journal))  # as every command that writes one
    serve(
        journal=journal,
        policy=policy,
        reviewer=reviewer,
        allow_functions=allow_functions,
        root=root,
        shift_every=shift_every,
    )
