"""The API key never appears in a log, recording, repr or error message."""

from __future__ import annotations

import logging
import traceback
from pathlib import Path

import pytest
from pydantic import BaseModel

from dissensus.llm import ChatRequest, ClientSettings, LLMError, Message, resolve_model
from dissensus.llm.fakeserver import FakeServer, FaultKind, FaultPlan, ServerSettings
from dissensus.llm.openai_backend import OpenAIBackend, redact, safe_url
from dissensus.llm.scripted import parse_script

SECRET = "sk-test-SECRET-0123456789"


class Verdict(BaseModel):
    verdict: str


def test_key_is_absent_from_logs_records_reprs_and_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    faults: list[FaultKind | None] = [
        None, "rate_limit", "server_error", "hang", "disconnect", "truncated",
        "schema_violation", "empty_choices", "schema_unsupported", "auth_error",
    ]  # fmt: skip
    script = parse_script({"default": '{"verdict": "ok"}'})
    plan = FaultPlan(sequence=faults, retry_after="0", hang_s=5.0)
    with FakeServer(script, ServerSettings(faults=plan)) as server:
        monkeypatch.setenv("OPENAI_API_KEY", SECRET)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        record = tmp_path / "rec.jsonl"
        settings = ClientSettings(timeout_s=0.3, max_retries=0, backoff_base_s=0)
        caplog.set_level(logging.DEBUG)
        client = resolve_model(f"record:{record}:openai:fake-model", settings=settings)
        seen: list[str] = [repr(client), repr(client.backend), str(vars(client.backend))]
        for _ in range(len(faults)):
            try:
                out = client.chat_sync(
                    ChatRequest(messages=[Message(role="user", content="hi")], agent="a"),
                    schema=Verdict,
                )
                seen.append(repr(out))
            except LLMError as exc:
                seen.append("".join(traceback.format_exception(exc)))
                seen.append(repr(exc) + repr(getattr(exc, "attempts", None)))
        client.close()
        assert server.faults["auth_error"] == 1  # the server did echo the key back
    seen.append(record.read_text())
    seen.append(caplog.text)
    seen.extend(repr(r.args) + r.getMessage() for r in caplog.records)
    assert record.read_text().strip()  # something was recorded
    assert any("Incorrect API key provided: [REDACTED]" in s for s in seen)
    leaked = [s for s in seen if SECRET in s or "SECRET" in s]
    assert leaked == []


def test_redact_scrubs_keys_and_bearer_tokens() -> None:
    text = f"auth Bearer abc.def-123 and {SECRET} and sk-other1234567"
    out = redact(text, (SECRET,))
    assert "abc.def" not in out and "SECRET" not in out and "sk-other" not in out
    assert out.count("[REDACTED]") == 3


def test_base_url_credentials_are_hidden() -> None:
    assert safe_url("https://user:pw@host:8080/v1?key=zzz#f") == "https://host:8080/v1"
    backend = OpenAIBackend("m", base_url="https://user:pw@host/v1?api_key=zzz", api_key=SECRET)
    shown = repr(backend)
    assert "pw" not in shown and "zzz" not in shown and "SECRET" not in shown and "<set>" in shown
