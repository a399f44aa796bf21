"""The ``dissensus`` command (and ``python -m dissensus``): load the command line, run it.

The command line's own handlers (:func:`dissensus.cli.main`) turn Ctrl-C and SIGTERM
into one line and exit 130; they are only in place once the command line has loaded,
which takes a few tenths of a second. A Ctrl-C before that (a command typed in a hurry)
ends the command the same way, one line and exit 130, instead of the interpreter's
traceback of whatever module was being imported; so does SIGTERM (which would otherwise
end the process without a word), where its action is still the default. ``import
dissensus`` loads nothing (:mod:`dissensus`), so nothing of the package runs before the
handlers here.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType

__all__ = ["main"]

EXIT_INTERRUPTED = 130  # dissensus.cli.common.EXIT_INTERRUPTED, not imported: see above


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt("SIGTERM")


def main() -> None:
    """Entry point of the ``dissensus`` console script."""
    default_term = signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    if default_term:
        signal.signal(signal.SIGTERM, _terminate)
    try:
        from dissensus.cli import _entry
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        raise SystemExit(EXIT_INTERRUPTED) from None
    finally:
        if default_term:  # the command line installs its own (dissensus.cli)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _entry()


if __name__ == "__main__":
    main()
