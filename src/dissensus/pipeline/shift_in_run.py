"""Shift checks while a run runs: under ``on_shift: escalate`` a large run is held from the
check that flags its cases on, not only after it has committed every one.

A run's own shift check (:func:`dissensus.pipeline.shift.check_run`) is made when the
run ends, so a run of a hundred thousand shifted cases would commit them all before its
flag could hold anything. :class:`InRunChecks` checks the run's judged cases as they
are journalled; the run loop (:func:`dissensus.pipeline.batch.execute_run`) asks it after
each block it commits, and when a check flags the file (or a flag of the file by
another run or a watch is found in the journal then), the loop goes on as a resume
would: it stops the executor, commits what it had finished, journals the hold as the
run's own (``acceptance.held``) and decides the remaining cases held.

Choices this module makes:

* **Only under ``acceptance.on_shift: escalate``**, for a file that keeps calibration
  vectors, in a run that is not held already, whatever door made the run: a run the
  caller waits for (a list of panels in one synchronous ``POST /v1/decide``, created by
  its first write) is checked as ``dissensus decide``'s is, so the same panels under the
  same policy get the same records (its first block creates it before any check is due). Under ``warn`` a check mid-run would only
  say earlier what the run's own check says at its end, and spend level for it.
* **When.** At the run's :data:`FIRST` -th judged case, then each time the count
  doubles (100, 200, 400, ...): a run of ``n`` judged cases makes about ``log2(n /
  100)`` checks, each a logistic fit on at most
  :data:`~dissensus.pipeline.shift.MAX_DEPLOYED` cases (well under a second), so their
  cost stays a small share of the run's. Check ``at`` looks at the run's first ``at``
  judged cases in journal order (the count a block took past ``at`` may be higher), so
  a check is the same whenever it is made: a run interrupted after the block that
  crossed ``at`` and before its check makes it on resume, with the same outcome.
* **The level.** A check mid-run is one of the runs' own checks
  (:data:`~dissensus.pipeline.shift.RUN_SHARE` of ``acceptance.shift_alpha``, spent
  over the file's life): its index is counted as the run's end check's is (under the
  file's lock), and the run's earlier checks mid-run count for its later ones and for
  its end check, so no two checks share an index and the lifetime guarantee holds.
  Each is journalled in the run as an ``acceptance.shift`` event keyed
  ``run/shift/at/<at>`` with ``within_run: <at>``; the run's end check stays
  ``run/shift``.
* **What a flag holds.** The cases committed before the hold keep their records (as a
  resume after a flag keeps them); the executor is stopped as an interrupt stops it:
  the cases in flight are cancelled, those decided but not committed are dropped, and
  all of them are decided again under the hold (their journalled steps replayed). The
  executor is then started again with the held specification on the lines after the
  last committed one, as a resume starts it (on the Ray engine, new workers; what the
  stopped ones had reserved is settled as an interrupt settles it).
* **Blocks end at the check.** The loop commits its block early when it holds the
  judged case that makes a check due (:attr:`InRunChecks.room` counts judged cases
  only), so the check, and a hold, come right after that case rather than up to a block
  later, and lines learned acceptance does not judge never make blocks smaller.
* The count a block adds is an upper bound (its records that carry learned acceptance's
  figures); a check reads the run's judged cases from the journal, and when fewer than
  ``at`` are there it waits for as many more records.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, cast

from dissensus.pipeline.records import CaseRecord
from dissensus.pipeline.shift import (
    RUN_SHARE,
    SHIFT_EVENT,
    ShiftOutcome,
    check_vectors,
    checks_shift,
    latest_flag,
    load_shift_check,
    run_check_index,
)
from dissensus.pipeline.spec import RunSpec
from dissensus.store import event_types as ev
from dissensus.store.journal import Journal

__all__ = ["FIRST", "InRunChecks", "within_key"]

FIRST = 100
"""The run's judged cases at its first check mid-run (then each doubling)."""


def within_key(at: int) -> str:
    """The journal key of a run's check mid-run at its ``at``-th judged case."""
    return f"run/shift/at/{at}"


