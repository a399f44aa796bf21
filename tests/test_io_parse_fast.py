"""The fast validated path of ``parse_line`` accepts and rejects exactly as the reference.

``parse_line`` validates panels and vote cases with pydantic's ``model_validate_json``
first and falls back to the reference path (``json.loads``, checks, ``model_validate``)
on any failure. Property: for every line, the result equals the reference path's
result: the same model (same values) or the same reject (file, line, field, message).
Lines are valid panels and vote cases with random values put in random places and
text-level damage (truncation, duplicated keys, non-finite numbers, lone surrogate
escapes, control characters, deep nesting, big integers).
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.io.jsonl import MAX_DEPTH, Reject, _parse_reference, parse_line
from dissensus.types import Panel, VoteCase

# Examples in the suite; the full count under DISSENSUS_SOAK=1 (`make test-soak`).
SOAK = os.environ.get("DISSENSUS_SOAK") == "1"

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(2**63, 2**80)
    | st.floats()
    | st.text(max_size=6)
    | st.sampled_from(["", "1", "a\u00e9", "x\ty", "\ud800", "NaN", "1e999"])
)
_VALUES = st.recursive(
    _SCALARS,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
    max_leaves=8,
)
_TEXT_DAMAGE = st.sampled_from(
    [
        None,
        ("truncate",),
        ("append", " x"),
        ("append", "  "),
        ("replace", '"1"', "NaN"),
        ("replace", '"1"', "-Infinity"),
        ("replace", '"1"', "1e999"),
        ("replace", '"1"', "1" + "0" * 400 + ".0"),
        ("replace", '"1"', "123456789012345678901234567890"),
        ("replace", '"1"', "1.0"),
        ("replace", '"1"', "true"),
        ("replace", '"x"', '"\\ud800"'),
        ("replace", '"x"', '"\\ud83d\\ude00"'),
        ("replace", '"x"', '"a\tb"'),
        ("replace", '"x"', '"\\u00e9"'),
        ("replace", '"x"', "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)),
        ("replace", '"x"', "[" * 40 + "]" * 40),
        ("replace", '{"agent"', '{"agent": "dup", "agent"'),
        ("replace", '"id": ', '"id": "first", "id": '),
        ("replace", "true", "1"),
        ("prefix", "\ufeff"),
    ]
)


def _panel() -> dict[str, Any]:
    return {
        "id": "p",
        "meta": {"k": "x", "n": 1},
        "outputs": [
            {"agent": "a", "decision": "1", "reasoning": "x", "confidence": 0.5},
            {
                "agent": "b",
                "decision": "2",
                "reasoning": "y",
                "values": {"safety": 0.5},
                "evidence": [{"source": "s", "present": True}],
                "reask": {"decision": "1", "reasoning": "z", "perturbation": "swap_order"},
            },
        ],
    }


def _votes() -> dict[str, Any]:
    return {
        "id": "c",
        "gold": "1",
        "votes": [
            {"agent": "a", "answer": "1", "evidence_source": "x", "evidence_present": True},
            {
                "agent": "b",
                "answer": "2",
                "evidence_source": "parametric",
                "evidence_present": False,
                "confidence": 0.7,
                "family": "f",
            },
        ],
    }


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


def _put(doc: Any, path: tuple[Any, ...], value: Any) -> None:
    for key in path[:-1]:
        doc = doc[key]
    doc[path[-1]] = value


def _same(line: str, model: type[Panel] | type[VoteCase], number: int) -> None:
    got = parse_line(model, line, file="in.jsonl", line=number)
    raw = line.rstrip("\r\n")
    if number == 1 and raw.startswith("\ufeff"):
        raw = raw[1:]
    want = _parse_reference(model, raw, file="in.jsonl", line=number)
    assert type(got) is type(want)
    if isinstance(want, Reject):
        assert got == want
    else:
        assert got.model_dump(mode="python") == want.model_dump(mode="python")
        assert repr(got) == repr(want)  # same value types too (1 vs 1.0, str vs int)


@settings(max_examples=400 if SOAK else 200, deadline=None, derandomize=True)
@given(
    which=st.sampled_from(["panel", "votes"]),
    data=st.data(),
    damage=_TEXT_DAMAGE,
    number=st.sampled_from([1, 7]),
)
def test_fast_path_equals_reference(
    which: str, data: st.DataObject, damage: Any, number: int
) -> None:
    doc = _panel() if which == "panel" else _votes()
    model: type[Panel] | type[VoteCase] = Panel if which == "panel" else VoteCase
    paths = _paths(doc)
    for _ in range(data.draw(st.integers(0, 2))):
        path = data.draw(st.sampled_from(paths))
        value = data.draw(_VALUES)
        with contextlib.suppress(KeyError, IndexError, TypeError):
            _put(doc, path, value)  # unless the path vanished under an earlier replacement
    if data.draw(st.booleans()):
        doc[data.draw(st.sampled_from(["extra", "meta"]))] = data.draw(_VALUES)
    # As read from a file (UTF-8, surrogateescape): a raw surrogate becomes undecodable bytes.
    line = (
        json.dumps(doc, ensure_ascii=data.draw(st.booleans()))
        .encode("utf-8", "surrogatepass")
        .decode("utf-8", "surrogateescape")
    )
    if damage is not None:
        if damage[0] == "truncate":
            line = line[: data.draw(st.integers(0, max(0, len(line) - 1)))]
        elif damage[0] == "append":
            line += damage[1]
        elif damage[0] == "prefix":
            line = damage[1] + line
        else:
            line = line.replace(damage[1], damage[2], 1)
    _same(line + "\n", model, number)


def test_fast_path_accepts_ordinary_panels() -> None:
    line = json.dumps(_panel())
    got = parse_line(Panel, line, file="f", line=3)
    assert isinstance(got, Panel) and got.outputs[1].values == {"safety": 0.5}


def test_rejects_name_the_same_field_as_before() -> None:
    # Lines the fast path refuses get the reference path's reject, word for word.
    cases = {
        '{"id": "p", "outputs": [{"agent": "a", "decision": "1", "reasoning": "x", '
        '"confidence": NaN}, {"agent": "b", "decision": "2", "reasoning": "y"}]}': (
            "outputs.0.confidence",
            "must be a finite number (got nan)",
        ),
        '{"id": "p", "outputs": [{"agent": "a", "decision": "1", "reasoning": "x"}]}': (
            "outputs",
            "a panel needs at least two agents (got 1)",
        ),
        '{"id": "p", "outputs": []': ("<json>", "invalid JSON: Expecting ',' delimiter"),
        "[1, 2]": ("<root>", "expected a JSON object"),
    }
    for line, (field, message) in cases.items():
        got = parse_line(Panel, line, file="f.jsonl", line=4)
        assert isinstance(got, Reject)
        assert (got.file, got.line, got.field, got.message) == ("f.jsonl", 4, field, message)
