"""Tolerant JSON extraction: fences, surrounding prose, trailing commas."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dissensus.llm.jsonparse import JSONExtractError, extract_json, strip_trailing_commas

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-1000, 1000),
    st.text(alphabet='ab,{}[]"\\ :é', max_size=12),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(alphabet='abkz_é"', max_size=6), inner, max_size=4),
    ),
    max_leaves=12,
)
objects = st.dictionaries(st.text(alphabet='abkz_é"', max_size=6), values, min_size=1, max_size=4)
prose = st.text(alphabet="abc XYZ:.,!?\n\t'éß", max_size=40)


def with_trailing_commas(value: Any) -> str:
    """Serialize with a trailing comma after every non-empty object and array."""
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = ", ".join(f"{json.dumps(k)}: {with_trailing_commas(v)}" for k, v in value.items())
        return "{" + items + ",}"
    if isinstance(value, list):
        if not value:
            return "[]"
        return "[" + ", ".join(with_trailing_commas(v) for v in value) + ", ]"
    return json.dumps(value)


@given(obj=objects, before=prose, after=prose)
def test_object_in_prose_is_recovered(obj: dict[str, Any], before: str, after: str) -> None:
    assert extract_json(f"{before}{json.dumps(obj)}{after}") == obj


@given(obj=objects, before=prose, lang=st.sampled_from(["json", "JSON", ""]))
def test_object_in_code_fence_is_recovered(obj: dict[str, Any], before: str, lang: str) -> None:
    text = f"{before}\n```{lang}\n{json.dumps(obj, indent=2)}\n```\nThat is all."
    assert extract_json(text) == obj


@given(obj=objects, before=prose)
def test_trailing_commas_are_tolerated(obj: dict[str, Any], before: str) -> None:
    assert extract_json(before + with_trailing_commas(obj)) == obj


@given(value=values)
def test_strip_trailing_commas_keeps_valid_json_unchanged(value: Any) -> None:
    text = json.dumps(value)
    assert json.loads(strip_trailing_commas(text)) == value


def test_commas_inside_strings_are_kept() -> None:
    assert extract_json('{"a": "x,}", "b": [1,],}') == {"a": "x,}", "b": [1]}


def test_first_object_wins_and_arrays_are_skipped_for_objects() -> None:
    assert extract_json('[1, 2] then {"a": 1} and {"b": 2}') == {"a": 1}
    assert extract_json("[1, 2]", want_object=False) == [1, 2]


@pytest.mark.parametrize(
    "text", ["", "no json at all", '{"a": 1', "[1, 2]", "```json\n{oops}\n```"]
)
def test_no_object_raises(text: str) -> None:
    with pytest.raises(JSONExtractError):
        extract_json(text)


def test_an_answer_nested_deeper_than_the_parser_goes_is_no_answer() -> None:
    """Model output, not to be trusted: brackets nested past what ``json`` parses are no
    JSON (the answer is re-asked, then a fault), never a ``RecursionError`` out of the
    model client; an object nested a few hundred levels in prose is still found."""
    for text in (
        "[" * 5000,
        "[" * 3000 + "]" * 3000,
        "{" * 5000,
        '{"a": ' * 2000 + "1" + "}" * 2000,
    ):
        with pytest.raises(JSONExtractError):
            extract_json(text)
    nested = '{"a": ' * 200 + "1" + "}" * 200
    assert extract_json("Here: " + nested + " done")["a"]["a"]["a"] is not None


def test_the_span_scan_reads_a_bounded_number_of_characters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An answer of many opening brackets (each one's scan read to the end: time in the
    square of its length) is scanned within a budget linear in its length; within the
    budget every span is found as before."""
    import dissensus.llm.jsonparse as jp

    reads = 0
    real = jp._balanced_spans

    class Counting(str):
        def __getitem__(self, key: Any) -> Any:
            nonlocal reads
            if isinstance(key, int):
                reads += 1
            return str.__getitem__(self, key)

    text = "[" * 2000 + ' {"decision": "B"}'
    list(real(Counting(text)))
    assert reads <= jp.SCAN_STEPS_PER_CHAR * len(text) + jp.SCAN_STEPS_BASE
    assert list(real('a [1, [2]] b {"c": "]"}')) == ["[1, [2]]", "[2]", '{"c": "]"}']
    monkeypatch.setattr(jp, "SCAN_STEPS_BASE", 0)
    monkeypatch.setattr(jp, "SCAN_STEPS_PER_CHAR", 1)
    assert list(real("[" * 50 + "{}")) == []  # out of budget before the object
