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
