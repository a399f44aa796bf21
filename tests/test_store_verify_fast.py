"""Verification reads a canonical payload once and hashes its stored text: the same
verdict, problem for problem, as reading every payload with the standard library's
strict reader and hashing the event's object (the definition), whatever the rows hold."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.canonical import canonical, canonical_value
from dissensus.store import GENESIS, chain
from dissensus.store.canonical import chain_hash
from dissensus.store.chain import check_chain, strict_loads
from dissensus.store.events import EventRow, RunHead

_text = st.text(st.characters(codec="utf-8"), max_size=8)
_floats = st.floats(allow_nan=False, allow_infinity=False)
_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**63 - 2, max_value=2**70)
    | _floats
    | st.sampled_from([1e16, 1e-5, -0.0, 5e-324, 1e22])
    | _text
)
_json = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=20,
)


def _texts(value: Any) -> list[str]:
    """Texts a row could hold for ``value``: canonical, and the forms an edit leaves."""
    text = canonical(value)
    out = [
        text,
        json.dumps(value),  # spaces, ASCII escapes
        json.dumps(value, ensure_ascii=False, sort_keys=True, indent=1),
        json.dumps(value, ensure_ascii=False, separators=(",", ":")),  # keys unsorted
        text + " ",
        text[:-1],
        "[" * 260 + "]" * 260,
        "NaN",
        '{"a":1,"a":1}',
        '{"a":1e+16}',
        '{"a":1E16}',
        '"\\ud800"',
        "",
    ]
    if text.startswith("{") and text != "{}":
        out.append('{"a":0,' + text[1:])  # a duplicate when the value holds "a"
    return out


def _reference(
    prev: str, row: EventRow, seq: int, key: str, text: str, payload: Any
) -> str:  # the definition: the event's object, serialised whole
    body = {
        "run": row["run_id"],
        "seq": seq,
        "key": key,
        "type": row["type"],
        "case": row["case_ref"],
        "at": row["at"],
        "payload": payload,
    }
    return chain_hash(prev, body)


def _checked(rows: list[EventRow], head: RunHead, *, reference: bool) -> Any:
    try:
        if not reference:
            found = check_chain("r", rows, head)
        else:
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(chain, "canonical_value", lambda text: (False, None))
                patch.setattr(chain._Hashes, "__call__", lambda self, *a: _reference(*a))
                found = check_chain("r", rows, head)
    except Exception as exc:  # a column no JSON writer takes: the same error either way
        return type(exc), str(exc)
    return (
        found.problems,
        found.more,
        found.n_events,
        found.head_hash,
        found.finished,
        found.seals,
        found.mismatched_seals,
        found.first_broken,
    )


def _row(seq: int, prev: str, payload_text: str, **cols: Any) -> EventRow:
    row: dict[str, Any] = {
        "run_id": "r",
        "seq": seq,
        "key": f"k{seq}",
        "type": "e",
        "case_ref": str(seq % 2) if seq % 3 else None,
        "at": "2026-01-01T00:00:00.000000Z",
        "payload": payload_text,
        "prev_hash": prev,
    }
    row.update(cols)
    try:
        payload = json.loads(row["payload"])
        body = {
            "run": row["run_id"],
            "seq": seq,
            "key": row["key"],
            "type": row["type"],
            "case": row["case_ref"],
            "at": row["at"],
            "payload": payload,
        }
        row["hash"] = chain_hash(prev, body)  # chained on what the row holds
    except (ValueError, TypeError, RecursionError):
        row["hash"] = "0" * 64
    return row  # type: ignore[return-value]


_edits = st.sampled_from(
    [
        {},
        {"type": 7},
        {"type": b"e"},
        {"at": 1.5},
        {"case_ref": 3},
        {"case_ref": "a\u2028\x00"},
        {"run_id": "other"},
        {"key": "k\U0001f600"},
        {"type": "run.finished"},
        {"type": "run.sealed"},
    ]
)


@settings(max_examples=80, deadline=None)
@given(
    values=st.lists(_json, min_size=1, max_size=4),
    choices=st.lists(st.integers(0, 20), min_size=4, max_size=4),
    edits=st.lists(_edits, min_size=4, max_size=4),
)
def test_the_verdict_is_the_definitions_row_for_row(
    values: list[Any], choices: list[int], edits: list[dict[str, Any]]
) -> None:
    rows: list[EventRow] = []
    prev = GENESIS
    for seq, (value, choice, edit) in enumerate(zip(values, choices, edits, strict=False)):
        forms = _texts(value)
        row = _row(seq, prev, forms[choice % len(forms)], **edit)
        rows.append(row)
        prev = str(row["hash"])
    head = RunHead(n_events=len(rows), head_hash=prev)
    assert _checked(rows, head, reference=False) == _checked(rows, head, reference=True)


@settings(max_examples=150, deadline=None)
@given(value=_json)
def test_a_vouched_text_is_canonical_and_reads_as_the_strict_reader_reads_it(value: Any) -> None:
    for text in _texts(value):
        vouched, read = canonical_value(text)
        if vouched:
            assert strict_loads(text) == read
            assert canonical(read) == text
    vouched, read = canonical_value(canonical(value))
    if vouched:  # floats written with an exponent are left to the reference
        assert read == value


@pytest.mark.parametrize(
    "text",
    ['{"a":1,"a":1}', '{"b":1,"a":2}', '{"a": 1}', '{"a":1e+16}', '{"a":0.00001}', "NaN", "[1,]"],
)
def test_texts_that_are_not_canonical_are_not_vouched_for(text: str) -> None:
    assert canonical_value(text) == (False, None)
    assert canonical_value(b"{}") == (False, None)
