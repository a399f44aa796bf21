"""DCI-CF end to end with rule-based participants: termination, packets on every path."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dci_helpers import PANEL, ScriptedParticipant, panel
from dissensus.dci.acts import ACTS
from dissensus.dci.flow import deliberate_sync, request_bound
from dissensus.dci.packet import PATH_PATTERN, SCHEMA_PATH, DecisionPacket
from dissensus.dci.task import DCIConfig, parse_task
from dissensus.errors import ConfigError

SCHEMA = json.loads(SCHEMA_PATH.read_text())


def validate_against_schema(data: dict[str, object]) -> None:
    """Validate with jsonschema when installed; otherwise with the model the schema is generated from."""
    try:
        import jsonschema
    except ImportError:
        DecisionPacket.model_validate_json(json.dumps(data))
        missing = [k for k in SCHEMA["required"] if k not in data]
        assert not missing, missing
        assert set(data) <= set(SCHEMA["properties"])
        return
    jsonschema.Draft202012Validator(SCHEMA).validate(data)


TASK = parse_task(
    {
        "question": "Which road should we take?",
        "options": [{"id": "north", "text": "Take the north road."}],
    }
)


def check_packet(packet: DecisionPacket) -> None:
    validate_against_schema(packet.model_dump(mode="json"))
    assert re.match(PATH_PATTERN, packet.path)
    if packet.selected is not None:
        assert packet.selected.id in {o.id for o in packet.options}
        assert packet.reopen_conditions and packet.selected.rationale


def test_converges_with_a_clear_leader() -> None:
    result = deliberate_sync(TASK, panel({"o1": 0.9}))
    p = result.packet
    check_packet(p)
    assert (p.path, p.status, p.selected and p.selected.id, p.selected and p.selected.label) == (
        "converged",
        "complete",
        "o1",
        "north",
    )
    assert p.metrics.rounds == 1 and p.metrics.acts_total == 18
    assert p.metrics.acts_by_family == {
        "orienting": 1,
        "generative": 4,
        "critical": 4,
        "integrative": 1,
        "epistemic": 4,
        "decisional": 4,
    }
    assert p.reopen_conditions == ["if x"] and p.next_actions == ["do y"]


def test_no_convergence_ends_in_the_fallback_cascade_after_max_rounds() -> None:
    agents = [ScriptedParticipant(p, scores={"o1": 0.6, "o2": 0.55}) for p in PANEL]
    result = deliberate_sync(TASK, agents)
    p = result.packet
    check_packet(p)
    assert p.path.startswith("fallback:") and p.metrics.rounds == 2
    assert p.fallback is not None and p.fallback.selected == p.selected.id  # type: ignore[union-attr]
    assert p.convergence is not None and not p.convergence.converged and p.convergence.margin < 0.15


def test_open_blocking_objection_prevents_convergence_and_becomes_a_residual_objection() -> None:
    agents = [
        ScriptedParticipant(p, scores={"o1": 0.9}, block=True, resolve=(p != "challenger"))
        for p in PANEL
    ]
    p = deliberate_sync(TASK, agents).packet
    check_packet(p)
    assert p.path.startswith("fallback:")
    blocking = [o for o in p.residual_objections if o.blocking]
    assert blocking and {o.holder for o in blocking} == {"challenger"}
    assert any("blocking objection" in c for c in p.reopen_conditions)


def test_minority_report_names_holders_rationale_and_confidence() -> None:
    agents = [ScriptedParticipant(p, scores={"o1": 0.9, "o2": 0.1}) for p in PANEL[:3]]
    agents.append(ScriptedParticipant("integrator", scores={"o1": 0.5, "o2": 0.95}))
    p = deliberate_sync(TASK, agents).packet
    assert p.selected is not None and p.selected.id == "o1"
    assert len(p.minority_report) == 1
    m = p.minority_report[0]
    assert (
        m.option == "o2"
        and m.holders == ["integrator"]
        and m.confidence == 0.7
        and "integrator" in m.rationale
    )


def test_invalid_act_is_reasked_then_recorded_as_failure_never_coerced() -> None:
    agents = panel({"o1": 0.9}, challenger=["valid", "valid", "invalid", "invalid"])
    result = deliberate_sync(TASK, agents)
    p = result.packet
    failures = [f for f in p.failures if f.speaker == "challenger"]
    assert (
        len(failures) == 1 and failures[0].kind == "invalid_act" and failures[0].stage == "revise"
    )
    assert any("unknown act" in x for x in failures[0].problems)
    # The re-ask carried the problems back to the participant.
    challenger = agents[2]
    assert challenger.requests[3].feedback and "unknown act" in challenger.requests[3].feedback[0]
    assert all(a.act in ACTS for a in result.workspace.acts)
    assert not any(a.speaker == "challenger" and a.stage == "revise" for a in result.workspace.acts)


def test_budget_exhaustion_still_yields_a_packet_that_says_so() -> None:
    agents = panel({"o1": 0.9}, integrator=["valid", "valid", "budget"])
    result = deliberate_sync(TASK, agents)
    p = result.packet
    check_packet(p)
    assert p.status == "budget_exhausted" and "budget" in (p.status_detail or "")
    assert p.selected is not None and "No synthesis" in p.selected.rationale
    assert p.next_actions[0].startswith("Run the deliberation again once the cause is fixed")
    assert result.trace[-1].outcome == "budget_exhausted"


def test_model_failure_of_everyone_yields_a_packet_that_says_so() -> None:
    agents = [ScriptedParticipant(pid, ["model"]) for pid in PANEL]
    p = deliberate_sync(TASK, agents).packet
    check_packet(p)
    assert p.status == "model_failure" and p.selected is not None and p.selected.id == "o1"
    assert p.path == "fallback:outranking"


def test_no_option_at_all_is_a_packet_without_selection() -> None:
    task = parse_task({"question": "What now?"})
    agents = [ScriptedParticipant(pid, ["invalid"]) for pid in PANEL]
    p = deliberate_sync(task, agents).packet
    check_packet(p)
    assert p.selected is None and p.path == "fallback:no_options"


def test_ablations_change_the_flow() -> None:
    base = DCIConfig()
    untyped = deliberate_sync(
        TASK, panel({"o1": 0.9}), config=base.model_copy(update={"typed_grammar": False})
    ).packet
    assert untyped.metrics.acts_by_family.get("untyped", 0) == untyped.metrics.acts_total > 0
    neutral = deliberate_sync(
        TASK, panel({"o1": 0.9}), config=base.model_copy(update={"archetypes": False})
    ).packet
    assert set(neutral.participants.values()) == {"Participant"}
    open_rounds = deliberate_sync(
        TASK, panel({"o1": 0.9}), config=base.model_copy(update={"convergent_flow": False})
    ).packet
    assert open_rounds.path == "unstructured:mean_score" and open_rounds.fallback is None
    for p in (untyped, neutral, open_rounds):
        check_packet(p)


def test_missing_agent_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="no agent given"):
        deliberate_sync(TASK, panel()[:3])


moves = st.lists(
    st.sampled_from(["valid", "valid", "valid", "invalid", "invalid_output", "model", "budget"]),
    min_size=1,
    max_size=6,
)


@given(
    moves=st.fixed_dictionaries({p: moves for p in PANEL}),
    scores=st.dictionaries(
        st.sampled_from(["o1", "o2", "o3", "o4", "o5"]), st.floats(0, 1), max_size=5
    ),
    max_rounds=st.integers(1, 3),
    with_options=st.booleans(),
    ablation=st.sampled_from([None, "typed_grammar", "archetypes", "convergent_flow"]),
)
def test_every_path_terminates_within_bounds_and_yields_a_valid_packet(
    moves: dict[str, list[str]],
    scores: dict[str, float],
    max_rounds: int,
    with_options: bool,
    ablation: str | None,
) -> None:
    task = TASK if with_options else parse_task({"question": "Open question?"})
    config = DCIConfig(max_rounds=max_rounds)
    if ablation:
        config = config.model_copy(update={ablation: False})
    agents = [ScriptedParticipant(p, moves[p], scores) for p in PANEL]
    result = deliberate_sync(task, agents, config=config)
    p = result.packet
    check_packet(p)
    assert p.metrics.rounds <= max_rounds
    assert len(result.trace) <= request_bound(len(PANEL), config)
    budget_hit = any(t.outcome == "budget_exhausted" for t in result.trace)
    assert (p.status == "budget_exhausted") == budget_hit
    if budget_hit:
        assert result.trace[-1].outcome == "budget_exhausted"
    if p.status == "complete" and result.workspace.live_options():
        assert p.selected is not None
    assert all(a.act in ACTS or a.act == "untyped" for a in result.workspace.acts)


def test_schema_file_is_the_model_schema(repo_root: Path) -> None:
    from dissensus.dci.packet import packet_schema

    assert json.loads(SCHEMA_PATH.read_text()) == json.loads(json.dumps(packet_schema()))
    assert SCHEMA_PATH.parent == repo_root / "src" / "dissensus" / "dci"
