"""The service's shift watch: one-panel requests' cases checked together, off the request path.

A run checks its own judged cases for a shift when it ends (:mod:`dissensus.pipeline.shift`),
but only from :data:`~dissensus.acceptance.shift.MIN_CASES` judged cases up: the doors
that make one run per panel (a one-panel ``POST /v1/decide``, the chat door) never get
there, so under ``acceptance.on_shift: escalate`` their cases alone could never hold the
file. The watch checks them together, as ``GET /v1/acceptance`` reports them: the latest
:data:`~dissensus.serve.acceptance.WINDOW` cases judged with the server's acceptance file,
across runs, and journals a check that flags the file, so that every run started after
it, through any door of any process on this journal, carries the hold.

Choices where the design is silent:

* **When.** Every ``interval_s`` (default 30 s) the watch counts the journal's judged
  cases (one indexed count); when ``every`` (``dissensus serve --shift-every``, default
  100; 0: no watch) more were judged since its last count that led to a check, or at
  start, it reads the cases judged with its file and checks when their number reached a
  new multiple of ``every``. A check (one logistic fit and a rank test: well under a
  second) runs in a worker thread, one at a time, never inside a request nor the
  journal's write lock: a request never waits for it. Only a server whose acceptance
  file keeps calibration vectors watches.
* **Its level, over the file's life.** The watch spends half of
  ``acceptance.shift_alpha`` (the runs' own checks spend the other half;
  :mod:`dissensus.pipeline.shift`): its check ``i`` is tested at
  :func:`~dissensus.acceptance.shift.check_level` ``(alpha, i)``, ``(alpha / 2) * 6 /
  (pi^2 i^2)``, with ``i`` = the cases judged with the file in the journal ``// every``
  (:func:`~dissensus.pipeline.shift.watch_index`): read from the journal, so a restart
  does not start the sequence again, and a check whose index is the one this watch
  checked last is skipped. Check ``i`` looks at the cases judged up to the ``i *
  every``-th (the latest :data:`~dissensus.serve.acceptance.WINDOW` of them), seeded by
  ``i``: a restarted server (or a second server on the journal, with the same
  ``every``) that makes check ``i`` again on the same cases makes the same check, with
  the same outcome, so repeating it adds no chance of a false flag. The first check comes once ``every`` cases are judged with the file. The
  levels of the watch's checks sum to at most ``alpha / 2``, so a file whose cases stay
  exchangeable is flagged by the watch or by a run with probability at most ``alpha``
  over its life. Caveat: the journal lists cases in run order, so a run that is still
  judging when a later run has started can put a case among the first ``i * every``
  after check ``i`` was made; a later check of the same index then sees other cases and
  deals its halves anew (a new test at the same level). Servers on one journal with
  different ``every`` number different checks alike: each spends a full ``alpha / 2``.
* **What is journalled.** A check that flags the file is journalled as a run of its own
  (``via: shift-watch``, no input, no case): its ``run.started``, the ``acceptance.shift``
  event (the check, how many runs the cases came from and the newest of them) and its
  ``run.finished``, so ``runs list``, ``runs show`` and ``runs verify`` read it like any
  run, and :func:`~dissensus.pipeline.shift.latest_flag` finds it. A check that passes
  journals nothing (the runs list would grow by a run every hundred cases), and once a
  flag of the file is in the journal the watch journals no other (the hold it puts on
  the file lasts until a new file is calibrated). Under ``on_shift: warn`` the flag is
  reported the same way (and in the server's log) and holds nothing.
* **Failures** never reach the service: a check that fails is logged in one line and
  tried again at the next count. Several servers on one journal each watch; two may
  journal the same flag, which holds the file once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable

from dissensus.acceptance.shift import MIN_CASES
from dissensus.pipeline.batch import execute_run, new_run_id, start_run
from dissensus.pipeline.shift import (
    EVERY,
    SHIFT_EVENT,
    WATCH_SHARE,
    ShiftOutcome,
    check_vectors,
    checks_shift,
    latest_flag,
    shift_words,
    watch_index,
)
from dissensus.pipeline.spec import RunSpec
from dissensus.serve.acceptance import WINDOW, judged_vectors
from dissensus.store import event_types as ev
from dissensus.store.journal import Journal

__all__ = ["EVERY", "INTERVAL_S", "ShiftWatch", "journal_flag"]

log = logging.getLogger("dissensus.serve")

INTERVAL_S = 30.0
"""Seconds between two counts of the judged cases."""


def journal_flag(journal: Journal, spec: RunSpec, outcome: ShiftOutcome) -> str:
    """Journal a flagged check made across runs as a run of its own (see the module
    docstring); its run's id."""
    run_id = new_run_id()
    start_run(journal, None, spec, text="", run_id=run_id, via="shift-watch", lock=True)
    journal.append(run_id, SHIFT_EVENT, dict(outcome), key="run/shift")

    async def finish() -> None:
        async for _ in execute_run(journal, run_id):
            pass  # no input: the loop only ends the run

    asyncio.run(finish())
    return run_id


