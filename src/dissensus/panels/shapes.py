"""The OpenAI chat-completions wire shapes the panel door reads and writes, and its extension.

Requests and responses follow OpenAI's ``/v1/chat/completions`` so that any OpenAI SDK
client works unchanged; what dissensus adds travels in one extension field,
``dissensus`` (:class:`PanelResult`), on the completion and on the last stream chunk.

Choices this module makes:

* **Request fields.** ``model``, ``messages``, ``stream``, ``stream_options``
  (``include_usage``), ``temperature``, ``seed``, ``max_tokens`` /
  ``max_completion_tokens`` and ``n`` are read; other OpenAI parameters (``top_p``,
  ``user``, ...) are accepted and ignored, so SDKs that send them still work. An
  assistant message is read as OpenAI accepts it: ``content`` ``null`` or absent (beside
  ``tool_calls``, or a ``refusal``) is its ``refusal`` text, else empty, and a
  ``refusal`` content part is its refusal's text. What a panel cannot honour is refused with a
  ``400`` naming the field, never ignored into an answer of another shape: ``n`` other
  than 1, tool messages, content parts that are not text, ``tools`` and ``functions``
  (non-empty), a ``tool_choice`` or ``function_call`` other than ``"none"`` / ``"auto"``,
  a ``response_format`` other than ``{"type": "text"}`` (the answer is the text of
  a member that gave the decision, in the shape the policy's panel asks members for),
  ``logprobs: true`` or a ``top_logprobs`` above 0 (a panel's answer has no token
  probabilities of its own), and ``modalities`` other than ``["text"]`` or an ``audio``
  setting (the answer is text).
  ``null`` is "not given" for every optional field (as OpenAI reads it). The fields
  read are strict: ``stream`` is ``true`` or ``false``; ``temperature`` a number,
  ``seed``, ``max_tokens``, ``max_completion_tokens`` and ``n`` integers (``"5"`` is
  refused, not read as 5); ``seed`` fits in 64 bits (it is forwarded to members).
  ``messages`` holds 1 to :data:`MAX_MESSAGES` (2,048) messages, and at most
  :data:`MAX_CONTENT_PARTS` (2,048) content parts in all, counted before any is
  validated: 250,000 one-letter parts (7 MB) took 0.8 s of validation holding the
  interpreter, so the server answered nothing else meanwhile, before the request's
  character bound refused them.
* **The model name** is echoed back and not otherwise used: the policy names the panel.
* **Escalation** is a successful response: ``finish_reason`` is ``"escalated"``
  (:data:`ESCALATED`), the content says that a human decides and where to poll, and
  ``dissensus.status`` is ``"escalated"`` with the case id and links.
* **Errors** are OpenAI's ``{"error": {"message", "type", "param", "code"}}``
  (:class:`ChatError`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator, model_validator

from dissensus.pipeline.learned import AcceptanceFigures
from dissensus.pipeline.records import CaseRecord
from dissensus.types import JsonObject, Usage, field_segment

__all__ = [
    "COMMITTED",
    "ESCALATED",
    "MAX_CONTENT_PARTS",
    "MAX_MESSAGES",
    "AssistantMessage",
    "CaseStatus",
    "ChatCompletion",
    "ChatCompletionChunk",
    "ChatError",
    "Choice",
    "ChunkChoice",
    "ChunkDelta",
    "CompletionRequest",
    "CompletionUsage",
    "ContentPart",
    "MemberReport",
    "PanelResult",
    "RequestMessage",
    "StreamOptions",
]

MAX_CONTENT_PARTS = 2048
"""Most content parts (of list contents) one request's messages may hold together."""

MAX_MESSAGES = 2048
"""Most messages one request may hold (a ``400`` naming ``messages`` beyond): a bound on
the work per request that the character limits alone do not give, since empty messages
hold no text."""

COMMITTED = "stop"
"""``finish_reason`` of a committed answer (OpenAI's normal end)."""
ESCALATED = "escalated"
"""``finish_reason`` of a case handed to a human: no answer was committed."""


class ChatError(Exception):
    """A request the door refuses, answered as OpenAI's error body with ``status``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        fields: JsonObject | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.fields = fields
        """Top-level fields the body carries beside ``error`` (a case it names)."""
        self.headers = dict(headers or {})
        """Headers the answer carries (a throttled login's ``Retry-After``)."""

    def body(self) -> JsonObject:
        """``{"error": {"message", "type", "param", "code"}}`` (and :attr:`fields`)."""
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            },
            **(self.fields or {}),
        }


class ContentPart(BaseModel):
    """One part of a message's content; only ``text`` parts are accepted."""

    model_config = ConfigDict(extra="allow", frozen=True)

    type: Literal["text"]
    text: str


