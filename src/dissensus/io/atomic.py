"""Write a file atomically: a temporary file beside the target, renamed over it.

Every output file dissensus writes (the CLI's ``--out`` / ``--output``, an acceptance
file) goes through :func:`atomic_output`, so a failed or interrupted write (a full disk,
a file size limit, an exception in the middle) leaves the previous file whole and no
half-written one.

Choices where the design is silent: a path that exists and is neither a regular file
nor a directory (``/dev/null``, ``/dev/stdout``, a named pipe) is written in place; the
temporary file (``.NAME.XXXX.tmp``) is removed when the write fails.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

__all__ = ["atomic_output", "atomic_write_text"]


def _umask() -> int:
    """The process's umask, read without changing it where the system tells it
    (``/proc/self/status``), else set and restored at once."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextmanager
def atomic_output(path: str, *, keep_on: tuple[type[BaseException], ...] = ()) -> Iterator[IO[str]]:
    """``path`` opened for writing through a temporary file renamed over it on success,
    and also when the block ends with one of ``keep_on`` (a stop whose output so far is
    complete as far as it goes, such as a run's deadline: the records finished, in order).

    A path that exists and is neither a regular file nor a directory (``/dev/null``,
    ``/dev/stdout``, a named pipe) is written in place: renaming over it would replace
    the device or pipe with a regular file (as root, ``--out /dev/null`` would destroy
    ``/dev/null``).

    The file written has the mode a plain ``open(path, "w")`` would leave: an existing
    target keeps its permission bits, a new one gets ``0666`` less the umask.
    """
    target = Path(path)
    try:
        mode = os.stat(target).st_mode
    except OSError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        with open(target, "w", encoding="utf-8") as handle:
            yield handle
        return
    fd, tmp = tempfile.mkstemp(
        prefix=f".{target.name}.", suffix=".tmp", dir=target.parent if str(target.parent) else "."
    )
    try:
        # mkstemp makes the file 0600: give it the mode the target has (an existing
        # file keeps its own) or would get if opened plainly (0666 less the umask).
        os.fchmod(fd, stat.S_IMODE(mode) if mode is not None else 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            try:
                yield handle
            except keep_on:
                handle.close()
                os.replace(tmp, target)
                raise
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through :func:`atomic_output`; an ``OSError`` leaves
    the previous file as it was."""
    with atomic_output(str(path)) as handle:
        handle.write(text)
