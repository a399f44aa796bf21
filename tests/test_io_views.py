"""The route path's msgspec views agree with the models, and route the same.

Properties: the views carry exactly the models' fields; whatever the view tier accepts,
the reference path accepts with the same values (and types); a line the tier does not
accept gets the reference's panel or reject; and ``route_stream`` over views writes the
same records as over the models. Plus the cases each model check must refuse.
"""

from __future__ import annotations

import io
import json
import os
from typing import Any

import msgspec
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.io.jsonl import Reject, _parse_reference, read_models
from dissensus.io.views import (
    VIEW_FIELDS,
    EvidenceView,
    OutputView,
    PanelView,
    ReaskView,
    decode_panel_view,
    parse_panel_view,
    read_panel_views,
)
from dissensus.states import RuleSet, Thresholds, callable_backend
from dissensus.states.lexical import TfidfBackend
from dissensus.states.stream import route_stream
from dissensus.types import AgentOutput, Evidence, Panel, Reask
from panel_lines import damaged_lines, panel_doc, put

# Examples in the suite; the full count under DISSENSUS_SOAK=1 (`make test-soak`).
SOAK = os.environ.get("DISSENSUS_SOAK") == "1"


def _plain(value: Any) -> str:
    """Values with their JSON types (``1``, ``1.0`` and ``true`` differ), key order aside."""
    if isinstance(value, Panel):
        value = value.model_dump()
    return json.dumps(msgspec.to_builtins(value), sort_keys=True)


def test_the_views_carry_the_models_fields() -> None:
    # A field added to a model must be added to its view (else such lines take the slow tier).
    pairs = {PanelView: Panel, OutputView: AgentOutput, EvidenceView: Evidence, ReaskView: Reask}
    for view, model in pairs.items():
        assert set(VIEW_FIELDS[view]) == set(model.model_fields), view.__name__


@settings(max_examples=600 if SOAK else 150, deadline=None, derandomize=True)
@given(line=damaged_lines())
def test_whatever_the_views_accept_the_reference_accepts_alike(line: str) -> None:
    want = _parse_reference(Panel, line, file="f", line=2)
    got = parse_panel_view(line, file="f", line=2)
    if isinstance(want, Reject):
        assert got == want  # file, line, field and message: the reference's
    else:
        assert not isinstance(got, Reject)
        assert _plain(got) == _plain(want)
    if "\\ud" in line.lower():
        return  # surrogate escapes never reach the view tier
    view = decode_panel_view(line)
    if view is not None:
        assert isinstance(want, Panel), want
        assert want.model_extra == {}
        assert all(o.model_extra == {} for o in want.outputs)
        assert _plain(view) == _plain(want)


def test_ordinary_panels_are_read_as_views() -> None:
    doc = panel_doc()
    doc["meta"] = {"n": 1, "f": 1.5, "b": True, "z": None, "deep": {"l": [1, 2.0, "x", {}]}}
    doc["outputs"][1]["decision"] = None
    doc["outputs"][0]["confidence"] = 1  # an integer confidence is a float, as in the model
    line = json.dumps(doc)
    view = decode_panel_view(line)
    assert isinstance(view, PanelView)
    want = _parse_reference(Panel, line, file="f", line=1)
    assert isinstance(want, Panel)
    assert _plain(view) == _plain(want)
    assert view.outputs[0].confidence == 1.0 and type(view.outputs[0].confidence) is float


