"""The CLI starts cheaply: registering the commands loads no library part they run.

Each command imports what it needs when it runs; the few library constants the help
texts show are spelt out in the command modules, and these tests keep them equal.
"""

from __future__ import annotations

import json
import subprocess
import sys

from cli_helpers import cli

# Loaded by a command when it runs, never by registering the commands.
HEAVY = (
    "numpy",
    "dissensus.states",
    "dissensus.pipeline",
    "dissensus.llm",
    "dissensus.concord",
    "dissensus.dci",
    "dissensus.guard",
    "dissensus.signing",
    "dissensus.store",
    "dissensus.convert",
    "dissensus.acceptance",
    "cryptography",
)


def test_registering_the_commands_loads_no_library_part() -> None:
    code = (
        "import json, sys; import dissensus.cli; from dissensus.cli import _command; _command(); "
        f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert json.loads(done.stdout) == []


def test_the_constants_the_help_shows_are_the_librarys() -> None:
    from dissensus.cli import concord, dci, route
    from dissensus.concord.controls import MAX_AGENTS, MAX_ROUNDS
    from dissensus.concord.rules import RULES
    from dissensus.llm import MODEL_ENV
    from dissensus.states.similarity import DEFAULT_BACKEND

    assert route.DEFAULT_BACKEND == DEFAULT_BACKEND
    assert tuple(concord.RULES) == tuple(RULES)
    assert (concord.MAX_AGENTS, concord.MAX_ROUNDS) == (MAX_AGENTS, MAX_ROUNDS)
    assert dci.MODEL_ENV == MODEL_ENV


def test_the_route_module_still_offers_the_streaming_helpers() -> None:
    from dissensus.cli import route
    from dissensus.states import stream

    assert route.route_stream is stream.route_stream
    assert route.record_of is stream.record_of
    assert route.RouteTally is stream.RouteTally


def test_the_command_tree_is_reused_between_calls() -> None:
    first = cli("bound", "--agents", "3", "--rounds", "2", "--json")
    again = cli("bound", "--agents", "3", "--rounds", "2", "--json")
    assert first.code == again.code == 0 and first.out == again.out
    bad = cli("bound", "--agents", "0", "--rounds", "2")
    assert bad.code == 2 and bad.err.startswith("error: ")
    assert cli("bound", "--agents", "3", "--rounds", "2", "--json").out == first.out
