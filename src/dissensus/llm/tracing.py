"""OpenTelemetry spans for model calls, or nothing when ``opentelemetry-api`` is absent.

One span per logical call, named ``chat {model}`` (GenAI semantic conventions), with
``gen_ai.operation.name``, ``gen_ai.provider.name``, ``gen_ai.request.model``,
``gen_ai.response.model``, ``gen_ai.request.temperature`` / ``max_tokens`` / ``seed``
when set, ``gen_ai.usage.input_tokens`` / ``output_tokens`` (summed over attempts) and
``error.type`` on failure (the exception's class; a cancelled call's is
``CancelledError``). Project attributes: ``dissensus.llm.attempts``,
``dissensus.agent``, ``dissensus.role``, ``dissensus.stage``. Prompt and answer text are
never put on spans (they may hold sensitive data; the conventions make them opt-in),
nor is a failure's message or traceback: a failed call's span has status ``ERROR``
without a description and no exception event, since the message of a failed call quotes
the answer's first characters (an answer without JSON) or the server's error text, which
OpenTelemetry's defaults put on the span as the event ``exception`` and the status
description.
Until a tracer provider is configured (globally, or passed to the client) no span is
started at all, so tracing costs nothing when unused.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Protocol, TypeAlias

__all__ = ["CallSpan", "SpanAttributes", "call_span"]

SpanAttributes: TypeAlias = dict[str, str | int | float | bool | None]
"""Attributes of a call's span (OpenTelemetry's value types; ``None``: not set)."""

_trace: Any
try:
    from opentelemetry import trace as _otel_trace

    _trace = _otel_trace
except ImportError:  # pragma: no cover - exercised only without the extra
    _trace = None


class CallSpan(Protocol):
    """What the client may do with the span of a call."""

    def set_attribute(self, key: str, value: Any) -> None: ...


class _NoSpan:
    def set_attribute(self, key: str, value: Any) -> None:
        return None


@functools.lru_cache(maxsize=32)
def _tracer(tracer_provider: Any) -> Any:
    """The tracer of ``tracer_provider`` (None: the global one), made once."""
    return _trace.get_tracer("dissensus.llm", tracer_provider=tracer_provider)


def call_span(
    *, model: str, provider: str, attributes: SpanAttributes, tracer_provider: Any = None
) -> AbstractContextManager[CallSpan]:
    """A span around one call; a no-op span when OpenTelemetry is not installed or no
    tracer provider is configured (then nothing is started or built: one shared no-op)."""
    if _trace is None or (
        tracer_provider is None
        and isinstance(_trace.get_tracer_provider(), _trace.ProxyTracerProvider)
    ):
        # No SDK configured: spans would be dropped, so skip their cost entirely.
        return _NO_SPAN
    return _span(
        model=model, provider=provider, attributes=attributes, tracer_provider=tracer_provider
    )


_NO_SPAN: AbstractContextManager[CallSpan] = nullcontext(_NoSpan())
"""The span of every call while tracing is off (stateless, so shared)."""


@contextmanager
def _span(
    *, model: str, provider: str, attributes: SpanAttributes, tracer_provider: Any
) -> Iterator[CallSpan]:
    tracer = _tracer(tracer_provider)
    attrs = {k: v for k, v in attributes.items() if v is not None}
    attrs.update(
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model,
        }
    )
    # The SDK's defaults record a failure's message and traceback as a span event and
    # its message as the status description: a failed call's message quotes the
    # answer's first characters (no JSON in it) or the server's error text, so
    # neither is recorded; the status says ERROR and ``error.type`` names the class.
    with tracer.start_as_current_span(
        f"chat {model}",
        kind=_trace.SpanKind.CLIENT,
        attributes=attrs,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except BaseException as exc:
            span.set_attribute("error.type", type(exc).__name__)
            span.set_status(_trace.Status(_trace.StatusCode.ERROR))
            raise
