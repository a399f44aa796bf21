"""Run the CLI with a journal hook that sends the process a signal after its N-th event.

``python tests/fault_runner.py N SIGNAL ARGV...``: the crash tests (SIGKILL) and the
interrupt tests (SIGINT, SIGTERM) stop a run at a chosen journalled event with it. The
hook lives here, in the test suite; the CLI only offers ``JOURNAL_HOOKS``.

:func:`forked` runs the CLI's ``main`` in a forked child of the test process instead:
the child inherits every module the parent loaded, so a test that first runs a command
in-process (which loads what the command needs) pays no import in its children. Given
file descriptors for its standard output and error, the child runs as ``python -m
dissensus`` would: fresh standard streams on them, the real entry point, and the
interpreter's last flush of both streams at exit (a failed one is reported and exits 120,
as CPython does). ``unbuffered=True`` gives the standard output ``python -u`` (or
``$PYTHONUNBUFFERED``) opens: every write goes straight to the descriptor.
"""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import signal
import sys
from typing import Any

from dissensus.cli import _entry, journals, main
from dissensus.store.journal import Event


def install(after: int, sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to this process right after its ``after``-th journalled event."""
    seen = [0]

    def hook(_: Event) -> None:
        seen[0] += 1
        if seen[0] == after:
            os.kill(os.getpid(), sig)

    journals.JOURNAL_HOOKS.append(hook)


def install_in_batch(nth: int, note: str) -> None:
    """Send this process SIGKILL inside its ``nth`` batch of two events or more: after the
    batch's rows were written, before its transaction commits. The batch's first sequence
    number and size are written to ``note`` first (JSON)."""
    from dissensus.store.sqlite import SQLiteBackend

    original = SQLiteBackend.write_events
    seen = [0]

    def write(self: SQLiteBackend, rows: Any) -> None:
        original(self, rows)
        if len(rows) >= 2:
            seen[0] += 1
            if seen[0] == nth:
                with open(note, "w", encoding="utf-8") as handle:
                    json.dump([rows[0][1], len(rows)], handle)
                os.kill(os.getpid(), signal.SIGKILL)

    SQLiteBackend.write_events = write  # type: ignore[method-assign]


Streams = tuple[int, int, tuple[int, ...], bool]


def _raw(fd: int) -> io.BufferedWriter:
    return io.BufferedWriter(io.FileIO(fd, "w", closefd=False))


def _as_a_process(
    argv: list[str], stdout: int, stderr: int, close: tuple[int, ...], unbuffered: bool
) -> int:
    """``python -m dissensus ARGV`` with standard output and error on the given descriptors."""
    for fd in close:
        os.close(fd)
    os.dup2(stdout, 1)
    os.dup2(stderr, 2)
    # What the interpreter opens when neither is a terminal (with -u: no buffer at all).
    buffer: Any = io.FileIO(1, "w", closefd=False) if unbuffered else _raw(1)
    out = io.TextIOWrapper(buffer, encoding="utf-8", write_through=unbuffered)
    err = io.TextIOWrapper(
        _raw(2), encoding="utf-8", errors="backslashreplace", line_buffering=True
    )
    sys.stdout = sys.__stdout__ = out  # type: ignore[misc]
    sys.stderr = sys.__stderr__ = err  # type: ignore[misc]
    sys.argv = ["dissensus", *argv]
    try:
        _entry()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception as exc:  # reported as the interpreter reports a failed last flush
            os.write(2, f"Exception ignored in: {stream!r}\n{type(exc).__name__}: {exc}\n".encode())
            code = 120
    return code


def _child(
    argv: list[str],
    kill_after: int | None,
    sig: int,
    streams: Streams | None,
    in_batch: tuple[int, str] | None = None,
) -> None:
    # Ctrl-C as a fresh interpreter has it, whatever an earlier test of this worker left.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if kill_after is not None:
        install(kill_after, sig)
    if in_batch is not None:
        install_in_batch(*in_batch)
    os._exit(main(argv) if streams is None else _as_a_process(argv, *streams))


def forked(
    argv: list[str],
    kill_after: int | None = None,
    sig: int = signal.SIGKILL,
    *,
    stdout: int | None = None,
    stderr: int | None = None,
    close: tuple[int, ...] = (),
    in_batch: tuple[int, str] | None = None,
    unbuffered: bool = False,
) -> int | None:
    """``main(argv)`` in a forked child, sent ``sig`` after event ``kill_after``; its exit code.

    With ``stdout`` and ``stderr`` (file descriptors) the child runs as a ``dissensus``
    process writing to them (see the module docstring); it first closes the descriptors
    in ``close`` (say, the read end of its output pipe, so that only the reader holds it).
    ``in_batch`` = ``(n, note)`` kills the child inside its ``n``-th batch instead
    (:func:`install_in_batch`). ``unbuffered`` gives the child an unbuffered standard
    output, as ``python -u`` does.
    """
    streams = None if stdout is None or stderr is None else (stdout, stderr, close, unbuffered)
    proc = multiprocessing.get_context("fork").Process(
        target=_child, args=(argv, kill_after, sig, streams, in_batch)
    )
    proc.start()
    proc.join(timeout=300)
    return proc.exitcode


if __name__ == "__main__":
    count, name, *argv = sys.argv[1:]
    install(int(count), getattr(signal, name))
    raise SystemExit(main(argv))
