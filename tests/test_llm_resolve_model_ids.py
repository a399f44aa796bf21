"""An ``openai:`` model id that cannot be meant as written is refused before the run.

``openai: gpt-4o`` (a space after the colon) or a spec read from a CRLF file
(``openai:gpt-4o\\r``) asked the server for the model ``' gpt-4o'`` on every call of
the run; each record then failed (or, on a local server that answers any name, the
name was recorded as the run's model).
"""

from __future__ import annotations

import pytest

from dissensus.errors import ConfigError
from dissensus.llm.resolve import check_model_spec, make_backend, model_id_problem


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("openai: gpt-4o", "the model id ' gpt-4o' has whitespace around it"),
        ("openai:gpt-4o\r", "the model id 'gpt-4o\\r' has whitespace around it"),
        ("openai:gpt-4o\t", "the model id 'gpt-4o\\t' has whitespace around it"),
        ("openai:gpt\x00-4o", "the model id holds the control character '\\x00' at position 4"),
        ("record:r.jsonl:openai:gpt-4o\n", "the model id 'gpt-4o\\n' has whitespace around it"),
    ],
)
def test_a_model_id_with_whitespace_or_a_control_character_is_refused(
    spec: str, said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key-not-used")
    with pytest.raises(ConfigError) as caught:
        check_model_spec(spec)
    assert said in str(caught.value)
    assert repr(spec) in str(caught.value)


@pytest.mark.parametrize("model", ["gpt-4o", "llama3.1:8b", "org/model name", "modèle"])
def test_a_model_id_as_servers_name_them_is_taken(
    model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key-not-used")
    assert model_id_problem(model) is None
    assert make_backend(f"openai:{model}").model_id == model


BAD_MEMBER_IDS = [
    ("openai: gpt-4o", "the model id ' gpt-4o' has whitespace around it"),
    ("openai:llama3:8b\r", "the model id 'llama3:8b\\r' has whitespace around it"),
]
# Members with their own server or key, made without the spec resolver's check.
OWN_DOOR = [
    {"base_url": "http://127.0.0.1:9/v1"},
    {"api_key_env": "MEMBER_KEY"},
    {"base_url": "http://127.0.0.1:9/v1", "api_key_env": "MEMBER_KEY"},
    {},
]


@pytest.mark.parametrize(("spec", "said"), BAD_MEMBER_IDS)
@pytest.mark.parametrize("door", OWN_DOOR)
def test_a_panel_members_model_id_is_checked_whatever_its_server_or_key(
    spec: str, said: str, door: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from dissensus.panels.fanout import Members
    from dissensus.pipeline.policy import PanelSettings

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key-not-used")
    monkeypatch.setenv("MEMBER_KEY", "sk-member-key-not-used")
    members = [{"name": "a", "model": "openai:gpt-4o"}, {"name": "b", "model": spec, **door}]
    settings = PanelSettings.model_validate({"members": members})
    with pytest.raises(ConfigError) as caught:
        Members.open(settings)
    assert caught.value.field == "panel.members.1.model"
    assert said in str(caught.value)


@pytest.mark.parametrize(("spec", "said"), BAD_MEMBER_IDS)
def test_a_policys_panel_member_model_id_is_refused_when_the_policy_is_read(
    spec: str, said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dissensus.pipeline.spec import RunSpec

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    members = [
        {"name": "a", "model": "openai:gpt-4o", "base_url": "http://127.0.0.1:9/v1"},
        {"name": "b", "model": spec, "base_url": "http://127.0.0.1:9/v1"},
    ]
    with pytest.raises(ConfigError) as caught:
        RunSpec.from_policy({"panel": {"members": members}})
    assert caught.value.field == "panel.members.1.model"
    assert said in str(caught.value)
    members[1]["model"] = "openai:llama3:8b"
    RunSpec.from_policy({"panel": {"members": members}})  # a well-formed id is taken
