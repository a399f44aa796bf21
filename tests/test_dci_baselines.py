"""Baselines on the shared client, and the bundled offline models behind every method."""

from __future__ import annotations

import asyncio
import functools
import json
from pathlib import Path

import pytest
import yaml

from dissensus.agents.deliberator import deliberate_with_model
from dissensus.baselines.deliberation import BaselineSettings, run_baseline_sync
from dissensus.cli.dci import BUNDLED
from dissensus.dci.output import METHODS, DeliberationOutput
from dissensus.dci.task import load_task, parse_task
from dissensus.llm import Budget, ModelClient, ScriptedBackend, estimate_tokens
from test_dci_flow import check_packet

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "dci"
TASKS = sorted(EXAMPLES.glob("*.yaml"))
MODELS = BUNDLED  # the bundled scripted models (package data)


@functools.cache
def _rules(name: str) -> dict[str, object]:
    loaded: dict[str, object] = yaml.load(
        (MODELS / f"{name}.yaml").read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    )
    return loaded


def scripted(name: str, budget: Budget | None = None) -> ModelClient:
    """A fresh client on a bundled model (rules parsed once per test session)."""
    return ModelClient(ScriptedBackend.from_dict(_rules(name)), budget=budget)


@functools.cache
def example_runs() -> dict[str, tuple[DeliberationOutput, DeliberationOutput]]:
    """DCI and single-agent outputs on every example task."""
    runs = {}
    for path in TASKS:
        task = load_task(path)
        runs[task.id] = (
            asyncio.run(deliberate_with_model(task, scripted("dci")))[0],
            run_baseline_sync("single", scripted("single"), task),
        )
    return runs


def answer(choice: str) -> dict[str, object]:
    return {"choice": choice, "answer": f"I choose {choice}.", "confidence": 0.5}


TASK = parse_task(
    {
        "question": "Pick a colour?",
        "options": [{"id": "red", "text": "Red."}, {"id": "blue", "text": "Blue."}],
    }
)


def test_voting_takes_the_plurality_and_reports_ties() -> None:
    rules = {
        "rules": [
            {"match": {"agent": f"voter{i}"}, "json": answer(c)}
            for i, c in enumerate(["blue", "RED", "red", "Blue", "green"], 1)
        ]
    }
    out = run_baseline_sync("voting", ModelClient(ScriptedBackend.from_dict(rules)), TASK)
    assert out.selected_option == "blue" and "tie_break" in out.extras
    # "green" is none of the options: an abstention, never a vote (test_dci_defects.py)
    assert out.extras["counts"] == {"blue": 2, "red": 2}
    assert out.extras["abstained"] == ["voter5"]
    assert out.usage.calls == 5 and out.packet is None


def test_self_consistency_samples_one_agent_with_seeds() -> None:
    rules = {
        "rules": [
            {
                "match": {"agent": "sampler"},
                "responses": [answer("red"), answer("blue"), answer("red")],
            }
        ]
    }
    out = run_baseline_sync(
        "self_consistency",
        ModelClient(ScriptedBackend.from_dict(rules)),
        TASK,
        settings=BaselineSettings(samples=3),
    )
    assert out.selected_option == "red" and out.extras["counts"] == {"red": 2, "blue": 1}
    assert out.usage.calls == 3


def test_debate_feeds_peers_answers_back() -> None:
    rules = {
        "rules": [
            {
                "match": {"stage": "baseline.debate.r2", "contains": "PEERS' ANSWERS"},
                "json": answer("blue"),
            },
            {"match": {"stage": "baseline.debate.r1"}, "responses": [answer("red")]},
        ]
    }
    out = run_baseline_sync("debate", ModelClient(ScriptedBackend.from_dict(rules)), TASK)
    assert out.selected_option == "blue" and out.extras["rounds"] == 2 and out.usage.calls == 6


def test_budget_exhaustion_in_a_baseline_is_reported() -> None:
    out = run_baseline_sync(
        "voting", scripted("voting", Budget(max_calls=2)), load_task(EXAMPLES / "risk.yaml")
    )
    assert out.status == "budget_exhausted" and len(out.extras["votes"]) == 2


@pytest.mark.parametrize("task_path", TASKS, ids=[p.stem for p in TASKS])
def test_every_example_task_yields_a_complete_packet_offline(task_path: Path) -> None:
    task = load_task(task_path)
    output = example_runs()[task.id][0]
    assert output.packet is not None
    check_packet(output.packet)
    p = output.packet
    assert p.status == "complete" and p.failures == [] and p.selected is not None
    assert p.minority_report and p.reopen_conditions and p.next_actions
    assert p.metrics.rounds <= task.dci.max_rounds


def test_scripted_completions_have_realistic_lengths() -> None:
    dci = _rules("dci")
    for rule in dci["rules"]:
        for item in rule.get("responses") or [rule.get("json")]:
            assert 150 <= estimate_tokens(json.dumps(item, ensure_ascii=False)) <= 400, rule[
                "match"
            ]
    for method in METHODS[1:]:
        data = _rules(method)
        for rule in data["rules"]:
            for item in rule.get("responses") or [rule.get("json")]:
                assert 500 <= estimate_tokens(json.dumps(item, ensure_ascii=False)) <= 1100, rule[
                    "match"
                ]


def test_dci_costs_at_most_15_times_the_single_agent_on_the_examples() -> None:
    dci = sum(d.usage.total_tokens for d, _ in example_runs().values())
    single = sum(s.usage.total_tokens for _, s in example_runs().values())
    assert dci <= 15 * single, dci / single


def test_self_consistency_records_every_sample_s_vote() -> None:
    """The samples were all recorded under their agent's name, so ``extras.votes`` kept
    one vote of five (``{'sampler': 'blue'}`` beside counts of red 2, blue 1)."""
    rules = {
        "rules": [
            {
                "match": {"agent": "sampler"},
                "responses": [answer("red"), answer("green"), answer("blue"), answer("red")],
            }
        ]
    }
    out = run_baseline_sync(
        "self_consistency",
        ModelClient(ScriptedBackend.from_dict(rules)),
        TASK,
        settings=BaselineSettings(samples=4),
    )
    assert out.extras["votes"] == {"sample1": "red", "sample3": "blue", "sample4": "red"}
    assert out.extras["abstained"] == ["sample2"]
    assert out.extras["counts"] == {"red": 2, "blue": 1}