def _refusal_as_text(part: Any) -> Any:
    if isinstance(part, dict) and part.get("type") == "refusal":
        refusal = part.get("refusal")
        if isinstance(refusal, str):
            return {"type": "text", "text": refusal}
    return part


class RequestMessage(BaseModel):
    """One message of the request (``developer`` is read as ``system``)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[ContentPart]

    @model_validator(mode="before")
    @classmethod
    def _assistant_forms(cls, data: Any) -> Any:
        # What OpenAI accepts of an assistant message and a panel can read as text: no
        # content (null or absent, beside tool calls or a refusal) is its ``refusal``
        # text, else empty; a ``refusal`` part is its refusal's text.
        if not isinstance(data, dict) or data.get("role") != "assistant":
            return data
        content = data.get("content")
        if content is None:
            refusal = data.get("refusal")
            return {**data, "content": refusal if isinstance(refusal, str) else ""}
        if isinstance(content, list):
            parts = [_refusal_as_text(part) for part in content]
            return {**data, "content": parts}
        return data

    @field_validator("content", mode="before")
    @classmethod
    def _text_only(cls, value: Any) -> Any:
        if isinstance(value, list):
            for i, part in enumerate(value):
                if not isinstance(part, dict):
                    raise ValueError(
                        f"part {i} is a {type(part).__name__}: a content part is an object "
                        '({"type": "text", "text": ...})'
                    )
                kind = part.get("type")
                if kind != "text":
                    raise ValueError(
                        f"part {i}: only text content parts are supported "
                        f"(got {field_segment(repr(kind))})"
                    )
            return value
        if not isinstance(value, str):
            raise ValueError("content must be a string or a list of text parts")
        return value

    def text(self) -> str:
        """The content as one string (text parts joined by newlines)."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(part.text for part in self.content)


class StreamOptions(BaseModel):
    """``stream_options``: ``include_usage`` is read, other keys are accepted and ignored."""

    model_config = ConfigDict(extra="allow", frozen=True)

    include_usage: StrictBool | None = None


class CompletionRequest(BaseModel):
    """A chat-completions request (see the module docstring for the fields read)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    model: str = Field(min_length=1)
    messages: list[RequestMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    stream: StrictBool | None = None
    """Whether to answer as server-sent events: ``true`` or ``false`` only (``null``: false)."""
    temperature: float | None = Field(
        default=None, ge=0.0, le=2.0, allow_inf_nan=False, strict=True
    )
    seed: int | None = Field(default=None, ge=-(2**63), le=2**63 - 1, strict=True)
    max_tokens: int | None = Field(default=None, ge=1, strict=True)
    max_completion_tokens: int | None = Field(default=None, ge=1, strict=True)
    n: int | None = Field(default=1, strict=True)
    tools: list[Any] | None = None
    functions: list[Any] | None = None
    tool_choice: Any = None
    function_call: Any = None
    response_format: Any = None
    logprobs: StrictBool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, strict=True)
    modalities: list[Any] | None = None
    audio: Any = None
    stream_options: StreamOptions | None = None
    """Read when streaming: ``include_usage`` asks for the usage on a chunk of its own."""

    @field_validator("messages", mode="before")
    @classmethod
    def _few_parts(cls, value: Any) -> Any:
        if isinstance(value, list):
            parts = sum(
                len(m["content"])
                for m in value
                if isinstance(m, dict) and isinstance(m.get("content"), list)
            )
            if parts > MAX_CONTENT_PARTS:
                raise ValueError(
                    f"the messages hold {parts} content parts; at most {MAX_CONTENT_PARTS}"
                )
        return value

    @field_validator("logprobs")
    @classmethod
    def _no_logprobs(cls, value: bool | None) -> bool | None:
        if value:
            raise ValueError("a panel's answer has no token probabilities: only false")
        return value

    @field_validator("top_logprobs")
    @classmethod
    def _no_top_logprobs(cls, value: int | None) -> int | None:
        if value:
            raise ValueError("a panel's answer has no token probabilities: only 0")
        return value

    @field_validator("modalities")
    @classmethod
    def _text_modality(cls, value: list[Any] | None) -> list[Any] | None:
        if value is not None and value != ["text"]:
            raise ValueError("a panel answers with text: only ['text']")
        return value

    @field_validator("audio")
    @classmethod
    def _no_audio(cls, value: Any) -> Any:
        if value is not None:
            raise ValueError("a panel answers with text, not audio")
        return value

    @field_validator("n")
    @classmethod
    def _one_choice(cls, value: int | None) -> int | None:
        if value is not None and value != 1:
            raise ValueError("only n=1 is supported: a panel gives one answer")
        return value

    @field_validator("tools", "functions")
    @classmethod
    def _no_tools(cls, value: list[Any] | None) -> list[Any] | None:
        if value:
            raise ValueError("tools are not supported by a panel")
        return value

    @field_validator("tool_choice", "function_call")
    @classmethod
    def _no_tool_choice(cls, value: Any) -> Any:
        if value is not None and value not in ("none", "auto"):
            raise ValueError("a panel calls no tools: only 'none' or 'auto'")
        return value

    @field_validator("response_format")
    @classmethod
    def _text_only(cls, value: Any) -> Any:
        if value is not None and value != {"type": "text"}:
            raise ValueError(
                "a panel answers with a member's text in the shape its policy asks members "
                "for: only {'type': 'text'}"
            )
        return value

    def completion_cap(self) -> int | None:
        """The request's completion cap (``max_completion_tokens`` first)."""
        return self.max_completion_tokens or self.max_tokens

    def content_chars(self) -> int:
        """Characters of message content (the request-size limit counts these)."""
        return sum(len(m.text()) for m in self.messages)


