"""The chat-model protocol every protocol (CONCORD, DCI, baselines, pipeline) calls through.

Shaped like httpx's transport: one small protocol with one method, a real
OpenAI-compatible implementation, and offline implementations (scripted, replay)
that are first-class. Policy (retries, budget, structured output, concurrency) lives
in :class:`dissensus.llm.client.ModelClient`, which wraps any :class:`ChatBackend`.

Requests carry who is asking (``agent``, ``role``) and at which protocol ``stage``,
so offline models can answer per agent and recorded requests of different agents
never share a cache key.

A caller may end the calls made in its context early, as failures rather than as a
cancellation: :class:`Cutoff`, set for a context with :func:`cut_off_by`. A backend that
waits on the network honours it (:class:`~dissensus.llm.openai_backend.OpenAIBackend`):
once cut, an attempt in flight ends at once and no further attempt is sent, each a
:class:`BackendError` of kind ``cut_off`` that is not retried, so the code that made the
call sees a failed call (a pipeline follow-up that failed, which the pipeline journals
and escalates) where a cancellation would have stopped it. Offline backends answer at
once and need not look.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from dissensus.errors import DissensusError
from dissensus.types import JsonSchema, Usage

__all__ = [
    "BackendError",
    "BackendResponse",
    "BudgetExceeded",
    "ChatBackend",
    "ChatClient",
    "ChatRequest",
    "ChatResponse",
    "Cutoff",
    "JsonMode",
    "LLMError",
    "Message",
    "ModelCallError",
    "ReplayMiss",
    "SchemaModeUnsupported",
    "StructuredOutputError",
    "current_cutoff",
    "cut_off_by",
    "estimate_tokens",
]


class Message(BaseModel):
    """One chat message."""

    model_config = ConfigDict(frozen=True)

    role: Literal["system", "user", "assistant"]
    content: str


class ChatRequest(BaseModel):
    """What a protocol asks of a model."""

    model_config = ConfigDict(frozen=True)

    messages: list[Message]
    agent: str | None = None
    """The agent on whose behalf the call is made (distinct cache keys per agent)."""
    role: str | None = None
    """The agent's role or archetype, for scripted models and tracing."""
    stage: str | None = None
    """Protocol stage, e.g. ``concord.score`` or ``dci.challenge``."""
    temperature: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    json_schema: JsonSchema | None = None
    """JSON schema of the expected object, when structured output is requested."""
    schema_name: str | None = None

    def prompt_text(self) -> str:
        """All message contents joined, for matching and token estimates."""
        return "\n".join(m.content for m in self.messages)


class BackendResponse(BaseModel):
    """What a backend returns for one attempt."""

    text: str
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    refused: bool = False
    """Whether ``text`` is the server's refusal (OpenAI's ``message.refusal``, no content):
    the model declined to answer."""


class ChatResponse(BaseModel):
    """What the client returns for one logical call."""

    text: str
    """Raw text of the final attempt."""
    parsed: Any = None
    """The validated object when a schema was requested."""
    usage: Usage = Field(default_factory=Usage)
    """Usage of this call, every attempt (retries and re-asks) included."""
    model: str
    latency_s: float = 0.0
    attempts: int = 1
    raw: list[str] = Field(default_factory=list)
    """Raw text of every answer of a structured call (re-asks included), in order."""


JsonMode = Literal["schema", "object", "none"]
"""How structured output is requested: ``json_schema`` response format, ``json_object``
response format with the schema in the prompt, or the schema in the prompt only."""


@runtime_checkable
class ChatBackend(Protocol):
    """One attempt at a chat completion. Backends own I/O, not policy."""

    model_id: str

    async def send(self, request: ChatRequest, *, json_mode: JsonMode) -> BackendResponse:
        """Send ``request`` once; raise on transport failure."""
        ...

    async def aclose(self) -> None:
        """Release resources."""
        ...


@runtime_checkable
class ChatClient(Protocol):
    """What every protocol calls a model through: one logical call, and its usage.

    :class:`dissensus.llm.client.ModelClient` implements it, and so does any wrapper
    that journals or replays calls (the pipeline's per-case client). Protocol code
    (DCI participants, CONCORD agents, arbiters, baselines) types against this, never
    against a concrete client.
    """

    async def chat(
        self, request: ChatRequest, *, schema: type[BaseModel] | None = None
    ) -> ChatResponse:
        """One logical call; with ``schema``, ``parsed`` is a validated instance.

        When ``request.json_schema`` is set it is the schema sent to the model (built
        per request), and ``schema`` validates the answer.
        """
        ...

    @property
    def usage(self) -> Usage:
        """Usage so far, every attempt counted."""
        ...

    @property
    def usage_by_agent(self) -> dict[str, Usage]:
        """Usage so far per ``request.agent``."""
        ...