class InRunChecks:
    """The checks of one run's judged cases while it runs (see the module docstring)."""

    def __init__(self, journal: Journal, run_id: str, acceptance: Mapping[str, Any], alpha: float):
        self._journal = journal
        self._run_id = run_id
        self._acceptance = acceptance
        self._alpha = alpha
        sha = acceptance.get("sha256")
        self._sha = None if sha is None else str(sha)
        self.at = FIRST
        """The judged count of the next check."""
        # A run not written yet (created by its first write) has journalled nothing: no
        # read for it, so a one-panel decision costs no more statements than before.
        new = journal.deferred(run_id) is not None
        while not new and journal.get(run_id, within_key(self.at)) is not None:
            self.at *= 2  # made before an interruption: the resume goes on from there
        self._counted = 0 if new else len(self._vectors(None))  # a resumed run's, read once
        """Judged cases of the run, at most (records with learned acceptance's figures)."""
        self._waiting = 0
        """Records that must come before the count may reach ``at``."""
        self.flag: ShiftOutcome | None = None
        """The flag that holds the file, once one was found."""
        self.flag_at = 0
        """The run's judged cases when the flag was found (its check's, for its own)."""

    @classmethod
    def of(cls, journal: Journal, run_id: str, spec: RunSpec) -> InRunChecks | None:
        """The checks of run ``run_id`` decided with ``spec``, ``None`` when it makes none."""
        acceptance = spec.acceptance
        settings = spec.policy.acceptance
        if acceptance is None or not checks_shift(acceptance) or spec.shift_hold is not None:
            return None
        if settings.on_shift != "escalate":
            return None
        return cls(journal, run_id, acceptance, settings.shift_alpha)

    def _vectors(self, limit: int | None) -> list[dict[str, float]]:
        vectors: list[dict[str, float]] = []
        for event in self._journal.events(self._run_id, type=ev.CASE_ACCEPTANCE):
            vector = event.payload.get("vector")
            if isinstance(vector, dict):
                vectors.append(dict(vector))
                if limit is not None and len(vectors) >= limit:
                    break
        return vectors

    @property
    def room(self) -> int:
        """Judged cases the loop may gather into its next block before a check could be
        due (the loop commits the block then, so that the hold comes right after the
        check; cases learned acceptance did not judge, and rejected lines, are free)."""
        return max(1, self._waiting, self.at - self._counted)

    def add(self, records: Iterable[CaseRecord]) -> bool:
        """Count a committed block's records; whether a check is due."""
        added = sum(1 for r in records if r.acceptance is not None)
        self._counted += added
        self._waiting = max(0, self._waiting - added)
        return self.flag is None and self._waiting == 0 and self._counted >= self.at

    def check(self) -> ShiftOutcome | None:
        """Make the checks due (journalled); the flag that holds the file now (this run's
        check, or one the journal has of it), ``None`` while none does."""
        while self.flag is None and self._counted >= self.at:
            vectors = self._vectors(self.at)
            if len(vectors) < self.at:
                self._counted = len(self._vectors(None))
                self._waiting = self.at - self._counted
                break
            outcome = self._check(vectors)
            if outcome is not None and outcome.get("shifted"):
                self.flag, self.flag_at = outcome, self.at
            self.at *= 2
        if self.flag is None:
            found = latest_flag(self._journal, self._sha)
            if found is not None:
                self.flag, self.flag_at = found, self._counted
        return self.flag

    def _check(self, vectors: list[dict[str, float]]) -> ShiftOutcome | None:
        journal, key = self._journal, within_key(self.at)
        load_shift_check()  # its libraries load (a second, the first time) before the lock
        with journal.transaction(self._run_id):
            made = journal.get(self._run_id, key)
            if made is not None:
                return cast(ShiftOutcome, dict(made.payload))
            journal.lock_name(f"shift-check:{self._sha}")
            index = run_check_index(journal, self._sha, self._run_id)
            outcome = check_vectors(
                self._acceptance, vectors, alpha=self._alpha, check=index, share=RUN_SHARE
            )
            if outcome is None:
                return None
            outcome["within_run"] = self.at
            journal.append(self._run_id, SHIFT_EVENT, dict(outcome), key=key)
        return outcome
