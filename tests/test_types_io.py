"""Shared models and the JSONL reader: validation, rejects with line and field."""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from dissensus.io.jsonl import Reject, RejectSink, read_models
from dissensus.types import AgentOutput, Panel, Usage, Vote, VoteCase, _walk, find_unrepresentable


def _panel(**over: object) -> dict[str, object]:
    base: dict[str, object] = {
        "id": 7,
        "meta": {"risk": "high"},
        "outputs": [
            {"agent": "a", "decision": 1, "reasoning": "r1"},
            {"agent": "b", "decision": "1", "reasoning": "r2", "confidence": 0.5},
        ],
    }
    base.update(over)
    return base


def test_panel_normalises_labels_and_ids() -> None:
    panel = Panel.model_validate(_panel())
    assert panel.id == "7"
    assert [o.decision for o in panel.outputs] == ["1", "1"]


def test_abstention_is_allowed() -> None:
    out = AgentOutput(agent="a", decision=None, reasoning="no verdict")
    assert out.decision is None


@pytest.mark.parametrize(
    ("outputs", "needle"),
    [
        ([{"agent": "a", "decision": "x", "reasoning": "r"}], "at least two"),
        ([{"agent": "a", "decision": "x", "reasoning": "r"}] * 2, "duplicate"),
        (
            [
                {"agent": "a", "decision": "x", "reasoning": "r", "values": {"v": float("inf")}},
                {"agent": "b", "decision": "x", "reasoning": "r"},
            ],
            "finite",
        ),
        (
            [
                {"agent": "a", "decision": "x", "reasoning": "r", "confidence": 1.5},
                {"agent": "b", "decision": "x", "reasoning": "r"},
            ],
            "confidence",
        ),
    ],
)
def test_panel_rejects_bad_outputs(outputs: list[dict[str, object]], needle: str) -> None:
    with pytest.raises(ValidationError, match=needle):
        Panel.model_validate(_panel(outputs=outputs))


def test_vote_case_needs_two_voters() -> None:
    vote = {"agent": "a", "answer": "x", "evidence_source": "idx", "evidence_present": True}
    with pytest.raises(ValidationError, match="two voters"):
        VoteCase.model_validate({"id": 1, "votes": [vote]})
    with pytest.raises(ValidationError, match="confidence"):
        Vote.model_validate({**vote, "confidence": float("nan")})


def test_reader_reports_line_and_field_and_keeps_good_lines() -> None:
    lines = [
        json.dumps(_panel()),
        "{not json",
        "",
        json.dumps(
            _panel(
                outputs=[
                    {"agent": "a", "decision": "x"},
                    {"agent": "b", "decision": "y", "reasoning": "r"},
                ]
            )
        ),
        "[1, 2]",
        json.dumps(_panel(id="last")),
    ]
    results = list(read_models(Panel, lines, file="p.jsonl"))
    good = [r for r in results if isinstance(r, Panel)]
    bad = [r for r in results if isinstance(r, Reject)]
    assert [p.id for p in good] == ["7", "last"]
    assert [(r.line, r.field) for r in bad] == [
        (2, "<json>"),
        (4, "outputs.0.reasoning"),
        (5, "<root>"),
    ]
    assert bad[0].describe().startswith("p.jsonl:2:")


def test_reject_sink_writes_file(tmp_path: object) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "rejects.jsonl"
    err = io.StringIO()
    with RejectSink(path, stderr=err) as sink:
        sink.add(Reject(file="f", line=3, field="id", message="missing"))
    assert sink.count == 1
    assert "f:3" in err.getvalue()
    assert json.loads(path.read_text())["line"] == 3


@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)), max_size=20))
def test_usage_add_is_a_sum(pairs: list[tuple[int, int]]) -> None:
    total = Usage()
    for p, c in pairs:
        total.add(Usage(calls=1, attempts=1, prompt_tokens=p, completion_tokens=c))
    assert total.calls == len(pairs)
    assert total.total_tokens == sum(p + c for p, c in pairs)


def test_invalid_utf8_line_is_rejected_alone(tmp_path: object) -> None:
    from pathlib import Path

    from dissensus.io.jsonl import open_text

    path = Path(str(tmp_path)) / "mixed.jsonl"
    good = json.dumps(_panel()).encode()
    path.write_bytes(good + b"\n" + b'{"id": "\xff\xfe"}\n' + good + b"\n")
    with open_text(path) as handle:
        results = list(read_models(Panel, handle, file="mixed.jsonl"))
    assert [type(r).__name__ for r in results] == ["Panel", "Reject", "Panel"]
    bad = results[1]
    assert isinstance(bad, Reject)
    assert (bad.line, bad.field) == (2, "<encoding>")


