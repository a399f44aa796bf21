"""Lines of millions of tiny values: refused at the cost of one parse and one walk.

A 6 MB line of ``[]``s in a panel's ``meta`` is over the values bound of
:mod:`dissensus.io.limits`. It was refused after the fast tiers had parsed it and given
it up, and after three walks of it (depth, keys, values) took about 10 s; the depth, keys
and values are now taken in one walk (:func:`~dissensus.io.jsontext.json_shape`), and a
line holding more values than any record within the bounds needs
(:func:`~dissensus.io.jsonl.crowded`, counted on its text) goes straight to the reference
path. Each shortcut must refuse exactly what the walks it replaces refused.
"""

from __future__ import annotations

import json
import os
from typing import Any
from unittest import mock

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.io import jsonl, views
from dissensus.io.jsonl import Reject, crowded, parse_line
from dissensus.io.jsontext import MAX_DEPTH, count_keys, json_depth, json_shape, text_values
from dissensus.io.limits import MAX_PANEL_VALUES, _sizes
from dissensus.io.views import parse_panel_view
from dissensus.types import Panel

# The suite's size of a crowded line; the 6 MB one under DISSENSUS_SOAK=1 (`make test-soak`).
SOAK = os.environ.get("DISSENSUS_SOAK") == "1"

_TEXT = st.text(alphabet='ab ,:[]{}"\\\u00e9\n', max_size=6)

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=30,
)


def _deep(depth: int) -> Any:
    value: Any = []
    for i in range(depth - 1):
        value = [value] if i % 2 else {"k": value}
    return value


_NESTED = _JSON | st.integers(1, MAX_DEPTH + 3).map(_deep)


def _depth(value: Any) -> int:
    """The depth of arrays and objects (the definition, by recursion)."""
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def _keys(value: Any) -> int:
    if isinstance(value, dict):
        return len(value) + sum(_keys(v) for v in value.values())
    if isinstance(value, list):
        return sum(_keys(v) for v in value)
    return 0