class ShiftWatch:
    """Checks the latest cases judged with the server's acceptance file, now and then."""

    def __init__(
        self,
        journal: Journal,
        spec: RunSpec,
        *,
        every: int = EVERY,
        interval_s: float = INTERVAL_S,
        open_journal: Callable[[], Journal] | None = None,
    ) -> None:
        self.journal = journal
        self.spec = spec
        self.every = every
        self.interval_s = interval_s
        self._open = open_journal
        self._seen: int | None = None
        """Judged cases in the journal at the last count that looked (``None``: none yet)."""
        self._check = 0
        """The index of this watch's last check (0: none yet)."""
        self._stopped = threading.Event()
        self.flagged_run: str | None = None
        """The run this watch journalled a flag in, if any."""

    @property
    def enabled(self) -> bool:
        """Whether this server watches: a positive ``every`` and an acceptance file that
        keeps calibration vectors."""
        return self.every > 0 and checks_shift(self.spec.acceptance)

    def due(self) -> bool:
        """Whether enough cases were judged since the last check (one count)."""
        judged = self.journal.count_of_type(ev.CASE_ACCEPTANCE)
        if self._seen is None:
            return judged > 0
        return judged - self._seen >= self.every

    def step(self) -> ShiftOutcome | None:
        """Check when due; journal a flag (see the module docstring). The check's outcome,
        ``None`` when none was made."""
        acceptance = self.spec.acceptance
        if acceptance is None or not self.due():
            return None
        seen = self.journal.count_of_type(ev.CASE_ACCEPTANCE)
        sha = acceptance.get("sha256")
        judged = judged_vectors(self.journal, None if sha is None else str(sha), window=None)
        index = watch_index(len(judged), self.every)
        judged = judged[: index * self.every][-WINDOW:]
        if index < 1 or index == self._check or len(judged) < MIN_CASES:
            self._seen = seen
            return None
        outcome = check_vectors(
            acceptance,
            [vector for vector, _ in judged],
            alpha=self.spec.policy.acceptance.shift_alpha,
            check=index,
            share=WATCH_SHARE,
        )
        if (
            outcome is not None
            and outcome["shifted"]
            and not self._stopped.is_set()
            # Once the file is flagged in this journal, no second flag.
            and latest_flag(self.journal, outcome.get("file_sha256")) is None
        ):
            outcome["across_runs"] = len({run for _, run in judged})
            outcome["newest_run"] = judged[-1][1]
            journal = self._open() if self._open is not None else self.journal
            try:
                self.flagged_run = journal_flag(journal, self.spec, outcome)
            finally:
                if journal is not self.journal:
                    journal.close()
            log.warning("shift watch (run %s): %s", self.flagged_run, shift_words(outcome))
        # Only a check that ran to its end counts: one that failed (the flag not journalled,
        # the journal busy) is made again at the next count, the same check of the same
        # cases, so it spends no more of the level.
        self._seen, self._check = seen, index
        return outcome

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
        try:
            self.step()
        except Exception as exc:
            if not self._stopped.is_set():
                log.warning("shift watch: the check failed (%s); trying again later", exc)

    async def stop(self, task: asyncio.Task[None]) -> None:
        """End the watch's ``task`` (a check under way finishes in its thread, journalling
        nothing more)."""
        self._stopped.set()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
