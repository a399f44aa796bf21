"""Canonical JSON and the hash chain of the run journal.

An event is hashed as ``sha256(prev_hash + canonical(event))`` where ``canonical`` is
JSON with sorted keys, no insignificant whitespace and UTF-8 text, so that a second
program can recompute every hash from an export without trusting this one.

Choices: the first event of a run chains on :data:`GENESIS` (64 zeros); floats are
written by Python's shortest round-trip ``repr`` (what ``json.dumps`` does), and
non-finite floats are refused because JSON cannot carry them. ``canonical`` and
``sha256_text`` are :mod:`dissensus.canonical`'s, re-exported here.
"""

from __future__ import annotations

import json
import json.encoder
from collections.abc import Callable, Mapping
from hashlib import sha256 as _sha256
from typing import Any

from dissensus.canonical import canonical, sha256_text

__all__ = ["GENESIS", "EventHasher", "canonical", "chain_hash", "event_hash", "sha256_text"]

GENESIS = "0" * 64
"""The ``prev_hash`` of the first event of every run."""


def chain_hash(prev_hash: str, event: Mapping[str, Any]) -> str:
    """``sha256(prev_hash + canonical(event))``."""
    return sha256_text(prev_hash + canonical(event))


def event_hash(
    prev_hash: str,
    *,
    run: str,
    seq: int,
    key: str,
    type: str,
    case: str | None,
    at: str,
    payload_text: str,
) -> str:
    """:func:`chain_hash` of an event whose payload's canonical text is ``payload_text``.

    The same digest, without serialising the payload a second time nor building the
    event's object: the event's canonical text is assembled from its fields in
    sorted-key order (``at``, ``case``, ``key``, ``payload``, ``run``, ``seq``, ``type``),
    each string quoted by the function :func:`canonical` uses for strings and the
    sequence number written as :func:`canonical` writes an integer.
    """
    hasher = EventHasher(run, at)
    return hasher(prev_hash, seq=seq, key=key, type=type, case=case, payload_text=payload_text)


class EventHasher:
    """:func:`event_hash` for the events of one run appended at one time ``at`` (a
    batch): the run's and the time's quoted text are made once, not once per event."""

    __slots__ = ("_head", "_run")

    def __init__(self, run: str, at: str) -> None:
        self._head = f'{{"at":{_quote(at)},"case":'
        self._run = f',"run":{_quote(run)},"seq":'

    def __call__(
        self, prev_hash: str, *, seq: int, key: str, type: str, case: str | None, payload_text: str
    ) -> str:
        case_text = "null" if case is None else _quote(case)
        # sha256_text inlined (a call fewer per event: a batch hashes thousands).
        return _sha256(
            f'{prev_hash}{self._head}{case_text},"key":{_quote(key)},"payload":{payload_text}'
            f'{self._run}{int(seq)!r},"type":{_quote(type)}}}'.encode()
        ).hexdigest()


_quote: Callable[[str], str] = json.encoder.encode_basestring
"""A string's JSON text as :func:`canonical` writes it (``ensure_ascii`` off: the C
encoder's ``encode_basestring``, which ``json.JSONEncoder.encode`` calls for a string)."""
