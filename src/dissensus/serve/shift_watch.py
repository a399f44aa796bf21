"""The service's shift watch: one-panel requests' cases checked together, off the request path.

The watch itself (when it checks, at what level, what it journals) is
:class:`dissensus.pipeline.shift_watch.ShiftWatch`, the one every one-panel door keeps;
the service steps it on a clock of its own rather than after each run, so that a
request never waits for a check.

Choices this module makes:

* **When.** Every ``interval_s`` (default 30 s) the watch counts the journal's judged
  cases (one indexed count) and checks when due: at start, and when the cases judged
  with the file may have reached a new multiple of ``every`` (``dissensus serve
  --shift-every``, default 100; 0: no watch) since its last look. A check (one logistic
  fit and a rank test: well under a second) runs in a worker thread, one at a time,
  never inside a request nor the journal's write lock: a request never waits for it.
  Only a server whose acceptance file keeps calibration vectors watches. The chat door,
  when served, is watched by this watch only (its own is off).
* **Its level and what is journalled**: as :mod:`dissensus.pipeline.shift_watch` says
  (half of ``acceptance.shift_alpha`` over the watch's checks, check ``i`` numbered from
  the journal so a restart goes on; a flag journalled as a run of its own, ``via:
  shift-watch``, and reported in the server's log).
* **Failures** never reach the service: a check that fails is logged in one line and
  tried again at the next count. Several servers on one journal each watch; two may
  journal the same flag, which holds the file once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from dissensus.pipeline.shift import EVERY
from dissensus.pipeline.shift_watch import ShiftWatch as _Watch
from dissensus.pipeline.spec import RunSpec
from dissensus.store.journal import Journal

__all__ = ["EVERY", "INTERVAL_S", "ShiftWatch"]

log = logging.getLogger("dissensus.serve")

INTERVAL_S = 30.0
"""Seconds between two counts of the judged cases."""


class ShiftWatch(_Watch):
    """Checks the latest cases judged with the server's acceptance file, now and then."""

    log = log

    def __init__(
        self,
        journal: Journal,
        spec: RunSpec,
        *,
        every: int = EVERY,
        interval_s: float = INTERVAL_S,
        open_journal: Callable[[], Journal] | None = None,
    ) -> None:
        super().__init__(spec, every=every, journal=journal, open_journal=open_journal)
        self.interval_s = interval_s

    async def run(self) -> None:
        """Count, and check when due, every ``interval_s`` until cancelled."""
        if not self.enabled:
            return
        try:
            while True:
                await asyncio.to_thread(self._step_logged)
                await asyncio.sleep(self.interval_s)
        finally:
            self._stopped.set()

    def _step_logged(self) -> None:
        """:meth:`step`, a failure logged (it must not end the service, and a check left
        running by a stopped watch has no one to raise to)."""
        self.step_quietly()

    async def stop(self, task: asyncio.Task[None]) -> None:
        """End the watch's ``task`` (a check under way finishes in its thread, journalling
        nothing more)."""
        self._stopped.set()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
