"""A key written twice in one object of a model's JSON answer is never read last-wins.

``{"scores": {"C1": 1, "C1": 9}}`` as a CONCORD score answer certified 0.9 (the last
value), and a re-ask answering ``{"decision": "A", ..., "decision": "B"}`` was journalled
as decision ``B`` with no fault. Such an answer now does not validate: the model client
re-asks it as any invalid answer, then the call fails (a fault of that agent, an
abstention with its fault). A chat member's structured answer with a repeated key is an
abstention naming the key, and a ``replay:`` recording holding one is refused naming
file, line and field.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from cli_helpers import run_cli
from concord_helpers import TextOnly
from dissensus.agents.llm_negotiator import LLMNegotiator
from dissensus.concord.agent import NegotiationView, Outcome
from dissensus.errors import ConfigError
from dissensus.llm import ModelClient, StructuredOutputError, jsonparse
from dissensus.llm.base import ChatRequest, Message
from dissensus.llm.client import ClientSettings
from dissensus.llm.function import FunctionBackend
from dissensus.llm.jsonparse import extract_json
from dissensus.llm.replay import ReplayBackend
from dissensus.panels.answers import read_answer
from dissensus.pipeline import decide, policy_from_dict
from dissensus.pipeline.policy import PanelSettings
from dissensus.pipeline.steps import FollowupStep
from dissensus.store import Journal
from pipeline_cases import as_panel, panel

REJECTED = Outcome(id="R0", text="nothing")
IDEAL = Outcome(id="I0", text="everything")
C1 = Outcome(id="C1", text="plan one")

# -- the property -------------------------------------------------------------------

scalars = st.one_of(st.none(), st.booleans(), st.integers(-50, 50), st.text("ab :,é", max_size=5))
keys = st.text(alphabet="abkz_é", min_size=1, max_size=4)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(keys, inner, min_size=1, max_size=3)
    ),
    max_leaves=10,
)
objects = st.dictionaries(keys, values, min_size=1, max_size=4)
prose = st.text(alphabet="abc XYZ:.,!?\n\t'éß", max_size=30)


def _objects_in(value: Any, here: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The paths of every non-empty object in ``value``."""
    found: list[tuple[Any, ...]] = []
    if isinstance(value, dict):
        found.append(here)
        for key, sub in value.items():
            found.extend(_objects_in(sub, (*here, key)))
    elif isinstance(value, list):
        for index, sub in enumerate(value):
            found.extend(_objects_in(sub, (*here, index)))
    return found


def _dump(
    value: Any, target: tuple[Any, ...], extra: Any, first: bool, here: tuple[Any, ...] = ()
) -> str:
    """``value`` as JSON text, the object at ``target`` writing its first key twice: once
    with ``extra``, before (``first``) or after its own pairs."""
    if isinstance(value, dict):
        pairs = [
            (json.dumps(k), _dump(v, target, extra, first, (*here, k))) for k, v in value.items()
        ]
        if here == target:
            repeated = (json.dumps(next(iter(value))), json.dumps(extra))
            pairs = [repeated, *pairs] if first else [*pairs, repeated]
        return "{" + ", ".join(f"{k}: {v}" for k, v in pairs) + "}"
    if isinstance(value, list):
        return (
            "["
            + ", ".join(_dump(v, target, extra, first, (*here, i)) for i, v in enumerate(value))
            + "]"
        )
    return json.dumps(value)


@settings(max_examples=150, deadline=None)
@given(
    obj=objects,
    data=st.data(),
    extra=scalars,
    first=st.booleans(),
    before=prose,
    after=prose,
    fenced=st.booleans(),
)
def test_a_duplicate_key_anywhere_in_an_answer_is_never_read(
    obj: dict[str, Any],
    data: st.DataObject,
    extra: Any,
    first: bool,
    before: str,
    after: str,
    fenced: bool,
) -> None:
    """Whichever object repeats a key, whichever value comes last, wrapped in prose or a
    code fence: extraction names the key's path and returns no value (neither the last
    one nor an object inside the answer)."""
    target = data.draw(st.sampled_from(_objects_in(obj)))
    body = _dump(obj, target, extra, first)
    text = f"{before}\n```json\n{body}\n```\n{after}" if fenced else f"{before}{body}{after}"
    key = next(iter(_at(obj, target)))
    with pytest.raises(jsonparse.DuplicateKeyError) as info:
        extract_json(text)
    assert info.value.field == ".".join(str(p) for p in (*target, key))


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        value = value[step]
    return value