def test_empty_labels_are_rejected_not_counted() -> None:
    with pytest.raises(ValidationError, match="answer"):
        Vote.model_validate(
            {"agent": "a", "answer": "", "evidence_source": "i", "evidence_present": True}
        )
    with pytest.raises(ValidationError, match="decision"):
        AgentOutput.model_validate({"agent": "a", "decision": "", "reasoning": "r"})


_text = st.text(alphabet=st.characters(blacklist_categories=()), max_size=6)
_scalars = st.none() | st.booleans() | st.integers() | st.floats() | _text
_json_like = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(_text | st.integers(), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(_json_like)
def test_unrepresentable_fast_path_gives_the_walks_verdict(value: object) -> None:
    """The encoder's shortcut never changes what the walk would have said."""
    assert find_unrepresentable(value) == _walk(value, "")


@pytest.mark.parametrize("value", [b"x", bytearray(b"x"), object(), {1, 2}])
def test_a_value_json_has_no_form_for_is_refused_where_it_is(value: object) -> None:
    """Bytes (or any object) in a panel's meta: refused when the panel is validated, naming
    the path, not later by the journal's serialisation."""
    assert find_unrepresentable({"a": [1, {"k": value}]}) == (
        f"a.1.k: is not a JSON value (a {type(value).__name__})"
    )
    with pytest.raises(ValidationError, match="is not a JSON value"):
        Panel.model_validate(
            {
                "id": "p",
                "meta": {"k": value},
                "outputs": [
                    {"agent": "a", "decision": "1", "reasoning": "r"},
                    {"agent": "b", "decision": "2", "reasoning": "r"},
                ],
            }
        )


_WRONG_NUMBERS = ["0.5", "1", True, False]


@pytest.mark.parametrize("value", _WRONG_NUMBERS)
def test_confidence_and_values_are_strict_numbers(value: object) -> None:
    """``"0.5"`` and ``true`` are values of the wrong type, in every model and from JSON
    as from Python (``docs/cli.md``, Input lines)."""
    out = {"agent": "a", "decision": "x", "reasoning": "r"}
    vote = {"agent": "a", "answer": "x", "evidence_source": "s", "evidence_present": True}
    for model, doc, field in (
        (AgentOutput, {**out, "confidence": value}, "confidence"),
        (AgentOutput, {**out, "values": {"v": value}}, "values.v"),
        (Vote, {**vote, "confidence": value}, "confidence"),
    ):
        for validate in (
            model.model_validate,
            lambda d, m=model: m.model_validate_json(json.dumps(d)),
        ):
            with pytest.raises(ValidationError) as info:
                validate(doc)
            assert ".".join(map(str, info.value.errors()[0]["loc"])) == field


@settings(max_examples=200)
@given(
    confidence=st.integers(0, 1) | st.floats(0, 1),
    weight=st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False),
)
def test_numbers_of_either_json_kind_are_accepted_as_floats(
    confidence: float, weight: float
) -> None:
    doc = {"agent": "a", "decision": "x", "reasoning": "r", "confidence": confidence}
    doc["values"] = {"v": weight}
    for out in (AgentOutput.model_validate(doc), AgentOutput.model_validate_json(json.dumps(doc))):
        assert out.confidence == confidence and type(out.confidence) is float
        assert out.values == {"v": weight} and type(out.values["v"]) is float


@settings(max_examples=300)
@given(label=st.floats(allow_nan=False, allow_infinity=False) | st.integers())
def test_a_number_label_becomes_a_string_that_reads_back_as_it(label: float) -> None:
    """Numbers become strings (``docs/guard.md``): an integral number its integer, any
    other finite float its shortest round-trip form; the same from JSON and Python."""
    vote = {"agent": "a", "answer": label, "evidence_source": "s", "evidence_present": True}
    doc = {"id": label, "votes": [vote, {**vote, "agent": "b"}], "gold": label}
    for case in (VoteCase.model_validate(doc), VoteCase.model_validate_json(json.dumps(doc))):
        assert case.id == case.gold == case.votes[0].answer
        if isinstance(label, float) and not label.is_integer():
            assert case.id == repr(label) and float(case.id) == label
        else:
            assert case.id == str(int(label))


def test_a_non_finite_label_is_refused() -> None:
    with pytest.raises(ValidationError, match="id"):
        Panel.model_validate(_panel(id=float("nan")))
