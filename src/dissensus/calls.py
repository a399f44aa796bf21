"""The library calls the HTTP service and the MCP server make for a caller they do not
trust: ``route``, ``negotiate`` and ``verify``, one copy below both doors
(:mod:`dissensus.serve.library_calls` and :mod:`dissensus.integrations.mcp`), so the same
request is checked alike and the same mistake names the same field with the same message
through either. What differs between the doors is a :class:`DoorOptions`: whether
function agents run, the folder they are found from, and the most agents a negotiation
may hold.

Choices this module makes:

* The fields a refusal names are those of the problem document (``model``, ``agents``,
  ``agents.2.kind``) and the call's own options (``deadline``, ``rule``,
  ``similarity``), as ``POST /v1/negotiate`` (whose body is the problem) names them; the
  MCP tool, whose argument holds the problem, names them the same way.
* A negotiation's deadline is a finite number of seconds, at least 0, as
  ``negotiate --deadline`` requires (the certificate records it, and JSON holds no
  infinity); at most :attr:`DoorOptions.max_agents` agents are negotiated
  (:class:`TooManyAgents`, counted before the problem is parsed).
* A ``model`` in the problem is refused (it could name a file on the server); LLM agents
  use the server's ``$DISSENSUS_MODEL``. Function agents name Python code to import and
  are refused unless the door allows them (:attr:`DoorOptions.allow_functions`: the MCP
  server started with ``--allow-functions``; never the HTTP service). The refusal's
  message is the same through both doors, but where the door can allow them (MCP) it
  adds how (:attr:`DoorOptions.functions_hint`).
* ``module:function`` similarity backends import code and are refused by both doors
  (:func:`refuse_code_backend`); which built-in backends a door serves is its own.
* ``verify`` accepts ``negotiate --compare`` output (``{certificate, comparison}``) and
  recomputes its certificate.
"""

from __future__ import annotations

import asyncio
import math
import os
from dataclasses import dataclass
from pathlib import Path

from dissensus.agents.off_loop import negotiate_off_loop
from dissensus.concord.problem import parse_problem
from dissensus.concord.record import Certificate
from dissensus.concord.rules import RULES, SelectionRule
from dissensus.concord.verify import Verdict
from dissensus.concord.verify import verify as verify_record
from dissensus.errors import ConfigError
from dissensus.io.limits import MAX_AGENTS
from dissensus.outputs import RouteRecord
from dissensus.states.reading import Thresholds, read_panels
from dissensus.states.routing import RuleSet
from dissensus.states.similarity import SimilarityBackend
from dissensus.types import JsonObject, Panel

__all__ = [
    "DoorOptions",
    "TooManyAgents",
    "negotiate",
    "refuse_code_backend",
    "route",
    "verify",
]


@dataclass(frozen=True)
class DoorOptions:
    """What one door lets a caller do."""

    allow_functions: bool = False
    """Whether function agents (Python code on the server) run."""
    base_dir: Path | None = None
    """The folder function agents' modules are found from first."""
    max_agents: int = MAX_AGENTS
    """The most agents one negotiation may hold."""
    functions_hint: str | None = None
    """What the refusal of a function agent adds, where the door can allow them (the MCP
    server: how to start it with function agents)."""


class TooManyAgents(ConfigError):
    """A negotiation with more agents than the door allows (HTTP 413)."""


def refuse_code_backend(name: str) -> None:
    """Refuse a ``module:function`` similarity backend (it imports code), naming ``similarity``."""
    if ":" in name:
        raise ConfigError(
            f"module:function backends import server-side code and are not served ({name!r})",
            field="similarity",
        )


def route(
    panels: list[Panel],
    backend: SimilarityBackend,
    *,
    theta_s: float | None,
    theta_a: float | None,
    rules: RuleSet | None = None,
) -> list[RouteRecord]:
    """Read and route panels (``dissensus route --json``), with the default rules unless
    ``rules`` are given."""
    thresholds = Thresholds.for_model(backend.name, theta_s, theta_a)
    ruleset = rules if rules is not None else RuleSet.default()
    readings = read_panels(panels, backend, thresholds)
    return [
        RouteRecord.of(r, ruleset.route(r, p.meta)) for p, r in zip(panels, readings, strict=True)
    ]


def _checked_rule(rule: str | None) -> SelectionRule | None:
    if rule is not None and rule not in RULES:
        raise ConfigError(
            f"unknown rule {rule!r}; expected one of {', '.join(RULES)}", field="rule"
        )
    return rule


def _check_deadline(deadline: float | None) -> None:
    if deadline is not None and not (math.isfinite(deadline) and deadline >= 0):
        raise ConfigError(
            f"the deadline must be a finite number of seconds, at least 0 (got {deadline})",
            field="deadline",
        )


def _check_document(data: object, max_agents: int) -> None:
    if isinstance(data, dict) and data.get("model"):
        raise ConfigError(
            "the server uses its own model for LLM agents ($DISSENSUS_MODEL); remove 'model'",
            field="model",
        )
    agents_in = data.get("agents") if isinstance(data, dict) else None
    if isinstance(agents_in, list) and len(agents_in) > max_agents:
        raise TooManyAgents(
            f"{len(agents_in)} agents; at most {max_agents} per negotiation", field="agents"
        )


async def negotiate(
    data: object, *, deadline: float | None, rule: str | None, options: DoorOptions
) -> Certificate:
    """Run CONCORD on a problem document (``dissensus negotiate --json``) off the caller's
    event loop (:func:`~dissensus.agents.off_loop.negotiate_off_loop`; the problem is
    parsed in a worker thread too)."""
    selection = _checked_rule(rule)
    _check_deadline(deadline)
    _check_document(data, options.max_agents)
    problem = await asyncio.to_thread(parse_problem, data)
    for i, agent in enumerate(problem.agents):
        if agent.kind == "function" and not options.allow_functions:
            hint = f" ({options.functions_hint})" if options.functions_hint else ""
            raise ConfigError(
                "function agents import server-side code and are not run by this server" + hint,
                field=f"agents.{i}.kind",
            )
    spec: str | None = None
    if any(a.kind == "llm" for a in problem.agents):
        spec = os.environ.get("DISSENSUS_MODEL")
        if not spec:
            raise ConfigError(
                "the problem has LLM agents and the server has no model ($DISSENSUS_MODEL)",
                field="model",
            )
    return await negotiate_off_loop(
        problem,
        model=spec,
        deadline=deadline,
        rule=selection,
        base_dir=options.base_dir,
        threaded=deadline is not None,
    )


def verify(data: JsonObject) -> Verdict:
    """Recompute a certificate (``dissensus verify --json``); accepts ``negotiate --compare``
    output."""
    if set(data) == {"certificate", "comparison"} and isinstance(data["certificate"], dict):
        data = data["certificate"]
    return verify_record(data)
