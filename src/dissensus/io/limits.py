"""Bounds on the work one record may ask for: agents per panel, characters per text field,
JSON values per record.

Reading a panel compares every agent's reasoning with every other's, so the work per
panel grows with the square of its agents and with the length of their texts. A panel
over a bound is rejected on its own, like any invalid line (file, line and field on the
CLI; 413 or 422 over HTTP), and never reaches the reader.

Choices this module makes:

* :data:`MAX_AGENTS` (256) agents per panel and voters per vote case: panels of real
  systems have a handful; 256 agents is 32,640 pairs, decided in well under a second.
* :data:`MAX_FIELD_CHARS` (32,768) characters per text field (a panel's id, an agent's
  id, decision, reasoning, family, a re-ask's texts, evidence sources, and every string
  inside ``meta`` and extra fields): about 8,000 tokens of reasoning.
* :data:`MAX_PANEL_CHARS` (262,144) characters of text in one record, all its strings
  together: the similarity work grows with the panel's whole text (its vocabulary) as
  well as with its agents. With both bounds the worst accepted panel reads and routes in
  about 0.65 s on one core (TF-IDF; measured on 256 agents x 1,000 characters,
  128 x 2,000 and 32 x 8,000, all of random words); panels of real systems are far below.
* :data:`MAX_PANEL_VALUES` (100,000) JSON values in one record (strings, numbers,
  booleans, nulls, lists and objects, the record itself included): a record's values are
  parsed, validated, hashed, journalled and parsed again on every read, and text bounds
  alone let a few megabytes of ``[[],[],...]`` in ``meta`` hold millions of them (seconds
  of work and gigabytes of memory per read). A panel of 256 agents uses about 1,300;
  ``meta`` may carry, say, an embedding or a list of documents many times over.
* :data:`MAX_LINE_CHARS` (16 MiB of characters) per input line, checked before the line
  is parsed (:func:`dissensus.io.jsonl.parse_line`): the bounds above are checked on the
  parsed record, and parsing a line of tens of megabytes of numbers takes gigabytes
  first. A record within every other bound is far shorter: all its text escaped
  (``\\uXXXX``) is about 3 MiB.
* The check is cheap on ordinary lines: the agent count is a length, and a line no longer
  than :data:`MAX_FIELD_CHARS` cannot hold a longer field (nor more text than
  :data:`MAX_PANEL_CHARS`, nor more values than characters), so records are only walked
  on longer lines. A record
  without its text (one built in memory, as the chat door's panels are) is walked once
  for its sizes alone; the field paths that name an overrun are made only when there is
  one.
* The bounds are module constants: the CLI and every engine apply them to every line
  they parse. The service may set lower ones (``--max-agents``, ``--max-field-chars``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dissensus.types import option_id_problem

__all__ = [
    "DEFAULT",
    "MAX_AGENTS",
    "MAX_FIELD_CHARS",
    "MAX_LINE_CHARS",
    "MAX_PANEL_CHARS",
    "MAX_PANEL_VALUES",
    "Limits",
    "Overrun",
    "check_record",
    "count_values",
    "first_overrun",
    "too_many_values",
]

MAX_AGENTS = 256
"""Most agents of one panel (voters of one vote case)."""

MAX_FIELD_CHARS = 32_768
"""Most characters of one text field."""

MAX_PANEL_CHARS = 262_144
"""Most characters of text in one record (all its strings together)."""

MAX_LINE_CHARS = 16 * 1024 * 1024
"""Most characters of one input line (a record's JSON text), checked before parsing."""

MAX_PANEL_VALUES = 100_000
"""Most JSON values in one record (every string, number, boolean, null, list and object)."""


@dataclass(frozen=True)
class Limits:
    """The bounds applied to one record."""

    max_agents: int = MAX_AGENTS
    """Most agents per panel (voters per vote case)."""
    max_field_chars: int = MAX_FIELD_CHARS
    """Most characters per text field."""
    max_panel_chars: int = MAX_PANEL_CHARS
    """Most characters of text per record."""
    max_panel_values: int = MAX_PANEL_VALUES
    """Most JSON values per record."""


DEFAULT = Limits()


@dataclass(frozen=True)
class Overrun:
    """A bound a record goes over: the field, the message, and whether it is the count."""

    field: str
    message: str
    count: bool
    """True when the record asks for too much work (too many agents, too much text:
    HTTP 413); False for one field too long (422)."""


_SCALARS = frozenset({type(None), bool, int, float})
"""Types that hold no text (skipped at once: asking whether one is a ``Mapping`` or a
``Sequence`` costs an abstract-class check per value)."""


def _sizes(value: Any) -> tuple[int, int, int]:
    """``(total, longest, values)``: the length of the strings inside ``value`` (what
    :func:`_strings` yields, without their paths), and how many values it holds.

    Walked level by level, the common types first: an empty list or object is counted
    and never visited again, and a list is never asked whether it is a ``Mapping`` (an
    abstract-class check that cost more than the rest of the walk on a line of millions
    of ``[]``)."""
    total = longest = values = 0
    level: list[Any] = [value]
    while level:
        below: list[Any] = []
        more = below.extend
        values += len(level)
        for item in level:
            cls = item.__class__
            if cls is str:
                size = len(item)
                total += size
                if size > longest:
                    longest = size
            elif cls is list:
                if item:
                    more(item)
            elif cls is dict:
                if item:
                    more(item.values())
            elif cls in _SCALARS:
                continue
            elif isinstance(item, str):
                size = len(item)
                total += size
                if size > longest:
                    longest = size
            elif isinstance(item, Mapping):
                more(item.values())
            elif isinstance(item, Sequence) and not isinstance(item, bytes | bytearray):
                more(item)
        level = below
    return total, longest, values


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """Every string inside ``value`` with its field path, in document order (no recursion)."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            yield where, item
        elif isinstance(item, Mapping):
            for key, sub in reversed(list(item.items())):
                stack.append((sub, f"{where}.{key}" if where else str(key)))
        elif isinstance(item, Sequence) and not isinstance(item, bytes | bytearray):
            for i in range(len(item) - 1, -1, -1):
                stack.append((item[i], f"{where}.{i}" if where else str(i)))


# A record's field values by name (any record type), only walked for their sizes.
_SHAPES: dict[type, tuple[tuple[str, ...], bool] | None] = {}
"""Per type met: its field names and whether it may hold extras (a pydantic model), or
``None`` for a type that is not a record (found once per type: asking a pydantic class
for its fields on every value cost more than walking the record)."""


def _shape(cls: type) -> tuple[tuple[str, ...], bool] | None:
    try:
        return _SHAPES[cls]
    except KeyError:
        pass
    struct_fields = getattr(cls, "__struct_fields__", None)
    shape: tuple[tuple[str, ...], bool] | None = None
    if struct_fields is not None:
        shape = (tuple(struct_fields), False)
    elif hasattr(cls, "model_fields"):
        shape = (tuple(cls.model_fields), True)
    _SHAPES[cls] = shape
    return shape


def _plain(value: Any) -> Any:
    """Nested records as plain mappings, so :func:`_strings` can walk them: a pydantic
    model's fields and extras, a msgspec struct's fields."""
    shape = _shape(type(value))
    if shape is not None:
        names, extras = shape
        out = {name: _plain(getattr(value, name)) for name in names}
        if extras:
            for key, extra in (getattr(value, "__pydantic_extra__", None) or {}).items():
                out[key] = _plain(extra)
        return out
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def count_values(plain: Any) -> int:
    """How many JSON values a plain value (parsed JSON) holds, itself included: what
    :func:`check_record` bounds by ``max_panel_values``, counted before any model is built."""
    return _sizes(plain)[2]


def _record_sizes(record: Any) -> tuple[int, int, int]:
    """``_sizes(_plain(record))``, without building the plain copy: records (and the
    lists and tuples :func:`_plain` converts) are walked here, whatever :func:`_plain`
    keeps as it is (strings, mappings, other sequences) by :func:`_sizes`."""
    total = longest = values = 0
    records: list[Any] = [record]
    kept: list[Any] = []
    pop, push, keep = records.pop, records.extend, kept.append
    while records:
        item = pop()
        values += 1
        if type(item) is str:
            size = len(item)
            total += size
            if size > longest:
                longest = size
            continue
        if type(item) in _SCALARS:
            continue
        shape = _shape(type(item))
        if shape is not None:
            names, extras = shape
            push([getattr(item, name) for name in names])
            if extras:
                push((getattr(item, "__pydantic_extra__", None) or {}).values())
        elif isinstance(item, list | tuple):
            push(item)
        else:
            values -= 1  # counted by _sizes
            keep(item)
    if kept:
        more, most, inside = _sizes(kept)
        total += more
        longest = max(longest, most)
        values += inside - 1  # not the list of kept values itself
    return total, longest, values


def check_record(
    record: Any, raw_chars: int | None = None, limits: Limits = DEFAULT
) -> Overrun | None:
    """The first bound ``record`` (a panel or vote case, model or view) goes over, or None;
    also, checked here because every door reads its records through this check, an
    option id of ``meta.options`` holding a control character
    (:func:`~dissensus.types.option_id_problem`).

    ``raw_chars`` is the length of the record's JSON text when known: no field of a line
    at most ``max_field_chars`` long can be longer, so the fields are not walked then.
    """
    members = getattr(record, "outputs", None)
    name = "outputs"
    if members is None:
        members = getattr(record, "votes", None)
        name = "votes"
    if members is not None and len(members) > limits.max_agents:
        what, per = ("agents", "panel") if name == "outputs" else ("voters", "case")
        return Overrun(
            name, f"{len(members)} {what}; at most {limits.max_agents} per {per}", count=True
        )
    meta = getattr(record, "meta", None)
    if isinstance(meta, Mapping) and "options" in meta:
        problem = option_id_problem(meta)
        if problem is not None:
            return Overrun(*problem, count=False)
    if raw_chars is not None and raw_chars <= min(
        limits.max_field_chars, limits.max_panel_chars, limits.max_panel_values
    ):
        return None
    total, longest, values = _record_sizes(record)
    if longest > limits.max_field_chars or total > limits.max_panel_chars:
        return first_overrun(_plain(record), limits)
    if values > limits.max_panel_values:
        return too_many_values(values, limits)
    return None


def too_many_values(values: int, limits: Limits = DEFAULT) -> Overrun:
    """The overrun of a record holding ``values`` JSON values, more than its bound."""
    return Overrun(
        "<values>",
        f"{values} JSON values; at most {limits.max_panel_values} per record",
        count=True,
    )


def first_overrun(plain: Any, limits: Limits = DEFAULT) -> Overrun | None:
    """The first text bound a plain record (mappings, sequences, strings) goes over, in
    document order: a field longer than ``max_field_chars``, else more text than
    ``max_panel_chars`` in all, else more values than ``max_panel_values``; ``None``
    within all three (the definition :func:`check_record` answers after its agent
    count)."""
    total = 0
    for where, text in _strings(plain, ""):
        if len(text) > limits.max_field_chars:
            return Overrun(
                where,
                f"{len(text)} characters; at most {limits.max_field_chars} per field",
                count=False,
            )
        total += len(text)
    if total > limits.max_panel_chars:
        return Overrun(
            "<text>",
            f"{total} characters of text; at most {limits.max_panel_chars} per record",
            count=True,
        )
    values = _sizes(plain)[2]
    if values > limits.max_panel_values:
        return too_many_values(values, limits)
    return None
