"""LLM participants: the model client's failures become the protocol's, and packets still come out."""

from __future__ import annotations

import asyncio

import pytest

from dissensus.agents.deliberator import LLMDeliberator, deliberate_with_model
from dissensus.dci.participant import ActRequest, ParticipantFailure
from dissensus.dci.task import parse_task
from dissensus.llm import Budget, ModelClient, ScriptedBackend
from test_dci_flow import check_packet

TASK = parse_task(
    {
        "question": "Which road?",
        "options": [{"id": "n", "text": "North."}, {"id": "s", "text": "South."}],
    }
)
REQUEST = ActRequest(
    participant="framer",
    archetype="Framer",
    stage="frame",
    round=0,
    system="s",
    prompt="p",
    allowed_acts=("frame",),
)


def client(data: dict[str, object], budget: Budget | None = None) -> ModelClient:
    return ModelClient(ScriptedBackend.from_dict(data), budget=budget)


@pytest.mark.parametrize(
    ("data", "budget", "kind"),
    [
        ({"rules": []}, None, "model_failure"),
        ({"default": "this is not an act"}, None, "invalid_output"),
        (
            {"default": {"act": "frame", "target": "a0", "text": "x"}},
            Budget(max_calls=0),
            "budget_exhausted",
        ),
    ],
)
def test_client_failures_map_to_protocol_failures(
    data: dict[str, object], budget: Budget | None, kind: str
) -> None:
    agent = LLMDeliberator(client(data, budget), "framer")
    with pytest.raises(ParticipantFailure) as err:
        asyncio.run(agent.speak(REQUEST))
    assert err.value.kind == kind


def test_request_carries_agent_role_and_stage() -> None:
    rules = {
        "rules": [
            {
                "match": {"agent": "framer", "role": "Framer", "stage": "dci.frame"},
                "json": {"act": "frame", "target": "a0", "text": "ok"},
            }
        ]
    }
    reply = asyncio.run(LLMDeliberator(client(rules), "framer").speak(REQUEST))
    assert reply.act.act == "frame" and reply.usage.calls == 1 and reply.usage.prompt_tokens > 0


def test_a_failing_model_still_yields_a_packet_that_says_so() -> None:
    output, _ = asyncio.run(deliberate_with_model(TASK, client({"rules": []})))
    assert output.packet is not None
    check_packet(output.packet)
    assert output.status == output.packet.status == "model_failure"
    assert output.packet.selected is not None and output.packet.selected.label == "n"
    assert all(f.kind == "model_failure" for f in output.packet.failures)


def test_a_model_that_never_speaks_the_grammar_yields_failures_not_coerced_acts() -> None:
    # Regression: a model whose every answer is invalid used to end "complete".
    output, result = asyncio.run(
        deliberate_with_model(
            TASK, client({"default": {"act": "shout", "target": "o1", "text": "!"}})
        )
    )
    assert output.packet is not None and output.packet.status == "model_failure"
    assert output.status == "model_failure"
    assert result.workspace.acts == [] and output.packet.metrics.acts_total == 0
    assert {f.kind for f in output.packet.failures} == {"invalid_act"}
    assert output.packet.path == "fallback:tie_break" and "every participant failed" in (
        output.packet.status_detail or ""
    )


def test_the_judge_sees_question_and_answer_never_the_method() -> None:
    from dissensus.agents.deliberator import judge_prompt
    from dissensus.dci.output import DeliberationOutput

    output = DeliberationOutput.model_validate(
        {
            "task_id": "case-7f3",
            "task_type": "routine",
            "method": "self_consistency",
            "variant": "no_archetypes",
            "model": "scripted:self_consistency.yaml",
            "question": "Which rollout plan?",
            "answer": "Roll out in two waves.",
            "selected_option": None,
            "packet": None,
            "usage": {},
            "status": "complete",
            "detail": None,
            "extras": {},
        }
    )
    text = " ".join(m.content for m in judge_prompt(output))
    assert "Which rollout plan?" in text and "Roll out in two waves." in text
    for hidden in ("self_consistency", "no_archetypes", "scripted:", "case-7f3", "routine"):
        assert hidden not in text
