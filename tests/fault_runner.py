"""Run the CLI with a journal hook that sends the process a signal after its N-th event.

``python tests/fault_runner.py N SIGNAL ARGV...``: the crash tests (SIGKILL) and the
interrupt tests (SIGINT, SIGTERM) stop a run at a chosen journalled event with it. The
hook lives here, in the test suite; the CLI only offers ``JOURNAL_HOOKS``.
"""

from __future__ import annotations

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


if __name__ == "__main__":
    count, name, *argv = sys.argv[1:]
    install(int(count), getattr(signal, name))
    raise SystemExit(main(argv))
