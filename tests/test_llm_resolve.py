"""Model specs: every form, the environment default, and configuration errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from dissensus.errors import ConfigError
from dissensus.llm import (
    MODEL_ENV,
    ChatRequest,
    Message,
    OpenAIBackend,
    ReplayBackend,
    ScriptedBackend,
    resolve_model,
)


@pytest.fixture
def rules(tmp_path: Path) -> Path:
    path = tmp_path / "r.yaml"
    path.write_text('default: "{\\"a\\": 1}"\n')
    return path


def test_spec_from_environment(rules: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MODEL_ENV, f"scripted:{rules}")
    client = resolve_model()
    assert isinstance(client.backend, ScriptedBackend)
    client.close()


def test_missing_spec_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MODEL_ENV, raising=False)
    with pytest.raises(ConfigError, match=MODEL_ENV):
        resolve_model()


@pytest.mark.parametrize(
    "spec", ["gpt-4o", "openai:", "unknown:x", "record:only-file", "record::scripted:x"]
)
def test_invalid_specs(spec: str) -> None:
    with pytest.raises(ConfigError):
        resolve_model(spec)


def test_openai_needs_a_key_or_a_base_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        resolve_model("openai:gpt-4o-mini")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-abcdef")
    client = resolve_model("openai:gpt-4o-mini")
    assert isinstance(client.backend, OpenAIBackend) and client.model_id == "gpt-4o-mini"
    assert "abcdef" not in repr(client)
    client.close()


def test_replay_spec(tmp_path: Path) -> None:
    rec = tmp_path / "r.jsonl"
    rec.write_text("")
    client = resolve_model(f"replay:{rec}")
    assert isinstance(client.backend, ReplayBackend)
    client.close()


def test_raw_json_schema_without_a_model_parses_to_a_dict(rules: Path) -> None:
    client = resolve_model(f"scripted:{rules}")
    request = ChatRequest(
        messages=[Message(role="user", content="q")], json_schema={"type": "object"}
    )
    assert client.chat_sync(request).parsed == {"a": 1}
    client.close()