def test_the_views_pass_on_what_only_the_models_handle() -> None:
    cases: list[tuple[tuple[Any, ...], Any]] = [
        (("id",), 17),  # a number label: the models turn it into "17"
        (("outputs", 0, "decision"), 1),
        (("outputs", 0, "note"), "x"),  # an extra field: the models keep it
        (("extra",), 1),
        (("outputs", 0, "confidence"), 1.5),
        (("outputs", 0, "decision"), ""),
        (("outputs", 1, "agent"), "a"),  # duplicate agent id
        (("outputs", 0, "evidence", 0, "present"), "yes"),
        (("outputs", 0, "reask", "other"), 1),
    ]
    for path, value in cases:
        doc = panel_doc()
        put(doc, path, value)
        line = json.dumps(doc)
        assert decode_panel_view(line) is None, path
        got = parse_panel_view(line, file="f", line=3)
        assert got == _parse_reference(Panel, line, file="f", line=3), path
    numbers = ("NaN", "Infinity", "-Infinity", "1e999", "1" + "0" * 400 + ".0")
    for text in numbers:
        line = json.dumps(panel_doc()).replace('"n": 1', f'"n": {text}')
        assert decode_panel_view(line) is None, text
        assert isinstance(parse_panel_view(line, file="f", line=1), Reject), text
    for depth in (70, 100_000):  # beyond MAX_DEPTH; beyond msgspec's own recursion limit
        line = json.dumps(panel_doc()).replace('"n": 1', '"n": ' + "[" * depth + "]" * depth)
        assert decode_panel_view(line) is None, depth
        reject = parse_panel_view(line, file="f", line=4)
        assert isinstance(reject, Reject) and reject.field == "<depth>", depth


def test_a_byte_order_mark_and_line_ends_are_read_as_the_models_read_them() -> None:
    line = json.dumps(panel_doc())
    lines = ["\ufeff" + line + "\r\n", "\n", "  \n", line + "\n", "{oops\n"]
    got = list(read_panel_views(lines, file="f"))
    want = list(read_models(Panel, lines, file="f"))
    assert len(got) == len(want) == 3
    assert isinstance(got[0], PanelView) and isinstance(got[1], PanelView)
    assert [_plain(g) for g in got[:2]] == [_plain(w) for w in want[:2]]
    assert got[2] == want[2] and isinstance(got[2], Reject) and got[2].line == 5


TRACES = st.sampled_from(["", " ", "alpha beta", "beta gamma", "alpha beta", "delta x"])


@st.composite
def _panel_lines(draw: st.DrawFn) -> list[str]:
    lines = []
    for i in range(draw(st.integers(1, 12))):
        n = draw(st.integers(2, 5))
        outputs = [
            {
                "agent": f"a{j}",
                "decision": draw(st.sampled_from(["A", "B", None, 1])),
                "reasoning": draw(TRACES),
            }
            for j in range(n)
        ]
        meta = {"risk": draw(st.sampled_from(["high", "low", 1, True]))}
        doc: dict[str, Any] = {"id": f"p{i}", "meta": meta, "outputs": outputs}
        if draw(st.booleans()):
            doc["outputs"][0]["values"] = {"safety": 0.5}
        lines.append(json.dumps(doc) + "\n")
    return lines


RULES = {
    "rules": [
        {"id": "risky", "condition": 'meta.risk == "high" and state != "CA"', "action": "escalate"},
        {"id": "profiles", "condition": "value_profiles >= 1", "action": "deliberate"},
    ],
    "superiority": [["risky", "profiles"]],
}


def _letters(texts: list[str]) -> np.ndarray:
    """Letter counts: an embedding for the vectorised reader."""
    rows = np.zeros((len(texts), 26), dtype=np.float32)
    for i, text in enumerate(texts):
        for ch in text:
            if "a" <= ch <= "z":
                rows[i, ord(ch) - 97] += 1.0
    return rows


BACKENDS = {"tfidf": TfidfBackend(), "letters": callable_backend(_letters, name="letters")}


@settings(max_examples=60, deadline=None, derandomize=True)
@given(lines=_panel_lines(), keep_rows=st.integers(0, 5), backend=st.sampled_from(sorted(BACKENDS)))
def test_route_over_views_writes_the_records_of_route_over_models(
    lines: list[str], keep_rows: int, backend: str
) -> None:
    ruleset = RuleSet.from_dict(RULES)
    th = Thresholds(theta_s=0.3)
    outs = []
    tallies = []
    for items in (read_panel_views(lines, file="f"), read_models(Panel, lines, file="f")):
        out = io.StringIO()
        panels = [p for p in items if not isinstance(p, Reject)]
        tallies.append(
            route_stream(panels, BACKENDS[backend], th, ruleset, handle=out, keep_rows=keep_rows)
        )
        outs.append(out.getvalue())
    assert outs[0] == outs[1]
    assert len(outs[0].splitlines()) == len(lines)
    assert tallies[0] == tallies[1]
