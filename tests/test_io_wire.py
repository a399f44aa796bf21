"""The native panel validator (first tier of the JSON fast path) agrees with the models.

Properties: the tier validates exactly the models' fields; whatever it accepts, the
reference path accepts with the same values (same types, same fields set, same extras);
and it accepts ordinary panels, including numeric labels and nested metadata, so the
fast path is actually taken.
"""

from __future__ import annotations

import json
import os
from typing import Any

from hypothesis import given, settings

from dissensus.io.jsonl import Reject, _parse_reference, parse_line
from dissensus.io.wire import WIRE_FIELDS, validate_panel_json
from dissensus.types import Panel
from panel_lines import damaged_lines, panel_doc, put

# Examples in the suite; the full count under DISSENSUS_SOAK=1 (`make test-soak`).
SOAK = os.environ.get("DISSENSUS_SOAK") == "1"


def _same_panel(got: Panel, want: Panel) -> None:
    assert repr(got) == repr(want)  # values and their types (1 vs 1.0 vs True)
    assert got == want
    assert got.model_fields_set == want.model_fields_set
    assert got.model_extra == want.model_extra
    for a, b in zip(got.outputs, want.outputs, strict=True):
        assert a.model_fields_set == b.model_fields_set
        assert a.model_extra == b.model_extra


def test_the_tier_validates_the_models_fields() -> None:
    # A field added to a model must be added to the tier (else it would land in extras).
    for cls, fields in WIRE_FIELDS.items():
        assert fields == frozenset(cls.model_fields), cls.__name__


@settings(max_examples=600 if SOAK else 250, deadline=None, derandomize=True)
@given(line=damaged_lines())
def test_whatever_the_tier_accepts_the_reference_accepts_alike(line: str) -> None:
    through = parse_line(Panel, line, file="f", line=2)
    want = _parse_reference(Panel, line, file="f", line=2)
    if isinstance(want, Reject):
        assert through == want
    else:
        assert isinstance(through, Panel)
        _same_panel(through, want)
    if "\\ud" in line.lower():
        return  # surrogate escapes take the reference path before this tier
    got = validate_panel_json(line)
    if got is not None:
        assert isinstance(want, Panel), want
        _same_panel(got, want)


def test_the_tier_accepts_ordinary_panels() -> None:
    doc = panel_doc()
    doc["id"] = 17
    doc["meta"] = {"n": 1, "f": 1.5, "b": True, "z": None, "deep": {"l": [1, 2.0, "x", {}]}}
    doc["outputs"][0]["decision"] = 1
    doc["outputs"][1]["decision"] = None
    doc["outputs"][1]["note"] = [1, {"k": False}]
    doc["run"] = "r1"
    line = json.dumps(doc)
    got = validate_panel_json(line)
    assert got is not None
    want = _parse_reference(Panel, line, file="f", line=1)
    assert isinstance(want, Panel)
    _same_panel(got, want)
    assert got.id == "17" and got.outputs[0].decision == "1"


def test_a_float_label_becomes_its_string_in_both_tiers() -> None:
    doc = panel_doc()
    doc["id"] = 1.5
    doc["outputs"][0]["decision"] = 2.0
    doc["outputs"][1]["decision"] = 1e-07
    line = json.dumps(doc)
    got = validate_panel_json(line)
    want = _parse_reference(Panel, line, file="f", line=1)
    assert got is not None and isinstance(want, Panel)
    _same_panel(got, want)
    assert (got.id, got.outputs[0].decision, got.outputs[1].decision) == ("1.5", "2", "1e-07")


def test_the_tier_refuses_what_the_models_refuse() -> None:
    base = panel_doc()
    cases: list[tuple[tuple[Any, ...], Any]] = [
        (("outputs", 0, "confidence"), 1.5),
        (("outputs", 0, "values", "safety"), "nan"),
        (("outputs", 0, "decision"), ""),
        (("outputs", 0, "confidence"), "0.5"),  # numbers are strict, as in the models
        (("outputs", 0, "confidence"), True),
        (("outputs", 0, "values", "safety"), "0.5"),
        (("outputs", 0, "values", "safety"), True),
        (("outputs", 1, "agent"), "a"),  # duplicate agent id
        (("outputs",), [base["outputs"][0]]),  # one agent
        (("outputs", 0, "evidence", 0, "present"), "yes"),
        (("outputs", 0, "reask", "other"), 1),  # Reask forbids extras
    ]
    for path, value in cases:
        doc = panel_doc()
        put(doc, path, value)
        assert validate_panel_json(json.dumps(doc)) is None, path
    for text in ("NaN", "Infinity", "-Infinity", "1e999", "1" + "0" * 400 + ".0"):
        line = json.dumps(panel_doc()).replace('"n": 1', f'"n": {text}')
        assert validate_panel_json(line) is None, text
        assert isinstance(parse_line(Panel, line, file="f", line=1), Reject)
