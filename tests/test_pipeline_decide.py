"""decide(panel): every route of the composed pipeline, and the guard gating every auto route."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.guard import guard_votes
from dissensus.pipeline import Policy, decide, panel_votes, policy_from_dict
from dissensus.signals import recorded_second_answers
from dissensus.store import Journal
from pipeline_cases import CRASH_ANSWERS, agent_models, as_panel, mixed_batch, panel

FAST = {
    "reading": {"similarity": "tfidf", "theta_s": 0.3},
    "routing": {"convergent_disagreement_without_values": "seek_context"},
    "acceptance": {"min_families": 2},
}


def _policy(**extra: Any) -> Policy:
    data: dict[str, Any] = {k: dict(v) for k, v in FAST.items()}
    for key, value in extra.items():
        data[key] = {**data.get(key, {}), **value}
    return policy_from_dict(data)


def _by_id(tmp_path: Path) -> dict[str, Any]:
    policy = _policy(seek_context={"models": agent_models(tmp_path / "models", CRASH_ANSWERS)})
    return {
        row["id"]: decide(as_panel(row), policy) for row in mixed_batch() if isinstance(row, dict)
    }


def test_each_route_ends_where_the_design_says(tmp_path: Path) -> None:
    got = _by_id(tmp_path)
    # Parametric agreement is never accepted on its face; the recorded swap re-ask decides it.
    assert got["recorded-stable"].auto and got["recorded-stable"].basis == "independent_families"
    assert "guard:refused" in got["recorded-stable"].path
    assert got["recorded-stable"].action == "auto_explain"
    # Evidence from independent sources passes the guard and commits directly.
    assert got["evidence-backed"].path == ["read:CA", "route:auto", "guard:backed"]
    assert got["evidence-backed"].auto and got["evidence-backed"].decision == "1"
    # A live re-ask under swapped option order: a3 flips, a1 and a2 (two families) hold.
    live = got["live-reask"]
    assert live.auto and live.decision == "1" and live.usage.calls == 3
    # Stable agents that disagree after the re-ask go to a human.
    split = got["live-split"]
    assert (
        not split.auto and split.action == "escalate" and split.review_id and split.decision is None
    )
    # A value conflict (CD with value profiles) escalates without a follow-up.
    conflict = got["value-conflict"]
    assert conflict.path == ["read:CD", "route:escalate", "escalate"]
    # Explicit options with role utilities: CONCORD certifies.
    negotiated = got["negotiated"]
    assert negotiated.action == "concord" and negotiated.auto and negotiated.decision == "1"


def test_escalation_item_holds_what_a_reviewer_needs(tmp_path: Path) -> None:
    journal = Journal(":memory:")
    row = panel(
        "vc",
        ["1", "2"],
        values=[{"safety": 0.9}, {"speed": 0.7}],
        reasoning=["Option 1 states the window."] * 2,
        meta={"gold": "1"},
    )
    record = decide(as_panel(row), _policy(), journal=journal, run_id="run")
    assert record.action == "escalate" and record.review_id == "run.1"
    item = journal.get("run", "case/1/review")
    assert item is not None
    data = item.payload
    assert [p["agent"] for p in data["positions"]] == ["a1", "a2"]
    assert data["value_dimensions"] == ["safety", "speed"]
    assert data["positions"][0]["values"] == {"safety": 0.9}
    assert data["reading"]["state"] == "CD" and data["panel"]["outputs"]
    assert "gold" not in data["panel"]["meta"]


def test_without_any_follow_up_parametric_agreement_waits_for_a_human() -> None:
    row = panel("p", ["1", "1", "1"])
    record = decide(as_panel(row), _policy(seek_context={"use_recorded": False}))
    assert not record.auto and record.action == "escalate"
    assert "no model configured" in record.reason


_decision = st.sampled_from(["1", "1", "1", "2", None])
_source = st.sampled_from(["kb:a", "kb:b", "web:c", "parametric"])


@st.composite
def panels(draw: st.DrawFn) -> dict[str, Any]:
    """Panels leaning towards agreement, with evidence or recorded re-asks on a coin flip."""
    n = draw(st.integers(2, 5))
    decisions = [draw(_decision) for _ in range(n)]
    if draw(st.booleans()):
        decisions = [decisions[0]] * n
    families = [draw(st.sampled_from(["f1", "f2", "f3", "f4", None])) for _ in range(n)]
    swap = (
        [d if draw(st.integers(0, 3)) else draw(_decision) for d in decisions]
        if draw(st.booleans())
        else None
    )
    evidence: list[list[dict[str, Any]] | None] | None = None
    if draw(st.integers(0, 2)) == 0:
        # Retrieval panel: most agents read a non-parametric source.
        evidence = [
            [{"source": f"kb:{draw(st.integers(0, 3))}", "present": draw(st.integers(0, 5)) > 0}]
            for _ in range(n)
        ]
    elif draw(st.booleans()):
        evidence = [
            [{"source": draw(_source), "present": draw(st.integers(0, 3)) > 0}]
            if draw(st.integers(0, 4))
            else None
            for _ in range(n)
        ]
    same = draw(st.booleans())
    reasoning = ["The first option states the refund window."] * n if same else None
    return panel(
        "x", decisions, families=families, swap=swap, evidence=evidence, reasoning=reasoning
    )


@settings(max_examples=60)
@given(panels())
def test_guard_gates_every_automatic_commitment(row: dict[str, Any]) -> None:
    p = as_panel(row)
    policy = _policy()
    record = decide(p, policy)
    assert record.auto == (record.decision is not None)
    if not record.auto:
        return
    assert record.basis in {"guard", "independent_families"}
    votes = panel_votes(p)
    if record.basis == "guard":
        # Committed on the guard's word: evidence auditable and independent, same answer.
        checks = {c.number: c.holds for c in guard_votes(votes).invariants}
        assert checks[1] and checks[2]
        assert record.path[-1] == "guard:backed" and record.route in ("auto", "auto_explain")
        assert record.decision == Counter(v.answer for v in votes).most_common(1)[0][0]
        return
    # Committed on measured stability across independent families, never on raw agreement.
    second = recorded_second_answers(p)
    stable = [
        o
        for o in p.outputs
        if o.decision is not None and second.get(o.agent) and second[o.agent].decision == o.decision
    ]
    assert "guard:backed" not in record.path
    backers = {o.family or o.agent for o in stable if o.decision == record.decision}
    assert len(backers) >= policy.acceptance.min_families
    assert all(o.decision == record.decision for o in stable)


DCI_SCRIPT = """
rules:
  - match: {stage: dci.frame}
    json: {act: frame, target: a0, text: "Frame: choose the reply that states the refund policy."}
  - match: {stage: dci.propose}
    json: {act: extend, target: o1, text: "o1 states the window.", option: "State the 30-day window and how to claim it."}
  - match: {stage: dci.challenge}
    json: {act: challenge, target: o2, text: "o2 states no policy.", blocking: false}
  - match: {stage: dci.revise}
    json: {act: clarify, target: a0, text: "The question asks for the policy itself."}
  - match: {stage: dci.score}
    json: {act: recommend, target: o1, text: "o1 answers the question.", scores: {o1: 0.9, o2: 0.1}, confidence: 0.8}
  - match: {stage: dci.synthesize}
    json: {act: synthesize, target: o1, text: "We select o1.", reopen_conditions: ["policy changes"], next_actions: ["reply"]}
