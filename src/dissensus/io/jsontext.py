"""The reader of JSON input: JSONL lines and JSON files, with the same checks.

A JSONL line (:mod:`dissensus.io.jsonl`'s reference path) and a whole JSON file
(calibration, acceptance, certificate and converter source files, through
:func:`load_json_file`) are parsed by :func:`parse_json` and checked by
:func:`check_json_value`; a problem is a :class:`JsonTextError` naming the field, which
the line reader turns into a reject and the file reader into one
:class:`~dissensus.errors.ConfigError` line naming the file (exit 2).

It is not every JSON reader of the package. The line reader's fast tiers
(:mod:`dissensus.io.wire`, :mod:`dissensus.io.views`) parse lines themselves and are
tested against this module; a model's answer is read tolerantly
(:mod:`dissensus.llm.jsonparse`); the journal reads back the JSON it wrote. The service
parses request bodies with its own reader, :func:`dissensus.serve.http.decode_json_body`
(both ``POST /v1/decide`` and the chat door, :mod:`dissensus.serve.chat`), which shares
:data:`MAX_DEPTH` and :func:`json_depth` with this module but not its parser: a body is bytes, refused unless
it is strictly UTF-8; every refusal is an HTTP answer (the service's error body, or
OpenAI's at the chat door) naming ``<encoding>``, ``<json>`` or ``<depth>``, not a
:class:`JsonTextError`; and a body holding a list of panels (``POST /v1/decide``) may be
one level deeper than a line. The panels of a body are then validated by their models as the lines of a
file are (:func:`dissensus.serve.http.validated`).

Choices this module makes:

* **One parser**: the standard library's ``json.loads`` (exact integers, the reference
  the fast tiers of the line reader are tested against).
* **Nesting** deeper than :data:`MAX_DEPTH` arrays and objects is refused (field
  ``<depth>``), whether the parser's own recursion limit or the count finds it.
* **Numbers** must be finite: ``NaN``, ``Infinity``, ``1e999``, a decimal of 309 or
  more digits before its point, or one of fewer digits and an exponent that together
  pass 1.8e308 (Python reads each as infinity) anywhere are refused
  naming the path of the value ("must be a finite number"), as is a string holding a
  lone surrogate escape (``"\\ud800"``): JSON cannot carry the first, UTF-8 cannot
  encode the second.
* **Integers** of more digits than Python converts (``sys.get_int_max_str_digits()``,
  4,300 by default) are refused: a line names ``<json>`` (as for any text the parser
  refuses); a file names the path of the integer.
* **Duplicate keys**: a key written twice in one object is refused naming its path
  (``outputs.0.decision: duplicate key``). A key of the path longer than
  64 characters is shown cut, ending with ``…`` (:func:`dissensus.types.field_segment`):
  a million-character key made a megabyte error. Readers differ on which value wins, so a
  doubled ``floor`` in a certificate, ``beta_star`` in a calibration or ``decision`` in
  a panel line could change what is checked or decided. A file read by
  :func:`load_json_file` is parsed with the check (``strict=True``); a JSONL line is
  parsed without it, then :func:`check_unique_keys` (the reference path) or
  :func:`repeats_key` (the fast tiers, with the keys their parser built) compares the
  keys parsed with the keys written (:func:`may_repeat_key`), and parses the line again
  with the check only when the text could hold more keys than were parsed: a key
  repeated, or a string holding an escaped quote followed by a colon (``"a \\": b"``).
* **Files** are UTF-8 (a byte order mark is skipped; UTF-16 and invalid bytes are one
  error line naming the file), read whole: they are configuration and certificates, or
  a converter's source, never a stream.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

from dissensus.errors import ConfigError
from dissensus.types import field_segment, unrepresentable_field

__all__ = [
    "MAX_DEPTH",
    "JsonShape",
    "JsonTextError",
    "check_json_value",
    "check_unique_keys",
    "count_keys",
    "duplicate_key",
    "json_depth",
    "json_shape",
    "load_json_file",
    "may_repeat_key",
    "opening_brackets",
    "parse_json",
    "repeats_key",
    "text_values",
]

MAX_DEPTH = 64
"""Deepest nesting of arrays and objects a JSONL line or JSON file may have."""

_SUSPECT = re.compile(r"NaN|Infinity|\\u[dD][89a-fA-F]|[0-9][eE]\+?[0-9]{3}|[0-9]{200}")
"""Text that may hold a non-finite number or a lone surrogate escape (checked exactly
then). A finite-looking literal overflows only with an exponent of 3 digits or more, or
with at least 210 digits before its point (``D - 1 + E >= 309`` with ``E <= 99``): a run
of 200 digits is suspect whatever follows it."""

_KEY_END = re.compile(r'"\s*:')
"""The end of a key: its closing quote, then a colon (maybe after whitespace)."""

_CONTAINERS = (dict, list)

JSON_FIELD = "<json>"
"""The field of text the parser refuses (and of a too long integer in a line)."""
DEPTH_FIELD = "<depth>"
"""The field of text nested deeper than :data:`MAX_DEPTH`."""


class JsonTextError(ValueError):
    """JSON text refused: ``field`` is the dotted path of the value at fault, ``<json>``
    (text the parser refuses) or ``<depth>``; ``line`` is where the parser stopped, when
    it did."""

    def __init__(self, field: str, message: str, *, line: int | None = None) -> None:
        super().__init__(f"field {field!r}: {message}")
        self.field = field
        self.message = message
        self.line = line


def _digits_message() -> str:
    return f"an integer of more than {sys.get_int_max_str_digits()} digits"


def _too_deep() -> JsonTextError:
    return JsonTextError(DEPTH_FIELD, f"JSON nested deeper than {MAX_DEPTH} levels")


class _HugeInt:
    """Stands in for an integer too long to convert, until its path is found."""

    __slots__ = ()


class _Strict:
    """``json.loads`` hooks noting duplicate keys and too long integers.

    The objects they flag are kept alive here (so no other value can take their ``id``);
    once parsed, :meth:`first` finds the first of them in document order with its path.
    """

    def __init__(self) -> None:
        self.flagged: dict[int, tuple[object, str | None]] = {}

    def pairs(self, items: list[tuple[str, Any]]) -> dict[str, Any]:
        out = dict(items)
        if len(out) != len(items):  # a key twice: the first one seen again is named
            seen: set[str] = set()
            for key, _ in items:
                if key in seen:
                    self.flagged[id(out)] = (out, key)
                    break
                seen.add(key)
        return out

    def integer(self, text: str) -> int | _HugeInt:
        try:
            return int(text)
        except ValueError:
            stand_in = _HugeInt()
            self.flagged[id(stand_in)] = (stand_in, None)
            return stand_in

    def first(self, data: Any) -> JsonTextError:
        stack: list[tuple[str, Any]] = [("", data)]
        while stack:
            path, item = stack.pop()
            found = self.flagged.get(id(item))
            if found is not None and found[0] is item:
                if found[1] is None:
                    return JsonTextError(path or "<root>", _digits_message())
                key = field_segment(found[1])
                return JsonTextError(f"{path}.{key}" if path else key, "duplicate key")
            if isinstance(item, dict):
                stack.extend(
                    (f"{path}.{field_segment(k)}" if path else field_segment(k), v)
                    for k, v in reversed(item.items())
                )
            elif isinstance(item, list):
                stack.extend(
                    (f"{path}.{i}" if path else str(i), item[i])
                    for i in range(len(item) - 1, -1, -1)
                )
        # Every flagged value left out of the document was a duplicate key's first value,
        # so its object is flagged too; this line is only a safeguard.
        return JsonTextError(JSON_FIELD, "invalid JSON")


def parse_json(raw: str, *, strict: bool = False) -> Any:
    """Parse ``raw`` (one JSON text); :class:`JsonTextError` when the parser refuses it,
    or (``strict``) when an object holds a key twice or an integer is too long."""
    hooks = _Strict() if strict else None
    try:
        if hooks is None:
            data = json.loads(raw)
        else:
            data = json.loads(raw, object_pairs_hook=hooks.pairs, parse_int=hooks.integer)
    except json.JSONDecodeError as exc:
        raise JsonTextError(JSON_FIELD, f"invalid JSON: {exc.msg}", line=exc.lineno) from None
    except RecursionError:
        raise _too_deep() from None
    except ValueError:  # an integer of more digits than Python converts (4,300)
        raise JsonTextError(JSON_FIELD, f"invalid JSON: {_digits_message()}") from None
    if hooks is not None and hooks.flagged:
        raise hooks.first(data)
    return data


def opening_brackets(text: str) -> int:
    """Opening brackets (``[`` and ``{``) of ``text``: a bound on its nesting depth, counted
    in C, so a text with at most :data:`MAX_DEPTH` of them needs no walk of its value."""
    return text.count("[") + text.count("{")


_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
"""A JSON string (a key or a value), its escapes included; one never closed runs to the
end of the text. Without the optional closing quote, text of quotes that never closes
(``"\\"\\"...``) would be scanned to its end from every quote: quadratic, minutes on a
line of a few hundred kilobytes."""

_EMPTY = re.compile(r"\[\s*\]|\{\s*\}")
"""An empty array or object."""


def text_values(text: str) -> int:
    """The JSON values of the JSON text ``text`` (what :func:`json_shape` counts once it
    is parsed), counted on the text in C, without parsing it.

    With every string taken out, each value but the first follows a comma or opens a
    container's content: ``1 + commas + containers - empty containers``. Only a bound on
    what the text would cost to parse and walk; text that is not JSON gets a number
    meaning nothing.
    """
    bare = _STRING.sub("0", text) if '"' in text else text
    return 1 + bare.count(",") + opening_brackets(bare) - _EMPTY.subn("", bare)[1]


class JsonShape(NamedTuple):
    """The sizes of a parsed JSON value, taken in one walk (:func:`json_shape`)."""

    depth: int
    """Nesting depth of its arrays and objects (a scalar: 0)."""
    keys: int
    """Keys of all its objects."""
    values: int
    """JSON values it holds, itself included."""


def json_shape(value: object) -> JsonShape:
    """Depth, keys and values of ``value`` (a parsed JSON value) in one walk, level by
    level, without recursion: each array or object is visited once, its scalars only
    counted, an empty one counted and passed (a line of millions of ``[]`` was walked
    three times, once per size)."""
    if not isinstance(value, _CONTAINERS):
        return JsonShape(0, 0, 1)
    depth = keys = 0
    values = 1
    level: list[Any] = [value]
    while level:
        depth += 1
        below: list[Any] = []
        more = below.extend
        for item in level:
            if not item:  # empty: counted by its container, one level deep
                continue
            if isinstance(item, dict):
                keys += len(item)
                item = item.values()
            values += len(item)
            more([sub for sub in item if isinstance(sub, _CONTAINERS)])
        level = below
    return JsonShape(depth, keys, values)


def json_depth(value: object) -> int:
    """Nesting depth of arrays and objects in ``value`` (a scalar: 0), without recursion.

    A loop of its own rather than :func:`json_shape`, which also counts keys and values:
    a panel's small ``meta`` is measured once per panel, so its cost is the walk's
    set-up (a flat object takes one pass over its values)."""
    if isinstance(value, dict):
        level = [sub for sub in value.values() if isinstance(sub, _CONTAINERS)]
    elif isinstance(value, list):
        level = [sub for sub in value if isinstance(sub, _CONTAINERS)]
    else:
        return 0
    depth = 1
    while level:
        depth += 1
        below: list[Any] = []
        more = below.extend
        for item in level:
            more([sub for sub in _members(item) if isinstance(sub, _CONTAINERS)])
        level = below
    return depth


def _members(item: dict[str, Any] | list[Any]) -> Iterable[Any]:
    """The values an array or object holds."""
    return item.values() if isinstance(item, dict) else item


def check_json_value(data: Any, raw: str, *, shape: JsonShape | None = None) -> None:
    """Refuse ``data`` (parsed from ``raw``) nested deeper than :data:`MAX_DEPTH`, or
    holding a non-finite number or a lone surrogate (:class:`JsonTextError`).

    ``raw`` spares the walks: text with few brackets cannot nest deeply, and text
    without ``NaN``, ``Infinity``, a huge exponent or a surrogate escape holds neither.
    ``shape``, when the caller has it (:func:`json_shape` of ``data``), spares the walk
    for the depth.
    """
    if (
        opening_brackets(raw) > MAX_DEPTH
        and (shape.depth if shape is not None else json_depth(data)) > MAX_DEPTH
    ):
        raise _too_deep()
    if _SUSPECT.search(raw) and (found := unrepresentable_field(data)) is not None:
        raise JsonTextError(*found)


def count_keys(value: object) -> int:
    """Keys of all the objects in ``value`` (a parsed JSON value), without recursion.

    A loop of its own, as :func:`json_depth`: a flat object is its length after one pass
    over its values."""
    if isinstance(value, dict):
        keys = len(value)
        stack = [sub for sub in value.values() if isinstance(sub, _CONTAINERS)]
    elif isinstance(value, list):
        keys = 0
        stack = [sub for sub in value if isinstance(sub, _CONTAINERS)]
    else:
        return 0
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            keys += len(item)
        stack.extend([sub for sub in _members(item) if isinstance(sub, _CONTAINERS)])
    return keys


def may_repeat_key(raw: str, keys: int) -> bool:
    """Whether an object of the JSON text ``raw`` may hold a key twice, ``keys`` being
    the keys of its objects as parsed (distinct in each object), all together, or fewer.

    False proves that no key repeats. Every key written is followed by a colon outside
    any string, and no other token is, so the colons of ``raw`` are at least the keys
    written; so are the matches of ``"\\s*:`` (a key's closing quote, any whitespace, its
    colon), no two of which overlap. Both are at least the keys parsed, and the keys
    written are as many only when no key repeats. True when a key repeats, or when a
    string holds a colon and one holds an escaped quote before a colon (``\\":``): then
    :func:`duplicate_key` decides.
    """
    return raw.count(":") > keys and len(_KEY_END.findall(raw)) > keys


def duplicate_key(raw: str) -> JsonTextError | None:
    """The error naming the first key written twice in one object of ``raw`` (its path,
    e.g. ``outputs.0.decision``), or None when no key repeats or the parser refuses
    ``raw`` (another check words that)."""
    hooks = _Strict()
    try:
        data = json.loads(raw, object_pairs_hook=hooks.pairs)
    except (ValueError, RecursionError):
        return None
    return hooks.first(data) if hooks.flagged else None


def repeats_key(raw: str, keys: int) -> bool:
    """Whether an object of the JSON text ``raw``, parsed with ``keys`` keys (as for
    :func:`may_repeat_key`), holds a key twice; parsed again only when it may."""
    return may_repeat_key(raw, keys) and duplicate_key(raw) is not None


def check_unique_keys(data: Any, raw: str, *, keys: int | None = None) -> None:
    """Refuse ``data`` (parsed from ``raw``) when an object of ``raw`` holds a key twice:
    a :class:`JsonTextError` naming the key's path, ``duplicate key``. ``keys``, when the
    caller has it (:func:`json_shape` of ``data``), spares the walk counting them."""
    if keys is None:
        keys = count_keys(data)
    if may_repeat_key(raw, keys) and (error := duplicate_key(raw)) is not None:
        raise error


def load_json_file(path: str | Path, *, what: str = "file") -> Any:
    """Read and check the JSON file ``path`` strictly (see the module's choices).

    Every failure (unreadable, not UTF-8, invalid JSON, a duplicate key, a non-finite
    number, an integer too long, nesting too deep) is one :class:`ConfigError` naming the
    file and, when there is one, the field; ``what`` names the file in the message.
    """
    # Imported here: the line reader, which imports this module, has no use for YAML.
    from dissensus.io.yamlfile import read_text_file

    name = str(path)
    text = read_text_file(path, what=what)
    try:
        data = parse_json(text, strict=True)
        check_json_value(data, text)
    except JsonTextError as exc:
        if exc.field in (JSON_FIELD, DEPTH_FIELD):
            at = f" (line {exc.line})" if exc.line is not None else ""
            raise ConfigError(f"{exc.message}{at}", file=name) from None
        raise ConfigError(exc.message, file=name, field=exc.field) from None
    return data
