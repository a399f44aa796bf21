"""Typed errors shared by every part of dissensus.

A :class:`DissensusError` is a user-facing error: the CLI prints its message (never a
traceback) and exits with its ``exit_code``. Configuration and input-file errors are
usage errors (exit 2); everything else is a failure (exit 1).
"""

from __future__ import annotations

__all__ = ["ConfigError", "DissensusError", "InputError"]


class DissensusError(Exception):
    """Base class of every error dissensus raises on purpose."""

    exit_code = 1


class ConfigError(DissensusError):
    """A configuration file (rules, policy, problem, task) is invalid.

    The message names the file and the field.
    """

    exit_code = 2

    def __init__(self, message: str, *, file: str | None = None, field: str | None = None) -> None:
        where = ""
        if file:
            where += f"{file}: "
        if field:
            where += f"field {field!r}: "
        super().__init__(f"{where}{message}")
        self.file = file
        self.field = field


class InputError(DissensusError):
    """An input file cannot be read at all (missing, unreadable)."""

    exit_code = 2
