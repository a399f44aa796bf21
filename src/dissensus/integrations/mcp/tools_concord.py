"""The CONCORD tools: ``negotiate`` (off the server's event loop), ``verify_certificate``
and ``bound``.

``negotiate`` and ``verify_certificate`` are :mod:`dissensus.calls`' calls, the ones
``POST /v1/negotiate`` and ``POST /v1/verify`` make, with this server's
:class:`~dissensus.calls.DoorOptions` (function agents only with ``--allow-functions``,
found from the working directory; at most 256 agents): the same mistake is refused with
the same field and message through both doors. The problem's fields are named as in the
problem document (``model``, ``agents.3.kind``), as the service names them; only the
tool's argument schema, checked before the call, names the argument (``problem.floor``).
``bound`` takes the ranges ``dissensus bound`` and ``GET /v1/bound`` take
(:data:`~dissensus.concord.controls.MAX_AGENTS`, :data:`~dissensus.concord.controls.MAX_ROUNDS`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from mcp.server.mcpserver import MCPServer
from pydantic import Field

from dissensus import calls
from dissensus.concord.bounds import Bound, compute_bound
from dissensus.concord.controls import MAX_AGENTS, MAX_ROUNDS
from dissensus.concord.problem import Problem
from dissensus.concord.record import Certificate
from dissensus.concord.verify import Verdict
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
    # The problem as the caller wrote it, checked and run as ``POST /v1/negotiate`` runs
    # its body (the file-level checks off the loop, as the negotiation).
    data = problem.model_dump(mode="json", exclude_unset=True)
    options = calls.DoorOptions(
        allow_functions=allow_functions,
        base_dir=Path.cwd(),
        functions_hint="start the server with --allow-functions to run them",
    )
    return await calls.negotiate(data, deadline=deadline, rule=rule, options=options)


def verify_certificate(certificate: JsonObject) -> Verdict:
    """Recompute a CONCORD certificate from its raw scores; names the first violated property."""
    return calls.verify(certificate)


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
