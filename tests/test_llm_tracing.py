"""One OpenTelemetry span per call with GenAI semantic-convention attributes."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from dissensus.llm import (
    BackendError,
    BackendResponse,
    ChatRequest,
    ClientSettings,
    FunctionBackend,
    JsonMode,
    Message,
    ModelCallError,
    ModelClient,
)


def Flaky(failures: int) -> FunctionBackend:
    """Fails ``failures`` times with a 429, then answers "ok" as model ``m-1-2025``."""
    left = [failures]

    def handler(request: ChatRequest, mode: JsonMode) -> BackendResponse:
        if left[0] > 0:
            left[0] -= 1
            raise BackendError("busy", kind="rate_limit", retryable=True, status=429)
        return BackendResponse(text="ok", model="m-1-2025", prompt_tokens=11, completion_tokens=3)

    return FunctionBackend(handler, model_id="m-1")


def setup(failures: int, retries: int = 3) -> tuple[ModelClient, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    settings = ClientSettings(max_retries=retries, backoff_base_s=0)
    return ModelClient(Flaky(failures), settings=settings, tracer_provider=provider), exporter


def request() -> ChatRequest:
    return ChatRequest(
        messages=[Message(role="user", content="q")], agent="a7", stage="dci.frame", temperature=0.5
    )


def test_one_span_per_call_with_genai_attributes() -> None:
    client, exporter = setup(failures=2)
    client.chat_sync(request())
    client.chat_sync(request())
    spans = exporter.get_finished_spans()
    assert len(spans) == 2
    attrs = dict(spans[0].attributes or {})
    assert spans[0].name == "chat m-1"
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.request.model"] == "m-1"
    assert attrs["gen_ai.response.model"] == "m-1-2025"
    assert attrs["gen_ai.usage.input_tokens"] == 11
    assert attrs["gen_ai.usage.output_tokens"] == 3
    assert attrs["gen_ai.request.temperature"] == 0.5
    assert attrs["dissensus.llm.attempts"] == 3
    assert attrs["dissensus.agent"] == "a7" and attrs["dissensus.stage"] == "dci.frame"
    assert dict(spans[1].attributes or {})["dissensus.llm.attempts"] == 1
    client.close()


def test_failed_call_span_carries_error_type() -> None:
    client, exporter = setup(failures=5, retries=1)
    with pytest.raises(ModelCallError):
        client.chat_sync(request())
    (span,) = exporter.get_finished_spans()
    attrs = dict(span.attributes or {})
    assert attrs["error.type"] == "ModelCallError"
    assert attrs["dissensus.llm.attempts"] == 2
    assert not span.status.is_ok
    client.close()