class MemberReport(BaseModel):
    """What one member did for this request."""

    model_config = ConfigDict(frozen=True)

    name: str
    family: str | None
    model: str
    """The model id that answered (or was asked)."""
    status: Literal["answered", "abstained", "failed"]
    """``answered``: a decision; ``abstained``: spoke without a usable decision; ``failed``: no answer."""
    decision: str | None = None
    why: str | None = None
    """Why the member abstained or failed."""
    attempts: int = 0
    """Attempts made (retries included)."""


class PanelResult(BaseModel):
    """The ``dissensus`` extension field: what was decided, on what basis, and the record."""

    model_config = ConfigDict(frozen=True)

    status: Literal["committed", "escalated", "resolved"]
    """``committed``: the pipeline committed; ``escalated``: a human decides (poll ``links.case``);
    ``resolved``: a human decided (``GET /v1/cases/{id}``, or a request sent again with
    its idempotency key)."""
    case_id: str
    """``<run>.<line>``: the case in the journal (``GET /v1/cases/{case_id}``)."""
    run_id: str
    """The journal run holding the case (``dissensus runs verify RUN``)."""
    decision: str | None
    """The committed (or human) decision; ``None`` while escalated."""
    answered_by: str | None = None
    """The member whose text is the content (one that gave the decision)."""
    action: str
    basis: str | None
    reason: str
    state: str
    route: str
    review_id: str | None = None
    """The review item of an escalated case."""
    suggestion: str | None = None
    """The panel's plurality decision, shown to the reviewer of an escalated case."""
    acceptance: AcceptanceFigures | None = None
    """Learned acceptance's figures, when an acceptance file judged the case."""
    members: list[MemberReport] = Field(default_factory=list)
    links: dict[str, str] = Field(default_factory=dict)
    """``case`` (poll), ``review`` (the review page), ``verify`` (the run's hash chain)."""
    replayed: bool = False
    """Whether this answers a request sent again with an idempotency key: the case the
    first one journalled, as the journal holds it now, no member asked (the usage is 0)."""


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None


class Choice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: str
    logprobs: None = None


class CompletionUsage(BaseModel):
    """Tokens of every member attempt of the request (the panel's cost, not one model's)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0

    @classmethod
    def of(cls, usage: Usage) -> CompletionUsage:
        return cls(
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            total_tokens=usage.prompt_tokens + usage.completion_tokens,
        )


class ChatCompletion(BaseModel):
    """A completion, OpenAI's shape plus ``dissensus``."""

    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: CompletionUsage
    system_fingerprint: str | None = None
    dissensus: PanelResult


class ChunkDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChunkChoice(BaseModel):
    index: int = 0
    delta: ChunkDelta
    finish_reason: str | None = None
    logprobs: None = None


class ChatCompletionChunk(BaseModel):
    """One server-sent event of a streamed completion; the last chunk carries ``dissensus``."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: CompletionUsage | None = None
    dissensus: PanelResult | None = None


class CaseStatus(BaseModel):
    """``GET /v1/cases/{id}``: a chat case as the journal holds it now."""

    case_id: str
    run_id: str
    status: Literal["deciding", "committed", "escalated", "resolved"]
    """``deciding``: handed to the decision and not journalled yet (poll again)."""
    decision: str | None
    """The committed or human decision; ``None`` while a human has not decided."""
    answer: str | None
    """The text of a member that gave the decision (else the decision itself); ``None`` while open."""
    answered_by: str | None = None
    record: CaseRecord | None
    """The case's final record (``dissensus decide --json``'s shape; human resolution
    included); ``None`` while ``deciding``."""
    links: dict[str, str] = Field(default_factory=dict)
