"""Path arguments: the directory the server serves, the files under it an argument may
name (:func:`_confined`), and the journals a tool may use."""

from __future__ import annotations

import os
from pathlib import Path

from dissensus.errors import ConfigError


def _file_arg(value: str | None, field: str) -> str | None:
    """``value``, a path argument, unless it holds a NUL character (no file can be named
    so; the OS's own error would not say which argument)."""
    if value is not None and "\x00" in value:
        raise ConfigError("a path cannot hold a NUL character", field=field)
    return value


def _check_journal(target: str) -> str:
    """``target`` when it can be a tool's journal: a file (or database URL) that outlives
    the call; ``":memory:"`` is refused, as by the LangGraph node."""
    _file_arg(target, "journal")
    if target == ":memory:":
        raise ConfigError(
            "the journal must be a file: a review item outlives the call that made it",
            field="journal",
        )
    return target


_OUTSIDE = "not a path under the directory the server serves (dissensus mcp --root)"
"""Why a path argument is refused: the message names the argument, never the path."""


def _served_root(root: str | os.PathLike[str] | None) -> Path:
    """The directory the server serves: ``root`` (else the working directory), resolved."""
    where = Path(root) if root is not None else Path.cwd()
    try:
        resolved = where.resolve(strict=True)
    except (OSError, RuntimeError):
        resolved = None
    if resolved is None or not resolved.is_dir():
        raise ConfigError(f"{os.fspath(where)}: not a directory", field="--root")
    return resolved


def _confined(root: Path, value: str, field: str) -> Path:
    """The file the argument ``field`` names, resolved (symbolic links followed) under
    ``root``; a :class:`ConfigError` naming the argument only when it leads elsewhere, or
    when the system refuses the name (``File name too long``)."""
    _file_arg(value, field)
    path = Path(value)
    try:
        resolved = (path if path.is_absolute() else root / path).resolve()
    except (OSError, RuntimeError, ValueError):  # a loop of links, say
        raise ConfigError(_OUTSIDE, field=field) from None
    if not resolved.is_relative_to(root):
        raise ConfigError(_OUTSIDE, field=field)
    try:
        # A name the system refuses (a component over its length limit) fails here, named,
        # not as a crash of the tool at its first look at the file.
        resolved.exists()
    except OSError as exc:
        raise ConfigError(f"not a usable path: {exc.strerror or exc}", field=field) from None
    return resolved
