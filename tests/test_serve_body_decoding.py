"""One reader of request bodies for both doors: ``POST /v1/decide`` (and every route that
takes a body) and the chat door refuse a body that is no JSON document with the same
message and field (``param`` at the chat door), each in its own error shape. The chat
door's copy of the reader had drifted: a trailing comma, a key written twice, an empty
body and a deeply nested list were each worded or limited differently."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dissensus.io.jsonl import MAX_DEPTH
from dissensus.panels.shapes import ChatError
from dissensus.serve.chat import _json
from dissensus.serve.http import ApiError, parse_json


def _decide(raw: bytes) -> tuple[str, str | None] | object:
    try:
        return parse_json(raw)
    except ApiError as exc:
        assert exc.status == 400
        return (exc.error, exc.field)


def _chat(raw: bytes) -> tuple[str, str | None] | object:
    try:
        return _json(raw)
    except ChatError as exc:
        assert (exc.status, exc.type, exc.code) == (400, "invalid_request_error", "invalid_request")
        return (exc.message, exc.param)


@pytest.mark.parametrize(
    ("raw", "message", "field"),
    [
        (
            b'{"a": 1,}',
            "invalid JSON: Expecting property name enclosed in double quotes (line 1)",
            "<json>",
        ),
        (b'{\n"a": 1\n"b": 2}', "invalid JSON: Expecting ',' delimiter (line 3)", "<json>"),
        (b'{"a":1,"a":2}', "a: duplicate key", "a"),
        (b'{"m": [{"k": 1, "k": 2}]}', "m.0.k: duplicate key", "m.0.k"),
        (b"", "empty request body", "<body>"),
        (b" \n\t", "empty request body", "<body>"),
        (b'{"a": "\xff"}', "request body is not UTF-8", "<encoding>"),
        (b'{"a": NaN}', "invalid JSON: NaN is not a JSON number", "<json>"),
        (b"[" * 100 + b"]" * 100, f"JSON nested deeper than {MAX_DEPTH} levels", "<depth>"),
        (
            b"[" * (MAX_DEPTH + 2) + b"]" * (MAX_DEPTH + 2),
            f"JSON nested deeper than {MAX_DEPTH} levels",
            "<depth>",
        ),
        (
            b'{"a":' * (MAX_DEPTH + 1) + b"1" + b"}" * (MAX_DEPTH + 1),
            f"JSON nested deeper than {MAX_DEPTH} levels",
            "<depth>",
        ),
    ],
)
def test_both_doors_refuse_a_body_with_the_same_message(
    raw: bytes, message: str, field: str
) -> None:
    assert _decide(raw) == _chat(raw) == (message, field)


def test_a_list_may_be_one_level_deeper_than_a_line_at_both_doors() -> None:
    """A list of panels holds items as deep as a JSONL line; the list itself is one more."""
    raw = b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1)
    decided = _decide(raw)
    assert isinstance(decided, list) and decided == _chat(raw)


_PIECES = st.sampled_from(
    [
        b"{",
        b"}",
        b"[",
        b"]",
        b'"a"',
        b'"b"',
        b":",
        b",",
        b" ",
        b"\n",
        b"1",
        b"-0.5",
        b"NaN",
        b"true",
        b"null",
        b'"\\ud800"',
        b"\xff",
        b"\xef\xbb\xbf",
        b"9" * 5000,
    ]
)


@given(st.lists(_PIECES, max_size=14).map(b"".join))
def test_the_two_doors_agree_on_every_small_body(raw: bytes) -> None:
    assert _decide(raw) == _chat(raw)
