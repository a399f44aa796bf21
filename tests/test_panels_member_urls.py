"""A panel member's ``base_url`` left empty is refused when the policy is loaded.

Read as "no base_url", an ``openai:`` member with ``base_url: ""`` (an unset template
variable) talked to ``$OPENAI_BASE_URL`` or, without it, to OpenAI's own API with
``$OPENAI_API_KEY``: prompts meant for a local server went elsewhere.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from dissensus.cli import main
from dissensus.errors import ConfigError
from dissensus.panels import Members, PanelChat
from dissensus.pipeline.policy import PanelSettings, load_policy, policy_from_dict
from dissensus.store.journal import Journal


def _policy(tmp_path: Path, second: dict[str, Any]) -> Path:
    data = {
        "reading": {"similarity": "tfidf"},
        "panel": {
            "answer": "number",
            "members": [
                {"name": "a", "model": "openai:m", "base_url": "http://127.0.0.1:9/v1"},
                {"name": "b", "model": "openai:m", **second},
            ],
        },
    }
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


@pytest.mark.parametrize("keyed", [False, True])
def test_an_empty_base_url_is_refused_naming_the_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keyed: bool
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-key")
    monkeypatch.setenv("MEMBER_KEY", "sk-member-not-a-key")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    second: dict[str, Any] = {"base_url": ""}
    if keyed:
        second["api_key_env"] = "MEMBER_KEY"
    path = _policy(tmp_path, second)
    with Journal(str(tmp_path / "j.sqlite")) as journal, pytest.raises(ConfigError) as caught:
        PanelChat.from_file(path, journal=journal)
    assert caught.value.field == "panel.members.1.base_url"
    assert "base_url is empty" in str(caught.value)
    assert str(path) in str(caught.value)


def test_members_open_refuses_an_empty_base_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-key")
    section = {
        "members": [
            {"name": "a", "model": "openai:m", "base_url": ""},
            {"name": "b", "model": "openai:m", "base_url": "http://127.0.0.1:9/v1"},
        ]
    }
    # A panel built in Python without the policy's checks is refused when opened too.
    panel = PanelSettings.model_validate(section)
    with pytest.raises(ConfigError) as caught:
        Members.open(panel)
    assert caught.value.field == "panel.members.0.base_url"


def test_an_empty_base_url_is_refused_when_the_policy_is_loaded(tmp_path: Path) -> None:
    path = _policy(tmp_path, {"base_url": ""})
    with pytest.raises(ConfigError) as caught:
        load_policy(path)
    assert caught.value.field == "panel.members.1.base_url"
    assert "base_url is empty" in str(caught.value)
    assert str(path) in str(caught.value) and "(line " in str(caught.value)
    with pytest.raises(ConfigError) as direct:
        policy_from_dict(yaml.safe_load(path.read_text(encoding="utf-8")))
    assert direct.value.field == "panel.members.1.base_url"


def test_dissensus_decide_refuses_an_empty_base_url(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _policy(tmp_path, {"base_url": ""})
    rows = tmp_path / "in.jsonl"
    row = {"id": "1", "outputs": [{"agent": n, "decision": "1", "reasoning": "r"} for n in "ab"]}
    rows.write_text(json.dumps(row) + "\n", encoding="utf-8")
    code = main(["decide", str(rows), "--policy", str(path), "--journal", str(tmp_path / "j")])
    assert code != 0
    err = capsys.readouterr().err
    assert "panel.members.1.base_url" in err and "base_url is empty" in err, err


def test_a_base_url_left_out_still_reads_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-key")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    path = _policy(tmp_path, {})
    with Journal(str(tmp_path / "j.sqlite")) as journal:
        chat = PanelChat.from_file(path, journal=journal)
        try:
            assert chat.enabled
        finally:
            chat.close()