def _values(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + sum(_values(v) for v in value.values())
    if isinstance(value, list):
        return 1 + sum(_values(v) for v in value)
    return 1


@settings(max_examples=300, deadline=None)
@given(_NESTED)
def test_one_walk_takes_the_depth_keys_and_values_of_the_definitions(value: Any) -> None:
    assert json_shape(value) == (_depth(value), _keys(value), _values(value))
    assert json_depth(value) == _depth(value)
    assert count_keys(value) == _keys(value)
    assert _sizes(value)[2] == _values(value)


@settings(max_examples=300, deadline=None)
@given(_NESTED, st.sampled_from([None, 1, "\t"]))
def test_the_values_counted_on_the_text_are_those_of_the_parsed_value(
    value: Any, indent: int | str | None
) -> None:
    for text in (json.dumps(value, indent=indent), json.dumps(value, ensure_ascii=False)):
        assert text_values(text) == _values(value)


def _line(meta: Any) -> str:
    outputs = [{"agent": a, "decision": a, "reasoning": "r"} for a in "ab"]
    return json.dumps({"id": "w", "meta": {"x": meta}, "outputs": outputs})


@settings(max_examples=150, deadline=None)
@given(_NESTED, st.integers(0, 40))
def test_a_crowded_line_is_answered_as_the_fast_tiers_and_the_reference_answer(
    meta: Any, threshold: int
) -> None:
    """Whatever the count that sends a line straight to the reference path, every line
    gets the answer (record or reject: field, message, line) it gets without it."""
    text = _line(meta)
    expected = parse_line(Panel, text, file="p.jsonl", line=2)
    with mock.patch.object(jsonl, "CROWDED_VALUES", threshold):
        assert crowded(text) == (len(text) > threshold and text_values(text) > threshold)
        assert parse_line(Panel, text, file="p.jsonl", line=2) == expected
        got = parse_panel_view(text, file="p.jsonl", line=2)
    if isinstance(expected, Reject):
        assert got == expected
    else:
        assert not isinstance(got, Reject) and _dump(got) == expected.model_dump()


def _dump(record: Panel | views.PanelView) -> Any:
    if isinstance(record, Panel):
        return record.model_dump()
    return Panel.model_validate(msgspec.to_builtins(record)).model_dump()


def test_a_crowded_line_never_reaches_the_fast_tiers() -> None:
    """A line of more values than any record may hold is parsed once, by the reference
    path: neither the view nor the native tier parses it first only to give it up."""
    text = _line([[]] * MAX_PANEL_VALUES)
    assert crowded(text)
    refuse = mock.Mock(side_effect=AssertionError("a fast tier parsed the line"))
    with (
        mock.patch.object(jsonl, "validate_panel_json", refuse),
        mock.patch.object(views, "_DECODE", refuse),
    ):
        for got in (
            parse_line(Panel, text, file="p.jsonl", line=3),
            parse_panel_view(text, file="p.jsonl", line=3),
        ):
            assert isinstance(got, Reject) and got.field == "<values>" and got.line == 3
    refuse.assert_not_called()


def test_a_line_of_many_empty_lists_is_refused_with_its_count() -> None:
    """150,000 items in the suite (crowded all the same); 2,000,000 (a 6 MB line) soaked."""
    items = 2_000_000 if SOAK else 150_000
    text = _line([[]] * items)
    assert crowded(text) and len(text) > 3 * items
    got = parse_line(Panel, text, file="p.jsonl", line=7)
    assert isinstance(got, Reject)
    assert (got.file, got.line, got.field) == ("p.jsonl", 7, "<values>")
    # The panel's own values besides x's items: its fields, their defaults included.
    base = _sizes(Panel.model_validate(json.loads(_line([]))).model_dump())[2]
    assert got.message == f"{base + items} JSON values; at most {MAX_PANEL_VALUES} per record"
    assert len(got.raw) <= 200


def test_text_of_quotes_never_closed_is_counted_in_one_scan() -> None:
    """A string never closed runs to the end of the text: scanned from every quote
    instead, a line of ``"\\"\\"...`` took minutes before the parser refused it."""
    from dissensus.io.jsontext import _STRING

    text = '"' + '\\"' * 1000
    found = _STRING.match(text)
    assert found is not None and found.end() == len(text)
    line = '{"id":"q","meta":{"x":"' + '\\"' * 150_000
    got = parse_line(Panel, line, file="p.jsonl", line=4)
    assert isinstance(got, Reject) and got.field == "<json>" and got.line == 4


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet='ab ,:[]{}"\\\u00e9\n0', max_size=40) | _NESTED.map(json.dumps))
def test_commas_and_brackets_bound_the_values_counted_on_any_text(text: str) -> None:
    """Taking the strings out only removes commas and brackets: the count without it
    (which :func:`crowded` looks at first) is never below :func:`text_values`."""
    assert 1 + text.count(",") + text.count("[") + text.count("{") >= text_values(text)


def test_a_long_line_of_text_is_not_copied_to_count_its_values() -> None:
    """A panel of long reasoning holds few commas and brackets: :func:`crowded` answers
    without :func:`text_values`, whose string pass copied the line (parsing a 232 kB
    panel took twice as long)."""
    outputs = [
        {"agent": a, "decision": a, "reasoning": "refund, window; " * 2000} for a in "abcdef"
    ]
    text = json.dumps({"id": "w", "outputs": outputs})
    assert len(text) > MAX_PANEL_VALUES
    count = mock.Mock(side_effect=AssertionError("the line was counted"))
    with mock.patch.object(jsonl, "text_values", count):
        assert not crowded(text)
        assert not isinstance(parse_line(Panel, text, file="p.jsonl", line=1), Reject)
        assert not isinstance(parse_panel_view(text, file="p.jsonl", line=1), Reject)


def test_the_view_path_counts_a_crowded_line_once() -> None:
    """``route`` reads panels as views: a crowded line was counted by the view tier and
    again by :func:`parse_line` it fell back to."""
    text = _line([[]] * MAX_PANEL_VALUES)
    with mock.patch.object(jsonl, "text_values", wraps=text_values) as count:
        got = parse_panel_view(text, file="p.jsonl", line=3)
    assert isinstance(got, Reject) and got.field == "<values>"
    assert count.call_count == 1
