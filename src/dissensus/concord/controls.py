"""The run controls of CONCORD, checked once for the problem file and the Python API.

Floor and margin lie in [0, 1] (finite), the round budget is an integer in
[0, :data:`MAX_ROUNDS`], agent ids are unique and there are 1 to :data:`MAX_AGENTS`
agents (the most one panel may hold, :mod:`dissensus.io.limits`), and every edge of a workflow
graph names two known agents. :class:`~dissensus.concord.protocol.Negotiation` and
:func:`~dissensus.concord.problem.parse_problem` both call :func:`check_controls`, so a
bad value gets the same message whichever door it came through; the field names the
place (``topology.edges[i]`` in a problem file, ``edges[i]`` in the API).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from dissensus.errors import ConfigError
from dissensus.io.limits import MAX_AGENTS

__all__ = ["MAX_AGENTS", "MAX_ROUNDS", "check_controls"]

MAX_ROUNDS = 1000
"""Largest round budget (repair rounds) of one negotiation."""


def check_controls(
    *,
    floor: float,
    margin: float,
    rounds: int,
    agents: Sequence[str],
    edges: Sequence[Sequence[str]] | None,
    file: str | None = None,
    edges_field: str = "edges",
    deadline_s: float | None = None,
) -> None:
    """Raise :class:`ConfigError` naming the field of the first invalid control."""

    def fail(message: str, field: str) -> ConfigError:
        return ConfigError(message, file=file, field=field)

    if not (math.isfinite(floor) and 0.0 <= floor <= 1.0):
        raise fail(f"floor must lie in [0, 1], got {floor}", "floor")
    if not (math.isfinite(margin) and 0.0 <= margin <= 1.0):
        raise fail(f"margin must lie in [0, 1], got {margin}", "margin")
    if rounds < 0:
        raise fail(f"rounds must be >= 0, got {rounds}", "rounds")
    if rounds > MAX_ROUNDS:
        raise fail(f"rounds must be at most {MAX_ROUNDS}, got {rounds}", "rounds")
    if deadline_s is not None and not (math.isfinite(deadline_s) and deadline_s >= 0):
        # checked before any agent is asked: a NaN deadline ran every (paid) call and then
        # failed to record the run
        raise fail(f"deadline_s must be a finite number >= 0, got {deadline_s}", "deadline_s")
    if not agents:
        raise fail("at least one agent is needed", "agents")
    if len(agents) > MAX_AGENTS:
        raise fail(f"at most {MAX_AGENTS} agents, got {len(agents)}", "agents")
    if len(set(agents)) != len(agents):
        raise fail("agent ids must be unique", "agents")
    known = set(agents)
    for i, edge in enumerate(edges or []):
        if len(edge) != 2:
            raise fail("an edge names exactly two agents", f"{edges_field}[{i}]")
        for end in edge:
            if end not in known:
                raise fail(f"edge names unknown agent {end!r}", f"{edges_field}[{i}]")
