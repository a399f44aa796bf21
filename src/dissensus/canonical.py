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

Choices this module makes:

* The standard library's encoder is the definition; ``orjson`` (a core dependency)
  writes the text first when it is installed, about four times faster, and its text is
  used only when it is provably the same: orjson accepted the value, no float in it
  is written with an exponent or below ``1e-4`` (the forms in which orjson's float text
  differs from ``repr``: any text with a digit before ``e-``/``e+``, or holding
  ``0.0000``, goes to the reference, strings included), and parsing the text back
  gives a value equal to the given one. That last check sends to the reference every
  value the standard library would refuse or write otherwise (a non-finite float, which
  orjson writes as ``null``; a tuple; a dataclass, enum or date, which orjson writes
  and the reference refuses), so errors and their messages are the reference's.
  Strings (escapes with ``ensure_ascii`` off) and key order (code point order) are
  written alike by both encoders (tested over every code point).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["canonical", "canonical_value", "indented_json", "sha256_text"]

try:
    import orjson as _orjson
except ImportError:  # pragma: no cover - orjson is a core dependency
    _orjson = None  # type: ignore[assignment]


_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def canonical(obj: Any) -> str:
    """The canonical JSON text of ``obj`` (sorted keys, compact, UTF-8, finite numbers)."""
    if _orjson is not None:
        try:
            data = _orjson.dumps(obj, option=_orjson.OPT_SORT_KEYS)
        except _orjson.JSONEncodeError:
            pass  # the reference decides (it may write the value, or refuse it)
        else:
            if _plain_floats(data) and _orjson.loads(data) == obj:
                return data.decode()
    return _ENCODER.encode(obj)


def canonical_value(text: object) -> tuple[bool, Any]:
    """``(True, value)`` when ``text`` is the canonical JSON text of ``value``, found
    without the standard library's reader; ``(False, None)`` when this reading cannot
    vouch for it (the caller reads it as the standard library does, and finds out).

    orjson reads the text and writes the value back with sorted keys; the text is
    vouched for only when that writing is the text itself, byte for byte, with no number
    in a form where orjson's writing differs from ``repr`` (the test :func:`canonical`
    makes before it trusts orjson's text). Such a text holds no duplicate key (a written
    object has none), nothing nested deeper than orjson writes, and no number the
    standard library reads otherwise, so the standard library reads it to the same
    value and :func:`canonical` writes that value as this very text. Anything else (a
    text that is not a ``str``, or an error of either call) is not vouched for.
    """
    if _orjson is None or type(text) is not str:
        return False, None
    try:
        data = text.encode()
        value = _orjson.loads(data)
        again = _orjson.dumps(value, option=_orjson.OPT_SORT_KEYS)
    except (_orjson.JSONDecodeError, _orjson.JSONEncodeError, UnicodeEncodeError):
        return False, None
    if again != data or not _plain_floats(again):
        return False, None
    return True, value


def indented_json(value: Any) -> str | None:
    """``json.dumps(value, indent=2, ensure_ascii=False)`` written by orjson, when it is
    provably that text (the test :func:`canonical` makes: orjson took the value, no
    number is in a form where its writing differs, it reads back equal); else ``None``.
    Key order is the value's own, as ``json.dumps`` keeps it."""
    if _orjson is None:
        return None
    try:
        data = _orjson.dumps(value, option=_orjson.OPT_INDENT_2)
    except _orjson.JSONEncodeError:
        return None
    if _plain_floats(data) and _orjson.loads(data) == value:
        return data.decode()
    return None


def _plain_floats(data: bytes) -> bool:
    """Whether no number in orjson's ``data`` is in a form where it differs from
    ``repr`` (an exponent, or a fraction below ``1e-4``); strings may trip it too."""
    if b"0.0000" in data:
        return False
    # An exponent is the only place where a digit comes right before ``e-`` or ``e+``.
    # The signs are found by a one-byte search (fast), then the two bytes before each
    # are looked at: a search for the two-byte marks is slow in text full of ``e``.
    for sign in (b"-", b"+"):
        at = data.find(sign, 2)
        while at != -1:
            if data[at - 1] == _E and 48 <= data[at - 2] <= 57:
                return False
            at = data.find(sign, at + 1)
    return True


_E = ord("e")


def canonical_reference(obj: Any) -> str:
    """:func:`canonical` by the standard library alone (the definition)."""
    return _ENCODER.encode(obj)


def sha256_text(text: str) -> str:
    """Hex sha256 of ``text`` encoded as UTF-8."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
