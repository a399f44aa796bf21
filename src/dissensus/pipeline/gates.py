"""The gates between reading and protocol: routing (``docs/states.md``) and the guard (``docs/guard.md``).

:func:`route_step` routes a reading with the policy's defeasible rules (the route is
the rule engine's alone: the record names the deciding rule); :func:`guard_step` audits
the panel's votes and says whether its agreement is evidence-backed and independent.
Both return the typed step the journal keeps (:mod:`dissensus.pipeline.steps`).

Choices this module makes:

* The guard checks the panel's votes as :func:`dissensus.guard.panel_votes` reads them
  (re-exported here): a vote's provenance is the agent's first evidence item that was
  present and is not a model's own memory, else its first present item, else its first
  item, else ``parametric:<family or agent>``; a parametric source is no evidence to the
  guard, even marked present.
* "Evidence-backed and independent" means guard invariants 1 and 2 hold, and 3 as well
  when the policy names a guard calibration, and the guard's answer is the panel's
  (untied) plurality.
* ``routing.convergent_disagreement_without_values: seek_context`` switches on the
  built-in rule ``cd-without-values`` (:data:`dissensus.states.routing.BUILTIN_RULES`):
  the rules see ``value_profiles``, the number of agents that state a value profile.
* The guard's step is built without a second validation (its values are the guard's
  validated decision, two bools and the reason).
* :func:`follow_up_of` is the one reading of which follow-up a route gets (none, a
  re-ask, a DCI deliberation); :func:`reaches_acceptance` and :func:`asks_a_model`
  (whether a policy can make any model call: ``runs resume`` checks the journalled model
  specs only then) read it, so neither disagrees with the pipeline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dissensus.guard import (
    GuardDecision,
    GuardThresholds,
    ReliabilityFit,
    guard_votes,
    panel_votes,
)
from dissensus.pipeline.policy import Policy, guard_thresholds
from dissensus.pipeline.runtime import Runtime, policy_rules
from dissensus.pipeline.steps import GuardStep
from dissensus.states import Reading, Route
from dissensus.types import Panel, trusted

__all__ = [
    "AUTO_ACTIONS",
    "check_guard",
    "guard_backs",
    "guard_step",
    "judged_by_acceptance",
    "panel_votes",
    "reaches_acceptance",
    "route_step",
    "second_answers_under",
]

AUTO_ACTIONS = ("auto", "auto_explain")
"""The routes that commit on the guard's word when it backs the agreement."""


def route_step(rt: Runtime, panel: Panel, reading: Reading) -> Route:
    """The policy's rules applied to the reading (built-in rules included)."""
    value_profiles = sum(1 for o in panel.outputs if o.values)
    return rt.rules.route(reading, panel.meta, value_profiles=value_profiles)


def guard_backs(
    decision: GuardDecision, reading: Reading, *, calibrated: bool
) -> tuple[bool, bool]:
    """``(independent, backed)`` of a guard decision on a panel read as ``reading``:
    invariants 1 and 2 hold (and 3 when the guard is ``calibrated``), and, for backed,
    the guard's answer is the panel's untied plurality."""
    checks = {c.number: c.holds for c in decision.invariants}
    independent = (
        checks.get(1, False) and checks.get(2, False) and (checks.get(3, False) or not calibrated)
    )
    return independent, independent and decision.answer == reading.decision and not reading.tie


def reaches_acceptance(
    action: str, backed: bool, followup: str = "reask", max_followups: int = 1
) -> bool:
    """Whether a case routed to ``action``, with the guard backing its agreement or not,
    is judged by acceptance (:func:`dissensus.pipeline.engine.decide_case`) under the
    policy's ``seek_context.followup`` and ``max_followups``, as ``_seek_context`` goes:
    a backed automatic route commits on the guard's word and ``escalate`` / ``concord``
    go to a human (or CONCORD); an unbacked automatic route, ``seek_context`` and
    ``deliberate`` seek context, where acceptance judges the case unless a DCI
    deliberation runs (``deliberate`` whatever ``followup`` says, or ``followup: dci``;
    only ``max_followups: 0`` stops it): its packet goes to a reviewer."""
    if action in AUTO_ACTIONS:
        if backed:
            return False
    elif action not in ("seek_context", "deliberate"):
        return False
    # With no follow-up acceptance judges the panel as it is.
    return follow_up_of(action, followup, max_followups) != "dci"


