"""Skipped items: how a converter reports a source item it could not turn into a record.

Converters read other people's files. A single malformed item (a missing field, a
winner outside the answer set, fewer than two usable agents) must not stop the rest,
and must never vanish silently either. Every converter therefore takes an ``on_skip``
callback that receives a :class:`Skipped` naming the file, the item index and the field.

Choice: when no callback is given, the first skipped item raises :class:`ConvertError`
(an :class:`~dissensus.errors.InputError`, exit code 2), so that a caller who did not
opt into skipping never loses an item without knowing.

Source files are read as strictly as configuration files (one shared reader,
:mod:`dissensus.io.jsontext`): a file holding a key twice in one object, ``NaN`` or an
integer too long to convert is refused whole, naming the field, instead of one reader's
guess at what it means reaching the panels.

A record every reader would refuse is never written: each converted record goes through
the readers' own bound check (:func:`over_limits`, which is
:func:`dissensus.io.limits.check_record`, the check :func:`dissensus.io.jsonl.bounded`
applies to every line read), and a record over a bound -- a field of more than
:data:`~dissensus.io.limits.MAX_FIELD_CHARS` characters, too much text, too many agents
or values -- is skipped like a malformed item, naming the source file and field it came
from (:func:`overrun_message`).

Choice: a source's name that becomes an agent id (an LLMBar judge's directory, a
ZeroEval model's file, a VariErrNLI annotator) or part of a panel id (an LLMBar subset's
path) holding a control character or bytes that are not UTF-8 (:func:`name_problem`)
is refused where it is found: a judge or a model is part of
the layout (a :class:`ConvertError`, exit 2, before anything is written), an annotator
is part of one item (that item skipped naming ``annotations.<annotator>``).

Choice: a skip quotes what it found bounded (:func:`shown_value`, :func:`cut`): a
source's name or value of 40,000 characters is shown by its first
:data:`ECHO_CHARS` and its length, so one report stays one readable line; the
``item`` and ``field`` of a :class:`Skipped` are cut to :data:`NAME_CHARS` and its
message to :data:`MESSAGE_CHARS` whatever the converter put there.
"""

from __future__ import annotations

import os
import re
import reprlib
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

from dissensus.errors import ConfigError, InputError
from dissensus.files import file_kind
from dissensus.io.jsontext import load_json_file
from dissensus.io.limits import Overrun, check_record
from dissensus.types import JsonObject, lone_surrogate_at

__all__ = [
    "ECHO_CHARS",
    "MESSAGE_CHARS",
    "NAME_CHARS",
    "ConvertError",
    "SkipHandler",
    "Skipped",
    "check_source_file",
    "cut",
    "load_json_source",
    "name_problem",
    "over_limits",
    "overrun_message",
    "report_skip",
    "shown_value",
]

ECHO_CHARS = 80
"""Most characters of a source's value (a name, a label, an id) a skip message quotes."""

NAME_CHARS = 200
"""Most characters of a :class:`Skipped`'s ``item`` and ``field`` (the rest is cut)."""

MESSAGE_CHARS = 1000
"""Most characters of a :class:`Skipped`'s ``message`` (the rest is cut)."""


def cut(text: str, limit: int = ECHO_CHARS) -> str:
    """``text``, or its first ``limit`` characters and its length when it is longer."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = ECHO_CHARS
_REPR.maxlevel = 3


def shown_value(value: object) -> str:
    """``value`` as a skip message quotes it: its ``repr``, bounded (a text longer than
    :data:`ECHO_CHARS` as its first characters and its length; a list or object by its
    first members)."""
    if isinstance(value, str):
        if len(value) <= ECHO_CHARS:
            return repr(value)
        return f"{value[:ECHO_CHARS]!r}... ({len(value)} characters)"
    try:
        return _REPR.repr(value)
    except ValueError:  # an integer too long to print (more digits than Python converts)
        return f"an integer of more than {sys.get_int_max_str_digits()} digits"


class Skipped(BaseModel):
    """One source item that was not converted, with where and why."""

    model_config = ConfigDict(frozen=True)

    file: str
    """The source file that holds the item."""
    item: str
    """The item's index (LLMBar: position in the list) or key (VariErrNLI: item id)."""
    field: str
    """The field that failed, dotted (``results.0.swap = False.winner``), or ``<item>``."""
    message: str
    """What is wrong with it."""

    @field_validator("item", "field")
    @classmethod
    def _short_name(cls, value: str) -> str:
        return cut(value, NAME_CHARS)

    @field_validator("message")
    @classmethod
    def _short_message(cls, value: str) -> str:
        return cut(value, MESSAGE_CHARS)

    def describe(self) -> str:
        return f"{self.file}: item {self.item}: field {self.field!r}: {self.message}"


