"""Function agents for the worked incident of the CONCORD specification: four subsystem owners.

A region-wide incident. Four agents each own one subsystem and see only their own part:

* ``telemetry`` will not endorse an irreversible action the group cannot verify
  (private scale: confidence points 0..100);
* ``database`` protects write integrity (integrity grade 0..10);
* ``region`` owns the region the others propose to move traffic out of
  (standing -50..+50);
* ``traffic`` owns customer availability (customer-impact minutes, 240 = rejected,
  0 = ideal: a lower-is-better scale).

A plan fixes four decisions, written in words and read back from the words (so a plan
written by anyone, an LLM arbiter included, can be scored):

* traffic: keep traffic in the region / drain it gradually to the standby region /
  fail over all traffic at once;
* writes: keep accepting writes / queue writes durably for replay / freeze writes;
* rollout: apply immediately / stage every step behind telemetry gates;
* region: leave the control plane as is / restart the region control plane.

Each agent's satisfaction is a sum of per-decision terms (plus one interaction where the
role demands it), in hundredths of its bar, mapped onto its private scale. An agent
*proposes* the plan it likes best over the whole plan space. As the bottleneck it
*repairs* the leader by changing one decision: for every such plan not yet tabled it
estimates each other agent's score from the visible scores of the nearest tabled
candidates (fewest differing decisions; ties averaged), and writes the plan whose
estimated worst-off score (its own included) is highest, then its own score highest.
It sees only its own scoring function and the exchanged scores: partial visibility.

The problem file ``incident.yaml`` in this directory names these functions as
``incident_agents:score_telemetry`` and so on; ``dissensus negotiate`` puts the problem
file's directory at the front of ``sys.path`` so the module is importable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from itertools import product

from dissensus.concord.agent import NegotiationView, Outcome

DIMENSIONS: dict[str, tuple[str, ...]] = {
    "traffic": ("stay", "drain", "failover"),
    "writes": ("continue", "queue", "freeze"),
    "rollout": ("immediate", "staged"),
    "region": ("keep", "restart"),
}

PHRASES: dict[str, dict[str, str]] = {
    "traffic": {
        "stay": "keep traffic in the affected region",
        "drain": "drain traffic gradually to the standby region",
        "failover": "fail over all traffic to the standby region at once",
    },
    "writes": {
        "continue": "keep accepting writes",
        "queue": "queue writes durably and replay them after recovery",
        "freeze": "freeze writes (read-only mode)",
    },
    "rollout": {
        "immediate": "apply every step immediately",
        "staged": "stage every step behind telemetry gates",
    },
    "region": {
        "keep": "leave the region control plane as is",
        "restart": "restart the region control plane",
    },
}

Plan = tuple[str, str, str, str]
"""(traffic, writes, rollout, region)."""

PLANS: list[Plan] = [(t, w, r, g) for t, w, r, g in product(*DIMENSIONS.values())]

# Satisfaction in hundredths of each agent's bar: a base plus one term per decision
# (decisions not listed add 0), plus interactions keyed by two (dimension, value) pairs.
TERMS: dict[str, dict[str, object]] = {
    "telemetry": {
        "base": 63,
        "traffic": {"drain": 12, "failover": -24},
        "writes": {"queue": 2, "freeze": 3},
        "rollout": {"staged": 18},
        "region": {"restart": -8},
    },
    "database": {
        "base": 52,
        "traffic": {"drain": 22, "failover": 27},
        "writes": {"queue": 13, "freeze": 15},
        "rollout": {"staged": 3},
        "region": {"restart": -2},
        "both": {("failover", "continue"): -64},
    },
    "region": {
        "base": 75,
        "traffic": {"drain": -15, "failover": -50},
        "writes": {"queue": -1, "freeze": -2},
        "rollout": {"staged": -2},
        "region": {"restart": 20},
        "both": {("drain", "keep"): -41},
    },
    "traffic": {
        "base": 25,
        "traffic": {"drain": 62, "failover": 75},
        "writes": {"queue": -5, "freeze": -11},
        "rollout": {"staged": -9},
        "region": {"restart": -2},
        "both": {("drain", "keep"): -22},
    },
}

# Private scales: (raw score of the rejected anchor, raw score of the ideal anchor).
SCALES: dict[str, tuple[float, float]] = {
    "telemetry": (0.0, 100.0),
    "database": (0.0, 10.0),
    "region": (-50.0, 50.0),
    "traffic": (240.0, 0.0),
}


def render(plan: Plan) -> str:
    """The plan in words."""
    parts = [PHRASES[dim][value] for dim, value in zip(DIMENSIONS, plan, strict=True)]
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."


def parse(text: str) -> Plan:
    """Read a plan back from its words; a decision not mentioned takes its first value."""
    lowered = text.lower()
    chosen: list[str] = []
    for dim, values in DIMENSIONS.items():
        found = [v for v in values if PHRASES[dim][v].split(" (")[0] in lowered]
        if len(found) > 1:
            raise ValueError(f"the plan is ambiguous about {dim}: {', '.join(found)}")
        chosen.append(found[0] if found else values[0])
    if not any(PHRASES[d][v].split(" (")[0] in lowered for d in DIMENSIONS for v in DIMENSIONS[d]):
        raise ValueError("the text is not a remediation plan this agent can read")
    return (chosen[0], chosen[1], chosen[2], chosen[3])


def satisfaction(agent: str, plan: Plan) -> int:
    """Satisfaction of ``agent`` with ``plan`` in hundredths (0 = rejected, 100 = ideal)."""
    terms = TERMS[agent]
    base = terms["base"]
    assert isinstance(base, int)
    total = base
    for dim, value in zip(DIMENSIONS, plan, strict=True):
        table = terms.get(dim, {})
        assert isinstance(table, dict)
        total += int(table.get(value, 0))
    both = terms.get("both", {})
    assert isinstance(both, dict)
    for (a, b), term in both.items():
        if a in plan and b in plan:
            total += int(term)
    return total


def to_raw(agent: str, hundredths: float) -> float:
    rejected, ideal = SCALES[agent]
    return rejected + (ideal - rejected) * hundredths / 100.0


def raw_score(agent: str, outcome: Outcome, view: NegotiationView) -> float:
    """The raw score of any outcome (anchors included) on ``agent``'s private scale."""
    rejected, ideal = SCALES[agent]
    if view.rejected is not None and outcome.id == view.rejected.id:
        return rejected
    if view.ideal is not None and outcome.id == view.ideal.id:
        return ideal
    return to_raw(agent, satisfaction(agent, parse(outcome.text)))


