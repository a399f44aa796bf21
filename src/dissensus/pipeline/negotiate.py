"""CONCORD inside the pipeline: decisions over explicit options with role utilities (``docs/concord.md``).

A panel qualifies when ``meta.options`` lists the options (``{id, text}`` or plain ids)
and ``meta.utilities`` gives, for every agent, a utility per option on the calibrated
scale (0 = the rejected anchor, 1 = the ideal anchor). Each agent becomes a table agent
(:class:`dissensus.agents.table.TableAgent`) and CONCORD runs with the policy's floor,
margin and round budget: a ``certified`` outcome commits (every agent at or above the
floor); a ``best_effort`` one goes to the human with its shortfall.

Choices where the design is silent: the anchors are named ``__rejected__`` and
``__ideal__`` and scored 0 and 1 by every agent, so the utilities are used as given; an
agent missing from ``meta.utilities``, a missing option or a utility outside [0, 1]
makes the panel not qualify (a negotiation that ignores a stakeholder is not one), and
the escalation's reason says why CONCORD did not run.
"""

from __future__ import annotations

from dissensus.agents.negotiator import NegotiationAgent, Outcome
from dissensus.agents.table import TableAgent
from dissensus.cases import CaseSpec
from dissensus.concord.protocol import negotiate
from dissensus.pipeline.followup import case_options
from dissensus.pipeline.policy import ConcordSettings
from dissensus.pipeline.steps import ConcordStep
from dissensus.types import Panel

__all__ = ["concord_refusal", "has_utilities", "run_concord"]

_REJECTED = Outcome(id="__rejected__", text="no option is adopted")
_IDEAL = Outcome(id="__ideal__", text="an option every role fully endorses")


def _utilities(panel: Panel) -> tuple[dict[str, dict[str, float]] | None, str]:
    """The utility table, or ``None`` and why it is unusable (:class:`~dissensus.cases.CaseSpec`)."""
    case = CaseSpec.from_meta(panel.meta)
    if case.utilities is None:
        return None, case.utilities_problem or (
            "meta.utilities is not a mapping of agent -> option -> utility"
        )
    return case.utilities, ""


def concord_refusal(panel: Panel) -> str | None:
    """Why CONCORD cannot run on the panel (``None``: it can): explicit options and a
    utility in [0, 1] for every option from every agent are needed."""
    utilities, why = _utilities(panel)
    if utilities is None:
        return why
    options = case_options(panel)
    if len(options) < 2 or "options" not in panel.meta:
        return "meta.options does not list at least two options"
    ids = {oid for oid, _ in options}
    for out in panel.outputs:
        if out.agent not in utilities:
            return f"agent {out.agent} has no utilities"
        missing = sorted(ids - set(utilities[out.agent]))
        if missing:
            return f"agent {out.agent} gives no utility for option(s) {', '.join(missing)}"
    return None


def has_utilities(panel: Panel) -> bool:
    """Whether the panel has explicit options and a utility table for every agent."""
    # Without meta.utilities the case has no utility table (CaseSpec): nothing to parse.
    return "utilities" in panel.meta and concord_refusal(panel) is None


async def run_concord(panel: Panel, settings: ConcordSettings) -> ConcordStep:
    """Run CONCORD on the panel's options and utilities; a summary plus the sealed certificate."""
    utilities = _utilities(panel)[0] or {}
    options = [Outcome(id=oid, text=text or oid) for oid, text in case_options(panel)]
    agents: list[NegotiationAgent] = []
    for out in panel.outputs:
        table = dict(utilities[out.agent])
        table[str(_REJECTED.id)] = 0.0
        table[str(_IDEAL.id)] = 1.0
        agents.append(TableAgent(out.agent, table))
    certificate = await negotiate(
        agents,
        rejected=_REJECTED,
        ideal=_IDEAL,
        floor=settings.floor,
        margin=settings.margin,
        rounds=settings.rounds,
        options=options,
        problem=CaseSpec.from_meta(panel.meta).question or f"case {panel.id}",
    )
    selected = certificate.selected.id if certificate.selected else None
    shortfall = ", ".join(
        f"{s.agent} {s.score:.2f} (gap {s.gap:.2f})" for s in certificate.shortfall
    )
    return ConcordStep(
        status=certificate.status,
        decision=selected,
        worst_off=certificate.worst_off,
        summary=f"worst-off {certificate.worst_off}"
        + (f"; below the floor: {shortfall}" if shortfall else ""),
        certificate=certificate.sealed(),
    )
