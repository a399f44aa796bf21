"""The ``400`` of a chat request names the part of a message's content that is wrong.

A message's ``content`` is a string or a list of parts; pydantic tries both, and the
error of the string branch ("Input should be a valid string") said nothing true of a
list whose part lacked its ``text``.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from dissensus.panels.completion import parse_request
from dissensus.panels.shapes import ChatError


def _refusal(content: Any, index: int = 0) -> ChatError:
    messages: list[Any] = [{"role": "user", "content": "context"}] * index
    with pytest.raises(ChatError) as caught:
        parse_request({"model": "m", "messages": [*messages, {"role": "user", "content": content}]})
    assert caught.value.status == 400
    return caught.value


def test_a_text_part_without_its_text_is_named() -> None:
    exc = _refusal([{"type": "text"}])
    assert exc.param == "messages.0.content.0.text"
    assert exc.message == "messages.0.content.0.text: Field required"
    assert "valid string" not in exc.message


def test_a_text_part_whose_text_is_not_a_string_is_named() -> None:
    exc = _refusal([{"type": "text", "text": "a"}, {"type": "text", "text": 5}], index=2)
    assert exc.param == "messages.2.content.1.text"
    assert "Input should be a valid string" in exc.message


def test_a_part_that_is_no_object_says_so() -> None:
    exc = _refusal([{"type": "text", "text": "a"}, "plain"])
    assert exc.param == "messages.0.content"
    assert "part 1 is a str" in exc.message and "None" not in exc.message


def test_an_image_part_names_its_index_and_type() -> None:
    exc = _refusal([{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {}}])
    assert "part 1: only text content parts are supported (got 'image_url')" in exc.message


def test_content_neither_string_nor_list_is_still_named() -> None:
    exc = _refusal(5)
    assert exc.param == "messages.0.content"
    assert "a string or a list of text parts" in exc.message


@seed(20261205)
@settings(max_examples=60, deadline=None)
@given(
    at=st.integers(min_value=0, max_value=5),
    before=st.integers(min_value=0, max_value=3),
    bad=st.sampled_from([None, 5, 1.5, True, [], {}]),
)
def test_the_param_points_at_the_broken_part(at: int, before: int, bad: Any) -> None:
    parts: list[Any] = [{"type": "text", "text": f"p{i}"} for i in range(at)]
    parts.append({"type": "text"} if bad is None else {"type": "text", "text": bad})
    exc = _refusal(parts, index=before)
    assert exc.param == f"messages.{before}.content.{at}.text"
