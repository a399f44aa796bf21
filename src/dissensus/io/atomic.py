"""Write a file atomically: a temporary file beside the target, renamed over it.

Every output file dissensus writes (the CLI's ``--out`` / ``--output``, an acceptance
file) goes through :func:`atomic_output`, so a failed or interrupted write (a full disk,
a file size limit, an exception in the middle) leaves the previous file whole and no
half-written one.

Choices this module makes: a path that exists and is neither a regular file
nor a directory (``/dev/null``, ``/dev/stdout``, a named pipe) is written in place; the
temporary file (``.NAME.XXXX.tmp``) is removed when the write fails.

**A write that fails** (a full disk, ``ENOSPC``; a quota, ``EDQUOT``; a file size limit,
``EFBIG``; an I/O error) is an :class:`OutputWriteError` naming the file and the error
(``cannot write the output file o.jsonl: No space left on device (ENOSPC)``): a
failure, exit 1, since the command ran and its path was usable when it was checked.
The handles :func:`atomic_output` and :func:`open_output` give raise it from ``write``,
``flush`` and ``close``, so the error names the file whichever of them meets it; a
closed pipe (:class:`BrokenPipeError`, ``| head``) is left as it is, for the CLI to end
quietly. Standard output that cannot be written is the same error naming "standard
output" (:func:`stdout_failed`, ``cannot write standard output: No space left on device
(ENOSPC)``), raised wherever a command writes to it: :func:`stdout_handle` is standard
output as a handle whose ``write`` and ``flush`` raise it, for writes with or without a
buffer in between (``python -u`` writes at once, so the error comes from ``write``; a
buffered stream fails at a later ``write`` or at ``flush``). A temporary file left behind by a process killed outright (``SIGKILL``, a
power cut) is not removed later: it is named ``.NAME.XXXX.tmp`` beside the target and
can be deleted by hand once no command writes that output.
"""

from __future__ import annotations

import errno
import io
import os
import stat
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, cast

from dissensus.errors import DissensusError

__all__ = [
    "OutputWriteError",
    "atomic_output",
    "atomic_write_text",
    "is_stdout",
    "open_output",
    "probe_output",
    "stdout_failed",
    "stdout_handle",
    "write_stdout",
]

STDOUT = "standard output"
"""How an :class:`OutputWriteError` names standard output."""


class OutputWriteError(DissensusError):
    """An output file could not be written (a full disk, an I/O error): exit 1."""

    stdout: bool = False
    """Whether the output that failed is standard output (:func:`stdout_failed`)."""

    def __init__(self, path: str, exc: OSError, *, what: str = "output file") -> None:
        code = errno.errorcode.get(exc.errno or 0)
        reason = exc.strerror or str(exc)
        named = f"the {what} {path}" if what else path
        super().__init__(f"cannot write {named}: {reason}" + (f" ({code})" if code else ""))
        self.path = path
        self.errno = exc.errno


def is_stdout(handle: object) -> bool:
    """Whether ``handle`` is the process's standard output."""
    return handle is sys.stdout or handle is sys.__stdout__


def stdout_failed(exc: OSError) -> OutputWriteError:
    """The :class:`OutputWriteError` of a failed write to standard output."""
    error = OutputWriteError(STDOUT, exc, what="")
    error.stdout = True
    return error


class _Stdout:
    """Standard output (whatever ``sys.stdout`` is at each call) whose failed ``write`` or
    ``flush`` is :func:`stdout_failed`; a closed pipe stays a :class:`BrokenPipeError`."""

    def write(self, text: str) -> int:
        try:
            return sys.stdout.write(text)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise stdout_failed(exc) from None

    def flush(self) -> None:
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise stdout_failed(exc) from None

    def fileno(self) -> int:
        """Standard output's descriptor (where it writes: is it standard error's too?)."""
        return sys.stdout.fileno()


def stdout_handle() -> IO[str]:
    """Standard output as a handle (``write`` and ``flush``) whose failures name it."""
    return cast("IO[str]", _Stdout())


def write_stdout(text: str, *, flush: bool = False) -> None:
    """Write ``text`` to standard output (and flush it); a failed write is an
    :class:`OutputWriteError` naming standard output, a closed pipe a
    :class:`BrokenPipeError`."""
    handle = stdout_handle()
    handle.write(text)
    if flush:
        handle.flush()


class _Writer(io.TextIOWrapper):
    """A UTF-8 text handle whose write errors (but a closed pipe) name its file."""

    def __init__(self, buffer: IO[bytes], shown: str, what: str) -> None:
        super().__init__(buffer, encoding="utf-8")
        self._shown = shown
        self._what = what

    def _failed(self, exc: OSError) -> OutputWriteError:
        return OutputWriteError(self._shown, exc, what=self._what)

    def write(self, text: str) -> int:
        try:
            return super().write(text)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise self._failed(exc) from None

    def flush(self) -> None:
        try:
            super().flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise self._failed(exc) from None

    def close(self) -> None:
        try:
            super().close()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise self._failed(exc) from None


