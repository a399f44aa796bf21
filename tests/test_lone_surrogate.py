"""A lone surrogate (a ``"\\ud83d"`` JSON escape, or a byte a shell passed through
undecoded) is found by one test, :func:`dissensus.types.lone_surrogate_at`, and refused
in one wording, :func:`dissensus.types.lone_surrogate`, whichever reader finds it; each
names its own field. The check was written six times with three wordings."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from dissensus.integrations._review import ReviewAnswer
from dissensus.pipeline.review import reviewer_name_problem
from dissensus.store.targets import may_be_held
from dissensus.types import field_segment, find_unrepresentable, lone_surrogate, lone_surrogate_at

WORDING = "not valid Unicode text: a lone surrogate (U+D83D) at character 3"
TEXT = "ab\ud83dc"


@given(st.text(st.characters(exclude_categories=()), max_size=12))
def test_the_position_is_the_first_code_point_no_utf8_encodes(text: str) -> None:
    first = next((i for i, ch in enumerate(text) if "\ud800" <= ch <= "\udfff"), None)
    assert lone_surrogate_at(text) == first
    assert (lone_surrogate(text) is None) == (first is None)
    assert may_be_held(text) == (first is None and "\x00" not in text)


def test_every_reader_words_it_alike_naming_its_own_field() -> None:
    assert lone_surrogate(TEXT) == WORDING
    assert find_unrepresentable({"meta": {"q": TEXT}}) == f"meta.q: {WORDING}"
    assert reviewer_name_problem(TEXT, "--reviewer") == f"--reviewer is {WORDING}"
    with pytest.raises(ValidationError) as refused:
        ReviewAnswer.model_validate({"decision": TEXT, "note": "n", "content_sha256": "a" * 64})
    (error,) = refused.value.errors()
    assert error["loc"] == ("decision",) and error["msg"].endswith(WORDING)


_WITH_SURROGATES = st.one_of(
    st.characters(), st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF, categories=["Cs"])
)


@given(st.lists(_WITH_SURROGATES, max_size=200).map("".join))
def test_a_field_segment_can_always_be_written_as_utf_8(key: str) -> None:
    """An error's field path names keys taken from the input: one holding a lone
    surrogate made an answer no UTF-8 writer could encode."""
    shown = field_segment(key)
    shown.encode("utf-8")
    if key.isascii() and len(key) <= 64:
        assert shown == key
