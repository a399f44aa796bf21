"""The driver's side of what a worker hands back: a pickled block decoded into the run
loop's outcomes (:func:`_decoded`), each event's payload parsed once from the canonical
text the journal stores (:func:`_payload`), the collector paused meanwhile."""

from __future__ import annotations

import gc
import json
import time
from typing import TYPE_CHECKING

import msgspec

from dissensus.engines.ray.messages import _BlockResult, _CaseResult
from dissensus.errors import InputError
from dissensus.io.jsonl import Reject
from dissensus.types import JsonObject

if TYPE_CHECKING:
    from dissensus.pipeline.executors import Outcome
    from dissensus.store.journal import NewEvent


_DECODE = msgspec.json.Decoder().decode


def _decoded(raw: bytes) -> tuple[_BlockResult, list[Outcome], float]:
    """A block a worker handed back (a pickled :class:`_BlockResult`), decoded:
    ``(result, outcomes, CPU s this thread spent decoding it)``."""
    import pickle

    start = time.thread_time()
    # The decoded payloads are trees of JSON values, never cycles: the collector's passes
    # over the driver's heap, which so many fresh containers trigger, would cost more
    # than the decoding itself. Paused for the block only (the rest of the run is not).
    collecting = gc.isenabled()
    gc.disable()
    try:
        result: _BlockResult = pickle.loads(raw)
        outcomes = _outcomes(result.cases)
    finally:
        if collecting:
            gc.enable()
    decode = time.thread_time() - start
    return result, outcomes, decode


def _outcomes(cases: list[_CaseResult]) -> list[Outcome]:
    """What a worker decided for each line of a block, as the run loop takes it."""
    from dissensus.pipeline.executors import Outcome
    from dissensus.pipeline.records import CaseRecord
    from dissensus.store.journal import NewEvent

    out: list[Outcome] = []
    for case in cases:
        if case.reject is not None:
            out.append(Outcome(line=case.line, reject=Reject.model_validate(case.reject)))
            continue
        events = [
            NewEvent(type_, _payload(text), key, where, text)
            for key, type_, where, text in case.events
        ]
        record = case.record if case.record is not None else _record_payload(case.line, events)
        out.append(Outcome(line=case.line, record=CaseRecord.model_validate(record), events=events))
    return out


def _record_payload(line: int, events: list[NewEvent]) -> JsonObject:
    """The payload of line ``line``'s record event (a worker sent the record as that)."""
    key = f"case/{line}/record"
    for event in reversed(events):  # the record is the case's last event
        if event.key == key:
            payload: JsonObject = event.payload
            return payload
    raise InputError(f"a worker sent neither a record nor a reject for line {line}")


def _payload(text: str) -> JsonObject:
    """The payload whose canonical text a worker sent (the same values: integers exact)."""
    try:
        value = _DECODE(text)
    except (msgspec.DecodeError, UnicodeEncodeError):  # e.g. a lone surrogate in a string
        value = json.loads(text)
    if not isinstance(value, dict):
        raise InputError(f"a worker sent an event payload that is not an object: {text[:80]!r}")
    return value
