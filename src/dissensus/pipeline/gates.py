"""The gates between reading and protocol: routing (``docs/states.md``) and the guard (``docs/guard.md``).

:func:`route_step` routes a reading with the policy's defeasible rules (the route is
the rule engine's alone: the record names the deciding rule); :func:`guard_step` audits
the panel's votes and says whether its agreement is evidence-backed and independent.
Both return the typed step the journal keeps (:mod:`dissensus.pipeline.steps`).

Choices where the design is silent:

* The guard checks the panel's votes as :func:`dissensus.guard.panel_votes` reads them
  (re-exported here): a vote's provenance is the agent's first evidence item that was
  present, else ``parametric:<family or agent>``.
* "Evidence-backed and independent" means guard invariants 1 and 2 hold, and 3 as well
  when the policy names a guard calibration, and the guard's answer is the panel's
  (untied) plurality.
* ``routing.convergent_disagreement_without_values: seek_context`` switches on the
  built-in rule ``cd-without-values`` (:data:`dissensus.states.routing.BUILTIN_RULES`):
  the rules see ``value_profiles``, the number of agents that state a value profile.
* The guard's step is built without a second validation (its values are the guard's
  validated decision, two bools and the reason).
"""

from __future__ import annotations

from dissensus.guard import guard_votes, panel_votes
from dissensus.pipeline.runtime import Runtime
from dissensus.pipeline.steps import GuardStep
from dissensus.states import Reading, Route
from dissensus.types import Panel, trusted

__all__ = ["guard_step", "panel_votes", "route_step"]


def route_step(rt: Runtime, panel: Panel, reading: Reading) -> Route:
    """The policy's rules applied to the reading (built-in rules included)."""
    value_profiles = sum(1 for o in panel.outputs if o.values)
    return rt.rules.route(reading, panel.meta, value_profiles=value_profiles)


def guard_step(rt: Runtime, panel: Panel, reading: Reading) -> GuardStep:
    """The guard's check of the panel (``docs/guard.md``)."""
    if not rt.policy.guard.enabled:
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
    decision = guard_votes(
        votes, rt.guard_calibration, settings=rt.guard_settings, case_id=panel.id
    )
    checks = {c.number: c.holds for c in decision.invariants}
    need_beta = rt.guard_calibration is not None
    independent = (
        checks.get(1, False) and checks.get(2, False) and (checks.get(3, False) or not need_beta)
    )
    same = decision.answer == reading.decision and not reading.tie
    backed = independent and same
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
