"""The public surface of dissensus.llm is pinned (other parts code against it)."""

from __future__ import annotations

import dissensus.llm as llm


def test_public_surface_is_pinned() -> None:
    assert sorted(llm.__all__) == sorted(
        [
            "DEFAULT_PRICES", "MODEL_ENV", "BackendError", "BackendResponse", "Budget",
            "BudgetExceeded", "ChatBackend", "ChatRequest", "ChatResponse", "ClientSettings",
            "JSONExtractError", "JsonMode", "LLMError", "Message", "ModelCallError", "ModelClient",
            "OpenAIBackend", "Price", "RecordBackend", "ReplayBackend", "ReplayMiss",
            "SchemaModeUnsupported", "ScriptedBackend", "ScriptedRules", "StructuredOutputError",
            "estimate_tokens", "extract_json", "load_script", "make_backend", "request_key",
            "resolve_model",
        ]
    )  # fmt: skip
    for name in llm.__all__:
        assert hasattr(llm, name), name


def test_errors_are_dissensus_errors() -> None:
    from dissensus.errors import DissensusError

    for err in (
        llm.BudgetExceeded,
        llm.StructuredOutputError,
        llm.ModelCallError,
        llm.ReplayMiss,
        llm.BackendError,
    ):
        assert issubclass(err, llm.LLMError) and issubclass(err, DissensusError)


def test_backends_satisfy_the_protocol() -> None:
    backend = llm.ScriptedBackend.from_dict({"default": "x"})
    assert isinstance(backend, llm.ChatBackend)
    assert isinstance(llm.OpenAIBackend("m", api_key="k"), llm.ChatBackend)
    assert isinstance(llm.ReplayBackend([]), llm.ChatBackend)
