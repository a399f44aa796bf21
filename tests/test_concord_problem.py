"""Problem files: bad input gets a ConfigError naming the field; table agents' rules."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from dissensus.agents.assembly import build_agents
from dissensus.concord import negotiation_for, parse_problem
from dissensus.concord.agent import NegotiationView, Outcome
from dissensus.concord.table import TableAgent
from dissensus.errors import ConfigError


def problem(**over: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "floor": 0.7,
        "margin": 0.01,
        "rounds": 6,
        "anchors": {
            "rejected": {"id": "R0", "text": "leave the region down"},
            "ideal": {"id": "I0", "text": "full recovery"},
        },
        "options": [{"id": "A", "text": "fail over"}, {"id": "B", "text": "restore"}],
        "agents": [
            {"id": "security", "kind": "table", "scores": {"R0": 0, "I0": 10, "A": 6, "B": 9}},
            {"id": "cost", "kind": "table", "scores": {"R0": 0, "I0": 10, "A": 8, "B": 7}},
        ],
        "topology": "group",
    }
    data.update(over)
    return data


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"anchors": None}, "anchors"),
        ({"floor": 1.5}, "floor"),
        ({"floor": -0.1}, "floor"),
        ({"topology": {"edges": [["security", "ghost"]]}}, "topology.edges.0"),
        (
            {"agents": [{"id": "s", "kind": "table", "scores": {"R0": 3, "I0": 3, "A": 3}}]},
            "agents.0.scores",
        ),
        (
            {"agents": [{"id": "s", "kind": "table", "scores": {"I0": 3, "A": 3}}]},
            "agents.0.scores.R0",
        ),
        ({"agents": [{"id": "s", "kind": "function"}]}, "agents.0.score"),
        ({"agents": [{"id": "s", "kind": "llm"}]}, "agents.0.role"),
        ({"margin": 2}, "margin"),
        # YAML's .inf and .nan are floats; no number of a problem file may be one.
        ({"floor": float("nan")}, "floor"),
        (
            {"agents": [{"id": "s", "kind": "llm", "role": "r", "timeout": float("inf")}]},
            "agents.0.timeout",
        ),
        (
            {"agents": [{"id": "s", "kind": "table", "scores": {"R0": 0, "I0": float("inf")}}]},
            "agents.0.scores.I0",
        ),
    ],
)
def test_bad_input_names_the_field(change: dict[str, Any], field: str) -> None:
    data = problem(**change)
    if change.get("anchors", 1) is None:
        del data["anchors"]
    with pytest.raises(ConfigError) as info:
        parse_problem(data, file="p.yaml")
    assert info.value.field == field
    assert "p.yaml" in str(info.value)


def test_missing_ideal_anchor_is_named() -> None:
    data = problem()
    del data["anchors"]["ideal"]
    with pytest.raises(ConfigError) as info:
        parse_problem(data)
    assert info.value.field == "anchors.ideal"


def test_unknown_function_module_is_a_config_error() -> None:
    p = parse_problem(
        problem(agents=[{"id": "c", "kind": "function", "score": "no_such_mod:score"}])
    )
    with pytest.raises(ConfigError) as info:
        build_agents(p)
    assert info.value.field == "agents.0.score"


def test_llm_agent_without_model_is_a_config_error() -> None:
    p = parse_problem(problem(agents=[{"id": "c", "kind": "llm", "role": "You own cost."}]))
    with pytest.raises(ConfigError, match="model"):
        build_agents(p)


def test_table_agents_propose_best_and_repair_with_untabled_options() -> None:
    p = parse_problem(
        problem(
            options=[
                {"id": "A", "text": "fail over"},
                {"id": "B", "text": "restore"},
                {"id": "C", "text": "hybrid"},
            ],
            agents=[
                {
                    "id": "security",
                    "kind": "table",
                    "scores": {"R0": 0, "I0": 10, "A": 6, "B": 9, "C": 8},
                },
                {
                    "id": "cost",
                    "kind": "table",
                    "scores": {"R0": 0, "I0": 10, "A": 8, "B": 5, "C": 7.5},
                },
            ],
        )
    )
    cert = negotiation_for(p, build_agents(p)).run_sync()
    opening = [c.id for c in cert.candidates if c.round == 1]
    assert opening == ["B", "A"]  # security proposes B (9), cost proposes A (8)
    assert cert.trajectory[0].leader == "A" and cert.trajectory[0].worst_off == 0.6
    assert cert.trajectory[1].bottleneck == "security"
    assert cert.trajectory[1].candidate == "C"  # best untabled option, beats its 6 on A
    assert cert.status == "certified" and cert.worst_off == 0.75


def test_table_agent_reads_a_downward_scale() -> None:
    agent = TableAgent("latency", {"R0": 5000, "I0": 80, "A": 150, "B": 3000})
    view = NegotiationView(
        agent="latency",
        phase="propose",
        round=1,
        floor=0.7,
        margin=0.01,
        agents=["latency"],
        options=[Outcome(id="A", text="a"), Outcome(id="B", text="b")],
        rejected=Outcome(id="R0", text="r"),
        ideal=Outcome(id="I0", text="i"),
    )
    proposal = asyncio.run(agent.propose(view))
    assert proposal is not None and proposal.id == "A"


def test_model_files_are_relative_to_the_problem_file(tmp_path: Path) -> None:
    from dissensus.concord import load_problem

    body = (
        "floor: 0.5\nanchors: {rejected: {id: R0, text: r}, ideal: {id: I0, text: i}}\n"
        "agents: [{id: a, kind: table, scores: {R0: 0, I0: 1}}]\n"
    )
    (tmp_path / "s.yaml").write_text(body + "model: 'scripted:answers.yaml'\n", encoding="utf-8")
    assert load_problem(tmp_path / "s.yaml").model == f"scripted:{tmp_path / 'answers.yaml'}"
    (tmp_path / "r.yaml").write_text(
        body + "model: 'record:calls.jsonl:scripted:a.yaml'\n", encoding="utf-8"
    )
    assert load_problem(tmp_path / "r.yaml").model == (
        f"record:{tmp_path / 'calls.jsonl'}:scripted:{tmp_path / 'a.yaml'}"
    )
