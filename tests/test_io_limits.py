"""The record bounds' check: the path-free first pass answers as the walk that names fields.

:func:`dissensus.io.limits.check_record` sizes a record without building field paths and
walks it again with paths only when a bound is crossed; both must agree with the
definition (:func:`~dissensus.io.limits.first_overrun` over the record as plain JSON,
after the agent count), whatever the record holds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.io.limits import (
    Limits,
    Overrun,
    _plain,
    _record_sizes,
    _sizes,
    _strings,
    check_record,
    first_overrun,
)
from dissensus.types import AgentOutput, Evidence, Panel

_TEXT = st.text(alphabet="ab c\u00e9", max_size=12)

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | _TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(_JSON)
def test_sizes_are_those_of_the_walk_with_paths(value: Any) -> None:
    lengths = [len(text) for _, text in _strings(value, "")]
    assert _sizes(value) == (sum(lengths), max(lengths, default=0), _count(value))


def _count(value: Any) -> int:
    """The JSON values in ``value``, itself included (the definition, by recursion)."""
    if isinstance(value, dict):
        return 1 + sum(_count(v) for v in value.values())
    if isinstance(value, list | tuple):
        return 1 + sum(_count(v) for v in value)
    return 1


@st.composite
def _panels(draw: st.DrawFn) -> Panel:
    outputs = [
        AgentOutput.model_construct(
            agent=f"a{i}{draw(_TEXT)}",
            decision=draw(st.none() | _TEXT),
            reasoning=draw(_TEXT),
            values=draw(st.none() | st.dictionaries(_TEXT, st.floats(0, 1), max_size=2)),
            confidence=None,
            evidence=draw(
                st.none()
                | st.lists(
                    st.builds(Evidence.model_construct, source=_TEXT, present=st.booleans()),
                    max_size=2,
                )
            ),
            family=draw(st.none() | _TEXT),
            reask=None,
        )
        for i in range(draw(st.integers(1, 5)))
    ]
    meta = draw(st.dictionaries(_TEXT, _JSON, max_size=3))
    return Panel.model_construct(id=draw(_TEXT), meta=meta, outputs=outputs)


@settings(max_examples=300, deadline=None)
@given(
    _panels(),
    st.integers(1, 5),
    st.integers(0, 14),
    st.integers(0, 60),
    st.integers(1, 120),
)
def test_check_record_answers_as_the_definition(
    panel: Panel, max_agents: int, max_field: int, max_total: int, max_values: int
) -> None:
    limits = Limits(
        max_agents=max_agents,
        max_field_chars=max_field,
        max_panel_chars=max_total,
        max_panel_values=max_values,
    )
    expected: Overrun | None
    if len(panel.outputs) > max_agents:
        expected = check_record(panel, limits=limits)
        assert expected is not None and expected.field == "outputs" and expected.count
        return
    expected = first_overrun(panel.model_dump(), limits)
    assert check_record(panel, limits=limits) == expected


@settings(max_examples=300, deadline=None)
@given(_panels(), _JSON)
def test_record_sizes_are_those_of_the_plain_record(panel: Panel, loose: Any) -> None:
    """The sizes taken straight off the record are those of its plain copy, records
    nested in lists and tuples (made plain) or in mappings (kept as they are) included."""
    nested = Panel.model_construct(
        id="n",
        meta={"kept": panel, "json": loose},
        outputs=(*panel.outputs, panel),  # type: ignore[arg-type]
    )
    for record in (panel, nested, [panel, (panel, loose)], loose):
        assert _record_sizes(record) == _sizes(_plain(record))


def test_plain_takes_a_models_fields_and_extras() -> None:
    panel = Panel.model_validate(
        {
            "id": "p",
            "note": "extra text",
            "outputs": [
                {"agent": "a", "decision": "x", "reasoning": "r", "evidence": [{"source": "s"}]},
                {"agent": "b", "decision": "y", "reasoning": "q"},
            ],
        }
    )
    plain = _plain(panel)
    assert plain == panel.model_dump()
    assert plain["note"] == "extra text" and plain["outputs"][0]["evidence"] == [
        {"source": "s", "present": True}
    ]


def test_a_line_of_millions_of_tiny_values_is_refused_on_its_own_with_its_count() -> None:
    """Text bounds alone let a few megabytes of ``[]`` in ``meta`` hold millions of
    values (seconds of work and gigabytes of memory on every read of the panel)."""
    from dissensus.io.jsonl import Reject, parse_line
    from dissensus.io.limits import MAX_PANEL_VALUES

    outputs = json.dumps([{"agent": a, "decision": a, "reasoning": "r"} for a in "ab"])

    def line(items: int) -> str:
        return (
            '{"id":"w","meta":{"x":[' + ",".join(["[]"] * items) + ']},"outputs":' + outputs + "}"
        )

    empty = parse_line(Panel, line(0), file="p.jsonl", line=1)
    assert isinstance(empty, Panel)
    base = _record_sizes(empty)[2]  # the values besides x's items (fields' defaults too)
    fits = parse_line(Panel, line(MAX_PANEL_VALUES - base), file="p.jsonl", line=2)
    assert isinstance(fits, Panel)
    over = parse_line(Panel, line(MAX_PANEL_VALUES - base + 1), file="p.jsonl", line=3)
    assert isinstance(over, Reject), over
    assert over.field == "<values>" and over.line == 3
    assert (
        f"{MAX_PANEL_VALUES + 1} JSON values; at most {MAX_PANEL_VALUES} per record" in over.message
    )
    huge = parse_line(Panel, line(3 * MAX_PANEL_VALUES), file="p.jsonl", line=4)
    assert isinstance(huge, Reject) and huge.field == "<values>"


def test_an_endless_line_is_rejected_unparsed_and_the_lines_after_it_keep_their_numbers(
    tmp_path: Path,
) -> None:
    """A line over MAX_LINE_CHARS is never parsed (tens of megabytes of numbers take
    gigabytes to parse) and is read no further than the bound: the good lines around it
    are decided, numbered as in the file."""
    from dissensus.io.jsonl import Reject
    from dissensus.io.limits import MAX_LINE_CHARS
    from dissensus.pipeline.batch import numbered_panels

    good = json.dumps(
        {"id": "g", "outputs": [{"agent": a, "decision": a, "reasoning": "r"} for a in "ab"]}
    )
    endless = '{"id":"x","meta":{"k":[' + "0," * (MAX_LINE_CHARS // 2) + "0]}}"
    path = tmp_path / "p.jsonl"
    path.write_text(f"{good}\n{endless}\n{good}\n{'[' * (MAX_LINE_CHARS + 9)}", encoding="utf-8")
    got = list(numbered_panels(str(path), None))
    assert [n for _, n in got] == [1, 2, 3, 4]
    assert isinstance(got[0][0], Panel) and isinstance(got[2][0], Panel)
    for reject, _ in (got[1], got[3]):
        assert isinstance(reject, Reject) and reject.field == "<line>", reject
        assert f"at most {MAX_LINE_CHARS} per line" in reject.message
        assert len(reject.raw) <= 200
