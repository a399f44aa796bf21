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
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from dissensus.errors import ConfigError, InputError
from dissensus.io.jsontext import load_json_file
from dissensus.types import JsonObject

__all__ = ["ConvertError", "SkipHandler", "Skipped", "load_json_source", "report_skip"]


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
