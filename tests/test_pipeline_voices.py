"""One model is one voice, and a schema-following model gets a stable re-ask.

Loopback OpenAI-compatible servers (:class:`dissensus.llm.fakeserver.FakeServer`) answer
the live re-asks. The schema-filling server answers *exactly* the JSON schema it is sent
(first enum value, minimum, a fixed string), as a guided-decoding server does.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from dissensus.llm.base import ChatRequest
from dissensus.llm.fakeserver import FakeServer, ServerSettings
from dissensus.llm.scripted import ScriptedRules
from dissensus.pipeline import Policy, decide, policy_from_dict
from dissensus.pipeline.steps import AcceptanceStep, FollowupStep
from dissensus.pipeline.trust_regions import AgentCalibration, CalibrationFile
from dissensus.store import Journal
from pipeline_cases import as_panel, panel

FAMILIES = ["google", "openai", "tii"]


def fill(schema: dict[str, Any]) -> Any:
    """The answer a schema-following server gives: first enum value, minimum, fixed string."""
    if "enum" in schema:
        return schema["enum"][0]
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if "object" in kinds or "properties" in schema:
        return {key: fill(sub) for key, sub in schema.get("properties", {}).items()}
    if "string" in kinds:
        return "fixed"
    if "integer" in kinds or "number" in kinds:
        return schema.get("minimum", 0)
    if "array" in kinds:
        return []
    if "boolean" in kinds:
        return False
    return None


class SchemaFiller:
    def answer(self, request: ChatRequest) -> str:
        import json

        assert request.json_schema is not None, "the re-ask must send a JSON schema"
        return json.dumps(fill(request.json_schema))


class SchemaServer(FakeServer):
    """A loopback server that answers exactly the schema in ``response_format``."""

    def __init__(self) -> None:
        super().__init__(ScriptedRules(default="unused"), ServerSettings())
        self._responder = SchemaFiller()  # type: ignore[assignment]

    def _request_of(self, payload: dict[str, Any], headers: dict[str, str]) -> ChatRequest:
        request = super()._request_of(payload, headers)
        spec = (payload.get("response_format") or {}).get("json_schema") or {}
        return request.model_copy(update={"json_schema": spec.get("schema")})


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[SchemaServer]:
    with SchemaServer() as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        yield srv


def _policy(seek_context: dict[str, Any]) -> Policy:
    return policy_from_dict(
        {
            "reading": {"similarity": "tfidf", "theta_s": 0.3},
            "seek_context": {"use_recorded": False, **seek_context},
        }
    )


def _case(journal: Journal, run: str) -> tuple[FollowupStep, AcceptanceStep]:
    followup = journal.get(run, "case/1/followup0")
    acceptance = journal.get(run, "case/1/acceptance0")
    assert followup is not None and acceptance is not None
    return FollowupStep.model_validate(followup.payload), AcceptanceStep.model_validate(
        acceptance.payload
    )


def _calibrated() -> CalibrationFile:
    """Every agent of the panel trusted at score <= 0 (20 of 20 right in one stratum)."""
    return CalibrationFile(
        agents={
            f"a{i}": AgentCalibration(family=f, strata={"s": {"0": [20, 20]}})
            for i, f in enumerate(FAMILIES, 1)
        }
    )


def test_the_re_ask_schema_is_strict_mode_and_enumerates_the_options(server: SchemaServer) -> None:
    models = {
        "a1": "openai:gemini-1.5-flash",
        "a2": "openai:gpt-4o-mini",
        "a3": "openai:falcon-40b",
    }
    journal = Journal(":memory:")
    record = decide(
        as_panel(panel("p", ["1", "1", "1"], families=FAMILIES)),
        _policy({"models": models}),
        journal=journal,
        run_id="r",
    )
    bodies = list(server.bodies)
    assert len(bodies) == 3
    for body in bodies:
        spec = body["response_format"]["json_schema"]["schema"]
        assert spec["additionalProperties"] is False
        assert sorted(spec["required"]) == sorted(spec["properties"]) == ["decision", "reasoning"]
        assert spec["properties"]["decision"] == {
            "type": ["string", "null"],
            "enum": ["1", "2", None],
        }
    # The schema-true answer (first enum value in both orders) is a stable answer per agent.
    followup, acceptance = _case(journal, "r")
    assert {a: s.decision for a, s in followup.answers.items()} == {"a1": "1", "a2": "1", "a3": "1"}
    assert all(s.fault is None for s in followup.answers.values())
    assert all(sig.stable for sig in acceptance.signals)
    assert record.auto and record.decision == "1" and record.basis == "independent_families"


def test_one_shared_model_is_one_voice_never_the_agents(server: SchemaServer) -> None:
    """The finding: one model answering for every agent committed on 'independent families'."""
    journal = Journal(":memory:")
    policy = _policy({"model": "openai:gpt-4o-mini"})
    record = decide(
        as_panel(panel("p", ["1", "1", "1"], families=FAMILIES)),
        policy,
        journal=journal,
        run_id="r",
    )
    # Asked once in each presentation, not once per agent.
    assert len(server.bodies) == 2 and record.usage.calls == 2
    followup, acceptance = _case(journal, "r")
    assert followup.answers == {}
    assert [v.voice for v in followup.voices] == ["model:gpt-4o-mini"]
    assert followup.voices[0].family == "openai"
    signals = {s.agent: s for s in acceptance.signals}
    assert not any(signals[a].stable for a in ("a1", "a2", "a3"))
    assert signals["model:gpt-4o-mini"].stable and signals["model:gpt-4o-mini"].family == "openai"
    assert not record.auto and record.basis is None and record.action == "escalate"
    assert "1 independent family (openai)" in record.reason


def test_one_shared_model_never_counts_as_an_agents_calibration(server: SchemaServer) -> None:
    journal = Journal(":memory:")
    policy = _policy({"model": "openai:gpt-4o-mini"})
    record = decide(
        as_panel(panel("p", ["1", "1", "1"], families=FAMILIES)),
        policy,
        calibration=_calibrated(),
        journal=journal,
        run_id="r",
    )
    assert not record.auto and record.basis is None
    assert "no calibrated agent gave a stable" in record.reason


def test_each_agents_own_model_counts_for_that_agent(server: SchemaServer) -> None:
    models = {
        "a1": "openai:gemini-1.5-flash",
        "a2": "openai:gpt-4o-mini",
        "a3": "openai:falcon-40b",
    }
    journal = Journal(":memory:")
    record = decide(
        as_panel(panel("p", ["1", "1", "1"], families=FAMILIES)),
        _policy({"models": models}),
        calibration=_calibrated(),
        journal=journal,
        run_id="r",
    )
    followup, acceptance = _case(journal, "r")
    assert {a: s.model for a, s in followup.answers.items()} == {
        "a1": "gemini-1.5-flash",
        "a2": "gpt-4o-mini",
        "a3": "falcon-40b",
    }
    assert {s.agent: s.family for s in acceptance.signals} == {
        "a1": "google",
        "a2": "openai",
        "a3": "tii",
    }
    assert followup.voices == []  # every agent has its own model: no shared voice
    assert record.auto and record.basis == "calibrated" and record.decision == "1"


def test_a_shared_model_adds_no_voice_when_every_agent_has_its_own(
    server: SchemaServer,
) -> None:
    """The run's model (here one the agents' map also names) is asked only for agents
    without a model of their own: with none, one request per agent and no shared voice."""
    models = {
        "a1": "openai:gemini-1.5-flash",
        "a2": "openai:gpt-4o-mini",
        "a3": "openai:falcon-40b",
    }
    journal = Journal(":memory:")
    record = decide(
        as_panel(panel("p", ["1", "1", "1"], families=FAMILIES)),
        _policy({"model": "openai:gpt-4o-mini", "models": models}),
        journal=journal,
        run_id="r",
    )
    followup, _ = _case(journal, "r")
    assert sorted(body["model"] for body in server.bodies) == sorted(
        m.split(":", 1)[1] for m in models.values()
    )
    assert record.usage.calls == 3
    assert set(followup.answers) == {"a1", "a2", "a3"}
    assert followup.voices == []


def test_families_come_from_the_model_that_answered(server: SchemaServer) -> None:
    """Three agents labelled with three families but mapped to one model: one family."""
    models = {"a1": "openai:gpt-4o-mini", "a2": "openai:gpt-4o-mini", "a3": "openai:gpt-4o-mini"}
    journal = Journal(":memory:")
    record = decide(
        as_panel(panel("p", ["1", "1", "1"], families=FAMILIES)),
        _policy({"models": models}),
        journal=journal,
        run_id="r",
    )
    _, acceptance = _case(journal, "r")
    assert {s.family for s in acceptance.signals} == {"openai"}
    assert not record.auto and "1 independent family (openai)" in record.reason


def test_an_answer_naming_no_option_is_a_recorded_fault(tmp_path: Any) -> None:
    script = tmp_path / "odd.yaml"
    script.write_text('default: \'{"decision": "7", "reasoning": "seven"}\'\n', encoding="utf-8")
    journal = Journal(":memory:")
    policy = _policy({"models": {"a1": f"scripted:{script}"}})
    decide(
        as_panel(panel("p", ["1", "1", "1"], families=FAMILIES)),
        policy,
        journal=journal,
        run_id="r",
    )
    followup, _ = _case(journal, "r")
    answer = followup.answers["a1"]
    assert answer.decision is None and answer.fault is not None and "'7'" in answer.fault


def test_review_show_lists_a_shared_models_voice_apart_from_the_agents(
    server: SchemaServer, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from dissensus.cli import main

    path = tmp_path / "j.sqlite"
    journal = Journal(path)
    record = decide(
        as_panel(panel("p", ["1", "1", "1"], families=FAMILIES)),
        _policy({"model": "openai:gpt-4o-mini"}),
        journal=journal,
        run_id="r",
    )
    journal.close()
    assert record.review_id == "r.1"
    assert main(["review", "show", "r.1", "--journal", str(path)]) == 0
    flat = " ".join(capsys.readouterr().out.split())
    assert "extra voice model:gpt-4o-mini (openai): 1 then 1, stable" in flat
