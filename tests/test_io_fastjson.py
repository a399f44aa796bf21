"""Record serialisation: orjson and the standard library write the same values."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dissensus.io import fastjson

_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@given(st.dictionaries(st.text(max_size=10), _VALUES, max_size=6))
def test_both_encoders_write_the_same_values(record: dict[str, Any]) -> None:
    fast = fastjson.dumps(record)
    saved = fastjson._orjson
    fastjson._orjson = None
    try:
        slow = fastjson.dumps(record)
    finally:
        fastjson._orjson = saved
    assert json.loads(fast) == json.loads(slow) == record
    assert "\n" not in fast and "\n" not in slow  # one record, one line


def test_numpy_and_non_finite_values(monkeypatch: pytest.MonkeyPatch) -> None:
    record = {"s": np.float64(0.25), "m": np.array([[1.0, 0.5]]), "n": math.nan, "é": "ü"}
    for module in (fastjson._orjson, None):
        monkeypatch.setattr(fastjson, "_orjson", module)
        text = fastjson.dumps(record)
        assert json.loads(text) == {"s": 0.25, "m": [[1.0, 0.5]], "n": None, "é": "ü"}
        assert "ü" in text  # not escaped


def test_what_orjson_refuses_goes_through_the_standard_library() -> None:
    assert json.loads(fastjson.dumps({"id": "a\ud800b"})) == {"id": "a\ud800b"}
    assert json.loads(fastjson.dumps({"votes": {1: 2}})) == {"votes": {"1": 2}}


@given(st.dictionaries(st.text(max_size=10), _VALUES, max_size=6))
def test_dumps_line_is_dumps_and_a_newline(record: dict[str, Any]) -> None:
    assert fastjson.dumps_line(record) == fastjson.dumps(record) + "\n"
    saved = fastjson._orjson
    fastjson._orjson = None
    try:
        assert fastjson.dumps_line(record) == fastjson.dumps(record) + "\n"
    finally:
        fastjson._orjson = saved


def test_dumps_line_falls_back_like_dumps() -> None:
    for record in ({"id": "a\ud800b"}, {"votes": {1: 2}}, {"x": np.float32(0.5)}):
        assert fastjson.dumps_line(record) == fastjson.dumps(record) + "\n"
