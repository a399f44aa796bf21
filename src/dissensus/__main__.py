"""The ``dissensus`` command (and ``python -m dissensus``): load the command line, run it.

The command line's own handlers (:func:`dissensus.cli.main`) turn Ctrl-C and SIGTERM
into one line and exit 130; they are only in place once the command line has loaded,
which takes a few tenths of a second. A Ctrl-C before that (a command typed in a hurry)
ends the command the same way, one line and exit 130, instead of the interpreter's
traceback of whatever module was being imported; so do SIGTERM and SIGHUP (which would
otherwise end the process without a word), where their action is still the default. ``import
dissensus`` loads nothing (:mod:`dissensus`), so nothing of the package runs before the
handlers here.

The signal's ``KeyboardInterrupt`` can land inside code whose exceptions the interpreter
reports and ignores (a weak reference's callback in the import machinery, a ``__del__``):
it would print ``Exception ignored in ...`` and a traceback before the line. While the
command line loads, such a report of an interrupt is dropped (the signal is noted all the
same, so the command stops); any other is printed as the interpreter would. So is an
error a library made of the interrupt while it loaded (an import, a class being made:
``ImportError``, ``RuntimeError`` with the interrupt as its cause): once a signal is
noted, the command stops with its one line whatever the import raised.

A ``runs resume ID`` stopped so names its resume command all the same, as it does once
it runs (the run it resumes exists): the command line is loaded for that line, with the
signals ignored meanwhile.

Once the command line has loaded, these handlers give way to its own; a signal in
between (the default action again: SIGTERM would end the process by that signal, a
Ctrl-C would be a traceback) is held (blocked) until the command line's handlers are in
place, which then stop the command with their one line and exit 130.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType

__all__ = ["main"]

EXIT_INTERRUPTED = 130  # dissensus.cli.common.EXIT_INTERRUPTED, not imported: see above


_interrupted: list[int] = []
"""The signals that arrived while the command line loaded (see :func:`main`)."""


_TERMINATING = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)
)
"""Signals whose default action ends the process silently: taken as Ctrl-C while loading."""


def _interrupt(signum: int, frame: FrameType | None) -> None:
    _interrupted.append(signum)
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _quiet_interrupts(unraisable: sys.UnraisableHookArgs) -> None:
    """``sys.unraisablehook`` while the command line loads: see the module's docstring."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt) and _interrupted:
        return
    sys.__unraisablehook__(unraisable)


def _stop() -> None:
    # Stopping: another signal while the interpreter shuts down must not end the process
    # by that signal instead of exit 130.
    for signum in (signal.SIGINT, *_TERMINATING):
        signal.signal(signum, signal.SIG_IGN)
    sys.stderr.write(_interrupted_line() + "\n")
    raise SystemExit(EXIT_INTERRUPTED)


def _interrupted_line() -> str:
    """``interrupted``; for ``runs resume ID`` its resume command, as the command says it
    once it runs (:func:`dissensus.cli.interrupted_line`): the run exists already, and
    the line is the one to copy. The command line is loaded for it (the signals that stop
    a command ignored meanwhile); anything that fails there says the plain line."""
    if sys.argv[1:3] != ["runs", "resume"]:
        return "interrupted"
    try:
        from dissensus.cli import interrupted_line

        return interrupted_line(sys.argv[1:])
    except BaseException:  # a command line that cannot load after the interrupt
        return "interrupted"


def main() -> None:
    """Entry point of the ``dissensus`` console script.

    A signal that arrives while the command line loads ends the command even when the
    ``KeyboardInterrupt`` it raises is swallowed on the way (a library's import guarded
    by ``except BaseException``): the handler notes it, and the command does not start.
    """
    default_term = [s for s in _TERMINATING if signal.getsignal(s) is signal.SIG_DFL]
    default_int = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    for signum in default_term:
        signal.signal(signum, _interrupt)
    if default_int:
        signal.signal(signal.SIGINT, _interrupt)
    ours = {*default_term, *([signal.SIGINT] if default_int else [])}
    hook = sys.unraisablehook
    sys.unraisablehook = _quiet_interrupts
    held: set[int] = set()
    try:
        try:
            from dissensus.cli import _entry
        finally:
            # Held from here until the command line's handlers are in place (module
            # docstring); one that arrived before is handled here, as during the import.
            held = _hold(ours)
    except BaseException as exc:
        # A signal's KeyboardInterrupt, or the error a library wrapped it in (an import
        # under way, a class being made): the signal was noted all the same.
        if _interrupted or isinstance(exc, KeyboardInterrupt):
            _stop()
        raise
    finally:
        sys.unraisablehook = hook
        # the command line installs its own (dissensus.cli)
        for signum in default_term:
            signal.signal(signum, signal.SIG_DFL)
        if default_int:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    if _interrupted:
        _stop()
    _entry(held=frozenset(held))


def _hold(signals: set[signal.Signals]) -> set[int]:
    """Block ``signals``; the ones this blocked (not blocked before), for the command
    line to unblock once its handlers are in place."""
    if not signals:
        return set()
    before = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    return {s for s in signals if s not in before}


if __name__ == "__main__":
    main()
