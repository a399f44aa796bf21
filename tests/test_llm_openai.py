"""The real openai SDK against the loopback server: every fault, fallbacks, headers.

The SDK is imported when a client is first used, not at collection.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from pydantic import BaseModel

from dissensus.llm import (
    Budget,
    BudgetExceeded,
    ChatRequest,
    ClientSettings,
    Message,
    ModelCallError,
    ModelClient,
    OpenAIBackend,
    StructuredOutputError,
    resolve_model,
)
from dissensus.llm.fakeserver import FakeServer, FaultKind, FaultPlan, ServerSettings
from dissensus.llm.openai_backend import Transport, aiohttp_available
from dissensus.llm.scripted import parse_script

SCRIPT = parse_script(
    {
        "rules": [
            {"match": {"agent": "judge", "stage": "score"}, "json": {"verdict": "A", "score": 7}},
            {"match": {"role": "Challenger"}, "response": "I challenge that."},
            {"match": {"contains": "cycle"}, "responses": ["c1", "c2"]},
        ],
        "default": "plain answer",
    }
)
# timeout_s is a total deadline per attempt (the SDK's first request, warm-up included):
# 0.5 s timed out healthy attempts on a loaded machine.
FAST = ClientSettings(
    timeout_s=2.0, backoff_base_s=0.001, backoff_max_s=0.002, retry_after_cap_s=0.05
)
# A hung attempt (the server holds it for HANG_S) can only end by the client's deadline or
# by the server giving up; the server counts which (``hangs_abandoned``), so the tests
# assert who ended it, not how long it took. A hang far longer than any deadline here
# keeps the two apart however loaded the machine is.
HANG_S = 60.0
HUNG_ATTEMPT_S = 0.25
"""The deadline of a lone hung attempt (nothing healthy has to fit in it)."""


def abandoned_hangs(srv: FakeServer, expected: int) -> int:
    """The server's count of hangs the client gave up on, once it reaches ``expected``
    (the server sees the closed connection a moment after the client moves on). Polls for
    at most half of HANG_S: a guard against waiting forever, not a timed assertion."""
    for _ in range(int(HANG_S / 2 / 0.01)):
        if srv.hangs_abandoned >= expected:
            break
        time.sleep(0.01)
    return srv.hangs_abandoned


class Verdict(BaseModel):
    verdict: str
    score: int


def judge_request() -> ChatRequest:
    return ChatRequest(
        messages=[Message(role="user", content="Score it.")], agent="judge", stage="score"
    )


def serve(faults: list[FaultKind | None], **settings: object) -> FakeServer:
    plan = FaultPlan(sequence=faults, retry_after="0.01", hang_s=HANG_S)
    return FakeServer(SCRIPT, ServerSettings(faults=plan, **settings)).start()  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def warm_sdk() -> None:
    """One healthy call, so that the SDK's first-request warm-up (lazy imports, model
    building: over a second on a cold process) is not charged to a short deadline."""
    srv = serve([])
    try:
        client = client_for(srv)
        client.chat_sync(judge_request(), schema=Verdict)
        client.close()
    finally:
        srv.stop()


@pytest.fixture
def server() -> Iterator[FakeServer]:
    srv = serve([])
    yield srv
    srv.stop()


def client_for(
    srv: FakeServer,
    settings: ClientSettings = FAST,
    budget: Budget | None = None,
    transport: Transport = "httpx",
) -> ModelClient:
    backend = OpenAIBackend(
        "fake-model",
        base_url=srv.base_url,
        api_key="sk-test-key",
        timeout_s=settings.timeout_s,
        transport=transport,
    )
    return ModelClient(backend, settings=settings, budget=budget)


TRANSIENT: list[FaultKind] = [
    "rate_limit",
    "server_error",
    "hang",
    "disconnect",
    "truncated",
    "empty_choices",
]
EXPECTED_KIND = {
    "rate_limit": "rate_limit",
    "server_error": "server_error",
    "hang": "timeout",
    "disconnect": "connection",
    "truncated": "malformed_response",
    "empty_choices": "empty_choices",
}


TRANSPORTS = [
    "httpx",
    pytest.param(
        "aiohttp",
        marks=pytest.mark.skipif(not aiohttp_available(), reason="openai[aiohttp] not installed"),
    ),
]
"""Both HTTP stacks under the SDK: every fault must read the same on each."""


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("fault", TRANSIENT)
def test_every_transient_fault_is_retried(
    fault: FaultKind, transport: Transport, request: pytest.FixtureRequest
) -> None:
    if fault == "hang":
        request.getfixturevalue("warm_sdk")
    srv = serve([fault])
    try:
        client = client_for(srv, FAST, transport=transport)
        out = client.chat_sync(judge_request(), schema=Verdict)
        if fault == "hang":  # cut short by the deadline, not by the server giving up
            assert abandoned_hangs(srv, 1) == 1
        assert out.parsed == Verdict(verdict="A", score=7)
        assert out.attempts == 2
        assert client.usage.attempts == srv.requests_received == 2
        assert srv.faults[fault] == 1
        client.close()
    finally:
        srv.stop()


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("fault", TRANSIENT)
def test_every_transient_fault_is_typed_when_retries_run_out(
    fault: FaultKind, transport: Transport, request: pytest.FixtureRequest
) -> None:
    srv = serve([fault])
    try:
        update: dict[str, object] = {"max_retries": 0}
        if fault == "hang":
            request.getfixturevalue("warm_sdk")
            update["timeout_s"] = HUNG_ATTEMPT_S
        client = client_for(srv, FAST.model_copy(update=update), transport=transport)
        with pytest.raises(ModelCallError) as info:
            client.chat_sync(judge_request())
        assert info.value.kind == EXPECTED_KIND[fault]
        assert abandoned_hangs(srv, 1) == 1 if fault == "hang" else srv.hangs_abandoned == 0
        assert len(info.value.attempts) == 1
        assert client.usage.attempts == srv.requests_received == 1
        client.close()
    finally:
        srv.stop()


def test_schema_violation_is_reasked() -> None:
    srv = serve(["schema_violation"])
    try:
        client = client_for(srv)
        out = client.chat_sync(judge_request(), schema=Verdict)
        assert out.parsed == Verdict(verdict="A", score=7)
        assert len(out.raw) == 2 and "unexpected" in out.raw[0]
        resent = srv.bodies[1]["messages"]
        assert resent[-2]["role"] == "assistant" and "unexpected" in resent[-2]["content"]
        client.close()
    finally:
        srv.stop()


def test_schema_violation_every_time_is_a_structured_output_error() -> None:
    srv = serve(["schema_violation"] * 3)
    try:
        client = client_for(srv, FAST.model_copy(update={"max_reasks": 2}))
        with pytest.raises(StructuredOutputError) as info:
            client.chat_sync(judge_request(), schema=Verdict)
        assert len(info.value.attempts) == 3 and srv.requests_received == 3
        client.close()
    finally:
        srv.stop()


def test_json_schema_response_format_is_sent(server: FakeServer) -> None:
    client = client_for(server)
    client.chat_sync(judge_request(), schema=Verdict)
    body = server.bodies[0]
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["name"] == "Verdict"
    assert body["response_format"]["json_schema"]["schema"] == Verdict.model_json_schema()
    client.close()


def test_unsupported_json_schema_falls_back_to_json_object_with_schema_in_prompt() -> None:
    srv = serve([], json_schema_supported=False)
    try:
        client = client_for(srv)
        out = client.chat_sync(judge_request(), schema=Verdict)
        assert out.parsed == Verdict(verdict="A", score=7)
        assert client.json_mode == "object"
        assert srv.bodies[1]["response_format"] == {"type": "json_object"}
        system = srv.bodies[1]["messages"][0]
        assert system["role"] == "system" and '"score"' in system["content"]
        client.chat_sync(judge_request(), schema=Verdict)
        assert srv.requests_received == 3  # the fallback is remembered: no second 400
        client.close()
    finally:
        srv.stop()


def test_schema_unsupported_twice_falls_back_to_prompt_only() -> None:
    srv = serve(["schema_unsupported", "schema_unsupported"])
    try:
        client = client_for(srv)
        out = client.chat_sync(judge_request(), schema=Verdict)
        assert out.parsed == Verdict(verdict="A", score=7)
        assert client.json_mode == "none"
        assert "response_format" not in srv.bodies[2]
        client.close()
    finally:
        srv.stop()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_auth_error_is_not_retried(transport: Transport) -> None:
    srv = serve(["auth_error"])
    try:
        client = client_for(srv, transport=transport)
        with pytest.raises(ModelCallError) as info:
            client.chat_sync(judge_request())
        assert info.value.status == 401 and info.value.kind == "client_error"
        assert "sk-test-key" not in str(info.value)
        assert srv.requests_received == 1
        client.close()
    finally:
        srv.stop()


def test_context_headers_select_rules(server: FakeServer) -> None:
    client = client_for(server)
    challenge = ChatRequest(
        messages=[Message(role="user", content="x")], agent="c-1", role="Challenger"
    )
    assert client.chat_sync(challenge).text == "I challenge that."
    cyc = [
        client.chat_sync(
            ChatRequest(messages=[Message(role="user", content="cycle")], agent=a)
        ).text
        for a in "aab"
    ]
    assert cyc == ["c1", "c2", "c1"]  # cycled per agent
    assert (
        client.chat_sync(ChatRequest(messages=[Message(role="user", content="?")])).text
        == "plain answer"
    )
    client.close()


def test_generation_settings_reach_the_server(server: FakeServer) -> None:
    settings = FAST.model_copy(update={"temperature": 0.2, "seed": 11, "max_tokens": 64})
    client = client_for(server, settings)
    out = client.chat_sync(ChatRequest(messages=[Message(role="user", content="hi")]))
    body = server.bodies[0]
    assert (body["temperature"], body["seed"], body["max_tokens"], body["model"]) == (
        0.2,
        11,
        64,
        "fake-model",
    )
    assert out.model == "fake-model" and out.usage.prompt_tokens == 1 and out.latency_s > 0
    client.close()


def test_models_endpoint_and_concurrent_async_calls(server: FakeServer) -> None:
    from openai import AsyncOpenAI

    async def main() -> tuple[list[str], list[str]]:
        sdk = AsyncOpenAI(api_key="k", base_url=server.base_url, max_retries=0)
        models = [m.id async for m in sdk.models.list()]
        await sdk.close()
        client = client_for(server, FAST.model_copy(update={"concurrency": 4}))
        outs = await asyncio.gather(
            *(client.chat(judge_request(), schema=Verdict) for _ in range(12))
        )
        await client.aclose()
        return models, [o.parsed.verdict for o in outs]

    models, verdicts = asyncio.run(main())
    assert models == ["fake-model"]
    assert verdicts == ["A"] * 12 and server.requests_received == 12


def test_resolve_openai_spec_from_environment(
    server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("DISSENSUS_MODEL", "openai:fake-model")
    client = resolve_model(settings=FAST)
    assert isinstance(client.backend, OpenAIBackend)
    assert client.chat_sync(judge_request(), schema=Verdict).parsed == Verdict(verdict="A", score=7)
    client.close()


def test_budget_refusal_reaches_no_server(server: FakeServer) -> None:
    client = client_for(server, budget=Budget(max_calls=1))
    client.chat_sync(judge_request())
    with pytest.raises(BudgetExceeded, match="call budget"):
        client.chat_sync(judge_request())
    assert server.requests_received == 1
    client.close()


def test_the_aiohttp_transport_where_it_is_missing_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dissensus.errors import ConfigError
    from dissensus.llm import openai_backend

    monkeypatch.setattr(openai_backend, "aiohttp_available", lambda: False)
    with pytest.raises(ConfigError) as info:
        OpenAIBackend("fake-model", base_url="http://127.0.0.1:9/v1", transport="aiohttp")
    assert info.value.field == "transport" and "openai[aiohttp]" in str(info.value)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_no_telemetry_headers_are_sent(transport: Transport) -> None:
    """The SDK's ``X-Stainless-*`` headers (this machine's OS, architecture, runtime) are
    not sent; authentication and the context headers are."""
    seen: list[dict[str, str]] = []
    completion = (
        b'{"id":"c","object":"chat.completion","created":0,"model":"m","choices":'
        b'[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}'
    )

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")[1:]
        headers = {
            k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in head if h)
        }
        await reader.readexactly(int(headers.get("content-length", "0")))
        seen.append(headers)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(completion), completion)
        )
        await writer.drain()
        writer.close()

    async def go() -> str:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        backend = OpenAIBackend(
            "m", base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-k", transport=transport
        )
        try:
            request = ChatRequest(messages=[Message(role="user", content="hi")], agent="a-1")
            return (await backend.send(request, json_mode="none")).text
        finally:
            await backend.aclose()
            server.close()
            await server.wait_closed()

    assert asyncio.run(go()) == "ok"
    (headers,) = seen
    assert [name for name in headers if name.startswith("x-stainless")] == []
    assert headers["authorization"] == "Bearer sk-k"
    assert headers["x-dissensus-agent"] == "a-1"


def test_the_loopback_server_stops_an_answer_at_the_requests_max_tokens() -> None:
    """As a real server does: the answer is cut, the usage is the cap, the finish reason
    ``length``, so the client's reservation is a real cap against it too."""
    script = parse_script({"rules": [], "default": "C" * 5000}, file="long")
    with FakeServer(script, ServerSettings()) as srv:
        client = client_for(srv)
        request = ChatRequest(messages=[Message(role="user", content="q")], max_tokens=25)
        answer = client.chat_sync(request)
        client.close()
    assert answer.text == "C" * 100
    assert answer.usage.completion_tokens == 25


@pytest.mark.skipif(not aiohttp_available(), reason="openai[aiohttp] not installed")
def test_a_request_the_http_client_refuses_is_a_client_error_not_retried() -> None:
    """aiohttp refuses credentials in the URL beside the SDK's Authorization header
    before anything is sent: one attempt, a client error, never a 'body is not JSON'
    that is retried. (The backend refuses such a base URL when it is made; it is set
    behind the check here to reach a request the HTTP client itself refuses.)"""
    from dissensus.llm import ModelCallError, ModelClient
    from dissensus.llm.openai_backend import OpenAIBackend

    backend = OpenAIBackend("m", base_url="http://127.0.0.1:9/v1", api_key="k", transport="aiohttp")
    backend.base_url = "http://user:pw@127.0.0.1:9/v1"
    client = ModelClient(backend, settings=FAST)
    with pytest.raises(ModelCallError) as caught:
        client.chat_sync(judge_request())
    assert caught.value.kind == "client_error"
    assert client.usage.attempts == 1
    assert "not JSON" not in str(caught.value)
    client.close()
