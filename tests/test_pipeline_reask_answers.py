"""A re-ask's answer is validated against its request's schema, and stands on its own.

* The answer is checked against the schema the request sends (both fields, nothing else,
  the decision one of the case's option ids or null), so the model client re-asks an
  answer that does not fit. An object that ignored the schema (``{"unexpected": ...}``)
  used to pass as a clean abstention (no re-ask, ``fault: null``): any JSON object
  validated against the lenient answer model.
* An agent whose model never answered JSON (``no json here``) failed the whole re-ask:
  the other agents' valid answers were dropped, the case went to review as
  ``followup:unavailable`` and ``decide`` exited 1 (every follow-up failed). Such an
  answer is an abstention with its ``fault``, as for an answer naming no option, and the
  others are kept.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.llm.fakeserver import FakeServer, FaultPlan, ServerSettings
from dissensus.llm.scripted import ScriptedRules
from dissensus.pipeline import decide, policy_from_dict
from dissensus.pipeline.steps import FollowupStep
from dissensus.signals import SecondAnswer
from dissensus.store import Journal
from pipeline_cases import as_panel, panel

IDS = ("1", "2")
VALID = {"decision": "1", "reasoning": "Option 1 states the window."}


def _policy(seek_context: dict[str, Any]) -> Any:
    return policy_from_dict(
        {
            "reading": {"similarity": "tfidf", "theta_s": 0.3},
            "seek_context": {"use_recorded": False, **seek_context},
        }
    )


def _followup(journal: Journal) -> FollowupStep:
    event = journal.get("r", "case/1/followup0")
    assert event is not None
    return FollowupStep.model_validate(event.payload)


def _script(path: Path, answer: str) -> str:
    path.write_text(yaml.safe_dump({"default": answer}), encoding="utf-8")
    return f"scripted:{path}"


def _fits(value: Any) -> bool:
    """Whether ``value`` is what the re-ask's schema allows."""
    return (
        isinstance(value, dict)
        and set(value) == {"decision", "reasoning"}
        and (value["decision"] is None or value["decision"] in IDS)
        and isinstance(value["reasoning"], str)
    )


SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from(["1", "2", "7", "", "x"])
)
ANSWERS = st.one_of(
    st.dictionaries(
        st.sampled_from(["decision", "reasoning", "unexpected", "confidence"]),
        SCALARS,
        max_size=4,
    ),
    st.builds(lambda d, r: {"decision": d, "reasoning": r}, SCALARS, SCALARS),
    st.just({"unexpected": "this object violates the requested schema"}),
    st.just(VALID),
)


@settings(max_examples=40, deadline=None)
@given(answer=ANSWERS)
def test_an_answer_is_used_only_when_it_fits_the_schema_else_its_fault_is_recorded(
    answer: dict[str, Any],
) -> None:
    """Whatever object a model answers, the re-ask's answer is either the object's own
    (it fits the schema) or an abstention whose fault is recorded after the client's
    re-asks: never a clean abstention made of an object that ignored the schema."""
    with tempfile.TemporaryDirectory() as tmp:
        model = _script(Path(tmp) / "m.yaml", json.dumps(answer))
        journal = Journal(":memory:")
        record = decide(
            as_panel(panel("p", ["1", "1", "1"])),
            _policy({"models": {"a1": model}}),
            journal=journal,
            run_id="r",
        )
        got = _followup(journal).answers["a1"]
        asked = record.usage.attempts
    if _fits(answer):
        assert got.fault is None and got.decision == answer["decision"]
        assert asked == 1
    else:
        assert got.decision is None and got.fault is not None
        assert asked == 3  # the answer and the client's two re-asks (max_reasks)


@pytest.fixture
def violating(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A loopback server whose first answer ignores the schema, then answers well."""
    rules = ScriptedRules.model_validate(
        {"rules": [{"match": {"stage": "pipeline.reask"}, "json": VALID}], "default": "ok"}
    )
    faults = FaultPlan(sequence=["schema_violation"])
    with FakeServer(rules, ServerSettings(faults=faults)) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "k")
        yield srv


def test_an_answer_that_ignores_the_schema_is_re_asked(violating: FakeServer) -> None:
    journal = Journal(":memory:")
    decide(
        as_panel(panel("p", ["1", "1", "1"])),
        _policy({"model": "openai:gpt-4o-mini"}),
        journal=journal,
        run_id="r",
    )
    assert violating.faults["schema_violation"] == 1
    assert violating.requests_received == 3  # two presentations, one re-asked
    (voice,) = _followup(journal).voices
    assert [voice.first.decision, voice.second.decision] == ["1", "1"]
    assert voice.first.fault is None and voice.second.fault is None


def test_one_agents_unparsed_answer_is_its_abstention_and_the_others_stand(
    tmp_path: Path,
) -> None:
    models = {
        "a1": _script(tmp_path / "a1.yaml", json.dumps(VALID)),
        "a2": _script(tmp_path / "a2.yaml", json.dumps({**VALID, "decision": "2"})),
        "a3": _script(tmp_path / "a3.yaml", "no json here"),
    }
    journal = Journal(":memory:")
    record = decide(
        as_panel(panel("p", ["1", "1", "1"])),
        _policy({"models": models}),
        journal=journal,
        run_id="r",
    )
    assert "followup:live" in record.path and "followup:unavailable" not in record.path
    assert "re-ask failed" not in record.reason
    answers = _followup(journal).answers
    assert [answers["a1"].decision, answers["a2"].decision] == ["1", "2"]
    assert answers["a1"].fault is None and answers["a2"].fault is None
    unparsed: SecondAnswer = answers["a3"]
    assert unparsed.decision is None
    assert unparsed.fault is not None and "no json here" in unparsed.fault
    # The model that answered, as for a parsed answer (the client's model id).
    assert unparsed.model == "scripted:a3.yaml" and unparsed.family is not None


def test_the_cli_keeps_the_other_agents_answers_and_exits_0(tmp_path: Path) -> None:
    """The reviewer's command: an agent's model answering ``no json here`` made ``decide``
    exit 1 (every follow-up failed) and dropped the other agents' answers."""
    from cli_helpers import cli
    from pipeline_cases import write_jsonl, write_policy

    models = {
        "a1": _script(tmp_path / "a1.yaml", json.dumps(VALID)),
        "a2": _script(tmp_path / "a2.yaml", json.dumps(VALID)),
        "a3": _script(tmp_path / "a3.yaml", "no json here"),
    }
    rows: list[dict[str, Any] | str] = [panel("p", ["1", "1", "1"])]
    inp = write_jsonl(tmp_path / "in.jsonl", rows)
    pol = write_policy(tmp_path / "p.yaml", {"seek_context": {"models": models}})
    journal = str(tmp_path / "j.sqlite")
    result = cli("decide", str(inp), "--policy", str(pol), "--journal", journal, "--json")
    assert result.code == 0, result.err
    (record,) = [json.loads(line) for line in result.out.splitlines() if line.strip()]
    assert "followup:live" in record["path"]
