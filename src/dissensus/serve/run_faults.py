"""After a journal fault: what the journal holds of a run, and the locks owed back.

A run whose journal was busy or unreachable is looked up once more (:func:`_holds`,
:func:`_held`) before the server says how it ended; a lock the server holds for a run it
does not decide is given back until the journal takes it (:class:`_OwedLocks`).
:class:`~dissensus.serve.runs.Runner` calls these with its journal and a run's state.

Choices this module makes:

* **A journal fault is checked against the journal.** A run whose journal was busy or
  unreachable may have failed at a commit that went through (its acknowledgement lost
  with the connection): the server then reads the journal once more (its own
  connection, which reconnects). A run it holds finished is ``finished``, with the
  records and rejects that commit journalled, and no error. **A run it holds started,
  unfinished, is ``incomplete``**, not ``failed``: it stopped part-way, resumable,
  and its error gives the command (``dissensus runs resume ID --journal JOURNAL``,
  "not by submitting it again"), answered ``503`` naming the run without
  ``Retry-After``: a client that sent its panels again would start a second run
  deciding them again. Its start is known journalled without a read when this process
  saw a commit of it acknowledged (an ``async`` or resumed run's start, a deferred
  run's record or reject handed over). A run of which nothing is journalled is
  ``failed`` (503 with ``Retry-After``: submitting it again is safe); when the
  journal cannot be read either and the server cannot tell, the run is ``failed``
  with an error saying it may be journalled all the same and naming ``GET
  /v1/runs/{id}``, which reads the journal's outcome once it is back: a run the
  journal holds finished never shows an error, one it holds unfinished reads
  ``incomplete`` with the resume command (:meth:`.runs.Runner.describe`), one it does
  not hold stays ``failed``. The run's status changes with its final event only, after
  these looks at the journal: a follower woken meanwhile waits for that event.
  ``POST /v1/decide?async=true`` is answered once ``run.started``
  is committed, so its check is of that commit: a run the journal holds is decided from
  its start and answered ``202`` as usual; one it does not hold is the journal's ``503``
  (nothing journalled); when the journal cannot be read either, the run is
  ``incomplete`` with an error naming ``GET /v1/runs/{id}`` (``404`` until the journal
  holds it: it was not journalled; else resumable with ``dissensus runs resume``, the
  lock its start took given back), answered ``503`` with ``Retry-After`` and
  ``run_id``.
* **A lock this server holds for a run it does not decide is given back.** The lock a
  run's start took is given back by the server when it does not decide the run: its
  start's outcome could not be told, or the run stopped on a journal fault (a release
  on the run loop that failed with the journal, or a resumed run whose run loop could
  not open a connection). When the journal does not take the release either (the
  outage goes on), the run is owed: the server tries again every
  :data:`GIVE_BACK_EVERY` seconds and whenever the run is asked for (``GET
  /v1/runs/{id}``, its events), until the journal takes it, so the lock never outlives
  the outage by more than that. Until then the run reads ``running`` (as its lock
  says: ``dissensus runs resume`` would be refused) with an error saying the server
  still holds its lock and the run cannot be resumed yet, never ``resume with``; then
  ``incomplete`` (a run stopped part-way: its final event and a waiting request's
  ``503`` say to resume it once ``GET /v1/runs/{id}`` reads so). A server stopping
  tries once more.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Literal

from dissensus.pipeline import CaseRecord
from dissensus.pipeline.review import final_records
from dissensus.serve import journal_errors
from dissensus.serve.run_models import RunReject, RunState, _rejects
from dissensus.store.journal import Journal
from dissensus.store.targets import journal_option

log = logging.getLogger("dissensus.serve")

GIVE_BACK_EVERY = 1.0
"""Seconds between attempts to give back a run's lock the journal did not take back (an
outage): see :meth:`_OwedLocks.give_back`."""


def _holds(journal: Journal, run_id: str, key: str) -> bool | None:
    """After a journal fault: whether the journal holds the run's event ``key``
    (``run/started``: the run exists; ``run/finished``: it ended), ``None`` when it
    cannot tell (one read with the server's own connection, which reconnects when it
    was lost)."""
    try:
        return journal.get(run_id, key) is not None
    except Exception:  # still unreachable: the caller is told the run may be there
        return None


def _held(
    journal: Journal, run_id: str
) -> tuple[list[CaseRecord], list[RunReject]] | Literal[False] | None:
    """After a journal fault: the run's records and rejects when the journal holds it
    finished (its last commit went through), ``False`` when it does not, ``None``
    when it cannot tell (one read with the server's own connection, which
    reconnects when it was lost)."""
    held = _holds(journal, run_id, "run/finished")
    if held is None:
        return None
    if not held:
        return False
    try:
        return final_records(journal, run_id), _rejects(journal, run_id)
    except Exception:  # unreachable again: the caller is told the run may be there
        return None


def _take(state: RunState, records: list[CaseRecord], rejects: list[RunReject]) -> None:
    """The records and rejects of a finished run that its state (and its followers)
    did not get, since the commit that journalled them was never acknowledged."""
    for reject in rejects[len(state.rejects) :]:
        state.rejects.append(reject)
        state.push("reject", reject)
    for record in records[len(state.records) :]:
        state.records.append(record)
        state.done += 1
        state.push("record", record)


def _stopped_error(journal: Journal, run_id: str, public: str, *, owed: bool) -> str:
    """The error of a run a journal fault stopped part-way, journalled: resumed with
    the CLI (the journal's place masked), not submitted again; while this server
    holds its lock (``owed``), once ``GET /v1/runs/{id}`` reads it ``incomplete``."""
    when = (
        f" once GET /v1/runs/{run_id} reads incomplete (this server gives its lock on "
        "the run back when the journal takes it)"
        if owed
        else ""
    )
    return journal_errors.scrub(
        f"{public}: the run stopped part-way and is journalled; resume it with: "
        f"dissensus runs resume {run_id}{journal_option(journal.path)}{when}, "
        "not by submitting it again (another run would decide its panels again)",
        [str(journal.path)],
    )


def _start_acknowledged(state: RunState) -> bool:
    """Whether this process saw a commit of the run acknowledged (its start, a block of
    cases), so the journal holds it: a run started before it was decided (``async``, a
    resumed one), or a deferred run that handed over a record or a reject."""
    return not state.deferred or bool(state.records or state.rejects)


def _owed_error(run_id: str) -> str:
    """The error of a run this server holds the lock of without deciding it."""
    return (
        "the run is journalled and not decided; this server holds its lock on the run until "
        "the journal takes it back (it was unreachable or busy), and until then the run "
        f"cannot be resumed: poll GET /v1/runs/{run_id}"
    )


class _OwedLocks:
    """Runs this server holds the lock of without deciding them: the journal did not take
    the lock back yet (:meth:`give_back`)."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.runs: set[str] = set()
        self._giving_back: asyncio.Task[None] | None = None

    def __contains__(self, run_id: object) -> bool:
        return run_id in self.runs

    def _release(self, run_id: str) -> bool:
        """One attempt to give back this server's lock on ``run_id`` (with the server's
        own connection, which reconnects); whether the journal took it."""
        try:
            self.journal.release_run_lock(run_id)
        except Exception:  # unreachable or busy still: tried again later
            return False
        return True

    async def give_back(self, run_id: str) -> None:
        """Give back the lock this server took for a run it does not decide (its start's
        outcome was unknown, or it stopped on a journal fault). When the journal does not
        take it, the run is owed: it reads ``running`` with an error saying so (never
        ``resume with``: the lock would refuse that), and every :data:`GIVE_BACK_EVERY`
        seconds, and whenever the run is asked for (:meth:`settle`), the lock is given
        back again until the journal takes it."""
        if await asyncio.to_thread(self._release, run_id):
            self.runs.discard(run_id)
            return
        if run_id not in self.runs:
            log.warning("run %s: its lock is given back once the journal takes it", run_id)
            self.runs.add(run_id)
        if self._giving_back is None or self._giving_back.done():
            self._giving_back = asyncio.create_task(self._keep_giving_back())

    async def _keep_giving_back(self) -> None:
        """Until the journal took back every owed lock (one attempt per round while it
        refuses them: the first refusal ends the round)."""
        while self.runs:
            await asyncio.sleep(GIVE_BACK_EVERY)
            for run_id in list(self.runs):
                if run_id not in self.runs:  # given back by settle() meanwhile
                    continue
                if not await asyncio.to_thread(self._release, run_id):
                    break
                self.runs.discard(run_id)
                log.info("run %s: its lock given back", run_id)

    async def settle(self, run_id: str) -> None:
        """Before a run is described: give back its lock if it is owed (one attempt, off
        the loop), so a run whose journal is back reads resumable at once."""
        if run_id in self.runs:
            await self.give_back(run_id)
            if run_id not in self.runs:
                log.info("run %s: its lock given back", run_id)

    async def last(self) -> None:
        """Stopping: one last attempt for each owed lock (a process that lives on, the
        server embedded, would hold them; once it exits they hold nothing)."""
        giving, self._giving_back = self._giving_back, None
        if giving is not None:
            giving.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await giving
        for run_id in list(self.runs):
            if not await asyncio.to_thread(self._release, run_id):
                break
            self.runs.discard(run_id)