default: '{"act": "clarify", "target": "a0", "text": "noted"}'
"""


def test_dci_follow_up_attaches_a_packet_and_journals_every_call(tmp_path: Path) -> None:
    (tmp_path / "dci.yaml").write_text(DCI_SCRIPT, encoding="utf-8")
    journal = Journal(":memory:")
    policy = _policy(seek_context={"followup": "dci", "model": f"scripted:{tmp_path / 'dci.yaml'}"})
    record = decide(as_panel(panel("d", ["1", "2", "2"])), policy, journal=journal, run_id="R")
    assert record.action == "escalate" and not record.auto
    assert any(step.startswith("deliberation:") for step in record.path)
    calls = [e for e in journal.events("R") if e.type == "model.call"]
    assert record.usage.calls == len(calls) > 0
    assert all(e.payload["request"]["stage"].startswith("dci.") for e in calls)
    item = journal.get("R", "case/1/review")
    assert item is not None
    packet = item.payload["packet"]
    assert packet["status"] == "complete" and packet["selected"]["label"] == "1"


def test_a_failed_dci_follow_up_still_attaches_a_packet_and_says_so(tmp_path: Path) -> None:
    (tmp_path / "none.yaml").write_text("rules: []\n", encoding="utf-8")  # every call fails
    journal = Journal(":memory:")
    policy = _policy(
        seek_context={"followup": "dci", "model": f"scripted:{tmp_path / 'none.yaml'}"}
    )
    record = decide(as_panel(panel("d", ["1", "2", "2"])), policy, journal=journal, run_id="R")
    assert record.action == "escalate" and not record.auto and record.decision is None
    assert "model_failure" in record.reason and "stopped early" in record.reason
    item = journal.get("R", "case/1/review")
    assert item is not None
    assert item.payload["packet"]["status"] == "model_failure"
    # Failed calls are not journalled (a resume tries them again) but count in the usage.
    assert not [e for e in journal.events("R") if e.type == "model.call"]
    assert record.usage.calls == record.usage.attempts > 0
    assert item.payload["packet"]["metrics"]["calls"] == record.usage.calls


def test_unusable_utilities_escalate_saying_why_concord_did_not_run() -> None:
    values: list[dict[str, float] | None] = [{"safety": 0.9}, {"cost": 0.9}, {"cost": 0.8}]
    good = {"a1": {"1": 0.9, "2": 0.2}, "a2": {"1": 0.3, "2": 0.9}, "a3": {"1": 0.7, "2": 0.8}}
    cases = {
        "out of range": ({**good, "a1": {"1": 5, "2": 0.2}}, "meta.utilities.a1.1 is 5"),
        "not a number": ({**good, "a1": {"1": "high", "2": 0.2}}, "meta.utilities.a1.1 is 'high'"),
        "missing agent": ({"a1": good["a1"], "a2": good["a2"]}, "agent a3 has no utilities"),
        "missing option": ({**good, "a2": {"1": 0.3}}, "agent a2 gives no utility for option(s) 2"),
    }
    for name, (utilities, why) in cases.items():
        row = panel(name, ["1", "2", "2"], values=values, meta={"utilities": utilities})
        record = decide(as_panel(row), _policy())
        assert record.action == "escalate" and not record.auto, name
        assert not any(step.startswith("concord:") for step in record.path), name
        assert f"CONCORD not run: {why}" in record.reason, (name, record.reason)
    row = panel("ok", ["1", "2", "2"], values=values, meta={"utilities": good})
    assert any(step.startswith("concord:") for step in decide(as_panel(row), _policy()).path)


def test_a_panel_and_a_policy_as_data_and_a_journal_as_a_path(tmp_path: Path) -> None:
    """What the integrations take (a dict policy, a journal path) the library call takes
    too, and decides exactly as with the models."""
    row = panel("d1", ["x", "x", "y"], families=["f1", "f2", "f3"])
    data = {k: dict(v) for k, v in FAST.items()}
    as_data = decide(row, data, journal=tmp_path / "j.sqlite")
    as_models = decide(as_panel(row), _policy())
    assert as_data.model_dump(exclude={"review_id"}) == as_models.model_dump(exclude={"review_id"})
    with Journal(str(tmp_path / "j.sqlite")) as journal:  # the path was journalled and closed
        assert len(journal.runs()) == 1


def test_decide_works_where_an_event_loop_is_running() -> None:
    """A notebook or an async framework calling the sync twin: decided on a thread."""
    import asyncio

    row = panel("d2", ["x", "x", "x"], families=["f1", "f2", "f3"])

    async def inside() -> Any:
        return decide(row, _policy())

    assert asyncio.run(inside()).id == "d2"


@pytest.mark.parametrize(
    ("args", "error", "where"),
    [
        ((None, None), "InputError", "Panel or a mapping"),
        (({"id": "p", "outputs": "nope"}, None), "InputError", "outputs"),
        ((panel("d3", ["x", "y"]), 42), "ConfigError", "policy"),
        ((panel("d3", ["x", "y"]), {"reading": {"theta_s": "high"}}), "ConfigError", "theta_s"),
    ],
)
def test_what_is_not_a_panel_or_a_policy_is_named(
    args: tuple[Any, Any], error: str, where: str
) -> None:
    with pytest.raises(Exception) as caught:
        decide(*args)
    assert type(caught.value).__name__ == error
    assert where in str(caught.value)


def test_a_journal_that_is_not_one_is_named() -> None:
    from dissensus.errors import ConfigError

    with pytest.raises(ConfigError, match="journal"):
        decide(panel("d4", ["x", "y"]), None, journal=42)  # type: ignore[arg-type]


def test_decide_exits_1_when_every_dci_follow_up_failed_for_one_cause(tmp_path: Path) -> None:
    """As for re-asks: a run whose every DCI deliberation stopped because all participants
    of a stage failed says so in one line and exits 1 (it was exit 0)."""
    import yaml

    from cli_helpers import cli
    from pipeline_cases import write_jsonl

    (tmp_path / "none.yaml").write_text("rules: []\n", encoding="utf-8")  # every call fails
    data: dict[str, Any] = {k: dict(v) for k, v in FAST.items()}
    data["seek_context"] = {"followup": "dci", "model": f"scripted:{tmp_path / 'none.yaml'}"}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    rows = [panel(f"d{i}", ["1", "2", "2"]) for i in range(3)]
    done = cli(
        "decide",
        write_jsonl(tmp_path / "in.jsonl", rows),
        "--policy",
        tmp_path / "p.yaml",
        "--journal",
        tmp_path / "j.sqlite",
    )
    assert done.code == 1, (done.code, done.err)
    said = " ".join(done.err.split())
    assert "every follow-up of run" in said and "failed: model_failure:" in said, said
