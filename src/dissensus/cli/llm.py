"""CLI command ``dissensus fake-llm``: the loopback OpenAI-compatible server, in the foreground.

Lets users try a configuration offline: start the server on a rule file, then point
any OpenAI-compatible client at it (``OPENAI_BASE_URL=http://127.0.0.1:P/v1``,
``--model openai:fake-model``). It prints ``listening on URL`` to stderr once bound
and serves until interrupted (exit 0). Options override the file's ``server:`` section.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import typer
from pydantic import ValidationError

from dissensus.cli.app import app
from dissensus.cli.common import EXIT_OK, MAX_SECONDS, check_file_input, number_in
from dissensus.errors import ConfigError


@app.command("fake-llm")
def fake_llm(
    port: int = typer.Option(
        ..., "--port", "-p", min=0, max=65535, help="Port to listen on (0 = any free port)."
    ),
    script: str = typer.Option(
        ..., "--script", "-s", help="Rule file (YAML, same format as scripted:FILE)."
    ),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind."),
    latency: float | None = typer.Option(
        None, "--latency", callback=number_in(0.0, MAX_SECONDS), help="Seconds before every answer."
    ),
    fault_rate: float | None = typer.Option(
        None,
        "--fault-rate",
        callback=number_in(0.0, 1.0),
        help="Share of requests that get an injected fault.",
    ),
    seed: int | None = typer.Option(None, "--seed", help="Seed of the fault draws."),
) -> None:
    """Serve /v1/chat/completions and /v1/models from a rule file, with optional faults."""
    from dissensus.io.yamlfile import with_field_line
    from dissensus.llm.fakeserver import FakeServer, ServerSettings
    from dissensus.llm.scripted import load_script, validation_problem

    check_file_input(script, "--script", "rule file")
    rules = load_script(script)
    try:
        settings = ServerSettings.model_validate(rules.server or {})
    except ValidationError as exc:
        where, message = validation_problem(exc)
        error = ConfigError(message, file=script, field="server" + (f".{where}" if where else ""))
        raise with_field_line(error, script, None, what="rule file") from None
    if latency is not None:
        settings.latency_s = latency
    if fault_rate is not None:
        settings.faults.rate = fault_rate
    if seed is not None:
        settings.faults.seed = seed
    server = FakeServer(rules, settings, host=host, port=port)

    def ready(bound: Any) -> None:
        sys.stderr.write(f"listening on {bound.base_url}\n")
        sys.stderr.flush()

    try:
        asyncio.run(server.serve_forever(on_ready=ready))
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    raise typer.Exit(code=EXIT_OK)
