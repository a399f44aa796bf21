"""Canonical JSON: the one serialisation every digest, chain hash and replay key uses.

JSON with sorted keys, no insignificant whitespace and UTF-8 text (``ensure_ascii``
off), floats written by Python's shortest round-trip ``repr`` (what ``json.dumps``
does), non-finite floats refused because JSON cannot carry them. A second program can
recompute every hash from the same rules.

One encoder is built once and reused (``json.dumps`` with these options builds a new
:class:`json.JSONEncoder` on every call; the journal hashes several texts per event).

This module imports nothing from the package, so the pure core (CONCORD's certificate
digest) and the adapters (the journal's hash chain, recorded model calls) share it
without the core loading any adapter.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["canonical", "sha256_text"]


_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def canonical(obj: Any) -> str:
    """The canonical JSON text of ``obj`` (sorted keys, compact, UTF-8, finite numbers)."""
    return _ENCODER.encode(obj)


def sha256_text(text: str) -> str:
    """Hex sha256 of ``text`` encoded as UTF-8."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