def test_extraction_names_the_path_and_tries_no_span_inside() -> None:
    with pytest.raises(jsonparse.DuplicateKeyError, match=r"'scores\.C1'"):
        extract_json('{"scores": {"C1": 1, "C1": 9}}')
    # The inner objects parse alone; neither is taken for the answer.
    with pytest.raises(jsonparse.DuplicateKeyError, match=r"'a'"):
        extract_json('Here: {"a": {"x": 1}, "a": {"y": 2}} done')
    with pytest.raises(jsonparse.DuplicateKeyError):  # trailing commas removed, still repeated
        extract_json('{"a": [1, 2,], "a": 3,}')
    assert extract_json('{"a": "b\\": c", "c": "d: e"}') == {"a": 'b": c', "c": "d: e"}
    assert extract_json('{"a": 1, "a": 9}', unique_keys=False) == {"a": 9}


# -- the model client ---------------------------------------------------------------


class Verdict(BaseModel):
    decision: str


def _client(answers: list[str], reasks: int = 2) -> tuple[ModelClient, list[ChatRequest]]:
    seen: list[ChatRequest] = []

    def handler(request: ChatRequest, mode: str) -> str:
        seen.append(request)
        return answers[min(len(seen), len(answers)) - 1]

    return ModelClient(FunctionBackend(handler), settings=ClientSettings(max_reasks=reasks)), seen


def test_the_client_re_asks_a_duplicate_key_naming_it_not_its_values() -> None:
    client, seen = _client(['{"decision": "A", "decision": "B"}', '{"decision": "C"}'])
    request = ChatRequest(messages=[Message(role="user", content="q")], agent="a")
    response = client.chat_sync(request, schema=Verdict)
    client.close()
    assert response.parsed == Verdict(decision="C") and response.attempts == 2
    reask = seen[1].messages[-1].content
    assert "'decision'" in reask and "twice" in reask


def test_a_duplicate_key_every_time_is_a_structured_output_error() -> None:
    client, seen = _client(['{"decision": "A", "decision": "B"}'])
    request = ChatRequest(messages=[Message(role="user", content="q")], agent="a")
    with pytest.raises(StructuredOutputError) as info:
        client.chat_sync(request, schema=Verdict)
    client.close()
    assert len(seen) == 3 and "'decision'" in info.value.errors[-1]


# -- CONCORD ------------------------------------------------------------------------


def _llm_score(answer: str) -> list[float]:
    def handler(request: Any, mode: str) -> str:
        if request.stage == "concord.anchors":
            return json.dumps({"scores": {"R0": 0, "I0": 10}})
        return answer

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


def test_an_llm_agents_repeated_score_key_is_a_fault() -> None:
    with pytest.raises(StructuredOutputError, match=r"twice in one object: 'scores\.C1'"):
        _llm_score('{"scores": {"C1": 1, "C1": 9}}')


@pytest.mark.parametrize(
    ("text", "method"),
    [('{"scores": {"C1": 1, "C1": 9}}', "score"), ('{"text": "a", "text": "b"}', "propose")],
)
def test_a_client_without_a_parsed_answer_reads_it_as_the_model_client_does(
    text: str, method: str
) -> None:
    agent = LLMNegotiator("a", "You own a.", TextOnly(text))
    view = NegotiationView(agent="a", phase="score", round=1, floor=0.5, margin=0.01, agents=["a"])
    call = agent.score([C1], view) if method == "score" else agent.propose(view)
    with pytest.raises(StructuredOutputError, match="twice in one object"):
        asyncio.run(call)  # type: ignore[arg-type]


