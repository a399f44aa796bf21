"""The CONCORD tools: ``negotiate`` (off the server's event loop), ``verify_certificate``
and ``bound``."""

from __future__ import annotations

import asyncio
import functools
import os
from pathlib import Path
from typing import Annotated

from mcp.server.mcpserver import MCPServer
from pydantic import Field

from dissensus.agents.off_loop import negotiate_off_loop
from dissensus.concord.bounds import Bound, compute_bound
from dissensus.concord.controls import MAX_AGENTS, MAX_ROUNDS
from dissensus.concord.problem import Problem, parse_problem
from dissensus.concord.record import Certificate
from dissensus.concord.verify import Verdict
from dissensus.concord.verify import verify as verify_record
from dissensus.errors import ConfigError
from dissensus.integrations.mcp.errors import _reported
from dissensus.integrations.mcp.settings import _Settings
from dissensus.types import JsonObject


async def _negotiate(
    problem: Problem,
    rule: str | None,
    deadline: float | None,
    *,
    allow_functions: bool,
) -> Certificate:
    from dissensus.concord.rules import RULES

    if rule is not None and rule not in RULES:
        raise ConfigError(
            f"unknown rule {rule!r}; expected one of {', '.join(RULES)}", field="rule"
        )
    # The file-level checks the CLI applies (anchors scored by every table agent, ...),
    # off the loop as the negotiation: a large problem takes a while to check.
    data = problem.model_dump(mode="json", exclude_unset=True)
    problem = await asyncio.to_thread(functools.partial(parse_problem, data, file="problem"))
    for i, agent in enumerate(problem.agents):
        if agent.kind == "function" and not allow_functions:
            raise ConfigError(
                "function agents import server-side code: start the server with --allow-functions",
                field=f"problem.agents.{i}.kind",
            )
    if problem.model:
        raise ConfigError(
            "the model is the server's ($DISSENSUS_MODEL), not the caller's", field="problem.model"
        )
    spec: str | None = None
    if any(a.kind == "llm" for a in problem.agents):
        spec = os.environ.get("DISSENSUS_MODEL")
        if not spec:
            raise ConfigError(
                "the problem has LLM agents: the server has no model ($DISSENSUS_MODEL)",
                field="model",
            )
    return await negotiate_off_loop(
        problem,
        model=spec,
        deadline=deadline,
        rule=rule,
        base_dir=Path.cwd(),
        threaded=deadline is not None,
    )


def verify_certificate(certificate: JsonObject) -> Verdict:
    """Recompute a CONCORD certificate from its raw scores; names the first violated property."""
    if set(certificate) == {"certificate", "comparison"} and isinstance(
        certificate["certificate"], dict
    ):
        certificate = certificate["certificate"]
    return verify_record(certificate)


def bound(
    agents: Annotated[int, Field(ge=1, le=MAX_AGENTS, strict=True)],
    rounds: Annotated[int, Field(ge=0, le=MAX_ROUNDS, strict=True)],
) -> Bound:
    """The worst-case cost of a CONCORD run, known before it starts: 1 to 256 agents and
    0 to 1,000 repair rounds, as ``dissensus bound`` and a problem file take."""
    return compute_bound(agents, rounds)


def add_concord_tools(server: MCPServer, settings: _Settings) -> None:
    """Register ``negotiate``, ``verify_certificate`` and ``bound``."""

    async def negotiate(
        problem: Problem,
        rule: str | None = None,
        deadline: Annotated[float | None, Field(ge=0.0)] = None,
    ) -> Certificate:
        """Negotiate one decision with CONCORD; returns the certificate (or shortfall)."""
        return await _negotiate(problem, rule, deadline, allow_functions=settings.allow_functions)

    server.add_tool(_reported(negotiate), name="negotiate")
    server.add_tool(_reported(verify_certificate), name="verify_certificate")
    server.add_tool(_reported(bound), name="bound")
