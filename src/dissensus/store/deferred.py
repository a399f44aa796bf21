"""Runs created with their first write: a run of one case commits once.

:meth:`~dissensus.store.journal.Journal.defer_run` registers a run (its header, its
``run.started`` event, the process that executes it) without writing anything; the
journal creates it inside the transaction of the run's first write, so a run whose
case and end are one batch (a single-panel request) is created, decided and finished
in one commit instead of two.

Choices this module makes:

* **Until its first write the run is not in the journal**: reads of it find nothing
  and ask the back end nothing (its events, its cases, its header), and a crash leaves
  no trace of it, as a crash before ``create_run`` would.
* **Created by a write inside the run** (an append before a model call, so that a paid
  call is journalled after the steps that led to it), it is created with its execution
  lock for the registered process, exactly as ``create_run(..., lock_pid=...)``: from
  then on it is an ordinary run that ``runs resume`` can finish if the process dies.
  Created by the run's last transaction (:meth:`~dissensus.store.journal.Journal.create_deferred`
  with ``lock=False``), it takes no lock: it is finished in the same commit.
* The creation is ``exclusive``: an id another writer took meanwhile is
  :class:`~dissensus.store.errors.RunExists` at the first write, nothing written.
* A run given up before its first write (its lock's release) leaves nothing, and the
  release of a run whose creation was refused releases nothing: the lock of the run
  that holds the id is not its own.
* **What the caller hands on** (:meth:`~dissensus.store.journal.Journal.handed`): an
  object the registering caller gives the run's executor in this process (the run loop
  gets the specification its ``run.started`` reads as, already built), kept in memory
  with the registration and gone with it; the journal never writes or reads it.
* Registering an id this journal object is starting already is refused
  (:class:`~dissensus.store.errors.RunExists`): two callers never share one run.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from dissensus.store.events import NewEvent

__all__ = ["DeferredRun", "DeferredRuns"]


@dataclass(frozen=True)
class DeferredRun:
    """A run registered to be created with its first write."""

    kind: str
    meta: dict[str, Any]  # JSON passing through: the run's header
    first: NewEvent
    lock_pid: int | None
    handed: object = None
    """What the registering caller hands whoever executes the run in this process (the
    run loop: the specification its ``run.started`` reads as); never read here."""


class DeferredRuns:
    """The runs of one journal object waiting for their first write (thread-safe)."""

    def __init__(self) -> None:
        self._runs: dict[str, DeferredRun] = {}
        self._refused: set[str] = set()
        self._lock = threading.Lock()

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._runs

    def add(self, run_id: str, run: DeferredRun) -> bool:
        """Register ``run_id``; ``False`` (nothing changed) when it is registered already."""
        with self._lock:
            if run_id in self._runs:
                return False
            self._runs[run_id] = run
            return True

    def refuse(self, run_id: str) -> None:
        """``run_id``'s creation was refused (the id is taken): the run that holds it is
        not this registration's, so its release must not release that run's lock."""
        with self._lock:
            self._refused.add(run_id)

    def settle(self, run_id: str) -> bool:
        """Forget ``run_id``; whether it was registered or refused (then there is no lock
        of its own to release)."""
        with self._lock:
            found = self._runs.pop(run_id, None) is not None
            if run_id in self._refused:
                self._refused.discard(run_id)
                found = True
            return found

    def get(self, run_id: str) -> DeferredRun | None:
        return self._runs.get(run_id)

    def take(self, run_id: str) -> DeferredRun | None:
        """The registered run, no longer registered (it is being created now)."""
        with self._lock:
            return self._runs.pop(run_id, None)
