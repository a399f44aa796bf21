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
    assert any("HTTP 401: the server refused the API key in $OPENAI_API_KEY" in s for s in seen)
    leaked = [s for s in seen if SECRET in s or "SECRET" in s]
    assert leaked == []


def test_redact_scrubs_keys_and_bearer_tokens() -> None:
    text = f"auth Bearer abc.def-123 and {SECRET} and sk-other1234567"
    out = redact(text, (SECRET,))
    assert "abc.def" not in out and "SECRET" not in out and "sk-other" not in out
    assert out.count("[REDACTED]") == 3


def test_base_url_credentials_are_hidden() -> None:
    """``safe_url`` drops user-info, query and fragment; a backend refuses credentials in
    its base URL (``test_llm_openai_config.py``) and hides the query it keeps."""
    assert safe_url("https://user:pw@host:8080/v1?key=zzz#f") == "https://host:8080/v1"
    backend = OpenAIBackend("m", base_url="https://host/v1?api-version=zzz", api_key=SECRET)
    shown = repr(backend)
    assert "zzz" not in shown and "SECRET" not in shown and "<set>" in shown


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://[::1]:1/v1", "http://[::1]:1/v1"),
        ("http://u:pw@[::1]/v1?key=zzz", "http://[::1]/v1"),
        ("https://[2001:DB8::5]:8443/v1#f", "https://[2001:db8::5]:8443/v1"),
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
    ],
)
def test_an_ipv6_host_keeps_its_brackets(url: str, shown: str) -> None:
    """Without them ``http://::1:1/v1`` names no host and no port that can be told apart."""
    assert safe_url(url) == shown
    backend = OpenAIBackend("m", base_url=shown, api_key=SECRET)
    assert f"base_url={shown!r}" in repr(backend)


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and every exception reachable from it through ``__cause__``/``__context__``."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo:
        item = todo.pop()
        if item is None or any(item is s for s in seen):
            continue
        seen.append(item)
        todo.extend([item.__cause__, item.__context__])
    return seen


def _holds(exc: BaseException, secret: str) -> bool:
    parts = [str(exc), repr(exc), repr(exc.args), repr(vars(exc))]
    parts += [repr(getattr(exc, name, None)) for name in ("message", "body", "response")]
    return any(secret in p for p in parts)


def test_no_exception_chained_to_a_backend_error_holds_the_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every failure ``send`` raises (the server echoing the key in a 401 body included)
    has no ``__cause__`` or ``__context__`` leading to the SDK exception."""
    import asyncio

    import openai

    from dissensus.llm.base import BackendError

    faults: list[FaultKind | None] = [
        "auth_error", "rate_limit", "server_error", "hang", "disconnect", "truncated",
        "empty_choices", "schema_unsupported",
    ]  # fmt: skip
    script = parse_script({"default": '{"verdict": "ok"}'})
    plan = FaultPlan(sequence=faults, retry_after="0", hang_s=5.0)
    errors: list[BackendError] = []
    with FakeServer(script, ServerSettings(faults=plan)) as server:
        backend = OpenAIBackend(
            "fake-model", base_url=server.base_url, api_key=SECRET, timeout_s=0.3
        )

        async def run() -> None:
            request = ChatRequest(messages=[Message(role="user", content="hi")], agent="a")
            for _ in faults:
                try:
                    await backend.send(request, json_mode="schema")
                except BackendError as exc:
                    errors.append(exc)
            await backend.aclose()

        asyncio.run(run())
        assert server.faults["auth_error"] == 1  # the server did echo the key back
    assert len(errors) == len(faults)  # every fault is a failure of its attempt
    for error in errors:
        chain = _chain(error)
        assert error.__cause__ is None and error.__context__ is None, chain
        assert not any(isinstance(e, openai.OpenAIError) for e in chain), chain
        assert not any(_holds(e, SECRET) or _holds(e, "SECRET") for e in chain), chain


def test_a_401_echoing_the_key_leaves_no_sdk_exception_behind_the_client_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through the client too: the whole chain of the ModelCallError is free of the key."""
    import openai

    script = parse_script({"default": '{"verdict": "ok"}'})
    plan = FaultPlan(sequence=["auth_error"])
    with FakeServer(script, ServerSettings(faults=plan)) as server:
        monkeypatch.setenv("OPENAI_API_KEY", SECRET)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        client = resolve_model(
            "openai:fake-model", settings=ClientSettings(max_retries=0, backoff_base_s=0)
        )
        with pytest.raises(LLMError) as info:
            client.chat_sync(ChatRequest(messages=[Message(role="user", content="hi")]))
        client.close()
    chain = _chain(info.value)
    assert not any(isinstance(e, openai.OpenAIError) for e in chain), chain
    assert not any(_holds(e, SECRET) or _holds(e, "SECRET") for e in chain), chain


def _failed_call(backend: object) -> BaseException:
    from dissensus.llm import ModelClient

    settings = ClientSettings(max_retries=0, backoff_base_s=0)
    client = ModelClient(backend, settings=settings)  # type: ignore[arg-type]
    try:
        with pytest.raises(LLMError) as info:
            client.chat_sync(ChatRequest(messages=[Message(role="user", content="hi")]))
    finally:
        client.close()
    return info.value


def test_an_exception_a_backend_did_not_expect_is_scrubbed_and_not_chained() -> None:
    """A backend's stray exception quoting the key (a bug formatting the request's
    headers) reached the call's error as it was, chained under it for any traceback to
    show. Its text is scrubbed as a backend's errors are, its type kept, nothing chained."""
    from dissensus.llm.function import FunctionBackend

    live = "sk-live-SECRET-0123456789abc"

    def fail(*_: object) -> str:
        raise RuntimeError(f"token={live}")

    error = _failed_call(FunctionBackend(fail))
    assert getattr(error, "kind", None) == "unexpected"
    assert "RuntimeError: token=[REDACTED]" in str(error)
    chain = _chain(error)
    assert not any(_holds(e, "SECRET") for e in chain), chain
    assert not any(isinstance(e, RuntimeError) for e in chain), chain
    assert "SECRET" not in "".join(traceback.format_exception(error))


@pytest.mark.parametrize("recorded", [False, True])
def test_a_stray_exception_is_scrubbed_of_the_backend_s_own_key(
    tmp_path: Path, recorded: bool
) -> None:
    """A key that looks like no token (no ``sk-``, no ``Bearer``) is known only to its
    backend: the client scrubs a stray exception's text with it, through a recording."""
    from dissensus.llm.replay import RecordBackend

    key = "live-KEY-0123456789abcdef"

    class Buggy(OpenAIBackend):
        async def send(self, request: ChatRequest, *, json_mode: str) -> object:  # type: ignore[override]
            raise KeyError(f"headers={{'Authorization': '{key}'}}")

    inner = Buggy("m", base_url="http://127.0.0.1:9/v1", api_key=key)
    backend = RecordBackend(inner, tmp_path / "rec.jsonl") if recorded else inner
    error = _failed_call(backend)
    assert "KeyError" in str(error) and "[REDACTED]" in str(error)
    chain = _chain(error)
    assert not any(_holds(e, key) or _holds(e, key[4:16]) for e in chain), chain
    assert key not in "".join(traceback.format_exception(error))
