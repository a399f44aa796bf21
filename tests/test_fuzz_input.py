"""Fuzzing the input boundary: random bytes, JSON values and Unicode.

Properties:

* the JSONL reader turns any line into a model or a :class:`Reject`, never an
  exception, and a valid line after a bad one is still read;
* the panel and vote models raise only pydantic's ``ValidationError`` on any JSON
  value, and whatever they accept is representable as canonical JSON (finite numbers,
  UTF-8 text), so the journal can always hold it;
* ``decide`` in-process on a file with a random line between two valid panels exits 0
  or 3 with no traceback, and both valid panels are decided.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from cli_helpers import cli
from dissensus.io.jsonl import Reject, read_models
from dissensus.store.canonical import canonical
from dissensus.types import Panel, VoteCase
from pipeline_cases import panel, write_policy

GOOD = json.dumps(panel("good", ["1", "1"], swap=["1", "1"]))

floats = st.floats(allow_nan=True, allow_infinity=True)
scalars = st.none() | st.booleans() | st.integers() | floats | st.text()
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


def _panel_like() -> st.SearchStrategy[dict[str, Any]]:
    output = st.fixed_dictionaries(
        {"agent": st.text(max_size=5), "decision": scalars, "reasoning": st.text(max_size=30)},
        optional={"values": st.dictionaries(st.text(max_size=4), floats, max_size=3), "confidence": floats,
                  "evidence": st.lists(st.fixed_dictionaries({"source": st.text(max_size=4), "present": scalars}), max_size=2),
                  "extra": json_values},
    )  # fmt: skip
    return st.fixed_dictionaries(
        {"id": scalars, "outputs": st.lists(output, max_size=4)}, optional={"meta": json_values}
    )


def _vote_like() -> st.SearchStrategy[dict[str, Any]]:
    vote = st.fixed_dictionaries(
        {
            "agent": st.text(max_size=4),
            "answer": scalars,
            "evidence_source": st.text(max_size=4),
            "evidence_present": scalars,
        },
        optional={"confidence": floats, "family": scalars},
    )
    return st.fixed_dictionaries(
        {"id": scalars, "votes": st.lists(vote, max_size=4)},
        optional={"gold": scalars, "meta": json_values},
    )


def _lines(raw: bytes) -> list[str]:
    # As a file is read: UTF-8 with surrogateescape, universal newlines.
    text = raw.decode("utf-8", "surrogateescape").replace("\r\n", "\n").replace("\r", "\n")
    return [line + "\n" for line in text.split("\n")]


@given(st.binary(max_size=200))
def test_reader_never_raises_on_random_bytes(raw: bytes) -> None:
    lines = [GOOD + "\n", *_lines(raw), GOOD + "\n"]
    items = list(read_models(Panel, lines, file="fuzz"))
    assert all(isinstance(i, Panel | Reject) for i in items)
    assert isinstance(items[0], Panel) and isinstance(items[-1], Panel)
    for item in items:
        if isinstance(item, Panel):
            canonical(item.model_dump(mode="json"))  # the journal can hold it


@given(json_values | _panel_like())
def test_reader_never_raises_on_random_json(value: Any) -> None:
    text = json.dumps(value, allow_nan=True)
    items = list(read_models(Panel, [GOOD, text, GOOD], file="fuzz"))
    assert len(items) == 3 and isinstance(items[0], Panel) and isinstance(items[2], Panel)
    if isinstance(items[1], Panel):
        canonical(items[1].model_dump(mode="json"))


@given(st.text(max_size=60))
def test_reader_never_raises_on_random_unicode(text: str) -> None:
    items = list(
        read_models(
            VoteCase, [text.replace("\n", " ") or " ", '{"id": 1, "votes": []}'], file="fuzz"
        )
    )
    assert all(isinstance(i, VoteCase | Reject) for i in items)


def _finite_everywhere(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite_everywhere(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite_everywhere(v) for v in value)
    return True


@given(_panel_like())
def test_panel_model_accepts_only_what_the_journal_can_hold(data: dict[str, Any]) -> None:
    try:
        p = Panel.model_validate(data)
    except ValidationError:
        return
    dumped = p.model_dump(mode="json")
    assert _finite_everywhere(dumped)
    canonical(dumped).encode("utf-8")


@given(_vote_like())
def test_vote_model_accepts_only_what_the_journal_can_hold(data: dict[str, Any]) -> None:
    try:
        case = VoteCase.model_validate(data)
    except ValidationError:
        return
    assert all(isinstance(v.evidence_present, bool) for v in case.votes)
    canonical(case.model_dump(mode="json")).encode("utf-8")


@settings(max_examples=15)
@given(st.binary(max_size=120) | json_values.map(lambda v: json.dumps(v, allow_nan=True).encode()))
def test_decide_decides_the_valid_lines_around_a_random_one(
    tmp_path_factory: Any, line: bytes
) -> None:
    root = tmp_path_factory.mktemp("fuzz")
    inp: Path = root / "in.jsonl"
    one = json.dumps(panel("first", ["1", "1"], swap=["1", "1"]))
    two = json.dumps(panel("second", ["1", "1"], swap=["1", "1"]))
    inp.write_bytes(
        one.encode()
        + b"\n"
        + line.replace(b"\n", b" ").replace(b"\r", b" ")
        + b"\n"
        + two.encode()
        + b"\n"
    )
    pol = write_policy(root / "p.yaml")
    res = cli("decide", inp, "--policy", pol, "--journal", root / "j.sqlite", "--json")
    assert res.code in (0, 3), res.err
    assert "Traceback" not in res.err
    ids = [json.loads(x)["id"] for x in res.out.splitlines()]
    assert ids[0] == "first" and ids[-1] == "second"
