"""The canonical JSON text: the fast path writes exactly the standard library's text."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus import canonical as module
from dissensus.canonical import canonical, canonical_reference

_REFERENCE = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)

_text = st.text(st.characters(codec="utf-8"), max_size=12)
_floats = st.floats(allow_nan=False, allow_infinity=False)
_scalars = st.none() | st.booleans() | st.integers() | _floats | _text
_json = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_text, inner, max_size=5),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(_json)
def test_same_text_as_the_standard_library(value: object) -> None:
    assert canonical(value) == _REFERENCE.encode(value) == canonical_reference(value)


@pytest.mark.parametrize(
    "number",
    [1e-5, 1.5e-5, 9.99e-5, 1e-4, 1e-7, 5e-324, 1e16, 1.5e16, 1e22, 1.7976931348623157e308, -0.0],
)
def test_floats_in_every_range(number: float) -> None:
    for value in (number, -number, [number], {"x": number, "e-": "1e-5 0.00001"}):
        assert canonical(value) == _REFERENCE.encode(value)


def test_every_code_point_is_escaped_alike() -> None:
    text = "".join(chr(c) for c in range(0x3000) if not 0xD800 <= c < 0xE000)
    text += "\U0001f600\U0010ffff\u2028\u2029\x7f"
    value = {text: text, "a": [text]}
    assert canonical(value) == _REFERENCE.encode(value)


def _error(value: object) -> tuple[type[Exception], str]:
    with pytest.raises(Exception) as got:
        canonical(value)
    return got.type, str(got.value)


def _reference_error(value: object) -> tuple[type[Exception], str]:
    with pytest.raises(Exception) as got:
        _REFERENCE.encode(value)
    return got.type, str(got.value)


@dataclasses.dataclass
class _Point:
    x: int


class _Colour(enum.Enum):
    RED = "red"


@pytest.mark.parametrize(
    "value",
    [
        {"x": math.nan},
        [1.0, math.inf],
        {"x": -math.inf},
        {"when": datetime.date(2026, 1, 1)},
        _Point(1),
        {"c": _Colour.RED},
        {"n": {1, 2}},
        {1: "int key", "b": 2},
    ],
)
def test_refusals_are_the_standard_librarys(value: object) -> None:
    assert _error(value) == _reference_error(value)


@pytest.mark.parametrize(
    "value",
    [
        (1, 2, "x"),
        {"t": (1.5, None)},
        {1: "int keys", 2: None, 1.5: "float key", False: 0},
        {"s": "\ud800"},
        {"big": 2**70, "neg": -(2**65)},
        {"surrogate-free": "\U0001f600"},
        [
            [
                [
                    [
                        [
                            [
                                [
                                    [
                                        [
                                            [
                                                [
                                                    [
                                                        [
                                                            [
                                                                [
                                                                    [
                                                                        [
                                                                            [
                                                                                [
                                                                                    [
                                                                                        [
                                                                                            [
                                                                                                [
                                                                                                    [
                                                                                                        [
                                                                                                            [
                                                                                                                [
                                                                                                                    [
                                                                                                                        [
                                                                                                                            [
                                                                                                                                [
                                                                                                                                    [
                                                                                                                                        [
                                                                                                                                            [
                                                                                                                                                [
                                                                                                                                                    [
                                                                                                                                                        [
                                                                                                                                                            [
                                                                                                                                                                [
                                                                                                                                                                    [
                                                                                                                                                                        [
                                                                                                                                                                            [
                                                                                                                                                                                [
                                                                                                                                                                                    [
                                                                                                                                                                                        [
                                                                                                                                                                                            [
                                                                                                                                                                                                [
                                                                                                                                                                                                    [
                                                                                                                                                                                                        [
                                                                                                                                                                                                            [
                                                                                                                                                                                                                [
                                                                                                                                                                                                                    [
                                                                                                                                                                                                                        [
                                                                                                                                                                                                                            [
                                                                                                                                                                                                                                [
                                                                                                                                                                                                                                    [
                                                                                                                                                                                                                                        [
                                                                                                                                                                                                                                            [
                                                                                                                                                                                                                                                [
                                                                                                                                                                                                                                                    [
                                                                                                                                                                                                                                                        [
                                                                                                                                                                                                                                                            [
                                                                                                                                                                                                                                                                [
                                                                                                                                                                                                                                                                    [
                                                                                                                                                                                                                                                                        [
                                                                                                                                                                                                                                                                            [
                                                                                                                                                                                                                                                                                1
                                                                                                                                                                                                                                                                            ]
                                                                                                                                                                                                                                                                        ]
                                                                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                                                                ]
                                                                                                                                                                                                                                                            ]
                                                                                                                                                                                                                                                        ]
                                                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                                                ]
                                                                                                                                                                                                                                            ]
                                                                                                                                                                                                                                        ]
                                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                                ]
                                                                                                                                                                                                                            ]
                                                                                                                                                                                                                        ]
                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                ]
                                                                                                                                                                                                            ]
                                                                                                                                                                                                        ]
                                                                                                                                                                                                    ]
                                                                                                                                                                                                ]
                                                                                                                                                                                            ]
                                                                                                                                                                                        ]
                                                                                                                                                                                    ]
                                                                                                                                                                                ]
                                                                                                                                                                            ]
                                                                                                                                                                        ]
                                                                                                                                                                    ]
                                                                                                                                                                ]
                                                                                                                                                            ]
                                                                                                                                                        ]
                                                                                                                                                    ]
                                                                                                                                                ]
                                                                                                                                            ]
                                                                                                                                        ]
                                                                                                                                    ]
                                                                                                                                ]
                                                                                                                            ]
                                                                                                                        ]
                                                                                                                    ]
                                                                                                                ]
                                                                                                            ]
                                                                                                        ]
                                                                                                    ]
                                                                                                ]
                                                                                            ]
                                                                                        ]
                                                                                    ]
                                                                                ]
                                                                            ]
                                                                        ]
                                                                    ]
                                                                ]
                                                            ]
                                                        ]
                                                    ]
                                                ]
                                            ]
                                        ]
                                    ]
                                ]
                            ]
                        ]
                    ]
                ]
            ]
        ],
    ],
)
def test_values_orjson_writes_otherwise_take_the_reference(value: object) -> None:
    assert canonical(value) == _REFERENCE.encode(value)


def test_deep_nesting_beyond_orjsons_limit() -> None:
    value: object = 1
    for _ in range(300):
        value = [value]
    assert canonical(value) == _REFERENCE.encode(value)


def test_without_orjson_the_reference_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(module, "_orjson", None)
    value = {"b": [1.5, None, "é"], "a": 1e-5}
    assert canonical(value) == _REFERENCE.encode(value)