def test_the_reviewers_score_answer_is_not_certified(tmp_path: Path) -> None:
    rules = {
        "rules": [
            {"match": {"stage": "concord.anchors"}, "response": '{"scores": {"R0": 0, "I0": 10}}'},
            {
                "match": {"agent": "ops", "stage": "concord.propose"},
                "response": '{"text": "Restart the cluster"}',
            },
            {"match": {"agent": "sec", "stage": "concord.propose"}, "response": '{"text": ""}'},
            {"match": {"stage": "concord.score"}, "response": '{"scores": {"C1": 1, "C1": 9}}'},
        ]
    }
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules), encoding="utf-8")
    problem = tmp_path / "prob.yaml"
    problem.write_text(
        'problem: "Choose the fix."\nfloor: 0.7\nrounds: 0\nmodel: scripted:rules.yaml\n'
        "anchors:\n  rejected: {id: R0, text: nothing}\n  ideal: {id: I0, text: perfect}\n"
        "agents:\n  - {id: ops, kind: llm, role: You own ops.}\n"
        "  - {id: sec, kind: llm, role: You own security.}\n",
        encoding="utf-8",
    )
    out = tmp_path / "cert.json"
    res = run_cli("negotiate", problem, "--json", "--out", out)
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    assert doc["status"] == "best_effort"
    faults = [f for step in doc["trajectory"] for f in step["faults"]]
    assert {f["agent"] for f in faults} == {"ops", "sec"}
    assert all("'scores.C1'" in f["message"] for f in faults)
    assert all(s["raw"] is None for s in doc["scores"].values())
    assert run_cli("verify", out).returncode == 0


# -- the pipeline's re-ask ------------------------------------------------------------


def test_a_reask_answer_repeating_its_decision_is_an_abstention_with_its_fault(
    tmp_path: Path,
) -> None:
    script = tmp_path / "m.yaml"
    answer = '{"decision": "1", "reasoning": "1 is right", "decision": "2"}'
    script.write_text(yaml.safe_dump({"default": answer}), encoding="utf-8")
    policy = policy_from_dict(
        {
            "reading": {"similarity": "tfidf", "theta_s": 0.3},
            "seek_context": {"use_recorded": False, "models": {"a1": f"scripted:{script}"}},
        }
    )
    journal = Journal(":memory:")
    record = decide(as_panel(panel("p", ["1", "1", "1"])), policy, journal=journal, run_id="r")
    event = journal.get("r", "case/1/followup0")
    assert event is not None
    got = FollowupStep.model_validate(event.payload).answers["a1"]
    assert got.decision is None
    assert got.fault is not None and "twice in one object: 'decision'" in got.fault
    assert record.usage.attempts == 3  # the answer and the client's two re-asks


# -- the chat door's members ---------------------------------------------------------


def test_a_members_structured_answer_with_a_repeated_key_abstains_naming_it() -> None:
    options = PanelSettings(options=["yes", "no"])
    got = read_answer('{"decision": "yes", "reasoning": "r", "decision": "no"}', options)
    assert got.decision is None
    assert got.why == "the answer's JSON holds a key twice in one object: 'decision'"
    nested = read_answer('{"decision": "yes", "reasoning": "r", "x": {"k": 1, "k": 2}}', options)
    assert nested.decision is None and nested.why is not None and "'x.k'" in nested.why
    assert read_answer('{"decision": "yes", "reasoning": "r"}', options).decision == "yes"


def test_a_number_answer_is_read_as_the_converter_reads_it() -> None:
    from dissensus.convert.zeroeval import extract_answer

    text = '{"reasoning": "r", "answer": 1, "answer": 9}'
    number = read_answer(text, PanelSettings(answer="number")).decision
    assert number == extract_answer(text)[0] == "9"


# -- recordings ---------------------------------------------------------------------


def test_a_recording_line_with_a_repeated_key_is_refused_naming_file_line_and_field(
    tmp_path: Path,
) -> None:
    good = '{"key": "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a", "request": {}, "response": {"text": "t", "model": "m"}}'
    twice = '{"key": "k", "request": {}, "response": {"text": "yes", "model": "m", "text": "no"}}'
    rec = tmp_path / "dup.jsonl"
    rec.write_text(f"{good}\n{twice}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        ReplayBackend.from_file(rec)
    assert str(rec) in str(info.value) and "line 2: duplicate key" in str(info.value)
    assert info.value.field == "response.text"
    rec.write_text(f"{good}\n", encoding="utf-8")
    assert ReplayBackend.from_file(rec) is not None
