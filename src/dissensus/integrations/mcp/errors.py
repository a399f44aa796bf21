"""Tool errors: the library's own errors turned into MCP tool errors on one line naming
the fields (:func:`_reported`), a run or review id the caller sent quoted back bounded."""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import ValidationError

from dissensus.errors import DissensusError
from dissensus.quoting import SHORT_LIMIT, quote_short
from dissensus.store import UnknownRun

F = TypeVar("F", bound=Callable[..., Any])

_EXPECTED = (DissensusError, ValidationError, ValueError)
"""Errors a caller can fix: reported as tool errors with their message (field included)."""

_SHOWN_ERRORS = 3
"""Fields an argument error names (then ``and N more``)."""


def _one_line(exc: ValidationError, *, root: str = "<root>") -> str:
    """A validation error on one line naming the fields, in the JSONL reader's words:
    ``field 'a.0.b': message`` (at most :data:`_SHOWN_ERRORS` of them), never the input
    values or the documentation URLs pydantic adds."""
    errors = exc.errors(include_url=False, include_input=False)
    parts = []
    for error in errors[:_SHOWN_ERRORS]:
        where = ".".join(str(p) for p in error["loc"]) or root
        message = " ".join(str(error["msg"]).removeprefix("Value error, ").split())
        parts.append(f"field {where!r}: {message}")
    if len(errors) > _SHOWN_ERRORS:
        parts.append(f"and {len(errors) - _SHOWN_ERRORS} more")
    return "; ".join(parts)


_ID_ARGS = ("run_id", "review_id", "run")
"""Arguments naming a run or a review item, which error messages quote (bounded)."""


def _message(exc: Exception, echoed: Iterable[str] = ()) -> str:
    """A tool error's text: one line (a message of several lines is joined), each of the
    ``echoed`` arguments it quotes shown by its first characters only (:func:`quote_short`)."""
    if isinstance(exc, ValidationError):
        return _one_line(exc)
    text = str(exc)
    for value in sorted(set(echoed), key=len, reverse=True):
        if len(value) > SHORT_LIMIT:
            text = text.replace(repr(value), quote_short(value))
            text = text.replace(value, value[:SHORT_LIMIT] + "…")
    return " ".join(text.split())


def _echoed(kwargs: dict[str, Any]) -> list[str]:
    """The id arguments of a call (and the run of a review id), as a message may quote them."""
    out = []
    for name in _ID_ARGS:
        value = kwargs.get(name)
        if isinstance(value, str):
            out += [value, value.rpartition(".")[0]]
    return out


def _reported(fn: F) -> F:
    """``fn`` with the library's own errors turned into MCP tool errors carrying the message.

    The SDK reports only :class:`ToolError` text to the client and hides anything else as
    a crash; a :class:`DissensusError` names its file and field, so it is passed on. A run
    or review id the caller sent is quoted back by its first :data:`SHORT_LIMIT`
    characters only.
    """
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def awrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return await fn(*args, **kwargs)
            except _EXPECTED as exc:
                raise ToolError(_message(exc, _echoed(kwargs))) from exc

        return awrapper  # type: ignore[return-value]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except _EXPECTED as exc:
            raise ToolError(_message(exc, _echoed(kwargs))) from exc

    return wrapper  # type: ignore[return-value]


@contextlib.contextmanager
def _run_argument(field: str) -> Iterator[None]:
    """Name the argument ``field`` (a run id the caller sent) in the error of a run the
    journal does not have, which names none, or the store's ``run_id``."""
    try:
        yield
    except UnknownRun as exc:
        text = str(exc).replace("(field 'run_id': ", "(")
        raise UnknownRun(f"field {field!r}: {text}") from exc
