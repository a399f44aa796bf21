"""Model calls: one client for every protocol, over OpenAI-compatible or offline models.

>>> from dissensus.llm import Budget, ChatRequest, Message, resolve_model
>>> client = resolve_model("scripted:rules.yaml", budget=Budget(max_calls=50))  # doctest: +SKIP
>>> client.chat_sync(ChatRequest(messages=[Message(role="user", content="hi")], agent="a1"))  # doctest: +SKIP

See ``docs/llm.md`` for specs, settings, the scripted-rule format and recordings.
"""

from dissensus.llm.base import (
    BackendError,
    BackendResponse,
    BudgetExceeded,
    ChatBackend,
    ChatClient,
    ChatRequest,
    ChatResponse,
    JsonMode,
    LLMError,
    Message,
    ModelCallError,
    ReplayMiss,
    SchemaModeUnsupported,
    StructuredOutputError,
    estimate_tokens,
)
from dissensus.llm.budget import DEFAULT_PRICES, Budget, Price
from dissensus.llm.client import ClientSettings, ModelClient
from dissensus.llm.function import FunctionBackend
from dissensus.llm.jsonparse import JSONExtractError, extract_json
from dissensus.llm.openai_backend import OpenAIBackend
from dissensus.llm.replay import RecordBackend, ReplayBackend, request_key
from dissensus.llm.resolve import MODEL_ENV, make_backend, resolve_model
from dissensus.llm.scripted import ScriptedBackend, ScriptedRules, load_script

__all__ = [
    "DEFAULT_PRICES",
    "MODEL_ENV",
    "BackendError",
    "BackendResponse",
    "Budget",
    "BudgetExceeded",
    "ChatBackend",
    "ChatClient",
    "ChatRequest",
    "ChatResponse",
    "ClientSettings",
    "FunctionBackend",
    "JSONExtractError",
    "JsonMode",
    "LLMError",
    "Message",
    "ModelCallError",
    "ModelClient",
    "OpenAIBackend",
    "Price",
    "RecordBackend",
    "ReplayBackend",
    "ReplayMiss",
    "SchemaModeUnsupported",
    "ScriptedBackend",
    "ScriptedRules",
    "StructuredOutputError",
    "estimate_tokens",
    "extract_json",
    "load_script",
    "make_backend",
    "request_key",
    "resolve_model",
]
