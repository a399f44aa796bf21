"""ModelClient policy over in-process backends: budget, retries, re-asks, usage, limits."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from dissensus.errors import ConfigError
from dissensus.llm import (
    BackendError,
    Budget,
    BudgetExceeded,
    ChatRequest,
    ClientSettings,
    FunctionBackend,
    JsonMode,
    LLMError,
    Message,
    ModelCallError,
    ModelClient,
    Price,
    SchemaModeUnsupported,
    ScriptedBackend,
    StructuredOutputError,
)
from dissensus.llm.retry import Backoff, RateLimiter, parse_retry_after

FAST = ClientSettings(backoff_base_s=0.0, backoff_max_s=0.0, max_retries=3)


def req(text: str = "hello", agent: str | None = "a1", **kw: object) -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content=text)], agent=agent, **kw)  # type: ignore[arg-type]


class Verdict(BaseModel):
    verdict: str
    score: int


def FuncBackend(
    fn: Callable[[int, ChatRequest, JsonMode], str],
    model_id: str = "func",
    honest_tokens: bool = False,
) -> FunctionBackend:
    """The library's FunctionBackend answering with ``fn(attempt number, request, mode)``.

    Reports 10 prompt and 5 completion tokens, or with ``honest_tokens`` what a server
    counting like ``estimate_tokens`` and honouring ``max_tokens`` would report.
    """
    backend: FunctionBackend

    def handler(request: ChatRequest, mode: JsonMode) -> str:
        return fn(len(backend.sent), request, mode)

    backend = FunctionBackend(handler, model_id=model_id, tokens=None if honest_tokens else (10, 5))
    return backend


def failing(n_failures: int, error: Callable[[], BackendError], answer: str = "ok") -> FuncBackend:
    def fn(n: int, _r: ChatRequest, _m: JsonMode) -> str:
        if n <= n_failures:
            raise error()
        return answer

    return FuncBackend(fn)


def transient() -> BackendError:
    return BackendError("boom", kind="server_error", retryable=True, status=500)


def test_budget_refuses_before_the_call_that_would_exceed() -> None:
    backend = FuncBackend(lambda *_: "ok")
    client = ModelClient(backend, budget=Budget(max_calls=2), settings=FAST)
    client.chat_sync(req())
    client.chat_sync(req())
    with pytest.raises(BudgetExceeded):
        client.chat_sync(req())
    assert len(backend.sent) == 2  # the third request never reached the backend
    assert client.usage.attempts == 2
    assert client.usage.calls == 2
    client.close()


def test_token_budget_reserves_prompt_estimate_plus_max_tokens() -> None:
    backend = FuncBackend(lambda *_: "ok")
    # prompt estimate of "hello" is 2 + 4 per message = 6; with max_tokens 100 -> 106 > 100
    client = ModelClient(backend, budget=Budget(max_tokens=100), settings=FAST)
    with pytest.raises(BudgetExceeded, match="token budget"):
        client.chat_sync(req(max_tokens=100))
    assert backend.sent == []
    out = client.chat_sync(req(max_tokens=50))
    assert out.usage.total_tokens == 15
    client.close()


def test_token_budget_fills_completion_reserve_as_max_tokens() -> None:
    backend = FuncBackend(lambda *_: "ok")
    client = ModelClient(
        backend, budget=Budget(max_tokens=10_000, completion_reserve=77), settings=FAST
    )
    client.chat_sync(req())
    assert backend.sent[0][0].max_tokens == 77
    client.close()


def test_cost_budget_uses_price_table() -> None:
    backend = FuncBackend(lambda *_: "ok", model_id="m-2025")
    price = Price(input_per_mtok=1_000_000.0, output_per_mtok=1_000_000.0)  # $1 a token
    budget = Budget(max_cost=40.0, prices={"m": price}, completion_reserve=5)
    client = ModelClient(backend, budget=budget, settings=FAST)
    client.chat_sync(req())  # reserves 6 + 5 = $11, spends 10 + 5 = $15
    assert client.usage.cost == pytest.approx(15.0)
    client.chat_sync(req())  # 15 + 11 <= 40
    with pytest.raises(BudgetExceeded, match="cost budget"):
        client.chat_sync(req())  # 30 + 11 > 40
    assert len(backend.sent) == 2
    client.close()


def test_cost_limit_without_price_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="no price"):
        ModelClient(FuncBackend(lambda *_: "ok", model_id="unknown"), budget=Budget(max_cost=1.0))


def test_transient_failures_are_retried_and_every_attempt_counts() -> None:
    backend = failing(2, transient)
    client = ModelClient(backend, budget=Budget(max_calls=10), settings=FAST)
    out = client.chat_sync(req())
    assert out.text == "ok"
    assert out.attempts == 3
    assert client.usage.attempts == 3 and client.usage.calls == 1
    assert client.budget.spent.attempts == 3
    client.close()


def test_retries_are_bounded_and_the_error_carries_every_attempt() -> None:
    backend = failing(100, transient)
    client = ModelClient(backend, settings=FAST)
    with pytest.raises(ModelCallError) as info:
        client.chat_sync(req())
    assert len(backend.sent) == FAST.max_retries + 1
    assert len(info.value.attempts) == FAST.max_retries + 1
    assert info.value.kind == "server_error" and info.value.status == 500
    client.close()


def test_permanent_failures_are_not_retried() -> None:
    backend = failing(
        100, lambda: BackendError("nope", kind="client_error", retryable=False, status=401)
    )
    client = ModelClient(backend, settings=FAST)
    with pytest.raises(ModelCallError, match="401"):
        client.chat_sync(req())
    assert len(backend.sent) == 1
    client.close()


def test_budget_refusal_in_the_middle_of_retries() -> None:
    backend = failing(100, transient)
    client = ModelClient(backend, budget=Budget(max_calls=2), settings=FAST)
    with pytest.raises(BudgetExceeded, match="after failed attempts"):
        client.chat_sync(req())
    assert len(backend.sent) == 2
    client.close()


def test_structured_output_parses_and_keeps_raw_text() -> None:
    backend = FuncBackend(lambda *_: 'Here you go:\n```json\n{"verdict": "yes", "score": 3,}\n```')
    client = ModelClient(backend, settings=FAST)
    out = client.chat_sync(req(), schema=Verdict)
    assert out.parsed == Verdict(verdict="yes", score=3)
    assert out.raw == [out.text] and "```json" in out.text
    sent, mode = backend.sent[0]
    assert mode == "schema" and sent.json_schema == Verdict.model_json_schema()
    assert sent.schema_name == "Verdict"
    client.close()


def test_validation_failure_reasks_with_the_error() -> None:
    answers = ['{"verdict": "yes"}', '{"verdict": "yes", "score": 4}']
    backend = FuncBackend(lambda n, *_: answers[n - 1])
    client = ModelClient(backend, settings=FAST)
    out = client.chat_sync(req(), schema=Verdict)
    assert out.parsed == Verdict(verdict="yes", score=4)
    assert out.attempts == 2 and out.raw == answers
    reask = backend.sent[1][0].messages
    assert reask[-2].role == "assistant" and reask[-2].content == answers[0]
    assert reask[-1].role == "user" and "score" in reask[-1].content
    client.close()


def test_reasks_are_bounded_and_the_error_carries_every_answer() -> None:
    backend = FuncBackend(lambda n, *_: f"not json {n}")
    client = ModelClient(backend, settings=ClientSettings(max_reasks=2, backoff_base_s=0))
    with pytest.raises(StructuredOutputError) as info:
        client.chat_sync(req(), schema=Verdict)
    assert info.value.attempts == ["not json 1", "not json 2", "not json 3"]
    assert len(info.value.errors) == 3
    assert client.usage.attempts == 3
    client.close()


def test_schema_mode_falls_back_and_is_remembered() -> None:
    def fn(_n: int, _r: ChatRequest, mode: JsonMode) -> str:
        if mode == "schema":
            raise SchemaModeUnsupported("response_format json_schema unsupported")
        return '{"verdict": "no", "score": 1}'

    backend = FuncBackend(fn)
    client = ModelClient(backend, settings=FAST)
    assert client.chat_sync(req(), schema=Verdict).parsed == Verdict(verdict="no", score=1)
    assert client.json_mode == "object"
    client.chat_sync(req(), schema=Verdict)
    assert [mode for _, mode in backend.sent] == ["schema", "object", "object"]
    assert client.usage.attempts == 3
    client.close()


def test_plain_calls_never_request_json() -> None:
    backend = FuncBackend(lambda *_: "ok")
    client = ModelClient(backend, settings=FAST)
    client.chat_sync(req())
    assert backend.sent[0][1] == "none" and backend.sent[0][0].json_schema is None
    client.close()


def test_usage_by_agent_and_settings_defaults() -> None:
    backend = FuncBackend(lambda *_: "ok")
    client = ModelClient(backend, settings=ClientSettings(temperature=0.3, seed=7))
    client.chat_sync(req(agent="a"))
    client.chat_sync(req(agent="b"))
    client.chat_sync(req(agent="b", temperature=0.9))
    client.chat_sync(req(agent=None))
    by_agent = client.usage_by_agent
    assert {k: v.calls for k, v in by_agent.items()} == {"a": 1, "b": 2, "-": 1}
    assert sum(u.prompt_tokens for u in by_agent.values()) == client.usage.prompt_tokens == 40
    temps = [r.temperature for r, _ in backend.sent]
    assert temps == [0.3, 0.3, 0.9, 0.3] and all(r.seed == 7 for r, _ in backend.sent)
    client.close()


def test_unexpected_backend_exception_is_typed() -> None:
    def fn(*_: object) -> str:
        raise RuntimeError("bug")

    client = ModelClient(FuncBackend(fn), settings=FAST)
    with pytest.raises(ModelCallError, match="RuntimeError: bug") as info:
        client.chat_sync(req())
    assert info.value.kind == "unexpected"
    client.close()


def test_closed_client_refuses_calls() -> None:
    client = ModelClient(ScriptedBackend.from_dict({"default": "x"}))
    client.close()
    with pytest.raises(ModelCallError, match="closed"):
        client.chat_sync(req())


def test_async_chat_and_context_manager() -> None:
    async def main() -> str:
        async with ModelClient(ScriptedBackend.from_dict({"default": "x"})) as client:
            out = await client.chat(req())
            return out.text

    assert asyncio.run(main()) == "x"


def test_client_survives_several_event_loops() -> None:
    backend = FuncBackend(lambda *_: "ok")
    client = ModelClient(backend, settings=ClientSettings(concurrency=1))

    async def burst() -> list[str]:
        outs = await asyncio.gather(*(client.chat(req()) for _ in range(3)))
        return [o.text for o in outs]

    assert asyncio.run(burst()) == ["ok"] * 3
    assert asyncio.run(burst()) == ["ok"] * 3


@given(concurrency=st.integers(1, 6), calls=st.integers(1, 30))
def test_concurrency_limit_is_never_exceeded(concurrency: int, calls: int) -> None:
    backend = FuncBackend(lambda *_: "ok")
    client = ModelClient(backend, settings=ClientSettings(concurrency=concurrency))

    async def main() -> None:
        await asyncio.gather(*(client.chat(req()) for _ in range(calls)))

    asyncio.run(main())
    assert backend.max_in_flight <= concurrency
    assert client.usage.attempts == calls


@given(
    max_calls=st.integers(0, 12),
    max_tokens=st.one_of(st.none(), st.integers(0, 400)),
    failures=st.lists(st.booleans(), min_size=1, max_size=40),
)
def test_budget_is_never_overrun(
    max_calls: int, max_tokens: int | None, failures: list[bool]
) -> None:
    def fn(n: int, *_: object) -> str:
        if failures[(n - 1) % len(failures)]:
            raise transient()
        return "ok"

    budget = Budget(max_calls=max_calls, max_tokens=max_tokens, completion_reserve=5)
    backend = FuncBackend(fn, honest_tokens=True)
    client = ModelClient(backend, budget=budget, settings=FAST)

    async def one() -> None:
        with contextlib.suppress(LLMError):  # typed failures are expected here
            await client.chat(req())

    async def main() -> None:
        await asyncio.gather(*(one() for _ in range(8)))

    asyncio.run(main())
    assert budget.spent.attempts <= max_calls
    assert budget.spent.attempts == client.usage.attempts == len(backend.sent)
    if max_tokens is not None:
        assert budget.spent.total_tokens <= max_tokens


@given(refused=st.lists(st.booleans(), min_size=1, max_size=12))
def test_an_attempt_the_hook_refuses_is_neither_sent_nor_spent(refused: list[bool]) -> None:
    """An attempt hook that raises (the pipeline's, past the run's deadline) fails the
    call before anything is sent: its budget reservation is released, never spent, and
    the attempts the hook let through are counted exactly."""
    from dissensus.llm.budget import attempt_hook

    budget = Budget(max_calls=len(refused))
    backend = FuncBackend(lambda *_: "ok")
    client = ModelClient(backend, budget=budget, settings=FAST)

    async def main() -> None:
        for refuse in refused:

            def hook(refuse: bool = refuse) -> None:
                if refuse:
                    raise RuntimeError("past the deadline")

            with attempt_hook(hook), contextlib.suppress(LLMError):
                await client.chat(req())

    asyncio.run(main())
    sent = refused.count(False)
    assert len(backend.sent) == sent
    assert budget.spent.attempts == client.usage.attempts == sent
    # Nothing stays reserved: the whole budget less what was sent is still free.
    assert budget.max_calls is not None
    for _ in range(budget.max_calls - sent):
        budget.reserve(model="func", prompt_tokens=0, completion_tokens=0)
    with pytest.raises(BudgetExceeded):
        budget.reserve(model="func", prompt_tokens=0, completion_tokens=0)


def test_rate_limiter_spaces_request_starts() -> None:
    limiter = RateLimiter(rpm=600)  # one per 0.1 s
    delays = [limiter._claim() for _ in range(4)]
    assert delays[0] == pytest.approx(0.0, abs=0.01)
    assert delays[3] == pytest.approx(0.3, abs=0.02)


def test_rpm_setting_limits_request_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []
    real_sleep = asyncio.sleep

    async def fake_sleep(delay: float) -> None:
        waits.append(delay)
        await real_sleep(0)

    monkeypatch.setattr("dissensus.llm.retry.asyncio.sleep", fake_sleep)
    client = ModelClient(FuncBackend(lambda *_: "ok"), settings=ClientSettings(rpm=60))
    for _ in range(3):
        client.chat_sync(req())
    positive = [w for w in waits if w > 0]  # the backend's own sleep(0) calls are patched too
    # starts are spaced 1 s apart on a virtual schedule (sleeps are faked, the clock is not)
    assert len(positive) == 2 and positive[0] > 0.9 and positive[1] > 1.9
    client.close()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("3", 3.0),
        ("0.5", 0.5),
        ("  7 ", 7.0),
        ("-1", None),
        ("soon", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_retry_after_seconds(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value) == expected


def test_parse_retry_after_http_date() -> None:
    now = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC
    assert parse_retry_after("Tue, 14 Nov 2023 22:13:50 GMT", now=now) == pytest.approx(30.0)
    assert parse_retry_after("Tue, 14 Nov 2023 22:00:00 GMT", now=now) == 0.0


@given(attempt=st.integers(0, 20), retry_after=st.one_of(st.none(), st.floats(0, 10_000)))
def test_backoff_is_bounded_and_honours_retry_after(
    attempt: int, retry_after: float | None
) -> None:
    backoff = Backoff(base_s=0.5, cap_s=8.0, retry_after_cap_s=60.0, seed=1)
    delay = backoff.delay(attempt, retry_after)
    ceiling = min(8.0, 0.5 * 2**attempt)
    if retry_after is None:
        assert 0.0 <= delay <= ceiling
    else:
        assert min(retry_after, 60.0) <= delay <= max(ceiling, min(retry_after, 60.0))


def test_backoff_is_reproducible_from_its_seed() -> None:
    a = Backoff(base_s=1, cap_s=30, retry_after_cap_s=60, seed=5)
    b = Backoff(base_s=1, cap_s=30, retry_after_cap_s=60, seed=5)
    assert [a.delay(i) for i in range(6)] == [b.delay(i) for i in range(6)]


def test_retry_after_drives_the_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []
    real_sleep = asyncio.sleep

    async def fake_sleep(delay: float) -> None:
        waits.append(delay)
        await real_sleep(0)

    monkeypatch.setattr("dissensus.llm.client.asyncio.sleep", fake_sleep)

    def error() -> BackendError:
        return BackendError(
            "slow down", kind="rate_limit", retryable=True, status=429, retry_after=2.5
        )

    settings = ClientSettings(backoff_base_s=0.001, backoff_max_s=0.001, retry_after_cap_s=2.0)
    client = ModelClient(failing(2, error), settings=settings)
    client.chat_sync(req())
    # Retry-After (2.5 s) honoured, capped at retry_after_cap_s (2.0 s)
    assert [w for w in waits if w > 0] == [2.0, 2.0]
    client.close()


@pytest.mark.parametrize("field", ["timeout_s", "backoff_base_s", "rpm", "temperature"])
@pytest.mark.parametrize("value", [float("inf"), float("nan")])
def test_client_settings_refuse_non_finite_numbers(field: str, value: float) -> None:
    """An infinite attempt timeout would let one attempt hang for ever; NaN compares false
    with every bound."""
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=field):
        ClientSettings(**{field: value})
