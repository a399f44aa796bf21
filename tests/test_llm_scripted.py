"""Scripted models: the YAML rule format, first match wins, cycling per agent."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dissensus.errors import ConfigError
from dissensus.llm import ChatRequest, Message, ModelCallError, ModelClient, resolve_model
from dissensus.llm.scripted import ScriptedBackend, load_script

RULES = """
rules:
  - match: {agent: "security", role: "Challenger", stage: "dci.challenge", contains: "risk", regex: "CVE-\\\\d+"}
    response: "full match"
  - match: {agent: "security"}
    json: {finding: "none", severity: 0}
  - match: {stage: "concord.propose"}
    responses: ["p1", {"k": 2}, "p3"]
  - match: {schema: "Verdict"}
    response: '{"verdict": "ok"}'
default: "fallback text"
"""


def req(text: str = "x", **kw: str | None) -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content=text)], **kw)


@pytest.fixture
def rules_file(tmp_path: Path) -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text(RULES)
    return path


def test_rule_format_of_the_brief(rules_file: Path) -> None:
    client = resolve_model(f"scripted:{rules_file}")
    full = req("a risk: CVE-2024", agent="security", role="Challenger", stage="dci.challenge")
    assert client.chat_sync(full).text == "full match"
    partial = req("no regex here risk", agent="security", role="Challenger", stage="dci.challenge")
    assert client.chat_sync(partial).text == '{"finding": "none", "severity": 0}'
    assert client.chat_sync(req(agent="other")).text == "fallback text"
    assert client.chat_sync(req(schema_name="Verdict")).text == '{"verdict": "ok"}'
    client.close()


def test_responses_cycle_per_agent_in_call_order(rules_file: Path) -> None:
    client = resolve_model(f"scripted:{rules_file}")
    order = ["a", "b", "a", "a", "b", "a"]
    got = [client.chat_sync(req(agent=a, stage="concord.propose")).text for a in order]
    assert got == ["p1", "p1", '{"k": 2}', "p3", '{"k": 2}', "p1"]
    client.close()


def test_no_match_and_no_default_is_an_error() -> None:
    backend = ScriptedBackend.from_dict({"rules": [{"match": {"agent": "x"}, "response": "r"}]})
    mc = ModelClient(backend)
    with pytest.raises(ModelCallError, match="no rule matches") as info:
        mc.chat_sync(req(agent="y"))
    assert info.value.kind == "no_rule"
    mc.close()


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("rules:\n  - match: {agent: a}\n", "rules.0"),
        ("rules:\n  - match: {agent: a}\n    response: r\n    json: {}\n", "rules.0"),
        ("rules:\n  - match: {colour: red}\n    response: r\n", "rules.0.match.colour"),
        ("rules:\n  - match: {regex: '('}\n    response: r\n", "rules.0.match.regex"),
        ("- just a list\n", None),
        ("rules: [\n", None),
    ],
)
def test_invalid_scripts_name_file_and_field(tmp_path: Path, text: str, field: str | None) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_script(path)
    assert "bad.yaml" in str(info.value)
    if field is not None:
        assert info.value.field == field


def test_script_errors_are_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("rules: [\n")
    with pytest.raises(ConfigError) as info:
        load_script(broken)
    assert "\n" not in str(info.value) and "invalid YAML at line 2" in str(info.value)
    both = tmp_path / "both.yaml"
    both.write_text("rules:\n  - response: r\n    json: {}\n")
    with pytest.raises(ConfigError) as info:
        load_script(both)
    assert "Value error" not in str(info.value) and "exactly one of" in str(info.value)
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"rules: []\n\xff\xfe\n")
    with pytest.raises(ConfigError, match=r"binary.yaml: script is not UTF-8 text"):
        load_script(binary)


def test_missing_script_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        resolve_model(f"scripted:{tmp_path / 'nope.yaml'}")


def test_offline_usage_is_estimated(rules_file: Path) -> None:
    client = resolve_model(f"scripted:{rules_file}")
    out = client.chat_sync(req("12345678", agent="z"))
    assert (out.usage.prompt_tokens, out.usage.completion_tokens) == (2, 4)  # 8 chars, 13 chars
    client.close()


@given(
    agents=st.lists(st.sampled_from(["a", "b", None]), min_size=1, max_size=6),
    probe=st.sampled_from(["a", "b", "c"]),
)
def test_first_matching_rule_wins(agents: list[str | None], probe: str) -> None:
    rules = [
        {"match": {"agent": a} if a else {}, "response": f"rule{i}"} for i, a in enumerate(agents)
    ]
    backend = ScriptedBackend.from_dict({"rules": rules, "default": "none"})
    client = ModelClient(backend)
    expected = next((f"rule{i}" for i, a in enumerate(agents) if a is None or a == probe), "none")
    assert client.chat_sync(req(agent=probe)).text == expected
    client.close()


@given(
    chars=st.integers(min_value=1, max_value=40_000),
    limit=st.integers(min_value=50, max_value=20_000),
)
def test_a_token_budget_is_a_real_cap_on_a_scripted_model_that_answers_at_length(
    chars: int, limit: int
) -> None:
    """An answer longer than the request's ``max_tokens`` is cut to it (finish reason
    ``length``), as a server stops at its cap: calls until the budget refuses never spend
    more tokens than its limit, however long the scripted answers."""
    from dissensus.llm import Budget, BudgetExceeded

    backend = ScriptedBackend.from_dict({"rules": [], "default": "A" * chars})
    client = ModelClient(backend, budget=Budget(max_tokens=limit, completion_reserve=64))
    for _ in range(50):
        try:
            client.chat_sync(req("question"))
        except BudgetExceeded:
            break
    client.close()
    assert client.budget.spent.total_tokens <= limit


def test_the_cut_is_said_as_a_servers_is() -> None:
    import asyncio

    backend = ScriptedBackend.from_dict({"rules": [], "default": "B" * 1000})
    request = ChatRequest(messages=[Message(role="user", content="q")], max_tokens=10)
    answer = asyncio.run(backend.send(request, json_mode="none"))
    assert answer.text == "B" * 40 and answer.completion_tokens == 10
    assert answer.finish_reason == "length"
    whole = asyncio.run(backend.send(req("q"), json_mode="none"))
    assert whole.text == "B" * 1000 and whole.finish_reason == "stop"
