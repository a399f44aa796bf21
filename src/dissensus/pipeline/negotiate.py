"""CONCORD inside the pipeline: decisions over explicit options with role utilities (``docs/concord.md``).

A panel qualifies when ``meta.options`` lists the options (``{id, text}`` or plain ids)
and ``meta.utilities`` gives, for every agent, a utility per option on the calibrated
scale (0 = the rejected anchor, 1 = the ideal anchor). Each agent becomes a table agent
(:class:`dissensus.concord.table.TableAgent`) and CONCORD runs with the policy's floor,
margin and round budget: a ``certified`` outcome commits (every agent at or above the
floor); a ``best_effort`` one goes to the human with its shortfall.

Choices this module makes: the anchors are named ``__rejected__`` and
``__ideal__`` (with a numeric suffix when an option already has that id, so an option is
never taken for an anchor) and scored 0 and 1 by every agent, so the utilities are used
as given; an agent missing from ``meta.utilities``, a missing option, a utility outside
[0, 1] or an option id listed twice in ``meta.options`` makes the panel not qualify (a
negotiation that ignores a stakeholder is not one), and the escalation's reason says why
CONCORD did not run. A best-effort outcome's reason names every agent below the floor
with its score and gap to two decimals, or with as many digits as it takes for a score
below the floor never to read as the floor (``m1 0.6999999999999998 (gap 1.1e-16)``,
not ``m1 0.70 (gap 0.00)``) and a gap never to read as 0; a worst-off score the record
rounded onto the floor (12 decimals) is shown as the unrounded one below it.
"""

from __future__ import annotations

from collections.abc import Mapping

from dissensus.cases import CaseSpec
from dissensus.concord.agent import NegotiationAgent, Outcome
from dissensus.concord.protocol import negotiate
from dissensus.concord.record import Certificate
from dissensus.concord.scale import below_floor, gap_text
from dissensus.concord.table import TableAgent
from dissensus.pipeline.followup import case_options
from dissensus.pipeline.policy import ConcordSettings
from dissensus.pipeline.steps import ConcordStep
from dissensus.types import Panel

__all__ = ["below_floor", "concord_refusal", "gap_text", "has_utilities", "run_concord"]

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
    duplicate = _duplicate_option(panel.meta.get("options"))
    if duplicate is not None:
        return duplicate
    ids = {oid for oid, _ in options}
    for out in panel.outputs:
        if out.agent not in utilities:
            return f"agent {out.agent} has no utilities"
        missing = sorted(ids - set(utilities[out.agent]))
        if missing:
            return f"agent {out.agent} gives no utility for option(s) {', '.join(missing)}"
    return None


def _duplicate_option(raw: object) -> str | None:
    """Why a list of options is ambiguous: the first item repeating an earlier id."""
    if not isinstance(raw, list):
        return None  # a mapping cannot repeat a key
    seen: set[str] = set()
    for i, item in enumerate(raw):
        # the rule of dissensus.cases: an item's id, else its 1-based position
        if isinstance(item, Mapping):
            oid = str(item["id"]) if item.get("id") is not None else str(i + 1)
        else:
            oid = str(item)
        if oid in seen:
            return f"meta.options.{i}.id {oid!r} repeats an option id"
        seen.add(oid)
    return None


def _anchor_id(base: str, taken: set[str]) -> str:
    """``base``, or ``base`` with the first numeric suffix no option uses."""
    candidate, k = base, 1
    while candidate in taken:
        candidate, k = f"{base}{k}", k + 1
    return candidate


def has_utilities(panel: Panel) -> bool:
    """Whether the panel has explicit options and a utility table for every agent."""
    # Without meta.utilities the case has no utility table (CaseSpec): nothing to parse.
    return "utilities" in panel.meta and concord_refusal(panel) is None


def _worst_off(certificate: Certificate) -> str:
    """The leader's worst-off score as recorded, unless the record rounded it onto the
    floor while an agent is below it: then the lowest unrounded score, shown below it."""
    worst, floor = certificate.worst_off, certificate.floor
    if worst is None or worst < floor or not certificate.shortfall:
        return str(worst)
    return below_floor(worst, max(s.gap for s in certificate.shortfall), floor)


async def run_concord(panel: Panel, settings: ConcordSettings) -> ConcordStep:
    """Run CONCORD on the panel's options and utilities; a summary plus the sealed certificate."""
    utilities = _utilities(panel)[0] or {}
    options = [Outcome(id=oid, text=text or oid) for oid, text in case_options(panel)]
    taken = {str(o.id) for o in options}
    rejected = _REJECTED.model_copy(update={"id": _anchor_id(str(_REJECTED.id), taken)})
    taken.add(str(rejected.id))
    ideal = _IDEAL.model_copy(update={"id": _anchor_id(str(_IDEAL.id), taken)})
    agents: list[NegotiationAgent] = []
    for out in panel.outputs:
        table = dict(utilities[out.agent])
        table[str(rejected.id)] = 0.0
        table[str(ideal.id)] = 1.0
        agents.append(TableAgent(out.agent, table))
    certificate = await negotiate(
        agents,
        rejected=rejected,
        ideal=ideal,
        floor=settings.floor,
        margin=settings.margin,
        rounds=settings.rounds,
        options=options,
        problem=CaseSpec.from_meta(panel.meta).question or f"case {panel.id}",
    )
    selected = certificate.selected.id if certificate.selected else None
    shortfall = ", ".join(
        f"{s.agent} {below_floor(s.score, s.gap, certificate.floor)} (gap {gap_text(s.gap)})"
        for s in certificate.shortfall
    )
    return ConcordStep(
        status=certificate.status,
        decision=selected,
        worst_off=certificate.worst_off,
        summary=f"worst-off {_worst_off(certificate)}"
        + (f"; below the floor: {shortfall}" if shortfall else ""),
        certificate=certificate.sealed(),
    )
