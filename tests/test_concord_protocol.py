"""CONCORD protocol: the worked incident, guarantees as properties, faults, anytime."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from concord_helpers import IDEAL, REJECTED, HashAgent, SlowAgent
from dissensus.agents.assembly import build_agents
from dissensus.baselines.compare import compare_rules
from dissensus.concord import (
    load_problem,
    negotiate_sync,
    negotiation_for,
    verify,
)
from dissensus.concord.function import FunctionAgent
from dissensus.concord.protocol import Negotiation
from dissensus.concord.table import TableAgent
from dissensus.errors import ConfigError

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "concord"


def run_incident():
    problem = load_problem(EXAMPLES / "incident.yaml")
    agents = build_agents(problem, base_dir=EXAMPLES)
    return problem, negotiation_for(problem, agents).run_sync()


def test_worked_incident_reproduces_the_seed_shape() -> None:
    problem, cert = run_incident()
    assert [round(s.worst_off, 2) for s in cert.trajectory] == [0.23, 0.67, 0.75]
    assert cert.status == "certified"
    assert cert.spent.rounds == 2
    assert (cert.spent.candidates, cert.bound.candidates) == (6, 10)
    assert (cert.spent.evaluations, cert.bound.evaluations) == (24, 40)
    assert cert.selected is not None and cert.selected.author == "telemetry"
    assert cert.selected.id not in [c.id for c in cert.candidates if c.round == 1]
    rows = {r.strategy: r for r in compare_rules(cert, problem.owner)}
    assert round(rows["CONCORD"].worst_off or 0, 2) == 0.75
    assert round(rows["Best average"].worst_off or 0, 2) == 0.21
    assert len(rows["Best average"].below_floor) == 2
    assert round(rows["Majority vote"].worst_off or 0, 2) == 0.21
    assert round(rows["Owner decides"].worst_off or 0, 2) == 0.23
    assert len(rows["Owner decides"].below_floor) == 3
    assert rows["Unanimity required"].selected is None
    assert verify(cert.model_dump(mode="json")).valid


def agents_strategy():
    @st.composite
    def build(draw):  # type: ignore[no-untyped-def]
        n = draw(st.integers(2, 5))
        seed = draw(st.integers(0, 10_000))
        agents = []
        for i in range(n):
            lo, hi = draw(st.sampled_from([(0.0, 10.0), (100.0, 0.0), (-5.0, 5.0)]))
            faults = draw(
                st.lists(st.sampled_from(["raise", "range", "pass", "anchors"]), max_size=1)
            )
            bias = draw(st.sampled_from([0.0, 0.3, 0.6]))
            agents.append(HashAgent(f"a{i}", seed, lo, hi, faults=faults, bias=bias))
        return agents

    return build()


controls = st.fixed_dictionaries(
    {
        "floor": st.sampled_from([0.0, 0.3, 0.5, 0.6, 0.7, 0.8, 0.95, 1.0]),
        "margin": st.sampled_from([0.0, 0.01, 0.05, 0.2]),
        "rounds": st.integers(0, 6),
        "rule": st.sampled_from(["maximin", "leximin", "nash", "utilitarian"]),
    }
)


def run(agents, ctl, edges=None):  # type: ignore[no-untyped-def]
    return negotiate_sync(agents, rejected=REJECTED, ideal=IDEAL, edges=edges, **ctl)


@given(agents_strategy(), controls)
def test_guarantees_hold_for_random_agents(agents, ctl) -> None:  # type: ignore[no-untyped-def]
    cert = run(agents, ctl)
    n = len(agents)
    # termination within the budget, bound never exceeded
    assert cert.spent.rounds <= ctl["rounds"]
    assert cert.bound.candidates == n + ctl["rounds"]
    assert cert.spent.candidates <= cert.bound.candidates
    assert cert.spent.evaluations <= cert.bound.evaluations
    assert cert.spent.model_calls <= cert.bound.model_calls
    assert cert.spent.within_bound
    # the floor never changes: not in the record, not in any view an agent saw
    assert cert.floor == ctl["floor"]
    assert all(f == ctl["floor"] for a in agents for f in a.floors_seen)
    # the leader's worst-off strictly increases (by >= margin) at every replacement
    previous = None
    for step in cert.trajectory:
        if previous is not None and step.leader != previous.leader:
            assert step.worst_off is not None and previous.worst_off is not None
            gain = round(step.worst_off - previous.worst_off, 12)
            assert gain > 0 and gain >= ctl["margin"]
        if previous is not None and step.leader == previous.leader:
            assert step.worst_off == previous.worst_off
        previous = step
    # certified implies every covered agent at or above the floor
    if cert.status == "certified":
        assert all((cert.scores[a].calibrated or 0) >= ctl["floor"] for a in cert.covered)
        assert cert.shortfall == []
    else:
        assert cert.shortfall
    # every produced certificate verifies
    verdict = verify(cert.model_dump(mode="json"))
    assert verdict.valid, verdict


@given(agents_strategy(), controls)
@settings(max_examples=25)
def test_group_and_graph_reach_the_same_outcome(agents, ctl) -> None:  # type: ignore[no-untyped-def]
    ids = [a.id for a in agents]
    path = [(ids[i], ids[i + 1]) for i in range(len(ids) - 1)]
    group = run(agents, ctl)
    for a in agents:
        a.calls = 0
        a.floors_seen.clear()
    graph = run(agents, ctl, edges=path)
    assert graph.unknown == []
    assert graph.status == group.status
    assert graph.selected == group.selected
    accepted = lambda c: sum(1 for s in c.trajectory if s.accepted)  # noqa: E731
    assert accepted(graph) == accepted(group)
    assert [s.leader for s in graph.trajectory] == [s.leader for s in group.trajectory]
    assert graph.spent.messages >= group.spent.messages
    if len(ids) > 2:
        assert graph.spent.hops > 1 or graph.spent.messages == 0


def test_disconnected_agents_are_unknown_and_the_certificate_narrows() -> None:
    agents = [HashAgent(f"a{i}", 7, bias=0.6) for i in range(4)]
    cert = run(
        agents,
        {"floor": 0.5, "margin": 0.01, "rounds": 3, "rule": "maximin"},
        edges=[("a0", "a1"), ("a1", "a2")],
    )
    assert cert.covered == ["a0", "a1", "a2"]
    assert cert.unknown == ["a3"]
    assert set(cert.scores) == {"a0", "a1", "a2"}
    assert all(set(c.scores) <= {"a0", "a1", "a2"} for c in cert.candidates)
    assert agents[3].calls == 0
    assert cert.bound.candidates == 3 + 3
    assert verify(cert.model_dump(mode="json")).valid


def test_faulty_agents_are_reported_and_never_certified_on() -> None:
    good = [
        TableAgent("t", {"R0": 0, "I0": 10, "A": 9}),
        TableAgent("u", {"R0": 0, "I0": 10, "A": 9}),
    ]

    def boom(outcome, view):  # type: ignore[no-untyped-def]
        raise RuntimeError("cost model unavailable")

    bad = FunctionAgent("cost", boom)
    cert = negotiate_sync(
        [*good, bad],
        rejected=REJECTED,
        ideal=IDEAL,
        floor=0.5,
        rounds=2,
        options=[REJECTED.model_copy(update={"id": "A", "text": "plan A"})],
    )
    assert cert.status == "best_effort"
    assert (
        cert.scores["cost"].fault is not None
        and "cost model unavailable" in cert.scores["cost"].fault
    )
    assert [s.agent for s in cert.shortfall] == ["cost"]
    assert verify(cert.model_dump(mode="json")).valid


def test_out_of_range_and_timeouts_are_faults_of_that_agent() -> None:
    import time

    def slow(outcome, view):  # type: ignore[no-untyped-def]
        if outcome.id in ("R0", "I0"):
            return 0.0 if outcome.id == "R0" else 1.0
        time.sleep(0.5)
        return 1.0

    def wild(outcome, view):  # type: ignore[no-untyped-def]
        return {"R0": 0.0, "I0": 1.0}.get(outcome.id or "", 7.0)

    table = TableAgent("t", {"R0": 0, "I0": 10, "A": 9})
    option = REJECTED.model_copy(update={"id": "A", "text": "plan A"})
    cert = negotiate_sync(
        [table, FunctionAgent("slow", slow, timeout=0.05), FunctionAgent("wild", wild)],
        rejected=REJECTED,
        ideal=IDEAL,
        floor=0.5,
        rounds=1,
        options=[option],
    )
    faults = [f for s in cert.trajectory for f in s.faults]
    assert any(f.agent == "slow" and "timed out" in f.message for f in faults)
    assert any(f.agent == "wild" and "outside the anchors' range" in f.message for f in faults)
    assert cert.status == "best_effort"
    assert verify(cert.model_dump(mode="json")).valid


def test_equal_anchors_at_run_time_name_the_field() -> None:
    flat = FunctionAgent("flat", lambda outcome, view: 5.0)
    with pytest.raises(ConfigError, match=r"agents\.flat\.anchors"):
        negotiate_sync([flat], rejected=REJECTED, ideal=IDEAL, floor=0.5)


def test_deadline_returns_the_current_leader() -> None:
    agents = [SlowAgent("a0", 1), SlowAgent("a1", 1)]
    neg = Negotiation(agents, rejected=REJECTED, ideal=IDEAL, floor=1.0, rounds=4, deadline_s=0.1)
    cert = neg.run_sync()
    assert cert.spent.stopped == "deadline"
    assert cert.selected is not None and cert.selected.round == 1
    assert cert.status == "best_effort"
    assert verify(cert.model_dump(mode="json")).valid


def test_cancellation_returns_the_current_leader() -> None:
    holder: dict[str, Negotiation] = {}
    agents = [SlowAgent(f"a{i}", 3, on_repair=lambda: holder["n"].cancel()) for i in range(3)]
    holder["n"] = Negotiation(agents, rejected=REJECTED, ideal=IDEAL, floor=1.0, rounds=4)
    cert = holder["n"].run_sync()
    assert cert.spent.stopped == "cancelled"
    assert cert.selected is not None
    assert cert.trajectory[-1].notes[-1].startswith("run stopped (cancelled)")
    assert verify(cert.model_dump(mode="json")).valid


def test_llm_agents_run_offline_with_the_bundled_script(monkeypatch: pytest.MonkeyPatch) -> None:
    from dissensus.llm import resolve_model

    problem = load_problem(EXAMPLES / "llm-checkout.yaml")
    assert problem.model is not None
    client = resolve_model(problem.model)
    agents = build_agents(problem, base_dir=EXAMPLES, client=client)
    cert = negotiation_for(problem, agents).run_sync()
    assert cert.status == "certified"
    assert cert.spent.model_calls <= cert.bound.model_calls
    assert cert.spent.model_calls == 2 * (1 + 1 + 1 + 1) + 1  # anchors, propose, 2 sweeps, 1 repair
    assert verify(cert.model_dump(mode="json")).valid
    assert str(EXAMPLES.resolve()) not in sys.path  # function agents load by file path


def test_a_planted_module_beside_a_problem_file_replaces_nothing(tmp_path: Path) -> None:
    # Regression: the problem directory used to go first on sys.path for good, so a
    # planted json.py (or openai.py) beside a problem file replaced the real module.
    (tmp_path / "json.py").write_text("PLANTED = True\n", encoding="utf-8")
    (tmp_path / "agents_here.py").write_text(
        "import json\n\ndef score(outcome, view):\n    return 0.0 if hasattr(json, 'PLANTED') else 1.0\n",
        encoding="utf-8",
    )
    before = list(sys.path)
    from dissensus.loading import load_callable

    score = load_callable("agents_here:score", base_dir=tmp_path)
    assert score(None, None) == 1.0  # the standard json, not the planted one
    assert sys.path == before
    assert not hasattr(__import__("json"), "PLANTED")
    assert "agents_here" not in sys.modules


def test_no_proposal_means_no_candidate_and_a_full_shortfall() -> None:
    def never(view):  # type: ignore[no-untyped-def]
        raise RuntimeError("no plan")

    agents = [
        FunctionAgent(
            f"f{i}", lambda o, v: {"R0": 0.0, "I0": 1.0}.get(o.id or "", 0.5), propose=never
        )
        for i in range(2)
    ]
    cert = negotiate_sync(agents, rejected=REJECTED, ideal=IDEAL, floor=0.4, rounds=3)
    assert cert.selected is None and cert.status == "best_effort"
    assert cert.spent.stopped == "no_candidate"
    assert [s.agent for s in cert.shortfall] == ["f0", "f1"]
    assert len(cert.trajectory[0].faults) == 2
    assert verify(cert.model_dump(mode="json")).valid


def test_public_surface_is_pinned() -> None:
    import doctest

    import dissensus.concord as concord

    assert sorted(concord.__all__) == sorted(
        [
            "RULES",
            "Bound",
            "Certificate",
            "FunctionAgent",
            "Negotiation",
            "NegotiationAgent",
            "NegotiationView",
            "Outcome",
            "Problem",
            "ScoreFault",
            "SelectionRule",
            "TableAgent",
            "Verdict",
            "compute_bound",
            "load_problem",
            "negotiate",
            "negotiate_sync",
            "negotiation_for",
            "parse_problem",
            "verify",
        ]
    )
    result = doctest.testmod(concord)
    assert result.attempted >= 1 and result.failed == 0


def test_llm_agent_faults_are_reported_and_attempts_counted_apart(tmp_path: Path) -> None:
    from dissensus.agents.llm_negotiator import LLMNegotiator
    from dissensus.llm import resolve_model

    script = tmp_path / "s.yaml"
    script.write_text(
        "rules:\n"
        "  - match: {stage: concord.anchors}\n"
        "    json: {scores: [{id: R0, score: 0}, {id: I0, score: 10}]}\n"
        "  - match: {agent: good, stage: concord.propose}\n"
        "    json: {text: plan of good}\n"
        "  - match: {agent: good, stage: concord.score}\n"
        "    json: {scores: [{id: C1, score: 9}]}\n"
        "  - match: {agent: broken}\n"
        "    response: not json at all\n"
    )
    client = resolve_model(f"scripted:{script}")
    agents = [
        LLMNegotiator("good", "You own quality.", client),
        LLMNegotiator("broken", "You own cost.", client),
    ]
    cert = negotiate_sync(agents, rejected=REJECTED, ideal=IDEAL, floor=0.5, rounds=2)
    assert cert.status == "best_effort"
    faults = [f for step in cert.trajectory for f in step.faults]
    assert {f.phase for f in faults if f.agent == "broken"} >= {"propose", "score"}
    assert all(c.scores["broken"].fault is not None for c in cert.candidates)
    assert cert.spent.model_calls <= cert.bound.model_calls
    assert cert.spent.attempts > cert.spent.model_calls  # re-asks are attempts, not calls
    assert verify(cert.model_dump(mode="json")).valid


def test_python_api_validates_edges_and_ids() -> None:
    agents = [HashAgent("a0", 1), HashAgent("a1", 1)]
    with pytest.raises(ConfigError) as info:
        Negotiation(agents, rejected=REJECTED, ideal=IDEAL, floor=0.5, edges=[("a0", "ghost")])
    assert info.value.field == "edges.0"
    with pytest.raises(ConfigError) as info:
        Negotiation(
            [HashAgent("a0", 1), HashAgent("a0", 2)], rejected=REJECTED, ideal=IDEAL, floor=0.5
        )
    assert info.value.field == "agents"
    with pytest.raises(ConfigError) as info:
        Negotiation(agents, rejected=REJECTED, ideal=IDEAL, floor=1.2)
    assert info.value.field == "floor"
    for bad in (float("nan"), float("inf"), -1.0):
        # Before any agent is asked: a NaN deadline ran every call, then failed to record.
        with pytest.raises(ConfigError) as info:
            Negotiation(agents, rejected=REJECTED, ideal=IDEAL, floor=0.5, deadline_s=bad)
        assert info.value.field == "deadline_s"


def test_owner_outside_the_covered_set_commits_nothing() -> None:
    agents = [HashAgent(f"a{i}", 5, bias=0.4) for i in range(3)]
    cert = negotiate_sync(
        agents, rejected=REJECTED, ideal=IDEAL, floor=0.6, rounds=2, edges=[("a0", "a1")]
    )
    rows = {r.strategy: r for r in compare_rules(cert, "a2")}
    assert rows["Owner decides"].selected is None
    assert "not in the negotiating set" in rows["Owner decides"].result
