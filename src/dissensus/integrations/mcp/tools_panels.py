"""The tools ``route`` and ``vote``: panels read and routed, vote cases guarded, nothing
journalled."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import MCPServer
from pydantic import Field

from dissensus import calls
from dissensus.errors import ConfigError
from dissensus.guard import GuardThresholds, ReliabilityFit, guard_case
from dissensus.guard.decision import GuardDecision
from dissensus.integrations.mcp.arguments import (
    CalibrationArg,
    RulesArg,
    _within_limits,
    with_untrusted_text,
)
from dissensus.integrations.mcp.caller_files import _caller_file
from dissensus.integrations.mcp.errors import _reported
from dissensus.integrations.mcp.settings import _Settings
from dissensus.io.jsontext import load_json_file
from dissensus.outputs import RouteRecord
from dissensus.states.routing import RuleSet, RulesFile
from dissensus.states.similarity import DEFAULT_BACKEND, backend_key, get_backend
from dissensus.types import Panel, VoteCase

_SERVED = ("minilm", "tfidf", "static")
"""The similarity backends ``route`` serves (any spelling :func:`backend_key` reads)."""


def _route(
    settings: _Settings,
    panels: list[Panel],
    similarity: str,
    theta_s: float | None,
    theta_a: float | None,
    rules: str | None,
) -> list[RouteRecord]:
    calls.refuse_code_backend(similarity)
    if backend_key(similarity) not in _SERVED:
        # the library's message offers 'module:function', which this server refuses
        raise ConfigError(
            f"unknown similarity backend {similarity!r}; expected one of {', '.join(_SERVED)}",
            field="similarity",
        )
    _within_limits(panels, "panels")
    ruleset = RuleSet.default()
    if rules:
        name = settings.file(rules, "rules")
        ruleset = _caller_file(
            lambda: RuleSet.load(name), name, field="rules", what="rules file", schema=RulesFile
        )
    backend = get_backend(similarity)
    return calls.route(panels, backend, theta_s=theta_s, theta_a=theta_a, rules=ruleset)


def _vote(
    settings: _Settings,
    cases: list[VoteCase],
    beta: float,
    calibration: str | None,
    strict: bool,
    verifier: str | None,
) -> list[GuardDecision]:
    _within_limits(cases, "cases")
    cal = None
    if calibration:
        name = settings.file(calibration, "calibration")
        cal = _caller_file(
            lambda: ReliabilityFit.model_validate(load_json_file(name, what="calibration")),
            name,
            field="calibration",
            what="calibration",
            schema=ReliabilityFit,
        )
    thresholds = GuardThresholds()
    return [
        guard_case(case, cal, beta=beta, strict=strict, verifier=verifier, settings=thresholds)
        for case in cases
    ]


def add_panel_tools(server: MCPServer, settings: _Settings) -> None:
    """Register ``route`` and ``vote``."""

    def route(
        panels: list[Panel],
        similarity: str = DEFAULT_BACKEND,
        theta_s: Annotated[float | None, Field(ge=-1.0, le=1.0)] = None,
        theta_a: Annotated[float | None, Field(ge=0.0, le=1.0)] = None,
        rules: RulesArg = None,
    ) -> list[RouteRecord]:
        """Read each panel's disagreement state (CA/DA/CD/DD) and route it to an action."""
        return _route(settings, panels, similarity, theta_s, theta_a, rules)

    def vote(
        cases: list[VoteCase],
        beta: Annotated[float, Field(ge=0.0, allow_inf_nan=False)] = 1.5,
        calibration: CalibrationArg = None,
        strict: bool = False,
        verifier: str | None = None,
    ) -> list[GuardDecision]:
        """Decide every vote case under the guard: mode, answer, confidence, n_eff and why."""
        return _vote(settings, cases, beta, calibration, strict, verifier)

    server.add_tool(_reported(route), name="route", description=with_untrusted_text(route))
    server.add_tool(_reported(vote), name="vote")
