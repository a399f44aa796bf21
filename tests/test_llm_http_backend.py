"""The lean HTTP backend behaves as the SDK backend: same answers, same failures, same secrecy.

Both backends talk to the same loopback :class:`FakeServer` with the same fault; every
fault must end in the same :class:`BackendError` kind (retryable the same way), a healthy
answer must give the same text, tokens and finish reason, and the key must never appear
in an error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

pytest.importorskip("aiohttp")
pytest.importorskip("openai")

from dissensus.llm import (
    BackendError,
    ChatRequest,
    ClientSettings,
    Message,
    ModelCallError,
    ModelClient,
    OpenAIBackend,
    SchemaModeUnsupported,
)
from dissensus.llm.base import BackendResponse, JsonMode
from dissensus.llm.fakeserver import FakeServer, FaultKind, FaultPlan, ServerSettings
from dissensus.llm.http_backend import OpenAIHTTPBackend
from dissensus.llm.scripted import parse_script

SECRET = "sk-test-SECRET-0123456789"
SCRIPT = parse_script(
    {
        "rules": [{"match": {"agent": "judge"}, "json": {"verdict": "A", "score": 7}}],
        "default": "plain answer",
    }
)
FAULTS: list[FaultKind] = [
    "rate_limit",
    "server_error",
    "hang",
    "disconnect",
    "truncated",
    "empty_choices",
    "schema_unsupported",
    "auth_error",
]


@pytest.fixture(scope="module")
def warm() -> None:
    """Import both HTTP stacks once, so no deadline below pays for an import."""
    import aiohttp  # noqa: F401
    import openai  # noqa: F401


def _backends(url: str, timeout_s: float) -> list[OpenAIBackend]:
    return [
        OpenAIBackend("fake-model", base_url=url, api_key=SECRET, timeout_s=timeout_s),
        OpenAIHTTPBackend("fake-model", base_url=url, api_key=SECRET, timeout_s=timeout_s),
    ]


def _request(structured: bool = False) -> ChatRequest:
    return ChatRequest(
        messages=[Message(role="user", content="Score it.")],
        agent="judge",
        stage="score",
        max_tokens=50,
        json_schema={"type": "object", "properties": {"verdict": {"type": "string"}}}
        if structured
        else None,
        schema_name="Verdict" if structured else None,
    )


async def _send(
    backend: OpenAIBackend, request: ChatRequest, mode: JsonMode
) -> BackendResponse | BackendError:
    try:
        return await backend.send(request, json_mode=mode)
    except BackendError as exc:
        return exc
    finally:
        await backend.aclose()


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer(SCRIPT) as srv:
        yield srv


def test_a_healthy_answer_is_the_same_through_both(server: FakeServer) -> None:
    for structured in (False, True):
        mode: JsonMode = "schema" if structured else "none"
        sdk, lean = (
            asyncio.run(_send(b, _request(structured), mode))
            for b in _backends(server.base_url, 5.0)
        )
        assert isinstance(sdk, BackendResponse) and isinstance(lean, BackendResponse)
        assert lean.text == sdk.text
        assert (lean.prompt_tokens, lean.completion_tokens) == (
            sdk.prompt_tokens,
            sdk.completion_tokens,
        )
        assert (lean.model, lean.finish_reason) == (sdk.model, sdk.finish_reason)
    # The context headers reached the server: the judge's rule answered.
    assert '"verdict"' in lean.text


@pytest.mark.parametrize("fault", FAULTS)
def test_every_fault_is_the_same_failure_through_both(fault: FaultKind, warm: None) -> None:
    outcomes = []
    for index in range(2):
        plan = FaultPlan(sequence=[fault], retry_after="3", hang_s=5.0)
        with FakeServer(SCRIPT, ServerSettings(faults=plan)) as srv:
            backend = _backends(srv.base_url, 0.5 if fault == "hang" else 5.0)[index]
            got = asyncio.run(_send(backend, _request(structured=True), "schema"))
            assert srv.faults[fault] == 1
        assert isinstance(got, BackendError), (fault, got)
        outcomes.append(got)
    sdk, lean = outcomes
    assert type(lean) is type(sdk)
    assert (lean.kind, lean.retryable, lean.status) == (sdk.kind, sdk.retryable, sdk.status)
    assert lean.retry_after == sdk.retry_after
    for err in outcomes:
        assert SECRET not in str(err) and "SECRET" not in repr(err)
    if fault == "auth_error":  # the server quoted the key; both scrubbed it the same way
        assert str(lean) == str(sdk)
        assert "[REDACTED]" in str(lean)
    if fault == "schema_unsupported":
        assert isinstance(lean, SchemaModeUnsupported)


def test_the_model_client_retries_through_the_lean_backend(warm: None) -> None:
    plan = FaultPlan(sequence=["rate_limit", "truncated", "disconnect"], retry_after="0")
    with FakeServer(SCRIPT, ServerSettings(faults=plan)) as srv:
        backend = OpenAIHTTPBackend("fake-model", base_url=srv.base_url, api_key="k", timeout_s=5)
        settings = ClientSettings(timeout_s=5, max_retries=3, backoff_base_s=0.001)
        client = ModelClient(backend, settings=settings)
        out = client.chat_sync(_request())
        assert out.attempts == 4
        assert client.usage.attempts == srv.requests_received == 4
        client.close()
        client = ModelClient(
            OpenAIHTTPBackend("fake-model", base_url=srv.base_url, timeout_s=5),
            settings=settings.model_copy(update={"max_retries": 0}),
        )
        assert client.chat_sync(_request()).text  # the fault sequence is spent
        client.close()


def test_refused_connection_is_a_retryable_connection_error() -> None:
    with FakeServer(SCRIPT) as srv:
        url = srv.base_url
    backend = OpenAIHTTPBackend("fake-model", base_url=url, api_key=SECRET, timeout_s=5)
    client = ModelClient(backend, settings=ClientSettings(max_retries=0))
    with pytest.raises(ModelCallError) as info:
        client.chat_sync(_request())
    assert info.value.kind == "connection"
    assert SECRET not in str(info.value)
    client.close()


def test_repr_shows_no_key() -> None:
    backend = OpenAIHTTPBackend("m", base_url="http://user:pw@127.0.0.1:9/v1", api_key=SECRET)
    text = repr(backend)
    assert text.startswith("OpenAIHTTPBackend(") and "<set>" in text
    assert SECRET not in text and "pw" not in text


@pytest.mark.parametrize("lean", [True, False])
def test_panel_members_with_a_base_url_use_the_lean_client_when_it_is_installed(
    lean: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dissensus.llm import http_backend
    from dissensus.panels import Members
    from dissensus.pipeline.policy import policy_from_dict

    monkeypatch.setattr(http_backend, "available", lambda: lean)
    section = {
        "answer": "number",
        "members": [
            {"name": "a", "model": "openai:m", "base_url": "http://127.0.0.1:9/v1"},
            {"name": "b", "model": "openai:m", "base_url": "http://127.0.0.1:9/v1"},
        ],
        "attempt_timeout_s": 7,
    }
    policy = policy_from_dict({"panel": section})
    members = Members.open(policy.panel)
    for backend in members.backends.values():
        assert type(backend) is (OpenAIHTTPBackend if lean else OpenAIBackend)
        assert backend.timeout_s == 7 and backend.base_url == "http://127.0.0.1:9/v1"
