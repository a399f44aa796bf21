"""An LLM agent's anchor answer must lie in the ranges its request's schema asks for.

The anchor request asks for the rejected anchor in [0, 4] and the ideal in [6, 10]; the
answer was never checked against them. ``{R0: 10, I0: 0}`` was read as a downward scale
(a model's 1/10 certified as 0.9) and ``{R0: 5, I0: 5}`` ended the whole run as a
configuration error (exit 2, no certificate, the calls paid). Such an answer does not
validate: it is re-asked, then an anchor fault of that agent, which stays uncalibrated,
and the run ends ``best_effort`` with a certificate. Equal anchors of a function agent
(the user's code) stay a configuration error naming the field.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from cli_helpers import run_cli
from concord_helpers import IDEAL, REJECTED, HashAgent, TextOnly
from dissensus.agents.llm_negotiator import ANCHOR_RANGES, LLMNegotiator
from dissensus.concord import negotiate_sync, verify
from dissensus.concord.agent import NegotiationView, Outcome
from dissensus.llm import ModelClient, StructuredOutputError
from dissensus.llm.base import ChatRequest
from dissensus.llm.client import ClientSettings
from dissensus.llm.function import FunctionBackend

_VIEW: dict[str, Any] = {"floor": 0.5, "margin": 0.01, "agents": ["a"]}
ANCHOR_VIEW = NegotiationView(
    agent="a", phase="anchors", round=0, rejected=REJECTED, ideal=IDEAL, **_VIEW
)


def _problem(tmp_path: Path, sec_anchors: str) -> Path:
    rules = {
        "rules": [
            {"match": {"agent": "sec", "stage": "concord.anchors"}, "response": sec_anchors},
            {"match": {"stage": "concord.anchors"}, "response": '{"scores": {"R0": 0, "I0": 10}}'},
            {
                "match": {"agent": "ops", "stage": "concord.propose"},
                "response": '{"text": "Open the firewall to the internet"}',
            },
            {"match": {"agent": "sec", "stage": "concord.propose"}, "response": '{"text": ""}'},
            {
                "match": {"agent": "ops", "stage": "concord.score"},
                "response": '{"scores": {"C1": 9}}',
            },
            {
                "match": {"agent": "sec", "stage": "concord.score"},
                "response": '{"scores": {"C1": 1}}',
            },
        ]
    }
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules), encoding="utf-8")
    problem = tmp_path / "prob.yaml"
    problem.write_text(
        'problem: "Choose the fix."\nfloor: 0.7\nrounds: 0\nmodel: scripted:rules.yaml\n'
        "anchors:\n  rejected: {id: R0, text: do nothing}\n  ideal: {id: I0, text: perfect}\n"
        "agents:\n  - {id: ops, kind: llm, role: You own ops.}\n"
        "  - {id: sec, kind: llm, role: You own security.}\n",
        encoding="utf-8",
    )
    return problem


@pytest.mark.parametrize(
    "answer",
    ['{"scores": {"R0": 10, "I0": 0}}', '{"scores": {"R0": 5, "I0": 5}}'],
    ids=["inverted", "equal"],
)
def test_the_reviewers_anchor_answers_are_the_agents_fault_with_a_certificate(
    tmp_path: Path, answer: str
) -> None:
    out = tmp_path / "cert.json"
    res = run_cli("negotiate", _problem(tmp_path, answer), "--json", "--out", out)
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    assert doc["status"] == "best_effort"
    sec = doc["scores"]["sec"]
    assert sec["anchors"] == {"rejected": None, "ideal": None}
    assert sec["raw"] is None and sec["calibrated"] == 0.0
    assert "the rejected anchor R0 must score within [0, 4]" in sec["fault"]
    assert doc["scores"]["ops"]["anchors"] == {"rejected": 0.0, "ideal": 10.0}
    assert [s["agent"] for s in doc["shortfall"]] == ["sec"]
    assert run_cli("verify", out).returncode == 0


def _anchor_client(answers: list[dict[str, float]], reasks: int) -> tuple[ModelClient, list[str]]:
    stages: list[str] = []

    def handler(request: ChatRequest, mode: str) -> str:
        stages.append(str(request.stage))
        return json.dumps({"scores": answers[min(len(stages), len(answers)) - 1]})

    client = ModelClient(FunctionBackend(handler), settings=ClientSettings(max_reasks=reasks))
    return client, stages


def _anchors(client: ModelClient) -> Sequence[float]:
    agent = LLMNegotiator("a", "You own a.", client)

    async def run() -> Sequence[float]:
        try:
            return await agent.score([REJECTED, IDEAL], ANCHOR_VIEW)
        finally:
            await client.aclose()

    return asyncio.run(run())


def test_an_inverted_anchor_answer_is_re_asked_and_a_good_one_then_kept() -> None:
    client, stages = _anchor_client([{"R0": 10, "I0": 0}, {"R0": 1, "I0": 9}], reasks=2)
    assert list(_anchors(client)) == [1.0, 9.0]
    assert stages == ["concord.anchors", "concord.anchors"]


ranged = st.floats(-20, 20, allow_nan=False).map(lambda x: round(x, 2))


def _fits(rejected: float, ideal: float) -> bool:
    (rl, rh), (il, ih) = ANCHOR_RANGES
    return rl <= rejected <= rh and il <= ideal <= ih


@settings(max_examples=80, deadline=None)
@given(rejected=ranged, ideal=ranged)
def test_an_anchor_answer_is_kept_only_inside_its_ranges(rejected: float, ideal: float) -> None:
    """Whatever two numbers a model answers, the agent calibrates on them only when the
    rejected anchor is in [0, 4] and the ideal in [6, 10]; otherwise the call fails (an
    anchor fault), never a scale running downwards or a flat one."""
    client, _ = _anchor_client([{"R0": rejected, "I0": ideal}], reasks=0)
    if _fits(rejected, ideal):
        assert list(_anchors(client)) == [rejected, ideal]
    else:
        with pytest.raises(StructuredOutputError, match="must score within"):
            _anchors(client)


def test_the_ranges_hold_whatever_client_the_agent_speaks_through() -> None:
    agent = LLMNegotiator("a", "You own a.", TextOnly('{"scores": {"R0": 10, "I0": 0}}'))
    with pytest.raises(StructuredOutputError, match="must score within"):
        asyncio.run(agent.score([REJECTED, IDEAL], ANCHOR_VIEW))


class _FlatModelAgent(HashAgent):
    """A model-backed agent of the Python API whose anchors come back equal."""

    async def score(self, outcomes: Sequence[Outcome], view: NegotiationView) -> Sequence[float]:
        if view.phase == "anchors":
            return [5.0, 5.0]
        return await super().score(outcomes, view)


def test_equal_anchors_from_a_model_agent_are_its_fault_not_a_config_error() -> None:
    agents = [HashAgent("a0", 1), _FlatModelAgent("flat", 2)]
    cert = negotiate_sync(agents, rejected=REJECTED, ideal=IDEAL, floor=0.5, rounds=1)
    assert cert.status == "best_effort"
    flat = cert.scores["flat"]
    assert flat.anchors.rejected is None and flat.fault is not None
    assert "the two anchors score equal" in flat.fault
    assert verify(cert.model_dump(mode="json")).valid
