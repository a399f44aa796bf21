"""Typed errors shared by every part of dissensus.

A :class:`DissensusError` is a user-facing error: the CLI prints its message (never a
traceback) and exits with its ``exit_code``. Configuration and input-file errors are
usage errors (exit 2); everything else is a failure (exit 1).
"""

from __future__ import annotations

from typing import Any

__all__ = ["ConfigError", "DissensusError", "InputError", "field_path"]


def field_path(*parts: object) -> str:
    """A field's path as error messages spell it: the parts joined with dots, as pydantic's
    locations are (``field_path("agents", 0, "id")`` is ``agents.0.id``), each part cut
    as :func:`dissensus.types.field_segment` cuts it (a million-character key named in
    full made a megabyte error)."""
    from dissensus.types import field_path as bounded

    return bounded(parts)


class DissensusError(Exception):
    """Base class of every error dissensus raises on purpose."""

    exit_code = 1


class ConfigError(DissensusError):
    """A configuration file (rules, policy, problem, task) is invalid.

    The message names the file and the field, and ends with the line the field is
    written on (``(line 5)``) when it is known (a policy file's fields: the message
    itself, :attr:`message`, leaves it out).
    """

    exit_code = 2

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        field: str | None = None,
        line: int | None = None,
    ) -> None:
        where = ""
        if file:
            where += f"{file}: "
        if field:
            where += f"field {field!r}: "
        super().__init__(f"{where}{message}" + (f" (line {line})" if line else ""))
        self.file = file
        self.field = field
        self.line = line
        """The line of ``file`` the field is written on (a YAML file's), when known."""
        self.message = message
        """The message without the file and field (what a caller re-wrapping it under
        its own field keeps)."""

    def inner(self) -> str:
        """The message with the file it names but not its field: what an error naming
        a field of its own says of this one."""
        return f"{self.file}: {self.message}" if self.file else self.message


class InputError(DissensusError):
    """An input file cannot be read at all (missing, unreadable), or a value given to a
    library call is not what it takes."""

    exit_code = 2
    field: str | None = None
    """The dotted path of the value at fault, when one is (:meth:`invalid`)."""

    @classmethod
    def invalid(cls, what: str, exc: Any) -> InputError:
        """``invalid WHAT: FIELD: MESSAGE`` from a pydantic ``ValidationError``'s first
        error (the field path dotted, also as :attr:`field`; ``what`` itself when the data
        as a whole is wrong), worded as the line readers word it (no ``Value error, ``)."""
        first = exc.errors(include_url=False)[0]
        path = field_path(*first["loc"])
        message = str(first["msg"]).removeprefix("Value error, ")
        error = cls(f"invalid {what}: {path or what}: {message}")
        error.field = path or None
        return error