def estimate_tokens(text: str) -> int:
    """Rough token count (about four characters a token) for backends that report none."""
    return max(1, (len(text) + 3) // 4)


def capped(text: str, max_tokens: int | None) -> tuple[str, str]:
    """``(text, finish_reason)`` of an answer an offline model gives under ``max_tokens``:
    cut to the characters of that many tokens as :func:`estimate_tokens` counts them
    (``"length"``, as a server stops at its cap), else whole (``"stop"``)."""
    if max_tokens is None or estimate_tokens(text) <= max_tokens:
        return text, "stop"
    return text[: max(1, max_tokens) * 4], "length"


class LLMError(DissensusError):
    """Base class of model-call failures.

    ``usage`` is what the failed call spent before it failed, as the model client counted
    it: its attempts, and the tokens (and cost) the server reported for the answers it gave
    (an answer that failed schema validation was answered, hence billed). The client sets
    it on every error a call raises; ``None`` when no client counted (an error raised
    elsewhere). ``model`` is the id of the model the call asked (set by the client too)."""

    usage: Usage | None = None
    model: str | None = None


class BudgetExceeded(LLMError):
    """A call was refused before it was made because it could exceed the budget.

    ``attempts`` describes the call's failed attempts before the refusal (a retry may
    be refused after earlier attempts failed), in order.
    """

    def __init__(self, message: str, *, attempts: list[str] | None = None) -> None:
        super().__init__(message)
        self.attempts = list(attempts or [])


class ModelCallError(LLMError):
    """A call failed after every allowed attempt (transport errors, 4xx, 5xx, timeouts).

    ``attempts`` describes every failed attempt in order (``"429 rate_limit: ..."``);
    ``kind`` and ``status`` are those of the last failure.
    """

    def __init__(
        self,
        message: str,
        *,
        attempts: list[str] | None = None,
        kind: str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.attempts = attempts or []
        self.kind = kind
        self.status = status


class StructuredOutputError(LLMError):
    """The model never produced an object that validates; carries every raw attempt.

    ``attempts`` holds the raw text of every answer, ``errors`` the extraction or
    validation error of each, in the same order.
    """

    def __init__(
        self,
        message: str,
        *,
        attempts: list[str] | None = None,
        errors: list[str] | None = None,
    ) -> None:
        super().__init__(message)
        self.attempts = attempts or []
        self.errors = errors or []


class ReplayMiss(LLMError):
    """A replayed model was asked a request it has no recording of.

    ``key`` is the canonical hash of the request; ``closest`` the most similar
    recorded request (canonical JSON) or ``None`` when the recording is empty.
    """

    def __init__(self, message: str, *, key: str = "", closest: str | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.closest = closest


class BackendError(LLMError):
    """One attempt failed. Raised by backends, handled (retried or wrapped) by the client.

    ``kind`` is one of ``rate_limit``, ``server_error``, ``timeout``, ``connection``,
    ``malformed_response``, ``empty_choices``, ``client_error``, ``schema_unsupported``,
    ``cut_off`` (:class:`Cutoff`), ``response_too_large`` (a body past the backend's cap).
    ``retry_after`` is the server's ``Retry-After`` in seconds, when it sent one.
    ``prompt_tokens`` and ``completion_tokens`` are the tokens the server reported for
    the failed attempt (a body whose ``usage`` was readable though its answer was not):
    the client charges them to the call, its usage and its budget.
    """

    def __init__(
        self,
        message: str,
        *,
        kind: str,
        retryable: bool,
        status: int | None = None,
        retry_after: float | None = None,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.retryable = retryable
        self.status = status
        self.retry_after = retry_after
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens

    def describe(self) -> str:
        """One line for the attempt log of a :class:`ModelCallError`."""
        status = f"{self.status} " if self.status is not None else ""
        return f"{status}{self.kind}: {self}"


class SchemaModeUnsupported(BackendError):
    """The server rejected the requested structured-output mode (a 400 saying so).

    The client falls back (``schema`` -> ``object`` -> ``none``) and remembers it.
    """

    def __init__(self, message: str, *, status: int | None = 400) -> None:
        super().__init__(message, kind="schema_unsupported", retryable=False, status=status)


class Cutoff:
    """The word that the model calls of a context are to end now, as failures.

    Used on the one event loop the calls run on: :meth:`cut` is called there (from
    another thread, through ``loop.call_soon_threadsafe``). A backend :meth:`watch` es
    the deadline scope (``asyncio.timeout``) of each attempt it has in flight; :meth:`cut`
    expires them at once, and the backend reports the attempt as :meth:`failure`.
    """

    __slots__ = ("_scopes", "reason")

    def __init__(self) -> None:
        self.reason: str | None = None
        """Why the calls were cut off (``None``: not cut)."""
        self._scopes: set[asyncio.Timeout] = set()

    def cut(self, reason: str) -> None:
        """End every attempt in flight under this cutoff now; refuse later ones."""
        self.reason = reason
        for scope in list(self._scopes):
            if not scope.expired():
                scope.reschedule(0.0)  # past: the scope expires on the loop's next turn

    def watch(self, scope: asyncio.Timeout) -> None:
        """An attempt under ``scope`` is in flight (it expires at once if already cut)."""
        self._scopes.add(scope)
        if self.reason is not None:
            scope.reschedule(0.0)

    def unwatch(self, scope: asyncio.Timeout) -> None:
        self._scopes.discard(scope)

    def failure(self) -> BackendError:
        """The failed attempt of a call cut off (not retried)."""
        return BackendError(str(self.reason), kind="cut_off", retryable=False)


_CUTOFF: ContextVar[Cutoff | None] = ContextVar("dissensus_cutoff", default=None)


def current_cutoff() -> Cutoff | None:
    """The :class:`Cutoff` of the current context, if any."""
    return _CUTOFF.get()


@contextmanager
def cut_off_by(cutoff: Cutoff | None) -> Iterator[None]:
    """Make ``cutoff`` the :class:`Cutoff` of the calls made in this context (and the
    tasks it starts); ``None``: no change."""
    if cutoff is None:
        yield
        return
    token = _CUTOFF.set(cutoff)
    try:
        yield
    finally:
        _CUTOFF.reset(token)
