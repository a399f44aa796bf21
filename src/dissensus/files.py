"""Reading a whole file safely: a regular file, of a bounded size.

Every file dissensus reads whole as configuration or data (policy, rules, problem, task
and scripted-model files, calibration, acceptance and certificate files, a recording,
a public key) goes through :func:`read_file_bytes`. Choices this module makes:

* **Regular files only.** A device (``/dev/zero``, ``/dev/full``), a named pipe, a
  socket or a directory is refused before a byte is read ("not a regular file (a
  character device)"): a device can be endless and a named pipe can block forever.
  The file is opened without blocking (a named pipe with no writer does not hang) and
  checked on the open descriptor, so it cannot be swapped between check and read.
* **Bounded.** At most :data:`MAX_FILE_BYTES` (64 MiB) unless the caller names another
  bound (a public key: 1 MiB; a recording: 1 GiB). A larger file is refused by its size
  ("N bytes; at most M") before it is read; at most the bound plus one byte is ever
  read, so a file growing meanwhile is refused too.
* Every failure is one :class:`~dissensus.errors.ConfigError` naming the file (exit 2).

Whether two paths name one file (an output that would replace an input, a recording
that is also a script) is :func:`same_file`, the one test of every caller.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from dissensus.errors import ConfigError

__all__ = ["MAX_FILE_BYTES", "file_kind", "not_a_file", "read_file_bytes", "same_file"]

MAX_FILE_BYTES = 64 * 1024 * 1024
"""Largest file :func:`read_file_bytes` reads unless told another bound."""


def file_kind(mode: int) -> str:
    """What a file that is not regular is, from its ``st_mode`` (for error messages)."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "an unknown kind"


def not_a_file(path: str | Path) -> str | None:
    """Why ``path`` is no regular file to read ("not found", "is not a regular file (a
    directory)"), or ``None`` when it is one (a symbolic link to one included)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return "not found"
    except OSError as exc:
        return f"cannot be looked at ({exc.strerror or exc})"
    if stat.S_ISREG(info.st_mode):
        return None
    return f"is not a regular file ({file_kind(info.st_mode)})"


def read_file_bytes(path: str | Path, *, what: str = "file", max_bytes: int | None = None) -> bytes:
    """The bytes of the regular file ``path``, at most ``max_bytes`` of them; anything
    else (unreadable, a device, a pipe, a directory, too large) is one
    :class:`ConfigError` naming the file (see the module's choices). ``max_bytes``
    defaults to :data:`MAX_FILE_BYTES`."""
    name = str(path)
    if max_bytes is None:
        max_bytes = MAX_FILE_BYTES
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ConfigError(f"cannot read {what}: {exc.strerror or exc}", file=name) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(
                f"cannot read {what}: not a regular file ({file_kind(info.st_mode)})", file=name
            )
        too_large = f"cannot read {what}: {{}} bytes; at most {max_bytes:,}"
        if info.st_size > max_bytes:
            raise ConfigError(too_large.format(f"{info.st_size:,}"), file=name)
        chunks: list[bytes] = []
        total = 0
        while total <= max_bytes:
            chunk = os.read(fd, min(max_bytes + 1 - total, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > max_bytes:
            raise ConfigError(too_large.format(f"more than {max_bytes:,}"), file=name)
        return b"".join(chunks)
    except OSError as exc:
        raise ConfigError(f"cannot read {what}: {exc.strerror or exc}", file=name) from None
    finally:
        os.close(fd)


def same_file(
    a: str | Path, b: str | Path, *, by_name: bool = True, unknown: bool | None = False
) -> bool | None:
    """Whether paths ``a`` and ``b`` name one file: with ``by_name``, when they resolve to
    one path (symbolic links and ``..`` followed), whether or not it exists yet (an
    output about to be written); else, or when their names differ, when both exist and
    are one file (:func:`os.path.samefile`: one device and inode, a hard link included).
    When that cannot be told (a path missing for the second test, unreadable, a symbolic
    link loop, a NUL in a name) the answer is ``unknown``: ``False`` for a caller that
    refuses only a known match, ``None`` for one that must tell "different" from "cannot
    tell"."""
    try:
        if by_name and Path(a).resolve() == Path(b).resolve():
            return True
        return os.path.samefile(a, b)
    except (OSError, RuntimeError, ValueError):
        return unknown
