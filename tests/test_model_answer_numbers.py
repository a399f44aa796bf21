"""Numbers in model answers are JSON numbers: ``true`` and ``"5"`` are not numbers, and a
score answer names exactly the ids it was asked about (CONCORD LLM agents, DCI
``recommend``, ``dissensus judge``)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic import ValidationError

from dissensus.agents.deliberator import JudgeScore
from dissensus.agents.llm_negotiator import LLMNegotiator, ScoreReply
from dissensus.concord.agent import NegotiationView, Outcome
from dissensus.dci.acts import RawAct
from dissensus.llm import ModelClient, StructuredOutputError
from dissensus.llm.client import ClientSettings
from dissensus.llm.function import FunctionBackend

REJECTED = Outcome(id="R0", text="nothing")
IDEAL = Outcome(id="I0", text="everything")
C1 = Outcome(id="C1", text="plan one")


def _score(answer: object) -> list[float]:
    """What an LLM agent calibrated on [0, 10] makes of ``answer`` to a score request for C1."""

    def handler(request: Any, mode: str) -> str:
        if request.stage == "concord.anchors":
            return json.dumps({"scores": {"R0": 0, "I0": 10}})
        return json.dumps(answer)

    client = ModelClient(FunctionBackend(handler), settings=ClientSettings(max_reasks=0))
    agent = LLMNegotiator("a", "You own a.", client)
    common: dict[str, Any] = {"floor": 0.5, "margin": 0.01, "agents": ["a"]}
    anchors = NegotiationView(
        agent="a", phase="anchors", round=0, rejected=REJECTED, ideal=IDEAL, **common
    )
    view = NegotiationView(agent="a", phase="score", round=1, **common)

    async def run() -> list[float]:
        try:
            await agent.score([REJECTED, IDEAL], anchors)
            return list(await agent.score([C1], view))
        finally:
            await client.aclose()

    return asyncio.run(run())


def test_an_llm_agents_numeric_score_is_read() -> None:
    assert _score({"scores": {"C1": 7}}) == [7.0]
    assert _score({"scores": [{"id": "C1", "score": 2.5}]}) == [2.5]


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        ({"scores": {"C1": True}}, "valid number"),
        ({"scores": {"C1": "5"}}, "valid number"),
        ({"scores": [{"id": "C1", "score": False}]}, "valid number"),
        ({"scores": {"C1": 5, "C9": 4}}, "not asked about: C9"),
        ({"scores": [{"id": "C1", "score": 5}, {"id": "C1", "score": 9}]}, "more than once: C1"),
    ],
)
def test_an_llm_agents_loose_score_is_a_fault(answer: object, words: str) -> None:
    with pytest.raises(StructuredOutputError) as info:
        _score(answer)
    assert words in str(info.value), str(info.value)


@pytest.mark.parametrize("value", [True, "5"])
def test_score_reply_refuses_a_bool_or_a_string(value: object) -> None:
    with pytest.raises(ValidationError):
        ScoreReply.model_validate({"scores": {"C1": value}})


@pytest.mark.parametrize(
    "data",
    [
        {"scores": {"o1": True}},
        {"scores": {"o1": "0.1"}},
        {"confidence": True},
        {"confidence": "0.9"},
    ],
)
def test_a_dci_act_refuses_a_bool_or_a_string_for_a_number(data: dict[str, object]) -> None:
    base = {"act": "recommend", "target": "o1", "text": "go with o1"}
    with pytest.raises(ValidationError):
        RawAct.model_validate({**base, **data})
    assert RawAct.model_validate({**base, "scores": {"o1": 1}, "confidence": 0}).scores == {
        "o1": 1.0
    }


@pytest.mark.parametrize(
    ("field", "value"), [("overall", True), ("risk_identification", "7"), ("actionability", 7.5)]
)
def test_a_judge_score_is_a_json_number(field: str, value: object) -> None:
    good = {"overall": 7, "risk_identification": 6, "reasoning_depth": 5, "actionability": 8.0}
    assert JudgeScore.model_validate(good).actionability == 8
    with pytest.raises(ValidationError) as info:
        JudgeScore.model_validate({**good, field: value})
    assert info.value.errors()[0]["loc"] == (field,)
