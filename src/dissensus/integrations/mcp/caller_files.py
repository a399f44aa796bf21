"""Files a caller names (a policy, rules, a calibration): read with every error about
the file naming the argument and the schema's fields only, never its content."""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ValidationError

from dissensus.errors import ConfigError, DissensusError
from dissensus.files import same_file
from dissensus.integrations.mcp.errors import _SHOWN_ERRORS

_LOAD_ERRORS = (DissensusError, ValidationError, ValueError, OSError)
"""What reading a caller's file can raise about its content."""


def _model_in(node: Any) -> type[BaseModel] | None:
    """The pydantic model ``node`` (a field's annotation) is, or may be (``X | None``)."""
    if isinstance(node, type) and issubclass(node, BaseModel):
        return node
    if typing.get_origin(node) in (typing.Union, types.UnionType, Annotated):
        for arg in typing.get_args(node):
            found = _model_in(arg)
            if found is not None:
                return found
    return None


def _item_in(node: Any) -> Any:
    """The item type of a list or tuple annotation (``None`` for anything else)."""
    origin = typing.get_origin(node)
    if origin in (typing.Union, types.UnionType, Annotated):
        for arg in typing.get_args(node):
            item = _item_in(arg)
            if item is not None:
                return item
        return None
    args = typing.get_args(node)
    return args[0] if origin in (list, tuple) and args else None


def _schema_field(schema: type[BaseModel], where: str) -> str | None:
    """``where`` (a dotted field path, ``a.0.b`` or ``a[0].b``) as far as it runs through
    ``schema``'s own fields and list positions, or ``None`` when it names a key the schema
    does not have: the file's own text. A path into a free-form value (a mapping, whose
    keys are the file's) stops at the field holding it."""
    shown: list[str] = []
    node: Any = schema
    for part in (p for p in re.split(r"[.\[\]]", where) if p):
        model = _model_in(node)
        if model is not None:
            named = {f.alias or n: f for n, f in model.model_fields.items()}
            info = model.model_fields.get(part) or named.get(part)
            if info is None:
                return None
            node = info.annotation
        elif part.isdigit() and _item_in(node) is not None:
            node = _item_in(node)
        else:
            break
        shown.append(part)
    return ".".join(shown) or None


def _not_valid(exc: Exception, what: str, schema: type[BaseModel], file: str) -> str:
    """Why the caller's ``file`` is not a valid ``what``, without a key or a value of it:
    the field paths the error names that are fields of ``schema`` (at most
    :data:`_SHOWN_ERRORS`), any other as ``an unknown field``; an error about another file
    (one a policy names: its acceptance file, say) as ``a file it names``."""
    other = (
        isinstance(exc, ConfigError)
        and exc.file
        and same_file(exc.file, file, by_name=False, unknown=None) is False
    )
    if other:
        return f"not a valid {what} (a file it names)"
    if isinstance(exc, ValidationError):
        paths = [".".join(str(p) for p in e["loc"]) for e in exc.errors(include_url=False)]
    elif isinstance(exc, ConfigError) and exc.field:
        paths = [exc.field]
    else:
        paths = []
    named: list[str] = []
    for path in paths:
        known = _schema_field(schema, path)
        name = f"field {known!r}" if known else "an unknown field"
        if name not in named:
            named.append(name)
    if len(named) > _SHOWN_ERRORS:
        named[_SHOWN_ERRORS:] = [f"and {len(named) - _SHOWN_ERRORS} more"]
    return f"not a valid {what}" + (f" ({'; '.join(named)})" if named else "")


T = TypeVar("T")


class _CodeRefused(ConfigError):
    """A policy that would import code, served without ``--allow-functions``."""


def _caller_file(
    load: Callable[[], T], file: str, *, field: str, what: str, schema: type[BaseModel]
) -> T:
    """``load()``, which reads ``file``, named by the caller (argument ``field``): any error
    about the file is one naming the argument and the schema's fields only, since the
    library's message quotes the file (a key, a value, a line), which may be any file
    under the served directory. A refusal of code (:class:`_CodeRefused`) is passed on."""
    try:
        return load()
    except _CodeRefused:
        raise
    except _LOAD_ERRORS as exc:
        raise ConfigError(_not_valid(exc, what, schema, file), field=field) from exc
