"""A failed call's span holds no answer or server text: no exception event, no description.

OpenTelemetry's defaults record an exception escaping a span as an ``exception`` event
(message and traceback) and put its message in the status description. A call whose
answer held no JSON failed with a message quoting the answer's first characters, and
one whose server failed with the server's error text, so both reached every span
exporter, though prompt and answer text are never to be put on spans.
"""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from pydantic import BaseModel

from dissensus.llm import (
    BackendError,
    ChatRequest,
    ClientSettings,
    FunctionBackend,
    JsonMode,
    Message,
    ModelCallError,
    ModelClient,
    StructuredOutputError,
)

SECRET = "PRIVATE-ANSWER-patient-4711"


class Verdict(BaseModel):
    decision: str


def _spans(handler: object, *, schema: type[BaseModel] | None) -> tuple[Exception, ReadableSpan]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    client = ModelClient(
        FunctionBackend(handler),  # type: ignore[arg-type]
        settings=ClientSettings(max_reasks=0, max_retries=0),
        tracer_provider=provider,
    )
    request = ChatRequest(messages=[Message(role="user", content="q")], agent="a1")
    with pytest.raises(Exception) as raised:
        client.chat_sync(request, schema=schema)
    client.close()
    (span,) = exporter.get_finished_spans()
    return raised.value, span


def _shows(span: ReadableSpan, text: str) -> bool:
    seen = [str(span.status.description), repr(dict(span.attributes or {}))]
    for event in span.events:
        seen.append(repr(dict(event.attributes or {})))
    return any(text in part for part in seen)


def test_an_answer_without_json_is_not_on_the_span() -> None:
    error, span = _spans(lambda request, mode: f"{SECRET} says no", schema=Verdict)
    assert isinstance(error, StructuredOutputError) and SECRET in str(error)
    assert not _shows(span, SECRET)
    assert span.events == () or list(span.events) == []
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description is None
    assert (span.attributes or {})["error.type"] == "StructuredOutputError"


def test_a_server_error_text_is_not_on_the_span() -> None:
    def failing(request: ChatRequest, mode: JsonMode) -> str:
        raise BackendError(f"HTTP 500: {SECRET}", kind="server_error", retryable=False, status=500)

    error, span = _spans(failing, schema=None)
    assert isinstance(error, ModelCallError) and SECRET in str(error)
    assert not _shows(span, SECRET)
    assert list(span.events) == []
    assert span.status.status_code is StatusCode.ERROR
    assert (span.attributes or {})["error.type"] == "ModelCallError"


def test_a_cancelled_call_is_an_error_without_an_event() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    async def slow(request: ChatRequest, mode: JsonMode) -> str:
        await asyncio.sleep(60)
        return "late"

    async def run() -> None:
        client = ModelClient(FunctionBackend(slow), tracer_provider=provider)
        task = asyncio.create_task(
            client.chat(ChatRequest(messages=[Message(role="user", content="q")]))
        )
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await client.aclose()

    asyncio.run(run())
    (span,) = exporter.get_finished_spans()
    assert list(span.events) == []
    assert span.status.status_code is StatusCode.ERROR
    assert (span.attributes or {})["error.type"] == "CancelledError"
