"""Fast JSON serialisation of output records, with the standard library as the reference.

Records written one per line (``dissensus route --json``) are serialised with ``orjson``
when it is installed (a core dependency), about five times faster than ``json.dumps``
on route records; without it the standard library writes the same values.

Choices this module makes:

* Output is compact JSON (no space after ``,`` and ``:``), UTF-8 characters unescaped
  (as ``ensure_ascii=False``); both encoders give the same *values*, not the same bytes,
  and only compact output is produced whichever encoder runs.
* Values orjson does not serialise natively (numpy scalars and arrays, other objects)
  go through :func:`_default`: numpy values become Python numbers or lists, anything
  else its ``str``, as ``json.dumps(default=str)`` would.
* Whatever orjson refuses (a lone surrogate in a string, a non-string key) is written
  by the standard library, so orjson never changes what can be written.
* DEL, the C1 controls and every other character of
  :data:`~dissensus.quoting.INVISIBLE` past U+001F (bidi controls, zero-width
  characters, the line separators) are written as ``\\u`` escapes
  (:func:`~dissensus.quoting.json_shown`), whichever encoder ran: JSON's own escaping
  stops at U+001F, and these records go to terminals and files people read. The text
  is searched first, and copied only when it holds one.
* Non-finite floats, which JSON cannot carry, are written as ``null`` by both paths
  (records never hold them; the reader rejects them on input).
* Parsing does not use orjson (:func:`dissensus.io.jsonl.parse_line`). Measured on
  1.9 kB five-agent panel lines: ``json.loads`` 20.4 µs, ``orjson.loads`` 14.2 µs, but
  ``orjson.loads`` turns integers beyond 64 bits into floats (the reference keeps them
  exact), and finding such lines first (a 20-digit scan) costs 44 µs, more than the
  6 µs the parse saves. Panels and vote cases are instead parsed and validated in one
  step by pydantic's ``model_validate_json``, with the standard-library path as the
  reference for every reject (see :mod:`dissensus.io.jsonl`): 48 µs per line against
  102 µs for the reference path on the same machine. ``dissensus route`` decodes
  panel lines with msgspec into read-only views first (:mod:`dissensus.io.views`),
  which keeps integers exact.
"""

from __future__ import annotations

import json
import math
from typing import Any

from dissensus.quoting import json_shown
from dissensus.types import JsonObject

__all__ = ["dumps", "dumps_line", "orjson_available"]

try:
    import orjson as _orjson
except ImportError:  # pragma: no cover - exercised by monkeypatching _orjson
    _orjson = None  # type: ignore[assignment]


def orjson_available() -> bool:
    """Whether records are serialised by orjson."""
    return _orjson is not None


def _default(value: Any) -> Any:
    tolist = getattr(value, "tolist", None)
    if callable(tolist):  # numpy scalar or array
        return tolist()
    return str(value)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


_STD = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), default=_default, allow_nan=False
)


def dumps(record: JsonObject) -> str:
    """One record as compact JSON text (no trailing newline)."""
    if _orjson is not None:
        try:
            return json_shown(
                _orjson.dumps(record, default=_default, option=_orjson.OPT_SERIALIZE_NUMPY).decode()
            )
        except _orjson.JSONEncodeError:
            pass  # e.g. a lone surrogate or a non-string key: the reference path decides
    try:
        return json_shown(_STD.encode(record))
    except ValueError:  # non-finite values: null, as orjson writes them
        return json_shown(_STD.encode(_finite(record)))


def dumps_line(record: JsonObject) -> str:
    """One record as compact JSON text followed by a newline (the same text as
    ``dumps(record) + "\\n"``, with orjson's newline option instead of a concatenation)."""
    if _orjson is not None:
        try:
            return json_shown(
                _orjson.dumps(
                    record,
                    default=_default,
                    option=_orjson.OPT_SERIALIZE_NUMPY | _orjson.OPT_APPEND_NEWLINE,
                ).decode()
            )
        except _orjson.JSONEncodeError:
            pass
    return dumps(record) + "\n"
