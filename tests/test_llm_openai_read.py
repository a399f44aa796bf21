"""Reading a chat-completion body without the SDK's response models: any JSON is an
answer or a typed, retryable failure, never another exception."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.llm import OpenAIBackend
from dissensus.llm.base import BackendError, BackendResponse

ARGS = {"model": "m", "messages": [{"role": "user", "content": "What is 2 + 2?"}]}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
fields = st.one_of(json_values, st.text(max_size=8))


def body(choices: Any, message: Any = None, usage: Any = None, model: Any = None) -> dict[str, Any]:
    return {"choices": choices, "message": message, "usage": usage, "model": model}


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        json_values,
        st.builds(body, json_values, json_values, json_values, fields),
        st.builds(
            lambda message, usage, model, finish: {
                "choices": [{"message": message, "finish_reason": finish}],
                "usage": usage,
                "model": model,
            },
            st.one_of(json_values, st.fixed_dictionaries({"content": fields, "refusal": fields})),
            st.one_of(
                json_values,
                st.fixed_dictionaries({"prompt_tokens": fields, "completion_tokens": fields}),
            ),
            fields,
            fields,
        ),
    )
)
def test_any_json_body_is_an_answer_or_a_retryable_backend_error(value: Any) -> None:
    backend = OpenAIBackend("m", base_url="http://127.0.0.1:9/v1")
    try:
        got = backend._read(value, ARGS)
    except BackendError as exc:
        assert exc.retryable
        assert exc.kind in ("malformed_response", "empty_choices")
        return
    assert isinstance(got, BackendResponse)
    assert got.prompt_tokens >= 0 and got.completion_tokens >= 0
    assert got.model


@given(
    text=st.text(min_size=1, max_size=40),
    prompt=st.integers(0, 10_000),
    completion=st.integers(0, 10_000),
)
def test_a_well_formed_body_is_read_field_by_field(text: str, prompt: int, completion: int) -> None:
    backend = OpenAIBackend("asked-model", base_url="http://127.0.0.1:9/v1")
    got = backend._read(
        {
            "model": "served-model",
            "choices": [{"message": {"content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion},
        },
        ARGS,
    )
    assert (got.text, got.model, got.finish_reason) == (text, "served-model", "stop")
    assert (got.prompt_tokens, got.completion_tokens) == (prompt, completion)


@pytest.mark.parametrize("usage", [None, {}, {"prompt_tokens": True, "completion_tokens": -1}])
def test_missing_or_unusable_usage_is_estimated(usage: Any) -> None:
    backend = OpenAIBackend("m", base_url="http://127.0.0.1:9/v1")
    got = backend._read(
        {"choices": [{"message": {"content": None, "refusal": "I cannot."}}], "usage": usage},
        ARGS,
    )
    assert got.text == "I cannot." and got.model == "m" and got.finish_reason is None
    assert got.prompt_tokens > 0 and got.completion_tokens > 0


def test_content_given_as_text_parts_is_read_as_their_text_in_order() -> None:
    """Some OpenAI-compatible servers answer ``content`` as a list of parts: the member
    failed after every retry ("response message has no text"), the same each time."""
    backend = OpenAIBackend("m", base_url="http://127.0.0.1:9/v1")
    parts = [
        {"type": "text", "text": "The answer "},
        {"type": "image_url", "image_url": {"url": "data:,"}},
        {"text": "is 7."},
        "stray",
    ]
    got = backend._read({"choices": [{"message": {"content": parts}}]}, ARGS)
    assert got.text == "The answer is 7."
    empty = backend._read({"choices": [{"message": {"content": [], "refusal": "no"}}]}, ARGS)
    assert empty.text == "no"