def follow_up_of(action: str, followup: str = "reask", max_followups: int = 1) -> str:
    """The follow-up a case routed to ``action`` gets if it seeks context (an automatic
    route the guard does not back, ``seek_context``, ``deliberate``), as
    ``_seek_context`` goes: ``"none"`` (``seek_context.followup: none`` or
    ``max_followups: 0``; only the latter stops a ``deliberate`` route's DCI), ``"dci"``
    or ``"reask"``."""
    effective = "dci" if action == "deliberate" else followup
    if effective == "none" or max_followups == 0:
        return "none"
    return effective


def asks_a_model(policy: Policy) -> bool:
    """Whether a run under ``policy`` can make a model call: some route its rules can
    take (defaults included) seeks context with a follow-up (:func:`follow_up_of`). A
    recorded re-ask asks no model, yet a case without one does: counted as asking."""
    sc = policy.seek_context
    return any(
        follow_up_of(rule.action, sc.followup, sc.max_followups) != "none"
        for rule in policy_rules(policy).rules
        if rule.action in (*AUTO_ACTIONS, "seek_context", "deliberate")
    )


def judged_by_acceptance(
    policy: Policy,
    panels: Sequence[Panel],
    readings: Sequence[Reading],
    guard_calibration: ReliabilityFit | None = None,
) -> list[bool]:
    """For each panel read as ``readings``, whether ``decide`` under ``policy`` would
    have acceptance judge it (:func:`reaches_acceptance` of its route and guard check):
    the population an acceptance file for this policy is calibrated on."""
    rules = policy_rules(policy)
    settings = guard_thresholds(policy)
    out: list[bool] = []
    for panel, reading in zip(panels, readings, strict=True):
        value_profiles = sum(1 for o in panel.outputs if o.values)
        action = rules.route(reading, panel.meta, value_profiles=value_profiles).action
        backed = action in AUTO_ACTIONS and (
            check_guard(
                panel,
                reading,
                enabled=policy.guard.enabled,
                calibration=guard_calibration,
                settings=settings,
            ).backed
        )
        sc = policy.seek_context
        out.append(reaches_acceptance(action, backed, sc.followup, sc.max_followups))
    return out


def guard_step(rt: Runtime, panel: Panel, reading: Reading) -> GuardStep:
    """The guard's check of the panel (``docs/guard.md``) under the run's policy."""
    return check_guard(
        panel,
        reading,
        enabled=rt.policy.guard.enabled,
        calibration=rt.guard_calibration,
        settings=rt.guard_settings,
    )


def check_guard(
    panel: Panel,
    reading: Reading,
    *,
    enabled: bool,
    calibration: ReliabilityFit | None,
    settings: GuardThresholds,
) -> GuardStep:
    """The guard's check of the panel with these settings (:func:`guard_step`)."""
    if not enabled:
        return GuardStep(
            applicable=False,
            backed=False,
            reason="guard disabled by policy: no agreement is evidence",
        )
    votes = panel_votes(panel)
    if len(votes) < 2:
        return GuardStep(
            applicable=False, backed=False, reason=f"{len(votes)} vote(s): nothing to audit"
        )
    decision = guard_votes(votes, calibration, settings=settings, case_id=panel.id)
    independent, backed = guard_backs(decision, reading, calibrated=calibration is not None)
    if backed:
        held = "; ".join(c.message for c in decision.invariants if c.holds)
        reason = f"guard: evidence-backed and independent agreement on {decision.answer!r} ({held})"
    elif independent:
        reason = f"guard answer {decision.answer!r} differs from the panel's plurality {reading.decision!r}"
    else:
        failed = decision.refusal.message if decision.refusal else "an invariant failed"
        reason = f"guard refused consensus: {failed}"
    # Every value is already of its field's type (the guard's decision, bools, text).
    values = {"applicable": True, "backed": backed, "reason": reason, "decision": decision}
    return trusted(GuardStep, values)


def second_answers_under(policy: Policy, environ: Mapping[str, str] | None = None) -> bool:
    """Whether a case that reaches learned acceptance under ``policy`` has second answers
    (the re-ask features): its follow-up is a re-ask (``seek_context.followup: reask``,
    at least one round) whose answers are the panel's recorded ones
    (``use_recorded``) or a model's (``seek_context.model`` / ``models`` /
    ``$DISSENSUS_MODEL``). ``calibrate-acceptance`` reads the panels' recorded re-asks
    only then, as ``decide`` would have them (a live model's re-asks stand in as the
    recorded ones); otherwise its features, like ``decide``'s, have none."""
    import os

    from dissensus.pipeline.spec import MODEL_ENV

    sc = policy.seek_context
    if sc.followup != "reask" or sc.max_followups == 0:
        return False
    env = os.environ if environ is None else environ
    return sc.use_recorded or bool(sc.model or sc.models or env.get(MODEL_ENV))
