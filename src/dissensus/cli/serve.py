"""CLI command ``dissensus serve``: the decision layer as an HTTP service (extra ``serve``).

* ``dissensus serve [--journal PATH] [--host 127.0.0.1] [--port 8000] [--policy FILE]
  [--tokens FILE] [--max-body-bytes N] [--max-panels N] [--max-queued N]
  [--max-queued-bytes N] [--max-agents N]
  [--max-field-chars N] [--timeout S] [--claim-ttl S] [--allow-host NAME ...]``
* ``dissensus serve-token NAME ROLE`` prints a fresh token (once) and the line to add to
  the tokens file (its sha256, the name, the role). A name holding a control character
  (an escape sequence, a bidirectional override) is refused (exit 2).

A ``--host`` other than loopback without ``--tokens`` is refused (exit 2), and so is a
port that cannot be bound (in use): the socket is bound before anything is printed. The
journal is named with its password masked. FastAPI,
uvicorn, Jinja2 and python-multipart come with ``pip install 'dissensus[serve]'``; without
them the command says so (exit 2). See ``docs/serve.md``.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Annotated

import typer

from dissensus.cli.app import app
from dissensus.cli.common import (
    EXIT_OK,
    MAX_SECONDS,
    err_console,
    has_control,
    number_in,
    out_console,
    quoted,
)
from dissensus.errors import ConfigError
from dissensus.io.limits import MAX_AGENTS, MAX_FIELD_CHARS

__all__ = ["serve_command", "serve_token_command"]


@app.command("serve")
def serve_command(
    journal: Annotated[
        str | None,
        typer.Option(
            "--journal",
            help="Run journal. Default: $DISSENSUS_JOURNAL or ./dissensus-journal.sqlite.",
        ),
    ] = None,
    host: Annotated[
        str, typer.Option("--host", help="Interface to listen on (non-loopback needs --tokens).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="TCP port.")] = 8000,
    policy: Annotated[
        str | None,
        typer.Option("--policy", help="Pipeline policy (YAML) for every decide request."),
    ] = None,
    tokens: Annotated[
        str | None, typer.Option("--tokens", help="Tokens file: 'token_sha256 name role' per line.")
    ] = None,
    max_body_bytes: Annotated[
        int, typer.Option("--max-body-bytes", min=1024, help="Largest request body (413 above).")
    ] = 8 * 1024 * 1024,
    max_panels: Annotated[
        int, typer.Option("--max-panels", min=1, help="Most panels per request (413 above).")
    ] = 1000,
    max_queued: Annotated[
        int,
        typer.Option(
            "--max-queued",
            min=1,
            help="Most decide runs accepted and not decided yet (503 above).",
        ),
    ] = 256,
    max_queued_bytes: Annotated[
        int,
        typer.Option(
            "--max-queued-bytes",
            min=1024,
            help="Most bytes of panels in decide runs not decided yet (503 above).",
        ),
    ] = 64 * 1024 * 1024,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            callback=number_in(0.001, MAX_SECONDS),
            help="Request timeout in seconds (504 after).",
        ),
    ] = 60.0,
    claim_ttl: Annotated[
        float,
        typer.Option(
            "--claim-ttl",
            callback=number_in(0.001, MAX_SECONDS),
            help="Seconds a review claim holds.",
        ),
    ] = 900.0,
    session_ttl: Annotated[
        float,
        typer.Option(
            "--session-ttl",
            callback=number_in(0.001, MAX_SECONDS),
            help="Seconds a review page login lasts, from the login on.",
        ),
    ] = 8 * 3600.0,
    login_failures: Annotated[
        int,
        typer.Option(
            "--login-failures",
            min=0,
            max=1_000_000,
            help="Unknown tokens one client address may present in a minute; then its "
            "tokens are refused (429) unchecked until the minute has passed (0: no limit).",
        ),
    ] = 20,
    max_connections: Annotated[
        int,
        typer.Option(
            "--max-connections",
            min=1,
            max=1_000_000,
            help="Most connections open at once; a further one is answered 503 and closed.",
        ),
    ] = 1024,
    max_connections_per_address: Annotated[
        int,
        typer.Option(
            "--max-connections-per-address",
            min=1,
            max=1_000_000,
            help="Most connections one client address may hold open (503 above); behind a "
            "reverse proxy every client has the proxy's address.",
        ),
    ] = 128,
    max_agents: Annotated[
        int,
        typer.Option(
            "--max-agents", min=2, max=MAX_AGENTS, help="Most agents per panel (413 above)."
        ),
    ] = MAX_AGENTS,
    max_field_chars: Annotated[
        int,
        typer.Option(
            "--max-field-chars",
            min=1,
            max=MAX_FIELD_CHARS,
            help="Most characters per text field (422 above).",
        ),
    ] = MAX_FIELD_CHARS,
    allow_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-host",
            help="Another name the Host header may carry (repeat; '*': any). "
            "Default: loopback names and --host.",
        ),
    ] = None,
    review_note: Annotated[
        str,
        typer.Option(
            "--review-note",
            help="When the review page requires a note: override (when not the panel's "
            "suggestion), always, never.",
        ),
    ] = "override",
    undo_window: Annotated[
        float,
        typer.Option(
            "--undo-window",
            callback=number_in(0.0, MAX_SECONDS),
            help="Seconds a reviewer may undo a resolution.",
        ),
    ] = 300.0,
    shift_every: Annotated[
        int,
        typer.Option(
            "--shift-every",
            min=0,
            max=1_000_000_000,
            help="Judged cases between two checks of the shift watch over recent requests' "
            "cases (0: no watch).",
        ),
    ] = 100,
) -> None:
    """Serve decide, review and runs over HTTP, with the web review queue at /review."""
    from dissensus.store.journal import journal_path, mask_url

    try:
        from dissensus.serve import ServeSettings, check_exposure, create_app
        from dissensus.serve.server import graceful_shutdown_s, listen, serve
    except ImportError as exc:
        raise ConfigError(
            f"dissensus serve needs the 'serve' extra (pip install 'dissensus[serve]'): {exc}"
        ) from exc
    if review_note not in ("override", "always", "never"):
        raise ConfigError(
            f"--review-note must be override, always or never, not {review_note!r}",
            field="review-note",
        )
    settings = ServeSettings(
        journal=journal_path(journal),
        host=host,
        port=port,
        policy=policy,
        tokens=tokens,
        max_body_bytes=max_body_bytes,
        max_panels=max_panels,
        max_queued_runs=max_queued,
        max_queued_bytes=max_queued_bytes,
        request_timeout_s=timeout,
        claim_ttl_s=claim_ttl,
        session_ttl_s=session_ttl,
        login_failures=login_failures,
        max_connections=max_connections,
        max_connections_per_address=max_connections_per_address,
        max_agents=max_agents,
        max_field_chars=max_field_chars,
        allow_hosts=tuple(allow_host or ()),
        review_note=review_note,
        undo_window_s=undo_window,
        shift_every=shift_every,
    )
    check_exposure(settings)
    # Every setting is checked before the port is bound, the journal opened or anything printed.
    shutdown_s = graceful_shutdown_s()
    sock = listen(host, port)
    application = create_app(settings)
    port = sock.getsockname()[1]
    shown_host = f"[{host.strip('[]')}]" if ":" in host else host
    auth = (
        f"{len(application.state.service.tokens)} token(s)"
        if application.state.service.tokens
        else "no authentication (loopback)"
    )
    err_console.print(
        f"dissensus serve: journal {mask_url(settings.journal)}, {auth}; review page http://{shown_host}:{port}/review",
        highlight=False,
    )
    # Everything alive now (modules, schemas, the app) lives until exit: moving it out of
    # the collector's reach keeps each request's garbage collections small.
    gc.freeze()
    # uvicorn raises the SIGINT / SIGTERM that stopped it again once it has shut down
    # gracefully: that is the server's normal end (exit 0), as fake-llm's is.
    with contextlib.suppress(KeyboardInterrupt):
        serve(
            application,
            application.state.service.runner,
            sock=sock,
            shutdown_s=shutdown_s,
            head_timeout_s=settings.request_timeout_s,
            max_connections=settings.max_connections,
            max_connections_per_address=settings.max_connections_per_address,
        )
    raise typer.Exit(code=EXIT_OK)


@app.command("serve-token")
def serve_token_command(
    name: Annotated[
        str, typer.Argument(help="Who the token is for (recorded with every resolution).")
    ],
    role: Annotated[str, typer.Argument(help="submit, review or admin.")],
) -> None:
    """Make a token: prints the token (keep it secret) and the line for the tokens file."""
    from dissensus.serve.auth import token_line

    if has_control(name):
        # The name is printed here and shown on review pages and in the journal: an
        # escape sequence in it would act on every terminal that prints it.
        raise ConfigError(
            f"a token name may not hold control characters (got {quoted(name)})",
            field="name",
        )
    token, line = token_line(name, role)
    out_console.print(f"token (shown once): {token}", highlight=False)
    out_console.print(f"tokens-file line:   {line}", highlight=False)
    raise typer.Exit(code=EXIT_OK)
