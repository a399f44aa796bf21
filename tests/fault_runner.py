"""Run the CLI with a journal hook that sends the process a signal after its N-th event.

``python tests/fault_runner.py N SIGNAL ARGV...``: the crash tests (SIGKILL) and the
interrupt tests (SIGINT, SIGTERM) stop a run at a chosen journalled event with it. The
hook lives here, in the test suite; the CLI only offers ``JOURNAL_HOOKS``.

:func:`forked` runs the CLI's ``main`` in a forked child of the test process instead:
the child inherits every module the parent loaded, so a test that first runs a command
in-process (which loads what the command needs) pays no import in its children.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys

from dissensus.cli import main, pipeline
from dissensus.store.journal import Event


def install(after: int, sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to this process right after its ``after``-th journalled event."""
    seen = [0]

    def hook(_: Event) -> None:
        seen[0] += 1
        if seen[0] == after:
            os.kill(os.getpid(), sig)

    pipeline.JOURNAL_HOOKS.append(hook)


def _child(argv: list[str], kill_after: int | None, sig: int) -> None:
    if kill_after is not None:
        install(kill_after, sig)
    os._exit(main(argv))


def forked(argv: list[str], kill_after: int | None = None, sig: int = signal.SIGKILL) -> int | None:
    """``main(argv)`` in a forked child, sent ``sig`` after event ``kill_after``; its exit code."""
    proc = multiprocessing.get_context("fork").Process(target=_child, args=(argv, kill_after, sig))
    proc.start()
    proc.join(timeout=300)
    return proc.exitcode


if __name__ == "__main__":
    count, name, *argv = sys.argv[1:]
    install(int(count), getattr(signal, name))
    raise SystemExit(main(argv))