def best_plan(agent: str) -> Plan:
    """The plan ``agent`` likes best (earliest in plan order on ties)."""
    return max(PLANS, key=lambda p: satisfaction(agent, p))


def _distance(a: Plan, b: Plan) -> int:
    return sum(x != y for x, y in zip(a, b, strict=True))


def _estimate(plan: Plan, tabled: Mapping[Plan, Mapping[str, float]], agent: str) -> float:
    """Another agent's score of ``plan``, from the nearest tabled candidates it scored."""
    seen = [(p, s[agent]) for p, s in tabled.items() if agent in s]
    if not seen:
        return 0.0
    nearest = min(_distance(plan, p) for p, _ in seen)
    values = [v for p, v in seen if _distance(plan, p) == nearest]
    return sum(values) / len(values)


def repair_plan(agent: str, view: NegotiationView) -> Plan | None:
    """The bottleneck's repair: one decision of the leader changed (see module docstring)."""
    leader = view.leader_candidate()
    if leader is None:
        return None
    current = parse(leader.text)
    tabled: dict[Plan, Mapping[str, float]] = {}
    for cand in view.candidates:
        try:
            tabled[parse(cand.text)] = cand.scores
        except ValueError:
            continue
    others = [a for a in view.agents if a != agent]
    best: tuple[float, int] | None = None
    choice: Plan | None = None
    for plan in PLANS:
        if _distance(plan, current) != 1 or plan in tabled:
            continue
        own = satisfaction(agent, plan) / 100.0
        estimated = min([own] + [_estimate(plan, tabled, o) for o in others])
        key = (round(estimated, 9), satisfaction(agent, plan))
        if best is None or key > best:
            best, choice = key, plan
    if choice is None or satisfaction(agent, choice) <= satisfaction(agent, current):
        return None
    return choice


def _scorer(agent: str) -> Callable[[Outcome, NegotiationView], float]:
    def score(outcome: Outcome, view: NegotiationView) -> float:
        return raw_score(agent, outcome, view)

    score.__name__ = f"score_{agent}"
    return score


def _proposer(agent: str) -> Callable[[NegotiationView], str]:
    def propose(view: NegotiationView) -> str:
        return render(best_plan(agent))

    propose.__name__ = f"propose_{agent}"
    return propose


def _repairer(agent: str) -> Callable[[NegotiationView], str | None]:
    def repair(view: NegotiationView) -> str | None:
        plan = repair_plan(agent, view)
        return render(plan) if plan is not None else None

    repair.__name__ = f"repair_{agent}"
    return repair


score_telemetry = _scorer("telemetry")
score_database = _scorer("database")
score_region = _scorer("region")
score_traffic = _scorer("traffic")
propose_telemetry = _proposer("telemetry")
propose_database = _proposer("database")
propose_region = _proposer("region")
propose_traffic = _proposer("traffic")
repair_telemetry = _repairer("telemetry")
repair_database = _repairer("database")
repair_region = _repairer("region")
repair_traffic = _repairer("traffic")
