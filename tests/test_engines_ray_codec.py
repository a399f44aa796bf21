"""What a Ray worker hands back for a block, decoded by the driver (no Ray instance needed).

A worker sends each event's payload once, as its canonical text; the driver parses it
back for the journal's in-memory events. The parsed payload must be the same JSON value
(its canonical text unchanged: integers beyond 64 bits stay exact, lone surrogates
survive), records and rejects must come back equal (a record sent as the payload of its
``case.record`` event too), and the driver's collector must be left as it was found.
"""

from __future__ import annotations

import gc
import pickle
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from dissensus.canonical import canonical
from dissensus.engines.ray.codec import _decoded, _payload
from dissensus.engines.ray.messages import _BlockResult, _CaseResult
from dissensus.errors import InputError
from dissensus.io.jsonl import Reject
from dissensus.pipeline.records import CaseRecord

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(st.characters(exclude_categories=()), max_size=12),  # lone surrogates too
)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)
_PAYLOADS = st.dictionaries(st.text(max_size=6), _JSON, max_size=5)


@given(_PAYLOADS)
@example({"big": 10**30, "lone": "\ud800", "float": 0.1})
def test_a_payload_parsed_from_its_canonical_text_has_the_same_text(
    payload: dict[str, Any],
) -> None:
    text = canonical(payload)
    parsed = _payload(text)
    assert canonical(parsed) == text
    assert parsed == payload


def _record(line: int) -> CaseRecord:
    return CaseRecord(
        id=f"p{line}",
        line=line,
        action="escalate",
        decision=None,
        auto=False,
        reason="no agreement",
        state="CA",
        route="auto",
        rule="default-CA",
        path=["read:CA"],
        basis=None,
        suggestion="1",
        review_id=f"r.{line}",
    )


@given(st.lists(_PAYLOADS, min_size=1, max_size=4), st.booleans())
def test_a_block_decodes_to_the_records_events_and_rejects_sent(
    payloads: list[dict[str, Any]], collecting: bool
) -> None:
    record = _record(3)
    reject = Reject(file="in.jsonl", line=2, field="outputs", message="too few outputs")
    events = [(f"case/3/s{i}", "case.steps", "3", canonical(p)) for i, p in enumerate(payloads)]
    sent = _BlockResult(
        block=7,
        cases=[
            _CaseResult(2, None, reject.model_dump(mode="json"), []),
            _CaseResult(3, record.model_dump(mode="json"), None, events),
        ],
        rss_mb=100.0,
        cpu_s=0.5,
    )
    was = gc.isenabled()
    (gc.enable if collecting else gc.disable)()
    try:
        result, outcomes, decode_s = _decoded(pickle.dumps(sent))
        index, rss_mb, cpu_s = result.block, result.rss_mb, result.cpu_s
        assert gc.isenabled() is collecting
    finally:
        (gc.enable if was else gc.disable)()
    assert (index, rss_mb, cpu_s) == (7, 100.0, 0.5) and decode_s >= 0.0
    assert [o.line for o in outcomes] == [2, 3]
    assert outcomes[0].reject == reject and outcomes[0].record is None
    assert outcomes[1].record == record
    got = outcomes[1].events
    assert [(e.key, e.type, e.case, e.text) for e in got] == events
    assert [e.payload for e in got] == payloads


def test_a_record_sent_as_its_events_payload_decodes_to_that_record() -> None:
    record = _record(4)
    text = canonical(record.model_dump(mode="json"))
    events = [("case/4/s0", "case.steps", "4", "{}"), ("case/4/record", "case.record", "4", text)]
    sent = _BlockResult(block=0, cases=[_CaseResult(4, None, None, events)], rss_mb=1.0, cpu_s=0.1)
    _, outcomes, _ = _decoded(pickle.dumps(sent))
    assert outcomes[0].record == record
    assert [e.text for e in outcomes[0].events] == ["{}", text]


def test_a_case_with_neither_record_nor_reject_is_refused() -> None:
    events = [("case/5/s0", "case.steps", "5", "{}")]
    sent = _BlockResult(block=0, cases=[_CaseResult(5, None, None, events)], rss_mb=1.0, cpu_s=0.1)
    with pytest.raises(InputError, match="neither a record nor a reject for line 5"):
        _decoded(pickle.dumps(sent))