def open_output(path: str, *, what: str = "output file") -> IO[str]:
    """``path`` opened for writing in place (UTF-8 text); a failed write or close is an
    :class:`OutputWriteError` naming it (see the module's choices)."""
    try:
        raw = open(path, "wb")  # noqa: SIM115  (the caller closes the handle)
    except OSError as exc:
        raise OutputWriteError(path, exc, what=what) from None
    return _Writer(raw, path, what)


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

    A symbolic link is written through, as a plain ``open`` writes: the file it leads to
    is replaced and the link kept (renaming over the link replaced the link itself with a
    regular file). A path leading through a process's file descriptor (``/dev/stdout``
    -> ``/proc/self/fd/1``, ``/dev/fd/N``) is written in place whatever it is: behind a
    redirect it is a regular file that the shell holds open, and replacing it would
    split the command's output between two files (as root it replaced ``/dev/stdout``).

    The file written has the mode a plain ``open(path, "w")`` would leave: an existing
    target keeps its permission bits, a new one gets ``0666`` less the umask.
    """
    try:
        final, descriptor = _through_links(path)
    except OSError as exc:
        raise OutputWriteError(path, exc) from None
    target = Path(final)
    try:
        mode = os.stat(target).st_mode
    except OSError:
        mode = None
    if descriptor or (mode is not None and not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)):
        with open_output(path) as handle:
            yield handle
        return
    try:
        fd, tmp = tempfile.mkstemp(
            prefix=f".{target.name}.",
            suffix=".tmp",
            dir=target.parent if str(target.parent) else ".",
        )
    except OSError as exc:
        raise OutputWriteError(path, exc) from None
    try:
        # mkstemp makes the file 0600: give it the mode the target has (an existing
        # file keeps its own) or would get if opened plainly (0666 less the umask).
        os.fchmod(fd, stat.S_IMODE(mode) if mode is not None else 0o666 & ~_umask())
        with _Writer(os.fdopen(fd, "wb"), path, "output file") as handle:
            try:
                yield handle
            except keep_on:
                handle.close()
                _replace(tmp, final, path)
                raise
        _replace(tmp, final, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _replace(tmp: str, final: str, path: str) -> None:
    """Rename ``tmp`` over ``final`` (where ``path`` leads); a failure names ``path``."""
    try:
        os.replace(tmp, final)
    except OSError as exc:
        raise OutputWriteError(path, exc) from None


_DESCRIPTORS = ("/proc/", "/dev/fd/")
"""Where a path names a process's open file rather than a file of its own."""


_MAX_LINKS = 40
"""The kernel's own limit on a chain of symbolic links: a path reached through this many
links is opened, one more is ``ELOOP``."""


def _through_links(path: str) -> tuple[str, bool]:
    """Where ``path`` leads through its symbolic links (each resolved against the folder
    of the link), and whether it passes through a process's file descriptor.

    A chain of as many links as the kernel follows (40) is written through, as a plain
    ``open`` writes; a longer one (or a loop) is the :class:`OSError` a plain ``open``
    meets (``ELOOP``): the temporary file renamed over the last link reached replaced
    that link with the output, and the command went on as if written.
    """
    current = path
    for hops in range(_MAX_LINKS + 1):
        if os.path.abspath(current).startswith(_DESCRIPTORS):
            return current, True
        if not os.path.islink(current):
            return current, False
        if hops == _MAX_LINKS:  # the link after the last one the kernel follows
            break
        try:
            link = os.readlink(current)
        except OSError:
            return current, False
        current = os.path.join(os.path.dirname(current), link)
    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)


def probe_output(path: str, *, in_place: bool = False) -> None:
    """Raise the :class:`OSError` that writing ``path`` would meet at its start: the file
    the write creates is created and removed again, before any work is done.

    Looking at the folder's permission bits is not enough: ``/proc`` and ``/sys`` say
    writable and refuse to create a file, so the command would fail after all its work.
    The write's own first step is tried instead: for :func:`atomic_output`, its temporary
    file beside the target (made and removed at once; the target is not touched); for a
    file written in place (``in_place``, as :func:`open_output` writes, or a path through
    a process's file descriptor), the file itself, opened for appending when it exists
    (never truncated) and otherwise created and removed again, so a refused run leaves
    nothing behind. A path that exists and is neither a regular file nor a directory (a
    device, a named pipe) is not opened here: opening a pipe waits for a reader.
    """
    final, descriptor = _through_links(path)
    try:
        mode: int | None = os.stat(final).st_mode
    except OSError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        return
    if in_place or descriptor:
        if mode is None:
            try:
                fd = os.open(final, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:  # made meanwhile: it is there to be appended to
                pass
            else:
                os.close(fd)
                Path(final).unlink(missing_ok=True)
                return
        os.close(os.open(final, os.O_WRONLY | os.O_APPEND))
        return
    target = Path(final)
    fd, tmp = tempfile.mkstemp(
        prefix=f".{target.name}.", suffix=".tmp", dir=target.parent if str(target.parent) else "."
    )
    os.close(fd)
    Path(tmp).unlink(missing_ok=True)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through :func:`atomic_output`; an ``OSError`` leaves
    the previous file as it was."""
    with atomic_output(str(path)) as handle:
        handle.write(text)