class ConvertError(InputError):
    """A source cannot be converted: wrong layout, or a skipped item nobody handled."""


SkipHandler = Callable[[Skipped], None]
"""Receives every skipped item; see :func:`report_skip`."""


def report_skip(on_skip: SkipHandler | None, skipped: Skipped) -> None:
    """Hand ``skipped`` to ``on_skip``, or raise :class:`ConvertError` when there is none."""
    if on_skip is None:
        raise ConvertError(skipped.describe())
    on_skip(skipped)


def load_json_source(
    path: str | Path, expect: type[list[Any]] | type[JsonObject], *, what: str | None = None
) -> Any:
    """A converter's JSON source file, checked to be a ``list`` or a ``dict`` (``what``
    names the one expected in the message).

    Every failure (unreadable, not UTF-8, invalid or too deeply nested JSON, a duplicate
    key, a non-finite number or a too long integer: the strict reading of
    :func:`dissensus.io.jsontext.load_json_file`; a wrong top level) is one
    :class:`ConvertError` naming the file.
    """
    try:
        data = load_json_file(path)
    except ConfigError as exc:
        raise ConvertError(str(exc)) from None
    if not isinstance(data, expect):
        if what is None:
            what = "a JSON list of items" if expect is list else "a JSON object keyed by item id"
        raise ConvertError(f"{path}: expected {what}")
    return data


def check_source_file(path: Path, what: str) -> None:
    """Raise :class:`ConvertError` unless ``path``, found in a source's layout (an LLMBar
    ``result.json``, a ZeroEval ``<model>.json``), is a regular file or a symbolic link
    to one: a broken link, a named pipe or a directory under that name is refused naming
    it, never passed over (a converter that skipped it would write panels with an agent
    fewer and say nothing)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        kind = "a broken symbolic link" if os.path.islink(path) else "gone"
        raise ConvertError(f"{path}: cannot read {what}: {kind}") from None
    except OSError as exc:
        raise ConvertError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        raise ConvertError(f"{path}: cannot read {what}: not a regular file ({file_kind(mode)})")


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
"""A control character: what an agent id may not hold (the models' ``_one_line``)."""


def name_problem(name: str) -> str | None:
    """Why ``name`` (a judge's directory, a model's file, an annotator; a subset's path)
    cannot be an agent id or part of a panel id, or None: an agent id is one line without
    control characters, and every id is text (a file name's bytes that are not UTF-8,
    which Python keeps as lone surrogates, are not). The models would refuse such a name
    (a traceback, were it not found first)."""
    if (at := lone_surrogate_at(name)) is not None:
        try:  # the name's bytes, as the file system holds them: 'J\xff'
            raw = name[:ECHO_CHARS].encode("utf-8", "surrogateescape")
            text = "'" + raw.decode("ascii", "backslashreplace") + "'"
        except UnicodeEncodeError:
            text = ascii(name[:ECHO_CHARS])
        more = "..." if len(name) > ECHO_CHARS else ""
        return (
            f"{text}{more} is not UTF-8 text (a byte that is not UTF-8 at character "
            f"{at + 1}); rename it"
        )
    found = _CONTROL.search(name)
    if found is None:
        return None
    return (
        f"{shown_value(name)} holds the control character U+{ord(found.group()):04X}; "
        "an agent id is one line without control characters"
    )


def over_limits(record: Any) -> Overrun | None:
    """The first bound of :mod:`dissensus.io.limits` that ``record`` (a converted panel or
    vote case) goes over, or None: the readers' own check, so that a converter never
    writes a record a reader refuses (and never skips one a reader takes)."""
    return check_record(record)


def overrun_message(over: Overrun, whose: str = "") -> str:
    """The skip message of a record over a bound: what went over (``whose``: the agent,
    say), and which field of the record it was."""
    return f"{whose}{over.message} (the record's {over.field}); no reader takes such a record"
