"""CONCORD over generated decision problems with function agents (the CONCORD specification's "Evaluation").

Four classes of decision problems, each generated from a seed:

* ``remediation``: incident remediation plans over four decisions (3 x 3 x 2 x 2
  plans); 3-5 owners with random additive preferences (a shared component, since the
  owners face one incident, plus their own) and one interaction each;
* ``allocation``: 6 units of capacity split among 3-4 teams (every split); each team
  needs a random amount, a platform owner wants balance;
* ``scheduling``: three jobs, five start slots each; every job owner wants its own
  preferred slot, an operations owner wants no two jobs in one slot and few in the peak;
* ``vendor``: one of 6-8 vendors; four owners (security, finance, latency, support) each
  see their own attribute with noise. Exactly one vendor is *correct by construction*
  (acceptable on every attribute and the most reliable, reliability being hidden from
  every agent); in half of the instances a decoy vendor is acceptable on every attribute
  too but unreliable, so certification and correctness can part.

Every agent is a :class:`~dissensus.concord.function.FunctionAgent`: it scores plans on
a private scale (random direction and range), proposes its own best plan and, as the
bottleneck, repairs the leader by one local change (a one-decision change; moving one
unit for allocations; another vendor), choosing the change whose estimated worst-off
score is highest, estimating the others from the visible scores of the nearest tabled
candidates. In one run out of ten one agent is faulty (it raises on every fourth call).

Reported: share certified, committed runs with an agent below the floor (must be 0),
spend against the bound, the comparison with other decision rules on the same scores, a
floor sweep (share certified and worst-off as the floor rises), and for ``vendor``
correctness beside certification.

Run: ``.venv/bin/python evaluation/concord_eval.py --runs 100 --sweep-runs 25``
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import at_least, fraction, fractions

from dissensus.baselines.compare import compare_rules
from dissensus.concord import negotiate_sync, verify
from dissensus.concord.agent import NegotiationView, Outcome
from dissensus.concord.function import FunctionAgent
from dissensus.concord.record import Certificate

Plan = tuple[Any, ...]
REJECTED = Outcome(id="R0", text="reject: do nothing")
IDEAL = Outcome(id="I0", text="ideal: everything every role wants, at no cost")


@dataclass
class Scenario:
    """One generated decision problem."""

    kind: str
    dims: list[str]
    plans: list[Plan]
    utility: dict[str, Callable[[Plan], float]]
    """Calibrated satisfaction in [0, 1] per agent."""
    neighbours: Callable[[Plan], list[Plan]]
    owner: str
    correct: Plan | None = None
    scales: dict[str, tuple[float, float]] = field(default_factory=dict)

    def render(self, plan: Plan) -> str:
        return "; ".join(f"{d}={v}" for d, v in zip(self.dims, plan, strict=True))

    def parse(self, text: str) -> Plan:
        values = dict(part.split("=", 1) for part in text.split("; "))
        return tuple(_typed(values[d]) for d in self.dims)


def _typed(value: str) -> Any:
    return int(value) if value.lstrip("-").isdigit() else value


def _normalise(raw: dict[Plan, float], rng: random.Random) -> Callable[[Plan], float]:
    lo_v, hi_v = min(raw.values()), max(raw.values())
    top, bottom = rng.uniform(0.85, 1.0), rng.uniform(0.0, 0.2)
    span = (hi_v - lo_v) or 1.0
    table = {p: round(bottom + (v - lo_v) / span * (top - bottom), 4) for p, v in raw.items()}
    return table.__getitem__


def _hamming(plans: list[Plan]) -> Callable[[Plan], list[Plan]]:
    return lambda plan: [p for p in plans if sum(a != b for a, b in zip(p, plan, strict=True)) == 1]


def remediation(rng: random.Random) -> Scenario:
    dims = ["traffic", "writes", "rollout", "region"]
    values = [
        ["stay", "drain", "failover"],
        ["continue", "queue", "freeze"],
        ["immediate", "staged"],
        ["keep", "restart"],
    ]
    plans: list[Plan] = list(itertools.product(*values))
    agents = [f"owner{i}" for i in range(rng.randint(3, 5))]
    utility = {}
    shared = {(d, v): rng.uniform(-1, 1) for d, vs in enumerate(values) for v in vs}
    for a in agents:
        terms = {key: 0.5 * shared[key] + rng.uniform(-1, 1) for key in shared}
        pair = ((0, rng.choice(values[0])), (1, rng.choice(values[1])))
        bonus = rng.uniform(-1.5, 0.5)
        raw = {
            p: sum(terms[(d, v)] for d, v in enumerate(p))
            + (bonus if p[0] == pair[0][1] and p[1] == pair[1][1] else 0)
            for p in plans
        }
        utility[a] = _normalise(raw, rng)
    return Scenario("remediation", dims, plans, utility, _hamming(plans), owner=agents[0])


def allocation(rng: random.Random) -> Scenario:
    teams = rng.randint(3, 4)
    total = 6
    dims = [f"team{i}" for i in range(teams)]
    plans: list[Plan] = [
        p for p in itertools.product(range(total + 1), repeat=teams) if sum(p) == total
    ]
    needs = [rng.randint(1, 3) for _ in range(teams)]
    utility: dict[str, Callable[[Plan], float]] = {}
    for i in range(teams):
        raw = {p: 1 - (1 - min(1.0, p[i] / needs[i])) ** 2 + 0.05 * p[i] for p in plans}
        utility[f"team{i}"] = _normalise(raw, rng)
    raw = {p: -statistics.pvariance(p) for p in plans}
    utility["platform"] = _normalise(raw, rng)

    def moves(plan: Plan) -> list[Plan]:
        out = []
        for i, j in itertools.permutations(range(teams), 2):
            if plan[i] > 0:
                q = list(plan)
                q[i] -= 1
                q[j] += 1
                out.append(tuple(q))
        return out

    return Scenario("allocation", dims, plans, utility, moves, owner="platform")


def scheduling(rng: random.Random) -> Scenario:
    jobs, slots = 3, 5
    dims = [f"job{i}" for i in range(jobs)]
    plans: list[Plan] = list(itertools.product(range(slots), repeat=jobs))
    prefs = [rng.randrange(slots) for _ in range(jobs)]
    peak = rng.randrange(slots)
    utility: dict[str, Callable[[Plan], float]] = {}
    for i in range(jobs):
        w = rng.uniform(0.15, 0.3)
        raw = {
            p: -w * abs(p[i] - prefs[i])
            - 0.3 * sum(1 for j in range(jobs) if j != i and p[j] == p[i])
            for p in plans
        }
        utility[f"job{i}"] = _normalise(raw, rng)
    raw = {p: -0.4 * (jobs - len(set(p))) - 0.15 * sum(1 for s in p if s == peak) for p in plans}
    utility["ops"] = _normalise(raw, rng)
    return Scenario("scheduling", dims, plans, utility, _hamming(plans), owner="ops")


def vendor(rng: random.Random) -> Scenario:
    count = rng.randint(6, 8)
    attrs = ["security", "finance", "latency", "support"]
    names = [f"V{i}" for i in range(count)]
    true: dict[str, dict[str, float]] = {}
    reliability: dict[str, float] = {}
    good = rng.randrange(count)
    decoy = rng.choice([i for i in range(count) if i != good]) if rng.random() < 0.5 else None
    for i, name in enumerate(names):
        if i in (good, decoy):
            true[name] = {a: rng.uniform(0.78, 0.95) for a in attrs}
            reliability[name] = 0.9 if i == good else 0.3
        else:
            true[name] = {a: rng.uniform(0.3, 0.95) for a in attrs}
            true[name][rng.choice(attrs)] = rng.uniform(0.1, 0.5)
            reliability[name] = rng.uniform(0.3, 0.8)
    plans: list[Plan] = [(n,) for n in names]
    utility: dict[str, Callable[[Plan], float]] = {}
    for a in attrs:
        seen = {n: min(1.0, max(0.0, true[n][a] + rng.gauss(0, 0.04))) for n in names}
        table = {
            (n,): round(0.9 * seen[n] + 0.1 * statistics.fmean(true[n].values()), 4) for n in names
        }
        utility[a] = table.__getitem__
    return Scenario(
        "vendor",
        ["vendor"],
        plans,
        utility,
        lambda plan: [p for p in plans if p != plan],
        owner="finance",
        correct=(names[good],),
    )


CLASSES: dict[str, Callable[[random.Random], Scenario]] = {
    "remediation": remediation,
    "allocation": allocation,
    "scheduling": scheduling,
    "vendor": vendor,
}


def agents_for(sc: Scenario, rng: random.Random, faulty: str | None) -> list[FunctionAgent]:
    """Function agents over a scenario (private scales drawn at random)."""
    out = []
    for name in sc.utility:
        lo, hi = rng.choice([(0.0, 10.0), (100.0, 0.0), (-50.0, 50.0), (1.0, 5.0)])
        sc.scales[name] = (lo, hi)
        score, propose, repair = _functions(sc, name, lo, hi, faulty == name)
        out.append(FunctionAgent(name, score, propose=propose, repair=repair))
    return out


def _functions(
    sc: Scenario, name: str, lo: float, hi: float, faulty: bool
) -> tuple[Callable[..., Any], ...]:
    u = sc.utility[name]
    calls = [0]

    def score(outcome: Outcome, view: NegotiationView) -> float:
        calls[0] += 1
        if outcome.id == REJECTED.id:
            return lo
        if outcome.id == IDEAL.id:
            return hi
        if faulty and calls[0] % 4 == 0:
            raise RuntimeError("scoring service unavailable")
        return lo + (hi - lo) * u(sc.parse(outcome.text))

    def propose(view: NegotiationView) -> str:
        return sc.render(max(sc.plans, key=u))

    def repair(view: NegotiationView) -> str | None:
        leader = view.leader_candidate()
        if leader is None:
            return None
        current = sc.parse(leader.text)
        tabled = {sc.parse(c.text): c.scores for c in view.candidates}
        others = [a for a in view.agents if a != name]
        best_key: tuple[float, float] | None = None
        choice = None
        for plan in sc.neighbours(current):
            if plan in tabled:
                continue
            est = min([u(plan)] + [_estimate(sc, plan, tabled, o) for o in others])
            key = (round(est, 9), u(plan))
            if best_key is None or key > best_key:
                best_key, choice = key, plan
        if choice is None or u(choice) <= u(current):
            return None
        return sc.render(choice)

    return score, propose, repair


def _estimate(sc: Scenario, plan: Plan, tabled: dict[Plan, dict[str, float]], agent: str) -> float:
    seen = [(p, s[agent]) for p, s in tabled.items() if agent in s]
    if not seen:
        return 0.0
    dist = [(sum(a != b for a, b in zip(p, plan, strict=True)), v) for p, v in seen]
    nearest = min(d for d, _ in dist)
    values = [v for d, v in dist if d == nearest]
    return sum(values) / len(values)


@dataclass
class Run:
    kind: str
    floor: float
    cert: Certificate
    rows: dict[str, Any]
    correct: bool | None
    valid: bool
    faulty: bool
    rule_correct: dict[str, bool] = field(default_factory=dict)
    feasible: bool = False
    """Whether some plan clears the floor for every agent (an oracle's view of the problem)."""


def run_one(kind: str, seed: int, floor: float, rounds: int = 6) -> Run:
    rng = random.Random(f"{kind}-{seed}")
    sc = CLASSES[kind](rng)
    faulty = rng.choice(list(sc.utility)) if rng.random() < 0.1 else None
    agents = agents_for(sc, rng, faulty)
    cert = negotiate_sync(
        agents, rejected=REJECTED, ideal=IDEAL, floor=floor, margin=0.01, rounds=rounds
    )
    rows = {r.strategy: r for r in compare_rules(cert, sc.owner)}
    correct = None
    if sc.correct is not None and cert.selected is not None:
        correct = sc.parse(cert.selected.text) == sc.correct
    valid = verify(cert.model_dump(mode="json")).valid
    rule_correct: dict[str, bool] = {}
    if sc.correct is not None:
        texts = {c.id: c.text for c in cert.candidates}
        for name, row in rows.items():
            rule_correct[name] = (
                row.selected in texts and sc.parse(texts[row.selected]) == sc.correct
            )
    feasible = max(min(u(p) for u in sc.utility.values()) for p in sc.plans) >= floor
    return Run(kind, floor, cert, rows, correct, valid, faulty is not None, rule_correct, feasible)


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--runs",
        type=at_least(1),
        default=100,
        help="runs per class at the main floor (default 100)",
    )
    ap.add_argument("--floor", type=fraction, default=0.7)
    ap.add_argument(
        "--sweep-runs", type=at_least(1), default=25, help="runs per class and floor in the sweep"
    )
    ap.add_argument("--sweep", type=fractions, default="0.5,0.6,0.7,0.75,0.8,0.85,0.9")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    runs = [run_one(k, s, args.floor) for k in CLASSES for s in range(args.runs)]
    out = sys.stdout.write

    out(
        f"CONCORD evaluation: {len(runs)} runs ({args.runs} per class), floor {args.floor}, margin 0.01, 6 repair rounds\n\n"
    )
    out(
        "| class | runs | acceptable plan exists | certified | certified where one exists | committed with an agent below floor | faulty-agent runs | verify ok | mean candidates (bound) | mean evaluations (bound) | mean agent calls (model-call bound) | max spend/bound |\n"
    )
    out("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    for kind in [*CLASSES, "all"]:
        sel = [r for r in runs if kind in (r.kind, "all")]
        cert = [r for r in sel if r.cert.status == "certified"]
        below = sum(
            1
            for r in cert
            if any((r.cert.scores[a].calibrated or 0) < r.floor for a in r.cert.covered)
        )
        ratio = max(
            max(
                r.cert.spent.candidates / r.cert.bound.candidates,
                r.cert.spent.evaluations / r.cert.bound.evaluations,
                r.cert.spent.agent_calls / r.cert.bound.model_calls,
            )
            for r in sel
        )
        over = sum(
            1
            for r in sel
            if not r.cert.spent.within_bound or r.cert.spent.agent_calls > r.cert.bound.model_calls
        )
        feas = [r for r in sel if r.feasible]
        reach = (
            pct(sum(1 for r in feas if r.cert.status == "certified") / len(feas)) if feas else "—"
        )
        out(
            f"| {kind} | {len(sel)} | {pct(len(feas) / len(sel))} | {pct(len(cert) / len(sel))} | {reach} | {below} | {sum(r.faulty for r in sel)} | "
            f"{sum(r.valid for r in sel)}/{len(sel)} | {statistics.fmean(r.cert.spent.candidates for r in sel):.2f} "
            f"({statistics.fmean(r.cert.bound.candidates for r in sel):.2f}) | "
            f"{statistics.fmean(r.cert.spent.evaluations for r in sel):.1f} ({statistics.fmean(r.cert.bound.evaluations for r in sel):.1f}) | "
            f"{statistics.fmean(r.cert.spent.agent_calls for r in sel):.1f} ({statistics.fmean(r.cert.bound.model_calls for r in sel):.1f}) | "
            f"{ratio:.2f}{'' if not over else f' ({over} over!)'} |\n"
        )

    out(
        "\nComparison on identical scores (all classes; the rules pick among the opening proposals): mean worst-off of the pick (over runs where the rule committed), share of runs where the pick clears the floor for every agent, share with nothing committed\n\n"
    )
    out("| rule | mean worst-off | clears floor for all | nothing committed |\n|---|---|---|---|\n")
    for rule in ["CONCORD", "Best average", "Majority vote", "Owner decides", "Unanimity required"]:
        rows = [r.rows[rule] for r in runs]
        worst = [row.worst_off for row in rows if row.worst_off is not None]
        clears = sum(1 for row in rows if row.worst_off is not None and not row.below_floor)
        none = sum(1 for row in rows if row.selected is None)
        mean = f"{statistics.fmean(worst):.3f}" if worst else "—"
        out(f"| {rule} | {mean} | {pct(clears / len(rows))} | {pct(none / len(rows))} |\n")

    vend = [r for r in runs if r.kind == "vendor"]
    out(
        "\nCorrectness beside certification (vendor class, correct vendor known by construction)\n\n"
    )
    out("| status | runs | correct |\n|---|---|---|\n")
    for status in ["certified", "best_effort"]:
        sel = [r for r in vend if r.cert.status == status]
        ok = sum(1 for r in sel if r.correct)
        out(f"| {status} | {len(sel)} | {pct(ok / len(sel)) if sel else '—'} |\n")
    out("\n| rule (vendor class) | picks the correct vendor |\n|---|---|\n")
    for rule in ["CONCORD", "Best average", "Majority vote", "Owner decides", "Unanimity required"]:
        ok = sum(1 for r in vend if r.rule_correct.get(rule))
        out(f"| {rule} | {pct(ok / len(vend))} |\n")

    floors = args.sweep
    out(
        f"\nFloor sweep ({args.sweep_runs} runs per class and floor): share certified / mean worst-off of the selection\n\n"
    )
    out("| floor | " + " | ".join(CLASSES) + " | all |\n|---|" + "---|" * (len(CLASSES) + 1) + "\n")
    sweep_total = 0
    for f in floors:
        cells = []
        every = []
        for kind in CLASSES:
            sel = [run_one(kind, 10_000 + s, f) for s in range(args.sweep_runs)]
            sweep_total += len(sel)
            every += sel
            cells.append(_cell(sel))
        out(f"| {f:.2f} | " + " | ".join(cells) + f" | {_cell(every)} |\n")
        bad = sum(
            1
            for r in every
            if r.cert.status == "certified"
            and any((r.cert.scores[a].calibrated or 0) < f for a in r.cert.covered)
        )
        if bad:
            out(f"  ! {bad} certified runs below the floor at {f}\n")
    out(f"\n{len(runs) + sweep_total} runs in {time.perf_counter() - started:.1f} s\n")
    return 0


def _cell(sel: list[Run]) -> str:
    cert = sum(1 for r in sel if r.cert.status == "certified") / len(sel)
    worst = statistics.fmean(r.cert.worst_off or 0.0 for r in sel)
    return f"{pct(cert)} / {worst:.2f}"


if __name__ == "__main__":
    raise SystemExit(main())
