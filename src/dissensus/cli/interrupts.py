"""How ``dissensus decide`` and ``runs resume`` stop on SIGINT, SIGTERM or SIGHUP.

:func:`interruptible` turns the first of those signals into :class:`Interrupted`, raised
between two steps of the run's event loop (or, after :data:`GRACE_S`, where the main
thread is), once; the command then names the resume command (exit 130). The choices are
``decide``'s (:mod:`dissensus.cli.decide`).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, NoReturn

from dissensus.cli.common import STOP_SIGNALS

__all__ = ["GRACE_S", "Interrupted", "interruptible"]


class Interrupted(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP arrived while a run was being decided."""


GRACE_S = 0.2
"""How long an interrupt waits for the event loop to stop the run between two of its
steps before it is raised where the main thread is (inside a long step: an embedding)."""


@contextmanager
def interruptible() -> Iterator[Callable[[], None]]:
    """SIGINT, SIGTERM and SIGHUP raise :class:`Interrupted` while inside, until the run is
    complete (the function this yields is called once it is).

    While an event loop runs, the loop raises it between two steps (a callback of its
    own, scheduled by the handler): no task is stopped halfway through creating or
    awaiting another, so the loop's shutdown cancels every task cleanly and has nothing
    to report. A step that keeps the loop longer than :data:`GRACE_S` (an embedding)
    gets it where it is, from a timer (SIGALRM), so it stops at once; so does a signal
    outside the loop. It is raised once: a signal while the first is on its way (at
    most :data:`GRACE_S`) or while the run stops (the loop's shutdown cancelling its
    tasks, the journal committing the release of the run's lock) changes nothing, since
    raising it there again left tasks pending and exceptions unretrieved, which the
    interpreter reported at exit. Once the run is complete (its records all
    handed out), a signal is not raised: what is left is closing the event loop (and its
    threads), and the command ends as the completed run it is; a second signal still
    stops it at once. (A signal that arrived in the run's last step used to be raised
    by the loop's callback after the run's task had ended, which left the loop's own
    callback that stops it behind: the loop's shutdown then failed with a traceback
    when it had threads to wait for, as the Ray engine's.)
    """
    pending: list[str] = []
    over: list[bool] = []
    raised: list[bool] = []
    timer = hasattr(signal, "setitimer")

    def disarm() -> None:
        if timer:
            signal.setitimer(signal.ITIMER_REAL, 0)

    def now(name: str) -> NoReturn:
        pending.clear()
        disarm()
        raised.append(True)
        raise Interrupted(name)

    def between_steps() -> None:
        if pending and not over and not raised:
            now(pending[0])

    def handler(signum: int, frame: FrameType | None) -> None:
        if raised:  # the run is stopping already: once is all it takes
            return
        name = signal.Signals(signum).name
        if over:  # the run is complete: only a second signal stops what is left
            if pending:
                now(name)
            pending.append(name)
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            now(name)
        if not timer:
            now(name)
        if pending:  # the first is on its way: between two steps, or from the timer
            return
        pending.append(name)
        loop.call_soon_threadsafe(between_steps)
        signal.setitimer(signal.ITIMER_REAL, GRACE_S)

    def late(signum: int, frame: FrameType | None) -> None:
        if pending and not over and not raised:
            now(pending[0])

    previous: dict[int, Any] = {
        sig: signal.signal(sig, handler)
        for sig in STOP_SIGNALS
        # SIGHUP ignored (``nohup``) stays ignored
        if sig in (signal.SIGINT, signal.SIGTERM) or signal.getsignal(sig) is not signal.SIG_IGN
    }
    if timer:
        previous[signal.SIGALRM] = signal.signal(signal.SIGALRM, late)
    try:
        yield lambda: over.append(True)
    finally:
        disarm()
        pending.clear()
        for sig, old in previous.items():
            signal.signal(sig, old)
