"""The gates between reading and protocol: routing (seed 000) and the guard (seed 003).

:func:`route_payload` routes a reading with the policy's defeasible rules;
:func:`guard_payload` audits the panel's votes and says whether its agreement is
evidence-backed and independent. Both return the JSON the journal keeps.

Choices where the design is silent:

* A vote's provenance is the agent's first evidence item that was present (else its
  first item); an agent that consulted no evidence votes from
  ``parametric:<family or agent>``, which the guard never counts as a source.
* "Evidence-backed and independent" means guard invariants 1 and 2 hold, and 3 as well
  when the policy names a guard calibration, and the guard's answer is the panel's
  (untied) plurality.
* ``routing.convergent_disagreement_without_values: seek_context`` turns a *default*
  CD -> escalate route into seek_context when no agent states a value profile (a domain
  rule that routes CD explicitly is never overridden).
"""

from __future__ import annotations

from typing import Any

from dissensus.guard import GuardSettings as GuardThresholds
from dissensus.guard import audit
from dissensus.pipeline.runtime import Runtime
from dissensus.states import Reading, State
from dissensus.types import Panel, Vote

__all__ = ["guard_payload", "panel_votes", "route_payload"]


def panel_votes(panel: Panel) -> list[Vote]:
    """The guard's votes for a panel: one per voting agent, with its evidence provenance.

    An agent that consulted no evidence votes from ``parametric:<family or agent>``.
    """
    votes: list[Vote] = []
    for out in panel.outputs:
        if out.decision is None:
            continue
        evidence = out.evidence or []
        present = [e for e in evidence if e.present]
        source = (present or evidence)[0].source if evidence else f"parametric:{out.family or out.agent}"
        votes.append(
            Vote(
                agent=out.agent,
                answer=out.decision,
                evidence_source=source,
                evidence_present=bool(present),
                confidence=out.confidence,
                family=out.family,
            )
        )
    return votes


def route_payload(rt: Runtime, panel: Panel, reading: Reading) -> dict[str, Any]:
    route = rt.rules.route(reading, panel.meta)
    out: dict[str, Any] = route.model_dump(mode="json")
    out["override"] = None
    no_values = all(not o.values for o in panel.outputs)
    if (
        route.action == "escalate"
        and reading.state == State.CONVERGENT_DISAGREEMENT
        and route.rule.startswith("default")
        and no_values
        and rt.policy.routing.convergent_disagreement_without_values == "seek_context"
    ):
        out["action"] = "seek_context"
        out["override"] = (
            "convergent disagreement without value profiles is not a value conflict: seek context first "
            "(routing.convergent_disagreement_without_values)"
        )
    return out


def guard_payload(rt: Runtime, panel: Panel, reading: Reading) -> dict[str, Any]:
    if not rt.policy.guard.enabled:
        return {"applicable": False, "backed": False, "reason": "guard disabled by policy: no agreement is evidence"}
    votes = panel_votes(panel)
    if len(votes) < 2:
        return {"applicable": False, "backed": False, "reason": f"{len(votes)} vote(s): nothing to audit"}
    settings = GuardThresholds.model_validate(rt.policy.guard.options)
    decision = audit(votes, rt.guard_calibration, settings=settings, case_id=panel.id)
    checks = {c.number: c.holds for c in decision.invariants}
    need_beta = rt.guard_calibration is not None
    independent = checks.get(1, False) and checks.get(2, False) and (checks.get(3, False) or not need_beta)
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
    return {"applicable": True, "backed": backed, "reason": reason, "decision": decision.model_dump(mode="json")}
